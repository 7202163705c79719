#include "brisk/core/ids.hpp"

#include <gtest/gtest.h>

#include <set>
#include <unordered_set>

namespace {

TEST(IdsTest, ChildIdsAreDeterministicAndDistinct) {
  brisk::TaskId root = brisk::TaskId::root(7);
  EXPECT_EQ(root, brisk::TaskId::root(7));
  EXPECT_NE(root, brisk::TaskId::root(8));
  std::set<brisk::TaskId> seen;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    brisk::TaskId c = root.child(i);
    EXPECT_EQ(c, root.child(i));
    EXPECT_TRUE(seen.insert(c).second);
    // Grandchildren differ from children of other parents.
    EXPECT_TRUE(seen.insert(c.child(0)).second);
  }
}

TEST(IdsTest, ObjectIdsOfReturnsAndPutsDiffer) {
  brisk::TaskId t = brisk::TaskId::root(1).child(3);
  EXPECT_EQ(brisk::ObjectId::returned_by(t), brisk::ObjectId::returned_by(t));
  EXPECT_NE(brisk::ObjectId::returned_by(t), brisk::ObjectId::put_by(t, 0));
  EXPECT_NE(brisk::ObjectId::put_by(t, 0), brisk::ObjectId::put_by(t, 1));
  std::unordered_set<brisk::ObjectId> ids;
  for (std::uint64_t i = 0; i < 1000; ++i) EXPECT_TRUE(ids.insert(brisk::ObjectId::put_by(t, i)).second);
}

TEST(IdsTest, FunctionIdIsAStableHashOfTheName) {
  // FNV-1a 64 of "add": fixed forever, whatever the platform.
  EXPECT_EQ(brisk::FunctionId::from_name("add", 3).value, brisk::detail::fnv1a64("add", 3));
  EXPECT_EQ(brisk::detail::fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(brisk::detail::fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_NE(brisk::FunctionId::from_name("add", 3), brisk::FunctionId::from_name("sub", 3));
}

TEST(IdsTest, HexIs32Digits) {
  brisk::UniqueId id{0x1, 0xabc};
  EXPECT_EQ(id.hex(), "0000000000000001" "0000000000000abc");
  EXPECT_TRUE(brisk::UniqueId{}.nil());
}

}  // namespace
