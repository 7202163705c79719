// Waking a rank's sleeping poller from the other ranks of its node.
//
// A rank that finds nothing to do sleeps in naps that grow to a millisecond: it must
// still poll for what no one announces (messages from other nodes, one-sided reads
// it serves). A message from a rank of the same node would wait out the nap; a task
// of a few milliseconds sent to another rank came back 0.5-2.5 ms late here, the
// request waiting on the worker's rank and the result on the sender's. So each rank
// of a node has a word in one segment of shared memory that all of them map
// (Transport::wake_word): the sleeper sets its word and sleeps on it (a futex shared
// between processes), and a node peer that has just handed it a message sees the
// word set and wakes it.
//
// The node's first rank creates the segment (shm_open, reserved with
// posix_fallocate), the others map it, and its name goes once all have it.
#pragma once

#include <mpi.h>

#include "shm/node_peers.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace brisk::detail {

class NodeBells {
 public:
  // Collective over `comm`; `node` lists its ranks on this node (find_node_members).
  // Returns null on every rank unless every rank mapped its node's segment; a rank
  // that failed says why on stderr (its node's messages then wait out its naps).
  static std::unique_ptr<NodeBells> open(MPI_Comm comm, const NodeMembers& node);
  ~NodeBells();
  NodeBells(const NodeBells&) = delete;
  NodeBells& operator=(const NodeBells&) = delete;

  // This rank's word.
  std::atomic<std::uint32_t>* mine() noexcept { return word(me_); }
  // A message to `rank` has been handed over where it reads it without help from
  // this rank (a ring, MPI's shared-memory queue): wakes it if it sleeps until a
  // message comes. Any thread; does nothing for ranks of other nodes.
  void ring(int rank) noexcept;

 private:
  NodeBells() = default;
  std::atomic<std::uint32_t>* word(int local) noexcept;

  void* map_ = nullptr;
  std::size_t bytes_ = 0;
  int me_ = 0;                 // this rank's index on the node
  std::vector<int> local_of_;  // comm rank -> index on the node, or -1
};

}  // namespace brisk::detail
