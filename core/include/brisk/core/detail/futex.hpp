// brisk/core/detail/futex.hpp — sleeping on a 32-bit word (Linux futex), spin hints,
// thread names.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace brisk::detail {

// Sleeps while *word == expected, at most `timeout` (none: until woken). Spurious
// returns happen; callers loop on their condition.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout = std::nullopt) noexcept;
// Wakes up to `count` threads sleeping on word.
void futex_wake(std::atomic<std::uint32_t>* word, int count) noexcept;
// The same for a word in memory that processes share (MAP_SHARED): the sleeper and
// the waker may be in different processes.
void futex_wait_shared(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::optional<std::chrono::nanoseconds> timeout = std::nullopt) noexcept;
void futex_wake_shared(std::atomic<std::uint32_t>* word, int count) noexcept;

// A pause instruction for spin loops.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Names the calling thread for the OS (top -H, ps -L, gdb, perf): at most 15
// characters are kept.
void set_os_thread_name(std::string_view name) noexcept;

}  // namespace brisk::detail
