// brisk/core/data.hpp — data objects, data tasks and execution templates.
//
// A DataSet<T> is a named, partitioned, mutable data object: N partitions of T,
// each with a home rank. A data task is a registered function that declares the
// partitions it reads and writes; it runs where its first written partition lives
// (or on the rank given with .on()), reads the version that program order
// requires, and writes in place. The runtime orders data tasks by version and
// inserts copy commands between ranks, pushed as soon as the version they carry is
// written. Local data is never copied.
//
//   struct Block { std::vector<double> v; template <class A> void serialize(A& a) { a(v); } };
//   void smooth(brisk::DataTask& t) { t.write<Block>(0).v = ...t.read<Block>(1)...; }
//   BRISK_DATA_TASK(smooth);
//   brisk::DataSet<Block> grid("grid", 64);               // 64 partitions, blocked over ranks
//   brisk::data_task(smooth).writes(grid, 3).reads(grid, 4).submit();
//   Block b = grid.fetch(3);                              // waits for the latest version
//
// Execution templates. A basic block of data-task submissions is recorded once and
// replayed cheaply:
//
//   auto step = brisk::record<Params>("cg", [&](const Params&) { ...submissions... });
//   while (residual.fetch(0) > tol) step.instantiate(Params{...});
//
// The first instantiate runs the body, records its submissions and installs the
// template: the controller (rank 0) keeps the tasks, their accesses, their ranks and
// the copies between ranks in flat arrays; every rank caches its part. Each later
// instantiate sends one message per rank with fresh ids and the parameters. Tasks
// read the block's parameters with DataTask::params<P>(); values given to .args()
// are fixed when the block is recorded, so the body must submit the same tasks
// every time (data-dependent control flow stays in the driver). With templates off
// (--brisk-templates=off) every instantiate runs the body and submits each task:
// the results are identical.
//
// Thread safety: DataSet creation, submission, fetch, sync and templates are driver
// calls (the thread that runs brisk::run's function on rank 0). Data task functions
// run on worker threads of the rank they are placed on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "brisk/core/detail/context.hpp"
#include "brisk/core/error.hpp"
#include "brisk/core/function_registry.hpp"
#include "brisk/core/ids.hpp"
#include "brisk/core/serialize.hpp"

namespace brisk {

class DataTask;
using DataFunction = void (*)(DataTask&);

enum class DataMode : std::uint8_t {
  kRead = 1,       // reads the current version
  kWrite = 2,      // overwrites it entirely (the previous version is not needed)
  kReadWrite = 3,  // updates it in place
};

namespace detail {

// How a rank makes, copies and destroys the values of one DataSet element type.
// Registered on every rank at start (DataSet<T> instantiates it in the binary).
struct DataTypeOps {
  std::uint64_t id = 0;  // FNV-1a of the mangled type name
  const char* name = nullptr;
  void* (*make)() = nullptr;
  void (*destroy)(void*) noexcept = nullptr;
  void (*write)(Writer&, const void*) = nullptr;
  void (*read)(Reader&, void*) = nullptr;
  // The bytes `write` appends; null where counting them is not O(1) (a second
  // traversal would cost more than the buffer's growth saves).
  std::size_t (*size)(const void*) = nullptr;
};
const DataTypeOps* register_data_type(const DataTypeOps& ops);
const DataTypeOps* find_data_type(std::uint64_t id) noexcept;

template <class T>
struct DataTypeRegistration {
  static const DataTypeOps* make_ops() {
    DataTypeOps ops;
    const char* n = typeid(T).name();
    ops.id = fnv1a64(n, std::char_traits<char>::length(n));
    ops.name = n;
    ops.make = []() -> void* { return new T(); };
    ops.destroy = [](void* p) noexcept { delete static_cast<T*>(p); };
    ops.write = [](Writer& w, const void* p) { w(*static_cast<const T*>(p)); };
    ops.read = [](Reader& r, void* p) { r(*static_cast<T*>(p)); };
    if constexpr (detail::serial::size_in_constant_time_v<T>) {
      ops.size = [](const void* p) -> std::size_t { return byte_size(*static_cast<const T*>(p)); };
    }
    return register_data_type(ops);
  }
  static inline const DataTypeOps* const ops = make_ops();
};

// One declared access of a data task: partition `part` of data set `dataset`.
struct DataAccess {
  std::uint32_t dataset = 0;
  std::uint32_t part = 0;
  DataMode mode = DataMode::kRead;
  friend bool operator==(const DataAccess&, const DataAccess&) = default;
  template <class A>
  void serialize(A& ar) {
    ar(dataset, part, mode);
  }
};

// A data task as the driver declared it.
struct DataTaskSpec {
  FunctionId function;
  std::vector<DataAccess> accesses;
  std::vector<std::byte> args;  // .args(value), serialized
  int rank = -1;                // .on(rank), or -1: where the first written partition lives
  bool runs_inline = false;     // .runs_inline()
};

// What a rank's data plane reports about itself (tests, benchmarks).
struct DataPlaneStats {
  std::uint64_t commands = 0;       // commands the controller issued (untemplated)
  std::uint64_t copies = 0;         // copies between ranks issued (untemplated and patches)
  std::uint64_t instantiations = 0; // template instantiations
  std::uint64_t patches_computed = 0;
  std::uint64_t patches_reused = 0;
  std::uint64_t validations_skipped = 0;  // instantiations that needed no precondition check
  std::uint64_t edits = 0;
  // After a rollback: templates taken over from the epoch before by an edit, and the
  // tasks those edits moved (the others kept their rank and their copies).
  std::uint64_t templates_adopted = 0, adopted_tasks_moved = 0;
  // Controller time (rank 0) in install, instantiate (including patches) and edits.
  std::uint64_t controller_install_ns = 0, controller_instantiate_ns = 0, controller_edit_ns = 0;
  // This rank's worker (any rank): data tasks run, and the time spent caching,
  // instantiating and editing worker templates, with the commands concerned (and,
  // for edits, the edit messages that carried them).
  std::uint64_t tasks_run = 0;
  std::uint64_t install_ns = 0, installed_commands = 0;
  std::uint64_t instantiate_ns = 0, instantiated_commands = 0;
  std::uint64_t edit_ns = 0, edited_commands = 0, edit_messages = 0;
};

// The runtime side of data objects (runtime/ implements it; nullptr outside brisk::run).
class DataPlane {
 public:
  virtual ~DataPlane() = default;
  // Creates a data set with `homes[p]` the home rank of partition p; its id.
  // `checkpointed`: its partitions go into checkpoints (and come back at a restart).
  virtual std::uint32_t create(const std::string& name, const DataTypeOps* type, std::vector<int> homes,
                               bool checkpointed) = 0;
  // One untemplated task; `params` are the enclosing block's parameters (or empty).
  virtual void submit(DataTaskSpec spec, std::shared_ptr<const std::vector<std::byte>> params) = 0;
  // Installs a recorded block; its template id.
  virtual std::uint32_t install(const std::string& name, std::vector<DataTaskSpec> tasks) = 0;
  virtual void instantiate(std::uint32_t tmpl, std::vector<std::byte> params) = 0;
  // Edits a template: task i moves to rank r, for each (i, r).
  virtual void move_tasks(std::uint32_t tmpl, std::span<const std::pair<std::uint32_t, int>> moves) = 0;
  virtual int task_rank(std::uint32_t tmpl, std::uint32_t task) const = 0;
  // Asks for the partition's version as of now (later writes do not change what
  // comes back); a key for fetch_wait.
  virtual std::uint64_t fetch_start(std::uint32_t dataset, std::uint32_t part) = 0;
  // The serialized value asked for with fetch_start (waits for it). Throws on a
  // failed task.
  virtual std::vector<std::byte> fetch_wait(std::uint64_t key) = 0;
  // The value asked for with fetch_start is not wanted any more.
  virtual void fetch_forget(std::uint64_t key) noexcept = 0;
  // Waits until every command issued so far has run on every rank. Throws on a failed task.
  virtual void sync() = 0;
  // Sends the commands issued so far (the end of an untemplated block).
  virtual void flush() = 0;
  // Writes of the partition issued so far.
  virtual std::uint64_t version(std::uint32_t dataset, std::uint32_t part) const = 0;
  virtual bool templates_enabled() const noexcept = 0;
  virtual DataPlaneStats stats() const = 0;
  // Whether the data set's partitions came from a restored checkpoint.
  virtual bool restored(std::uint32_t dataset) const = 0;
  // Data tasks issued so far (untemplated, on the driver).
  virtual std::uint64_t submitted() const noexcept = 0;
  virtual int size() const noexcept = 0;
};

DataPlane& require_data_plane(const char* api);

// Thrown through the driver's data calls when a rank was lost while data objects
// were in use (ucx): brisk::run catches it, rolls the data plane back to the last
// checkpoint and runs the driver again. Not a std::exception, so that a driver's
// catch (const std::exception&) lets it through.
struct DataRollback {
  int lost_rank = -1;
};

// Recording: while a template body runs for the first time, submissions go here.
struct DataRecording {
  std::vector<DataTaskSpec> tasks;
};
DataRecording*& current_recording() noexcept;
// The parameters of the block being run untemplated (empty outside a block).
std::shared_ptr<const std::vector<std::byte>>& current_block_params() noexcept;

struct DataTaskRegistration {
  DataTaskRegistration(std::string_view name, DataFunction f);
  const FunctionInfo* info;
};

[[noreturn]] void throw_data_type_mismatch(const DataTask& t, std::size_t i, const char* wanted);

}  // namespace detail

// The ranks data partitions are placed on: 0..data_ranks()-1 (Placement's ranks).
// brisk::size() at first; after a rank is lost on ucx the job rolls back and goes on
// with the survivors, data_ranks() of them, and the driver, run again, spreads its
// data sets over those. Programs that place partitions themselves use this, not
// brisk::size(). Needs brisk::run.
int data_ranks();

// How partitions are spread over ranks.
class Placement {
 public:
  // Partition p of n on rank p * size / n (contiguous runs, as MPI block distributions).
  static Placement blocked() { return Placement(Kind::kBlocked, {}); }
  // Partition p on rank p % size.
  static Placement cyclic() { return Placement(Kind::kCyclic, {}); }
  // Partition p on ranks[p % ranks.size()].
  static Placement on(std::vector<int> ranks) { return Placement(Kind::kExplicit, std::move(ranks)); }
  // The home of every one of n partitions over `size` ranks. Throws brisk::Error on
  // an explicit rank outside [0, size).
  std::vector<int> homes(std::size_t n, int size) const;

 private:
  enum class Kind { kBlocked, kCyclic, kExplicit };
  Placement(Kind k, std::vector<int> r) : kind_(k), ranks_(std::move(r)) {}
  Kind kind_;
  std::vector<int> ranks_;
};

// How a data set is kept.
struct DataSetOptions {
  // Its partitions go into checkpoints and come back at a restart. Off for scratch
  // data that every step recomputes (for example per-rank partial sums), which can
  // then differ in shape between the run that wrote a checkpoint and the restart.
  bool checkpoint = true;
};

// The untyped part of a DataSet handle (copyable, cheap).
class DataSetBase {
 public:
  std::uint32_t id() const noexcept { return id_; }
  const std::string& name() const noexcept { return *name_; }
  std::size_t partitions() const noexcept { return homes_->size(); }
  int home(std::size_t p) const { return homes_->at(p); }
  // Writes of partition p issued so far (its version number).
  std::uint64_t version(std::size_t p) const;
  // Whether this run restored the data set's partitions (and versions) from a
  // checkpoint (--brisk-restore): a program then skips what initialised them.
  bool restored() const;

 protected:
  DataSetBase(const std::string& name, std::size_t partitions, const Placement& placement,
              const detail::DataTypeOps* type, const DataSetOptions& options);
  std::vector<std::byte> fetch_bytes(std::size_t p) const;
  std::uint64_t fetch_start(std::size_t p) const;

 private:
  std::uint32_t id_ = 0;
  std::shared_ptr<const std::string> name_;
  std::shared_ptr<const std::vector<int>> homes_;
};

// DataFuture<T>: a partition's value as of the fetch_async call, on its way to the
// driver. get() waits for it (once).
template <class T>
class DataFuture {
 public:
  DataFuture() = default;
  explicit DataFuture(std::uint64_t key) : key_(key) {}
  DataFuture(DataFuture&& o) noexcept : key_(std::exchange(o.key_, 0)) {}
  DataFuture& operator=(DataFuture&& o) noexcept {
    if (this != &o) {
      forget();
      key_ = std::exchange(o.key_, 0);
    }
    return *this;
  }
  ~DataFuture() { forget(); }
  bool valid() const noexcept { return key_ != 0; }
  T get() {
    if (!valid()) throw Error("brisk::DataFuture::get: no value (default-constructed or already taken)");
    const std::uint64_t key = std::exchange(key_, 0);
    return from_bytes<T>(detail::require_data_plane("brisk::DataFuture::get").fetch_wait(key));
  }

 private:
  void forget() noexcept {
    if (key_ == 0) return;
    if (detail::RuntimeContext* ctx = detail::context(); ctx && ctx->data) ctx->data->fetch_forget(key_);
    key_ = 0;
  }
  std::uint64_t key_ = 0;
};

// DataSet<T>: T must be default-constructible and serializable (serialize.hpp).
// Partitions start as T{} on their home rank; an init task usually writes them.
template <class T>
class DataSet : public DataSetBase {
 public:
  DataSet(const std::string& name, std::size_t partitions, const Placement& placement = Placement::blocked(),
          const DataSetOptions& options = {})
      : DataSetBase(name, partitions, placement, detail::DataTypeRegistration<T>::ops, options) {}
  // A copy of partition p's latest version, on the driver (waits for it).
  T fetch(std::size_t p) const { return from_bytes<T>(fetch_bytes(p)); }
  // Partition p as of now, without waiting: data tasks submitted later (for example
  // the next instantiation of a template, issued ahead of a branch) do not change
  // what get() returns. Lets the driver keep the ranks busy while it decides.
  DataFuture<T> fetch_async(std::size_t p) const { return DataFuture<T>(fetch_start(p)); }
};

// What a data task's function sees.
class DataTask {
 public:
  // The i-th declared access (in declaration order), as T. Throws brisk::Error when
  // partition i is not a DataSet<T>, or (write) when it was declared read-only.
  template <class T>
  const T& read(std::size_t i) const {
    check(i, detail::DataTypeRegistration<T>::ops, false, typeid(T).name());
    return *static_cast<const T*>(values_[i]);
  }
  template <class T>
  T& write(std::size_t i) const {
    check(i, detail::DataTypeRegistration<T>::ops, true, typeid(T).name());
    return *static_cast<T*>(values_[i]);
  }
  std::size_t accesses() const noexcept { return accesses_.size(); }
  const detail::DataAccess& access(std::size_t i) const { return accesses_[i]; }
  // The value given to .args() when the task was declared.
  template <class A>
  A args() const {
    return from_bytes<A>(args_);
  }
  // The parameters of the block instance this task belongs to.
  template <class P>
  P params() const {
    return from_bytes<P>(params_);
  }
  std::span<const std::byte> params_bytes() const noexcept { return params_; }
  TaskId id() const noexcept { return id_; }
  int rank() const noexcept { return rank_; }
  const char* name() const noexcept { return name_; }

  // Made by the runtime.
  DataTask(TaskId id, int rank, const char* name, std::span<const detail::DataAccess> accesses,
           std::span<void* const> values, std::span<const detail::DataTypeOps* const> types,
           std::span<const std::byte> args, std::span<const std::byte> params) noexcept
      : id_(id), rank_(rank), name_(name), accesses_(accesses), values_(values), types_(types), args_(args),
        params_(params) {}

 private:
  void check(std::size_t i, const detail::DataTypeOps* want, bool writing, const char* wanted) const;

  TaskId id_;
  int rank_;
  const char* name_;
  std::span<const detail::DataAccess> accesses_;
  std::span<void* const> values_;
  std::span<const detail::DataTypeOps* const> types_;
  std::span<const std::byte> args_;
  std::span<const std::byte> params_;
};

// Declares one data task: brisk::data_task(f).reads(a, i).writes(b, j).args(x).submit();
class DataTaskBuilder {
 public:
  explicit DataTaskBuilder(DataFunction f);
  DataTaskBuilder& reads(const DataSetBase& d, std::size_t part) { return add(d, part, DataMode::kRead); }
  DataTaskBuilder& writes(const DataSetBase& d, std::size_t part) { return add(d, part, DataMode::kWrite); }
  DataTaskBuilder& updates(const DataSetBase& d, std::size_t part) { return add(d, part, DataMode::kReadWrite); }
  template <class A>
  DataTaskBuilder& args(const A& value) {
    spec_.args = to_bytes(value);
    return *this;
  }
  // Runs it on `rank` instead of where its first written partition lives.
  DataTaskBuilder& on(int rank);
  // For a task of a few microseconds that never blocks (a reduction combining
  // partial sums): it runs on the thread that makes it ready, as copies do (the
  // worker that finished its last input, or the thread that received its last copy:
  // a polling worker, the rank's progress thread, or the driver polling once before
  // it waits) instead of being handed to a worker. Ordering and results are as for
  // any task; it saves a hand-off on a chain where every microsecond waits (an
  // allreduce between ranks). It must not call brisk. A slow one holds up the
  // transport while it runs (a rank that misses heartbeats long enough is declared
  // lost), and inline tasks made ready together run one after another.
  DataTaskBuilder& runs_inline() {
    spec_.runs_inline = true;
    return *this;
  }
  // Issues it (or, while a template body is recorded, records it). Returns its
  // index in the block being recorded, or the count of tasks submitted so far.
  std::size_t submit();

 private:
  DataTaskBuilder& add(const DataSetBase& d, std::size_t part, DataMode mode);
  detail::DataTaskSpec spec_;
};

inline DataTaskBuilder data_task(DataFunction f) { return DataTaskBuilder(f); }

// Waits until every data task submitted so far has run (rethrows a task's failure
// as brisk::TaskError).
void data_sync();
// Whether templates record and replay (--brisk-templates=on, the default).
bool templates_enabled();
detail::DataPlaneStats data_stats();

namespace detail {
class TemplateCore {
 public:
  explicit TemplateCore(std::string name) : name_(std::move(name)) {}
  // Runs `body` (recording it the first time when templates are on) or instantiates.
  void run(std::vector<std::byte> params, const std::function<void()>& body);
  // Runs `body` with each task submitted on its own, as with templates off.
  void run_untemplated(std::vector<std::byte> params, const std::function<void()>& body);
  void move_tasks(std::span<const std::pair<std::uint32_t, int>> moves);
  int rank_of(std::size_t task) const;
  std::size_t tasks() const noexcept { return tasks_; }
  bool installed() const noexcept { return installed_; }
  const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
  std::uint32_t id_ = 0;
  std::size_t tasks_ = 0;
  bool installed_ = false;
};
}  // namespace detail

// Template<P>: a recorded basic block with parameters of type P (serializable).
template <class P>
class Template {
 public:
  Template(std::string name, std::function<void(const P&)> body)
      : core_(std::make_shared<detail::TemplateCore>(std::move(name))), body_(std::move(body)) {}
  // Runs the block with `params`: the first time (or every time, templates off) by
  // running the body; then by one message per rank.
  void instantiate(const P& params) {
    core_->run(to_bytes(params), [&] { body_(params); });
  }
  // Runs the block by running its body, every task submitted on its own (what
  // --brisk-templates=off does), whether or not the template is installed: the
  // untemplated side of a comparison in one run.
  void run_untemplated(const P& params) {
    core_->run_untemplated(to_bytes(params), [&] { body_(params); });
  }
  // Edit: task i (its index in the block) moves to rank r, for each (i, r). Only the
  // entries concerned change; no reinstall. Needs an installed template.
  void move_tasks(const std::vector<std::pair<std::uint32_t, int>>& moves) { core_->move_tasks(moves); }
  int rank_of(std::size_t task) const { return core_->rank_of(task); }
  // Tasks in the block (known once it ran once).
  std::size_t tasks() const noexcept { return core_->tasks(); }
  bool installed() const noexcept { return core_->installed(); }

 private:
  std::shared_ptr<detail::TemplateCore> core_;
  std::function<void(const P&)> body_;
};

template <class P, class F>
Template<P> record(std::string name, F&& body) {
  return Template<P>(std::move(name), std::function<void(const P&)>(std::forward<F>(body)));
}

}  // namespace brisk

// Registers the data task function `f` (void f(brisk::DataTask&)) under the name "f".
#define BRISK_DATA_TASK(f)                                                 \
  [[maybe_unused]] static const ::brisk::detail::DataTaskRegistration     \
      BRISK_PP_CAT(brisk_data_task_registration_, __COUNTER__)(#f, &f)
