#include "brisk/core/serialize.hpp"

#include <sys/mman.h>

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
}  // namespace

bool reserve_kept_bytes(std::size_t bytes) noexcept {
  std::size_t kept = g_kept_bytes.load(std::memory_order_relaxed);
  do {
    if (bytes > kKeptBytesLimit - kept) return false;
  } while (!g_kept_bytes.compare_exchange_weak(kept, kept + bytes, std::memory_order_relaxed));
  return true;
}

void release_kept_bytes(std::size_t bytes) noexcept { g_kept_bytes.fetch_sub(bytes, std::memory_order_relaxed); }

}  // namespace brisk::detail::serial
