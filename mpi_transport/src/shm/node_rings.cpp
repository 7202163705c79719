#include "shm/node_rings.hpp"

#include "shm/node_segment.hpp"
#include "peer_counts.hpp"
#include "brisk/core/serialize.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

namespace brisk::detail {

// The control words of one ring, each on a cache line of its own; the data follows.
// head and tail count bytes ever written and read; positions are these modulo the
// capacity (a power of two).
struct NodeRings::Ring {
  alignas(64) std::atomic<std::uint64_t> head;
  alignas(64) std::atomic<std::uint64_t> tail;
  alignas(64) std::byte data[1];
};

namespace {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "rings need lock-free 64-bit atomics in shared memory");

// Each record: this header, then the fragment padded to 8 bytes.
struct RecordHeader {
  std::uint32_t length;
  std::uint32_t flags;
};
constexpr std::uint32_t kLast = 1;  // the message's last fragment
constexpr std::uint32_t kWrap = 2;  // padding to the end of the ring: go on at its start
constexpr std::size_t kAlign = 8;
constexpr std::size_t kDataOffset = offsetof(NodeRings::Ring, data);
// A node's rings take this much per receiver, each ring from kMinRing to kMaxRing
// bytes (more ranks per node, smaller rings); beyond 64 ranks a node, node size times
// kMinRing per receiver.
constexpr std::size_t kSegmentBudget = std::size_t{4} << 20;
constexpr std::size_t kMinRing = std::size_t{64} << 10;
constexpr std::size_t kMaxRing = std::size_t{1} << 20;
constexpr std::size_t kHotBytes = std::size_t{64} << 10;
constexpr std::size_t kPage = 4096;

std::size_t padded(std::size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

// Maps [p, p + n) into this process's page tables, writable, before it is used.
void prefault(std::byte* p, std::size_t n) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(p) & ~(page - 1);
  const auto last = (reinterpret_cast<std::uintptr_t>(p) + n + page - 1) & ~(page - 1);
#ifdef MADV_POPULATE_WRITE
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE) == 0) return;
#endif
  // Older kernels: touch each page of the ring's data (nothing reads it yet).
  for (std::size_t off = kDataOffset; off < n; off += page) {
    *reinterpret_cast<volatile std::byte*>(p + off) = std::byte{0};
  }
  *reinterpret_cast<volatile std::byte*>(p + n - 1) = std::byte{0};
}

// The creator's pid and rank, and a random number drawn at its start: a name left by
// a crashed run (whose pid came round again) is never this run's.
std::string segment_name(const NodeMember& m) { return fmt::format("/brisk-rings-{}-{}-{:016x}", m.pid, m.rank, m.nonce); }

}  // namespace

std::unique_ptr<NodeRings> NodeRings::open(MPI_Comm comm, const NodeMembers& node, std::size_t ring_bytes,
                                           PeerCounts* in_flight, std::string* why) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  const int node_size = static_cast<int>(node.all.size());
  const int me = node.me;
  const std::vector<NodeMember>& all = node.all;

  std::unique_ptr<NodeRings> r(new NodeRings());
  std::size_t cap = ring_bytes;
  if (cap == 0) cap = std::clamp(kSegmentBudget / static_cast<std::size_t>(node_size), kMinRing, kMaxRing);
  cap = std::bit_floor(std::max<std::size_t>(cap, 4096));
  r->cap_ = cap;
  r->max_fragment_ = cap / 2 - sizeof(RecordHeader);
  r->me_ = me;
  r->in_flight_ = in_flight;
  r->local_of_.assign(static_cast<std::size_t>(size), -1);
  for (int i = 0; i < node_size; ++i) {
    r->node_ranks_.push_back(all[static_cast<std::size_t>(i)].rank);
    r->local_of_[static_cast<std::size_t>(all[static_cast<std::size_t>(i)].rank)] = i;
  }
  // A ring's stride keeps every ring's control words on cache lines of their own.
  const std::size_t stride = kDataOffset + cap;
  r->segment_bytes_ = stride * static_cast<std::size_t>(node_size);
  r->maps_.assign(static_cast<std::size_t>(node_size), nullptr);

  // This rank's receive segment.
  std::string error;
  const std::string name = segment_name(all[static_cast<std::size_t>(me)]);
  bool created = false;
  // Mapped in full now: a page first touched while messages flow costs a fault
  // (some 11 us on the VMs here), in the writer and the reader alike.
  void* mine = create_node_segment(name, r->segment_bytes_, true, created, error);
  r->maps_[static_cast<std::size_t>(me)] = mine;
  for (int i = 0; mine && i < node_size; ++i) {
    auto* ring = reinterpret_cast<Ring*>(static_cast<std::byte*>(mine) + stride * static_cast<std::size_t>(i));
    new (&ring->head) std::atomic<std::uint64_t>(0);
    new (&ring->tail) std::atomic<std::uint64_t>(0);
  }
  // The others' segments.
  if (all_ranks_ok(comm, error)) {
    for (int i = 0; i < node_size; ++i) {
      if (i == me) continue;
      const NodeMember& e = all[static_cast<std::size_t>(i)];
      void* p = map_node_segment(segment_name(e), r->segment_bytes_, e.rank, error);
      if (!p) break;
      r->maps_[static_cast<std::size_t>(i)] = p;
      // Of a peer's segment this rank writes only its own ring: that much is mapped now.
      prefault(static_cast<std::byte*>(p) + stride * static_cast<std::size_t>(me), stride);
    }
  }
  // Every rank has mapped what it could: the names go (the memory stays while mapped).
  MPI_Barrier(comm);
  if (created) ::shm_unlink(name.c_str());
  const bool all_ok = all_ranks_ok(comm, error);
  if (why) *why = error;
  if (!all_ok) return nullptr;  // the destructor unmaps what was mapped

  r->out_.resize(static_cast<std::size_t>(node_size));
  r->in_.resize(static_cast<std::size_t>(node_size));
  r->dead_ = std::vector<std::atomic<bool>>(static_cast<std::size_t>(node_size));
  for (int i = 0; i < node_size; ++i) {
    if (i == me) continue;
    // To local rank i: the ring for this sender in i's segment; from i: i's ring here.
    r->out_[static_cast<std::size_t>(i)] = std::make_unique<Out>();
    r->out_[static_cast<std::size_t>(i)]->ring = reinterpret_cast<Ring*>(
        static_cast<std::byte*>(r->maps_[static_cast<std::size_t>(i)]) + stride * static_cast<std::size_t>(me));
    r->in_[static_cast<std::size_t>(i)] = std::make_unique<In>();
    r->in_[static_cast<std::size_t>(i)]->ring = reinterpret_cast<Ring*>(
        static_cast<std::byte*>(r->maps_[static_cast<std::size_t>(me)]) + stride * static_cast<std::size_t>(i));
  }
  return r;
}

NodeRings::~NodeRings() {
  for (void* p : maps_) {
    if (p) ::munmap(p, segment_bytes_);
  }
}

bool NodeRings::reaches(int rank) const noexcept {
  if (rank < 0 || static_cast<std::size_t>(rank) >= local_of_.size()) return false;
  const int l = local_of_[static_cast<std::size_t>(rank)];
  return l >= 0 && l != me_;
}

bool NodeRings::write_fragment(Out& o, const std::byte* data, std::size_t length, bool last) {
  const std::size_t need = sizeof(RecordHeader) + padded(length);
  const std::size_t pos = o.head & (cap_ - 1);
  const std::size_t to_end = cap_ - pos;
  std::size_t skip = to_end < need ? to_end : 0;
  // Where the reader has caught up, start again at the ring's start: small messages
  // then keep to its first kHotBytes, which stay in cache, rather than walk through
  // all of it (p99 of a 1 KiB ping-pong: 5.6 us through 1 MiB, 1.0 us through 64 KiB).
  // Looked at once a page, so that a stream of sends rarely reads the reader's line.
  if (skip == 0 && pos >= kHotBytes && (pos & (kPage - 1)) < need) {
    o.cached_tail = o.ring->tail.load(std::memory_order_acquire);
    if (o.cached_tail == o.head && need <= pos) skip = to_end;
  }
  if (o.head + skip + need - o.cached_tail > cap_) {
    o.cached_tail = o.ring->tail.load(std::memory_order_acquire);
    if (o.head + skip + need - o.cached_tail > cap_) return false;
  }
  std::byte* base = o.ring->data;
  if (skip) {
    const RecordHeader wrap{0, kWrap};
    std::memcpy(base + pos, &wrap, sizeof wrap);
    o.head += skip;
  }
  std::byte* at = base + (o.head & (cap_ - 1));
  const RecordHeader h{static_cast<std::uint32_t>(length), last ? kLast : 0};
  std::memcpy(at, &h, sizeof h);
  if (length) std::memcpy(at + sizeof h, data, length);
  o.head += need;
  // The whole record is written before the reader can see it.
  o.ring->head.store(o.head, std::memory_order_release);
  return true;
}

int NodeRings::write_queued(int to, Out& o) {
  int done = 0;
  while (!o.queue.empty()) {
    auto& [bytes, off] = o.queue.front();
    while (off < bytes.size() || bytes.empty()) {
      const std::size_t n = std::min(bytes.size() - off, max_fragment_);
      if (!write_fragment(o, bytes.data() + off, n, off + n == bytes.size())) {
        o.queued.store(true, std::memory_order_release);
        return done;
      }
      off += n;
      if (bytes.empty()) break;
    }
    // All of it is in the ring: a large message's storage goes to the next message
    // of its size (Writer::reserve), instead of back to the system and faulted in
    // afresh by the next one.
    detail::serial::SpareVectors<std::byte>::instance().give(bytes);
    o.queue.pop_front();
    if (in_flight_) in_flight_->sub(to);
    ++done;
  }
  o.queued.store(false, std::memory_order_release);
  return done;
}

void NodeRings::send(int to, std::vector<std::byte> message) {
  const int l = local_of_[static_cast<std::size_t>(to)];
  Out& o = *out_[static_cast<std::size_t>(l)];
  if (in_flight_) in_flight_->add(to);
  std::lock_guard lock(o.mutex);
  if (dead_[static_cast<std::size_t>(l)].load(std::memory_order_acquire)) {
    if (in_flight_) in_flight_->sub(to);
    return;
  }
  o.queue.emplace_back(std::move(message), 0);
  write_queued(to, o);
}

int NodeRings::read(int from, In& in, const Deliver& deliver) {
  Ring& ring = *in.ring;
  std::uint64_t tail = ring.tail.load(std::memory_order_relaxed);
  const std::uint64_t head = ring.head.load(std::memory_order_acquire);
  int delivered = 0;
  while (tail != head) {
    const std::size_t pos = tail & (cap_ - 1);
    RecordHeader h;
    std::memcpy(&h, ring.data + pos, sizeof h);
    if (h.flags & kWrap) {
      tail += cap_ - pos;
      continue;
    }
    const std::byte* body = ring.data + pos + sizeof h;
    const std::size_t length = std::min<std::size_t>(h.length, max_fragment_);  // a writer bug cannot send us past the ring
    if (h.flags & kLast) {
      if (in.partial.empty()) {
        deliver(from, std::span<const std::byte>(body, length));  // read in place
      } else {
        in.partial.insert(in.partial.end(), body, body + length);
        deliver(from, in.partial);
        in.partial.clear();
      }
      ++delivered;
    } else {
      in.partial.insert(in.partial.end(), body, body + length);
    }
    tail += sizeof h + padded(length);
    // Each message's room goes back to the writer as soon as it is read.
    ring.tail.store(tail, std::memory_order_release);
    // A handler may have dropped the sender (disconnect): nothing more from it.
    if (dead_[static_cast<std::size_t>(local_of_[static_cast<std::size_t>(from)])].load(std::memory_order_acquire)) break;
  }
  return delivered;
}

int NodeRings::progress(const Deliver& deliver) {
  int events = 0;
  for (std::size_t l = 0; l < out_.size(); ++l) {
    Out* o = out_[l].get();
    if (!o || !o->queued.load(std::memory_order_acquire)) continue;
    std::unique_lock lock(o->mutex, std::try_to_lock);
    if (lock.owns_lock() && !dead_[l].load(std::memory_order_acquire)) events += write_queued(node_ranks_[l], *o);
  }
  for (std::size_t l = 0; l < in_.size(); ++l) {
    In* in = in_[l].get();
    if (!in || dead_[l].load(std::memory_order_acquire)) continue;
    if (in->ring->head.load(std::memory_order_relaxed) == in->ring->tail.load(std::memory_order_relaxed)) continue;
    std::unique_lock lock(in->mutex, std::try_to_lock);
    if (lock.owns_lock()) events += read(node_ranks_[l], *in, deliver);
  }
  return events;
}

int NodeRings::drain(std::span<const int> ranks, const Deliver& deliver) {
  int events = 0;
  for (int r : ranks) {
    if (!reaches(r)) continue;
    const auto l = static_cast<std::size_t>(local_of_[static_cast<std::size_t>(r)]);
    if (dead_[l].load(std::memory_order_acquire)) continue;
    std::lock_guard lock(in_[l]->mutex);
    events += read(r, *in_[l], deliver);
  }
  return events;
}

void NodeRings::drop(int rank) {
  if (!reaches(rank)) return;
  const auto l = static_cast<std::size_t>(local_of_[static_cast<std::size_t>(rank)]);
  Out& o = *out_[l];
  std::lock_guard lock(o.mutex);
  if (dead_[l].exchange(true, std::memory_order_acq_rel)) return;
  if (in_flight_) {
    for (std::size_t i = 0; i < o.queue.size(); ++i) in_flight_->sub(rank);
  }
  o.queue.clear();
  o.queued.store(false, std::memory_order_release);
}

}  // namespace brisk::detail
