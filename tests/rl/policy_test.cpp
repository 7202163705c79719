#include "brisk_rl/policy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "brisk/core/serialize.hpp"

namespace brisk_rl {
namespace {

static_assert(brisk::Serializable<Policy>);

// Features of `rows` consecutive game steps under random play.
std::vector<float> game_features(int rows, std::uint64_t seed) {
  std::vector<float> out(std::size_t(rows) * kFeatures);
  Pong game(seed);
  Rng actions(seed);
  Frame previous = game.frame();
  for (int r = 0; r < rows; ++r) {
    extract_features(game.frame(), previous, &out[std::size_t(r) * kFeatures]);
    previous = game.frame();
    if (game.step(actions.below(kNumActions)).done) game.reset(), previous = game.frame();
  }
  return out;
}

TEST(PolicyTest, FeaturesAreThePooledFrameAndItsChange) {
  Frame before{}, now{};
  before[10 * kFrameSide + 10] = 255;  // pooled cell (2, 2)
  now[13 * kFrameSide + 83] = 102;     // pooled cell (3, 20)
  now[12 * kFrameSide + 80] = 51;      // the same cell, a smaller value
  std::vector<float> f(kFeatures);
  extract_features(now, before, f.data());
  for (int i = 0; i < kPooledSize; ++i) {
    const float expected = i == 3 * kPooledSide + 20 ? 0.4f : 0.0f;
    EXPECT_FLOAT_EQ(f[i], expected) << i;
    const float change = i == 2 * kPooledSide + 2 ? -1.0f : expected;
    EXPECT_FLOAT_EQ(f[kPooledSize + i], change) << i;
  }
}

TEST(PolicyTest, BatchedForwardMatchesReference) {
  const Policy policy(5);
  constexpr int kRows = 40;
  std::vector<float> x = game_features(kRows, 17);
  Rng noise(1);  // and some dense rows, which the game never makes
  for (int i = 0; i < 3 * kFeatures; ++i) x[i] = static_cast<float>(noise.normal());
  std::vector<float> logits(kRows * kNumActions), values(kRows), ref_logits(logits.size()), ref_values(kRows);
  policy.forward_batch(x.data(), kRows, logits.data(), values.data());
  forward_reference(policy, x.data(), kRows, ref_logits.data(), ref_values.data());
  const auto close = [](float a, float b) { return std::abs(a - b) <= 1e-4f * std::max(1.0f, std::abs(b)); };
  for (std::size_t i = 0; i < logits.size(); ++i) EXPECT_PRED2(close, logits[i], ref_logits[i]) << i;
  for (int i = 0; i < kRows; ++i) EXPECT_PRED2(close, values[i], ref_values[i]) << i;
  float spread = 0;  // the comparison is not between near-zero outputs only
  for (float v : ref_logits) spread = std::max(spread, std::abs(v));
  EXPECT_GT(spread, 0.01f);
}

TEST(PolicyTest, RowsDoNotDependOnTheBatch) {
  const Policy policy(6);
  constexpr int kRows = 9;
  const std::vector<float> x = game_features(kRows, 3);
  std::vector<float> batch(kRows * kNumActions), single(kNumActions);
  policy.forward_batch(x.data(), kRows, batch.data());
  for (int r = 0; r < kRows; ++r) {
    policy.forward_batch(x.data() + std::size_t(r) * kFeatures, 1, single.data());
    EXPECT_EQ(std::memcmp(single.data(), batch.data() + r * kNumActions, sizeof(float) * kNumActions), 0);
  }
}

TEST(PolicyTest, SeededInitialisation) {
  EXPECT_EQ(Policy(1).params(), Policy(1).params());
  EXPECT_NE(Policy(1).params(), Policy(2).params());
  EXPECT_EQ(Policy(1).params().size(), Policy::kParamCount);
  const Policy copy = brisk::from_bytes<Policy>(brisk::to_bytes(Policy(1)));
  EXPECT_EQ(copy.params(), Policy(1).params());
}

TEST(PolicyTest, SamplingFollowsTheSoftmax) {
  const float logits[kNumActions] = {0.0f, std::log(2.0f), std::log(5.0f)};  // 1/8, 2/8, 5/8
  Rng a(4), b(4);
  int counts[kNumActions] = {};
  constexpr int kDraws = 40000;
  for (int i = 0; i < kDraws; ++i) {
    const int action = sample_action(logits, a);
    ASSERT_EQ(action, sample_action(logits, b));
    ++counts[action];
  }
  EXPECT_NEAR(counts[0] / double{kDraws}, 1.0 / 8, 0.01);
  EXPECT_NEAR(counts[1] / double{kDraws}, 2.0 / 8, 0.01);
  EXPECT_NEAR(counts[2] / double{kDraws}, 5.0 / 8, 0.01);
  EXPECT_EQ(greedy_action(logits), 2);
}

}  // namespace
}  // namespace brisk_rl
