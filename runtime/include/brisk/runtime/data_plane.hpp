// brisk/runtime/data_plane.hpp — data objects and templates, wired to a rank.
//
// Every rank has a DataWorker (its partition instances, running on the rank's local
// scheduler); rank 0 also has the DataController, called by the driver. Messages
// between ranks travel as kData frames through the Cluster; a message to the rank
// itself is handled at once on the sending thread.
//
// Ranks as the data plane sees them are logical: the controller places partitions
// and tasks on ranks 0..size()-1, and each logical rank is served by one process
// (at first, itself). Every kData frame starts with a DataHeader: the epoch, and the
// logical ranks it comes from and goes to.
//
// Rollback (ucx, a rank lost while data objects are in use): the controller aborts,
// so that the driver's data calls throw detail::DataRollback; brisk::run then calls
// roll_back(), which starts a new epoch with one logical rank per surviving process
// (fresh workers on every rank and a fresh controller; messages of older epochs are
// dropped on arrival) and waits until every surviving rank has done the same. The
// driver then runs again from the last checkpoint and places its data sets over
// size() = brisk::data_ranks() ranks, the survivors.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include "brisk/core/data.hpp"
#include "brisk/core/error.hpp"
#include "brisk/scheduler/data_controller.hpp"
#include "brisk/scheduler/data_worker.hpp"

namespace brisk {

class CheckpointReader;
class Cluster;
class EventLog;

class RuntimeDataPlane final : public detail::DataPlane {
 public:
  // `cluster` is null in a one-rank job. `local` runs the data tasks.
  RuntimeDataPlane(int rank, int size, detail::Executor& local, Cluster* cluster, EventLog* events, bool templates);
  ~RuntimeDataPlane() override;

  // A kData payload from process `from` (the cluster's progress thread).
  void receive(int from, std::span<const std::byte> payload);
  // Whether the driver used data objects (the runtime then syncs before the end).
  bool used() const noexcept { return used_.load(std::memory_order_acquire); }
  // The worker of the logical rank this process serves.
  DataWorker& worker() {
    const Epoch& e = *current();
    for (std::size_t r = 0; r < e.hosts.size(); ++r) {
      if (e.hosts[r] == rank_) return *e.workers[r];
    }
    throw Error(fmt::format("rank {} serves no logical rank in data-plane epoch {}", rank_, e.number));
  }
  // Called with the new own worker after a rollback replaced it (its outstanding
  // counter is the scheduler's work hint).
  void set_worker_hook(std::function<void(DataWorker&)> hook) { worker_hook_ = std::move(hook); }
  // Called as each data task starts on this rank (fault injection); before any use.
  void set_task_hook(std::function<void()> hook);

  // Rank 0, any thread: `lost` died; the driver's data calls throw DataRollback
  // (unless the current epoch does not use that process: a rollback came first).
  void abort(int lost);
  // Rank 0, on the driver thread after a DataRollback: starts a new epoch on every
  // surviving rank with one logical rank per surviving process (in process order),
  // so size() shrinks to the survivors; returns once all of them have (or throws
  // brisk::Error after the rollback limit). Returns the new hosts (logical rank i is
  // served by process hosts[i]). Nothing of the data survives a rollback: the
  // driver restores it from a checkpoint.
  std::vector<int> roll_back();
  // "the data plane now has N ranks, processes a, b, c" for what roll_back() returned.
  static std::string describe_hosts(const std::vector<int>& hosts);
  void set_rollback_limit(std::chrono::milliseconds limit) noexcept { rollback_limit_ = limit; }
  std::uint32_t epoch() const noexcept { return current()->number; }

  std::uint32_t create(const std::string& name, const detail::DataTypeOps* type, std::vector<int> homes,
                       bool checkpointed) override;
  void submit(detail::DataTaskSpec spec, std::shared_ptr<const std::vector<std::byte>> params) override;
  std::uint32_t install(const std::string& name, std::vector<detail::DataTaskSpec> tasks) override;
  void instantiate(std::uint32_t tmpl, std::vector<std::byte> params) override;
  void move_tasks(std::uint32_t tmpl, std::span<const std::pair<std::uint32_t, int>> moves) override;
  int task_rank(std::uint32_t tmpl, std::uint32_t task) const override;
  std::uint64_t fetch_start(std::uint32_t dataset, std::uint32_t part) override;
  std::vector<std::byte> fetch_wait(std::uint64_t key) override;
  void fetch_forget(std::uint64_t key) noexcept override {
    if (DataController* c = current()->controller) c->fetch_forget(key);
  }
  void sync() override;
  void flush() override;
  std::uint64_t version(std::uint32_t dataset, std::uint32_t part) const override;
  bool templates_enabled() const noexcept override { return templates_; }
  detail::DataPlaneStats stats() const override;
  std::uint64_t submitted() const noexcept override {
    DataController* c = current()->controller;
    return c ? c->submitted() : 0;
  }
  bool restored(std::uint32_t dataset) const override {
    DataController* c = current()->controller;
    return c && c->restored(dataset);
  }

  // Checkpoints (runtime/checkpoint_service). Rank 0: drain, plan who writes which
  // partition into checkpoint `sequence`; the data-set table to keep with it.
  std::vector<std::byte> prepare_checkpoint(std::uint64_t sequence);
  // Every rank: the partitions of the logical ranks it serves for checkpoint
  // `sequence`, as (object name, bytes).
  std::vector<std::pair<std::string, std::vector<std::byte>>> checkpoint_objects(std::uint64_t sequence);
  // Rank 0 at restart: the restored checkpoint's data-set table.
  void restore_from(const std::string& file, std::span<const std::byte> table);
  // Rank 0: the installed templates for a checkpoint, and at restart those of the
  // restored one (kTemplatesValue).
  std::vector<std::byte> checkpoint_templates() { return controller("brisk::checkpoint::now").checkpoint_templates(); }
  void restore_templates(const std::string& file, std::span<const std::byte> bytes) {
    controller("--brisk-restore").restore_templates(file, bytes);
  }
  // Logical ranks now (brisk::data_ranks()): the job's ranks, then the survivors.
  int size() const noexcept override { return static_cast<int>(current()->hosts.size()); }

 private:
  // What one epoch routes by. Every epoch ever started is kept (a replaced worker or
  // controller may still be in use by a running task or a message being handled),
  // and each worker and controller sends through its own epoch's: a message of an
  // old epoch can only reach old, cancelled workers, never the new ones.
  struct Epoch {
    std::uint32_t number = 0;
    std::vector<int> hosts;            // per logical rank: the process serving it
    std::vector<DataWorker*> workers;  // per logical rank: its worker if served here
    DataController* controller = nullptr;  // rank 0
  };
  const Epoch* current() const noexcept { return current_.load(std::memory_order_acquire); }
  // The controller, for a driver call; throws DataRollback once aborted.
  DataController& controller(const char* api) const;
  // Sends `message` from logical rank `from` to logical rank `to` (-1: the data
  // plane of process `to_process`) as epoch `e` routes it; nothing once `e` is over.
  void send(const Epoch& e, int from, int to, std::vector<std::byte> message, int to_process = -1);
  // The same for a worker's message, which begins with kWorkerHeadroom bytes of room
  // (DataWorker's headroom): the frame is built around it in place, with no copy.
  void send_framed(const Epoch& e, int from, int to, std::vector<std::byte> message);
  // Where a message for logical rank `to` (served here in `e`) goes: a reply to the
  // controller is handled here (nullptr), anything else goes to the returned worker
  // (nullptr, reported: `to` is not served here).
  DataWorker* route(const Epoch& e, int from, int to, std::span<const std::byte> message);
  // Starts epoch `number` with `hosts` on this rank (fresh workers, and on rank 0 a
  // fresh controller); false if it is not newer than the current one.
  bool start_epoch(std::uint32_t number, const std::vector<int>& hosts);
  void on_plane_message(int from_process, std::uint32_t epoch, std::span<const std::byte> body);
  // Object `name` of checkpoint `file` (a partition being restored), any worker.
  std::vector<std::byte> restore_object(const std::string& file, const std::string& name);

  int rank_;
  int size_;
  detail::Executor& local_;
  Cluster* cluster_;
  EventLog* events_;
  bool templates_;
  std::atomic<bool> used_{false};
  std::chrono::milliseconds rollback_limit_{10000};
  std::function<void(DataWorker&)> worker_hook_;
  std::function<void()> task_hook_;

  std::mutex mutex_;  // starting epochs, the kept objects, acks, the task hook
  std::atomic<const Epoch*> current_{nullptr};
  std::vector<std::unique_ptr<Epoch>> epochs_;
  std::vector<std::unique_ptr<DataWorker>> all_workers_;
  std::vector<std::unique_ptr<DataController>> all_controllers_;
  std::vector<std::uint32_t> acked_;  // rank 0: the epoch each process last confirmed
  std::mutex restore_mutex_;
  std::string restore_path_;
  std::shared_ptr<const CheckpointReader> restore_reader_;  // the checkpoint partitions are read from
};

}  // namespace brisk
