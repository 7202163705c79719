#include "brisk/scheduler/work_stealing_deque.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace {

TEST(WorkStealingDequeTest, OwnerIsLifoThievesAreFifo) {
  brisk::WorkStealingDeque<int*> d(4);
  int v[3] = {0, 1, 2};
  for (int& x : v) d.push(&x);
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.steal(), &v[0]);
  EXPECT_EQ(d.pop(), &v[2]);
  EXPECT_EQ(d.pop(), &v[1]);
  EXPECT_EQ(d.pop(), nullptr);
  EXPECT_EQ(d.steal(), nullptr);
  EXPECT_TRUE(d.empty());
}

TEST(WorkStealingDequeTest, GrowsPastItsInitialCapacity) {
  brisk::WorkStealingDeque<int*> d(2);
  std::vector<int> v(1000);
  for (int& x : v) d.push(&x);
  for (int i = 999; i >= 0; --i) ASSERT_EQ(d.pop(), &v[static_cast<std::size_t>(i)]);
}

TEST(WorkStealingDequeTest, EveryItemIsTakenExactlyOnceUnderContention) {
  constexpr int kItems = 200000;
  std::vector<int> items(kItems);
  std::vector<std::atomic<int>> taken(kItems);
  brisk::WorkStealingDeque<int*> d(16);
  std::atomic<bool> done{false};
  auto take = [&](int* p) { taken[static_cast<std::size_t>(p - items.data())].fetch_add(1); };
  std::vector<std::thread> thieves;
  for (int t = 0; t < 3; ++t) {
    thieves.emplace_back([&] {
      while (!done.load()) {
        if (int* p = d.steal()) take(p);
      }
      while (int* p = d.steal()) take(p);
    });
  }
  for (int i = 0; i < kItems; ++i) {
    d.push(&items[static_cast<std::size_t>(i)]);
    if (i % 3 == 0) {
      if (int* p = d.pop()) take(p);
    }
  }
  while (int* p = d.pop()) take(p);
  done = true;
  for (auto& t : thieves) t.join();
  for (int i = 0; i < kItems; ++i) ASSERT_EQ(taken[static_cast<std::size_t>(i)].load(), 1) << i;
}

}  // namespace
