// Object store: reference counting, capacity, spilling to disk and its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <vector>

#include "brisk/core/array.hpp"
#include "testing/runtime_fixture.hpp"

namespace {

using Blob = std::vector<double>;

Blob make_blob(int n, double v) { return Blob(static_cast<std::size_t>(n), v); }
BRISK_REMOTE(make_blob);

double blob_sum(const Blob& b) { return std::accumulate(b.begin(), b.end(), 0.0); }
BRISK_REMOTE(blob_sum);

constexpr int kDoubles = 128 * 1024;  // 1 MiB
constexpr std::size_t kBlobBytes = kDoubles * sizeof(double) + 8;

class StoreTest : public brisk::testing::RuntimeTest {
 protected:
  brisk::Options options() override {
    brisk::Options o = brisk::testing::test_options();
    o.store_bytes = 4 * kBlobBytes + 100;  // room for four blobs
    o.spill_dir = ::testing::TempDir();
    return o;
  }
  brisk::StoreStats stats() { return runtime().store().stats(); }
};

TEST_F(StoreTest, FreedWhenLastRefGoes) {
  {
    auto r = brisk::put(make_blob(kDoubles, 1.0));
    EXPECT_EQ(stats().memory_bytes, kBlobBytes);
    auto copy = r;
    EXPECT_EQ(r.state()->ref_count(), 2);
  }
  EXPECT_EQ(stats().memory_bytes, 0u);
}

TEST_F(StoreTest, PendingTaskKeepsItsInputAlive) {
  auto r = brisk::remote(blob_sum, brisk::put(make_blob(kDoubles, 2.0)));  // the put's Ref is dropped at once
  EXPECT_DOUBLE_EQ(brisk::get(r), 2.0 * kDoubles);
  EXPECT_EQ(stats().memory_bytes, 0u);
}

TEST_F(StoreTest, SpillsPastCapacityAndReadsBack) {
  std::vector<brisk::Ref<Blob>> refs;
  for (int i = 0; i < 10; ++i) refs.push_back(brisk::put(make_blob(kDoubles, i)));
  auto s = stats();
  EXPECT_LE(s.memory_bytes, s.capacity);
  EXPECT_GE(s.spills, 6u);
  EXPECT_GT(s.spilled_bytes, 0u);
  EXPECT_TRUE(std::filesystem::exists(runtime().store().spill_path()));
  // Every object reads back intact, through get and through a task.
  for (int i = 0; i < 10; ++i) {
    Blob b = brisk::get(refs[i]);
    ASSERT_EQ(b.size(), static_cast<std::size_t>(kDoubles));
    EXPECT_EQ(b[kDoubles - 1], i);
    EXPECT_DOUBLE_EQ(brisk::get(brisk::remote(blob_sum, refs[i])), 1.0 * i * kDoubles);
  }
  EXPECT_GE(stats().restores, 1u);
  refs.clear();
  s = stats();
  EXPECT_EQ(s.memory_bytes, 0u);
  EXPECT_EQ(s.spilled_bytes, 0u);
}

TEST_F(StoreTest, TaskResultsSpillToo) {
  std::vector<brisk::Ref<Blob>> refs;
  for (int i = 0; i < 8; ++i) refs.push_back(brisk::remote(make_blob, kDoubles, 1.0 * i));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(brisk::get(refs[i])[7], i);
  EXPECT_GE(stats().spills, 4u);
}

// Memory other ranks read in place, as a multi-rank job's arena: arrays made there
// are not the store's to count or spill (a spill would free the block under the
// readers, and no memory of this process).
class FakeArena final : public brisk::detail::SharedMemory {
 public:
  explicit FakeArena(std::size_t bytes) : bytes_(bytes), base_(static_cast<std::byte*>(std::aligned_alloc(64, bytes))) {
    min_bytes = 4096;
  }
  ~FakeArena() override { std::free(base_); }
  void* allocate(std::size_t bytes) noexcept override {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    if (used_ + rounded > bytes_) return nullptr;
    used_ += rounded;
    ++live_;
    return base_ + used_ - rounded;
  }
  bool release(void* p) noexcept override {
    if (!contains(p)) return false;
    --live_;
    return true;
  }
  bool contains(const void* p) const noexcept override {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= base_ && b < base_ + bytes_;
  }
  int live() const { return live_; }

 private:
  std::size_t bytes_;
  std::byte* base_;
  std::size_t used_ = 0;
  int live_ = 0;
};

TEST_F(StoreTest, ArraysInSharedMemoryAreNeitherCountedNorSpilled) {
  static FakeArena arena(64 * kBlobBytes);  // outlives the test: the runtime keeps the last one it retired
  brisk::detail::set_shared_memory(&arena);
  {
    std::vector<brisk::Ref<brisk::Array<double>>> refs;
    for (int i = 0; i < 10; ++i) refs.push_back(brisk::put(brisk::Array<double>(kDoubles, 1.0 * i)));
    EXPECT_EQ(arena.live(), 10);
    auto s = stats();
    EXPECT_EQ(s.memory_bytes, 0u);
    EXPECT_EQ(s.spills, 0u);
    // Private objects still spill past capacity, around them.
    std::vector<brisk::Ref<Blob>> blobs;
    for (int i = 0; i < 6; ++i) blobs.push_back(brisk::put(make_blob(kDoubles, i)));
    EXPECT_GE(stats().spills, 2u);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(brisk::get(refs[i])[kDoubles - 1], 1.0 * i);
    EXPECT_EQ(arena.live(), 10);
    // Private arrays spilled and read back come back private: counted and spillable.
    std::vector<brisk::Ref<brisk::Array<double>>> own;
    {
      brisk::detail::PrivateArrays private_arrays;
      for (int i = 0; i < 6; ++i) own.push_back(brisk::put(brisk::Array<double>(kDoubles, 100.0 + i)));
    }
    for (int i = 0; i < 6; ++i) EXPECT_EQ(brisk::get(own[i])[0], 100.0 + i);
    EXPECT_EQ(arena.live(), 10);
    EXPECT_LE(stats().memory_bytes, stats().capacity);
  }
  EXPECT_EQ(arena.live(), 0);
  brisk::detail::set_shared_memory(nullptr);
}

class TinyStoreTest : public StoreTest {
 protected:
  brisk::Options options() override {
    brisk::Options o = StoreTest::options();
    o.store_bytes = 2 * kBlobBytes;
    o.spill_bytes = 2 * kBlobBytes;
    return o;
  }
};

TEST_F(TinyStoreTest, ObjectThatFitsNowhereIsAClearErrorAndLosesNothing) {
  auto a = brisk::put(make_blob(kDoubles, 1.0));
  auto b = brisk::put(make_blob(kDoubles, 2.0));
  auto c = brisk::put(make_blob(kDoubles, 3.0));  // spills a
  auto d = brisk::put(make_blob(kDoubles, 4.0));  // spills b; disk now full
  try {
    brisk::put(make_blob(4 * kDoubles, 5.0));
    FAIL() << "expected ObjectStoreError";
  } catch (const brisk::ObjectStoreError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("fits neither in memory"), std::string::npos) << what;
    EXPECT_NE(what.find("--brisk-store-bytes"), std::string::npos) << what;
  }
  // A task result that fits nowhere: the error comes from get.
  auto big = brisk::remote(make_blob, 4 * kDoubles, 6.0);
  EXPECT_THROW(brisk::get(big), brisk::ObjectStoreError);
  // Nothing else was lost.
  EXPECT_EQ(brisk::get(a)[0], 1.0);
  EXPECT_EQ(brisk::get(b)[0], 2.0);
  EXPECT_EQ(brisk::get(c)[0], 3.0);
  EXPECT_EQ(brisk::get(d)[0], 4.0);
}

}  // namespace
