// brisk/scheduler/work_stealing_deque.hpp — a Chase-Lev work-stealing deque.
//
// The owner thread pushes and pops at the bottom (LIFO, cache-warm); any thread
// steals from the top (FIFO). Lock-free; grows without bound (old buffers are kept
// until destruction, so a thief never reads freed memory). Memory orderings follow
// Lê, Pop, Cohen and Zappa Nardelli, "Correct and Efficient Work-Stealing for Weak
// Memory Models" (PPoPP 2013).
//
// Thread safety: push/pop from the owner only; steal/empty/size from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

namespace brisk {

template <class T>
class WorkStealingDeque {
  static_assert(std::is_pointer_v<T>, "WorkStealingDeque holds pointers");

 public:
  explicit WorkStealingDeque(std::int64_t capacity = 256)
      : array_(new Array(round_up(capacity))) {
    garbage_.emplace_back(array_.load(std::memory_order_relaxed));
  }
  WorkStealingDeque(const WorkStealingDeque&) = delete;
  WorkStealingDeque& operator=(const WorkStealingDeque&) = delete;

  void push(T item) {
    std::int64_t b = bottom_.load(std::memory_order_relaxed);
    std::int64_t t = top_.load(std::memory_order_acquire);
    Array* a = array_.load(std::memory_order_relaxed);
    if (b - t > a->capacity - 1) a = grow(a, b, t);
    a->put(b, item);
    std::atomic_thread_fence(std::memory_order_release);
    // Release on the store too (free on x86): ThreadSanitizer ignores fences, and
    // without it reports every task handed to a thief as a data race.
    bottom_.store(b + 1, std::memory_order_release);
  }

  // nullptr when empty (or when a thief took the last item).
  T pop() {
    std::int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
    Array* a = array_.load(std::memory_order_relaxed);
    bottom_.store(b, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::int64_t t = top_.load(std::memory_order_relaxed);
    if (t > b) {
      bottom_.store(b + 1, std::memory_order_relaxed);
      return nullptr;
    }
    T item = a->get(b);
    if (t == b) {
      if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) {
        item = nullptr;
      }
      bottom_.store(b + 1, std::memory_order_relaxed);
    }
    return item;
  }

  // nullptr when empty or when it lost a race (callers may retry elsewhere).
  T steal() {
    std::int64_t t = top_.load(std::memory_order_acquire);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::int64_t b = bottom_.load(std::memory_order_acquire);
    if (t >= b) return nullptr;
    Array* a = array_.load(std::memory_order_acquire);
    T item = a->get(t);
    if (!top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) {
      return nullptr;
    }
    return item;
  }

  bool empty() const noexcept {
    return bottom_.load(std::memory_order_relaxed) <= top_.load(std::memory_order_relaxed);
  }
  std::int64_t size() const noexcept {
    std::int64_t n = bottom_.load(std::memory_order_relaxed) - top_.load(std::memory_order_relaxed);
    return n < 0 ? 0 : n;
  }

 private:
  struct Array {
    explicit Array(std::int64_t cap) : capacity(cap), mask(cap - 1), slots(new std::atomic<T>[cap]) {}
    std::int64_t capacity;
    std::int64_t mask;
    std::unique_ptr<std::atomic<T>[]> slots;
    void put(std::int64_t i, T v) noexcept { slots[i & mask].store(v, std::memory_order_relaxed); }
    T get(std::int64_t i) const noexcept { return slots[i & mask].load(std::memory_order_relaxed); }
  };

  static std::int64_t round_up(std::int64_t n) {
    std::int64_t c = 2;
    while (c < n) c <<= 1;
    return c;
  }

  Array* grow(Array* a, std::int64_t b, std::int64_t t) {
    auto* bigger = new Array(a->capacity * 2);
    for (std::int64_t i = t; i < b; ++i) bigger->put(i, a->get(i));
    garbage_.emplace_back(bigger);
    array_.store(bigger, std::memory_order_release);
    return bigger;
  }

  alignas(64) std::atomic<std::int64_t> top_{0};
  alignas(64) std::atomic<std::int64_t> bottom_{0};
  alignas(64) std::atomic<Array*> array_;
  std::vector<std::unique_ptr<Array>> garbage_;  // owner-only
};

}  // namespace brisk
