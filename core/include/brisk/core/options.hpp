// brisk/core/options.hpp — runtime options from `--brisk-*` flags and `BRISK_*`
// environment variables.
//
// Every option has a flag and an environment variable; a flag beats the variable,
// which beats the default. Example:
//   auto parsed = brisk::parse_options(argc, argv);
//   if (!parsed.ok()) { std::cerr << parsed.status().message() << "\n"; return 2; }
//   if (parsed->help_requested) { std::cout << brisk::options_help(); return 0; }
//   run(parsed->options, parsed->program_args);
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "brisk/core/status.hpp"

namespace brisk {

// What an idle worker does while it has no task.
enum class IdleMode {
  kSpin,     // "spin": never sleeps; lowest wake-up latency, burns its core.
  kBackoff,  // "backoff": spins for Options::spin, then yields, then sleeps.
  kSleep,    // "sleep": sleeps at once; for ranks that share cores.
};

// Which transport carries messages and objects between ranks.
enum class TransportKind {
  kMpi,  // "mpi": MPI two-sided messages, MPI_Get from one window per rank.
  kUcx,  // "ucx": UCX active messages and ucp_get_nbx; reports dead peers.
};

// The transport without --brisk-transport / BRISK_TRANSPORT: ucx where brisk is
// built with UCX, mpi otherwise (docs/BENCHMARKS.md, "Default transport").
TransportKind default_transport() noexcept;

// How the ranks of one node share their arenas (the memory objects are read from).
enum class NodeShm {
  kOn,        // "on": shared memory, mapped read-only by the node's other ranks.
  kOff,       // "off": private memory (the MPI window is allocated by MPI).
  kUnmapped,  // "unmapped": shared memory that no rank maps: every read goes through
              // the transport, as between nodes (tests that path on one node).
};

// Options
//
// The runtime's configuration. Zero or empty values mean "choose automatically",
// as described per field; the runtime resolves them, parsing does not.
struct Options {
  // --brisk-workers / BRISK_WORKERS: worker threads, 0..4096; 0 = one per core of
  // the rank's cpuset.
  int workers = 0;
  // --brisk-idle / BRISK_IDLE: spin | backoff | sleep.
  IdleMode idle = IdleMode::kBackoff;
  // --brisk-spin-us / BRISK_SPIN_US: how long an idle worker spins before it
  // yields and sleeps, in backoff mode.
  std::chrono::microseconds spin{50};
  // --brisk-store-bytes / BRISK_STORE_BYTES: object store capacity; 0 = a quarter
  // of physical memory.
  std::size_t store_bytes = 0;
  // --brisk-spill-dir / BRISK_SPILL_DIR: where objects spill; empty = $TMPDIR or /tmp.
  std::string spill_dir;
  // --brisk-spill-bytes / BRISK_SPILL_BYTES: spill capacity; 0 = limited only by
  // free disk.
  std::size_t spill_bytes = 0;
  // --brisk-events / BRISK_EVENTS: keep the task event log.
  bool events = true;
  // --brisk-event-buffer / BRISK_EVENT_BUFFER: events kept per thread (a ring
  // buffer); at least 1.
  std::size_t event_buffer = 1 << 16;
  // --brisk-timeline / BRISK_TIMELINE: write a Chrome trace to this path at exit;
  // empty = none. One that cannot be written (or with the event log off) is
  // reported on stderr and turns the driver's exit code 0 into 1.
  std::string timeline;
  // --brisk-resources / BRISK_RESOURCES: node resources, e.g. "GPU:1,disk:2".
  // Overrides the detected CPU/GPU counts and adds custom resources.
  std::map<std::string, double> resources;
  // --brisk-bind / BRISK_BIND: bind worker threads to cores with hwloc.
  bool bind = true;
  // --brisk-keep-heap / BRISK_KEEP_HEAP: glibc keeps freed heap memory for reuse
  // (brisk::run sets its thresholds, unless the environment tunes malloc itself).
  // Off by default: it raised task throughput but slowed physbam_like by some 4 %
  // (docs/BENCHMARKS.md, "Keeping freed heap memory").
  bool keep_heap = false;
  // --brisk-transport / BRISK_TRANSPORT: mpi | ucx.
  TransportKind transport = default_transport();
  // --brisk-shards / BRISK_SHARDS: control-state shards; 0 = one per 16 ranks.
  int shards = 0;
  // --brisk-schedulers / BRISK_SCHEDULERS: global schedulers; 0 = one per 32 ranks.
  int schedulers = 0;
  // --brisk-report-roles / BRISK_REPORT_ROLES: print each rank's host, roles,
  // cpuset, NUMA node and GPUs at start.
  bool report_roles = false;
  // --brisk-inline-bytes / BRISK_INLINE_BYTES: objects up to this size travel
  // inside task and result messages; larger ones are pulled one-sided.
  std::size_t inline_bytes = 64 * 1024;
  // --brisk-expose-bytes / BRISK_EXPOSE_BYTES: with ucx, on a rank whose arena no
  // node peer maps, values with a contiguous form larger than this are read by other ranks
  // where they lie (registered with the transport), not from a copy in the arena;
  // 0 = always a copy.
  std::size_t expose_bytes = std::size_t{4} << 20;
  // --brisk-arena-new-bytes / BRISK_ARENA_NEW_BYTES: in a multi-rank job whose
  // arena is node-shared memory, allocations by operator new of at least this size
  // (a std::vector's storage, among others) are placed in the arena while it has
  // room, so that other ranks read such values where they lie; 0 = off.
  std::size_t arena_new_bytes = std::size_t{256} << 10;
  // --brisk-spill-queue / BRISK_SPILL_QUEUE: a rank sends ready tasks to a global
  // scheduler once more than this many wait in its local queue; 0 = 2 per worker.
  int spill_queue = 0;
  // --brisk-arena-bytes / BRISK_ARENA_BYTES: registered memory per rank from which
  // peers pull objects larger than the inline size (an object that does not fit
  // travels inside the message instead); 0 = 1 GiB with ucx (virtual memory), 256 MiB
  // with mpi (with --brisk-node-shm=off Open MPI fills the window's pages at start,
  // about 1 s per GiB; over InfiniBand it registers, so commits, the whole window).
  std::size_t arena_bytes = 0;
  // --brisk-node-shm / BRISK_NODE_SHM: each rank's arena is shared memory that the
  // other ranks on its node map read-only, so a task reads a brisk::Array made on
  // another rank of its node where it lies (no copy) and other objects with one
  // memcpy; off: every read from another rank is a one-sided get.
  NodeShm node_shm = NodeShm::kOn;
  // --brisk-heartbeat-ms / BRISK_HEARTBEAT_MS: how often a rank publishes its load
  // to the control state.
  int heartbeat_ms = 10;
  // --brisk-shard-events / BRISK_SHARD_EVENTS: task events each rank sends to the
  // control state's event log per heartbeat (the rest stay in the rank's own log,
  // which the timeline reads); 0 = none.
  int shard_events = 256;
  // --brisk-failure-timeout-ms / BRISK_FAILURE_TIMEOUT_MS: a rank whose heartbeats
  // stop for this long is declared dead (ucx transport; a dead process is usually
  // reported at once by the transport, this catches hung ones).
  int failure_timeout_ms = 2000;
  // --brisk-lineage-bytes / BRISK_LINEAGE_BYTES: with ucx, an owner keeps the task
  // of each result held on another rank, and so its arguments, to make the result
  // again if that rank dies. Past this many argument bytes kept, the oldest lineage
  // is dropped (its object is then lost with its holder); 0 = keep none.
  std::size_t lineage_bytes = std::size_t{1} << 30;
  // --brisk-checkpoint-dir / BRISK_CHECKPOINT_DIR: where checkpoints go.
  std::string checkpoint_dir = "brisk_checkpoints";
  // --brisk-checkpoint-keep / BRISK_CHECKPOINT_KEEP: checkpoints kept (0 = all).
  int checkpoint_keep = 3;
  // --brisk-restore / BRISK_RESTORE: "" (none), "latest" (the newest good one in
  // the checkpoint directory) or a checkpoint file.
  std::string restore;
  // --brisk-checkpoint-every / BRISK_CHECKPOINT_EVERY: seconds after which
  // brisk::checkpoint::requested() turns true again; 0 = only on SIGUSR1.
  int checkpoint_every_s = 0;
  // --brisk-checkpoint-instantiations / BRISK_CHECKPOINT_INSTANTIATIONS: the runtime
  // writes a checkpoint before every N-th template instantiation (0: never).
  int checkpoint_instantiations = 0;
  // --brisk-checkpoint-timeout / BRISK_CHECKPOINT_TIMEOUT: seconds rank 0 waits for
  // a live rank's part of a sharded checkpoint (ucx) before it gives it up; 0 = no limit.
  int checkpoint_timeout_s = 600;
  // --brisk-checkpoint-exit / BRISK_CHECKPOINT_EXIT: after a checkpoint that SIGUSR1
  // asked for, end the job (exit code 75) so that a batch script requeues it.
  bool checkpoint_exit = false;
  // --brisk-templates / BRISK_TEMPLATES: record and replay execution templates
  // (data.hpp); off runs every block's body each time, with identical results.
  bool templates = true;
};

// The result of parse_options.
struct ParsedOptions {
  Options options;
  // argv without the --brisk-* flags and their values, in order, argv[0] first.
  std::vector<std::string> program_args;
  // --brisk-help was given: the caller should print options_help() and exit.
  // When set, `options` holds the defaults and nothing else was validated.
  bool help_requested = false;
};

// Parses the --brisk-* flags in argv and the BRISK_* variables in `env`.
//
// `env` == nullptr reads the process environment (environ); tests pass a map.
// Flags take a value as `--brisk-x=v` or `--brisk-x v` (the next token is the
// value even if it starts with '-'); a flag given twice keeps the last value.
// Every other token, including other programs' flags, passes through into
// program_args unchanged and in order. A token "--" ends flag parsing: it and
// everything after it pass through untouched. Unknown BRISK_* variables are
// ignored; an unknown --brisk-* flag is an error.
//
// Every error is kInvalidArgument and names the flag or variable and what was
// expected, e.g.
//   "invalid value 'fast' for --brisk-idle: expected one of spin, backoff, sleep"
//   "unknown option --brisk-wrkers (did you mean --brisk-workers?); valid options: ..."
// Thread safety: safe to call concurrently when `env` is given; reading environ
// races with setenv in other threads.
StatusOr<ParsedOptions> parse_options(int argc, const char* const* argv,
                                      const std::map<std::string, std::string>* env = nullptr);

// Text for --brisk-help: every option with its environment variable, default and
// meaning. Ends in a newline.
std::string options_help();

// Parses a byte size: plain bytes ("4096") or a number with a binary suffix
// K, M, G or T (64K = 65536), also written KB/KiB, MB/MiB, ... or with a trailing
// B ("4096B"); suffixes are case-insensitive. Errors (kInvalidArgument): empty,
// negative, fractional, unknown suffix, or larger than std::size_t.
StatusOr<std::size_t> parse_size(std::string_view text);

}  // namespace brisk
