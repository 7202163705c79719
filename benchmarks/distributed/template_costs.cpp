// Execution-template costs, as in Nimbus's tables: install, instantiate and edit of
// a block of data tasks spread over the ranks, beside the same block submitted task
// by task. One JSON line per result.
//
//   mpirun -np 4 --oversubscribe --bind-to none build/benchmarks/brisk_template_costs [--tasks=8000] [--reps=30]
//
// The block: two sweeps over P = tasks/2 partitions; task i of a sweep writes
// partition i of one data set and reads partitions i-1, i, i+1 of the other, so the
// ranks exchange boundary partitions inside the block and before it (a patch, cached).
// The functions do nothing: what is measured is the runtime.
//
// Figures:
//  - install: the controller's time for the block (record -> controller template and
//    the per-rank worker templates encoded and sent), per task; and each rank's time
//    to cache its worker template, per command.
//  - instantiate: the controller's time per instantiation, as tasks per second (the
//    ranks, rank 0 included, link their commands on their own workers); each rank's
//    linking time per command; and end to end (instantiations until all ran).
//  - edit: one task moved to the next rank and back, 200 times: controller time per
//    edit; the ranks' time per edited command and per edit message (the edits travel
//    together, with the next flush); each rank's time per command for the
//    instantiation after them (which remakes its list of commands once). Then 50
//    such edits, each sent on its own (template_edit_each_sent), as a balancer that
//    moves a task when it sees fit sends them: the ranks' time per edit.
//  - untemplated: the controller's time per submitted task, and end to end.
//  - adopt (rank 0's controller alone, no messages): after a rollback that lost the
//    last rank, the survivors' controller takes the block over by an edit
//    (carry_templates, install of the same tasks), beside installing it afresh; with
//    the lost rank's partitions spread over the survivors (the others stay), and
//    with every partition placed again in blocks over the survivors.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "brisk/brisk.hpp"
#include "brisk/core/function_registry.hpp"
#include "brisk/scheduler/data_controller.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using Vec = std::vector<double>;
using Json = nlohmann::ordered_json;

// `x` rounded to `decimals` places (NaN and infinities stay, and are written as null).
double fixed(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::isfinite(x) ? std::round(x * scale) / scale : x;
}
void print_line(const Json& line) { std::printf("%s\n", line.dump().c_str()); }

void touch(brisk::DataTask&) {}
BRISK_DATA_TASK(touch);

// own = other + 1 (a counter passed between two ranks).
void bump(brisk::DataTask& t) {
  const auto& other = t.read<std::vector<double>>(1);
  t.write<std::vector<double>>(0).assign(1, (other.empty() ? 0.0 : other[0]) + 1);
}
BRISK_DATA_TASK(bump);

// Writes this rank's worker counters into partition 0 of the stats set.
void report(brisk::DataTask& t) {
  const auto s = brisk::data_stats();
  t.write<std::vector<std::uint64_t>>(0) = {s.install_ns,     s.installed_commands, s.instantiate_ns,
                                            s.instantiated_commands, s.edit_ns,     s.edited_commands,
                                            s.tasks_run,      s.edit_messages};
}
BRISK_DATA_TASK(report);

struct Settings {
  int tasks = 8000;
  int reps = 30;
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--tasks=", 8) == 0) s.tasks = std::max(4, std::atoi(argv[i] + 8));
    if (std::strncmp(argv[i], "--reps=", 7) == 0) s.reps = std::max(1, std::atoi(argv[i] + 7));
  }
  return s;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Per rank: install ns, installed, instantiate ns, instantiated, edit ns, edited, tasks
// run, edit messages.
std::vector<std::vector<std::uint64_t>> worker_stats() {
  const int n = brisk::size();
  brisk::DataSet<std::vector<std::uint64_t>> stats("stats", static_cast<std::size_t>(n), brisk::Placement::cyclic());
  for (int r = 0; r < n; ++r) brisk::data_task(report).writes(stats, r).on(r).submit();
  std::vector<std::vector<std::uint64_t>> out;
  for (int r = 0; r < n; ++r) out.push_back(stats.fetch(r));
  return out;
}

// ns per item, the largest over the ranks, of field `ns` over field `count`
// between two snapshots.
double max_per_item(const std::vector<std::vector<std::uint64_t>>& a, const std::vector<std::vector<std::uint64_t>>& b,
                    int ns, int count) {
  double worst = 0;
  for (std::size_t r = 0; r < a.size(); ++r) {
    const double items = static_cast<double>(b[r][count] - a[r][count]);
    if (items > 0) worst = std::max(worst, static_cast<double>(b[r][ns] - a[r][ns]) / items);
  }
  return worst;
}

// The two sweeps' task specs over data sets 0 (a) and 1 (b) of `parts` partitions.
std::vector<brisk::detail::DataTaskSpec> sweeps_spec(int parts) {
  const brisk::FunctionId f = brisk::detail::find_function(reinterpret_cast<const void*>(&touch))->id;
  std::vector<brisk::detail::DataTaskSpec> specs;
  for (std::uint32_t to : {1u, 0u}) {
    const std::uint32_t from = 1 - to;
    for (int i = 0; i < parts; ++i) {
      const auto p = [&](int k) { return static_cast<std::uint32_t>((k + parts) % parts); };
      specs.push_back({f,
                       {{to, p(i), brisk::DataMode::kWrite},
                        {from, p(i - 1), brisk::DataMode::kRead},
                        {from, p(i), brisk::DataMode::kRead},
                        {from, p(i + 1), brisk::DataMode::kRead}},
                       {},
                       -1});
    }
  }
  return specs;
}

// Controller microseconds to install the block, or (`before` given) to take it over.
double controller_us(int ranks, const std::vector<int>& homes, int parts, const brisk::DataController* before,
                     const std::vector<int>& rank_map, brisk::detail::DataPlaneStats* stats,
                     std::unique_ptr<brisk::DataController>* keep = nullptr) {
  auto c = std::make_unique<brisk::DataController>(ranks, [](int, std::vector<std::byte>) {});
  if (before) c->carry_templates(*before, rank_map);
  const auto* type = brisk::detail::DataTypeRegistration<Vec>::ops;
  c->create("a", type, homes);
  c->create("b", type, homes);
  auto specs = sweeps_spec(parts);
  const auto t0 = Clock::now();
  c->install("two_sweeps", std::move(specs));
  const double us = seconds(Clock::now() - t0) * 1e6;
  if (stats) *stats = c->stats();
  if (keep) *keep = std::move(c);
  return us;
}

void adoption(int parts) {
  const int ranks = 4, lost = ranks - 1;
  std::vector<int> homes, kept, blocked;
  for (int i = 0; i < parts; ++i) {
    const int h = static_cast<int>(static_cast<long long>(i) * ranks / parts);
    homes.push_back(h);
    kept.push_back(h == lost ? i % lost : h);  // the lost rank's spread, the others stay
    blocked.push_back(static_cast<int>(static_cast<long long>(i) * lost / parts));
  }
  std::vector<int> map(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) map[static_cast<std::size_t>(r)] = r == lost ? -1 : r;
  std::unique_ptr<brisk::DataController> before;
  (void)controller_us(ranks, homes, parts, nullptr, {}, nullptr, &before);
  for (const auto& [name, layout] : {std::pair{"lost_rank_spread", &kept}, std::pair{"all_placed_again", &blocked}}) {
    brisk::detail::DataPlaneStats adopted;
    const double adopt_us = controller_us(lost, *layout, parts, before.get(), map, &adopted);
    const double install_us = controller_us(lost, *layout, parts, nullptr, {}, nullptr);
    print_line({{"benchmark", "template_adopt"},
                {"ranks", std::to_string(ranks) + " -> " + std::to_string(lost)},
                {"tasks", 2 * parts},
                {"layout", name},
                {"tasks_moved", adopted.adopted_tasks_moved},
                {"adopted", adopted.templates_adopted},
                {"controller_us", fixed(adopt_us, 1)},
                {"install_us", fixed(install_us, 1)}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Settings settings = parse(argc, argv);
  return brisk::run(argc, argv, [&] {
    const int ranks = brisk::size();
    const int parts = settings.tasks / 2;
    brisk::DataSet<Vec> a("a", static_cast<std::size_t>(parts)), b("b", static_cast<std::size_t>(parts));
    auto sweep = [&](brisk::DataSet<Vec>& to, brisk::DataSet<Vec>& from) {
      for (int i = 0; i < parts; ++i) {
        brisk::data_task(touch)
            .writes(to, i)
            .reads(from, (i + parts - 1) % parts)
            .reads(from, i)
            .reads(from, (i + 1) % parts)
            .submit();
      }
    };
    auto body = [&](const int&) {
      sweep(b, a);
      sweep(a, b);
    };
    const bool templated = brisk::templates_enabled();
    print_line({{"benchmark", "template_setup"}, {"ranks", ranks}, {"tasks", 2 * parts}, {"templates", templated}});

    // Untemplated: the same block, task by task.
    {
      brisk::data_sync();
      const auto before = brisk::data_stats();
      const auto t0 = Clock::now();
      for (int k = 0; k < settings.reps; ++k) body(k);
      const auto t1 = Clock::now();
      brisk::data_sync();
      const auto t2 = Clock::now();
      const double n = 2.0 * parts * settings.reps;
      const auto after = brisk::data_stats();
      print_line({{"benchmark", "untemplated"},
                  {"ranks", ranks},
                  {"tasks_per_block", 2 * parts},
                  {"blocks", settings.reps},
                  {"controller_us_per_task", fixed(seconds(t1 - t0) * 1e6 / n, 3)},
                  {"end_to_end_tasks_per_s", fixed(n / seconds(t2 - t0), 0)},
                  {"copies_per_block", fixed(static_cast<double>(after.copies - before.copies) / settings.reps, 1)}});
    }
    if (!templated) return 0;

    // Install (the first instantiate records, installs and runs the block once).
    auto t = brisk::record<int>("two_sweeps", body);
    brisk::data_sync();
    auto w0 = worker_stats();
    auto c0 = brisk::data_stats();
    t.instantiate(0);
    brisk::data_sync();
    auto w1 = worker_stats();
    auto c1 = brisk::data_stats();
    const double tasks = 2.0 * parts;
    print_line({{"benchmark", "template_install"},
                {"ranks", ranks},
                {"tasks", 2 * parts},
                {"controller_us_per_task",
                 fixed(static_cast<double>(c1.controller_install_ns - c0.controller_install_ns) / 1e3 / tasks, 3)},
                {"worker_us_per_command_max", fixed(max_per_item(w0, w1, 0, 1) / 1e3, 3)},
                {"nimbus_controller_us", 25},
                {"nimbus_worker_us", 24},
                {"floor_us", 5}});

    // Instantiate, back to back.
    t.instantiate(1);  // warm: the patch keyed by this template itself is computed once
    brisk::data_sync();
    w0 = worker_stats();
    c0 = brisk::data_stats();
    const auto s0 = Clock::now();
    for (int k = 0; k < settings.reps; ++k) t.instantiate(k);
    const auto s1 = Clock::now();
    brisk::data_sync();
    const auto s2 = Clock::now();
    w1 = worker_stats();
    c1 = brisk::data_stats();
    const double inst = settings.reps;
    const double controller_ns = static_cast<double>(c1.controller_instantiate_ns - c0.controller_instantiate_ns);
    print_line({{"benchmark", "template_instantiate"},
                {"ranks", ranks},
                {"tasks", 2 * parts},
                {"instantiations", settings.reps},
                {"controller_us_per_instantiation", fixed(controller_ns / 1e3 / inst, 2)},
                {"controller_tasks_per_s", fixed(tasks * inst / (controller_ns / 1e9), 0)},
                {"call_us_per_instantiation", fixed(seconds(s1 - s0) * 1e6 / inst, 2)},
                {"worker_ns_per_command_max", fixed(max_per_item(w0, w1, 2, 3), 1)},
                {"end_to_end_tasks_per_s", fixed(tasks * inst / seconds(s2 - s0), 0)},
                {"patches_reused", c1.patches_reused - c0.patches_reused},
                {"validations_skipped", c1.validations_skipped - c0.validations_skipped},
                {"nimbus_tasks_per_s", 500000},
                {"floor_tasks_per_s", 5000000}});

    // Edit: one task to the next rank and back, `edits` times, the edits travelling
    // together with the next flush or (each_sent) each flushed on its own by
    // data_sync, as a balancer that moves a task whenever it sees fit would send
    // them; then one instantiation. `per_message` names the ranks' time per edit
    // message.
    if (ranks > 1) {
      const std::uint32_t task = static_cast<std::uint32_t>(parts / 2);
      const int home = t.rank_of(task);
      const auto edit = [&](const char* name, int edits, bool each_sent, const char* per_message, const Json& extra) {
        w0 = worker_stats();
        c0 = brisk::data_stats();
        for (int k = 0; k < edits; ++k) {
          const std::pair<std::uint32_t, int> move{task, k % 2 == 0 ? (home + 1) % ranks : home};
          t.move_tasks({move});
          if (each_sent) brisk::data_sync();
        }
        t.instantiate(0);
        brisk::data_sync();
        w1 = worker_stats();
        c1 = brisk::data_stats();
        Json line = {{"benchmark", name},
                     {"ranks", ranks},
                     {"edits", edits},
                     {"controller_us_per_edit",
                      fixed(static_cast<double>(c1.controller_edit_ns - c0.controller_edit_ns) / 1e3 / edits, 3)},
                     {"worker_us_per_edited_command_max", fixed(max_per_item(w0, w1, 4, 5) / 1e3, 3)},
                     {per_message, fixed(max_per_item(w0, w1, 4, 7) / 1e3, 3)},
                     {"worker_ns_per_command_next_instantiation_max", fixed(max_per_item(w0, w1, 2, 3), 1)}};
        for (const auto& [key, value] : extra.items()) line[key] = value;
        line["floor_us"] = 10;
        print_line(line);
      };
      edit("template_edit", 200, false, "worker_us_per_edit_message_max", {{"nimbus_us", 41}});
      edit("template_edit_each_sent", 50, true, "worker_us_per_edit_max", Json::object());
    }
    // Hop: a counter passed back and forth between ranks 0 and 1, one task per
    // pass, each reading the partition the other rank just wrote (one copy each).
    if (ranks > 1) {
      brisk::DataSet<Vec> ball("ball", 2, brisk::Placement::on({0, 1}));
      brisk::data_task(bump).writes(ball, 0).reads(ball, 1).submit();
      auto pass = brisk::record<int>("pass", [&](const int&) {
        for (int k = 0; k < 50; ++k) {
          brisk::data_task(bump).writes(ball, 1).reads(ball, 0).submit();
          brisk::data_task(bump).writes(ball, 0).reads(ball, 1).submit();
        }
      });
      pass.instantiate(0);
      brisk::data_sync();
      const int rounds = 20;
      const auto h0 = Clock::now();
      for (int k = 0; k < rounds; ++k) pass.instantiate(0);
      const double got = ball.fetch(0).at(0);
      const auto h1 = Clock::now();
      print_line({{"benchmark", "data_hop"},
                  {"ranks", ranks},
                  {"hops", rounds * 100},
                  {"us_per_hop", fixed(seconds(h1 - h0) * 1e6 / (rounds * 100), 2)},
                  {"check", fixed(got, 0)}});
    }
    adoption(parts);
    std::fflush(stdout);
    return 0;
  });
}
