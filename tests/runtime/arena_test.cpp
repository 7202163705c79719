#include "brisk/runtime/arena.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace brisk {
namespace {

TEST(Arena, AllocatesAlignedBlocksAndCoalescesOnFree) {
  ArenaAllocator a(1024);
  auto x = a.allocate(10);
  auto y = a.allocate(100);
  auto z = a.allocate(64);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x % ArenaAllocator::kAlignment, 0u);
  EXPECT_EQ(*y % ArenaAllocator::kAlignment, 0u);
  EXPECT_EQ(a.used(), 64u + 128u + 64u);
  a.free(*y);
  a.free(*x);
  a.free(*z);
  EXPECT_EQ(a.used(), 0u);
  auto whole = a.allocate(1024);  // coalesced back into one range
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, 0u);
  EXPECT_FALSE(a.allocate(1));
}

TEST(Arena, FullArenaSaysNoAndUnknownFreesAreIgnored) {
  ArenaAllocator a(256);
  EXPECT_FALSE(a.allocate(257));
  auto b = a.allocate(256);
  ASSERT_TRUE(b);
  a.free(12345);
  EXPECT_EQ(a.blocks(), 1u);
}

TEST(Arena, RandomAllocFreeKeepsBlocksDisjoint) {
  ArenaAllocator a(1 << 20);
  std::mt19937 rng(7);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
  for (int i = 0; i < 5000; ++i) {
    if (!live.empty() && rng() % 2) {
      std::size_t k = rng() % live.size();
      a.free(live[k].first);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      std::uint64_t n = 1 + rng() % 8192;
      if (auto off = a.allocate(n)) {
        for (const auto& [o, len] : live) ASSERT_TRUE(*off + n <= o || o + len <= *off);
        live.emplace_back(*off, n);
      }
    }
  }
  for (const auto& [o, len] : live) a.free(o);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_TRUE(a.allocate(1 << 20));
}

}  // namespace
}  // namespace brisk
