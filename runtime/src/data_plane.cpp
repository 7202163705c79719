#include "brisk/runtime/data_plane.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <cstring>
#include <thread>

#include "brisk/checkpoint/reader.hpp"
#include "brisk/runtime/cluster.hpp"
#include "brisk/runtime/wire.hpp"

namespace brisk {

namespace {

using wire::DataHeader;
using wire::kDataHeaderBytes;
using wire::kEpochStarted;
using wire::kStartEpoch;

std::array<std::byte, kDataHeaderBytes> encode_header(const DataHeader& h) {
  std::array<std::byte, kDataHeaderBytes> out;
  wire::encode_data_header(h, out.data());
  return out;
}
// Room at the front of each worker's message: the frame's header, then the data
// header, both written there before it is sent (RuntimeDataPlane::send_framed).
constexpr std::size_t kWorkerHeadroom = kFrameHeaderBytes + kDataHeaderBytes;

}  // namespace

RuntimeDataPlane::RuntimeDataPlane(int rank, int size, detail::Executor& local, Cluster* cluster, EventLog* events,
                                   bool templates)
    : rank_(rank),
      size_(size),
      local_(local),
      cluster_(cluster),
      events_(events),
      templates_(templates),
      acked_(static_cast<std::size_t>(size), 0) {
  std::vector<int> hosts(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) hosts[static_cast<std::size_t>(r)] = r;
  start_epoch(1, hosts);
  // A worker that handles a reply for the driver may wake it later (when it runs out
  // of tasks), where the driver shares its core (LocalScheduler::set_defer_wakes).
  // Epochs are kept while the plane lives; a rollback wakes the old controller's
  // waiter itself (abort).
  if (rank_ == 0) {
    local_.set_deferred_wake([this] {
      if (const Epoch* e = current_.load(std::memory_order_acquire); e && e->controller) e->controller->wake_driver();
    });
  }
}

RuntimeDataPlane::~RuntimeDataPlane() {
  if (rank_ == 0) local_.set_deferred_wake(nullptr);
}

bool RuntimeDataPlane::start_epoch(std::uint32_t number, const std::vector<int>& hosts) {
  const Epoch* old = nullptr;
  {
    std::lock_guard lock(mutex_);
    const Epoch* now = current();
    if (now && number <= now->number) return false;
    auto e = std::make_unique<Epoch>();
    e->number = number;
    e->hosts = hosts;
    e->workers.assign(hosts.size(), nullptr);
    const Epoch* ep = e.get();
    // The ranks of the epoch before as this one numbers them (by their processes; -1:
    // lost): templates are kept through a rollback and edited, not installed again.
    std::vector<int> rank_map;
    if (now) {
      for (int p : now->hosts) {
        const auto at = std::find(hosts.begin(), hosts.end(), p);
        rank_map.push_back(at == hosts.end() ? -1 : static_cast<int>(at - hosts.begin()));
      }
    }
    for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
      if (hosts[static_cast<std::size_t>(r)] != rank_) continue;
      auto send = [this, ep, r](int to, std::vector<std::byte> m) { this->send_framed(*ep, r, to, std::move(m)); };
      auto fresh = std::make_unique<DataWorker>(r, local_, send, events_, kWorkerHeadroom);
      // Partitions restored from a checkpoint: each logical rank's host reads them.
      fresh->set_restore_loader(
          [this](const std::string& file, const std::string& name) { return restore_object(file, name); });
      if (task_hook_) fresh->set_task_hook(task_hook_);
      // This process's worker of the epoch before (an epoch names a process once).
      if (now) {
        for (std::size_t o = 0; o < now->hosts.size(); ++o) {
          if (now->hosts[o] == rank_ && now->workers[o]) fresh->carry_templates(*now->workers[o], rank_map);
        }
      }
      e->workers[static_cast<std::size_t>(r)] = fresh.get();
      all_workers_.push_back(std::move(fresh));
    }
    if (rank_ == 0) {
      std::function<int()> poll;
      if (cluster_) poll = [c = cluster_] { return c->poll(); };
      auto send = [this, ep](int to, std::vector<std::byte> m) { this->send(*ep, 0, to, std::move(m)); };
      all_controllers_.push_back(
          std::make_unique<DataController>(static_cast<int>(hosts.size()), send, std::move(poll)));
      e->controller = all_controllers_.back().get();
      e->controller->set_wake_deferral([this] { return local_.defer_wake(); });
      if (now && now->controller) e->controller->carry_templates(*now->controller, rank_map);
    }
    old = current_.exchange(ep, std::memory_order_acq_rel);
    epochs_.push_back(std::move(e));
  }
  if (old) {
    for (DataWorker* w : old->workers) {
      if (w) w->cancel();
    }
    if (worker_hook_) worker_hook_(worker());
  }
  return true;
}

std::vector<std::byte> RuntimeDataPlane::restore_object(const std::string& file, const std::string& name) {
  // One open reader for all of them: opening the file reads its whole manifest.
  std::shared_ptr<const CheckpointReader> reader;
  {
    std::lock_guard lock(restore_mutex_);
    if (!restore_reader_ || restore_path_ != file) {
      auto opened = CheckpointReader::open(file);
      if (!opened.ok()) throw Error(opened.status().message());
      restore_reader_ = std::make_shared<const CheckpointReader>(std::move(opened).value());
      restore_path_ = file;
    }
    reader = restore_reader_;
  }
  auto bytes = reader->read_object(name);
  if (!bytes.ok()) throw Error(bytes.status().message());
  return std::move(*bytes);
}

void RuntimeDataPlane::set_task_hook(std::function<void()> hook) {
  std::lock_guard lock(mutex_);
  task_hook_ = std::move(hook);
  for (DataWorker* w : current()->workers) {
    if (w) w->set_task_hook(task_hook_);
  }
}

void RuntimeDataPlane::send(const Epoch& e, int from, int to, std::vector<std::byte> message, int to_process) {
  // A replaced worker or controller speaks no more.
  if (current() != &e) return;
  const int process = to >= 0 ? e.hosts[static_cast<std::size_t>(to)] : to_process;
  if (process == rank_) {
    if (to < 0) return;
    if (DataWorker* w = route(e, from, to, message)) w->post(from, std::move(message));
    return;
  }
  const auto head = encode_header({e.number, from, to});
  cluster_->send_data(Rank{process}, head, message);
}

void RuntimeDataPlane::send_framed(const Epoch& e, int from, int to, std::vector<std::byte> message) {
  if (current() != &e) return;
  const int process = e.hosts[static_cast<std::size_t>(to)];
  if (process == rank_) {
    const auto body = std::span<const std::byte>(message).subspan(kWorkerHeadroom);
    if (DataWorker* w = route(e, from, to, body)) {
      message.erase(message.begin(), message.begin() + kWorkerHeadroom);
      w->post(from, std::move(message));
    }
    return;
  }
  const auto head = encode_header({e.number, from, to});
  std::memcpy(message.data() + kFrameHeaderBytes, head.data(), kDataHeaderBytes);
  cluster_->send_data_frame(Rank{process}, std::move(message));
}

DataWorker* RuntimeDataPlane::route(const Epoch& e, int from, int to, std::span<const std::byte> message) {
  if (!message.empty() && to_controller(static_cast<std::uint8_t>(message[0]))) {
    if (to == 0 && e.controller) {
      e.controller->handle(from, message);
    } else {
      std::fprintf(stderr, "brisk: rank %d: dropped a data reply from rank %d to rank %d: only rank 0 takes replies\n",
                   rank_, from, to);
    }
    return nullptr;
  }
  DataWorker* w = e.workers[static_cast<std::size_t>(to)];
  if (!w) {
    std::fprintf(stderr, "brisk: rank %d: dropped a data message from rank %d for rank %d, which is not served here\n",
                 rank_, from, to);
  }
  return w;
}

void RuntimeDataPlane::receive(int from, std::span<const std::byte> payload) {
  const std::optional<DataHeader> header = wire::decode_data_header(payload);
  if (!header) {
    std::fprintf(stderr, "brisk: rank %d: dropped a data message of %zu bytes from rank %d: shorter than its header\n",
                 rank_, payload.size(), from);
    return;
  }
  const DataHeader& h = *header;
  const std::span<const std::byte> body = payload.subspan(kDataHeaderBytes);
  if (h.to == -1) {
    on_plane_message(from, h.epoch, body);
    return;
  }
  const Epoch& e = *current();
  const std::uint32_t now = e.number;
  if (h.epoch != now) {
    // Older: sent before a rollback, for state that is gone. Newer cannot happen: an
    // epoch's first commands leave rank 0 after every rank started it.
    if (h.epoch > now) {
      std::fprintf(stderr, "brisk: rank %d: dropped a data message from rank %d of epoch %u (this rank is in %u)\n",
                   rank_, from, h.epoch, now);
    }
    return;
  }
  const int logical = static_cast<int>(e.hosts.size());
  if (h.from < 0 || h.from >= logical || h.to < 0 || h.to >= logical) {
    std::fprintf(stderr, "brisk: rank %d: dropped a data message from rank %d: logical ranks %d -> %d outside [0, %d)\n",
                 rank_, from, h.from, h.to, logical);
    return;
  }
  // The body lives in the transport's receive buffer: a copy is unpacked from it
  // where it can be, and only what is queued is copied.
  if (DataWorker* w = route(e, h.from, h.to, body)) w->post_view(h.from, body);
}

void RuntimeDataPlane::on_plane_message(int from_process, std::uint32_t epoch, std::span<const std::byte> body) {
  try {
    if (body.empty()) throw Error("an empty data-plane message");
    switch (static_cast<std::uint8_t>(body[0])) {
      case kStartEpoch: {
        const std::vector<int> hosts = wire::decode_epoch_hosts(body.subspan(1), size_, rank_);
        start_epoch(epoch, hosts);
        // Confirmed even when this epoch had started already (a repeated request).
        if (const Epoch& e = *current(); e.number == epoch) {
          Writer w;
          w(static_cast<std::uint8_t>(kEpochStarted));
          send(e, rank_, -1, w.take(), 0);
        }
        break;
      }
      case kEpochStarted: {
        if (rank_ != 0 || from_process < 0 || from_process >= size_) throw Error("an epoch confirmation off rank 0");
        std::lock_guard lock(mutex_);
        std::uint32_t& acked = acked_[static_cast<std::size_t>(from_process)];
        acked = std::max(acked, epoch);
        break;
      }
      default: throw Error(fmt::format("unknown data-plane message {}", static_cast<int>(body[0])));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "brisk: rank %d: dropped a malformed data-plane message from rank %d: %s\n", rank_,
                 from_process, e.what());
  }
}

void RuntimeDataPlane::abort(int lost) {
  // An epoch started after the loss (a rollback that saw it first) leaves the dead
  // process out and goes on.
  const Epoch& e = *current();
  if (std::find(e.hosts.begin(), e.hosts.end(), lost) == e.hosts.end()) return;
  if (DataController* c = e.controller) c->abort(lost);
}

std::vector<int> RuntimeDataPlane::roll_back() {
  if (rank_ != 0 || !cluster_) throw Error("brisk: a data-plane rollback runs on rank 0 of a multi-rank job");
  const auto limit = rollback_limit_;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const auto lost = [this](int p) { return cluster_->rank_lost(Rank{p}); };
  for (;;) {
    // One logical rank per surviving process, in process order: the data restart
    // from a checkpoint (or from nothing), so the driver, run again, spreads them
    // over all the survivors instead of doubling one survivor's share.
    std::vector<int> hosts;
    for (int p = 0; p < size_; ++p) {
      if (!lost(p)) hosts.push_back(p);
    }
    if (hosts.empty() || hosts.front() != 0) throw Error("brisk: rank 0 is lost; no data-plane rollback");
    const std::uint32_t number = current()->number + 1;
    start_epoch(number, hosts);
    Writer w;
    w(static_cast<std::uint8_t>(kStartEpoch), hosts);
    const std::vector<std::byte> request = w.take();
    const std::vector<int> live(hosts.begin() + 1, hosts.end());
    for (int p : live) send(*current(), 0, -1, request, p);
    // Wait for every surviving process to confirm.
    for (;;) {
      bool all = true;
      {
        std::lock_guard lock(mutex_);
        for (int p : live) all = all && acked_[static_cast<std::size_t>(p)] >= number;
      }
      bool died = false;
      for (int p : live) died = died || lost(p);
      if (all || died) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        throw Error(fmt::format("brisk: the surviving ranks did not confirm the data plane's rollback within {} ms",
                                limit.count()));
      }
      cluster_->poll();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    // A process that died meanwhile starts another epoch (the loss handler may have
    // aborted the controller this one replaced).
    bool again = false;
    for (int p : live) again = again || lost(p);
    if (again) continue;
    return hosts;
  }
}

std::string RuntimeDataPlane::describe_hosts(const std::vector<int>& hosts) {
  std::string list;
  for (int h : hosts) list += fmt::format("{}{}", list.empty() ? "" : ", ", h);
  return fmt::format("the data plane now has {} rank{}, processes {}", hosts.size(), hosts.size() == 1 ? "" : "s",
                     list);
}

DataController& RuntimeDataPlane::controller(const char* api) const {
  DataController* c = current()->controller;
  if (!c) throw Error(fmt::format("{}: data objects are driven from rank 0 (this is rank {})", api, rank_));
  // Before the first data set there is nothing to roll back (create() sees a loss
  // first).
  if (used_.load(std::memory_order_acquire)) c->check_aborted();
  return *c;
}

std::uint32_t RuntimeDataPlane::create(const std::string& name, const detail::DataTypeOps* type,
                                       std::vector<int> homes, bool checkpointed) {
  if (!used_.load(std::memory_order_acquire) && cluster_ && cluster_->any_rank_lost()) {
    // A rank died before the first data set: its homes were placed over the ranks
    // before the loss, so the driver runs again (brisk::run rolls back), and places
    // them over the survivors.
    for (int h : current()->hosts) {
      if (cluster_->rank_lost(Rank{h})) throw detail::DataRollback{h};
    }
  }
  DataController& c = controller("brisk::DataSet");
  used_.store(true, std::memory_order_release);
  return c.create(name, type, std::move(homes), checkpointed);
}
void RuntimeDataPlane::submit(detail::DataTaskSpec spec, std::shared_ptr<const std::vector<std::byte>> params) {
  controller("brisk::data_task").submit(std::move(spec), std::move(params));
}
std::uint32_t RuntimeDataPlane::install(const std::string& name, std::vector<detail::DataTaskSpec> tasks) {
  return controller("brisk::record").install(name, std::move(tasks));
}
void RuntimeDataPlane::instantiate(std::uint32_t tmpl, std::vector<std::byte> params) {
  controller("brisk::Template::instantiate").instantiate(tmpl, std::move(params));
}
void RuntimeDataPlane::move_tasks(std::uint32_t tmpl, std::span<const std::pair<std::uint32_t, int>> moves) {
  controller("brisk::Template::move_tasks").move_tasks(tmpl, moves);
}
int RuntimeDataPlane::task_rank(std::uint32_t tmpl, std::uint32_t task) const {
  return controller("brisk::Template::rank_of").task_rank(tmpl, task);
}
std::uint64_t RuntimeDataPlane::fetch_start(std::uint32_t dataset, std::uint32_t part) {
  return controller("brisk::DataSet::fetch").fetch_start(dataset, part);
}
std::vector<std::byte> RuntimeDataPlane::fetch_wait(std::uint64_t key) {
  return controller("brisk::DataFuture::get").fetch_wait(key);
}
void RuntimeDataPlane::sync() { controller("brisk::data_sync").sync(); }
void RuntimeDataPlane::flush() { controller("brisk::data_task").flush(); }
std::uint64_t RuntimeDataPlane::version(std::uint32_t dataset, std::uint32_t part) const {
  return controller("brisk::DataSet::version").version(dataset, part);
}
std::vector<std::byte> RuntimeDataPlane::prepare_checkpoint(std::uint64_t sequence) {
  return controller("brisk::checkpoint::now").plan_checkpoint(sequence);
}
std::vector<std::pair<std::string, std::vector<std::byte>>> RuntimeDataPlane::checkpoint_objects(
    std::uint64_t sequence) {
  std::vector<std::pair<std::string, std::vector<std::byte>>> all;
  for (DataWorker* w : current()->workers) {
    if (!w) continue;
    auto objects = w->checkpoint_objects(sequence);
    std::move(objects.begin(), objects.end(), std::back_inserter(all));
  }
  return all;
}
void RuntimeDataPlane::restore_from(const std::string& file, std::span<const std::byte> table) {
  controller("--brisk-restore").restore_from(file, table);
}

detail::DataPlaneStats RuntimeDataPlane::stats() const {
  const Epoch& e = *current();
  detail::DataPlaneStats s = e.controller ? e.controller->stats() : detail::DataPlaneStats{};
  for (DataWorker* w : e.workers) {
    if (w) w->add_stats(s);
  }
  return s;
}

}  // namespace brisk
