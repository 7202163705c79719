// The RL experiment of the Ray prototype, written four ways over the same model:
// environments step (CPU work per step), one policy computes every environment's
// action in a batch, and an actor-critic learner updates the policy.
//
//   single  one thread, no brisk;
//   bsp     brisk, bulk-synchronous: every simulator actor steps, all results are
//           gathered, the actions are computed in one batch, repeat;
//   async   brisk, asynchronous: wait(num_returns=k) takes steps in finish order
//           and the next actions are computed for those while the others run;
//   search  Monte-Carlo tree search per move whose rollouts are tasks that spawn
//           further rollouts where results are promising, under a time budget per
//           move enforced with wait's timeout (and the same search on one thread).
//
// For the same seeds, single and bsp feed the learner the same transitions in the
// same order, so their rewards and parameters are identical.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "brisk_rl/learner.hpp"
#include "brisk_rl/pong.hpp"
#include "brisk_rl/report.hpp"

namespace brisk_rl {

struct ExperimentConfig {
  int envs = 8;
  std::int64_t steps = 1200;       // environment steps per way
  StepCost cost{7.0, 0.0};         // extra work per step
  std::uint64_t seed = 1;
  int async_batch = 0;             // k of wait(num_returns=k); 0: envs / 4, at least 1
  LearnerConfig learner{.learning_rate = 3e-3f};
  // Tree search.
  int search_moves = 12;
  double move_budget_ms = 150;
  int rollout_depth = 24;
  int search_parallel = 8;         // rollouts in flight
  StepCost search_cost{0.25, 0.0}; // per step inside rollouts
  // Rebuilds of a simulator whose rank dies (ucx), its calls replayed so that it
  // comes back with its state; 0: a dead simulator fails the way.
  int actor_restarts = 0;
  // bsp with checkpoints: every N rounds (one step of every environment) the driver
  // saves the agent and the simulators' states and writes a checkpoint; a run
  // restored from it (--brisk-restore) resumes bsp there, with the same result as an
  // uninterrupted run. 0: none.
  int checkpoint_rounds = 0;
  // Tests: rank 0 SIGKILLs itself after this many bsp rounds (-1: never).
  int die_after_rounds = -1;
};

struct WayResult {
  std::string name;
  std::int64_t steps = 0;     // environment steps (for search: steps inside rollouts)
  double seconds = 0;
  std::vector<double> episode_rewards;  // in the order the episodes ended, per env in env order (bsp/single)
  std::vector<CurvePoint> curve;
  std::vector<float> final_params;  // empty for search
  // Search only.
  std::int64_t rollouts = 0;
  int moves = 0;
  double search_reward = 0;  // points won minus lost while searching
  double steps_per_second() const { return seconds > 0 ? static_cast<double>(steps) / seconds : 0; }
};

// Called now and then with (steps done, steps total); prints progress.
using Progress = std::function<void(std::int64_t, std::int64_t)>;

WayResult run_single(const ExperimentConfig& config, const Progress& progress);
WayResult run_bsp(const ExperimentConfig& config, const Progress& progress);
WayResult run_async(const ExperimentConfig& config, const Progress& progress);
WayResult run_search(const ExperimentConfig& config, bool use_brisk, const Progress& progress);
// Mean episode reward of the uniform random policy over `episodes` episodes.
double random_policy_reward(std::uint64_t seed, int episodes);
// Makes every rank calibrate its step work before anything is timed.
void warm_up_ranks();

}  // namespace brisk_rl
