#include "brisk/runtime/node_arena.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "brisk/core/serialize.hpp"

namespace brisk {
namespace {

constexpr std::size_t kBytes = std::size_t{64} << 20;

std::unique_ptr<NodeArena> make(const std::string& host = "node-a") {
  auto a = NodeArena::create(kBytes, host);
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  return a.ok() ? std::move(a).value() : nullptr;
}

TEST(NodeArena, DescribesItsSharedMemory) {
  auto a = make();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->memory().size(), kBytes);
  const auto& d = a->description();
  EXPECT_EQ(d.host, "node-a");
  EXPECT_EQ(d.pid, static_cast<std::int64_t>(getpid()));
  EXPECT_GE(d.fd, 0);
  EXPECT_EQ(d.bytes, kBytes);
  // The description crosses ranks as bytes.
  EXPECT_EQ(from_bytes<NodeArena::Description>(to_bytes(d)).inode, d.inode);
  // Committed as it is used: the memory is writable at once.
  std::memset(a->memory().data() + kBytes - 4096, 5, 4096);
}

TEST(NodeArena, MapsOnlyThePeerItDescribes) {
  auto a = make();
  auto b = make();
  ASSERT_TRUE(a && b);
  std::memcpy(b->memory().data() + 100, "peer", 4);
  auto view = a->map_peer(b->description());
  ASSERT_EQ(view.size(), kBytes);
  EXPECT_NE(view.data(), b->memory().data());  // a mapping of its own
  EXPECT_EQ(std::memcmp(view.data() + 100, "peer", 4), 0);
  b->memory()[200] = std::byte{9};  // later writes are seen: the memory is shared
  EXPECT_EQ(view[200], std::byte{9});

  NodeArena::Description other = b->description();
  other.host = "node-b";  // another host: not mapped
  EXPECT_TRUE(a->map_peer(other).empty());
  other = b->description();
  other.inode += 1;  // the pid and fd name another file (another process namespace)
  EXPECT_TRUE(a->map_peer(other).empty());
  other = b->description();
  other.bytes = kBytes / 2;
  EXPECT_TRUE(a->map_peer(other).empty());
  other.pid = 0;
  EXPECT_TRUE(a->map_peer(other).empty());
}

// How many of the pages of [p, p + n) this process has in its page tables
// (/proc/self/pagemap, bit 63), or -1 where that cannot be read.
long present_pages(const std::byte* p, std::size_t n) {
  const long page = sysconf(_SC_PAGESIZE);
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return -1;
  long present = 0;
  for (auto a = reinterpret_cast<std::uintptr_t>(p); a < reinterpret_cast<std::uintptr_t>(p) + n; a += page) {
    std::uint64_t entry = 0;
    if (pread(fd, &entry, sizeof entry, static_cast<off_t>(a / page * sizeof entry)) != sizeof entry) {
      close(fd);
      return -1;
    }
    present += static_cast<long>(entry >> 63);
  }
  close(fd);
  return present;
}

// A copy out of a peer's arena first maps the chunks that lie wholly inside it, in
// one call, and not again; the parts of chunks at its ends are left to fault in (the
// rest of such a chunk may be holes of the file, which populating would allocate;
// the kernel may still map a neighbour already in memory around a page it maps).
TEST(PeerArenaPages, MapsTheWholeChunksOfACopyOnce) {
  auto a = make();
  auto b = make();
  ASSERT_TRUE(a && b);
  const std::size_t chunk = PeerArenaPages::kChunk, at = chunk + 100;
  const std::size_t copy = PeerArenaPages::kMinBytes + 2 * chunk;
  std::memset(b->memory().data() + at, 7, copy);
  auto view = a->map_peer(b->description());
  ASSERT_EQ(view.size(), kBytes);
  const long page = sysconf(_SC_PAGESIZE);
  const long present = present_pages(view.data(), kBytes);
  // (A kernel built without /proc/self/pagemap cannot show it: not brisk's doing.)
  if (present == -1) GTEST_SKIP() << "this kernel has no readable /proc/self/pagemap";
  ASSERT_EQ(present, 0) << "pages of a new view are mapped before any read";
  const auto allocated = [&] {
    struct stat st {};
    EXPECT_EQ(fstat(b->description().fd, &st), 0);
    return static_cast<std::uint64_t>(st.st_blocks) * 512;
  };
  const std::uint64_t allocated_before = allocated();
  EXPECT_GE(allocated_before, copy);
  PeerArenaPages pages(view);
  pages.prepare_read(view.data() + at, PeerArenaPages::kMinBytes - 1);  // too small: nothing
  EXPECT_EQ(present_pages(view.data(), kBytes), 0);
  pages.prepare_read(view.data() + kBytes - PeerArenaPages::kMinBytes + 1, PeerArenaPages::kMinBytes);  // outside
  EXPECT_EQ(present_pages(view.data(), kBytes), 0);
  pages.prepare_read(view.data() + at, copy);
  const std::size_t whole = (at + copy) / chunk * chunk - 2 * chunk;  // from the second chunk on
#ifdef MADV_POPULATE_READ
  EXPECT_EQ(present_pages(view.data() + 2 * chunk, whole), static_cast<long>(whole) / page);
#endif
  // Nothing outside the copy's chunks; and no page of the file that was not written
  // before (a hole) was allocated by it.
  EXPECT_EQ(present_pages(view.data() + 3 * chunk + whole, kBytes - 3 * chunk - whole), 0);
  EXPECT_EQ(allocated(), allocated_before);
  // Remembered: a second read there makes no call (shown by dropping this process's
  // page-table entries, which leaves the file's pages, and finding them not mapped
  // again).
  ASSERT_EQ(madvise(const_cast<std::byte*>(view.data()), kBytes, MADV_DONTNEED), 0);
  pages.prepare_read(view.data() + at, copy);
  EXPECT_EQ(present_pages(view.data(), kBytes), 0);
  EXPECT_EQ(view[at + copy - 1], std::byte{7});  // the copy itself reads what is there
}

// The case it is for: another process on the node. Its memory stays readable after
// it exits (a rank killed while others still read what it lent them).
TEST(NodeArena, AnotherProcessesArenaStaysReadableAfterItExits) {
  auto a = make();
  ASSERT_TRUE(a);
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto own = NodeArena::create(kBytes, "node-a");
    if (!own.ok()) _exit(2);
    std::memset((*own)->memory().data(), 0x5a, 1 << 20);
    const auto bytes = to_bytes((*own)->description());
    const std::uint64_t n = bytes.size();
    if (write(to_parent[1], &n, sizeof n) != sizeof n) _exit(3);
    if (write(to_parent[1], bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) _exit(3);
    char go = 0;
    if (read(to_child[0], &go, 1) != 1) _exit(4);
    _exit(0);  // the arena goes with the process, but not its mappings elsewhere
  }
  std::uint64_t n = 0;
  ASSERT_EQ(read(to_parent[0], &n, sizeof n), static_cast<ssize_t>(sizeof n));
  std::vector<std::byte> bytes(n);
  ASSERT_EQ(read(to_parent[0], bytes.data(), n), static_cast<ssize_t>(n));
  const auto d = from_bytes<NodeArena::Description>(bytes);
  EXPECT_EQ(d.pid, static_cast<std::int64_t>(child));
  auto view = a->map_peer(d);
  ASSERT_EQ(view.size(), kBytes);
  EXPECT_EQ(view[12345], std::byte{0x5a});
  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(view[(1 << 20) - 1], std::byte{0x5a});
  EXPECT_EQ(view[1 << 20], std::byte{0});
  // Once it is gone, its description opens nothing.
  EXPECT_TRUE(a->map_peer(d).empty());
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

}  // namespace
}  // namespace brisk
