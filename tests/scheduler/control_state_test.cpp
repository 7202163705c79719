// The control state: routing to shards, tables, publish/subscribe, batching, the
// event ring, and refusal of malformed messages. Clients and shards talk through an
// in-process router; no MPI, no threads, no timing.
#include "brisk/scheduler/control_state.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using brisk::Channel;
using brisk::ControlClient;
using brisk::ControlShard;
using brisk::EventRecord;
using brisk::FunctionId;
using brisk::FunctionInfoReply;
using brisk::LineageRecord;
using brisk::LineageReply;
using brisk::NodeChanged;
using brisk::NodeStatus;
using brisk::Notification;
using brisk::ObjectId;
using brisk::ObjectInfoReply;
using brisk::ObjectLocated;
using brisk::ObjectRecord;
using brisk::Outgoing;
using brisk::Rank;
using brisk::TaskId;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr TaskId kRoot = TaskId::root(7);

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

LineageRecord lineage(TaskId task, int owner, int executor = 0) {
  LineageRecord r;
  r.task = task;
  r.parent = kRoot;
  r.function = FunctionId::from_name("f", 1);
  r.owner = Rank{owner};
  r.executor = Rank{executor};
  r.args = {ObjectId::put_by(kRoot, task.lo % 5), ObjectId::put_by(kRoot, 99)};
  r.attempt = 0;
  return r;
}

NodeStatus status(int rank, std::uint64_t sequence, std::uint32_t queued = 0) {
  NodeStatus s;
  s.rank = Rank{rank};
  s.total = {{"CPU", 8}, {"GPU", 1}};
  s.available = {{"CPU", 8.0 - queued}, {"GPU", 1}};
  s.queued = queued;
  s.sequence = sequence;
  return s;
}

FunctionId fid(const std::string& name) { return FunctionId::from_name(name.data(), name.size()); }

// Routes every Outgoing between clients (one per rank) and shards (index i on
// shard_ranks[i]) until nothing is in flight, as the progress threads would.
class Cluster {
 public:
  Cluster(int ranks, std::vector<Rank> shard_ranks, brisk::ControlClientConfig client_config = {},
          brisk::ControlShardConfig shard_config = {})
      : shard_ranks_(shard_ranks), received_(static_cast<std::size_t>(ranks)) {
    for (int r = 0; r < ranks; ++r) clients_.emplace_back(Rank{r}, shard_ranks, client_config);
    const int n = static_cast<int>(shard_ranks.size());
    for (int i = 0; i < n; ++i) shards_.emplace_back(i, n, shard_config);
  }

  ControlClient& client(int rank) { return clients_[static_cast<std::size_t>(rank)]; }
  ControlShard& shard(int index) { return shards_[static_cast<std::size_t>(index)]; }
  int num_shards() const { return static_cast<int>(shards_.size()); }

  // Flushes every client (forced by default) and delivers until quiet.
  void run(bool force = true) {
    for (auto& c : clients_) send(c.self(), c.flush(Clock::now(), force));
    deliver();
  }

  void send(Rank from, std::vector<Outgoing> messages) {
    for (Outgoing& m : messages) queue_.emplace_back(from, std::move(m));
  }

  void deliver() {
    while (!queue_.empty()) {
      auto [from, m] = std::move(queue_.front());
      queue_.pop_front();
      auto header = brisk::parse_control_header(m.payload);
      ASSERT_TRUE(header.ok()) << header.status().to_string();
      if (header->type == brisk::ControlMessageType::kShardBatch) {
        ASSERT_LT(header->shard, num_shards());
        ASSERT_EQ(shard_ranks_[static_cast<std::size_t>(header->shard)], m.to) << "batch sent to the wrong rank";
        auto replies = shard(header->shard).handle(from, m.payload);
        ASSERT_TRUE(replies.ok()) << replies.status().to_string();
        send(m.to, std::move(*replies));
      } else {
        auto notes = client(m.to.value).handle(from, m.payload);
        ASSERT_TRUE(notes.ok()) << notes.status().to_string();
        auto& inbox = received_[static_cast<std::size_t>(m.to.value)];
        inbox.insert(inbox.end(), notes->begin(), notes->end());
      }
    }
  }

  // Shard `index` lost its rank: a fresh shard with that index serves on `to`, and
  // every client is told (as ControlPlane::rank_lost does).
  void move_shard(int index, int to) {
    shard_ranks_[static_cast<std::size_t>(index)] = Rank{to};
    shards_[static_cast<std::size_t>(index)] = ControlShard(index, num_shards());
    for (auto& c : clients_) c.move_shard(index, Rank{to});
  }

  // Notifications rank `rank` got since the last call.
  std::vector<Notification> take(int rank) { return std::exchange(received_[static_cast<std::size_t>(rank)], {}); }

  template <class T>
  std::vector<T> take_as(int rank) {
    std::vector<T> out;
    for (Notification& n : take(rank)) {
      T* t = std::get_if<T>(&n);
      EXPECT_NE(t, nullptr) << "unexpected notification kind " << n.index();
      if (t) out.push_back(std::move(*t));
    }
    return out;
  }

 private:
  std::vector<Rank> shard_ranks_;
  std::vector<ControlClient> clients_;
  std::vector<ControlShard> shards_;
  std::deque<std::pair<Rank, Outgoing>> queue_;
  std::vector<std::vector<Notification>> received_;
};

// ---------------------------------------------------------------------------
// Routing and tables.

TEST(ControlStateTest, ShardForIsStableAndSpreadsKeys) {
  ControlClient c(Rank{0}, {Rank{0}, Rank{2}, Rank{0}});
  std::vector<int> per_shard(3);
  for (std::uint64_t i = 0; i < 3000; ++i) {
    const TaskId t = kRoot.child(i);
    const int s = c.shard_for(t);
    ASSERT_EQ(s, brisk::control_shard_for(t, 3));
    // A task and the object it returns live on the same shard.
    ASSERT_EQ(s, c.shard_for(ObjectId::returned_by(t)));
    ++per_shard[static_cast<std::size_t>(s)];
  }
  for (int n : per_shard) EXPECT_GT(n, 800);
  EXPECT_EQ(c.shard_for(FunctionId{10}), 1);
  EXPECT_EQ(c.shard_for(Rank{5}), 2);
  // The hash is part of the wire contract: pin one value.
  EXPECT_EQ(brisk::control_shard_for(brisk::UniqueId{1, 2}, 1000),
            static_cast<int>(brisk::detail::mix64(1 ^ brisk::detail::mix64(2)) % 1000));
}

TEST(ControlStateTest, LineageFromManyClientsLandsOnItsShardAndIsQueryable) {
  Cluster cluster(4, {Rank{0}, Rank{2}});
  std::vector<TaskId> tasks;
  for (int r = 0; r < 4; ++r) {
    const TaskId parent = kRoot.child(static_cast<std::uint64_t>(r));
    for (std::uint64_t i = 0; i < 100; ++i) {
      tasks.push_back(parent.child(i));
      cluster.client(r).add_lineage(lineage(tasks.back(), r, (r + 1) % 4));
    }
  }
  cluster.run();
  EXPECT_EQ(cluster.shard(0).num_tasks() + cluster.shard(1).num_tasks(), 400u);
  EXPECT_GT(cluster.shard(0).num_tasks(), 100u);
  EXPECT_GT(cluster.shard(1).num_tasks(), 100u);
  for (const TaskId& t : tasks) {
    const int home = cluster.client(0).shard_for(t);
    const LineageRecord* rec = cluster.shard(home).task(t);
    ASSERT_NE(rec, nullptr);
    EXPECT_EQ(*rec, lineage(t, rec->owner.value, (rec->owner.value + 1) % 4));
    EXPECT_EQ(cluster.shard(1 - home).task(t), nullptr);
  }
  // One batch per (client, shard) pair: 4 clients x 2 shards.
  std::uint64_t batches = 0;
  for (int r = 0; r < 4; ++r) batches += cluster.client(r).stats().batches_sent;
  EXPECT_EQ(batches, 8u);

  // A later record replaces the earlier one (the executor became known).
  LineageRecord moved = lineage(tasks[5], 0, 3);
  moved.attempt = 1;
  cluster.client(1).add_lineage(moved);
  cluster.run(false);  // a write alone waits for max_delay
  EXPECT_EQ(cluster.shard(cluster.client(1).shard_for(tasks[5])).task(tasks[5])->attempt, 0u);
  cluster.run();
  cluster.client(3).query_lineage(tasks[5]);
  cluster.client(3).query_lineage(kRoot.child(12345));  // never submitted
  cluster.run(false);  // queries are urgent: no force needed
  auto replies = cluster.take_as<LineageReply>(3);
  ASSERT_EQ(replies.size(), 2u);
  std::sort(replies.begin(), replies.end(), [](auto& a, auto& b) { return a.record.has_value() > b.record.has_value(); });
  EXPECT_EQ(replies[0].task, tasks[5]);
  ASSERT_TRUE(replies[0].record.has_value());
  EXPECT_EQ(*replies[0].record, moved);
  EXPECT_EQ(replies[1].task, kRoot.child(12345));
  EXPECT_FALSE(replies[1].record.has_value());
}

TEST(ControlStateTest, ThreeShardIndicesOnTwoRanks) {
  const std::vector<Rank> hosts = {Rank{0}, Rank{1}, Rank{0}};
  Cluster cluster(2, hosts);
  std::vector<TaskId> tasks;
  for (std::uint64_t i = 0; i < 300; ++i) {
    tasks.push_back(kRoot.child(i));
    cluster.client(static_cast<int>(i % 2)).add_lineage(lineage(tasks.back(), static_cast<int>(i % 2)));
  }
  // Each index gets its own message, even where two indices share rank 0.
  std::vector<Outgoing> from0 = cluster.client(0).flush(Clock::now(), true);
  ASSERT_EQ(from0.size(), 3u);
  std::set<int> indices;
  for (const Outgoing& m : from0) {
    auto h = brisk::parse_control_header(m.payload);
    ASSERT_TRUE(h.ok());
    indices.insert(h->shard);
    EXPECT_EQ(m.to, hosts[static_cast<std::size_t>(h->shard)]);
  }
  EXPECT_EQ(indices, (std::set<int>{0, 1, 2}));
  cluster.send(Rank{0}, std::move(from0));
  cluster.run();
  std::size_t total = 0;
  for (int s = 0; s < 3; ++s) {
    EXPECT_GT(cluster.shard(s).num_tasks(), 50u);
    total += cluster.shard(s).num_tasks();
  }
  EXPECT_EQ(total, 300u);
  for (const TaskId& t : tasks) EXPECT_NE(cluster.shard(brisk::control_shard_for(t, 3)).task(t), nullptr);

  // A node subscription reaches every index; replies name their shard, which the
  // client checks against the sending rank.
  for (int r = 0; r < 2; ++r) cluster.client(r).set_node_status(status(r, 1));
  cluster.run();
  cluster.client(1).subscribe(Channel::nodes());
  cluster.run(false);
  auto nodes = cluster.take_as<NodeChanged>(1);
  ASSERT_EQ(nodes.size(), 2u);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(cluster.shard(s).node_subscribers(), std::vector<Rank>{Rank{1}});
}

TEST(ControlStateTest, ObjectLocationsHoldersRemovalAndForget) {
  Cluster cluster(4, {Rank{0}, Rank{2}});
  const TaskId producer = kRoot.child(1);
  const ObjectId obj = ObjectId::returned_by(producer);
  const int home = cluster.client(0).shard_for(obj);
  ControlShard& shard = cluster.shard(home);

  cluster.client(0).add_lineage(lineage(producer, 0, 1));
  cluster.client(1).add_object({obj, Rank{1}, 4096, false});
  cluster.client(3).add_object({obj, Rank{3}, 4096, false});
  cluster.client(3).add_object({obj, Rank{3}, 4096, false});  // republished: no duplicate
  cluster.run();
  EXPECT_EQ(shard.object_locations(obj), (std::vector<Rank>{Rank{1}, Rank{3}}));
  EXPECT_EQ(shard.object_bytes(obj), 4096u);
  EXPECT_EQ(cluster.shard(1 - home).num_objects(), 0u);

  cluster.client(2).query_object(obj);
  cluster.client(2).query_object(ObjectId::returned_by(kRoot.child(2)));
  cluster.run(false);
  auto info = cluster.take_as<ObjectInfoReply>(2);
  ASSERT_EQ(info.size(), 2u);
  if (info[0].id != obj) std::swap(info[0], info[1]);
  EXPECT_EQ(info[0], (ObjectInfoReply{obj, {Rank{1}, Rank{3}}, 4096, true}));
  EXPECT_FALSE(info[1].found);

  // Withdrawing every location keeps the entry: the object is lost, not freed.
  cluster.client(1).add_object({obj, Rank{1}, 4096, true});
  cluster.client(0).add_object({obj, Rank{2}, 4096, true});  // never held there: no-op
  cluster.run();
  EXPECT_EQ(shard.object_locations(obj), std::vector<Rank>{Rank{3}});
  cluster.client(3).add_object({obj, Rank{3}, 4096, true});
  cluster.run();
  EXPECT_TRUE(shard.has_object(obj));
  EXPECT_TRUE(shard.object_locations(obj).empty());
  EXPECT_NE(shard.task(producer), nullptr);

  // Forget drops the entry and the producer's lineage.
  cluster.client(0).forget(obj);
  cluster.run();
  EXPECT_FALSE(shard.has_object(obj));
  EXPECT_EQ(shard.task(producer), nullptr);
  EXPECT_EQ(shard.object_bytes(obj), std::nullopt);

  // Forget of an object that still has holders drops it at once.
  const TaskId producer2 = kRoot.child(2);
  const ObjectId obj2 = ObjectId::returned_by(producer2);
  cluster.client(0).add_lineage(lineage(producer2, 0));
  cluster.client(2).add_object({obj2, Rank{2}, 8, false});
  cluster.run();
  cluster.client(0).forget(obj2);
  cluster.run();
  const int home2 = cluster.client(0).shard_for(obj2);
  EXPECT_FALSE(cluster.shard(home2).has_object(obj2));
  EXPECT_EQ(cluster.shard(home2).task(producer2), nullptr);
}

TEST(ControlStateTest, NodeStatusKeepsTheHighestSequence) {
  Cluster cluster(4, {Rank{0}, Rank{2}});
  ControlShard& shard = cluster.shard(cluster.client(0).shard_for(Rank{1}));
  cluster.client(1).set_node_status(status(1, 5, 3));
  cluster.client(1).set_node_status(status(1, 3, 9));  // older: ignored
  cluster.run();
  ASSERT_NE(shard.node(Rank{1}), nullptr);
  EXPECT_EQ(*shard.node(Rank{1}), status(1, 5, 3));
  cluster.client(1).set_node_status(status(1, 5, 7));  // same sequence: ignored
  cluster.run();
  EXPECT_EQ(shard.node(Rank{1})->queued, 3u);
  NodeStatus dead = status(1, 6, 0);
  dead.alive = false;
  cluster.client(0).set_node_status(dead);  // anyone may report it (failure detector)
  cluster.run();
  EXPECT_EQ(*shard.node(Rank{1}), dead);
  EXPECT_EQ(shard.stats().stale_heartbeats, 2u);
  EXPECT_EQ(shard.node(Rank{0}), nullptr);
}

TEST(ControlStateTest, FunctionsByIdAndByRank) {
  Cluster cluster(4, {Rank{0}, Rank{2}});
  const std::vector<std::string> names = {"add", "mul", "train_step", "rollout"};
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i <= r; ++i) {
      const std::string& n = names[static_cast<std::size_t>(i)];
      cluster.client(r).add_function({fid(n), n, Rank{r}});
    }
  }
  cluster.run();
  for (int i = 0; i < 4; ++i) {
    const std::string& n = names[static_cast<std::size_t>(i)];
    ControlShard& home = cluster.shard(cluster.client(0).shard_for(fid(n)));
    ASSERT_NE(home.function_name(fid(n)), nullptr);
    EXPECT_EQ(*home.function_name(fid(n)), n);
    std::vector<Rank> expect;
    for (int r = i; r < 4; ++r) expect.push_back(Rank{r});
    EXPECT_EQ(home.function_ranks(fid(n)), expect);
  }
  std::size_t on_rank3 = 0;
  for (int s = 0; s < 2; ++s) on_rank3 += cluster.shard(s).functions_on(Rank{3}).size();
  EXPECT_EQ(on_rank3, 4u);
  EXPECT_EQ(cluster.shard(0).num_functions() + cluster.shard(1).num_functions(), 4u);

  // Another name under a taken id (a hash collision) does not overwrite it.
  cluster.client(1).add_function({fid("add"), "not_add", Rank{1}});
  cluster.run();
  cluster.client(2).query_function(fid("mul"));
  cluster.client(2).query_function(fid("missing"));
  cluster.run(false);
  ControlShard& add_home = cluster.shard(cluster.client(0).shard_for(fid("add")));
  EXPECT_EQ(*add_home.function_name(fid("add")), "add");
  EXPECT_EQ(add_home.stats().function_conflicts, 1u);
  auto replies = cluster.take_as<FunctionInfoReply>(2);
  ASSERT_EQ(replies.size(), 2u);
  if (!replies[0].found) std::swap(replies[0], replies[1]);
  EXPECT_EQ(replies[0], (FunctionInfoReply{fid("mul"), "mul", {Rank{1}, Rank{2}, Rank{3}}, true}));
  EXPECT_EQ(replies[1], (FunctionInfoReply{fid("missing"), "", {}, false}));
}

// ---------------------------------------------------------------------------
// Publish/subscribe.

TEST(ControlStateTest, ObjectSubscriptionIsAnsweredAtOnceWhenLocated) {
  Cluster cluster(4, {Rank{0}, Rank{2}});
  const ObjectId obj = ObjectId::put_by(kRoot, 1);
  cluster.client(1).add_object({obj, Rank{1}, 100, false});
  cluster.client(2).add_object({obj, Rank{2}, 100, false});
  cluster.run();
  cluster.client(3).subscribe(Channel::for_object(obj));
  cluster.run(false);
  auto located = cluster.take_as<ObjectLocated>(3);
  ASSERT_EQ(located.size(), 2u);  // every current location, in one message
  EXPECT_EQ(located[0].record, (ObjectRecord{obj, Rank{1}, 100, false}));
  EXPECT_EQ(located[1].record, (ObjectRecord{obj, Rank{2}, 100, false}));
  // Nothing is kept: a later copy is not announced.
  ControlShard& home = cluster.shard(cluster.client(0).shard_for(obj));
  EXPECT_EQ(home.num_object_subscriptions(), 0u);
  cluster.client(0).add_object({obj, Rank{0}, 100, false});
  cluster.run();
  EXPECT_TRUE(cluster.take(3).empty());
}

TEST(ControlStateTest, ObjectSubscriptionIsOneShotOnArrival) {
  Cluster cluster(4, {Rank{0}, Rank{2}});
  const ObjectId obj = ObjectId::returned_by(kRoot.child(9));
  ControlShard& home = cluster.shard(cluster.client(0).shard_for(obj));
  cluster.client(1).subscribe(Channel::for_object(obj));
  cluster.client(1).subscribe(Channel::for_object(obj));  // twice: notified once
  cluster.client(3).subscribe(Channel::for_object(obj));
  cluster.run(false);
  EXPECT_TRUE(cluster.take(1).empty());
  EXPECT_EQ(home.num_object_subscriptions(), 2u);

  cluster.client(2).add_object({obj, Rank{2}, 77, false});
  cluster.run();
  for (int r : {1, 3}) {
    auto located = cluster.take_as<ObjectLocated>(r);
    ASSERT_EQ(located.size(), 1u) << "rank " << r;
    EXPECT_EQ(located[0].record, (ObjectRecord{obj, Rank{2}, 77, false}));
  }
  EXPECT_EQ(home.num_object_subscriptions(), 0u);
  cluster.client(0).add_object({obj, Rank{0}, 77, false});
  cluster.run();
  EXPECT_TRUE(cluster.take(1).empty());
  EXPECT_TRUE(cluster.take(3).empty());
}

TEST(ControlStateTest, ObjectSubscriptionCancelledByUnsubscribeOrForget) {
  Cluster cluster(4, {Rank{0}, Rank{2}});
  const ObjectId a = ObjectId::put_by(kRoot, 10);
  const ObjectId b = ObjectId::put_by(kRoot, 11);
  cluster.client(1).subscribe(Channel::for_object(a));
  cluster.client(1).subscribe(Channel::for_object(b));
  cluster.client(3).subscribe(Channel::for_object(b));
  cluster.run(false);
  cluster.client(1).unsubscribe(Channel::for_object(a));
  cluster.client(0).forget(b);
  cluster.run();
  EXPECT_EQ(cluster.shard(0).num_object_subscriptions() + cluster.shard(1).num_object_subscriptions(), 0u);
  cluster.client(2).add_object({a, Rank{2}, 1, false});
  cluster.client(2).add_object({b, Rank{2}, 1, false});
  cluster.run();
  EXPECT_TRUE(cluster.take(1).empty());
  EXPECT_TRUE(cluster.take(3).empty());
}

TEST(ControlStateTest, NodesChannelSendsTheCurrentSetThenUpdates) {
  Cluster cluster(4, {Rank{0}, Rank{2}});
  for (int r = 0; r < 4; ++r) cluster.client(r).set_node_status(status(r, 1));
  cluster.run();
  cluster.client(1).subscribe(Channel::nodes());
  cluster.run(false);
  auto initial = cluster.take_as<NodeChanged>(1);
  ASSERT_EQ(initial.size(), 4u);
  std::sort(initial.begin(), initial.end(), [](auto& x, auto& y) { return x.status.rank < y.status.rank; });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(initial[static_cast<std::size_t>(r)].status, status(r, 1));

  cluster.client(2).set_node_status(status(2, 2, 5));
  cluster.client(3).set_node_status(status(3, 1, 9));  // stale: not published
  cluster.run();
  auto updates = cluster.take_as<NodeChanged>(1);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].status, status(2, 2, 5));
  EXPECT_TRUE(cluster.take(0).empty());  // not a subscriber

  // Persistent until unsubscribed.
  cluster.client(2).set_node_status(status(2, 3));
  cluster.run();
  EXPECT_EQ(cluster.take_as<NodeChanged>(1).size(), 1u);
  cluster.client(1).unsubscribe(Channel::nodes());
  cluster.run(false);
  cluster.client(2).set_node_status(status(2, 4));
  cluster.run();
  EXPECT_TRUE(cluster.take(1).empty());
  EXPECT_TRUE(cluster.shard(0).node_subscribers().empty());
  EXPECT_TRUE(cluster.shard(1).node_subscribers().empty());
}

TEST(ControlStateTest, AShardMovesToALiveRankAndDeadSubscribersAreDropped) {
  Cluster cluster(4, {Rank{0}, Rank{2}});
  cluster.client(1).subscribe(Channel::nodes());
  cluster.client(3).subscribe(Channel::nodes());
  for (int r = 0; r < 4; ++r) cluster.client(r).set_node_status(status(r, 1));
  cluster.run();
  (void)cluster.take(1);
  (void)cluster.take(3);
  // Rank 2 dies: shard 1 moves to rank 3, sealed batches included, and the
  // subscriber subscribes there again.
  cluster.client(1).set_node_status(status(1, 2));  // batched before the move
  cluster.move_shard(1, 3);
  cluster.shard(0).drop_subscriber(Rank{3});
  EXPECT_EQ(cluster.shard(0).node_subscribers(), std::vector<Rank>{Rank{1}});
  cluster.client(1).subscribe_at(1, Channel::nodes());
  cluster.run(false);
  cluster.client(0).set_node_status(status(0, 2));
  cluster.client(2).set_node_status(status(2, 2));
  cluster.run();
  // Rank 1 hears every change, from the moved shard too; the dropped rank 3 hears
  // nothing from shard 0.
  auto heard = cluster.take_as<NodeChanged>(1);
  std::set<int> ranks;
  for (auto& n : heard) ranks.insert(n.status.rank.value);
  EXPECT_TRUE(ranks.count(0) && ranks.count(1) && ranks.count(2));
  std::size_t on_moved = 0;  // statuses sent after the move that belong to shard 1
  for (int r : {0, 1, 2}) on_moved += cluster.client(0).shard_for(Rank{r}) == 1 ? 1 : 0;
  ASSERT_GT(on_moved, 0u) << "the test needs some status on shard 1";
  EXPECT_EQ(cluster.shard(1).num_nodes(), on_moved) << "the moved shard starts empty, then fills";
}

// ---------------------------------------------------------------------------
// Batching.

TEST(ControlStateTest, BatchWaitsForMaxDelayUnlessForced) {
  ControlClient client(Rank{1}, {Rank{0}}, {.max_batch_bytes = 64 << 10, .max_delay = 2ms});
  const Clock::time_point before = Clock::now();
  for (std::uint64_t i = 0; i < 50; ++i) client.add_lineage(lineage(kRoot.child(i), 1));
  const Clock::time_point after = Clock::now();

  EXPECT_FALSE(client.pending_due());
  ASSERT_TRUE(client.next_deadline().has_value());
  EXPECT_GE(*client.next_deadline(), before + 2ms);
  EXPECT_LE(*client.next_deadline(), after + 2ms);
  EXPECT_TRUE(client.flush(before + 1ms).empty());
  EXPECT_TRUE(client.flush(before).empty());

  std::vector<Outgoing> out = client.flush(after + 2ms);
  ASSERT_EQ(out.size(), 1u);  // one message carries all 50 records
  const std::size_t first_bytes = out[0].payload.size();
  auto h = brisk::parse_control_header(out[0].payload);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->count, 50u);
  EXPECT_EQ(out[0].to, Rank{0});
  EXPECT_TRUE(client.empty());
  EXPECT_EQ(client.next_deadline(), std::nullopt);
  EXPECT_TRUE(client.flush(after + 1h, true).empty());

  client.add_event({Rank{1}, 5, 1, 100, "f"});
  EXPECT_TRUE(client.flush(Clock::time_point{}).empty());
  out = client.flush(Clock::time_point{}, /*force=*/true);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(client.stats().records_written, 51u);
  EXPECT_EQ(client.stats().batches_sent, 2u);
  EXPECT_EQ(client.stats().bytes_sent, first_bytes + out[0].payload.size());
}

TEST(ControlStateTest, SubscriptionsAndQueriesAreSentAtTheNextFlush) {
  ControlClient client(Rank{1}, {Rank{0}, Rank{2}});
  const Clock::time_point t = Clock::now();
  const ObjectId obj = ObjectId::put_by(kRoot, 3);
  client.add_object({obj, Rank{1}, 10, false});  // same shard as the subscription
  client.add_lineage(lineage(kRoot.child(1), 1));
  ASSERT_TRUE(client.next_deadline().has_value());
  EXPECT_GT(*client.next_deadline(), t);
  client.subscribe(Channel::for_object(obj));
  EXPECT_TRUE(client.pending_due());
  EXPECT_EQ(client.next_deadline(), Clock::time_point::min());
  std::vector<Outgoing> out = client.flush(t - 1h);  // no batch is old, one is urgent
  const int urgent_shard = client.shard_for(obj);
  ASSERT_GE(out.size(), 1u);
  auto h = brisk::parse_control_header(out[0].payload);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->shard, urgent_shard);
  // The earlier write to that shard rides along, ordered before the subscription.
  EXPECT_EQ(h->count, client.shard_for(kRoot.child(1)) == urgent_shard ? 3u : 2u);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_FALSE(client.pending_due());
  EXPECT_EQ(client.empty(), client.shard_for(kRoot.child(1)) == urgent_shard);
}

TEST(ControlStateTest, BatchesRespectTheByteCap) {
  constexpr std::size_t kCap = 64 << 10;
  ControlClient client(Rank{3}, {Rank{0}, Rank{2}}, {.max_batch_bytes = kCap, .max_delay = 1h});
  ControlShard shards[2] = {ControlShard(0, 2), ControlShard(1, 2)};
  constexpr std::uint64_t kRecords = 20000;
  std::size_t record_bytes = 0;
  for (std::uint64_t i = 0; i < kRecords; ++i) {
    LineageRecord r = lineage(kRoot.child(i), 3);
    record_bytes = std::max(record_bytes, 1 + brisk::byte_size(r));
    client.add_lineage(r);
  }
  // Full batches are due at once; the rest wait for max_delay.
  EXPECT_TRUE(client.pending_due());
  std::vector<Outgoing> full = client.flush(Clock::now());
  ASSERT_GE(full.size(), 10u);
  std::uint64_t delivered = 0;
  auto apply = [&](const std::vector<Outgoing>& msgs, bool expect_full) {
    for (const Outgoing& m : msgs) {
      EXPECT_LE(m.payload.size(), kCap);
      if (expect_full) {
        EXPECT_GT(m.payload.size() + record_bytes, kCap);
      }
      auto h = brisk::parse_control_header(m.payload);
      ASSERT_TRUE(h.ok());
      delivered += h->count;
      auto replies = shards[h->shard].handle(Rank{3}, m.payload);
      ASSERT_TRUE(replies.ok()) << replies.status().to_string();
      EXPECT_TRUE(replies->empty());
    }
  };
  apply(full, true);
  EXPECT_FALSE(client.pending_due());
  std::vector<Outgoing> rest = client.flush(Clock::now(), true);
  EXPECT_LE(rest.size(), 2u);
  apply(rest, false);
  EXPECT_EQ(delivered, kRecords);
  EXPECT_EQ(shards[0].num_tasks() + shards[1].num_tasks(), kRecords);
  EXPECT_EQ(client.stats().records_written, kRecords);
  EXPECT_EQ(client.stats().batches_sent, full.size() + rest.size());
  std::uint64_t bytes = 0;
  for (auto* v : {&full, &rest}) {
    for (const Outgoing& m : *v) bytes += m.payload.size();
  }
  EXPECT_EQ(client.stats().bytes_sent, bytes);
}

TEST(ControlStateTest, ARecordLargerThanTheCapTravelsAlone) {
  ControlClient client(Rank{0}, {Rank{0}}, {.max_batch_bytes = 256, .max_delay = 1h});
  ControlShard shard(0, 1);
  client.add_lineage(lineage(kRoot.child(1), 0));
  LineageRecord big = lineage(kRoot.child(2), 0);
  big.args.assign(64, ObjectId::put_by(kRoot, 1));  // > 1 KiB
  client.add_lineage(big);
  client.add_lineage(lineage(kRoot.child(3), 0));
  std::vector<Outgoing> out = client.flush(Clock::now(), true);
  ASSERT_EQ(out.size(), 3u);
  std::vector<std::uint32_t> counts;
  for (const Outgoing& m : out) {
    counts.push_back(brisk::parse_control_header(m.payload)->count);
    ASSERT_TRUE(shard.handle(Rank{0}, m.payload).ok());
  }
  EXPECT_EQ(counts, (std::vector<std::uint32_t>{1, 1, 1}));
  EXPECT_LE(out[0].payload.size(), 256u);
  EXPECT_GT(out[1].payload.size(), 256u);
  ASSERT_NE(shard.task(kRoot.child(2)), nullptr);
  EXPECT_EQ(*shard.task(kRoot.child(2)), big);
  EXPECT_EQ(shard.num_tasks(), 3u);
}

// ---------------------------------------------------------------------------
// Event ring.

TEST(ControlStateTest, EventRingDropsTheOldestAndCounts) {
  ControlClient client(Rank{2}, {Rank{0}});
  ControlShard shard(0, 1, {.event_capacity = 8});
  for (std::uint64_t i = 0; i < 20; ++i) {
    client.add_event({Rank{2}, i, static_cast<std::uint8_t>(i % 4), 1000 + i, "task" + std::to_string(i)});
    if (i % 7 == 6) {
      for (const Outgoing& m : client.flush(Clock::now(), true)) ASSERT_TRUE(shard.handle(Rank{2}, m.payload).ok());
    }
  }
  for (const Outgoing& m : client.flush(Clock::now(), true)) ASSERT_TRUE(shard.handle(Rank{2}, m.payload).ok());
  EXPECT_EQ(shard.num_events(), 8u);
  EXPECT_EQ(shard.dropped_events(), 12u);
  std::vector<EventRecord> events = shard.events();
  ASSERT_EQ(events.size(), 8u);
  for (std::size_t k = 0; k < 8; ++k) {
    const std::uint64_t i = 12 + k;
    EXPECT_EQ(events[k], (EventRecord{Rank{2}, i, static_cast<std::uint8_t>(i % 4), 1000 + i,
                                      "task" + std::to_string(i)}));
  }

  ControlShard none(0, 1, {.event_capacity = 0});
  client.add_event({Rank{2}, 1, 0, 1, "x"});
  for (const Outgoing& m : client.flush(Clock::now(), true)) ASSERT_TRUE(none.handle(Rank{2}, m.payload).ok());
  EXPECT_EQ(none.num_events(), 0u);
  EXPECT_EQ(none.dropped_events(), 1u);
}

// ---------------------------------------------------------------------------
// Malformed messages.

// Everything a test can observe of one shard's tables.
struct Snapshot {
  std::size_t tasks, objects, functions, nodes, events, subscriptions;
  std::uint64_t dropped, records, messages;
  std::vector<std::optional<LineageRecord>> known_tasks;
  std::vector<std::vector<Rank>> known_locations;
  std::vector<std::vector<Rank>> known_functions;
  std::vector<NodeStatus> all_nodes;
  std::vector<EventRecord> all_events;
  std::vector<Rank> node_subscribers;
  bool operator==(const Snapshot&) const = default;
};

class MalformedTest : public ::testing::Test {
 protected:
  static constexpr TaskId t1 = kRoot.child(1), t2 = kRoot.child(2), t3 = kRoot.child(3);
  static constexpr ObjectId o1 = ObjectId::returned_by(t1), o2 = ObjectId::put_by(kRoot, 2),
                            o3 = ObjectId::returned_by(t3), o4 = ObjectId::put_by(kRoot, 4);

  void SetUp() override {
    // The shard's state before the messages under test.
    writer_.add_lineage(lineage(t1, 1, 1));
    writer_.add_lineage(lineage(t3, 1, 1));
    writer_.add_object({o1, Rank{1}, 64, false});
    writer_.add_object({o1, Rank{2}, 64, false});
    writer_.add_object({o3, Rank{2}, 8, false});
    writer_.add_function({fid("f"), "f", Rank{1}});
    writer_.set_node_status(status(0, 1));
    writer_.add_event({Rank{1}, 1, 0, 10, "f"});
    writer_.subscribe(Channel::for_object(o2));
    apply_all(writer_);
    before_ = snapshot();
  }

  void apply_all(ControlClient& c) {
    for (const Outgoing& m : c.flush(Clock::now(), true)) ASSERT_TRUE(shard_.handle(c.self(), m.payload).ok());
  }

  // One message that touches every table if any part of it were applied.
  std::vector<std::byte> rich_message() {
    ControlClient c(Rank{3}, {Rank{0}});
    c.add_lineage(lineage(t1, 1, 3));           // replaces
    c.add_lineage(lineage(t2, 3));              // new
    c.add_object({o1, Rank{1}, 64, true});      // withdraws
    c.add_object({o2, Rank{3}, 5, false});      // new, notifies the subscriber
    c.forget(o3);                               // drops object and lineage
    c.add_function({fid("g"), "g", Rank{3}});
    c.add_function({fid("f"), "f", Rank{3}});
    c.set_node_status(status(0, 2, 4));
    c.set_node_status(status(3, 1));
    c.add_event({Rank{3}, 2, 1, 20, "g"});
    c.subscribe(Channel::nodes());
    c.subscribe(Channel::for_object(o4));
    c.unsubscribe(Channel::for_object(o2));
    c.query_function(fid("f"));
    c.query_object(o1);
    c.query_lineage(t1);
    std::vector<Outgoing> out = c.flush(Clock::now(), true);
    EXPECT_EQ(out.size(), 1u);
    return std::move(out[0].payload);
  }

  Snapshot snapshot() const {
    Snapshot s{shard_.num_tasks(), shard_.num_objects(), shard_.num_functions(), shard_.num_nodes(),
               shard_.num_events(), shard_.num_object_subscriptions(), shard_.dropped_events(),
               shard_.stats().records, shard_.stats().messages, {}, {}, {}, shard_.nodes(), shard_.events(),
               shard_.node_subscribers()};
    for (TaskId t : {t1, t2, t3}) {
      const LineageRecord* r = shard_.task(t);
      s.known_tasks.push_back(r ? std::optional<LineageRecord>(*r) : std::nullopt);
    }
    for (ObjectId o : {o1, o2, o3, o4}) s.known_locations.push_back(shard_.object_locations(o));
    for (const char* f : {"f", "g"}) s.known_functions.push_back(shard_.function_ranks(fid(f)));
    return s;
  }

  // handle() must fail, name `what`, and change nothing.
  void expect_rejected(std::span<const std::byte> bytes, const std::string& what = "") {
    auto result = shard_.handle(Rank{3}, bytes);
    ASSERT_FALSE(result.ok()) << "accepted a malformed message of " << bytes.size() << " bytes";
    EXPECT_EQ(result.status().code(), brisk::StatusCode::kInvalidArgument);
    if (!what.empty()) {
      EXPECT_TRUE(contains(result.status().message(), what)) << result.status().message();
    }
    ASSERT_EQ(snapshot(), before_) << "a rejected message changed the tables: " << result.status().message();
  }

  ControlClient writer_{Rank{1}, {Rank{0}}};
  ControlShard shard_{0, 1};
  Snapshot before_;
};

TEST_F(MalformedTest, TheValidMessageChangesEveryTable) {
  std::vector<std::byte> msg = rich_message();
  auto replies = shard_.handle(Rank{3}, msg);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  const Snapshot after = snapshot();
  EXPECT_NE(after.known_tasks, before_.known_tasks);
  EXPECT_NE(after.known_locations, before_.known_locations);
  EXPECT_NE(after.functions, before_.functions);
  EXPECT_NE(after.known_functions, before_.known_functions);
  EXPECT_NE(after.all_nodes, before_.all_nodes);
  EXPECT_NE(after.all_events, before_.all_events);
  EXPECT_NE(after.node_subscribers, before_.node_subscribers);
  EXPECT_EQ(shard_.task(t3), nullptr);
  EXPECT_FALSE(shard_.has_object(o3));
  // Rank 1 (subscribed to o2) and rank 3 (queries, nodes) hear back.
  ASSERT_EQ(replies->size(), 2u);
}

TEST_F(MalformedTest, EveryTruncationIsRejected) {
  const std::vector<std::byte> msg = rich_message();
  for (std::size_t n = 0; n < msg.size(); ++n) {
    SCOPED_TRACE("truncated to " + std::to_string(n) + " bytes");
    expect_rejected(std::span(msg).first(n));
  }
  // And the full message still applies afterwards.
  EXPECT_TRUE(shard_.handle(Rank{3}, msg).ok());
  EXPECT_EQ(shard_.stats().rejected, msg.size());
}

TEST_F(MalformedTest, HeaderErrorsAreNamed) {
  const std::vector<std::byte> msg = rich_message();
  auto patched = [&](std::size_t offset, std::vector<std::uint8_t> bytes) {
    std::vector<std::byte> m = msg;
    std::memcpy(m.data() + offset, bytes.data(), bytes.size());
    return m;
  };
  expect_rejected(patched(0, {0}), "wire version 0, expected 1");
  expect_rejected(patched(0, {2}), "wire version 2");
  expect_rejected(patched(1, {2}), "notifications");
  expect_rejected(patched(1, {9}), "unknown type 9");
  expect_rejected(patched(2, {1, 0}), "names shard 1, out of range for 1 shards");
  expect_rejected(patched(2, {0xff, 0xff}), "shard 65535");
  expect_rejected(patched(4, {0xff, 0xff, 0xff, 0xff}), "claims 4294967295 records");
  expect_rejected(patched(4, {0xff, 0xff, 0xff, 0x0f}), "records but only");
  // Count one too high or one too low.
  const std::uint32_t count = brisk::parse_control_header(msg)->count;
  std::uint32_t more = count + 1, fewer = count - 1;
  std::vector<std::byte> m = msg;
  std::memcpy(m.data() + 4, &more, 4);
  expect_rejected(m, "record 16 of 17");
  std::memcpy(m.data() + 4, &fewer, 4);
  expect_rejected(m, "trailing bytes after 15 records");
  // Bytes after the last record.
  m = msg;
  m.push_back(std::byte{0});
  expect_rejected(m, "1 trailing bytes");
  // The first record's tag.
  expect_rejected(patched(8, {0}), "unknown record tag 0");
  expect_rejected(patched(8, {32}), "unknown record tag 32");
}

TEST_F(MalformedTest, RecordErrorsAreNamed) {
  auto one = [](auto fill) {
    ControlClient c(Rank{3}, {Rank{0}});
    fill(c);
    std::vector<Outgoing> out = c.flush(Clock::now(), true);
    return std::move(out.at(0).payload);
  };
  // A bad bool (ObjectRecord::removed is the body's last byte).
  std::vector<std::byte> m = one([](ControlClient& c) { c.add_object({o2, Rank{3}, 5, false}); });
  m.back() = std::byte{2};
  expect_rejected(m, "bad bool byte 2");
  // A bad channel kind (the byte after the tag).
  m = one([](ControlClient& c) { c.subscribe(Channel::for_object(o2)); });
  m[9] = std::byte{7};
  expect_rejected(m, "bad channel kind 7");
  // A negative rank.
  m = one([](ControlClient& c) { c.add_object({o2, Rank{-4}, 5, false}); });
  expect_rejected(m, "location is a negative rank (-4)");
  // A string length no buffer could hold (the function name's u64 length).
  m = one([](ControlClient& c) { c.add_function({fid("g"), "g", Rank{3}}); });
  const std::uint64_t huge = ~std::uint64_t{0};
  std::memcpy(m.data() + 8 + 1 + 8, &huge, 8);
  expect_rejected(m, "record 0 of 1 (function) is malformed");
  // A huge args count inside a lineage record.
  m = one([](ControlClient& c) { c.add_lineage(lineage(t2, 3)); });
  std::memcpy(m.data() + 8 + 1 + 16 + 16 + 8 + 4 + 4, &huge, 8);
  expect_rejected(m, "(lineage) is malformed");
}

TEST(ControlStateMalformedTest, RecordsForAnotherShardAreRefused) {
  // A batch for shard 1 delivered to shard 0: refused for its header, and, with the
  // header's index rewritten, for its record.
  ControlClient c(Rank{1}, {Rank{0}, Rank{0}});
  TaskId t = kRoot.child(0);
  while (c.shard_for(t) != 1) t = t.child(1);
  c.add_lineage(lineage(t, 1));
  std::vector<Outgoing> out = c.flush(Clock::now(), true);
  ASSERT_EQ(out.size(), 1u);
  ControlShard shard0(0, 2), shard1(1, 2);
  auto wrong_index = shard0.handle(Rank{1}, out[0].payload);
  ASSERT_FALSE(wrong_index.ok());
  EXPECT_TRUE(contains(wrong_index.status().message(), "addressed to shard 1")) << wrong_index.status().message();
  out[0].payload[2] = std::byte{0};
  auto misrouted = shard0.handle(Rank{1}, out[0].payload);
  ASSERT_FALSE(misrouted.ok());
  EXPECT_TRUE(contains(misrouted.status().message(), "its task id belongs to shard 1"))
      << misrouted.status().message();
  EXPECT_EQ(shard0.num_tasks(), 0u);
  EXPECT_EQ(shard0.stats().rejected, 2u);
  out[0].payload[2] = std::byte{1};
  EXPECT_TRUE(shard1.handle(Rank{1}, out[0].payload).ok());
  EXPECT_NE(shard1.task(t), nullptr);
}

TEST_F(MalformedTest, RandomAndMutatedBytesNeverCrashOrPartiallyApply) {
  std::mt19937_64 rng(20240601);
  // Random bytes: the version byte is wrong (or the header short) nearly always.
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::byte> m(rng() % 200);
    for (auto& b : m) b = static_cast<std::byte>(rng());
    if (!m.empty() && m[0] == std::byte{brisk::kControlWireVersion}) m[0] = std::byte{0x55};
    expect_rejected(m);
  }
  // Random bodies under a valid header, and valid messages with bytes flipped:
  // a message either applies whole or changes nothing.
  const std::vector<std::byte> valid = rich_message();
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::byte> m;
    if (trial % 2 == 0) {
      m.assign(valid.begin(), valid.begin() + 8);
      const std::uint32_t count = 1 + static_cast<std::uint32_t>(rng() % 4);
      std::memcpy(m.data() + 4, &count, 4);
      m.resize(8 + rng() % 300);
      for (std::size_t i = 8; i < m.size(); ++i) m[i] = static_cast<std::byte>(rng());
    } else {
      m = valid;
      for (int flips = 1 + static_cast<int>(rng() % 3); flips > 0; --flips) {
        m[8 + rng() % (m.size() - 8)] ^= static_cast<std::byte>(1 + rng() % 255);
      }
    }
    const Snapshot before = snapshot();
    auto result = shard_.handle(Rank{3}, m);
    if (!result.ok()) {
      ++rejected;
      ASSERT_EQ(snapshot(), before) << result.status().message();
    }
  }
  EXPECT_GT(rejected, 1000);
}

TEST(ControlStateMalformedTest, ClientRefusesBadNotifications) {
  // A real notifications message: rank 1 queries a function on shard 1 (on rank 2).
  const std::vector<Rank> hosts = {Rank{0}, Rank{2}};
  ControlClient client(Rank{1}, hosts);
  ControlShard shard(1, 2);
  std::string name = "g";
  while (client.shard_for(fid(name)) != 1) name += "g";
  client.add_function({fid(name), name, Rank{1}});
  client.query_function(fid(name));
  client.query_lineage([&] {
    TaskId t = kRoot.child(0);
    while (client.shard_for(t) != 1) t = t.child(1);
    return t;
  }());
  std::vector<Outgoing> out = client.flush(Clock::now());
  ASSERT_EQ(out.size(), 1u);
  auto replies = shard.handle(Rank{1}, out[0].payload);
  ASSERT_TRUE(replies.ok()) << replies.status().to_string();
  ASSERT_EQ(replies->size(), 1u);
  const std::vector<std::byte> msg = (*replies)[0].payload;

  auto ok = client.handle(Rank{2}, msg);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ(std::get<FunctionInfoReply>((*ok)[0]), (FunctionInfoReply{fid(name), name, {Rank{1}}, true}));
  EXPECT_FALSE(std::get<LineageReply>((*ok)[1]).record.has_value());
  EXPECT_EQ(client.stats().notifications, 2u);

  for (std::size_t n = 0; n < msg.size(); ++n) {
    auto r = client.handle(Rank{2}, std::span(msg).first(n));
    ASSERT_FALSE(r.ok()) << "accepted " << n << " of " << msg.size() << " bytes";
  }
  auto expect_error = [&](Rank from, std::vector<std::byte> m, const std::string& what) {
    auto r = client.handle(from, m);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.status().message(), what)) << r.status().message();
  };
  expect_error(Rank{0}, msg, "from rank 0 names shard 1, which lives on rank 2");
  std::vector<std::byte> m = msg;
  m[0] = std::byte{3};
  expect_error(Rank{2}, m, "wire version 3");
  m = msg;
  m[1] = std::byte{1};
  expect_error(Rank{2}, m, "got a shard batch");
  m = msg;
  m[2] = std::byte{2};
  expect_error(Rank{2}, m, "shard 2, out of range for 2 shards");
  m = msg;
  m[4] = m[5] = m[6] = m[7] = std::byte{0xff};
  expect_error(Rank{2}, m, "claims 4294967295 records");
  m = msg;
  m[8] = std::byte{1};
  expect_error(Rank{2}, m, "unknown tag 1");
  m = msg;
  m.push_back(std::byte{9});
  expect_error(Rank{2}, m, "1 trailing bytes");
  EXPECT_EQ(client.stats().notifications, 2u);
}

}  // namespace
