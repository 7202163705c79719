#include <fmt/format.h>

#include "brisk/core/array.hpp"
#include "brisk/core/detail/context.hpp"
#include "brisk/core/detail/distributed.hpp"
#include "brisk/core/detail/object.hpp"
#include "brisk/core/object_store.hpp"

namespace brisk::detail {
namespace {
ObjectStore* store() noexcept {
  RuntimeContext* ctx = context();
  return ctx ? ctx->store : nullptr;
}
}  // namespace

bool ObjectState::in_store_memory() const noexcept {
  if (bytes_ < kMinSpillBytes) return false;
  // An array in memory other ranks read in place (this rank's arena, bounded by its
  // size, or another rank's arena mapped here) is not the store's to count or spill.
  const RawView raw = raw_view();
  return !(raw.data && array_memory_is_shared(raw.data));
}

void ObjectState::close() noexcept {
  WaiterNode* head = waiters_.exchange(closed(), std::memory_order_acq_rel);
  while (head) {
    WaiterNode* next = head->next;  // read before notify: the node may go away
    head->notify(head, this);
    head = next;
  }
}

ObjectState::~ObjectState() { delete dist_.load(std::memory_order_acquire); }

DistInfo& ObjectState::ensure_dist() {
  DistInfo* d = dist_.load(std::memory_order_acquire);
  if (d) return *d;
  auto* fresh = new DistInfo;
  if (dist_.compare_exchange_strong(d, fresh, std::memory_order_acq_rel, std::memory_order_acquire)) return *fresh;
  delete fresh;
  return *d;
}

void ObjectState::fill_remote(Reader& r) {
  read_value(r);  // constructs the value, or throws having constructed nothing
  commit_fetched();
}

void ObjectState::commit_fetched() {
  residency_.store(Residency::kMemory, std::memory_order_seq_cst);
  if (in_store_memory()) {
    if (ObjectStore* s = store()) {
      Status st = s->admit(this, bytes_);
      if (!st.ok()) {
        residency_.store(Residency::kRemote, std::memory_order_seq_cst);
        destroy_value();
        throw Error("brisk: a fetched object does not fit in this rank's store: " + st.message());
      }
    }
  }
}

void ObjectState::complete_value_constructed(std::size_t bytes) noexcept {
  bytes_ = bytes;
  residency_.store(Residency::kMemory, std::memory_order_seq_cst);
  if (in_store_memory()) {
    if (ObjectStore* s = store()) {
      Status st = s->admit(this, bytes);
      if (!st.ok()) {
        destroy_value();
        residency_.store(Residency::kNone, std::memory_order_seq_cst);
        auto e = std::make_shared<ErrorInfo>();
        e->kind = ErrorKind::kStoreFull;
        e->message = st.message();
        e->function = "put";
        RuntimeContext* ctx = context();
        e->rank = ctx ? ctx->rank : -1;
        error_ = std::move(e);
      }
    }
  }
  close();
}

void ObjectState::pin() {
  pins_.fetch_add(1, std::memory_order_seq_cst);
  Residency where = residency_.load(std::memory_order_seq_cst);
  if (where == Residency::kMemory) return;
  pins_.fetch_sub(1, std::memory_order_seq_cst);
  if (where == Residency::kRemote) {
    RuntimeContext* ctx = context();
    if (!ctx || !ctx->distributed) throw Error("brisk: the object is on another rank and the runtime has stopped");
    ctx->distributed->fetch(this);
    pin();  // resident now (or spilled meanwhile: pin restores it)
    return;
  }
  ObjectStore* s = store_;
  if (!s) throw Error("brisk: the object was spilled by an object store that no longer exists");
  Status st = s->restore_and_pin(this);
  if (!st.ok()) throw Error(st.message());
}

void ObjectState::unpin() noexcept {
  if (pins_.fetch_sub(1, std::memory_order_seq_cst) == 1) {
    if (ObjectStore* s = store_) {
      StoreStats st = s->stats();
      if (st.memory_bytes > st.capacity) s->evict_to_capacity();
    }
  }
}

void ObjectState::destroy() noexcept {
  if (dist()) {
    RuntimeContext* ctx = context();
    if (ctx && ctx->distributed) ctx->distributed->on_destroy(this);
  }
  if (store_) store_->forget(this);
  delete this;
}

}  // namespace brisk::detail
