// brisk_rl/learner.hpp — advantage actor-critic (A2C with GAE) trained with Adam.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "brisk_rl/policy.hpp"

namespace brisk_rl {

// Consecutive transitions of one environment: the features an action was chosen
// from, the action, the reward it earned and whether the episode ended with it.
// Serializable, so an environment elsewhere can ship its steps to the learner.
struct Trajectory {
  std::vector<float> features;  // size() rows of kFeatures
  std::vector<std::int32_t> actions;
  std::vector<float> rewards;
  std::vector<std::uint8_t> dones;

  int size() const { return static_cast<int>(actions.size()); }
  void add(const float* row, int action, float reward, bool done);
  void clear();

  template <class Archive> void serialize(Archive& ar) { ar(features, actions, rewards, dones); }
};

struct LearnerConfig {
  int envs = 16;
  int steps_per_update = 512;  // ready() after this many new transitions, all envs together
  float learning_rate = 1e-3f;
  float gamma = 0.99f;
  float gae_lambda = 0.95f;
  float entropy_coef = 0.01f;
  float value_coef = 0.5f;
  float max_grad_norm = 0.5f;

  template <class Archive> void serialize(Archive& ar) {
    ar(envs, steps_per_update, learning_rate, gamma, gae_lambda, entropy_coef, value_coef, max_grad_norm);
  }
};

struct UpdateStats {
  std::int64_t update = 0;  // 1 for the first update
  int samples = 0;          // transitions this update learned from
  int episodes = 0;         // episodes that ended since the previous update
  double mean_episode_reward = std::numeric_limits<double>::quiet_NaN();  // over those
  double entropy = 0;  // mean policy entropy over the samples, in nats
  double policy_loss = 0;
  double value_loss = 0;
  double grad_norm = 0;  // before clipping
};

// Learner
//
// Feed transitions per environment index with record(), in order within each
// environment and in any order across environments; call update() when ready()
// (or on any schedule the driver fixes). update() learns from everything fed
// since the last one, environment by environment in index order, so the new
// parameters depend only on each environment's sequence and the update schedule,
// never on how environments interleaved. Same inputs give bit-identical
// parameters on one build.
//
// An environment's last transition stays pending until the next one arrives (its
// value target needs the following state), unless it ended an episode.
// Actions should come from policy() as of the latest update; a lag of a few
// updates (asynchronous drivers) is tolerated, not corrected for.
// Thread safety: none; one thread feeds and updates. policy() may be read
// concurrently between updates.
class Learner {
 public:
  Learner() : Learner(LearnerConfig{}) {}
  // Throws std::invalid_argument for a config without environments or steps.
  explicit Learner(LearnerConfig config, std::uint64_t seed = 0);

  void record(int env, const float* features, int action, float reward, bool done);
  void record(int env, const Trajectory& steps);
  bool ready() const { return fresh_ >= config_.steps_per_update; }
  UpdateStats update();

  const Policy& policy() const { return policy_; }
  const LearnerConfig& config() const { return config_; }
  std::int64_t updates() const { return updates_; }

  template <class Archive> void serialize(Archive& ar) {
    ar(config_, policy_, adam_m_, adam_v_, adam_steps_, updates_, pending_, episode_return_, finished_sum_,
       finished_count_, fresh_);
  }

 private:
  // Clips the gradient's norm to max_grad_norm and applies it; returns the norm.
  double adam_step(const std::vector<float>& grad);

  LearnerConfig config_;
  Policy policy_;
  std::vector<float> adam_m_, adam_v_;
  std::int64_t adam_steps_ = 0;
  std::int64_t updates_ = 0;
  std::vector<Trajectory> pending_;     // per environment
  std::vector<double> episode_return_;  // per environment, the running episode
  std::vector<double> finished_sum_;    // per environment, since the last update
  std::vector<std::int32_t> finished_count_;
  std::int64_t fresh_ = 0;
  // Buffers reused by update(); not part of the state.
  struct Scratch {
    std::vector<float> hidden, out, advantage, target, grad;
  } scratch_;
};

}  // namespace brisk_rl
