#include "brisk/runtime/checkpoint_service.hpp"
#include "brisk/scheduler/data_protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <utility>
#include <signal.h>
#include <cstdio>

#include "brisk/checkpoint/checkpoint.hpp"
#include "brisk/checkpoint/format.hpp"
#include "brisk/core/checkpoint.hpp"
#include "brisk/core/error.hpp"

namespace brisk {

namespace {
// Set by SIGUSR1, cleared by a checkpoint.
volatile sig_atomic_t g_signalled = 0;
extern "C" void on_checkpoint_signal(int) { g_signalled = 1; }

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

RuntimeCheckpoints::RuntimeCheckpoints(int rank, std::string dir, int keep, std::chrono::seconds every,
                                       std::function<void(std::uint64_t)> announce)
    : rank_(rank), dir_(std::move(dir)), keep_(keep), announce_(std::move(announce)), every_(every), last_ns_(now_ns()) {
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
  Status committed;
  bool alone = lost_rank() >= 0;
  if (!alone) {
    // The data objects: every command done, and each rank told what it writes.
    if (data_.prepare) {
      if (auto table = data_.prepare(sequence); !table.empty()) values[kDataSetsValue] = std::move(table);
    }
    // Into the collective, unless a loss was marked meanwhile (stop_writing() and
    // this take the same lock, so exactly one of them sees the other).
    {
      std::lock_guard lock(loss_mutex_);
      alone = lost_rank_ >= 0;
      writing_ = !alone;
    }
    if (!alone) {
      struct Out {
        RuntimeCheckpoints* self;
        ~Out() {
          std::lock_guard lock(self->loss_mutex_);
          self->writing_ = false;
        }
      } out{this};
      if (announce_) announce_(sequence);
      committed = commit(comm_, sequence, std::move(values), data_.objects ? data_.objects(sequence) : ObjectList{});
    } else {
      values.erase(kDataSetsValue);
    }
  }
  if (alone) {
    // The other ranks cannot take part in a collective any more: rank 0 gathers
    // every partition and writes the file alone.
    const int lost = lost_rank();
    if (!std::exchange(skip_reported_, true)) {
      std::fprintf(stderr,
                   "brisk: rank 0 writes checkpoints alone from now on (rank %d was lost, and a checkpoint written by "
                   "every rank together would wait for it): every data partition is gathered to rank 0 first\n",
                   lost);
    }
    std::vector<std::pair<std::string, std::vector<std::byte>>> objects;
    if (data_.gather) {
      if (auto table = data_.gather(objects); !table.empty()) values[kDataSetsValue] = std::move(table);
    }
    committed = commit(MPI_COMM_SELF, sequence, std::move(values), std::move(objects));
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

Status RuntimeCheckpoints::participate(std::uint64_t sequence) {
  return commit(comm_, sequence, {}, data_.objects ? data_.objects(sequence) : ObjectList{});
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
