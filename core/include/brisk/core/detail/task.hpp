// brisk/core/detail/task.hpp — a submitted task: function, stored arguments, result.
//
// A task is created by remote() with its dependency count set, becomes ready when
// the last argument object completes, is run once by a worker (with retries on
// exception), completes its result object, drops its arguments (so inputs are freed
// as early as possible), and is deleted by the executor.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "brisk/core/detail/context.hpp"
#include "brisk/core/detail/distributed.hpp"
#include "brisk/core/detail/object.hpp"
#include "brisk/core/error.hpp"
#include "brisk/core/event_log.hpp"
#include "brisk/core/function_registry.hpp"
#include "brisk/core/ref.hpp"
#include "brisk/core/serialize.hpp"

namespace brisk {

// Per-task options set through brisk::task(f). Shared by every task a builder submits.
struct TaskOptions {
  std::string name;                          // shown in the timeline and in errors
  std::map<std::string, double> resources;   // empty = {CPU: 1}
  int max_retries = 0;                       // reruns after an exception
  const char* interned_name = nullptr;       // set when name is
  bool actor_creation = false;               // an actor's constructor: placed by a global scheduler
};

namespace detail {

// A call on an actor (see actor.hpp): which actor, the caller's sequence number, and
// the rank the actor lives on (-1 until known: then `creation`, which holds one
// reference, is the actor's creation object and says it once complete).
struct ActorCall {
  TaskId actor;
  std::uint64_t caller = 0;
  std::uint64_t seq = 0;
  std::uint32_t incarnation = 0;  // the actor's build the call was numbered for (restarts)
  int rank = -1;
  ObjectState* creation = nullptr;
  bool dispatched = false;  // the mailbox handed it to the executor
  bool logged = false;      // in its actor's call log (replay_calls): a rebuild runs it again
  // A replayed call whose result is complete already and whose only copy died with
  // its holder: this run gives the result a new copy instead of completing it (as a
  // lineage rebuild does). It always goes through the Distributed layer, even to
  // an actor on this rank, so that its result comes back as a result.
  bool rebuild = false;
  ~ActorCall();
};

// Routes a ready actor call: into the actor's mailbox when it lives on this rank,
// otherwise to its rank (actor.cpp).
void route_actor_call(TaskBase* task) noexcept;
// The actor call `task` has run (or was cancelled): lets the actor take its next.
void actor_call_finished(const ActorCall& call) noexcept;

class TaskBase {
 public:
  TaskBase(TaskId id, const char* name, std::shared_ptr<const TaskOptions> options,
           ObjectState* result) noexcept
      : id_(id), name_(name), options_(std::move(options)), result_(result) {}
  TaskBase(const TaskBase&) = delete;
  TaskBase& operator=(const TaskBase&) = delete;
  virtual ~TaskBase() = default;

  // Registers the task on its argument objects; it is submitted to the executor
  // when all are complete. Called exactly once, right after construction.
  virtual void start() noexcept = 0;

  // Runs the function (or propagates an input's error), completes the result and
  // releases the arguments. Called once, by a worker.
  virtual void run() noexcept = 0;
  // Completes the result with `error` without running (the runtime is shutting
  // down) and releases the arguments. Called at most once, instead of run().
  virtual void cancel(std::shared_ptr<const ErrorInfo> error) noexcept = 0;

  const TaskId& id() const noexcept { return id_; }
  const char* name() const noexcept { return name_; }
  FunctionId function() const noexcept { return function_; }
  void set_function(FunctionId f) noexcept { function_ = f; }
  const TaskOptions* options() const noexcept { return options_.get(); }
  const std::shared_ptr<const TaskOptions>& shared_options() const noexcept { return options_; }
  ObjectState* result() const noexcept { return result_; }

  // --- crossing ranks ---
  // Writes the arguments for rank `to` (see distributed.hpp for the wire form).
  // False, writing nothing useful, when an argument must first be made resident
  // here (a Ref<T> for a parameter of another type U is converted before sending).
  virtual bool encode_args(Writer& w, ObjectCodec& codec, Rank to) = 0;
  // The argument objects (complete when the task is ready).
  virtual void arg_objects(std::vector<ObjectState*>& out) const = 0;
  // Hands the result object's reference to the caller; the task is then deleted
  // without running (it ran elsewhere).
  ObjectState* take_result() noexcept { return std::exchange(result_, nullptr); }
  // Gives a taken result back (with one reference), so that a task kept after it
  // was shipped can be shipped again (lineage replay on another rank).
  void restore_result(ObjectState* result) noexcept { result_ = result; }
  // The task came from another rank, which already placed it: it runs here.
  bool placed() const noexcept { return placed_; }
  void set_placed() noexcept { placed_ = true; }
  // The resource demand, or nullptr for the default {CPU: 1}.
  const std::map<std::string, double>* resources() const noexcept {
    return options_ && !options_->resources.empty() ? &options_->resources : nullptr;
  }
  TaskId next_child_id() noexcept { return id_.child(children_++); }
  ObjectId next_put_id() noexcept { return ObjectId::put_by(id_, puts_++); }

  // One argument object completed.
  void dependency_done() noexcept {
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (actor_call_) {
      route_actor_call(this);
    } else {
      context()->executor->submit(this);
    }
  }

  // Actor calls run one at a time on the actor's rank; null for other tasks.
  ActorCall* actor_call() const noexcept { return actor_call_.get(); }
  void set_actor_call(std::unique_ptr<ActorCall> call) noexcept { actor_call_ = std::move(call); }

  // Scheduler bookkeeping.
  void* sched_grant_ = nullptr;

 protected:
  TaskId id_;
  const char* name_;
  std::shared_ptr<const TaskOptions> options_;
  ObjectState* result_;
  FunctionId function_;
  bool placed_ = false;
  std::atomic<int> pending_{1};
  std::uint64_t children_ = 0;
  std::uint64_t puts_ = 0;
  std::unique_ptr<ActorCall> actor_call_;

  // Ends an actor call's turn (after run or cancel).
  void finish_actor_call() noexcept {
    if (actor_call_) actor_call_finished(*actor_call_);
  }
};

// Waiter node that forwards a completion to its task.
struct TaskDepNode : WaiterNode {
  TaskBase* task = nullptr;
  static void on_complete(WaiterNode* self, ObjectState*) noexcept {
    static_cast<TaskDepNode*>(self)->task->dependency_done();
  }
};

// RAII: marks the calling thread as running `task` (for child ids and puts).
class CurrentTaskScope {
 public:
  explicit CurrentTaskScope(TaskBase* task) noexcept : prev_(submitter().current_task) {
    submitter().current_task = task;
  }
  ~CurrentTaskScope() { submitter().current_task = prev_; }

 private:
  TaskBase* prev_;
};

// Records an event if the log is on.
inline void record_event(EventKind kind, const TaskId& id, const char* name) noexcept {
  RuntimeContext* ctx = context();
  if (ctx && ctx->events) ctx->events->record(kind, id.lo, name);
}

std::shared_ptr<const ErrorInfo> make_task_error(const char* name, std::string message, int attempts);

// ---- argument kinds -------------------------------------------------------

template <class T>
struct is_ref_vector : std::false_type {};
template <class T, class A>
struct is_ref_vector<std::vector<Ref<T>, A>> : std::true_type {};

template <class T>
struct is_std_vector : std::false_type {};
template <class T, class A>
struct is_std_vector<std::vector<T, A>> : std::true_type {};

enum class ArgKind { kValue, kRef, kRefVector };

// How argument A is stored for parameter P.
template <class P, class A>
struct ArgTraits {
  using D = std::remove_cvref_t<A>;
  using PD = std::remove_cvref_t<P>;
  static constexpr ArgKind kind = (is_ref<D>::value && !is_ref<PD>::value) ? ArgKind::kRef
                                  : (is_ref_vector<D>::value && !is_ref_vector<PD>::value)
                                      ? ArgKind::kRefVector
                                      : ArgKind::kValue;
  using stored = std::conditional_t<kind == ArgKind::kValue, PD, D>;
};

template <class T>
struct ref_value {};
template <class T>
struct ref_value<Ref<T>> { using type = T; };
template <class T, class A>
struct ref_value<std::vector<Ref<T>, A>> { using type = T; };

// Compile-time checks of one (parameter, argument) pair; the index I appears in the
// compiler's "required from" note.
template <std::size_t I, class P, class A>
struct CheckArgument {
  using Traits = ArgTraits<P, A>;
  static_assert(!std::is_lvalue_reference_v<P> || std::is_const_v<std::remove_reference_t<P>>,
                "brisk::remote: remote functions take parameters by value or by const reference, "
                "not by non-const reference");
  static_assert(!std::is_rvalue_reference_v<P>,
                "brisk::remote: remote functions take parameters by value or by const reference, "
                "not by rvalue reference");
  static_assert(!std::is_pointer_v<std::remove_cvref_t<P>>,
                "brisk::remote: a pointer cannot be passed to a remote function (it means nothing "
                "on another rank); pass the value or a Ref");
  static constexpr bool convertible = [] {
    if constexpr (Traits::kind == ArgKind::kRef) {
      return std::is_convertible_v<const typename ref_value<typename Traits::D>::type&, P>;
    } else if constexpr (Traits::kind == ArgKind::kRefVector) {
      if constexpr (is_std_vector<typename Traits::PD>::value) {
        return std::is_convertible_v<const typename ref_value<typename Traits::D>::type&,
                                     typename Traits::PD::value_type>;
      } else {
        return false;
      }
    } else {
      return std::is_constructible_v<typename Traits::PD, A&&>;
    }
  }();
  static_assert(Traits::kind != ArgKind::kRef || convertible,
                "brisk::remote: a Ref<T> argument's T does not convert to the parameter type");
  static_assert(Traits::kind != ArgKind::kRefVector || convertible,
                "brisk::remote: a std::vector<Ref<T>> argument needs a std::vector<U> parameter "
                "with T convertible to U");
  static_assert(Traits::kind != ArgKind::kValue || convertible,
                "brisk::remote: an argument does not convert to the parameter type");
  static constexpr bool ok = convertible;
};

template <class R, class... P>
struct CheckSignature {
  static_assert(std::is_void_v<R> || Serializable<R>,
                "brisk::remote: the function's return type must be serializable (trivially "
                "copyable, a standard container of serializable types, or a type with a "
                "`template <class A> void serialize(A& ar)` member)");
  static_assert(((Serializable<std::remove_cvref_t<P>> || is_ref<std::remove_cvref_t<P>>::value) && ...),
                "brisk::remote: every parameter type must be serializable (trivially copyable, a "
                "standard container of serializable types, a Ref, or a type with a "
                "`template <class A> void serialize(A& ar)` member)");
  static constexpr bool ok = true;
};

// A received argument for a parameter of type PD: a value, one object, or (for a
// vector parameter) one object per element. The invoker fills exactly one of them.
template <class T>
struct vector_element { using type = Unit; };
template <class T, class A>
struct vector_element<std::vector<T, A>> { using type = T; };

template <class PD>
struct RecvArg {
  using Element = typename vector_element<PD>::type;
  std::optional<PD> value;
  Ref<PD> ref;
  std::vector<Ref<Element>> refs;
  bool is_vector = false;
};
template <class T>
struct is_recv_arg : std::false_type {};
template <class PD>
struct is_recv_arg<RecvArg<PD>> : std::true_type {};

// A value argument that still waits for an object (an actor handle whose actor is
// being created) names it through `brisk_dependency()` (nullptr once irrelevant).
template <class S>
concept HasDependency = requires(const S& s) {
  { s.brisk_dependency() } -> std::convertible_to<ObjectState*>;
};

template <class S>
std::size_t count_deps(const S& s) noexcept {
  if constexpr (HasDependency<S>) {
    return s.brisk_dependency() ? 1 : 0;
  } else if constexpr (is_recv_arg<S>::value) {
    return (s.ref.valid() ? 1 : 0) + s.refs.size();
  } else if constexpr (is_ref<S>::value) {
    return 1;
  } else if constexpr (is_ref_vector<S>::value) {
    return s.size();
  } else {
    return 0;
  }
}

template <class S, class F>
void for_each_dep(const S& s, F&& f) {
  if constexpr (HasDependency<S>) {
    if (ObjectState* o = s.brisk_dependency()) f(o);
  } else if constexpr (is_recv_arg<S>::value) {
    if (s.ref.valid()) f(static_cast<ObjectState*>(s.ref.state()));
    for (const auto& r : s.refs) f(static_cast<ObjectState*>(r.state()));
  } else if constexpr (is_ref<S>::value) {
    f(static_cast<ObjectState*>(s.state()));
  } else if constexpr (is_ref_vector<S>::value) {
    for (const auto& r : s) f(static_cast<ObjectState*>(r.state()));
  }
}

// The value handed to parameter P for stored argument s.
template <class P, class S>
decltype(auto) unwrap_argument(S& s) {
  if constexpr (is_recv_arg<S>::value) {
    using PD = std::remove_cvref_t<P>;
    if (s.ref.valid()) return static_cast<const PD&>(s.ref.state()->value());
    if constexpr (is_std_vector<PD>::value) {
      if (s.is_vector) {
        s.value.emplace();
        s.value->reserve(s.refs.size());
        for (const auto& r : s.refs) s.value->emplace_back(r.state()->value());
      }
    }
    return static_cast<const PD&>(*s.value);
  } else if constexpr (is_ref<S>::value && !is_ref<std::remove_cvref_t<P>>::value) {
    return static_cast<const typename ref_value<S>::type&>(s.state()->value());
  } else if constexpr (is_ref_vector<S>::value && !is_ref_vector<std::remove_cvref_t<P>>::value) {
    using V = std::remove_cvref_t<P>;
    V out;
    out.reserve(s.size());
    for (const auto& r : s) out.emplace_back(r.state()->value());
    return out;
  } else {
    return static_cast<S&&>(s);
  }
}

// Writes stored argument s for parameter P (see distributed.hpp); false when a
// conversion needs a value that is not resident here.
template <class P, class S>
bool encode_argument(Writer& w, const S& s, ObjectCodec& codec, Rank to) {
  using PD = std::remove_cvref_t<P>;
  if constexpr (is_recv_arg<S>::value) {
    if (s.ref.valid()) {
      w(kArgObject);
      codec.encode_object(w, s.ref.state(), to);
    } else if (s.is_vector) {
      w(kArgObjects, static_cast<std::uint64_t>(s.refs.size()));
      for (const auto& r : s.refs) codec.encode_object(w, r.state(), to);
    } else {
      w(kArgValue);
      serialize_into(w, *s.value);
    }
  } else if constexpr (is_ref<S>::value) {
    using T = typename ref_value<S>::type;
    if constexpr (is_ref<PD>::value || std::is_same_v<T, PD>) {
      w(kArgObject);
      codec.encode_object(w, s.state(), to);
    } else {
      if (s.state()->residency() == Residency::kRemote) return false;
      if (s.state()->has_error()) {
        w(kArgObject);
        codec.encode_object(w, s.state(), to);
        return true;
      }
      s.state()->pin();
      PD converted(static_cast<const T&>(s.state()->value()));
      s.state()->unpin();
      w(kArgValue);
      serialize_into(w, converted);
    }
  } else if constexpr (is_ref_vector<S>::value) {
    using T = typename ref_value<S>::type;
    constexpr bool same = [] {
      if constexpr (is_ref_vector<PD>::value) {
        return true;
      } else if constexpr (is_std_vector<PD>::value) {
        return std::is_same_v<T, typename PD::value_type>;
      } else {
        return false;
      }
    }();
    bool any_error = false;
    for (const auto& r : s) any_error = any_error || r.state()->has_error();
    if (same || any_error) {
      w(kArgObjects, static_cast<std::uint64_t>(s.size()));
      for (const auto& r : s) codec.encode_object(w, r.state(), to);
    } else if constexpr (is_std_vector<PD>::value) {
      for (const auto& r : s) {
        if (r.state()->residency() == Residency::kRemote) return false;
      }
      PD converted;
      converted.reserve(s.size());
      for (const auto& r : s) {
        r.state()->pin();
        converted.emplace_back(static_cast<const T&>(r.state()->value()));
        r.state()->unpin();
      }
      w(kArgValue);
      serialize_into(w, converted);
    }
  } else {
    w(kArgValue);
    serialize_into(w, s);
  }
  return true;
}

// A task calling R(*)(P...) with stored arguments S...
template <class R, class Fn, class ArgsTuple, class ParamsTuple>
class TypedTask;

template <class R, class... P, class... S>
class TypedTask<R, R (*)(P...), std::tuple<S...>, std::tuple<P...>> final : public TaskBase {
  using Result = TypedObject<stored_t<R>>;
  static constexpr std::size_t kInlineDeps = 4;

 public:
  template <class... A>
  TypedTask(TaskId id, const char* name, std::shared_ptr<const TaskOptions> options, Result* result,
            R (*fn)(P...), A&&... args)
      : TaskBase(id, name, std::move(options), result), fn_(fn), args_(std::forward<A>(args)...) {}
  // Takes all stored arguments at once (tasks decoded from another rank).
  struct FromTuple {};
  TypedTask(FromTuple, TaskId id, const char* name, std::shared_ptr<const TaskOptions> options, Result* result,
            R (*fn)(P...), std::tuple<S...>&& args)
      : TaskBase(id, name, std::move(options), result), fn_(fn), args_(std::move(args)) {}

  bool encode_args(Writer& w, ObjectCodec& codec, Rank to) override {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (encode_argument<std::tuple_element_t<I, std::tuple<P...>>>(w, std::get<I>(args_), codec, to) && ...);
    }(std::index_sequence_for<S...>{});
  }

  void arg_objects(std::vector<ObjectState*>& out) const override {
    std::apply([&](const S&... s) { (for_each_dep(s, [&](ObjectState* o) { out.push_back(o); }), ...); }, args_);
  }

  void start() noexcept override {
    std::size_t n = std::apply([](const S&... s) { return (std::size_t{0} + ... + count_deps(s)); }, args_);
    if (n > kInlineDeps) overflow_.reset(new TaskDepNode[n]);
    TaskDepNode* nodes = n > kInlineDeps ? overflow_.get() : inline_;
    pending_.store(static_cast<int>(n) + 1, std::memory_order_relaxed);
    std::size_t i = 0;
    int already = 0;
    std::apply([&](const S&... s) {
      (for_each_dep(s, [&](ObjectState* o) {
         TaskDepNode& node = nodes[i++];
         node.task = this;
         node.notify = &TaskDepNode::on_complete;
         if (!o->add_waiter(&node)) ++already;
       }), ...);
    }, args_);
    if (already) pending_.fetch_sub(already, std::memory_order_relaxed);  // the guard is still held
    dependency_done();  // drops the guard
  }

  void run() noexcept override {
    record_event(EventKind::kStart, id_, name_);
    {
      CurrentTaskScope scope(this);
      std::optional<stored_t<R>> value;
      std::shared_ptr<const ErrorInfo> err = first_input_error();
      if (!err) err = execute(value);
      // Inputs are released and the end recorded before the result is published, so
      // that whoever sees the result also sees the inputs freed (when this task held
      // the last Ref) and the task's end in the event log.
      args_ = std::tuple<S...>();
      record_event(EventKind::kEnd, id_, name_);
      if (err) {
        result_->complete_error(std::move(err));
      } else {
        static_cast<Result*>(result_)->complete(std::move(*value));
      }
    }
    result_->release();
    result_ = nullptr;
    finish_actor_call();
  }

  void cancel(std::shared_ptr<const ErrorInfo> error) noexcept override {
    args_ = std::tuple<S...>();
    result_->complete_error(std::move(error));
    result_->release();
    result_ = nullptr;
    finish_actor_call();
  }

 private:
  std::shared_ptr<const ErrorInfo> first_input_error() const noexcept {
    std::shared_ptr<const ErrorInfo> err;
    std::apply([&](const S&... s) {
      (for_each_dep(s, [&](ObjectState* o) {
         if (!err && o->has_error()) err = o->error();
       }), ...);
    }, args_);
    return err;
  }

  // Calls the function (retrying on exception); fills `value` or returns the error.
  std::shared_ptr<const ErrorInfo> execute(std::optional<stored_t<R>>& value) noexcept {
    int retries = options_ ? options_->max_retries : 0;
    std::string message;
    for (int attempt = 0; attempt <= retries; ++attempt) {
      children_ = 0;
      puts_ = 0;
      try {
        PinAll pins(args_);
        if constexpr (std::is_void_v<R>) {
          invoke(std::index_sequence_for<P...>{});
          value.emplace();
        } else {
          value.emplace(invoke(std::index_sequence_for<P...>{}));
        }
        return nullptr;
      } catch (const ObjectLostError& e) {
        // An input (or an object it read) is gone for good: running again cannot help.
        return std::make_shared<ErrorInfo>(e.info());
      } catch (const std::exception& e) {
        message = e.what();
      } catch (...) {
        message = "unknown exception (not derived from std::exception)";
      }
    }
    return make_task_error(name_, std::move(message), retries + 1);
  }

  template <std::size_t... I>
  decltype(auto) invoke(std::index_sequence<I...>) {
    return fn_(unwrap_argument<P>(std::get<I>(args_))...);
  }

  // Pins large argument objects for the duration of the call.
  struct PinAll {
    explicit PinAll(std::tuple<S...>& args) {
      std::apply([&](const S&... s) {
        (for_each_dep(s, [&](ObjectState* o) {
           if (o->needs_pin()) {
             o->pin();
             pinned.push_back(o);
           }
         }), ...);
      }, args);
    }
    ~PinAll() {
      for (ObjectState* o : pinned) o->unpin();
    }
    std::vector<ObjectState*> pinned;
  };

  R (*fn_)(P...);
  std::tuple<S...> args_;
  TaskDepNode inline_[kInlineDeps];
  std::unique_ptr<TaskDepNode[]> overflow_;
};

// ---- tasks received from other ranks ----------------------------------------

struct TaskDecodeArgs {
  TaskId id;
  const void* address;                        // the function, in this process
  const char* name;                           // interned
  std::shared_ptr<const TaskOptions> options;  // may be null
  Reader* args;                               // positioned at the first argument
  ObjectResolver* resolver;
  ObjectState** result;                       // receives a reference to the result object
};

template <class U>
ObjectState* make_empty_object(ObjectId id) {
  return new TypedObject<U>(id);
}

// Reads one object (see distributed.hpp) as a TypedObject<U>; returns a reference.
template <class U>
Ref<U> decode_object(Reader& r, ObjectResolver& resolver) {
  std::uint8_t form = 0;
  ObjectId id;
  r(form, id.hi, id.lo);
  switch (form) {
    case kObjInline: {
      auto* o = new TypedObject<stored_t<U>>(id);
      Ref<U> ref = Ref<U>::adopt(o);
      o->complete_from(r);  // on a throw the Ref frees the pending object
      return ref;
    }
    case kObjRemote: {
      int owner = 0, lender = 0;
      RemoteCopy copy;
      r(owner, lender, copy);
      ObjectState* o = resolver.resolve_remote(id, Rank{owner}, Rank{lender}, copy, &make_empty_object<stored_t<U>>);
      return Ref<U>::adopt(static_cast<TypedObject<stored_t<U>>*>(o));
    }
    case kObjError: {
      auto* o = new TypedObject<stored_t<U>>(id);
      Ref<U> ref = Ref<U>::adopt(o);
      o->complete_error(read_error_info(r));
      return ref;
    }
    default:
      throw SerializationError("brisk: unknown object form " + std::to_string(form) + " in a task message");
  }
}

// What a parameter is stored as on the receiving rank.
template <class P>
struct RecvStored {
  using PD = std::remove_cvref_t<P>;
  using type = std::conditional_t<is_ref<PD>::value || is_ref_vector<PD>::value, PD, RecvArg<PD>>;
};

template <class P>
void decode_argument(Reader& r, ObjectResolver& resolver, typename RecvStored<P>::type& out) {
  using PD = std::remove_cvref_t<P>;
  std::uint8_t tag = 0;
  r(tag);
  if constexpr (is_ref<PD>::value) {
    if (tag != kArgObject) throw SerializationError("brisk: a Ref parameter needs an object argument");
    out = decode_object<typename ref_value<PD>::type>(r, resolver);
  } else if constexpr (is_ref_vector<PD>::value) {
    if (tag != kArgObjects) throw SerializationError("brisk: a vector<Ref> parameter needs an object list argument");
    std::uint64_t n = 0;
    r(n);
    if (n > r.remaining()) throw SerializationError("brisk: object count larger than the message");
    out.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) out.push_back(decode_object<typename ref_value<PD>::type>(r, resolver));
  } else {
    if (tag == kArgValue) {
      out.value.emplace();
      deserialize_from(r, *out.value);
    } else if (tag == kArgObject) {
      out.ref = decode_object<PD>(r, resolver);
    } else if (tag == kArgObjects) {
      if constexpr (is_std_vector<PD>::value) {
        std::uint64_t n = 0;
        r(n);
        if (n > r.remaining()) throw SerializationError("brisk: object count larger than the message");
        out.is_vector = true;
        out.refs.reserve(n);
        for (std::uint64_t i = 0; i < n; ++i) out.refs.push_back(decode_object<typename PD::value_type>(r, resolver));
      } else {
        throw SerializationError("brisk: an object list for a parameter that is not a vector");
      }
    } else {
      throw SerializationError("brisk: unknown argument tag " + std::to_string(tag));
    }
  }
}

template <class R, class... P>
struct Decoder {
  static TaskBase* decode(const TaskDecodeArgs& a) {
    using Stored = std::tuple<typename RecvStored<P>::type...>;
    Stored args;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (decode_argument<P>(*a.args, *a.resolver, std::get<I>(args)), ...);
    }(std::index_sequence_for<P...>{});
    if (a.args->remaining() != 0) throw SerializationError("brisk: trailing bytes after a task's arguments");
    auto* result = new TypedObject<stored_t<R>>(ObjectId::returned_by(a.id));
    result->add_ref();  // the caller's
    *a.result = result;
    using Task = TypedTask<R, R (*)(P...), Stored, std::tuple<P...>>;
    auto fn = reinterpret_cast<R (*)(P...)>(const_cast<void*>(a.address));
    return new Task(typename Task::FromTuple{}, a.id, a.name, a.options, result, fn, std::move(args));
  }
};

// Whether parameter P can be filled from another rank.
template <class P>
consteval bool crossable() {
  using PD = std::remove_cvref_t<P>;
  if constexpr (std::is_pointer_v<PD> || std::is_rvalue_reference_v<P> ||
                (std::is_lvalue_reference_v<P> && !std::is_const_v<std::remove_reference_t<P>>)) {
    return false;
  } else if constexpr (is_ref<PD>::value || is_ref_vector<PD>::value) {
    return true;
  } else {
    return Serializable<PD> && std::default_initializable<PD>;
  }
}

template <class R, class... P>
TaskDecoder decoder_for() noexcept {
  if constexpr ((std::is_void_v<R> || (Serializable<R> && std::default_initializable<R>)) && (crossable<P>() && ...)) {
    return &Decoder<R, P...>::decode;
  } else {
    return nullptr;
  }
}

}  // namespace detail
}  // namespace brisk
