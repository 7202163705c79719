// Messages between the ranks of one node, through one shared-memory ring per ordered
// pair of ranks.
//
// UCX's shared-memory transports give each receiver one FIFO that all of its node's
// senders write into: a sender claims a slot, fills it, then marks it written, and
// the receiver reads the slots in order. A sender stopped or killed between the
// claim and the mark (SIGSTOP, SIGKILL, a crash: anywhere in a send) leaves a slot
// that is never marked, and its receiver hears no rank of the node again
// (tests/mpi_transport/hung_neighbour_test.cpp: rank 0 went deaf in 1 of 6 runs).
// Here each sender has a ring of its own in each receiver's segment, and publishes
// a message only once all of it is written (one release store of the ring's head):
// a sender that stops anywhere stops only its own ring.
//
// Each rank creates its receive segment (shm_open, reserved with posix_fallocate so
// that a full /dev/shm is an error here rather than a SIGBUS later), maps its
// peers' segments, and unlinks its own name once all have it mapped. Messages that
// do not fit in a ring go in fragments; sends that find a ring full wait in a queue
// per peer, written on later send() and progress() calls.
#pragma once

#include <mpi.h>

#include "shm/node_peers.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace brisk::detail {

class PeerCounts;

class NodeRings {
 public:
  using Deliver = std::function<void(int from, std::span<const std::byte> message)>;

  // Collective over `comm` (whose ranks name the peers); `node` lists its ranks on
  // this node (find_node_members). Returns null on every rank unless every rank
  // could create its segment and map its node's others; `why` then says what failed
  // here (empty where another rank failed). `ring_bytes` is each ring's size (0:
  // 1 MiB, less on nodes with many ranks; rounded to a power of two). `in_flight`
  // counts the messages not yet wholly in their ring, per peer.
  static std::unique_ptr<NodeRings> open(MPI_Comm comm, const NodeMembers& node, std::size_t ring_bytes,
                                         PeerCounts* in_flight, std::string* why);
  ~NodeRings();
  NodeRings(const NodeRings&) = delete;
  NodeRings& operator=(const NodeRings&) = delete;

  // Whether messages to `rank` go through a ring (another rank of this node).
  bool reaches(int rank) const noexcept;
  std::size_t ring_bytes() const noexcept { return cap_; }
  int node_size() const noexcept { return static_cast<int>(node_ranks_.size()); }

  // Writes `message` into the ring to `to` (reaches(to)), or queues what does not fit.
  void send(int to, std::vector<std::byte> message);
  // Writes queued sends that now fit, then reads every ring to this rank and calls
  // `deliver` for each whole message, in send order per sender (the span is valid
  // only during the call). Returns the number of messages written and delivered.
  // Callers on other threads at the same time skip the rings that one is reading.
  int progress(const Deliver& deliver);
  // Reads only the rings from `ranks` (found dead: what they wrote is all there will
  // be), so that their last messages come before their loss is told.
  int drain(std::span<const int> ranks, const Deliver& deliver);
  // `rank` is dead: its ring is no longer read, and sends queued for it are dropped.
  void drop(int rank);

  struct Ring;

 private:
  struct Out {
    Ring* ring = nullptr;
    std::mutex mutex;
    std::deque<std::pair<std::vector<std::byte>, std::size_t>> queue;  // (message, bytes already written)
    std::atomic<bool> queued{false};
    std::uint64_t head = 0;         // this rank's copy of the ring's head (it alone writes it)
    std::uint64_t cached_tail = 0;  // the reader's tail when last looked at
  };
  struct In {
    Ring* ring = nullptr;
    std::mutex mutex;
    std::vector<std::byte> partial;  // fragments of a message not yet whole
  };

  NodeRings() = default;
  // Writes as much of the queue as fits; returns the messages completed. Holds o.mutex.
  int write_queued(int to, Out& o);
  // Writes one fragment; false if it does not fit now.
  bool write_fragment(Out& o, const std::byte* data, std::size_t length, bool last);
  int read(int from, In& in, const Deliver& deliver);

  std::size_t cap_ = 0;
  std::size_t max_fragment_ = 0;
  std::vector<int> node_ranks_;      // comm ranks on this node, by local index
  std::vector<int> local_of_;        // comm rank -> local index, or -1
  std::vector<void*> maps_;          // each local rank's receive segment, mapped here
  std::size_t segment_bytes_ = 0;
  int me_ = -1;                      // this rank's local index
  std::vector<std::unique_ptr<Out>> out_;  // by the receiver's local index
  std::vector<std::unique_ptr<In>> in_;    // by the sender's local index
  std::vector<std::atomic<bool>> dead_;    // by local index
  PeerCounts* in_flight_ = nullptr;
};

}  // namespace brisk::detail
