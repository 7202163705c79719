// brisk/runtime/checkpoint_service.hpp — brisk::checkpoint for brisk::run.
//
// Rank 0's driver saves values and calls write(); the other ranks write their parts
// when told (Cluster::wait_for_end runs participate() on their main thread). Two
// ways to write one checkpoint file (format.hpp):
//   - collective (the mpi backend, where a dead rank ends the job anyway): every
//     rank writes into one file with parallel HDF5;
//   - sharded (the ucx backend): each rank writes its own shard file alone and
//     reports it to rank 0 over the transport; rank 0 commits the checkpoint file
//     with links to the shards. No collective is involved, so a rank dying while a
//     checkpoint is written blocks nobody: rank 0 drops the attempt (its shards are
//     deleted) and, when data objects are in use, the driver rolls back to the last
//     checkpoint, which the failed attempt never touched.
// Every rank makes its service at start, collectively (it duplicates MPI_COMM_WORLD
// for the collective way).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "brisk/checkpoint/writer.hpp"
#include "brisk/core/detail/context.hpp"
#include "brisk/core/status.hpp"

namespace brisk {

class RuntimeCheckpoints final : public detail::CheckpointService {
 public:
  using ObjectList = std::vector<std::pair<std::string, std::vector<std::byte>>>;
  // How the ranks of a multi-rank job reach each other (all empty for one rank).
  struct Peers {
    int size = 1;
    bool sharded = false;
    // Rank 0: asks every live rank for its part of checkpoint `seq` (`tag` "" for
    // the collective way).
    std::function<void(std::uint64_t seq, const std::string& tag)> announce;
    // Another rank: sends its report (see participate) to rank 0, whose
    // on_report() gets it.
    std::function<void(std::span<const std::byte>)> report;
    // Rank 0: whether rank r is known dead (the cluster's flag, set before its loss
    // handler runs).
    std::function<bool(int)> lost;
    // Rank 0, sharded: how long it waits for a live rank's part before it gives the
    // checkpoint up (--brisk-checkpoint-timeout); 0: no limit.
    std::chrono::milliseconds part_timeout{0};
    // Sharded, every rank but 0 (whose death ends the job anyway): the copies it
    // holds of other ranks' live objects (named checkpoint_held_name), written with
    // its part so that their owners need not keep the lineage to make them again.
    std::function<ObjectList()> held;
    // Rank 0, sharded: checkpoint `sequence`, file `path`, is committed and holds these copies
    // (name, the rank that held it). A dead rank writes no part: the copies it
    // wrote before are carried from checkpoint to checkpoint until every live rank
    // says (`settled`, sent with its part) that it has read back what it needed of
    // them, so that a prune never removes a copy an owner still reads.
    std::function<void(std::uint64_t sequence, const std::string& path,
                       const std::vector<std::pair<std::string, int>>& held)>
        saved;
    // Sharded, every rank: the dead ranks whose copies it has read back.
    std::function<std::vector<int>()> settled;
  };
  // Collective. Installs a SIGUSR1 handler that makes requested() true (rank 0);
  // `every` > 0 makes it true that long after the last checkpoint too.
  RuntimeCheckpoints(int rank, std::string dir, int keep, std::chrono::seconds every, Peers peers);
  ~RuntimeCheckpoints() override;

  // Rank 0, at start: loads `what` ("latest" or a file). Prints which checkpoint
  // and what it skipped. Errors name the file and the reason.
  Status restore(const std::string& what);

  void save(const std::string& name, std::vector<std::byte> bytes) override;
  std::uint64_t write() override;
  std::optional<std::vector<std::byte>> restored(const std::string& name) const override;
  std::uint64_t restored_sequence() const noexcept override { return restored_sequence_; }
  bool requested() const noexcept override;

  // Rank 0, any thread (the cluster's loss handler): rank `lost` died. Wakes a
  // sharded write waiting for reports, which then sees the rank's flag (Peers::lost),
  // gives up on it, and does not ask it again.
  void on_loss(int lost);
  // Rank 0, the progress thread: a report from rank `from` (participate()).
  void on_report(int from, std::span<const std::byte> report);
  // Rank 0, for a rollback: the driver's values come back from the checkpoint this
  // run wrote or restored last (its data sets with them), or, if there is none,
  // nothing is restored and the driver starts from the beginning. Returns the file,
  // or "" for none.
  StatusOr<std::string> roll_back();

  // Other ranks: their part of checkpoint `sequence`: with an empty tag, the
  // collective commit with write(); else their shard, written alone and reported.
  Status participate(std::uint64_t sequence, const std::string& tag);
  // Fault injection: called once a shard is written, before its report goes.
  void set_before_report(std::function<void()> hook) { before_report_ = std::move(hook); }
  // ... and once its report is sent.
  void set_after_report(std::function<void()> hook) { after_report_ = std::move(hook); }
  // Rank 0: whether a live rank's part of a checkpoint was overdue (its main thread
  // may never come back, so the job cannot end through MPI).
  bool rank_blocked() const noexcept { return rank_blocked_.load(std::memory_order_acquire); }

  // Data objects in checkpoints (runtime/data_plane.hpp). `prepare(seq)` runs on rank
  // 0 before the others are asked and returns a value kept with the checkpoint;
  // `objects(seq)` gives each rank's objects to write; `restored(file, value)` gets
  // that value back at a restart.
  // `interrupted(lost)` (rank 0) runs when a rank died before reporting its part of
  // a sharded checkpoint: it aborts the data plane and throws DataRollback when the
  // data plane is in use (the dead rank's partitions are gone); otherwise the
  // checkpoint goes on without it.
  struct DataHooks {
    std::function<std::vector<std::byte>(std::uint64_t)> prepare;
    std::function<ObjectList(std::uint64_t)> objects;
    std::function<void(const std::string&, std::span<const std::byte>)> restored;
    std::function<void(int)> interrupted;
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
  // Rank 0: the sharded way (see above).
  Status write_sharded(std::uint64_t sequence, std::map<std::string, std::vector<std::byte>> values);

  int rank_;
  std::string dir_;
  int keep_;
  Peers peers_;
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
  std::function<void()> before_report_, after_report_;
  std::atomic<bool> rank_blocked_{false};

  // Rank 0: the sharded write in progress, and what the ranks reported.
  struct Report {
    Status status;
    std::string shard;  // "" when the rank had nothing to write
    std::vector<CheckpointShardEntry> objects;
    std::vector<int> settled;  // Peers::settled
  };
  std::mutex report_mutex_;
  std::condition_variable report_cv_;
  std::uint64_t report_sequence_ = 0;  // the attempt reports are taken for (0: none)
  std::string report_tag_;
  std::map<int, Report> reports_;
  // Rank 0, sharded: adds to `writer` (and to `held`, and to `carried` by rank) the
  // copies of dead ranks in the checkpoint committed last that some live rank may
  // still read (see Peers::saved).
  void carry_held(CheckpointWriter& writer, const std::map<int, Report>& reports,
                  std::vector<std::pair<std::string, int>>& held, std::map<int, std::vector<std::string>>& carried);
  // Rank 0, sharded: the held copies each rank wrote into the checkpoint committed
  // last (held_path_), for carrying a dead rank's into the next one.
  std::map<int, std::vector<std::string>> held_names_;
  std::string held_path_;
};

}  // namespace brisk
