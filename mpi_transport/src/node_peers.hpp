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
#include <vector>

namespace brisk::detail {

class NodePeerWatch {
 public:
  // Collective over `comm`. Finds the ranks on this node (MPI_COMM_TYPE_SHARED) and
  // opens a pidfd for each; watching() is true on every rank only if every rank could
  // watch all of its node's peers (same pid namespace, pidfd_open available).
  static NodePeerWatch open(MPI_Comm comm);

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
