// brisk demo: a tour of the task API on local ranks.
//
//   mpirun -np 2 --bind-to none build/examples/brisk_demo
//
// 1. Monte-Carlo estimate of pi: many independent tasks, reduced by one task that
//    takes a vector of Refs (fan-out / fan-in); the runtime spreads them over the
//    ranks (a rank's queue past the spill threshold goes to the global scheduler).
// 2. Parallel Fibonacci: tasks that submit tasks and block on them (dynamic task
//    graphs; blocked workers hand their core to a spare).
// 3. Results in finish order with wait(num_returns) and a timeout.
// 4. Errors: a failing task, retried, then propagated through a dependent task.
// 5. A Chrome trace of it all (open it in https://ui.perfetto.dev).
#include <brisk/brisk.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Hits, and the rank that threw the darts.
struct Darts {
  std::int64_t hits = 0;
  int rank = 0;
};

Darts darts_in_circle(std::uint64_t seed, std::int64_t darts) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::int64_t hits = 0;
  for (std::int64_t i = 0; i < darts; ++i) {
    double x = u(rng), y = u(rng);
    hits += x * x + y * y <= 1.0;
  }
  return Darts{hits, brisk::rank()};
}
BRISK_REMOTE(darts_in_circle);

std::int64_t total(const std::vector<Darts>& parts) {
  std::int64_t s = 0;
  for (auto p : parts) s += p.hits;
  return s;
}
BRISK_REMOTE(total);

std::int64_t fib(int n) {
  if (n < 18) {
    std::int64_t a = 0, b = 1;
    for (int i = 0; i < n; ++i) {
      std::int64_t next = a + b;
      a = b;
      b = next;
    }
    return a;
  }
  auto x = brisk::remote(fib, n - 1);
  auto y = brisk::remote(fib, n - 2);
  return brisk::get(x) + brisk::get(y);
}
BRISK_REMOTE(fib);

int simulate(int id) {
  std::this_thread::sleep_for(std::chrono::milliseconds(60 - 7 * id));
  return id;
}
BRISK_REMOTE(simulate);

int unreliable(int x) {
  static std::atomic<int> calls{0};
  if (calls++ % 2 == 0) throw std::runtime_error("sensor timeout");
  return x;
}
BRISK_REMOTE(unreliable);

int broken(int) { throw std::runtime_error("division by zero in cell 17"); }
BRISK_REMOTE(broken);

int twice(int x) { return 2 * x; }
BRISK_REMOTE(twice);

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, []() -> int {
    std::printf("brisk demo on rank %d\n\n", brisk::rank());

    // 1. Monte-Carlo pi.
    auto t0 = Clock::now();
    constexpr int kTasks = 64;
    constexpr std::int64_t kDarts = 200000;
    std::vector<brisk::Ref<Darts>> parts;
    for (int i = 0; i < kTasks; ++i) parts.push_back(brisk::remote(darts_in_circle, std::uint64_t(i), kDarts));
    auto hits = brisk::get(brisk::remote(total, parts));
    double pi = 4.0 * double(hits) / double(kTasks * kDarts);
    std::printf("[1] pi ~ %.5f from %d tasks of %lld darts (%.1f ms)\n", pi, kTasks, (long long)kDarts, ms_since(t0));
    std::vector<int> per_rank(static_cast<std::size_t>(brisk::size()));
    for (const Darts& d : brisk::get(parts)) ++per_rank[static_cast<std::size_t>(d.rank)];
    std::string spread;
    for (int r = 0; r < brisk::size(); ++r) spread += " rank " + std::to_string(r) + ": " + std::to_string(per_rank[static_cast<std::size_t>(r)]);
    std::printf("    tasks ran on%s\n", spread.c_str());

    // 2. Nested tasks.
    t0 = Clock::now();
    auto f = brisk::get(brisk::remote(fib, 27));
    std::printf("[2] fib(27) = %lld with nested tasks (%.1f ms)\n", (long long)f, ms_since(t0));

    // 3. Finish order.
    std::vector<brisk::Ref<int>> sims;
    for (int i = 0; i < 8; ++i) sims.push_back(brisk::remote(simulate, i));
    std::string order;
    while (!sims.empty()) {
      auto [ready, rest] = brisk::wait(sims, 1, std::chrono::milliseconds(500));
      for (auto& r : ready) order += std::to_string(brisk::get(r)) + " ";
      sims = rest;
    }
    std::printf("[3] simulations finished in this order: %s\n", order.c_str());

    // 4. Errors.
    int retried = brisk::get(brisk::task(unreliable).name("read-sensor").max_retries(3).remote(7));
    std::printf("[4] a flaky task succeeded after a retry: %d\n", retried);
    try {
      brisk::get(brisk::remote(twice, brisk::remote(broken, 1)));
    } catch (const brisk::TaskError& e) {
      std::printf("    a failure reached the driver through a dependent task: %s\n", e.what());
    }

    // 5. Timeline.
    if (brisk::timeline("brisk_demo_timeline.json").ok())
      std::printf("[5] wrote brisk_demo_timeline.json: every rank's tasks (open it in Perfetto)\n");
    bool ok = pi > 3.1 && pi < 3.2 && f == 196418 && retried == 7;
    std::printf("\n%s\n", ok ? "demo OK" : "demo FAILED");
    return ok ? 0 : 1;
  });
}
