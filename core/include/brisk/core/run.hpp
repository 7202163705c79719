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

// run(argc, argv, driver)
//
// Collective over the job: every rank calls it. Initialises MPI
// (MPI_THREAD_MULTIPLE) and the runtime on every rank, parses the --brisk-* flags
// and BRISK_* variables (an unknown flag or a bad value is reported, naming the
// flag and the valid choices, and nothing runs: exit code 2), runs `driver` on
// rank 0 while every rank serves tasks, shuts down cleanly and returns the driver's
// exit code on every rank (0 for a void driver, 1 if it threw; 1 too where it
// returned 0 but the timeline that --brisk-timeline asked for was not written).
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
