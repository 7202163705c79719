// brisk/runtime/checkpoint_service.hpp — brisk::checkpoint for brisk::run.
//
// Rank 0's driver saves values and calls write(); the other ranks take part in the
// collective commit when told (Cluster::wait_for_end runs participate() on their
// main thread). Every rank makes its service at start, collectively (it duplicates
// MPI_COMM_WORLD for the checkpoint files' I/O).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "brisk/core/detail/context.hpp"
#include "brisk/core/status.hpp"

namespace brisk {

class RuntimeCheckpoints final : public detail::CheckpointService {
 public:
  // Collective. `announce(seq)` asks the other ranks to take part (may be empty
  // for a one-rank job).
  // Installs a SIGUSR1 handler that makes requested() true (rank 0); `every` > 0
  // makes it true that long after the last checkpoint too.
  RuntimeCheckpoints(int rank, std::string dir, int keep, std::chrono::seconds every,
                     std::function<void(std::uint64_t)> announce);
  ~RuntimeCheckpoints() override;

  // Rank 0, at start: loads `what` ("latest" or a file). Prints which checkpoint
  // and what it skipped. Errors name the file and the reason.
  Status restore(const std::string& what);

  void save(const std::string& name, std::vector<std::byte> bytes) override;
  std::uint64_t write() override;
  std::optional<std::vector<std::byte>> restored(const std::string& name) const override;
  std::uint64_t restored_sequence() const noexcept override { return restored_sequence_; }
  bool requested() const noexcept override;

  // A rank died (ucx): a checkpoint is written by every rank together (parallel HDF5
  // over MPI_COMM_WORLD, which a dead rank blocks), so from now on rank 0 gathers
  // the data partitions (DataHooks::gather) and writes alone, with a message. Any
  // thread.
  // Returns whether write() is inside a collective commit now (which the death then
  // blocks for good); either that collective started before the loss was marked, or
  // none starts after it.
  bool stop_writing(int lost_rank) noexcept {
    std::lock_guard lock(loss_mutex_);
    lost_rank_ = lost_rank;
    return writing_;
  }
  // Rank 0, for a rollback: the driver's values come back from the checkpoint this
  // run wrote or restored last (its data sets with them), or, if there is none,
  // nothing is restored and the driver starts from the beginning. Returns the file,
  // or "" for none.
  StatusOr<std::string> roll_back();

  // Other ranks: their part of checkpoint `sequence` (collective with write()).
  Status participate(std::uint64_t sequence);

  // Data objects in checkpoints (runtime/data_plane.hpp). `prepare(seq)` runs on rank
  // 0 before the others are asked and returns a value kept with the checkpoint;
  // `objects(seq)` gives each rank's objects to write; `restored(file, value)` gets
  // that value back at a restart.
  // `gather(objects)` (rank 0, after a loss) returns the same value as prepare and
  // fetches every partition into `objects`, for a checkpoint rank 0 writes alone.
  using ObjectList = std::vector<std::pair<std::string, std::vector<std::byte>>>;
  struct DataHooks {
    std::function<std::vector<std::byte>(std::uint64_t)> prepare;
    std::function<ObjectList(std::uint64_t)> objects;
    std::function<void(const std::string&, std::span<const std::byte>)> restored;
    std::function<std::vector<std::byte>(ObjectList&)> gather;
    // Another driver value kept with each checkpoint (the template definitions), and
    // what gets it back at a restart.
    std::function<std::vector<std::byte>()> templates;
    std::function<void(const std::string&, std::span<const std::byte>)> restored_templates;
  };
  void set_data_hooks(DataHooks hooks) { data_ = std::move(hooks); }
  // write() throws checkpoint::Exit after a checkpoint a signal asked for.
  void set_exit_after_signal(bool on) noexcept { exit_after_signal_ = on; }
  // instantiation_due() turns true every `n` template instantiations (0: never),
  // and, with n > 0 (the driver saves its state before each instantiation), at the
  // first instantiation after a signal or --brisk-checkpoint-every asked for one.
  void set_every_instantiations(int n) noexcept { every_instantiations_ = n; }
  bool instantiation_due() noexcept override {
    if (every_instantiations_ <= 0) return false;
    if (++instantiations_ < every_instantiations_ && !requested()) return false;
    instantiations_ = 0;
    return true;
  }

 private:
  Status commit(MPI_Comm comm, std::uint64_t sequence, std::map<std::string, std::vector<std::byte>> values,
                ObjectList objects);

  int rank_;
  std::string dir_;
  int keep_;
  std::function<void(std::uint64_t)> announce_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<std::byte>> pending_;   // saved for the next checkpoint
  std::map<std::string, std::vector<std::byte>> restored_;  // from the restored checkpoint
  std::uint64_t restored_sequence_ = 0;
  std::uint64_t next_sequence_ = 0;  // 0: not chosen yet
  std::chrono::seconds every_;
  DataHooks data_;
  bool exit_after_signal_ = false;
  int every_instantiations_ = 0;
  int instantiations_ = 0;  // since the last checkpoint this counter asked for
  std::atomic<std::int64_t> last_ns_;  // steady clock of the last checkpoint (or the start)
  std::string last_path_;               // the checkpoint written or restored last ("" none)
  // The lost rank stop_writing() marked, or -1.
  int lost_rank() const {
    std::lock_guard lock(loss_mutex_);
    return lost_rank_;
  }
  mutable std::mutex loss_mutex_;  // lost_rank_ and writing_ change together
  int lost_rank_ = -1;     // stop_writing()
  bool writing_ = false;   // inside a collective commit
  bool skip_reported_ = false;  // the message about writing alone
};

}  // namespace brisk
