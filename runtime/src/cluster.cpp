#include "brisk/runtime/cluster.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "brisk/checkpoint/format.hpp"
#include "brisk/checkpoint/reader.hpp"
#include "brisk/core/actor.hpp"
#include "brisk/core/array.hpp"
#include "brisk/core/detail/futex.hpp"
#include "brisk/core/detail/object.hpp"
#include "brisk/core/detail/task.hpp"
#include "brisk/core/function_registry.hpp"
#include "brisk/runtime/control_plane.hpp"
#include "brisk/runtime/exit_status.hpp"
#include "brisk/runtime/wire.hpp"
#include "brisk/scheduler/local_scheduler.hpp"

namespace brisk {

using detail::DistInfo;
using detail::ObjectState;
using detail::RemoteCopy;
using detail::Residency;
using detail::TaskBase;

namespace {

using Clock = std::chrono::steady_clock;

// Whether the creator will replay an actor's calls made for that build (ActorResults).
bool replay_pending(TaskId actor, std::uint32_t incarnation) { return detail::actor_replay_pending(actor, incarnation); }

// A message to a rank goes out at once unless kBurstSends messages already went to
// that rank within the current kBurstWindow: then it joins a batch that the next
// poll or the progress thread flushes (or that goes at kBatchBytes). Isolated and
// ping-pong traffic is never delayed; a burst is sent in few large frames.
constexpr std::size_t kBatchBytes = 64 * 1024;
constexpr auto kBurstWindow = std::chrono::microseconds(20);
constexpr int kBurstSends = 4;
// Nor while this many messages to that rank are in flight in the transport (or done,
// and not yet seen done by a progress pass): a rank that posts faster than a peer
// drains (many ranks on few cores, a flood of spilled tasks) then sends one batch
// per poll instead of growing the transport's queue by a message per record (with
// Open MPI 4.1's ob1 a queue of thousands of small sends stalled every rank's
// progress for minutes).
constexpr std::size_t kMaxSendsInFlight = 16;

// The messages' constants, batches and decoders (runtime/wire.hpp).
using namespace wire;

thread_local bool t_on_progress_thread = false;

// The resource demand of a task that states none (placement then looks at load).
const std::map<std::string, double> kNoDemand;

// Arguments up to this size are pulled by the worker that runs the task (run_here).
constexpr std::uint64_t kWorkerPullBytes = 4u << 20;
// How long after sending a task away the progress thread stays awake for its result.
constexpr auto kAwaitWindow = std::chrono::milliseconds(2);
// How long the progress thread sleeps at a time while it stands back for awake
// workers that poll themselves (Config::workers_poll): it still polls that often, for
// workers busy with long tasks. While other threads have polled (Cluster::poll)
// since its last wake, the nap doubles up to kStandBackNapMax; a wake that finds no
// poll since the one before (the workers run long tasks) polls, and the nap is
// kStandBackNap again. Each wake takes the core from a worker for a context switch
// (some 10-30 us here). A nap also ends at the next heartbeat (every 10 ms by
// default): the maximum lies above that interval, so that a thread standing back
// wakes once per heartbeat. (At 8 ms, below it, naps and heartbeats fell apart and
// the thread woke 1.5-2 times as often: physbam_like, np 2, 2,800-3,000 wake-ups
// over 3 frames per rank against 4,650-4,800.)
constexpr auto kStandBackNap = std::chrono::milliseconds(1);
constexpr auto kStandBackNapMax = std::chrono::milliseconds(16);
// How long the progress thread naps at a time while another thread of its rank spins
// on poll() as it waits (Cluster::spin_begin): a waiter whose object came stops
// polling without waking it, so its next look comes at most this long after.
constexpr auto kSpinnerNap = std::chrono::microseconds(50);

// A copy into the arena for a node peer is made after the message that describes
// it goes (RemoteCopy::fill) from this size up, and published in parts of
// kFillPart bytes, which the reader copies out as they land: the two copies overlap
// instead of taking turns.
constexpr std::uint64_t kFillLaterBytes = 256u << 10;
constexpr std::uint64_t kFillPart = 64u << 10;

// The arena block that holds bytes at `offset` (blocks are 64-byte aligned).
std::uint64_t block_of(std::uint64_t offset) { return offset & ~std::uint64_t{ArenaAllocator::kAlignment - 1}; }

// Keeps an object's value resident (restored or fetched if need be) while it lives.
class Pinned {
 public:
  explicit Pinned(ObjectState* o) : o_(o) { o_->pin(); }
  ~Pinned() { o_->unpin(); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;

 private:
  ObjectState* o_;
};

// An object carried inside the message (its value must be resident here).
void write_inline(Writer& w, ObjectState* o) {
  const ObjectId id = o->id();
  w(detail::kObjInline, id.hi, id.lo);
  Pinned pinned(o);
  o->write_value(w);
}

std::shared_ptr<ErrorInfo> make_error(ErrorKind kind, std::string message, std::string function, int rank) {
  auto e = std::make_shared<ErrorInfo>();
  e->kind = kind;
  e->message = std::move(message);
  e->function = std::move(function);
  e->rank = rank;
  return e;
}

}  // namespace

// Within its scope (one task's message to rank `to`, which maps this rank's arena),
// values copied into the arena for `to` are described at once and copied when the
// scope ends, after the message went: the reader copies each part out as it lands.
class Cluster::FillLater {
 public:
  FillLater(Cluster* cluster, Rank to, bool active) : cluster_(cluster), to_(to), outer_(current_) {
    current_ = active ? this : nullptr;
  }
  ~FillLater() {
    current_ = outer_;
    cluster_->make_fills(fills_);
  }
  FillLater(const FillLater&) = delete;
  FillLater& operator=(const FillLater&) = delete;
  // The scope of this thread for messages to `to`, or null.
  static FillLater* for_rank(Rank to) noexcept { return current_ && current_->to_ == to ? current_ : nullptr; }
  void reserve_one() { fills_.reserve(fills_.size() + 1); }
  void add(const Fill& f) noexcept { fills_.push_back(f); }  // after reserve_one
  // Makes this thread's described copies now (one that waits for a count must not
  // wait for its own thread).
  static void make_now() noexcept {
    if (current_) current_->cluster_->make_fills(current_->fills_);
  }

 private:
  Cluster* cluster_;
  Rank to_;
  FillLater* outer_;
  std::vector<Fill> fills_;
  static thread_local FillLater* current_;
};

thread_local Cluster::FillLater* Cluster::FillLater::current_ = nullptr;

struct Cluster::Outbox {
  std::mutex mutex;
  std::vector<std::byte> batch[3];  // kTask, kResult, kRefCount
  Clock::time_point window_start{};
  int sent_in_window = 0;
  static int slot(FrameKind kind) {
    switch (kind) {
      case FrameKind::kTask: return 0;
      case FrameKind::kResult: return 1;
      default: return 2;
    }
  }
  static FrameKind kind_of(int slot) {
    return slot == 0 ? FrameKind::kTask : slot == 1 ? FrameKind::kResult : FrameKind::kRefCount;
  }
};

// Sends a received task's result back to its owner once it completes.
class Cluster::ResultForwarder : public detail::WaiterNode {
 public:
  ResultForwarder(Cluster* c, Rank owner, TaskId task, ObjectState* result) : c_(c), owner_(owner), task_(task), result_(result) {
    notify = &ResultForwarder::on_complete;
  }
  static void on_complete(detail::WaiterNode* self, ObjectState*) noexcept {
    auto* f = static_cast<ResultForwarder*>(self);
    f->c_->forward_result(f->owner_, f->task_, f->result_);
    delete f;
  }

 private:
  Cluster* c_;
  Rank owner_;
  TaskId task_;
  ObjectState* result_;  // one reference, released by forward_result
};

Cluster::Cluster(Transport& transport, LocalScheduler& local, EventLog* events, std::span<std::byte> arena,
                 std::unique_ptr<MemoryRegistration> arena_registration, Config config)
    : transport_(transport),
      local_(local),
      events_(events),
      config_(std::move(config)),
      self_(transport.rank()),
      size_(transport.size()),
      arena_(arena),
      arena_registration_(std::move(arena_registration)),
      arena_alloc_(arena.size()),
      gs_(self_, size_, config_.node_resources) {
  outboxes_.reserve(static_cast<std::size_t>(size_));
  for (int i = 0; i < size_; ++i) outboxes_.push_back(std::make_unique<Outbox>());
  is_scheduler_ = !config_.roles.schedulers_on(self_).empty();
  control_ = std::make_unique<ControlPlane>(self_, config_.roles);
  transport_.set_message_handler([this](Rank from, std::span<const std::byte> bytes) { handle_message(from, bytes); });
  lost_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size_));
  lost_seen_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size_));
  lost_queued_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size_));
  keep_specs_ = std::string_view(transport_.name()) == "ucx";
  for (int r = 0; r < size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const bool mapped = r != self_.value && i < config_.peer_arenas.size() && !config_.peer_arenas[i].empty();
    node_peers_ += mapped;
    peer_pages_.push_back(mapped ? std::make_unique<PeerArenaPages>(config_.peer_arenas[i]) : nullptr);
  }
  readers_need_progress_ = node_peers_ + 1 < static_cast<std::size_t>(size_);
  // Where ranks of this node map the arena, they read a copy there with one memcpy
  // and need no progress here: such values stay copies. (On the project's VM a node
  // peer's get of a registered value ran at 4.0-5.1 GB/s, the copy at 4.0-4.5, and
  // the get keeps this rank's progress thread polling: UCX 1.13 gives endpoints in
  // peer error mode no cross-memory attach, only sysv and posix RMA lanes.) Where
  // every reader goes through the transport, the copy into the arena is a pass over
  // the bytes that the registration saves.
  expose_ = config_.expose_bytes != 0 && transport_.exposes_any_memory() && node_peers_ == 0;
  if (std::atomic<std::uint32_t>* word = transport_.wake_word()) sleep_word_ = word;
  transport_.set_failure_handler([this](Rank peer, const Status& why) { on_rank_lost(peer, why); });
}

Rank Cluster::scheduler() const noexcept {
  const Rank mine = config_.roles.scheduler_for(self_);
  if (!any_lost_.load(std::memory_order_acquire) || !rank_lost(mine)) return mine;
  // Its scheduler died: the next live one in the list takes its place.
  const auto& all = config_.roles.schedulers;
  const auto at = std::find(all.begin(), all.end(), mine);
  const std::size_t start = at == all.end() ? 0 : static_cast<std::size_t>(at - all.begin());
  for (std::size_t k = 1; k <= all.size(); ++k) {
    const Rank r = all[(start + k) % all.size()];
    if (!rank_lost(r)) return r;
  }
  return self_;  // none is left: this rank places its own work
}

bool Cluster::rank_lost(Rank rank) const noexcept {
  return rank.value >= 0 && rank.value < size_ && lost_[static_cast<std::size_t>(rank.value)].load(std::memory_order_acquire);
}

void Cluster::on_rank_lost(Rank peer, const Status& why, bool announce) {
  if (peer.value < 0 || peer.value >= size_ || lost_seen_[static_cast<std::size_t>(peer.value)].exchange(true)) return;
  // Dead to the global scheduler before it counts as lost (rank_lost, below): its
  // choose, sole and silent skip the rank from then on with no check of their own.
  gs_.mark_dead(peer);
  // Rebuilds are registered before the rank counts as lost anywhere, so that a call
  // made once a failure is seen waits for its actor's rebuild instead of failing.
  detail::actors_rank_lost(peer.value);
  lost_[static_cast<std::size_t>(peer.value)].store(true, std::memory_order_release);
  any_lost_.store(true, std::memory_order_release);
  // Actor results whose pull from it failed before the loss was known: they wait for
  // their actor's replay, or are lost.
  for (ObjectState* o : actor_results_.rank_lost(peer, replay_pending)) {
    relocated(o, std::nullopt, lost_error(o, fmt::format("its only copy was on rank {}, which died, and its actor is "
                                                         "not rebuilt with its calls replayed", peer.value)));
    o->release();
  }
  // A rank declared dead may only be hung: transfers from it must not wait on it.
  transport_.disconnect(peer);
  // Found here (the transport failed): every other rank learns it now, not only when
  // it next talks to the dead one; it is dead for the whole job from now on.
  if (announce && end_code_.load(std::memory_order_acquire) == kNoEnd) {
    send_to_live_ranks(encode_rank_death({peer.value, fmt::format("{} (seen by rank {})", why.message(), self_.value)}));
  }
  // Proxies that asked the dead rank where their object's copy is get no answer.
  std::vector<ObjectState*> orphans;
  {
    std::lock_guard lock(directory_mutex_);
    for (auto& [id, o] : directory_) {
      DistInfo* d = o->dist();
      if (!d || !d->proxy || d->owner != peer) continue;
      std::lock_guard dl(d->mutex);
      if (d->relocating && o->try_add_ref()) orphans.push_back(o);
    }
  }
  for (ObjectState* o : orphans) {
    relocated(o, std::nullopt, lost_error(o, fmt::format("its owner, rank {}, died before it said where a copy is", peer.value)));
    o->release();
  }
  // Once the end is announced, ranks leaving are expected.
  const bool ended = end_code_.load(std::memory_order_acquire) != kNoEnd;
  // Its control shards move to live ranks (empty: the tables refill from new records).
  for (int i : control_->rank_lost(peer, size_, [this](Rank r) { return rank_lost(r); })) {
    if (ended) continue;
    std::fprintf(stderr, "brisk: rank %d: control shard %d moved here from rank %d, which was lost (its tables start empty)\n",
                 self_.value, i, peer.value);
  }
  if (!ended) std::fprintf(stderr, "brisk: rank %d: rank %d was lost: %s\n", self_.value, peer.value, why.message().c_str());
  // Tasks that ran or waited there run again elsewhere (ucx) or fail; calls on
  // actors there fail.
  fail_pending_on(peer);
  if (!ended) restore_saved_on(peer);
  lost_queued_[static_cast<std::size_t>(peer.value)].store(true, std::memory_order_release);
  if (peer.value == 0 && self_.value != 0) {
    // Rank 0 leaving after it announced the end is no loss of the driver.
    int none = kNoEnd;
    if (end_code_.compare_exchange_strong(none, kDriverLost, std::memory_order_acq_rel)) wake_main();
  }
  if (loss_handler_ && end_code_.load(std::memory_order_acquire) == kNoEnd) loss_handler_(peer);
}

void Cluster::check_heartbeats(std::chrono::steady_clock::time_point now) {
  const std::chrono::steady_clock::duration timeout = keep_specs_ ? config_.failure_timeout : config_.fatal_timeout;
  // Silence counts only while this rank listened. Where it did not come here for a
  // quarter of the timeout or more (its progress thread held up, the process or the
  // machine stalled), the others' heartbeats may be waiting in its own queue: that
  // gap, less two heartbeat intervals, is no silence of theirs. (Shorter delays of a
  // busy loop count in full, so that they cannot put off finding a dead rank.)
  auto unheard = std::chrono::steady_clock::duration::zero();
  if (last_heartbeat_check_ != std::chrono::steady_clock::time_point{}) {
    const auto gap = now - last_heartbeat_check_;
    if (gap >= std::max<std::chrono::steady_clock::duration>(timeout / 4, 3 * config_.heartbeat)) {
      unheard = gap - 2 * config_.heartbeat;
      scheduler_stalls_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  last_heartbeat_check_ = now;
  std::vector<int> silent = gs_.silent(now, unheard, timeout);
  if (!keep_specs_ && !silent.empty() && end_code_.load(std::memory_order_acquire) == kNoEnd) {
    // This transport cannot run through a failure: end the job now rather than hang.
    config_.fatal(fmt::format("rank {} sent no heartbeat for {} ms: it died or hangs, and the mpi transport cannot "
                              "run through a failure (--brisk-transport=ucx can)",
                              silent.front(), config_.fatal_timeout.count()));
    return;
  }
  // A rank whose heartbeats go through a shard on another silent rank is silent
  // because of that rank: only the others are declared dead now, and everyone gets
  // a fresh window once they are (the shards move, the heartbeats resume).
  const std::vector<int> all_silent = silent;
  std::erase_if(silent, [&](int r) {
    const Rank host = control_->status_host(Rank{r});
    return host.value != r && std::find(all_silent.begin(), all_silent.end(), host.value) != all_silent.end();
  });
  if (silent.empty()) silent = all_silent;  // they explain each other: no telling, all go
  if (!silent.empty()) gs_.heard_all(now);
  for (int r : silent) {
    const std::string why = fmt::format("no heartbeat for {} ms (declared dead by the global scheduler on rank {})",
                                        config_.failure_timeout.count(), self_.value);
    send_to_live_ranks(encode_rank_death({r, why}));
    on_rank_lost(Rank{r}, unavailable(why), false);
  }
}

void Cluster::fail_pending_on(Rank peer) {
  std::vector<std::pair<TaskId, Pending>> lost, replay;
  std::vector<ObjectState*> replayed_calls, rebuilt_calls;
  {
    std::lock_guard lock(pending_mutex_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      const bool there = it->second.lineage.executor == peer;
      if (!there && !it->second.placed_elsewhere) {
        ++it;
      } else if (there && it->second.actor_replay && it->second.rebuild) {
        // A replayed call making a result again died with its new rank too.
        rebuilt_calls.push_back(it->second.result);
        it = pending_.erase(it);
      } else if (there && it->second.actor_replay &&
                 detail::actor_replays(it->second.actor, it->second.actor_incarnation)) {
        // The rebuilt actor runs the call again and completes its result.
        replayed_calls.push_back(it->second.result);
        it = pending_.erase(it);
      } else if (it->second.task) {
        // Runs again elsewhere; a result that still comes from an earlier run is dropped.
        {
          std::lock_guard rl(replayed_mutex_);
          replayed_.insert(it->first);
        }
        replay.emplace_back(it->first, it->second);
        it = pending_.erase(it);
      } else if (there) {
        lost.emplace_back(it->first, it->second);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    awaited_.store(pending_.size(), std::memory_order_relaxed);
  }
  for (ObjectState* o : replayed_calls) o->release();
  for (ObjectState* o : rebuilt_calls) {
    if (actor_results_.rebuild_lost(o, replay_pending)) continue;  // the next rebuild's replay makes it
    relocated(o, std::nullopt, lost_error(o, fmt::format("rank {}, which was making it again, was lost", peer.value)));
    o->release();
  }
  tasks_replayed_.fetch_add(replay.size(), std::memory_order_relaxed);
  for (auto& [id, p] : replay) reship(p.task, p.result, p.rebuild);
  for (auto& [id, p] : lost) {
    if (p.result->ready()) {  // an actor call whose failed rebuild failed it already
      p.result->release();
      continue;
    }
    p.result->complete_error(make_error(ErrorKind::kRankLost, fmt::format("rank {} was lost while it held the task", peer.value),
                                        p.name ? p.name : "?", peer.value));
    p.result->release();
  }
}

void Cluster::abandon(TaskBase* task, bool rebuild, std::shared_ptr<const ErrorInfo> why) noexcept {
  if (rebuild) {
    ObjectState* result = task->take_result();
    if (result) {
      relocated(result, std::nullopt, why->kind == ErrorKind::kObjectLost ? why : lost_error(result, why->message));
      result->release();
    }
  } else {
    task->cancel(std::move(why));
  }
  delete task;
}

void Cluster::reship(TaskBase* task, ObjectState* result, bool rebuild) noexcept {
  task->restore_result(result);
  const Rank gs = scheduler();
  if (gs != self_) {
    ship(task, gs, true, rebuild);
    return;
  }
  std::vector<ObjectState*> args;
  task->arg_objects(args);
  const auto* demand = task->resources();
  const Rank to = choose_node(demand ? *demand : kNoDemand, locality_hints(args));
  if (to.value < 0) {
    // A rebuilt object is complete already: it is lost, not failed.
    abandon(task, rebuild,
            make_error(rebuild ? ErrorKind::kObjectLost : ErrorKind::kRankLost,
                       "no live rank can meet its resource demand to run it again", task->name(), self_.value));
    return;
  }
  // Shipped even to this rank, so that the result comes back as a result.
  ship(task, to, false, rebuild);
}

void Cluster::send_to_live_ranks(std::span<const std::byte> control) {
  for (int r = 0; r < size_; ++r) {
    if (r != self_.value && !rank_lost(Rank{r})) {
      send_frame(Rank{r}, FrameKind::kControl, std::vector<std::byte>(control.begin(), control.end()));
    }
  }
}

void Cluster::announce_actor_moved(TaskId actor, Rank rank, std::uint32_t incarnation) noexcept {
  send_to_live_ranks(encode_actor_moved({actor, rank.value, incarnation}));
}

void Cluster::announce_end(int code, bool blocked) {
  if (blocked) blocked_end_.store(true, std::memory_order_release);
  end_code_.store(code, std::memory_order_release);  // ranks leaving from now on are expected
  wake_main();
  // Whether a rank died (the others may not have heard of it yet) or is blocked.
  send_to_live_ranks(encode_end({code, leave_without_mpi()}));
}

void Cluster::announce_checkpoint(std::uint64_t sequence, const std::string& tag) {
  send_to_live_ranks(encode_checkpoint_request({sequence, tag}));
}

void Cluster::send_checkpoint_report(std::span<const std::byte> report) {
  std::vector<std::byte> p{std::byte{kCtlCheckpointReport}};
  p.insert(p.end(), report.begin(), report.end());
  send_frame(Rank{0}, FrameKind::kControl, std::move(p));
}

void Cluster::wake_main() noexcept {
  main_wake_.fetch_add(1, std::memory_order_seq_cst);
  detail::futex_wake(&main_wake_, 1);
}

int Cluster::wait_for_end(const std::function<void(std::uint64_t, const std::string&)>& on_checkpoint) {
  int code;
  for (;;) {
    // Read before the checks: a change after them bumps it, and the wait returns at once.
    const std::uint32_t seen = main_wake_.load(std::memory_order_seq_cst);
    if ((code = end_code_.load(std::memory_order_acquire)) != kNoEnd) break;
    std::uint64_t seq = 0;
    std::string tag;
    {
      std::lock_guard lock(checkpoint_mutex_);
      seq = std::exchange(checkpoint_sequence_, 0);
      tag = std::move(checkpoint_tag_);
    }
    if (seq && on_checkpoint) {
      on_checkpoint(seq, tag);
      continue;
    }
    // Nothing to poll here: the progress thread and polling workers move the
    // transport. Sleeping until woken keeps this thread off the workers' cores (it
    // woke every 2 ms to poll before). The timeout is a safety net.
    detail::futex_wait(&main_wake_, seen, std::chrono::milliseconds(100));
  }
  return code;
}

// The arena as Array storage (see detail::SharedMemory). Never deleted: arrays made
// in it may be freed after the Cluster is gone, and must then be recognised.
class Cluster::ArenaMemory final : public detail::SharedMemory {
 public:
  ArenaMemory(std::span<std::byte> arena, ArenaAllocator* allocator, std::size_t min)
      : base_(arena.data()), size_(arena.size()), allocator_(allocator) {
    min_bytes = min;
  }
  void* allocate(std::size_t bytes) noexcept override {
    ArenaAllocator* a = allocator_.load(std::memory_order_acquire);
    // Arrays and values placed by operator new take at most half the arena: the rest
    // is for copies of other objects.
    if (!a || a->used() + bytes > size_ / 2) return nullptr;
    try {
      auto offset = a->allocate(bytes);
      return offset ? base_ + *offset : nullptr;
    } catch (...) {
      return nullptr;
    }
  }
  bool contains(const void* p) const noexcept override {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= base_ && b < base_ + size_;
  }
  bool release(void* p) noexcept override {
    auto* b = static_cast<std::byte*>(p);
    if (!contains(b)) return false;
    if (ArenaAllocator* a = allocator_.load(std::memory_order_acquire)) a->free(static_cast<std::uint64_t>(b - base_));
    return true;
  }
  void retire() noexcept { allocator_.store(nullptr, std::memory_order_release); }

 private:
  std::byte* base_;
  std::size_t size_;
  std::atomic<ArenaAllocator*> allocator_;
};

Cluster::~Cluster() {
  if (shared_memory_) {
    detail::set_shared_memory(nullptr);
    shared_memory_->retire();
  }
  stop();
  transport_.set_message_handler([](Rank, std::span<const std::byte>) {});
  transport_.set_failure_handler([](Rank, const Status&) {});
}

void Cluster::start() {
  if (running_.exchange(true)) return;
  if (arena_registration_ && !arena_.empty()) {
    shared_memory_ = new ArenaMemory(arena_, &arena_alloc_, std::max<std::size_t>(config_.inline_bytes + 1, 4096));
    detail::set_shared_memory(shared_memory_);
    if (config_.arena_new_bytes && config_.arena_shared) {
      (void)detail::set_new_memory(shared_memory_, arena_, config_.arena_new_bytes);
    }
  }
  if (is_scheduler_) control_->subscribe_nodes();  // reaches every shard
  progress_ = std::thread([this] { progress_main(); });
}

void Cluster::stop() {
  {
    std::lock_guard lock(restore_mutex_);
    restore_stop_ = true;
  }
  restore_cv_.notify_all();
  if (restorer_.joinable()) restorer_.join();  // it finishes the restores queued
  if (!running_.exchange(false)) return;
  wake_progress();
  progress_.join();
}

// ---------------------------------------------------------------------------
// Progress.

void Cluster::progress_main() {
  t_on_progress_thread = true;
  detail::PrivateArrays private_memory;  // its buffers and tables are the runtime's: not in the arena
  detail::set_os_thread_name("brisk-progress");
  if (events_) events_->set_thread_name("progress");
  Clock::time_point last_activity = Clock::now();
  Clock::time_point next_heartbeat = Clock::now();
  std::chrono::microseconds nap{20};
  Clock::duration stand_back_nap = kStandBackNap;
  std::uint64_t other_polls_seen = other_polls_.load(std::memory_order_relaxed);
  std::uint64_t idle_polls_seen = other_polls_seen;
  while (running_.load(std::memory_order_acquire)) {
    int n = 0;
    // A thread waiting for a pull polls itself: stay out of its way (on a shared
    // core, holding the transport while descheduled would stall it for a time slice).
    if (waiting_pollers_.load(std::memory_order_relaxed) == 0 && progress_mutex_.try_lock()) {
      n = transport_.progress();
      n += flush_outboxes(false);
      progress_mutex_.unlock();
    }
    const Clock::time_point now = Clock::now();
    local_.wake_overdue(now);  // a deferred wake-up of the driver, held by workers busy with long tasks
    if (now >= next_heartbeat) {
      heartbeat();
      if (is_scheduler_ && (keep_specs_ || config_.fatal)) check_heartbeats(now);
      next_heartbeat = now + config_.heartbeat;
    }
    std::vector<NodeStatus> local_nodes;
    for (const auto& out : control_->flush(now, false, &local_nodes)) send_control_state(out);
    apply_node_statuses(local_nodes);
    const auto since = [&](const std::atomic<std::int64_t>& ticks, Clock::time_point t) {
      return t - Clock::time_point(Clock::duration(ticks.load(std::memory_order_seq_cst)));
    };
    // Results of tasks sent to other ranks are awaited, within kAwaitWindow of the last.
    const auto awaiting_at = [&](Clock::time_point t) {
      return awaited_.load(std::memory_order_seq_cst) > 0 && since(last_shipped_, t) < kAwaitWindow;
    };
    // This rank's pulls are in flight, or it holds exports read through the transport.
    const auto transfers_need_polling = [&] {
      return fetches_in_flight_.load(std::memory_order_seq_cst) > 0 ||
             (readers_need_progress_ && exported_.load(std::memory_order_seq_cst) > 0);
    };
    // Stand back: the workers share their cores with this thread, and one of them is
    // awake and polls (between tasks, or spinning for work). Polling here too would
    // take turns with it on its core: each turn a context switch, and a poll that
    // holds the transport while the MPI library yields the core keeps the worker
    // from polling meanwhile. So sleep until a heartbeat is due, a poster has
    // deferred sends, the last awake worker stops polling (worker_sleeping),
    // something below starts (wake_standing_back), or kStandBackNap passes. Not while
    // this rank's own pulls, exports read through the transport, or awaited results
    // need a poller that is always near (see below), nor while it runs tasks for
    // other ranks (within kAwaitWindow of the last): their results and the next
    // tasks flow best with a poller beside the workers (measured: throughput across
    // ranks fell by a quarter when this thread stood back there).
    const auto may_stand_back = [&](Clock::time_point t) {
      return config_.workers_poll && local_.worker_awake() && !awaiting_at(t) &&
             since(last_served_, t) >= kAwaitWindow && !transfers_need_polling();
    };
    if (may_stand_back(now)) {
      if (n > 0) last_activity = now;
      const std::uint64_t polls = other_polls_.load(std::memory_order_relaxed);
      // No poll since the last nap: the workers run long tasks, and none of them
      // would see a message from the node until it ends.
      const bool unpolled = polls == other_polls_seen;
      stand_back_nap = unpolled ? Clock::duration(kStandBackNap)
                                : std::min<Clock::duration>(stand_back_nap * 2, kStandBackNapMax);
      other_polls_seen = polls;
      const auto until = std::min(next_heartbeat, now + stand_back_nap);
      standing_back_.store(true, std::memory_order_seq_cst);
      // Checked again after the flags are up: a change that wake_standing_back saw
      // no flag for is seen here (both sides fence).
      progress_sleep(unpolled ? Transport::kAsleepUntilMessage : Transport::kAsleep, until - now,
                     [&] { return may_stand_back(Clock::now()); });
      nap = std::chrono::microseconds(20);
      continue;
    }
    standing_back_.store(false, std::memory_order_relaxed);
    stand_back_nap = kStandBackNap;
    // Another thread of this rank spins on poll() while it waits (a driver in get, a
    // puller): it takes up what arrives, so nap rather than take turns with it on a
    // shared core. Each turn is a context switch, and where MPI yields the core on
    // a poll that finds nothing (mpi_yield_when_idle) the two handed the core back
    // and forth after every poll, some 3 us a turn on the 2-core VMs.
    if (config_.nap_beside_waiters && spin_pollers_.load(std::memory_order_seq_cst) > 0) {
      if (n > 0) last_activity = now;
      const auto until = std::min<Clock::time_point>(next_heartbeat, now + kSpinnerNap);
      napping_for_spinners_.store(true, std::memory_order_seq_cst);
      // Checked again after the flags are up (spin_end changes the count, then looks
      // at them; all seq_cst).
      progress_sleep(Transport::kAsleep, until - now, [&] { return spin_pollers_.load(std::memory_order_seq_cst) > 0; });
      napping_for_spinners_.store(false, std::memory_order_relaxed);
      nap = std::chrono::microseconds(20);
      continue;
    }
    if (n > 0) {
      last_activity = now;
      nap = std::chrono::microseconds(20);
      continue;
    }
    // Idle: yield rather than spin, so that a driver or worker sharing the core
    // (which polls the transport itself while it waits) gets it at once. Never nap
    // while this rank's one-sided reads are in flight or it holds bytes that others
    // may read through the transport: here (Open MPI 4.1 over shared memory, UCX over
    // TCP) a get moves only as both the reader and the holder poll. (Ranks that map
    // this rank's arena read it without the holder.) Nor while results of tasks sent
    // to other ranks are awaited, for kAwaitWindow after the last was sent: the thread
    // that waits for one sleeps after a short spin, and a napping progress thread
    // would leave a short task's result unread for up to a nap (a long task's result
    // may wait for one).
    // While every worker of this rank runs a task, the core belongs to them: the
    // scheduler shares a core between a yielding thread and a running one, so a
    // yielding progress thread would take about half of a worker's time. Sleep
    // briefly instead; a worker that runs out of work polls the transport itself.
    const bool workers_busy = local_.running() >= local_.workers();
    if (!workers_busy && (now - last_activity < config_.spin * 4 || transfers_need_polling() || awaiting_at(now))) {
      sched_yield();
      continue;
    }
    if (workers_busy) nap = std::min<std::chrono::microseconds>(nap, std::chrono::microseconds(100));
    // Idle: short sleeps, growing to 1 ms; a poster with deferred work wakes us, and
    // so does a message from this node (where the transport has a wake word), unless
    // other threads of this rank polled since the last nap (workers between tasks,
    // a driver spinning in get): they take up what comes, and a wake-up beside them
    // only takes turns with them on their cores (four ranks on two cores over mpi:
    // the median remote e2e went from 13-33 to 38-45 us when every message woke it).
    const std::uint64_t polls = other_polls_.load(std::memory_order_relaxed);
    const bool others_polled = polls != idle_polls_seen;
    idle_polls_seen = polls;
    if (progress_sleep(others_polled ? Transport::kAsleep : Transport::kAsleepUntilMessage, nap, [] { return true; }) > 0) {
      last_activity = Clock::now();
      nap = std::chrono::microseconds(20);
      continue;
    }
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
  }
  // Last flush so that nothing queued is lost on an orderly stop.
  flush_outboxes(true);
  t_on_progress_thread = false;
}

int Cluster::poll_after_task() noexcept {
  // Also while the progress thread naps for a waiting thread (which may have stopped
  // polling since: what it waited for came).
  return standing_back_.load(std::memory_order_relaxed) || napping_for_spinners_.load(std::memory_order_relaxed)
             ? poll()
             : 0;
}

void Cluster::worker_sleeping() noexcept {
  // Others still awake poll on; the last one to stop wakes the progress thread.
  if (config_.workers_poll && !local_.worker_awake()) wake_standing_back();
}

void Cluster::spin_begin() noexcept {
  if (config_.nap_beside_waiters) spin_pollers_.fetch_add(1, std::memory_order_seq_cst);
}

void Cluster::spin_end(bool to_sleep) noexcept {
  if (!config_.nap_beside_waiters) return;
  if (spin_pollers_.fetch_sub(1, std::memory_order_seq_cst) != 1) {
    // Others spin on; once the last of them stops, this sleeper needs the progress thread.
    if (to_sleep) waiter_asleep_.store(true, std::memory_order_seq_cst);
    return;
  }
  // The last spinner stops: the progress thread polls again at once if a waiter went to
  // sleep (this one or one before) or a batch waits for a poll (post() left it to the
  // spinners), not at the end of its nap.
  const bool asleep = waiter_asleep_.exchange(false, std::memory_order_seq_cst);
  if (!to_sleep && !asleep && !deferred_.load(std::memory_order_seq_cst)) return;
  if (napping_for_spinners_.load(std::memory_order_seq_cst)) wake_progress();
}

void Cluster::wake_standing_back() noexcept {
  // The caller's change (a counter or time stamp, stored before) is visible to the
  // progress thread's second look, or this sees its flags.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (standing_back_.load(std::memory_order_seq_cst)) wake_progress();
}

void Cluster::wake_progress() noexcept {
  if (sleep_word_->load(std::memory_order_seq_cst) != Transport::kAwake) {
    sleep_word_->store(Transport::kAwake, std::memory_order_relaxed);
    if (sleep_word_ != &progress_sleeping_) {
      detail::futex_wake_shared(sleep_word_, 1);
    } else {
      detail::futex_wake(sleep_word_, 1);
    }
  }
}

template <class MaySleep>
int Cluster::progress_sleep(std::uint32_t state, Clock::duration most, MaySleep may_sleep) {
  sleep_word_->store(state, std::memory_order_seq_cst);
  bool sleep = !deferred_.load(std::memory_order_seq_cst) && may_sleep();
  // A node peer's message handed over before the word was up woke no one: look once
  // more now that it is (the sender fences, then reads the word).
  int found = 0;
  const bool shared = sleep_word_ != &progress_sleeping_;
  if (sleep && state == Transport::kAsleepUntilMessage && shared && progress_mutex_.try_lock()) {
    found = transport_.progress();
    progress_mutex_.unlock();
    sleep = found == 0;
  }
  if (sleep) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(most, Clock::duration::zero()));
    if (shared) {
      detail::futex_wait_shared(sleep_word_, state, ns);
    } else {
      detail::futex_wait(sleep_word_, state, ns);
    }
  }
  sleep_word_->store(Transport::kAwake, std::memory_order_relaxed);
  return found;
}

int Cluster::poll() noexcept {
  if (!running_.load(std::memory_order_relaxed) || !progress_mutex_.try_lock()) return 0;
  // Workers (between tasks or spinning) and waiting threads poll here, the progress
  // thread does not: while these polls go on, its stand-back nap may grow. (Counted
  // under the transport's lock: a poll that finds it taken finds another poller.)
  other_polls_.store(other_polls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  const bool was = t_on_progress_thread;
  t_on_progress_thread = true;  // handlers run here: no blocking calls
  detail::PrivateArrays private_memory;  // the transport's buffers, as on the progress thread
  int n = transport_.progress();
  n += flush_outboxes(false);
  t_on_progress_thread = was;
  progress_mutex_.unlock();
  return n;
}

int Cluster::flush_outboxes(bool all) {
  if (!all && !deferred_.exchange(false, std::memory_order_acq_rel)) return 0;
  int sent = 0;
  const auto now = Clock::now();
  (void)now;
  for (int r = 0; r < size_; ++r) {
    Outbox& ob = *outboxes_[static_cast<std::size_t>(r)];
    std::lock_guard lock(ob.mutex);
    for (int k = 0; k < 3; ++k) {
      if (ob.batch[k].empty()) continue;
      send_frame(Rank{r}, Outbox::kind_of(k), std::exchange(ob.batch[k], {}));
      ++sent;
    }
  }
  return sent;
}

void Cluster::post(Rank to, FrameKind kind, std::span<const std::byte> record) {
  Outbox& ob = *outboxes_[static_cast<std::size_t>(to.value)];
  const auto now = Clock::now();
  std::lock_guard lock(ob.mutex);
  auto& batch = ob.batch[Outbox::slot(kind)];
  append_record(batch, record);
  if (now - ob.window_start > kBurstWindow) {
    ob.window_start = now;
    ob.sent_in_window = 0;
  }
  if (batch.size() >= kBatchBytes ||
      (ob.sent_in_window < kBurstSends && transport_.sends_in_flight(to) < kMaxSendsInFlight) ||
      !running_.load(std::memory_order_relaxed)) {
    send_frame(to, kind, std::exchange(batch, {}));
    ++ob.sent_in_window;
    return;
  }
  deferred_.store(true, std::memory_order_seq_cst);
  // A thread spinning on poll() sends the batch at its next poll.
  if (spin_pollers_.load(std::memory_order_seq_cst) > 0 && napping_for_spinners_.load(std::memory_order_seq_cst)) return;
  wake_progress();
}

void Cluster::send_frame(Rank to, FrameKind kind, std::vector<std::byte> payload) {
  send_parts(to, kind, {}, payload);
}

void Cluster::send_parts(Rank to, FrameKind kind, std::span<const std::byte> head, std::span<const std::byte> body) {
  send_sealed(to, kind, encode_frame(kind, head, body));
}

void Cluster::send_sealed(Rank to, FrameKind kind, std::vector<std::byte> frame) {
  if (any_lost_.load(std::memory_order_relaxed) && rank_lost(to)) return;  // nobody to read it
  Status st = transport_.send(to, std::move(frame));
  frames_sent_.fetch_add(1, std::memory_order_relaxed);
  // kUnavailable: the peer died, which the failure handler reports once.
  if (!st.ok() && st.code() != StatusCode::kUnavailable) {
    std::fprintf(stderr, "brisk: rank %d: a %s message to rank %d was not sent: %s\n", self_.value,
                 frame_kind_name(kind), to.value, st.message().c_str());
  }
}

void Cluster::send_control_state(const Outgoing& out) {
  std::vector<std::byte> payload;
  payload.reserve(out.payload.size() + 1);
  payload.push_back(std::byte{kCtlState});
  payload.insert(payload.end(), out.payload.begin(), out.payload.end());
  send_frame(out.to, FrameKind::kControl, std::move(payload));
}

void Cluster::malformed(Rank from, const std::string& why) {
  const auto n = malformed_.fetch_add(1, std::memory_order_relaxed);
  if (n < 10) {
    std::fprintf(stderr, "brisk: rank %d: dropped a malformed message from rank %d: %s\n", self_.value, from.value,
                 why.c_str());
  }
}

void Cluster::handle_message(Rank from, std::span<const std::byte> bytes) {
  auto frame = decode_frame(bytes);
  if (!frame.ok()) {
    malformed(from, frame.status().message());
    return;
  }
  bool ok = true;
  switch (frame->kind) {
    case FrameKind::kTask:
      ok = for_each_record(frame->payload, [&](std::span<const std::byte> r) { handle_task(from, r); });
      break;
    case FrameKind::kResult:
      ok = for_each_record(frame->payload, [&](std::span<const std::byte> r) { handle_result(from, r); });
      break;
    case FrameKind::kRefCount:
      ok = for_each_record(frame->payload, [&](std::span<const std::byte> r) { handle_refcount(from, r); });
      break;
    case FrameKind::kControl:
      handle_control(from, frame->payload);
      break;
    case FrameKind::kData:
      if (data_handler_) {
        data_handler_(from, frame->payload);
        return;
      }
      malformed(from, "a data message, and this rank has no data plane");
      return;
    default:
      malformed(from, fmt::format("unexpected {} frame", frame_kind_name(frame->kind)));
      return;
  }
  if (!ok) malformed(from, fmt::format("a {} batch has a truncated record", frame_kind_name(frame->kind)));
}

// ---------------------------------------------------------------------------
// Executor: local or elsewhere.

void Cluster::submit(TaskBase* task) noexcept {
  if (size_ > 1 && !task->placed()) {
    const auto* demand = task->resources();
    const bool must_move = demand && !local_.can_ever_run(*demand);
    const bool actor = task->options() && task->options()->actor_creation;
    // Work waits here while another rank has an idle core (as this rank's global
    // scheduler last heard): let the scheduler place it (only where that scheduler
    // is this rank, so no message is spent to find out).
    const Rank gs = scheduler();
    const bool balance = gs == self_ && local_.queued() > 0 && idle_elsewhere_.load(std::memory_order_relaxed);
    if (must_move || actor || balance || local_.queued() >= config_.spill_queue) {
      if (gs != self_) {
        // Only one live rank can ever run it (a `rankN` resource, say): it goes there
        // at once, with no stop at the global scheduler, which could choose no other.
        const Rank only = must_move && !actor ? gs_.sole(*demand) : Rank{-1};
        if (only.value >= 0) {
          ship(task, only, false);
          return;
        }
        ship(task, gs, true);
        return;
      }
      // This rank is the global scheduler: place before encoding anything.
      std::vector<ObjectState*> args;
      task->arg_objects(args);
      const Rank to = choose_node(demand ? *demand : kNoDemand, locality_hints(args), actor);
      if (to.value < 0) {
        task->cancel(make_error(ErrorKind::kInfeasible, "no live rank can meet its resource demand", task->name(),
                                self_.value));
        delete task;
        return;
      }
      tasks_placed_.fetch_add(1, std::memory_order_relaxed);
      if (to != self_) {
        ship(task, to, false);
        return;
      }
    }
  }
  run_here(task);
}

std::vector<std::pair<int, std::uint64_t>> Cluster::locality_hints(const std::vector<ObjectState*>& args) const {
  std::vector<std::pair<int, std::uint64_t>> hints;
  for (ObjectState* o : args) {
    if (o->has_error() || o->bytes() <= config_.inline_bytes) continue;
    DistInfo* d = o->dist();
    int holder = self_.value;
    if (o->residency() == Residency::kRemote && d) {
      std::lock_guard lock(d->mutex);
      if (d->copy) holder = d->copy->region.owner.value;
    }
    hints.emplace_back(holder, o->bytes());
  }
  return hints;
}

void Cluster::run_here(TaskBase* task) noexcept {
  std::vector<ObjectState*> args;
  task->arg_objects(args);
  std::vector<ObjectState*> remote;
  std::uint64_t remote_bytes = 0;
  for (ObjectState* o : args) {
    if (!o->has_error() && o->residency() == Residency::kRemote && !pull_is_local_copy(o)) {
      remote.push_back(o);
      remote_bytes += o->bytes();
    }
  }
  // Small pulls are made by the worker that runs the task, when it pins its
  // arguments: it is awake and polls the transport while the bytes come, so nothing
  // is handed from thread to thread. Large ones are prefetched before the task is
  // queued, so that no worker waits through them. A copy from memory this rank maps
  // (its own arena, a node peer's) is the worker's at any size: it is a memcpy, and
  // here, on the thread that handles the rank's messages, 256 MiB of it held up
  // every message and heartbeat of the rank for 0.3-0.5 s (seconds under load).
  if (remote.empty() || remote_bytes <= kWorkerPullBytes) {
    local_.submit(task);
    return;
  }
  // Pull the remote arguments first; the task is queued once all are here.
  struct Gather {
    std::atomic<int> left;
    std::mutex mutex;
    Status first_error;
    std::shared_ptr<const ErrorInfo> lost;  // an argument that is lost for good
  };
  auto g = std::make_shared<Gather>();
  g->left.store(static_cast<int>(remote.size()));
  for (ObjectState* o : remote) {
    fetch_async(o, [this, g, task, o](const Status& st) {
      if (!st.ok()) {
        std::shared_ptr<const ErrorInfo> lost;
        {
          std::lock_guard lock(o->dist()->mutex);
          lost = o->dist()->lost;
        }
        std::lock_guard lock(g->mutex);
        if (g->first_error.ok()) {
          g->first_error = st;
          g->lost = std::move(lost);
        }
      }
      if (g->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      if (g->first_error.ok()) {
        local_.submit(task);
      } else if (g->lost) {
        task->cancel(g->lost);
        delete task;
      } else {
        task->cancel(make_error(ErrorKind::kTaskFailed,
                                fmt::format("an argument could not be fetched: {}", g->first_error.message()),
                                task->name(), self_.value));
        delete task;
      }
    });
  }
}

void Cluster::send_actor_call(TaskBase* task, Rank to) noexcept {
  const detail::ActorCall* call = task->actor_call();
  ship(task, to, false, call && call->rebuild);
}

ObjectState* Cluster::take_actor_result(ObjectId id, TaskId actor, std::uint32_t incarnation) noexcept {
  ObjectState* o = shared_object_ref(id);
  DistInfo* d = o ? o->dist() : nullptr;
  bool take = false;
  if (d && !d->proxy && o->residency() == Residency::kRemote) {
    std::lock_guard lock(d->mutex);
    // The rebuild's replay may run before its rank counts as lost (on_rank_lost
    // rebuilds actors first): a loss being handled counts. A relocation under way
    // that the object did not wait in ActorResults for is a checkpoint's read-back.
    const auto seen = [this](Rank r) {
      return r.value >= 0 && r.value < size_ && lost_seen_[static_cast<std::size_t>(r.value)].load(std::memory_order_acquire);
    };
    take = !d->lost && actor_results_.take(id, actor, incarnation, o, seen, d->relocating);
    if (take) d->relocating = true;  // pulls wait for the new copy (relocated())
  }
  if (!take) {
    if (o) o->release();
    return nullptr;
  }
  objects_rebuilt_.fetch_add(1, std::memory_order_relaxed);
  return o;
}

void Cluster::actor_replay_done(TaskId actor) noexcept {
  for (ObjectState* o : actor_results_.replay_done(actor)) {
    relocated(o, std::nullopt,
              lost_error(o, "its only copy died with its actor's rank, and the rebuilt actor's replay did not make it again"));
    o->release();
  }
}

void Cluster::actor_result_lost(ObjectState* o, const std::string& why) noexcept {
  actor_results_.forget(o->id());
  relocated(o, std::nullopt, lost_error(o, why));
}

void Cluster::block_begin() noexcept { local_.block_begin(); }
void Cluster::block_end() noexcept { local_.block_end(); }
int Cluster::current_worker() const noexcept { return local_.current_worker(); }

void Cluster::ship(TaskBase* task, Rank to, bool for_placement, bool rebuild) noexcept {
  // Arguments copied into the arena for a rank that maps it are copied once the task
  // has gone (when this scope ends), while that rank copies them out.
  FillLater later(this, to, !for_placement && maps_arena_here(to));
  Writer w;
  w.reserve(128);
  bool handed = false;  // the pending entry owns the result (and the task, if kept)
  try {
    const TaskId id = task->id();
    const TaskOptions* options = task->options();
    const detail::ActorCall* call = task->actor_call();
    std::optional<ActorCallHeader> call_header;
    if (call) call_header = ActorCallHeader{call->actor, call->caller, call->seq, call->incarnation};
    // Where the arguments' bytes are, for placement by locality.
    std::vector<ObjectState*> args;
    task->arg_objects(args);
    write_task_spec_header(w, for_placement ? kRoutePlace : kRouteRun, id, task->function().value, self_.value, options,
                           call_header ? &*call_header : nullptr, locality_hints(args));
    if (!task->encode_args(w, *this, to)) {
      // A converted argument must be resident here first.
      std::vector<ObjectState*> remote;
      for (ObjectState* o : args) {
        if (o->residency() == Residency::kRemote) remote.push_back(o);
      }
      auto left = std::make_shared<std::atomic<int>>(static_cast<int>(remote.size()));
      for (ObjectState* o : remote) {
        auto failed = std::make_shared<std::atomic<bool>>(false);
        fetch_async(o, [this, task, to, for_placement, rebuild, left, failed, o](const Status& st) {
          if (!st.ok()) failed->store(true);
          if (left->fetch_sub(1) != 1) return;
          if (!failed->load()) {
            ship(task, to, for_placement, rebuild);
            return;
          }
          // An argument could not be made resident: the task cannot be sent.
          std::shared_ptr<const ErrorInfo> lost;
          if (DistInfo* d = o->dist()) {
            std::lock_guard lock(d->mutex);
            lost = d->lost;
          }
          abandon(task, rebuild, lost ? lost : make_error(ErrorKind::kTaskFailed, "an argument could not be fetched",
                                                          task->name(), self_.value));
        });
      }
      return;
    }
    // Lineage goes to the control state (batched, off this path); the owner updates
    // it with the executor when the result comes and forgets it with the object.
    LineageRecord lineage;
    lineage.task = id;
    lineage.function = task->function();
    lineage.owner = self_;
    lineage.executor = for_placement ? self_ : to;
    lineage.args.reserve(args.size());
    for (ObjectState* o : args) lineage.args.push_back(o->id());
    control_->add_lineage(lineage);
    ObjectState* result = task->take_result();
    {
      DistInfo& d = result->ensure_dist();
      std::lock_guard lock(d.mutex);
      d.lineage = true;
    }
    // Where ranks can die without ending the job (ucx), the task is kept to run it
    // again; an actor call cannot run anywhere else.
    const bool keep = keep_specs_ && !task->actor_call();
    {
      std::lock_guard lock(pending_mutex_);
      Pending p{result, task->name(), std::move(lineage), keep ? task : nullptr, rebuild, for_placement, false, TaskId{}, 0};
      // An actor's creation runs once: not again on the death of some other rank.
      if (options && options->actor_creation) p.placed_elsewhere = false;
      if (call && call->logged && keep_specs_) {
        p.actor_replay = true;
        p.actor = call->actor;
        p.actor_incarnation = call->incarnation;
      }
      pending_.emplace(id, std::move(p));
      awaited_.store(pending_.size(), std::memory_order_relaxed);
    }
    handed = true;
    // Otherwise it goes now; lent references stay counted on their objects.
    if (!keep) delete task;
    if (rank_lost(to)) {  // checked after the entry exists: a loss found meanwhile swept it or sweeps now
      fail_pending_on(to);
      return;
    }
    tasks_sent_.fetch_add(1, std::memory_order_relaxed);
    last_shipped_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    wake_standing_back();  // its result is awaited: poll beside the workers
    if (for_placement && to == self_) {
      place(w.bytes());
    } else if (to == self_) {
      handle_task(self_, w.bytes());  // a task run again here
    } else {
      post(to, FrameKind::kTask, w.bytes());
    }
  } catch (const std::exception& e) {
    if (handed) {
      std::fprintf(stderr, "brisk: rank %d: could not send a task to rank %d: %s\n", self_.value, to.value, e.what());
      return;
    }
    if (rebuild) {
      abandon(task, true, make_error(ErrorKind::kObjectLost, fmt::format("could not send it to rank {}: {}", to.value, e.what()),
                                     task->name(), self_.value));
      return;
    }
    task->cancel(make_error(ErrorKind::kTaskFailed, fmt::format("could not send the task to rank {}: {}", to.value, e.what()),
                            task->name(), self_.value));
    delete task;
  }
}

// ---------------------------------------------------------------------------
// Global scheduler.

Rank Cluster::choose_node(const std::map<std::string, double>& demand,
                          const std::vector<std::pair<int, std::uint64_t>>& hints, bool actor) {
  return gs_.choose(demand, hints, local_.queued() + local_.running(), actor);
}

// The task spec's header (wire::read_task_spec_header), its option name interned;
// false (reported) when malformed.
bool Cluster::read_spec_header(Rank from, Reader& r, TaskSpecHeader& h) {
  try {
    h = read_task_spec_header(r, size_);
  } catch (const std::exception& e) {
    malformed(from, fmt::format("task spec: {}", e.what()));
    return false;
  }
  if (h.options && !h.options->name.empty()) h.options->interned_name = intern(h.options->name);
  return true;
}

void Cluster::place(std::span<const std::byte> record) {
  Reader r(record);
  TaskSpecHeader h;
  if (!read_spec_header(self_, r, h)) return;
  Rank to = choose_node(h.options ? h.options->resources : kNoDemand, h.hints,
                        h.options && h.options->actor_creation);
  if (to.value < 0) {
    const FunctionInfo* info = detail::find_function(FunctionId{h.function});
    const std::string name = h.options && !h.options->name.empty() ? h.options->name : info ? info->name : "?";
    send_error_result(Rank{h.owner}, h.id,
                      make_error(ErrorKind::kInfeasible, "no live rank can meet its resource demand", name, self_.value));
    return;
  }
  tasks_placed_.fetch_add(1, std::memory_order_relaxed);
  if (h.owner == self_.value && keep_specs_) {
    // This rank's own task: its executor is known now.
    std::lock_guard lock(pending_mutex_);
    auto it = pending_.find(h.id);
    if (it != pending_.end()) {
      it->second.lineage.executor = to;
      it->second.placed_elsewhere = false;
    }
  }
  std::vector<std::byte> copy(record.begin(), record.end());
  copy[0] = std::byte{kRouteRun};
  if (to == self_) {
    handle_task(self_, copy);
  } else {
    post(to, FrameKind::kTask, copy);
  }
}

// ---------------------------------------------------------------------------
// Receiving tasks and results.

void Cluster::handle_task(Rank from, std::span<const std::byte> record) {
  if (record.empty()) {
    malformed(from, "empty task spec");
    return;
  }
  if (std::to_integer<std::uint8_t>(record[0]) == kRoutePlace) {
    if (!is_scheduler_) {
      malformed(from, "a task for placement reached a rank that is not a global scheduler");
      return;
    }
    place(record);
    return;
  }
  Reader r(record);
  TaskSpecHeader h;
  if (!read_spec_header(from, r, h)) return;
  const TaskId id = h.id;
  const std::uint64_t fn = h.function;
  const int owner = h.owner;
  const std::shared_ptr<TaskOptions>& options = h.options;
  tasks_received_.fetch_add(1, std::memory_order_relaxed);
  last_served_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  wake_standing_back();
  const FunctionInfo* info = detail::find_function(FunctionId{fn});
  if (!info || !info->decode) {
    send_error_result(Rank{owner}, id,
                      make_error(ErrorKind::kNotRegistered,
                                 info ? fmt::format("its argument or result types cannot cross ranks (on rank {})", self_.value)
                                      : fmt::format("function id {:016x} is not registered on rank {}", fn, self_.value),
                                 "", self_.value));
    return;
  }
  const char* name = options && options->interned_name ? options->interned_name : info->name.c_str();
  ObjectState* result = nullptr;
  TaskBase* task = nullptr;
  try {
    detail::TaskDecodeArgs a{id, info->address, name, options, &r, this, &result};
    task = info->decode(a);
  } catch (const std::exception& e) {
    send_error_result(Rank{owner}, id,
                      make_error(ErrorKind::kTaskFailed, fmt::format("its arguments could not be decoded: {}", e.what()),
                                 name, self_.value));
    return;
  }
  task->set_function(FunctionId{fn});
  task->set_placed();
  if (h.call) {
    auto call = std::make_unique<detail::ActorCall>();
    call->actor = h.call->actor;
    call->caller = h.call->caller;
    call->seq = h.call->seq;
    call->incarnation = h.call->incarnation;
    call->rank = self_.value;
    task->set_actor_call(std::move(call));
  }
  auto* forwarder = new ResultForwarder(this, Rank{owner}, id, result);
  if (!result->add_waiter(forwarder)) ResultForwarder::on_complete(forwarder, result);
  task->start();  // every argument is complete: the task goes to submit() at once
}

void Cluster::send_error_result(Rank owner, TaskId task, std::shared_ptr<const ErrorInfo> error) {
  Writer w;
  w(task.hi, task.lo, detail::kObjError, task.hi, task.lo);
  detail::write_error_info(w, *error);
  if (owner == self_) {
    handle_result(self_, w.bytes());
  } else {
    post(owner, FrameKind::kResult, w.bytes());
  }
}

void Cluster::forward_result(Rank owner, TaskId task, ObjectState* result) noexcept {
  try {
    Writer w;
    w(task.hi, task.lo);
    const ObjectId id = result->id();
    if (result->has_error() || result->bytes() <= config_.inline_bytes) {
      encode_object(w, result, owner);  // an error, or inline
    } else {
      // The bytes stay here, in the arena or where the value lies, until the owner
      // frees them.
      std::optional<Export> exp = export_object(result);
      if (!exp) {
        encode_object(w, result, owner);  // the arena is full: inline
      } else {
        const std::optional<RemoteCopy> copy = exp->copy;
        bool fresh = true;
        {
          std::lock_guard lock(held_mutex_);
          // A task run twice here (a replay) holds one copy per run; an in-place
          // export shares the value's storage, so the second run's is not kept.
          if (exp->in_place) {
            auto [a, b] = held_.equal_range(id);
            for (auto it = a; it != b; ++it) fresh = fresh && it->second.value != result;
          }
          if (fresh) {
            const std::byte* bytes = copy->own_region ? reinterpret_cast<const std::byte*>(copy->region.address)
                                                      : arena_.data() + copy->offset;
            held_.emplace(id, Held{copy->tag(), copy->offset, copy->length, bytes, exp->in_place ? result : nullptr,
                                   owner.value, std::move(exp->registration)});
            if (exp->in_place) result->add_ref();  // the bytes are the value's: keep it until the owner frees them
          }
        }
        if (!fresh) drop_export(result, copy->offset, exp->in_place, std::move(exp->registration));
        if (fresh) {
          exported_.fetch_add(1, std::memory_order_relaxed);
          if (readers_need_progress_) wake_standing_back();
          control_->add_object(ObjectRecord{id, self_, copy->length, false});
        }
        w(detail::kObjRemote, id.hi, id.lo, owner.value, self_.value, *copy);
      }
    }
    if (owner == self_) {
      handle_result(self_, w.bytes());
    } else {
      post(owner, FrameKind::kResult, w.bytes());
    }
  } catch (const std::exception& e) {
    send_error_result(owner, task,
                      make_error(ErrorKind::kTaskFailed, fmt::format("its result could not be sent: {}", e.what()), "",
                                 self_.value));
  }
  result->release();
}

void Cluster::handle_result(Rank from, std::span<const std::byte> record) {
  Reader r(record);
  TaskId id;
  try {
    r(id.hi, id.lo);
  } catch (const std::exception& e) {
    malformed(from, fmt::format("result: {}", e.what()));
    return;
  }
  Pending p{};
  {
    std::lock_guard lock(pending_mutex_);
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      bool duplicate = false;
      {
        std::lock_guard rl(replayed_mutex_);
        duplicate = replayed_.count(id) != 0;
      }
      if (!duplicate) {
        malformed(from, fmt::format("result for unknown task {}", id.hex()));
        return;
      }
      // A task run twice (its rank was thought lost, or its result's holder died):
      // the copy this late result left on its holder is not needed.
      try {
        std::uint8_t form = 0;
        ObjectId oid;
        r(form, oid.hi, oid.lo);
        if (form == detail::kObjRemote) {
          const RemoteCopy copy = read_remote_object(r, size_).copy;
          // Only this run's copy: the owner may use the other run's.
          if (copy.region.owner == self_) {
            release_held(oid, copy.tag());
          } else if (!rank_lost(copy.region.owner)) {
            post(copy.region.owner, FrameKind::kRefCount, encode_refcount({kRefFree, oid, 0, copy.tag()}));
          }
        }
      } catch (const std::exception&) {
      }
      return;
    }
    p = it->second;
    pending_.erase(it);
    awaited_.store(pending_.size(), std::memory_order_relaxed);
  }
  results_received_.fetch_add(1, std::memory_order_relaxed);
  if (p.lineage.executor != from) {
    p.lineage.executor = from;
    control_->add_lineage(p.lineage);
  }
  ObjectState* o = p.result;
  TaskBase* keep = nullptr;  // the task, kept as the lineage of a result held elsewhere
  try {
    std::uint8_t form = 0;
    ObjectId oid;
    r(form, oid.hi, oid.lo);
    switch (form) {
      case detail::kObjInline:
        if (p.rebuild) {
          if (o->residency() == Residency::kRemote) o->fill_remote(r);
          relocated(o, std::nullopt, nullptr);
        } else {
          o->complete_from(r);
        }
        break;
      case detail::kObjRemote: {
        const RemoteCopy copy = read_remote_object(r, size_).copy;
        const int holder = copy.region.owner.value;
        DistInfo& d = o->ensure_dist();
        {
          std::lock_guard lock(d.mutex);
          d.owner = self_;
          std::erase_if(d.holders, [this](int h) { return rank_lost(Rank{h}); });
          d.holders.push_back(holder);
          if (!p.rebuild) d.copy = copy;
        }
        // Findable by id: a checkpoint that holds its copy names it (apply_saved), an
        // actor's replay makes it again (take_actor_result).
        if (keep_specs_ && holder != self_.value) remember(o);
        if (p.actor_replay && holder != self_.value) {
          actor_results_.held(o->id(), p.actor, p.actor_incarnation, Rank{holder});
        } else if (p.actor_replay) {
          actor_results_.forget(o->id());
        }
        if (holder != self_.value) std::swap(keep, p.task);
        if (p.rebuild) {
          relocated(o, copy, nullptr);
        } else {
          o->complete_remote(copy.length);
        }
        break;
      }
      case detail::kObjError: {
        auto e = detail::read_error_info(r);
        if (e->kind == ErrorKind::kNotRegistered || (e->function.empty() && e->kind != ErrorKind::kObjectLost)) {
          auto fixed = std::make_shared<ErrorInfo>(*e);
          fixed->function = p.name;
          if (e->kind == ErrorKind::kNotRegistered) {
            fixed->message = fmt::format("function '{}' {}; every rank must run a binary that registers it with BRISK_REMOTE",
                                         p.name, e->message);
          }
          e = fixed;
        }
        if (p.rebuild) {
          relocated(o, std::nullopt, lost_error(o, fmt::format("running '{}' again failed: {}", p.name, e->message)));
        } else {
          o->complete_error(std::move(e));
        }
        break;
      }
      default:
        throw SerializationError(fmt::format("unknown object form {}", form));
    }
  } catch (const std::exception& e) {
    if (p.rebuild) {
      relocated(o, std::nullopt, lost_error(o, fmt::format("its result from rank {} was malformed: {}", from.value, e.what())));
    } else if (!o->ready()) {
      o->complete_error(make_error(ErrorKind::kTaskFailed, fmt::format("its result from rank {} was malformed: {}", from.value, e.what()),
                                   p.name, from.value));
    }
    malformed(from, fmt::format("result: {}", e.what()));
  }
  if (keep && o->residency() != Residency::kRemote) {
    // The owner's pull finished already (a waiting thread polled it in): cut.
    lineage_cut_.fetch_add(1, std::memory_order_relaxed);
    std::swap(keep, p.task);
  }
  if (keep) keep_lineage(o->id(), keep);
  delete p.task;  // outside every lock: it releases its arguments
  o->release();
}

// ---------------------------------------------------------------------------
// Lineage replay of objects whose holder died.

void Cluster::keep_lineage(ObjectId id, TaskBase* task) {
  std::vector<TaskBase*> dropped;
  {
    std::vector<ObjectState*> args;
    task->arg_objects(args);
    std::uint64_t bytes = 0;
    for (ObjectState* a : args) bytes += a->bytes();
    std::lock_guard lock(lineage_mutex_);
    const std::uint64_t order = ++lineage_order_;
    auto [it, fresh] = lineage_.try_emplace(id, Lineage{task, bytes, order});
    if (!fresh) {  // kept already (a second rebuild): the newer task stands
      dropped.push_back(it->second.task);
      lineage_bytes_ -= it->second.bytes;
      lineage_fifo_.erase(it->second.order);
      it->second = Lineage{task, bytes, order};
    }
    lineage_fifo_.emplace(order, id);
    lineage_bytes_ += bytes;
    while (lineage_bytes_ > config_.lineage_bytes && !lineage_fifo_.empty()) {
      auto oldest = lineage_.find(lineage_fifo_.begin()->second);
      lineage_fifo_.erase(lineage_fifo_.begin());
      if (oldest == lineage_.end()) continue;
      lineage_bytes_ -= oldest->second.bytes;
      dropped.push_back(oldest->second.task);
      lineage_.erase(oldest);
    }
  }
  for (TaskBase* t : dropped) delete t;
}

TaskBase* Cluster::take_lineage(ObjectId id) {
  std::lock_guard lock(lineage_mutex_);
  auto it = lineage_.find(id);
  if (it == lineage_.end()) return nullptr;
  TaskBase* task = it->second.task;
  lineage_bytes_ -= it->second.bytes;
  lineage_fifo_.erase(it->second.order);
  lineage_.erase(it);
  return task;
}

// ---------------------------------------------------------------------------
// Live objects in checkpoints: a holder writes the copies it holds for other ranks
// with its part of each checkpoint; once rank 0 commits it, each owner learns which
// of its objects the file holds and drops their lineage. When a holder dies, its
// owners read those objects back from the newest checkpoint that holds them.

std::vector<std::pair<std::string, std::vector<std::byte>>> Cluster::held_copies() const {
  std::vector<std::pair<std::string, std::vector<std::byte>>> out;
  if (!keep_specs_) return out;
  struct Copy {
    ObjectId id;
    std::uint64_t tag, length;
    const std::byte* bytes;
    int owner;
  };
  std::vector<Copy> copies;
  {
    std::lock_guard lock(held_mutex_);
    std::unordered_set<ObjectId> seen;
    for (const auto& [id, h] : held_) {
      // An owner's own copy dies with it, and so does its object; a dead owner's
      // object is gone. A task run twice here holds two copies of one value.
      if (h.owner == self_.value || rank_lost(Rank{h.owner}) || !seen.insert(id).second) continue;
      copies.push_back({id, h.tag, h.length, h.bytes, h.owner});
    }
  }
  // One copy at a time under the lock (the progress thread frees held copies), and
  // only while it is still held.
  for (const Copy& h : copies) {
    const ObjectId id = h.id;
    std::vector<std::byte> bytes;
    {
      std::lock_guard lock(held_mutex_);
      auto [a, b] = held_.equal_range(id);
      if (std::none_of(a, b, [&h](const auto& e) { return e.second.tag == h.tag; })) continue;
      bytes.assign(h.bytes, h.bytes + h.length);
    }
    out.emplace_back(checkpoint_held_name(h.owner, id.hi, id.lo), std::move(bytes));
  }
  return out;
}

void Cluster::checkpoint_committed(std::uint64_t sequence, const std::string& path,
                                   const std::vector<std::pair<std::string, int>>& held) {
  if (!keep_specs_) return;
  std::vector<std::vector<std::pair<ObjectId, int>>> by_owner(static_cast<std::size_t>(size_));
  for (const auto& [name, holder] : held) {
    int owner = -1;
    ObjectId id;
    if (!parse_checkpoint_held_name(name, &owner, &id.hi, &id.lo) || owner < 0 || owner >= size_ || holder < 0 ||
        holder >= size_) {
      continue;
    }
    by_owner[static_cast<std::size_t>(owner)].emplace_back(id, holder);
  }
  // Every live rank hears, with or without objects: its entries of copies not in
  // this checkpoint are dropped (their objects are gone).
  for (int r = 0; r < size_; ++r) {
    const auto& objects = by_owner[static_cast<std::size_t>(r)];
    if (r == self_.value) {
      apply_saved(sequence, path, objects);
      continue;
    }
    if (rank_lost(Rank{r})) continue;
    send_frame(Rank{r}, FrameKind::kControl, encode_checkpoint_saved({sequence, path, objects}));
  }
}

void Cluster::apply_saved(std::uint64_t sequence, const std::string& file,
                          const std::vector<std::pair<ObjectId, int>>& objects) {
  auto path = std::make_shared<const std::string>(file);
  // One view of which ranks are dead for the whole update (a loss may be marked
  // meanwhile, by another thread); a loss marked after it is handled below.
  std::vector<bool> dead(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) dead[static_cast<std::size_t>(r)] = rank_lost(Rank{r});
  std::vector<ObjectId> kept;
  std::set<int> kept_holders;
  {
    std::lock_guard lock(saved_mutex_);
    // A live holder writes every copy it holds into every checkpoint: an entry this
    // one lacks is of an object gone meanwhile. A dead holder's stay until read.
    std::erase_if(saved_, [&dead](const auto& entry) { return !dead[static_cast<std::size_t>(entry.second.holder)]; });
    for (const auto& [id, holder] : objects) {
      if (dead[static_cast<std::size_t>(holder)]) {
        // Carried for a dead holder (or it died since it wrote): only a read-back
        // still to come moves to this file. An object with no entry was read back
        // already, or was not cut when its holder's loss was handled, and its
        // lineage (if any) makes it again.
        auto it = saved_.find(id);
        if (it != saved_.end()) it->second = Saved{path, sequence, holder};
        continue;
      }
      saved_[id] = Saved{path, sequence, holder};
      kept.push_back(id);
      kept_holders.insert(holder);
    }
  }
  // A holder found dead since the view above: its loss may have been handled before
  // these entries were there, so they are read back now.
  for (int h : kept_holders) {
    if (rank_lost(Rank{h}) && lost_queued_[static_cast<std::size_t>(h)].load(std::memory_order_acquire)) {
      restore_saved_on(Rank{h});
    }
  }
  std::vector<TaskBase*> cut;
  for (ObjectId id : kept) {
    if (TaskBase* task = take_lineage(id)) cut.push_back(task);
  }
  lineage_checkpointed_.fetch_add(cut.size(), std::memory_order_relaxed);
  for (TaskBase* task : cut) delete task;  // releases the arguments it kept alive
}

std::optional<Cluster::Saved> Cluster::take_saved(ObjectId id, bool restore) {
  std::lock_guard lock(saved_mutex_);
  auto it = saved_.find(id);
  if (it == saved_.end()) return std::nullopt;
  Saved saved = std::move(it->second);
  saved_.erase(it);
  if (restore) restores_pending_.fetch_add(1, std::memory_order_relaxed);
  return saved;
}

std::size_t Cluster::restore_saved_on(Rank holder) {
  std::vector<ObjectId> there;
  std::string file;
  {
    std::lock_guard lock(saved_mutex_);
    for (const auto& [id, s] : saved_) {
      if (s.holder != holder.value) continue;
      there.push_back(id);
      file = *s.file;
    }
  }
  std::size_t restoring = 0;
  for (ObjectId id : there) {
    ObjectState* o = shared_object_ref(id);
    enum { kDrop, kRead, kLater, kElsewhere } what = kDrop;
    Rank other;
    if (DistInfo* d = o ? o->dist() : nullptr) {
      std::lock_guard lock(d->mutex);
      if (!d->proxy && !d->lost && d->copy && o->residency() == Residency::kRemote) {
        other = d->copy->region.owner;
        if (other != holder && !rank_lost(other)) {
          what = kElsewhere;  // the copy in use is another rank's (the file's still backs it)
        } else {
          // A pull or relocation under way reaches relocate() when it ends.
          what = d->fetching || d->relocating ? kLater : kRead;
        }
      }
    }
    if (what == kRead) {
      relocate(o);
      ++restoring;
    } else if (what == kElsewhere) {
      std::lock_guard lock(saved_mutex_);
      auto it = saved_.find(id);
      if (it != saved_.end()) it->second.holder = other.value;  // the next checkpoint lists that rank's
    } else if (what == kDrop) {
      take_saved(id);  // gone, lost, or here: nothing to read
    }
    if (o) o->release();
  }
  if (restoring) {
    std::fprintf(stderr, "brisk: rank %d: %zu objects whose copies were on rank %d are read back from checkpoint %s\n",
                 self_.value, restoring, holder.value, file.c_str());
  }
  return restoring;
}

std::vector<int> Cluster::settled_losses() {
  // The flags first: a loss whose read-backs are queued after this look is not
  // counted, and one queued before it shows in saved_ or restores_pending_.
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    if (lost_queued_[static_cast<std::size_t>(r)].load(std::memory_order_acquire)) out.push_back(r);
  }
  // Entries a dead rank's loss left waiting (a pull or relocation was under way
  // then) are looked at again: read back, or dropped when no longer needed.
  for (int r : out) restore_saved_on(Rank{r});
  std::lock_guard lock(saved_mutex_);
  if (restores_pending_.load(std::memory_order_relaxed) != 0) return {};
  std::erase_if(out, [this](int r) {
    return std::any_of(saved_.begin(), saved_.end(), [r](const auto& entry) { return entry.second.holder == r; });
  });
  return out;
}

void Cluster::restore_main() {
  detail::set_os_thread_name("brisk-restore");
  // The files of the restores in a row stay open (a checkpoint may be pruned
  // meanwhile: an open file is still read); closed when the queue runs dry.
  std::map<std::string, CheckpointReader> open;
  for (;;) {
    std::pair<ObjectState*, Saved> job;
    {
      std::unique_lock lock(restore_mutex_);
      if (restore_queue_.empty()) {
        lock.unlock();
        open.clear();
        lock.lock();
      }
      restore_cv_.wait(lock, [this] { return restore_stop_ || !restore_queue_.empty(); });
      if (restore_queue_.empty()) return;
      job = std::move(restore_queue_.front());
      restore_queue_.pop_front();
    }
    ObjectState* o = job.first;
    std::shared_ptr<const ErrorInfo> lost;
    try {
      read_saved(o, job.second, open);
      objects_restored_.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& e) {
      lost = lost_error(o, fmt::format("its only copy was on rank {}, which died, and reading it back from checkpoint {} "
                                       "failed: {}",
                                       job.second.holder, *job.second.file, e.what()));
    }
    relocated(o, std::nullopt, lost);
    o->release();
    restores_pending_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void Cluster::read_saved(ObjectState* o, const Saved& saved, std::map<std::string, CheckpointReader>& open) {
  RemoteCopy copy;
  {
    DistInfo* d = o->dist();
    std::lock_guard lock(d->mutex);
    if (!d->copy) throw Error("no copy of it was known here");
    copy = *d->copy;
  }
  const std::string name = checkpoint_held_name(self_.value, o->id().hi, o->id().lo);
  auto read = [&](const std::filesystem::path& file) -> StatusOr<std::vector<std::byte>> {
    auto it = open.find(file.string());
    if (it == open.end()) {
      auto reader = CheckpointReader::open(file);
      if (!reader.ok()) return reader.status();
      it = open.emplace(file.string(), std::move(reader).value()).first;
    }
    return it->second.read(CheckpointSection::kObjects, name);
  };
  StatusOr<std::vector<std::byte>> bytes = read(*saved.file);
  if (!bytes.ok()) {
    // Pruned meanwhile: a newer checkpoint of this job holds it as well (or none does).
    const Status first = bytes.status();
    if (auto files = list_checkpoints(std::filesystem::path(*saved.file).parent_path()); files.ok()) {
      for (auto it = files->rbegin(); it != files->rend() && it->sequence > saved.sequence && !bytes.ok(); ++it) {
        bytes = read(it->path);
      }
    }
    if (!bytes.ok()) throw Error(fmt::format("{} (nor does a newer checkpoint in its directory hold it)", first.message()));
  }
  if (bytes->size() != copy.length) {
    throw Error(fmt::format("it holds {} bytes where the copy had {}", bytes->size(), copy.length));
  }
  if (copy.raw) {
    std::byte* dst = nullptr;
    {
      detail::PrivateArrays private_arrays;  // as a pull: private memory
      dst = o->prepare_raw(copy.length, copy.count);
    }
    if (copy.length) std::memcpy(dst, bytes->data(), copy.length);
    o->commit_fetched();
  } else {
    Reader r(std::span<const std::byte>(bytes->data(), bytes->size()));
    o->fill_remote(r);
  }
}

std::shared_ptr<const ErrorInfo> Cluster::lost_error(ObjectState* o, std::string why) {
  objects_lost_.fetch_add(1, std::memory_order_relaxed);
  return make_error(ErrorKind::kObjectLost, fmt::format("object {}: {}", o->id().hex(), why), "", self_.value);
}

std::optional<RemoteCopy> Cluster::local_copy(ObjectState* o, Rank to) {
  DistInfo& d = o->ensure_dist();
  std::optional<RemoteCopy> copy;
  {
    std::lock_guard lock(d.mutex);
    copy = d.exported;
  }
  if (copy) {
    settle_for(*copy, to);
    return copy;
  }
  FillLater* later = FillLater::for_rank(to);
  if (later) later->reserve_one();  // nothing can fail once the copy is described
  std::optional<Export> exp = export_object(o, later != nullptr);
  if (!exp) return std::nullopt;
  copy = exp->copy;
  bool fresh = false;
  {
    std::unique_lock lock(d.mutex);
    if (d.exported) {
      copy = d.exported;
      lock.unlock();
      if (exp->fill_from) o->unpin();
      drop_export(o, exp->copy.offset, exp->in_place, std::move(exp->registration));  // another thread exported it meanwhile
      settle_for(*copy, to);
    } else {
      d.exported = copy;
      d.exported_in_place = exp->in_place;
      d.export_registration = std::move(exp->registration);
      d.owner = self_;
      fresh = true;
      exported_.fetch_add(1, std::memory_order_relaxed);
      if (readers_need_progress_) wake_standing_back();
    }
  }
  if (fresh && exp->fill_from) {
    o->add_ref();  // with the pin export_object took, until the copy is made
    later->add(Fill{o, exp->fill_from, copy->offset, copy->length, copy->fill});
  }
  if (fresh) control_->add_object(ObjectRecord{o->id(), self_, copy->length, false});
  return copy;
}

void Cluster::make_fills(std::vector<Fill>& fills) noexcept {
  for (const Fill& f : fills) {
    std::byte* to = arena_.data() + f.copy_offset;
    auto* word = reinterpret_cast<std::uint64_t*>(arena_.data() + f.word);
    for (std::uint64_t done = 0; done < f.length;) {
      const std::uint64_t n = std::min(kFillPart, f.length - done);
      std::memcpy(to + done, f.from + done, n);
      done += n;
      __atomic_store_n(word, done, __ATOMIC_RELEASE);
      if (done == n && fill_hook_) fill_hook_();
    }
    f.object->unpin();
    f.object->release();
    filled_later_.fetch_add(1, std::memory_order_relaxed);
  }
  fills.clear();
}

std::span<const std::byte> Cluster::arena_of(Rank holder) const noexcept {
  if (holder == self_) return arena_;
  if (holder.value >= 0 && static_cast<std::size_t>(holder.value) < config_.peer_arenas.size()) {
    return config_.peer_arenas[static_cast<std::size_t>(holder.value)];
  }
  return {};
}

bool Cluster::maps_arena_here(Rank to) const noexcept { return to != self_ && !arena_of(to).empty(); }

void Cluster::settle_for(const RemoteCopy& copy, Rank to) {
  if (!copy.fill || (copy.region.owner == self_ && maps_arena_here(to))) return;
  await_fill(copy, copy.length);  // a lost holder: the reader finds it lost too
}

const std::uint64_t* Cluster::fill_word(const RemoteCopy& copy) const noexcept {
  const Rank holder = copy.region.owner;
  const std::span<const std::byte> arena = arena_of(holder);
  // The count lies on the cache line after the bytes (export_object).
  const std::uint64_t end = copy.offset + copy.length;
  if (copy.fill % sizeof(std::uint64_t) != 0 || end < copy.offset || copy.fill < end ||
      copy.fill - end >= ArenaAllocator::kAlignment || arena.size() < sizeof(std::uint64_t) ||
      copy.fill > arena.size() - sizeof(std::uint64_t)) {
    return nullptr;
  }
  return reinterpret_cast<const std::uint64_t*>(arena.data() + copy.fill);
}

std::uint64_t Cluster::await_fill(const RemoteCopy& copy, std::uint64_t at_least) {
  const std::uint64_t* word = fill_word(copy);
  if (!word) return copy.length;  // not readable here: not one this rank was sent to read
  std::uint64_t seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  if (seen >= at_least) return seen;
  FillLater::make_now();
  const Rank holder = copy.region.owner;
  // The holder copies at memory speed once it has sent the message: spin a little,
  // then give the core away (its copying thread may share it), then nap. A progress
  // thread that waits cannot hear of the holder's death: it gives up after the
  // failure timeout without progress, as a global scheduler would.
  auto last = Clock::now();
  for (unsigned i = 0;; ++i) {
    const std::uint64_t now_seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    if (now_seen >= at_least) return now_seen;
    if (now_seen != seen) {
      seen = now_seen;
      last = Clock::now();
      i = 0;
      continue;
    }
    if (rank_lost(holder)) return seen;
    if (i < 256) {
      detail::cpu_relax();
    } else if (i < 4096) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (t_on_progress_thread && keep_specs_ && Clock::now() - last > config_.failure_timeout) {
        on_rank_lost(holder, unavailable(fmt::format("it stopped copying object bytes into its arena for {} ms",
                                                     config_.failure_timeout.count())));
        return seen;
      }
    }
  }
}

void Cluster::relocate(ObjectState* o) noexcept {
  DistInfo* d = o->dist();
  if (!d) return;
  Rank owner;
  bool proxy = false;
  Rank holder;
  {
    std::lock_guard lock(d->mutex);
    if (d->relocating || d->fetching || d->lost) return;
    d->relocating = true;
    proxy = d->proxy;
    owner = d->owner;
    holder = d->copy ? d->copy->region.owner : self_;
  }
  if (proxy) {
    if (owner == self_ || rank_lost(owner)) {
      relocated(o, std::nullopt,
                lost_error(o, fmt::format("its copy was on rank {}, which died, and its owner, rank {}, is {}", holder.value,
                                          owner.value, owner == self_ ? "this rank" : "dead too")));
      return;
    }
    send_frame(owner, FrameKind::kControl, encode_locate(o->id()));
    return;
  }
  if (o->residency() != Residency::kRemote) {
    take_saved(o->id());  // a checkpoint's copy is not needed either
    relocated(o, std::nullopt, nullptr);  // the value is here
    return;
  }
  if (std::optional<Saved> saved = take_saved(o->id(), true)) {
    // A checkpoint holds it: read back on the restore thread (file I/O stays off the
    // progress thread), which then answers as relocated() does.
    bool queued = false;
    {
      std::lock_guard lock(restore_mutex_);
      if (!restore_stop_) {
        o->add_ref();  // the restore thread's
        restore_queue_.emplace_back(o, std::move(*saved));
        if (!restorer_.joinable()) restorer_ = std::thread([this] { restore_main(); });
        queued = true;
      }
    }
    if (queued) {
      restore_cv_.notify_one();
    } else {
      restores_pending_.fetch_sub(1, std::memory_order_relaxed);
      relocated(o, std::nullopt, lost_error(o, fmt::format("its only copy was on rank {}, which died as the job ended", holder.value)));
    }
    return;
  }
  TaskBase* task = take_lineage(o->id());
  if (!task) {
    // A logged actor call's result: the rebuilt actor's replay makes it again.
    switch (actor_results_.park(o, replay_pending, rank_lost(holder))) {
      case ActorResults::Park::kWaiting:
      case ActorResults::Park::kUnderWay:
        return;  // relocated() answers once the replayed call's result comes
      case ActorResults::Park::kLost:
      case ActorResults::Park::kNotTracked:
        break;
    }
    relocated(o, std::nullopt,
              lost_error(o, fmt::format("its only copy was on rank {}, which died, and it has no lineage to make it again "
                                        "(made by put, made on mpi, or its lineage was dropped past --brisk-lineage-bytes) "
                                        "and no checkpoint holds it",
                                        holder.value)));
    return;
  }
  objects_rebuilt_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard rl(replayed_mutex_);
    replayed_.insert(task->id());
  }
  o->add_ref();  // the pending entry's
  reship(task, o, true);
}

void Cluster::relocated(ObjectState* o, std::optional<RemoteCopy> copy, std::shared_ptr<const ErrorInfo> lost) noexcept {
  DistInfo* d = o->dist();
  std::vector<std::function<void(const Status&)>> callbacks;
  std::vector<int> locators;
  bool pull = false;
  {
    std::lock_guard lock(d->mutex);
    d->relocating = false;
    locators.swap(d->locators);
    if (lost) {
      d->lost = lost;
      callbacks.swap(d->on_fetched);
    } else if (copy) {
      d->copy = copy;
      if (!d->on_fetched.empty() && o->residency() == Residency::kRemote && !d->fetching) {
        d->fetching = true;
        pull = true;
      }
    } else {
      d->copy.reset();  // the value is here: peers pull this rank's own export
      callbacks.swap(d->on_fetched);
    }
  }
  std::optional<RemoteCopy> answer = copy;
  std::shared_ptr<const ErrorInfo> refusal = lost;
  if (!locators.empty() && !lost && !copy) {
    try {
      answer = local_copy(o, kAnyRank);
      if (!answer) refusal = lost_error(o, "its owner has the value but no room in its arena to lend it");
    } catch (const std::exception& e) {
      answer.reset();
      refusal = lost_error(o, fmt::format("its owner could not lend its value: {}", e.what()));
    }
  }
  for (int r : locators) {
    if (rank_lost(Rank{r})) continue;
    send_frame(Rank{r}, FrameKind::kControl, encode_located(o->id(), answer ? &*answer : nullptr, refusal.get()));
  }
  const Status st = lost ? unavailable(lost->message) : Status();
  for (auto& cb : callbacks) cb(st);
  if (pull) {
    o->add_ref();  // start_pull's, released by finish_fetch
    start_pull(o, *copy);
  }
}

void Cluster::handle_locate(Rank from, ObjectId id) {
  ObjectState* o = shared_object_ref(id);
  DistInfo* d = o ? o->dist() : nullptr;
  if (!d || d->proxy) {
    if (o) o->release();
    const auto gone = make_error(ErrorKind::kObjectLost,
                                 fmt::format("object {}: its owner, rank {}, no longer has it", id.hex(), self_.value), "",
                                 self_.value);
    send_frame(from, FrameKind::kControl, encode_located(id, nullptr, gone.get()));
    return;
  }
  bool answer_now = false, rebuild = false;
  {
    std::lock_guard lock(d->mutex);
    if (d->lost) {
      d->locators.push_back(from.value);
      answer_now = true;
    } else if (d->relocating) {
      d->locators.push_back(from.value);
    } else {
      d->locators.push_back(from.value);
      const bool here = o->residency() != Residency::kRemote;
      const bool live_copy = d->copy && !rank_lost(d->copy->region.owner);
      if (here || live_copy) {
        answer_now = true;
      } else {
        rebuild = true;
      }
    }
  }
  if (answer_now) {
    std::optional<RemoteCopy> copy;
    std::shared_ptr<const ErrorInfo> lost;
    {
      std::lock_guard lock(d->mutex);
      lost = d->lost;
      if (!lost && o->residency() == Residency::kRemote) copy = d->copy;
      d->relocating = true;  // relocated() clears it
    }
    relocated(o, copy, lost);
  } else if (rebuild) {
    relocate(o);
  }
  o->release();
}

void Cluster::handle_located(Rank from, Located m) {
  const ObjectId id = m.id;
  std::optional<RemoteCopy> copy = std::move(m.copy);
  std::shared_ptr<const ErrorInfo> lost = std::move(m.lost);
  ObjectState* o = shared_object_ref(id);
  if (!o) return;  // dropped meanwhile
  DistInfo* d = o->dist();
  if (!d || !d->proxy || d->owner != from) {
    o->release();
    throw SerializationError(fmt::format("an answer about object {} from rank {}, which does not own it", id.hex(), from.value));
  }
  if (lost) objects_lost_.fetch_add(1, std::memory_order_relaxed);
  relocated(o, copy, lost);
  o->release();
}

// ---------------------------------------------------------------------------
// Objects across ranks.

std::optional<Cluster::Export> Cluster::export_object(ObjectState* o, bool later) {
  if (!arena_registration_) return std::nullopt;  // no one-sided path: inline
  Pinned pinned(o);
  Export e;
  RemoteCopy& copy = e.copy;
  copy.region = arena_registration_->remote();
  const ObjectState::RawView raw = o->raw_view();
  const auto* bytes = static_cast<const std::byte*>(raw.data);
  if (raw.data && raw.length && bytes >= arena_.data() && bytes + raw.length <= arena_.data() + arena_.size()) {
    // The value's storage is in the arena already (a brisk::Array): readers pull it
    // from there, and the block lives as long as the value.
    copy.offset = static_cast<std::uint64_t>(bytes - arena_.data());
    copy.length = raw.length;
    copy.count = raw.count;
    copy.raw = true;
    e.in_place = true;
    return e;
  }
  if (raw.data && expose_ && raw.length > config_.expose_bytes) {
    // Large: readers get it from the value's own storage, registered for them, with
    // no copy here first (a std::vector's bytes are read once, by the reader's get).
    // The value stays pinned (unspilled) while the registration lasts.
    auto reg = transport_.register_memory(const_cast<std::byte*>(bytes), raw.length);
    if (reg.ok()) {
      o->pin();
      e.registration = std::move(reg).value();
      copy.region = e.registration->remote();
      copy.offset = 0;
      copy.length = raw.length;
      copy.count = raw.count;
      copy.raw = true;
      copy.own_region = true;
      e.in_place = true;
      exposed_.fetch_add(1, std::memory_order_relaxed);
      return e;
    }
  }
  if (raw.data) {
    // The bytes keep the alignment (mod 64) of the value's own storage, which is what
    // the reader's allocator will most likely give the copy it pulls into: a
    // one-sided copy between buffers of the same alignment runs at full speed, one
    // between 16 and 0 mod 64 at a fifth of it (MPI_Get over Open MPI 4.1 here).
    const std::uint64_t skew = reinterpret_cast<std::uintptr_t>(raw.data) % ArenaAllocator::kAlignment;
    // Described now, copied later: the count of bytes copied follows the bytes, on a
    // cache line of its own.
    const bool described = later && raw.length >= kFillLaterBytes;
    constexpr std::uint64_t kLine = ArenaAllocator::kAlignment;
    const std::uint64_t word_at = (skew + raw.length + kLine - 1) / kLine * kLine;
    auto offset = arena_alloc_.allocate(described ? word_at + kLine : raw.length + skew);
    if (!offset) return std::nullopt;
    copy.offset = *offset + skew;
    copy.length = raw.length;
    copy.count = raw.count;
    copy.raw = true;
    if (described) {
      copy.fill = *offset + word_at;
      __atomic_store_n(reinterpret_cast<std::uint64_t*>(arena_.data() + copy.fill), std::uint64_t{0}, __ATOMIC_RELEASE);
      e.fill_from = bytes;
      o->pin();  // until the copy is made (the caller's Fill), or the export dropped
    } else if (raw.length) {
      std::memcpy(arena_.data() + copy.offset, raw.data, raw.length);
    }
    return e;
  }
  Writer w;
  o->write_value(w);
  auto offset = arena_alloc_.allocate(w.size());
  if (!offset) return std::nullopt;
  std::memcpy(arena_.data() + *offset, w.bytes().data(), w.size());
  copy.offset = *offset;
  copy.length = w.size();
  return e;
}

void Cluster::drop_export(ObjectState* o, std::uint64_t offset, bool in_place,
                          std::unique_ptr<MemoryRegistration> registration) noexcept {
  if (registration) {
    registration.reset();  // before the value may move or go
    o->unpin();
    exposed_.fetch_sub(1, std::memory_order_relaxed);
  } else if (!in_place) {
    arena_alloc_.free(block_of(offset));
  }
}

void Cluster::remember(ObjectState* o) {
  DistInfo& d = o->ensure_dist();
  {
    std::lock_guard lock(d.mutex);
    if (d.in_directory) return;
    d.in_directory = true;
  }
  std::lock_guard lock(directory_mutex_);
  directory_[o->id()] = o;
}

void Cluster::encode_object(Writer& w, ObjectState* o, Rank to) {
  const ObjectId id = o->id();
  if (o->has_error()) {
    w(detail::kObjError, id.hi, id.lo);
    detail::write_error_info(w, *o->error());
    return;
  }
  DistInfo* d = o->dist();
  std::optional<RemoteCopy> copy;
  Rank owner = self_;
  if (d) {
    std::lock_guard lock(d->mutex);
    owner = d->proxy ? d->owner : self_;
    if (d->copy) {
      copy = d->copy;
    } else if (d->exported) {
      copy = d->exported;
    }
  }
  if (o->bytes() <= config_.inline_bytes && o->residency() != Residency::kRemote) {
    write_inline(w, o);
    return;
  }
  if (!copy) {
    copy = local_copy(o, to);
    if (!copy) {
      write_inline(w, o);  // no room in the arena: inline (frames carry up to 1 GiB)
      return;
    }
  } else {
    settle_for(*copy, to);
  }
  // Lend one reference to whoever decodes this; they give it back when done.
  remember(o);
  o->add_ref();
  w(detail::kObjRemote, id.hi, id.lo, owner.value, self_.value, *copy);
}

ObjectState* Cluster::resolve_remote(ObjectId id, Rank owner, Rank lender, const RemoteCopy& copy,
                                     ObjectState* (*make)(ObjectId)) {
  if (lender.value < 0 || lender.value >= size_ || owner.value < 0 || owner.value >= size_ ||
      copy.region.owner.value < 0 || copy.region.owner.value >= size_) {
    throw SerializationError("brisk: an object reference names a rank outside the job");
  }
  ObjectState* found = nullptr;
  {
    std::lock_guard lock(directory_mutex_);
    auto it = directory_.find(id);
    if (it != directory_.end() && it->second->try_add_ref()) found = it->second;
    if (!found) {
      ObjectState* o = make(id);
      DistInfo& d = o->ensure_dist();
      d.owner = owner;
      d.proxy = true;
      d.copy = copy;
      d.in_directory = true;
      if (lender != self_) d.borrowed.emplace_back(lender.value, 1);
      directory_[id] = o;
      o->complete_remote(copy.length);
      if (lender == self_) drop_borrow(lender, id, 1);
      return o;
    }
  }
  DistInfo* d = found->dist();
  bool keep = false;
  if (d && d->proxy && lender != self_) {
    std::lock_guard lock(d->mutex);
    for (auto& [r, n] : d->borrowed) {
      if (r == lender.value) {
        ++n;
        keep = true;
        break;
      }
    }
    if (!keep) {
      d->borrowed.emplace_back(lender.value, 1);
      keep = true;
    }
  }
  // An object this rank owns, or lent by this rank itself: the reference just
  // added stands for it, so the lent one goes back at once.
  if (!keep) drop_borrow(lender, id, 1);
  return found;
}

ObjectState* Cluster::shared_object_ref(ObjectId id) const {
  std::lock_guard lock(directory_mutex_);
  auto it = directory_.find(id);
  return it != directory_.end() && it->second->try_add_ref() ? it->second : nullptr;
}

ObjectState* Cluster::shared_object(ObjectId id) const {
  std::lock_guard lock(directory_mutex_);
  auto it = directory_.find(id);
  return it == directory_.end() ? nullptr : it->second;
}

void Cluster::drop_borrow(Rank lender, ObjectId id, std::uint64_t count) {
  if (lender == self_) {
    ObjectState* o = shared_object(id);
    if (!o) return;
    for (std::uint64_t i = 0; i < count; ++i) o->release();
    return;
  }
  post(lender, FrameKind::kRefCount, encode_refcount({kRefDrop, id, count, kAllCopies}));
}

void Cluster::handle_refcount(Rank from, std::span<const std::byte> record) {
  RefCountRecord m;
  try {
    m = decode_refcount(record);
  } catch (const std::exception& e) {
    malformed(from, fmt::format("reference count: {}", e.what()));
    return;
  }
  if (m.op == kRefFree) {
    release_held(m.id, m.tag);  // an owner's free: every copy; a duplicate's: one
    return;
  }
  ObjectState* o = shared_object(m.id);
  if (!o) {
    malformed(from, fmt::format("reference drop for unknown object {}", m.id.hex()));
    return;
  }
  if (m.count > static_cast<std::uint64_t>(o->ref_count())) {
    malformed(from, fmt::format("reference drop of {} for object {} that has {}", m.count, m.id.hex(), o->ref_count()));
    return;
  }
  for (std::uint64_t i = 0; i < m.count; ++i) o->release();
}

void Cluster::on_destroy(ObjectState* o) noexcept {
  DistInfo* d = o->dist();
  if (!d) return;
  if (d->in_directory) {
    std::lock_guard lock(directory_mutex_);
    auto it = directory_.find(o->id());
    if (it != directory_.end() && it->second == o) directory_.erase(it);
  }
  const ObjectId id = o->id();
  try {
    for (const auto& [lender, n] : d->borrowed) {
      if (!rank_lost(Rank{lender})) drop_borrow(Rank{lender}, id, n);
    }
    for (int holder : d->holders) {
      if (holder == self_.value) {
        release_held(id);
      } else if (!rank_lost(Rank{holder})) {
        post(Rank{holder}, FrameKind::kRefCount, encode_refcount({kRefFree, id, 0, kAllCopies}));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "brisk: rank %d: could not return references of object %s: %s\n", self_.value,
                 id.hex().c_str(), e.what());
  }
  if (d->exported) {
    exported_.fetch_sub(1, std::memory_order_relaxed);
    drop_export(o, d->exported->offset, d->exported_in_place, std::move(d->export_registration));
    control_->add_object(ObjectRecord{id, self_, d->exported->length, true});
  }
  if (d->lineage || !d->holders.empty() || d->exported) control_->forget(id);
  if (keep_specs_ && !d->proxy) {
    delete take_lineage(id);  // releases its arguments (no lock held)
    take_saved(id);
    actor_results_.forget(id);
  }
}

void Cluster::release_held(ObjectId id, std::uint64_t tag) {
  std::vector<Held> freed;
  {
    std::lock_guard lock(held_mutex_);
    auto [a, b] = held_.equal_range(id);
    for (auto it = a; it != b;) {
      if (tag == kAllCopies || it->second.tag == tag) {
        freed.push_back(std::move(it->second));
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Held& held : freed) {
    exported_.fetch_sub(1, std::memory_order_relaxed);
    // In place (`value` set): the value's own storage, kept by the reference.
    drop_export(held.value, held.offset, held.value != nullptr, std::move(held.registration));
    if (held.value) held.value->release();  // frees the block with the value
    control_->add_object(ObjectRecord{id, self_, held.length, true});
  }
}

void Cluster::fetch_async(ObjectState* o, std::function<void(const Status&)> done) {
  DistInfo* d = o->dist();
  if (!d || o->residency() != Residency::kRemote) {
    done(Status());
    return;
  }
  RemoteCopy copy;
  bool holder_lost = false;
  {
    std::unique_lock lock(d->mutex);
    if (o->residency() != Residency::kRemote) {
      lock.unlock();
      done(Status());
      return;
    }
    if (d->lost) {
      const std::string why = d->lost->message;
      lock.unlock();
      done(unavailable(why));  // may drop the last reference to `o`: nothing of it after this
      return;
    }
    d->on_fetched.push_back(std::move(done));
    if (d->fetching || d->relocating) return;
    copy = *d->copy;
    holder_lost = rank_lost(copy.region.owner);
    if (!holder_lost) d->fetching = true;
  }
  if (holder_lost) {
    relocate(o);  // the pull starts once a new copy is known
    return;
  }
  o->add_ref();  // kept until the pull ends
  start_pull(o, copy);
}

void Cluster::start_pull(ObjectState* o, const RemoteCopy& copy) {
  fetches_.fetch_add(1, std::memory_order_relaxed);
  fetched_bytes_.fetch_add(copy.length, std::memory_order_relaxed);
  const Rank holder = copy.region.owner;
  const std::byte* src = readable_here(copy);
  // A pull through the transport is in flight until finish_fetch, with a poller
  // near (the progress thread stops standing back). A copy from mapped memory is
  // made here and now: counted only as it ends, so that the progress thread does not
  // poll beside a worker's long memcpy.
  if (!src) {
    fetches_in_flight_.fetch_add(1, std::memory_order_relaxed);
    wake_standing_back();
  }
  if (!src && holder == self_) {
    finish_fetch(o, internal_error(fmt::format("object {}: its copy lies outside this rank's arena", o->id().hex())));
    return;
  }
  if (src) {
    // Our own exported copy (a task came back to the rank that holds its bytes), or
    // one in the arena of a rank on this node, mapped here. Such a copy stays while
    // this object lives: the owner frees held copies only when its object goes (and
    // this one, proxy or owner, keeps it until then).
    const bool shared = holder != self_;
    if (shared) fetched_shared_.fetch_add(1, std::memory_order_relaxed);
    if (PeerArenaPages* pages = shared ? peer_pages_[static_cast<std::size_t>(holder.value)].get() : nullptr) {
      pages->prepare_read(src, copy.length);  // read below, or by the task where it lies
    }
    Status st;
    bool holder_lost = false;
    try {
      if (copy.fill && copy.raw) {
        // Still being copied into the holder's arena: each part is copied out as it
        // lands, into private memory as below.
        detail::PrivateArrays private_arrays;
        std::byte* dst = o->prepare_raw(copy.length, copy.count);
        std::uint64_t done = 0;
        while (done < copy.length) {
          const std::uint64_t ready = std::min(await_fill(copy, done + 1), copy.length);
          if (ready <= done) break;  // the holder is lost
          std::memcpy(dst + done, src + done, ready - done);
          done = ready;
        }
        if (done < copy.length) {
          o->abort_fetch();
          holder_lost = true;
        } else {
          o->commit_fetched();
        }
      } else if (copy.fill && await_fill(copy, copy.length) < copy.length) {
        holder_lost = true;
      } else if (copy.raw) {
        // A brisk::Array in another rank's arena is read where it lies. (One in this
        // rank's own arena is copied: freeing a view there would free the block.)
        if (shared && o->adopt_raw(src, copy.length, copy.count)) {
          borrowed_.fetch_add(1, std::memory_order_relaxed);  // outside the store: other ranks' memory
        } else {
          // One copy, into private memory (huge pages, cache), with no zero-fill
          // before it where the type allows.
          detail::PrivateArrays private_arrays;
          if (!o->copy_raw(src, copy.length, copy.count)) {
            std::byte* dst = o->prepare_raw(copy.length, copy.count);
            if (copy.length) std::memcpy(dst, src, copy.length);
          }
        }
        o->commit_fetched();
      } else {
        Reader r(std::span<const std::byte>(src, copy.length));
        o->fill_remote(r);
      }
    } catch (const std::exception& e) {
      st = internal_error(fmt::format("reading object {} from the arena of rank {}: {}", o->id().hex(), holder.value, e.what()));
    }
    fetches_in_flight_.fetch_add(1, std::memory_order_relaxed);  // finish_fetch (or retry_pull) counts it out
    if (holder_lost) {
      retry_pull(o);  // it died while it copied: the copy is made again or asked for
      return;
    }
    finish_fetch(o, st);
    return;
  }
  std::byte* dst = nullptr;
  std::shared_ptr<std::vector<std::byte>> staging;
  try {
    // A pulled std::vector (or the staging buffer) is private memory: a freed
    // vector's storage, resized over its stale bytes. Placed in the arena, it was
    // fresh storage, zero-filled before the get (1 MiB over the get path: 0.47-0.78
    // of raw against 0.72-0.99).
    detail::PrivateAllocations private_allocations;
    if (copy.raw) {
      if (copy.length > kWorkerPullBytes) {
        // Large pulls land in private memory (huge pages, the cache of blocks): here
        // that was faster than the registered arena, which smaller pulls of a
        // brisk::Array land in.
        detail::PrivateArrays private_arrays;
        dst = o->prepare_raw(copy.length, copy.count);
      } else {
        dst = o->prepare_raw(copy.length, copy.count);
      }
    } else {
      staging = std::make_shared<std::vector<std::byte>>(copy.length);
      dst = staging->data();
    }
  } catch (const std::exception& e) {
    finish_fetch(o, resource_exhausted(fmt::format("no memory for object {} ({} bytes): {}", o->id().hex(), copy.length, e.what())));
    return;
  }
  Status st = transport_.get(copy.region, copy.offset, dst, copy.length, [this, o, copy, staging](Status s) {
    const bool holder_failed = !s.ok();
    if (s.ok()) {
      try {
        if (copy.raw) {
          o->commit_fetched();
        } else {
          Reader r(std::span<const std::byte>(staging->data(), staging->size()));
          o->fill_remote(r);
        }
      } catch (const std::exception& e) {
        s = internal_error(fmt::format("object {} from rank {}: {}", o->id().hex(), copy.region.owner.value, e.what()));
      }
    } else if (copy.raw) {
      o->abort_fetch();
    }
    if (holder_failed && keep_specs_) {
      // Where the transport reports dead peers (ucx), a failed pull means the holder
      // died: the copy is made again or asked for, and the waiting pulls go on then.
      on_rank_lost(copy.region.owner, s);
      retry_pull(o);
      return;
    }
    finish_fetch(o, s);
  });
  if (!st.ok()) {
    if (copy.raw) o->abort_fetch();
    if (keep_specs_ && st.code() == StatusCode::kUnavailable) {
      on_rank_lost(holder, st);
      retry_pull(o);
      return;
    }
    finish_fetch(o, st);
  }
}

const std::byte* Cluster::readable_here(const RemoteCopy& copy) const noexcept {
  if (copy.own_region) {
    // The holder's own memory: read here where this rank is the holder (a task came
    // back to it; the held copy keeps the value), through the transport elsewhere.
    return copy.region.owner == self_ ? reinterpret_cast<const std::byte*>(copy.region.address + copy.offset) : nullptr;
  }
  const Rank holder = copy.region.owner;
  const std::span<const std::byte> arena = arena_of(holder);
  if (arena.empty() || copy.offset > arena.size() || copy.length > arena.size() - copy.offset) {
    return nullptr;  // a copy outside a peer's arena goes to the transport, which refuses it
  }
  return arena.data() + copy.offset;
}

bool Cluster::pull_is_local_copy(ObjectState* o) const noexcept {
  DistInfo* d = o->dist();
  if (!d) return false;
  std::lock_guard lock(d->mutex);
  // Not where the copy's holder is lost (or the copy moves): the pull then waits for
  // a new copy, perhaps one to be pulled through the transport.
  return d->copy && !d->lost && !d->relocating && !rank_lost(d->copy->region.owner) &&
         readable_here(*d->copy) != nullptr;
}

void Cluster::retry_pull(ObjectState* o) {
  fetches_in_flight_.fetch_sub(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(o->dist()->mutex);
    o->dist()->fetching = false;
  }
  relocate(o);
  o->release();
}

void Cluster::finish_fetch(ObjectState* o, const Status& status) {
  fetches_in_flight_.fetch_sub(1, std::memory_order_relaxed);
  DistInfo* d = o->dist();
  std::vector<std::function<void(const Status&)>> callbacks;
  bool owner = false;
  {
    std::lock_guard lock(d->mutex);
    d->fetching = false;
    owner = !d->proxy;
    callbacks.swap(d->on_fetched);
  }
  // The lineage is cut where the owner holds the value: a lost holder no longer
  // matters (and if the owner dies, the object is lost however it was made), so the
  // task and the arguments it kept alive go.
  if (status.ok() && owner && o->residency() != Residency::kRemote) {
    if (TaskBase* task = take_lineage(o->id())) {
      lineage_cut_.fetch_add(1, std::memory_order_relaxed);
      delete task;
    }
    take_saved(o->id());  // nor is a checkpoint's copy needed
  }
  for (auto& cb : callbacks) cb(status);
  o->release();
}

void Cluster::fetch(ObjectState* o) {
  if (t_on_progress_thread) {
    throw Error("brisk: internal error: a blocking fetch on the progress thread");
  }
  struct Wait {
    std::atomic<std::uint32_t> done{0};
    Status status;
  };
  auto w = std::make_shared<Wait>();
  fetch_async(o, [w](const Status& st) {
    w->status = st;
    w->done.store(1, std::memory_order_release);
    detail::futex_wake(&w->done, 1);
  });
  if (w->done.load(std::memory_order_acquire) == 0) {
    // Poll while waiting, for as long as the bytes should take at 1 GB/s (at least
    // the spin time): this thread is awake, so it moves the transfer along itself.
    const auto expected = std::chrono::nanoseconds(o->bytes());
    const auto until = Clock::now() + std::max<std::chrono::nanoseconds>(config_.spin, expected);
    waiting_pollers_.fetch_add(1, std::memory_order_relaxed);
    spin_begin();
    for (unsigned i = 0; w->done.load(std::memory_order_acquire) == 0 && Clock::now() < until; ++i) {
      if (poll() == 0 && (i & 63) == 63) sched_yield();
      detail::cpu_relax();
    }
    waiting_pollers_.fetch_sub(1, std::memory_order_relaxed);
    spin_end(w->done.load(std::memory_order_acquire) == 0);
    if (w->done.load(std::memory_order_acquire) == 0) {
      local_.block_begin();
      while (w->done.load(std::memory_order_acquire) == 0) detail::futex_wait(&w->done, 0);
      local_.block_end();
    }
  }
  if (!w->status.ok()) {
    std::shared_ptr<const ErrorInfo> lost;
    {
      std::lock_guard lock(o->dist()->mutex);
      lost = o->dist()->lost;
    }
    if (lost) detail::throw_error(lost);
    throw Error("brisk: could not fetch object " + o->id().hex() + ": " + w->status.message());
  }
}

// ---------------------------------------------------------------------------
// Heartbeats, control state, timeline.

void Cluster::heartbeat() {
  NodeStatus s;
  s.rank = self_;
  s.total = local_.capacity();
  s.available = local_.available();
  const auto q = local_.queued();
  s.queued = static_cast<std::uint32_t>(std::max<std::int64_t>(0, q));
  s.running = static_cast<std::uint32_t>(std::max<std::int64_t>(0, local_.running()));
  s.sequence = ++heartbeat_sequence_;
  s.received = tasks_received_.load(std::memory_order_relaxed);
  control_->set_node_status(s);
  if (events_ && config_.shard_events > 0) {
    for (const EventLog::Event& e : events_->read_new(event_cursors_, static_cast<std::size_t>(config_.shard_events), &events_missed_)) {
      control_->add_event(EventRecord{self_, e.task, static_cast<std::uint8_t>(e.kind),
                                      static_cast<std::uint64_t>(static_cast<std::int64_t>(e.ts_ns) + config_.clock_offset_ns),
                                      e.name ? e.name : ""});
    }
  }
}

void Cluster::read_control(Rank from, const char* what, const std::function<void()>& handle) {
  try {
    handle();
  } catch (const std::exception& e) {
    malformed(from, fmt::format("{}: {}", what, e.what()));
  }
}

void Cluster::handle_control(Rank from, std::span<const std::byte> payload) {
  if (payload.empty()) {
    malformed(from, "empty control message");
    return;
  }
  const auto type = std::to_integer<std::uint8_t>(payload[0]);
  const auto body = payload.subspan(1);
  switch (type) {
    case kCtlState: {
      auto result = control_->handle(from, body);
      if (!result.ok()) {
        malformed(from, result.status().message());
        return;
      }
      apply_node_statuses(result->nodes);
      for (const auto& out : result->outgoing) send_control_state(out);
      return;
    }
    case kCtlTimelineAsk: {
      std::vector<std::byte> p{std::byte{kCtlTimelinePart}};
      auto events = snapshot_events();
      p.insert(p.end(), events.begin(), events.end());
      send_frame(from, FrameKind::kControl, std::move(p));
      return;
    }
    case kCtlTimelinePart: {
      {
        std::lock_guard lock(timeline_mutex_);
        timeline_parts_.emplace_back(body.begin(), body.end());
      }
      timeline_replies_.fetch_add(1, std::memory_order_release);
      return;
    }
    case kCtlActorMoved:
      read_control(from, "actor move", [&] {
        const ActorMoved m = decode_actor_moved(body, size_);
        detail::actor_moved(m.actor, m.rank, m.incarnation);
      });
      return;
    case kCtlRankDead:
      read_control(from, "rank death notice", [&] {
        const RankDeath m = decode_rank_death(body, size_);
        if (m.rank == self_.value) {
          // This rank was silent too long (hung or stopped) and the job went on
          // without it: its work is being done elsewhere, so it must not go on.
          std::fprintf(stderr, "brisk: rank %d: the job declared this rank dead (%s); leaving\n", self_.value,
                       m.why.c_str());
          std::fflush(nullptr);
          std::_Exit(1);
        }
        on_rank_lost(Rank{m.rank}, unavailable(m.why), false);
      });
      return;
    case kCtlCheckpoint:
      read_control(from, "checkpoint request", [&] {
        CheckpointRequest m = decode_checkpoint_request(body);
        {
          std::lock_guard lock(checkpoint_mutex_);
          checkpoint_sequence_ = m.sequence;
          checkpoint_tag_ = std::move(m.tag);
        }
        wake_main();
      });
      return;
    case kCtlCheckpointReport:
      if (checkpoint_report_handler_) checkpoint_report_handler_(from, body);
      return;
    case kCtlCheckpointSaved:
      read_control(from, "checkpoint's objects", [&] {
        if (from.value != 0) throw SerializationError("not from rank 0, which commits checkpoints");
        const CheckpointSaved m = decode_checkpoint_saved(body, size_);
        apply_saved(m.sequence, m.file, m.objects);
      });
      return;
    case kCtlLocate:
      read_control(from, "object locate request", [&] { handle_locate(from, decode_locate(body)); });
      return;
    case kCtlLocated:
      read_control(from, "object location", [&] { handle_located(from, decode_located(body, size_)); });
      return;
    case kCtlEnd:
      read_control(from, "end of job", [&] {
        const EndOfJob m = decode_end(body);
        const int code = m.code;
        if (m.without_mpi) blocked_end_.store(true, std::memory_order_release);  // a rank died or is blocked
        end_code_.store(code, std::memory_order_release);
        wake_main();
        if (m.without_mpi || any_rank_lost()) {
          // After a death this rank's main thread may be stuck in an MPI collective
          // that can never finish (a user's own, say), or in its overdue part of a
          // checkpoint: if it has not left in 2 s, leave without it.
          std::thread([code, self = self_.value,
                       lost = detail::lost_ranks_text(size_, [this](int r) { return rank_lost(Rank{r}); })] {
            std::this_thread::sleep_for(std::chrono::seconds(2));
            std::fprintf(stderr, "brisk: rank %d: leaving with the job's end (code %d); this rank was blocked\n", self, code);
            detail::record_exit_status(code, fmt::format("rank 0 ended the job with exit code {}; this rank was blocked", code),
                                       lost);
            std::fflush(nullptr);
            std::_Exit(code);
          }).detach();
        }
      });
      return;
    default:
      malformed(from, fmt::format("unknown control message type {}", type));
  }
}

void Cluster::apply_node_statuses(const std::vector<NodeStatus>& statuses) {
  if (statuses.empty()) return;
  std::vector<GlobalScheduler::Heartbeat> beats;
  beats.reserve(statuses.size());
  for (const NodeStatus& n : statuses) {
    beats.push_back({n.rank, n.sequence, static_cast<std::int64_t>(n.queued) + n.running, n.received, n.alive});
  }
  idle_elsewhere_.store(gs_.apply(beats, std::chrono::steady_clock::now()), std::memory_order_relaxed);
}

std::vector<std::byte> Cluster::snapshot_events() const {
  Writer w;
  w(self_.value, config_.host, static_cast<std::int64_t>(::getpid()));
  std::vector<EventLog::ThreadEvents> threads;
  if (events_) threads = events_->snapshot();
  w(static_cast<std::uint64_t>(threads.size()));
  for (const auto& t : threads) {
    w(t.thread_name, t.thread_index, t.dropped, static_cast<std::uint64_t>(t.events.size()));
    for (const auto& e : t.events) {
      const std::int64_t ts = static_cast<std::int64_t>(e.ts_ns) + config_.clock_offset_ns;
      w(ts, e.task, static_cast<std::uint8_t>(e.kind), std::string(e.name ? e.name : ""));
    }
  }
  return w.take();
}

Status Cluster::write_timeline(const std::string& path) {
  if (self_.value != 0) return failed_precondition("brisk::timeline: only rank 0 writes the merged timeline");
  {
    std::lock_guard lock(timeline_mutex_);
    timeline_parts_.clear();
  }
  timeline_replies_.store(0);
  for (int r = 1; r < size_; ++r) send_frame(Rank{r}, FrameKind::kControl, {std::byte{kCtlTimelineAsk}});
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (timeline_replies_.load(std::memory_order_acquire) < size_ - 1) {
    if (Clock::now() > deadline) {
      return unavailable(fmt::format("brisk::timeline: {} of {} ranks did not send their events within 30 s",
                                     size_ - 1 - timeline_replies_.load(), size_ - 1));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::vector<RankEvents> ranks;
  auto parse = [&](std::span<const std::byte> bytes) { ranks.push_back(decode_timeline_part(bytes)); };
  try {
    parse(snapshot_events());
    std::lock_guard lock(timeline_mutex_);
    for (const auto& part : timeline_parts_) parse(part);
  } catch (const std::exception& e) {
    return internal_error(fmt::format("brisk::timeline: a rank's events were malformed: {}", e.what()));
  }
  std::sort(ranks.begin(), ranks.end(), [](const RankEvents& a, const RankEvents& b) { return a.rank < b.rank; });
  return write_merged_chrome_trace(path, ranks, "CLOCK_REALTIME");  // each rank's clock_offset_ns
}

ClusterStats Cluster::stats() const {
  ClusterStats s;
  s.tasks_sent = tasks_sent_.load();
  s.tasks_received = tasks_received_.load();
  s.tasks_placed = tasks_placed_.load();
  s.results_received = results_received_.load();
  s.fetches = fetches_.load();
  s.fetched_bytes = fetched_bytes_.load();
  s.fetched_shared = fetched_shared_.load();
  s.borrowed = borrowed_.load();
  s.node_peers = node_peers_;
  s.malformed = malformed_.load();
  s.scheduler_stalls = scheduler_stalls_.load(std::memory_order_relaxed);
  s.tasks_replayed = tasks_replayed_.load();
  s.objects_rebuilt = objects_rebuilt_.load();
  s.objects_lost = objects_lost_.load();
  {
    std::lock_guard lock(const_cast<std::mutex&>(lineage_mutex_));
    s.lineage = lineage_.size();
    s.lineage_cut = lineage_cut_.load(std::memory_order_relaxed);
  }
  s.lineage_checkpointed = lineage_checkpointed_.load(std::memory_order_relaxed);
  s.objects_restored = objects_restored_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(saved_mutex_);
    s.saved = saved_.size();
  }
  s.frames_sent = frames_sent_.load();
  s.arena_used = arena_alloc_.used();
  s.arena_bytes = arena_registration_ ? arena_.size() : 0;
  s.arena_shared = config_.arena_shared;
  {
    std::lock_guard lock(directory_mutex_);
    s.directory = directory_.size();
  }
  {
    std::lock_guard lock(held_mutex_);
    s.held = held_.size();
  }
  s.filled_later = filled_later_.load(std::memory_order_relaxed);
  s.exposed = static_cast<std::size_t>(std::max<std::int64_t>(0, exposed_.load(std::memory_order_relaxed)));
  {
    std::lock_guard lock(pending_mutex_);
    s.pending = pending_.size();
  }
  return s;
}

}  // namespace brisk
