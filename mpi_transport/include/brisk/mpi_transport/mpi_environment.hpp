// brisk/mpi_transport/mpi_environment.hpp — MPI start-up and shutdown for brisk::run.
//
// The only place besides the transports that touches MPI. Initialises MPI with
// MPI_THREAD_MULTIPLE (unless the program already did) and finalises it on
// destruction (only if it initialised it).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "brisk/core/status.hpp"

namespace brisk {

class MpiEnvironment {
 public:
  // Fails (kFailedPrecondition) if MPI cannot provide MPI_THREAD_MULTIPLE.
  static StatusOr<std::unique_ptr<MpiEnvironment>> init(int* argc, char*** argv);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  // Collective: every rank returns rank 0's `code`. Ranks other than 0 wait without
  // spinning a core (they poll with short sleeps), so that they do not steal CPU
  // from rank 0's workers when ranks share cores.
  int agree_exit_code(int code);

  // Collective: every rank's bytes, by rank (polled, does not spin a core).
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine);
  // Collective barrier (polled).
  void barrier();

  // Aborts the whole job (MPI_Abort on MPI_COMM_WORLD).
  [[noreturn]] static void abort_job(int code) noexcept;

 private:
  MpiEnvironment() = default;
  int rank_ = 0;
  int size_ = 1;
  bool owns_mpi_ = false;
};

}  // namespace brisk
