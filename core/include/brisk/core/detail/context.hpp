// brisk/core/detail/context.hpp — the interfaces core calls and the runtime wires.
//
// core does not know the scheduler or the transport: brisk::run (runtime/) builds
// them and installs a RuntimeContext; the API reaches them only through it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "brisk/core/ids.hpp"

namespace brisk {
class ObjectStore;
class EventLog;
}  // namespace brisk

namespace brisk::detail {

class TaskBase;
class Distributed;
class DataPlane;

// Checkpoints of the driver's state (runtime/, through checkpoint/).
class CheckpointService {
 public:
  virtual ~CheckpointService() = default;
  // Keeps `bytes` (a serialized value) under `name` for the next checkpoint.
  virtual void save(const std::string& name, std::vector<std::byte> bytes) = 0;
  // Writes a checkpoint with every rank (driver thread of rank 0); its sequence.
  // Throws brisk::Error when it fails.
  virtual std::uint64_t write() = 0;
  // The bytes saved under `name` in the checkpoint this run restored, if any.
  virtual std::optional<std::vector<std::byte>> restored(const std::string& name) const = 0;
  // The sequence of the checkpoint restored from, or 0.
  virtual std::uint64_t restored_sequence() const noexcept = 0;
  // Whether a checkpoint is due: a signal asked for one (SIGUSR1), or the period
  // (--brisk-checkpoint-every) passed since the last one.
  virtual bool requested() const noexcept = 0;
  // Counts one template instantiation (driver thread); true when a checkpoint is due
  // before it (every --brisk-checkpoint-instantiations).
  virtual bool instantiation_due() noexcept { return false; }
};

// What core needs from a local scheduler.
class Executor {
 public:
  virtual ~Executor() = default;
  // Makes a task whose arguments are all complete runnable. Any thread. A task with
  // resource demands waits inside the executor until the node can meet them.
  virtual void submit(TaskBase* task) noexcept = 0;
  // The calling thread is about to block (get/wait inside a task): the executor
  // keeps the node's cores busy meanwhile, e.g. by waking a spare worker.
  // No-op for threads that are not workers.
  virtual void block_begin() noexcept = 0;
  virtual void block_end() noexcept = 0;
  // The index of the calling worker thread, or -1 for other threads.
  virtual int current_worker() const noexcept = 0;
  // A wake-up of the driver (a data-plane reply it waits for) that the calling thread
  // is about to make. Where the driver shares its core with the workers, a woken
  // driver takes the core from the worker that woke it, right when that worker has
  // more tasks to run. true: the calling thread is a worker and makes the wake-up
  // later, through the function given to set_deferred_wake (see LocalScheduler);
  // false: wake now.
  virtual bool defer_wake() noexcept { return false; }
  // The function that makes deferred wake-ups (nullptr: none; defer_wake then says
  // false). Any time.
  virtual void set_deferred_wake(std::function<void()> /*wake*/) {}
};

struct RuntimeContext {
  Executor* executor = nullptr;
  ObjectStore* store = nullptr;
  EventLog* events = nullptr;   // nullptr when the event log is off
  Distributed* distributed = nullptr;  // nullptr: a one-rank job
  CheckpointService* checkpoints = nullptr;  // nullptr outside brisk::run
  DataPlane* data = nullptr;  // data objects and templates (data.hpp); nullptr outside brisk::run
  int rank = 0;
  int size = 1;
  std::uint64_t job_id = 0;
  // Resources of the largest node of the job (a demand above them is infeasible).
  std::map<std::string, double> max_node_resources;
  // How long a blocked get/wait spins before it sleeps.
  std::chrono::nanoseconds spin{std::chrono::microseconds(50)};
  // argv without the --brisk-* options.
  std::vector<std::string> program_args;
};

// The installed context, or nullptr outside brisk::run.
RuntimeContext* context() noexcept;
void set_context(RuntimeContext* ctx) noexcept;
// The installed context; throws brisk::Error naming `api` when there is none.
RuntimeContext& require_context(const char* api);

// Per-thread submission state: the running task (for child ids) or, outside any
// task, the thread's root id and counter.
struct SubmitterState {
  TaskBase* current_task = nullptr;
  TaskId root;
  std::uint64_t root_counter = 0;
  std::uint64_t root_generation = 0;   // the job the root belongs to
};
SubmitterState& submitter() noexcept;
// A fresh id for a task submitted by the calling thread.
TaskId next_task_id() noexcept;
// A fresh id for an object put by the calling thread.
ObjectId next_put_id() noexcept;

}  // namespace brisk::detail

namespace brisk::detail {
// Makes the calling thread submit under `root` (the runtime gives the driver
// TaskId::root(job_id), so a re-run of the same driver reproduces every id).
void set_submitter_root(TaskId root) noexcept;
}  // namespace brisk::detail
