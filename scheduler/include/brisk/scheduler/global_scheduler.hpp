// brisk/scheduler/global_scheduler.hpp — a global scheduler's view of the ranks and
// its placement rule: which rank a task spilled to it runs on.
//
// Pure logic: no transport, no clock reads, no threads. The runtime (Cluster) feeds
// it what it learns (heartbeats, deaths, this rank's own load at the moment of a
// choice) and sends the task where it says.
//
// Placement (choose), per live rank whose capacity meets the demand:
//   load     this rank's own: exact (queued + running, given by the caller);
//            another's: its last heartbeat's queued + running, plus the tasks placed
//            there since that it had not received then (in flight = sent - received,
//            never negative; this scheduler is usually a rank's only source, and the
//            estimate errs towards more load, not less);
//   score    load per core, less the share of the argument bytes the rank holds
//            already: a rank holding the arguments wins unless it has a full core's
//            worth more work;
//   actors   an actor's constructor scores actors already placed there per core, with
//            the load per core only breaking ties (times 1e-3), less the same share;
// the lowest score wins, the lowest rank on a tie. A choice counts one task sent to
// the rank (and one actor for a constructor).
// A rank fits when every demanded amount is at most its capacity plus 1e-9 (a
// resource it lacks counts 0).
//
// Thread safety: every method may be called from any thread (one mutex inside).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "brisk/core/ids.hpp"

namespace brisk {

class GlobalScheduler {
 public:
  using Demand = std::map<std::string, double>;            // resource name -> amount
  using Hints = std::vector<std::pair<int, std::uint64_t>>;  // (rank, argument bytes there)
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  // What the scheduler knows of one rank.
  struct NodeLoad {
    Demand capacity;
    double cpus = 1;             // capacity "CPU", at least 1
    std::int64_t reported = 0;   // queued + running at the last heartbeat
    std::uint64_t sent = 0;      // tasks this scheduler placed there, in all
    std::uint64_t received = 0;  // tasks it had received at the last heartbeat
    std::uint64_t sequence = 0;  // of the last heartbeat applied
    std::uint64_t actors = 0;    // actors this scheduler placed there
    TimePoint heard{};           // the last new heartbeat (zero: none yet)
    bool alive = true;
  };

  // A rank's heartbeat, as far as placement reads it.
  struct Heartbeat {
    Rank rank;
    std::uint64_t sequence = 0;
    std::int64_t load = 0;  // queued + running
    std::uint64_t received = 0;
    bool alive = true;
  };

  // `self`: the rank this scheduler runs on (its load is given to choose). Rank r's
  // capacity is capacities[r] (none past the end); the capacities are fixed.
  GlobalScheduler(Rank self, int size, const std::vector<Demand>& capacities);

  // The rank for a task, or Rank{-1} when no live rank fits `demand`. `own_load`:
  // this rank's queued + running now. `actor`: an actor's constructor.
  Rank choose(const Demand& demand, const Hints& hints, std::int64_t own_load, bool actor = false);
  // The one live rank whose capacity meets `demand`, or Rank{-1} (none, or several).
  // Decided by the demanded resource that the fewest ranks have (a few lookups per
  // task, whatever the job's size): several ranks with some of it give Rank{-1}
  // even where only one of them has enough.
  Rank sole(const Demand& demand) const;

  // Applies heartbeats heard at `now`; one whose sequence is not above the last one
  // applied for its rank is stale and ignored, as is one for a rank out of range. A
  // heartbeat's `alive = false` marks its rank dead; `true` does not revive it.
  // Returns whether another live rank (not self) had an idle core: its estimated
  // load below its cores.
  bool apply(std::span<const Heartbeat> heartbeats, TimePoint now);
  // The rank died: it is never chosen again.
  void mark_dead(Rank rank);

  // The live ranks (not self) unheard for more than `timeout` at `now`. A rank never
  // heard starts its clock now; `unheard` (when positive), a gap in which this rank
  // did not listen, is added to every last-heard time (at most up to now) first.
  std::vector<int> silent(TimePoint now, Duration unheard, Duration timeout);
  // Every rank counts as heard at `now` (a fresh window after deaths).
  void heard_all(TimePoint now);

  // A copy of what is known of `rank` (for tests and diagnostics).
  NodeLoad node(Rank rank) const;
  int size() const noexcept { return static_cast<int>(nodes_.size()); }

 private:
  // Another rank's estimated load: the last report plus what is in flight.
  static std::int64_t estimated_load(const NodeLoad& n) noexcept;
  static bool fits(const NodeLoad& n, const Demand& demand) noexcept;

  const Rank self_;
  mutable std::mutex mutex_;
  std::vector<NodeLoad> nodes_;  // by rank; guarded by mutex_ (the capacities are fixed)
  // Per resource name, the ranks whose capacity has some of it (fixed).
  std::unordered_map<std::string, std::vector<int>> resource_ranks_;
};

}  // namespace brisk
