// Actors on this rank: the table of objects and each actor's mailbox, which runs
// its calls one at a time and each caller's calls in order.
#include "brisk/core/actor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace brisk::detail {
namespace {

struct Slot {
  std::mutex mutex;
  void* instance = nullptr;
  void (*destroy)(void*) = nullptr;
  std::string type;
  bool busy = false;                                        // a call is with the executor
  std::unordered_map<std::uint64_t, std::uint64_t> next;    // caller -> next sequence number
  std::map<std::pair<std::uint64_t, std::uint64_t>, TaskBase*> waiting;  // (caller, seq)
  std::uint64_t last_caller = 0;                            // round robin among callers
};

// Where a rebuilt actor is (every rank that heard of the rebuild), and on the
// creator's rank while it is being rebuilt, the calls waiting for it.
struct Location {
  int rank = -1;
  std::uint32_t incarnation = 0;
  bool rebuilding = false;
  bool lost = false;
  std::string why;                 // lost: the reason calls fail
  std::vector<TaskBase*> parked;   // rebuilding: calls to route once it is done
};

// On the creator's rank: how to rebuild an actor with restarts.
struct Restartable : WaiterNode {
  TaskId id;
  int left = 0;
  std::function<Ref<ActorSelf>()> rebuild;
  std::string type;
  Ref<ActorSelf> current;          // the latest build's creation object
  std::uint32_t incarnation = 0;
  std::size_t replay = 0;          // replay_calls: calls of the log the current rebuild runs again
  std::uint32_t replayed = 0;      // replay_calls: the last build whose replay was submitted (or will not come)
};

// On the creator's rank: the calls of an actor with replay_calls.
struct Logged {
  std::shared_ptr<ActorLog> log;
  std::shared_ptr<ActorCaller> caller;
};

struct Table {
  std::mutex mutex;
  std::unordered_map<TaskId, std::shared_ptr<Slot>> slots;
  std::unordered_map<TaskId, Location> moves;
  std::unordered_map<TaskId, std::shared_ptr<Restartable>> restartable;
  std::unordered_map<TaskId, Logged> logs;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: calls may finish during exit
  return *t;
}

std::shared_ptr<Slot> find_slot(const TaskId& id) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.slots.find(id);
  return it == t.slots.end() ? nullptr : it->second;
}

std::shared_ptr<const ErrorInfo> actor_error(const TaskBase* task, std::string message,
                                             ErrorKind kind = ErrorKind::kTaskFailed) {
  auto e = std::make_shared<ErrorInfo>();
  e->kind = kind;
  e->message = std::move(message);
  e->function = task->name();
  RuntimeContext* ctx = context();
  e->rank = ctx ? ctx->rank : -1;
  return e;
}

// The call to hand to the executor next, if the actor is free: the next call in
// order of the first caller after the last one served that has it waiting.
TaskBase* take_next(Slot& s) {
  if (s.busy || s.waiting.empty()) return nullptr;
  auto pick = [&](auto begin, auto end) -> TaskBase* {
    for (auto it = begin; it != end;) {
      const std::uint64_t caller = it->first.first;
      if (it->first.second == s.next[caller]) {
        TaskBase* t = it->second;
        s.waiting.erase(it);
        ++s.next[caller];
        s.busy = true;
        s.last_caller = caller;
        return t;
      }
      it = s.waiting.lower_bound({caller + 1, 0});  // this caller waits for an earlier call
      if (caller == ~std::uint64_t{0}) break;
    }
    return nullptr;
  };
  const auto split = s.waiting.lower_bound({s.last_caller + 1, 0});
  if (TaskBase* t = pick(split, s.waiting.end())) return t;
  return pick(s.waiting.begin(), split);
}

void dispatch(TaskBase* task) noexcept {
  if (!task) return;
  task->actor_call()->dispatched = true;
  task->set_placed();
  context()->executor->submit(task);
}

void arrive(TaskBase* task) noexcept {
  ActorCall& call = *task->actor_call();
  std::shared_ptr<Slot> slot = find_slot(call.actor);
  if (!slot) {
    RuntimeContext* ctx = context();
    task->cancel(actor_error(task, fmt::format("no actor {:016x}{:016x} lives on rank {} (the job may be ending)",
                                               call.actor.hi, call.actor.lo, ctx ? ctx->rank : -1)));
    delete task;
    return;
  }
  TaskBase* next = nullptr;
  {
    std::lock_guard lock(slot->mutex);
    slot->waiting.emplace(std::make_pair(call.caller, call.seq), task);
    next = take_next(*slot);
  }
  dispatch(next);
}

std::atomic<std::uint64_t> g_callers{0};

void fail_lost(TaskBase* task, std::string why) noexcept {
  task->cancel(actor_error(task, std::move(why), ErrorKind::kRankLost));
  delete task;
}

// The rank of the latest build of the actor, or -1 while it is not known.
int built_rank(const Ref<ActorSelf>& creation) {
  if (!creation.ready() || creation.state()->has_error()) return -1;
  return creation.state()->value().rank;
}

void rebuild_done(WaiterNode* node, ObjectState*) noexcept;
void replay_calls(Restartable& r, std::uint32_t incarnation, int rank) noexcept;
void fail_logged_calls(const TaskId& id, const std::string& why) noexcept;

// Starts rebuilding `r` (table lock held); false when no restart is left.
bool start_rebuild(Table& t, Restartable& r, int lost_rank) {
  Location& loc = t.moves[r.id];
  if (r.left <= 0 || !r.rebuild) {
    loc.lost = true;
    loc.rebuilding = false;
    loc.rank = lost_rank;
    loc.why = fmt::format("the actor {} was on rank {}, which was lost{}", r.type, lost_rank,
                          r.rebuild ? " (no restarts left)" : "");
    return false;
  }
  --r.left;
  loc.rebuilding = true;
  loc.lost = false;
  loc.rank = -1;
  loc.incarnation = ++r.incarnation;
  return true;
}

}  // namespace

ActorCall::~ActorCall() {
  if (creation) creation->release();
}

void actors_rank_lost(int rank) noexcept {
  Table& t = table();
  std::vector<std::shared_ptr<Restartable>> rebuild;
  std::vector<TaskBase*> failed;
  // Actors that replay their calls: the build number changes and the calls logged
  // so far are counted under the log's lock (taken before the table's, as calls do),
  // so that every call is either replayed or numbered for the new build.
  std::vector<std::pair<std::shared_ptr<Restartable>, Logged>> logged;
  {
    std::lock_guard lock(t.mutex);
    for (auto& [id, r] : t.restartable) {
      auto it = t.moves.find(id);
      const int at = it != t.moves.end() && !it->second.rebuilding ? it->second.rank : built_rank(r->current);
      if (at != rank || (it != t.moves.end() && it->second.lost)) continue;
      if (auto lg = t.logs.find(id); lg != t.logs.end()) {
        logged.emplace_back(r, lg->second);
        continue;
      }
      if (start_rebuild(t, *r, rank)) rebuild.push_back(r);
    }
    // Rebuilt actors this rank heard of (it did not create them): calls now fail.
    for (auto& [id, loc] : t.moves) {
      if (loc.rank == rank && !loc.lost && !loc.rebuilding && !t.restartable.count(id)) {
        loc.lost = true;
        loc.why = fmt::format("the actor's rank {} was lost", rank);
      }
    }
  }
  for (auto& [r, lg] : logged) {
    std::lock_guard log_lock(lg.log->mutex);
    std::lock_guard lock(t.mutex);
    if (!start_rebuild(t, *r, rank)) continue;
    r->replay = lg.log->entries.size();
    lg.caller->reserve(r->incarnation, r->replay);
    rebuild.push_back(r);
  }
  for (auto& r : rebuild) {
    Ref<ActorSelf> next;
    try {
      CurrentTaskScope none(nullptr);  // submitted as a root task of this thread
      next = r->rebuild();
    } catch (const std::exception& e) {
      std::string why;
      {
        std::lock_guard lock(t.mutex);
        Location& loc = t.moves[r->id];
        loc.rebuilding = false;
        loc.lost = true;
        loc.why = why = fmt::format("the actor {} could not be rebuilt: {}", r->type, e.what());
        failed.swap(loc.parked);
      }
      fail_logged_calls(r->id, why);
      continue;
    }
    ObjectState* o = next.state();
    {
      std::lock_guard lock(t.mutex);
      r->current = next;
    }
    r->notify = &rebuild_done;
    if (!o->add_waiter(r.get())) rebuild_done(r.get(), o);
  }
  for (TaskBase* task : failed) fail_lost(task, "the actor could not be rebuilt");
}

namespace {
void rebuild_done(WaiterNode* node, ObjectState*) noexcept {
  auto* r = static_cast<Restartable*>(node);
  Table& t = table();
  std::vector<TaskBase*> parked;
  int rank = -1;
  std::uint32_t incarnation = 0;
  {
    std::lock_guard lock(t.mutex);
    Location& loc = t.moves[r->id];
    parked.swap(loc.parked);
    loc.rebuilding = false;
    if (r->current.state()->has_error()) {
      loc.lost = true;
      loc.why = fmt::format("the actor {} could not be rebuilt: {}", r->type, r->current.state()->error()->message);
    } else {
      loc.rank = rank = r->current.state()->value().rank;
      incarnation = loc.incarnation;
    }
  }
  RuntimeContext* ctx = context();
  if (rank >= 0 && ctx && ctx->distributed) ctx->distributed->announce_actor_moved(r->id, Rank{rank}, incarnation);
  if (rank >= 0) {
    replay_calls(*r, incarnation, rank);
  } else {
    fail_logged_calls(r->id, fmt::format("the actor {} could not be rebuilt", r->type));
  }
  for (TaskBase* task : parked) route_actor_call(task);
}

// The call log of an actor created here with replay_calls (empty when none).
Logged find_log(const TaskId& id) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.logs.find(id);
  return it == t.logs.end() ? Logged{} : it->second;
}

// Build `incarnation` of actor `id` (0: its latest) has had its replay submitted, or
// will not have one: results of earlier calls that waited for it and were not made again are lost.
void replay_over(const TaskId& id, std::uint32_t incarnation) noexcept {
  {
    Table& t = table();
    std::lock_guard lock(t.mutex);
    auto it = t.restartable.find(id);
    if (it != t.restartable.end()) {
      Restartable& r = *it->second;
      r.replayed = std::max(r.replayed, incarnation ? incarnation : r.incarnation);
    }
  }
  RuntimeContext* ctx = context();
  if (ctx && ctx->distributed) ctx->distributed->actor_replay_done(id);
}

// A rebuild that does not happen: the logged calls whose results never came fail.
void fail_logged_calls(const TaskId& id, const std::string& why) noexcept {
  const Logged lg = find_log(id);
  if (!lg.log) return;
  replay_over(id, 0);
  std::lock_guard log_lock(lg.log->mutex);
  for (auto& e : lg.log->entries) {
    if (e->original && !e->original->ready()) {
      auto error = std::make_shared<ErrorInfo>();
      error->kind = ErrorKind::kRankLost;
      error->message = why;
      error->function = "actor call";
      RuntimeContext* ctx = context();
      error->rank = ctx ? ctx->rank : -1;
      e->original->complete_error(std::move(error));
    }
  }
}

// The calls logged before the rebuild, again, in order, as the first calls of the
// new build; a call whose result never came gets the replayed one, and one whose
// result is complete but whose only copy died with the old rank makes it again (a
// large result stays where the call ran: benchmarks/fault/CMakeLists.txt,
// fault_chaos_actor_results_*).
void replay_calls(Restartable& r, std::uint32_t incarnation, int rank) noexcept {
  const Logged lg = find_log(r.id);
  if (!lg.log) return;
  RuntimeContext* ctx = context();
  Distributed* dist = ctx ? ctx->distributed : nullptr;
  {
    CurrentTaskScope none(nullptr);  // submitted as root tasks of this thread
    std::lock_guard log_lock(lg.log->mutex);
    const std::size_t n = std::min(r.replay, lg.log->entries.size());
    for (std::size_t k = 0; k < n; ++k) {
      ActorLogEntry& e = *lg.log->entries[k];
      ObjectState* into = e.original && !e.original->ready() ? e.original : nullptr;
      ObjectState* again = !into && dist ? dist->take_actor_result(e.id, r.id, incarnation) : nullptr;
      try {
        e.replay(into ? into : again, incarnation, k, rank, again != nullptr);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "brisk: replaying call %zu of actor %s failed: %s\n", k, r.type.c_str(), ex.what());
        if (again) dist->actor_result_lost(again, fmt::format("replaying its actor call failed: {}", ex.what()));
      }
      if (again) again->release();  // take_actor_result's; the call holds its own
    }
  }
  replay_over(r.id, incarnation);
}
}  // namespace

void actor_moved(TaskId id, int rank, std::uint32_t incarnation) noexcept {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  Location& loc = t.moves[id];
  if (incarnation < loc.incarnation) return;
  loc.rank = rank;
  loc.incarnation = incarnation;
  loc.lost = false;
  loc.rebuilding = false;
}

std::uint32_t actor_incarnation(TaskId id) noexcept {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.moves.find(id);
  return it == t.moves.end() ? 0 : it->second.incarnation;
}

int actor_moved_rank(TaskId id) noexcept {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.moves.find(id);
  return it == t.moves.end() || it->second.rebuilding ? -1 : it->second.rank;
}

namespace {
void log_entry_done(WaiterNode* node, ObjectState*) noexcept {
  auto* e = static_cast<ActorLogEntry*>(node);
  std::lock_guard lock(e->log->mutex);
  if (ObjectState* o = std::exchange(e->original, nullptr)) o->release();
}
}  // namespace

void ActorLog::add(std::unique_ptr<ActorLogEntry> entry, ObjectState* original) {
  entry->log = this;
  entry->id = original->id();
  entry->notify = &log_entry_done;
  original->add_ref();
  entry->original = original;
  if (!original->add_waiter(entry.get())) {
    entry->original = nullptr;
    original->release();
  }
  entries.push_back(std::move(entry));
}

void register_actor_log(TaskId id, std::shared_ptr<ActorLog> log, std::shared_ptr<ActorCaller> caller) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.logs[id] = Logged{std::move(log), std::move(caller)};
}

bool actor_replay_pending(TaskId id, std::uint32_t incarnation) noexcept {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  if (t.logs.count(id) == 0) return false;
  auto r = t.restartable.find(id);
  auto loc = t.moves.find(id);
  if (r == t.restartable.end() || loc == t.moves.end() || loc->second.lost) return false;
  return r->second->incarnation > incarnation && r->second->replayed < r->second->incarnation;
}

bool actor_replays(TaskId id, std::uint32_t incarnation) noexcept {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  if (t.logs.count(id) == 0) return false;
  auto it = t.moves.find(id);
  return it != t.moves.end() && it->second.incarnation > incarnation;
}

void register_actor_restarts(TaskId id, int max_restarts, Ref<ActorSelf> creation,
                             std::function<Ref<ActorSelf>()> rebuild, std::string type) {
  auto r = std::make_shared<Restartable>();
  r->id = id;
  r->left = max_restarts;
  r->rebuild = std::move(rebuild);
  r->type = std::move(type);
  r->current = std::move(creation);
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.restartable[id] = std::move(r);
}

void route_actor_call(TaskBase* task) noexcept {
  ActorCall& call = *task->actor_call();
  RuntimeContext* ctx = context();
  {
    Table& t = table();
    std::unique_lock lock(t.mutex);
    auto it = t.moves.find(call.actor);
    if (it != t.moves.end()) {
      Location& loc = it->second;
      if (call.incarnation < loc.incarnation) {
        const bool replayed = call.logged && t.logs.count(call.actor) != 0;
        lock.unlock();
        if (replayed) {
          // The rebuild runs this call again and completes its result.
          if (ObjectState* result = task->take_result()) result->release();
          delete task;
          return;
        }
        fail_lost(task, "the actor was rebuilt on another rank after this call was made");
        return;
      }
      if (loc.rebuilding) {
        loc.parked.push_back(task);
        return;
      }
      if (loc.lost) {
        std::string why = loc.why;
        lock.unlock();
        fail_lost(task, std::move(why));
        return;
      }
      call.rank = loc.rank;
    }
  }
  if (call.rank < 0 && call.creation) {
    if (call.creation->has_error()) {
      // The constructor failed: the call runs nowhere and reports that error.
      task->set_placed();
      ctx->executor->submit(task);
      return;
    }
    call.rank = static_cast<TypedObject<ActorSelf>*>(call.creation)->value().rank;
  }
  if (ctx->distributed && call.rank >= 0 && call.rank < ctx->size && ctx->distributed->rank_lost(Rank{call.rank})) {
    fail_lost(task, fmt::format("the actor's rank {} was lost", call.rank));
    return;
  }
  if (call.rank == ctx->rank && !call.rebuild) {
    arrive(task);
  } else if (ctx->distributed && call.rank >= 0 && call.rank < ctx->size) {
    ctx->distributed->send_actor_call(task, Rank{call.rank});
  } else {
    task->cancel(actor_error(task, fmt::format("its actor is on rank {}, which is not in this job of {} ranks",
                                               call.rank, ctx->size)));
    delete task;
  }
}

void actor_call_finished(const ActorCall& call) noexcept {
  if (!call.dispatched) return;
  std::shared_ptr<Slot> slot = find_slot(call.actor);
  if (!slot) return;
  TaskBase* next = nullptr;
  {
    std::lock_guard lock(slot->mutex);
    slot->busy = false;
    next = take_next(*slot);
  }
  dispatch(next);
}

void register_actor_instance(TaskId id, void* instance, void (*destroy)(void*), std::string type) {
  auto slot = std::make_shared<Slot>();
  slot->instance = instance;
  slot->destroy = destroy;
  slot->type = std::move(type);
  Table& t = table();
  std::lock_guard lock(t.mutex);
  auto [it, inserted] = t.slots.emplace(id, slot);
  if (!inserted) {
    destroy(instance);
    throw Error(fmt::format("brisk::actor: an actor with id {:016x}{:016x} already exists on this rank", id.hi, id.lo));
  }
}

void* actor_instance(TaskId id, const char* type) {
  std::shared_ptr<Slot> slot = find_slot(id);
  if (!slot) {
    RuntimeContext* ctx = context();
    throw Error(fmt::format("brisk: no actor {} with id {:016x}{:016x} on rank {}", type, id.hi, id.lo,
                            ctx ? ctx->rank : -1));
  }
  return slot->instance;
}

std::uint64_t new_actor_caller() noexcept {
  RuntimeContext* ctx = context();
  const std::uint64_t rank = ctx ? static_cast<std::uint64_t>(ctx->rank) : 0;
  return (rank << 40) | (g_callers.fetch_add(1, std::memory_order_relaxed) + 1);
}

void destroy_actors() noexcept {
  std::unordered_map<TaskId, std::shared_ptr<Slot>> slots;
  std::unordered_map<TaskId, Logged> logs;
  {
    Table& t = table();
    std::lock_guard lock(t.mutex);
    slots.swap(t.slots);
    logs.swap(t.logs);
  }
  // Kept calls let go of their arguments now, while the runtime is up; an entry
  // still waiting on its call's result stays (it is registered with the object).
  for (auto& [id, lg] : logs) {
    std::lock_guard lock(lg.log->mutex);
    for (auto& e : lg.log->entries) {
      if (!e->original) continue;
      e->keep = lg.log;  // the entry (and its log) outlive the table: its call may still end
      (void)e.release();
    }
    lg.log->entries.clear();
  }
  for (auto& [id, slot] : slots) {
    std::vector<TaskBase*> waiting;
    {
      std::lock_guard lock(slot->mutex);
      for (auto& [key, task] : slot->waiting) waiting.push_back(task);
      slot->waiting.clear();
    }
    for (TaskBase* task : waiting) {
      task->cancel(actor_error(task, "the job ended before the call ran"));
      delete task;
    }
    slot->destroy(slot->instance);
  }
}

void throw_unregistered_method(const char* type) {
  throw Error(fmt::format(
      "brisk::Actor<{}>::call: the method is not registered; add BRISK_REMOTE(Class::method) at namespace scope",
      type));
}

void throw_actor_unusable(const std::string& why) { throw Error(why); }

}  // namespace brisk::detail
