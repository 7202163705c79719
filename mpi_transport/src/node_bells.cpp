#include "node_bells.hpp"

#include "brisk/core/detail/futex.hpp"
#include "brisk/core/transport.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
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
  const auto map = [&](int fd) {
    void* p = ::mmap(nullptr, b->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      error = fmt::format("mmap {}: {}", name, std::strerror(errno));
    } else {
      b->map_ = p;
    }
  };
  if (creator) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      error = fmt::format("shm_open {}: {}", name, std::strerror(errno));
    } else {
      created = true;
      const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(b->bytes_));
      if (err != 0) {
        error = fmt::format("reserving {} bytes of shared memory for {}: {}", b->bytes_, name, std::strerror(err));
      } else {
        map(fd);
        for (int i = 0; b->map_ && i < node_size; ++i) {
          new (static_cast<std::byte*>(b->map_) + kLine * static_cast<std::size_t>(i))
              std::atomic<std::uint32_t>(Transport::kAwake);
        }
      }
      ::close(fd);
    }
  }
  int ok = error.empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, comm);
  if (ok && !creator) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) {
      error = fmt::format("shm_open {} (rank {}'s): {}", name, first.rank, std::strerror(errno));
    } else {
      map(fd);
      ::close(fd);
    }
  }
  // Every rank has mapped what it could: the name goes (the memory stays while mapped).
  MPI_Barrier(comm);
  if (created) ::shm_unlink(name.c_str());
  int all_ok = error.empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_LAND, comm);
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
