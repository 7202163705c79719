#include "brisk/runtime/fault_inject.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <memory>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace brisk {
namespace {

constexpr const char* kExpected =
    "expected kill:RANK:MIN-MAX[:SEED] (milliseconds), kill-at-task:RANK:MIN-MAX[:SEED] (data tasks), "
    "kill-in-checkpoint:RANK:MIN-MAX[:SEED] (checkpoints), kill-after-checkpoint-report:RANK:MIN-MAX[:SEED], "
    "stall-in-checkpoint:RANK:MIN-MAX[:SEED], kill-in-fill:RANK:MIN-MAX[:SEED] (copies described first) or "
    "checkpoint-stall";

template <class T>
std::optional<T> number(std::string_view s) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

// Says so, then SIGKILLs this process. The pause lets the launcher forward the line
// first: one CI run lost a dying rank's last line.
[[noreturn]] void die(int rank, const std::string& when) {
  std::fprintf(stderr, "brisk: rank %d: BRISK_FAULT_INJECT kills this rank now, %s\n", rank, when.c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  raise(SIGKILL);
  std::abort();  // not reached
}

}  // namespace

int KillPlan::delay_ms() const {
  std::mt19937_64 gen(seed);
  return std::uniform_int_distribution<int>(min_ms, max_ms)(gen);
}

StatusOr<std::optional<KillPlan>> parse_fault_inject(std::string_view value) {
  if (value.empty() || value == "checkpoint-stall") return std::optional<KillPlan>{};
  const auto bad = [&](std::string why) {
    return invalid_argument(fmt::format("BRISK_FAULT_INJECT='{}': {} ({})", value, why, kExpected));
  };
  const auto parts = split(value, ':');
  KillPlan plan;
  if (parts[0] == "kill") {
    plan.unit = KillPlan::Unit::kMilliseconds;
  } else if (parts[0] == "kill-at-task") {
    plan.unit = KillPlan::Unit::kDataTasks;
  } else if (parts[0] == "kill-in-checkpoint") {
    plan.unit = KillPlan::Unit::kCheckpointParts;
  } else if (parts[0] == "kill-after-checkpoint-report") {
    plan.unit = KillPlan::Unit::kCheckpointReports;
  } else if (parts[0] == "kill-in-fill") {
    plan.unit = KillPlan::Unit::kFills;
  } else if (parts[0] == "stall-in-checkpoint") {
    plan.unit = KillPlan::Unit::kCheckpointParts;
    plan.stall = true;
  } else {
    return bad(fmt::format("unknown injection '{}'", parts[0]));
  }
  if (parts.size() < 3 || parts.size() > 4) return bad("wrong number of fields");
  const auto rank = number<int>(parts[1]);
  if (!rank || *rank < 0) return bad(fmt::format("'{}' is not a rank", parts[1]));
  plan.rank = *rank;
  const auto window = split(parts[2], '-');
  const auto lo = window.size() == 2 ? number<int>(window[0]) : std::nullopt;
  const auto hi = window.size() == 2 ? number<int>(window[1]) : std::nullopt;
  if (!lo || !hi || *lo < 0 || *hi < *lo) return bad(fmt::format("'{}' is not a window MIN-MAX with MIN <= MAX", parts[2]));
  plan.min_ms = *lo;
  plan.max_ms = *hi;
  if (parts.size() == 4) {
    const auto seed = number<std::uint64_t>(parts[3]);
    if (!seed) return bad(fmt::format("'{}' is not a seed", parts[3]));
    plan.seed = *seed;
  }
  return std::optional<KillPlan>{plan};
}

StatusOr<std::vector<KillPlan>> parse_fault_injects(std::string_view value) {
  std::vector<KillPlan> plans;
  for (std::string_view one : split(value, ',')) {
    auto plan = parse_fault_inject(one);
    if (!plan.ok()) return plan.status();
    if (*plan) plans.push_back(**plan);
  }
  return plans;
}

std::function<void()> arm_fault_injection(const KillPlan& plan, int rank) {
  if (rank != plan.rank) return {};
  const int point = plan.delay_ms();
  if (plan.unit != KillPlan::Unit::kMilliseconds) {
    auto left = std::make_shared<std::atomic<int>>(std::max(1, point));
    const std::string when =
        plan.unit == KillPlan::Unit::kDataTasks ? fmt::format("at its data task {}", point)
        : plan.unit == KillPlan::Unit::kFills
            ? fmt::format("in copy {} it makes into its arena after describing it, its first part published", point)
        : plan.unit == KillPlan::Unit::kCheckpointReports
            ? fmt::format("after it reported checkpoint part {} it wrote", point)
            : fmt::format("in checkpoint part {} it writes, its shard (if it had partitions) written and not yet reported",
                          point);
    if (plan.stall) {
      return [left, point, rank] {
        if (left->fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        std::fprintf(stderr, "brisk: rank %d: BRISK_FAULT_INJECT stalls this rank for good, in checkpoint part %d it writes\n",
                     rank, point);
        std::fflush(stderr);
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      };
    }
    return [left, when, rank] {
      if (left->fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      die(rank, when);
    };
  }
  std::thread([point, rank] {
    std::this_thread::sleep_for(std::chrono::milliseconds(point));
    die(rank, fmt::format("{} ms after the start", point));
  }).detach();
  return {};
}

std::function<void()> arm_fault_injections(const std::vector<KillPlan>& plans, KillPlan::Unit unit, int rank) {
  std::vector<std::function<void()>> hooks;
  for (const KillPlan& p : plans) {
    if (p.unit != unit) continue;
    if (auto hook = arm_fault_injection(p, rank)) hooks.push_back(std::move(hook));
  }
  if (hooks.empty()) return {};
  return [hooks = std::move(hooks)] {
    for (const auto& h : hooks) h();
  };
}

}  // namespace brisk
