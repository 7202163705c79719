#include "brisk_rl/learner.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "brisk/core/serialize.hpp"
#include "brisk_rl/report.hpp"

namespace brisk_rl {
namespace {

static_assert(brisk::Serializable<Learner>);
static_assert(brisk::Serializable<Trajectory>);

// Transitions of `envs` environments under random play, `steps` each.
std::vector<Trajectory> random_play(int envs, int steps, std::uint64_t seed) {
  std::vector<Trajectory> out(envs);
  std::vector<float> f(kFeatures);
  for (int e = 0; e < envs; ++e) {
    Pong game(mix_seed(seed, e), {});
    Rng actions(mix_seed(seed, 100 + e));
    Frame previous = game.frame();
    for (int t = 0; t < steps; ++t) {
      extract_features(game.frame(), previous, f.data());
      previous = game.frame();
      const int a = actions.below(kNumActions);
      const StepResult r = game.step(a);
      out[e].add(f.data(), a, r.reward, r.done);
      if (r.done) game.reset(), previous = game.frame();
    }
  }
  return out;
}

void feed(Learner& learner, int env, const Trajectory& t, int from, int to) {
  for (int i = from; i < to; ++i) {
    learner.record(env, &t.features[std::size_t(i) * kFeatures], t.actions[i], t.rewards[i], t.dones[i] != 0);
  }
}

bool same_params(const Learner& a, const Learner& b) {
  const auto& pa = a.policy().params();
  const auto& pb = b.policy().params();
  return pa.size() == pb.size() && std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)) == 0;
}

TEST(LearnerTest, InterleavingAcrossEnvironmentsDoesNotMatter) {
  constexpr int kEnvs = 4, kSteps = 60, kChunk = 20;
  const std::vector<Trajectory> data = random_play(kEnvs, 3 * kSteps, 1);
  LearnerConfig config;
  config.envs = kEnvs;
  Learner env_major(config, 9), round_robin(config, 9), whole(config, 9);
  Rng order(2);
  for (int round = 0; round < 3; ++round) {
    const int begin = round * kSteps;
    for (int e = 0; e < kEnvs; ++e) feed(env_major, e, data[e], begin, begin + kSteps);
    // One step at a time, environments in a shuffled order, in uneven bursts.
    std::vector<int> next(kEnvs, begin);
    for (int left = kEnvs * kSteps; left > 0;) {
      const int e = order.below(kEnvs);
      const int n = std::min(1 + order.below(kChunk), begin + kSteps - next[e]);
      feed(round_robin, e, data[e], next[e], next[e] + n);
      next[e] += n;
      left -= n;
    }
    for (int e = kEnvs - 1; e >= 0; --e) {
      Trajectory part;
      for (int i = begin; i < begin + kSteps; ++i) {
        part.add(&data[e].features[std::size_t(i) * kFeatures], data[e].actions[i], data[e].rewards[i],
                 data[e].dones[i]);
      }
      whole.record(e, part);
    }
    const UpdateStats a = env_major.update(), b = round_robin.update(), c = whole.update();
    EXPECT_EQ(a.samples, b.samples);
    EXPECT_EQ(a.episodes, b.episodes);
    EXPECT_GT(a.samples, kEnvs * (kSteps - 2));
    ASSERT_TRUE(same_params(env_major, round_robin)) << "round " << round;
    ASSERT_TRUE(same_params(env_major, whole)) << "round " << round;
  }
  EXPECT_NE(env_major.policy().params(), Policy(9).params());
}

TEST(LearnerTest, SerializedLearnerContinuesIdentically) {
  const std::vector<Trajectory> data = random_play(2, 200, 3);
  LearnerConfig config;
  config.envs = 2;
  Learner learner(config, 4);
  for (int e = 0; e < 2; ++e) feed(learner, e, data[e], 0, 100);
  learner.update();
  for (int e = 0; e < 2; ++e) feed(learner, e, data[e], 100, 150);
  Learner restored = brisk::from_bytes<Learner>(brisk::to_bytes(learner));
  for (Learner* l : {&learner, &restored}) {
    for (int e = 0; e < 2; ++e) feed(*l, e, data[e], 150, 200);
    l->update();
  }
  EXPECT_TRUE(same_params(learner, restored));
  EXPECT_EQ(restored.updates(), 2);
}

TEST(LearnerTest, RejectsBadInput) {
  EXPECT_THROW(Learner(LearnerConfig{.envs = 0}), std::invalid_argument);
  EXPECT_THROW(Learner(LearnerConfig{.steps_per_update = 0}), std::invalid_argument);
  Learner learner(LearnerConfig{.envs = 2}, 0);
  std::vector<float> f(kFeatures);
  EXPECT_THROW(learner.record(2, f.data(), 0, 0, false), std::out_of_range);
  EXPECT_THROW(learner.record(0, f.data(), kNumActions, 0, false), std::out_of_range);
}

// The loop a single-threaded driver runs: one batched forward for all
// environments per step, update() whenever the learner is ready.
std::vector<CurvePoint> train(const LearnerConfig& config, std::uint64_t seed, int updates, double seconds) {
  Learner learner(config, seed);
  std::vector<Pong> games;
  std::vector<Frame> previous;
  std::vector<Rng> rngs;
  for (int e = 0; e < config.envs; ++e) {
    games.emplace_back(mix_seed(seed, e));
    previous.push_back(games.back().frame());
    rngs.emplace_back(mix_seed(seed, 1000 + e));
  }
  std::vector<float> features(std::size_t(config.envs) * kFeatures), logits(config.envs * kNumActions);
  std::vector<CurvePoint> curve;
  const auto start = std::chrono::steady_clock::now();
  std::int64_t steps = 0;
  while (learner.updates() < updates) {
    for (int e = 0; e < config.envs; ++e)
      extract_features(games[e].frame(), previous[e], &features[e * kFeatures]);
    learner.policy().forward_batch(features.data(), config.envs, logits.data());
    for (int e = 0; e < config.envs; ++e) {
      const int action = sample_action(&logits[e * kNumActions], rngs[e]);
      previous[e] = games[e].frame();
      const StepResult r = games[e].step(action);
      learner.record(e, &features[e * kFeatures], action, r.reward, r.done);
      if (r.done) games[e].reset(), previous[e] = games[e].frame();
    }
    steps += config.envs;
    if (!learner.ready()) continue;
    const UpdateStats s = learner.update();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    curve.push_back(
        {s.update, steps, wall, s.mean_episode_reward, s.episodes, s.entropy, s.policy_loss, s.value_loss});
    if (wall > seconds) break;
  }
  return curve;
}

// Mean episode reward over curve[from, to), weighted by episodes.
double mean_reward(const std::vector<CurvePoint>& curve, std::size_t from, std::size_t to) {
  double sum = 0;
  int episodes = 0;
  for (std::size_t i = from; i < to; ++i) {
    if (curve[i].episodes == 0) continue;
    sum += curve[i].mean_reward * curve[i].episodes;
    episodes += curve[i].episodes;
  }
  return sum / episodes;
}

LearnerConfig test_config() {
  LearnerConfig config;
  config.envs = 16;
  config.steps_per_update = 16 * 32;
  config.learning_rate = 3e-3f;
  return config;
}

TEST(LearnerTest, LearnsToBeatRandomPlay) {
  constexpr int kUpdates = 1500;  // 768k steps
  const std::vector<CurvePoint> curve = train(test_config(), 1, kUpdates, 50.0);
  ASSERT_EQ(curve.size(), std::size_t{kUpdates}) << "ran out of time";
  const double first = mean_reward(curve, 0, 100);
  const double last = mean_reward(curve, curve.size() - 200, curve.size());
  std::printf("mean episode reward: first 100 updates %.2f, last 200 %.2f (%.1f s)\n", first, last,
              curve.back().wall_s);
  EXPECT_LT(first, -3.0);  // the initial policy plays about randomly
  EXPECT_GT(last, first + 2.5);
  EXPECT_GT(last, -2.0);
}

// A manual measurement, two minutes per seed:
//   rl_learner_test --gtest_also_run_disabled_tests --gtest_filter=*TwoMinutes*
TEST(LearnerTest, DISABLED_TrainsForTwoMinutes) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  std::vector<Series> series;
  for (std::uint64_t seed : {1, 2, 3}) {
    const std::vector<CurvePoint> curve = train(test_config(), seed, 1 << 30, 120.0);
    Series s{"seed " + std::to_string(seed), {}, {}};
    for (std::size_t i = 0; i + 100 <= curve.size(); i += 100) {
      s.x.push_back(curve[i + 99].wall_s);
      s.y.push_back(mean_reward(curve, i, i + 100));
      if (i % 1000 == 900) {
        std::printf("seed %d %6.1f s %9lld steps mean reward %5.2f\n", int(seed), s.x.back(),
                    static_cast<long long>(curve[i + 99].steps), s.y.back());
      }
    }
    write_curve_csv((dir / ("brisk_rl_seed" + std::to_string(seed) + ".csv")).string(), curve);
    series.push_back(std::move(s));
  }
  write_plot_png((dir / "brisk_rl_curves.png").string(), series,
                 {.title = "Pong A2C, 16 environments, one core", .x_label = "wall s", .y_label = "mean reward"});
}

}  // namespace
}  // namespace brisk_rl
