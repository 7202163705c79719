// brisk/scheduler/roles.hpp — which ranks serve as control shards and global schedulers.
//
// Every rank is a worker node. Control shards and global schedulers are spread
// evenly over the ranks (shard i on rank floor(i * size / shards), likewise for
// schedulers), so on small jobs they share ranks with each other and with workers
// (as handlers on the rank's progress thread). Defaults grow with the job: one
// shard per 16 ranks and one global scheduler per 32, at least one of each.
#pragma once

#include <string>
#include <vector>

#include "brisk/core/ids.hpp"
#include "brisk/core/status.hpp"

namespace brisk {

struct JobRoles {
  int size = 1;
  std::vector<Rank> shards;      // shard index -> rank
  std::vector<Rank> schedulers;  // global scheduler index -> rank

  // Shard and scheduler indices hosted by `rank`.
  std::vector<int> shards_on(Rank rank) const;
  std::vector<int> schedulers_on(Rank rank) const;
  // "worker", "worker+shard0", "worker+shard0+scheduler0", ...
  std::string describe(Rank rank) const;
  // The global scheduler that `rank` spills to (spread evenly).
  Rank scheduler_for(Rank rank) const;
};

// `shards` / `schedulers` of 0 choose the defaults. kInvalidArgument when a count
// exceeds the number of ranks.
StatusOr<JobRoles> assign_roles(int size, int shards, int schedulers);

}  // namespace brisk
