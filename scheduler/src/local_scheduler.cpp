#include "brisk/scheduler/local_scheduler.hpp"

#include "brisk/core/detail/distributed.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>

#include "brisk/core/detail/futex.hpp"
#include "brisk/core/detail/task.hpp"
#include "brisk/core/event_log.hpp"
#include "brisk/scheduler/topology.hpp"

namespace brisk {

using detail::TaskBase;
using Clock = std::chrono::steady_clock;

struct LocalScheduler::Slot {
  WorkStealingDeque<TaskBase*> deque;
};

struct LocalScheduler::Worker {
  int index = 0;
  bool spare = false;
  Slot* slot = nullptr;
  std::thread thread;
  std::uint32_t rng = 1;
  std::atomic<std::uint32_t> park_word{0};
  std::atomic<std::uint64_t> tasks_run{0};
  std::atomic<std::uint64_t> steals{0};
  Clock::time_point last_poll{};  // by this worker, between tasks
};

namespace {
std::atomic<std::uint64_t> g_scheduler_generation{1};

struct ThreadBinding {
  std::uint64_t generation = 0;
  void* slot = nullptr;    // LocalScheduler::Slot*
  void* worker = nullptr;  // LocalScheduler::Worker*, null for non-workers
  bool driver = false;     // the registered driver thread: counts as a running worker
};
thread_local ThreadBinding t_binding;

std::shared_ptr<const ErrorInfo> shutdown_error() {
  auto e = std::make_shared<ErrorInfo>();
  e->kind = ErrorKind::kTaskFailed;
  e->message = "the runtime shut down before the task ran";
  e->function = "shutdown";
  detail::RuntimeContext* ctx = detail::context();
  e->rank = ctx ? ctx->rank : -1;
  return e;
}
}  // namespace

LocalScheduler::LocalScheduler(Config config)
    : config_(std::move(config)),
      generation_(g_scheduler_generation.fetch_add(1)),
      slots_(new std::unique_ptr<Slot>[kMaxSlots]) {
  if (config_.workers < 1) config_.workers = 1;
  target_ = config_.workers;
  regular_ = config_.driver_reserves_core ? std::max(1, target_ - 1) : target_;
  switch (config_.idle) {
    case IdleMode::kSpin: max_spinners_ = regular_; break;
    case IdleMode::kBackoff: max_spinners_ = std::max(1, regular_ / 2); break;
    case IdleMode::kSleep: max_spinners_ = 0; break;
  }
  available_ = config_.resources;
}

LocalScheduler::~LocalScheduler() { shutdown(); }

void LocalScheduler::start() {
  if (started_) return;
  started_ = true;
  std::lock_guard lock(workers_mutex_);
  running_.fetch_add(regular_, std::memory_order_relaxed);
  for (int i = 0; i < regular_; ++i) {
    auto w = std::make_unique<Worker>();
    w->index = i;
    w->rng = static_cast<std::uint32_t>(i * 2654435761u + 1);
    int s = num_slots_.load();
    slots_[s] = std::make_unique<Slot>();
    w->slot = slots_[s].get();
    num_slots_.store(s + 1, std::memory_order_release);
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) {
    Worker* raw = w.get();
    live_threads_.fetch_add(1);
    raw->thread = std::thread([this, raw] { worker_main(raw); });
  }
}

void LocalScheduler::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  stopping_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  detail::futex_wake(&epoch_, 0);
  {
    std::lock_guard lock(workers_mutex_);
    for (Worker* w : parked_) {
      w->park_word.store(1, std::memory_order_release);
      detail::futex_wake(&w->park_word, 0);
    }
    parked_.clear();
  }
  // Queued tasks are cancelled while the workers finish what they run: a task blocked
  // on a queued child then wakes (with the cancellation error) instead of hanging.
  while (live_threads_.load(std::memory_order_acquire) > 0) {
    cancel_all();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(workers_mutex_);
    for (auto& w : workers_)
      if (w->thread.joinable()) threads.push_back(std::move(w->thread));
  }
  for (auto& t : threads) t.join();
  cancel_all();
}

void LocalScheduler::cancel_all() noexcept {
  auto error = shutdown_error();
  for (;;) {
    std::vector<TaskBase*> batch;
    int n = num_slots_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      while (TaskBase* t = slots_[i]->deque.steal()) batch.push_back(t);
    }
    {
      std::lock_guard lock(inject_mutex_);
      batch.insert(batch.end(), inject_.begin(), inject_.end());
      inject_.clear();
      inject_size_.store(0);
    }
    {
      std::lock_guard lock(resource_mutex_);
      batch.insert(batch.end(), waiting_for_resources_.begin(), waiting_for_resources_.end());
      waiting_for_resources_.clear();
    }
    if (batch.empty()) break;
    // Cancelling completes results, which may make dependents ready: they come back
    // through submit() into the queues and are cancelled on the next pass.
    for (TaskBase* t : batch) {
      t->cancel(error);
      delete t;
    }
  }
}

LocalScheduler::Slot* LocalScheduler::slot_for_this_thread() noexcept {
  ThreadBinding& b = t_binding;
  if (b.generation == generation_) return static_cast<Slot*>(b.slot);
  std::lock_guard lock(slots_mutex_);
  int s = num_slots_.load(std::memory_order_relaxed);
  if (s >= kMaxSlots) return nullptr;
  slots_[s] = std::make_unique<Slot>();
  num_slots_.store(s + 1, std::memory_order_release);
  b.generation = generation_;
  b.slot = slots_[s].get();
  b.worker = nullptr;
  b.driver = false;
  return slots_[s].get();
}

int LocalScheduler::current_worker() const noexcept {
  const ThreadBinding& b = t_binding;
  if (b.generation != generation_ || !b.worker) return -1;
  return static_cast<Worker*>(b.worker)->index;
}

bool LocalScheduler::defer_wake() noexcept {
  const ThreadBinding& b = t_binding;
  if (defer_wakes_ns_.load(std::memory_order_relaxed) <= 0 || b.generation != generation_ || !b.worker ||
      !has_deferred_wake_.load(std::memory_order_acquire) || stopping_.load(std::memory_order_relaxed)) {
    return false;
  }
  std::int64_t none = 0;
  deferred_since_.compare_exchange_strong(none, Clock::now().time_since_epoch().count(), std::memory_order_acq_rel);
  return true;
}

void LocalScheduler::set_deferred_wake(std::function<void()> wake) {
  std::lock_guard lock(deferred_mutex_);
  has_deferred_wake_.store(static_cast<bool>(wake), std::memory_order_release);
  deferred_wake_ = std::move(wake);
}

void LocalScheduler::run_deferred_wake() noexcept {
  if (deferred_since_.load(std::memory_order_relaxed) == 0 || deferred_since_.exchange(0, std::memory_order_acq_rel) == 0) {
    return;
  }
  std::lock_guard lock(deferred_mutex_);
  if (deferred_wake_) deferred_wake_();
}

void LocalScheduler::wake_overdue(Clock::time_point now) noexcept {
  const std::int64_t since = deferred_since_.load(std::memory_order_acquire);
  if (since != 0 && now - Clock::time_point(Clock::duration(since)) >=
                        std::chrono::nanoseconds(defer_wakes_ns_.load(std::memory_order_relaxed))) {
    run_deferred_wake();
  }
}

void LocalScheduler::push(TaskBase* task) noexcept {
  Slot* slot = slot_for_this_thread();
  if (slot) {
    slot->deque.push(task);
  } else {
    std::lock_guard lock(inject_mutex_);
    inject_.push_back(task);
    inject_size_.fetch_add(1, std::memory_order_relaxed);
  }
  notify_work();
}

void LocalScheduler::notify_work() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (spinners_.load(std::memory_order_relaxed) == 0 && sleepers_.load(std::memory_order_relaxed) > 0) {
    wake_one();
  }
}

void LocalScheduler::wake_one() noexcept {
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  detail::futex_wake(&epoch_, 1);
}

void LocalScheduler::submit(TaskBase* task) noexcept {
  queued_.fetch_add(1, std::memory_order_relaxed);
  if (task->resources() && !task->sched_grant_ && !try_grant(task)) return;
  push(task);
}

bool LocalScheduler::grant_locked(TaskBase* task) noexcept {
  const auto& demand = *task->resources();
  for (const auto& [name, amount] : demand) {
    auto it = available_.find(name);
    if (it == available_.end() || it->second + 1e-9 < amount) return false;
  }
  for (const auto& [name, amount] : demand) available_[name] -= amount;
  task->sched_grant_ = task;
  return true;
}

bool LocalScheduler::try_grant(TaskBase* task) noexcept {
  std::lock_guard lock(resource_mutex_);
  // First come, first served: nobody overtakes a waiting task.
  if (waiting_for_resources_.empty() && grant_locked(task)) return true;
  waiting_for_resources_.push_back(task);
  return false;
}

void LocalScheduler::release_grant(TaskBase* task) noexcept {
  std::vector<TaskBase*> granted;
  {
    std::lock_guard lock(resource_mutex_);
    for (const auto& [name, amount] : *task->resources()) available_[name] += amount;
    for (auto it = waiting_for_resources_.begin(); it != waiting_for_resources_.end();) {
      if (grant_locked(*it)) {
        granted.push_back(*it);
        it = waiting_for_resources_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (TaskBase* t : granted) push(t);
}

bool LocalScheduler::has_work() const noexcept {
  if (inject_size_.load(std::memory_order_relaxed) > 0) return true;
  int n = num_slots_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (!slots_[i]->deque.empty()) return true;
  return false;
}

TaskBase* LocalScheduler::steal(Worker* w) noexcept {
  int n = num_slots_.load(std::memory_order_acquire);
  if (n > 0) {
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 17;
    w->rng ^= w->rng << 5;
    int start = static_cast<int>(w->rng % static_cast<std::uint32_t>(n));
    for (int k = 0; k < n; ++k) {
      Slot* s = slots_[(start + k) % n].get();
      if (s == w->slot) continue;
      for (int attempt = 0; attempt < 2 && !s->deque.empty(); ++attempt) {
        if (TaskBase* t = s->deque.steal()) {
          w->steals.fetch_add(1, std::memory_order_relaxed);
          return t;
        }
      }
    }
  }
  if (inject_size_.load(std::memory_order_relaxed) > 0) {
    std::lock_guard lock(inject_mutex_);
    if (!inject_.empty()) {
      TaskBase* t = inject_.front();
      inject_.pop_front();
      inject_size_.fetch_sub(1, std::memory_order_relaxed);
      return t;
    }
  }
  return nullptr;
}

TaskBase* LocalScheduler::find_task(Worker* w) noexcept {
  if (TaskBase* t = w->slot->deque.pop()) return t;
  return steal(w);
}

void LocalScheduler::execute(Worker* w, TaskBase* task) noexcept {
  queued_.fetch_sub(1, std::memory_order_relaxed);
  running_tasks_.fetch_add(1, std::memory_order_relaxed);
  task->run();
  running_tasks_.fetch_sub(1, std::memory_order_relaxed);
  if (task->sched_grant_) release_grant(task);
  delete task;
  w->tasks_run.fetch_add(1, std::memory_order_relaxed);
}

void LocalScheduler::pass_the_search_on() noexcept {
  // A worker leaves the idle state with work in sight. Submits that saw a spinner
  // woke nobody, so if nobody else is searching, someone sleeps and more than the
  // one task this worker takes is queued, wake one: it takes more of the queued
  // work or goes back to sleep. (With one task queued, a wake-up per task would
  // hand the spinning between two workers: on shared cores each wake-up is a
  // context switch. Four ranks on two cores: 36,000 switches per worker for
  // 22,000 remote no-op tasks.)
  if (queued_.load(std::memory_order_seq_cst) > 1 && sleepers_.load(std::memory_order_seq_cst) > 0 &&
      spinners_.load(std::memory_order_seq_cst) == 0) {
    wake_one();
  }
}

void LocalScheduler::idle(Worker* w) noexcept {
  // Spin first (bounded number of spinners), then sleep on the event count.
  if (config_.idle == IdleMode::kSpin ||
      (config_.idle == IdleMode::kBackoff && spinners_.load(std::memory_order_relaxed) < max_spinners_)) {
    spinners_.fetch_add(1, std::memory_order_seq_cst);
    const bool forever = config_.idle == IdleMode::kSpin;
    const Clock::time_point deadline = Clock::now() + config_.spin;
    const Clock::time_point hint_deadline =
        Clock::now() + std::chrono::nanoseconds(hint_spin_ns_.load(std::memory_order_relaxed));
    // In a multi-rank job a spinning worker also polls the transport: a task that
    // arrives is then taken by a thread that is awake (and pushed on its own deque).
    detail::RuntimeContext* ctx = detail::context();
    detail::Distributed* net = ctx ? ctx->distributed : nullptr;
    bool found = false;
    for (unsigned i = 1;; ++i) {
      if (has_work() || stopping_.load(std::memory_order_relaxed)) {
        found = true;
        break;
      }
      // A wake-up deferred by a poll of this spin (see defer_wake): nothing to run,
      // so the driver may have the core now.
      if (deferred_since_.load(std::memory_order_relaxed) != 0) run_deferred_wake();
      if ((i & 15) == 0) {
        // A poll may take long (an MPI call yields the core when it finds nothing),
        // so the time is checked at every poll.
        if (net && net->poll() > 0) continue;
        if (!forever && Clock::now() >= deadline) {
          // Work on its way: spin on (bounded) rather than sleep through its arrival.
          const std::atomic<std::int64_t>* hint = work_hint_.load(std::memory_order_acquire);
          if (!hint || hint->load(std::memory_order_relaxed) <= 0 || Clock::now() >= hint_deadline) break;
        }
      }
      if ((i & 255) == 0) {
        sched_yield();
        if (w->spare && running_.load(std::memory_order_relaxed) > target_) break;
      }
      detail::cpu_relax();
    }
    spinners_.fetch_sub(1, std::memory_order_seq_cst);
    if (found) {
      pass_the_search_on();
      return;
    }
  }
  run_deferred_wake();  // one put off by its last poll, if that poll reported nothing
  tell_sleeping();
  std::uint32_t key = epoch_.load(std::memory_order_seq_cst);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with the fence in notify_work(): either the submitter sees this sleeper or
  // has_work() below sees its task (has_work's loads are relaxed).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (has_work() || stopping_.load(std::memory_order_seq_cst) ||
      (w->spare && running_.load(std::memory_order_seq_cst) > target_)) {
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    // Submits skip the wake-up while someone spins, so work that a former spinner
    // finds here may be all that a sleeper will ever hear of.
    pass_the_search_on();
    return;
  }
  detail::futex_wait(&epoch_, key);
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
}

bool LocalScheduler::try_park(Worker* w) noexcept {
  int r = running_.load(std::memory_order_relaxed);
  while (r > target_) {
    if (running_.compare_exchange_weak(r, r - 1, std::memory_order_acq_rel)) {
      {
        std::lock_guard lock(workers_mutex_);
        if (stopping_.load()) {
          running_.fetch_add(1);
          return false;
        }
        w->park_word.store(0, std::memory_order_relaxed);
        parked_.push_back(w);
      }
      // Anything left in our deque stays stealable; make sure someone looks.
      if (has_work()) wake_one();
      while (w->park_word.load(std::memory_order_acquire) == 0) detail::futex_wait(&w->park_word, 0);
      return true;
    }
  }
  return false;
}

void LocalScheduler::activate_spare() noexcept {
  int r = running_.load(std::memory_order_relaxed);
  while (r < target_) {
    if (!running_.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel)) continue;
    std::lock_guard lock(workers_mutex_);
    if (stopping_.load()) {
      running_.fetch_sub(1);
      return;
    }
    if (!parked_.empty()) {
      Worker* w = parked_.back();
      parked_.pop_back();
      w->park_word.store(1, std::memory_order_release);
      detail::futex_wake(&w->park_word, 1);
      return;
    }
    if (static_cast<int>(workers_.size()) >= config_.max_threads) {
      running_.fetch_sub(1);
      return;
    }
    auto w = std::make_unique<Worker>();
    w->index = static_cast<int>(workers_.size());
    w->spare = true;
    w->rng = static_cast<std::uint32_t>(w->index * 2654435761u + 7);
    {
      std::lock_guard slots_lock(slots_mutex_);
      int s = num_slots_.load(std::memory_order_relaxed);
      if (s >= kMaxSlots) {
        running_.fetch_sub(1);
        return;
      }
      slots_[s] = std::make_unique<Slot>();
      w->slot = slots_[s].get();
      num_slots_.store(s + 1, std::memory_order_release);
    }
    Worker* raw = w.get();
    workers_.push_back(std::move(w));
    spares_started_.fetch_add(1, std::memory_order_relaxed);
    live_threads_.fetch_add(1);
    raw->thread = std::thread([this, raw] { worker_main(raw); });
    return;
  }
}

void LocalScheduler::register_driver_thread() {
  if (!config_.driver_reserves_core) return;
  Slot* slot = slot_for_this_thread();
  BRISK_CHECK(slot) << "no deque slot left for the driver thread";
  t_binding.driver = true;
  running_.fetch_add(1, std::memory_order_acq_rel);
}

void LocalScheduler::block_begin() noexcept {
  const ThreadBinding& b = t_binding;
  if (b.generation != generation_ || !(b.worker || b.driver)) return;
  if (b.worker) {
    blocked_.fetch_add(1, std::memory_order_seq_cst);
    tell_sleeping();  // it polls only while its wait spins
    run_deferred_wake();  // it may wait for the driver
  }
  running_.fetch_sub(1, std::memory_order_acq_rel);
  activate_spare();
}

void LocalScheduler::block_end() noexcept {
  const ThreadBinding& b = t_binding;
  if (b.generation != generation_ || !(b.worker || b.driver)) return;
  if (b.worker) blocked_.fetch_sub(1, std::memory_order_seq_cst);
  running_.fetch_add(1, std::memory_order_acq_rel);
}

void LocalScheduler::tell_sleeping() noexcept {
  if (poll_interval_ns_.load(std::memory_order_relaxed) <= 0) return;
  if (detail::RuntimeContext* ctx = detail::context(); ctx && ctx->distributed) ctx->distributed->worker_sleeping();
}

void LocalScheduler::poll_between_tasks(Worker* w) noexcept {
  const std::int64_t interval = poll_interval_ns_.load(std::memory_order_relaxed);
  if (interval <= 0) return;
  const Clock::time_point now = Clock::now();
  if (now - w->last_poll < std::chrono::nanoseconds(interval)) return;
  w->last_poll = now;
  detail::RuntimeContext* ctx = detail::context();
  if (ctx && ctx->distributed) ctx->distributed->poll_after_task();
}

void LocalScheduler::worker_main(Worker* w) {
  ThreadBinding& b = t_binding;
  b.generation = generation_;
  b.slot = w->slot;
  b.worker = w;
  b.driver = false;
  if (config_.topology) {
    Status st = w->spare ? config_.topology->bind_thread_to_cpuset()
                         : config_.topology->bind_thread_to_core(w->index);
    if (!st.ok()) std::fprintf(stderr, "brisk: warning: cannot bind worker %d: %s\n", w->index, st.message().c_str());
  }
  detail::set_os_thread_name(fmt::format("brisk-{}{}", w->spare ? "spare" : "worker", w->index));
  if (config_.events) config_.events->set_thread_name(fmt::format("{} {}", w->spare ? "spare worker" : "worker", w->index));
  bool was_idle = false;  // idle or parked since the last task
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (w->spare && running_.load(std::memory_order_relaxed) > target_) {
      run_deferred_wake();  // a wake-up it put off after its last task
      tell_sleeping();
      try_park(w);
      was_idle = true;
      continue;
    }
    if (TaskBase* t = find_task(w)) {
      // Back from idle with a task in hand and more queued: wake a sleeper, which
      // does the same, so a burst reaches every worker. (idle() passes on only one
      // wake-up, and only when nobody spins; a spinner that the OS preempted would
      // hold the others asleep through the whole burst.)
      if (was_idle) {
        was_idle = false;
        if (sleepers_.load(std::memory_order_seq_cst) > 0 && has_work()) wake_one();
      }
      execute(w, t);
      poll_between_tasks(w);
      if (deferred_since_.load(std::memory_order_relaxed) != 0) wake_overdue(Clock::now());
      continue;
    }
    run_deferred_wake();  // out of tasks: the driver may have the core
    idle(w);
    was_idle = true;
  }
  run_deferred_wake();
  // Queued tasks are cancelled by shutdown().
  live_threads_.fetch_sub(1, std::memory_order_acq_rel);
}

std::map<std::string, double> LocalScheduler::available() const {
  std::lock_guard lock(resource_mutex_);
  return available_;
}

bool LocalScheduler::can_ever_run(const std::map<std::string, double>& demand) const noexcept {
  for (const auto& [name, amount] : demand) {
    auto it = config_.resources.find(name);
    if (amount > (it == config_.resources.end() ? 0.0 : it->second) + 1e-9) return false;
  }
  return true;
}

LocalSchedulerStats LocalScheduler::stats() const {
  LocalSchedulerStats s;
  std::lock_guard lock(const_cast<std::mutex&>(workers_mutex_));
  for (const auto& w : workers_) {
    s.tasks_run += w->tasks_run.load(std::memory_order_relaxed);
    s.steals += w->steals.load(std::memory_order_relaxed);
  }
  s.spare_workers_started = spares_started_.load();
  s.threads = static_cast<int>(workers_.size());
  return s;
}

}  // namespace brisk
