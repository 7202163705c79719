#include "brisk_rl/mcts.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "brisk/core/serialize.hpp"

namespace brisk_rl {
namespace {

static_assert(brisk::Serializable<Leaf>);

TEST(MctsTest, RolloutIsAFunctionOfItsArguments) {
  Pong game(5);
  for (int i = 0; i < 20; ++i) game.step(kDown);
  EXPECT_EQ(rollout(game, kUp, 200, 7), rollout(game, kUp, 200, 7));
  EXPECT_EQ(game.steps(), 20);  // the caller's state is untouched
  bool differs = false;
  for (std::uint64_t seed = 0; seed < 20 && !differs; ++seed) {
    differs = rollout(game, kUp, 200, seed) != rollout(game, kUp, 200, 99);
  }
  EXPECT_TRUE(differs);
}

TEST(MctsTest, LeavesInFlightReturnInAnyOrder) {
  Pong game(6);
  for (int i = 0; i < 10; ++i) game.step(kStay);
  Mcts tree(game, MctsConfig{.seed = 3}), replay(game, MctsConfig{.seed = 3});
  std::vector<Leaf> leaves;
  for (int i = 0; i < 12; ++i) leaves.push_back(tree.select_and_expand());
  EXPECT_EQ(tree.outstanding(), 12);
  for (int a = 0; a < kNumActions; ++a) {
    EXPECT_EQ(leaves[a].first_action, a);  // the root's actions come first
    EXPECT_EQ(leaves[a].state.steps(), game.steps());
  }
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      EXPECT_NE(leaves[i].handle, leaves[j].handle);
      EXPECT_NE(leaves[i].seed, leaves[j].seed);
    }
  }
  // Values come back in reverse order, and one leaf travels as bytes.
  leaves[5] = brisk::from_bytes<Leaf>(brisk::to_bytes(leaves[5]));
  for (auto it = leaves.rbegin(); it != leaves.rend(); ++it) {
    tree.backup(it->handle, rollout(it->state, it->first_action, 40, it->seed));
  }
  EXPECT_EQ(tree.outstanding(), 0);
  int visits = 0;
  for (int a = 0; a < kNumActions; ++a) visits += tree.visits(a);
  EXPECT_EQ(visits, 12);
  EXPECT_THROW(tree.backup(leaves[0].handle, 0.0), std::invalid_argument);

  // The same calls give the same tree.
  for (int i = 0; i < 12; ++i) {
    const Leaf leaf = replay.select_and_expand();
    EXPECT_EQ(leaf.handle, leaves[i].handle);
    EXPECT_EQ(leaf.first_action, leaves[i].first_action);
    EXPECT_EQ(leaf.state.frame(), leaves[i].state.frame());
  }
}

double play_episode(std::uint64_t seed, int rollouts) {
  Pong game(seed);
  Rng random(seed);
  double total = 0;
  while (!game.done()) {
    int action = random.below(kNumActions);
    if (rollouts > 0) {
      Mcts tree(game, MctsConfig{.seed = mix_seed(seed, game.steps())});
      tree.search(rollouts, 40);
      action = tree.best_action();
    }
    total += game.step(action).reward;
  }
  return total;
}

TEST(MctsTest, SmallSearchBeatsRandomPlay) {
  double searched = 0, random = 0;
  constexpr int kEpisodes = 3;
  for (int e = 0; e < kEpisodes; ++e) {
    searched += play_episode(50 + e, 12) / kEpisodes;
    random += play_episode(50 + e, 0) / kEpisodes;
  }
  std::printf("mean episode reward: search with 12 rollouts %.2f, random %.2f\n", searched, random);
  EXPECT_GT(searched, random + 4.0);
  EXPECT_GT(searched, 2.0);
}

}  // namespace
}  // namespace brisk_rl
