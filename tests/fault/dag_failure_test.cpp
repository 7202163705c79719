// A random task graph keeps running when a worker rank is killed with SIGKILL (ucx
// transport, 3 ranks): tasks that were running or queued on the dead rank run again
// on the others, with the same ids, and the result equals the fault-free one.
//   mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -np 3 \
//       dag_failure_test --brisk-transport=ucx [--seed=N]
// With --stop the victim stops (SIGSTOP) instead: a hung rank, found by its silent
// heartbeats (--brisk-failure-timeout-ms), not by the transport.
// With --big every result is a 128 KiB vector, too large to travel inline: it stays
// on the rank that made it, so results that were complete on the dead rank must be
// made again from lineage (recursively, for inputs that died with them). With
// --big --expect-lost (and --brisk-lineage-bytes=0, no lineage kept) those results
// are lost instead, and get raises ObjectLostError for them.
// With --big --checkpoint-cut the graph runs to the end first, a checkpoint is
// written (it holds the results' copies, and their lineage is dropped), then the
// victim is killed and two more checkpoints follow at once (--brisk-checkpoint-keep=1
// prunes the first): the results it held are read back from a checkpoint, none is
// made again. With --brisk-lineage-bytes=0 no lineage is kept at all, and the
// checkpoint alone saves them. With --dies-in-checkpoint the victim dies in its part
// of that checkpoint (BRISK_FAULT_INJECT=kill-in-checkpoint:VICTIM:1-1): the
// checkpoint goes on without it, its results keep their lineage and are made again
// from it, and the other ranks' copies are in the checkpoint. With --dies-after-report
// (BRISK_FAULT_INJECT=kill-after-checkpoint-report:VICTIM:1-1) it dies just after it
// reported its part: rank 0 commits a part of a rank that is dead or about to be,
// and its results come back from the checkpoint or from lineage, whichever the
// timing left. With --recovery-timing the results are read right
// after the kill (no more checkpoints) and the time from the loss being noticed to
// the last result is printed; adding --no-checkpoint gives the same with the lost
// results made again from lineage instead, for comparison.
// With --injected the test does not kill the victim itself: BRISK_FAULT_INJECT=
// kill:RANK:MIN-MAX:SEED does, at a seeded random time, and the test checks that
// the victim died while the graph ran.
// Prints "dag failure test OK" on success.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
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

// Every task's work; longer with --injected, so that the kill lands mid-graph. Set
// on every rank from the same arguments.
int g_work_ms = 2;
void work() { std::this_thread::sleep_for(std::chrono::milliseconds(g_work_ms)); }

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

// --big: the value is word 0; the other words are derived from it and checked.
constexpr std::size_t kWords = 16 * 1024;  // 128 KiB

std::vector<std::uint64_t> spread(std::uint64_t v) {
  std::vector<std::uint64_t> out(kWords);
  for (std::size_t i = 0; i < kWords; ++i) out[i] = v ^ (i * 0x9E3779B97F4A7C15ULL);
  return out;
}

std::uint64_t value_of(const std::vector<std::uint64_t>& v) {
  if (v.size() != kWords) throw std::runtime_error("a result of the wrong size");
  for (std::size_t i = 1; i < kWords; i += 997) {
    if (v[i] != (v[0] ^ (i * 0x9E3779B97F4A7C15ULL))) throw std::runtime_error("a corrupt result");
  }
  return v[0];
}

std::vector<std::uint64_t> big_leaf(std::uint64_t i) {
  work();
  return spread(mix(i, 1));
}
BRISK_REMOTE(big_leaf);

std::vector<std::uint64_t> big_combine(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) {
  work();
  return spread(mix(value_of(a), value_of(b)));
}
BRISK_REMOTE(big_combine);

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
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--injected") g_work_ms = 6;
  }
  return brisk::run(argc, argv, [] {
    std::uint64_t seed = 7;
    bool stop = false, big = false, expect_lost = false, injected = false, cut = false, timing = false,
         no_checkpoint = false, dies_in_checkpoint = false, dies_after_report = false;
    for (const auto& a : brisk::program_args()) {
      if (a.rfind("--seed=", 0) == 0) seed = std::stoull(a.substr(7));
      if (a == "--stop") stop = true;
      if (a == "--big") big = true;
      if (a == "--expect-lost") expect_lost = true;
      if (a == "--injected") injected = true;
      if (a == "--checkpoint-cut") cut = true;
      if (a == "--recovery-timing") timing = true;
      if (a == "--no-checkpoint") no_checkpoint = true;
      if (a == "--dies-in-checkpoint") dies_in_checkpoint = true;
      if (a == "--dies-after-report") dies_after_report = true;
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
    // Submits the graph with tasks of either result type; returns the last layer.
    auto submit = [&](auto leaf_fn, auto combine_fn) {
      using R = decltype(brisk::remote(leaf_fn, std::uint64_t{0}));
      std::vector<R> refs;
      for (int i = 0; i < width; ++i) refs.push_back(brisk::remote(leaf_fn, static_cast<std::uint64_t>(i)));
      for (int l = 0; l < layers; ++l) {
        std::vector<R> next;
        for (auto [a, b] : g.inputs[static_cast<std::size_t>(l)]) {
          next.push_back(brisk::remote(combine_fn, refs[static_cast<std::size_t>(a)], refs[static_cast<std::size_t>(b)]));
        }
        refs = std::move(next);
        if (l == 1 && !injected && !cut) {
          // Let work spread over the ranks, then kill one of them.
          std::this_thread::sleep_for(std::chrono::milliseconds(150));
          (void)brisk::task(die).resources(on_victim).remote(stop);
        }
      }
      return refs;
    };
    auto* cluster = dynamic_cast<brisk::Cluster*>(brisk::detail::context()->distributed);
    int wrong = 0, lost = 0;
    bool cut_ok = true;
    std::chrono::steady_clock::time_point noticed{};
    if (big) {
      auto refs = submit(big_leaf, big_combine);
      if (cut) {
        (void)brisk::wait(refs);  // done, their values left where they were made
        if (!no_checkpoint) {
          const auto before = cluster->stats();
          const auto start = std::chrono::steady_clock::now();
          brisk::checkpoint::now();
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
          const auto after = cluster->stats();
          std::printf("checkpoint in %.1f ms: %zu results held elsewhere, lineage %zu -> %zu (%llu dropped for it)\n", ms,
                      after.saved, before.lineage, after.lineage,
                      static_cast<unsigned long long>(after.lineage_checkpointed));
          // Every result held on another rank is in the checkpoint, and no lineage is
          // left to make one again.
          cut_ok = after.saved > 0 && after.lineage == 0 && after.lineage_checkpointed >= before.lineage;
          // The victim wrote no part: its results keep their lineage.
          if (dies_in_checkpoint) cut_ok = after.saved > 0 && after.lineage > 0 && cluster->rank_lost(brisk::Rank{victim});
          if (dies_after_report) cut_ok = after.saved > 0;
        }
        if (!dies_in_checkpoint && !dies_after_report) (void)brisk::task(die).resources(on_victim).remote(false);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!cluster->rank_lost(brisk::Rank{victim}) && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        noticed = std::chrono::steady_clock::now();
        if (!timing) {
          brisk::checkpoint::now();
          brisk::checkpoint::now();
        }
      }
      for (int i = 0; i < width; ++i) {
        try {
          if (value_of(brisk::get(refs[static_cast<std::size_t>(i)])) != expect[static_cast<std::size_t>(i)]) ++wrong;
        } catch (const brisk::ObjectLostError& e) {
          if (lost++ == 0) std::printf("lost as expected: %s\n", e.what());
        } catch (const brisk::TaskError& e) {
          // A task whose input was lost fails with the same error.
          if (e.kind() != brisk::ErrorKind::kObjectLost) throw;
          if (lost++ == 0) std::printf("lost as expected: %s\n", e.what());
        }
      }
    } else {
      auto refs = submit(leaf, combine);
      for (int i = 0; i < width; ++i) {
        if (brisk::get(refs[static_cast<std::size_t>(i)]) != expect[static_cast<std::size_t>(i)]) ++wrong;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (timing) {
      std::printf("recovery: the last result %.1f ms after the loss was noticed\n",
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - noticed).count());
    }
    if (stop) kill(victim_pid, SIGKILL);  // it cannot leave by itself
    const auto stats = cluster->stats();
    std::printf("%d tasks, %d wrong results, %d lost; %llu run again, %llu results made again and %llu read back from "
                "a checkpoint after rank %d %s; %.2f s\n",
                width * (layers + 1), wrong, lost, static_cast<unsigned long long>(stats.tasks_replayed),
                static_cast<unsigned long long>(stats.objects_rebuilt), static_cast<unsigned long long>(stats.objects_restored),
                victim, stop ? "hung" : "died", seconds);
    if ((injected || cut) && !cluster->rank_lost(brisk::Rank{victim})) {
      std::printf("rank %d was still alive when the graph was done: the %s\n", victim,
                  cut ? "kill was not noticed" : "injected kill came too late");
      std::printf("dag failure test FAILED\n");
      return 1;
    }
    for (int r = 1; r < victim; ++r) {
      if (cluster->rank_lost(brisk::Rank{r})) {
        std::printf("rank %d was declared dead too, but only rank %d died\n", r, victim);
        std::printf("dag failure test FAILED\n");
        return 1;
      }
    }
    // The victim must have held work (and, with --big, results) when it died, or
    // the test proved nothing.
    bool ok = wrong == 0 && stats.tasks_replayed + stats.objects_rebuilt > 0;
    if (big && !expect_lost) ok = ok && lost == 0 && stats.objects_rebuilt > 0;
    if (expect_lost) ok = wrong == 0 && lost > 0 && stats.objects_rebuilt == 0;
    // Nothing was running when the victim died: its results come from the checkpoint.
    if (cut && dies_after_report) {
      ok = cut_ok && wrong == 0 && lost == 0 && stats.objects_rebuilt + stats.objects_restored > 0;
    } else if (cut && dies_in_checkpoint) {
      ok = cut_ok && wrong == 0 && lost == 0 && stats.objects_rebuilt > 0 && stats.objects_restored == 0;
    } else if (cut && !no_checkpoint) {
      ok = cut_ok && wrong == 0 && lost == 0 && stats.objects_rebuilt == 0 && stats.objects_restored > 0;
    } else if (cut) {
      ok = wrong == 0 && lost == 0 && stats.objects_rebuilt > 0 && stats.objects_restored == 0;
    }
    std::printf(ok ? "dag failure test OK\n" : "dag failure test FAILED\n");
    return ok ? 0 : 1;
  });
}
