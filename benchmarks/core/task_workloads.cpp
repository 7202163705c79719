// The single-rank task workloads that brisk is compared on (see docs/BENCHMARKS.md).
// Each result is one JSON line: name, parameters, median, p99, unit.
//
//   mpirun -np 1 --bind-to none build/benchmarks/brisk_task_workloads [--only=NAME] [--scale=F]
#include <brisk/brisk.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int noop() { return 0; }
BRISK_REMOTE(noop);

int pass(int x) { return x; }
BRISK_REMOTE(pass);

int spin_1ms() {
  auto end = Clock::now() + std::chrono::milliseconds(1);
  int n = 0;
  while (Clock::now() < end) ++n;
  return 1;
}
BRISK_REMOTE(spin_1ms);

long sum(const std::vector<int>& v) {
  long s = 0;
  for (int x : v) s += x;
  return s;
}
BRISK_REMOTE(sum);

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

struct Summary {
  double median, p99, min;
};
Summary summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5))]; };
  return {at(0.5), at(0.99), v.front()};
}

// `x` to 4 decimal places (NaN and infinities stay, and are written as null).
double fixed4(double x) { return std::isfinite(x) ? std::round(x * 1e4) / 1e4 : x; }

// One JSON line: name, parameters, median, p99, min, unit.
void emit(const char* name, const nlohmann::ordered_json& params, Summary s, const char* unit) {
  nlohmann::ordered_json line;
  line["name"] = name;
  line["params"] = params;
  line["median"] = fixed4(s.median);
  line["p99"] = fixed4(s.p99);
  line["min"] = fixed4(s.min);
  line["unit"] = unit;
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

void creation(int batches) {
  constexpr int kBatch = 1000;
  std::vector<brisk::Ref<int>> refs;
  refs.reserve(kBatch);
  std::vector<double> per_task;
  for (int b = 0; b < batches; ++b) {
    refs.clear();
    auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) refs.push_back(brisk::remote(noop));
    per_task.push_back(us_since(t0) / kBatch);
    for (auto& r : refs) brisk::get(r);
  }
  emit("creation", {{"batch", kBatch}, {"batches", batches}}, summarize(per_task), "us/task");
}

void e2e(int n) {
  std::vector<double> lat;
  for (int i = 0; i < 200; ++i) brisk::get(brisk::remote(noop));  // warm-up
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    brisk::get(brisk::remote(noop));
    lat.push_back(us_since(t0));
  }
  emit("e2e", {{"tasks", n}}, summarize(lat), "us/task");
}

void throughput(int n, int reps) {
  std::vector<double> rates;
  std::vector<brisk::Ref<int>> refs;
  refs.reserve(n);
  for (int r = 0; r < reps; ++r) {
    refs.clear();
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) refs.push_back(brisk::remote(noop));
    for (auto& ref : refs) brisk::get(ref);
    rates.push_back(n / (us_since(t0) * 1e-6));
  }
  emit("throughput", {{"tasks", n}, {"reps", reps}}, summarize(rates), "tasks/s");
}

void chain(int links, int reps) {
  std::vector<double> per_link;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    brisk::Ref<int> ref = brisk::remote(pass, 0);
    for (int i = 1; i < links; ++i) ref = brisk::remote(pass, ref);
    brisk::get(ref);
    per_link.push_back(us_since(t0) / links);
  }
  emit("chain", {{"links", links}, {"reps", reps}}, summarize(per_link), "us/link");
}

void fan_out(int tasks, int reps, int cores) {
  std::vector<double> eff;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    std::vector<brisk::Ref<int>> parts;
    parts.reserve(tasks);
    for (int i = 0; i < tasks; ++i) parts.push_back(brisk::remote(spin_1ms));
    long total = brisk::get(brisk::remote(sum, parts));
    double measured_ms = us_since(t0) / 1000.0;
    if (total != tasks) std::fprintf(stderr, "fan-out: wrong sum %ld\n", total);
    eff.push_back((tasks * 1.0 / cores) / measured_ms);
  }
  emit("fanout", {{"tasks", tasks}, {"task_ms", 1}, {"cores", cores}}, summarize(eff), "efficiency");
}

void floor_spin(int n) {
  std::atomic<int> box{-1};
  std::atomic<int> back{-1};
  std::thread peer([&] {
    for (int i = 0; i < n; ++i) {
      int v;
      while ((v = box.load(std::memory_order_acquire)) != i) {
      }
      back.store(v, std::memory_order_release);
    }
  });
  std::vector<double> rt;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    box.store(i, std::memory_order_release);
    while (back.load(std::memory_order_acquire) != i) {
    }
    rt.push_back(us_since(t0));
  }
  peer.join();
  emit("floor_thread_spin", {{"round_trips", n}}, summarize(rt), "us/round_trip");
}

void floor_condvar(int n) {
  std::mutex m;
  std::condition_variable cv;
  int box = -1, back = -1;
  std::thread peer([&] {
    for (int i = 0; i < n; ++i) {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return box == i; });
      back = i;
      cv.notify_all();
    }
  });
  std::vector<double> rt;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    std::unique_lock lock(m);
    box = i;
    cv.notify_all();
    cv.wait(lock, [&] { return back == i; });
    rt.push_back(us_since(t0));
  }
  peer.join();
  emit("floor_thread_condvar", {{"round_trips", n}}, summarize(rt), "us/round_trip");
}

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [] {
    std::string only;
    double scale = 1.0;
    for (const auto& a : brisk::program_args()) {
      if (a.rfind("--only=", 0) == 0) only = a.substr(7);
      if (a.rfind("--scale=", 0) == 0) scale = std::stod(a.substr(8));
    }
    auto want = [&](const char* n) { return only.empty() || only == n; };
    auto scaled = [&](int n) { return std::max(1, static_cast<int>(n * scale)); };
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* w = std::getenv("BRISK_BENCH_CORES")) cores = std::atoi(w);
    if (want("creation")) creation(scaled(200));
    if (want("e2e")) e2e(scaled(2000));
    if (want("throughput")) throughput(scaled(1000000), 3);
    if (want("chain")) chain(1000, scaled(50));
    if (want("fanout")) fan_out(scaled(1000), 3, cores);
    if (want("floor")) {
      floor_spin(scaled(2000));
      floor_condvar(scaled(2000));
    }
    return 0;
  });
}
