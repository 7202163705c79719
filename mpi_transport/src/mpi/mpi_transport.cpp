#include "brisk/mpi_transport/mpi_transport.hpp"

#include "mpi/mpi_poll.hpp"
#include "shm/node_bells.hpp"
#include "peer_counts.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <string>

#include <algorithm>
#include <chrono>
#include <climits>
#include <atomic>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace brisk {
namespace {
constexpr int kMessageTag = 0x6272;
// MPI counts are ints: larger transfers go in pieces.
constexpr std::size_t kMaxPiece = std::size_t{1} << 30;
// How long one progress() call takes up incoming messages (the first always).
constexpr auto kReceiveBudget = std::chrono::milliseconds(1);

// One MPI_Testsome over `requests`; then, for each finished one (MPI_REQUEST_NULL
// now), done(i), and the others move down in order: moved(from, to) for what goes
// with each, resized(kept) at the end. `indices` is scratch. Returns how many finished.
template <class Done, class Moved, class Resized>
int test_some(std::vector<MPI_Request>& requests, std::vector<int>& indices, Done done, Moved moved,
              Resized resized) {
  if (requests.empty()) return 0;
  indices.resize(requests.size());
  int n = 0;
  MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &n, indices.data(), MPI_STATUSES_IGNORE);
  if (n <= 0 || n == MPI_UNDEFINED) return 0;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) {
      done(i);
      continue;
    }
    if (kept != i) {
      requests[kept] = requests[i];
      moved(i, kept);
    }
    ++kept;
  }
  requests.resize(kept);
  resized(kept);
  return n;
}

// Capacity for `extra` more elements, growing geometrically (reserve(size() + 1) on
// every call would reallocate on every call).
template <class T>
void make_room(std::vector<T>& v, std::size_t extra) {
  if (v.capacity() - v.size() < extra) v.reserve(std::max(v.size() + extra, 2 * v.capacity()));
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}
}  // namespace

struct MpiTransport::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Win win = MPI_WIN_NULL;
  int rank = 0;
  int size = 1;
  std::byte* base = nullptr;
  std::size_t window_bytes = 0;
  std::vector<std::uint64_t> bases;  // every rank's window base address

  MessageHandler on_message;
  FailureHandler on_failure;

  // Sends in flight: requests and their buffers, index for index. Moving a buffer
  // keeps its bytes where they are, which is all MPI holds on to.
  std::mutex send_mutex;
  std::vector<MPI_Request> send_requests;
  std::vector<std::vector<std::byte>> send_buffers;
  std::vector<int> send_peers;  // the rank each send goes to
  std::vector<int> send_done;   // MPI_Testsome's indices
  std::unique_ptr<detail::PeerCounts> in_flight;  // sends not finished, per rank

  // Gets in flight (one request per piece of up to kMaxPiece bytes), and their
  // requests flat, each with its get, for one MPI_Testsome as for sends.
  struct Get {
    std::size_t pending = 0;  // requests not finished yet (kStarting: not all made yet)
    Completion done;
  };
  static constexpr std::size_t kStarting = ~std::size_t{0};
  std::mutex get_mutex;
  std::list<Get> gets;  // stable addresses: get_owners points into it
  std::vector<MPI_Request> get_requests;
  std::vector<Get*> get_owners;
  std::size_t get_reserved = 0;  // room kept for the requests of gets being made
  std::vector<int> get_done;

  std::vector<std::byte> recv_buffer;
  std::string window_error;  // why there is no window (empty: there is one)
  std::unique_ptr<detail::NodeBells> bells;  // wakes sleeping ranks of this node (node_bells.hpp)
};

StatusOr<std::unique_ptr<MpiTransport>> MpiTransport::create(std::size_t window_bytes) {
  return create_window(window_bytes, nullptr);
}

StatusOr<std::unique_ptr<MpiTransport>> MpiTransport::create(std::span<std::byte> memory) {
  if (memory.empty()) return invalid_argument("MpiTransport::create: no memory for the window");
  return create_window(memory.size(), memory.data());
}

// `memory` null: MPI allocates the window.
StatusOr<std::unique_ptr<MpiTransport>> MpiTransport::create_window(std::size_t window_bytes, std::byte* memory) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) return failed_precondition("MpiTransport needs MPI_THREAD_MULTIPLE");
  auto impl = std::make_unique<Impl>();
  MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm);
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  impl->bells = detail::NodeBells::open(impl->comm, detail::find_node_members(impl->comm));
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "accumulate_ordering", "none");
  MPI_Info_set(info, "same_disp_unit", "true");
  void* base = memory;
  const char* call = memory ? "MPI_Win_create" : "MPI_Win_allocate";
  int rc = memory ? MPI_Win_create(memory, static_cast<MPI_Aint>(window_bytes), 1, info, impl->comm, &impl->win)
                  : MPI_Win_allocate(static_cast<MPI_Aint>(window_bytes), 1, info, impl->comm, &base, &impl->win);
  MPI_Info_free(&info);
  // A window may fail on some ranks only (no one-sided path between some of them,
  // e.g. TCP between nodes with Open MPI's osc/rdma): then no rank uses one, and the
  // transport carries messages only.
  int ok = rc == MPI_SUCCESS ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, impl->comm);
  if (!all_ok) {
    impl->window_error = rc == MPI_SUCCESS ? fmt::format("{} failed on another rank", call)
                                           : fmt::format("{} of {} bytes failed: {}", call, window_bytes, mpi_error(rc));
    if (rc == MPI_SUCCESS) MPI_Win_free(&impl->win);
    impl->win = MPI_WIN_NULL;
    impl->bases.assign(static_cast<std::size_t>(impl->size), 0);
    return std::unique_ptr<MpiTransport>(new MpiTransport(std::move(impl)));
  }
  MPI_Win_set_errhandler(impl->win, MPI_ERRORS_RETURN);
  impl->base = static_cast<std::byte*>(base);
  impl->window_bytes = window_bytes;
  impl->bases.resize(static_cast<std::size_t>(impl->size));
  std::uint64_t mine = reinterpret_cast<std::uintptr_t>(base);
  MPI_Allgather(&mine, 1, MPI_UINT64_T, impl->bases.data(), 1, MPI_UINT64_T, impl->comm);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, impl->win);
  return std::unique_ptr<MpiTransport>(new MpiTransport(std::move(impl)));
}

MpiTransport::MpiTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->in_flight = std::make_unique<detail::PeerCounts>(impl_->size);
}

MpiTransport::~MpiTransport() {
  // Finish what is in flight, then free the collective objects.
  for (;;) {
    progress();
    std::lock_guard a(impl_->send_mutex);
    std::lock_guard b(impl_->get_mutex);
    if (impl_->send_requests.empty() && impl_->gets.empty()) break;
  }
  // Taking up messages while waiting: another rank may still be finishing a send to
  // this one (above the eager limit it completes only once this rank receives it),
  // and would never come to the barrier.
  detail::barrier_polled(impl_->comm, [this] { return progress(); });
  if (impl_->win != MPI_WIN_NULL) {
    MPI_Win_unlock_all(impl_->win);
    MPI_Win_free(&impl_->win);
  }
  MPI_Comm_free(&impl_->comm);
}

Rank MpiTransport::rank() const noexcept { return Rank{impl_->rank}; }
int MpiTransport::size() const noexcept { return impl_->size; }
void MpiTransport::set_message_handler(MessageHandler h) { impl_->on_message = std::move(h); }
void MpiTransport::set_failure_handler(FailureHandler h) { impl_->on_failure = std::move(h); }
std::span<std::byte> MpiTransport::window() noexcept { return {impl_->base, impl_->window_bytes}; }

const std::string& MpiTransport::window_error() const noexcept { return impl_->window_error; }

std::size_t MpiTransport::sends_in_flight(Rank to) const noexcept { return impl_->in_flight->get(to.value); }

Status MpiTransport::send(Rank to, std::vector<std::byte> message) {
  if (to.value < 0 || to.value >= impl_->size)
    return invalid_argument(fmt::format("no rank {} in a job of {}", to.value, impl_->size));
  if (message.size() > static_cast<std::size_t>(INT_MAX))
    return invalid_argument(fmt::format("a message of {} bytes is larger than MPI can send at once", message.size()));
  {
    std::lock_guard lock(impl_->send_mutex);
    // Room first: once MPI_Isend has started, nothing may throw before the buffer is kept.
    make_room(impl_->send_requests, 1);
    make_room(impl_->send_buffers, 1);
    make_room(impl_->send_peers, 1);
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Isend(message.data(), static_cast<int>(message.size()), MPI_BYTE, to.value, kMessageTag,
                       impl_->comm, &request);
    if (rc != MPI_SUCCESS) return unavailable(fmt::format("MPI_Isend to rank {} failed: {}", to.value, mpi_error(rc)));
    impl_->send_requests.push_back(request);
    impl_->send_buffers.push_back(std::move(message));
    impl_->send_peers.push_back(to.value);
    impl_->in_flight->add(to.value);
  }
  // Over shared memory, MPI has put an eager message where the peer's next probe finds it.
  if (impl_->bells) impl_->bells->ring(to.value);
  return {};
}

std::atomic<std::uint32_t>* MpiTransport::wake_word() noexcept { return impl_->bells ? impl_->bells->mine() : nullptr; }

int MpiTransport::progress() {
  int events = 0;
  // Incoming messages, for up to kReceiveBudget per call. Draining them all at once
  // held the caller in one call for 0.1-0.3 s where every rank flooded rank 0 with
  // spilled tasks (4 ranks on 2 cores), and with it the rank's heartbeats and its
  // other duties; what is left waits for the next call.
  const auto started = std::chrono::steady_clock::now();
  for (;;) {
    if (events > 0 && std::chrono::steady_clock::now() - started > kReceiveBudget) break;
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, kMessageTag, impl_->comm, &flag, &msg, &status);
    if (!flag) break;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    impl_->recv_buffer.resize(static_cast<std::size_t>(count));
    MPI_Mrecv(impl_->recv_buffer.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    ++events;
    if (impl_->on_message) impl_->on_message(Rank{status.MPI_SOURCE}, impl_->recv_buffer);
  }
  // Finished sends: drop their buffers. One MPI_Testsome over all of them: an
  // MPI_Test per send would make one progress call (and, with
  // mpi_yield_when_idle, one sched_yield) per send still in flight, with the send
  // lock held, and a rank that had queued thousands kept its own heartbeat waiting
  // on that lock for seconds (4 ranks on 2 cores).
  {
    std::lock_guard lock(impl_->send_mutex);
    events += test_some(impl_->send_requests, impl_->send_done,
                        [&](std::size_t i) { impl_->in_flight->sub(impl_->send_peers[i]); },
                        [&](std::size_t from, std::size_t to) {
                          impl_->send_buffers[to] = std::move(impl_->send_buffers[from]);
                          impl_->send_peers[to] = impl_->send_peers[from];
                        },
                        [&](std::size_t kept) {
                          impl_->send_buffers.resize(kept);
                          impl_->send_peers.resize(kept);
                        });
  }
  // Finished gets.
  std::vector<Completion> finished;
  {
    std::lock_guard lock(impl_->get_mutex);
    test_some(impl_->get_requests, impl_->get_done, [&](std::size_t i) { --impl_->get_owners[i]->pending; },
              [&](std::size_t from, std::size_t to) { impl_->get_owners[to] = impl_->get_owners[from]; },
              [&](std::size_t kept) { impl_->get_owners.resize(kept); });
    for (auto it = impl_->gets.begin(); it != impl_->gets.end();) {
      if (it->pending == 0) {
        finished.push_back(std::move(it->done));
        it = impl_->gets.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& done : finished) {
    ++events;
    done(Status{});
  }
  return events;
}

namespace {
class WindowRegistration final : public MemoryRegistration {
 public:
  explicit WindowRegistration(RemoteRegion r) : region_(std::move(r)) {}
  const RemoteRegion& remote() const noexcept override { return region_; }

 private:
  RemoteRegion region_;
};
}  // namespace

StatusOr<std::unique_ptr<MemoryRegistration>> MpiTransport::register_memory(void* base, std::size_t length) {
  auto* p = static_cast<std::byte*>(base);
  if (p < impl_->base || p + length > impl_->base + impl_->window_bytes) {
    return failed_precondition(fmt::format(
        "the mpi transport can only expose memory inside its window ({} bytes at {}); {} bytes at {} is outside it",
        impl_->window_bytes, static_cast<void*>(impl_->base), length, base));
  }
  RemoteRegion r;
  r.owner = Rank{impl_->rank};
  r.address = reinterpret_cast<std::uintptr_t>(base);
  r.length = length;
  return std::unique_ptr<MemoryRegistration>(new WindowRegistration(std::move(r)));
}

Status MpiTransport::get(const RemoteRegion& remote, std::uint64_t offset, void* dst, std::size_t length,
                         Completion done) {
  const int owner = remote.owner.value;
  if (impl_->win == MPI_WIN_NULL) return unavailable("no MPI window: " + impl_->window_error);
  if (owner < 0 || owner >= impl_->size) return invalid_argument(fmt::format("no rank {} in a job of {}", owner, impl_->size));
  if (offset + length > remote.length) return invalid_argument("get outside the registered region");
  std::uint64_t disp = remote.address + offset - impl_->bases[static_cast<std::size_t>(owner)];
  // Room first, under the lock: once the reads have started, nothing may throw
  // before they are kept. The reads themselves are made outside it (over shared
  // memory the copy happens inside MPI_Rget, and progress() must not wait for it);
  // meanwhile the get waits with no request counted and is not finished.
  const std::size_t pieces = (length + kMaxPiece - 1) / kMaxPiece;
  std::vector<MPI_Request> requests;
  requests.reserve(pieces);
  Impl::Get* g = nullptr;
  {
    std::lock_guard lock(impl_->get_mutex);
    make_room(impl_->get_requests, impl_->get_reserved + pieces);
    make_room(impl_->get_owners, impl_->get_reserved + pieces);
    g = &impl_->gets.emplace_back();
    impl_->get_reserved += pieces;
    g->pending = Impl::kStarting;
    g->done = std::move(done);
  }
  auto* out = static_cast<std::byte*>(dst);
  for (std::size_t piece = 0; piece < length; piece += kMaxPiece) {
    int n = static_cast<int>(std::min(kMaxPiece, length - piece));
    MPI_Request req;
    int rc = MPI_Rget(out + piece, n, MPI_BYTE, owner, static_cast<MPI_Aint>(disp + piece), n, MPI_BYTE, impl_->win, &req);
    if (rc != MPI_SUCCESS) {
      if (!requests.empty()) MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
      std::lock_guard lock(impl_->get_mutex);
      impl_->get_reserved -= pieces;
      for (auto it = impl_->gets.begin(); it != impl_->gets.end(); ++it) {
        if (&*it == g) {
          impl_->gets.erase(it);
          break;
        }
      }
      return unavailable(fmt::format("MPI_Rget from rank {} failed: {}", owner, mpi_error(rc)));
    }
    requests.push_back(req);
  }
  std::lock_guard lock(impl_->get_mutex);
  impl_->get_reserved -= pieces;
  g->pending = requests.size();  // zero bytes: none, done at the next progress
  for (MPI_Request r : requests) {
    impl_->get_requests.push_back(r);
    impl_->get_owners.push_back(g);
  }
  return {};
}

void MpiTransport::barrier() { detail::barrier_polled(impl_->comm); }

}  // namespace brisk
