#include "brisk/runtime/control_plane.hpp"

#include <fmt/format.h>

namespace brisk {

ControlPlane::ControlPlane(Rank self, const JobRoles& roles) : self_(self), client_(self, roles.shards) {
  const int n = static_cast<int>(roles.shards.size());
  for (int i : roles.shards_on(self)) shards_.push_back(std::make_unique<ControlShard>(i, n));
}

void ControlPlane::add_lineage(const LineageRecord& record) {
  std::lock_guard lock(mutex_);
  client_.add_lineage(record);
}
void ControlPlane::add_object(const ObjectRecord& record) {
  std::lock_guard lock(mutex_);
  client_.add_object(record);
}
void ControlPlane::forget(ObjectId object) {
  std::lock_guard lock(mutex_);
  client_.forget(object);
}
void ControlPlane::add_function(const FunctionRecord& record) {
  std::lock_guard lock(mutex_);
  client_.add_function(record);
}
void ControlPlane::set_node_status(const NodeStatus& status) {
  std::lock_guard lock(mutex_);
  client_.set_node_status(status);
}
void ControlPlane::add_event(const EventRecord& event) {
  std::lock_guard lock(mutex_);
  client_.add_event(event);
}
void ControlPlane::subscribe_nodes() {
  std::lock_guard lock(mutex_);
  client_.subscribe(Channel::nodes());
  nodes_subscribed_ = true;
}

Rank ControlPlane::status_host(Rank node) {
  std::lock_guard lock(mutex_);
  return client_.shard_ranks()[static_cast<std::size_t>(client_.shard_for(node))];
}

std::vector<int> ControlPlane::rank_lost(Rank dead, int size, const std::function<bool(Rank)>& is_lost) {
  std::lock_guard lock(mutex_);
  for (auto& s : shards_) s->drop_subscriber(dead);
  std::vector<int> here;
  const int n = client_.num_shards();
  for (int i = 0; i < n; ++i) {
    if (client_.shard_ranks()[static_cast<std::size_t>(i)] != dead) continue;
    Rank to = dead;
    for (int k = 1; k < size; ++k) {
      const Rank r{(dead.value + k) % size};
      if (!is_lost(r)) {
        to = r;
        break;
      }
    }
    if (to == dead) continue;  // no live rank left
    client_.move_shard(i, to);
    if (to == self_ && !hosted(i)) {
      shards_.push_back(std::make_unique<ControlShard>(i, n));
      here.push_back(i);
    }
    if (nodes_subscribed_) client_.subscribe_at(i, Channel::nodes());
  }
  return here;
}

ControlShard* ControlPlane::hosted(int index) {
  for (auto& s : shards_) {
    if (s->shard_index() == index) return s.get();
  }
  return nullptr;
}

void ControlPlane::sort_notifications(std::vector<Notification> notes, Handled& handled) {
  for (auto& n : notes) {
    if (auto* nc = std::get_if<NodeChanged>(&n)) {
      handled.nodes.push_back(std::move(nc->status));
    } else {
      handled.other.push_back(std::move(n));
    }
  }
}

Status ControlPlane::deliver_local(std::vector<Outgoing>& out, Handled& handled) {
  Status first;
  // Local deliveries may produce more local traffic (a shard here notifying the
  // client here): loop until everything left is for other ranks.
  for (std::size_t guard = 0; guard < 64; ++guard) {
    std::vector<Outgoing> remote, local;
    for (auto& o : out) (o.to == self_ ? local : remote).push_back(std::move(o));
    out = std::move(remote);
    if (local.empty()) return first;
    for (auto& o : local) {
      auto header = parse_control_header(o.payload);
      if (!header.ok()) {
        if (first.ok()) first = header.status();
        continue;
      }
      if (header->type == ControlMessageType::kShardBatch) {
        ControlShard* shard = hosted(header->shard);
        if (!shard) {
          if (first.ok()) first = invalid_argument(fmt::format("control shard {} is not hosted on rank {}", header->shard, self_.value));
          continue;
        }
        auto more = shard->handle(self_, o.payload);
        if (!more.ok()) {
          if (first.ok()) first = more.status();
          continue;
        }
        for (auto& m : *more) out.push_back(std::move(m));
      } else {
        auto notes = client_.handle(self_, o.payload);
        if (!notes.ok()) {
          if (first.ok()) first = notes.status();
          continue;
        }
        sort_notifications(std::move(*notes), handled);
      }
    }
  }
  return first;
}

StatusOr<ControlPlane::Handled> ControlPlane::handle(Rank from, std::span<const std::byte> payload) {
  auto header = parse_control_header(payload);
  if (!header.ok()) return header.status();
  std::lock_guard lock(mutex_);
  Handled handled;
  std::vector<Outgoing> out;
  if (header->type == ControlMessageType::kShardBatch) {
    ControlShard* shard = hosted(header->shard);
    if (!shard) {
      // The sender saw the shard's rank die before this rank did, and the shard
      // moves here (rank_lost()): host it now.
      if (header->shard >= client_.num_shards()) {
        return invalid_argument(fmt::format("a control batch for shard {} reached rank {}; the job has {} shards",
                                            header->shard, self_.value, client_.num_shards()));
      }
      shards_.push_back(std::make_unique<ControlShard>(header->shard, client_.num_shards()));
      shard = shards_.back().get();
    }
    auto r = shard->handle(from, payload);
    if (!r.ok()) return r.status();
    out = std::move(*r);
  } else {
    auto notes = client_.handle(from, payload);
    if (!notes.ok()) return notes.status();
    sort_notifications(std::move(*notes), handled);
  }
  Status st = deliver_local(out, handled);
  handled.outgoing = std::move(out);
  if (!st.ok()) return st;
  return handled;
}

std::vector<Outgoing> ControlPlane::flush(std::chrono::steady_clock::time_point now, bool force,
                                          std::vector<NodeStatus>* local_nodes) {
  std::lock_guard lock(mutex_);
  std::vector<Outgoing> out = client_.flush(now, force);
  if (out.empty()) return out;
  Handled handled;
  (void)deliver_local(out, handled);  // shards here validate their own input
  if (local_nodes) {
    for (auto& n : handled.nodes) local_nodes->push_back(std::move(n));
  }
  return out;
}

}  // namespace brisk
