// brisk/runtime/node_arena.hpp — a rank's arena in memory the ranks of its node share.
//
// The arena (the memory a rank registers with its transport and lends objects from)
// is an anonymous shared-memory file (memfd). The other ranks on the same host open
// it through /proc/<pid>/fd/<fd> and map it read-only, so a task there reads an
// object made on this rank where it lies, with no transfer. Nothing is left behind:
// the file goes with the last process that maps it, also when ranks are killed.
//
// A peer's description is checked against the file it opens (device, inode and
// size), so ranks of one host in different process namespaces (containers), where
// the pid names another process, simply get no view and use the transport.
//
// Thread safety: create and map_peer at start, from one thread; views are read
// from any thread afterwards.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "brisk/core/status.hpp"

namespace brisk {

class NodeArena {
 public:
  // What another rank needs to map this arena (sent to every rank at start).
  struct Description {
    std::string host;
    std::int64_t pid = 0;
    std::int32_t fd = -1;
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
    std::uint64_t bytes = 0;

    template <class A>
    void serialize(A& ar) {
      ar(host, pid, fd, device, inode, bytes);
    }
  };

  // `bytes` of shared memory, committed as it is touched. kResourceExhausted when
  // the system refuses the file or the mapping.
  static StatusOr<std::unique_ptr<NodeArena>> create(std::size_t bytes, std::string host);
  ~NodeArena();
  NodeArena(const NodeArena&) = delete;
  NodeArena& operator=(const NodeArena&) = delete;

  std::span<std::byte> memory() const noexcept { return {base_, bytes_}; }
  const Description& description() const noexcept { return description_; }

  // Maps the arena `peer` describes, read-only, when it is on this host and its file
  // is the one described; otherwise returns an empty span (not an error: such a peer
  // is read through the transport). A view stays mapped until this process exits
  // (values read in place may outlive the run that mapped it), also after the peer's
  // process ended: it keeps that memory alive meanwhile.
  std::span<const std::byte> map_peer(const Description& peer);

  // Leaves the memory mapped when this goes (until the process exits): values placed
  // in it during the run are still in use (detail::retire_new_memory).
  void keep_mapped() noexcept { keep_mapped_ = true; }

 private:
  NodeArena(std::byte* base, std::size_t bytes, int fd, Description d)
      : base_(base), bytes_(bytes), fd_(fd), description_(std::move(d)) {}
  std::byte* base_;
  std::size_t bytes_;
  int fd_;
  Description description_;
  bool keep_mapped_ = false;
};

// Which parts of a peer's arena, mapped here, have their pages in this process's page
// tables. A read of a peer's object may reach memory that this process never
// touched: each 4 KiB page would then fault on its own (shared memory gets no
// transparent huge pages by default). `prepare_read` maps such pages in one call
// (MADV_POPULATE_READ, Linux 5.14) and remembers the 64 KiB chunks it mapped, so that
// later reads there make no call (over pages already mapped it takes 20-50 us a MiB).
// On the project's VMs a first copy of 256 MiB out of a fresh view took 143-162 ms,
// and 6-12 ms to populate plus 117-129 ms to copy with it (the hypervisor still
// traps each page's first access). Nothing happens below kMinBytes, or where the
// kernel lacks the call (pages then fault in as they are read). Thread-safe.
class PeerArenaPages {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{1} << 20;
  static constexpr std::size_t kChunk = std::size_t{64} << 10;

  explicit PeerArenaPages(std::span<const std::byte> arena);
  // Before [p, p + n), which lies in the arena, is read (copied, or read in place).
  void prepare_read(const std::byte* p, std::size_t n) noexcept;

 private:
  std::span<const std::byte> arena_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> mapped_;  // a bit per chunk
};

}  // namespace brisk
