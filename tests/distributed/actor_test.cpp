// Actors under mpirun with 1 to 4 ranks (both transports): ordering, state, errors,
// placement, and handles passed to tasks and to other actors. GoogleTest runs in the
// driver on rank 0; the other ranks serve.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "brisk/brisk.hpp"

namespace {

std::map<std::string, double> on(int r) { return {{"rank" + std::to_string(r), 1}}; }
int last_rank() { return brisk::size() - 1; }

struct Counter {
  explicit Counter(long start) : total(start) {}
  long add(long k) { return total += k; }
  long value() const { return total; }
  long add_or_throw(long k) {
    if (k < 0) throw std::invalid_argument("negative increment " + std::to_string(k));
    return total += k;
  }
  int where() const { return brisk::rank(); }
  long total;
};
BRISK_REMOTE(Counter::add);
BRISK_REMOTE(Counter::value);
BRISK_REMOTE(Counter::add_or_throw);
BRISK_REMOTE(Counter::where);

// Records the order in which calls arrive, per caller tag.
struct Log {
  Log() = default;
  int record(int tag, int seq) {
    entries.emplace_back(tag, seq);
    return static_cast<int>(entries.size());
  }
  std::vector<std::pair<int, int>> all() const { return entries; }
  std::vector<std::pair<int, int>> entries;
};
BRISK_REMOTE(Log::record);
BRISK_REMOTE(Log::all);

struct Broken {
  explicit Broken(int why) { throw std::runtime_error("cannot build Broken " + std::to_string(why)); }
  int nothing() { return 0; }
};
BRISK_REMOTE(Broken::nothing);

struct Unregistered {
  int hidden() { return 1; }
};

int slow_value(int ms, int v) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return v;
}
BRISK_REMOTE(slow_value);

// A task that calls the actor through a handle it received, in order.
long add_many(brisk::Actor<Counter> c, int n) {
  brisk::Ref<long> last;
  for (int i = 0; i < n; ++i) last = c.call(&Counter::add, 1L);
  return brisk::get(last);
}
BRISK_REMOTE(add_many);

int log_many(brisk::Actor<Log> log, int tag, int n) {
  std::vector<brisk::Ref<int>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(log.call(&Log::record, tag, i));
  brisk::get(refs);
  return tag;
}
BRISK_REMOTE(log_many);

// An actor holding another actor's handle.
struct Forwarder {
  explicit Forwarder(brisk::Actor<Counter> c) : target(std::move(c)) {}
  long forward(long k) { return brisk::get(target.call(&Counter::add, k)); }
  brisk::Actor<Counter> target;
};
BRISK_REMOTE(Forwarder::forward);

TEST(Actor, CallsRunInOrderAndKeepState) {
  auto c = brisk::actor<Counter>(10L);
  std::vector<brisk::Ref<long>> refs;
  for (long i = 1; i <= 300; ++i) refs.push_back(c.call(&Counter::add, i));
  long expect = 10;
  for (long i = 1; i <= 300; ++i) {
    expect += i;
    ASSERT_EQ(brisk::get(refs[static_cast<std::size_t>(i - 1)]), expect) << "call " << i;
  }
  EXPECT_EQ(brisk::get(c.call(&Counter::value)), expect);
}

TEST(Actor, ACallWaitsForItsRefArgumentsAndLaterCallsWaitBehindIt) {
  auto c = brisk::actor<Counter>(0L);
  auto slow = brisk::remote(slow_value, 300, 5);
  auto first = c.call(&Counter::add, brisk::remote(slow_value, 0, 0));
  auto second = c.call(&Counter::add, slow);   // waits 300 ms for its argument
  auto third = c.call(&Counter::add, 100L);    // must run after second
  EXPECT_EQ(brisk::get(third), 105);
  EXPECT_EQ(brisk::get(second), 5);
  EXPECT_EQ(brisk::get(first), 0);
}

TEST(Actor, PinnedByResourcesAndSpreadOverRanks) {
  auto pinned = brisk::actor<Counter>(brisk::ActorOptions{.resources = on(last_rank())}, 0L);
  EXPECT_EQ(pinned.rank(), last_rank());
  EXPECT_EQ(brisk::get(pinned.call(&Counter::where)), last_rank());
  std::vector<brisk::Actor<Counter>> many;
  for (int i = 0; i < 2 * brisk::size(); ++i) many.push_back(brisk::actor<Counter>(0L));
  std::set<int> ranks;
  for (const auto& a : many) {
    ranks.insert(a.rank());
    EXPECT_EQ(brisk::get(a.call(&Counter::where)), a.rank());
  }
  EXPECT_EQ(static_cast<int>(ranks.size()), brisk::size()) << "actors were not spread over every rank";
}

TEST(Actor, AThrowingConstructorFailsEveryCallWithItsError) {
  auto b = brisk::actor<Broken>(7);
  auto r = b.call(&Broken::nothing);
  try {
    brisk::get(r);
    FAIL() << "expected TaskError";
  } catch (const brisk::TaskError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot build Broken 7"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.rank(), brisk::TaskError);
  EXPECT_THROW(brisk::get(b.call(&Broken::nothing)), brisk::TaskError);
}

TEST(Actor, AThrowingMethodFailsThatCallOnly) {
  auto c = brisk::actor<Counter>(brisk::ActorOptions{.resources = on(last_rank())}, 1L);
  auto ok1 = c.call(&Counter::add_or_throw, 2L);
  auto bad = c.call(&Counter::add_or_throw, -4L);
  auto ok2 = c.call(&Counter::add_or_throw, 3L);
  EXPECT_EQ(brisk::get(ok1), 3);
  try {
    brisk::get(bad);
    FAIL() << "expected TaskError";
  } catch (const brisk::TaskError& e) {
    EXPECT_NE(std::string(e.what()).find("negative increment -4"), std::string::npos) << e.what();
  }
  EXPECT_EQ(brisk::get(ok2), 6);
}

TEST(Actor, UnregisteredMethodIsAClearError) {
  auto u = brisk::actor<Unregistered>();
  try {
    u.call(&Unregistered::hidden);
    FAIL() << "expected brisk::Error";
  } catch (const brisk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRISK_REMOTE(Class::method)"), std::string::npos) << e.what();
  }
}

TEST(Actor, HandlesPassedToTasksOnOtherRanks) {
  auto c = brisk::actor<Counter>(brisk::ActorOptions{.resources = on(0)}, 0L);
  std::vector<brisk::Ref<long>> parts;
  for (int r = 0; r < brisk::size(); ++r) parts.push_back(brisk::task(add_many).resources(on(r)).remote(c, 50));
  brisk::get(parts);
  EXPECT_EQ(brisk::get(c.call(&Counter::value)), 50L * brisk::size());
}

TEST(Actor, AHandlePassedBeforeTheActorExistsMakesTheTaskWait) {
  // The constructor waits for a slow argument; the task that takes the handle waits too.
  auto c = brisk::actor<Counter>(brisk::ActorOptions{.resources = on(last_rank())},
                                 brisk::remote(slow_value, 200, 1000));
  auto r = brisk::task(add_many).resources(on(0)).remote(c, 3);
  EXPECT_EQ(brisk::get(r), 1003);
}

TEST(Actor, EachCallersCallsRunInItsOrder) {
  auto log = brisk::actor<Log>(brisk::ActorOptions{.resources = on(last_rank())});
  std::vector<brisk::Ref<int>> callers;
  for (int tag = 0; tag < 6; ++tag) {
    callers.push_back(brisk::task(log_many).resources(on(tag % brisk::size())).remote(log, tag, 40));
  }
  brisk::get(callers);
  auto entries = brisk::get(log.call(&Log::all));
  ASSERT_EQ(entries.size(), 240u);
  std::map<int, int> next;
  for (auto [tag, seq] : entries) {
    EXPECT_EQ(seq, next[tag]) << "caller " << tag << " out of order";
    next[tag] = seq + 1;
  }
}

TEST(Actor, AnActorHoldsAnotherActorsHandle) {
  auto c = brisk::actor<Counter>(brisk::ActorOptions{.resources = on(0)}, 5L);
  auto f = brisk::actor<Forwarder>(brisk::ActorOptions{.resources = on(last_rank())}, c);
  EXPECT_EQ(brisk::get(f.call(&Forwarder::forward, 10L)), 15);
  EXPECT_EQ(brisk::get(f.call(&Forwarder::forward, 1L)), 16);
  EXPECT_EQ(brisk::get(c.call(&Counter::value)), 16);
}

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [&] {
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
  });
}
