#include "brisk/runtime/fault_inject.hpp"

#include <gtest/gtest.h>

namespace brisk {
namespace {

TEST(FaultInject, ParsesAKillPlan) {
  auto p = parse_fault_inject("kill:2:100-600:7");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_TRUE(p->has_value());
  const KillPlan& k = **p;
  EXPECT_EQ(k.rank, 2);
  EXPECT_EQ(k.min_ms, 100);
  EXPECT_EQ(k.max_ms, 600);
  EXPECT_EQ(k.seed, 7u);
  const int d = k.delay_ms();
  EXPECT_GE(d, 100);
  EXPECT_LE(d, 600);
  EXPECT_EQ(d, k.delay_ms());  // the same seed, the same time
  auto fixed = parse_fault_inject("kill:0:50-50");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ((*fixed)->delay_ms(), 50);
  EXPECT_EQ((*fixed)->seed, 1u);
}

TEST(FaultInject, AKillAtADataTaskFiresOnceAtTheDrawnTask) {
  auto p = parse_fault_inject("kill-at-task:1:10-20:5");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_TRUE(p->has_value());
  const KillPlan& k = **p;
  EXPECT_EQ(k.unit, KillPlan::Unit::kDataTasks);
  EXPECT_EQ(k.rank, 1);
  const int n = k.delay_ms();
  EXPECT_GE(n, 10);
  EXPECT_LE(n, 20);
  EXPECT_EQ((*parse_fault_inject("kill:1:10-20"))->unit, KillPlan::Unit::kMilliseconds);
  EXPECT_EQ((*parse_fault_inject("kill-in-fill:1:1-1"))->unit, KillPlan::Unit::kFills);
  // Another rank: nothing armed. (The rank named would be killed at task n.)
  EXPECT_FALSE(arm_fault_injection(k, 0));
}

TEST(FaultInject, SeveralInjectionsAreSeparatedByCommas) {
  auto p = parse_fault_injects("kill-at-task:2:5-5,checkpoint-stall,kill:3:7-7");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].rank, 2);
  EXPECT_EQ((*p)[0].unit, KillPlan::Unit::kDataTasks);
  EXPECT_EQ((*p)[1].rank, 3);
  EXPECT_EQ((*p)[1].delay_ms(), 7);
  auto bad = parse_fault_injects("kill:1:1-2,kill:x:1-2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'x' is not a rank"), std::string::npos) << bad.status().message();
}

TEST(FaultInject, AKillInACheckpointIsArmedApartFromTaskKills) {
  auto p = parse_fault_injects("kill-in-checkpoint:1:3-3,kill-at-task:1:50-50");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].unit, KillPlan::Unit::kCheckpointParts);
  EXPECT_EQ((*p)[0].delay_ms(), 3);
  // Each unit gets its own hook, only on the rank named.
  EXPECT_TRUE(arm_fault_injections(*p, KillPlan::Unit::kCheckpointParts, 1));
  EXPECT_FALSE(arm_fault_injections(*p, KillPlan::Unit::kCheckpointParts, 0));
  EXPECT_FALSE(arm_fault_injections(*p, KillPlan::Unit::kMilliseconds, 1));
  // Calling the hook before the drawn part does nothing.
  auto hook = arm_fault_injections(*p, KillPlan::Unit::kCheckpointParts, 1);
  hook();
  hook();
}

TEST(FaultInject, AKillAfterACheckpointReportHasItsOwnHook) {
  auto p = parse_fault_injects("kill-after-checkpoint-report:2:2-2,kill-in-checkpoint:2:5-5");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].unit, KillPlan::Unit::kCheckpointReports);
  EXPECT_EQ((*p)[0].delay_ms(), 2);
  EXPECT_EQ((*p)[1].unit, KillPlan::Unit::kCheckpointParts);
  auto hook = arm_fault_injections(*p, KillPlan::Unit::kCheckpointReports, 2);
  ASSERT_TRUE(hook);
  hook();  // the first report: not the drawn one
  EXPECT_FALSE(arm_fault_injections(*p, KillPlan::Unit::kCheckpointReports, 1));
}

TEST(FaultInject, AStallInACheckpointIsACheckpointPlanThatStalls) {
  auto p = parse_fault_injects("stall-in-checkpoint:2:4-4:9,kill-in-checkpoint:1:3-3");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].unit, KillPlan::Unit::kCheckpointParts);
  EXPECT_TRUE((*p)[0].stall);
  EXPECT_EQ((*p)[0].rank, 2);
  EXPECT_EQ((*p)[0].delay_ms(), 4);
  EXPECT_FALSE((*p)[1].stall);
  // Before the drawn part the hook returns at once.
  auto hook = arm_fault_injections(*p, KillPlan::Unit::kCheckpointParts, 2);
  ASSERT_TRUE(hook);
  for (int i = 0; i < 3; ++i) hook();
}

TEST(FaultInject, OtherInjectionsAreNotKills) {
  for (const char* v : {"", "checkpoint-stall"}) {
    auto p = parse_fault_inject(v);
    ASSERT_TRUE(p.ok()) << v;
    EXPECT_FALSE(p->has_value()) << v;
  }
}

TEST(FaultInject, BadValuesSayWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"explode:1:1-2", "unknown injection 'explode'"},
      {"kill:1", "wrong number of fields"},
      {"kill:x:1-2", "'x' is not a rank"},
      {"kill:-1:1-2", "'-1' is not a rank"},
      {"kill:1:5-2", "'5-2' is not a window"},
      {"kill:1:5", "'5' is not a window"},
      {"kill:1:1-2:seven", "'seven' is not a seed"},
      {"kill:1:1-2:3:4", "wrong number of fields"},
      {"kill-at-task:1:9", "'9' is not a window"},
  };
  for (const auto& [value, why] : cases) {
    auto p = parse_fault_inject(value);
    ASSERT_FALSE(p.ok()) << value;
    EXPECT_NE(p.status().message().find(why), std::string::npos) << p.status().message();
    EXPECT_NE(p.status().message().find(value), std::string::npos) << p.status().message();
  }
}

}  // namespace
}  // namespace brisk
