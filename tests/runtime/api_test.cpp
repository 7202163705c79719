// The task API on one node: remote, get, wait, put, task options, errors.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "testing/runtime_fixture.hpp"

namespace {

int add(int a, int b) { return a + b; }
BRISK_REMOTE(add);

int increment(int x) { return x + 1; }
BRISK_REMOTE(increment);

std::string greet(const std::string& who) { return "hello " + who; }
BRISK_REMOTE(greet);

std::atomic<int> g_side_effects{0};
void touch(int n) { g_side_effects.fetch_add(n); }
BRISK_REMOTE(touch);

int always_throws(int) { throw std::runtime_error("boom at the source"); }
BRISK_REMOTE(always_throws);

std::atomic<int> g_flaky_calls{0};
int flaky(int fail_times) {
  if (g_flaky_calls.fetch_add(1) < fail_times) throw std::runtime_error("transient");
  return 42;
}
BRISK_REMOTE(flaky);

long sum_vector(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0L); }
BRISK_REMOTE(sum_vector);

int sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
BRISK_REMOTE(sleep_ms);

// A task the test holds until it lets it go (held_finished tells whether it has
// ended): so that "wait returned before the task finished" is an observed fact, not
// a guess from a clock. A backstop of 60 s ends a task never let go, so that a wait
// that wrongly waits for it fails instead of hanging.
std::mutex g_hold_mutex;
std::condition_variable g_hold_cv;
bool g_held_released = false;
std::atomic<bool> g_held_finished{false};
int held(int value) {
  std::unique_lock lock(g_hold_mutex);
  g_hold_cv.wait_for(lock, std::chrono::seconds(60), [] { return g_held_released; });
  g_held_finished = true;
  return value;
}
BRISK_REMOTE(held);
void hold_next() {
  std::lock_guard lock(g_hold_mutex);
  g_held_released = false;
  g_held_finished = false;
}
void release_held() {
  std::lock_guard lock(g_hold_mutex);
  g_held_released = true;
  g_hold_cv.notify_all();
}

// Dynamic task creation: fib submits its own children and gets them.
long fib(int n) {
  if (n < 2) return n;
  auto a = brisk::remote(fib, n - 1);
  auto b = brisk::remote(fib, n - 2);
  return brisk::get(a) + brisk::get(b);
}
BRISK_REMOTE(fib);

int scale(int x) { return 2 * x; }
double scale(double x) { return 0.5 * x; }
BRISK_REMOTE_OVERLOAD(scale, int(int));
BRISK_REMOTE_OVERLOAD(scale, double(double));

struct Physics {
  static double step(double x) { return x * 3; }
};
BRISK_REMOTE(Physics::step);

int not_registered(int x) { return x; }

struct Point {
  int x = 0;
  std::string label;
  template <class A>
  void serialize(A& ar) {
    ar(x, label);
  }
};
Point make_point(int x) { return Point{x, "p" + std::to_string(x)}; }
BRISK_REMOTE(make_point);
int point_x(const Point& p) { return p.x; }
BRISK_REMOTE(point_x);

// Waits for a gate object inside a task: the worker blocks.
int wait_for_gate(brisk::Ref<int> gate) { return brisk::get(gate) + 1; }
BRISK_REMOTE(wait_for_gate);

using ApiTest = brisk::testing::RuntimeTest;

TEST_F(ApiTest, RemoteAndGet) {
  auto r = brisk::remote(add, 1, 2);
  EXPECT_EQ(brisk::get(r), 3);
  EXPECT_EQ(brisk::get(brisk::remote(greet, std::string("world"))), "hello world");
}

TEST_F(ApiTest, RefArgumentIsADependency) {
  auto a = brisk::remote(add, 1, 2);
  auto b = brisk::remote(add, a, 10);
  auto c = brisk::remote(add, a, b);
  EXPECT_EQ(brisk::get(c), 16);
}

TEST_F(ApiTest, LongChain) {
  brisk::Ref<int> r = brisk::put(0);
  for (int i = 0; i < 10000; ++i) r = brisk::remote(increment, r);
  EXPECT_EQ(brisk::get(r), 10000);
}

TEST_F(ApiTest, VoidTask) {
  g_side_effects = 0;
  auto r = brisk::remote(touch, 5);
  brisk::get(r);
  EXPECT_EQ(g_side_effects.load(), 5);
}

TEST_F(ApiTest, VectorOfRefsArgumentWaitsForAll) {
  std::vector<brisk::Ref<int>> parts;
  for (int i = 0; i < 100; ++i) parts.push_back(brisk::remote(add, i, 0));
  EXPECT_EQ(brisk::get(brisk::remote(sum_vector, parts)), 4950);
}

TEST_F(ApiTest, GetVector) {
  std::vector<brisk::Ref<int>> refs;
  for (int i = 0; i < 10; ++i) refs.push_back(brisk::remote(add, i, i));
  std::vector<int> values = brisk::get(refs);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(values[i], 2 * i);
}

TEST_F(ApiTest, NestedTasks) { EXPECT_EQ(brisk::get(brisk::remote(fib, 15)), 610); }

TEST_F(ApiTest, OverloadsAndStaticMembers) {
  EXPECT_EQ(brisk::get(brisk::remote<int(int)>(scale, 4)), 8);
  EXPECT_DOUBLE_EQ(brisk::get(brisk::remote<double(double)>(scale, 4.0)), 2.0);
  EXPECT_DOUBLE_EQ(brisk::get(brisk::remote(Physics::step, 2.0)), 6.0);
}

TEST_F(ApiTest, FunctionIdsComeFromNames) {
  const brisk::FunctionInfo* info = brisk::detail::find_function(brisk::detail::function_address(&add));
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->name, "add");
  EXPECT_EQ(info->id, brisk::FunctionId::from_name("add", 3));
  const brisk::FunctionInfo* step = brisk::detail::find_function(brisk::detail::function_address(&Physics::step));
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->name, "Physics::step");
  EXPECT_EQ(brisk::detail::find_function(info->id), info);
}

TEST_F(ApiTest, UnregisteredFunctionIsAnError) {
  try {
    brisk::remote(not_registered, 1);
    FAIL() << "expected brisk::Error";
  } catch (const brisk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRISK_REMOTE"), std::string::npos) << e.what();
  }
}

TEST_F(ApiTest, UserTypes) {
  auto p = brisk::remote(make_point, 7);
  EXPECT_EQ(brisk::get(p).label, "p7");
  EXPECT_EQ(brisk::get(brisk::remote(point_x, p)), 7);
}

TEST_F(ApiTest, ErrorIsRethrownWithNameAndRank) {
  auto r = brisk::remote(always_throws, 1);
  try {
    brisk::get(r);
    FAIL() << "expected TaskError";
  } catch (const brisk::TaskError& e) {
    EXPECT_EQ(e.message(), "boom at the source");
    EXPECT_EQ(e.function_name(), "always_throws");
    EXPECT_EQ(e.rank(), 0);
    EXPECT_NE(std::string(e.what()).find("boom at the source"), std::string::npos);
  }
}

TEST_F(ApiTest, ErrorsFlowThroughDependents) {
  auto bad = brisk::remote(always_throws, 1);
  auto next = brisk::remote(increment, bad);
  auto last = brisk::remote(add, next, 1);
  try {
    brisk::get(last);
    FAIL() << "expected TaskError";
  } catch (const brisk::TaskError& e) {
    EXPECT_EQ(e.function_name(), "always_throws");
    EXPECT_EQ(e.message(), "boom at the source");
  }
}

TEST_F(ApiTest, RetriesRerunTheTask) {
  g_flaky_calls = 0;
  EXPECT_EQ(brisk::get(brisk::task(flaky).max_retries(2).remote(2)), 42);
  EXPECT_EQ(g_flaky_calls.load(), 3);
  g_flaky_calls = 0;
  auto r = brisk::task(flaky).name("flaky-step").max_retries(1).remote(5);
  try {
    brisk::get(r);
    FAIL();
  } catch (const brisk::TaskError& e) {
    EXPECT_EQ(e.function_name(), "flaky-step");
    EXPECT_EQ(e.info().attempts, 2);
  }
  EXPECT_EQ(g_flaky_calls.load(), 2);
}

TEST_F(ApiTest, InfeasibleDemandFailsAtOnce) {
  auto r = brisk::task(add).resources({{"GPU", 4}}).remote(1, 2);
  EXPECT_TRUE(r.ready());
  try {
    brisk::get(r);
    FAIL();
  } catch (const brisk::ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("GPU=4"), std::string::npos) << e.what();
  }
  auto custom = brisk::task(add).resources({{"tpu", 1}}).remote(1, 2);
  EXPECT_THROW(brisk::get(custom), brisk::ResourceError);
}

TEST_F(ApiTest, PutAndWait) {
  auto p = brisk::put(std::vector<int>{1, 2, 3});
  EXPECT_TRUE(p.ready());
  EXPECT_EQ(brisk::get(brisk::remote(sum_vector, p)), 6);

  // wait(refs, 2) returns once two are ready, while the held one still runs.
  hold_next();
  std::vector<brisk::Ref<int>> refs;
  refs.push_back(brisk::remote(sleep_ms, 1));
  refs.push_back(brisk::remote(held, 500));
  refs.push_back(brisk::remote(sleep_ms, 1));
  auto [ready, not_ready] = brisk::wait(refs, 2);
  EXPECT_FALSE(g_held_finished.load()) << "wait(refs, 2) waited for the third task";
  release_held();
  ASSERT_EQ(ready.size(), 2u);
  ASSERT_EQ(not_ready.size(), 1u);
  EXPECT_TRUE(not_ready[0] == refs[1]);
  EXPECT_EQ(brisk::get(not_ready[0]), 500);
}

TEST_F(ApiTest, WaitTimesOut) {
  // The timeout ends the wait while the task still runs, and not before it is due.
  hold_next();
  auto never = brisk::remote(held, 300);
  std::vector<brisk::Ref<int>> refs{never};
  auto t0 = std::chrono::steady_clock::now();
  auto res = brisk::wait(refs, 1, std::chrono::milliseconds(50));
  auto dt = std::chrono::steady_clock::now() - t0;
  EXPECT_FALSE(g_held_finished.load()) << "the wait outlasted its timeout until the task finished";
  EXPECT_GE(dt, std::chrono::milliseconds(50));
  EXPECT_TRUE(res.ready.empty());
  EXPECT_EQ(res.not_ready.size(), 1u);
  EXPECT_THROW(brisk::wait(refs, 2), brisk::Error);
  release_held();
  EXPECT_EQ(brisk::get(never), 300);
}

TEST_F(ApiTest, BlockedGetInsideTasksDoesNotStarveTheNode) {
  // Every worker (and more) blocks on a gate that only a later task opens: the
  // node must start spare workers to run the opener.
  auto gate = brisk::remote(sleep_ms, 20);
  std::vector<brisk::Ref<int>> waiting;
  for (int i = 0; i < 8; ++i) waiting.push_back(brisk::remote(wait_for_gate, gate));
  for (auto& w : waiting) EXPECT_EQ(brisk::get(w), 21);
}

int blocks_on_child(int n) {
  // The child is queued behind this task on the same worker.
  auto child = brisk::remote(sleep_ms, n);
  return brisk::get(child);
}
BRISK_REMOTE(blocks_on_child);

TEST_F(ApiTest, ParentsBlockedOnChildrenKeepCoresBusy) {
  std::vector<brisk::Ref<int>> parents;
  for (int i = 0; i < 16; ++i) parents.push_back(brisk::remote(blocks_on_child, 5));
  for (auto& p : parents) EXPECT_EQ(brisk::get(p), 5);
  EXPECT_GE(runtime().scheduler().stats().spare_workers_started, 1u);
}

TEST_F(ApiTest, TaskIdsAreDeterministic) {
  std::vector<brisk::ObjectId> first;
  brisk::detail::set_submitter_root(brisk::TaskId::root(99));
  for (int i = 0; i < 5; ++i) first.push_back(brisk::remote(add, i, i).id());
  brisk::detail::set_submitter_root(brisk::TaskId::root(99));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(brisk::remote(add, i, i).id(), first[i]);
  EXPECT_NE(first[0], first[1]);
}

TEST_F(ApiTest, EmptyRefIsAnError) {
  brisk::Ref<int> empty;
  EXPECT_THROW(brisk::get(empty), brisk::Error);
}

TEST(ApiNoRuntimeTest, CallsOutsideRunThrow) {
  EXPECT_THROW(brisk::remote(add, 1, 2), brisk::Error);
  EXPECT_THROW(brisk::put(1), brisk::Error);
}

}  // namespace
