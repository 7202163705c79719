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
};

class ObjectState {
 public:
  // Objects smaller than this are never spilled, so reading them needs no pin.
  static constexpr std::size_t kMinSpillBytes = 4096;

  explicit ObjectState(ObjectId id) noexcept : id_(id) {}
  ObjectState(const ObjectState&) = delete;
  ObjectState& operator=(const ObjectState&) = delete;
  virtual ~ObjectState() = default;

  const ObjectId& id() const noexcept { return id_; }

  // --- reference counting (thread-safe) ---
  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
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

  // --- value access for the store and for spilling ---
  std::size_t bytes() const noexcept { return bytes_; }
  Residency residency() const noexcept { return residency_.load(std::memory_order_seq_cst); }
  virtual void write_value(Writer& w) const = 0;   // requires residency kMemory
  virtual void read_value(Reader& r) = 0;          // constructs the value (residency was kSpilled)
  virtual void destroy_value() noexcept = 0;       // requires residency kMemory

  // Readers of large objects pin them so that the store does not spill them while
  // they are read. Small objects (bytes < kMinSpillBytes) need no pin.
  void pin();    // makes the value resident (restoring from disk if needed) and pins it
  void unpin() noexcept;

 protected:
  // Called by the typed subclass once the value is constructed: accounts it in the
  // store (which may spill it, or turn it into a kStoreFull error), then notifies.
  void complete_value_constructed(std::size_t bytes) noexcept;
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
    if (residency() == Residency::kMemory) destroy_value();
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

 private:
  alignas(T) std::byte storage_[sizeof(T)];
};

}  // namespace brisk::detail
