#include "brisk/mpi_transport/ucx_transport.hpp"

#include "mpi/mpi_poll.hpp"
#include "shm/node_peers.hpp"
#include "shm/node_bells.hpp"
#include "shm/node_rings.hpp"
#include "peer_counts.hpp"
#include "brisk/core/serialize.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace brisk {
namespace {
constexpr unsigned kAmId = 7;

std::string ucs_text(ucs_status_t s) { return ucs_status_string(s); }

}  // namespace

struct UcxTransport::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  std::unique_ptr<detail::PeerCounts> in_flight;  // sends not completed, per rank
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<ucp_ep_h> eps;

  MessageHandler on_message;
  FailureHandler on_failure;

  // Incoming messages, in arrival order per sender; delivered when complete.
  struct Incoming {
    int from = 0;
    std::vector<std::byte> bytes;
    bool ready = false;
    ucs_status_t status = UCS_OK;
  };
  std::mutex in_mutex;
  std::vector<std::deque<std::unique_ptr<Incoming>>> inbox;  // per sender
  // Rendezvous messages whose data is still at the sender: (descriptor, entry).
  std::vector<std::pair<void*, Incoming*>> rndv;

  struct Done {
    Completion done;
    Status status;
  };
  std::mutex done_mutex;
  std::vector<Done> completed;          // finished gets, run in progress()
  // Peers found dead: (rank, whether its process was seen to exit on this node, as
  // against reported by UCX's error handler).
  std::vector<std::pair<int, bool>> newly_dead;

  std::mutex dead_mutex;
  std::vector<bool> dead;
  // Sends and gets hold it shared while they use an endpoint; disconnect() holds it
  // exclusively while it closes one.
  std::shared_mutex ep_mutex;
  std::vector<bool> closed;                 // endpoints closed by disconnect()
  std::vector<ucs_status_ptr_t> closing;    // their close requests, freed at the end

  // Unpacked remote keys, by owner and packed key. A key per registered object
  // (Cluster::Config::expose_bytes) would grow it without end where keys differ per
  // registration (InfiniBand): past kMaxRkeys, the keys no get is using are
  // destroyed.
  struct CachedKey {
    ucp_rkey_h rkey = nullptr;
    int gets = 0;  // in flight
  };
  static constexpr std::size_t kMaxRkeys = 256;
  std::mutex rkey_mutex;
  std::map<std::pair<int, std::vector<std::byte>>, CachedKey> rkeys;
  void get_ended(CachedKey* key) {
    std::lock_guard lock(rkey_mutex);
    --key->gets;
  }

  std::mutex ep_lookup_mutex;
  std::map<ucp_ep_h, int> ep_rank;

  // The ranks on this node, watched for their exit (shared memory does not report it).
  std::mutex watch_mutex;
  detail::NodePeerWatch node_watch;
  // Messages to the ranks on this node, where they are watched (see node_rings.hpp).
  std::unique_ptr<detail::NodeRings> rings;
  // Wakes sleeping ranks of this node once a ring holds a message for them (node_bells.hpp).
  std::unique_ptr<detail::NodeBells> bells;

  void deliver(int from, std::span<const std::byte> bytes) {
    if (on_message) on_message(Rank{from}, bytes);
  }

  bool is_dead(int r) {
    std::lock_guard lock(dead_mutex);
    return dead[static_cast<std::size_t>(r)];
  }
  // Marks `r` dead and queues its report for progress(); once per rank.
  void mark_dead(int r, bool exited) {
    {
      std::lock_guard lock(dead_mutex);
      if (dead[static_cast<std::size_t>(r)]) return;
      dead[static_cast<std::size_t>(r)] = true;
    }
    std::lock_guard lock(done_mutex);
    newly_dead.emplace_back(r, exited);
  }
};

namespace {

struct SendState {
  std::vector<std::byte> bytes;
  std::int32_t header = 0;
  std::atomic<std::uint32_t>* in_flight = nullptr;  // the peer's count of sends in flight
  // A large message's storage goes to the next message of its size (Writer::reserve).
  ~SendState() { detail::serial::SpareVectors<std::byte>::instance().give(bytes); }
};

void send_done(void* request, ucs_status_t, void* user_data) {
  auto* s = static_cast<SendState*>(user_data);
  s->in_flight->fetch_sub(1, std::memory_order_relaxed);
  delete s;
  ucp_request_free(request);
}

struct GetState {
  UcxTransport::Impl* impl;
  Transport::Completion done;
  UcxTransport::Impl::CachedKey* key;
};

void get_done(void* request, ucs_status_t status, void* user_data) {
  auto* g = static_cast<GetState*>(user_data);
  g->impl->get_ended(g->key);
  {
    std::lock_guard lock(g->impl->done_mutex);
    g->impl->completed.push_back({std::move(g->done),
                                  status == UCS_OK ? Status{} : unavailable("ucp_get_nbx failed: " + ucs_text(status))});
  }
  delete g;
  ucp_request_free(request);
}

struct RecvState {
  UcxTransport::Impl* impl;
  UcxTransport::Impl::Incoming* entry;
};

void rndv_done(void* request, ucs_status_t status, std::size_t, void* user_data) {
  auto* r = static_cast<RecvState*>(user_data);
  {
    std::lock_guard lock(r->impl->in_mutex);
    r->entry->status = status;
    r->entry->ready = true;
  }
  delete r;
  ucp_request_free(request);
}

ucs_status_t am_received(void* arg, const void* header, std::size_t header_length, void* data, std::size_t length,
                         const ucp_am_recv_param_t* param) {
  auto* impl = static_cast<UcxTransport::Impl*>(arg);
  std::int32_t from = -1;
  if (header_length == sizeof from) std::memcpy(&from, header, sizeof from);
  if (from < 0 || from >= impl->size) return UCS_OK;  // malformed: dropped
  auto entry = std::make_unique<UcxTransport::Impl::Incoming>();
  entry->from = from;
  entry->bytes.resize(length);
  auto* raw = entry.get();
  {
    std::lock_guard lock(impl->in_mutex);
    impl->inbox[static_cast<std::size_t>(from)].push_back(std::move(entry));
  }
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    // Keep the descriptor; progress() starts the receive outside the callback.
    std::lock_guard lock(impl->in_mutex);
    impl->rndv.push_back({data, raw});
    return UCS_INPROGRESS;
  }
  if (length) std::memcpy(raw->bytes.data(), data, length);
  std::lock_guard lock(impl->in_mutex);
  raw->ready = true;
  return UCS_OK;
}

void ep_failed(void* arg, ucp_ep_h ep, ucs_status_t) {
  auto* impl = static_cast<UcxTransport::Impl*>(arg);
  int r = -1;
  {
    std::lock_guard lock(impl->ep_lookup_mutex);
    auto it = impl->ep_rank.find(ep);
    if (it != impl->ep_rank.end()) r = it->second;
  }
  if (r >= 0) impl->mark_dead(r, false);
}

class UcxRegistration final : public MemoryRegistration {
 public:
  UcxRegistration(ucp_context_h ctx, ucp_mem_h memh, RemoteRegion region)
      : ctx_(ctx), memh_(memh), region_(std::move(region)) {}
  ~UcxRegistration() override { ucp_mem_unmap(ctx_, memh_); }
  const RemoteRegion& remote() const noexcept override { return region_; }

 private:
  ucp_context_h ctx_;
  ucp_mem_h memh_;
  RemoteRegion region_;
};

// Endpoints in peer error mode use only transports that can report a dead peer.
// UCX's shared-memory transports do so only when told to (UCX_POSIX_ERROR_HANDLING,
// UCX_SYSV_ERROR_HANDLING), and even then a SIGKILLed peer went unnoticed for 20 s
// and more in every trial here; left off, the node's traffic goes over TCP loopback
// at 10-25x the latency (docs/BENCHMARKS.md). So where every rank can watch its
// node's peers for their exit itself (pidfds, NodePeerWatch), shared memory is
// switched on and progress() reports a local peer's death; elsewhere (no
// pidfd_open, ranks in different pid namespaces) the node's traffic stays on TCP.
// UCX_POSIX_ERROR_HANDLING=n UCX_SYSV_ERROR_HANDLING=n keeps it on TCP anyway.
detail::NodePeerWatch watch_node_for_shared_memory(MPI_Comm comm, const detail::NodeMembers& node) {
  detail::NodePeerWatch watch = detail::NodePeerWatch::open(comm, node);
  if (watch.watching()) {
    setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
    setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
  }
  return watch;
}

// Whether the environment turns a UCX boolean off (UCX reads n, no, off, 0).
bool ucx_env_off(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "n" || s == "no" || s == "off" || s == "0";
}
}  // namespace

bool UcxTransport::use_node_shared_memory(MPI_Comm comm) {
  return watch_node_for_shared_memory(comm, detail::find_node_members(comm)).watching();
}

StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::create() {
  auto impl = std::make_unique<Impl>();
  MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm);
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  impl->inbox.resize(static_cast<std::size_t>(impl->size));
  impl->dead.assign(static_cast<std::size_t>(impl->size), false);
  impl->closed.assign(static_cast<std::size_t>(impl->size), false);

  // UCX notices a dead peer on a failed operation or through keepalive, every 20 s
  // by default: far too slow to run through a failure. UCX reads this from the
  // environment, so it is set there, before ucp_init; the user's value wins.
  //
  // Ranks on this node talk over shared memory where they can be watched for their
  // exit (use_node_shared_memory).
  const detail::NodeMembers node = detail::find_node_members(impl->comm);
  impl->node_watch = watch_node_for_shared_memory(impl->comm, node);
  // Kept off shared memory by the user: the node's traffic goes over TCP, where UCX
  // reports dead peers itself, and two reports would race.
  if (ucx_env_off("UCX_POSIX_ERROR_HANDLING") && ucx_env_off("UCX_SYSV_ERROR_HANDLING")) {
    impl->node_watch = detail::NodePeerWatch();
  }
  impl->in_flight = std::make_unique<detail::PeerCounts>(impl->size);
  // Messages within the node go through rings of brisk's own, one per pair of ranks:
  // in UCX's shared memory, one rank stopped in the middle of a send would leave its
  // node's other ranks deaf to each other (node_rings.hpp). BRISK_NODE_RING_BYTES sets
  // each ring's size; 0 leaves the node's messages to UCX.
  std::size_t ring_bytes = 0;
  bool rings_wanted = impl->node_watch.watching();
  if (const char* v = std::getenv("BRISK_NODE_RING_BYTES"); v && *v) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (*v == '-' || *end != '\0' || errno != 0 || (n != 0 && n < 4096) || n > (1ull << 30)) {
      return invalid_argument(fmt::format("BRISK_NODE_RING_BYTES={}: expected 0 (off) or a size in bytes from 4096 to 2^30", v));
    }
    ring_bytes = static_cast<std::size_t>(n);
    rings_wanted = rings_wanted && n != 0;
  }
  // Every rank takes part in the rings or none does (the environment may differ).
  {
    unsigned long long want = rings_wanted ? ring_bytes : ~0ull, low = 0, high = 0;
    MPI_Allreduce(&want, &low, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, impl->comm);
    MPI_Allreduce(&want, &high, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, impl->comm);
    if (low != high && impl->rank == 0) {
      std::fprintf(stderr, "brisk: ranks differ in BRISK_NODE_RING_BYTES or in watching their node: UCX carries the "
                           "node's messages\n");
    }
    rings_wanted = rings_wanted && low == high;
  }
  if (rings_wanted) {
    std::string why;
    impl->rings = detail::NodeRings::open(impl->comm, node, ring_bytes, impl->in_flight.get(), &why);
    if (!impl->rings && !why.empty()) {
      std::fprintf(stderr, "brisk: rank %d: no shared-memory rings within the node (%s); UCX carries its messages\n",
                   impl->rank, why.c_str());
    }
  }
  // Collective, so every rank decides alike: rings on every rank or on none.
  if (impl->rings) impl->bells = detail::NodeBells::open(impl->comm, node);
  setenv("UCX_KEEPALIVE_INTERVAL", "250ms", 0);
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return unavailable("ucp_config_read: " + ucs_text(st));
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA;
  params.mt_workers_shared = 1;
  st = ucp_init(&params, config, &impl->context);
  ucp_config_release(config);
  if (st != UCS_OK) return unavailable("ucp_init: " + ucs_text(st));

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  st = ucp_worker_create(impl->context, &wp, &impl->worker);
  if (st != UCS_OK) return unavailable("ucp_worker_create: " + ucs_text(st));

  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kAmId;
  hp.cb = am_received;
  hp.arg = impl.get();
  st = ucp_worker_set_am_recv_handler(impl->worker, &hp);
  if (st != UCS_OK) return unavailable("ucp_worker_set_am_recv_handler: " + ucs_text(st));

  // Exchange worker addresses over MPI.
  ucp_address_t* addr = nullptr;
  std::size_t addr_len = 0;
  st = ucp_worker_get_address(impl->worker, &addr, &addr_len);
  if (st != UCS_OK) return unavailable("ucp_worker_get_address: " + ucs_text(st));
  int my_len = static_cast<int>(addr_len);
  std::vector<int> lens(static_cast<std::size_t>(impl->size)), displs(static_cast<std::size_t>(impl->size));
  MPI_Allgather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, impl->comm);
  int total = 0;
  for (int r = 0; r < impl->size; ++r) {
    displs[static_cast<std::size_t>(r)] = total;
    total += lens[static_cast<std::size_t>(r)];
  }
  std::vector<char> all(static_cast<std::size_t>(total));
  MPI_Allgatherv(addr, my_len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE, impl->comm);
  ucp_worker_release_address(impl->worker, addr);

  impl->eps.resize(static_cast<std::size_t>(impl->size));
  for (int r = 0; r < impl->size; ++r) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(all.data() + displs[static_cast<std::size_t>(r)]);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = ep_failed;
    ep.err_handler.arg = impl.get();
    st = ucp_ep_create(impl->worker, &ep, &impl->eps[static_cast<std::size_t>(r)]);
    if (st != UCS_OK) return unavailable(fmt::format("ucp_ep_create to rank {}: {}", r, ucs_text(st)));
    impl->ep_rank[impl->eps[static_cast<std::size_t>(r)]] = r;
  }
  detail::barrier_polled(impl->comm);
  return std::unique_ptr<UcxTransport>(new UcxTransport(std::move(impl)));
}

UcxTransport::UcxTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::size_t UcxTransport::sends_in_flight(Rank to) const noexcept { return impl_->in_flight->get(to.value); }

UcxTransport::~UcxTransport() {
  // Let in-flight traffic drain on every rank before endpoints go away.
  for (int i = 0; i < 1000; ++i) progress();
  barrier();
  for (int i = 0; i < 1000; ++i) progress();
  {
    std::lock_guard lock(impl_->rkey_mutex);
    for (auto& [k, cached] : impl_->rkeys) ucp_rkey_destroy(cached.rkey);
    impl_->rkeys.clear();
  }
  std::vector<ucs_status_ptr_t> closing = std::move(impl_->closing);
  for (int r = 0; r < impl_->size; ++r) {
    if (impl_->closed[static_cast<std::size_t>(r)]) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = impl_->is_dead(r) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(impl_->eps[static_cast<std::size_t>(r)], &p);
    if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
  }
  for (ucs_status_ptr_t req : closing) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(impl_->worker);
    ucp_request_free(req);
  }
  barrier();
  impl_->rings.reset();
  ucp_worker_destroy(impl_->worker);
  ucp_cleanup(impl_->context);
  MPI_Comm_free(&impl_->comm);
}

Rank UcxTransport::rank() const noexcept { return Rank{impl_->rank}; }
int UcxTransport::size() const noexcept { return impl_->size; }
void UcxTransport::set_message_handler(MessageHandler h) { impl_->on_message = std::move(h); }
void UcxTransport::set_failure_handler(FailureHandler h) { impl_->on_failure = std::move(h); }

void UcxTransport::disconnect(Rank peer) {
  const int r = peer.value;
  if (r < 0 || r >= impl_->size || r == impl_->rank) return;
  std::unique_lock ep_lock(impl_->ep_mutex);
  if (impl_->closed[static_cast<std::size_t>(r)]) return;
  {
    std::lock_guard lock(impl_->dead_mutex);
    impl_->dead[static_cast<std::size_t>(r)] = true;
  }
  impl_->closed[static_cast<std::size_t>(r)] = true;
  if (impl_->rings) impl_->rings->drop(r);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t req = ucp_ep_close_nbx(impl_->eps[static_cast<std::size_t>(r)], &p);
  if (UCS_PTR_IS_PTR(req)) impl_->closing.push_back(req);
}
void UcxTransport::barrier() {
  // Keeps UCX moving while it waits: a rendezvous sender must progress for its
  // receiver to get the data.
  detail::barrier_polled(impl_->comm, [this] { return progress(); });
}

Status UcxTransport::send(Rank to, std::vector<std::byte> message) {
  if (to.value < 0 || to.value >= impl_->size)
    return invalid_argument(fmt::format("no rank {} in a job of {}", to.value, impl_->size));
  std::shared_lock ep_lock(impl_->ep_mutex);
  if (impl_->is_dead(to.value)) return unavailable(fmt::format("rank {} is dead", to.value));
  if (impl_->rings && impl_->rings->reaches(to.value)) {
    impl_->rings->send(to.value, std::move(message));
    if (impl_->bells) impl_->bells->ring(to.value);
    return {};
  }
  auto* s = new SendState{std::move(message), impl_->rank, &impl_->in_flight->of(to.value)};
  s->in_flight->fetch_add(1, std::memory_order_relaxed);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = send_done;
  p.user_data = s;
  ucs_status_ptr_t req = ucp_am_send_nbx(impl_->eps[static_cast<std::size_t>(to.value)], kAmId, &s->header,
                                         sizeof s->header, s->bytes.data(), s->bytes.size(), &p);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) s->in_flight->fetch_sub(1, std::memory_order_relaxed);
  if (req == nullptr) {
    delete s;
    return {};
  }
  if (UCS_PTR_IS_ERR(req)) {
    delete s;
    return unavailable(fmt::format("ucp_am_send_nbx to rank {}: {}", to.value, ucs_text(UCS_PTR_STATUS(req))));
  }
  return {};  // send_done frees the state and the request
}

namespace {
// Progresses `worker` while it reports work, for at most 1 ms: over TCP a large get
// keeps the worker busy until its last byte (256 MiB into fresh pages took 2.7 s in
// one loop here), and the caller's other duties (heartbeats) must not wait for it.
int progress_for_a_while(ucp_worker_h worker) {
  int events = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  while (ucp_worker_progress(worker) != 0) {
    if ((++events & 15) == 0 && std::chrono::steady_clock::now() >= until) break;
  }
  return events;
}
}  // namespace

std::atomic<std::uint32_t>* UcxTransport::wake_word() noexcept { return impl_->bells ? impl_->bells->mine() : nullptr; }

int UcxTransport::progress() {
  int events = progress_for_a_while(impl_->worker);
  const auto deliver = [this](int from, std::span<const std::byte> bytes) { impl_->deliver(from, bytes); };
  if (impl_->rings) events += impl_->rings->progress(deliver);
  if (impl_->watch_mutex.try_lock()) {
    for (int r : impl_->node_watch.exited(std::chrono::steady_clock::now())) impl_->mark_dead(r, true);
    impl_->watch_mutex.unlock();
  }
  std::vector<std::pair<void*, Impl::Incoming*>> rndv;
  {
    std::lock_guard lock(impl_->in_mutex);
    rndv.swap(impl_->rndv);
  }
  for (auto [desc, entry] : rndv) {
    ++events;
    auto* rs = new RecvState{impl_.get(), entry};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = rndv_done;
    p.user_data = rs;
    ucs_status_ptr_t req = ucp_am_recv_data_nbx(impl_->worker, desc, entry->bytes.data(), entry->bytes.size(), &p);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) {
      std::lock_guard lock(impl_->in_mutex);
      entry->status = req == nullptr ? UCS_OK : UCS_PTR_STATUS(req);
      entry->ready = true;
      delete rs;
    }
  }
  if (!rndv.empty()) events += progress_for_a_while(impl_->worker);
  // Messages, in order per sender, as soon as the front one is complete.
  std::vector<std::unique_ptr<Impl::Incoming>> ready;
  {
    std::lock_guard lock(impl_->in_mutex);
    for (auto& q : impl_->inbox) {
      while (!q.empty() && q.front()->ready) {
        ready.push_back(std::move(q.front()));
        q.pop_front();
      }
    }
  }
  for (auto& m : ready) {
    ++events;
    if (m->status == UCS_OK) impl_->deliver(m->from, m->bytes);
  }
  std::vector<Impl::Done> done;
  std::vector<std::pair<int, bool>> dead;
  {
    std::lock_guard lock(impl_->done_mutex);
    done.swap(impl_->completed);
    // Failures wait for a handler: none is lost to an early progress() call.
    if (impl_->on_failure) dead.swap(impl_->newly_dead);
  }
  for (auto& d : done) {
    ++events;
    d.done(d.status);
  }
  for (auto [r, exited] : dead) {
    ++events;
    if (impl_->rings) {
      // What it wrote to this rank before it died comes before the news (read here,
      // outside UCX's callbacks: UCX may be the first to tell of a local peer's death).
      const int one[] = {r};
      events += impl_->rings->drain(one, deliver);
      impl_->rings->drop(r);
    }
    impl_->on_failure(Rank{r}, unavailable(exited ? fmt::format("rank {}'s process exited (seen from its node)", r)
                                                  : fmt::format("UCX reports rank {} unreachable", r)));
  }
  return events;
}

StatusOr<std::unique_ptr<MemoryRegistration>> UcxTransport::register_memory(void* base, std::size_t length) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = base;
  mp.length = length;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(impl_->context, &mp, &memh);
  if (st != UCS_OK) return unavailable("ucp_mem_map: " + ucs_text(st));
  void* packed = nullptr;
  std::size_t packed_len = 0;
  st = ucp_rkey_pack(impl_->context, memh, &packed, &packed_len);
  if (st != UCS_OK) {
    ucp_mem_unmap(impl_->context, memh);
    return unavailable("ucp_rkey_pack: " + ucs_text(st));
  }
  RemoteRegion r;
  r.owner = Rank{impl_->rank};
  r.address = reinterpret_cast<std::uintptr_t>(base);
  r.length = length;
  r.key.assign(static_cast<std::byte*>(packed), static_cast<std::byte*>(packed) + packed_len);
  ucp_rkey_buffer_release(packed);
  return std::unique_ptr<MemoryRegistration>(new UcxRegistration(impl_->context, memh, std::move(r)));
}

Status UcxTransport::get(const RemoteRegion& remote, std::uint64_t offset, void* dst, std::size_t length,
                         Completion done) {
  const int owner = remote.owner.value;
  if (owner < 0 || owner >= impl_->size) return invalid_argument(fmt::format("no rank {} in a job of {}", owner, impl_->size));
  if (offset + length > remote.length) return invalid_argument("get outside the registered region");
  std::shared_lock ep_lock(impl_->ep_mutex);
  if (impl_->is_dead(owner)) return unavailable(fmt::format("rank {} is dead", owner));
  ucp_ep_h ep = impl_->eps[static_cast<std::size_t>(owner)];
  Impl::CachedKey* cached = nullptr;
  {
    std::lock_guard lock(impl_->rkey_mutex);
    auto key = std::make_pair(owner, remote.key);
    auto it = impl_->rkeys.find(key);
    if (it == impl_->rkeys.end()) {
      if (impl_->rkeys.size() >= Impl::kMaxRkeys) {
        for (auto e = impl_->rkeys.begin(); e != impl_->rkeys.end();) {
          if (e->second.gets == 0) {
            ucp_rkey_destroy(e->second.rkey);
            e = impl_->rkeys.erase(e);
          } else {
            ++e;
          }
        }
      }
      ucp_rkey_h rkey = nullptr;
      ucs_status_t st = ucp_ep_rkey_unpack(ep, remote.key.data(), &rkey);
      if (st != UCS_OK) return invalid_argument("ucp_ep_rkey_unpack: " + ucs_text(st));
      it = impl_->rkeys.emplace(std::move(key), Impl::CachedKey{rkey, 0}).first;
    }
    cached = &it->second;
    ++cached->gets;
  }
  const ucp_rkey_h rkey = cached->rkey;  // kept while `gets` counts this one
  auto* g = new GetState{impl_.get(), std::move(done), cached};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = get_done;
  p.user_data = g;
  ucs_status_ptr_t req = ucp_get_nbx(ep, dst, length, remote.address + offset, rkey, &p);
  if (req == nullptr) {
    impl_->get_ended(cached);
    std::lock_guard lock(impl_->done_mutex);
    impl_->completed.push_back({std::move(g->done), Status{}});
    delete g;
    return {};
  }
  if (UCS_PTR_IS_ERR(req)) {
    impl_->get_ended(cached);
    delete g;
    return unavailable(fmt::format("ucp_get_nbx from rank {}: {}", owner, ucs_text(UCS_PTR_STATUS(req))));
  }
  return {};
}

}  // namespace brisk
