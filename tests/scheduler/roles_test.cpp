#include "brisk/scheduler/roles.hpp"

#include <gtest/gtest.h>

namespace brisk {
namespace {

TEST(Roles, DefaultsGrowWithTheJob) {
  auto one = assign_roles(1, 0, 0);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->shards.size(), 1u);
  EXPECT_EQ(one->schedulers.size(), 1u);
  EXPECT_EQ(one->describe(Rank{0}), "worker+shard0+scheduler0");

  auto four = assign_roles(4, 0, 0);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->describe(Rank{0}), "worker+shard0+scheduler0");
  EXPECT_EQ(four->describe(Rank{3}), "worker");

  auto big = assign_roles(100, 0, 0);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->shards.size(), 7u);      // one per 16 ranks
  EXPECT_EQ(big->schedulers.size(), 4u);  // one per 32 ranks
}

TEST(Roles, SpreadEvenlyAndEveryRankHasAScheduler) {
  auto r = assign_roles(8, 4, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shards, (std::vector<Rank>{Rank{0}, Rank{2}, Rank{4}, Rank{6}}));
  EXPECT_EQ(r->schedulers, (std::vector<Rank>{Rank{0}, Rank{4}}));
  EXPECT_EQ(r->scheduler_for(Rank{1}), Rank{0});
  EXPECT_EQ(r->scheduler_for(Rank{5}), Rank{4});
  EXPECT_EQ(r->describe(Rank{4}), "worker+shard2+scheduler1");
}

TEST(Roles, MoreRolesThanRanksIsAClearError) {
  auto r = assign_roles(2, 3, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--brisk-shards=3 is more than the 2 ranks"), std::string::npos);
  auto s = assign_roles(2, 0, 5);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--brisk-schedulers=5"), std::string::npos);
}

}  // namespace
}  // namespace brisk
