// brisk/core/detail/object.hpp — the shared state behind a Ref: one immutable object.
//
// An ObjectState is created pending (by remote or put), completed exactly once with a
// value or an error, and freed when its reference count reaches zero. Completion
// publishes the value and then closes a lock-free list of waiters (dependent tasks,
// blocked gets, wait groups), notifying each exactly once. Readers that find the
// list closed see the completed value (acquire/release on the list head).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <concepts>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "brisk/core/error.hpp"
#include "brisk/core/ids.hpp"
#include "brisk/core/serialize.hpp"

namespace brisk {
class ObjectStore;
}

namespace brisk::detail {

class ObjectState;

// A node in an object's waiter list. `notify` runs once, on the completing thread,
// after the object is complete; it must not block. The node must stay valid until
// notified (or until the object is destroyed without completing).
struct WaiterNode {
  WaiterNode* next = nullptr;
  void (*notify)(WaiterNode* self, ObjectState* object) = nullptr;
};

// Where an object's value lives.
enum class Residency : std::uint8_t {
  kNone,      // pending, or an error
  kMemory,    // value_ is constructed
  kSpilling,  // being written out by the store (store lock held)
  kSpilled,   // only on disk
  kRemote,    // complete, but the value is on another rank (DistInfo::copy); a
              // fetch makes it kMemory
};

struct DistInfo;

class ObjectState {
 public:
  // Objects smaller than this are never spilled, so reading them needs no pin.
  static constexpr std::size_t kMinSpillBytes = 4096;

  explicit ObjectState(ObjectId id) noexcept : id_(id) {}
  ObjectState(const ObjectState&) = delete;
  ObjectState& operator=(const ObjectState&) = delete;
  virtual ~ObjectState();

  const ObjectId& id() const noexcept { return id_; }

  // --- reference counting (thread-safe) ---
  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Adds a reference unless the count already reached zero (the object is being
  // destroyed); for lookups through a map of weak pointers.
  bool try_add_ref() noexcept {
    int n = refs_.load(std::memory_order_relaxed);
    while (n > 0) {
      if (refs_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) return true;
    }
    return false;
  }
  // Adds n references at once (references lent to other ranks).
  void add_refs(int n) noexcept { refs_.fetch_add(n, std::memory_order_relaxed); }
  // Drops a reference; the last one frees the object through the store.
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy();
  }
  int ref_count() const noexcept { return refs_.load(std::memory_order_relaxed); }

  // --- completion ---
  bool ready() const noexcept { return waiters_.load(std::memory_order_acquire) == closed(); }
  // Valid once ready().
  bool has_error() const noexcept { return error_ != nullptr; }
  const std::shared_ptr<const ErrorInfo>& error() const noexcept { return error_; }

  // Registers `node`; false (node untouched) if the object is already complete.
  bool add_waiter(WaiterNode* node) noexcept {
    WaiterNode* head = waiters_.load(std::memory_order_acquire);
    do {
      if (head == closed()) return false;
      node->next = head;
    } while (!waiters_.compare_exchange_weak(head, node, std::memory_order_release,
                                             std::memory_order_acquire));
    return true;
  }

  // Completes with an error and notifies the waiters.
  void complete_error(std::shared_ptr<const ErrorInfo> error) noexcept {
    error_ = std::move(error);
    close();
  }

  // Completes as remote: the value stays on another rank until fetched (the
  // caller has set dist()->copy). `bytes` is the serialized size.
  void complete_remote(std::size_t bytes) noexcept {
    bytes_ = bytes;
    residency_.store(Residency::kRemote, std::memory_order_seq_cst);
    close();
  }
  // Completes with a value read from `r` (throws SerializationError, leaving the
  // object pending, if the bytes are malformed).
  void complete_from(Reader& r) {
    read_value(r);
    complete_value_constructed(value_bytes());
  }
  // A fetched value for a kRemote object: read from `r`, then resident. Throws on
  // malformed bytes or a full store (the object then stays remote).
  void fill_remote(Reader& r);
  // The raw fast path: after prepare_raw() constructed the value and the bytes
  // landed in it, makes it resident (throws on a full store, value destroyed);
  // abort_fetch() destroys a prepared value whose bytes never came.
  void commit_fetched();
  void abort_fetch() noexcept { destroy_value(); }


  // --- cross-rank state ---
  DistInfo* dist() const noexcept { return dist_.load(std::memory_order_acquire); }
  // The DistInfo, made on first use (thread-safe).
  DistInfo& ensure_dist();

  // --- value access for the store and for spilling ---
  std::size_t bytes() const noexcept { return bytes_; }
  Residency residency() const noexcept { return residency_.load(std::memory_order_seq_cst); }
  virtual void write_value(Writer& w) const = 0;   // requires residency kMemory
  virtual void read_value(Reader& r) = 0;          // constructs the value (residency was kSpilled)
  virtual void destroy_value() noexcept = 0;       // requires residency kMemory
  virtual std::size_t value_bytes() const = 0;     // byte_size of the value (kMemory)
  // The contiguous fast path (vectors of trivially copyable elements, strings):
  // the element bytes and count of the resident value, or {nullptr, 0, 0}.
  struct RawView {
    const std::byte* data = nullptr;
    std::size_t length = 0;
    std::size_t count = 0;
  };
  virtual RawView raw_view() const noexcept { return {}; }
  // Constructs a default value and returns where `count` elements of `length`
  // bytes go (raw fast path only); the value is resident after finish_raw_fill.
  virtual std::byte* prepare_raw(std::size_t /*length*/, std::size_t /*count*/) { return nullptr; }
  // The zero-copy form of prepare_raw, for types that can be a view of memory they do
  // not own (brisk::Array over another rank's arena on this node, which must outlive
  // the value): constructs the value over `data` and returns true, or returns false
  // (the type cannot, or `data` is misaligned for its elements) and constructs nothing.
  virtual bool adopt_raw(const std::byte* /*data*/, std::size_t /*length*/, std::size_t /*count*/) { return false; }
  // Constructs the value from the raw form at `data` (bytes this thread can read, as
  // a node peer's arena) with one copy, no zero-fill first; false (nothing
  // constructed) where the type has no raw form or `data` is misaligned for it.
  virtual bool copy_raw(const std::byte* /*data*/, std::size_t /*length*/, std::size_t /*count*/) { return false; }

  // Readers must pin() before touching the value: large ones (the store may
  // spill them) and remote ones (they have to be fetched first).
  bool needs_pin() const noexcept {
    return bytes_ >= kMinSpillBytes || residency_.load(std::memory_order_acquire) != Residency::kMemory;
  }

  // Readers of large objects pin them so that the store does not spill them while
  // they are read. Small objects (bytes < kMinSpillBytes) need no pin.
  void pin();    // makes the value resident (restoring from disk if needed) and pins it
  void unpin() noexcept;

 protected:
  // Called by the typed subclass once the value is constructed: accounts it in the
  // store (which may spill it, or turn it into a kStoreFull error), then notifies.
  void complete_value_constructed(std::size_t bytes) noexcept;
  // Whether the resident value belongs in the store (counted, spillable): large, and
  // not an array in memory other ranks read in place.
  bool in_store_memory() const noexcept;
  void close() noexcept;
  static WaiterNode* closed() noexcept { return reinterpret_cast<WaiterNode*>(std::uintptr_t{1}); }

 private:
  friend class ::brisk::ObjectStore;
  void destroy() noexcept;

  std::atomic<int> refs_{1};
  std::atomic<WaiterNode*> waiters_{nullptr};
  std::atomic<Residency> residency_{Residency::kNone};
  std::atomic<std::uint32_t> pins_{0};
  std::size_t bytes_ = 0;
  ObjectId id_;
  std::shared_ptr<const ErrorInfo> error_;
  std::atomic<DistInfo*> dist_{nullptr};

 public:
  // Store bookkeeping (guarded by the store's lock): the store that accounts the
  // object (nullptr: none, or it was destroyed first) and the links of its list
  // (resident objects oldest first, or spilled objects).
  ObjectStore* store_ = nullptr;
  ObjectState* lru_prev_ = nullptr;
  ObjectState* lru_next_ = nullptr;
  bool in_lru_ = false;
};

// Type used to store the result of a void function.
struct Unit {
  template <class A>
  void serialize(A&) {}
};

template <class T>
class TypedObject final : public ObjectState {
 public:
  using ObjectState::ObjectState;
  ~TypedObject() override {
    if (residency() != Residency::kMemory) return;
    // A large vector's storage is kept for the next one a pull or a load fills.
    if constexpr (serial::kSpareVector<T>) serial::SpareVectors<typename T::value_type>::instance().give(value());
    destroy_value();
  }

  // Constructs the value in place and completes the object.
  template <class... A>
  void complete(A&&... args) {
    ::new (static_cast<void*>(&storage_)) T(std::forward<A>(args)...);
    complete_value_constructed(byte_size(value()));
  }

  // Valid while the object is ready, error-free, and resident (small, or pinned).
  const T& value() const noexcept { return *std::launder(reinterpret_cast<const T*>(&storage_)); }
  T& value() noexcept { return *std::launder(reinterpret_cast<T*>(&storage_)); }

  void write_value(Writer& w) const override { serialize_into(w, value()); }
  void read_value(Reader& r) override {
    ::new (static_cast<void*>(&storage_)) T();
    try {
      deserialize_from(r, value());
    } catch (...) {
      destroy_value();
      throw;
    }
  }
  void destroy_value() noexcept override { value().~T(); }
  std::size_t value_bytes() const override { return byte_size(value()); }

  RawView raw_view() const noexcept override {
    if constexpr (kRaw) {
      const T& v = value();
      return {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(typename T::value_type), v.size()};
    } else {
      return {};
    }
  }
  std::byte* prepare_raw(std::size_t length, std::size_t count) override {
    if constexpr (kRaw) {
      if (length != count * sizeof(typename T::value_type)) {
        throw SerializationError("brisk: raw object bytes do not match its element count");
      }
      if constexpr (kUninitialized) {
        ::new (static_cast<void*>(&storage_)) T(T::for_overwrite(count));  // nothing written twice
      } else {
        // A large vector: a spare vector's storage, resized over the elements it had
        // (which the pull overwrites: no zero-fill pass first), or fresh storage
        // hinted for huge pages (over fresh 4 KiB pages, a pull of 1-256 MiB ran at
        // 0.3 GB/s on the project's VM).
        T fresh;
        if constexpr (requires(T& t) { t.reserve(count); }) serial::reserve_hinted(fresh, count, /*stale=*/true);
        fresh.resize(count);
        ::new (static_cast<void*>(&storage_)) T(std::move(fresh));
      }
      return reinterpret_cast<std::byte*>(value().data());
    } else {
      (void)length;
      (void)count;
      throw SerializationError("brisk: raw bytes for an object that has no raw form");
    }
  }

  bool adopt_raw([[maybe_unused]] const std::byte* data, [[maybe_unused]] std::size_t length,
                 [[maybe_unused]] std::size_t count) override {
    if constexpr (kBorrows) {
      using E = typename T::value_type;
      if (!aligned_elements<E>(data, length, count)) return false;
      ::new (static_cast<void*>(&storage_)) T(T::borrowed_view(reinterpret_cast<const E*>(data), count));
      return true;
    } else {
      return false;
    }
  }

  bool copy_raw([[maybe_unused]] const std::byte* data, [[maybe_unused]] std::size_t length,
                [[maybe_unused]] std::size_t count) override {
    if constexpr (kRaw) {
      using E = typename T::value_type;
      if (!aligned_elements<E>(data, length, count)) return false;
      if constexpr (kUninitialized) {
        ::new (static_cast<void*>(&storage_)) T(T::for_overwrite(count));
        if (length) std::memcpy(static_cast<void*>(value().data()), data, length);
      } else if constexpr (requires(T& t) { t.reserve(count); }) {
        // A large vector: a spare vector's storage, or fresh storage hinted for huge
        // pages before the copy first touches it (one page fault per 2 MiB instead of
        // per 4 KiB).
        const E* first = reinterpret_cast<const E*>(data);
        T fresh;
        serial::reserve_hinted(fresh, count);
        fresh.assign(first, first + count);
        ::new (static_cast<void*>(&storage_)) T(std::move(fresh));
      } else {
        const E* first = reinterpret_cast<const E*>(data);
        ::new (static_cast<void*>(&storage_)) T(first, first + count);
      }
      return true;
    } else {
      return false;
    }
  }

  // Types that can be a read-only view of memory they do not own (brisk::Array).
  static constexpr bool kBorrows = requires(const typename T::value_type* p, std::size_t n) {
    { T::borrowed_view(p, n) } -> std::same_as<T>;
  };

  // Types whose storage a pull may write into before any element is initialized.
  static constexpr bool kUninitialized = requires(std::size_t n) {
    { T::for_overwrite(n) } -> std::same_as<T>;
  };

  // Whether `length` raw bytes at `data` can be `count` elements of E in place: throws
  // when the sizes disagree, false when `data` is misaligned for E.
  template <class E>
  static bool aligned_elements(const std::byte* data, std::size_t length, std::size_t count) {
    if (length % sizeof(E) != 0 || count != length / sizeof(E)) {
      throw SerializationError("brisk: raw object bytes do not match its element count");
    }
    return reinterpret_cast<std::uintptr_t>(data) % alignof(E) == 0;
  }

  static constexpr bool kRaw = [] {
    if constexpr (detail::serial::IsVector<T>::value || detail::serial::IsString<T>::value || kUninitialized) {
      using E = typename T::value_type;
      return std::is_trivially_copyable_v<E> && !std::is_same_v<E, bool> &&
             detail::serial::bitwise_v<E>;
    } else {
      return false;
    }
  }();

 private:
  alignas(T) std::byte storage_[sizeof(T)];
};

}  // namespace brisk::detail
