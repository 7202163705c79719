// brisk/core/run.hpp — brisk::run, the entry point of every brisk program.
#pragma once

#include <functional>
#include <type_traits>
#include <utility>

namespace brisk {

namespace detail {
// Defined by brisk::runtime (link brisk::brisk).
int run_main(int argc, char** argv, std::function<int()> driver);
}  // namespace detail

// The exit codes of a brisk job besides the driver's own. brisk::run returns the
// job's code on every rank that is still there, and a rank that must end the job
// without returning (MPI_Abort, or leaving without MPI where a rank is dead) exits
// with it. Under `slurm/brisk-launch --keep-going`, whose launcher reports success
// whatever the ranks did, each rank also writes it to $BRISK_STATUS_DIR/rank-N
// and the wrapper exits with it (slurm/README.md).
namespace exit_code {
inline constexpr int kSuccess = 0;
// The driver threw: its own exception, or a task's failure that get rethrew
// (TaskError). Also where it returned 0 but the timeline that --brisk-timeline
// asked for could not be written.
inline constexpr int kDriverThrew = 1;
// Bad input before any work: an unknown --brisk-* flag, a bad value of a flag or a
// BRISK_* variable, a checkpoint that --brisk-restore cannot use.
inline constexpr int kBadInput = 2;
// A rank was lost and the job could not go on: the driver's rank died; on the mpi
// transport any rank died or stopped answering; a result was lost with its rank
// (ObjectLostError, or a rank-lost TaskError, that reached the end of the driver);
// the job could not roll back to its last checkpoint. A lost rank that the job
// ran through (ucx) is no failure: the job's code is then the driver's.
inline constexpr int kRankLost = 69;  // EX_UNAVAILABLE
// brisk found a broken invariant of its own (BRISK_CHECK) and stopped the job.
inline constexpr int kInternalError = 70;  // EX_SOFTWARE
// A checkpoint that SIGUSR1 asked for was written and the job ended to be run
// again (--brisk-checkpoint-exit; checkpoint::Exit).
inline constexpr int kRequeue = 75;  // EX_TEMPFAIL
// The job gave up waiting for a rank that is alive but stuck: a rank's part of a
// checkpoint did not come within --brisk-checkpoint-timeout, and the driver let
// the failed checkpoint end it.
inline constexpr int kTimeout = 79;  // not timeout(1)'s 124, which a wrapping `timeout` gives
}  // namespace exit_code

// run(argc, argv, driver)
//
// Collective over the job: every rank calls it. Initialises MPI
// (MPI_THREAD_MULTIPLE) and the runtime on every rank, parses the --brisk-* flags
// and BRISK_* variables (an unknown flag or a bad value is reported, naming the
// flag and the valid choices, and nothing runs: exit code 2), runs `driver` on
// rank 0 while every rank serves tasks, shuts down cleanly and returns the job's
// exit code on every rank: the driver's (0 for a void driver), or one of
// exit_code's above.
//   int main(int argc, char** argv) {
//     return brisk::run(argc, argv, [] { std::printf("%d\n", brisk::get(brisk::remote(add, 1, 2))); });
//   }
template <class Driver>
int run(int argc, char** argv, Driver&& driver) {
  static_assert(std::is_invocable_v<Driver&>, "brisk::run: the driver must be callable with no arguments");
  using R = std::invoke_result_t<Driver&>;
  static_assert(std::is_void_v<R> || std::is_convertible_v<R, int>,
                "brisk::run: the driver must return void or an int exit code");
  return detail::run_main(argc, argv, [&driver]() -> int {
    if constexpr (std::is_void_v<R>) {
      driver();
      return 0;
    } else {
      return static_cast<int>(driver());
    }
  });
}

}  // namespace brisk
