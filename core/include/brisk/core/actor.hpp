// brisk/core/actor.hpp — actors: stateful objects on a rank, called through handles.
//
//   struct Counter {
//     explicit Counter(int start) : n(start) {}
//     int add(int k) { return n += k; }
//     int n;
//   };
//   BRISK_REMOTE(Counter::add);                      // every method that is called
//
//   brisk::Actor<Counter> c = brisk::actor<Counter>(10);
//   brisk::Ref<int> a = c.call(&Counter::add, 1);    // 11
//   brisk::Ref<int> b = c.call(&Counter::add, a);    // 22: waits for a, like a task
//
// Placement: the constructor runs as a task on a rank that the global scheduler
// chooses by the actor's resources and by how many actors each rank already holds
// (pin one with ActorOptions::resources, e.g. {{"rank1", 1}}). Its arguments may be
// values or Refs, as for tasks.
//
// Calls: a call is a task that runs on the actor's rank, one call of an actor at a
// time (the object needs no lock), with the actor's resources. Calls made through
// one handle (and its copies on the same rank) run in the order they were made;
// calls from different handles interleave. A call waits for its Ref arguments, and
// later calls of the same handle wait behind it. A method that throws fails that
// call only (get rethrows it as TaskError); the actor keeps its state.
//
// Handles are cheap to copy and may be passed to tasks and to other actors' methods
// (a task taking one waits until the actor exists). A handle received on another
// rank makes calls of its own order.
//
// Failures: if the constructor throws, every call fails with its error. If the
// actor's rank dies (detected on the ucx transport), the calls running or queued
// there fail with a rank-lost TaskError; with ActorOptions::max_restarts the
// creator's rank rebuilds the actor on a live rank (state starts afresh from the
// constructor) and later calls go there; calls made before the rebuild on other
// ranks fail. Without restarts every later call fails. Calling an actor from its
// own method and waiting on the result deadlocks, as in any actor system. Actors
// live until the job ends.
//
// Register every method that is called with BRISK_REMOTE(Class::method); its
// parameters and result follow the rules of remote functions. Overloaded methods
// cannot be registered.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "brisk/core/api.hpp"
#include "brisk/core/function_registry.hpp"

namespace brisk {

// How an actor is placed and run.
struct ActorOptions {
  std::string name;                          // shown in errors and the timeline
  std::map<std::string, double> resources;   // for placement and for every call; empty = {CPU: 1}
  // How often the actor is rebuilt (its constructor rerun with the same arguments,
  // on another rank) when its rank dies. The constructor's arguments must then be
  // copyable.
  int max_restarts = 0;
  // With max_restarts: the creating rank keeps every call it makes (the method and
  // copies of its arguments), and a rebuilt actor runs them again, in their order,
  // before any new call, so that a deterministic actor comes back with the state it
  // had; calls that were in flight when the rank died get the replayed results.
  // Calls made from other ranks' handles are not kept. The kept calls live as long
  // as the actor (their arguments with them).
  bool replay_calls = false;
};

namespace detail {

// Where an actor is: its id (the id of its creation) and its rank.
struct ActorSelf {
  TaskId id;
  int rank = -1;
  template <class A>
  void serialize(A& ar) {
    ar(id.hi, id.lo, rank);
  }
};

// This rank's actor objects (actor.cpp). The table owns them until the job ends.
void register_actor_instance(TaskId id, void* instance, void (*destroy)(void*), std::string type);
// The object for `id` on this rank; throws brisk::Error when there is none.
void* actor_instance(TaskId id, const char* type);
// A caller id unique in the job (the rank in the high bits).
std::uint64_t new_actor_caller() noexcept;
// How often the actor was rebuilt, as far as this rank knows (0: never).
std::uint32_t actor_incarnation(TaskId id) noexcept;
// The rank an actor was rebuilt on, or -1 if this rank knows of no rebuild.
int actor_moved_rank(TaskId id) noexcept;
// On the creator's rank: how to rebuild the actor when its rank dies.
void register_actor_restarts(TaskId id, int max_restarts, Ref<ActorSelf> creation,
                             std::function<Ref<ActorSelf>()> rebuild, std::string type);
struct ActorCaller;
struct ActorLog;

// The calls the creating rank made on an actor with replay_calls, in order. A
// rebuild replays the first `count` (those made before it) with the sequence
// numbers 0..count-1 of the new build.
struct ActorLogEntry : WaiterNode {
  // Submits the call again as call `seq` of build `incarnation` on `rank`, its result
  // into `into` (the original call's, not complete yet; or, with `rebuild`, complete
  // and to be made again: ActorCall::rebuild) or into a new object.
  std::function<void(ObjectState* into, std::uint32_t incarnation, std::uint64_t seq, int rank, bool rebuild)> replay;
  ObjectState* original = nullptr;  // a reference until the original completes (log mutex)
  ObjectId id;                      // the original's
  ActorLog* log = nullptr;
  std::shared_ptr<ActorLog> keep;  // at the job's end, for an entry left registered with its object
};
struct ActorLog {
  // Recursive: a replayed call that fails at once completes its original on the
  // replaying thread, whose waiter takes the lock again.
  std::recursive_mutex mutex;
  std::vector<std::unique_ptr<ActorLogEntry>> entries;
  // Appends `entry`, whose result is `original` (a reference is kept until it
  // completes). The caller holds `mutex`.
  void add(std::unique_ptr<ActorLogEntry> entry, ObjectState* original);
};
// On the creator's rank: the log of an actor that replays its calls.
void register_actor_log(TaskId id, std::shared_ptr<ActorLog> log, std::shared_ptr<ActorCaller> caller);
// Whether this rank started a rebuild of the actor after build `incarnation`, and
// so replays (or, if the rebuild failed, fails) the logged calls made for it: the
// results of such calls lost with the actor's rank are left to that.
bool actor_replays(TaskId id, std::uint32_t incarnation) noexcept;
// Whether this rank will replay the logged calls made for build `incarnation`: a
// rebuild after it was started and its replay has not been submitted yet (nor will
// it fail to come: no restarts left, a failed rebuild).
bool actor_replay_pending(TaskId id, std::uint32_t incarnation) noexcept;
// The runtime's notices: a rank died; an actor was rebuilt elsewhere (from its creator).
void actors_rank_lost(int rank) noexcept;
void actor_moved(TaskId id, int rank, std::uint32_t incarnation) noexcept;
// Destroys every actor of this rank and fails the calls still waiting (job end).
void destroy_actors() noexcept;
[[noreturn]] void throw_unregistered_method(const char* type);
[[noreturn]] void throw_actor_unusable(const std::string& why);

// The spelling of T, from the compiler (stable for one build on every rank).
template <class T>
std::string_view type_name() noexcept {
  std::string_view p = __PRETTY_FUNCTION__;
  const std::size_t start = p.find("T = ") + 4;
  const std::size_t end = p.find_first_of(";]", start);
  return p.substr(start, end - start);
}

template <class T>
struct unref { using type = std::remove_cvref_t<T>; };
template <class T>
struct unref<Ref<T>> { using type = T; };
template <class T>
using unref_t = typename unref<std::remove_cvref_t<T>>::type;

// The constructor of C as a remote function of (ActorSelf, P...).
template <class C, class... P>
struct ActorConstructor {
  static ActorSelf construct(ActorSelf self, P... args) {
    auto* object = new C(std::move(args)...);
    register_actor_instance(self.id, object, [](void* p) { delete static_cast<C*>(p); }, std::string(type_name<C>()));
    self.rank = brisk::rank();
    return self;
  }
  static const std::string& name() {
    static const std::string n = "actor " + std::string(type_name<C>()) + std::string(type_name<void(P...)>());
    return n;
  }
  // Registered on every rank at start (the template is instantiated in the binary).
  inline static const FunctionRegistration registration{name(), &construct};
};

template <class M>
struct MethodTraits;
template <class R, class C, class... P>
struct MethodTraits<R (C::*)(P...)> {
  using Result = R;
  using Class = C;
  using Invoker = R (*)(ActorSelf, P...);
};
template <class R, class C, class... P>
struct MethodTraits<R (C::*)(P...) const> : MethodTraits<R (C::*)(P...)> {};

template <auto M, class Invoker>
struct MethodInvoker;
template <auto M, class R, class... P>
struct MethodInvoker<M, R (*)(ActorSelf, P...)> {
  static R invoke(ActorSelf self, P... args) {
    using C = typename MethodTraits<decltype(M)>::Class;
    auto* object = static_cast<C*>(actor_instance(self.id, type_name<C>().data()));
    return (object->*M)(std::forward<P>(args)...);
  }
};

template <auto M>
const FunctionInfo* register_method(std::string_view name) {
  using Traits = MethodTraits<decltype(M)>;
  const FunctionInfo* info = FunctionRegistration(name, &MethodInvoker<M, typename Traits::Invoker>::invoke).info;
  const auto key = M;
  register_method_key(type_name<decltype(M)>().data(), &key, sizeof(key), info);
  return info;
}

// The calls made through one handle, numbered in order; the numbers start again
// when the actor is rebuilt.
struct ActorCaller {
  std::uint64_t id = new_actor_caller();
  std::mutex mutex;
  std::uint32_t incarnation = 0;
  std::uint64_t next = 0;
  std::uint64_t number(std::uint32_t current) {
    std::lock_guard lock(mutex);
    if (current != incarnation) {
      incarnation = current;
      next = 0;
    }
    return next++;
  }
  // Build `current` starts after `count` numbers kept for replayed calls.
  void reserve(std::uint32_t current, std::uint64_t count) {
    std::lock_guard lock(mutex);
    incarnation = current;
    next = count;
  }
};

}  // namespace detail

// Actor<C>: a handle to an actor of class C (see the top of this file).
// Thread safety: a handle may be copied and called from any thread.
template <class C>
class Actor {
 public:
  Actor() = default;

  // Calls `method` (a registered method of C) with `args` on the actor; returns a
  // Ref to its result at once. Throws brisk::Error for an empty handle or an
  // unregistered method.
  template <class M, class... A>
  auto call(M method, A&&... args) const {
    using Traits = detail::MethodTraits<M>;
    static_assert(std::is_base_of_v<typename Traits::Class, C>,
                  "brisk::Actor::call: the method does not belong to the actor's class");
    if (!caller_) detail::throw_actor_unusable("brisk::Actor::call: the handle is empty (default-constructed)");
    const FunctionInfo* info = detail::find_method_key(detail::type_name<M>().data(), &method, sizeof(M));
    if (!info) detail::throw_unregistered_method(detail::type_name<C>().data());
    if (!failure_.empty()) detail::throw_actor_unusable(failure_);
    auto invoker = reinterpret_cast<typename Traits::Invoker>(const_cast<void*>(info->address));
    auto call = std::make_unique<detail::ActorCall>();
    call->actor = self_.id;
    call->caller = caller_->id;
    if (log_) return logged_call(std::move(call), invoker, std::forward<A>(args)...);
    call->incarnation = detail::actor_incarnation(self_.id);
    call->seq = caller_->number(call->incarnation);
    if (!creation_.valid()) {  // received from another rank: the actor exists
      call->rank = self_.rank;
      return detail::submit_checked(options_, std::move(call), invoker, self_, std::forward<A>(args)...);
    }
    // The creator's handle: the call waits for the creation (and fails with its error).
    if (creation_.ready() && !creation_.state()->has_error()) {
      call->rank = creation_.state()->value().rank;
    } else {
      call->creation = creation_.state();
      call->creation->add_ref();
    }
    return detail::submit_checked(options_, std::move(call), invoker, creation_, std::forward<A>(args)...);
  }

  bool valid() const noexcept { return caller_ != nullptr; }
  // The rank the actor lives on; blocks until it is created. Rethrows the
  // constructor's error.
  int rank() const {
    if (const int moved = detail::actor_moved_rank(self_.id); moved >= 0) return moved;
    if (creation_.valid()) return get(creation_).rank;
    if (!failure_.empty()) detail::throw_actor_unusable(failure_);
    return self_.rank;
  }

  // --- for the runtime ---
  // A task taking this handle waits for the actor's creation.
  detail::ObjectState* brisk_dependency() const noexcept { return creation_.valid() ? creation_.state() : nullptr; }
  template <class Ar>
  void serialize(Ar& ar) {
    if constexpr (std::is_same_v<Ar, Reader>) {
      std::map<std::string, double> resources;
      ar(self_, failure_, resources);
      caller_ = std::make_shared<detail::ActorCaller>();
      set_resources(std::move(resources));
    } else {
      detail::ActorSelf self = self_;
      std::string failure = failure_;
      if (creation_.valid()) {
        if (!creation_.ready()) {
          throw SerializationError(
              "brisk: an Actor handle can leave its rank only once the actor exists (pass it as a task argument "
              "of its own, which waits for that, or call rank() first)");
        }
        if (creation_.state()->has_error()) {
          failure = "the actor " + std::string(detail::type_name<C>()) +
                    " could not be created: " + creation_.state()->error()->message;
        } else {
          self = creation_.state()->value();
        }
      }
      if (const int moved = detail::actor_moved_rank(self.id); moved >= 0) self.rank = moved;
      std::map<std::string, double> resources;
      if (options_) resources = options_->resources;
      ar(self, failure, resources);
    }
  }

 private:
  template <class D, class... A>
  friend Actor<D> actor(const ActorOptions& options, A&&... args);

  // A call of an actor with replay_calls, made on its creator's rank: numbered and
  // logged together (under the log's lock), so that a rebuild replays exactly the
  // calls numbered for the builds before it.
  template <class R, class... P, class... A>
  Ref<R> logged_call(std::unique_ptr<detail::ActorCall> call, R (*invoker)(detail::ActorSelf, P...), A&&... args) const {
    if constexpr ((std::is_copy_constructible_v<std::decay_t<A>> && ...)) {
      auto entry = std::make_unique<detail::ActorLogEntry>();
      entry->replay = [options = options_, self = self_, caller = caller_->id, invoker,
                       ... kept = std::decay_t<A>(args)](detail::ObjectState* into, std::uint32_t incarnation,
                                                         std::uint64_t seq, int rank, bool rebuild) {
        auto again = std::make_unique<detail::ActorCall>();
        again->actor = self.id;
        again->caller = caller;
        again->incarnation = incarnation;
        again->seq = seq;
        again->rank = rank;
        again->logged = true;
        again->rebuild = rebuild;
        detail::ActorSelf at = self;
        at.rank = rank;
        detail::submit_into(static_cast<detail::TypedObject<detail::stored_t<R>>*>(into), options, std::move(again),
                            invoker, at, kept...);
      };
      std::lock_guard lock(log_->mutex);
      call->logged = true;
      call->incarnation = detail::actor_incarnation(self_.id);
      call->seq = caller_->number(call->incarnation);
      Ref<R> ref;
      if (creation_.ready() && !creation_.state()->has_error()) {
        call->rank = creation_.state()->value().rank;
      } else {
        call->creation = creation_.state();
        call->creation->add_ref();
      }
      ref = detail::submit_checked(options_, std::move(call), invoker, creation_, std::forward<A>(args)...);
      log_->add(std::move(entry), ref.state());
      return ref;
    } else {
      detail::throw_actor_unusable("brisk::Actor::call: replay_calls needs copyable call arguments");
    }
  }

  // Calls carry the actor's resources; they are named after the method.
  void set_resources(std::map<std::string, double> resources) {
    if (resources.empty()) return;
    auto o = std::make_shared<TaskOptions>();
    o->resources = std::move(resources);
    options_ = std::move(o);
  }

  Ref<detail::ActorSelf> creation_;   // the creator's rank (and copies made there)
  detail::ActorSelf self_;            // id; the rank once known
  std::string failure_;               // received: why the actor is unusable
  std::shared_ptr<const TaskOptions> options_;
  std::shared_ptr<detail::ActorCaller> caller_;
  std::shared_ptr<detail::ActorLog> log_;  // the creator's handle of an actor with replay_calls
};

// actor<C>(options, args...): creates an actor of class C with C(args...) on a rank
// the scheduler chooses and returns its handle at once.
template <class C, class... A>
Actor<C> actor(const ActorOptions& options, A&&... args) {
  using Ctor = detail::ActorConstructor<C, detail::unref_t<A>...>;
  static_assert(std::is_constructible_v<C, detail::unref_t<A>&&...>,
                "brisk::actor: the class has no constructor for these arguments");
  (void)&Ctor::registration;
  detail::require_context("brisk::actor");
  auto task_options = std::make_shared<TaskOptions>();
  task_options->name = options.name.empty() ? Ctor::name() : options.name;
  task_options->interned_name = intern(task_options->name);
  task_options->resources = options.resources;
  task_options->actor_creation = true;
  Actor<C> handle;
  handle.self_.id = detail::next_task_id();
  handle.caller_ = std::make_shared<detail::ActorCaller>();
  handle.set_resources(options.resources);
  if (options.max_restarts < 0) detail::throw_actor_unusable("brisk::actor: max_restarts must be >= 0");
  if (options.replay_calls && options.max_restarts == 0) {
    detail::throw_actor_unusable("brisk::actor: replay_calls needs max_restarts > 0");
  }
  if (options.replay_calls) {
    handle.log_ = std::make_shared<detail::ActorLog>();
    detail::register_actor_log(handle.self_.id, handle.log_, handle.caller_);
  }
  if (options.max_restarts > 0) {
    if constexpr ((std::is_copy_constructible_v<std::decay_t<A>> && ...)) {
      auto rebuild = [task_options, self = handle.self_, ... kept = std::decay_t<A>(args)]() {
        return detail::submit_checked(task_options, nullptr, &Ctor::construct, self, kept...);
      };
      handle.creation_ = detail::submit_checked(task_options, nullptr, &Ctor::construct, handle.self_,
                                                std::forward<A>(args)...);
      detail::register_actor_restarts(handle.self_.id, options.max_restarts, handle.creation_, std::move(rebuild),
                                      std::string(detail::type_name<C>()));
      return handle;
    } else {
      detail::throw_actor_unusable("brisk::actor: max_restarts needs copyable constructor arguments");
    }
  }
  handle.creation_ = detail::submit_checked(std::move(task_options), nullptr, &Ctor::construct, handle.self_,
                                            std::forward<A>(args)...);
  return handle;
}
template <class C, class... A>
  requires(sizeof...(A) == 0 || !std::is_same_v<std::remove_cvref_t<std::tuple_element_t<0, std::tuple<A..., int>>>,
                                               ActorOptions>)
Actor<C> actor(A&&... args) {
  return actor<C>(ActorOptions{}, std::forward<A>(args)...);
}

}  // namespace brisk
