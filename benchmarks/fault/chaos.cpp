// Chaos runs: a random job, deterministic in its seed, whose every result must come
// out the same whether or not a rank dies while it runs (ucx transport).
//
//   slurm/brisk-launch --keep-going --np=3 --transport=ucx -- build/benchmarks/fault/brisk_chaos --seed=7
//
// benchmarks/fault/chaos.py runs it once without a fault and once with a rank killed
// (SIGKILL) or stopped (SIGSTOP) at a random moment, and compares the two.
//
// The job is a sequence of steps, each a graph step or a data step:
//  - graph step: a random DAG of --nodes nodes, each reading 0-4 earlier results:
//    plain tasks; nested tasks (they submit children, some of them nested or large or
//    chained, and get their results); calls of actors made by the driver
//    (max_restarts=1, replay_calls: deterministic state); large results (> 64 KiB, so
//    that other ranks pull them one-sided) as std::vector and brisk::Array, made by
//    tasks, by actor calls and by put on rank 0. Now and then the driver gets an
//    earlier result before it goes on. At the end it gets every result.
//  Some nodes also read anchors: large vectors made at the driver's start and kept to
//  its end, so that the checkpoints hold the copies other ranks keep of them and a
//  holder's death reads them back from there.
//  - data step: a DataSet of partitions over brisk::data_ranks(), updated by a
//    recorded execution template (two sweeps reading the neighbours) a few times,
//    with checkpoints between instantiations; then every partition is fetched.
// After some steps the driver writes a checkpoint. A rank lost while data sets exist
// rolls the job back (README, failure semantics): the driver runs again from the last
// checkpoint, so it keeps its position and the digests so far in the checkpoint.
//
// Every result that the job can recover by design is recoverable here: the driver
// (rank 0, never the victim) owns every top-level result and every put; no task
// returns a Ref; actors are called only by the driver (whose calls are replayed).
// So ANY lost or wrong result is a bug. Task bodies are pure (a task run twice gives
// the same result) and take --work-us to run, so that a fault lands mid-graph.
//
// The driver computes every expected value itself, without brisk, and prints at the
// end one JSON line: {"chaos":"result", the overall digest and the expected one, per
// step its kind, digest and expected digest, and over every step that ended in any
// run of the driver (a step that a rollback makes run again was checked when it
// first ended) the steps with another digest, the results lost, the task errors
// and the corrupt large values read; rollbacks, seconds, the ranks found lost, and
// what the surviving ranks counted: task bodies run (per kind), tasks sent again
// because their rank died, results made again (from lineage or by an actor's
// replay) or read back from a checkpoint; actors found rebuilt elsewhere}. At its
// first start it prints {"chaos":"start", "pids":[...]} with every rank's process
// id (for the runner to signal one), and {"chaos":"step",...} after each step.
//
// --kill-rank=R --kill-at-step=K puts the fault at a fixed point instead (regression
// tests): once every result of graph step K is complete, rank R is killed, then the
// results are read. --kill-actor --kill-at-step=K kills, the same way, the rank of an
// actor that made large results, in the first graph step from K on that has one off
// rank 0 (where actors land depends on the ranks' loads).
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "brisk/brisk.hpp"
#include "brisk/core/data.hpp"
#include "brisk/core/detail/context.hpp"
#include "brisk/runtime/cluster.hpp"

namespace {

using u64 = std::uint64_t;
using Words = std::vector<u64>;
using ArrayWords = brisk::Array<u64>;
using Clock = std::chrono::steady_clock;

u64 mix(u64 a, u64 b) {
  u64 z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Task bodies run on every rank and count their runs there (reported at the end by
// the surviving ranks): a body run twice counts twice.
enum Body { kPlain, kNested, kChild, kBig, kArray, kActorCall, kActorBuild, kDataTask, kBodies };
constexpr const char* kBodyNames[kBodies] = {"plain", "nested", "child", "vector", "array", "actor_call", "actor_build", "data_task"};
std::atomic<u64> g_runs[kBodies];

void count(Body b) { g_runs[b].fetch_add(1, std::memory_order_relaxed); }
void work(std::uint32_t us) {
  if (us) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// What a node does, fixed by the seed.
struct Spec {
  u64 salt = 0;
  std::uint32_t work_us = 0;
  std::uint32_t words = 0;  // the length of a large result (words of 8 bytes)
  std::uint16_t depth = 0;  // nested tasks: levels of children below
  std::uint16_t fan = 0;    // nested tasks: children per level
};

// A large value: word 0 is its digest, the others derive from it; every reader checks
// them all, so a torn or stale copy is caught where it is read.
template <class V>
void spread_into(V& out, u64 v) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = v ^ (i * 0x9E3779B97F4A7C15ULL);
}
Words spread(u64 v, std::size_t words) {
  Words out(words);
  spread_into(out, v);
  return out;
}
ArrayWords spread_array(u64 v, std::size_t words) {
  auto out = ArrayWords::for_overwrite(words);
  spread_into(out, v);
  return out;
}
template <class V>
u64 digest_of(const V& v) {
  if (v.size() < 2) throw std::runtime_error("a large value of " + std::to_string(v.size()) + " words");
  for (std::size_t i = 1; i < v.size(); ++i) {
    if (v[i] != (v[0] ^ (i * 0x9E3779B97F4A7C15ULL))) {
      throw std::runtime_error("a corrupt large value: word " + std::to_string(i) + " of " + std::to_string(v.size()));
    }
  }
  return mix(v[0], v.size());
}

// Every node's value: its salt folded with its inputs' digests, by kind of input.
u64 fold(const Spec& s, const std::vector<u64>& a, const std::vector<u64>& b, const std::vector<u64>& c) {
  u64 h = s.salt;
  for (u64 x : a) h = mix(h, x);
  for (u64 x : b) h = mix(h ^ 1, x);
  for (u64 x : c) h = mix(h ^ 2, x);
  return h;
}
std::vector<u64> digests(const std::vector<Words>& v) {
  std::vector<u64> out;
  for (const auto& x : v) out.push_back(digest_of(x));
  return out;
}
std::vector<u64> digests(const std::vector<ArrayWords>& v) {
  std::vector<u64> out;
  for (const auto& x : v) out.push_back(digest_of(x));
  return out;
}

// ---------------------------------------------------------------------------
// Task functions (every one pure).

u64 plain(Spec s, std::vector<u64> a, std::vector<Words> b, std::vector<ArrayWords> c) {
  count(kPlain);
  work(s.work_us);
  return fold(s, a, digests(b), digests(c));
}
BRISK_REMOTE(plain);

Words big(Spec s, std::vector<u64> a, std::vector<Words> b, std::vector<ArrayWords> c) {
  count(kBig);
  work(s.work_us);
  return spread(fold(s, a, digests(b), digests(c)), s.words);
}
BRISK_REMOTE(big);

ArrayWords big_array(Spec s, std::vector<u64> a, std::vector<Words> b, std::vector<ArrayWords> c) {
  count(kArray);
  work(s.work_us);
  return spread_array(fold(s, a, digests(b), digests(c)), s.words);
}
BRISK_REMOTE(big_array);

// A nested task's children: child 0 plain, then in turn a large one, a nested one
// (while depth is left, else plain), and a plain one that reads child 0's result.
enum class ChildKind { kPlain, kBig, kNested, kChained };
ChildKind child_kind(std::size_t i, const Spec& parent) {
  if (i == 0) return ChildKind::kPlain;
  switch (i % 3) {
    case 1: return ChildKind::kBig;
    case 2: return parent.depth > 1 ? ChildKind::kNested : ChildKind::kPlain;
    default: return ChildKind::kChained;
  }
}
Spec child_spec(const Spec& parent, u64 h, std::size_t i) {
  Spec c = parent;
  c.salt = mix(h, i + 1);
  c.work_us = parent.work_us / 2 + static_cast<std::uint32_t>(c.salt % (parent.work_us / 2 + 1));
  c.depth = static_cast<std::uint16_t>(parent.depth - 1);
  return c;
}

u64 nested_local(const Spec& s, u64 h);
u64 nested_remote(const Spec& s, u64 h);

u64 child(Spec s, std::vector<u64> a) {
  count(kChild);
  work(s.work_us);
  return fold(s, a, {}, {});
}
BRISK_REMOTE(child);

Words child_big(Spec s) {
  count(kChild);
  work(s.work_us);
  return spread(fold(s, {}, {}, {}), s.words);
}
BRISK_REMOTE(child_big);

u64 nested(Spec s, std::vector<u64> a, std::vector<Words> b, std::vector<ArrayWords> c) {
  count(kNested);
  work(s.work_us / 2);
  return nested_remote(s, fold(s, a, digests(b), digests(c)));
}
BRISK_REMOTE(nested);

u64 nested_child(Spec s) {
  count(kChild);
  return nested_remote(s, fold(s, {}, {}, {}));
}
BRISK_REMOTE(nested_child);

// The same children without brisk, for the expected values.
u64 nested_local(const Spec& s, u64 h) {
  std::vector<u64> d;
  for (std::size_t i = 0; i < s.fan; ++i) {
    const Spec c = child_spec(s, h, i);
    switch (child_kind(i, s)) {
      case ChildKind::kPlain: d.push_back(fold(c, {}, {}, {})); break;
      case ChildKind::kBig: d.push_back(mix(fold(c, {}, {}, {}), c.words)); break;
      case ChildKind::kNested: d.push_back(nested_local(c, fold(c, {}, {}, {}))); break;
      case ChildKind::kChained: d.push_back(fold(c, {d[0]}, {}, {})); break;
    }
  }
  return fold(Spec{.salt = h}, d, {}, {});
}

u64 nested_remote(const Spec& s, u64 h) {
  std::vector<std::variant<brisk::Ref<u64>, brisk::Ref<Words>>> kids;
  for (std::size_t i = 0; i < s.fan; ++i) {
    const Spec c = child_spec(s, h, i);
    switch (child_kind(i, s)) {
      case ChildKind::kPlain: kids.emplace_back(brisk::remote(child, c, std::vector<u64>{})); break;
      case ChildKind::kBig: kids.emplace_back(brisk::remote(child_big, c)); break;
      case ChildKind::kNested: kids.emplace_back(brisk::remote(nested_child, c)); break;
      case ChildKind::kChained:
        kids.emplace_back(brisk::remote(child, c, std::vector<brisk::Ref<u64>>{std::get<0>(kids[0])}));
        break;
    }
  }
  std::vector<u64> d;
  for (auto& k : kids) {
    if (auto* r = std::get_if<brisk::Ref<u64>>(&k)) {
      d.push_back(brisk::get(*r));
    } else {
      d.push_back(digest_of(brisk::get(std::get<brisk::Ref<Words>>(k))));
    }
  }
  return fold(Spec{.salt = h}, d, {}, {});
}

// An actor with a deterministic state; the driver alone calls it, so that its calls
// are replayed into a rebuilt instance.
struct Accumulator {
  explicit Accumulator(u64 seed) : state(seed) { count(kActorBuild); }
  u64 absorb(Spec s, std::vector<u64> a, std::vector<Words> b, std::vector<ArrayWords> c) {
    count(kActorCall);
    work(s.work_us);
    return state = mix(state, fold(s, a, digests(b), digests(c)));
  }
  Words expand(Spec s, std::vector<u64> a, std::vector<Words> b, std::vector<ArrayWords> c) {
    count(kActorCall);
    work(s.work_us);
    state = mix(state, fold(s, a, digests(b), digests(c)));
    return spread(state, s.words);
  }
  u64 state;
};
BRISK_REMOTE(Accumulator::absorb);
BRISK_REMOTE(Accumulator::expand);

// What a rank reports at the end.
struct RankReport {
  int rank = 0;
  u64 runs[kBodies] = {};
  u64 tasks_replayed = 0, objects_rebuilt = 0, objects_restored = 0, objects_lost = 0;
};

brisk::Cluster* cluster() { return dynamic_cast<brisk::Cluster*>(brisk::detail::context()->distributed); }

RankReport report() {
  RankReport r;
  r.rank = brisk::rank();
  for (int b = 0; b < kBodies; ++b) r.runs[b] = g_runs[b].load();
  if (brisk::Cluster* c = cluster()) {
    const auto s = c->stats();
    r.tasks_replayed = s.tasks_replayed;
    r.objects_rebuilt = s.objects_rebuilt;
    r.objects_restored = s.objects_restored;
    r.objects_lost = s.objects_lost;
  }
  return r;
}
BRISK_REMOTE(report);

int pid() { return static_cast<int>(getpid()); }
BRISK_REMOTE(pid);

// ---------------------------------------------------------------------------
// Data step: a field of partitions, two sweeps per instantiation.

using Field = std::vector<double>;
struct DataParams {
  int step = 0, iter = 0;
  std::uint32_t work_us = 0;
};

void field_init(brisk::DataTask& t) {
  const auto [p, words] = t.args<std::pair<int, std::uint32_t>>();
  Field& x = t.write<Field>(0);
  x.resize(words);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1.0 + p + static_cast<double>(i % 97) / 97.0;
}
BRISK_DATA_TASK(field_init);

void relax_values(Field& x, const Field& right, const DataParams& q) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = x[i] * 0.75 + right[(i + 1) % right.size()] * 0.25 + (q.step * 31 + q.iter) * 1e-3;
  }
}
void smooth_values(Field& x, const Field& left, const DataParams& q) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = x[i] * 0.5 + left[i] * 0.5 - q.iter * 1e-4;
}

void relax(brisk::DataTask& t) {
  count(kDataTask);
  const DataParams& q = t.params<DataParams>();
  work(q.work_us);
  const Field& right = t.read<Field>(1);
  relax_values(t.write<Field>(0), right, q);
}
BRISK_DATA_TASK(relax);

void smooth(brisk::DataTask& t) {
  count(kDataTask);
  const DataParams& q = t.params<DataParams>();
  work(q.work_us / 2);
  const Field& left = t.read<Field>(1);
  smooth_values(t.write<Field>(0), left, q);
}
BRISK_DATA_TASK(smooth);

u64 field_digest(const std::vector<Field>& parts) {
  u64 h = parts.size();
  for (const Field& f : parts) {
    h = mix(h, f.size());
    for (double v : f) {
      u64 bits;
      std::memcpy(&bits, &v, sizeof bits);
      h = mix(h, bits);
    }
  }
  return h;
}

// ---------------------------------------------------------------------------
// The plan, from the seed.

struct Settings {
  u64 seed = 1;
  int steps = 8;
  int nodes = 200;
  std::uint32_t work_min_us = 300, work_max_us = 4000;
  int parts = 6;
  int anchors = 12;
  std::uint32_t big_min_words = 8200, big_max_words = 24000;  // 64.1-187.5 KiB
  bool quiet = false;
  // A fault at a fixed point instead of the runner's signal (regression tests): once
  // every result of graph step kill_at_step is complete, rank kill_rank is killed,
  // then the results are read.
  int kill_rank = -1, kill_at_step = -1;
  bool kill_actor = false;  // the victim: the rank of an actor that made large results
};

enum class NodeKind { kPlain, kNested, kBig, kArray, kActor, kActorBig, kPut };
const char* name(NodeKind k) {
  switch (k) {
    case NodeKind::kPlain: return "plain";
    case NodeKind::kNested: return "nested";
    case NodeKind::kBig: return "vector";
    case NodeKind::kArray: return "array";
    case NodeKind::kActor: return "actor";
    case NodeKind::kActorBig: return "actor_vector";
    case NodeKind::kPut: return "put";
  }
  return "?";
}
enum class Type { kScalar, kWords, kArray };
Type type_of(NodeKind k) {
  switch (k) {
    case NodeKind::kBig:
    case NodeKind::kActorBig:
    case NodeKind::kPut: return Type::kWords;
    case NodeKind::kArray: return Type::kArray;
    default: return Type::kScalar;
  }
}

struct Node {
  NodeKind kind = NodeKind::kPlain;
  Spec spec;
  std::vector<int> inputs;  // earlier nodes
  std::vector<int> anchors;  // anchors it reads too (after its large vector inputs)
  int actor = -1;
  bool get_after = false;  // the driver gets this node's result before it submits the next
};

struct Step {
  bool data = false;
  bool checkpoint_after = false;
  // graph step
  std::vector<Node> nodes;
  int actors = 0;
  std::vector<u64> actor_seeds;
  std::vector<int> get_order;
  // data step
  int iters = 0;
  std::uint32_t work_us = 0;
  std::vector<bool> checkpoint_at;  // after iteration i
};

struct Plan {
  std::uint32_t field_words = 0;
  // Large vectors made at the driver's start and kept until its end: nodes of any
  // graph step read them, and the checkpoints hold the copies that live on other
  // ranks (a holder's death reads them back from there).
  std::vector<Spec> anchors;
  std::vector<Step> steps;
};

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(u64 seed) : gen(seed) {}
  u64 below(u64 n) { return std::uniform_int_distribution<u64>(0, n - 1)(gen); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(gen) < p; }
  std::uint32_t work(const Settings& s) {  // log-uniform in [min, max]
    const double lo = std::log(std::max<double>(1, s.work_min_us)), hi = std::log(std::max<double>(1, s.work_max_us));
    return static_cast<std::uint32_t>(std::exp(std::uniform_real_distribution<double>(lo, std::max(lo, hi))(gen)));
  }
};

Plan make_plan(const Settings& s) {
  Rng rng(mix(s.seed, 0xC4A05));
  Plan plan;
  const std::uint32_t sizes[] = {512, 4096, 12000};  // 4, 32 and 94 KiB partitions
  plan.field_words = sizes[rng.below(3)];
  const int first_data = static_cast<int>(rng.below(static_cast<u64>(std::max(1, s.steps))));
  for (int i = 0; i < s.steps; ++i) {
    Step st;
    st.data = i == first_data || (s.steps > 2 && i != (first_data + 1) % s.steps && rng.chance(0.35));
    st.checkpoint_after = rng.chance(0.5);
    if (st.data) {
      st.iters = 4 + static_cast<int>(rng.below(9));
      st.work_us = rng.work(s);
      for (int it = 0; it < st.iters; ++it) st.checkpoint_at.push_back(rng.chance(0.3));
    } else {
      st.actors = 1 + static_cast<int>(rng.below(3));
      for (int a = 0; a < st.actors; ++a) st.actor_seeds.push_back(rng.gen());
      for (int j = 0; j < s.nodes; ++j) {
        Node n;
        const u64 roll = rng.below(100);
        n.kind = roll < 34 ? NodeKind::kPlain
                 : roll < 48 ? NodeKind::kNested
                 : roll < 60 ? NodeKind::kBig
                 : roll < 72 ? NodeKind::kArray
                 : roll < 85 ? NodeKind::kActor
                 : roll < 93 ? NodeKind::kActorBig
                             : NodeKind::kPut;
        n.spec.salt = rng.gen();
        n.spec.work_us = rng.work(s);
        n.spec.words = s.big_min_words + static_cast<std::uint32_t>(rng.below(s.big_max_words - s.big_min_words + 1));
        if (n.kind == NodeKind::kNested) {
          n.spec.depth = static_cast<std::uint16_t>(1 + rng.below(2));
          n.spec.fan = static_cast<std::uint16_t>(2 + rng.below(3));
        }
        if (n.kind == NodeKind::kActor || n.kind == NodeKind::kActorBig) n.actor = static_cast<int>(rng.below(st.actors));
        if (n.kind != NodeKind::kPut && j > 0) {
          const int fan_in = static_cast<int>(rng.below(5));
          for (int k = 0; k < fan_in; ++k) {
            // Mostly recent results, sometimes any earlier one.
            const int window = rng.chance(0.7) ? std::min(j, 12) : j;
            n.inputs.push_back(j - 1 - static_cast<int>(rng.below(static_cast<u64>(window))));
          }
        }
        n.get_after = rng.chance(0.06);
        st.nodes.push_back(std::move(n));
      }
      for (int j = 0; j < s.nodes; ++j) st.get_order.push_back(j);
      std::shuffle(st.get_order.begin(), st.get_order.end(), rng.gen);
    }
    plan.steps.push_back(std::move(st));
  }
  // Drawn apart, so that the anchors leave the rest of the plan as it was.
  Rng arng(mix(s.seed, 0xA11C0));
  for (int a = 0; a < s.anchors; ++a) {
    Spec sp;
    sp.salt = arng.gen();
    sp.work_us = arng.work(s);
    sp.words = s.big_min_words + static_cast<std::uint32_t>(arng.below(s.big_max_words - s.big_min_words + 1));
    plan.anchors.push_back(sp);
  }
  for (Step& st : plan.steps) {
    for (Node& n : st.nodes) {
      if (s.anchors > 0 && n.kind != NodeKind::kPut && arng.chance(0.12)) n.anchors.push_back(static_cast<int>(arng.below(s.anchors)));
    }
  }
  return plan;
}

// ---------------------------------------------------------------------------
// Expected digests, without brisk.

struct Expected {
  std::vector<u64> steps;
  u64 anchors = 0;
};

u64 anchor_digest(const Spec& a) { return mix(fold(a, {}, {}, {}), a.words); }

Expected expect(const Settings& s, const Plan& plan) {
  Expected e;
  for (const Spec& a : plan.anchors) e.anchors = mix(e.anchors, anchor_digest(a));
  std::vector<Field> field(static_cast<std::size_t>(s.parts));
  for (int p = 0; p < s.parts; ++p) {
    Field& x = field[static_cast<std::size_t>(p)];
    x.resize(plan.field_words);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1.0 + p + static_cast<double>(i % 97) / 97.0;
  }
  for (std::size_t si = 0; si < plan.steps.size(); ++si) {
    const Step& st = plan.steps[si];
    if (st.data) {
      const auto P = field.size();
      for (int it = 0; it < st.iters; ++it) {
        const DataParams q{static_cast<int>(si), it, st.work_us};
        for (std::size_t p = 0; p < P; ++p) relax_values(field[p], field[(p + 1) % P], q);
        for (std::size_t p = 0; p < P; ++p) smooth_values(field[p], field[(p + P - 1) % P], q);
      }
      e.steps.push_back(field_digest(field));
      continue;
    }
    std::vector<u64> state = st.actor_seeds, d(st.nodes.size());
    for (std::size_t j = 0; j < st.nodes.size(); ++j) {
      const Node& n = st.nodes[j];
      std::vector<u64> in[3];
      for (int i : n.inputs) in[static_cast<int>(type_of(st.nodes[static_cast<std::size_t>(i)].kind))].push_back(d[static_cast<std::size_t>(i)]);
      for (int a : n.anchors) in[1].push_back(anchor_digest(plan.anchors[static_cast<std::size_t>(a)]));
      const u64 h = fold(n.spec, in[0], in[1], in[2]);
      switch (n.kind) {
        case NodeKind::kPlain: d[j] = h; break;
        case NodeKind::kNested: d[j] = nested_local(n.spec, h); break;
        case NodeKind::kBig:
        case NodeKind::kArray:
        case NodeKind::kPut: d[j] = mix(h, n.spec.words); break;
        case NodeKind::kActor:
        case NodeKind::kActorBig: {
          u64& a = state[static_cast<std::size_t>(n.actor)];
          a = mix(a, h);
          d[j] = n.kind == NodeKind::kActor ? a : mix(a, n.spec.words);
          break;
        }
      }
    }
    u64 h = 0;
    for (u64 x : d) h = mix(h, x);
    e.steps.push_back(h);
  }
  return e;
}

// ---------------------------------------------------------------------------
// The driver.

// The driver's position and the digests so far: saved in every checkpoint, loaded
// when the driver runs again after a rollback.
struct Progress {
  int step = 0;
  int iter = 0;  // within a data step
  std::vector<u64> digests;
  template <class A>
  void serialize(A& ar) {
    ar(step, iter, digests);
  }
};

// Every step that ended, in every run of the driver: a step that a rollback makes
// run again (its digest is not kept) was still checked when it first ended, so a
// result made again from lineage before the rollback counts.
struct Tally {
  int steps = 0, wrong_steps = 0, lost = 0, errors = 0, corrupt = 0;
  int actors_moved = 0;
  std::string first_error;
};
Tally g_tally;

struct Failures {
  int lost = 0, errors = 0, corrupt = 0;
  int actors_moved = 0;  // actors of the step found on another rank at its end (rebuilt)
  std::string first;
  void add(const brisk::Error& e, bool is_lost, const std::string& where = "") {
    // A task that read a corrupt large value failed with that message.
    const bool bad_value = std::string_view(e.what()).find("a corrupt large value") != std::string_view::npos;
    (is_lost ? lost : bad_value ? corrupt : errors) += 1;
    if (first.empty()) first = where + e.what();
  }
};

using AnyRef = std::variant<brisk::Ref<u64>, brisk::Ref<Words>, brisk::Ref<ArrayWords>>;

u64 digest_of_ref(const AnyRef& r) {
  if (auto* a = std::get_if<brisk::Ref<u64>>(&r)) return brisk::get(*a);
  if (auto* b = std::get_if<brisk::Ref<Words>>(&r)) return digest_of(brisk::get(*b));
  return digest_of(brisk::get(std::get<brisk::Ref<ArrayWords>>(r)));
}

// Gets a node's digest; a lost or failed result counts and gives a marker digest.
u64 read_node(const AnyRef& r, Failures& f, const std::string& where) {
  try {
    return digest_of_ref(r);
  } catch (const brisk::ObjectLostError& e) {
    f.add(e, true, where);
  } catch (const brisk::TaskError& e) {
    f.add(e, e.kind() == brisk::ErrorKind::kObjectLost || e.kind() == brisk::ErrorKind::kRankLost, where);
  } catch (const std::exception& e) {  // a corrupt large value read here
    f.add(brisk::Error(e.what()), false, where);
  }
  return 0xBADBADBADULL;
}

int die() {
  raise(SIGKILL);
  return 0;
}
BRISK_REMOTE(die);

// Waits until every result is complete, wherever it is, without pulling it here.
void wait_all(const std::vector<AnyRef>& refs) {
  std::vector<brisk::Ref<u64>> a;
  std::vector<brisk::Ref<Words>> b;
  std::vector<brisk::Ref<ArrayWords>> c;
  for (const auto& r : refs) {
    if (auto* x = std::get_if<brisk::Ref<u64>>(&r)) a.push_back(*x);
    if (auto* x = std::get_if<brisk::Ref<Words>>(&r)) b.push_back(*x);
    if (auto* x = std::get_if<brisk::Ref<ArrayWords>>(&r)) c.push_back(*x);
  }
  (void)brisk::wait(a);
  (void)brisk::wait(b);
  (void)brisk::wait(c);
}

bool g_killed = false;  // --kill-rank, --kill-actor: done (once, whatever rollbacks follow)
constexpr int kKillActor = -2;  // run_graph's victim: an actor's rank (--kill-actor)

// Kills `rank` (SIGKILL, from a task pinned there) and waits until this rank knows.
void kill_rank(int rank) {
  (void)brisk::task(die).resources({{"rank" + std::to_string(rank), 1}}).remote();
  brisk::Cluster* c = cluster();
  while (c && !c->rank_lost(brisk::Rank{rank})) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

u64 run_graph(const Step& st, const std::vector<brisk::Ref<Words>>& anchors, Failures& f, int kill = -1) {
  std::vector<brisk::Actor<Accumulator>> actors;
  for (u64 seed : st.actor_seeds) {
    actors.push_back(brisk::actor<Accumulator>(brisk::ActorOptions{.name = "accumulator", .max_restarts = 1, .replay_calls = true}, seed));
  }
  // Where each actor was built (blocks until it is): found elsewhere at the end, it
  // was rebuilt.
  const auto rank_of = [&f](const brisk::Actor<Accumulator>& a) {
    try {
      return a.rank();
    } catch (const brisk::Error& e) {
      f.add(e, false);
      return -1;
    }
  };
  std::vector<int> built_on;
  for (const auto& a : actors) built_on.push_back(rank_of(a));
  std::vector<AnyRef> refs;
  std::vector<std::optional<u64>> early(st.nodes.size());
  const auto where = [&st](std::size_t j) {
    return "node " + std::to_string(j) + " (" + name(st.nodes[j].kind) + "): ";
  };
  for (std::size_t j = 0; j < st.nodes.size(); ++j) {
    const Node& n = st.nodes[j];
    std::vector<brisk::Ref<u64>> a;
    std::vector<brisk::Ref<Words>> b;
    std::vector<brisk::Ref<ArrayWords>> c;
    for (int i : n.inputs) {
      const AnyRef& in = refs[static_cast<std::size_t>(i)];
      if (auto* x = std::get_if<brisk::Ref<u64>>(&in)) a.push_back(*x);
      if (auto* x = std::get_if<brisk::Ref<Words>>(&in)) b.push_back(*x);
      if (auto* x = std::get_if<brisk::Ref<ArrayWords>>(&in)) c.push_back(*x);
    }
    for (int i : n.anchors) b.push_back(anchors[static_cast<std::size_t>(i)]);
    switch (n.kind) {
      case NodeKind::kPlain: refs.emplace_back(brisk::remote(plain, n.spec, a, b, c)); break;
      case NodeKind::kNested: refs.emplace_back(brisk::remote(nested, n.spec, a, b, c)); break;
      case NodeKind::kBig: refs.emplace_back(brisk::remote(big, n.spec, a, b, c)); break;
      case NodeKind::kArray: refs.emplace_back(brisk::remote(big_array, n.spec, a, b, c)); break;
      case NodeKind::kPut: refs.emplace_back(brisk::put(spread(fold(n.spec, {}, {}, {}), n.spec.words))); break;
      case NodeKind::kActor:
        refs.emplace_back(actors[static_cast<std::size_t>(n.actor)].call(&Accumulator::absorb, n.spec, a, b, c));
        break;
      case NodeKind::kActorBig:
        refs.emplace_back(actors[static_cast<std::size_t>(n.actor)].call(&Accumulator::expand, n.spec, a, b, c));
        break;
    }
    if (n.get_after) early[j] = read_node(refs.back(), f, where(j));
  }
  if (kill == kKillActor) {  // the first actor off rank 0 that made a large result
    for (std::size_t j = 0; j < st.nodes.size() && kill == kKillActor; ++j) {
      const Node& n = st.nodes[j];
      if (n.kind != NodeKind::kActorBig) continue;
      const int r = rank_of(actors[static_cast<std::size_t>(n.actor)]);
      if (r > 0) kill = r;
    }
  }
  if (kill >= 0) {
    wait_all(refs);
    kill_rank(kill);
    g_killed = true;
  }
  std::vector<u64> d(st.nodes.size());
  for (int j : st.get_order) {
    const auto u = static_cast<std::size_t>(j);
    const u64 v = read_node(refs[u], f, where(j));
    if (early[u] && *early[u] != v) f.add(brisk::Error("node " + std::to_string(j) + " read twice gave two values"), false);
    d[u] = v;
  }
  for (std::size_t a = 0; a < actors.size(); ++a) f.actors_moved += rank_of(actors[a]) != built_on[a];
  u64 h = 0;
  for (u64 x : d) h = mix(h, x);
  return h;
}

std::string hex(u64 v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void print_json(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

int g_driver_runs = 0;
Clock::time_point g_start;

int drive(const Settings& s) {
  const bool first_run = g_driver_runs++ == 0;
  brisk::Cluster* c = cluster();
  if (first_run) {
    g_start = Clock::now();
    nlohmann::ordered_json pids = nlohmann::ordered_json::array();
    for (int r = 0; r < brisk::size(); ++r) {
      pids.push_back(brisk::get(brisk::task(pid).resources({{"rank" + std::to_string(r), 1}}).remote()));
    }
    print_json({{"chaos", "start"}, {"seed", s.seed}, {"np", brisk::size()}, {"pids", pids}});
  }
  const Plan plan = make_plan(s);
  const Expected want = expect(s, plan);

  // Created in every run of the driver; after a rollback its partitions come from
  // the last checkpoint (or start afresh when there was none).
  brisk::DataSet<Field> field("chaos.field", static_cast<std::size_t>(s.parts));
  Progress at = brisk::checkpoint::load<Progress>("chaos").value_or(Progress{});
  if (!field.restored()) {
    for (int p = 0; p < s.parts; ++p) {
      brisk::data_task(field_init).writes(field, static_cast<std::size_t>(p)).args(std::pair<int, std::uint32_t>(p, plan.field_words)).submit();
    }
  }
  auto sweep = brisk::record<DataParams>("chaos.sweep", [&](const DataParams&) {
    const auto P = static_cast<std::size_t>(s.parts);
    for (std::size_t p = 0; p < P; ++p) brisk::data_task(relax).updates(field, p).reads(field, (p + 1) % P).submit();
    for (std::size_t p = 0; p < P; ++p) brisk::data_task(smooth).updates(field, p).reads(field, (p + P - 1) % P).submit();
  });
  // Made again in every run of the driver (a rollback drops what the run before held).
  std::vector<brisk::Ref<Words>> anchors;
  for (const Spec& a : plan.anchors) anchors.push_back(brisk::remote(big, a, std::vector<u64>{}, std::vector<Words>{}, std::vector<ArrayWords>{}));
  if (!first_run) {
    print_json({{"chaos", "resume"}, {"step", at.step}, {"iter", at.iter}, {"data_ranks", brisk::data_ranks()}});
  }

  for (; at.step < static_cast<int>(plan.steps.size()); ++at.step, at.iter = 0) {
    const Step& st = plan.steps[static_cast<std::size_t>(at.step)];
    const auto step_start = Clock::now();
    Failures f;
    u64 digest = 0;
    if (st.data) {
      for (; at.iter < st.iters; ++at.iter) {
        brisk::checkpoint::save("chaos", at);
        sweep.instantiate(DataParams{at.step, at.iter, st.work_us});
        if (st.checkpoint_at[static_cast<std::size_t>(at.iter)]) {
          Progress next = at;
          ++next.iter;
          brisk::checkpoint::save("chaos", next);
          brisk::checkpoint::now();
        }
      }
      std::vector<Field> parts;
      for (int p = 0; p < s.parts; ++p) parts.push_back(field.fetch(static_cast<std::size_t>(p)));
      digest = field_digest(parts);
    } else {
      const bool armed = s.kill_at_step >= 0 && !g_killed && (s.kill_actor ? at.step >= s.kill_at_step : at.step == s.kill_at_step);
      digest = run_graph(st, anchors, f, !armed ? -1 : s.kill_actor ? kKillActor : s.kill_rank);
    }
    at.digests.push_back(digest);
    const bool right = digest == want.steps[static_cast<std::size_t>(at.step)];
    g_tally.steps += 1;
    g_tally.wrong_steps += !right;
    g_tally.lost += f.lost;
    g_tally.errors += f.errors;
    g_tally.corrupt += f.corrupt;
    g_tally.actors_moved += f.actors_moved;
    if (g_tally.first_error.empty()) g_tally.first_error = f.first;
    if (!s.quiet) {
      print_json({{"chaos", "step"},
                  {"step", at.step},
                  {"kind", st.data ? "data" : "graph"},
                  {"digest", hex(digest)},
                  {"ok", right && f.lost == 0 && f.errors == 0 && f.corrupt == 0},
                  {"lost", f.lost},
                  {"errors", f.errors},
                  {"corrupt", f.corrupt},
                  {"first_error", f.first},
                  {"seconds", std::chrono::duration<double>(Clock::now() - step_start).count()}});
    }
    if (st.checkpoint_after) {
      Progress next = at;
      ++next.step;
      next.iter = 0;
      brisk::checkpoint::save("chaos", next);
      brisk::checkpoint::now();
    }
  }
  // The anchors, read at last (lost ones count, as any result).
  {
    Failures f;
    u64 h = 0;
    for (std::size_t a = 0; a < anchors.size(); ++a) {
      h = mix(h, read_node(AnyRef(anchors[a]), f, "anchor " + std::to_string(a) + ": "));
    }
    g_tally.steps += 1;
    g_tally.wrong_steps += h != want.anchors;
    g_tally.lost += f.lost;
    g_tally.errors += f.errors;
    g_tally.corrupt += f.corrupt;
    if (g_tally.first_error.empty()) g_tally.first_error = f.first;
  }
  // A loss since the last data call rolls back here rather than after the result
  // line (brisk::run syncs the data plane when the driver returns).
  brisk::data_sync();
  const double seconds = std::chrono::duration<double>(Clock::now() - g_start).count();

  // What the surviving ranks counted.
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array(), lost_ranks = nlohmann::ordered_json::array();
  u64 runs[kBodies] = {};
  u64 replayed = 0, rebuilt = 0, restored = 0, objects_lost = 0;
  for (int r = 0; r < brisk::size(); ++r) {
    if (c && c->rank_lost(brisk::Rank{r})) {
      lost_ranks.push_back(r);
      continue;
    }
    try {
      const RankReport rep = brisk::get(brisk::task(report).resources({{"rank" + std::to_string(r), 1}}).remote());
      nlohmann::ordered_json j = {{"rank", r}};
      for (int b = 0; b < kBodies; ++b) {
        runs[b] += rep.runs[b];
        j[kBodyNames[b]] = rep.runs[b];
      }
      j["tasks_replayed"] = rep.tasks_replayed;
      j["objects_rebuilt"] = rep.objects_rebuilt;
      j["objects_restored"] = rep.objects_restored;
      replayed += rep.tasks_replayed;
      rebuilt += rep.objects_rebuilt;
      restored += rep.objects_restored;
      objects_lost += rep.objects_lost;
      ranks.push_back(j);
    } catch (const brisk::Error& e) {  // lost meanwhile
      lost_ranks.push_back(r);
    }
  }
  nlohmann::ordered_json steps = nlohmann::ordered_json::array(), body_runs = nlohmann::ordered_json::object();
  u64 all = 0, all_want = 0;
  bool ok = g_tally.wrong_steps == 0 && g_tally.lost == 0 && g_tally.errors == 0 && g_tally.corrupt == 0;
  if (s.kill_at_step >= 0 && !g_killed) {
    ok = false;
    if (g_tally.first_error.empty()) {
      g_tally.first_error = s.kill_actor ? "no graph step from --kill-at-step on had an actor off rank 0 that made a large result: nothing was killed"
                                         : "--kill-at-step names no graph step: nothing was killed";
    }
  }
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const u64 d = i < at.digests.size() ? at.digests[i] : 0;
    all = mix(all, d);
    all_want = mix(all_want, want.steps[i]);
    ok = ok && i < at.digests.size() && d == want.steps[i];
    steps.push_back({{"kind", plan.steps[i].data ? "data" : "graph"}, {"digest", hex(d)}, {"expect", hex(want.steps[i])}});
  }
  for (int b = 0; b < kBodies; ++b) body_runs[kBodyNames[b]] = runs[b];
  u64 total_runs = 0;
  for (u64 r : runs) total_runs += r;
  print_json({{"chaos", "result"},
              {"seed", s.seed},
              {"np", brisk::size()},
              {"digest", hex(all)},
              {"expect", hex(all_want)},
              {"ok", ok},
              {"steps_checked", g_tally.steps},
              {"wrong_steps", g_tally.wrong_steps},
              {"lost", g_tally.lost},
              {"errors", g_tally.errors},
              {"corrupt", g_tally.corrupt},
              {"first_error", g_tally.first_error},
              {"steps", steps},
              {"rollbacks", g_driver_runs - 1},
              {"seconds", seconds},
              {"lost_ranks", lost_ranks},
              {"tasks_replayed", replayed},
              {"objects_rebuilt", rebuilt},
              {"objects_restored", restored},
              {"objects_lost", objects_lost},
              {"actors_moved", g_tally.actors_moved},
              {"killed", g_killed},
              {"runs", total_runs},
              {"runs_by_body", body_runs},
              {"ranks", ranks},
              {"templates_adopted", brisk::data_stats().templates_adopted}});
  return ok ? 0 : 1;
}

// Parses the program's own options (brisk's --brisk-* are brisk::run's); nullopt and
// a message naming the bad option on bad usage.
std::optional<Settings> parse(const std::vector<std::string>& args, std::string& why) {
  Settings s;
  CLI::App app{"brisk_chaos: a random job for fault injection (benchmarks/fault/chaos.py runs it)", "brisk_chaos"};
  std::string work = "300-4000";
  app.add_option("--seed", s.seed, "the job's seed");
  app.add_option("--steps", s.steps, "graph and data steps")->check(CLI::Range(1, 1000));
  app.add_option("--nodes", s.nodes, "nodes per graph step")->check(CLI::Range(1, 100000));
  app.add_option("--parts", s.parts, "partitions of the data set")->check(CLI::Range(1, 4096));
  app.add_option("--anchors", s.anchors, "large vectors kept through the whole job")->check(CLI::Range(0, 10000));
  app.add_option("--work-us", work, "task body time, MIN-MAX microseconds (log-uniform)");
  app.add_flag("--quiet", s.quiet, "no line per step");
  app.add_option("--kill-rank", s.kill_rank, "kill this rank (not 0) once the results of --kill-at-step are complete")
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--kill-actor", s.kill_actor,
               "instead of --kill-rank: kill the rank (not 0) of an actor that made a large result, in the first graph "
               "step from --kill-at-step on that has one");
  app.add_option("--kill-at-step", s.kill_at_step, "the graph step of --kill-rank or --kill-actor")->check(CLI::Range(0, 1000));
  std::vector<std::string> argv(args.rbegin(), args.rend());
  if (!argv.empty()) argv.pop_back();  // argv[0]
  try {
    app.parse(argv);
  } catch (const CLI::CallForHelp&) {
    why = app.help();
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    why = e.what();
    return std::nullopt;
  }
  unsigned lo = 0, hi = 0;
  char extra = 0;
  if (std::sscanf(work.c_str(), "%u-%u%c", &lo, &hi, &extra) != 2 || lo > hi) {
    why = "invalid value '" + work + "' for --work-us: expected MIN-MAX microseconds, MIN <= MAX";
    return std::nullopt;
  }
  s.work_min_us = lo;
  s.work_max_us = hi;
  if (s.kill_rank >= 0 && s.kill_actor) {
    why = "--kill-rank and --kill-actor exclude each other";
    return std::nullopt;
  }
  if ((s.kill_rank >= 0 || s.kill_actor) != (s.kill_at_step >= 0)) {
    why = "--kill-at-step goes with --kill-rank or --kill-actor";
    return std::nullopt;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, []() -> int {
    std::string why;
    const auto s = parse(brisk::program_args(), why);
    if (!s) {
      std::fprintf(stderr, "brisk_chaos: %s\n", why.c_str());
      return 2;
    }
    if (s->kill_rank >= brisk::size()) {
      std::fprintf(stderr, "brisk_chaos: invalid value '%d' for --kill-rank: the job has %d ranks\n", s->kill_rank, brisk::size());
      return 2;
    }
    return drive(*s);
  });
}
