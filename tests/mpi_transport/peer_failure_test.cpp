// A rank killed with SIGKILL is reported by the UCX transport to the survivors (by
// UCX, or on one node by the pidfd watch, while shared memory carries the traffic),
// and sends to it fail instead of hanging.
//   mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -np 3 peer_failure_test
// (without --enable-recovery, mpirun may kill the survivors when the victim dies)
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "brisk/mpi_transport/ucx_transport.hpp"
#include "brisk/runtime/exit_status.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  auto t = brisk::UcxTransport::create();
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  brisk::Transport& tr = **t;
  const int victim = tr.size() - 1;
  (*t)->barrier();
  if (tr.rank().value == victim) raise(SIGKILL);

  std::atomic<int> reported{-1};
  std::string why;
  tr.set_failure_handler([&](brisk::Rank r, const brisk::Status& s) {
    if (r.value != victim) return;
    why = s.message();
    reported = r.value;
  });
  tr.set_message_handler([](brisk::Rank, std::span<const std::byte>) {});
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + std::chrono::seconds(20);
  while (reported.load() < 0 && std::chrono::steady_clock::now() < deadline) {
    (void)tr.send(brisk::Rank{victim}, std::vector<std::byte>(16));
    for (int i = 0; i < 10; ++i) tr.progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  bool ok = reported.load() == victim && tr.send(brisk::Rank{victim}, {}).code() == brisk::StatusCode::kUnavailable;
  std::printf("rank %d: %s rank %d dead after %.1f ms (%s)\n", tr.rank().value,
              ok ? "peer failure detected:" : "NOT DETECTED:", reported.load(), ms, why.c_str());
  std::fflush(stdout);
  // Give the other survivors time to see the victim die before this rank leaves
  // (its own exit would be the next failure they see).
  auto linger = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < linger) {
    tr.progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Each survivor's verdict for slurm/brisk-launch --keep-going (BRISK_STATUS_DIR);
  // MPI cannot finalise with a dead rank: leave without it.
  brisk::detail::init_exit_status(tr.rank().value, tr.size());
  brisk::detail::record_exit_status(ok ? 0 : 1, ok ? "peer failure detected" : "peer failure NOT detected",
                                    std::to_string(victim));
  _exit(ok ? 0 : 1);
}
