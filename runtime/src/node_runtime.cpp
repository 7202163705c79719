#include "brisk/runtime/node_runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "brisk/core/actor.hpp"
#include "brisk/scheduler/local_scheduler.hpp"
#include "brisk/scheduler/topology.hpp"

namespace brisk {

std::size_t default_store_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::size_t{1} << 30;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 4;
}

namespace {
// How many ranks of the job run on this host, from the launcher (1 if unknown).
int local_size() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"}) {
    if (const char* v = std::getenv(name)) return std::max(1, std::atoi(v));
  }
  return 1;
}
}  // namespace

NodeRuntime::NodeRuntime(const Options& options, const Topology* topology, int rank,
                         std::vector<std::string> program_args) {
  workers_ = options.workers > 0 ? options.workers : (topology ? topology->num_cores() : 1);
  if (options.events) events_ = std::make_unique<EventLog>(options.event_buffer);
  ObjectStore::Config sc;
  sc.capacity = options.store_bytes ? options.store_bytes : default_store_bytes();
  sc.spill_dir = options.spill_dir;
  sc.spill_capacity = options.spill_bytes;
  store_ = std::make_unique<ObjectStore>(sc);

  std::map<std::string, double> resources;
  resources["CPU"] = workers_;
  resources["GPU"] = topology ? topology->num_gpus() : 0;
  // Every rank offers "rank<N>" in a practically unlimited amount, so that a task
  // can be pinned to a rank: brisk::task(f).resources({{"rank2", 1}}).
  resources["rank" + std::to_string(rank)] = kRankResource;
  for (const auto& [name, amount] : options.resources) resources[name] = amount;

  LocalScheduler::Config lc;
  lc.workers = workers_;
  lc.idle = options.idle;
  lc.spin = options.spin;
  // Ranks of one host that share a cpuset (mpirun --bind-to none) would bind their
  // workers to the same cores; the kernel spreads unbound threads better.
  const bool shared_cpuset = topology && local_size() > 1 &&
                             static_cast<long>(topology->num_pus()) * local_size() > sysconf(_SC_NPROCESSORS_ONLN);
  lc.topology = options.bind && !shared_cpuset ? topology : nullptr;
  lc.events = events_.get();
  lc.resources = resources;
  lc.driver_reserves_core = rank == 0;
  scheduler_ = std::make_unique<LocalScheduler>(lc);
  if (rank == 0) scheduler_->register_driver_thread();

  context_.executor = scheduler_.get();
  context_.store = store_.get();
  context_.events = events_.get();
  context_.rank = rank;
  context_.job_id = 0;
  context_.max_node_resources = resources;
  context_.spin = options.idle == IdleMode::kSleep ? std::chrono::nanoseconds(0)
                                                   : std::chrono::nanoseconds(options.spin);
  context_.program_args = std::move(program_args);
  detail::set_context(&context_);
  detail::set_submitter_root(TaskId::root(context_.job_id));
  if (events_) events_->set_thread_name(rank == 0 ? "driver" : "main");
  scheduler_->start();
}

void NodeRuntime::shutdown() {
  scheduler_->shutdown();
  detail::destroy_actors();
}

NodeRuntime::~NodeRuntime() {
  shutdown();
  detail::set_context(nullptr);
}

}  // namespace brisk
