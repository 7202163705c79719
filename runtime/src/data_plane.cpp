#include "brisk/runtime/data_plane.hpp"

#include <fmt/format.h>

#include "brisk/checkpoint/reader.hpp"
#include "brisk/runtime/cluster.hpp"

namespace brisk {

RuntimeDataPlane::RuntimeDataPlane(int rank, int size, detail::Executor& local, Cluster* cluster, EventLog* events,
                                   bool templates)
    : rank_(rank), size_(size), cluster_(cluster), templates_(templates) {
  auto send = [this](int to, std::vector<std::byte> m) { this->send(to, std::move(m)); };
  worker_ = std::make_unique<DataWorker>(rank, local, send, events);
  // Partitions restored from a checkpoint: every home rank reads its own from the file.
  worker_->set_restore_loader([](const std::string& file, const std::string& name) {
    auto reader = CheckpointReader::open(file);
    if (!reader.ok()) throw Error(reader.status().message());
    auto bytes = reader->read_object(name);
    if (!bytes.ok()) throw Error(bytes.status().message());
    return std::move(*bytes);
  });
  if (rank == 0) {
    std::function<int()> poll;
    if (cluster_) poll = [c = cluster_] { return c->poll(); };
    controller_ = std::make_unique<DataController>(size, send, std::move(poll));
  }
}

RuntimeDataPlane::~RuntimeDataPlane() = default;

void RuntimeDataPlane::send(int to, std::vector<std::byte> message) {
  if (to == rank_) {
    if (!message.empty() && to_controller(static_cast<std::uint8_t>(message[0]))) {
      receive(rank_, message);
    } else {
      worker_->post(rank_, std::move(message));
    }
    return;
  }
  cluster_->send_data(Rank{to}, std::move(message));
}

void RuntimeDataPlane::receive(int from, std::span<const std::byte> payload) {
  if (!payload.empty() && to_controller(static_cast<std::uint8_t>(payload[0]))) {
    if (controller_) {
      controller_->handle(from, payload);
    } else {
      std::fprintf(stderr, "brisk: rank %d: dropped a data reply from rank %d: only rank 0 takes replies\n", rank_,
                   from);
    }
    return;
  }
  worker_->post(from, std::vector<std::byte>(payload.begin(), payload.end()));
}

DataController& RuntimeDataPlane::controller(const char* api) const {
  if (!controller_) throw Error(fmt::format("{}: data objects are driven from rank 0 (this is rank {})", api, rank_));
  return *controller_;
}

std::uint32_t RuntimeDataPlane::create(const std::string& name, const detail::DataTypeOps* type,
                                       std::vector<int> homes, bool checkpointed) {
  used_ = true;
  return controller("brisk::DataSet").create(name, type, std::move(homes), checkpointed);
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
  return worker_->checkpoint_objects(sequence);
}
void RuntimeDataPlane::restore_from(const std::string& file, std::span<const std::byte> table) {
  controller("--brisk-restore").restore_from(file, table);
}

detail::DataPlaneStats RuntimeDataPlane::stats() const {
  detail::DataPlaneStats s = controller_ ? controller_->stats() : detail::DataPlaneStats{};
  worker_->add_stats(s);
  return s;
}

}  // namespace brisk
