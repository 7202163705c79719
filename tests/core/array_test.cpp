#include "brisk/core/array.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace brisk {
namespace {

TEST(Array, ConstructsCopiesAndMoves) {
  Array<int> zeros(5);
  for (int v : zeros) EXPECT_EQ(v, 0);
  Array<int> sevens(3, 7);
  EXPECT_EQ(sevens.to_vector(), (std::vector<int>{7, 7, 7}));
  Array<int> list{1, 2, 3};
  Array<int> copy = list;
  EXPECT_EQ(copy, list);
  Array<int> moved = std::move(copy);
  EXPECT_EQ(moved, list);
  EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  auto raw = Array<double>::for_overwrite(1 << 20);  // large: huge-page backed
  EXPECT_EQ(raw.size(), 1u << 20);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(raw.data()) % 64, 0u);
  raw[12345] = 2.5;
  EXPECT_EQ(raw[12345], 2.5);
}

TEST(Array, LargeBlocksAreReusedFromTheCache) {
  const std::size_t n = (std::size_t{4} << 20) / sizeof(double);
  const double* first = nullptr;
  {
    auto a = Array<double>::for_overwrite(n);
    first = a.data();
  }
  EXPECT_GE(detail::array_cache_bytes(), std::size_t{4} << 20);
  auto b = Array<double>::for_overwrite(n);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % (std::size_t{2} << 20), 0u);
}

TEST(Array, SerializesExactlyLikeAVector) {
  std::vector<std::uint32_t> v{1, 2, 3, 0xdeadbeef};
  Array<std::uint32_t> a(v);
  EXPECT_EQ(to_bytes(a), to_bytes(v));
  EXPECT_EQ(byte_size(a), byte_size(v));
  EXPECT_EQ(from_bytes<Array<std::uint32_t>>(to_bytes(v)), a);
  EXPECT_EQ(from_bytes<Array<std::uint32_t>>(to_bytes(Array<std::uint32_t>())).size(), 0u);
}

TEST(Array, RejectsALengthLargerThanItsBytes) {
  auto bytes = to_bytes(Array<std::uint64_t>{1, 2});
  bytes.resize(bytes.size() - 1);
  EXPECT_THROW(from_bytes<Array<std::uint64_t>>(bytes), SerializationError);
  std::vector<std::byte> huge(8, std::byte{0xff});
  EXPECT_THROW(from_bytes<Array<std::uint64_t>>(huge), SerializationError);
}

}  // namespace
}  // namespace brisk
