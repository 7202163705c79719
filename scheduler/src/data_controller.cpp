#include "brisk/scheduler/data_controller.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "stopwatch.hpp"

namespace brisk {
namespace {


bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// One message: its kind byte, then the body.
std::vector<std::byte> message(DataMessage kind, const Writer& w) {
  std::vector<std::byte> out;
  out.reserve(w.size() + 1);
  out.push_back(std::byte{static_cast<std::uint8_t>(kind)});
  out.insert(out.end(), w.bytes().begin(), w.bytes().end());
  return out;
}

}  // namespace

DataController::DataController(int size, Send send, std::function<int()> poll)
    : size_(size), send_(std::move(send)), poll_(std::move(poll)), words_((static_cast<std::size_t>(size) + 63) / 64) {
  pending_.resize(static_cast<std::size_t>(size));
}

// ---------------------------------------------------------------------------
// The holder table.

std::uint32_t DataController::slot_of(const detail::DataAccess& a) const {
  if (a.dataset >= datasets_.size()) throw Error(fmt::format("brisk: data set {} does not exist", a.dataset));
  const DataSetInfo& d = datasets_[a.dataset];
  if (a.part >= d.homes.size()) {
    throw Error(fmt::format("brisk: partition {} of '{}' is out of range (it has {})", a.part, d.name, d.homes.size()));
  }
  return d.first_slot + a.part;
}

bool DataController::holds(std::uint32_t slot, int rank) const noexcept {
  return (holders_[slot * words_ + static_cast<std::size_t>(rank) / 64] >> (rank % 64)) & 1u;
}

void DataController::set_only(std::uint32_t slot, int rank) noexcept {
  std::fill_n(holders_.begin() + static_cast<std::ptrdiff_t>(slot * words_), words_, 0);
  add_holder(slot, rank);
}

void DataController::add_holder(std::uint32_t slot, int rank) noexcept {
  holders_[slot * words_ + static_cast<std::size_t>(rank) / 64] |= std::uint64_t{1} << (rank % 64);
}

detail::DataAccess DataController::access_of(std::uint32_t slot) const noexcept {
  // The last data set whose first slot is at or below `slot` (sets take consecutive slots).
  const auto next = std::upper_bound(datasets_.begin(), datasets_.end(), slot,
                                     [](std::uint32_t s, const DataSetInfo& d) { return s < d.first_slot; });
  const auto& d = *std::prev(next);
  return {static_cast<std::uint32_t>(&d - datasets_.data()), slot - d.first_slot, DataMode::kRead};
}

int DataController::pick_source(std::uint32_t slot) const noexcept {
  // The home rank when it is current, else the lowest rank that is.
  const detail::DataAccess a = access_of(slot);
  const int home = datasets_[a.dataset].homes[a.part];
  if (holds(slot, home)) return home;
  for (std::size_t w = 0; w < words_; ++w) {
    const std::uint64_t bits = holders_[slot * words_ + w];
    if (bits) return static_cast<int>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits)));
  }
  return home;
}

std::vector<int> DataController::holders(std::uint32_t dataset, std::uint32_t part) const {
  const std::uint32_t slot = slot_of({dataset, part, DataMode::kRead});
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    if (holds(slot, r)) out.push_back(r);
  }
  return out;
}

std::uint64_t DataController::version(std::uint32_t dataset, std::uint32_t part) const {
  return versions_[slot_of({dataset, part, DataMode::kRead})];
}

// ---------------------------------------------------------------------------
// Untemplated commands.

std::uint32_t DataController::create(const std::string& name, const detail::DataTypeOps* type, std::vector<int> homes,
                                     bool checkpointed) {
  for (int h : homes) {
    if (h < 0 || h >= size_) throw Error(fmt::format("brisk::DataSet '{}': home rank {} is out of range", name, h));
  }
  const auto id = static_cast<std::uint32_t>(datasets_.size());
  const auto first = static_cast<std::uint32_t>(versions_.size());
  Writer w;
  w(id, type->id, name, std::vector<std::int32_t>(homes.begin(), homes.end()));
  datasets_.push_back(DataSetInfo{name, type, std::move(homes), first, checkpointed});
  const std::size_t n = datasets_.back().homes.size();
  versions_.resize(first + n, 0);
  holders_.resize((first + n) * words_, 0);
  for (std::size_t p = 0; p < n; ++p) add_holder(first + static_cast<std::uint32_t>(p), datasets_.back().homes[p]);
  flush();
  send_all(DataMessage::kDataSet, w);
  if (auto it = restorable_.find(name); checkpointed && it != restorable_.end()) {
    const CheckpointDataSet& saved = it->second;
    if (saved.type != type->id) {
      throw Error(fmt::format("brisk::DataSet '{}': the restored checkpoint {} holds it with another element type",
                              name, restored_file_));
    }
    if (saved.versions.size() != n) {
      throw Error(fmt::format(
          "brisk::DataSet '{}': the restored checkpoint {} holds it with {} partitions, the program asks for {} "
          "(scratch data sets that depend on the rank count: DataSetOptions{{.checkpoint = false}})",
          name, restored_file_, saved.versions.size(), n));
    }
    // Each home rank reads its partitions from the file, before any command.
    for (std::size_t p = 0; p < n; ++p) {
      if (saved.versions[p] == 0) continue;
      Writer r;
      r(id, static_cast<std::uint32_t>(p), restored_file_, checkpoint_object_name(name, static_cast<std::uint32_t>(p)));
      send_to(datasets_.back().homes[p], DataMessage::kRestore, r);
      versions_[first + p] = saved.versions[p];
    }
    datasets_.back().restored = true;
    restorable_.erase(it);
  }
  return id;
}

int DataController::place(const detail::DataTaskSpec& spec) const {
  if (spec.rank >= 0) return spec.rank;
  for (const auto& a : spec.accesses) {
    if (writes(a.mode)) return datasets_[a.dataset].homes[a.part];
  }
  return datasets_[spec.accesses.front().dataset].homes[spec.accesses.front().part];
}

void DataController::push(int rank, DataCommand cmd) {
  pending_[static_cast<std::size_t>(rank)].commands.push_back(std::move(cmd));
  ++pending_count_;
}

void DataController::issue_copy(std::uint32_t slot, int from, int to) {
  const detail::DataAccess a = access_of(slot);
  const std::uint64_t key = next_key_++;
  DataCommand send;
  send.kind = DataCommand::kSend;
  send.accesses = {a};
  send.peer = to;
  send.key = key;
  DataCommand recv;
  recv.kind = DataCommand::kRecv;
  recv.accesses = {a};
  recv.peer = from;
  recv.key = key;
  push(from, std::move(send));
  push(to, std::move(recv));
  ++stats_.copies;
}

void DataController::submit(detail::DataTaskSpec spec, std::shared_ptr<const std::vector<std::byte>> params) {
  for (const auto& a : spec.accesses) (void)slot_of(a);  // validates before anything is issued
  if (spec.accesses.empty() && spec.rank < 0) throw Error("brisk::data_task: a data task needs a partition or a rank");
  last_template_ = kNone;
  const int rank = place(spec);
  for (const auto& a : spec.accesses) {
    if (!reads(a.mode)) continue;
    const std::uint32_t slot = slot_of(a);
    if (!holds(slot, rank)) {
      issue_copy(slot, pick_source(slot), rank);
      add_holder(slot, rank);
    }
  }
  for (const auto& a : spec.accesses) {
    if (!writes(a.mode)) continue;
    const std::uint32_t slot = slot_of(a);
    ++versions_[slot];
    set_only(slot, rank);
  }
  Pending& p = pending_[static_cast<std::size_t>(rank)];
  if (!params) {
    static const auto empty = std::make_shared<const std::vector<std::byte>>();
    params = empty;
  }
  if (p.params.empty() || p.params.back() != params) p.params.push_back(std::move(params));
  DataCommand cmd;
  cmd.kind = DataCommand::kCompute;
  cmd.function = spec.function;
  cmd.accesses = std::move(spec.accesses);
  cmd.args = std::move(spec.args);
  cmd.flags = spec.runs_inline ? DataCommand::kRunsInline : 0;
  cmd.task = next_task_++;
  cmd.params = static_cast<std::uint32_t>(p.params.size() - 1);
  push(rank, std::move(cmd));
  ++stats_.commands;
  if (pending_count_ >= 256) flush();
}

void DataController::flush() {
  if (pending_count_ == 0) return;
  for (int r = 0; r < size_; ++r) {
    Pending& p = pending_[static_cast<std::size_t>(r)];
    for (auto& e : p.edits) send_(r, e);
    p.edits.clear();
    if (p.commands.empty()) continue;
    std::vector<std::vector<std::byte>> params;
    params.reserve(p.params.size());
    for (const auto& x : p.params) params.push_back(*x);
    Writer w;
    w(params, p.commands);
    p.commands.clear();
    p.params.clear();
    send_to(r, DataMessage::kCommands, w);
  }
  pending_count_ = 0;
  unsent_edits_.clear();
}

void DataController::send_to(int rank, DataMessage kind, const Writer& body) { send_(rank, message(kind, body)); }

void DataController::send_all(DataMessage kind, const Writer& body) {
  const std::vector<std::byte> m = message(kind, body);
  for (int r = 0; r < size_; ++r) send_(r, m);
}

// ---------------------------------------------------------------------------
// Waiting for the ranks.

bool DataController::handle(int from, std::span<const std::byte> message) {
  bool may_defer = false;  // a value or a sync reply, which the driver may get a little later
  try {
    if (message.empty()) throw Error("an empty message");
    Reader r(message.subspan(1));
    std::lock_guard lock(reply_mutex_);
    may_defer = static_cast<DataMessage>(message[0]) != DataMessage::kFailed;
    switch (static_cast<DataMessage>(message[0])) {
      case DataMessage::kFetched: {
        std::uint64_t key = 0;
        r(key);
        if (forgotten_.erase(key) != 0) break;
        std::vector<std::byte> data(r.remaining());
        r.read_bytes(data.data(), data.size());
        fetched_[key] = std::move(data);
        break;
      }
      case DataMessage::kSyncDone: {
        std::uint64_t token = 0;
        std::int32_t rank = 0;
        r(token, rank);
        ++sync_replies_[token];
        break;
      }
      case DataMessage::kFailed: {
        auto e = std::make_shared<ErrorInfo>();
        std::int32_t rank = 0;
        r(e->function, e->message, rank);
        e->rank = rank;
        if (!failure_) failure_ = std::move(e);
        break;
      }
      default: throw Error(fmt::format("unexpected data message kind {}", static_cast<int>(message[0])));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "brisk: rank 0: dropped a malformed data reply from rank %d: %s\n", from, e.what());
    return false;
  }
  if (!(may_defer && defer_ && defer_())) reply_cv_.notify_all();
  return true;
}

void DataController::abort(int lost_rank) {
  {
    std::lock_guard lock(reply_mutex_);
    int none = -1;
    aborted_.compare_exchange_strong(none, lost_rank, std::memory_order_acq_rel);
  }
  reply_cv_.notify_all();
}

void DataController::check_aborted() const {
  if (const int lost = aborted_.load(std::memory_order_acquire); lost >= 0) throw detail::DataRollback{lost};
}

void DataController::wait_until(const std::function<bool()>& done) {
  // The driver often shares a core with a worker: it polls once and then sleeps
  // until a reply is handled (by the progress thread or a worker).
  check_aborted();
  if (poll_) poll_();
  std::unique_lock lock(reply_mutex_);
  for (;;) {
    if (aborted()) {
      lock.unlock();
      check_aborted();
    }
    if (failure_) {
      // Reported once: the driver may catch it and carry on.
      auto f = std::move(failure_);
      failure_.reset();
      lock.unlock();
      throw TaskError(std::move(f));
    }
    if (done()) return;
    // Every reply, failure and abort notifies; the timeout is only a safety net. (A
    // short one woke the driver for nothing once per millisecond, each time taking
    // the core from the worker it shares it with.)
    reply_cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

std::uint64_t DataController::fetch_start(std::uint32_t dataset, std::uint32_t part) {
  const std::uint32_t slot = slot_of({dataset, part, DataMode::kRead});
  const int src = pick_source(slot);
  DataCommand d;
  d.kind = DataCommand::kDeliver;
  d.accesses = {detail::DataAccess{dataset, part, DataMode::kRead}};
  d.peer = 0;
  d.key = next_key_++;
  const std::uint64_t key = d.key;
  push(src, std::move(d));
  flush();
  return key;
}

void DataController::fetch_forget(std::uint64_t key) noexcept {
  std::lock_guard lock(reply_mutex_);
  if (fetched_.erase(key) == 0) forgotten_.insert(key);
}

std::vector<std::byte> DataController::fetch_wait(std::uint64_t key) {
  wait_until([&] { return fetched_.count(key) != 0; });
  std::lock_guard lock(reply_mutex_);
  auto node = fetched_.extract(key);
  return std::move(node.mapped());
}

void DataController::sync() {
  flush();
  const std::uint64_t token = next_token_++;
  Writer w;
  w(token, next_key_);
  send_all(DataMessage::kSync, w);
  wait_until([&] {
    auto it = sync_replies_.find(token);
    return it != sync_replies_.end() && it->second >= size_;
  });
  std::lock_guard lock(reply_mutex_);
  sync_replies_.erase(token);
}

detail::DataPlaneStats DataController::stats() const { return stats_; }

std::vector<std::byte> DataController::plan_checkpoint(std::uint64_t sequence) {
  sync();
  std::vector<std::vector<CheckpointPart>> plan(static_cast<std::size_t>(size_));
  std::vector<CheckpointDataSet> table;
  for (std::uint32_t id = 0; id < datasets_.size(); ++id) {
    const DataSetInfo& d = datasets_[id];
    if (!d.checkpointed) continue;
    CheckpointDataSet entry{d.name, d.type->id, {}};
    for (std::uint32_t p = 0; p < d.homes.size(); ++p) {
      const std::uint32_t slot = d.first_slot + p;
      entry.versions.push_back(versions_[slot]);
      if (versions_[slot] == 0) continue;  // never written: T{} again on restart
      plan[static_cast<std::size_t>(pick_source(slot))].push_back(
          CheckpointPart{id, p, checkpoint_object_name(d.name, p)});
    }
    table.push_back(std::move(entry));
  }
  for (int r = 0; r < size_; ++r) {
    Writer w;
    w(sequence, plan[static_cast<std::size_t>(r)]);
    send_to(r, DataMessage::kCheckpointPlan, w);
  }
  return to_bytes(table);
}

CheckpointTemplate DataController::template_record(const ControllerTemplate& t) const {
  CheckpointTemplate out;
  out.name = t.name;
  out.ranks = size_;
  for (const TemplateTask& task : t.tasks) {
    CheckpointTemplateTask r;
    const FunctionInfo* f = detail::find_function(task.function);
    r.function = f ? std::string(f->name) : fmt::format("{:#x}", task.function.value);
    for (const auto& a : task.accesses) {
      r.datasets.push_back(a.dataset < datasets_.size() ? datasets_[a.dataset].name : std::to_string(a.dataset));
      r.parts.push_back(a.part);
      r.modes.push_back(static_cast<std::uint8_t>(a.mode));
    }
    r.args = task.args;
    r.rank = task.rank;
    out.tasks.push_back(std::move(r));
  }
  return out;
}

std::vector<std::byte> DataController::checkpoint_templates() const {
  if (templates_.empty()) return {};
  std::vector<CheckpointTemplate> all;
  for (const auto& t : templates_) all.push_back(template_record(*t));
  return to_bytes(all);
}

namespace {
// A checkpoint's list of named records (data sets, templates), by name. Throws
// brisk::Error naming the file and `what` when the bytes do not decode.
template <class Record>
std::unordered_map<std::string, Record> records_by_name(const std::string& file, std::span<const std::byte> bytes,
                                                        const char* what) {
  std::vector<Record> all;
  try {
    all = from_bytes<std::vector<Record>>(bytes);
  } catch (const SerializationError& e) {
    throw Error(fmt::format("checkpoint {}: its {} do not decode: {}", file, what, e.what()));
  }
  std::unordered_map<std::string, Record> out;
  for (auto& r : all) {
    std::string name = r.name;
    out[name] = std::move(r);
  }
  return out;
}
}  // namespace

void DataController::restore_templates(const std::string& file, std::span<const std::byte> bytes) {
  restored_templates_ = records_by_name<CheckpointTemplate>(file, bytes, "templates");
  templates_file_ = file;
}

void DataController::restore_from(const std::string& file, std::span<const std::byte> table) {
  restorable_ = records_by_name<CheckpointDataSet>(file, table, "data sets");
  restored_file_ = file;
}

// ---------------------------------------------------------------------------
// Templates.

void DataController::derive(ControllerTemplate& t, Use& u) {
  std::vector<Copy> old = std::move(u.copies);
  u.copies.clear();
  u.pre.clear();
  u.post.clear();
  u.writes = 0;
  std::vector<int> holders;
  std::int64_t writer = -1;
  for (const auto& [task, mode] : u.accesses) {
    const int r = t.tasks[task].rank;
    if (reads(mode)) {
      if (writer < 0) {
        if (!contains(u.pre, r)) u.pre.push_back(r);
      } else if (!contains(holders, r)) {
        Copy c{0, t.tasks[static_cast<std::size_t>(writer)].rank, r, static_cast<std::uint32_t>(writer), task};
        auto same = std::find(old.begin(), old.end(), c);
        c.id = same != old.end() ? same->id : t.next_copy++;
        u.copies.push_back(c);
        holders.push_back(r);
      }
    }
    if (writes(mode)) {
      writer = task;
      holders.assign(1, r);
      ++u.writes;
    }
  }
  if (writer >= 0) u.post = std::move(holders);
  u.self_ok = writer < 0 || std::all_of(u.pre.begin(), u.pre.end(), [&](int r) { return contains(u.post, r); });
}

DataCommand DataController::compute_command(const ControllerTemplate& t, std::uint32_t task) const {
  const TemplateTask& tt = t.tasks[task];
  DataCommand c;
  c.kind = DataCommand::kCompute;
  c.id = compute_id(task);
  c.position = compute_position(task);
  c.function = tt.function;
  c.accesses = tt.accesses;
  c.args = tt.args;
  c.flags = tt.runs_inline ? DataCommand::kRunsInline : 0;
  c.task = task;
  return c;
}

DataCommand DataController::copy_command(const Use& u, const Copy& copy, bool sending) const {
  DataCommand c;
  c.kind = sending ? DataCommand::kSend : DataCommand::kRecv;
  c.id = copy_command_id(copy.id);
  c.position = sending ? send_position(copy.writer) : recv_position(copy.reader);
  c.accesses = {detail::DataAccess{u.access.dataset, u.access.part, DataMode::kRead}};
  c.peer = sending ? copy.to : copy.from;
  c.key = copy.id;
  return c;
}

std::uint32_t DataController::install(const std::string& name, std::vector<detail::DataTaskSpec> specs) {
  if (auto kept = carried_.find(name); kept != carried_.end()) {
    CarriedTemplate c = std::move(kept->second);
    carried_.erase(kept);
    if (auto ids = same_tasks(c, specs)) return adopt(name, std::move(c), std::move(specs), *ids);
  }
  detail::Stopwatch watch(stats_.controller_install_ns);
  auto t = std::make_unique<ControllerTemplate>();
  t->name = name;
  t->tasks.reserve(specs.size());
  t->uses_of_task.resize(specs.size());
  for (std::size_t j = 0; j < specs.size(); ++j) {
    auto& s = specs[j];
    for (const auto& a : s.accesses) (void)slot_of(a);
    if (s.accesses.empty() && s.rank < 0) {
      throw Error(fmt::format("brisk::record '{}': task {} names no partition and no rank", name, j));
    }
    const int rank = place(s);
    check_rank(name, j, rank);
    const auto task = static_cast<std::uint32_t>(j);
    for (const auto& a : s.accesses) {
      const std::uint32_t slot = slot_of(a);
      auto [it, fresh] = t->use_of_slot.emplace(slot, static_cast<std::uint32_t>(t->uses.size()));
      if (fresh) {
        Use u;
        u.slot = slot;
        u.access = a;
        t->uses.push_back(std::move(u));
      }
      Use& u = t->uses[it->second];
      if (!u.accesses.empty() && u.accesses.back().first == task) {
        u.accesses.back().second = static_cast<DataMode>(static_cast<std::uint8_t>(u.accesses.back().second) |
                                                         static_cast<std::uint8_t>(a.mode));
      } else {
        u.accesses.emplace_back(task, a.mode);
        t->uses_of_task[j].push_back(it->second);
      }
    }
    t->tasks.push_back(TemplateTask{s.function, std::move(s.accesses), std::move(s.args), rank, s.runs_inline});
  }
  for (Use& u : t->uses) {
    derive(*t, u);
    if (!u.self_ok) ++t->bad_uses;
  }
  std::vector<std::vector<DataCommand>> per_rank(static_cast<std::size_t>(size_));
  for (std::uint32_t j = 0; j < t->tasks.size(); ++j) {
    per_rank[static_cast<std::size_t>(t->tasks[j].rank)].push_back(compute_command(*t, j));
  }
  for (const Use& u : t->uses) {
    for (const Copy& c : u.copies) {
      per_rank[static_cast<std::size_t>(c.from)].push_back(copy_command(u, c, true));
      per_rank[static_cast<std::size_t>(c.to)].push_back(copy_command(u, c, false));
    }
  }
  const auto id = static_cast<std::uint32_t>(templates_.size());
  flush();
  for (int r = 0; r < size_; ++r) {
    Writer w;
    w(id, name, per_rank[static_cast<std::size_t>(r)]);
    send_to(r, DataMessage::kInstall, w);
  }
  check_restored(*t);
  templates_.push_back(std::move(t));
  return id;
}

void DataController::check_rank(const std::string& name, std::size_t task, int rank) const {
  if (rank < 0 || rank >= size_) {
    throw Error(fmt::format("brisk::record '{}': task {} is placed on rank {}, outside [0, {})", name, task, rank, size_));
  }
}

void DataController::check_restored(const ControllerTemplate& t) {
  if (auto it = restored_templates_.find(t.name); it != restored_templates_.end()) {
    check_restored_template(it->second, template_record(t));
    restored_templates_.erase(it);
  }
}

void DataController::carry_templates(const DataController& before, const std::vector<int>& rank_map) {
  const auto map_rank = [&rank_map](int r) {
    return r >= 0 && r < static_cast<int>(rank_map.size()) ? rank_map[static_cast<std::size_t>(r)] : -1;
  };
  const auto mapped = [&](ControllerTemplate t) {
    for (TemplateTask& task : t.tasks) task.rank = map_rank(task.rank);
    for (Use& u : t.uses) {
      for (Copy& c : u.copies) {
        c.from = map_rank(c.from);
        c.to = map_rank(c.to);
      }
      for (int& r : u.pre) r = map_rank(r);
      for (int& r : u.post) r = map_rank(r);
    }
    t.patches.clear();  // they depend on the holder table, which starts again
    return t;
  };
  for (const auto& [name, c] : before.carried_) carried_[name] = CarriedTemplate{mapped(c.t), c.datasets};
  auto names = std::make_shared<std::vector<std::string>>();
  for (const DataSetInfo& d : before.datasets_) names->push_back(d.name);
  std::unordered_map<std::string, int> count;
  for (const auto& t : before.templates_) ++count[t->name];
  for (std::uint32_t id = 0; id < before.templates_.size(); ++id) {
    const ControllerTemplate& t = *before.templates_[id];
    // An edit not sent yet (it travels with the next flush) is in this template but
    // not in the ranks' parts: such a template is not kept, and is installed again.
    if (count[t.name] == 1 && !before.unsent_edits_.count(id)) {
      carried_[t.name] = CarriedTemplate{mapped(t), names};
    } else {
      carried_.erase(t.name);
    }
  }
}

std::optional<std::map<std::uint32_t, std::uint32_t>> DataController::same_tasks(
    const CarriedTemplate& c, const std::vector<detail::DataTaskSpec>& specs) const {
  if (c.t.tasks.size() != specs.size()) return std::nullopt;
  std::map<std::uint32_t, std::uint32_t> ids, back;  // then -> now, and now -> then
  for (std::size_t j = 0; j < specs.size(); ++j) {
    const TemplateTask& then = c.t.tasks[j];
    const detail::DataTaskSpec& now = specs[j];
    if (then.function != now.function || then.args != now.args || then.runs_inline != now.runs_inline ||
        then.accesses.size() != now.accesses.size()) {
      return std::nullopt;
    }
    for (std::size_t i = 0; i < now.accesses.size(); ++i) {
      const detail::DataAccess& a = then.accesses[i];
      const detail::DataAccess& b = now.accesses[i];
      if (a.part != b.part || a.mode != b.mode || a.dataset >= c.datasets->size() || b.dataset >= datasets_.size() ||
          (*c.datasets)[a.dataset] != datasets_[b.dataset].name) {
        return std::nullopt;
      }
      // One data set for one (two sets of one name must not be confused).
      if (ids.emplace(a.dataset, b.dataset).first->second != b.dataset ||
          back.emplace(b.dataset, a.dataset).first->second != a.dataset) {
        return std::nullopt;
      }
    }
  }
  return ids;
}

std::uint32_t DataController::adopt(const std::string& name, CarriedTemplate c, std::vector<detail::DataTaskSpec> specs,
                                    const std::map<std::uint32_t, std::uint32_t>& ids) {
  const auto start = std::chrono::steady_clock::now();
  auto t = std::make_unique<ControllerTemplate>(std::move(c.t));
  std::vector<std::pair<std::uint32_t, int>> moves;
  {
    detail::Stopwatch watch(stats_.controller_install_ns);
    for (std::size_t j = 0; j < specs.size(); ++j) {
      for (const auto& a : specs[j].accesses) (void)slot_of(a);  // this epoch's partitions exist
      if (specs[j].accesses.empty() && specs[j].rank < 0) {
        throw Error(fmt::format("brisk::record '{}': task {} names no partition and no rank", name, j));
      }
      check_rank(name, j, place(specs[j]));
    }
    // Each partition's data set as this epoch numbers it (`ids`, from same_tasks).
    bool renumbered = false;
    for (Use& u : t->uses) {
      u.access.dataset = ids.at(u.access.dataset);
      const std::uint32_t slot = slot_of(u.access);
      renumbered = renumbered || slot != u.slot;
      u.slot = slot;
    }
    if (renumbered) {  // the driver created its data sets in another order
      t->use_of_slot.clear();
      for (std::uint32_t ui = 0; ui < t->uses.size(); ++ui) t->use_of_slot.emplace(t->uses[ui].slot, ui);
    }
    for (std::uint32_t j = 0; j < t->tasks.size(); ++j) {
      const int rank = place(specs[j]);
      if (t->tasks[j].rank != rank) moves.emplace_back(j, rank);
      t->tasks[j].accesses = std::move(specs[j].accesses);
    }
  }
  const auto id = static_cast<std::uint32_t>(templates_.size());
  flush();
  Writer w;
  w(id, name, std::vector<std::pair<std::uint32_t, std::uint32_t>>(ids.begin(), ids.end()));
  send_all(DataMessage::kAdopt, w);
  templates_.push_back(std::move(t));
  // Every rank holds its part now; the edit moves the tasks of lost ranks and those
  // whose partitions live elsewhere now. Sent at once: a loss before the next flush
  // would otherwise leave the ranks' parts without it.
  move_tasks(id, moves);
  flush();
  ++stats_.templates_adopted;
  stats_.adopted_tasks_moved += moves.size();
  check_restored(*templates_.back());
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "brisk: template '%s' taken over from before the rollback by an edit: %zu of %zu tasks moved (%.0f us)\n",
               name.c_str(), moves.size(), templates_.back()->tasks.size(), us);
  return id;
}

void DataController::check_restored_template(const CheckpointTemplate& then, const CheckpointTemplate& now) const {
  if (then.ranks != now.ranks) return;  // blocks that depend on the rank count differ rightly
  std::string why;
  if (then.tasks.size() != now.tasks.size()) {
    why = fmt::format("it had {} tasks there and has {} here", then.tasks.size(), now.tasks.size());
  } else {
    for (std::size_t j = 0; j < now.tasks.size() && why.empty(); ++j) {
      const CheckpointTemplateTask& a = then.tasks[j];
      const CheckpointTemplateTask& b = now.tasks[j];
      if (a.function != b.function) {
        why = fmt::format("task {} calls '{}' there and '{}' here", j, a.function, b.function);
      } else if (a.datasets != b.datasets || a.parts != b.parts || a.modes != b.modes) {
        why = fmt::format("task {} ('{}') declares other partitions", j, b.function);
      } else if (a.args != b.args) {
        why = fmt::format("task {} ('{}') has other arguments", j, b.function);
      } else if (a.rank != b.rank) {
        why = fmt::format("task {} ('{}') runs on rank {} there and on rank {} here", j, b.function, a.rank, b.rank);
      }
    }
  }
  if (why.empty()) return;
  std::fprintf(stderr,
               "brisk: warning: template '%s' differs from the one in checkpoint %s: %s; the restart does not run "
               "the same blocks as the run that wrote it (other code or other options)\n",
               now.name.c_str(), templates_file_.c_str(), why.c_str());
}

void DataController::apply_patch(ControllerTemplate& t, std::uint32_t tmpl) {
  (void)tmpl;
  const std::uint32_t prev = last_template_;
  if (prev != kNone) {
    auto it = t.patches.find(prev);
    if (it != t.patches.end() && it->second.epoch == epoch_) {
      for (const PatchCopy& c : it->second.copies) {
        issue_copy(c.slot, c.from, c.to);
        add_holder(c.slot, c.to);
      }
      for (const auto& [use, r] : it->second.checks) {
        const std::uint32_t slot = t.uses[use].slot;
        if (!holds(slot, r)) {
          issue_copy(slot, pick_source(slot), r);
          add_holder(slot, r);
        }
      }
      ++stats_.patches_reused;
      return;
    }
  }
  CachedPatch patch{epoch_, {}, {}};
  const ControllerTemplate* p = prev != kNone ? templates_[prev].get() : nullptr;
  for (std::uint32_t ui = 0; ui < t.uses.size(); ++ui) {
    const Use& u = t.uses[ui];
    const Use* pu = nullptr;
    if (p) {
      auto it = p->use_of_slot.find(u.slot);
      if (it != p->use_of_slot.end()) pu = &p->uses[it->second];
    }
    for (int r : u.pre) {
      if (pu && pu->writes > 0) {
        // The predecessor wrote it: who holds it is fixed by its postcondition.
        if (!holds(u.slot, r)) {
          const int from = pick_source(u.slot);
          patch.copies.push_back(PatchCopy{u.slot, from, r});
          issue_copy(u.slot, from, r);
          add_holder(u.slot, r);
        }
      } else if (pu && contains(pu->pre, r)) {
        // The predecessor read it on r: current there.
      } else {
        patch.checks.emplace_back(ui, r);
        if (!holds(u.slot, r)) {
          issue_copy(u.slot, pick_source(u.slot), r);
          add_holder(u.slot, r);
        }
      }
    }
  }
  if (prev != kNone) t.patches[prev] = std::move(patch);
  ++stats_.patches_computed;
}

void DataController::instantiate(std::uint32_t tmpl, std::vector<std::byte> params) {
  if (tmpl >= templates_.size()) throw Error(fmt::format("brisk: template {} does not exist", tmpl));
  detail::Stopwatch watch(stats_.controller_instantiate_ns);
  ControllerTemplate& t = *templates_[tmpl];
  if (last_template_ == tmpl && t.bad_uses == 0) {
    ++stats_.validations_skipped;
  } else {
    apply_patch(t, tmpl);
  }
  flush();
  Writer w;
  w(tmpl, next_task_, next_key_, params);
  send_all(DataMessage::kInstantiate, w);
  next_task_ += t.tasks.size();
  next_key_ += t.next_copy;
  for (const Use& u : t.uses) {
    if (u.writes > 0) {
      versions_[u.slot] += u.writes;
      std::fill_n(holders_.begin() + static_cast<std::ptrdiff_t>(u.slot * words_), words_, 0);
      for (int r : u.post) add_holder(u.slot, r);
    } else {
      for (int r : u.pre) add_holder(u.slot, r);
    }
  }
  last_template_ = tmpl;
  ++stats_.instantiations;
}

void DataController::move_tasks(std::uint32_t tmpl, std::span<const std::pair<std::uint32_t, int>> moves) {
  if (tmpl >= templates_.size()) throw Error(fmt::format("brisk: template {} does not exist", tmpl));
  detail::Stopwatch watch(stats_.controller_edit_ns);
  ControllerTemplate& t = *templates_[tmpl];
  std::map<std::uint32_t, int> target;  // the last move of a task wins
  for (const auto& [task, rank] : moves) {
    if (task >= t.tasks.size() || rank < 0 || rank >= size_) {
      throw Error(fmt::format("brisk: template '{}': cannot move task {} to rank {}", t.name, task, rank));
    }
    target[task] = rank;
  }
  struct RankEdit {
    std::vector<std::uint64_t> removed;
    std::vector<DataCommand> added;
  };
  std::map<int, RankEdit> edits;
  std::vector<std::uint32_t> affected;
  for (const auto& [task, rank] : target) {
    TemplateTask& tt = t.tasks[task];
    if (tt.rank == rank) continue;
    if (tt.rank >= 0) edits[tt.rank].removed.push_back(compute_id(task));  // -1: a rank lost (adopt)
    tt.rank = rank;
    edits[rank].added.push_back(compute_command(t, task));
    for (std::uint32_t u : t.uses_of_task[task]) affected.push_back(u);
  }
  std::sort(affected.begin(), affected.end());
  affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
  for (std::uint32_t ui : affected) {
    Use& u = t.uses[ui];
    const std::vector<Copy> old = u.copies;
    if (!u.self_ok) --t.bad_uses;
    derive(t, u);
    if (!u.self_ok) ++t.bad_uses;
    auto has = [](const std::vector<Copy>& v, std::uint64_t id) {
      return std::any_of(v.begin(), v.end(), [id](const Copy& c) { return c.id == id; });
    };
    for (const Copy& c : old) {
      if (has(u.copies, c.id)) continue;
      if (c.from >= 0) edits[c.from].removed.push_back(copy_command_id(c.id));
      if (c.to >= 0) edits[c.to].removed.push_back(copy_command_id(c.id));
    }
    for (const Copy& c : u.copies) {
      if (has(old, c.id)) continue;
      edits[c.from].added.push_back(copy_command(u, c, true));
      edits[c.to].added.push_back(copy_command(u, c, false));
    }
  }
  if (edits.empty()) return;  // every task is where it was asked to be
  // The edits travel with the next flush (an instantiation, a fetch or a sync), ahead
  // of that rank's commands; a template is only read when it is instantiated.
  for (auto& [rank, e] : edits) {
    Writer w;
    w(tmpl, e.removed, e.added);
    pending_[static_cast<std::size_t>(rank)].edits.push_back(message(DataMessage::kEdit, w));
    ++pending_count_;
  }
  unsent_edits_.insert(tmpl);
  ++epoch_;
  if (last_template_ == tmpl) last_template_ = kNone;
  ++stats_.edits;
}

int DataController::task_rank(std::uint32_t tmpl, std::uint32_t task) const {
  if (tmpl >= templates_.size() || task >= templates_[tmpl]->tasks.size()) return -1;
  return templates_[tmpl]->tasks[task].rank;
}

}  // namespace brisk
