#include "brisk/core/array.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace brisk::detail {
namespace {

constexpr std::size_t kHuge = std::size_t{2} << 20;
constexpr std::size_t kCached = std::size_t{256} << 10;  // blocks this large are cached
constexpr std::size_t kCacheLimit = std::size_t{512} << 20;

struct Cache {
  std::mutex mutex;
  std::map<std::size_t, std::vector<void*>> free;  // rounded size -> blocks
  std::size_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: arrays may be freed during exit
  return *c;
}

// Cached sizes are rounded to 64 KiB, or to 2 MiB (huge pages) from 2 MiB up.
std::size_t rounded(std::size_t bytes) {
  const std::size_t unit = bytes >= kHuge ? kHuge : std::size_t{64} << 10;
  return (bytes + unit - 1) / unit * unit;
}

std::atomic<SharedMemory*> g_shared{nullptr};
std::atomic<SharedMemory*> g_retired{nullptr};  // the one before: its arrays may still be freed
thread_local bool t_private = false;

// The node's shared arenas (set_borrowed_memory). Replaced sets are kept, never
// freed: a concurrent array_free may still be reading one.
using Ranges = std::vector<std::pair<const void*, std::size_t>>;
std::atomic<const Ranges*> g_borrowed{nullptr};

bool borrowed(const void* p) noexcept {
  const Ranges* ranges = g_borrowed.load(std::memory_order_acquire);
  if (!ranges) return false;
  const auto* b = static_cast<const std::byte*>(p);
  for (const auto& [base, bytes] : *ranges) {
    const auto* start = static_cast<const std::byte*>(base);
    if (b >= start && b < start + bytes) return true;
  }
  return false;
}

}  // namespace

void set_shared_memory(SharedMemory* memory) noexcept {
  SharedMemory* old = g_shared.exchange(memory, std::memory_order_acq_rel);
  if (old) g_retired.store(old, std::memory_order_release);
}

void set_borrowed_memory(std::vector<std::pair<const void*, std::size_t>> ranges) {
  static std::mutex mutex;
  static auto* sets = new std::vector<std::unique_ptr<Ranges>>;  // every set made, kept (see above)
  std::lock_guard lock(mutex);
  const Ranges* next = nullptr;
  if (!ranges.empty()) {
    sets->push_back(std::make_unique<Ranges>(std::move(ranges)));
    next = sets->back().get();
  }
  g_borrowed.store(next, std::memory_order_release);
}

PrivateArrays::PrivateArrays() noexcept : previous_(t_private) { t_private = true; }
PrivateArrays::~PrivateArrays() { t_private = previous_; }

void* array_allocate(std::size_t bytes) {
  if (SharedMemory* shared = g_shared.load(std::memory_order_acquire);
      shared && !t_private && bytes >= shared->min_bytes) {
    if (void* p = shared->allocate(bytes)) return p;
  }
  if (bytes < kCached) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  const std::size_t size = rounded(bytes);
  {
    Cache& c = cache();
    std::lock_guard lock(c.mutex);
    auto it = c.free.find(size);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.bytes -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(size >= kHuge ? kHuge : 64, size);
  if (!p) throw std::bad_alloc();
  if (size >= kHuge) (void)madvise(p, size, MADV_HUGEPAGE);  // 512 times fewer page faults when filled
  return p;
}

void array_free(void* p, std::size_t bytes) noexcept {
  if (!p || borrowed(p)) return;
  for (SharedMemory* shared : {g_shared.load(std::memory_order_acquire), g_retired.load(std::memory_order_acquire)}) {
    if (shared && shared->release(p)) return;
  }
  if (bytes >= kCached) {
    const std::size_t size = rounded(bytes);
    Cache& c = cache();
    std::lock_guard lock(c.mutex);
    if (c.bytes + size <= kCacheLimit) {
      try {
        c.free[size].push_back(p);
        c.bytes += size;
        return;
      } catch (...) {
      }
    }
  }
  std::free(p);
}

std::size_t array_cache_bytes() noexcept {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return c.bytes;
}

}  // namespace brisk::detail
