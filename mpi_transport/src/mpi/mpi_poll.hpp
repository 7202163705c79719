// Waiting for a nonblocking MPI operation without spinning a core: ranks that share
// cores (or a rank's own workers) keep the CPU while one of them waits.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <thread>

namespace brisk::detail {

// Tests `request` until it completes. Between tests it runs `progress` (when given)
// and sleeps when that did nothing, starting at `nap` and doubling up to `max_nap`.
inline void wait_polled(MPI_Request& request, const std::function<int()>& progress = {},
                        std::chrono::microseconds nap = std::chrono::microseconds(20),
                        std::chrono::microseconds max_nap = std::chrono::microseconds(20)) {
  for (;;) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (progress && progress() > 0) continue;
    std::this_thread::sleep_for(nap);
    if (nap < max_nap) nap *= 2;
  }
}

// MPI_Ibarrier on `comm`, waited for with wait_polled.
inline void barrier_polled(MPI_Comm comm, const std::function<int()>& progress = {}) {
  MPI_Request request;
  MPI_Ibarrier(comm, &request);
  wait_polled(request, progress);
}

}  // namespace brisk::detail
