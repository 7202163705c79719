// tests/testing/inline_executor.hpp — an Executor that runs tasks on the calling
// thread, when the test asks, in the order they were submitted.
//
// For units that hand work to an executor (a DataWorker's commands and drains) tested
// without worker threads: run_one() runs the oldest waiting task, run_all() runs until
// nothing waits (tasks that the run submits included). Tasks still waiting when the
// executor is destroyed are not run (nor freed: a task's owner decides).
//
// Thread safety: none; one thread submits and runs.
#pragma once

#include <deque>

#include "brisk/core/detail/context.hpp"
#include "brisk/core/detail/task.hpp"

namespace brisk::testing {

class InlineExecutor final : public brisk::detail::Executor {
 public:
  void submit(brisk::detail::TaskBase* task) noexcept override { queue_.push_back(task); }
  void block_begin() noexcept override {}
  void block_end() noexcept override {}
  int current_worker() const noexcept override { return 0; }

  // Runs (and deletes) the oldest waiting task; false when none waits.
  bool run_one() {
    if (queue_.empty()) return false;
    brisk::detail::TaskBase* t = queue_.front();
    queue_.pop_front();
    t->run();
    delete t;
    return true;
  }
  void run_all() {
    while (run_one()) {
    }
  }

 private:
  std::deque<brisk::detail::TaskBase*> queue_;
};

}  // namespace brisk::testing
