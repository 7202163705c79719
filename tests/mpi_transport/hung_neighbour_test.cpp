// A rank stopped (SIGSTOP) at an arbitrary point, here in the middle of a stream of
// messages to rank 0, must not keep rank 0 from hearing the other ranks of its node.
// Rank 2 streams 4 KiB messages to rank 0. Rank 1, over and over: stops rank 2 from
// outside (so the stop lands anywhere in its sends), pings rank 0, waits for the echo,
// and only then lets rank 2 go on: every echo must come while rank 2 is stopped. No
// clock judges it: `--limit-ms` (10 s) only ends a wait that would otherwise last
// until rank 2 resumed (the failure: rank 0 hears nothing from its node while rank
// 2 is stopped), and the first such miss ends the test.
//   mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -np 3 hung_neighbour_test
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "brisk/mpi_transport/ucx_transport.hpp"
#include "brisk/runtime/exit_status.hpp"

namespace {
using Clock = std::chrono::steady_clock;

std::vector<std::byte> ping(std::uint32_t seq) {
  std::vector<std::byte> m(sizeof seq);
  std::memcpy(m.data(), &seq, sizeof seq);
  return m;
}
}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  double limit_ms = 10000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--limit-ms") limit_ms = std::stod(argv[i + 1]);
  }
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int pid = static_cast<int>(getpid());
  int pids[3] = {};
  MPI_Allgather(&pid, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);
  auto t = brisk::UcxTransport::create();
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  brisk::Transport& tr = **t;
  if (tr.size() != 3) {
    std::fprintf(stderr, "hung_neighbour_test runs on 3 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  constexpr std::uint32_t kTrials = 60;
  constexpr std::uint32_t kDone = ~std::uint32_t{0};
  std::atomic<std::uint32_t> echoed{kDone};
  std::atomic<bool> done{false};
  tr.set_failure_handler([](brisk::Rank, const brisk::Status&) {});
  tr.set_message_handler([&](brisk::Rank from, std::span<const std::byte> m) {
    if (from.value == 2 || m.size() != sizeof(std::uint32_t)) return;
    std::uint32_t seq = 0;
    std::memcpy(&seq, m.data(), sizeof seq);
    if (me == 0 && seq == kDone) done = true;
    if (me == 0 && seq != kDone) (void)tr.send(brisk::Rank{1}, ping(seq));
    if (me == 1) echoed = seq;
  });
  (*t)->barrier();
  int rc = 0;
  if (me == 2) {
    // Stream until stopped; rank 1 kills it in the end.
    for (;;) {
      if (tr.sends_in_flight(brisk::Rank{0}) < 64) (void)tr.send(brisk::Rank{0}, std::vector<std::byte>(4096));
      tr.progress();
    }
  } else if (me == 1) {
    std::uint32_t heard = 0;
    double worst_ms = 0;  // reported, not judged
    for (std::uint32_t seq = 0; seq < kTrials; ++seq) {
      kill(pids[2], SIGSTOP);
      const auto sent = Clock::now();
      (void)tr.send(brisk::Rank{0}, ping(seq));
      const auto deadline = sent + std::chrono::duration<double, std::milli>(limit_ms);
      while (echoed.load() != seq && Clock::now() < deadline) tr.progress();
      const bool came = echoed.load() == seq;  // rank 2 is still stopped
      worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
      kill(pids[2], SIGCONT);
      if (!came) break;
      ++heard;
      const auto resume = Clock::now() + std::chrono::milliseconds(3);
      while (Clock::now() < resume) tr.progress();
    }
    kill(pids[2], SIGKILL);
    (void)tr.send(brisk::Rank{0}, ping(kDone));
    const auto linger = Clock::now() + std::chrono::milliseconds(300);
    while (Clock::now() < linger) tr.progress();
    const bool ok = heard == kTrials;
    std::printf("rank 1: %u of %u echoes from rank 0 came while rank 2 was stopped mid-stream (the slowest %.1f ms)%s: "
                "%s\n",
                heard, kTrials, worst_ms, ok ? "" : "; the next had not come after --limit-ms, rank 2 still stopped",
                ok ? "hung neighbour test OK" : "hung neighbour test FAILED");
    std::fflush(stdout);
    rc = ok ? 0 : 1;
  } else {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!done.load() && Clock::now() < deadline) tr.progress();
    if (!done.load()) {
      std::printf("rank 0: rank 1 never said it was done\n");
      rc = 1;
    }
  }
  // Each survivor's verdict for slurm/brisk-launch --keep-going (BRISK_STATUS_DIR);
  // MPI cannot finalise with a stopped rank: leave without it.
  brisk::detail::init_exit_status(me, 3);
  brisk::detail::record_exit_status(rc, rc == 0 ? "hung neighbour test OK" : "hung neighbour test FAILED", "2");
  _exit(rc);
}
