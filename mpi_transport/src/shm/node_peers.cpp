#include "shm/node_peers.hpp"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <utility>

namespace brisk::detail {
namespace {

int open_pidfd(pid_t pid) noexcept {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// The identity of this process's pid namespace: pids name the same processes only
// between processes that share it.
std::uint64_t pid_namespace() noexcept {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return (static_cast<std::uint64_t>(st.st_dev) << 32) ^ static_cast<std::uint64_t>(st.st_ino);
}

}  // namespace

NodeMembers find_node_members(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_size = 1, me = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_rank(node, &me);

  struct Entry {
    std::int64_t rank;
    std::int64_t pid;
    std::uint64_t pidns;
    std::uint64_t nonce;
  };
  std::random_device random;
  const std::uint64_t nonce = (static_cast<std::uint64_t>(random()) << 32) ^ random();
  const Entry mine{rank, static_cast<std::int64_t>(::getpid()), pid_namespace(), nonce};
  std::vector<Entry> all(static_cast<std::size_t>(node_size));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, node);
  MPI_Comm_free(&node);

  NodeMembers members;
  members.me = me;
  for (const Entry& e : all) members.all.push_back({static_cast<int>(e.rank), static_cast<long>(e.pid), e.pidns, e.nonce});
  return members;
}

NodePeerWatch NodePeerWatch::open(MPI_Comm comm, const NodeMembers& node) {
  const NodeMember& mine = node.all[static_cast<std::size_t>(node.me)];
  NodePeerWatch w;
  bool ok = mine.pidns != 0;
  for (const NodeMember& e : node.all) {
    if (e.rank == mine.rank) continue;
    if (!ok || e.pidns != mine.pidns) {
      ok = false;
      break;
    }
    const int fd = open_pidfd(static_cast<pid_t>(e.pid));
    if (fd < 0) {
      ok = false;
      break;
    }
    w.peers_.push_back({e.rank, fd});
  }
  int all_ok = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_LAND, comm);
  w.watching_ = all_ok != 0;
  if (!w.watching_) w.close_all();
  return w;
}

NodePeerWatch::NodePeerWatch(NodePeerWatch&& other) noexcept
    : watching_(std::exchange(other.watching_, false)),
      peers_(std::exchange(other.peers_, {})),
      next_look_(other.next_look_) {}

NodePeerWatch& NodePeerWatch::operator=(NodePeerWatch&& other) noexcept {
  if (this != &other) {
    close_all();
    watching_ = std::exchange(other.watching_, false);
    peers_ = std::exchange(other.peers_, {});
    next_look_ = other.next_look_;
  }
  return *this;
}

NodePeerWatch::~NodePeerWatch() { close_all(); }

void NodePeerWatch::close_all() noexcept {
  for (const Peer& p : peers_) ::close(p.pidfd);
  peers_.clear();
}

std::vector<int> NodePeerWatch::exited(std::chrono::steady_clock::time_point now,
                                       std::chrono::steady_clock::duration every) {
  std::vector<int> gone;
  if (peers_.empty() || now < next_look_) return gone;
  next_look_ = now + every;
  std::vector<pollfd> fds(peers_.size());
  for (std::size_t i = 0; i < peers_.size(); ++i) fds[i] = {peers_[i].pidfd, POLLIN, 0};
  if (::poll(fds.data(), fds.size(), 0) <= 0) return gone;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (fds[i].revents != 0) {  // POLLIN once the process exited (POLLHUP/POLLERR: gone too)
      gone.push_back(peers_[i].rank);
      ::close(peers_[i].pidfd);
    } else {
      peers_[kept++] = peers_[i];
    }
  }
  peers_.resize(kept);
  return gone;
}

}  // namespace brisk::detail
