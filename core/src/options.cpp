// Parsing of --brisk-* flags and BRISK_* environment variables.
//
// argv is split here first: only the --brisk-* tokens (and the value token of the
// "--brisk-x v" form) belong to brisk; every other token belongs to the program and
// must pass through exactly as given, so it never reaches CLI11, which would read it
// by its own rules ("--", "-abc", "--x=y"). The brisk tokens, normalised to
// "--brisk-x=v", are then parsed by CLI11, which keeps the last of repeated flags.
// Values are converted here so that every error names the flag or variable and
// the accepted format.
#include "brisk/core/options.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <utility>

namespace brisk {
namespace {

constexpr std::string_view kFlagPrefix = "--brisk-";
constexpr std::string_view kHelpName = "brisk-help";
constexpr int kMaxWorkers = 4096;

constexpr const char* kSizeExpected = "expected a size such as 4096, 64K, 512M or 2G";
constexpr const char* kBoolExpected = "expected one of on, off, true, false, 1, 0, yes, no";
constexpr const char* kResourcesExpected =
    "expected NAME:COUNT pairs separated by commas, such as GPU:1,disk:2, where NAME "
    "matches [A-Za-z_][A-Za-z0-9_]* and COUNT is a non-negative number";

// Converts `value` into the option's field; on failure returns the reason, which
// follows "invalid value 'v' for --brisk-x: ".
using ApplyFn = std::optional<std::string> (*)(std::string_view value, Options& options);

struct OptionSpec {
  std::string_view name;  // without the leading "--"
  const char* env;
  const char* value_name;
  const char* default_text;
  const char* expected;  // also used when the value is missing
  const char* help;
  ApplyFn apply;
};

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const auto b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// A whole string of decimal digits, no sign, no surrounding text.
template <class Int>
std::optional<Int> parse_unsigned(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  Int v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// The reason a size is invalid, or the size.
std::optional<std::size_t> parse_size_impl(std::string_view text, std::string* reason) {
  const std::string_view s = trim(text);
  std::size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0) {
    *reason = kSizeExpected;
    return std::nullopt;
  }
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + digits, n);
  const std::string suffix = to_lower(s.substr(digits));
  int shift = -1;
  if (suffix.empty() || suffix == "b") {
    shift = 0;
  } else {
    constexpr std::string_view kUnits = "kmgt";
    const auto unit = kUnits.find(suffix.front());
    const std::string_view rest = std::string_view(suffix).substr(1);
    if (unit != std::string_view::npos && (rest.empty() || rest == "b" || rest == "ib")) {
      shift = 10 * static_cast<int>(unit + 1);
    }
  }
  if (shift < 0) {
    *reason = kSizeExpected;
    return std::nullopt;
  }
  constexpr std::uint64_t kMax = std::numeric_limits<std::size_t>::max();
  if (ec == std::errc::result_out_of_range || end != s.data() + digits || n > (kMax >> shift)) {
    *reason = "expected a size of at most " + std::to_string(kMax) + " bytes";
    return std::nullopt;
  }
  return static_cast<std::size_t>(n << shift);
}

std::optional<bool> parse_bool(std::string_view value) {
  const std::string v = to_lower(trim(value));
  if (v == "on" || v == "true" || v == "1" || v == "yes") return true;
  if (v == "off" || v == "false" || v == "0" || v == "no") return false;
  return std::nullopt;
}

bool is_resource_name(std::string_view name) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (name.empty() || !alpha(name.front())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alpha(c) || digit(c); });
}

std::optional<std::string> apply_workers(std::string_view v, Options& o) {
  const auto n = parse_unsigned<long long>(v);
  if (!n) return "expected a non-negative integer";
  if (*n > kMaxWorkers) return "expected an integer from 0 to " + std::to_string(kMaxWorkers);
  o.workers = static_cast<int>(*n);
  return std::nullopt;
}

std::optional<std::string> apply_idle(std::string_view v, Options& o) {
  const std::string s = to_lower(trim(v));
  if (s == "spin") {
    o.idle = IdleMode::kSpin;
  } else if (s == "backoff") {
    o.idle = IdleMode::kBackoff;
  } else if (s == "sleep") {
    o.idle = IdleMode::kSleep;
  } else {
    return "expected one of spin, backoff, sleep";
  }
  return std::nullopt;
}

std::optional<std::string> apply_spin_us(std::string_view v, Options& o) {
  const auto n = parse_unsigned<std::chrono::microseconds::rep>(v);
  if (!n) return "expected a non-negative integer number of microseconds";
  o.spin = std::chrono::microseconds(*n);
  return std::nullopt;
}

std::optional<std::string> apply_size(std::string_view v, std::size_t& field) {
  std::string reason;
  const auto n = parse_size_impl(v, &reason);
  if (!n) return reason;
  field = *n;
  return std::nullopt;
}

std::optional<std::string> apply_store_bytes(std::string_view v, Options& o) {
  return apply_size(v, o.store_bytes);
}

std::optional<std::string> apply_spill_bytes(std::string_view v, Options& o) {
  return apply_size(v, o.spill_bytes);
}

std::optional<std::string> apply_spill_dir(std::string_view v, Options& o) {
  o.spill_dir = std::string(v);
  return std::nullopt;
}

std::optional<std::string> apply_switch(std::string_view v, bool& field) {
  const auto b = parse_bool(v);
  if (!b) return kBoolExpected;
  field = *b;
  return std::nullopt;
}

std::optional<std::string> apply_events(std::string_view v, Options& o) { return apply_switch(v, o.events); }

std::optional<std::string> apply_event_buffer(std::string_view v, Options& o) {
  std::string reason;
  const auto n = parse_size_impl(v, &reason);
  if (!n || *n == 0) return "expected a positive count such as 65536 or 64K";
  o.event_buffer = *n;
  return std::nullopt;
}

std::optional<std::string> apply_timeline(std::string_view v, Options& o) {
  o.timeline = std::string(v);
  return std::nullopt;
}

std::optional<std::string> apply_resources(std::string_view v, Options& o) {
  std::map<std::string, double> resources;
  const std::string_view all = trim(v);
  std::size_t pos = 0;
  while (!all.empty()) {
    const std::size_t comma = std::min(all.find(',', pos), all.size());
    const std::string_view entry = trim(all.substr(pos, comma - pos));
    const std::size_t colon = entry.find(':');
    const std::string_view name = colon == std::string_view::npos ? entry : trim(entry.substr(0, colon));
    const std::string_view count_text =
        colon == std::string_view::npos ? std::string_view() : trim(entry.substr(colon + 1));
    double count = -1;
    const auto [end, ec] =
        std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
    const bool count_ok = !count_text.empty() && ec == std::errc() &&
                          end == count_text.data() + count_text.size() && std::isfinite(count) &&
                          count >= 0;
    if (colon == std::string_view::npos || !is_resource_name(name) || !count_ok) {
      return "bad entry '" + std::string(entry) + "'; " + kResourcesExpected;
    }
    if (!resources.emplace(std::string(name), count).second) {
      return "resource '" + std::string(name) + "' is given twice; " + kResourcesExpected;
    }
    if (comma == all.size()) break;
    pos = comma + 1;
  }
  o.resources = std::move(resources);
  return std::nullopt;
}

std::optional<std::string> apply_bind(std::string_view v, Options& o) { return apply_switch(v, o.bind); }
std::optional<std::string> apply_keep_heap(std::string_view v, Options& o) { return apply_switch(v, o.keep_heap); }

#if BRISK_DEFAULT_TRANSPORT_UCX
constexpr const char* kDefaultTransport = "ucx";
#else
constexpr const char* kDefaultTransport = "mpi";
#endif

std::optional<std::string> apply_transport(std::string_view v, Options& o) {
  const std::string s = to_lower(trim(v));
  if (s == "mpi") {
    o.transport = TransportKind::kMpi;
  } else if (s == "ucx") {
    o.transport = TransportKind::kUcx;
  } else {
    return "expected one of mpi, ucx";
  }
  return std::nullopt;
}

std::optional<std::string> apply_count(std::string_view v, int& field, long long max) {
  const auto n = parse_unsigned<long long>(v);
  if (!n || *n > max) return "expected an integer from 0 to " + std::to_string(max);
  field = static_cast<int>(*n);
  return std::nullopt;
}

std::optional<std::string> apply_shards(std::string_view v, Options& o) {
  return apply_count(v, o.shards, 1 << 20);
}

std::optional<std::string> apply_schedulers(std::string_view v, Options& o) {
  return apply_count(v, o.schedulers, 1 << 20);
}

std::optional<std::string> apply_report_roles(std::string_view v, Options& o) {
  return apply_switch(v, o.report_roles);
}

std::optional<std::string> apply_inline_bytes(std::string_view v, Options& o) {
  return apply_size(v, o.inline_bytes);
}

std::optional<std::string> apply_expose_bytes(std::string_view v, Options& o) {
  return apply_size(v, o.expose_bytes);
}

std::optional<std::string> apply_arena_new_bytes(std::string_view v, Options& o) {
  return apply_size(v, o.arena_new_bytes);
}

std::optional<std::string> apply_spill_queue(std::string_view v, Options& o) {
  return apply_count(v, o.spill_queue, 1 << 30);
}

std::optional<std::string> apply_arena_bytes(std::string_view v, Options& o) {
  std::string reason;
  const auto n = parse_size_impl(v, &reason);
  if (!n) return reason;
  if (*n != 0 && *n < (std::size_t{1} << 20)) return "expected 0 (automatic) or a size of at least 1M";
  o.arena_bytes = *n;
  return std::nullopt;
}

std::optional<std::string> apply_node_shm(std::string_view v, Options& o) {
  const std::string s = to_lower(trim(v));
  if (s == "unmapped") {
    o.node_shm = NodeShm::kUnmapped;
    return std::nullopt;
  }
  const auto b = parse_bool(s);
  if (!b) return "expected on, off or unmapped";
  o.node_shm = *b ? NodeShm::kOn : NodeShm::kOff;
  return std::nullopt;
}

std::optional<std::string> apply_lineage_bytes(std::string_view v, Options& o) {
  return apply_size(v, o.lineage_bytes);
}

std::optional<std::string> apply_ms(std::string_view v, int& field, long long min, long long max) {
  const auto n = parse_unsigned<long long>(v);
  if (!n || *n < min || *n > max) {
    return "expected an integer number of milliseconds from " + std::to_string(min) + " to " + std::to_string(max);
  }
  field = static_cast<int>(*n);
  return std::nullopt;
}

std::optional<std::string> apply_heartbeat_ms(std::string_view v, Options& o) {
  return apply_ms(v, o.heartbeat_ms, 1, 60000);
}

std::optional<std::string> apply_failure_timeout_ms(std::string_view v, Options& o) {
  return apply_ms(v, o.failure_timeout_ms, 10, 3600000);
}

std::optional<std::string> apply_checkpoint_dir(std::string_view v, Options& o) {
  if (v.empty()) return "expected a directory path";
  o.checkpoint_dir = std::string(v);
  return std::nullopt;
}

std::optional<std::string> apply_checkpoint_keep(std::string_view v, Options& o) {
  return apply_count(v, o.checkpoint_keep, 1 << 20);
}

std::optional<std::string> apply_checkpoint_every(std::string_view v, Options& o) {
  return apply_count(v, o.checkpoint_every_s, 1 << 30);
}

std::optional<std::string> apply_checkpoint_timeout(std::string_view v, Options& o) {
  return apply_count(v, o.checkpoint_timeout_s, 1 << 30);
}

std::optional<std::string> apply_checkpoint_instantiations(std::string_view v, Options& o) {
  return apply_count(v, o.checkpoint_instantiations, 1 << 30);
}

std::optional<std::string> apply_restore(std::string_view v, Options& o) {
  o.restore = std::string(v);
  return std::nullopt;
}

std::optional<std::string> apply_checkpoint_exit(std::string_view v, Options& o) {
  return apply_switch(v, o.checkpoint_exit);
}

std::optional<std::string> apply_templates(std::string_view v, Options& o) { return apply_switch(v, o.templates); }

std::optional<std::string> apply_shard_events(std::string_view v, Options& o) {
  return apply_count(v, o.shard_events, 1 << 20);
}

// The single list of options: parsing, error messages and help all come from it.
constexpr std::array<OptionSpec, 34> kSpecs = {{
    {"brisk-workers", "BRISK_WORKERS", "N", "0", "expected a non-negative integer",
     "Worker threads, 0 to 4096; 0 = one per core of the rank's cpuset.", apply_workers},
    {"brisk-idle", "BRISK_IDLE", "MODE", "backoff", "expected one of spin, backoff, sleep",
     "What an idle worker does: spin = never sleep (lowest latency, burns the core); "
     "backoff = spin, then yield, then sleep; sleep = sleep at once (for ranks that "
     "share cores).",
     apply_idle},
    {"brisk-spin-us", "BRISK_SPIN_US", "US", "50",
     "expected a non-negative integer number of microseconds",
     "How long an idle worker spins before it sleeps, in backoff mode.", apply_spin_us},
    {"brisk-store-bytes", "BRISK_STORE_BYTES", "SIZE", "0", kSizeExpected,
     "Object store capacity; 0 = a quarter of physical memory.", apply_store_bytes},
    {"brisk-spill-dir", "BRISK_SPILL_DIR", "DIR", "\"\"", "expected a directory",
     "Where objects spill when the store is full; empty = $TMPDIR or /tmp.", apply_spill_dir},
    {"brisk-spill-bytes", "BRISK_SPILL_BYTES", "SIZE", "0", kSizeExpected,
     "Spill capacity; 0 = limited by free disk only.", apply_spill_bytes},
    {"brisk-events", "BRISK_EVENTS", "on|off", "on", kBoolExpected, "Keep the task event log.",
     apply_events},
    {"brisk-event-buffer", "BRISK_EVENT_BUFFER", "N", "65536",
     "expected a positive count such as 65536 or 64K",
     "Events kept per thread (a ring buffer; older events are overwritten).",
     apply_event_buffer},
    {"brisk-timeline", "BRISK_TIMELINE", "PATH", "\"\"", "expected a file path",
     "Write a Chrome trace (chrome://tracing, Perfetto) to PATH at exit; empty = none.",
     apply_timeline},
    {"brisk-resources", "BRISK_RESOURCES", "LIST", "\"\"", kResourcesExpected,
     "Node resources as NAME:COUNT,... (e.g. GPU:1,disk:2); overrides the detected CPU "
     "and GPU counts and adds custom resources.",
     apply_resources},
    {"brisk-bind", "BRISK_BIND", "on|off", "on", kBoolExpected,
     "Bind worker threads to cores of the rank's cpuset with hwloc.", apply_bind},
    {"brisk-keep-heap", "BRISK_KEEP_HEAP", "on|off", "off", kBoolExpected,
     "Keep freed heap memory for reuse (glibc: blocks up to 32 MiB from the heap, which "
     "is trimmed only past 256 MiB free and grows 64 MiB at a time), so that bursts of "
     "tasks do not fault the heap's pages in again; off, or a malloc setting in the "
     "environment (MALLOC_*_, GLIBC_TUNABLES), leaves glibc's own.",
     apply_keep_heap},
    {"brisk-transport", "BRISK_TRANSPORT", "mpi|ucx", kDefaultTransport, "expected one of mpi, ucx",
     "Transport between ranks: ucx = UCX active messages and ucp_get_nbx, which reports "
     "dead ranks (the default where brisk is built with UCX); mpi = MPI messages and "
     "MPI_Get from one window per rank.",
     apply_transport},
    {"brisk-shards", "BRISK_SHARDS", "N", "0", "expected an integer from 0 to 1048576",
     "Control-state shards, spread over the ranks; 0 = one per 16 ranks (at least one).",
     apply_shards},
    {"brisk-schedulers", "BRISK_SCHEDULERS", "N", "0", "expected an integer from 0 to 1048576",
     "Global schedulers, spread over the ranks; 0 = one per 32 ranks (at least one).",
     apply_schedulers},
    {"brisk-report-roles", "BRISK_REPORT_ROLES", "on|off", "off", kBoolExpected,
     "Print one line per rank at start: host, roles, cpuset, NUMA node, GPUs.",
     apply_report_roles},
    {"brisk-inline-bytes", "BRISK_INLINE_BYTES", "SIZE", "64K", kSizeExpected,
     "Objects up to this size travel inside task and result messages; larger ones are "
     "pulled one-sided by the rank that reads them.",
     apply_inline_bytes},
    {"brisk-expose-bytes", "BRISK_EXPOSE_BYTES", "SIZE", "4M", kSizeExpected,
     "With ucx, on a rank whose arena no rank of its node maps (alone on its node, or "
     "--brisk-node-shm=unmapped): objects with a contiguous form (vectors of plain "
     "elements, strings) larger than this are read by other ranks where they lie, "
     "registered with the transport, instead of from a copy in the arena; 0 = always a copy.",
     apply_expose_bytes},
    {"brisk-arena-new-bytes", "BRISK_ARENA_NEW_BYTES", "SIZE", "256K", kSizeExpected,
     "With a node-shared arena (--brisk-node-shm, the default): allocations by operator "
     "new of this size or more (a std::vector's storage, among others) are placed in the "
     "rank's arena while it has room (up to half of it, with brisk::Array's), so that "
     "other ranks read such values where they lie instead of from a copy; 0 = off. "
     "Memory placed there that outlives brisk::run keeps the arena mapped until exit.",
     apply_arena_new_bytes},
    {"brisk-spill-queue", "BRISK_SPILL_QUEUE", "N", "0", "expected an integer from 0 to 1073741824",
     "A rank sends ready tasks to a global scheduler once more than N wait in its local "
     "queue; 0 = 2 per worker.",
     apply_spill_queue},
    {"brisk-arena-bytes", "BRISK_ARENA_BYTES", "SIZE", "0", "expected 0 (automatic) or a size of at least 1M",
     "Registered memory per rank that peers pull large objects from; an object that does "
     "not fit travels inside the message. 0 = 1G, or an eighth of the node's memory shared "
     "by its ranks where that is less (at least 64M); at most 256M for a window MPI allocates "
     "itself (--brisk-node-shm=off), which Open MPI fills at start, about 1 s per GiB.",
     apply_arena_bytes},
    {"brisk-node-shm", "BRISK_NODE_SHM", "on|off|unmapped", "on", "expected on, off or unmapped",
     "Ranks on one node map each other's arenas read-only: a task reads a brisk::Array made "
     "on another rank of its node in place, and other objects with one copy. off: private "
     "arenas, one-sided gets through the transport; unmapped: shared arenas that no rank "
     "maps, so reads go through the transport as between nodes (to test that path).",
     apply_node_shm},
    {"brisk-heartbeat-ms", "BRISK_HEARTBEAT_MS", "MS", "10",
     "expected an integer number of milliseconds from 1 to 60000",
     "How often a rank publishes its load to the control state.", apply_heartbeat_ms},
    {"brisk-shard-events", "BRISK_SHARD_EVENTS", "N", "256", "expected an integer from 0 to 1048576",
     "Task events each rank sends to the control state's event log per heartbeat (the rest "
     "stay in the rank's own log, which the timeline reads); 0 = none.",
     apply_shard_events},
    {"brisk-failure-timeout-ms", "BRISK_FAILURE_TIMEOUT_MS", "MS", "2000",
     "expected an integer number of milliseconds from 10 to 3600000",
     "With --brisk-transport=ucx, a rank whose heartbeats stop for this long is declared "
     "dead and its work runs elsewhere (a killed process is reported sooner by the transport).",
     apply_failure_timeout_ms},
    {"brisk-lineage-bytes", "BRISK_LINEAGE_BYTES", "SIZE", "1G", kSizeExpected,
     "With --brisk-transport=ucx, argument bytes each rank keeps alive as lineage, to make "
     "a result again when the rank holding it dies; past it the oldest lineage is dropped.",
     apply_lineage_bytes},
    {"brisk-checkpoint-dir", "BRISK_CHECKPOINT_DIR", "DIR", "brisk_checkpoints", "expected a directory path",
     "Where brisk::checkpoint::now() writes checkpoints (a file system every rank shares).",
     apply_checkpoint_dir},
    {"brisk-checkpoint-keep", "BRISK_CHECKPOINT_KEEP", "N", "3", "expected an integer from 0 to 1048576",
     "Checkpoints kept in the directory, the newest ones; 0 = all.", apply_checkpoint_keep},
    {"brisk-checkpoint-every", "BRISK_CHECKPOINT_EVERY", "SECONDS", "0", "expected an integer from 0 to 1073741824",
     "brisk::checkpoint::requested() turns true this long after the last checkpoint; 0 = only on SIGUSR1.",
     apply_checkpoint_every},
    {"brisk-checkpoint-instantiations", "BRISK_CHECKPOINT_INSTANTIATIONS", "N", "0", "expected an integer from 0 to 1073741824",
     "Writes a checkpoint before every N-th template instantiation, with the values the driver "
     "saved (save the loop position before instantiating), and before the first instantiation "
     "after SIGUSR1 or --brisk-checkpoint-every asked for one; 0 = never.",
     apply_checkpoint_instantiations},
    {"brisk-checkpoint-timeout", "BRISK_CHECKPOINT_TIMEOUT", "SECONDS", "600", "expected an integer from 0 to 1073741824",
     "With --brisk-transport=ucx, how long rank 0 waits for a live rank's part of a checkpoint "
     "before it gives that checkpoint up (brisk::checkpoint::now() throws; the previous one "
     "stays the last); 0 = no limit.",
     apply_checkpoint_timeout},
    {"brisk-restore", "BRISK_RESTORE", "latest|PATH", "\"\"", "expected latest or a checkpoint file",
     "Start from a checkpoint: latest = the newest one in --brisk-checkpoint-dir that verifies "
     "(corrupt or truncated newer ones are reported and skipped), or a file; "
     "brisk::checkpoint::load() then returns its values.",
     apply_restore},
    {"brisk-checkpoint-exit", "BRISK_CHECKPOINT_EXIT", "on|off", "off", kBoolExpected,
     "After a checkpoint that SIGUSR1 asked for, end the job with exit code 75 (for a requeue).",
     apply_checkpoint_exit},
    {"brisk-templates", "BRISK_TEMPLATES", "on|off", "on", kBoolExpected,
     "Record execution templates and replay them (off: every instantiate runs the block's body; same results).",
     apply_templates},
}};

const OptionSpec* find_spec(std::string_view name) {
  for (const auto& spec : kSpecs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string unknown_option_message(std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& spec : kSpecs) names.push_back(spec.name);
  names.push_back(kHelpName);

  // An unambiguous prefix ("--brisk-time"), else the nearest name within a typo or two.
  std::string_view best;
  for (const auto candidate : names) {
    const bool longer_than_brisk_dash = name.size() > kFlagPrefix.size() - 2;
    if (longer_than_brisk_dash && candidate.substr(0, name.size()) == name) {
      if (!best.empty()) {
        best = {};
        break;
      }
      best = candidate;
    }
  }
  if (best.empty()) {
    std::size_t best_distance = 3;  // suggest only within this distance
    for (const auto candidate : names) {
      const std::size_t d = edit_distance(name, candidate);
      if (d <= best_distance && (best.empty() || d < best_distance)) {
        best = candidate;
        best_distance = d;
      }
    }
  }

  std::string msg = "unknown option --" + std::string(name);
  if (!best.empty()) msg += " (did you mean --" + std::string(best) + "?)";
  msg += "; valid options: ";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) msg += ", ";
    msg += "--" + std::string(names[i]);
  }
  return msg;
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.substr(0, 6) != "BRISK_") continue;
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

// Appends `text` as lines of at most `width` columns (words permitting), each
// starting with `indent`.
void append_wrapped(std::string& out, std::string_view text, std::string_view indent,
                    std::size_t width) {
  std::string line(indent);
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t space = std::min(text.find(' ', pos), text.size());
    const std::string_view word = text.substr(pos, space - pos);
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent);
    }
    if (line.size() > indent.size()) line += ' ';
    line += word;
    pos = space + 1;
  }
  out += line + "\n";
}

}  // namespace

StatusOr<std::size_t> parse_size(std::string_view text) {
  std::string reason;
  const auto n = parse_size_impl(text, &reason);
  if (!n) return invalid_argument("invalid size '" + std::string(text) + "': " + reason);
  return *n;
}

StatusOr<ParsedOptions> parse_options(int argc, const char* const* argv,
                                      const std::map<std::string, std::string>* env) {
  ParsedOptions parsed;
  if (argc > 0 && argv[0] != nullptr) parsed.program_args.emplace_back(argv[0]);

  // Split argv: brisk's tokens, normalised to "--brisk-x=v", and the program's.
  // The first error is kept but splitting goes on, so that --brisk-help anywhere wins.
  std::vector<std::string> brisk_args;
  std::optional<Status> first_error;
  bool end_of_flags = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view token = argv[i] != nullptr ? argv[i] : "";
    if (end_of_flags || token.substr(0, kFlagPrefix.size()) != kFlagPrefix) {
      if (token == "--") end_of_flags = true;
      parsed.program_args.emplace_back(token);
      continue;
    }
    const auto eq = token.find('=');
    const std::string_view name = token.substr(2, eq == std::string_view::npos ? eq : eq - 2);
    if (name == kHelpName) {
      parsed.help_requested = true;
      continue;
    }
    const OptionSpec* spec = find_spec(name);
    if (spec == nullptr) {
      if (!first_error) first_error = invalid_argument(unknown_option_message(name));
      continue;
    }
    std::string value;
    const bool is_switch = spec->expected == kBoolExpected;
    if (eq != std::string_view::npos) {
      value = std::string(token.substr(eq + 1));
    } else if (is_switch && (i + 1 >= argc || argv[i + 1] == nullptr || !parse_bool(argv[i + 1]))) {
      value = "on";  // an on/off option given alone, like mpirun's --report-bindings
    } else if (i + 1 < argc && argv[i + 1] != nullptr) {
      value = argv[++i];
    } else {
      if (!first_error) {
        first_error = invalid_argument("missing value for --" + std::string(name) + ": " +
                                       spec->expected);
      }
      continue;
    }
    // CLI11 reads "--x=" as "--x" and would take the next token as the value, so an
    // empty value goes as a separate token; any other value stays attached, which
    // keeps a value such as "-3" from being read as a flag.
    if (value.empty()) {
      brisk_args.push_back("--" + std::string(name));
      brisk_args.emplace_back();
    } else {
      brisk_args.push_back("--" + std::string(name) + "=" + value);
    }
  }
  if (parsed.help_requested) return parsed;
  if (first_error) return *first_error;

  CLI::App app("brisk runtime options");
  app.set_help_flag();
  std::array<std::string, kSpecs.size()> raw;
  std::array<CLI::Option*, kSpecs.size()> cli_options{};
  for (std::size_t k = 0; k < kSpecs.size(); ++k) {
    cli_options[k] = app.add_option("--" + std::string(kSpecs[k].name), raw[k], kSpecs[k].help)
                         ->take_last()
                         ->allow_extra_args(false);
  }
  std::reverse(brisk_args.begin(), brisk_args.end());  // CLI11 takes the vector reversed
  try {
    app.parse(brisk_args);
  } catch (const CLI::ParseError& e) {
    return invalid_argument(std::string("invalid brisk options: ") + e.what());
  }

  std::map<std::string, std::string> process_env;
  if (env == nullptr) {
    process_env = process_environment();
    env = &process_env;
  }
  for (std::size_t k = 0; k < kSpecs.size(); ++k) {
    const OptionSpec& spec = kSpecs[k];
    std::string value;
    std::string source;
    if (cli_options[k]->count() > 0) {
      value = raw[k];
      source = "for --" + std::string(spec.name);
    } else if (const auto it = env->find(spec.env); it != env->end()) {
      value = it->second;
      source = std::string("in ") + spec.env;
    } else {
      continue;
    }
    if (auto reason = spec.apply(value, parsed.options)) {
      return invalid_argument("invalid value '" + value + "' " + source + ": " + *reason);
    }
  }
  return parsed;
}

TransportKind default_transport() noexcept {
  return BRISK_DEFAULT_TRANSPORT_UCX ? TransportKind::kUcx : TransportKind::kMpi;
}

std::string options_help() {
  std::string out =
      "brisk options. Each flag has an environment variable; a flag beats its variable,\n"
      "which beats the default. Give values as --brisk-x=V or --brisk-x V. Sizes take\n"
      "binary suffixes (64K = 65536, also KiB/KB, M, G, T); on/off also accepts\n"
      "true/false, 1/0 and yes/no.\n\n";
  for (const auto& spec : kSpecs) {
    std::string head = "  --" + std::string(spec.name) + "=" + spec.value_name;
    if (head.size() < 34) head.resize(34, ' ');
    out += head + " env " + spec.env + ", default " + spec.default_text + "\n";
    append_wrapped(out, spec.help, "      ", 80);
  }
  out += "  --brisk-help\n      Print this text and exit.\n";
  return out;
}

}  // namespace brisk
