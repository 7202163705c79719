// brisk/runtime/control_plane.hpp — a rank's view of the sharded control state.
//
// Holds the rank's ControlClient and the ControlShards the rank hosts (by its
// roles), routes kControl payloads between them, and serialises access: the
// runtime's threads append records, the progress thread flushes and handles.
// Messages to a shard on this same rank are applied without the transport.
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "brisk/scheduler/control_state.hpp"
#include "brisk/scheduler/roles.hpp"

namespace brisk {

class ControlPlane {
 public:
  ControlPlane(Rank self, const JobRoles& roles);

  // Records (batched per shard; sent by flush()).
  void add_lineage(const LineageRecord& record);
  void add_object(const ObjectRecord& record);
  void forget(ObjectId object);
  void add_function(const FunctionRecord& record);
  void set_node_status(const NodeStatus& status);
  void add_event(const EventRecord& event);
  // Node statuses from every shard, now and on every change.
  void subscribe_nodes();
  // Rank `dead` died: each shard it hosted moves to the next live rank after it
  // (the same choice on every rank), which hosts a fresh, empty shard with that
  // index; the tables start again from the records sent from now on (heartbeats
  // refill the node table within one period). Returns the indices that moved here.
  std::vector<int> rank_lost(Rank dead, int size, const std::function<bool(Rank)>& is_lost);
  // The rank hosting the shard that holds `node`'s status (its heartbeats go there).
  Rank status_host(Rank node);

  struct Handled {
    std::vector<NodeStatus> nodes;     // node statuses published to this rank
    std::vector<Notification> other;   // every other notification
    std::vector<Outgoing> outgoing;    // messages for other ranks
  };
  // One kControl state payload from `from` (a batch for a shard hosted here, or
  // notifications for this rank's client).
  StatusOr<Handled> handle(Rank from, std::span<const std::byte> payload);
  // Batches that are due (or all, if force) as messages for other ranks; traffic
  // for shards on this rank is applied here, and the node statuses it publishes to
  // this rank are returned through `local_nodes`.
  std::vector<Outgoing> flush(std::chrono::steady_clock::time_point now, bool force = false,
                              std::vector<NodeStatus>* local_nodes = nullptr);

  // Read access to a shard hosted here (nullptr otherwise), under the lock.
  template <class F>
  void with_shard(int index, F&& f) {
    std::lock_guard lock(mutex_);
    if (ControlShard* s = hosted(index)) f(*s);
  }

 private:
  // The shard with this index hosted here, or null (lock held).
  ControlShard* hosted(int index);
  // Node statuses into handled.nodes, the rest into handled.other.
  static void sort_notifications(std::vector<Notification> notes, Handled& handled);
  // Applies messages addressed to this rank until none are left (lock held).
  Status deliver_local(std::vector<Outgoing>& out, Handled& handled);

  Rank self_;
  std::mutex mutex_;
  ControlClient client_;
  std::vector<std::unique_ptr<ControlShard>> shards_;
  bool nodes_subscribed_ = false;
};

}  // namespace brisk
