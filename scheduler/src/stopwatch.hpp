// stopwatch.hpp — adds the time a scope took to a counter (scheduler/ internal).
#pragma once

#include <chrono>
#include <cstdint>

namespace brisk::detail {

// Adds the nanoseconds from construction to destruction to `total`. Declare it after
// the lock that guards `total`, so that it is written before the lock is released.
class Stopwatch {
 public:
  explicit Stopwatch(std::uint64_t& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() {
    total_ += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  std::uint64_t& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace brisk::detail
