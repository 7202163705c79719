// Writes the fuzzers' seed corpora (tests/fuzz/corpus/<fuzzer>/) from messages and
// files the code itself makes: control-state batches from a ControlClient and the
// notifications real ControlShards answer with, the runtime's messages from its
// encoders, a data plane's traffic to rank 1 while a controller runs data tasks and
// templates on two in-process ranks, checkpoint tables and templates from that
// controller, manifests, names, and every option that --brisk-help lists.
//
//   build/tests/fuzz/make_corpus tests/fuzz/corpus
//
// Deterministic: the same code writes the same files (the committed corpus is its
// output, plus the regression-* inputs of bugs the fuzzers found).
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "brisk/checkpoint/format.hpp"
#include "brisk/checkpoint/writer.hpp"
#include "brisk/core/detail/distributed.hpp"
#include "brisk/core/frame.hpp"
#include "brisk/core/options.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/runtime/wire.hpp"
#include "brisk/scheduler/control_state.hpp"
#include "brisk/scheduler/data_controller.hpp"
#include "brisk/scheduler/data_protocol.hpp"
#include "brisk/scheduler/data_worker.hpp"
#include "brisk/scheduler/roles.hpp"
#include "data_tasks.hpp"
#include "hdf5_util.hpp"
#include "testing/inline_executor.hpp"

namespace {

namespace fs = std::filesystem;
namespace wire = brisk::wire;
using Bytes = std::vector<std::byte>;

fs::path g_out;
int g_files = 0;

void write(const std::string& fuzzer, const std::string& name, const Bytes& bytes) {
  const fs::path dir = g_out / fuzzer;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                    static_cast<std::streamsize>(bytes.size()));
  ++g_files;
}

Bytes text(const std::string& s) {
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

Bytes prefixed(std::uint8_t selector, const Bytes& bytes) {
  Bytes out{std::byte{selector}};
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

// Splits `all` into files of at most ~3 KiB (the fuzzers' inputs are up to 4 KiB).
void write_messages(const std::string& fuzzer, const std::string& stem, const std::vector<Bytes>& records) {
  Bytes file;
  int part = 0;
  for (const Bytes& r : records) {
    if (!file.empty() && file.size() + r.size() + 4 > 3072) {
      write(fuzzer, stem + "-" + std::to_string(part++), file);
      file.clear();
    }
    wire::append_record(file, r);
  }
  if (!file.empty()) write(fuzzer, stem + "-" + std::to_string(part), file);
}

Bytes message_of(std::uint8_t target, int from, const Bytes& bytes) {
  Bytes m{std::byte{target}, std::byte{static_cast<std::uint8_t>(from)}};
  m.insert(m.end(), bytes.begin(), bytes.end());
  return m;
}

brisk::detail::RemoteCopy copy_on(int rank) {
  brisk::detail::RemoteCopy c;
  c.region.owner = brisk::Rank{rank};
  c.region.address = 0x7f0000100000;
  c.region.length = 1 << 30;
  c.region.key = {std::byte{0x11}, std::byte{0x22}, std::byte{0x33}};
  c.offset = 4096;
  c.length = 1 << 20;
  c.count = 131072;
  c.raw = true;
  return c;
}

brisk::NodeStatus status_of(int rank, std::uint64_t sequence) {
  brisk::NodeStatus s;
  s.rank = brisk::Rank{rank};
  s.total = {{"CPU", 2}, {"GPU", 1}};
  s.available = {{"CPU", 1}, {"GPU", 1}};
  s.queued = 3;
  s.running = 1;
  s.sequence = sequence;
  s.received = 17;
  return s;
}

brisk::ErrorInfo error_of() {
  brisk::ErrorInfo e;
  e.kind = brisk::ErrorKind::kTaskFailed;
  e.message = "negative argument -3";
  e.function = "step";
  e.rank = 1;
  e.attempts = 2;
  return e;
}

// ---------------------------------------------------------------------------
// Data plane: a controller and two workers in one thread, every message delivered in
// order by a pump; the traffic rank 1 receives is recorded.

struct DataPlane {
  struct Wire {
    int from, to;
    Bytes bytes;
  };
  std::deque<Wire> wire;
  brisk::testing::InlineExecutor executors[2];
  std::unique_ptr<brisk::DataWorker> workers[2];
  std::unique_ptr<brisk::DataController> controller;
  std::vector<Bytes> to_rank1;  // [target][from][bytes] for the data fuzzer

  DataPlane() {
    for (int r = 0; r < 2; ++r) {
      workers[r] = std::make_unique<brisk::DataWorker>(
          r, executors[r], [this, r](int to, Bytes m) { wire.push_back({r, to, std::move(m)}); });
    }
    controller = std::make_unique<brisk::DataController>(
        2, [this](int to, Bytes m) { wire.push_back({0, to, std::move(m)}); }, [this] { return pump(); });
  }

  int pump() {
    int n = 0;
    for (bool busy = true; busy;) {
      busy = false;
      while (!wire.empty()) {
        Wire w = std::move(wire.front());
        wire.pop_front();
        ++n;
        busy = true;
        if (!w.bytes.empty() && brisk::to_controller(std::to_integer<std::uint8_t>(w.bytes[0]))) {
          if (w.from == 1) to_rank1.push_back(message_of(1, 1, w.bytes));
          controller->handle(w.from, w.bytes);
        } else {
          if (w.to == 1) to_rank1.push_back(message_of(0, w.from, w.bytes));
          workers[w.to]->post(w.from, std::move(w.bytes));
        }
      }
      for (auto& e : executors) {
        while (e.run_one()) busy = true;
      }
    }
    return n;
  }
};

std::vector<brisk::detail::DataTaskSpec> template_tasks(std::uint32_t a, std::uint32_t b) {
  const auto fn = [](brisk::DataFunction f) { return brisk::detail::find_function(reinterpret_cast<const void*>(f))->id; };
  std::vector<brisk::detail::DataTaskSpec> tasks;
  tasks.push_back({fn(&fz_append), {{a, 0, brisk::DataMode::kReadWrite}}, brisk::to_bytes(1), -1});
  tasks.push_back({fn(&fz_copy), {{a, 1, brisk::DataMode::kWrite}, {a, 0, brisk::DataMode::kRead}}, {}, -1});
  tasks.push_back({fn(&fz_fill), {{b, 0, brisk::DataMode::kWrite}}, brisk::to_bytes(8), -1});
  return tasks;
}

// The checkpoint fuzzer's restore input: [table][templates] as records.
Bytes restore_seed(const Bytes& table, const Bytes& templates) {
  Bytes out;
  wire::append_record(out, table);
  wire::append_record(out, templates);
  return prefixed(4, out);
}

void data_seeds() {
  DataPlane p;
  brisk::DataController& c = *p.controller;
  const std::uint32_t a = c.create("a", brisk_fuzz::log_type(), {0, 1});
  const std::uint32_t b = c.create("b", brisk_fuzz::big_type(), {1});
  (void)p.pump();
  // Every seed starts with the data sets (a worker refuses commands on others).
  const std::vector<Bytes> prologue = p.to_rank1;
  const auto fn = [](brisk::DataFunction f) { return brisk::detail::find_function(reinterpret_cast<const void*>(f))->id; };
  c.submit({fn(&fz_append), {{a, 0, brisk::DataMode::kReadWrite}}, brisk::to_bytes(5), 0}, nullptr);
  c.submit({fn(&fz_append), {{a, 1, brisk::DataMode::kReadWrite}}, brisk::to_bytes(6), 1},
           std::make_shared<const Bytes>(brisk::to_bytes(100)));
  c.submit({fn(&fz_copy), {{a, 1, brisk::DataMode::kWrite}, {a, 0, brisk::DataMode::kRead}}, {}, 1}, nullptr);
  c.submit({fn(&fz_fill), {{b, 0, brisk::DataMode::kWrite}}, brisk::to_bytes(4), -1}, nullptr);
  c.sync();
  (void)c.fetch_wait(c.fetch_start(a, 1));
  write_messages("data", "commands", p.to_rank1);
  p.to_rank1 = prologue;

  const std::uint32_t t = c.install("t", template_tasks(a, b));
  c.instantiate(t, brisk::to_bytes(7));
  c.instantiate(t, brisk::to_bytes(8));
  const std::pair<std::uint32_t, int> moves[] = {{0, 1}, {2, 0}};
  c.move_tasks(t, moves);
  c.instantiate(t, brisk::to_bytes(9));
  c.sync();
  write_messages("data", "template", p.to_rank1);
  p.to_rank1 = prologue;

  const Bytes table = c.plan_checkpoint(1);
  for (int r = 0; r < 2; ++r) (void)p.workers[r]->checkpoint_objects(1);
  const Bytes templates = c.checkpoint_templates();
  // A restore: the loader serves a partition's bytes (target 2), then kRestore.
  brisk::Writer restore;
  restore(std::uint8_t{static_cast<std::uint8_t>(brisk::DataMessage::kRestore)}, a, std::uint32_t{1},
          std::string("ckpt-000001.h5"), brisk::checkpoint_object_name("a", 1));
  brisk_fuzz::Log value{{1, 2, 3}, "restored"};
  p.to_rank1.push_back(message_of(2, 0, brisk::to_bytes(value)));
  p.to_rank1.push_back(message_of(0, 0, restore.take()));
  write_messages("data", "checkpoint", p.to_rank1);

  write("checkpoint", "restore-table-and-templates", restore_seed(table, templates));
  write("checkpoint", "restore-table", restore_seed(table, {}));
  write("frame", "data-sets", prefixed(5, table));
  write("frame", "templates", prefixed(4, templates));
}

// ---------------------------------------------------------------------------
// Control state and the runtime's messages.

void control_seeds() {
  constexpr int kRanks = 3;
  auto roles = brisk::assign_roles(kRanks, kRanks, 1);
  // Rank 2's client writes to every shard.
  brisk::ControlClient client(brisk::Rank{2}, roles->shards);
  const brisk::TaskId task{{0x1111, 0x2222}};
  const brisk::ObjectId object{{0x1111, 0x2222}};
  brisk::LineageRecord lineage;
  lineage.task = task;
  lineage.function = brisk::FunctionId{0xabcdef};
  lineage.owner = brisk::Rank{2};
  lineage.executor = brisk::Rank{1};
  lineage.args = {brisk::ObjectId{{1, 2}}};
  client.add_lineage(lineage);
  client.add_object({object, brisk::Rank{1}, 4096, false});
  client.add_function({brisk::FunctionId::from_name("step", 2), "step", brisk::Rank{2}});
  for (int r = 0; r < kRanks; ++r) client.set_node_status(status_of(r, 5));
  client.add_event({brisk::Rank{2}, 0x2222, 1, 123456789, "step"});
  client.subscribe(brisk::Channel::for_object(brisk::ObjectId{{7, 7}}));
  client.subscribe(brisk::Channel::nodes());
  client.query_function(brisk::FunctionId::from_name("step", 2));
  client.query_object(object);
  client.query_lineage(task);
  std::vector<brisk::Outgoing> batches = client.flush(std::chrono::steady_clock::now(), true);
  brisk::ControlClient forgetter(brisk::Rank{2}, roles->shards);
  forgetter.forget(object);
  forgetter.add_object({brisk::ObjectId{{7, 7}}, brisk::Rank{0}, 64, false});
  forgetter.unsubscribe(brisk::Channel::nodes());
  for (auto& o : forgetter.flush(std::chrono::steady_clock::now(), true)) batches.push_back(std::move(o));

  // Batches to the shards (target 0), and the same through rank 1's control plane
  // (target 2: the batches for the shard it hosts); the shards' answers to rank 2's
  // client, as rank 1's client would take them (target 1: from their host).
  std::vector<Bytes> to_shards, to_plane, notes;
  std::vector<std::unique_ptr<brisk::ControlShard>> shards;
  for (int i = 0; i < kRanks; ++i) shards.push_back(std::make_unique<brisk::ControlShard>(i, kRanks));
  for (const auto& o : batches) {
    to_shards.push_back(message_of(0, 2, o.payload));
    if (o.to.value == 1) to_plane.push_back(message_of(2, 2, o.payload));
    auto header = brisk::parse_control_header(o.payload);
    auto out = shards[static_cast<std::size_t>(header->shard)]->handle(brisk::Rank{1}, o.payload);
    for (const auto& n : *out) {
      notes.push_back(message_of(1, o.to.value, n.payload));
      to_plane.push_back(message_of(2, o.to.value, n.payload));
    }
  }
  write_messages("control", "shard-batches", to_shards);
  write_messages("control", "notifications", notes);
  write_messages("control", "plane", to_plane);

  // The runtime's messages.
  std::vector<Bytes> runtime;
  brisk::TaskOptions options;
  options.name = "step";
  options.resources = {{"CPU", 1}, {"GPU", 0.5}};
  options.max_retries = 2;
  const wire::ActorCallHeader call{brisk::TaskId{{3, 4}}, 9, 12, 1};
  for (const bool place : {true, false}) {
    brisk::Writer w;
    wire::write_task_spec_header(w, place ? wire::kRoutePlace : wire::kRouteRun, task, 0xabcdef, 2,
                                 place ? &options : nullptr, place ? nullptr : &call, {{1, 1 << 20}, {2, 4096}});
    w(std::uint8_t{brisk::detail::kArgValue}, 42);
    runtime.push_back(message_of(3, 0, w.take()));
  }
  {
    Bytes batch;
    brisk::Writer inline_result, remote_result, error_result;
    inline_result(task.hi, task.lo, brisk::detail::kObjInline, object.hi, object.lo, std::string("value"));
    remote_result(task.hi, task.lo, brisk::detail::kObjRemote, object.hi, object.lo, 2, 1, copy_on(1));
    error_result(task.hi, task.lo, brisk::detail::kObjError, object.hi, object.lo);
    brisk::detail::write_error_info(error_result, error_of());
    for (auto* w : {&inline_result, &remote_result, &error_result}) wire::append_record(batch, w->bytes());
    runtime.push_back(message_of(4, 1, batch));
  }
  {
    Bytes batch;
    wire::append_record(batch, wire::encode_refcount({wire::kRefDrop, object, 3, wire::kAllCopies}));
    wire::append_record(batch, wire::encode_refcount({wire::kRefFree, object, 0, wire::kAllCopies}));
    wire::append_record(batch, wire::encode_refcount({wire::kRefFree, object, 0, copy_on(1).tag()}));
    runtime.push_back(message_of(5, 1, batch));
  }
  const auto copy = copy_on(2);
  const auto lost = error_of();
  brisk::Writer timeline;
  timeline(1, std::string("node7"), std::int64_t{4242}, std::uint64_t{2});
  for (int t = 0; t < 2; ++t) {
    timeline(std::string(t == 0 ? "main" : "worker 0"), t, std::uint64_t{0}, std::uint64_t{2});
    for (std::uint8_t k : {0, 3}) timeline(std::int64_t{1000 + k}, std::uint64_t{0x2222}, k, std::string("step"));
  }
  Bytes timeline_part{std::byte{wire::kCtlTimelinePart}};
  timeline_part.insert(timeline_part.end(), timeline.bytes().begin(), timeline.bytes().end());
  const std::string shard = brisk::checkpoint_shard_name(4, "a1b2", 1);
  for (const auto& m : {wire::CheckpointReport{4, "a1b2", brisk::Status(), shard,
                                               {{brisk::checkpoint_held_name(2, 0x1111, 0x2222), 4096, 0xdeadbeef}}, {}},
                        wire::CheckpointReport{4, "a1b2", brisk::unavailable("disk full"), "", {}, {0}}}) {
    Bytes r{std::byte{wire::kCtlCheckpointReport}};
    const Bytes body = wire::encode_checkpoint_report(m);
    r.insert(r.end(), body.begin(), body.end());
    runtime.push_back(message_of(6, 1, r));
  }
  for (const Bytes& m : {wire::encode_actor_moved({brisk::TaskId{{3, 4}}, 2, 1}), wire::encode_end({3, true}),
                         wire::encode_rank_death({2, "no heartbeat for 2000 ms"}),
                         wire::encode_checkpoint_request({4, "a1b2"}), wire::encode_locate(object),
                         wire::encode_located(object, &copy, nullptr), wire::encode_located(object, nullptr, &lost),
                         wire::encode_checkpoint_saved({4, "/scratch/ckpt-000004.h5", {{object, 1}, {brisk::ObjectId{{5, 6}}, 2}}}),
                         timeline_part}) {
    runtime.push_back(message_of(6, 0, m));
  }
  {
    Bytes envelope(wire::kDataHeaderBytes);
    wire::encode_data_header({2, 0, -1}, envelope.data());
    brisk::Writer hosts;
    hosts(std::uint8_t{wire::kStartEpoch}, std::vector<int>{0, 1});
    envelope.insert(envelope.end(), hosts.bytes().begin(), hosts.bytes().end());
    runtime.push_back(message_of(7, 0, envelope));
  }
  for (std::size_t i = 0; i < runtime.size(); ++i) {
    Bytes one;
    wire::append_record(one, runtime[i]);
    write("control", "runtime-" + std::to_string(i), one);
  }

  // The frame fuzzer: the same traffic as frames, and its payload types.
  write("frame", "control-frame", brisk::encode_frame(brisk::FrameKind::kControl, batches.front().payload));
  write("frame", "node-statuses", prefixed(1, brisk::to_bytes(std::vector<brisk::NodeStatus>{status_of(0, 1), status_of(1, 9)})));
  write("frame", "lineage", prefixed(2, brisk::to_bytes(lineage)));
  {
    brisk::Writer w;
    brisk::detail::write_error_info(w, error_of());
    write("frame", "error-info", prefixed(7, w.take()));
  }
  write("frame", "remote-copy", prefixed(6, brisk::to_bytes(copy_on(1))));
}

void frame_seeds() {
  using Legacy = std::tuple<std::uint64_t, std::string, std::vector<double>, std::map<std::string, std::vector<int>>,
                            std::optional<std::variant<int, std::string>>>;
  write("frame", "legacy", prefixed(0, brisk::to_bytes(Legacy{42, "step", {1.5, -2}, {{"a", {1, 2}}, {"b", {}}},
                                                               std::variant<int, std::string>("x")})));
  brisk::DataCommand compute;
  compute.kind = brisk::DataCommand::kCompute;
  compute.id = 4;
  compute.position = 9;
  compute.function = brisk::FunctionId{0xfeed};
  compute.accesses = {{0, 1, brisk::DataMode::kReadWrite}, {1, 0, brisk::DataMode::kRead}};
  compute.args = brisk::to_bytes(3);
  compute.task = 2;
  brisk::DataCommand send = compute;
  send.kind = brisk::DataCommand::kSend;
  send.accesses = {{0, 1, brisk::DataMode::kRead}};
  send.peer = 1;
  send.key = 77;
  write("frame", "data-commands", prefixed(3, brisk::to_bytes(std::vector<brisk::DataCommand>{compute, send})));
  using StdMix = std::tuple<std::vector<bool>, std::unordered_map<std::string, std::int64_t>, std::set<std::string>,
                            std::array<std::uint16_t, 3>, std::pair<float, std::string>, std::optional<Bytes>>;
  write("frame", "std-mix", prefixed(8, brisk::to_bytes(StdMix{{true, false, true}, {{"k", -1}}, {"a", "b"}, {1, 2, 3},
                                                               {0.5f, "p"}, Bytes{std::byte{1}}})));
  write("frame", "shard-entries",
        prefixed(9, brisk::to_bytes(std::vector<brisk::CheckpointShardEntry>{{"held/1/00000000000000010000000000000002", 64, 0x1234}})));
  using DatasetList = std::vector<std::tuple<std::uint8_t, std::string, std::uint64_t, std::uint32_t, std::string, std::int32_t>>;
  write("frame", "dataset-list",
        prefixed(10, brisk::to_bytes(DatasetList{{0, "alpha", 1 << 20, 0xaf00ea86, "", -1},
                                                 {0, "held/1/00000000000000010000000000000002", 64, 0x1234,
                                                  brisk::checkpoint_shard_name(3, "ab", 2), 2}})));
  using ObjectList = std::vector<std::pair<std::string, Bytes>>;
  write("frame", "object-list", prefixed(11, brisk::to_bytes(ObjectList{{"data/a/0", brisk::to_bytes(7)}})));
  // A task batch as a whole frame.
  Bytes batch;
  brisk::Writer spec;
  wire::write_task_spec_header(spec, wire::kRouteRun, brisk::TaskId{{1, 2}}, 5, 0, nullptr, nullptr, {});
  spec(std::uint8_t{brisk::detail::kArgValue}, 42);
  wire::append_record(batch, spec.bytes());
  wire::append_record(batch, spec.bytes());
  write("frame", "task-frame", brisk::encode_frame(brisk::FrameKind::kTask, batch));
}

// ---------------------------------------------------------------------------
// Options and checkpoint names.

void options_seeds() {
  // Every flag --brisk-help lists, with its default, as a flag and as a variable.
  const std::regex line(R"(^  (--brisk-[a-z0-9-]+)=\S+\s+env (BRISK_[A-Z0-9_]+), default (.*)$)");
  std::istringstream help(brisk::options_help());
  std::string flags, vars;
  int n = 0;
  for (std::string l; std::getline(help, l);) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) continue;
    std::string value = m[3];
    if (value == "\"\"") value.clear();
    flags += m[1].str() + "=" + value + "\n";
    vars += m[2].str() + "=" + value + "\n";
    if (++n % 8 == 0) {
      write("options", "flags-" + std::to_string(n / 8), text(flags));
      write("options", "env-" + std::to_string(n / 8), text(vars));
      flags.clear();
      vars.clear();
    }
  }
  if (!flags.empty()) {
    write("options", "flags-last", text(flags));
    write("options", "env-last", text(vars));
  }
  write("options", "mixed", text("--brisk-workers\n4\nprogram-arg\n--brisk-idle=sleep\n--\n--brisk-not-ours\n"
                                 "BRISK_STORE_BYTES=64MiB\nBRISK_RESOURCES=GPU:1,disk:2"));
  write("options", "fault-inject",
        text("BRISK_FAULT_INJECT=kill:1:100-200:7,kill-at-task:2:3-9,kill-in-checkpoint:1:1-1,"
             "kill-after-checkpoint-report:2:1-2:3,stall-in-checkpoint:1:1-1,kill-in-fill:1:1-4,checkpoint-stall"));
  write("options", "sizes", text("64K\n1MiB\n3G\n4096B\n0\n18446744073709551615\n1.5M"));
}

void checkpoint_seeds() {
  write("checkpoint", "held-name", prefixed(0, text(brisk::checkpoint_held_name(3, 0x0123456789abcdefULL, 42))));
  write("checkpoint", "file-names", prefixed(1, text(brisk::checkpoint_file_name(42))));
  write("checkpoint", "tmp-name", prefixed(1, text(brisk::checkpoint_file_name(1234567) + ".tmp-1f2e-3d4c")));
  write("checkpoint", "shard-name", prefixed(1, text(brisk::checkpoint_shard_name(42, "a1b2c3", 17))));
  write("checkpoint", "dataset-path",
        prefixed(2, text(brisk::detail::ckpt::dataset_path(brisk::CheckpointSection::kObjects, "part/1 100%\t."))));
  write("checkpoint", "dataset-path-driver", prefixed(2, text("/driver/%2E")));
  std::vector<brisk::detail::ckpt::ManifestRecord> records{
      {"/objects/alpha", 1 << 20, 0xaf00ea86, 0}, {"/objects/part%2F1", 102400, 0xd94466d9, 1},
      {"/driver/step", 4, 0xd6611f2b, 0}, {"/meta/lineage", 100, 0x448c0b12, 0}};
  const std::size_t path_bytes = 18;
  Bytes manifest{std::byte{path_bytes - 1}, std::byte{0}};
  const Bytes packed = brisk::detail::ckpt::pack_manifest(records, path_bytes);
  manifest.insert(manifest.end(), packed.begin(), packed.end());
  write("checkpoint", "manifest", prefixed(3, manifest));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus DIR (writes DIR/<fuzzer>/...)\n");
    return 2;
  }
  g_out = argv[1];
  frame_seeds();
  control_seeds();
  data_seeds();
  options_seeds();
  checkpoint_seeds();
  std::printf("make_corpus: %d files under %s\n", g_files, g_out.c_str());
  return 0;
}
