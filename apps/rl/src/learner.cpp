#include "brisk_rl/learner.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "network.hpp"

namespace brisk_rl {

void Trajectory::add(const float* row, int action, float reward, bool done) {
  features.insert(features.end(), row, row + kFeatures);
  actions.push_back(action);
  rewards.push_back(reward);
  dones.push_back(done ? 1 : 0);
}

void Trajectory::clear() {
  features.clear();
  actions.clear();
  rewards.clear();
  dones.clear();
}

namespace {

LearnerConfig validated(const LearnerConfig& config) {
  if (config.envs <= 0 || config.steps_per_update <= 0) {
    throw std::invalid_argument("brisk_rl::Learner: envs (" + std::to_string(config.envs) +
                                ") and steps_per_update (" + std::to_string(config.steps_per_update) +
                                ") must be positive");
  }
  return config;
}

}  // namespace

Learner::Learner(LearnerConfig config, std::uint64_t seed)
    : config_(validated(config)),
      policy_(seed),
      adam_m_(Policy::kParamCount, 0.0f),
      adam_v_(Policy::kParamCount, 0.0f),
      pending_(config.envs),
      episode_return_(config.envs, 0.0),
      finished_sum_(config.envs, 0.0),
      finished_count_(config.envs, 0) {}

void Learner::record(int env, const float* features, int action, float reward, bool done) {
  if (env < 0 || env >= config_.envs || action < 0 || action >= kNumActions) {
    throw std::out_of_range("brisk_rl::Learner::record: environment " + std::to_string(env) + " of " +
                            std::to_string(config_.envs) + ", action " + std::to_string(action) + " of " +
                            std::to_string(kNumActions));
  }
  pending_[env].add(features, action, reward, done);
  episode_return_[env] += reward;
  if (done) {
    finished_sum_[env] += episode_return_[env];
    ++finished_count_[env];
    episode_return_[env] = 0;
  }
  ++fresh_;
}

void Learner::record(int env, const Trajectory& steps) {
  for (int t = 0; t < steps.size(); ++t) {
    record(env, steps.features.data() + std::size_t(t) * kFeatures, steps.actions[t], steps.rewards[t],
           steps.dones[t] != 0);
  }
}

UpdateStats Learner::update() {
  UpdateStats stats;
  stats.update = ++updates_;
  double reward_sum = 0;
  for (int e = 0; e < config_.envs; ++e) {
    reward_sum += finished_sum_[e];
    stats.episodes += finished_count_[e];
    finished_sum_[e] = 0;
    finished_count_[e] = 0;
  }
  if (stats.episodes > 0) stats.mean_episode_reward = reward_sum / stats.episodes;
  fresh_ = 0;

  // Forward every pending row, and estimate advantages (GAE) backwards in time.
  // An environment's last row, when its episode goes on, only gives the bootstrap
  // value for the row before.
  std::size_t rows = 0;
  for (const Trajectory& t : pending_) rows += t.size();
  Scratch& s = scratch_;
  s.hidden.resize(rows * kHidden);
  s.out.resize(rows * kOutputs);
  s.advantage.resize(rows);
  s.target.resize(rows);
  const float* params = policy_.params().data();
  const auto learnable = [](const Trajectory& t, int i) { return i + 1 < t.size() || t.dones[i] != 0; };
  double advantage_sum = 0;
  for (std::size_t base = 0; const Trajectory& t : pending_) {
    for (int i = 0; i < t.size(); ++i) {
      detail::forward_row(params, t.features.data() + std::size_t(i) * kFeatures,
                          &s.hidden[(base + i) * kHidden], &s.out[(base + i) * kOutputs]);
    }
    double gae = 0;
    for (int i = t.size() - 1; i >= 0; --i) {
      if (!learnable(t, i)) continue;
      const bool done = t.dones[i] != 0;
      const double keep = done ? 0.0 : 1.0;
      const double value = s.out[(base + i) * kOutputs + kNumActions];
      const double next = done ? 0.0 : s.out[(base + i + 1) * kOutputs + kNumActions];
      gae = t.rewards[i] + config_.gamma * next - value + config_.gamma * config_.gae_lambda * keep * gae;
      s.advantage[base + i] = static_cast<float>(gae);
      s.target[base + i] = static_cast<float>(gae + value);
      advantage_sum += s.advantage[base + i];
      ++stats.samples;
    }
    base += t.size();
  }

  if (stats.samples > 0) {
    // Normalised advantages; the loss is the mean over the samples of
    //   -advantage log p(action) - entropy_coef H(p) + value_coef (value - target)^2 / 2.
    const double mean = advantage_sum / stats.samples;
    double square = 0;
    for (std::size_t base = 0; const Trajectory& t : pending_) {
      for (int i = 0; i < t.size(); ++i) {
        if (learnable(t, i)) square += (s.advantage[base + i] - mean) * (s.advantage[base + i] - mean);
      }
      base += t.size();
    }
    const double scale = 1.0 / (std::sqrt(square / stats.samples) + 1e-8);
    const double per_sample = 1.0 / stats.samples;
    s.grad.assign(Policy::kParamCount, 0.0f);
    for (std::size_t base = 0; const Trajectory& t : pending_) {
      for (int i = 0; i < t.size(); ++i) {
        if (!learnable(t, i)) continue;
        const std::size_t r = base + i;
        const float* o = &s.out[r * kOutputs];
        const double adv = (s.advantage[r] - mean) * scale;
        const double top = *std::max_element(o, o + kNumActions);
        double p[kNumActions], log_p[kNumActions], total = 0, entropy = 0;
        for (int a = 0; a < kNumActions; ++a) total += p[a] = std::exp(o[a] - top);
        for (int a = 0; a < kNumActions; ++a) {
          p[a] /= total;
          log_p[a] = o[a] - top - std::log(total);
          entropy -= p[a] * log_p[a];
        }
        const int action = t.actions[i];
        const double value_error = o[kNumActions] - s.target[r];
        stats.policy_loss -= adv * log_p[action] * per_sample;
        stats.value_loss += 0.5 * value_error * value_error * per_sample;
        stats.entropy += entropy * per_sample;
        float d_out[kOutputs];
        for (int a = 0; a < kNumActions; ++a) {
          const double d =
              -adv * ((a == action ? 1.0 : 0.0) - p[a]) + config_.entropy_coef * p[a] * (log_p[a] + entropy);
          d_out[a] = static_cast<float>(d * per_sample);
        }
        d_out[kNumActions] = static_cast<float>(config_.value_coef * value_error * per_sample);
        detail::backward_row(params, t.features.data() + std::size_t(i) * kFeatures, &s.hidden[r * kHidden],
                             d_out, s.grad.data());
      }
      base += t.size();
    }
    stats.grad_norm = adam_step(s.grad);
  }

  // Keep each environment's last row when its episode goes on (capacity stays).
  for (Trajectory& t : pending_) {
    const int n = t.size();
    if (n == 0 || t.dones[n - 1] != 0) {
      t.clear();
      continue;
    }
    std::copy_n(t.features.end() - kFeatures, kFeatures, t.features.begin());
    t.features.resize(kFeatures);
    t.actions = {t.actions.back()};
    t.rewards = {t.rewards.back()};
    t.dones = {t.dones.back()};
  }
  return stats;
}

double Learner::adam_step(const std::vector<float>& grad) {
  double norm = 0;
  for (float g : grad) norm += double{g} * g;
  norm = std::sqrt(norm);
  const float clip = norm > config_.max_grad_norm ? static_cast<float>(config_.max_grad_norm / norm) : 1.0f;
  constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEpsilon = 1e-5f;
  ++adam_steps_;
  const float correct1 = 1.0f - static_cast<float>(std::pow(kBeta1, adam_steps_));
  const float correct2 = 1.0f - static_cast<float>(std::pow(kBeta2, adam_steps_));
  const float lr = config_.learning_rate / correct1;
  float* w = policy_.params().data();
  for (std::size_t k = 0; k < Policy::kParamCount; ++k) {
    const float g = grad[k] * clip;
    adam_m_[k] = kBeta1 * adam_m_[k] + (1.0f - kBeta1) * g;
    adam_v_[k] = kBeta2 * adam_v_[k] + (1.0f - kBeta2) * g * g;
    w[k] -= lr * adam_m_[k] / (std::sqrt(adam_v_[k] / correct2) + kEpsilon);
  }
  return norm;
}

}  // namespace brisk_rl
