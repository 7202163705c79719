#include "brisk/scheduler/roles.hpp"

#include <fmt/format.h>

namespace brisk {
namespace {
std::vector<Rank> spread(int count, int size) {
  std::vector<Rank> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(Rank{static_cast<int>(static_cast<long long>(i) * size / count)});
  return out;
}
std::vector<int> indices_on(const std::vector<Rank>& ranks, Rank rank) {
  std::vector<int> out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) out.push_back(static_cast<int>(i));
  }
  return out;
}
}  // namespace

std::vector<int> JobRoles::shards_on(Rank rank) const { return indices_on(shards, rank); }
std::vector<int> JobRoles::schedulers_on(Rank rank) const { return indices_on(schedulers, rank); }

std::string JobRoles::describe(Rank rank) const {
  std::string out = "worker";
  for (int i : shards_on(rank)) out += fmt::format("+shard{}", i);
  for (int i : schedulers_on(rank)) out += fmt::format("+scheduler{}", i);
  return out;
}

Rank JobRoles::scheduler_for(Rank rank) const {
  const auto g = static_cast<long long>(schedulers.size());
  return schedulers[static_cast<std::size_t>(static_cast<long long>(rank.value) * g / size)];
}

StatusOr<JobRoles> assign_roles(int size, int shards, int schedulers) {
  if (size < 1) return invalid_argument(fmt::format("a job needs at least one rank, not {}", size));
  if (shards > size) {
    return invalid_argument(fmt::format("--brisk-shards={} is more than the {} ranks of the job", shards, size));
  }
  if (schedulers > size) {
    return invalid_argument(
        fmt::format("--brisk-schedulers={} is more than the {} ranks of the job", schedulers, size));
  }
  JobRoles roles;
  roles.size = size;
  roles.shards = spread(shards > 0 ? shards : (size + 15) / 16, size);
  roles.schedulers = spread(schedulers > 0 ? schedulers : (size + 31) / 32, size);
  return roles;
}

}  // namespace brisk
