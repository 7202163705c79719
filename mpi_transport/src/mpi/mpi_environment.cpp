#include "brisk/mpi_transport/mpi_environment.hpp"

#include "mpi/mpi_poll.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace brisk {

StatusOr<std::unique_ptr<MpiEnvironment>> MpiEnvironment::init(int* argc, char*** argv) {
  std::unique_ptr<MpiEnvironment> env(new MpiEnvironment);
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      return unavailable("MPI_Init_thread failed");
    }
    env->owns_mpi_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &env->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &env->size_);
  if (provided < MPI_THREAD_MULTIPLE) {
    return failed_precondition(
        "the MPI library does not provide MPI_THREAD_MULTIPLE, which brisk needs; use an MPI "
        "built with thread support (Open MPI 4.1 from Debian provides it)");
  }
  return env;
}

MpiEnvironment::~MpiEnvironment() {
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

int MpiEnvironment::agree_exit_code(int code) {
  if (size_ == 1) return code;
  MPI_Request req;
  MPI_Ibcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
  detail::wait_polled(req, {}, std::chrono::microseconds(50), std::chrono::milliseconds(5));
  // A barrier as well, so that no rank finalises while another still serves.
  detail::barrier_polled(MPI_COMM_WORLD);
  return code;
}

std::vector<std::vector<std::byte>> MpiEnvironment::allgather(std::span<const std::byte> mine) {
  std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(size_));
  if (size_ == 1) {
    out[0].assign(mine.begin(), mine.end());
    return out;
  }
  int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<std::size_t>(size_));
  MPI_Request req;
  MPI_Iallgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD, &req);
  detail::wait_polled(req);
  std::vector<int> displs(static_cast<std::size_t>(size_));
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    displs[static_cast<std::size_t>(r)] = total;
    total += sizes[static_cast<std::size_t>(r)];
  }
  std::vector<std::byte> all(static_cast<std::size_t>(total));
  MPI_Iallgatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD, &req);
  detail::wait_polled(req);
  for (int r = 0; r < size_; ++r) {
    auto first = all.begin() + displs[static_cast<std::size_t>(r)];
    out[static_cast<std::size_t>(r)].assign(first, first + sizes[static_cast<std::size_t>(r)]);
  }
  return out;
}

void MpiEnvironment::barrier() {
  if (size_ > 1) detail::barrier_polled(MPI_COMM_WORLD);
}

void MpiEnvironment::abort_job(int code) noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace brisk
