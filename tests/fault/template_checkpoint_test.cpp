// Checkpoints that the runtime takes by itself at template instantiations
// (--brisk-checkpoint-instantiations=N), and a restart from one.
//   mpirun -np 2 template_checkpoint_test --iterations=12 [--die-after=K]
//       --brisk-checkpoint-instantiations=3 --brisk-checkpoint-dir=DIR [--brisk-restore=latest]
// A data set of 6 partitions is updated by one recorded block per iteration; the
// driver saves its iteration before each instantiate and nothing else. With
// --die-after=K rank 0 SIGKILLs itself after instantiating iteration K; the run
// restored from the latest checkpoint resumes where that checkpoint was taken and
// prints the same final checksum as an uninterrupted run.
#include <signal.h>

#include <cstdio>
#include <thread>
#include <chrono>
#include <string>
#include <vector>

#include "brisk/brisk.hpp"
#include "brisk/core/data.hpp"

namespace {

using Vec = std::vector<double>;
constexpr int kParts = 6;
constexpr int kValues = 64;

void init(brisk::DataTask& t) { t.write<Vec>(0).assign(kValues, 1.0 + t.args<int>()); }
BRISK_DATA_TASK(init);

// x = x * 0.9 + (its right neighbour) * 0.1 + iteration / 100.
void step(brisk::DataTask& t) {
  const Vec& right = t.read<Vec>(1);
  Vec& x = t.write<Vec>(0);
  const int it = t.params<int>();
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = x[i] * 0.9 + right[(i + 1) % right.size()] * 0.1 + it / 100.0;
}
BRISK_DATA_TASK(step);

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [] {
    int iterations = 12, die_after = -1, signal_at = -1, neighbour = 1;
    for (const auto& a : brisk::program_args()) {
      if (a.rfind("--iterations=", 0) == 0) iterations = std::stoi(a.substr(13));
      if (a.rfind("--die-after=", 0) == 0) die_after = std::stoi(a.substr(12));
      if (a.rfind("--signal-at=", 0) == 0) signal_at = std::stoi(a.substr(12));  // SIGUSR1 before that iteration
      if (a.rfind("--neighbour=", 0) == 0) neighbour = std::stoi(a.substr(12));  // another block than the default
      // A pause before the first data set (a rank killed at the start is lost by then).
      if (a.rfind("--pause-ms=", 0) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(a.substr(11))));
    }
    brisk::DataSet<Vec> x("x", kParts);
    brisk::DataSet<Vec> scratch("scratch", kParts, brisk::Placement::blocked(), brisk::DataSetOptions{.checkpoint = false});
    int first = brisk::checkpoint::load<int>("iteration").value_or(0);
    if (x.restored()) {
      std::printf("resuming at iteration %d\n", first);
    } else {
      for (int p = 0; p < kParts; ++p) brisk::data_task(init).writes(x, static_cast<std::size_t>(p)).args(p).submit();
    }
    // Even and odd partitions in turn, through a scratch copy of the neighbour.
    auto block = brisk::record<int>("step", [&](const int&) {
      for (int p = 0; p < kParts; ++p) {
        brisk::data_task(step)
            .updates(x, static_cast<std::size_t>(p))
            .reads(x, static_cast<std::size_t>((p + neighbour) % kParts))
            .submit();
      }
    });
    for (int it = first; it < iterations; ++it) {
      brisk::checkpoint::save("iteration", it);  // where a checkpoint taken now resumes
      if (it == signal_at) raise(SIGUSR1);
      block.instantiate(it);
      if (it == die_after) {
        brisk::data_sync();
        std::fflush(nullptr);
        raise(SIGKILL);
      }
    }
    double sum = 0;
    for (int p = 0; p < kParts; ++p) {
      for (double v : x.fetch(static_cast<std::size_t>(p))) sum += v;
    }
    std::printf("checksum %.12f after %d iterations\n", sum, iterations);
    std::printf("data ranks %d of %d\n", brisk::data_ranks(), brisk::size());
    return 0;
  });
}
