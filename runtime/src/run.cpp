// brisk::run: MPI, options, topology, the transport, the node runtime and the
// cluster, wired together.
#include <fmt/format.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>
#include <memory>
#include <atomic>
#include <thread>

#include "brisk/core/array.hpp"
#include "brisk/core/checkpoint.hpp"
#include "brisk/core/function_registry.hpp"
#include "brisk/core/options.hpp"
#include "brisk/core/run.hpp"
#include "brisk/core/status.hpp"
#include "brisk/mpi_transport/mpi_environment.hpp"
#include "brisk/mpi_transport/mpi_transport.hpp"
#include "brisk/checkpoint/format.hpp"
#include "brisk/runtime/checkpoint_service.hpp"
#include "brisk/runtime/cluster.hpp"
#include "brisk/runtime/control_plane.hpp"
#include "brisk/runtime/data_plane.hpp"
#include "brisk/runtime/exit_status.hpp"
#include "brisk/runtime/fault_inject.hpp"
#include "brisk/runtime/node_arena.hpp"
#include "brisk/runtime/node_runtime.hpp"
#include "brisk/scheduler/local_scheduler.hpp"
#include "brisk/scheduler/roles.hpp"
#include "brisk/scheduler/topology.hpp"
#if BRISK_HAVE_UCX
#include "brisk/mpi_transport/ucx_transport.hpp"
#endif

namespace brisk::detail {
namespace {
void abort_hook(int code) {
  record_exit_status(code, "brisk stopped the job at a failed check (see the message above)");
  MpiEnvironment::abort_job(code);
}

// Ends the job from this rank with MPI_Abort, after recording `code` for the launcher.
[[noreturn]] void abort_job(int code, std::string_view why) {
  record_exit_status(code, why);
  std::fflush(nullptr);
  MpiEnvironment::abort_job(code);
}

// A rollback after a rank's loss that could not be done: the job ends with
// exit_code::kRankLost.
class RollbackFailed : public Error {
 public:
  using Error::Error;
};

// The job's exit code when the driver threw `e` (exit_code in brisk/core/run.hpp):
// a result lost with its rank is a rank loss, a checkpoint given up on a stuck
// rank a timeout, anything else the driver's failure.
int driver_exception_code(const std::exception& e, bool rank_blocked) {
  if (dynamic_cast<const RollbackFailed*>(&e)) return exit_code::kRankLost;
  if (const auto* t = dynamic_cast<const TaskError*>(&e)) {
    if (t->kind() == ErrorKind::kObjectLost || t->kind() == ErrorKind::kRankLost) return exit_code::kRankLost;
  }
  return rank_blocked ? exit_code::kTimeout : exit_code::kDriverThrew;
}

// Bad input found before any work: rank 0 says what (or every rank, where each
// found it on its own), and the rank ends with exit_code::kBadInput.
int bad_input(int rank, const std::string& message, bool every_rank = false) {
  if (rank == 0 || every_rank) {
    std::fprintf(stderr, "brisk: %s%s\n", every_rank ? fmt::format("rank {}: ", rank).c_str() : "", message.c_str());
  }
  record_exit_status(exit_code::kBadInput, message);
  return exit_code::kBadInput;
}

// Whether the environment sets any of glibc's malloc parameters itself.
bool malloc_tuned_by_environment() {
  for (const char* name : {"MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_",
                           "MALLOC_ARENA_MAX"}) {
    if (std::getenv(name)) return true;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables && std::string_view(tunables).find("glibc.malloc.") != std::string_view::npos;
}

// glibc returns the heap's free top to the system once it passes a threshold that
// starts at 128 KiB, and serves blocks from 128 KiB (growing to 32 MiB as large ones
// are freed) with fresh mmaps. Every task, record and message is a few allocations:
// a burst of them grows the heap, the drain after it gives the memory back, and the
// next burst faults every page in again (4 KiB at a time, some 11 us each on the VMs
// here). Kept instead (--brisk-keep-heap=on): `throughput` at np 2 over mpi went from
// 336-474 k to 495-502 k tasks/s, but physbam_like ran some 4 % slower, so it is off
// by default (docs/BENCHMARKS.md, "Keeping freed heap memory").
void keep_heap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);   // glibc's own ceiling for the sliding threshold
  mallopt(M_TRIM_THRESHOLD, 256 << 20);  // give back only past 256 MiB free at the top
  mallopt(M_TOP_PAD, 64 << 20);          // grow in 64 MiB steps (untouched pages cost nothing)
}

// Where a job that ends on a failure can resume from.
std::string checkpoint_note(const std::string& dir) {
  auto files = list_checkpoints(dir);
  if (!files.ok() || files->empty()) return fmt::format("no checkpoint was written in {}", dir);
  return fmt::format("the last checkpoint is {} (rerun with --brisk-restore=latest to resume from it)",
                     files->back().path.string());
}

// Memory mapped for the UCX arena (the MPI backend's arena is its window).
class MappedArena {
 public:
  explicit MappedArena(std::size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  ~MappedArena() {
    if (base_) munmap(base_, bytes_);
  }
  MappedArena(const MappedArena&) = delete;
  MappedArena& operator=(const MappedArena&) = delete;
  std::span<std::byte> span() const { return {base_, base_ ? bytes_ : 0}; }

 private:
  std::byte* base_ = nullptr;
  std::size_t bytes_;
};

// The transport and the arena it exposes.
struct Wire {
  std::unique_ptr<NodeArena> node;  // the arena's memory, when the node's ranks share it
  std::unique_ptr<Transport> transport;
  std::unique_ptr<MappedArena> mapped;
  std::span<std::byte> arena;
  std::unique_ptr<MemoryRegistration> registration;
  std::function<void()> barrier;
  std::vector<std::span<const std::byte>> peer_arenas;  // by rank; empty where not mapped
};

// The memory limit of this process's cgroup (Slurm's job step, a container): v2's
// memory.max or v1's memory.limit_in_bytes of the group /proc/self/cgroup names. 0
// when there is none (or "max").
std::size_t cgroup_memory_limit() {
  std::ifstream groups("/proc/self/cgroup");
  std::string line;
  std::size_t limit = 0;
  while (std::getline(groups, line)) {
    // "0::/path" (v2) or "N:controllers:/path" (v1, where the controllers name memory).
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::string file;
    if (controllers.empty()) {
      file = "/sys/fs/cgroup" + path + "/memory.max";
    } else if ((',' + controllers + ',').find(",memory,") != std::string::npos) {
      file = "/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes";
    } else {
      continue;
    }
    std::ifstream in(file);
    unsigned long long bytes = 0;
    if (in >> bytes && bytes > 0 && (limit == 0 || bytes < limit)) limit = static_cast<std::size_t>(bytes);
  }
  return limit;
}

// The arena a rank lends large objects from: --brisk-arena-bytes, else 1 GiB, or an
// eighth of the host's memory shared by the ranks on it where that is less (at
// least 64 MiB). A brisk::Array of up to half of it is made there and lent where it
// lies; a larger one is copied into it when another rank reads it. Mapped arenas
// (node-shared, or UCX's) take pages only as they are used; so does a window Open MPI
// makes over them on one node, while over InfiniBand it registers (pins) the whole
// window, hence the share of memory.
std::size_t arena_bytes_of(const Options& options, int ranks_on_host) {
  if (options.arena_bytes) return options.arena_bytes;
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  std::size_t memory = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                                              : std::size_t{8} << 30;
  if (const std::size_t limit = cgroup_memory_limit()) memory = std::min(memory, limit);
  const std::size_t share = memory / 8 / static_cast<std::size_t>(std::max(1, ranks_on_host));
  return std::max(64 * kMiB, std::min(std::size_t{1} << 30, share / kMiB * kMiB));
}

// The window MPI allocates itself (MPI_Win_allocate, where there is no node-shared
// arena): Open MPI fills every page of it at start, so without --brisk-arena-bytes it
// stays at 256 MiB.
std::size_t allocated_window_bytes(const Options& options, int ranks_on_host) {
  const std::size_t bytes = arena_bytes_of(options, ranks_on_host);
  return options.arena_bytes ? bytes : std::min(bytes, std::size_t{256} << 20);
}

// --brisk-node-shm (collective): every rank makes its arena in shared memory and maps
// those of the ranks on its host. The ranks agree on it: where any rank has it off
// or cannot make one, none uses one (the MPI window must be made the same way on
// every rank), and where any has it `unmapped`, none maps.
std::unique_ptr<NodeArena> share_arenas(const Options& options, const std::string& host, std::size_t arena_bytes,
                                        MpiEnvironment& mpi, std::vector<std::span<const std::byte>>& peers) {
  std::unique_ptr<NodeArena> arena;
  std::string why;
  if (options.node_shm != NodeShm::kOff) {
    if (auto a = NodeArena::create(arena_bytes, host); a.ok()) {
      arena = std::move(a).value();
    } else {
      why = a.status().message();
    }
  }
  Writer w;
  w(static_cast<std::uint8_t>(options.node_shm), arena ? arena->description() : NodeArena::Description{}, why);
  const auto all = mpi.allgather(w.bytes());
  std::vector<NodeArena::Description> described(all.size());
  bool off = false, failed = false, unmapped = false;
  for (std::size_t r = 0; r < all.size(); ++r) {
    Reader rd(all[r]);
    std::uint8_t mode = 0;
    std::string reason;
    rd(mode, described[r], reason);
    off = off || mode == static_cast<std::uint8_t>(NodeShm::kOff);
    unmapped = unmapped || mode == static_cast<std::uint8_t>(NodeShm::kUnmapped);
    if (mode != static_cast<std::uint8_t>(NodeShm::kOff) && described[r].bytes == 0 && !failed) {
      failed = true;
      if (mpi.rank() == 0) {
        std::fprintf(stderr, "brisk: warning: rank %zu has no shared arena (%s); ranks of a node read each other's "
                     "objects through the transport\n", r, reason.c_str());
      }
    }
  }
  if (off && options.node_shm != NodeShm::kOff && mpi.rank() == 0) {
    std::fprintf(stderr, "brisk: warning: --brisk-node-shm is off on some ranks; it is off on all\n");
  }
  if (off || failed) return nullptr;
  peers.assign(all.size(), {});
  if (unmapped) return arena;
  std::vector<std::uint8_t> mapped(all.size(), 0);
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (static_cast<int>(r) == mpi.rank()) continue;
    peers[r] = arena->map_peer(described[r]);
    mapped[r] = !peers[r].empty();
  }
  // A pair of ranks uses views only where each maps the other, so that a rank's own
  // list tells it who reads its arena through the transport (it keeps polling for
  // them; Cluster): where one side cannot map the other (another process namespace,
  // a /proc it may not read), both read through the transport.
  Writer m;
  m(mapped);
  const auto maps = mpi.allgather(m.bytes());
  const auto me = static_cast<std::size_t>(mpi.rank());
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (peers[r].empty()) continue;
    std::vector<std::uint8_t> theirs;
    Reader rd(maps[r]);
    rd(theirs);
    if (me >= theirs.size() || !theirs[me]) peers[r] = {};  // the view stays mapped, unused
  }
  return arena;
}

// `ranks_on_host`: how many ranks of the job run on this rank's host.
StatusOr<Wire> make_wire(const Options& options, const Topology& topology, int ranks_on_host, MpiEnvironment& mpi) {
  Wire w;
  const std::size_t arena_bytes = arena_bytes_of(options, ranks_on_host);
  const std::size_t window_bytes = allocated_window_bytes(options, ranks_on_host);
  w.node = share_arenas(options, topology.hostname(), arena_bytes, mpi, w.peer_arenas);
  if (options.transport == TransportKind::kUcx) {
#if BRISK_HAVE_UCX
    auto t = UcxTransport::create();
    if (!t.ok()) return t.status();
    UcxTransport* ucx = t->get();
    w.barrier = [ucx] { ucx->barrier(); };
    w.transport = std::move(t).value();
    if (w.node) {
      w.arena = w.node->memory();
    } else {
      w.mapped = std::make_unique<MappedArena>(arena_bytes);
      w.arena = w.mapped->span();
    }
    if (w.arena.empty()) return resource_exhausted(fmt::format("cannot map an arena of {} bytes", arena_bytes));
#else
    return failed_precondition("--brisk-transport=ucx: this brisk was built without UCX (BRISK_ENABLE_UCX)");
#endif
  } else {
    auto t = w.node ? MpiTransport::create(w.node->memory()) : MpiTransport::create(window_bytes);
    if (t.ok() && w.node && (*t)->window().empty()) {
      // No window over the shared arena (MPI_Win_create failed, on every rank alike):
      // the window MPI allocates itself, and no views (nothing is placed in them).
      if (mpi.rank() == 0) {
        std::fprintf(stderr, "brisk: warning: %s; the arena is MPI's own window instead, without node-shared reads\n",
                     (*t)->window_error().c_str());
      }
      t->reset();
      w.node.reset();
      w.peer_arenas.clear();
      t = MpiTransport::create(window_bytes);
    }
    if (!t.ok()) return t.status();
    MpiTransport* mpi = t->get();
    w.barrier = [mpi] { mpi->barrier(); };
    w.arena = mpi->window();
    w.transport = std::move(t).value();
    if (w.arena.empty()) {
      if (w.transport->rank().value == 0) {
        std::fprintf(stderr,
                     "brisk: warning: no one-sided reads with the mpi transport (%s); objects travel inside "
                     "messages. With Open MPI across nodes without RDMA, OMPI_MCA_osc=ucx or "
                     "--brisk-transport=ucx gives one-sided reads.\n",
                     mpi->window_error().c_str());
      }
      return w;
    }
  }
  (void)topology.bind_memory_local(w.arena.data(), w.arena.size());  // best effort: NUMA-local pages
  auto reg = w.transport->register_memory(w.arena.data(), w.arena.size());
  if (!reg.ok()) return reg.status();
  w.registration = std::move(reg).value();
  return w;
}

std::vector<std::byte> encode_node(const std::map<std::string, double>& resources, const std::string& host,
                                   std::int64_t clock_offset, const std::string& report) {
  Writer w;
  w(resources, host, clock_offset, report);
  return w.take();
}

std::int64_t clock_offset_ns() {
  const auto sys = std::chrono::system_clock::now().time_since_epoch();
  const std::int64_t steady = static_cast<std::int64_t>(EventLog::now_ns());
  return std::chrono::duration_cast<std::chrono::nanoseconds>(sys).count() - steady;
}

std::string gpu_text(int n) { return n == 0 ? "none" : std::to_string(n); }

// Kills at a data task (BRISK_FAULT_INJECT=kill-at-task:...): the data plane calls
// them as each task starts. Set before any message can arrive.
void arm_task_kills(const std::vector<KillPlan>& plans, int rank, RuntimeDataPlane& data) {
  if (auto hook = arm_fault_injections(plans, KillPlan::Unit::kDataTasks, rank)) data.set_task_hook(std::move(hook));
}

// Rank 0, after the driver threw DataRollback: the data plane starts a new epoch on
// the surviving ranks, and the driver's values come back from the last checkpoint.
// Throws RollbackFailed when that cannot be done.
void roll_back(RuntimeDataPlane& data, RuntimeCheckpoints& checkpoints, int lost) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> hosts;
  try {
    hosts = data.roll_back();
  } catch (const Error& e) {
    throw RollbackFailed(fmt::format("rank {} was lost and the data objects cannot roll back: {}", lost, e.what()));
  }
  auto from = checkpoints.roll_back();
  if (!from.ok()) {
    throw RollbackFailed(fmt::format("rank {} was lost and the job cannot roll back to its last checkpoint: {}", lost,
                                     from.status().message()));
  }
  const std::string now = RuntimeDataPlane::describe_hosts(hosts);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "brisk: rank 0: rank %d was lost while the job used data objects; the job goes on without it (%s); "
               "the driver runs again from %s (rollback took %.1f ms)\n",
               lost, now.c_str(),
               from->empty() ? "the beginning (no checkpoint was written yet)" : from->c_str(), ms);
  std::fflush(stderr);
}

}  // namespace

int run_main(int argc, char** argv, std::function<int()> driver) {
  auto mpi_or = MpiEnvironment::init(&argc, &argv);
  if (!mpi_or.ok()) {
    std::fprintf(stderr, "brisk: %s\n", mpi_or.status().message().c_str());
    return 2;
  }
  std::unique_ptr<MpiEnvironment> mpi = std::move(mpi_or).value();
  const int rank = mpi->rank();
  const int size = mpi->size();
  set_log_rank(rank);
  init_exit_status(rank, size);
  set_abort_hook(&abort_hook);

  auto parsed = parse_options(argc, argv);
  if (!parsed.ok()) return bad_input(rank, parsed.status().message());
  if (parsed->help_requested) {
    if (rank == 0) std::fputs(options_help().c_str(), stdout);
    record_exit_status(exit_code::kSuccess, "--brisk-help");
    return exit_code::kSuccess;
  }
  const Options& options = parsed->options;
  if (options.keep_heap && !malloc_tuned_by_environment()) keep_heap();
  auto roles = assign_roles(size, options.shards, options.schedulers);
  if (!roles.ok()) return bad_input(rank, roles.status().message());
  std::vector<KillPlan> kill_plans;
  if (const char* inject = std::getenv("BRISK_FAULT_INJECT")) {
    auto plans = parse_fault_injects(inject);
    if (plans.ok()) {
      for (const KillPlan& p : *plans) {
        if (p.rank >= size) {
          plans = invalid_argument(
              fmt::format("BRISK_FAULT_INJECT='{}' names rank {} in a job of {} ranks", inject, p.rank, size));
          break;
        }
        // Only ucx's sharded checkpoints have parts that other ranks write alone.
        const bool in_parts = p.unit == KillPlan::Unit::kCheckpointParts || p.unit == KillPlan::Unit::kCheckpointReports;
        if (in_parts && (p.rank == 0 || options.transport != TransportKind::kUcx)) {
          plans = invalid_argument(fmt::format(
              "BRISK_FAULT_INJECT='{}': {} needs --brisk-transport=ucx and a rank other than 0 "
              "(rank 0 commits checkpoints; on mpi they are collective)",
              inject, p.stall                                         ? "stall-in-checkpoint"
                      : p.unit == KillPlan::Unit::kCheckpointReports ? "kill-after-checkpoint-report"
                                                                      : "kill-in-checkpoint"));
          break;
        }
      }
    }
    if (!plans.ok()) return bad_input(rank, plans.status().message());
    kill_plans = *plans;
  }
  auto topology = Topology::detect();
  if (!topology.ok()) return bad_input(rank, topology.status().message(), /*every_rank=*/true);

  // Every rank learns every node's resources (placement, feasibility), host and
  // clock offset (the merged timeline); rank 0 prints the roles if asked.
  NodeRuntime node(options, &*topology, rank, parsed->program_args);
  const auto& capacity = node.scheduler().capacity();
  const char* transport_name = options.transport == TransportKind::kUcx ? "ucx" : "mpi";
  const std::string report =
      fmt::format("brisk: rank {} host {}: {}; cpuset {} ({} cores, {} workers); NUMA node {}; GPUs {}; transport {}",
                  rank, topology->hostname(), roles->describe(Rank{rank}), topology->cpuset_string(),
                  topology->num_cores(), node.workers(), topology->numa_node(), gpu_text(topology->num_gpus()),
                  size > 1 ? transport_name : "none");
  const std::int64_t offset = clock_offset_ns();
  auto all = mpi->allgather(encode_node(capacity, topology->hostname(), offset, report));
  Cluster::Config cc;
  cc.roles = *roles;
  std::map<std::string, double> largest;
  int ranks_on_host = 0;
  for (const auto& bytes : all) {
    std::map<std::string, double> res;
    std::string host, line;
    std::int64_t off = 0;
    Reader r(bytes);
    r(res, host, off, line);
    ranks_on_host += host == topology->hostname();
    for (const auto& [k, v] : res) largest[k] = std::max(largest[k], v);
    cc.node_resources.push_back(std::move(res));
    if (options.report_roles && rank == 0) std::fprintf(stdout, "%s\n", line.c_str());
  }
  if (options.report_roles && rank == 0) std::fflush(stdout);
  node.context().max_node_resources = largest;
  node.context().size = size;

  int job_code = exit_code::kSuccess;
  std::string why;   // what ended this rank, for the launcher (exit_status.hpp)
  std::string lost;  // the ranks it knew dead at the end, for the same
  // Set once the checkpoint service exists (the cluster's loss handler reads it).
  auto checkpoints_ptr = std::make_shared<std::atomic<RuntimeCheckpoints*>>(nullptr);
  std::unique_ptr<RuntimeDataPlane> data;  // outlives the cluster, whose progress thread calls it
  std::unique_ptr<Cluster> cluster;
  Wire wire;
  if (size > 1) {
    auto w = make_wire(options, *topology, ranks_on_host, *mpi);
    if (!w.ok()) {
      const std::string why =
          fmt::format("cannot start the {} transport: {}", transport_name, w.status().message());
      std::fprintf(stderr, "brisk: rank %d: %s\n", rank, why.c_str());
      abort_job(exit_code::kBadInput, why);
    }
    wire = std::move(w).value();
    cc.inline_bytes = options.inline_bytes;
    cc.expose_bytes = options.expose_bytes;
    cc.arena_new_bytes = options.arena_new_bytes;
    cc.peer_arenas = wire.peer_arenas;
    cc.arena_shared = wire.node != nullptr;
    try {
      for (const auto& v : wire.peer_arenas) {
        if (!v.empty()) add_borrowed_memory(v.data(), v.size());  // arrays read in place there free nothing
      }
    } catch (const std::exception& e) {
      const std::string why = fmt::format("{} (run the job with --brisk-node-shm=off)", e.what());
      std::fprintf(stderr, "brisk: rank %d: %s\n", rank, why.c_str());
      abort_job(exit_code::kBadInput, why);
    }
    cc.spill_queue = options.spill_queue > 0 ? options.spill_queue : 2 * node.workers();
    cc.heartbeat = std::chrono::milliseconds(options.heartbeat_ms);
    cc.spin = options.idle == IdleMode::kSleep ? std::chrono::nanoseconds(0) : std::chrono::nanoseconds(options.spin);
    cc.clock_offset_ns = offset;
    cc.host = topology->hostname();
    cc.shard_events = options.shard_events;
    cc.failure_timeout = std::chrono::milliseconds(options.failure_timeout_ms);
    cc.lineage_bytes = options.lineage_bytes;
    // No core of the cpuset is left to the progress thread: the workers poll.
    cc.workers_poll = topology->num_cores() <= node.workers();
    cc.nap_beside_waiters = options.transport == TransportKind::kMpi;
    if (options.transport != TransportKind::kUcx) {
      cc.fatal_timeout = std::chrono::milliseconds(std::max(2000, 5 * options.failure_timeout_ms));
      cc.fatal = [rank, dir = options.checkpoint_dir](const std::string& why) {
        std::fprintf(stderr, "brisk: rank %d: %s; the job ends now (exit code %d); %s\n", rank, why.c_str(),
                     exit_code::kRankLost, checkpoint_note(dir).c_str());
        abort_job(exit_code::kRankLost, why);
      };
    }
    cluster = std::make_unique<Cluster>(*wire.transport, node.scheduler(), node.events(), wire.arena,
                                        std::move(wire.registration), cc);
    for (const FunctionInfo* f : registered_functions()) {
      cluster->control()->add_function(FunctionRecord{f->id, f->name, Rank{rank}});
    }
    node.context().executor = cluster.get();
    node.context().distributed = cluster.get();
    data = std::make_unique<RuntimeDataPlane>(rank, size, node.scheduler(), cluster.get(), node.events(),
                                              options.templates);
    cluster->set_data_handler([d = data.get()](Rank from, std::span<const std::byte> p) { d->receive(from.value, p); });
    // A rank lost while data objects are in use: the driver's data calls throw
    // DataRollback, and the driver runs again from the last checkpoint (below). A
    // checkpoint being written (sharded on ucx, no collective) gives up on the dead
    // rank's part.
    cluster->set_loss_handler([d = data.get(), ck = checkpoints_ptr](Rank lost) {
      // Whether or not the driver has used data objects yet (it may be creating its
      // first data set now): a data call throws, or the first DataSet does.
      d->abort(lost.value);
      if (RuntimeCheckpoints* cp = ck->load(std::memory_order_acquire)) cp->on_loss(lost.value);
    });
    cluster->set_checkpoint_report_handler([ck = checkpoints_ptr](Rank from, std::span<const std::byte> report) {
      if (RuntimeCheckpoints* cp = ck->load(std::memory_order_acquire)) cp->on_report(from.value, report);
    });
    data->set_rollback_limit(std::chrono::milliseconds(std::max(10000, 5 * options.failure_timeout_ms)));
    arm_task_kills(kill_plans, rank, *data);
    if (auto hook = arm_fault_injections(kill_plans, KillPlan::Unit::kFills, rank)) cluster->set_fill_hook(std::move(hook));
    cluster->start();
  } else {
    data = std::make_unique<RuntimeDataPlane>(rank, size, node.scheduler(), nullptr, node.events(), options.templates);
    arm_task_kills(kill_plans, rank, *data);
  }
  node.context().data = data.get();
  // Where the workers take every core, the driver shares one with a worker: a reply
  // that a worker hands to the driver wakes it when the worker next runs out of
  // tasks or, between tasks, once it has waited 500 us (the progress thread makes an
  // overdue one at its next wake, by the next heartbeat at the latest, while
  // the workers run long tasks), not in the middle of the worker's run, where the
  // woken driver would take the core (it did, for 12-40 us each CG iteration of
  // physbam_like at 64^3). Multi-rank jobs only: one rank has no progress thread.
  if (cluster && cluster->workers_poll()) node.scheduler().set_defer_wakes(std::chrono::microseconds(500));
  // Where the workers take every core, they take up messages between tasks (at most
  // every 20 us) and the progress thread stands back while they are awake.
  if (cluster && cluster->workers_poll()) node.scheduler().set_poll_between_tasks(std::chrono::microseconds(20));
  // Workers with data commands in flight wait for copies from other ranks: they spin
  // on through such waits (up to 20 ms) instead of sleeping into each arrival.
  if (size > 1 && options.idle == IdleMode::kBackoff) {
    node.scheduler().set_work_hint(&data->worker().outstanding_counter(), std::chrono::milliseconds(20));
    // A rollback gives this rank a fresh worker.
    data->set_worker_hook([&node](DataWorker& w) {
      node.scheduler().set_work_hint(&w.outstanding_counter(), std::chrono::milliseconds(20));
    });
  }

  // Checkpoints: every rank duplicates the communicator now (collectively); rank 0
  // restores the driver's values when asked to. On ucx, where the job runs through
  // a dead rank, checkpoints are sharded (no collective a dead rank could block).
  RuntimeCheckpoints::Peers peers;
  if (cluster) {
    peers.size = size;
    peers.sharded = options.transport == TransportKind::kUcx;
    peers.announce = [c = cluster.get()](std::uint64_t seq, const std::string& tag) { c->announce_checkpoint(seq, tag); };
    peers.report = [c = cluster.get()](std::span<const std::byte> report) { c->send_checkpoint_report(report); };
    peers.lost = [c = cluster.get()](int r) { return c->rank_lost(Rank{r}); };
    peers.part_timeout = std::chrono::seconds(options.checkpoint_timeout_s);
    if (peers.sharded) {
      // Live objects' copies held for other ranks go into the checkpoints, and their
      // owners then drop the lineage the files replace.
      if (rank != 0) peers.held = [c = cluster.get()] { return c->held_copies(); };
      peers.settled = [c = cluster.get()] { return c->settled_losses(); };
      peers.saved = [c = cluster.get()](std::uint64_t sequence, const std::string& path,
                                        const std::vector<std::pair<std::string, int>>& held) {
        c->checkpoint_committed(sequence, path, held);
      };
    }
  }
  RuntimeCheckpoints checkpoints(rank, options.checkpoint_dir, options.checkpoint_keep,
                                 std::chrono::seconds(options.checkpoint_every_s), std::move(peers));
  node.context().checkpoints = &checkpoints;
  checkpoints_ptr->store(&checkpoints, std::memory_order_release);
  {
    RuntimeCheckpoints::DataHooks hooks;
    if (rank == 0) {
      hooks.prepare = [d = data.get()](std::uint64_t seq) { return d->used() ? d->prepare_checkpoint(seq) : std::vector<std::byte>{}; };
      hooks.templates = [d = data.get()] { return d->used() ? d->checkpoint_templates() : std::vector<std::byte>{}; };
      hooks.restored_templates = [d = data.get()](const std::string& file, std::span<const std::byte> bytes) {
        d->restore_templates(file, bytes);
      };
      // A rank died before it wrote its part: its partitions are gone with it. (The
      // loss handler aborts too; whichever comes first.)
      hooks.interrupted = [d = data.get()](int lost) {
        if (!d->used()) return;
        d->abort(lost);
        throw DataRollback{lost};
      };
      hooks.restored = [d = data.get()](const std::string& file, std::span<const std::byte> table) {
        if (!table.empty()) d->restore_from(file, table);
      };
    }
    hooks.objects = [d = data.get()](std::uint64_t seq) { return d->checkpoint_objects(seq); };
    checkpoints.set_data_hooks(std::move(hooks));
    checkpoints.set_exit_after_signal(options.checkpoint_exit);
    checkpoints.set_every_instantiations(options.checkpoint_instantiations);
    if (auto hook = arm_fault_injections(kill_plans, KillPlan::Unit::kCheckpointParts, rank)) {
      checkpoints.set_before_report(std::move(hook));
    }
    if (auto hook = arm_fault_injections(kill_plans, KillPlan::Unit::kCheckpointReports, rank)) {
      checkpoints.set_after_report(std::move(hook));
    }
  }
  for (const KillPlan& p : kill_plans) {
    if (p.unit == KillPlan::Unit::kMilliseconds) arm_fault_injection(p, rank);
  }
  bool restore_failed = false;
  if (rank == 0 && !options.restore.empty()) {
    if (Status s = checkpoints.restore(options.restore); !s.ok()) {
      why = fmt::format("cannot restore: {}", s.message());
      std::fprintf(stderr, "brisk: %s\n", why.c_str());
      restore_failed = true;
      job_code = exit_code::kBadInput;
    }
  }

  if (rank == 0 && !restore_failed) {
    try {
      // A rollback is done in the loop's body, so that a loss during it (which
      // throws DataRollback from the new epoch) starts another one.
      int lost = -1;
      for (;;) {
        try {
          if (lost >= 0) {
            roll_back(*data, checkpoints, lost);
            lost = -1;
          }
          job_code = driver();
          // Data tasks still running belong to the driver's work: wait for them.
          if (data->used()) data->sync();
          why = fmt::format("the driver returned {}", job_code);
          break;
        } catch (const DataRollback& r) {
          lost = r.lost_rank;
        }
      }
    } catch (const checkpoint::Exit& e) {
      std::fprintf(stderr, "brisk: %s\n", e.what());
      job_code = checkpoint::Exit::kExitCode;
      why = e.what();
    } catch (const std::exception& e) {
      job_code = driver_exception_code(e, checkpoints.rank_blocked());
      why = fmt::format("the driver on rank 0 threw: {}", e.what());
      std::fprintf(stderr, "brisk: %s (exit code %d)\n", why.c_str(), job_code);
    } catch (...) {
      job_code = exit_code::kDriverThrew;
      why = "the driver on rank 0 threw an unknown exception";
      std::fprintf(stderr, "brisk: %s (exit code %d)\n", why.c_str(), job_code);
    }
    if (!options.timeline.empty()) {
      // A timeline that was asked for and not written fails the job (exit code 1 where
      // the driver returned 0; the driver's own failure code stands), so that a script
      // that goes on to read it is stopped here, with the reason.
      Status st = !node.events()    ? failed_precondition("the event log is off (--brisk-events=off)")
                  : cluster         ? cluster->write_timeline(options.timeline)
                                    : node.events()->write_chrome_trace(options.timeline, rank);
      if (!st.ok()) {
        std::fprintf(stderr, "brisk: rank %d: the timeline (--brisk-timeline) was not written: %s\n", rank,
                     st.message().c_str());
        if (job_code == exit_code::kSuccess) {
          job_code = exit_code::kDriverThrew;
          why = fmt::format("the timeline (--brisk-timeline) was not written: {}", st.message());
        }
      }
    }
  }
  if (cluster) {
    // The end travels as a brisk message, so that the ranks wait for it asleep and a
    // dead rank 0 is noticed.
    if (rank == 0) {
      cluster->announce_end(job_code, checkpoints.rank_blocked());
    } else {
      job_code = cluster->wait_for_end([&checkpoints, rank](std::uint64_t seq, const std::string& tag) {
        if (Status s = checkpoints.participate(seq, tag); !s.ok()) {
          std::fprintf(stderr, "brisk: rank %d: checkpoint %llu failed: %s\n", rank, static_cast<unsigned long long>(seq),
                       s.message().c_str());
        }
      });
      if (job_code == Cluster::kDriverLost) {
        job_code = exit_code::kRankLost;
        why = fmt::format("rank 0 ({}, and the driver) was lost", roles->describe(Rank{0}));
        bool first_alive = true;  // one rank says it
        for (int r = 1; r < rank; ++r) first_alive = first_alive && cluster->rank_lost(Rank{r});
        if (first_alive) {
          std::fprintf(stderr, "brisk: rank %d: %s; the job ends (exit code %d); %s\n", rank, why.c_str(), job_code,
                       checkpoint_note(options.checkpoint_dir).c_str());
        }
      } else {
        why = fmt::format("rank 0 ended the job with exit code {}", job_code);
      }
    }
    lost = lost_ranks_text(size, [&cluster](int r) { return cluster->rank_lost(Rank{r}); });
    if (cluster->leave_without_mpi()) {
      // MPI cannot end a job with a dead or blocked rank (a collective or
      // MPI_Finalize would hang): let the last messages go out, then leave without MPI.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
      while (std::chrono::steady_clock::now() < until) {
        cluster->poll();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      record_exit_status(job_code, why, lost);
      std::fflush(nullptr);
      std::_Exit(job_code);
    }
  }
  job_code = mpi->agree_exit_code(job_code);
  node.scheduler().set_work_hint(nullptr, {});
  node.scheduler().set_poll_between_tasks({});
  node.shutdown();
  node.context().data = nullptr;
  if (cluster) {
    // Every rank has stopped its workers; let the last messages land, then leave.
    cluster->stop();
    wire.barrier();
    node.context().executor = &node.scheduler();
    node.context().distributed = nullptr;
    cluster.reset();
    wire.transport.reset();
    // Values placed in the arena that are still allocated (held by the program, or
    // by the object store until the node goes) keep it mapped.
    if (wire.node && !retire_new_memory(wire.node->memory().data())) wire.node->keep_mapped();
    wire.node.reset();  // the views of other ranks' arenas stay mapped until exit
  }
  set_abort_hook(nullptr);
  record_exit_status(job_code, why.empty() ? fmt::format("the job ended with exit code {}", job_code) : why, lost);
  return job_code;
}

}  // namespace brisk::detail
