// A driver that checkpoints after every step, for the restart test
// (tests/fault/checkpoint_restart.sh):
//   checkpoint_restart_test [--steps=N] [--die-at=K]   (rank 0 SIGKILLs itself after checkpoint K)
// Prints "final sum S" at the end; a restarted run (--brisk-restore=latest) must
// print the same S as an uninterrupted one.
#include <signal.h>

#include <cstdio>
#include <string>

#include "brisk/brisk.hpp"

namespace {
long advance(long sum, long step) { return (sum * 1000003 + step * 7919 + 17) % 2147483647; }
BRISK_REMOTE(advance);
}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [] {
    long steps = 10, die_at = -1;
    for (const auto& a : brisk::program_args()) {
      if (a.rfind("--steps=", 0) == 0) steps = std::stol(a.substr(8));
      if (a.rfind("--die-at=", 0) == 0) die_at = std::stol(a.substr(9));
    }
    long step = brisk::checkpoint::load<long>("step").value_or(0);
    long sum = brisk::checkpoint::load<long>("sum").value_or(1);
    if (brisk::checkpoint::restored()) std::printf("resuming at step %ld\n", step);
    for (; step < steps; ++step) {
      sum = brisk::get(brisk::task(advance).resources({{"rank" + std::to_string(step % brisk::size()), 1}}).remote(sum, step));
      brisk::checkpoint::save("step", step + 1);
      brisk::checkpoint::save("sum", sum);
      const auto seq = brisk::checkpoint::now();
      if (step + 1 == die_at && !brisk::checkpoint::restored()) {
        std::printf("dying after checkpoint %llu\n", static_cast<unsigned long long>(seq));
        std::fflush(stdout);
        raise(SIGKILL);
      }
    }
    std::printf("final sum %ld\n", sum);
    return 0;
  });
}
