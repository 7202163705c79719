// Per-peer counts of sends in flight, shared by the transports' sends_in_flight().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace brisk::detail {

// One relaxed atomic counter per rank: approximate by design, read from any thread.
class PeerCounts {
 public:
  explicit PeerCounts(int ranks)
      : size_(ranks), counts_(std::make_unique<std::atomic<std::uint32_t>[]>(static_cast<std::size_t>(ranks))) {}

  std::atomic<std::uint32_t>& of(int rank) noexcept { return counts_[static_cast<std::size_t>(rank)]; }
  void add(int rank) noexcept { of(rank).fetch_add(1, std::memory_order_relaxed); }
  void sub(int rank) noexcept { of(rank).fetch_sub(1, std::memory_order_relaxed); }
  // 0 for a rank outside the job.
  std::size_t get(int rank) const noexcept {
    if (rank < 0 || rank >= size_) return 0;
    return counts_[static_cast<std::size_t>(rank)].load(std::memory_order_relaxed);
  }

 private:
  int size_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> counts_;
};

}  // namespace brisk::detail
