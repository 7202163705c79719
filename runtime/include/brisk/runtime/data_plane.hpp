// brisk/runtime/data_plane.hpp — data objects and templates, wired to a rank.
//
// Every rank has a DataWorker (its partition instances, running on the rank's local
// scheduler); rank 0 also has the DataController, called by the driver. Messages
// between ranks travel as kData frames through the Cluster; a message to the rank
// itself is handled at once on the sending thread.
#pragma once

#include <memory>

#include "brisk/core/data.hpp"
#include "brisk/scheduler/data_controller.hpp"
#include "brisk/scheduler/data_worker.hpp"

namespace brisk {

class Cluster;
class EventLog;

class RuntimeDataPlane final : public detail::DataPlane {
 public:
  // `cluster` is null in a one-rank job. `local` runs the data tasks.
  RuntimeDataPlane(int rank, int size, detail::Executor& local, Cluster* cluster, EventLog* events, bool templates);
  ~RuntimeDataPlane() override;

  // A kData payload from `from` (the cluster's progress thread).
  void receive(int from, std::span<const std::byte> payload);
  // Whether the driver used data objects (the runtime then syncs before the end).
  bool used() const noexcept { return controller_ && used_; }
  DataWorker& worker() noexcept { return *worker_; }

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
    if (controller_) controller_->fetch_forget(key);
  }
  void sync() override;
  void flush() override;
  std::uint64_t version(std::uint32_t dataset, std::uint32_t part) const override;
  bool templates_enabled() const noexcept override { return templates_; }
  detail::DataPlaneStats stats() const override;
  std::uint64_t submitted() const noexcept override { return controller_ ? controller_->submitted() : 0; }
  bool restored(std::uint32_t dataset) const override { return controller_ && controller_->restored(dataset); }

  // Checkpoints (runtime/checkpoint_service). Rank 0: drain, plan who writes which
  // partition into checkpoint `sequence`; the data-set table to keep with it.
  std::vector<std::byte> prepare_checkpoint(std::uint64_t sequence);
  // Every rank: its partitions for checkpoint `sequence`, as (object name, bytes).
  std::vector<std::pair<std::string, std::vector<std::byte>>> checkpoint_objects(std::uint64_t sequence);
  // Rank 0 at restart: the restored checkpoint's data-set table.
  void restore_from(const std::string& file, std::span<const std::byte> table);
  int size() const noexcept override { return size_; }

 private:
  DataController& controller(const char* api) const;
  void send(int to, std::vector<std::byte> message);

  int rank_;
  int size_;
  Cluster* cluster_;
  bool templates_;
  bool used_ = false;
  std::unique_ptr<DataWorker> worker_;
  std::unique_ptr<DataController> controller_;
};

}  // namespace brisk
