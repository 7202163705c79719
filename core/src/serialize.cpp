#include "brisk/core/serialize.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace brisk::detail::serial {

void advise_huge_pages(void* p, std::size_t bytes) noexcept {
  constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(kHugePage - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

namespace {
std::atomic<std::size_t> g_kept_bytes{0};
std::atomic<std::uint64_t> g_kept_stamp{0};
// The pools: a fixed table, filled once per pool and never shrunk, read without a lock.
constexpr std::size_t kMaxKeptPools = 64;
std::atomic<KeptPool*> g_pools[kMaxKeptPools];
std::atomic<std::size_t> g_pool_count{0};
}  // namespace

void add_kept_pool(KeptPool* pool) noexcept {
  const std::size_t i = g_pool_count.fetch_add(1, std::memory_order_acq_rel);
  if (i < kMaxKeptPools) g_pools[i].store(pool, std::memory_order_release);
}

std::uint64_t next_kept_stamp() noexcept { return g_kept_stamp.fetch_add(1, std::memory_order_relaxed); }

bool reserve_kept_bytes(std::size_t bytes) noexcept {
  if (bytes > kKeptBytesLimit) return false;
  // Each pass claims the bytes, or frees the oldest storage kept anywhere and looks
  // again; bounded, for pools that other threads fill meanwhile.
  for (int pass = 0; pass < 4096; ++pass) {
    std::size_t kept = g_kept_bytes.load(std::memory_order_relaxed);
    while (bytes <= kKeptBytesLimit - kept) {
      if (g_kept_bytes.compare_exchange_weak(kept, kept + bytes, std::memory_order_relaxed)) return true;
    }
    KeptPool* oldest = nullptr;
    std::uint64_t stamp = UINT64_MAX;
    const std::size_t pools = std::min(g_pool_count.load(std::memory_order_acquire), kMaxKeptPools);
    for (std::size_t i = 0; i < pools; ++i) {
      KeptPool* pool = g_pools[i].load(std::memory_order_acquire);
      if (!pool) continue;  // being added
      if (const std::uint64_t s = pool->oldest_kept(); s < stamp) {
        stamp = s;
        oldest = pool;
      }
    }
    if (!oldest) return false;  // nothing kept to give up: the rest of the bound is claimed otherwise
    oldest->drop_oldest_kept();  // (false: another thread took it meanwhile; look again)
  }
  return false;
}

void release_kept_bytes(std::size_t bytes) noexcept { g_kept_bytes.fetch_sub(bytes, std::memory_order_relaxed); }

}  // namespace brisk::detail::serial
