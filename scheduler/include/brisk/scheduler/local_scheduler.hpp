// brisk/scheduler/local_scheduler.hpp — one node's scheduler: workers and stealing.
//
// One worker thread per core of the rank's cpuset, each bound to its core (hwloc)
// and owning a Chase-Lev deque. A task made ready on a worker goes to that worker's
// deque (it runs next, cache-warm); a task submitted from any other thread (the
// driver) goes to that thread's own deque, from which workers steal. Idle workers
// spin (a bounded number of them at a time) and then sleep on an event count;
// a submit wakes a sleeper only when nobody is spinning.
//
// A worker that blocks in get/wait hands its core to a spare worker (woken or
// created on demand), so the node keeps all its cores busy; when it resumes, a
// spare parks itself after its current task. Tasks with resource demands wait in
// a queue until the node's resources (CPU, GPU, custom) can meet them.
//
// Thread safety: submit/block_begin/block_end from any thread; start/shutdown from
// the owning thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "brisk/core/detail/context.hpp"
#include "brisk/core/options.hpp"
#include "brisk/scheduler/work_stealing_deque.hpp"

namespace brisk {

class Topology;
class EventLog;

struct LocalSchedulerStats {
  std::uint64_t tasks_run = 0;
  std::uint64_t steals = 0;
  std::uint64_t spare_workers_started = 0;  // threads created to cover blocked workers
  int threads = 0;                          // worker threads alive (regular + spare)
};

class LocalScheduler final : public detail::Executor {
 public:
  struct Config {
    int workers = 1;                               // tasks run at once: one per core
    // The driver runs on this node: it counts as one running worker while it runs
    // (so there are workers - 1 regular workers), and a spare takes its core while
    // it blocks in get/wait. Keeps the submitting thread from being time-sliced
    // with the workers that consume its tasks.
    bool driver_reserves_core = false;
    IdleMode idle = IdleMode::kBackoff;
    std::chrono::nanoseconds spin{std::chrono::microseconds(50)};
    const Topology* topology = nullptr;            // binds workers when set
    EventLog* events = nullptr;                    // names worker rows when set
    std::map<std::string, double> resources;       // node capacity for demanding tasks
    int max_threads = 1024;                        // regular + spare workers
  };

  explicit LocalScheduler(Config config);
  ~LocalScheduler() override;  // shutdown()
  LocalScheduler(const LocalScheduler&) = delete;
  LocalScheduler& operator=(const LocalScheduler&) = delete;

  // Makes the calling thread the driver (see Config::driver_reserves_core). Call it
  // once, before start(), from the driver thread.
  void register_driver_thread();
  // Starts the worker threads.
  void start();
  // Lets running tasks finish, fails every task still queued or waiting (their
  // results hold "the runtime shut down"), and joins the workers. Idempotent.
  void shutdown();

  void submit(detail::TaskBase* task) noexcept override;
  void block_begin() noexcept override;
  void block_end() noexcept override;
  int current_worker() const noexcept override;
  bool defer_wake() noexcept override;
  void set_deferred_wake(std::function<void()> wake) override;
  // Makes a deferred wake-up that has waited set_defer_wakes's limit or longer: for a
  // thread that polls while the workers run long tasks (the progress thread).
  void wake_overdue(std::chrono::steady_clock::time_point now) noexcept;

  // Idle workers keep spinning past the spin time, up to `max_spin` in all, while
  // *expected > 0: more work is known to be on its way (data commands that wait for
  // copies from other ranks), and a sleeping worker would add a wake-up to each
  // arrival. nullptr turns it off. Any time; `expected` must outlive the workers
  // (or the hint be turned off first).
  void set_work_hint(const std::atomic<std::int64_t>* expected, std::chrono::nanoseconds max_spin) noexcept {
    hint_spin_ns_.store(max_spin.count(), std::memory_order_relaxed);
    work_hint_.store(expected, std::memory_order_release);
  }

  LocalSchedulerStats stats() const;
  // Tasks submitted and not yet started (queued, or waiting for resources).
  std::int64_t queued() const noexcept { return queued_.load(std::memory_order_relaxed); }
  // Tasks running now.
  std::int64_t running() const noexcept { return running_tasks_.load(std::memory_order_relaxed); }
  // Resources not held by running tasks, and the node's capacity.
  std::map<std::string, double> available() const;
  const std::map<std::string, double>& capacity() const noexcept { return config_.resources; }
  // Whether the node's capacity can ever meet `demand`.
  bool can_ever_run(const std::map<std::string, double>& demand) const noexcept;
  int workers() const noexcept { return config_.workers; }
  // Whether a worker is awake: running a task (not blocked inside it in get/wait),
  // and then polling between tasks when set_poll_between_tasks asks it to, or
  // spinning for one, and polling meanwhile. Workers between the two states are
  // counted in neither.
  bool worker_awake() const noexcept {
    return running_tasks_.load(std::memory_order_seq_cst) > blocked_.load(std::memory_order_seq_cst) ||
           spinners_.load(std::memory_order_seq_cst) > 0;
  }
  // In a multi-rank job, a worker polls the transport after a task when `interval`
  // passed since it last did (0: never). Workers then take up messages as they go,
  // and the progress thread may stand back while they are awake (Cluster). Any time.
  void set_poll_between_tasks(std::chrono::nanoseconds interval) noexcept {
    poll_interval_ns_.store(interval.count(), std::memory_order_relaxed);
  }
  // Where the driver shares the workers' cores: a wake-up of the driver that a
  // worker would make (defer_wake) is made when a worker next finds no task to run,
  // or blocks, or between tasks once it has waited `limit` (0: at once, the default).
  // Any time.
  void set_defer_wakes(std::chrono::nanoseconds limit) noexcept {
    defer_wakes_ns_.store(limit.count(), std::memory_order_relaxed);
  }
  // Worker threads started at start(); spares come and go.
  int regular_workers() const noexcept { return regular_; }

 private:
  struct Slot;
  struct Worker;

  Slot* slot_for_this_thread() noexcept;
  void push(detail::TaskBase* task) noexcept;
  void notify_work() noexcept;
  void wake_one() noexcept;
  detail::TaskBase* find_task(Worker* w) noexcept;
  detail::TaskBase* steal(Worker* w) noexcept;
  bool has_work() const noexcept;
  void execute(Worker* w, detail::TaskBase* task) noexcept;
  void idle(Worker* w) noexcept;
  void pass_the_search_on() noexcept;
  void worker_main(Worker* w);
  void run_deferred_wake() noexcept;
  void poll_between_tasks(Worker* w) noexcept;
  // Tells the multi-rank runtime that a worker stops polling (sleeps, parks or
  // blocks), where workers poll (set_poll_between_tasks).
  void tell_sleeping() noexcept;
  bool try_park(Worker* w) noexcept;
  void activate_spare() noexcept;
  bool try_grant(detail::TaskBase* task) noexcept;
  // Takes the task's resources if the node has them now (resource_mutex_ held).
  bool grant_locked(detail::TaskBase* task) noexcept;
  void release_grant(detail::TaskBase* task) noexcept;
  void cancel_all() noexcept;

  Config config_;
  int max_spinners_;
  int target_ = 1;   // running workers to aim for (the driver counts when registered)
  int regular_ = 1;  // worker threads started by start()
  std::uint64_t generation_;

  static constexpr int kMaxSlots = 4096;
  std::unique_ptr<std::unique_ptr<Slot>[]> slots_;
  std::atomic<int> num_slots_{0};
  std::mutex slots_mutex_;

  // Fallback queue for threads beyond kMaxSlots, and for shutdown.
  std::mutex inject_mutex_;
  std::deque<detail::TaskBase*> inject_;
  std::atomic<std::int64_t> inject_size_{0};

  // Idle protocol.
  alignas(64) std::atomic<std::uint32_t> epoch_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  alignas(64) std::atomic<int> spinners_{0};
  std::atomic<bool> stopping_{false};

  // Blocked-worker compensation.
  alignas(64) std::atomic<int> running_{0};
  std::mutex workers_mutex_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> parked_;
  std::atomic<std::uint64_t> spares_started_{0};
  std::atomic<int> live_threads_{0};

  alignas(64) std::atomic<std::int64_t> queued_{0};
  std::atomic<std::int64_t> running_tasks_{0};

  // Resource-demanding tasks.
  mutable std::mutex resource_mutex_;
  std::map<std::string, double> available_;
  std::deque<detail::TaskBase*> waiting_for_resources_;

  bool started_ = false;
  bool shut_down_ = false;
  std::atomic<const std::atomic<std::int64_t>*> work_hint_{nullptr};
  std::atomic<std::int64_t> hint_spin_ns_{0};
  // Deferred wake-ups (set_defer_wakes): the function that makes them, and when
  // the oldest one not yet made was deferred (steady_clock ticks; 0: none).
  std::mutex deferred_mutex_;
  std::function<void()> deferred_wake_;  // guarded by deferred_mutex_
  std::atomic<bool> has_deferred_wake_{false};
  std::atomic<std::int64_t> deferred_since_{0};
  std::atomic<std::int64_t> defer_wakes_ns_{0};
  std::atomic<std::int64_t> poll_interval_ns_{0};
  std::atomic<int> blocked_{0};  // workers blocked in get/wait inside a task
};

}  // namespace brisk
