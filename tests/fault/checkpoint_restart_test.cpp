// A driver that checkpoints after every step, for the restart test
// (tests/fault/checkpoint_restart.sh):
//   checkpoint_restart_test [--steps=N] [--die-at=K]   (rank 0 SIGKILLs itself after checkpoint K)
//   checkpoint_restart_test --on-request --signal-at=K  (checkpoints only when requested(); SIGUSR1 at step K)
//   checkpoint_restart_test --on-request --hold          (a run not restored waits before its last step
//                                                         until a checkpoint is requested: at most 60 s)
// Prints "final sum S" at the end; a restarted run (--brisk-restore=latest) must
// print the same S as an uninterrupted one.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "brisk/brisk.hpp"

namespace {
long advance(long sum, long step) { return (sum * 1000003 + step * 7919 + 17) % 2147483647; }
BRISK_REMOTE(advance);
}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [] {
    long steps = 10, die_at = -1, signal_at = -1;
    bool on_request = false, hold = false;
    for (const auto& a : brisk::program_args()) {
      if (a.rfind("--steps=", 0) == 0) steps = std::stol(a.substr(8));
      if (a.rfind("--die-at=", 0) == 0) die_at = std::stol(a.substr(9));
      if (a.rfind("--signal-at=", 0) == 0) signal_at = std::stol(a.substr(12));
      if (a == "--on-request") on_request = true;
      if (a == "--hold") hold = true;
    }
    long step = brisk::checkpoint::load<long>("step").value_or(0);
    // The running sum is a live object: each step's task reads the last one's result.
    brisk::Ref<long> sum = brisk::checkpoint::load_object<long>("sum").value_or(brisk::put(1L));
    if (brisk::checkpoint::restored()) std::printf("resuming at step %ld\n", step);
    for (; step < steps; ++step) {
      sum = brisk::task(advance).resources({{"rank" + std::to_string(step % brisk::size()), 1}}).remote(sum, step);
      brisk::checkpoint::save("step", step + 1);
      brisk::checkpoint::save_object("sum", sum);
      if (step + 1 == signal_at) raise(SIGUSR1);  // as Slurm does before a time limit
      // --hold: however fast the steps run, the signal finds the program still running.
      if (hold && step + 2 == steps && !brisk::checkpoint::restored()) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!brisk::checkpoint::requested()) {
          if (std::chrono::steady_clock::now() > deadline) {
            std::fprintf(stderr, "checkpoint_restart_test: --hold: no checkpoint requested within 60 s\n");
            return 1;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
      if (on_request && !brisk::checkpoint::requested()) continue;
      const auto seq = brisk::checkpoint::now();
      if (on_request) std::printf("checkpoint %llu at step %ld\n", static_cast<unsigned long long>(seq), step + 1);
      if (step + 1 == die_at && !brisk::checkpoint::restored()) {
        std::printf("dying after checkpoint %llu\n", static_cast<unsigned long long>(seq));
        std::fflush(stdout);
        raise(SIGKILL);
      }
    }
    std::printf("final sum %ld\n", brisk::get(sum));
    return 0;
  });
}
