// brisk/core/ids.hpp — strong id types: TaskId, ObjectId, FunctionId, Rank, WorkerId.
//
// Task ids are deterministic: a child's id is derived from its parent's id and the
// parent's submission counter, so re-executing a task reproduces the ids of
// everything it submits (lineage replay relies on it). Object ids derive from the
// producing task's id (its return value) or from the putter's id and counter.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace brisk {

namespace detail {
// A 64-bit finaliser with full avalanche (splitmix64).
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// FNV-1a, 64 bit: stable across compilers, platforms and runs.
constexpr std::uint64_t fnv1a64(const char* s, std::size_t n) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(s[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}
}  // namespace detail

// A 128-bit id. Value type; zero is "nil".
struct UniqueId {
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;

  constexpr bool nil() const noexcept { return hi == 0 && lo == 0; }
  friend constexpr bool operator==(const UniqueId&, const UniqueId&) = default;
  friend constexpr auto operator<=>(const UniqueId&, const UniqueId&) = default;
  // 32 hex digits.
  std::string hex() const;
};

// TaskId: identifies one task (and its re-executions).
struct TaskId : UniqueId {
  // The id of the driver's root context for a job.
  static constexpr TaskId root(std::uint64_t job) noexcept {
    return TaskId{{detail::mix64(job ^ 0x6272697368ULL), detail::mix64(job + 1)}};
  }
  // The id of the counter-th task submitted by this task.
  constexpr TaskId child(std::uint64_t counter) const noexcept {
    return TaskId{{detail::mix64(hi ^ detail::mix64(counter)), detail::mix64(lo + counter * 0x9e3779b97f4a7c15ULL + 1)}};
  }
};

// ObjectId: identifies one immutable object.
struct ObjectId : UniqueId {
  // The return value of `task`.
  static constexpr ObjectId returned_by(TaskId task) noexcept { return ObjectId{{task.hi, task.lo}}; }
  // The counter-th object put by `task` (a tag bit keeps puts apart from returns).
  static constexpr ObjectId put_by(TaskId task, std::uint64_t counter) noexcept {
    return ObjectId{{detail::mix64(task.hi ^ 0x707574ULL ^ detail::mix64(counter)), detail::mix64(task.lo ^ counter) | 1}};
  }
};

// FunctionId: FNV-1a of the registered name; identical on every rank that
// registers the same name, whatever the function's address.
struct FunctionId {
  std::uint64_t value = 0;
  static constexpr FunctionId from_name(const char* s, std::size_t n) noexcept {
    return FunctionId{detail::fnv1a64(s, n)};
  }
  friend constexpr bool operator==(FunctionId, FunctionId) = default;
  friend constexpr auto operator<=>(FunctionId, FunctionId) = default;
};

// Rank: an MPI process of the job.
struct Rank {
  int value = 0;
  friend constexpr bool operator==(Rank, Rank) = default;
  friend constexpr auto operator<=>(Rank, Rank) = default;
};

// WorkerId: a thread that runs tasks on one rank.
struct WorkerId {
  int value = -1;
  friend constexpr bool operator==(WorkerId, WorkerId) = default;
  friend constexpr auto operator<=>(WorkerId, WorkerId) = default;
};

}  // namespace brisk

template <>
struct std::hash<brisk::UniqueId> {
  std::size_t operator()(const brisk::UniqueId& id) const noexcept { return id.lo ^ (id.hi * 31); }
};
template <>
struct std::hash<brisk::TaskId> : std::hash<brisk::UniqueId> {};
template <>
struct std::hash<brisk::ObjectId> : std::hash<brisk::UniqueId> {};
template <>
struct std::hash<brisk::FunctionId> {
  std::size_t operator()(brisk::FunctionId id) const noexcept { return id.value; }
};
