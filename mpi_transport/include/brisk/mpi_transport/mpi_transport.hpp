// brisk/mpi_transport/mpi_transport.hpp — Transport over MPI.
//
// Control traffic: MPI_Isend on a duplicate of MPI_COMM_WORLD, received in
// progress() with MPI_Improbe + MPI_Mrecv (matched probes are safe with several
// threads). Objects: MPI_Rget from one window per rank, made with MPI_Win_allocate
// (not a dynamic window: Open MPI 4.1 reads the wrong address with MPI_Rget on
// dynamic windows, and osc/ucx allows only 32 attached regions) and opened once
// with MPI_Win_lock_all(MPI_MODE_NOCHECK) (without NOCHECK every lock costs a
// remote atomic); or, over memory the caller allocated, with MPI_Win_create. Only
// memory inside window() can be registered.
//
// MPI gives survivors no notice of a dead rank, so the failure handler never runs:
// a dead rank ends the job (see the fault-tolerance notes in docs/).
//
// Creation and destruction are collective over MPI_COMM_WORLD; MPI must be
// initialised with MPI_THREAD_MULTIPLE.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "brisk/core/transport.hpp"

namespace brisk {

class MpiTransport final : public Transport {
 public:
  static StatusOr<std::unique_ptr<MpiTransport>> create(std::size_t window_bytes);
  // The same over memory the caller provides and keeps until the transport is gone
  // (the window is made with MPI_Win_create; brisk passes its node-shared arena).
  static StatusOr<std::unique_ptr<MpiTransport>> create(std::span<std::byte> memory);
  ~MpiTransport() override;

  Rank rank() const noexcept override;
  int size() const noexcept override;
  const char* name() const noexcept override { return "mpi"; }
  void set_message_handler(MessageHandler handler) override;
  void set_failure_handler(FailureHandler handler) override;
  Status send(Rank to, std::vector<std::byte> message) override;
  std::size_t sends_in_flight(Rank to) const noexcept override;
  int progress() override;
  // Ranks of one node wake each other with words in memory they share (node_bells.hpp).
  std::atomic<std::uint32_t>* wake_word() noexcept override;
  StatusOr<std::unique_ptr<MemoryRegistration>> register_memory(void* base, std::size_t length) override;
  Status get(const RemoteRegion& remote, std::uint64_t offset, void* dst, std::size_t length,
             Completion done) override;

  // This rank's window: the memory peers can read. Empty when MPI could not make one
  // on every rank (then get() fails and register_memory() refuses everything).
  std::span<std::byte> window() noexcept;
  // Why there is no window, or "".
  const std::string& window_error() const noexcept;
  // Collective barrier over the transport's communicator (polls, does not spin hard).
  void barrier();

  struct Impl;

 private:
  explicit MpiTransport(std::unique_ptr<Impl> impl);
  static StatusOr<std::unique_ptr<MpiTransport>> create_window(std::size_t window_bytes, std::byte* memory);
  std::unique_ptr<Impl> impl_;
};

}  // namespace brisk
