// brisk/core/checkpoint.hpp — the driver's state in checkpoints, and restarts.
//
//   int step = brisk::checkpoint::load<int>("step").value_or(0);   // after a restart
//   for (; step < steps; ++step) {
//     ... tasks ...
//     brisk::checkpoint::save("step", step + 1);
//     brisk::checkpoint::save("state", state);
//     brisk::checkpoint::now();          // every rank writes its part, rank 0 the driver's
//   }
//
// A checkpoint is an HDF5 file in --brisk-checkpoint-dir (default
// "brisk_checkpoints"), written under a temporary name and renamed once complete;
// the last --brisk-checkpoint-keep are kept. requested() tells the driver when one
// is due (a signal, or a period). Run the program again with
// --brisk-restore=latest (or a file) and load() returns what the checkpoint held:
// the newest checkpoint that verifies is used, and a corrupt or truncated newer one
// is reported and skipped. Tasks in flight are not saved: save what the driver
// needs to go on, between steps; objects it holds with save_object(). Data objects
// are saved (data.hpp). On ucx each checkpoint also holds the copies that ranks
// keep of other ranks' objects, for the running job: their owners drop those
// objects' lineage and read them back from the checkpoint if the holder dies.
//
// With --brisk-checkpoint-instantiations=N the runtime itself writes a checkpoint
// before every N-th template instantiation (drain, write, go on), with the values
// saved so far: save the loop position before instantiating, and a restart resumes
// there.
//
// Driver only (rank 0, outside tasks). save() copies the value's serialized bytes;
// now() blocks until every rank has written its part and returns the checkpoint's
// sequence number; it throws brisk::Error on failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "brisk/core/api.hpp"
#include "brisk/core/detail/context.hpp"
#include "brisk/core/error.hpp"
#include "brisk/core/run.hpp"
#include "brisk/core/serialize.hpp"

namespace brisk::checkpoint {

namespace detail {
brisk::detail::CheckpointService& service(const char* api);
}  // namespace detail

// Keeps `value` under `name` for the next checkpoint (the latest save wins).
template <class T>
void save(const std::string& name, const T& value) {
  detail::service("brisk::checkpoint::save").save(name, to_bytes(value));
}

// Thrown by now() after it wrote a checkpoint that a signal asked for, when the job
// runs with --brisk-checkpoint-exit: brisk::run then ends the job on every rank with
// exit code kExitCode, which a requeueing batch script takes as "checkpointed, run me
// again" (slurm/brisk-requeue.sbatch).
class Exit : public brisk::Error {
 public:
  static constexpr int kExitCode = exit_code::kRequeue;
  explicit Exit(std::uint64_t sequence)
      : brisk::Error("checkpoint " + std::to_string(sequence) +
                     " written on request; the job ends to be run again (--brisk-checkpoint-exit)"),
        sequence_(sequence) {}
  std::uint64_t sequence() const noexcept { return sequence_; }

 private:
  std::uint64_t sequence_;
};

// A live object that is costly to make again: its value (waited for) is kept under
// `name`, and load_object() makes it an object again after a restart.
template <class T>
void save_object(const std::string& name, const Ref<T>& ref) {
  save(name, brisk::get(ref));
}

// Writes a checkpoint now; returns its sequence number. On ucx each rank writes its
// part alone (a shard) and rank 0 commits; a rank lost before its part is written
// drops this checkpoint and, with data objects in use, rolls the driver back like
// any data call (detail::DataRollback). Throws checkpoint::Exit after a checkpoint
// a signal asked for, with --brisk-checkpoint-exit.
inline std::uint64_t now() { return detail::service("brisk::checkpoint::now").write(); }

// The value saved under `name` in the checkpoint this run was restored from
// (--brisk-restore), or nullopt when there is none or no such name. Throws
// SerializationError when the bytes are not a T.
template <class T>
std::optional<T> load(const std::string& name) {
  auto bytes = detail::service("brisk::checkpoint::load").restored(name);
  if (!bytes) return std::nullopt;
  return from_bytes<T>(*bytes);
}

// The object saved under `name` with save_object(), made an object again (on this
// rank), or nullopt when the restored checkpoint has no such name.
template <class T>
std::optional<Ref<T>> load_object(const std::string& name) {
  auto value = load<T>(name);
  if (!value) return std::nullopt;
  return brisk::put(std::move(*value));
}

// Whether a checkpoint is due: SIGUSR1 arrived (Slurm sends it before a time limit
// with `sbatch --signal=USR1@SECONDS`), or --brisk-checkpoint-every=SECONDS passed
// since the last one. Check it between steps: if (requested()) now();
inline bool requested() { return detail::service("brisk::checkpoint::requested").requested(); }

// The sequence of the checkpoint this run was restored from, or 0.
inline std::uint64_t restored() { return detail::service("brisk::checkpoint::restored").restored_sequence(); }

}  // namespace brisk::checkpoint
