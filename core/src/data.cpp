// Data sets, data-task declarations and the driver side of templates.
#include "brisk/core/data.hpp"

#include <fmt/format.h>

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "brisk/core/detail/context.hpp"

namespace brisk {
namespace detail {
namespace {

struct TypeTable {
  std::shared_mutex mutex;
  std::unordered_map<std::uint64_t, std::unique_ptr<DataTypeOps>> types;
};
TypeTable& type_table() {
  static TypeTable* t = new TypeTable();  // never destroyed: used during static destruction
  return *t;
}

thread_local DataRecording* t_recording = nullptr;
thread_local std::shared_ptr<const std::vector<std::byte>> t_block_params;

}  // namespace

const DataTypeOps* register_data_type(const DataTypeOps& ops) {
  TypeTable& t = type_table();
  std::unique_lock lock(t.mutex);
  auto& slot = t.types[ops.id];
  if (!slot) slot = std::make_unique<DataTypeOps>(ops);
  return slot.get();
}

const DataTypeOps* find_data_type(std::uint64_t id) noexcept {
  TypeTable& t = type_table();
  std::shared_lock lock(t.mutex);
  auto it = t.types.find(id);
  return it == t.types.end() ? nullptr : it->second.get();
}

DataPlane& require_data_plane(const char* api) {
  RuntimeContext& ctx = require_context(api);
  if (!ctx.data) throw Error(fmt::format("{}: this runtime has no data plane", api));
  return *ctx.data;
}

DataRecording*& current_recording() noexcept { return t_recording; }
std::shared_ptr<const std::vector<std::byte>>& current_block_params() noexcept { return t_block_params; }

DataTaskRegistration::DataTaskRegistration(std::string_view name, DataFunction f)
    : info(register_function(name, reinterpret_cast<const void*>(f))) {}

void TemplateCore::run(std::vector<std::byte> params, const std::function<void()>& body) {
  DataPlane& plane = require_data_plane("brisk::Template::instantiate");
  // --brisk-checkpoint-instantiations: a checkpoint before every N-th instantiation,
  // with the values the driver saved (it saves where it is before instantiating).
  if (CheckpointService* checkpoints = context()->checkpoints; checkpoints && checkpoints->instantiation_due()) {
    checkpoints->write();
  }
  if (installed_) {
    plane.instantiate(id_, std::move(params));
    return;
  }
  if (!plane.templates_enabled()) {
    run_untemplated(std::move(params), body);
    return;
  }
  if (current_recording()) throw Error(fmt::format("brisk::record '{}': templates cannot nest", name_));
  DataRecording recording;
  current_recording() = &recording;
  try {
    body();
  } catch (...) {
    current_recording() = nullptr;
    throw;
  }
  current_recording() = nullptr;
  tasks_ = recording.tasks.size();
  id_ = plane.install(name_, std::move(recording.tasks));
  installed_ = true;
  plane.instantiate(id_, std::move(params));
}

void TemplateCore::run_untemplated(std::vector<std::byte> params, const std::function<void()>& body) {
  DataPlane& plane = require_data_plane("brisk::Template::run_untemplated");
  if (current_recording()) throw Error(fmt::format("brisk::Template '{}': cannot run inside a recorded block", name_));
  // Every task carries the block's parameters.
  auto saved =
      std::exchange(current_block_params(), std::make_shared<const std::vector<std::byte>>(std::move(params)));
  struct Restore {
    std::shared_ptr<const std::vector<std::byte>> saved;
    ~Restore() { current_block_params() = std::move(saved); }
  } restore{std::move(saved)};
  const std::uint64_t before = plane.submitted();
  body();
  if (!installed_) tasks_ = static_cast<std::size_t>(plane.submitted() - before);
  plane.flush();
}

void TemplateCore::move_tasks(std::span<const std::pair<std::uint32_t, int>> moves) {
  DataPlane& plane = require_data_plane("brisk::Template::move_tasks");
  if (!installed_) throw Error(fmt::format("brisk::Template '{}': move_tasks before the template was installed", name_));
  for (const auto& [task, rank] : moves) {
    if (task >= tasks_) {
      throw Error(fmt::format("brisk::Template '{}': move_tasks: task {} is out of range (the block has {} tasks)",
                              name_, task, tasks_));
    }
    if (rank < 0 || rank >= plane.size()) {
      throw Error(fmt::format("brisk::Template '{}': move_tasks: rank {} is out of range (data_ranks() is {})", name_,
                              rank, plane.size()));
    }
  }
  plane.move_tasks(id_, moves);
}

int TemplateCore::rank_of(std::size_t task) const {
  DataPlane& plane = require_data_plane("brisk::Template::rank_of");
  if (!installed_ || task >= tasks_) return -1;
  return plane.task_rank(id_, static_cast<std::uint32_t>(task));
}

void throw_data_type_mismatch(const DataTask& t, std::size_t i, const char* wanted) {
  throw Error(fmt::format("data task '{}': access {} does not hold a {}", t.name(), i, wanted));
}

}  // namespace detail

std::vector<int> Placement::homes(std::size_t n, int size) const {
  std::vector<int> out(n);
  for (std::size_t p = 0; p < n; ++p) {
    switch (kind_) {
      case Kind::kBlocked: out[p] = static_cast<int>(p * static_cast<std::size_t>(size) / n); break;
      case Kind::kCyclic: out[p] = static_cast<int>(p % static_cast<std::size_t>(size)); break;
      case Kind::kExplicit: {
        if (ranks_.empty()) throw Error("brisk::Placement::on: the rank list is empty");
        const int r = ranks_[p % ranks_.size()];
        if (r < 0 || r >= size) {
          throw Error(fmt::format("brisk::Placement::on: rank {} is out of range (data_ranks() is {})", r, size));
        }
        out[p] = r;
        break;
      }
    }
  }
  return out;
}

DataSetBase::DataSetBase(const std::string& name, std::size_t partitions, const Placement& placement,
                         const detail::DataTypeOps* type, const DataSetOptions& options) {
  detail::DataPlane& plane = detail::require_data_plane("brisk::DataSet");
  if (partitions == 0) throw Error(fmt::format("brisk::DataSet '{}': a data set needs at least one partition", name));
  if (partitions > 0xFFFFFFFFu) throw Error(fmt::format("brisk::DataSet '{}': too many partitions", name));
  auto homes = placement.homes(partitions, plane.size());
  homes_ = std::make_shared<const std::vector<int>>(homes);
  name_ = std::make_shared<const std::string>(name);
  id_ = plane.create(name, type, std::move(homes), options.checkpoint);
}

std::uint64_t DataSetBase::version(std::size_t p) const {
  if (p >= partitions()) throw Error(fmt::format("brisk::DataSet '{}': partition {} is out of range", name(), p));
  return detail::require_data_plane("brisk::DataSet::version").version(id_, static_cast<std::uint32_t>(p));
}

std::uint64_t DataSetBase::fetch_start(std::size_t p) const {
  if (p >= partitions()) {
    throw Error(fmt::format("brisk::DataSet '{}': fetch of partition {}, which is out of range (it has {})", name(), p,
                            partitions()));
  }
  return detail::require_data_plane("brisk::DataSet::fetch").fetch_start(id_, static_cast<std::uint32_t>(p));
}

int data_ranks() { return detail::require_data_plane("brisk::data_ranks").size(); }

bool DataSetBase::restored() const { return detail::require_data_plane("brisk::DataSet::restored").restored(id_); }

std::vector<std::byte> DataSetBase::fetch_bytes(std::size_t p) const {
  const std::uint64_t key = fetch_start(p);
  return detail::require_data_plane("brisk::DataSet::fetch").fetch_wait(key);
}

void DataTask::check(std::size_t i, const detail::DataTypeOps* want, bool writing, const char* wanted) const {
  if (i >= accesses_.size()) {
    throw Error(fmt::format("data task '{}': access {} is out of range (it declared {})", name_, i, accesses_.size()));
  }
  if (types_[i] != want) detail::throw_data_type_mismatch(*this, i, wanted);
  if (writing && accesses_[i].mode == DataMode::kRead) {
    throw Error(fmt::format("data task '{}': access {} was declared read-only and is written", name_, i));
  }
}

DataTaskBuilder::DataTaskBuilder(DataFunction f) {
  const FunctionInfo* info = detail::find_function(reinterpret_cast<const void*>(f));
  if (!info) throw Error("brisk::data_task: the function is not registered (BRISK_DATA_TASK)");
  spec_.function = info->id;
}

DataTaskBuilder& DataTaskBuilder::add(const DataSetBase& d, std::size_t part, DataMode mode) {
  if (part >= d.partitions()) {
    throw Error(fmt::format("brisk::data_task: partition {} of '{}' is out of range (it has {})", part, d.name(),
                            d.partitions()));
  }
  spec_.accesses.push_back(detail::DataAccess{d.id(), static_cast<std::uint32_t>(part), mode});
  return *this;
}

DataTaskBuilder& DataTaskBuilder::on(int rank) {
  detail::DataPlane& plane = detail::require_data_plane("brisk::data_task");
  if (rank < 0 || rank >= plane.size()) {
    throw Error(fmt::format("brisk::data_task: rank {} is out of range (data_ranks() is {})", rank, plane.size()));
  }
  spec_.rank = rank;
  return *this;
}

std::size_t DataTaskBuilder::submit() {
  if (spec_.accesses.empty() && spec_.rank < 0) {
    throw Error("brisk::data_task: a data task needs at least one partition or a rank (.on)");
  }
  if (detail::DataRecording* rec = detail::current_recording()) {
    rec->tasks.push_back(std::move(spec_));
    return rec->tasks.size() - 1;
  }
  detail::DataPlane& plane = detail::require_data_plane("brisk::data_task");
  plane.submit(std::move(spec_), detail::current_block_params());
  return static_cast<std::size_t>(plane.submitted());
}

void data_sync() { detail::require_data_plane("brisk::data_sync").sync(); }
bool templates_enabled() { return detail::require_data_plane("brisk::templates_enabled").templates_enabled(); }
detail::DataPlaneStats data_stats() { return detail::require_data_plane("brisk::data_stats").stats(); }

}  // namespace brisk
