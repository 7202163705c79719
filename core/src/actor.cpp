// Actors on this rank: the table of objects and each actor's mailbox, which runs
// its calls one at a time and each caller's calls in order.
#include "brisk/core/actor.hpp"

#include <fmt/format.h>

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

struct Table {
  std::mutex mutex;
  std::unordered_map<TaskId, std::shared_ptr<Slot>> slots;
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

std::shared_ptr<const ErrorInfo> actor_error(const TaskBase* task, std::string message) {
  auto e = std::make_shared<ErrorInfo>();
  e->kind = ErrorKind::kTaskFailed;
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

}  // namespace

ActorCall::~ActorCall() {
  if (creation) creation->release();
}

void route_actor_call(TaskBase* task) noexcept {
  ActorCall& call = *task->actor_call();
  RuntimeContext* ctx = context();
  if (call.rank < 0 && call.creation) {
    if (call.creation->has_error()) {
      // The constructor failed: the call runs nowhere and reports that error.
      task->set_placed();
      ctx->executor->submit(task);
      return;
    }
    call.rank = static_cast<TypedObject<ActorSelf>*>(call.creation)->value().rank;
  }
  if (call.rank == ctx->rank) {
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
  {
    Table& t = table();
    std::lock_guard lock(t.mutex);
    slots.swap(t.slots);
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
