#include "brisk/core/array.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "brisk/core/detail/object.hpp"

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

// Array's cache and spare vectors share one bound. Storage freed when it is full
// takes the room of the storage kept longest, whichever pool keeps it (a job whose
// vectors filled the bound made every large Array in fresh pages).
TEST(Array, FreedStorageTakesTheRoomOfTheOldestKept) {
  namespace serial = detail::serial;
  struct Older {
    std::uint8_t b;  // element types of this test's own: spare pools of their own
  };
  struct Newer {
    std::uint8_t b;
  };
  constexpr std::size_t kBytes = std::size_t{200} << 20;  // three of them pass the bound
  static_assert(3 * kBytes > serial::kKeptBytesLimit && 2 * kBytes <= serial::kKeptBytesLimit);
  auto& older = serial::SpareVectors<Older>::instance();
  auto& newer = serial::SpareVectors<Newer>::instance();
  std::vector<Older> a;
  a.reserve(kBytes);  // storage never touched: no memory in use
  std::vector<Newer> b;
  b.reserve(kBytes);
  older.give(a);
  newer.give(b);
  ASSERT_EQ(older.count(), 1u);
  ASSERT_EQ(newer.count(), 1u);
  void* block = detail::array_allocate(kBytes);
  detail::array_free(block, kBytes);
  EXPECT_GE(detail::array_cache_bytes(), kBytes);
  void* again = detail::array_allocate(kBytes);
  EXPECT_EQ(again, block) << "the Array's block was kept";
  detail::array_free(again, kBytes);
  EXPECT_EQ(older.count(), 0u) << "the spare kept longest made room";
  EXPECT_EQ(newer.count(), 1u) << "the newer spare stays";

  // The whole bound, claimed: every pool gives up what it keeps.
  ASSERT_TRUE(serial::reserve_kept_bytes(serial::kKeptBytesLimit));
  EXPECT_EQ(newer.count(), 0u);
  EXPECT_EQ(detail::array_cache_bytes(), 0u);
  EXPECT_FALSE(serial::reserve_kept_bytes(1));
  serial::release_kept_bytes(serial::kKeptBytesLimit);
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

// Another rank's arena, as the runtime maps it: read-only memory this process did not
// allocate. A view over it reads it in place and frees nothing (freeing it would
// hand a foreign pointer to the cache of blocks).
TEST(Array, ABorrowedViewReadsMemoryItDoesNotOwnAndFreesNothing) {
  const std::size_t n = std::size_t{1} << 20;  // a size the cache keeps when freed
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 7, n);
  ASSERT_EQ(mprotect(p, n, PROT_READ), 0);
  detail::add_borrowed_memory(p, n);  // for good: the mapping stays until the process exits
  EXPECT_TRUE(detail::array_memory_is_shared(static_cast<const std::byte*>(p) + n - 1));
  EXPECT_FALSE(detail::array_memory_is_shared(static_cast<const std::byte*>(p) + n));
  const auto* bytes = static_cast<const std::uint8_t*>(p);
  const std::size_t cached = detail::array_cache_bytes();
  {
    auto view = Array<std::uint8_t>::borrowed_view(bytes, n);
    EXPECT_EQ(view.data(), bytes);
    EXPECT_EQ(view[n - 1], 7);
    Array<std::uint8_t> copy(view);  // an ordinary array, in memory of its own
    EXPECT_NE(copy.data(), view.data());
    copy[0] = 1;
    EXPECT_EQ(view[0], 7);
    Array<std::uint8_t> moved(std::move(view));
    EXPECT_EQ(moved.data(), bytes);
  }
  // Only the copy's block went to the cache.
  EXPECT_EQ(detail::array_cache_bytes(), cached + n);

  // The runtime's zero-copy fill: only types that can be views take it, and only
  // where the elements are aligned.
  {
    detail::TypedObject<Array<std::uint8_t>> array{ObjectId{}};
    ASSERT_TRUE(array.adopt_raw(static_cast<const std::byte*>(p), n, n));
    EXPECT_EQ(array.value().data(), bytes);
    array.abort_fetch();
    detail::TypedObject<Array<double>> doubles{ObjectId{}};
    EXPECT_FALSE(doubles.adopt_raw(static_cast<const std::byte*>(p) + 4, 8, 1));
    EXPECT_THROW(doubles.adopt_raw(static_cast<const std::byte*>(p), 12, 1), SerializationError);
    detail::TypedObject<std::vector<std::uint8_t>> vector{ObjectId{}};
    EXPECT_FALSE(vector.adopt_raw(static_cast<const std::byte*>(p), n, n));
  }
  EXPECT_EQ(detail::array_cache_bytes(), cached + n);
  Array<std::uint8_t> own(n);
  EXPECT_FALSE(detail::array_memory_is_shared(own.data()));
}

// Makes a std::vector object of `n` elements `fill` and frees it; returns where its
// elements were (a large one's storage goes to SpareVectors<E>).
template <class E>
const E* free_vector_object(std::size_t n, E fill) {
  detail::TypedObject<std::vector<E>> made{ObjectId{}};
  made.complete(std::vector<E>(n, fill));
  return made.value().data();
}

// A large std::vector object, once freed, leaves its storage for the next one that
// a pull fills (the store's objects, not the program's own vectors).
TEST(Array, AFreedVectorObjectLeavesItsStorageToTheNextPull) {
  struct Tag {
    std::uint32_t x;  // an element type of this test's own: no other spares
  };
  auto& spares = detail::serial::SpareVectors<Tag>::instance();
  const std::size_t n = std::size_t{1} << 18;  // 1 MiB
  const Tag* storage = free_vector_object(n, Tag{3});
  ASSERT_EQ(spares.count(), 1u);
  std::vector<Tag> bytes(n, Tag{9});
  detail::TypedObject<std::vector<Tag>> pulled{ObjectId{}};
  ASSERT_TRUE(pulled.copy_raw(reinterpret_cast<const std::byte*>(bytes.data()), n * sizeof(Tag), n));
  EXPECT_EQ(pulled.value().data(), storage);
  EXPECT_EQ(pulled.value().size(), n);
  EXPECT_EQ(pulled.value()[n - 1].x, 9u);
  EXPECT_EQ(spares.count(), 0u);
  pulled.abort_fetch();  // never committed: destroyed as it is, not kept
  EXPECT_EQ(spares.count(), 0u);
}

// A pull through the transport writes into storage the object prepares: a freed
// vector's, not fresh pages, and over its old elements without zeroing them first.
TEST(Array, APulledVectorIsPreparedInAFreedVectorsStorage) {
  struct Tag {
    std::uint32_t x;  // an element type of this test's own: no other spares
  };
  auto& spares = detail::serial::SpareVectors<Tag>::instance();
  const std::size_t n = std::size_t{1} << 18;  // 1 MiB
  const Tag* storage = free_vector_object(n, Tag{3});
  ASSERT_EQ(spares.count(), 1u);
  detail::TypedObject<std::vector<Tag>> pulled{ObjectId{}};
  std::byte* dst = pulled.prepare_raw((n - 8) * sizeof(Tag), n - 8);
  EXPECT_EQ(reinterpret_cast<const Tag*>(dst), storage);
  EXPECT_EQ(spares.count(), 0u);
  ASSERT_EQ(pulled.value().size(), n - 8);
  EXPECT_EQ(pulled.value()[n - 9].x, 3u);  // the freed vector's element, for the pull to overwrite
  EXPECT_THROW(detail::TypedObject<std::vector<Tag>>{ObjectId{}}.prepare_raw(7, 2), SerializationError);
  pulled.abort_fetch();
}


// A memory of four 1 MiB blocks, standing in for a rank's arena.
class BlockMemory final : public detail::SharedMemory {
 public:
  static constexpr std::size_t kBlock = std::size_t{1} << 20;
  BlockMemory() {
    void* p = mmap(nullptr, 4 * kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  ~BlockMemory() override {
    if (base_) munmap(base_, 4 * kBlock);
  }
  std::span<std::byte> range() { return {base_, base_ ? 4 * kBlock : 0}; }
  void* allocate(std::size_t bytes) noexcept override {
    if (bytes > kBlock) return nullptr;
    for (int i = 0; i < 4; ++i) {
      if (!used_[i]) {
        used_[i] = true;
        return base_ + i * kBlock;
      }
    }
    return nullptr;
  }
  bool release(void* p) noexcept override {
    if (!contains(p)) return false;
    used_[(static_cast<std::byte*>(p) - base_) / kBlock] = false;
    ++released;
    return true;
  }
  bool contains(const void* p) const noexcept override {
    const auto* b = static_cast<const std::byte*>(p);
    return base_ && b >= base_ && b < base_ + 4 * kBlock;
  }
  int released = 0;

 private:
  std::byte* base_ = nullptr;
  bool used_[4] = {};
};

// operator new places large allocations (a std::vector's storage) in the installed
// memory, and operator delete gives them back to it, also after it is retired.
TEST(Array, LargeAllocationsArePlacedInTheInstalledMemory) {
  struct Tag {
    std::uint32_t x;  // an element type of this test's own: no other spares
  };
  // Kept until exit, as the runtime keeps an arena that a block outlived.
  BlockMemory& memory = *new BlockMemory;
  ASSERT_FALSE(memory.range().empty());
  const std::int64_t blocks = detail::new_memory_blocks();
  ASSERT_TRUE(detail::set_new_memory(&memory, memory.range(), std::size_t{256} << 10));
  BlockMemory other;
  EXPECT_FALSE(detail::set_new_memory(&other, other.range(), 1));  // one at a time
  {
    std::vector<char> small(1000, 'a');
    std::vector<char> big(std::size_t{512} << 10, 'b');
    std::vector<char> too_big(2 * BlockMemory::kBlock, 'c');  // no room: malloc's
    EXPECT_FALSE(memory.contains(small.data()));
    EXPECT_TRUE(memory.contains(big.data()));
    EXPECT_FALSE(memory.contains(too_big.data()));
    EXPECT_EQ(detail::new_memory_blocks(), blocks + 1);
    EXPECT_TRUE(detail::array_memory_is_shared(big.data()));
    {
      detail::PrivateAllocations private_allocations;
      std::vector<char> private_big(std::size_t{512} << 10, 'p');
      EXPECT_FALSE(memory.contains(private_big.data()));
    }
    std::vector<char> placed_again(std::size_t{512} << 10, 'q');  // the scope has ended
    EXPECT_TRUE(memory.contains(placed_again.data()));
    placed_again = {};
    detail::PrivateArrays private_memory;
    std::vector<char> private_big(std::size_t{512} << 10, 'd');
    EXPECT_FALSE(memory.contains(private_big.data()));
  }
  EXPECT_EQ(memory.released, 2);
  EXPECT_EQ(detail::new_memory_blocks(), blocks);
  {
    // A freed vector object whose storage lies there gives it back, not to the
    // spares that pulls fill (private memory).
    auto& spares = detail::serial::SpareVectors<Tag>::instance();
    const std::size_t before = spares.count();
    const Tag* storage = free_vector_object(std::size_t{1} << 17, Tag{5});
    EXPECT_TRUE(memory.contains(storage));
    EXPECT_EQ(spares.count(), before);
    EXPECT_EQ(memory.released, 3);
  }
  // Retired while a block is still allocated: the memory must stay, and the block
  // still goes back to it (not to free()) when it is freed.
  auto* kept = new std::vector<char>(std::size_t{300} << 10, 'e');
  EXPECT_TRUE(memory.contains(kept->data()));
  EXPECT_FALSE(detail::retire_new_memory(memory.range().data()));
  std::vector<char> after(std::size_t{512} << 10, 'f');
  EXPECT_FALSE(memory.contains(after.data()));  // no longer placed
  delete kept;
  EXPECT_EQ(memory.released, 4);
  // Another memory may be installed now; retired with nothing left, it may go.
  ASSERT_TRUE(detail::set_new_memory(&other, other.range(), std::size_t{256} << 10));
  {
    std::vector<char> placed(std::size_t{512} << 10, 'g');
    EXPECT_TRUE(other.contains(placed.data()));
  }
  EXPECT_TRUE(detail::retire_new_memory(other.range().data()));
}

}  // namespace
}  // namespace brisk
