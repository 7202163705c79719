// tests/testing/runtime_fixture.hpp — a whole node runtime in a plain test process.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "brisk/brisk.hpp"
#include "brisk/runtime/node_runtime.hpp"
#include "brisk/scheduler/local_scheduler.hpp"

namespace brisk::testing {

// Options for tests: a fixed number of workers, no binding, short spins.
inline Options test_options(int workers = 2) {
  Options o;
  o.workers = workers;
  o.bind = false;
  return o;
}

// A test fixture with a running NodeRuntime; override options() to change it.
class RuntimeTest : public ::testing::Test {
 protected:
  virtual Options options() { return test_options(); }
  void SetUp() override { runtime_ = std::make_unique<NodeRuntime>(options(), nullptr); }
  void TearDown() override { runtime_.reset(); }
  NodeRuntime& runtime() { return *runtime_; }

  std::unique_ptr<NodeRuntime> runtime_;
};

}  // namespace brisk::testing
