// brisk/core/detail/futex.hpp — sleeping on a 32-bit word (Linux futex), spin hints.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

namespace brisk::detail {

// Sleeps while *word == expected, at most `timeout` (none: until woken). Spurious
// returns happen; callers loop on their condition.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout = std::nullopt) noexcept;
// Wakes up to `count` threads sleeping on word.
void futex_wake(std::atomic<std::uint32_t>* word, int count) noexcept;

// A pause instruction for spin loops.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace brisk::detail
