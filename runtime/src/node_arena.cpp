#include "brisk/runtime/node_arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace brisk {

StatusOr<std::unique_ptr<NodeArena>> NodeArena::create(std::size_t bytes, std::string host) {
  const int fd = memfd_create("brisk-arena", MFD_CLOEXEC);
  if (fd < 0) return resource_exhausted(fmt::format("memfd_create for the arena: {}", std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    close(fd);
    return resource_exhausted(fmt::format("sizing the arena's shared memory to {} bytes: {}", bytes, std::strerror(e)));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return resource_exhausted(fmt::format("mapping {} bytes of shared memory for the arena: {}", bytes, std::strerror(e)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    munmap(p, bytes);
    close(fd);
    return resource_exhausted(fmt::format("fstat of the arena's shared memory: {}", std::strerror(e)));
  }
  Description d;
  d.host = std::move(host);
  d.pid = static_cast<std::int64_t>(getpid());
  d.fd = fd;
  d.device = static_cast<std::uint64_t>(st.st_dev);
  d.inode = static_cast<std::uint64_t>(st.st_ino);
  d.bytes = bytes;
  try {
    return std::unique_ptr<NodeArena>(new NodeArena(static_cast<std::byte*>(p), bytes, fd, std::move(d)));
  } catch (...) {
    munmap(p, bytes);
    close(fd);
    throw;
  }
}

NodeArena::~NodeArena() {
  // The views of other ranks' arenas stay: values read in place may outlive the run.
  if (!keep_mapped_) munmap(base_, bytes_);
  close(fd_);  // a mapping kept keeps the file
}

std::span<const std::byte> NodeArena::map_peer(const Description& peer) {
  if (peer.host != description_.host || peer.pid <= 0 || peer.fd < 0 || peer.bytes == 0) return {};
  const std::string path = fmt::format("/proc/{}/fd/{}", peer.pid, peer.fd);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  const bool same = fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_dev) == peer.device &&
                    static_cast<std::uint64_t>(st.st_ino) == peer.inode &&
                    static_cast<std::uint64_t>(st.st_size) == peer.bytes;
  void* p = same ? mmap(nullptr, peer.bytes, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0) : MAP_FAILED;
  close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) return {};
  return {static_cast<const std::byte*>(p), peer.bytes};
}

PeerArenaPages::PeerArenaPages(std::span<const std::byte> arena)
    : arena_(arena), mapped_(std::make_unique<std::atomic<std::uint64_t>[]>((arena.size() / kChunk + 64) / 64)) {}

void PeerArenaPages::prepare_read(const std::byte* p, std::size_t n) noexcept {
#ifdef MADV_POPULATE_READ
  if (n < kMinBytes || p < arena_.data() || n > arena_.size() ||
      static_cast<std::size_t>(p - arena_.data()) > arena_.size() - n) {
    return;
  }
  const auto at = static_cast<std::size_t>(p - arena_.data());
  const auto is_mapped = [this](std::size_t c) { return (mapped_[c / 64].load(std::memory_order_relaxed) >> (c % 64)) & 1; };
  // The chunks that lie wholly inside the copy; a part of a chunk at either end
  // faults in as the copy reads it (the rest of that chunk may be holes of the file,
  // which populating would allocate).
  const std::size_t first = (at + kChunk - 1) / kChunk, end = (at + n) / kChunk;
  for (std::size_t c = first; c < end;) {
    if (is_mapped(c)) {
      ++c;
      continue;
    }
    std::size_t run = c + 1;
    while (run < end && !is_mapped(run)) ++run;
    // Runs of chunks not known to be mapped, each populated in one call.
    void* from = const_cast<std::byte*>(arena_.data() + c * kChunk);  // page-aligned: mmap's base, whole chunks
    if (::madvise(from, (run - c) * kChunk, MADV_POPULATE_READ) == 0) {
      for (std::size_t k = c; k < run; ++k) mapped_[k / 64].fetch_or(std::uint64_t{1} << (k % 64), std::memory_order_relaxed);
    }
    c = run;
  }
#else
  (void)p;
  (void)n;
#endif
}

}  // namespace brisk
