// brisk/runtime/arena.hpp — first-fit allocation of blocks in a rank's registered arena.
//
// The arena is the memory a rank registers once with its transport (the MPI window,
// or a region mapped with ucp_mem_map); objects that peers pull one-sided are copied
// into blocks of it. Offsets, not pointers: a block is addressed by its offset from
// the arena's start, which is also what a peer adds to the region's address.
//
// Thread safety: all members may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace brisk {

class ArenaAllocator {
 public:
  static constexpr std::uint64_t kAlignment = 64;

  explicit ArenaAllocator(std::uint64_t size);

  // A block of at least `bytes` (rounded up to kAlignment), or nullopt when no free
  // range is large enough.
  std::optional<std::uint64_t> allocate(std::uint64_t bytes);
  // Frees the block at `offset` (from allocate). Unknown offsets are ignored.
  void free(std::uint64_t offset);

  std::uint64_t size() const noexcept { return size_; }
  std::uint64_t used() const;
  std::size_t blocks() const;

 private:
  std::uint64_t size_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> length, coalesced
  std::map<std::uint64_t, std::uint64_t> used_;  // offset -> length
  std::uint64_t used_bytes_ = 0;
};

}  // namespace brisk
