// A random task graph keeps running when a worker rank is killed with SIGKILL (ucx
// transport, 3 ranks): tasks that were running or queued on the dead rank run again
// on the others, with the same ids, and the result equals the fault-free one.
//   mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -np 3 \
//       dag_failure_test --brisk-transport=ucx [--seed=N]
// With --stop the victim stops (SIGSTOP) instead: a hung rank, found by its silent
// heartbeats (--brisk-failure-timeout-ms), not by the transport.
// Prints "dag failure test OK" on success.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "brisk/brisk.hpp"
#include "brisk/core/detail/context.hpp"
#include "brisk/runtime/cluster.hpp"

namespace {

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void work() { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

std::uint64_t leaf(std::uint64_t i) {
  work();
  return mix(i, 1);
}
BRISK_REMOTE(leaf);

std::uint64_t combine(std::uint64_t a, std::uint64_t b) {
  work();
  return mix(a, b);
}
BRISK_REMOTE(combine);

int die(bool stop) {
  raise(stop ? SIGSTOP : SIGKILL);
  return 0;
}
BRISK_REMOTE(die);

int pid() { return static_cast<int>(getpid()); }
BRISK_REMOTE(pid);

// The graph: `width` leaves, then `layers` layers whose tasks each combine two
// tasks of the layer before, chosen by a seeded generator.
struct Graph {
  std::vector<std::vector<std::pair<int, int>>> inputs;  // per layer, per task
};

Graph make_graph(std::uint64_t seed, int width, int layers) {
  Graph g;
  std::uint64_t s = seed;
  for (int l = 0; l < layers; ++l) {
    std::vector<std::pair<int, int>> layer;
    for (int t = 0; t < width; ++t) {
      s = mix(s, static_cast<std::uint64_t>(t));
      layer.emplace_back(static_cast<int>(s % static_cast<std::uint64_t>(width)),
                         static_cast<int>((s >> 32) % static_cast<std::uint64_t>(width)));
    }
    g.inputs.push_back(std::move(layer));
  }
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [] {
    std::uint64_t seed = 7;
    bool stop = false;
    for (const auto& a : brisk::program_args()) {
      if (a.rfind("--seed=", 0) == 0) seed = std::stoull(a.substr(7));
      if (a == "--stop") stop = true;
    }
    const int width = 120, layers = 6;
    const Graph g = make_graph(seed, width, layers);
    // The expected values, computed here without brisk.
    std::vector<std::uint64_t> expect(static_cast<std::size_t>(width));
    for (int i = 0; i < width; ++i) expect[static_cast<std::size_t>(i)] = mix(static_cast<std::uint64_t>(i), 1);
    for (const auto& layer : g.inputs) {
      std::vector<std::uint64_t> next;
      for (auto [a, b] : layer) next.push_back(mix(expect[static_cast<std::size_t>(a)], expect[static_cast<std::size_t>(b)]));
      expect = std::move(next);
    }

    const int victim = brisk::size() - 1;
    const std::map<std::string, double> on_victim{{"rank" + std::to_string(victim), 1}};
    const int victim_pid = brisk::get(brisk::task(pid).resources(on_victim).remote());
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<brisk::Ref<std::uint64_t>> refs;
    for (int i = 0; i < width; ++i) refs.push_back(brisk::remote(leaf, static_cast<std::uint64_t>(i)));
    for (int l = 0; l < layers; ++l) {
      std::vector<brisk::Ref<std::uint64_t>> next;
      for (auto [a, b] : g.inputs[static_cast<std::size_t>(l)]) {
        next.push_back(brisk::remote(combine, refs[static_cast<std::size_t>(a)], refs[static_cast<std::size_t>(b)]));
      }
      refs = std::move(next);
      if (l == 1) {
        // Let work spread over the ranks, then kill one of them.
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        (void)brisk::task(die).resources(on_victim).remote(stop);
      }
    }
    int wrong = 0;
    for (int i = 0; i < width; ++i) {
      if (brisk::get(refs[static_cast<std::size_t>(i)]) != expect[static_cast<std::size_t>(i)]) ++wrong;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (stop) kill(victim_pid, SIGKILL);  // it cannot leave by itself
    const auto replayed = dynamic_cast<brisk::Cluster*>(brisk::detail::context()->distributed)->stats().tasks_replayed;
    std::printf("%d tasks, %d wrong results, %llu run again after rank %d %s; %.2f s\n", width * (layers + 1), wrong,
                static_cast<unsigned long long>(replayed), victim, stop ? "hung" : "died", seconds);
    // The victim must have held work when it died, or the test proved nothing.
    const bool ok = wrong == 0 && replayed > 0;
    std::printf(ok ? "dag failure test OK\n" : "dag failure test FAILED\n");
    return ok ? 0 : 1;
  });
}
