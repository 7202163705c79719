// Watching the ranks on this node for their exit, through pidfds.
//
// The UCX backend's shared-memory transports do not notice a peer that was killed
// (measured: a SIGKILLed peer went unnoticed for 20 s and more), while TCP loopback,
// which does, costs 10-25x the latency of shared memory. A process on the same node
// can be watched directly: pidfd_open(2) gives a descriptor that becomes readable
// when the process exits, whoever its parent is. With every rank on this node
// watched that way, shared memory carries the node's traffic and a dead local peer
// is still reported within about a millisecond.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace brisk::detail {

// The ranks of `comm` on this node, in the order of the node's communicator.
struct NodeMember {
  int rank = -1;  // in comm
  long pid = 0;
  std::uint64_t pidns = 0;  // the pid namespace's identity (0: unknown)
  std::uint64_t nonce = 0;  // random, drawn at start: names of this run's shared objects
};
struct NodeMembers {
  std::vector<NodeMember> all;  // this rank included
  int me = 0;                   // this rank's index in `all`
};
// Collective over `comm`: splits it by node (MPI_COMM_TYPE_SHARED) and gathers each
// member's rank, pid, pid namespace and nonce.
NodeMembers find_node_members(MPI_Comm comm);

class NodePeerWatch {
 public:
  // Collective over `comm`. Opens a pidfd for each of `node`'s other ranks;
  // watching() is true on every rank only if every rank could watch all of its
  // node's peers (same pid namespace, pidfd_open available).
  static NodePeerWatch open(MPI_Comm comm, const NodeMembers& node);

  NodePeerWatch() = default;
  NodePeerWatch(NodePeerWatch&& other) noexcept;
  NodePeerWatch& operator=(NodePeerWatch&& other) noexcept;
  NodePeerWatch(const NodePeerWatch&) = delete;
  NodePeerWatch& operator=(const NodePeerWatch&) = delete;
  ~NodePeerWatch();

  bool watching() const noexcept { return watching_; }

  // Ranks (in `comm`) that exited since the last call, looked for at most once per
  // `every`; each is reported once and no longer watched. Not thread-safe.
  std::vector<int> exited(std::chrono::steady_clock::time_point now,
                          std::chrono::steady_clock::duration every = std::chrono::milliseconds(1));

 private:
  struct Peer {
    int rank = -1;
    int pidfd = -1;
  };
  void close_all() noexcept;

  bool watching_ = false;
  std::vector<Peer> peers_;
  std::chrono::steady_clock::time_point next_look_{};
};

}  // namespace brisk::detail
