// brisk/runtime/fault_inject.hpp — killing a rank at a seeded random time, for tests.
//
//   BRISK_FAULT_INJECT=kill:RANK:MIN-MAX[:SEED]
//
// Rank RANK SIGKILLs itself at a time drawn uniformly from [MIN, MAX] milliseconds
// after the driver starts, from a generator seeded with SEED (default 1), so that
// a failing run can be repeated. Every rank parses the value; a malformed one stops
// the job at start with a message naming what was wrong. The value
// `checkpoint-stall` belongs to the checkpoint writer and is accepted here.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "brisk/core/status.hpp"

namespace brisk {

struct KillPlan {
  int rank = 0;
  int min_ms = 0;
  int max_ms = 0;
  std::uint64_t seed = 1;
  // The delay drawn from the seed, in [min_ms, max_ms].
  int delay_ms() const;
};

// nullopt when `value` asks for no kill (empty, or another injection).
StatusOr<std::optional<KillPlan>> parse_fault_inject(std::string_view value);

// Starts a detached thread that SIGKILLs this process after plan.delay_ms(), if
// `rank` is plan.rank. It says so on stderr first.
void arm_fault_injection(const KillPlan& plan, int rank);

}  // namespace brisk
