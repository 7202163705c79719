#include "brisk/runtime/checkpoint_service.hpp"
#include "brisk/scheduler/data_protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <utility>
#include <signal.h>
#include <unistd.h>
#include <cstdio>

#include "brisk/checkpoint/checkpoint.hpp"
#include "brisk/checkpoint/format.hpp"
#include "brisk/checkpoint/reader.hpp"
#include "brisk/core/checkpoint.hpp"
#include "brisk/core/error.hpp"
#include "brisk/runtime/wire.hpp"

namespace brisk {

namespace {
// Set by SIGUSR1, cleared by a checkpoint.
volatile sig_atomic_t g_signalled = 0;
extern "C" void on_checkpoint_signal(int) { g_signalled = 1; }

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

RuntimeCheckpoints::RuntimeCheckpoints(int rank, std::string dir, int keep, std::chrono::seconds every, Peers peers)
    : rank_(rank), dir_(std::move(dir)), keep_(keep), peers_(std::move(peers)), every_(every), last_ns_(now_ns()) {
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  // Every rank catches it (a launcher may signal all of them); rank 0's flag counts.
  struct sigaction sa {};
  sa.sa_handler = on_checkpoint_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

bool RuntimeCheckpoints::requested() const noexcept {
  if (g_signalled) return true;
  return every_.count() > 0 && now_ns() - last_ns_.load(std::memory_order_relaxed) >=
                                   std::chrono::duration_cast<std::chrono::nanoseconds>(every_).count();
}

RuntimeCheckpoints::~RuntimeCheckpoints() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

Status RuntimeCheckpoints::restore(const std::string& what) {
  StatusOr<CheckpointReader> reader = not_found("");
  if (what == "latest") {
    auto latest = CheckpointReader::open_latest(dir_);
    if (!latest.ok()) {
      return not_found(fmt::format("--brisk-restore=latest: {}", latest.status().message()));
    }
    for (const auto& skipped : latest->skipped) {
      std::fprintf(stderr, "brisk: skipped checkpoint %s: %s\n", skipped.path.string().c_str(),
                   skipped.reason.message().c_str());
    }
    reader = std::move(latest->reader);
  } else {
    reader = CheckpointReader::open(what);
    if (reader.ok()) {
      if (Status s = reader->verify(); !s.ok()) return s;
    }
  }
  if (!reader.ok()) return reader.status();
  for (const auto& entry : reader->entries()) {
    if (entry.section != CheckpointSection::kDriver) continue;
    auto bytes = reader->read(CheckpointSection::kDriver, entry.name);
    if (!bytes.ok()) return bytes.status();
    restored_[entry.name] = std::move(*bytes);
  }
  // The runtime's own values go to their hooks, not to the driver.
  for (const auto& [value, hook] : {std::pair{kTemplatesValue, &data_.restored_templates},
                                    std::pair{kDataSetsValue, &data_.restored}}) {
    auto it = restored_.find(value);
    if (it == restored_.end()) continue;
    if (*hook) {
      try {
        (*hook)(reader->path().string(), it->second);
      } catch (const std::exception& e) {
        return invalid_argument(e.what());
      }
    }
    restored_.erase(it);
  }
  restored_sequence_ = reader->info().sequence;
  next_sequence_ = std::max(next_sequence_, restored_sequence_ + 1);
  last_path_ = reader->path().string();
  std::fprintf(stderr, "brisk: restored from %s (checkpoint %llu, %zu driver values)\n", reader->path().string().c_str(),
               static_cast<unsigned long long>(restored_sequence_), restored_.size());
  return {};
}

void RuntimeCheckpoints::save(const std::string& name, std::vector<std::byte> bytes) {
  std::lock_guard lock(mutex_);
  pending_[name] = std::move(bytes);
}

std::optional<std::vector<std::byte>> RuntimeCheckpoints::restored(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = restored_.find(name);
  if (it == restored_.end()) return std::nullopt;
  return it->second;
}

StatusOr<std::string> RuntimeCheckpoints::roll_back() {
  {
    std::lock_guard lock(mutex_);
    pending_.clear();
    restored_.clear();
    restored_sequence_ = 0;
  }
  if (last_path_.empty()) return std::string();
  const std::string path = last_path_;
  if (Status s = restore(path); !s.ok()) return s;
  return path;
}

std::uint64_t RuntimeCheckpoints::write() {
  std::map<std::string, std::vector<std::byte>> values;
  std::uint64_t sequence = 0;
  {
    std::lock_guard lock(mutex_);
    if (next_sequence_ == 0) {
      // After the checkpoints already in the directory (a run that did not restore).
      next_sequence_ = 1;
      if (auto files = list_checkpoints(dir_); files.ok()) {
        for (const auto& f : *files) next_sequence_ = std::max(next_sequence_, f.sequence + 1);
      }
    }
    sequence = next_sequence_++;
    values = pending_;
  }
  // The request a signal made stands until a checkpoint is written.
  const bool signalled = g_signalled != 0;
  if (data_.templates) {
    if (auto t = data_.templates(); !t.empty()) values[kTemplatesValue] = std::move(t);
  }

  // The data objects: every command done, and each rank told what it writes.
  if (data_.prepare) {
    if (auto table = data_.prepare(sequence); !table.empty()) values[kDataSetsValue] = std::move(table);
  }
  Status committed;
  if (peers_.sharded) {
    committed = write_sharded(sequence, std::move(values));
  } else {
    if (peers_.announce) peers_.announce(sequence, std::string());
    committed = commit(comm_, sequence, std::move(values), data_.objects ? data_.objects(sequence) : ObjectList{});
  }
  if (!committed.ok()) {
    throw Error(fmt::format("brisk::checkpoint::now: checkpoint {} failed: {}", sequence, committed.message()));
  }
  if (signalled) g_signalled = 0;
  last_ns_.store(now_ns(), std::memory_order_relaxed);
  last_path_ = (std::filesystem::path(dir_) / checkpoint_file_name(sequence)).string();
  if (signalled && exit_after_signal_) throw checkpoint::Exit(sequence);
  return sequence;
}

// A sharded part's report: (sequence, tag, status code, message, shard file,
// [CheckpointShardEntry], [settled dead rank]).
Status RuntimeCheckpoints::participate(std::uint64_t sequence, const std::string& tag) {
  if (tag.empty()) {
    ObjectList objects = data_.objects ? data_.objects(sequence) : ObjectList{};
    return commit(comm_, sequence, {}, std::move(objects));
  }
  // Rank 0 waits for this report: it goes whatever happens here.
  Status status;
  std::string shard;
  std::vector<CheckpointShardEntry> list;
  try {
    if (!std::all_of(tag.begin(), tag.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; })) {
      throw Error(fmt::format("checkpoint {}: the attempt's tag '{}' is not letters and digits", sequence, tag));
    }
    ObjectList objects = data_.objects ? data_.objects(sequence) : ObjectList{};
    if (peers_.held) {
      ObjectList held = peers_.held();
      objects.insert(objects.end(), std::make_move_iterator(held.begin()), std::make_move_iterator(held.end()));
    }
    if (!objects.empty()) {
      shard = checkpoint_shard_name(sequence, tag, rank_);
      auto written = write_checkpoint_shard(dir_, shard, objects);
      if (written.ok()) {
        list = std::move(written).value();
      } else {
        status = written.status();
      }
    }
  } catch (const std::exception& e) {
    status = internal_error(fmt::format("rank {}'s part of checkpoint {}: {}", rank_, sequence, e.what()));
    shard.clear();
    list.clear();
  }
  if (before_report_) before_report_();
  const std::vector<int> settled = peers_.settled ? peers_.settled() : std::vector<int>{};
  const std::vector<std::byte> report =
      wire::encode_checkpoint_report({sequence, tag, status, std::move(shard), std::move(list), settled});
  if (peers_.report) peers_.report(report);
  if (after_report_) after_report_();
  return status;
}

void RuntimeCheckpoints::on_report(int from, std::span<const std::byte> bytes) {
  Report report;
  std::uint64_t sequence = 0;
  std::string tag;
  try {
    wire::CheckpointReport m = wire::decode_checkpoint_report(bytes, from);
    sequence = m.sequence;
    tag = std::move(m.tag);
    report = Report{std::move(m.status), std::move(m.shard), std::move(m.objects), std::move(m.settled)};
  } catch (const std::exception& e) {
    // Without a readable sequence the report cannot be matched: it counts as this
    // rank's answer to the attempt in progress, unless the rank answered already.
    std::fprintf(stderr, "brisk: rank 0: a malformed checkpoint report from rank %d: %s\n", from, e.what());
    std::lock_guard lock(report_mutex_);
    if (report_sequence_ == 0 || reports_.count(from)) return;
    reports_[from] =
        Report{internal_error(fmt::format("rank {}'s checkpoint report is malformed: {}", from, e.what())), "", {}, {}};
    report_cv_.notify_all();
    return;
  }
  std::lock_guard lock(report_mutex_);
  if (sequence == 0 || sequence != report_sequence_ || tag != report_tag_) return;  // an abandoned attempt's
  reports_[from] = std::move(report);
  report_cv_.notify_all();
}

void RuntimeCheckpoints::on_loss(int) {
  std::lock_guard lock(report_mutex_);
  report_cv_.notify_all();
}

Status RuntimeCheckpoints::write_sharded(std::uint64_t sequence, std::map<std::string, std::vector<std::byte>> values) {
  // The attempt's tag: new every time (a rank's shard of an abandoned attempt may
  // still be written after rank 0 gave up on it).
  static std::atomic<std::uint64_t> attempts{0};
  const std::string tag = fmt::format("{:x}{:x}", static_cast<std::uint64_t>(::getpid()) & 0xffffff,
                                      (static_cast<std::uint64_t>(now_ns()) << 8) + (attempts++ & 0xff));
  std::vector<int> expected;
  {
    std::lock_guard lock(report_mutex_);
    report_sequence_ = sequence;
    report_tag_ = tag;
    reports_.clear();
    // Every rank not known dead (announce() asks exactly those). One that dies later
    // is seen below by its flag (on_loss() wakes the wait).
    for (int r = 1; r < peers_.size; ++r) {
      if (!peers_.lost || !peers_.lost(r)) expected.push_back(r);
    }
  }
  // On any way out but a commit, the attempt's shards go (a slower rank may still
  // write one later: prune drops it at the next commit).
  struct Done {
    RuntimeCheckpoints* self;
    std::uint64_t sequence;
    const std::string& tag;
    bool committed = false;
    ~Done() {
      {
        std::lock_guard lock(self->report_mutex_);
        self->report_sequence_ = 0;
        self->reports_.clear();
      }
      if (committed) return;
      for (int r = 0; r < self->peers_.size; ++r) {
        std::error_code ec;
        std::filesystem::remove(std::filesystem::path(self->dir_) / checkpoint_shard_name(sequence, tag, r), ec);
      }
    }
  } done{this, sequence, tag};
  if (peers_.announce) peers_.announce(sequence, tag);
  // Rank 0's own objects go into the checkpoint file itself.
  ObjectList own = data_.objects ? data_.objects(sequence) : ObjectList{};

  std::map<int, Report> reports;
  const auto deadline = std::chrono::steady_clock::now() + peers_.part_timeout;
  {
    std::unique_lock lock(report_mutex_);
    for (;;) {
      std::vector<int> missing;
      for (int r : expected) {
        if (!reports_.count(r)) missing.push_back(r);
      }
      if (missing.empty()) break;
      if (peers_.part_timeout.count() > 0 && std::chrono::steady_clock::now() >= deadline) {
        // A live rank whose main thread does not come back from its write (a hung
        // file system, say): give this checkpoint up rather than wait for ever.
        std::string ranks;
        for (int r : missing) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", r);
        rank_blocked_.store(true, std::memory_order_release);
        return Status(StatusCode::kUnavailable,
                      fmt::format("rank{} {} did not report {} part within {:g} s (--brisk-checkpoint-timeout); "
                                  "the attempt's shards are deleted{}",
                                  missing.size() == 1 ? "" : "s", ranks, missing.size() == 1 ? "its" : "their",
                                  static_cast<double>(peers_.part_timeout.count()) / 1000,
                                  last_path_.empty() ? "" : fmt::format(", and {} stays the last checkpoint", last_path_)));
      }
      int dead = -1;
      for (int r : missing) {
        if (peers_.lost && peers_.lost(r)) dead = r;
      }
      if (dead >= 0) {
        lock.unlock();
        try {
          if (data_.interrupted) data_.interrupted(dead);  // throws DataRollback when data objects are in use
        } catch (...) {
          std::fprintf(stderr,
                       "brisk: rank 0: checkpoint %llu is abandoned (its shards deleted): rank %d died before it "
                       "wrote its part\n",
                       static_cast<unsigned long long>(sequence), dead);
          throw;
        }
        lock.lock();
        expected.erase(std::remove(expected.begin(), expected.end(), dead), expected.end());
        continue;
      }
      report_cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
    reports = reports_;
  }

  Status status;
  CheckpointWriter::Options options;
  options.keep = static_cast<std::size_t>(keep_);
  options.ranks = peers_.size;
  auto writer = CheckpointWriter::begin(MPI_COMM_SELF, dir_, sequence, options);
  status = writer.status();
  // The live objects' copies that the ranks held for their owners (Peers::held): a
  // task that ran twice may have left a copy on two ranks for a while; one is linked.
  std::vector<std::pair<std::string, int>> held;
  std::map<int, std::vector<std::string>> held_names;
  std::set<std::string> held_seen;
  for (const auto& [r, report] : reports) {
    if (!status.ok()) break;
    if (!report.status.ok()) {
      status = Status(report.status.code(), fmt::format("rank {}: {}", r, report.status.message()));
      break;
    }
    for (const CheckpointShardEntry& e : report.objects) {
      if (e.name.starts_with(kCheckpointHeldPrefix)) {
        if (!held_seen.insert(e.name).second) continue;
        held.emplace_back(e.name, r);
        held_names[r].push_back(e.name);
      }
      status = writer->add_shard_object(e, report.shard, r);
      if (!status.ok()) break;
    }
  }
  for (auto& [name, bytes] : values) {
    if (status.ok()) status = writer->add_driver_bytes(name, std::move(bytes));
  }
  for (auto& [name, bytes] : own) {
    if (status.ok()) status = writer->add_object(name, std::move(bytes));
  }
  if (status.ok()) carry_held(*writer, reports, held, held_names);
  if (status.ok()) status = writer->commit();
  done.committed = status.ok();
  if (done.committed) {
    held_names_ = std::move(held_names);
    held_path_ = (std::filesystem::path(dir_) / checkpoint_file_name(sequence)).string();
    if (peers_.saved) peers_.saved(sequence, held_path_, held);
  }
  return status;
}

void RuntimeCheckpoints::carry_held(CheckpointWriter& writer, const std::map<int, Report>& reports,
                                    std::vector<std::pair<std::string, int>>& held,
                                    std::map<int, std::vector<std::string>>& carried_names) {
  // Whether every live rank (this one too) has read back what it needed of rank r's.
  const std::vector<int> mine = peers_.settled ? peers_.settled() : std::vector<int>{};
  auto settled = [&](int r) {
    if (std::find(mine.begin(), mine.end(), r) == mine.end()) return false;
    return std::all_of(reports.begin(), reports.end(), [r](const auto& report) {
      return std::find(report.second.settled.begin(), report.second.settled.end(), r) != report.second.settled.end();
    });
  };
  // A copy made again on a live rank (lineage replay) is in this checkpoint already.
  std::set<std::string> present;
  for (const auto& [name, r] : held) present.insert(name);
  std::optional<CheckpointReader> last;
  for (const auto& [r, names] : held_names_) {
    if (reports.count(r) || !peers_.lost || !peers_.lost(r) || settled(r)) continue;
    if (!last) {
      auto reader = CheckpointReader::open(held_path_);
      if (!reader.ok()) {
        std::fprintf(stderr, "brisk: rank 0: the copies dead ranks held stay only in %s: %s\n", held_path_.c_str(),
                     reader.status().message().c_str());
        return;
      }
      last.emplace(std::move(reader).value());
    }
    std::size_t carried = 0;
    for (const std::string& name : names) {
      if (present.count(name)) {
        ++carried;
        continue;
      }
      auto bytes = last->read(CheckpointSection::kObjects, name);
      if (!bytes.ok() || !writer.add_object(name, std::move(*bytes)).ok()) continue;
      held.emplace_back(name, r);
      carried_names[r].push_back(name);
      ++carried;
    }
    if (carried != names.size()) {
      std::fprintf(stderr, "brisk: rank 0: %zu of the %zu copies rank %d held (it died) stay only in %s\n",
                   names.size() - carried, names.size(), r, held_path_.c_str());
    }
  }
}

Status RuntimeCheckpoints::commit(MPI_Comm comm, std::uint64_t sequence, std::map<std::string, std::vector<std::byte>> values,
                                  ObjectList objects) {
  CheckpointWriter::Options options;
  options.keep = static_cast<std::size_t>(keep_);
  auto writer = CheckpointWriter::begin(comm, dir_, sequence, options);
  if (!writer.ok()) return writer.status();
  for (auto& [name, bytes] : values) {
    if (Status s = writer->add_driver_bytes(name, std::move(bytes)); !s.ok()) return s;
  }
  for (auto& [name, bytes] : objects) {
    if (Status s = writer->add_object(name, std::move(bytes)); !s.ok()) return s;
  }
  return writer->commit();
}

}  // namespace brisk
