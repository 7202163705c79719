#include "shm/node_bells.hpp"

#include "shm/node_segment.hpp"

#include "brisk/core/detail/futex.hpp"
#include "brisk/core/transport.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <new>

namespace brisk::detail {
namespace {
// One word per rank, each on a cache line of its own: a sleeper's store does not
// take the line its neighbours' senders read.
constexpr std::size_t kLine = 64;
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "bells need lock-free 32-bit atomics in shared memory");
}  // namespace

std::unique_ptr<NodeBells> NodeBells::open(MPI_Comm comm, const NodeMembers& node) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::unique_ptr<NodeBells> b(new NodeBells());
  const int node_size = static_cast<int>(node.all.size());
  b->me_ = node.me;
  b->local_of_.assign(static_cast<std::size_t>(size), -1);
  for (int i = 0; i < node_size; ++i) b->local_of_[static_cast<std::size_t>(node.all[static_cast<std::size_t>(i)].rank)] = i;
  b->bytes_ = std::max<std::size_t>(static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)), kLine * static_cast<std::size_t>(node_size));

  // The node's first rank names the segment after itself: its pid, rank and the nonce
  // it drew at start (a name left by a crashed run is never this run's).
  const NodeMember& first = node.all.front();
  const std::string name = fmt::format("/brisk-bells-{}-{}-{:016x}", first.pid, first.rank, first.nonce);
  const bool creator = node.me == 0;
  bool created = false;
  std::string error;
  if (creator) {
    b->map_ = create_node_segment(name, b->bytes_, false, created, error);
    for (int i = 0; b->map_ && i < node_size; ++i) {
      new (static_cast<std::byte*>(b->map_) + kLine * static_cast<std::size_t>(i))
          std::atomic<std::uint32_t>(Transport::kAwake);
    }
  }
  // (all_ranks_ok first: every rank takes part.)
  if (all_ranks_ok(comm, error) && !creator) b->map_ = map_node_segment(name, b->bytes_, first.rank, error);
  // Every rank has mapped what it could: the name goes (the memory stays while mapped).
  MPI_Barrier(comm);
  if (created) ::shm_unlink(name.c_str());
  const bool all_ok = all_ranks_ok(comm, error);
  if (!error.empty()) {
    std::fprintf(stderr, "brisk: rank %d: no wake-up words shared within the node (%s); a sleeping rank finds its "
                         "node's messages at the end of its nap\n", rank, error.c_str());
  }
  if (!all_ok) return nullptr;  // the destructor unmaps what was mapped
  return b;
}

NodeBells::~NodeBells() {
  if (map_) ::munmap(map_, bytes_);
}

std::atomic<std::uint32_t>* NodeBells::word(int local) noexcept {
  return std::launder(reinterpret_cast<std::atomic<std::uint32_t>*>(static_cast<std::byte*>(map_) +
                                                                     kLine * static_cast<std::size_t>(local)));
}

void NodeBells::ring(int rank) noexcept {
  if (rank < 0 || static_cast<std::size_t>(rank) >= local_of_.size()) return;
  const int local = local_of_[static_cast<std::size_t>(rank)];
  if (local < 0 || local == me_) return;
  std::atomic<std::uint32_t>* w = word(local);
  // The message is published (by the caller's stores); the sleeper stores its word,
  // then looks for messages: with a full fence on both sides, either it finds the
  // message or this finds its word set.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::uint32_t expected = Transport::kAsleepUntilMessage;
  if (w->load(std::memory_order_relaxed) == expected &&
      w->compare_exchange_strong(expected, Transport::kAwake, std::memory_order_acq_rel)) {
    futex_wake_shared(w, 1);
  }
}

}  // namespace brisk::detail
