#include "brisk/mpi_transport/mpi_transport.hpp"

#include "mpi_poll.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <string>

#include <chrono>
#include <climits>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace brisk {
namespace {
constexpr int kMessageTag = 0x6272;
// MPI counts are ints: larger transfers go in pieces.
constexpr std::size_t kMaxPiece = std::size_t{1} << 30;

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

  struct Send {
    MPI_Request request;
    std::vector<std::byte> bytes;
  };
  std::mutex send_mutex;
  std::deque<Send> sends;  // stable addresses for in-flight buffers

  struct Get {
    std::vector<MPI_Request> requests;
    Completion done;
  };
  std::mutex get_mutex;
  std::vector<Get> gets;

  std::vector<std::byte> recv_buffer;
  std::string window_error;  // why there is no window (empty: there is one)
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

MpiTransport::MpiTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MpiTransport::~MpiTransport() {
  // Finish what is in flight, then free the collective objects.
  for (;;) {
    progress();
    std::lock_guard a(impl_->send_mutex);
    std::lock_guard b(impl_->get_mutex);
    if (impl_->sends.empty() && impl_->gets.empty()) break;
  }
  barrier();
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

Status MpiTransport::send(Rank to, std::vector<std::byte> message) {
  if (to.value < 0 || to.value >= impl_->size)
    return invalid_argument(fmt::format("no rank {} in a job of {}", to.value, impl_->size));
  if (message.size() > static_cast<std::size_t>(INT_MAX))
    return invalid_argument(fmt::format("a message of {} bytes is larger than MPI can send at once", message.size()));
  std::lock_guard lock(impl_->send_mutex);
  impl_->sends.push_back({MPI_REQUEST_NULL, std::move(message)});
  auto& s = impl_->sends.back();
  int rc = MPI_Isend(s.bytes.data(), static_cast<int>(s.bytes.size()), MPI_BYTE, to.value, kMessageTag,
                     impl_->comm, &s.request);
  if (rc != MPI_SUCCESS) {
    impl_->sends.pop_back();
    return unavailable(fmt::format("MPI_Isend to rank {} failed: {}", to.value, mpi_error(rc)));
  }
  return {};
}

int MpiTransport::progress() {
  int events = 0;
  // Incoming messages.
  for (;;) {
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
  // Finished sends: drop their buffers (in order; the front is the oldest).
  {
    std::lock_guard lock(impl_->send_mutex);
    for (auto it = impl_->sends.begin(); it != impl_->sends.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      if (done) {
        it = impl_->sends.erase(it);
        ++events;
      } else {
        ++it;
      }
    }
  }
  // Finished gets.
  std::vector<Impl::Get> finished;
  {
    std::lock_guard lock(impl_->get_mutex);
    for (auto it = impl_->gets.begin(); it != impl_->gets.end();) {
      int done = 0;
      MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done, MPI_STATUSES_IGNORE);
      if (done) {
        finished.push_back(std::move(*it));
        it = impl_->gets.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& g : finished) {
    ++events;
    g.done(Status{});
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
  Impl::Get g;
  g.done = std::move(done);
  auto* out = static_cast<std::byte*>(dst);
  for (std::size_t piece = 0; piece < length; piece += kMaxPiece) {
    int n = static_cast<int>(std::min(kMaxPiece, length - piece));
    MPI_Request req;
    int rc = MPI_Rget(out + piece, n, MPI_BYTE, owner, static_cast<MPI_Aint>(disp + piece), n, MPI_BYTE, impl_->win, &req);
    if (rc != MPI_SUCCESS) {
      if (!g.requests.empty()) MPI_Waitall(static_cast<int>(g.requests.size()), g.requests.data(), MPI_STATUSES_IGNORE);
      return unavailable(fmt::format("MPI_Rget from rank {} failed: {}", owner, mpi_error(rc)));
    }
    g.requests.push_back(req);
  }
  if (g.requests.empty()) {  // zero bytes
    std::lock_guard lock(impl_->get_mutex);
    impl_->gets.push_back(std::move(g));
    return {};
  }
  std::lock_guard lock(impl_->get_mutex);
  impl_->gets.push_back(std::move(g));
  return {};
}

void MpiTransport::barrier() { detail::barrier_polled(impl_->comm); }

}  // namespace brisk
