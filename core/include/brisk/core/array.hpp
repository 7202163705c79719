// brisk/core/array.hpp — Array<T>: a contiguous array that crosses ranks at wire speed.
//
// A std::vector pulled from another rank must be value-initialized (zero-filled)
// before the bytes land in it, and large fresh vectors fault in every 4 KiB page:
// on the project's VMs that costs more than the transfer itself (docs/BENCHMARKS.md).
// Array<T> holds trivially copyable elements in storage that a pull writes into
// directly, uninitialized, 64-byte aligned, and backed by transparent huge pages when
// large (2 MiB and up). Use it for bulk data that moves between tasks on different
// ranks; it serializes like a vector (length, then the elements). Freed large blocks
// are cached and reused, so a steady stream of same-sized arrays (one per iteration)
// touches no fresh pages. In a multi-rank job, arrays larger than the inline
// threshold are placed in the rank's registered arena while it has room, so that
// another rank pulls them from where they are; such an array must not outlive
// brisk::run (the arena goes with it).
//
//   brisk::Array<double> field(n);                        // zero-filled
//   auto raw = brisk::Array<float>::for_overwrite(n);     // contents indeterminate
//   std::span<double> s = field.span();
//
// Thread safety: like std::vector (const members may be called concurrently).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "brisk/core/serialize.hpp"

namespace brisk {

namespace detail {
// Storage for Array: 64-byte aligned; blocks of 2 MiB and more are backed by
// transparent huge pages. Blocks of 256 KiB and more, when freed, are kept in a
// per-process cache from which an allocation of the same rounded size is served with
// its pages already in memory (bounded with spare vectors' storage:
// serial::kKeptBytesLimit, 512 MiB). Thread-safe. Throws
// std::bad_alloc.
void* array_allocate(std::size_t bytes);
void array_free(void* p, std::size_t bytes) noexcept;
// Bytes held in the cache (for tests and diagnostics).
std::size_t array_cache_bytes() noexcept;

// Memory that other ranks read one-sidedly (the rank's registered arena), installed
// by the runtime of a multi-rank job: arrays of at least `min_bytes` are placed in it
// while it has room, so that another rank pulls them from where they are, with no
// copy first. `allocate` returns nullptr when there is no room; `release` returns
// false for memory that is not its own. Both are called from any thread.
class SharedMemory {
 public:
  virtual ~SharedMemory() = default;
  virtual void* allocate(std::size_t bytes) noexcept = 0;
  virtual bool release(void* p) noexcept = 0;
  // Whether `p` lies in this memory.
  virtual bool contains(const void* p) const noexcept = 0;
  std::size_t min_bytes = 0;
};
// Installs `memory` (nullptr: none). The previous one must stay valid for arrays it
// still holds, and recognise their release.
void set_shared_memory(SharedMemory* memory) noexcept;
// Memory that other ranks of the node share read-only with this one (their arenas,
// mapped by the runtime): an Array made over it by Array::borrowed_view frees nothing.
// Ranges are added, never removed: the runtime keeps such mappings until the process
// exits, so that a view that outlives brisk::run (a static Ref) still frees nothing.
void add_borrowed_memory(const void* base, std::size_t bytes);
// Whether an array's storage at `p` is memory other ranks read in place (this rank's
// arena, or another's mapped here) rather than this process's own heap: the object
// store does not spill such values, whose memory a spill would not free (and other
// ranks may be reading).
bool array_memory_is_shared(const void* p) noexcept;
// Sets one of the calling thread's flags for its lifetime; the value it had comes
// back when the scope ends (scopes nest).
class ThreadFlagScope {
 public:
  ThreadFlagScope(const ThreadFlagScope&) = delete;
  ThreadFlagScope& operator=(const ThreadFlagScope&) = delete;

 protected:
  explicit ThreadFlagScope(bool& flag) noexcept : flag_(flag), previous_(flag) { flag = true; }
  ~ThreadFlagScope() { flag_ = previous_; }

 private:
  bool& flag_;  // a thread_local of core/src/array.cpp
  bool previous_;
};

// While one exists on a thread, its arrays and large allocations (set_new_memory)
// use private memory (the destinations of pulls: huge pages and the cache beat the
// registered arena there; and the runtime's own buffers).
class PrivateArrays : ThreadFlagScope {
 public:
  PrivateArrays() noexcept;
};

// While one exists on a thread, large allocations by operator new use private memory
// (set_new_memory places nothing); arrays are left as they are. For the destination
// of a pull into a std::vector: in private memory it takes a freed vector's storage
// (serial::SpareVectors, which keeps no arena memory) and is not zero-filled first.
class PrivateAllocations : ThreadFlagScope {
 public:
  PrivateAllocations() noexcept;
};

// The rank's arena as the home of large allocations by the global operator new (a
// std::vector's storage, among others; brisk replaces operator new and delete, see
// core/src/new_delete.cpp): while `memory` (whose range is `range`) is installed,
// an allocation of at least `min_bytes` made outside PrivateArrays is placed in it
// while it has room, so that a value another rank reads is read where it lies, with
// no copy into the arena first. One memory is installed at a time; false when
// another is, or when 16 memories have been kept (below) over the process's life.
bool set_new_memory(SharedMemory* memory, std::span<std::byte> range, std::size_t min_bytes) noexcept;
// Ends the placement in the memory installed over `base`. True when nothing placed
// there is still allocated: the memory may go. False when something is: the memory
// must then stay mapped until the process exits (what is left there is freed into
// nothing), since a value made during brisk::run may be used after it.
bool retire_new_memory(const void* base) noexcept;
// Allocations placed in the installed memory and not yet freed (for tests).
std::int64_t new_memory_blocks() noexcept;
// For core/src/new_delete.cpp: the smallest size placed (SIZE_MAX when none is
// installed), the placement itself (nullptr: not placed), and how many slots of
// memories have been used (0: no range to check on delete).
extern std::atomic<std::size_t> g_new_min_bytes;
extern std::atomic<std::size_t> g_new_high;
void* new_memory_allocate(std::size_t bytes) noexcept;
// True when `p` was placed in such a memory (and is now freed there).
bool new_memory_release(void* p) noexcept;
}  // namespace detail

template <class T>
class Array {
  static_assert(std::is_trivially_copyable_v<T> && !std::is_same_v<T, bool>,
                "brisk::Array<T>: T must be trivially copyable (and not bool)");

 public:
  using value_type = T;
  using size_type = std::size_t;
  using iterator = T*;
  using const_iterator = const T*;

  Array() noexcept = default;
  // n value-initialized (zero) elements.
  explicit Array(std::size_t n) : Array(for_overwrite(n)) {
    if (n) std::memset(data_, 0, n * sizeof(T));
  }
  Array(std::size_t n, const T& value) : Array(for_overwrite(n)) { std::fill(begin(), end(), value); }
  Array(std::initializer_list<T> values) : Array(for_overwrite(values.size())) {
    std::copy(values.begin(), values.end(), begin());
  }
  explicit Array(const std::vector<T>& values) : Array(for_overwrite(values.size())) {
    if (!values.empty()) std::memcpy(data_, values.data(), values.size() * sizeof(T));
  }
  // n elements whose values are indeterminate until written.
  static Array for_overwrite(std::size_t n) {
    Array a;
    a.data_ = allocate(n);
    a.size_ = n;
    return a;
  }

  // For the runtime: n elements that lie in read-only memory registered with
  // detail::add_borrowed_memory (another rank's arena), which outlives the array.
  // Nothing is copied and nothing is freed; writing through data() faults. Copies of
  // it are ordinary arrays.
  static Array borrowed_view(const T* p, std::size_t n) noexcept {
    Array a;
    a.data_ = const_cast<T*>(p);
    a.size_ = n;
    return a;
  }

  Array(const Array& other) : Array(for_overwrite(other.size_)) {
    if (size_) std::memcpy(data_, other.data_, size_ * sizeof(T));
  }
  Array(Array&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  Array& operator=(Array other) noexcept {
    swap(other);
    return *this;
  }
  ~Array() { release(data_, size_); }
  void swap(Array& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
  }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  std::span<T> span() noexcept { return {data_, size_}; }
  std::span<const T> span() const noexcept { return {data_, size_}; }
  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }

  friend bool operator==(const Array& a, const Array& b) noexcept {
    return a.size_ == b.size_ && (a.size_ == 0 || std::memcmp(a.data_, b.data_, a.size_ * sizeof(T)) == 0);
  }

  // Wire form: u64 element count, then the elements' bytes (as a vector's).
  template <class A>
  void serialize(A& ar) {
    if constexpr (std::is_same_v<A, Reader>) {
      std::uint64_t n = 0;
      ar(n);
      if (n > ar.remaining() / (sizeof(T) ? sizeof(T) : 1)) {
        throw SerializationError("brisk: an Array's length is larger than the bytes that follow");
      }
      *this = for_overwrite(static_cast<std::size_t>(n));
      ar.read_bytes(data_, size_ * sizeof(T));
    } else {
      const std::uint64_t n = size_;
      ar(n);
      ar.write_bytes(data_, size_ * sizeof(T));
    }
  }

 private:
  static T* allocate(std::size_t n) {
    if (n == 0) return nullptr;
    if (n > std::size_t(-1) / 2 / sizeof(T)) throw std::bad_alloc();
    return static_cast<T*>(detail::array_allocate(n * sizeof(T)));
  }
  static void release(T* p, std::size_t n) noexcept {
    if (p) detail::array_free(p, n * sizeof(T));
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace brisk
