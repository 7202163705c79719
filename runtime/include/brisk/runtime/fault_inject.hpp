// brisk/runtime/fault_inject.hpp — killing a rank at a seeded random point, for tests.
//
//   BRISK_FAULT_INJECT=kill:RANK:MIN-MAX[:SEED]
//   BRISK_FAULT_INJECT=kill-at-task:RANK:MIN-MAX[:SEED]
//   BRISK_FAULT_INJECT=kill-in-checkpoint:RANK:MIN-MAX[:SEED]
//   BRISK_FAULT_INJECT=kill-after-checkpoint-report:RANK:MIN-MAX[:SEED]
//   BRISK_FAULT_INJECT=stall-in-checkpoint:RANK:MIN-MAX[:SEED]
//   BRISK_FAULT_INJECT=kill-in-fill:RANK:MIN-MAX[:SEED]
//   BRISK_FAULT_INJECT=kill-at-task:2:100-200,kill-at-task:3:900-1000   (several)
//
// Rank RANK SIGKILLs itself at a time drawn uniformly from [MIN, MAX] milliseconds
// after the driver starts (kill), or as it starts the N-th data task it runs, N
// drawn from [MIN, MAX] (kill-at-task: a point in the computation that does not
// depend on timing), or in the N-th checkpoint it writes a part of, once its shard
// is on disk and before rank 0 hears of it (kill-in-checkpoint: the ucx backend's
// sharded checkpoints; stall-in-checkpoint instead stops that rank's main thread
// there for good, as a hung file system would, while the rest of the rank runs on;
// kill-after-checkpoint-report dies once its report is sent, so that rank 0 may
// commit the part of a rank that is dead or about to be), or in the N-th copy into
// its arena that it makes after the message describing it went, once the first part
// is published (kill-in-fill: a node peer is copying it out meanwhile),
// from a generator seeded with SEED (default 1), so that a
// failing run can be repeated. Every rank parses the value; a malformed one stops
// the job at start with a message naming what was wrong. The value
// `checkpoint-stall` belongs to the checkpoint writer and is accepted here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "brisk/core/status.hpp"

namespace brisk {

struct KillPlan {
  enum class Unit { kMilliseconds, kDataTasks, kCheckpointParts, kCheckpointReports, kFills };
  Unit unit = Unit::kMilliseconds;
  int rank = 0;
  int min_ms = 0;
  int max_ms = 0;
  std::uint64_t seed = 1;
  bool stall = false;  // stall-in-checkpoint: the thread stops instead of the process dying
  // The point drawn from the seed, in [min_ms, max_ms] (milliseconds, data tasks or
  // checkpoints).
  int delay_ms() const;
};

// nullopt when `value` asks for no kill (empty, or another injection).
StatusOr<std::optional<KillPlan>> parse_fault_inject(std::string_view value);
// Several injections separated by commas (for example two ranks killed at
// different points); the kills among them.
StatusOr<std::vector<KillPlan>> parse_fault_injects(std::string_view value);

// If `rank` is plan.rank: with milliseconds, starts a detached thread that SIGKILLs
// this process after plan.delay_ms(); with data tasks (checkpoints, fills), returns a
// function to call as each data task starts (as each checkpoint part is written, as
// each described copy has its first part made),
// which SIGKILLs the process at the drawn one. It says so on stderr first.
std::function<void()> arm_fault_injection(const KillPlan& plan, int rank);
// The plans of `unit` for `rank` armed together: one function that calls each, or
// an empty one when there are none.
std::function<void()> arm_fault_injections(const std::vector<KillPlan>& plans, KillPlan::Unit unit, int rank);

}  // namespace brisk
