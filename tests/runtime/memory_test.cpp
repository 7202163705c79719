// Memory stays flat over ten million tasks whose results are dropped.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "testing/runtime_fixture.hpp"

namespace {

int noop_task() { return 1; }
BRISK_REMOTE(noop_task);

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      long kib = 0;
      status >> kib;
      return kib;
    }
    std::getline(status, key);
  }
  return -1;
}

using MemoryTest = brisk::testing::RuntimeTest;

TEST_F(MemoryTest, FlatOverTenMillionDroppedResults) {
  constexpr int kBatch = 10000;
  constexpr int kBatches = 1000;  // 10,000,000 tasks
  long after_warmup = 0;
  for (int b = 0; b < kBatches; ++b) {
    for (int i = 0; i < kBatch - 1; ++i) brisk::remote(noop_task);  // result dropped at once
    brisk::get(brisk::remote(noop_task));  // bounds the backlog
    if (b == kBatches / 10) after_warmup = resident_kib();
  }
  long end = resident_kib();
  ASSERT_GT(after_warmup, 0);
  // A leak of even 8 bytes per task would add 72 MB here.
  EXPECT_LT(end - after_warmup, 16 * 1024) << "RSS grew from " << after_warmup << " KiB to " << end << " KiB";
  std::printf("rss after 1M tasks: %ld KiB, after 10M: %ld KiB\n", after_warmup, end);
}

}  // namespace
