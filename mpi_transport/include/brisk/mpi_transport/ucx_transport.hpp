// brisk/mpi_transport/ucx_transport.hpp — Transport over UCX.
//
// Control traffic: UCX active messages (ucp_am_send_nbx; large ones arrive by
// rendezvous and are pulled with ucp_am_recv_data_nbx), delivered in send order per
// peer. Objects: ucp_get_nbx from regions mapped with ucp_mem_map, whose packed
// rkeys travel in RemoteRegion::key (unpacked once per peer and cached). Endpoints
// use UCP_ERR_HANDLING_MODE_PEER: a dead peer is reported to the failure handler
// and later sends to it fail, instead of hanging; keepalive runs every 250 ms
// unless UCX_KEEPALIVE_INTERVAL says otherwise, so a dead peer is noticed within
// about a second even on paths where no operation fails. Ranks on the same node
// talk over shared memory, whose transports do not notice a killed peer: the
// transport watches each of them for its exit through a pidfd (checked at most
// every millisecond in progress()) and reports it like UCX's own failures. Worker
// addresses are exchanged over MPI at creation. Messages to the other ranks of the
// node do not use UCX's shared memory, where one rank stopped in the middle of a send
// leaves the node's others deaf to each other: they go through shared-memory rings
// of brisk's own, one per pair (node_rings.hpp; BRISK_NODE_RING_BYTES sets a ring's
// size, 0 leaves these messages to UCX). UCX carries the gets and all else.
//
// Creation and destruction are collective over MPI_COMM_WORLD (MPI initialised with
// MPI_THREAD_MULTIPLE); the UCX worker is created thread-safe (UCS_THREAD_MODE_MULTI).
#pragma once

#include <mpi.h>

#include <memory>

#include "brisk/core/transport.hpp"

namespace brisk {

class UcxTransport final : public Transport {
 public:
  static StatusOr<std::unique_ptr<UcxTransport>> create();

  // Collective over `comm`. Whether every rank can watch its node's other ranks for
  // their exit (pidfd_open, one pid namespace per node); if so, sets
  // UCX_POSIX_ERROR_HANDLING and UCX_SYSV_ERROR_HANDLING to y in the environment
  // (unless already set), so that UCX contexts made after it in this process put
  // endpoints in peer error mode on shared memory within the node. create() makes
  // the same check; a benchmark that measures raw UCX beside brisk calls it first.
  static bool use_node_shared_memory(MPI_Comm comm);
  ~UcxTransport() override;

  Rank rank() const noexcept override;
  int size() const noexcept override;
  const char* name() const noexcept override { return "ucx"; }
  void set_message_handler(MessageHandler handler) override;
  void set_failure_handler(FailureHandler handler) override;
  Status send(Rank to, std::vector<std::byte> message) override;
  std::size_t sends_in_flight(Rank to) const noexcept override;
  int progress() override;
  // With the node's messages in rings, its ranks wake each other with words in memory
  // they share (node_bells.hpp); null otherwise.
  std::atomic<std::uint32_t>* wake_word() noexcept override;
  StatusOr<std::unique_ptr<MemoryRegistration>> register_memory(void* base, std::size_t length) override;
  // ucp_mem_map takes any memory (2-3 µs for 1 to 256 MiB over shared memory here;
  // InfiniBand pins it, through UCX's registration cache).
  bool exposes_any_memory() const noexcept override { return true; }
  Status get(const RemoteRegion& remote, std::uint64_t offset, void* dst, std::size_t length,
             Completion done) override;
  // Closes the endpoint to `peer` at once (UCP_EP_CLOSE_FLAG_FORCE): requests in
  // flight to it complete with an error.
  void disconnect(Rank peer) override;

  // Collective barrier (MPI, polled); progresses the transport (and so runs the
  // handlers) while it waits.
  void barrier();

  struct Impl;

 private:
  explicit UcxTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace brisk
