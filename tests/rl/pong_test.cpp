#include "brisk_rl/pong.hpp"

#include <gtest/gtest.h>
#include <time.h>

#include <cmath>
#include <vector>

#include "brisk/core/serialize.hpp"

namespace brisk_rl {
namespace {

static_assert(brisk::Serializable<Pong>);

// Plays `steps` steps with actions from `actions`, resetting finished episodes,
// and returns every frame and reward.
struct Trace {
  std::vector<Frame> frames;
  std::vector<float> rewards;
};
Trace play(Pong& game, Rng& actions, int steps) {
  Trace trace;
  for (int i = 0; i < steps; ++i) {
    const StepResult r = game.step(actions.below(kNumActions));
    trace.rewards.push_back(r.reward);
    if (r.done) game.reset();
    trace.frames.push_back(game.frame());
  }
  return trace;
}

bool same(const Trace& a, const Trace& b) { return a.frames == b.frames && a.rewards == b.rewards; }

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

TEST(PongTest, SameSeedSameGame) {
  Pong a(7), b(7), c(8);
  Rng ra(3), rb(3), rc(3);
  const Trace ta = play(a, ra, 1000), tb = play(b, rb, 1000), tc = play(c, rc, 1000);
  EXPECT_TRUE(same(ta, tb));
  EXPECT_FALSE(same(ta, tc));
  int points = 0;
  for (float r : ta.rewards) points += r != 0;
  EXPECT_GT(points, 5);  // the 1000 steps saw several points, so scoring was exercised
}

TEST(PongTest, CopyIsASnapshot) {
  Pong game(11);
  Rng actions(5);
  play(game, actions, 300);
  Pong copy = game;
  Rng copy_actions = actions;
  EXPECT_TRUE(same(play(game, actions, 700), play(copy, copy_actions, 700)));
}

TEST(PongTest, SerializedStateContinuesIdentically) {
  Pong game(12, StepCost{0.0, 0.5});
  Rng actions(6);
  play(game, actions, 250);
  Pong restored = brisk::from_bytes<Pong>(brisk::to_bytes(game));
  EXPECT_EQ(restored.frame(), game.frame());
  EXPECT_EQ(restored.steps(), game.steps());
  Rng restored_actions = actions;
  EXPECT_TRUE(same(play(game, actions, 700), play(restored, restored_actions, 700)));
}

TEST(PongTest, EpisodeEndsAndScoresAddUp) {
  Pong game(21);
  Rng actions(1);
  float total = 0;
  StepResult r;
  while (!(r = game.step(actions.below(kNumActions))).done) total += r.reward;
  total += r.reward;
  EXPECT_LE(game.steps(), Pong::kMaxSteps);
  EXPECT_EQ(total, game.agent_score() - game.opponent_score());
  EXPECT_TRUE(game.agent_score() == Pong::kPointsToWin || game.opponent_score() == Pong::kPointsToWin ||
              game.steps() == Pong::kMaxSteps);
  EXPECT_TRUE(game.step(kUp).done);  // a finished episode stays finished
  EXPECT_THROW(game.step(kNumActions), std::out_of_range);
  game.reset();
  EXPECT_FALSE(game.done());
  EXPECT_EQ(game.steps(), 0);
}

TEST(PongTest, FrameShowsPaddlesAndBall) {
  const Pong game(3);
  int lit = 0, ball = 0;
  for (std::uint8_t p : game.frame()) lit += p != 0, ball += p == 255;
  EXPECT_EQ(ball, 9);              // a 3x3 ball
  EXPECT_EQ(lit, 9 + 2 * 2 * 14);  // and two 2x14 paddles
}

TEST(PongTest, RandomPlayLosesMostPoints) {
  Rng actions(2);
  double total = 0;
  constexpr int kEpisodes = 20;
  for (int e = 0; e < kEpisodes; ++e) {
    Pong game(100 + e);
    StepResult r;
    do total += (r = game.step(actions.below(kNumActions))).reward;
    while (!r.done);
  }
  EXPECT_LT(total / kEpisodes, -3.0);
}

TEST(PongTest, StepCostTakesItsMeanInCpuTime) {
  calibrate_step_work();
  Pong game(4, StepCost{2.0, 0.0});
  Rng actions(4);
  const double start = thread_cpu_ms();
  for (int i = 0; i < 50; ++i) game.step(actions.below(kNumActions));
  const double per_step = (thread_cpu_ms() - start) / 50;
  EXPECT_GT(per_step, 1.0);
  EXPECT_LT(per_step, 3.0);
  std::printf("step cost 2 ms: %.3f ms of CPU per step\n", per_step);
}

TEST(PongTest, SigmaSpreadsTheWorkAndKeepsTheMean) {
  constexpr double kMean = 0.001, kSigma = 0.5;
  Pong spread(9, StepCost{kMean, kSigma}), flat(9, StepCost{kMean, 0.0}), costless(9);
  Rng actions(9);
  double sum = 0, square = 0;
  constexpr int kSteps = 20000;
  for (int i = 0; i < kSteps; ++i) {
    const int a = actions.below(kNumActions);
    const StepResult r = spread.step(a);
    EXPECT_FLOAT_EQ(flat.step(a).work_ms, static_cast<float>(kMean));
    costless.step(a);
    ASSERT_EQ(spread.frame(), costless.frame()) << "the cost must not change the game";
    if (r.done) spread.reset(), flat.reset(), costless.reset();
    sum += r.work_ms;
    square += double{r.work_ms} * r.work_ms;
  }
  const double mean = sum / kSteps;
  const double cv = std::sqrt(square / kSteps - mean * mean) / mean;
  EXPECT_NEAR(mean / kMean, 1.0, 0.03);
  EXPECT_NEAR(cv, std::sqrt(std::exp(kSigma * kSigma) - 1.0), 0.05);  // log-normal: 0.53
}

}  // namespace
}  // namespace brisk_rl
