// Event log and Chrome trace output.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include <unistd.h>

#include "brisk/core/event_log.hpp"
#include "testing/runtime_fixture.hpp"

namespace {

int square(int x) { return x * x; }
BRISK_REMOTE(square);

using TimelineTest = brisk::testing::RuntimeTest;

TEST_F(TimelineTest, RecordsSubmitStartEndGet) {
  std::vector<brisk::Ref<int>> refs;
  for (int i = 0; i < 50; ++i) refs.push_back(brisk::task(square).name("sq").remote(i));
  for (auto& r : refs) brisk::get(r);
  ASSERT_NE(runtime().events(), nullptr);
  std::map<brisk::EventKind, int> counts;
  for (const auto& t : runtime().events()->snapshot())
    for (const auto& e : t.events) counts[e.kind]++;
  EXPECT_EQ(counts[brisk::EventKind::kSubmit], 50);
  EXPECT_EQ(counts[brisk::EventKind::kStart], 50);
  EXPECT_EQ(counts[brisk::EventKind::kEnd], 50);
  EXPECT_EQ(counts[brisk::EventKind::kGet], 50);
}

TEST_F(TimelineTest, WritesAChromeTraceWithOneRowPerWorker) {
  const std::int64_t before = static_cast<std::int64_t>(brisk::EventLog::now_ns());
  std::vector<brisk::Ref<int>> refs;
  for (int i = 0; i < 200; ++i) refs.push_back(brisk::remote(square, i));
  for (auto& r : refs) brisk::get(r);
  std::string path = ::testing::TempDir() + "/brisk_timeline_test.json";
  ASSERT_TRUE(brisk::timeline(path).ok());
  std::ifstream in(path);
  nlohmann::json trace = nlohmann::json::parse(in);
  int complete = 0;
  std::set<int> task_rows;
  std::map<int, std::string> thread_names;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      task_rows.insert(e["tid"].get<int>());
      EXPECT_EQ(e["name"], "square");
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
  }
  EXPECT_EQ(complete, 200);
  // One rank's trace is on its steady clock, from an origin that it names.
  ASSERT_TRUE(trace.contains("otherData"));
  EXPECT_EQ(trace["otherData"]["clock"], "CLOCK_MONOTONIC");
  const auto origin = trace["otherData"]["origin_ns"].get<std::int64_t>();
  const std::int64_t now = static_cast<std::int64_t>(brisk::EventLog::now_ns());
  // The origin is the first event's time: that of the first submit above.
  EXPECT_LE(before, origin);
  EXPECT_LE(origin, now);
  // The row of the rank names its process.
  bool labelled = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_labels") labelled |= e["args"]["labels"] == "pid " + std::to_string(::getpid());
  }
  EXPECT_TRUE(labelled);
  // Tasks ran on worker rows; submits came from the driver's row.
  ASSERT_FALSE(task_rows.empty());
  for (int row : task_rows) EXPECT_NE(thread_names[row].find("worker "), std::string::npos) << thread_names[row];
  bool driver = false;
  for (const auto& [tid, name] : thread_names) driver |= name == "driver";
  EXPECT_TRUE(driver);
}

TEST(EventLogTest, RingKeepsTheNewestAndCountsDropped) {
  brisk::EventLog log(16);
  for (int i = 0; i < 100; ++i) log.record(brisk::EventKind::kSubmit, static_cast<std::uint64_t>(i), "x");
  auto snap = log.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  // The oldest slot may be under rewrite by a concurrent writer, so a snapshot
  // reports capacity - 1 events once the ring has wrapped.
  ASSERT_EQ(snap[0].events.size(), 15u);
  EXPECT_EQ(snap[0].events.front().task, 85u);
  EXPECT_EQ(snap[0].events.back().task, 99u);
  EXPECT_EQ(snap[0].dropped, 85u);
}

class NoEventsTest : public brisk::testing::RuntimeTest {
 protected:
  brisk::Options options() override {
    brisk::Options o = brisk::testing::test_options();
    o.events = false;
    return o;
  }
};

TEST_F(NoEventsTest, TimelineIsAnErrorWhenEventsAreOff) {
  EXPECT_EQ(brisk::get(brisk::remote(square, 3)), 9);
  EXPECT_FALSE(brisk::timeline(::testing::TempDir() + "/none.json").ok());
}

TEST(EventLogTest, ReadNewReturnsEachEventOnceAndCountsOverwrittenOnes) {
  brisk::EventLog log(16);
  std::vector<std::uint64_t> cursors;
  std::uint64_t missed = 0;
  for (std::uint64_t i = 0; i < 5; ++i) log.record(brisk::EventKind::kStart, i, "t");
  auto first = log.read_new(cursors, 3, &missed);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].task, 0u);
  auto second = log.read_new(cursors, 100, &missed);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[1].task, 4u);
  EXPECT_TRUE(log.read_new(cursors, 100, &missed).empty());
  EXPECT_EQ(missed, 0u);
  for (std::uint64_t i = 0; i < 40; ++i) log.record(brisk::EventKind::kEnd, 100 + i, "t");  // wraps the ring
  auto third = log.read_new(cursors, 100, &missed);
  EXPECT_GT(missed, 0u);
  EXPECT_EQ(third.size() + missed, 40u);
  EXPECT_EQ(third.back().task, 139u);
}

}  // namespace
