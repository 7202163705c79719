// ActorResults: the results of replayed actor calls held on another rank wait for
// the rebuilt actor's replay when that rank dies, instead of being lost (the chaos
// runs found a large actor result lost: benchmarks/fault/chaos.py, seed 30).
#include "brisk/runtime/actor_results.hpp"

#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "brisk/core/detail/object.hpp"

namespace brisk {
namespace {

using detail::ObjectState;
using detail::TypedObject;

constexpr TaskId kActor{{7, 7}};
constexpr Rank kHolder{2};

ObjectId id_of(std::uint64_t n) { return ObjectId{{1, n}}; }

// The replays the creator will run: (actor, build) pairs below the pending build.
struct Replays {
  std::uint32_t pending_after = ~std::uint32_t{0};  // builds before this one will be replayed
  bool operator()(TaskId actor, std::uint32_t incarnation) const { return actor == kActor && incarnation < pending_after; }
};

struct Lost {
  std::set<int> ranks;
  bool operator()(Rank r) const { return ranks.count(r.value) != 0; }
};

class ActorResultsTest : public ::testing::Test {
 protected:
  ~ActorResultsTest() override {
    for (ObjectState* o : objects_) o->release();
  }
  ObjectState* make(std::uint64_t n) {
    auto* o = new TypedObject<int>(id_of(n));
    objects_.push_back(o);
    return o;
  }
  std::vector<ObjectState*> objects_;  // one reference each: the test's
};

TEST_F(ActorResultsTest, AReadBeforeTheReplayWaitsForIt) {
  ActorResults results;
  ObjectState* o = make(1);
  results.held(o->id(), kActor, 0, kHolder);
  // The holder died; a rebuild after build 0 is under way: the reader waits.
  EXPECT_EQ(results.park(o, Replays{1}, true), ActorResults::Park::kWaiting);
  EXPECT_EQ(o->ref_count(), 2);  // parked
  EXPECT_EQ(results.park(o, Replays{1}, true), ActorResults::Park::kUnderWay);
  // The replay reaches the call: it is made again, the parked reference goes.
  EXPECT_TRUE(results.take(o->id(), kActor, 1, o, Lost{{2}}));
  EXPECT_EQ(o->ref_count(), 1);
  EXPECT_TRUE(results.replay_done(kActor).empty());
  // The new copy, on rank 1.
  results.held(o->id(), kActor, 1, Rank{1});
  EXPECT_FALSE(results.take(o->id(), kActor, 1, o, Lost{{2}}));  // that copy lives
}

TEST_F(ActorResultsTest, TheReplayTakesResultsNobodyReadYet) {
  ActorResults results;
  ObjectState* dead = make(1);
  ObjectState* live = make(2);
  results.held(dead->id(), kActor, 0, kHolder);
  results.held(live->id(), kActor, 0, Rank{3});
  // A read-back from a checkpoint under way: left to it.
  EXPECT_FALSE(results.take(dead->id(), kActor, 1, dead, Lost{{2}}, /*under_way=*/true));
  EXPECT_TRUE(results.take(dead->id(), kActor, 1, dead, Lost{{2}}));
  EXPECT_FALSE(results.take(live->id(), kActor, 1, live, Lost{{2}}));
  EXPECT_FALSE(results.take(dead->id(), TaskId{{9, 9}}, 1, dead, Lost{{2}}));  // another actor's replay
  EXPECT_FALSE(results.take(id_of(5), kActor, 1, nullptr, Lost{{2}}));         // gone
  // Being made again: a late reader waits for that.
  EXPECT_EQ(results.park(dead, Replays{0}, true), ActorResults::Park::kUnderWay);
}

TEST_F(ActorResultsTest, NoReplayMeansLost) {
  ActorResults results;
  ObjectState* o = make(1);
  results.held(o->id(), kActor, 0, kHolder);
  // No rebuild pending (no restarts left, or its replay already ran): lost.
  EXPECT_EQ(results.park(o, Replays{0}, true), ActorResults::Park::kLost);
  EXPECT_FALSE(results.tracks(o->id()));
  EXPECT_EQ(o->ref_count(), 1);
  EXPECT_EQ(results.park(make(2), Replays{0}, true), ActorResults::Park::kNotTracked);
}

TEST_F(ActorResultsTest, AReplayThatEndsWithoutItLeavesItLost) {
  ActorResults results;
  ObjectState* o = make(1);
  results.held(o->id(), kActor, 0, kHolder);
  ASSERT_EQ(results.park(o, Replays{1}, true), ActorResults::Park::kWaiting);
  const auto lost = results.replay_done(kActor);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0], o);
  lost[0]->release();  // the parked reference, handed over
  EXPECT_FALSE(results.tracks(o->id()));
}

TEST_F(ActorResultsTest, APullThatFailsBeforeTheLossIsKnownWaitsForIt) {
  ActorResults results;
  ObjectState* replayed = make(1);
  ObjectState* not_replayed = make(2);
  results.held(replayed->id(), kActor, 0, kHolder);
  results.held(not_replayed->id(), kActor, 5, kHolder);
  // The actor table has not heard of the loss yet: no replay pending, holder alive.
  EXPECT_EQ(results.park(replayed, Replays{0}, false), ActorResults::Park::kWaiting);
  EXPECT_EQ(results.park(not_replayed, Replays{0}, false), ActorResults::Park::kWaiting);
  EXPECT_TRUE(results.rank_lost(Rank{1}, Replays{1}).empty());  // another rank's loss
  // Now it has: a rebuild after build 0 is pending, none after build 5.
  const auto lost = results.rank_lost(kHolder, Replays{1});
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0], not_replayed);
  lost[0]->release();
  EXPECT_TRUE(results.take(replayed->id(), kActor, 1, replayed, Lost{{2}}));
  EXPECT_EQ(replayed->ref_count(), 1);
}

TEST_F(ActorResultsTest, ARebuildLostWithItsRankWaitsForTheNextReplay) {
  ActorResults results;
  ObjectState* o = make(1);
  results.held(o->id(), kActor, 0, kHolder);
  ASSERT_TRUE(results.take(o->id(), kActor, 1, o, Lost{{2}}));
  // Build 1's rank dies while it runs the call: build 2's replay will make it.
  o->add_ref();  // the pending entry's
  EXPECT_TRUE(results.rebuild_lost(o, Replays{2}));
  EXPECT_EQ(o->ref_count(), 2);
  EXPECT_TRUE(results.take(o->id(), kActor, 2, o, Lost{{2, 3}}));
  EXPECT_EQ(o->ref_count(), 1);
  // No further rebuild: lost, the caller keeps its reference.
  o->add_ref();
  EXPECT_FALSE(results.rebuild_lost(o, Replays{0}));
  o->release();
  EXPECT_FALSE(results.tracks(o->id()));
}

TEST_F(ActorResultsTest, ForgettingDropsAParkedReference) {
  ObjectState* o = make(1);
  {
    ActorResults results;
    results.held(o->id(), kActor, 0, kHolder);
    ASSERT_EQ(results.park(o, Replays{1}, true), ActorResults::Park::kWaiting);
    results.forget(o->id());
    EXPECT_EQ(o->ref_count(), 1);
    results.held(o->id(), kActor, 0, kHolder);
    ASSERT_EQ(results.park(o, Replays{1}, true), ActorResults::Park::kWaiting);
  }  // the destructor releases what is parked
  EXPECT_EQ(o->ref_count(), 1);
}

}  // namespace
}  // namespace brisk
