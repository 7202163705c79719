// brisk/runtime/actor_results.hpp — results of replayed actor calls held on other ranks.
//
// On the rank that made them (the actor's creator, which owns their results), the
// results of calls on actors with ActorOptions::replay_calls that are held on
// another rank (large values stay where the call ran). Such a result has no lineage
// (an actor call cannot run anywhere else), but when its holder dies the rebuilt
// actor runs the call again in its replay, with the same task and object ids: that
// run gives the object a new copy, as a lineage rebuild does (Cluster::relocate).
// ActorResults keeps the book; the Cluster does the messages:
//
//   results.held(id, actor, incarnation, holder);         // the result came, held there
//   // the holder dies; a reader's pull fails, the object has no lineage:
//   switch (results.park(o, replay_pending, holder_lost)) { ... }   // wait for the replay
//   // the rebuilt actor's replay, call by call:
//   if (results.take(id, actor, incarnation, o, is_lost)) { /* submit the call as a rebuild */ }
//   for (ObjectState* o : results.replay_done(actor)) { /* lost: no replay made it */ }
//
// An object is parked (a reference held) from the moment a reader needs it until
// the replay takes it, so that its readers wait instead of finding it lost; a replay
// that does not come (no restarts left, the rebuild failed) leaves it lost, as
// before. Objects whose readers come after the replay was submitted were taken by it
// already (their holder was known dead then).
//
// Thread safety: every member may be called from any thread (one mutex). The
// callbacks given to park() and rank_lost() run under it: they must not call back.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "brisk/core/detail/object.hpp"
#include "brisk/core/ids.hpp"

namespace brisk {

class ActorResults {
 public:
  // Whether the creator will replay the calls made for build `incarnation` of
  // `actor` (a rebuild was started after it and its replay has not run yet).
  using ReplayPending = std::function<bool(TaskId actor, std::uint32_t incarnation)>;

  ActorResults() = default;
  ActorResults(const ActorResults&) = delete;
  ActorResults& operator=(const ActorResults&) = delete;
  ~ActorResults();  // releases parked objects

  // The result `id` of a logged call on `actor` (build `incarnation`) arrived, held
  // on `holder`, another rank; or a rebuild gave it a new copy there.
  void held(ObjectId id, TaskId actor, std::uint32_t incarnation, Rank holder);
  // The object is gone, or its value is on this rank now: no longer tracked.
  void forget(ObjectId id);
  bool tracks(ObjectId id) const;

  enum class Park {
    kNotTracked,  // not such a result: the caller deals with it (lineage, or lost)
    kWaiting,     // parked, a reference taken: the actor's replay makes it again
    kUnderWay,    // parked already or being made again: nothing to do
    kLost,        // no replay will make it again
  };
  // `o`'s holder died (`holder_lost`), or a pull from it failed (the loss may not be
  // known yet: then it waits for rank_lost()), and `o` has no lineage.
  Park park(detail::ObjectState* o, const ReplayPending& replay_pending, bool holder_lost);

  // The replay of `actor` for build `incarnation` reaches the call whose result is
  // `o` (alive; the caller holds a reference). True when it must be made again (it
  // waited, or its holder is dead per `is_lost` and no other relocation, such as a
  // read-back from a checkpoint, is `under_way`): from now on it is being made again,
  // and a parked reference is dropped (the caller's keeps it alive).
  bool take(ObjectId id, TaskId actor, std::uint32_t incarnation, detail::ObjectState* o,
            const std::function<bool(Rank)>& is_lost, bool under_way = false);
  // The replay of `actor` was submitted, or will not come: the objects still parked
  // for it, with their references, to be declared lost. No longer tracked.
  std::vector<detail::ObjectState*> replay_done(TaskId actor);
  // `rank` is known dead: objects parked on a failed pull from it before that was
  // known, whose replay will not come, with their references (to be declared lost).
  std::vector<detail::ObjectState*> rank_lost(Rank rank, const ReplayPending& replay_pending);
  // The rank running a rebuild of `o` died. True: parked again (the caller's
  // reference is taken over) for the next rebuild's replay. False: lost (the caller
  // keeps its reference); no longer tracked.
  bool rebuild_lost(detail::ObjectState* o, const ReplayPending& replay_pending);

 private:
  enum class State : std::uint8_t { kHeld, kWaiting, kUnconfirmed, kRebuilding };
  struct Entry {
    TaskId actor;
    std::uint32_t incarnation = 0;  // the build whose call made the copy in use
    Rank holder;
    State state = State::kHeld;
    detail::ObjectState* parked = nullptr;  // kWaiting, kUnconfirmed: a reference
  };
  mutable std::mutex mutex_;
  std::unordered_map<ObjectId, Entry> entries_;  // under mutex_
};

}  // namespace brisk
