// brisk/core/api.hpp — remote, task, get, wait, put, timeline.
//
// All calls may be made from the driver, from any other thread of a rank, and from
// inside running tasks (dynamic task creation); they must be made inside brisk::run.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "brisk/core/detail/context.hpp"
#include "brisk/core/detail/task.hpp"
#include "brisk/core/error.hpp"
#include "brisk/core/object_store.hpp"
#include "brisk/core/ref.hpp"

namespace brisk {

namespace detail {

// Blocks the calling thread until `object` is complete: spins for the context's spin
// time, then sleeps; a worker thread lets the executor keep its core busy meanwhile.
void wait_ready(ObjectState* object);
// Blocks until at least `num_returns` of `objects` are complete or `timeout` passes
// (nullopt: no timeout). Returns one flag per object: complete or not.
std::vector<bool> wait_objects(const std::vector<ObjectState*>& objects, std::size_t num_returns,
                               std::optional<std::chrono::nanoseconds> timeout);

[[noreturn]] void throw_unregistered(const void* address);
[[noreturn]] void throw_options_error(const std::string& message);
// Checks a resource demand against the largest node; the error message or empty.
std::string infeasible_reason(const std::map<std::string, double>& demand);

template <class T>
const T& read_value(const Ref<T>& ref) {
  ObjectState* o = ref.state();
  if (!o->ready()) wait_ready(o);
  if (o->has_error()) throw_error(o->error());
  return ref.state()->value();
}

// Starts fn(args...) as a task whose result goes into `result` (one reference of
// which the task takes over); `actor` makes it a call on an actor (actor.hpp).
template <class R, class... P, class... A>
void start_task(TypedObject<stored_t<R>>* result, std::shared_ptr<const TaskOptions> options,
                std::unique_ptr<ActorCall> actor, R (*fn)(P...), A&&... args) {
  static_assert(CheckSignature<R, P...>::ok);
  static_assert([]<std::size_t... I>(std::index_sequence<I...>) {
    return (CheckArgument<I, std::tuple_element_t<I, std::tuple<P...>>,
                          std::tuple_element_t<I, std::tuple<A...>>>::ok && ...);
  }(std::index_sequence_for<A...>{}));

  RuntimeContext& ctx = require_context("brisk::remote");
  const FunctionInfo* info = find_function(function_address(fn));
  if (!info) {
    result->release();
    throw_unregistered(function_address(fn));
  }
  const char* name = options && options->interned_name ? options->interned_name : info->name.c_str();
  const TaskId id = TaskId{{result->id().hi, result->id().lo}};
  if (options && !options->resources.empty()) {
    std::string why = infeasible_reason(options->resources);
    if (!why.empty()) {
      auto info_ptr = std::make_shared<ErrorInfo>();
      info_ptr->kind = ErrorKind::kInfeasible;
      info_ptr->message = std::move(why);
      info_ptr->function = name;
      info_ptr->rank = ctx.rank;
      result->complete_error(std::move(info_ptr));
      result->release();
      return;
    }
  }
  using Task = TypedTask<R, R (*)(P...), std::tuple<typename ArgTraits<P, A>::stored...>, std::tuple<P...>>;
  auto* task = new Task(id, name, std::move(options), result, fn, std::forward<A>(args)...);
  task->set_function(info->id);
  if (actor) task->set_actor_call(std::move(actor));
  if (ctx.events) ctx.events->record(EventKind::kSubmit, id.lo, name);
  task->start();
}

// Submits fn(args...); `actor` makes it a call on an actor (actor.hpp).
template <class R, class... P, class... A>
Ref<R> submit_checked(std::shared_ptr<const TaskOptions> options, std::unique_ptr<ActorCall> actor,
                      R (*fn)(P...), A&&... args) {
  require_context("brisk::remote");
  const TaskId id = next_task_id();
  auto* result = new TypedObject<stored_t<R>>(ObjectId::returned_by(id));  // the task's reference
  Ref<R> ref = Ref<R>::adopt(result);
  result->add_ref();
  start_task(result, std::move(options), std::move(actor), fn, std::forward<A>(args)...);
  return ref;
}

// Submits fn(args...) again, its result into `into` when it is not null (an object
// whose first task was lost; a reference is taken for the task), else into a new
// object that nobody reads (actor call replay).
template <class R, class... P, class... A>
void submit_into(TypedObject<stored_t<R>>* into, std::shared_ptr<const TaskOptions> options,
                 std::unique_ptr<ActorCall> actor, R (*fn)(P...), A&&... args) {
  if (!into) {
    (void)submit_checked(std::move(options), std::move(actor), fn, std::forward<A>(args)...);
    return;
  }
  into->add_ref();
  start_task(into, std::move(options), std::move(actor), fn, std::forward<A>(args)...);
}

template <class R, class... P, class... A>
Ref<R> submit(std::shared_ptr<const TaskOptions> options, R (*fn)(P...), A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A),
                "brisk::remote: the number of arguments does not match the function's parameters");
  if constexpr (sizeof...(P) == sizeof...(A)) {
    return submit_checked(std::move(options), nullptr, fn, std::forward<A>(args)...);
  } else {
    return Ref<R>();
  }
}

}  // namespace detail

// remote(f, args...)
//
// Submits f(args...) and returns a Ref to its result at once. f must be registered
// with BRISK_REMOTE. An argument may be a Ref<T> for a parameter of type T (or const
// T&): the task then waits for that object. A std::vector<Ref<T>> argument for a
// std::vector<U> parameter waits for all of them. Inside a task, remote() submits a
// child task (dynamic task creation). Throws brisk::Error if f is not registered.
//   auto a = brisk::remote(add, 1, 2);
//   auto b = brisk::remote(add, a, 10);   // waits for a
template <class R, class... P, class... A>
Ref<R> remote(R (*fn)(P...), A&&... args) {
  return detail::submit(nullptr, fn, std::forward<A>(args)...);
}

// remote<Signature>(f, args...): picks one overload of f.
//   brisk::remote<int(int)>(scale, 3);
template <class Sig, class... A>
  requires std::is_function_v<Sig>
auto remote(std::type_identity_t<Sig>* fn, A&&... args) {
  return detail::submit(nullptr, fn, std::forward<A>(args)...);
}

// TaskBuilder: brisk::task(f).name("step").resources({{"GPU", 1}}).max_retries(2).remote(args...)
//
// Resources are CPU and GPU counts and named custom resources; a demand that no node
// of the job can ever meet fails at once (get throws ResourceError). Default: {CPU: 1}.
template <class Fn>
class TaskBuilder {
 public:
  explicit TaskBuilder(Fn fn) : fn_(fn), options_(std::make_shared<TaskOptions>()) {}

  TaskBuilder& name(std::string n) & {
    mutable_options().name = std::move(n);
    mutable_options().interned_name = intern(options_->name);
    return *this;
  }
  TaskBuilder&& name(std::string n) && { return std::move(name(std::move(n))); }
  TaskBuilder& resources(std::map<std::string, double> r) & {
    for (const auto& [k, v] : r) {
      if (!(v >= 0)) detail::throw_options_error("brisk::task: resource '" + k + "' has a negative or NaN amount");
    }
    mutable_options().resources = std::move(r);
    return *this;
  }
  TaskBuilder&& resources(std::map<std::string, double> r) && { return std::move(resources(std::move(r))); }
  TaskBuilder& max_retries(int n) & {
    if (n < 0) detail::throw_options_error("brisk::task: max_retries must be >= 0");
    mutable_options().max_retries = n;
    return *this;
  }
  TaskBuilder&& max_retries(int n) && { return std::move(max_retries(n)); }

  template <class... A>
  auto remote(A&&... args) const {
    return detail::submit(options_, fn_, std::forward<A>(args)...);
  }

 private:
  TaskOptions& mutable_options() {
    if (options_.use_count() > 1) options_ = std::make_shared<TaskOptions>(*options_);
    return *options_;
  }
  Fn fn_;
  std::shared_ptr<TaskOptions> options_;
};

template <class R, class... P>
TaskBuilder<R (*)(P...)> task(R (*fn)(P...)) {
  return TaskBuilder<R (*)(P...)>(fn);
}
template <class Sig>
  requires std::is_function_v<Sig>
TaskBuilder<Sig*> task(std::type_identity_t<Sig>* fn) {
  return TaskBuilder<Sig*>(fn);
}

// get(ref)
//
// Blocks until the object is complete and returns a copy of its value (one copy;
// the stored object stays for other Refs). Rethrows a failed task's error as
// TaskError (or ObjectStoreError / ResourceError). Inside a task, blocking lets the
// rank run other tasks on this core meanwhile.
template <class T>
T get(const Ref<T>& ref) {
  if (!ref.valid()) detail::throw_options_error("brisk::get: the Ref is empty (default-constructed or moved from)");
  detail::ObjectState* o = ref.state();
  if (!o->ready()) detail::wait_ready(o);
  detail::record_event(EventKind::kGet, TaskId{{o->id().hi, o->id().lo}}, "get");
  if (o->has_error()) detail::throw_error(o->error());
  if constexpr (std::is_void_v<T>) {
    return;
  } else {
    if (o->needs_pin()) {
      o->pin();
      struct Unpin {
        detail::ObjectState* o;
        ~Unpin() { o->unpin(); }
      } unpin{o};
      return ref.state()->value();
    }
    return ref.state()->value();
  }
}

// get(refs): the values of all of them, in order. The first error is rethrown.
template <class T>
std::vector<T> get(const std::vector<Ref<T>>& refs) {
  std::vector<T> out;
  out.reserve(refs.size());
  for (const auto& r : refs) out.push_back(get(r));
  return out;
}

template <class T>
struct WaitResult {
  std::vector<Ref<T>> ready;
  std::vector<Ref<T>> not_ready;
};

// wait(refs, num_returns, timeout)
//
// Returns as soon as num_returns of refs are complete (with a value or an error), or
// when timeout passes. `ready` holds at most num_returns of the complete ones, in
// the order of refs; `not_ready` holds the rest, in order. num_returns defaults to
// all of them; no timeout by default. Throws brisk::Error if num_returns > size.
template <class T>
WaitResult<T> wait(const std::vector<Ref<T>>& refs, std::size_t num_returns,
                   std::optional<std::chrono::nanoseconds> timeout = std::nullopt) {
  if (num_returns > refs.size()) detail::throw_options_error("brisk::wait: num_returns is larger than the number of refs");
  std::vector<detail::ObjectState*> objects;
  objects.reserve(refs.size());
  for (const auto& r : refs) {
    if (!r.valid()) detail::throw_options_error("brisk::wait: a Ref is empty (default-constructed or moved from)");
    objects.push_back(r.state());
  }
  std::vector<bool> done = detail::wait_objects(objects, num_returns, timeout);
  WaitResult<T> out;
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (done[i] && out.ready.size() < num_returns) {
      out.ready.push_back(refs[i]);
    } else {
      out.not_ready.push_back(refs[i]);
    }
  }
  return out;
}
template <class T>
WaitResult<T> wait(const std::vector<Ref<T>>& refs) {
  return wait(refs, refs.size());
}
template <class T, class Rep, class Period>
WaitResult<T> wait(const std::vector<Ref<T>>& refs, std::size_t num_returns,
                   std::chrono::duration<Rep, Period> timeout) {
  return wait(refs, num_returns,
              std::optional<std::chrono::nanoseconds>(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout)));
}

// put(value)
//
// Stores a value in the object store and returns its Ref. Throws ObjectStoreError
// when the value fits neither in memory nor in the spill directory.
template <class T>
Ref<std::remove_cvref_t<T>> put(T&& value) {
  using V = std::remove_cvref_t<T>;
  static_assert(Serializable<V>, "brisk::put: the value's type must be serializable");
  detail::require_context("brisk::put");
  auto* o = new detail::TypedObject<V>(detail::next_put_id());
  Ref<V> ref = Ref<V>::adopt(o);
  o->complete(std::forward<T>(value));
  if (o->has_error()) detail::throw_error(o->error());
  return ref;
}

// timeline(path)
//
// Writes a Chrome trace JSON (open it in Perfetto) of the task events so far: one
// process row per rank, one thread row per worker thread. Called on rank 0 (the
// driver) it gathers every rank's events; elsewhere it writes that rank's only.
// Needs the event log on (the default).
Status timeline(const std::string& path);

// The rank this code runs on, and the number of ranks in the job.
int rank();
int size();

// The arguments of the program without brisk's --brisk-* options (argv[0] first).
const std::vector<std::string>& program_args();

}  // namespace brisk
