// A brisk program for the tests of brisk::run under mpirun: options, exit codes,
// driver exceptions, per-rank timelines.
//   run_program [--exit=N] [--throw] [--fail-task] [--task-ms=MS] [--brisk-...]
// --fail-task: one task throws, and the driver's get rethrows its TaskError.
// --task-ms: every task sleeps this long first (a job that lasts, to be killed).
#include <brisk/brisk.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>
#include <stdexcept>
#include <string>
#include <thread>

namespace {
int g_task_ms = 0;  // set on every rank from the same arguments

int square(int x) {
  if (g_task_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(g_task_ms));
  return x * x;
}
BRISK_REMOTE(square);

int fail(int x) {
  if (x >= 0) throw std::runtime_error("a task fails on purpose");
  return x;
}
BRISK_REMOTE(fail);
}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--task-ms=", 0) == 0) g_task_ms = std::stoi(a.substr(10));
  }
  // The merged timeline's origin (its first event) must lie between this and its writing.
  const long long started = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  return brisk::run(argc, argv, [started]() -> int {
    int code = 0;
    for (const auto& a : brisk::program_args()) {
      if (a.rfind("--exit=", 0) == 0) code = std::stoi(a.substr(7));
      if (a == "--throw") throw std::runtime_error("driver failure on purpose");
      if (a == "--fail-task") brisk::get(brisk::remote(fail, 1));
      if (a.rfind("--brisk-", 0) == 0) {
        std::printf("a brisk option leaked into program_args: %s\n", a.c_str());
        return 10;
      }
    }
    // Half the squares pinned round-robin to every rank, half placed by the runtime.
    std::vector<brisk::Ref<int>> refs;
    for (int i = 0; i < 100; ++i) {
      if (i % 2) {
        refs.push_back(brisk::remote(square, i));
      } else {
        refs.push_back(brisk::task(square).resources({{"rank" + std::to_string(i / 2 % brisk::size()), 1}}).remote(i));
      }
    }
    int s = 0;
    for (int v : brisk::get(refs)) s += v;
    std::printf("sum of squares %d\n", s);
    for (const auto& a : brisk::program_args()) {
      if (a.rfind("--timeline-now=", 0) != 0) continue;
      const std::string path = a.substr(15);
      brisk::Status st = brisk::timeline(path);
      if (!st.ok()) {
        std::printf("timeline failed: %s\n", st.message().c_str());
        return 12;
      }
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      const std::string all = text.str();
      int rows = 0, tasks = 0;
      for (std::size_t p = all.find("\"process_name\""); p != std::string::npos; p = all.find("\"process_name\"", p + 1)) ++rows;
      for (std::size_t p = all.find("\"ph\":\"X\""); p != std::string::npos; p = all.find("\"ph\":\"X\"", p + 1)) ++tasks;
      int pids = 0;  // each rank's process id, as a label of its row
      for (std::size_t p = all.find(R"("labels":"pid )"); p != std::string::npos; p = all.find(R"("labels":"pid )", p + 1)) ++pids;
      // The merged trace's times are on the wall clock, from an origin that it names.
      const std::string key = R"("clock":"CLOCK_REALTIME","origin_ns":)";
      const std::size_t at = all.find(key);
      const long long origin = at == std::string::npos ? 0 : std::atoll(all.c_str() + at + key.size());
      const long long now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
      const bool wall = started <= origin && origin <= now;
      std::printf("timeline rows %d of %d ranks, %d with a pid, %d tasks, %s\n", rows, brisk::size(), pids, tasks,
                  wall ? "on the wall clock" : "with no wall-clock origin");
    }
    return s == 328350 ? code : 11;
  });
}
