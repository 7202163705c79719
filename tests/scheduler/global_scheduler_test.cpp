#include "brisk/scheduler/global_scheduler.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace brisk {
namespace {

using Demand = GlobalScheduler::Demand;
using Hints = GlobalScheduler::Hints;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);

// One heartbeat; returns what apply says (another rank has an idle core).
bool beat(GlobalScheduler& gs, int rank, std::uint64_t sequence, std::int64_t load, std::uint64_t received = 0,
          bool alive = true, Clock::time_point at = kT0) {
  const GlobalScheduler::Heartbeat h{Rank{rank}, sequence, load, received, alive};
  return gs.apply({&h, 1}, at);
}

TEST(GlobalScheduler, CapacityFitsWithCustomResourcesAndTolerance) {
  // Rank 0 (this one) has only CPUs; the others add a GPU and a custom resource.
  const std::vector<Demand> caps = {{{"CPU", 4}}, {{"CPU", 4}, {"GPU", 1}}, {{"CPU", 2}, {"fpga", 0.5}}};
  struct Row {
    const char* what;
    Demand demand;
    int want;
  };
  const std::vector<Row> rows = {
      {"no demand: every rank fits, the lowest wins the tie", {}, 0},
      {"CPUs two ranks have", {{"CPU", 3}}, 0},
      {"all the CPUs ranks 0 and 1 have", {{"CPU", 4}}, 0},
      {"a GPU", {{"GPU", 1}}, 1},
      {"a GPU, within 1e-9", {{"GPU", 1 + 5e-10}}, 1},
      {"a GPU, past 1e-9", {{"GPU", 1 + 1e-6}}, -1},
      {"a custom resource", {{"fpga", 0.5}}, 2},
      {"a custom resource, within 1e-9", {{"fpga", 0.5 + 5e-10}}, 2},
      {"more of the custom resource than any rank has", {{"fpga", 0.6}}, -1},
      {"a resource no rank has", {{"tpu", 1}}, -1},
      {"none of a resource no rank has", {{"tpu", 0}}, 0},
      {"GPU and fpga on different ranks", {{"GPU", 1}, {"fpga", 0.5}}, -1},
      {"GPU and CPUs on one rank", {{"GPU", 1}, {"CPU", 4}}, 1},
      {"too many CPUs", {{"CPU", 5}}, -1},
  };
  for (const Row& row : rows) {
    GlobalScheduler gs(Rank{0}, 3, caps);
    EXPECT_EQ(gs.choose(row.demand, {}, 0).value, row.want) << row.what;
  }
}

TEST(GlobalScheduler, NoFitGivesMinusOneAndCountsNothing) {
  GlobalScheduler gs(Rank{0}, 2, {{{"CPU", 1}}, {{"CPU", 1}}});
  EXPECT_EQ(gs.choose({{"CPU", 2}}, {}, 0), Rank{-1});
  EXPECT_EQ(gs.choose({{"GPU", 1}}, {}, 0, /*actor=*/true), Rank{-1});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(gs.node(Rank{r}).sent, 0u);
    EXPECT_EQ(gs.node(Rank{r}).actors, 0u);
  }
}

TEST(GlobalScheduler, CapacitiesPastTheListAreEmpty) {
  GlobalScheduler gs(Rank{0}, 3, {{{"CPU", 2}}});
  EXPECT_EQ(gs.node(Rank{0}).cpus, 2.0);
  EXPECT_TRUE(gs.node(Rank{2}).capacity.empty());
  EXPECT_EQ(gs.node(Rank{2}).cpus, 1.0);
  EXPECT_EQ(gs.choose({{"CPU", 2}}, {}, 100), Rank{0});  // the only fit, however loaded
}

TEST(GlobalScheduler, DeadRanksAreSkipped) {
  const std::vector<Demand> caps(4, Demand{{"CPU", 1}});
  {
    GlobalScheduler gs(Rank{0}, 4, caps);
    gs.mark_dead(Rank{1});
    EXPECT_EQ(gs.choose({}, {}, 5), Rank{2});  // 1 is idle but dead
    EXPECT_FALSE(gs.node(Rank{1}).alive);
    EXPECT_EQ(gs.node(Rank{1}).sent, 0u);
    gs.mark_dead(Rank{7});  // out of range: ignored
    gs.mark_dead(Rank{-1});
  }
  {
    // A heartbeat that says dead marks the rank dead; a later one that says alive
    // does not revive it.
    GlobalScheduler gs(Rank{0}, 4, caps);
    beat(gs, 2, 1, 0, 0, /*alive=*/false);
    EXPECT_FALSE(gs.node(Rank{2}).alive);
    beat(gs, 2, 2, 0, 0, /*alive=*/true);
    EXPECT_FALSE(gs.node(Rank{2}).alive);
    EXPECT_EQ(gs.choose({}, {}, 5), Rank{1});
    EXPECT_EQ(gs.choose({}, {}, 5), Rank{3});  // 1 has one in flight; 2 still skipped
  }
  {
    // Every rank dead but this one: this one, whatever its load; none left: -1.
    GlobalScheduler gs(Rank{0}, 4, caps);
    for (int r = 1; r < 4; ++r) gs.mark_dead(Rank{r});
    EXPECT_EQ(gs.choose({}, {}, 1000), Rank{0});
    gs.mark_dead(Rank{0});
    EXPECT_EQ(gs.choose({}, {}, 0), Rank{-1});
  }
}

TEST(GlobalScheduler, LoadPerCoreWithOwnLoadExact) {
  struct Row {
    const char* what;
    std::vector<Demand> caps;           // rank 0 is this one
    std::vector<std::int64_t> reported;  // heartbeat loads of ranks 1..
    std::int64_t own;                    // rank 0's exact load
    Demand demand;
    int want;
  };
  const std::vector<Row> rows = {
      {"idle here", {{{"CPU", 2}}, {{"CPU", 4}}, {{"CPU", 1}}}, {4, 1}, 0, {}, 0},
      {"1.5 here, 1.0 and 1.0 there: the lower rank", {{{"CPU", 2}}, {{"CPU", 4}}, {{"CPU", 1}}}, {4, 1}, 3, {}, 1},
      {"1.5 here, 1.0 and 0 there", {{{"CPU", 2}}, {{"CPU", 4}}, {{"CPU", 1}}}, {4, 0}, 3, {}, 2},
      {"per core, not in all: 7 on 8 cores beats 1 on 1", {{{"CPU", 1}}, {{"CPU", 8}}, {{"CPU", 1}}}, {7, 1}, 1, {}, 1},
      {"under one CPU counts one core", {{{"CPU", 1}}, {{"CPU", 0.5}}, {{"CPU", 2}}}, {1, 3}, 5, {}, 1},
      {"no CPU entry counts one core", {{{"CPU", 1}}, {{"GPU", 1}}, {{"CPU", 2}}}, {1, 3}, 5, {}, 1},
      {"the demand rules out the idlest", {{{"CPU", 1}}, {{"CPU", 1}}, {{"CPU", 1}, {"GPU", 1}}}, {0, 9}, 9, {{"GPU", 1}}, 2},
  };
  for (const Row& row : rows) {
    GlobalScheduler gs(Rank{0}, static_cast<int>(row.caps.size()), row.caps);
    for (std::size_t i = 0; i < row.reported.size(); ++i) beat(gs, static_cast<int>(i) + 1, 1, row.reported[i]);
    EXPECT_EQ(gs.choose(row.demand, {}, row.own).value, row.want) << row.what;
  }
}

TEST(GlobalScheduler, OwnLoadIsTheCallersNotAHeartbeat) {
  const std::vector<Demand> caps(2, Demand{{"CPU", 1}});
  {
    GlobalScheduler gs(Rank{0}, 2, caps);
    beat(gs, 0, 1, 100);  // this rank's own heartbeat, busy
    beat(gs, 1, 1, 1);
    EXPECT_EQ(gs.choose({}, {}, 0), Rank{0});
  }
  {
    GlobalScheduler gs(Rank{1}, 2, caps);  // this one is rank 1
    beat(gs, 0, 1, 1);
    beat(gs, 1, 1, 0);  // its own heartbeat says idle, but it is not
    EXPECT_EQ(gs.choose({}, {}, 2), Rank{0});
    // Tasks sent to itself are not in flight: its own load is exact.
    for (int i = 0; i < 5; ++i) EXPECT_EQ(gs.choose({}, {}, 0), Rank{1});
  }
}

TEST(GlobalScheduler, InFlightCountsUntilTheNextHeartbeat) {
  // Ranks 1 and 2 idle at their last heartbeat; this rank (0) is busy.
  GlobalScheduler gs(Rank{0}, 3, std::vector<Demand>(3, Demand{{"CPU", 1}}));
  beat(gs, 1, 1, 0);
  beat(gs, 2, 1, 0);
  const std::vector<int> want = {1, 2, 1, 2, 1};
  for (int w : want) EXPECT_EQ(gs.choose({}, {}, 100).value, w);
  EXPECT_EQ(gs.node(Rank{1}).sent, 3u);
  EXPECT_EQ(gs.node(Rank{2}).sent, 2u);
  EXPECT_EQ(gs.node(Rank{0}).sent, 0u);
  // Rank 1 got all three and finished them; rank 2 got neither yet and reports its
  // own work: rank 1 is at 0, rank 2 at 1 + 2 in flight.
  beat(gs, 1, 2, 0, /*received=*/3);
  beat(gs, 2, 2, 1, /*received=*/0);
  EXPECT_EQ(gs.choose({}, {}, 100), Rank{1});
  EXPECT_EQ(gs.choose({}, {}, 100), Rank{1});  // 1 in flight there, 3 at rank 2
  EXPECT_EQ(gs.choose({}, {}, 100), Rank{1});
  EXPECT_EQ(gs.choose({}, {}, 100), Rank{1});  // 3 against 3: the lower rank
  EXPECT_EQ(gs.choose({}, {}, 100), Rank{2});
  EXPECT_EQ(gs.node(Rank{1}).sent, 7u);
  EXPECT_EQ(gs.node(Rank{1}).received, 3u);
}

TEST(GlobalScheduler, InFlightIsNeverNegative) {
  // Rank 1 received more than this scheduler sent (other schedulers send there too):
  // its load is its report, 2, not 2 - 5.
  GlobalScheduler gs(Rank{0}, 3, std::vector<Demand>(3, Demand{{"CPU", 1}}));
  beat(gs, 1, 1, 2, /*received=*/5);
  beat(gs, 2, 1, 1);
  EXPECT_EQ(gs.choose({}, {}, 100), Rank{2});
  EXPECT_EQ(gs.choose({}, {}, 100), Rank{1});  // 2 against 1 + 1 in flight: the lower rank
}

TEST(GlobalScheduler, StaleHeartbeatsAreIgnored) {
  GlobalScheduler gs(Rank{0}, 3, std::vector<Demand>(3, Demand{{"CPU", 1}}));
  beat(gs, 1, 0, 50);  // sequence 0 is no newer than none
  EXPECT_EQ(gs.node(Rank{1}).reported, 0);
  EXPECT_EQ(gs.node(Rank{1}).heard, Clock::time_point{});
  beat(gs, 1, 5, 7, 0, true, kT0 + milliseconds(1));
  beat(gs, 1, 4, 0, 0, true, kT0 + milliseconds(2));  // older
  beat(gs, 1, 5, 0, 0, true, kT0 + milliseconds(3));  // the same again
  EXPECT_EQ(gs.node(Rank{1}).reported, 7);
  EXPECT_EQ(gs.node(Rank{1}).sequence, 5u);
  EXPECT_EQ(gs.node(Rank{1}).heard, kT0 + milliseconds(1));
  beat(gs, 1, 4, 0, 0, /*alive=*/false);  // a stale death is ignored too
  EXPECT_TRUE(gs.node(Rank{1}).alive);
  beat(gs, 1, 6, 3, 0, true, kT0 + milliseconds(4));
  EXPECT_EQ(gs.node(Rank{1}).reported, 3);
  EXPECT_EQ(gs.node(Rank{1}).heard, kT0 + milliseconds(4));
  beat(gs, 9, 1, 0);  // out of range: ignored
  beat(gs, -1, 1, 0);
  // Load 3 at rank 1 against 0 at rank 2.
  EXPECT_EQ(gs.choose({}, {}, 100), Rank{2});
}

TEST(GlobalScheduler, ApplyReportsAnIdleCoreElsewhere) {
  struct Row {
    const char* what;
    std::int64_t load1, load2;  // reported by ranks 1 (2 CPUs) and 2 (1 CPU)
    int sent_to_1;              // placed on rank 1 since (in flight)
    bool dead2;
    bool want;
  };
  const std::vector<Row> rows = {
      {"both busy", 2, 1, 0, false, false},
      {"rank 1 has a free core", 1, 1, 0, false, true},
      {"rank 2 has a free core", 2, 0, 0, false, true},
      {"in flight fills rank 1's free core", 1, 1, 1, false, false},
      {"a dead rank's free core does not count", 2, 0, 0, true, false},
  };
  for (const Row& row : rows) {
    GlobalScheduler gs(Rank{0}, 3, {{{"CPU", 4}}, {{"CPU", 2}}, {{"CPU", 1}}});
    if (row.dead2) gs.mark_dead(Rank{2});
    for (int i = 0; i < row.sent_to_1; ++i) EXPECT_EQ(gs.choose({{"CPU", 2}}, {}, 100), Rank{1});
    const GlobalScheduler::Heartbeat beats[] = {{Rank{1}, 1, row.load1, 0, true}, {Rank{2}, 1, row.load2, 0, true},
                                                {Rank{0}, 1, 0, 0, true}};  // this rank's own idle core: no matter
    EXPECT_EQ(gs.apply(beats, kT0), row.want) << row.what;
  }
}

TEST(GlobalScheduler, LocalityWinsUnlessAFullCoreMoreLoad) {
  struct Row {
    const char* what;
    std::int64_t load1, load2;  // ranks 1 and 2, 4 CPUs each; this rank (0) is full
    Hints hints;
    int want;
  };
  const std::vector<Row> rows = {
      {"no hints: the idler", 0, 3, {}, 1},
      {"all bytes on 2, under a core's worth more", 0, 3, {{2, 100}}, 2},
      {"all bytes on 2, exactly a core's worth more: the lower rank", 0, 4, {{2, 100}}, 1},
      {"all bytes on 2, more than a core's worth more", 0, 5, {{2, 100}}, 1},
      {"half the bytes on 2: half a core", 0, 1, {{2, 50}, {1, 0}, {9, 50}}, 2},
      {"half the bytes on 2, not enough against its load", 0, 3, {{2, 50}, {0, 50}}, 1},
      {"bytes split between 1 and 2, rank 1 loaded more", 3, 0, {{1, 75}, {2, 25}}, 2},
      {"bytes split, share against load: a tie", 2, 0, {{1, 75}, {2, 25}}, 1},
      {"bytes split, rank 1's share wins", 1, 0, {{1, 75}, {2, 25}}, 1},
      {"hints of zero bytes count nothing", 1, 0, {{1, 0}}, 2},
      {"bytes on this rank, which is full", 0, 0, {{0, 100}}, 1},
  };
  for (const Row& row : rows) {
    GlobalScheduler gs(Rank{0}, 3, std::vector<Demand>(3, Demand{{"CPU", 4}}));
    beat(gs, 1, 1, row.load1);
    beat(gs, 2, 1, row.load2);
    EXPECT_EQ(gs.choose({}, row.hints, 100).value, row.want) << row.what;
  }
}

TEST(GlobalScheduler, ActorsSpreadByActorsPerCore) {
  // Ranks 0 (this one) and 2 have 2 CPUs, rank 1 has 4: rank 1 takes two actors for
  // each one the others take. Load only breaks ties.
  GlobalScheduler gs(Rank{0}, 3, {{{"CPU", 2}}, {{"CPU", 4}}, {{"CPU", 2}}});
  beat(gs, 1, 1, 0);
  beat(gs, 2, 1, 0);
  std::vector<int> got;
  for (int i = 0; i < 8; ++i) got.push_back(gs.choose({}, {}, 0, /*actor=*/true).value);
  // Each choice counts a task sent, so the load (in flight) breaks each tie.
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 1, 0, 1, 2, 1}));
  EXPECT_EQ(gs.node(Rank{0}).actors, 2u);
  EXPECT_EQ(gs.node(Rank{1}).actors, 4u);
  EXPECT_EQ(gs.node(Rank{2}).actors, 2u);
  EXPECT_EQ(gs.node(Rank{1}).sent, 4u);
  // Tasks that are not actors move no actor count, and actors ignore load beyond
  // ties: rank 2 full of work still takes the next actor after ranks 0 and 1 have
  // more per core.
  for (int i = 0; i < 3; ++i) gs.choose({}, {}, 0);
  EXPECT_EQ(gs.node(Rank{0}).actors + gs.node(Rank{1}).actors + gs.node(Rank{2}).actors, 8u);
  beat(gs, 2, 2, 50);
  EXPECT_EQ(gs.choose({}, {}, 0, true), Rank{0});  // 1.0 per core each: the least load (this rank, 0)
  EXPECT_EQ(gs.choose({}, {}, 0, true), Rank{1});  // 0: 1.5, 1: 1.0 (+ 1e-3), 2: 1.0 (+ 26e-3)
  EXPECT_EQ(gs.choose({}, {}, 0, true), Rank{2});  // 0: 1.5, 1: 1.25, 2: 1.0 (+ 26e-3)
}

TEST(GlobalScheduler, ActorLoadBreaksTiesAndLocalityStillCounts) {
  struct Row {
    const char* what;
    std::int64_t own, load1;
    Hints hints;
    int want;
  };
  const std::vector<Row> rows = {
      {"no actors anywhere: the less loaded", 3, 1, {}, 1},
      {"equal load: the lower rank", 1, 1, {}, 0},
      {"a heavy load weighs 1e-3 per task per core", 900, 0, {}, 1},
      {"the argument bytes outweigh load", 0, 500, {{1, 10}}, 1},
  };
  for (const Row& row : rows) {
    GlobalScheduler gs(Rank{0}, 2, std::vector<Demand>(2, Demand{{"CPU", 1}}));
    beat(gs, 1, 1, row.load1);
    EXPECT_EQ(gs.choose({}, row.hints, row.own, /*actor=*/true).value, row.want) << row.what;
  }
  // One actor more per core outweighs up to a thousand tasks per core of load.
  GlobalScheduler gs(Rank{0}, 2, std::vector<Demand>(2, Demand{{"CPU", 1}}));
  beat(gs, 1, 1, 990);
  EXPECT_EQ(gs.choose({}, {}, 0, true), Rank{0});
  EXPECT_EQ(gs.choose({}, {}, 0, true), Rank{1});  // 1 actor here against 0 there, loaded
}

TEST(GlobalScheduler, SoleRankForADemand) {
  // Rank 0's "rank1" of 0 is none: rank 1 stays the only one with some.
  const std::vector<Demand> caps = {{{"CPU", 2}, {"rank1", 0}},
                                    {{"CPU", 2}, {"rank1", 1}},
                                    {{"CPU", 2}, {"GPU", 1}},
                                    {{"CPU", 2}, {"GPU", 2}, {"rank3", 0}}};
  struct Row {
    const char* what;
    Demand demand;
    int want;
  };
  const std::vector<Row> rows = {
      {"a resource one rank has", {{"rank1", 1}}, 1},
      {"with CPUs it has", {{"rank1", 1}, {"CPU", 2}}, 1},
      {"with more CPUs than it has", {{"rank1", 1}, {"CPU", 3}}, -1},
      {"within 1e-9", {{"rank1", 1 + 5e-10}}, 1},
      {"past 1e-9", {{"rank1", 1 + 1e-6}}, -1},
      {"two ranks have GPUs", {{"GPU", 1}}, -1},
      {"two ranks have GPUs, one has 2", {{"GPU", 2}}, -1},
      {"every rank has CPUs", {{"CPU", 1}}, -1},
      {"no demand", {}, -1},
      {"only zero amounts", {{"rank1", 0}}, -1},
      {"a resource no rank has", {{"tpu", 1}}, -1},
      {"a resource no rank has, beside one rank's", {{"rank1", 1}, {"tpu", 1}}, -1},
      {"even a tiny amount of it (within the tolerance)", {{"rank1", 1}, {"tpu", 5e-10}}, -1},
      {"a capacity of zero is none", {{"rank3", 0.5}}, -1},
      {"the rarest resource decides", {{"GPU", 1}, {"rank1", 1}}, -1},
  };
  GlobalScheduler gs(Rank{0}, 4, caps);
  for (const Row& row : rows) EXPECT_EQ(gs.sole(row.demand).value, row.want) << row.what;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(gs.node(Rank{r}).sent, 0u);  // sole places nothing

  GlobalScheduler by_heartbeat(Rank{0}, 4, caps);
  beat(by_heartbeat, 1, 1, 0, 0, /*alive=*/false);
  EXPECT_EQ(by_heartbeat.sole({{"rank1", 1}}), Rank{-1});
  gs.mark_dead(Rank{1});
  EXPECT_EQ(gs.sole({{"rank1", 1}}), Rank{-1});
}

TEST(GlobalScheduler, SilentRanks) {
  const auto timeout = milliseconds(100);
  GlobalScheduler gs(Rank{1}, 4, std::vector<Demand>(4, Demand{{"CPU", 1}}));
  // Never heard: the clock starts at the first look.
  EXPECT_TRUE(gs.silent(kT0, {}, timeout).empty());
  EXPECT_EQ(gs.node(Rank{0}).heard, kT0);
  EXPECT_EQ(gs.node(Rank{1}).heard, Clock::time_point{});  // this rank is never looked at
  beat(gs, 2, 1, 0, 0, true, kT0 + milliseconds(80));
  gs.mark_dead(Rank{3});
  EXPECT_TRUE(gs.silent(kT0 + timeout, {}, timeout).empty());  // not more than the timeout
  EXPECT_EQ(gs.silent(kT0 + milliseconds(101), {}, timeout), std::vector<int>{0});
  // Rank 2 heard at 80 ms, silent after 180 ms; rank 3 is dead, not silent.
  EXPECT_EQ(gs.silent(kT0 + milliseconds(181), {}, timeout), (std::vector<int>{0, 2}));
  // A gap in which this rank did not listen moves the last-heard times on.
  EXPECT_TRUE(gs.silent(kT0 + milliseconds(190), milliseconds(150), timeout).empty());
  EXPECT_EQ(gs.node(Rank{0}).heard, kT0 + milliseconds(150));
  EXPECT_EQ(gs.node(Rank{2}).heard, kT0 + milliseconds(190));  // at most up to now
  // A fresh window for all.
  EXPECT_EQ(gs.silent(kT0 + milliseconds(251), {}, timeout), std::vector<int>{0});
  gs.heard_all(kT0 + milliseconds(251));
  EXPECT_TRUE(gs.silent(kT0 + milliseconds(351), {}, timeout).empty());
  EXPECT_EQ(gs.silent(kT0 + milliseconds(352), {}, timeout), (std::vector<int>{0, 2}));
}

}  // namespace
}  // namespace brisk
