#include "brisk/scheduler/global_scheduler.hpp"

#include <algorithm>
#include <limits>

namespace brisk {

GlobalScheduler::GlobalScheduler(Rank self, int size, const std::vector<Demand>& capacities)
    : self_(self), nodes_(static_cast<std::size_t>(std::max(size, 0))) {
  for (int r = 0; r < size; ++r) {
    NodeLoad& n = nodes_[static_cast<std::size_t>(r)];
    if (static_cast<std::size_t>(r) < capacities.size()) n.capacity = capacities[static_cast<std::size_t>(r)];
    auto cpu = n.capacity.find("CPU");
    n.cpus = std::max(1.0, cpu == n.capacity.end() ? 1.0 : cpu->second);
    for (const auto& [name, amount] : n.capacity) {
      if (amount > 0) resource_ranks_[name].push_back(r);
    }
  }
}

std::int64_t GlobalScheduler::estimated_load(const NodeLoad& n) noexcept {
  // In flight: placed there, not yet received at its last heartbeat; never negative
  // (a rank may receive tasks from other schedulers too).
  const std::int64_t in_flight = static_cast<std::int64_t>(n.sent) - static_cast<std::int64_t>(n.received);
  return n.reported + std::max<std::int64_t>(0, in_flight);
}

bool GlobalScheduler::fits(const NodeLoad& n, const Demand& demand) noexcept {
  for (const auto& [name, amount] : demand) {
    auto it = n.capacity.find(name);
    if (amount > (it == n.capacity.end() ? 0.0 : it->second) + 1e-9) return false;
  }
  return true;
}

Rank GlobalScheduler::choose(const Demand& demand, const Hints& hints, std::int64_t own_load, bool actor) {
  std::lock_guard lock(mutex_);
  int best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  for (int r = 0; r < size(); ++r) {
    const NodeLoad& n = nodes_[static_cast<std::size_t>(r)];
    if (!n.alive || !fits(n, demand)) continue;
    // Load per core; this rank's own load is known exactly.
    const std::int64_t load = r == self_.value ? own_load : estimated_load(n);
    double score = static_cast<double>(load) / n.cpus;
    // Actors spread over the ranks by how many each already holds per core; the
    // load (mostly the constructors in flight) only breaks ties.
    if (actor) score = static_cast<double>(n.actors) / n.cpus + 1e-3 * score;
    // Less the share of the argument bytes already there: a rank holding the
    // arguments wins unless it has a full core's worth more work.
    std::uint64_t local_bytes = 0, total_bytes = 0;
    for (const auto& [holder, bytes] : hints) {
      total_bytes += bytes;
      if (holder == r) local_bytes += bytes;
    }
    if (total_bytes > 0) score -= static_cast<double>(local_bytes) / static_cast<double>(total_bytes);
    if (score < best_score) {  // strictly: the lowest rank wins a tie
      best_score = score;
      best = r;
    }
  }
  if (best >= 0) {
    ++nodes_[static_cast<std::size_t>(best)].sent;
    if (actor) ++nodes_[static_cast<std::size_t>(best)].actors;
  }
  return Rank{best};
}

Rank GlobalScheduler::sole(const Demand& demand) const {
  // The demanded resource that the fewest ranks have settles the question when one
  // rank alone has it.
  const std::vector<int>* fewest = nullptr;
  for (const auto& [name, amount] : demand) {
    if (amount <= 0) continue;
    auto it = resource_ranks_.find(name);
    if (it == resource_ranks_.end()) return Rank{-1};  // no rank has it: choose says so
    if (!fewest || it->second.size() < fewest->size()) fewest = &it->second;
  }
  if (!fewest || fewest->size() != 1) return Rank{-1};
  const int r = fewest->front();
  std::lock_guard lock(mutex_);
  const NodeLoad& n = nodes_[static_cast<std::size_t>(r)];
  if (!n.alive || !fits(n, demand)) return Rank{-1};
  return Rank{r};
}

bool GlobalScheduler::apply(std::span<const Heartbeat> heartbeats, TimePoint now) {
  std::lock_guard lock(mutex_);
  for (const Heartbeat& h : heartbeats) {
    if (h.rank.value < 0 || h.rank.value >= size()) continue;
    NodeLoad& n = nodes_[static_cast<std::size_t>(h.rank.value)];
    if (h.sequence <= n.sequence) continue;  // stale (or repeated)
    n.sequence = h.sequence;
    n.heard = now;
    n.reported = h.load;
    n.received = h.received;
    n.alive = n.alive && h.alive;
  }
  for (int r = 0; r < size(); ++r) {
    const NodeLoad& n = nodes_[static_cast<std::size_t>(r)];
    if (r == self_.value || !n.alive) continue;
    if (static_cast<double>(estimated_load(n)) < n.cpus) return true;
  }
  return false;
}

void GlobalScheduler::mark_dead(Rank rank) {
  if (rank.value < 0 || rank.value >= size()) return;
  std::lock_guard lock(mutex_);
  nodes_[static_cast<std::size_t>(rank.value)].alive = false;
}

std::vector<int> GlobalScheduler::silent(TimePoint now, Duration unheard, Duration timeout) {
  std::vector<int> out;
  std::lock_guard lock(mutex_);
  for (int r = 0; r < size(); ++r) {
    NodeLoad& n = nodes_[static_cast<std::size_t>(r)];
    if (r == self_.value || !n.alive) continue;
    if (n.heard == TimePoint{}) n.heard = now;  // the clock starts now
    if (unheard > Duration::zero()) n.heard = std::min(now, n.heard + unheard);
    if (now - n.heard > timeout) out.push_back(r);
  }
  return out;
}

void GlobalScheduler::heard_all(TimePoint now) {
  std::lock_guard lock(mutex_);
  for (NodeLoad& n : nodes_) n.heard = now;
}

GlobalScheduler::NodeLoad GlobalScheduler::node(Rank rank) const {
  std::lock_guard lock(mutex_);
  return nodes_.at(static_cast<std::size_t>(rank.value));
}

}  // namespace brisk
