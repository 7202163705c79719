// brisk_rl: the Ray prototype's RL workload, four ways side by side, then a
// learning run that writes its curve as CSV and PNG.
//
//   mpirun -np 2 --bind-to none build/apps/rl/brisk_rl            # the demo
//   mpirun -np 2 --bind-to none build/apps/rl/brisk_rl --step-ms=1 --sigma=1 --json
#include <brisk/brisk.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "experiment.hpp"

namespace {

using brisk_rl::ExperimentConfig;
using brisk_rl::WayResult;

struct Args {
  ExperimentConfig config;
  std::vector<std::string> ways{"single", "bsp", "async", "search"};
  std::int64_t learn_steps = 2000000;
  std::string learn_way = "async";
  std::string out = "rl_out";
  bool json = false;
};

double mean(const std::vector<double>& v) {
  if (v.empty()) return std::nan("");
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

brisk_rl::Progress progress_line(const std::string& name, const char* unit) {
  return [name, unit, t0 = std::chrono::steady_clock::now()](std::int64_t done, std::int64_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int width = 24;
    const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
    std::fprintf(stderr, "\r  %-13s [%s%s] %lld/%lld %s, %.1f s   ", name.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), static_cast<long long>(done), static_cast<long long>(total),
                 unit, s);
    if (done >= total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

// `x` rounded to `decimals` places, for a JSON figure (nlohmann-json writes the
// shortest form that reads back the same; NaN and infinities as null).
double rounded(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::isfinite(x) ? std::round(x * scale) / scale : x;
}

// One JSON line per way. A figure with no value (no episode ended: no mean reward)
// is null.
void print_json(const WayResult& r, const ExperimentConfig& c, double speedup) {
  const bool search = r.name.rfind("search", 0) == 0;
  nlohmann::ordered_json line;
  line["name"] = "rl_" + r.name;
  line["ranks"] = brisk::size();
  line["envs"] = c.envs;
  line["step_ms"] = search ? c.search_cost.mean_ms : c.cost.mean_ms;
  line["sigma"] = search ? c.search_cost.sigma : c.cost.sigma;
  line["steps"] = static_cast<long long>(r.steps);
  line["seconds"] = rounded(r.seconds, 4);
  line["steps_per_s"] = rounded(r.steps_per_second(), 2);
  line["speedup_vs_single"] = rounded(speedup, 3);
  line["mean_episode_reward"] = rounded(mean(r.episode_rewards), 3);
  line["episodes"] = r.episode_rewards.size();
  std::printf("%s\n", line.dump().c_str());
}

int compare(const Args& a) {
  const ExperimentConfig& c = a.config;
  std::printf("brisk RL demo: Pong from pixels, %d environments, %g ms per step (sigma %g), %d ranks\n", c.envs,
              c.cost.mean_ms, c.cost.sigma, brisk::size());
  brisk_rl::warm_up_ranks();
  std::vector<WayResult> results;
  for (const auto& way : a.ways) {
    if (way == "single") results.push_back(brisk_rl::run_single(c, progress_line("single", "steps")));
    if (way == "bsp") results.push_back(brisk_rl::run_bsp(c, progress_line("brisk bsp", "steps")));
    if (way == "async") results.push_back(brisk_rl::run_async(c, progress_line("brisk async", "steps")));
    if (way == "search") {
      results.push_back(brisk_rl::run_search(c, false, progress_line("search single", "moves")));
      results.push_back(brisk_rl::run_search(c, true, progress_line("brisk search", "moves")));
    }
  }
  double single_rate = 0, search_rate = 0, bsp_rate = 0;
  for (const auto& r : results) {
    if (r.name == "single") single_rate = r.steps_per_second();
    if (r.name == "search-single") search_rate = r.steps_per_second();
    if (r.name == "bsp") bsp_rate = r.steps_per_second();
  }
  std::printf("\n  %-14s %9s %8s %11s %9s %22s\n", "way", "steps", "seconds", "steps/s", "speedup", "mean episode reward");
  for (const auto& r : results) {
    const bool search = r.name.rfind("search", 0) == 0;
    const double base = search ? search_rate : single_rate;
    const double speedup = base > 0 ? r.steps_per_second() / base : 0;
    std::string reward = search ? fmt::format("{:+.0f} in {} moves", r.search_reward, r.moves)
                                : fmt::format("{:.2f} ({} episodes)", mean(r.episode_rewards), r.episode_rewards.size());
    std::printf("  %-14s %9lld %8.2f %11.1f %8.2fx %22s\n", r.name.c_str(), static_cast<long long>(r.steps), r.seconds,
                r.steps_per_second(), speedup, reward.c_str());
    if (search) std::printf("  %-14s %9lld rollouts, %.0f per second\n", "", static_cast<long long>(r.rollouts), r.rollouts / r.seconds);
    if (a.json) print_json(r, c, speedup);
  }
  const WayResult* single = nullptr;
  const WayResult* bsp = nullptr;
  const WayResult* async = nullptr;
  for (const auto& r : results) {
    if (r.name == "single") single = &r;
    if (r.name == "bsp") bsp = &r;
    if (r.name == "async") async = &r;
  }
  if (single && bsp) {
    const bool same = single->episode_rewards == bsp->episode_rewards && single->final_params == bsp->final_params;
    std::printf("\n  bsp vs single-threaded, same seeds: rewards and parameters %s\n", same ? "identical" : "DIFFERENT");
    if (!same) return 1;
  }
  if (bsp && async && bsp_rate > 0) std::printf("  async / bsp: %.2fx\n", async->steps_per_second() / bsp_rate);
  return 0;
}

int learn(const Args& a) {
  ExperimentConfig c = a.config;
  c.cost = {};
  c.steps = a.learn_steps;
  std::printf("\nlearning: %lld steps without extra step cost, brisk %s, %d environments\n",
              static_cast<long long>(c.steps), a.learn_way.c_str(), c.envs);
  const double random = brisk_rl::random_policy_reward(c.seed ^ 0x5eedULL, 40);
  WayResult r = a.learn_way == "bsp" ? brisk_rl::run_bsp(c, progress_line("learning", "steps"))
                                     : brisk_rl::run_async(c, progress_line("learning", "steps"));
  std::filesystem::create_directories(a.out);
  const std::string csv = a.out + "/learning_curve.csv";
  const std::string png = a.out + "/learning_curve.png";
  brisk_rl::write_curve_csv(csv, r.curve);
  brisk_rl::Series trained{"brisk " + a.learn_way, {}, {}};
  brisk_rl::Series baseline{"random policy", {}, {}};
  // Each point: the mean reward of the last 100 (or so) episodes.
  std::vector<std::pair<double, int>> window;
  double window_sum = 0;
  int window_episodes = 0;
  for (const auto& p : r.curve) {
    if (p.episodes == 0 || std::isnan(p.mean_reward)) continue;
    window.emplace_back(p.mean_reward * p.episodes, p.episodes);
    window_sum += window.back().first;
    window_episodes += p.episodes;
    while (window_episodes - window.front().second >= 100) {
      window_sum -= window.front().first;
      window_episodes -= window.front().second;
      window.erase(window.begin());
    }
    trained.x.push_back(static_cast<double>(p.steps));
    trained.y.push_back(window_sum / window_episodes);
  }
  if (!r.curve.empty()) {
    baseline.x = {0.0, static_cast<double>(r.curve.back().steps)};
    baseline.y = {random, random};
  }
  brisk_rl::PlotOptions po;
  po.title = "Pong: mean reward of the last 100 episodes";
  po.x_label = "environment steps";
  po.y_label = "reward per episode";
  brisk_rl::write_plot_png(png, {trained, baseline}, po);
  // The last tenth of the episodes against the random policy.
  const auto& e = r.episode_rewards;
  std::vector<double> first, last;
  double last_sum = 0;
  int last_n = 0;
  for (const auto& p : r.curve) {
    if (!std::isnan(p.mean_reward) && p.steps > c.steps * 9 / 10) {
      last_sum += p.mean_reward * p.episodes;
      last_n += p.episodes;
    }
  }
  std::printf("  random policy: %.2f per episode; trained (last 10%% of steps): %.2f per episode over %d episodes; "
              "%zu episodes in all, %.1f s, %.0f steps/s\n",
              random, last_n ? last_sum / last_n : std::nan(""), last_n, e.size(), r.seconds, r.steps_per_second());
  std::printf("  wrote %s and %s\n", csv.c_str(), png.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [] {
    Args a;
    CLI::App app{"brisk_rl: the RL workload four ways (single-threaded, brisk BSP, brisk async, tree search)"};
    std::string ways = "single,bsp,async,search";
    app.add_option("--ways", ways, "comma-separated: single, bsp, async, search (none: only the learning run)")->capture_default_str();
    app.add_option("--envs", a.config.envs, "environments (simulator actors)")->capture_default_str()->check(CLI::Range(1, 4096));
    app.add_option("--steps", a.config.steps, "environment steps per way")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--step-ms", a.config.cost.mean_ms, "extra work per step, ms")->capture_default_str()->check(CLI::NonNegativeNumber);
    app.add_option("--sigma", a.config.cost.sigma, "log-normal spread of the step work")->capture_default_str()->check(CLI::NonNegativeNumber);
    app.add_option("--seed", a.config.seed, "seed of everything")->capture_default_str();
    app.add_option("--actor-restarts", a.config.actor_restarts,
                   "rebuilds of a simulator whose rank dies, replaying its calls (--brisk-transport=ucx)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1000));
    app.add_option("--checkpoint-rounds", a.config.checkpoint_rounds,
                   "bsp: a checkpoint every N rounds (agent and simulators); --brisk-restore resumes there (0: none)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--die-after-rounds", a.config.die_after_rounds, "tests: rank 0 SIGKILLs itself after N bsp rounds")
        ->capture_default_str();
    app.add_option("--update-every", a.config.learner.steps_per_update, "learner update after this many steps")
        ->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--async-k", a.config.async_batch, "wait(num_returns=k) of the async way (0: envs/4)")->capture_default_str();
    app.add_option("--search-moves", a.config.search_moves, "moves played by tree search")->capture_default_str();
    app.add_option("--move-budget-ms", a.config.move_budget_ms, "time budget per move")->capture_default_str();
    app.add_option("--search-parallel", a.config.search_parallel, "rollouts in flight (brisk search)")
        ->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("--rollout-depth", a.config.rollout_depth, "steps per rollout")->capture_default_str();
    app.add_option("--search-step-ms", a.config.search_cost.mean_ms, "extra work per step inside rollouts")->capture_default_str();
    app.add_option("--learn-steps", a.learn_steps, "steps of the learning run (0: none)")->capture_default_str();
    app.add_option("--learn-way", a.learn_way, "bsp or async")->capture_default_str()->check(CLI::IsMember({"bsp", "async"}));
    app.add_option("--out", a.out, "directory for the learning curve CSV and PNG")->capture_default_str();
    app.add_flag("--json", a.json, "also print one JSON line per way");
    std::vector<std::string> args = brisk::program_args();
    std::vector<const char*> cargs;
    for (const auto& s : args) cargs.push_back(s.c_str());
    try {
      app.parse(static_cast<int>(cargs.size()), cargs.data());
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    a.ways.clear();
    std::stringstream ss(ways);
    for (std::string w; std::getline(ss, w, ',');) {
      if (w == "none") continue;
      if (w != "single" && w != "bsp" && w != "async" && w != "search") {
        std::fprintf(stderr, "brisk_rl: unknown way '%s' in --ways (expected single, bsp, async, search)\n", w.c_str());
        return 2;
      }
      a.ways.push_back(w);
    }
    int rc = a.ways.empty() ? 0 : compare(a);
    if (rc == 0 && a.learn_steps > 0) rc = learn(a);
    return rc;
  });
}
