#include "brisk/core/array.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <vector>

namespace brisk::detail {
namespace {

constexpr std::size_t kHuge = std::size_t{2} << 20;
constexpr std::size_t kCached = std::size_t{256} << 10;  // blocks this large are cached

struct Block {
  std::uint64_t stamp;  // serial::next_kept_stamp, when it was kept
  void* p;
};

// Freed blocks of kCached bytes and more, one of the process's kept pools.
struct Cache final : serial::KeptPool {
  std::mutex mutex;
  std::map<std::size_t, std::vector<Block>> free;  // rounded size -> blocks, oldest first
  std::size_t bytes = 0;

  std::uint64_t oldest_kept() noexcept override {
    std::lock_guard lock(mutex);
    const auto it = oldest();
    return it == free.end() ? UINT64_MAX : it->second.front().stamp;
  }
  bool drop_oldest_kept() noexcept override {
    void* p = nullptr;
    std::size_t size = 0;
    {
      std::lock_guard lock(mutex);
      const auto it = oldest();
      if (it == free.end()) return false;
      size = it->first;
      p = it->second.front().p;
      it->second.erase(it->second.begin());
      if (it->second.empty()) free.erase(it);
      bytes -= size;
    }
    serial::release_kept_bytes(size);
    std::free(p);
    return true;
  }

 private:
  // The size whose oldest block was kept longest.
  std::map<std::size_t, std::vector<Block>>::iterator oldest() {
    auto first = free.end();
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (!it->second.empty() && (first == free.end() || it->second.front().stamp < first->second.front().stamp)) first = it;
    }
    return first;
  }
};

Cache& cache() {
  static Cache* c = [] {  // never destroyed: arrays may be freed during exit
    auto* created = new Cache;
    serial::add_kept_pool(created);
    return created;
  }();
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
thread_local bool t_private_new = false;  // PrivateAllocations

// The node's shared arenas (add_borrowed_memory): a fixed table, filled once per
// range and never shrunk, read without a lock.
constexpr std::size_t kMaxBorrowed = 4096;
struct BorrowedRange {
  std::atomic<const std::byte*> base{nullptr};
  std::atomic<std::size_t> bytes{0};
};
BorrowedRange g_borrowed[kMaxBorrowed];
std::atomic<std::size_t> g_borrowed_count{0};

bool borrowed(const void* p) noexcept {
  const auto* b = static_cast<const std::byte*>(p);
  const std::size_t n = g_borrowed_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    const std::byte* start = g_borrowed[i].base.load(std::memory_order_acquire);
    if (start && b >= start && b < start + g_borrowed[i].bytes.load(std::memory_order_relaxed)) return true;
  }
  return false;
}
}  // namespace

void set_shared_memory(SharedMemory* memory) noexcept {
  SharedMemory* old = g_shared.exchange(memory, std::memory_order_acq_rel);
  if (old) g_retired.store(old, std::memory_order_release);
}

void add_borrowed_memory(const void* base, std::size_t bytes) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  const std::size_t n = g_borrowed_count.load(std::memory_order_relaxed);
  if (n == kMaxBorrowed) throw std::length_error("brisk: more than 4096 mapped arenas of other ranks");
  g_borrowed[n].bytes.store(bytes, std::memory_order_relaxed);
  g_borrowed[n].base.store(static_cast<const std::byte*>(base), std::memory_order_release);
  g_borrowed_count.store(n + 1, std::memory_order_release);
}

bool new_memory_contains(const void* p) noexcept;

bool array_memory_is_shared(const void* p) noexcept {
  if (!p) return false;
  if (SharedMemory* shared = g_shared.load(std::memory_order_acquire); shared && shared->contains(p)) return true;
  return borrowed(p) || new_memory_contains(p);
}

PrivateArrays::PrivateArrays() noexcept : ThreadFlagScope(t_private) {}
PrivateAllocations::PrivateAllocations() noexcept : ThreadFlagScope(t_private_new) {}

// ---------------------------------------------------------------------------
// Placement of operator new's large allocations (set_new_memory).

std::atomic<std::size_t> g_new_min_bytes{SIZE_MAX};
std::atomic<std::size_t> g_new_high{0};  // slots [0, high) have been used

namespace {
// A memory installed once. Its range stays in the table while anything placed in it
// is allocated, retired or not, so that its release is recognised; a slot is reused
// only once its memory is retired with nothing left.
struct NewSlot {
  std::atomic<SharedMemory*> memory{nullptr};
  std::atomic<std::uintptr_t> base{0};
  std::atomic<std::size_t> bytes{0};  // 0: free slot
  std::atomic<std::int64_t> live{0};  // placed and not yet freed
};
constexpr std::size_t kNewSlots = 16;
NewSlot g_new_slots[kNewSlots];
std::atomic<NewSlot*> g_new_current{nullptr};
std::mutex g_new_mutex;  // installs and retirements

// The slot whose range holds `p`, installed or kept; nullptr when none does.
NewSlot* slot_of(const void* p) noexcept {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t high = g_new_high.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < high; ++i) {
    NewSlot& s = g_new_slots[i];
    const std::size_t bytes = s.bytes.load(std::memory_order_acquire);
    if (bytes != 0 && at - s.base.load(std::memory_order_relaxed) < bytes) return &s;
  }
  return nullptr;
}
}  // namespace

bool set_new_memory(SharedMemory* memory, std::span<std::byte> range, std::size_t min_bytes) noexcept {
  if (!memory || range.empty() || min_bytes == 0) return false;
  std::lock_guard lock(g_new_mutex);
  if (g_new_current.load(std::memory_order_acquire)) return false;
  for (std::size_t i = 0; i < kNewSlots; ++i) {
    NewSlot& s = g_new_slots[i];
    if (s.bytes.load(std::memory_order_acquire) != 0) continue;
    if (g_new_high.load(std::memory_order_relaxed) <= i) g_new_high.store(i + 1, std::memory_order_release);
    s.memory.store(memory, std::memory_order_relaxed);
    s.base.store(reinterpret_cast<std::uintptr_t>(range.data()), std::memory_order_relaxed);
    s.live.store(0, std::memory_order_relaxed);
    s.bytes.store(range.size(), std::memory_order_release);
    g_new_current.store(&s, std::memory_order_seq_cst);
    g_new_min_bytes.store(min_bytes, std::memory_order_release);
    return true;
  }
  return false;
}

bool retire_new_memory(const void* base) noexcept {
  std::lock_guard lock(g_new_mutex);
  for (NewSlot& s : g_new_slots) {
    const bool installed_here = s.bytes.load(std::memory_order_acquire) != 0 &&
                                s.base.load(std::memory_order_relaxed) == reinterpret_cast<std::uintptr_t>(base);
    if (!installed_here) continue;
    NewSlot* expected = &s;
    if (g_new_current.compare_exchange_strong(expected, nullptr, std::memory_order_seq_cst)) {
      g_new_min_bytes.store(SIZE_MAX, std::memory_order_release);
    }
    // An allocation counts itself live before it looks for the memory
    // (new_memory_allocate): one that still finds it is counted here.
    if (s.live.load(std::memory_order_seq_cst) > 0) return false;
    s.bytes.store(0, std::memory_order_release);
    s.memory.store(nullptr, std::memory_order_relaxed);
    return true;
  }
  return true;
}

std::int64_t new_memory_blocks() noexcept {
  NewSlot* s = g_new_current.load(std::memory_order_acquire);
  return s ? s->live.load(std::memory_order_acquire) : 0;
}

void* new_memory_allocate(std::size_t bytes) noexcept {
  if (t_private || t_private_new) return nullptr;
  NewSlot* s = g_new_current.load(std::memory_order_acquire);
  if (!s) return nullptr;
  s->live.fetch_add(1, std::memory_order_seq_cst);
  void* p = nullptr;
  if (g_new_current.load(std::memory_order_seq_cst) == s) {
    if (SharedMemory* m = s->memory.load(std::memory_order_acquire)) p = m->allocate(bytes);
  }
  if (!p) s->live.fetch_sub(1, std::memory_order_relaxed);
  return p;
}

bool new_memory_contains(const void* p) noexcept { return slot_of(p) != nullptr; }

bool new_memory_release(void* p) noexcept {
  NewSlot* s = slot_of(p);
  if (!s) return false;
  if (SharedMemory* m = s->memory.load(std::memory_order_acquire)) m->release(p);
  s->live.fetch_sub(1, std::memory_order_release);
  return true;
}

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
      void* p = it->second.back().p;  // the newest: its pages the likeliest in the cache
      it->second.pop_back();
      if (it->second.empty()) c.free.erase(it);
      c.bytes -= size;
      serial::release_kept_bytes(size);
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
    // Claimed before the lock: making room may free this cache's own oldest blocks.
    if (serial::reserve_kept_bytes(size)) {
      Cache& c = cache();
      std::lock_guard lock(c.mutex);
      try {
        c.free[size].push_back(Block{serial::next_kept_stamp(), p});
        c.bytes += size;
        return;
      } catch (...) {
        serial::release_kept_bytes(size);
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
