// Blocking on objects: spin for a while (a hand-off between spinning threads costs
// well under a microsecond, waking a sleeping one tens of microseconds), then sleep
// on a futex. A worker that sleeps tells the executor, which keeps the core busy.
#include <sched.h>

#include <chrono>
#include <memory>

#include "brisk/core/api.hpp"
#include "brisk/core/detail/distributed.hpp"
#include "brisk/core/detail/futex.hpp"

namespace brisk::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Tells the transport that this thread spins on poll() while it lives.
class SpinScope {
 public:
  explicit SpinScope(Distributed* net) noexcept : net_(net) {
    if (net_) net_->spin_begin();
  }
  ~SpinScope() {
    if (net_) net_->spin_end(!found_);
  }
  SpinScope(const SpinScope&) = delete;
  SpinScope& operator=(const SpinScope&) = delete;
  bool found(bool f) noexcept {
    found_ = f;
    return f;
  }

 private:
  Distributed* net_;
  bool found_ = false;
};

// Spins until pred() or the deadline; yields now and then so that spinning threads
// oversubscribed on few cores let the thread they wait for run.
// In a multi-rank job the spinning thread also polls the transport, so that the
// message it waits for is handled here instead of waking another thread.
template <class Pred>
bool spin_until(Pred pred, Clock::time_point deadline) {
  RuntimeContext* ctx = context();
  Distributed* net = ctx ? ctx->distributed : nullptr;
  if (pred()) return true;
  SpinScope scope(net);
  for (unsigned i = 1;; ++i) {
    if (pred()) return scope.found(true);
    if ((i & 15) == 15 && net) net->poll();
    if ((i & 63) == 63) {
      if (Clock::now() >= deadline) return scope.found(pred());
      if ((i & 1023) == 1023) sched_yield();
    }
    cpu_relax();
  }
}

struct BlockWaiter : WaiterNode {
  std::atomic<std::uint32_t> word{0};
  static void on_complete(WaiterNode* self, ObjectState*) noexcept {
    auto* w = static_cast<BlockWaiter*>(self);
    w->word.store(1, std::memory_order_release);
    futex_wake(&w->word, 1);
  }
};

// Shared between the waiter and the objects' notifications; freed by the last.
struct WaitGroup {
  struct Node : WaiterNode {
    WaitGroup* group;
  };
  std::atomic<int> refs{1};
  std::atomic<std::uint32_t> done{0};
  std::atomic<std::uint32_t> word{0};
  std::uint32_t needed = 0;
  std::unique_ptr<Node[]> nodes;

  void release() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  static void on_complete(WaiterNode* self, ObjectState*) noexcept {
    WaitGroup* g = static_cast<Node*>(self)->group;
    if (g->done.fetch_add(1, std::memory_order_acq_rel) + 1 == g->needed) {
      g->word.store(1, std::memory_order_release);
      futex_wake(&g->word, 1);
    }
    g->release();
  }
};

class BlockScope {
 public:
  explicit BlockScope(Executor* ex) noexcept : ex_(ex) {
    if (ex_) ex_->block_begin();
  }
  ~BlockScope() {
    if (ex_) ex_->block_end();
  }

 private:
  Executor* ex_;
};

}  // namespace

void wait_ready(ObjectState* object) {
  RuntimeContext* ctx = context();
  auto spin = ctx ? ctx->spin : std::chrono::nanoseconds(0);
  if (spin.count() > 0 && spin_until([&] { return object->ready(); }, Clock::now() + spin)) return;
  BlockWaiter waiter;
  waiter.notify = &BlockWaiter::on_complete;
  if (!object->add_waiter(&waiter)) return;
  BlockScope scope(ctx ? ctx->executor : nullptr);
  while (waiter.word.load(std::memory_order_acquire) == 0) futex_wait(&waiter.word, 0);
}

std::vector<bool> wait_objects(const std::vector<ObjectState*>& objects, std::size_t num_returns,
                               std::optional<std::chrono::nanoseconds> timeout) {
  auto count_ready = [&] {
    std::size_t n = 0;
    for (ObjectState* o : objects) n += o->ready();
    return n;
  };
  auto flags = [&] {
    std::vector<bool> out(objects.size());
    for (std::size_t i = 0; i < objects.size(); ++i) out[i] = objects[i]->ready();
    return out;
  };
  if (count_ready() >= num_returns) return flags();
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      timeout ? start + *timeout : Clock::time_point::max();
  RuntimeContext* ctx = context();
  auto spin = ctx ? ctx->spin : std::chrono::nanoseconds(0);
  if (spin.count() > 0 &&
      spin_until([&] { return count_ready() >= num_returns; }, std::min(deadline, start + spin))) {
    return flags();
  }
  if (timeout && Clock::now() >= deadline) return flags();

  auto* group = new WaitGroup;
  group->nodes.reset(new WaitGroup::Node[objects.size()]);
  std::uint32_t already = 0;
  // Count completions first among those registered, then those complete already.
  group->needed = static_cast<std::uint32_t>(num_returns);
  for (std::size_t i = 0; i < objects.size(); ++i) {
    WaitGroup::Node& n = group->nodes[i];
    n.group = group;
    n.notify = &WaitGroup::on_complete;
    group->refs.fetch_add(1, std::memory_order_relaxed);
    if (!objects[i]->add_waiter(&n)) {
      group->refs.fetch_sub(1, std::memory_order_relaxed);
      ++already;
    }
  }
  if (already) {
    if (group->done.fetch_add(already, std::memory_order_acq_rel) + already >= group->needed) {
      group->word.store(1, std::memory_order_release);
    }
  }
  {
    BlockScope scope(ctx ? ctx->executor : nullptr);
    while (group->word.load(std::memory_order_acquire) == 0) {
      if (timeout) {
        auto now = Clock::now();
        if (now >= deadline) break;
        futex_wait(&group->word, 0, deadline - now);
      } else {
        futex_wait(&group->word, 0);
      }
    }
  }
  group->release();
  return flags();
}

}  // namespace brisk::detail
