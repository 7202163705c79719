#include "brisk/runtime/actor_results.hpp"

#include <utility>

namespace brisk {

ActorResults::~ActorResults() {
  for (auto& [id, e] : entries_) {
    if (e.parked) e.parked->release();
  }
}

void ActorResults::held(ObjectId id, TaskId actor, std::uint32_t incarnation, Rank holder) {
  detail::ObjectState* drop = nullptr;
  {
    std::lock_guard lock(mutex_);
    Entry& e = entries_[id];
    drop = std::exchange(e.parked, nullptr);
    e = Entry{actor, incarnation, holder, State::kHeld, nullptr};
  }
  if (drop) drop->release();
}

void ActorResults::forget(ObjectId id) {
  detail::ObjectState* drop = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    drop = it->second.parked;
    entries_.erase(it);
  }
  if (drop) drop->release();
}

bool ActorResults::tracks(ObjectId id) const {
  std::lock_guard lock(mutex_);
  return entries_.count(id) != 0;
}

ActorResults::Park ActorResults::park(detail::ObjectState* o, const ReplayPending& replay_pending, bool holder_lost) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(o->id());
  if (it == entries_.end()) return Park::kNotTracked;
  Entry& e = it->second;
  if (e.state != State::kHeld) return Park::kUnderWay;
  if (replay_pending(e.actor, e.incarnation)) {
    e.state = State::kWaiting;
  } else if (!holder_lost) {
    // A pull failed before the loss reached the actor table: rank_lost() decides.
    e.state = State::kUnconfirmed;
  } else {
    entries_.erase(it);
    return Park::kLost;
  }
  o->add_ref();
  e.parked = o;
  return Park::kWaiting;
}

bool ActorResults::take(ObjectId id, TaskId actor, std::uint32_t incarnation, detail::ObjectState* o,
                        const std::function<bool(Rank)>& is_lost, bool under_way) {
  detail::ObjectState* drop = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.actor != actor || o == nullptr) return false;
    Entry& e = it->second;
    if (e.state == State::kHeld && (!is_lost(e.holder) || under_way)) return false;  // its copy lives, or comes
    drop = std::exchange(e.parked, nullptr);
    e.state = State::kRebuilding;
    e.incarnation = incarnation;
  }
  if (drop) drop->release();  // the caller holds another reference
  return true;
}

std::vector<detail::ObjectState*> ActorResults::replay_done(TaskId actor) {
  std::vector<detail::ObjectState*> lost;
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.actor == actor && it->second.state == State::kWaiting) {
      lost.push_back(it->second.parked);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  return lost;
}

std::vector<detail::ObjectState*> ActorResults::rank_lost(Rank rank, const ReplayPending& replay_pending) {
  std::vector<detail::ObjectState*> lost;
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.state != State::kUnconfirmed || e.holder != rank) {
      ++it;
    } else if (replay_pending(e.actor, e.incarnation)) {
      e.state = State::kWaiting;
      ++it;
    } else {
      lost.push_back(e.parked);
      it = entries_.erase(it);
    }
  }
  return lost;
}

bool ActorResults::rebuild_lost(detail::ObjectState* o, const ReplayPending& replay_pending) {
  detail::ObjectState* drop = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(o->id());
    if (it == entries_.end()) return false;
    Entry& e = it->second;
    if (e.state == State::kRebuilding && replay_pending(e.actor, e.incarnation)) {
      e.state = State::kWaiting;
      e.parked = o;
      return true;
    }
    drop = e.parked;
    entries_.erase(it);
  }
  if (drop) drop->release();  // `o` itself: the caller holds another reference
  return false;
}

}  // namespace brisk
