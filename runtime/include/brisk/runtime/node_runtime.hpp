// brisk/runtime/node_runtime.hpp — one rank's runtime without MPI: store, event log,
// local scheduler and the context that the API reaches them through.
//
// brisk::run builds one per rank; tests build one directly to exercise the whole
// task API in a plain process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "brisk/core/detail/context.hpp"
#include "brisk/core/event_log.hpp"
#include "brisk/core/object_store.hpp"
#include "brisk/core/options.hpp"

namespace brisk {

class LocalScheduler;
class Topology;

class NodeRuntime {
 public:
  // Builds and starts the node. `topology` may be null (no binding; workers must
  // then be given). Installs itself as the current context.
  NodeRuntime(const Options& options, const Topology* topology, int rank = 0,
              std::vector<std::string> program_args = {});
  // Shuts the scheduler down (queued tasks are cancelled) and uninstalls the context.
  ~NodeRuntime();
  NodeRuntime(const NodeRuntime&) = delete;
  NodeRuntime& operator=(const NodeRuntime&) = delete;

  // Stops the workers; the context stays installed (Refs can still be read).
  void shutdown();

  LocalScheduler& scheduler() noexcept { return *scheduler_; }
  ObjectStore& store() noexcept { return *store_; }
  EventLog* events() noexcept { return events_.get(); }
  detail::RuntimeContext& context() noexcept { return context_; }
  int workers() const noexcept { return workers_; }

 private:
  int workers_ = 1;
  std::unique_ptr<EventLog> events_;
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<LocalScheduler> scheduler_;
  detail::RuntimeContext context_;
};

// The amount of the "rank<N>" resource each rank offers.
inline constexpr double kRankResource = 1e6;

// A quarter of physical memory: the default store capacity.
std::size_t default_store_bytes();

}  // namespace brisk
