#include "brisk/scheduler/data_worker.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>

#include "brisk/core/array.hpp"
#include "brisk/core/detail/task.hpp"
#include "brisk/core/event_log.hpp"
#include "brisk/core/function_registry.hpp"
#include "stopwatch.hpp"

namespace brisk {

struct DataWorker::Instance {
  const detail::DataTypeOps* type = nullptr;
  void* value = nullptr;
  Node* writer = nullptr;      // the last writer, while it has not finished
  std::vector<Node*> readers;  // readers since, while they have not finished
  explicit Instance(const detail::DataTypeOps* t) : type(t), value(t->make()) {}
  ~Instance() {
    if (value) type->destroy(value);
  }
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;
};

// A command with its instances resolved (cached by templates, shared with the
// instantiations that still run it).
struct DataWorker::Entry {
  DataCommand cmd;
  std::vector<Instance*> instances;  // one per access
  std::vector<const detail::DataTypeOps*> types;
  DataFunction function = nullptr;   // compute; nullptr when unknown here
  const char* name = "";
};

struct DataWorker::Batch {
  std::shared_ptr<const std::vector<std::shared_ptr<Entry>>> entries;  // one per node
  std::vector<std::shared_ptr<const std::vector<std::byte>>> params;
  std::unique_ptr<Node[]> nodes;
  std::size_t count = 0;
  // Holds on the batch: one per node, plus one per node run through the executor
  // while its RunNode (in the node's slot) lives.
  std::atomic<std::size_t> left{0};
  std::uint64_t first_order = 0;  // the program order of nodes[0] (DataWorker::next_order_)
  DataWorker* worker = nullptr;    // set by start()
};

struct DataWorker::Template {
  std::string name;
  // (position, id) -> command, in program order.
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::shared_ptr<Entry>> commands;
  std::unordered_map<std::uint64_t, std::uint64_t> position_of;  // id -> position
  // The commands in program order, shared by the instantiations that run them (one
  // reference per instantiation, not one per command). An install or adoption makes
  // it at once (it walks every command anyway); an edit only marks it stale, and the
  // next instantiation, which walks every command too, makes it again. So an edit
  // costs what it changes, and a run of edits between two instantiations one walk.
  std::shared_ptr<const std::vector<std::shared_ptr<Entry>>> order;
  bool order_stale = true;
  void commands_changed() noexcept { order_stale = true; }
  const std::shared_ptr<const std::vector<std::shared_ptr<Entry>>>& in_order() {
    if (order_stale) {
      auto v = std::make_shared<std::vector<std::shared_ptr<Entry>>>();
      v->reserve(commands.size());
      for (const auto& [where, entry] : commands) v->push_back(entry);
      order = std::move(v);
      order_stale = false;
    }
    return order;
  }
};

// A turn on an executor worker for one ready compute: it runs the ready compute
// that comes first in program order (DataWorker::pop_ready), which need not be the
// one whose readiness made it. Lives inside the node that made it (in a Slot): the
// executor's `delete` after run() ends its lifetime and then gives that node's hold
// on its batch back; the compute run gives its own node's back. Its TaskBase id and
// name are those of the node that made it (the executor records none; execute()
// records the node it runs).
class DataWorker::RunNode final : public detail::TaskBase {
 public:
  RunNode(DataWorker* w, TaskId id, const char* name) noexcept : TaskBase(id, name, nullptr, nullptr), worker_(w) {}
  static void operator delete(void* p) noexcept;
  void start() noexcept override {}
  void run() noexcept override;
  void cancel(std::shared_ptr<const ErrorInfo>) noexcept override;
  bool encode_args(Writer&, detail::ObjectCodec&, Rank) override { return false; }
  void arg_objects(std::vector<detail::ObjectState*>&) const override {}

 private:
  DataWorker* worker_;
};

struct DataWorker::Node {
  Batch* batch = nullptr;
  Entry* entry = nullptr;
  std::atomic<int> deps{1};  // the batch's own hold, released once the batch is linked
  // Successors: the first few inline (most commands have one or two).
  std::uint32_t successors = 0;
  Node* first[4] = {};
  std::vector<Node*> more;
  std::vector<std::byte> data;  // recv: the copy
  // recv: the copy inside the message being handled, when the recv runs as it
  // arrives (DataWorker::on_copy); then `data` stays empty.
  std::span<const std::byte> view;
  std::uint64_t key = 0;
  TaskId id;
  std::span<const std::byte> params;
  struct Slot {
    // The storage stays unwritten until a RunNode is made in it (batches make their
    // nodes with make_unique_for_overwrite: value-initialising would zero it).
    explicit Slot(Node* n) noexcept : node(n) {}
    Node* node;
    alignas(RunNode) unsigned char storage[sizeof(RunNode)];
  } slot{this};
};

// Gives a finished node back to its batch; the last one frees the batch.
void DataWorker::release_to(Batch* batch) noexcept {
  if (batch->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  {
    std::lock_guard lock(batch->worker->batches_mutex_);
    batch->worker->batches_.erase(batch);
  }
  delete batch;
}

namespace {
// Copies ready on this thread while it already runs one inline (a trampoline, so
// that a chain of copies does not recurse).
thread_local std::vector<std::pair<void*, void*>>* t_inline_queue = nullptr;  // (worker, node)
// Set while the executor cancels a command (it is shutting down): computes that this
// makes ready go back to the executor, which cancels them too, instead of running
// inline on inputs that were never produced.
thread_local bool t_cancelling = false;
}  // namespace

void DataWorker::RunNode::run() noexcept {
  Node* node = worker_->pop_ready();
  worker_->execute(node);
  release_to(node->batch);
}

void DataWorker::RunNode::cancel(std::shared_ptr<const ErrorInfo>) noexcept {
  Node* node = worker_->pop_ready();
  const bool was = std::exchange(t_cancelling, true);
  worker_->complete(node);
  t_cancelling = was;
  release_to(node->batch);
}

// Ready computes run first in program order: within a rank a CG step's search
// directions (whose halos other ranks wait for) run before the products that became
// ready meanwhile, as the program wrote them (and as hand-written MPI orders them);
// the executor alone would run the newest first.
void DataWorker::push_ready(Node* node) noexcept {
  const std::uint64_t order = node->batch->first_order + static_cast<std::uint64_t>(node - node->batch->nodes.get());
  std::lock_guard lock(ready_mutex_);
  ready_.push_back({order, node});
  std::push_heap(ready_.begin(), ready_.end(), std::greater<>{});
}

DataWorker::Node* DataWorker::pop_ready() noexcept {
  std::lock_guard lock(ready_mutex_);
  std::pop_heap(ready_.begin(), ready_.end(), std::greater<>{});
  Node* node = ready_.back().second;
  ready_.pop_back();
  return node;
}

void DataWorker::RunNode::operator delete(void* p) noexcept {
  auto* slot = reinterpret_cast<Node::Slot*>(static_cast<unsigned char*>(p) - offsetof(Node::Slot, storage));
  release_to(slot->node->batch);
}

namespace {
std::uint64_t instance_key(const detail::DataAccess& a) noexcept {
  return (std::uint64_t{a.dataset} << 32) | a.part;
}
}  // namespace

DataWorker::DataWorker(int rank, detail::Executor& executor, Send send, EventLog* events, std::size_t headroom)
    : rank_(rank), executor_(executor), send_(std::move(send)), events_(events), headroom_(headroom) {
  if (headroom_ > kMaxHeadroom) throw Error(fmt::format("a send headroom of {} bytes (at most {})", headroom_, kMaxHeadroom));
}

Writer DataWorker::message(std::size_t body) const {
  static constexpr std::byte kZeros[kMaxHeadroom]{};
  Writer w;
  w.reserve(headroom_ + body);
  w.write_bytes(kZeros, headroom_);
  return w;
}

DataWorker::~DataWorker() {
  // Commands that never finished (a recv whose copy never came, and what waits behind
  // it: a worker a rollback cancelled) still hold their batches.
  for (Batch* b : batches_) delete b;
}

void DataWorker::cancel() noexcept {
  cancelled_.store(true, std::memory_order_seq_cst);
  {
    std::lock_guard lock(inbox_mutex_);
    inbox_.clear();
  }
  // The partitions' values go as soon as no command runs (execute() checks the
  // other way round): a cancelled worker keeps no copy of the data.
  if (running_.load(std::memory_order_seq_cst) == 0) release_values();
}

// Marks a command or message in hand, so that a cancel frees nothing under it.
class DataWorker::Busy {
 public:
  explicit Busy(DataWorker* w) noexcept : w_(w) { w_->running_.fetch_add(1, std::memory_order_seq_cst); }
  ~Busy() { done(); }
  void done() noexcept {
    if (!w_) return;
    if (w_->running_.fetch_sub(1, std::memory_order_seq_cst) == 1 && w_->cancelled()) w_->release_values();
    w_ = nullptr;
  }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;

 private:
  DataWorker* w_;
};

void DataWorker::release_values() noexcept {
  if (released_.exchange(true)) return;
  std::lock_guard lock(mutex_);
  for (auto& [key, in] : instances_) {
    in->type->destroy(in->value);
    in->value = nullptr;
  }
  arrived_.clear();
  plans_.clear();
}

bool DataWorker::handle(int from, std::span<const std::byte> message) {
  Busy busy(this);
  if (cancelled()) return true;
  try {
    if (message.empty()) throw Error("an empty message");
    Reader r(message.subspan(1));
    switch (static_cast<DataMessage>(message[0])) {
      case DataMessage::kDataSet: on_dataset(r); break;
      case DataMessage::kCommands: on_commands(r); break;
      case DataMessage::kInstall: on_install(r); break;
      case DataMessage::kInstantiate: on_instantiate(r); break;
      case DataMessage::kEdit: on_edit(r); break;
      case DataMessage::kCopy: on_copy(r); break;
      case DataMessage::kSync: on_sync(r); break;
      case DataMessage::kCheckpointPlan: on_checkpoint_plan(r); break;
      case DataMessage::kRestore: on_restore(r); break;
      case DataMessage::kAdopt: on_adopt(r); break;
      default: throw Error(fmt::format("unknown data message kind {}", static_cast<int>(message[0])));
    }
    return true;
  } catch (const std::exception& e) {
    const auto n = malformed_.fetch_add(1, std::memory_order_relaxed);
    if (n < 10) {
      std::fprintf(stderr, "brisk: rank %d: dropped a malformed data message from rank %d: %s\n", rank_, from,
                   e.what());
    }
    return false;
  }
}

// Handles the queued messages in order, on an executor worker.
class DataWorker::DrainTask final : public detail::TaskBase {
 public:
  explicit DrainTask(DataWorker* w) noexcept : TaskBase(TaskId{}, "data-inbox", nullptr, nullptr), worker_(w) {}
  void start() noexcept override {}
  void run() noexcept override { worker_->drain(); }
  void cancel(std::shared_ptr<const ErrorInfo>) noexcept override {}
  bool encode_args(Writer&, detail::ObjectCodec&, Rank) override { return false; }
  void arg_objects(std::vector<detail::ObjectState*>&) const override {}

 private:
  DataWorker* worker_;
};

bool DataWorker::handle_at_once(int from, std::span<const std::byte> message) {
  // Copies and checkpoint plans need no ordering with the commands: handled at once
  // (a plan must be in place before the checkpoint that follows it is written).
  if (message.empty() || (message[0] != std::byte{static_cast<std::uint8_t>(DataMessage::kCopy)} &&
                          message[0] != std::byte{static_cast<std::uint8_t>(DataMessage::kCheckpointPlan)})) {
    return false;
  }
  handle(from, message);
  return true;
}

void DataWorker::post_view(int from, std::span<const std::byte> message) {
  if (!handle_at_once(from, message)) post(from, std::vector<std::byte>(message.begin(), message.end()));
}

void DataWorker::post(int from, std::vector<std::byte> message) {
  if (handle_at_once(from, message)) return;
  bool start = false;
  {
    std::lock_guard lock(inbox_mutex_);
    inbox_.emplace_back(from, std::move(message));
    start = !std::exchange(draining_, true);
  }
  if (start) executor_.submit(new DrainTask(this));
}

void DataWorker::drain() noexcept {
  for (;;) {
    std::pair<int, std::vector<std::byte>> m;
    {
      std::lock_guard lock(inbox_mutex_);
      if (inbox_.empty()) {
        draining_ = false;
        return;
      }
      m = std::move(inbox_.front());
      inbox_.pop_front();
      in_hand_.fetch_add(1, std::memory_order_acq_rel);
    }
    handle(m.first, m.second);
    in_hand_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void DataWorker::carry_templates(DataWorker& before, const std::vector<int>& rank_map) {
  std::deque<std::pair<int, std::vector<std::byte>>> queued;
  {
    std::lock_guard lock(before.inbox_mutex_);
    queued.swap(before.inbox_);  // its drain finds nothing more
  }
  // A message its drain took before that is being handled now: wait for it.
  while (before.in_hand_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  for (const auto& [from, m] : queued) {
    if (m.empty()) continue;
    switch (static_cast<DataMessage>(m[0])) {
      case DataMessage::kDataSet:
      case DataMessage::kInstall:
      case DataMessage::kEdit:
      case DataMessage::kAdopt: before.handle(from, m); break;
      default: break;
    }
  }
  const auto map_peer = [&rank_map](DataCommand& c) {
    if (c.kind != DataCommand::kSend && c.kind != DataCommand::kRecv) return;
    c.peer = c.peer >= 0 && c.peer < static_cast<int>(rank_map.size()) ? rank_map[static_cast<std::size_t>(c.peer)] : -1;
  };
  std::lock_guard theirs(before.mutex_);
  std::lock_guard ours(mutex_);
  for (const auto& [name, c] : before.carried_) {
    CarriedTemplate k = c;
    for (auto& [where, cmd] : k) map_peer(cmd);
    carried_[name] = std::move(k);
  }
  std::unordered_map<std::string, int> count;
  for (const auto& [id, t] : before.templates_) ++count[t->name];
  for (const auto& [id, t] : before.templates_) {
    if (count[t->name] != 1) {
      carried_.erase(t->name);
      continue;
    }
    CarriedTemplate k;
    for (const auto& [where, entry] : t->commands) {
      DataCommand cmd = entry->cmd;
      map_peer(cmd);
      k.emplace(where, std::move(cmd));
    }
    carried_[t->name] = std::move(k);
  }
}

void DataWorker::on_dataset(Reader& r) {
  std::uint32_t id = 0;
  std::uint64_t type = 0;
  std::string name;
  std::vector<std::int32_t> homes;
  r(id, type, name, homes);
  const detail::DataTypeOps* ops = detail::find_data_type(type);
  if (!ops) {
    throw Error(fmt::format("data set '{}': its element type (id {:#x}) is not known on rank {} (different binaries?)",
                            name, type, rank_));
  }
  std::lock_guard lock(mutex_);
  datasets_[id] = DataSetInfo{std::move(name), ops};
}

DataWorker::Instance* DataWorker::instance(const detail::DataAccess& a) {
  const std::uint64_t key = instance_key(a);
  if (auto in = instances_.find(key); in != instances_.end()) return in->second.get();
  // Checked before the table has an entry for it: a malformed command leaves no empty
  // slot behind (release_values, say, takes every entry for an instance).
  auto it = datasets_.find(a.dataset);
  if (it == datasets_.end()) throw Error(fmt::format("a command names data set {}, unknown on rank {}", a.dataset, rank_));
  return instances_.emplace(key, std::make_unique<Instance>(it->second.type)).first->second.get();
}

std::shared_ptr<DataWorker::Entry> DataWorker::make_entry(DataCommand cmd) {
  auto e = std::make_shared<Entry>();
  if (cmd.kind > DataCommand::kDeliver) throw Error(fmt::format("unknown command kind {}", cmd.kind));
  if (cmd.kind != DataCommand::kCompute && cmd.accesses.size() != 1) throw Error("a copy command must name one partition");
  if ((cmd.flags & ~DataCommand::kRunsInline) != 0 || (cmd.flags != 0 && cmd.kind != DataCommand::kCompute)) {
    throw Error(fmt::format("a command of kind {} has the invalid flags {:#x}", cmd.kind, cmd.flags));
  }
  e->instances.reserve(cmd.accesses.size());
  for (const auto& a : cmd.accesses) {
    if (static_cast<std::uint8_t>(a.mode) < 1 || static_cast<std::uint8_t>(a.mode) > 3) {
      throw Error(fmt::format("an access has the invalid mode {}", static_cast<int>(a.mode)));
    }
    Instance* in = instance(a);
    e->instances.push_back(in);
    e->types.push_back(in->type);
  }
  if (cmd.kind == DataCommand::kCompute) {
    const FunctionInfo* info = detail::find_function(cmd.function);
    if (info) {
      e->function = reinterpret_cast<DataFunction>(const_cast<void*>(info->address));
      e->name = info->name.c_str();
    } else {
      e->name = "<unregistered data task>";
    }
  } else {
    e->name = cmd.kind == DataCommand::kSend ? "copy-out" : cmd.kind == DataCommand::kRecv ? "copy-in" : "deliver";
  }
  e->cmd = std::move(cmd);
  return e;
}

void DataWorker::add_edge(Node* from, Node* to) {
  if (from == to) return;
  if (from->successors < 4) {
    from->first[from->successors] = to;
  } else {
    from->more.push_back(to);
  }
  ++from->successors;
  to->deps.fetch_add(1, std::memory_order_relaxed);
}

void DataWorker::link(Node* node) {
  const Entry& e = *node->entry;
  for (std::size_t i = 0; i < e.instances.size(); ++i) {
    Instance* in = e.instances[i];
    // A send or deliver reads its instance; a recv overwrites it.
    DataMode mode = e.cmd.kind == DataCommand::kCompute ? e.cmd.accesses[i].mode
                    : e.cmd.kind == DataCommand::kRecv  ? DataMode::kWrite
                                                        : DataMode::kRead;
    if (in->writer) add_edge(in->writer, node);
    if (writes(mode)) {
      for (Node* reader : in->readers) add_edge(reader, node);
      in->readers.clear();
      in->writer = node;
    } else if (in->writer != node && (in->readers.empty() || in->readers.back() != node)) {
      in->readers.push_back(node);
    }
  }
  if (e.cmd.kind == DataCommand::kRecv) {
    auto it = arrived_.find(node->key);
    if (it != arrived_.end()) {
      node->data = std::move(it->second);
      arrived_.erase(it);
    } else {
      awaiting_[node->key] = node;
      node->deps.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void DataWorker::start(std::unique_ptr<Batch> batch) noexcept {
  outstanding_.fetch_add(static_cast<std::int64_t>(batch->count), std::memory_order_acq_rel);
  // Released in program order (computes then run in that order anyway: push_ready).
  // The last ready() may free the batch: nothing of it is read after that.
  Batch* b = batch.release();
  b->worker = this;
  {
    std::lock_guard lock(batches_mutex_);
    batches_.insert(b);
  }
  Node* nodes = b->nodes.get();
  for (std::size_t i = 0, n = b->count; i < n; ++i) ready(&nodes[i]);
}

void DataWorker::on_commands(Reader& r) {
  std::vector<std::vector<std::byte>> params;
  std::vector<DataCommand> cmds;
  r(params, cmds);
  auto batch = std::make_unique<Batch>();
  batch->params.reserve(params.size());
  for (auto& p : params) batch->params.push_back(std::make_shared<const std::vector<std::byte>>(std::move(p)));
  batch->count = cmds.size();
  batch->nodes = std::make_unique_for_overwrite<Node[]>(cmds.size());
  batch->left.store(cmds.size(), std::memory_order_relaxed);
  if (cmds.empty()) return;
  {
    std::lock_guard lock(mutex_);
    auto entries = std::make_shared<std::vector<std::shared_ptr<Entry>>>();
    entries->reserve(cmds.size());
    for (auto& c : cmds) {
      if (c.kind == DataCommand::kCompute && c.params >= batch->params.size() && !batch->params.empty()) {
        throw Error(fmt::format("a command names parameters {} of {}", c.params, batch->params.size()));
      }
      entries->push_back(make_entry(std::move(c)));
    }
    batch->entries = std::move(entries);
    batch->first_order = std::exchange(next_order_, next_order_ + batch->count);
    for (std::size_t i = 0; i < batch->count; ++i) {
      Node& n = batch->nodes[i];
      n.batch = batch.get();
      n.entry = (*batch->entries)[i].get();
      const DataCommand& c = n.entry->cmd;
      n.key = c.key;
      n.id = data_task_id(c.task);
      if (c.kind == DataCommand::kCompute && !batch->params.empty()) n.params = *batch->params[c.params];
      link(&n);
    }
  }
  start(std::move(batch));
}

void DataWorker::on_install(Reader& r) {
  std::uint32_t id = 0;
  std::string name;
  std::vector<DataCommand> cmds;
  r(id, name, cmds);
  auto t = std::make_unique<Template>();
  t->name = std::move(name);
  std::lock_guard lock(mutex_);
  detail::Stopwatch watch(install_ns_);
  installed_ += cmds.size();
  for (auto& c : cmds) {
    const std::uint64_t pos = c.position, cid = c.id;
    if (!t->position_of.emplace(cid, pos).second) throw Error(fmt::format("template '{}' repeats command {}", t->name, cid));
    t->commands.emplace(std::make_pair(pos, cid), make_entry(std::move(c)));
  }
  t->in_order();  // made at once: the install walks every command anyway
  templates_[id] = std::move(t);
}

void DataWorker::on_adopt(Reader& r) {
  std::uint32_t id = 0;
  std::string name;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> renumbered;
  r(id, name, renumbered);
  const std::map<std::uint32_t, std::uint32_t> ids(renumbered.begin(), renumbered.end());
  std::lock_guard lock(mutex_);
  detail::Stopwatch watch(install_ns_);
  auto kept = carried_.find(name);
  if (kept == carried_.end()) {
    throw Error(fmt::format("template '{}' is to be taken over, but rank {} kept none of that name", name, rank_));
  }
  auto t = std::make_unique<Template>();
  t->name = name;
  for (const auto& [where, kept_cmd] : kept->second) {
    DataCommand cmd = kept_cmd;
    for (auto& a : cmd.accesses) {
      const auto now = ids.find(a.dataset);
      if (now == ids.end()) {
        throw Error(fmt::format("template '{}' is to be taken over, but its data set {} is not renumbered", name,
                                a.dataset));
      }
      a.dataset = now->second;
    }
    t->position_of.emplace(cmd.id, cmd.position);
    t->commands.emplace(where, make_entry(std::move(cmd)));
  }
  installed_ += t->commands.size();
  t->in_order();
  carried_.erase(kept);
  templates_[id] = std::move(t);
}

void DataWorker::on_edit(Reader& r) {
  std::uint32_t id = 0;
  std::vector<std::uint64_t> removed;
  std::vector<DataCommand> added;
  r(id, removed, added);
  std::lock_guard lock(mutex_);
  detail::Stopwatch watch(edit_ns_);
  edited_ += removed.size() + added.size();
  ++edit_messages_;
  auto it = templates_.find(id);
  if (it == templates_.end()) throw Error(fmt::format("an edit of template {}, unknown on rank {}", id, rank_));
  Template& t = *it->second;
  // Before any change: the order is made again however the edit ends (a bad one may
  // stop half-way).
  t.commands_changed();
  for (std::uint64_t cid : removed) {
    auto p = t.position_of.find(cid);
    if (p == t.position_of.end()) throw Error(fmt::format("an edit removes command {}, not in template '{}'", cid, t.name));
    t.commands.erase({p->second, cid});
    t.position_of.erase(p);
  }
  for (auto& c : added) {
    const std::uint64_t pos = c.position, cid = c.id;
    if (!t.position_of.emplace(cid, pos).second) throw Error(fmt::format("an edit adds command {} twice", cid));
    t.commands.emplace(std::make_pair(pos, cid), make_entry(std::move(c)));
  }
}

void DataWorker::on_instantiate(Reader& r) {
  std::uint32_t id = 0;
  std::uint64_t first_task = 0, key_base = 0;
  std::vector<std::byte> params;
  r(id, first_task, key_base, params);
  auto batch = std::make_unique<Batch>();
  batch->params.push_back(std::make_shared<const std::vector<std::byte>>(std::move(params)));
  {
    std::lock_guard lock(mutex_);
    detail::Stopwatch watch(instantiate_ns_);
    auto it = templates_.find(id);
    if (it == templates_.end()) throw Error(fmt::format("an instantiation of template {}, unknown on rank {}", id, rank_));
    Template& t = *it->second;
    batch->entries = t.in_order();
    batch->count = batch->entries->size();
    if (batch->count == 0) return;
    batch->nodes = std::make_unique_for_overwrite<Node[]>(batch->count);
    batch->left.store(batch->count, std::memory_order_relaxed);
    batch->first_order = std::exchange(next_order_, next_order_ + batch->count);
    const std::span<const std::byte> p = *batch->params[0];
    std::size_t i = 0;
    for (const auto& entry : *batch->entries) {
      Node& n = batch->nodes[i++];
      n.batch = batch.get();
      n.entry = entry.get();
      n.key = key_base + entry->cmd.key;
      n.id = data_task_id(first_task + entry->cmd.task);
      n.params = p;
      link(&n);
    }
    instantiated_ += batch->count;
  }
  start(std::move(batch));
}

void DataWorker::add_stats(detail::DataPlaneStats& s) const {
  s.tasks_run = tasks_run();
  std::lock_guard lock(mutex_);
  s.install_ns = install_ns_;
  s.installed_commands = installed_;
  s.instantiate_ns = instantiate_ns_;
  s.instantiated_commands = instantiated_;
  s.edit_ns = edit_ns_;
  s.edited_commands = edited_;
  s.edit_messages = edit_messages_;
}

void DataWorker::on_copy(Reader& r) {
  std::uint64_t key = 0;
  r(key);
  const std::span<const std::byte> bytes = r.rest();
  Node* node = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (key < settled_below_) throw Error(fmt::format("copy {} arrived after every command that could want it ran", key));
    auto it = awaiting_.find(key);
    if (it == awaiting_.end()) {
      if (!arrived_.emplace(key, std::vector<std::byte>(bytes.begin(), bytes.end())).second) {
        throw Error(fmt::format("copy {} arrived twice", key));
      }
      return;
    }
    node = it->second;
    awaiting_.erase(it);
  }
  // The recv unpacks the message in place when it runs right here: its data is the
  // last thing it waits for (nobody else can release that), it is small enough to
  // run inline, and no inline chain on this thread would run it later. Otherwise
  // it keeps a copy.
  if (!t_inline_queue && bytes.size() <= kInlineRecvBytes && node->deps.load(std::memory_order_acquire) == 1) {
    node->view = bytes;
  } else {
    node->data.assign(bytes.begin(), bytes.end());
  }
  ready(node);
}

void DataWorker::on_sync(Reader& r) {
  std::uint64_t token = 0, settled = 0;
  r(token, settled);
  {
    std::lock_guard lock(mutex_);
    syncs_.emplace_back(token, settled);
  }
  if (outstanding_.load(std::memory_order_acquire) == 0) finish_syncs();
}

void DataWorker::on_checkpoint_plan(Reader& r) {
  std::uint64_t sequence = 0;
  std::vector<CheckpointPart> parts;
  r(sequence, parts);
  std::lock_guard lock(mutex_);
  plans_[sequence] = std::move(parts);
}

std::vector<std::pair<std::string, std::vector<std::byte>>> DataWorker::checkpoint_objects(std::uint64_t sequence) {
  std::vector<std::pair<std::string, std::vector<std::byte>>> out;
  std::lock_guard lock(mutex_);
  auto it = plans_.find(sequence);
  if (it == plans_.end()) return out;
  for (const CheckpointPart& p : it->second) {
    const detail::DataAccess a{p.dataset, p.part, DataMode::kRead};
    Instance* in = instance(a);
    Writer w;
    in->type->write(w, in->value);
    out.emplace_back(p.name, w.take());
  }
  plans_.erase(it);
  return out;
}

void DataWorker::on_restore(Reader& r) {
  std::uint32_t dataset = 0, part = 0;
  std::string file, name;
  r(dataset, part, file, name);
  Instance* in = nullptr;
  {
    std::lock_guard lock(mutex_);
    in = instance(detail::DataAccess{dataset, part, DataMode::kRead});
    if (in->writer || !in->readers.empty()) throw Error(fmt::format("a restore of {} while commands use it", name));
  }
  try {
    if (!restore_loader_) throw Error("this rank cannot read checkpoints");
    std::vector<std::byte> bytes = restore_loader_(file, name);
    Reader br(bytes);
    in->type->read(br, in->value);
  } catch (const std::exception& e) {
    report_failure("restore", fmt::format("{} from {}: {}", name, file, e.what()));
  }
}

void DataWorker::finish_syncs() noexcept {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> tokens;
  std::size_t orphans = 0;
  {
    std::lock_guard lock(mutex_);
    if (outstanding_.load(std::memory_order_acquire) != 0) return;
    tokens.swap(syncs_);
    // Every copy keyed below a sync's mark was for a command issued before it, all of
    // which ran: a copy still waiting, or arriving later, is one no command wants.
    for (const auto& [token, settled] : tokens) settled_below_ = std::max(settled_below_, settled);
    for (auto it = arrived_.begin(); it != arrived_.end();) {
      if (it->first < settled_below_) {
        it = arrived_.erase(it);
        ++orphans;
      } else {
        ++it;
      }
    }
  }
  if (orphans) {
    malformed_.fetch_add(orphans, std::memory_order_relaxed);
    std::fprintf(stderr, "brisk: rank %d: dropped %zu copies that no command expects\n", rank_, orphans);
  }
  for (const auto& [t, settled] : tokens) {
    Writer w = message();
    w(static_cast<std::uint8_t>(DataMessage::kSyncDone), t, static_cast<std::int32_t>(rank_));
    send_(0, w.take());
  }
}

void DataWorker::ready(Node* node) noexcept {
  if (node->deps.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // Copies run at once on the thread that made them ready: a send queued behind
  // computes would hold up the rank that waits for it (the executor runs its own
  // newest work first). Large incoming copies are unpacked on a worker instead.
  // Computes declared runs_inline (a reduction's combine, a few microseconds) run at
  // once too, except while the executor cancels commands.
  const DataCommand& c = node->entry->cmd;
  const bool inline_run = c.kind == DataCommand::kSend || c.kind == DataCommand::kDeliver ||
                          (c.kind == DataCommand::kRecv && node->data.size() <= kInlineRecvBytes) ||
                          (c.kind == DataCommand::kCompute && (c.flags & DataCommand::kRunsInline) != 0 &&
                           !t_cancelling);
  if (inline_run) {
    if (t_inline_queue) {
      t_inline_queue->emplace_back(this, node);
      return;
    }
    std::vector<std::pair<void*, void*>> queue{{this, node}};
    t_inline_queue = &queue;
    while (!queue.empty()) {
      auto [w, n] = queue.back();
      queue.pop_back();
      static_cast<DataWorker*>(w)->execute(static_cast<Node*>(n));
      release_to(static_cast<Node*>(n)->batch);
    }
    t_inline_queue = nullptr;
    return;
  }
  // One more hold on the batch: the RunNode in this node's slot, which may run
  // another node and outlive this one's run.
  node->batch->left.fetch_add(1, std::memory_order_relaxed);
  push_ready(node);
  executor_.submit(::new (node->slot.storage) RunNode(this, node->id, node->entry->name));
}

void DataWorker::execute(Node* node) noexcept {
  const Entry& e = *node->entry;
  const DataCommand& c = e.cmd;
  Busy busy(this);
  // Partitions stay with their rank and move by the data plane's own messages: none
  // is read from the arena, so their storage is this process's own memory.
  detail::PrivateArrays private_memory;
  if (events_) events_->record(EventKind::kStart, node->id.lo, e.name);
  try {
    // A cancelled worker's commands finish without running: their successors are
    // released the same way, and nothing of it is sent anywhere.
    switch (cancelled() ? std::uint8_t{0xFF} : c.kind) {
      case DataCommand::kCompute: {
        if (!e.function) {
          throw Error(fmt::format("data task function id {:#x} is not registered on rank {} (BRISK_DATA_TASK)",
                                  c.function.value, rank_));
        }
        void* values[16];
        std::vector<void*> more;
        void** v = values;
        if (e.instances.size() > 16) {
          more.resize(e.instances.size());
          v = more.data();
        }
        for (std::size_t i = 0; i < e.instances.size(); ++i) v[i] = e.instances[i]->value;
        if (task_hook_) task_hook_();
        DataTask task(node->id, rank_, e.name, c.accesses, {v, e.instances.size()}, e.types, c.args, node->params);
        e.function(task);
        tasks_run_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      case DataCommand::kSend:
      case DataCommand::kDeliver: {
        // Reserved whole: the value's bytes are written once, into storage that a
        // large one may take over from an earlier message of its size.
        Writer w = message(1 + sizeof node->key + (e.types[0]->size ? e.types[0]->size(e.instances[0]->value) : 0));
        w(static_cast<std::uint8_t>(c.kind == DataCommand::kSend ? DataMessage::kCopy : DataMessage::kFetched), node->key);
        e.types[0]->write(w, e.instances[0]->value);
        send_(c.peer, w.take());
        break;
      }
      case DataCommand::kRecv: {
        Reader r(node->view.data() ? node->view : std::span<const std::byte>(node->data));
        e.types[0]->read(r, e.instances[0]->value);
        std::vector<std::byte>().swap(node->data);
        break;
      }
      default: break;
    }
  } catch (const std::exception& ex) {
    report_failure(e.name, ex.what());
  } catch (...) {
    report_failure(e.name, "an unknown exception");
  }
  node->view = {};  // the message it pointed into is not kept
  if (events_) events_->record(EventKind::kEnd, node->id.lo, e.name);
  busy.done();
  complete(node);
}

void DataWorker::report_failure(const char* function, const std::string& message) noexcept {
  try {
    Writer w = this->message();
    w(static_cast<std::uint8_t>(DataMessage::kFailed), std::string(function), message, static_cast<std::int32_t>(rank_));
    send_(0, w.take());
  } catch (...) {
    std::fprintf(stderr, "brisk: rank %d: data task '%s' failed: %s\n", rank_, function, message.c_str());
  }
}

void DataWorker::complete(Node* node) noexcept {
  {
    std::lock_guard lock(mutex_);
    for (Instance* in : node->entry->instances) {
      if (in->writer == node) in->writer = nullptr;
      auto& rd = in->readers;
      auto it = std::find(rd.begin(), rd.end(), node);
      if (it != rd.end()) {
        *it = rd.back();
        rd.pop_back();
      }
    }
  }
  // No edge reaches a node once it left its instances: the successors are final.
  // Last to first, as in a batch's release.
  for (auto it = node->more.rbegin(); it != node->more.rend(); ++it) ready(*it);
  for (std::uint32_t i = std::min<std::uint32_t>(node->successors, 4); i-- > 0;) ready(node->first[i]);
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) finish_syncs();
}


}  // namespace brisk
