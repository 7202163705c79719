// brisk/scheduler/control_state.hpp — the sharded control state: lineage, object
// locations, functions, node heartbeats and the event log, with publish/subscribe.
//
// The control state is split by a stable hash of each key into S shards. Each shard
// index is held by one ControlShard on some rank (a rank may host several indices);
// every rank has one ControlClient that batches its writes per shard and decodes the
// publications and query replies that come back. Both halves are plain libraries:
// no MPI, no threads, no clock reads except where stated. The runtime calls them
// from the rank's progress thread and sends the bytes they return through the
// Transport (as FrameKind::kControl frames).
//
//   rank r:  ControlClient ──flush()──> Outgoing{shard rank, batch} ──transport──┐
//            ControlClient <──handle()── Outgoing{r, notifications} <──┐         │
//   rank s:                              ControlShard::handle(r, batch) ◄────────┘
//
// Which shard holds a key (control_shard_for below):
//   TaskId, ObjectId   mix64(hi ^ mix64(lo)) % S — a task and the object it returns
//                      (ObjectId::returned_by: same hi/lo) live on the same shard, so
//                      a ForgetRecord drops both without cross-shard traffic;
//   FunctionId         value % S (the value is already an FNV-1a hash);
//   node (Rank)        rank % S;
//   EventRecord        mix64(task) % S.
// A node subscription goes to every shard; each sends the statuses it holds.
//
// Wire layout (every integer little-endian; record bodies use brisk serialization,
// see serialize.hpp, so lengths inside records are u64):
//
//   offset 0  u8   version (kControlWireVersion); anything else is refused
//          1  u8   type (ControlMessageType): kShardBatch client -> shard,
//                  kNotifications shard -> client
//          2  u16  shard index: the destination shard of a kShardBatch (its host
//                  routes on it); the sending shard of a kNotifications
//          4  u32  record count
//          8       count records, each a u8 tag (ControlRecordTag) then its body:
//
//   kShardBatch records           body
//     kLineage        1           LineageRecord
//     kObject         2           ObjectRecord
//     kForget         3           ForgetRecord
//     kFunction       4           FunctionRecord
//     kNodeStatus     5           NodeStatus
//     kEvent          6           EventRecord
//     kSubscribe      7           Channel          (subscriber: the sending rank)
//     kUnsubscribe    8           Channel
//     kQueryFunction  9           FunctionId       (reply to: the sending rank)
//     kQueryObject    10          ObjectId
//     kQueryLineage   11          TaskId
//   kNotifications records
//     kObjectLocated  32          ObjectLocated
//     kNodeChanged    33          NodeChanged
//     kFunctionInfo   34          FunctionInfoReply
//     kObjectInfo     35          ObjectInfoReply
//     kLineageReply   36          LineageReply
//
// No bytes may follow the last record. Records of one batch are applied in order.
// A message is checked completely before anything in it is applied: a bad version,
// type, shard index, tag, count, body, trailing bytes, or a record whose key hashes
// to another shard make handle() return kInvalidArgument naming the problem, and
// the tables are left exactly as they were.
//
// Thread safety: neither class is thread-safe; each is used by one thread at a time
// (the progress thread of its rank).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "brisk/core/ids.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/core/status.hpp"

namespace brisk {

// ---------------------------------------------------------------------------
// Records: what clients write. Plain structs, serialized with brisk's archive.

// One per submitted task. A later record for the same task replaces the earlier one
// (the executor is known only once the task is placed; a retry bumps attempt).
struct LineageRecord {
  TaskId task;
  TaskId parent;
  FunctionId function;
  Rank owner;                  // the rank that holds the task's future
  Rank executor;               // the rank that runs (or ran) it
  std::vector<ObjectId> args;  // argument objects, in parameter order
  std::uint32_t attempt = 0;

  template <class A>
  void serialize(A& ar) {
    ar(task, parent, function, owner, executor, args, attempt);
  }
  friend bool operator==(const LineageRecord&, const LineageRecord&) = default;
};

// One copy of an object: `location` holds `bytes` bytes of it. removed = true
// withdraws that location. An object may have several locations (cached copies).
struct ObjectRecord {
  ObjectId id;
  Rank location;
  std::uint64_t bytes = 0;
  bool removed = false;

  template <class A>
  void serialize(A& ar) {
    ar(id, location, bytes, removed);
  }
  friend bool operator==(const ObjectRecord&, const ObjectRecord&) = default;
};

// The object was freed everywhere: its object entry and the lineage of the task
// that returned it (TaskId with the object's hi/lo) are dropped.
struct ForgetRecord {
  ObjectId object;

  template <class A>
  void serialize(A& ar) {
    ar(object);
  }
  friend bool operator==(const ForgetRecord&, const ForgetRecord&) = default;
};

// `rank` has the function `name` (id = FunctionId::from_name(name)) registered.
struct FunctionRecord {
  FunctionId id;
  std::string name;
  Rank rank;

  template <class A>
  void serialize(A& ar) {
    ar(id, name, rank);
  }
  friend bool operator==(const FunctionRecord&, const FunctionRecord&) = default;
};

// A node's heartbeat. A shard keeps, per rank, the status with the highest
// sequence it has seen; older or equal sequences are ignored.
struct NodeStatus {
  Rank rank;
  std::map<std::string, double> total;      // resource capacity ("CPU", "GPU", ...)
  std::map<std::string, double> available;  // what is free now
  std::uint32_t queued = 0;
  std::uint32_t running = 0;
  std::uint64_t sequence = 0;
  bool alive = true;
  // Tasks this node has received from global schedulers so far: a scheduler that
  // knows how many it sent counts the ones still in flight.
  std::uint64_t received = 0;

  template <class A>
  void serialize(A& ar) {
    ar(rank, total, available, queued, running, sequence, alive, received);
  }
  friend bool operator==(const NodeStatus&, const NodeStatus&) = default;
};

// One task lifecycle event (kind: an EventKind value from core/event_log.hpp).
struct EventRecord {
  Rank rank;
  std::uint64_t task = 0;  // low 64 bits of the task id
  std::uint8_t kind = 0;
  std::uint64_t time_ns = 0;
  std::string name;

  template <class A>
  void serialize(A& ar) {
    ar(rank, task, kind, time_ns, name);
  }
  friend bool operator==(const EventRecord&, const EventRecord&) = default;
};

// A publish/subscribe channel: one object's locations, or the node table.
struct Channel {
  enum Kind : std::uint8_t { kObject = 0, kNodes = 1 };
  Kind kind = kObject;
  ObjectId object;  // kObject only; ignored for kNodes

  static Channel for_object(ObjectId id) { return Channel{kObject, id}; }
  static Channel nodes() { return Channel{kNodes, ObjectId{}}; }

  template <class A>
  void serialize(A& ar) {
    auto k = static_cast<std::uint8_t>(kind);
    ar(k, object);
    if constexpr (std::is_same_v<A, Reader>) {
      if (k > kNodes) {
        throw SerializationError("bad channel kind " + std::to_string(k) + " (expected 0 or 1)");
      }
      kind = static_cast<Kind>(k);
    }
  }
  friend bool operator==(const Channel&, const Channel&) = default;
};

// ---------------------------------------------------------------------------
// Notifications: what a shard sends back to a client.

// A new location of a subscribed object.
struct ObjectLocated {
  ObjectRecord record;

  template <class A>
  void serialize(A& ar) {
    ar(record);
  }
  friend bool operator==(const ObjectLocated&, const ObjectLocated&) = default;
};

// An accepted heartbeat (or, on subscription, a current one).
struct NodeChanged {
  NodeStatus status;

  template <class A>
  void serialize(A& ar) {
    ar(status);
  }
  friend bool operator==(const NodeChanged&, const NodeChanged&) = default;
};

struct FunctionInfoReply {
  FunctionId id;
  std::string name;
  std::vector<Rank> ranks;  // ascending
  bool found = false;

  template <class A>
  void serialize(A& ar) {
    ar(id, name, ranks, found);
  }
  friend bool operator==(const FunctionInfoReply&, const FunctionInfoReply&) = default;
};

struct ObjectInfoReply {
  ObjectId id;
  std::vector<Rank> locations;  // in the order they were published
  std::uint64_t bytes = 0;
  bool found = false;  // false: never published, or forgotten

  template <class A>
  void serialize(A& ar) {
    ar(id, locations, bytes, found);
  }
  friend bool operator==(const ObjectInfoReply&, const ObjectInfoReply&) = default;
};

struct LineageReply {
  TaskId task;
  std::optional<LineageRecord> record;  // nullopt: unknown or forgotten

  template <class A>
  void serialize(A& ar) {
    ar(task, record);
  }
  friend bool operator==(const LineageReply&, const LineageReply&) = default;
};

using Notification =
    std::variant<ObjectLocated, NodeChanged, FunctionInfoReply, ObjectInfoReply, LineageReply>;

// A message to hand to the transport.
struct Outgoing {
  Rank to;
  std::vector<std::byte> payload;
};

// ---------------------------------------------------------------------------
// Wire constants and routing.

inline constexpr std::uint8_t kControlWireVersion = 1;
inline constexpr std::size_t kControlHeaderBytes = 8;
// Shard indices are u16 on the wire.
inline constexpr int kMaxControlShards = 65535;

enum class ControlMessageType : std::uint8_t {
  kShardBatch = 1,     // client -> shard: writes, subscriptions, queries
  kNotifications = 2,  // shard -> client: publications and query replies
};

enum class ControlRecordTag : std::uint8_t {
  kLineage = 1,
  kObject = 2,
  kForget = 3,
  kFunction = 4,
  kNodeStatus = 5,
  kEvent = 6,
  kSubscribe = 7,
  kUnsubscribe = 8,
  kQueryFunction = 9,
  kQueryObject = 10,
  kQueryLineage = 11,
  kObjectLocated = 32,
  kNodeChanged = 33,
  kFunctionInfo = 34,
  kObjectInfo = 35,
  kLineageReply = 36,
};

struct ControlHeader {
  ControlMessageType type = ControlMessageType::kShardBatch;
  int shard = 0;
  std::uint32_t count = 0;
};

// Reads and checks the 8-byte header (version, known type). A rank that hosts
// shards and a client uses it to route a kControl payload: kShardBatch to the
// ControlShard with index `shard`, kNotifications to the ControlClient. Checks
// nothing past the header.
StatusOr<ControlHeader> parse_control_header(std::span<const std::byte> payload);

// The shard that holds a key, for `num_shards` >= 1 shards. Stable across ranks,
// runs and platforms.
int control_shard_for(const UniqueId& id, int num_shards) noexcept;  // TaskId, ObjectId
int control_shard_for(FunctionId id, int num_shards) noexcept;
int control_shard_for(Rank node, int num_shards) noexcept;
int control_shard_for_event(std::uint64_t task, int num_shards) noexcept;

// ---------------------------------------------------------------------------
// ControlShard

struct ControlShardConfig {
  // Events kept; beyond it the oldest are dropped (and counted). Storage grows on
  // demand up to this bound. 0 keeps none.
  std::size_t event_capacity = std::size_t{1} << 20;
};

struct ControlShardStats {
  std::uint64_t messages = 0;          // batches applied
  std::uint64_t records = 0;           // records applied
  std::uint64_t rejected = 0;          // malformed messages refused
  std::uint64_t stale_heartbeats = 0;  // NodeStatus ignored for an old sequence
  std::uint64_t function_conflicts = 0;  // FunctionRecord naming an id with another name
  std::uint64_t notifications = 0;     // records sent back to clients
};

// ControlShard
//
// One shard index of the control state: the tables for the keys that hash to it,
// its subscribers, and its share of the event log.
//
// Semantics of the records it applies:
//   * LineageRecord: insert or replace the task's entry.
//   * ObjectRecord: add the location (bytes: the latest record's) or, removed =
//     true, withdraw it. An object whose last location is withdrawn keeps its entry
//     (with no locations: the object is lost and may be rebuilt from lineage) until
//     a ForgetRecord drops it. Withdrawing an unknown location is a no-op. A
//     location published after the ForgetRecord creates a fresh entry; the runtime
//     sends the forget after the holders' withdrawals (or accepts the stale entry).
//   * ForgetRecord: drop the object entry, the lineage entry of the task that
//     returned it, and the object's pending subscriptions.
//   * FunctionRecord: add the rank to the function's set. The first name stays; a
//     record naming the id with another name (an FNV-1a collision) is ignored and
//     counted in stats().function_conflicts.
//   * NodeStatus: kept if newer (higher sequence) than the stored one.
//   * EventRecord: appended to a ring of ControlShardConfig::event_capacity.
// Subscriptions (the subscriber is the sending rank):
//   * object channel: ONE-SHOT. If the object has locations when the subscription
//     arrives, each current location is sent at once (ObjectLocated) and nothing is
//     kept; otherwise the subscriber is notified with the first location published
//     later and then dropped. Subscribing twice before that notifies once.
//     Unsubscribe or a ForgetRecord cancels a pending one.
//   * nodes channel: PERSISTENT until unsubscribed. On subscription the shard sends
//     every status it holds; afterwards every accepted NodeStatus.
// Queries are answered to the sending rank, whatever the outcome (found = false).
//
// Every message handled yields at most one Outgoing per destination rank, with the
// notifications in the order they were produced.
class ControlShard {
 public:
  using Config = ControlShardConfig;

  // Requires 0 <= shard_index < num_shards <= kMaxControlShards.
  ControlShard(int shard_index, int num_shards, Config config = {});

  // Applies one kShardBatch from rank `from` and returns the messages to send.
  // On a malformed message: kInvalidArgument naming what was wrong and where;
  // nothing from the message is applied and nothing is sent.
  StatusOr<std::vector<Outgoing>> handle(Rank from, std::span<const std::byte> payload);

  int shard_index() const noexcept { return index_; }
  int num_shards() const noexcept { return num_shards_; }

  // Read access for tests, the status command and diagnostics.
  const LineageRecord* task(TaskId id) const;
  std::vector<Rank> object_locations(ObjectId id) const;   // empty if unknown
  std::optional<std::uint64_t> object_bytes(ObjectId id) const;  // nullopt if unknown
  bool has_object(ObjectId id) const;
  const std::string* function_name(FunctionId id) const;   // nullptr if unknown
  std::vector<Rank> function_ranks(FunctionId id) const;   // ascending
  std::vector<FunctionId> functions_on(Rank rank) const;   // ascending; O(functions)
  const NodeStatus* node(Rank rank) const;
  std::vector<NodeStatus> nodes() const;                   // by rank
  std::vector<EventRecord> events() const;                 // oldest first
  std::size_t num_tasks() const noexcept { return tasks_.size(); }
  std::size_t num_objects() const noexcept { return objects_.size(); }
  std::size_t num_functions() const noexcept { return functions_.size(); }
  std::size_t num_nodes() const noexcept { return nodes_.size(); }
  std::size_t num_events() const noexcept { return events_.size(); }
  std::uint64_t dropped_events() const noexcept { return dropped_events_; }
  std::size_t num_object_subscriptions() const noexcept;   // pending (object, rank) pairs
  std::vector<Rank> node_subscribers() const { return node_subscribers_; }
  // Rank `dead` died: it is no longer notified of anything.
  void drop_subscriber(Rank dead);
  const ControlShardStats& stats() const noexcept { return stats_; }

 private:
  // A decoded shard-bound record.
  struct QueryFunction { FunctionId id; };
  struct QueryObject { ObjectId id; };
  struct QueryLineage { TaskId id; };
  struct Subscribe { Channel channel; };
  struct Unsubscribe { Channel channel; };
  using Record = std::variant<LineageRecord, ObjectRecord, ForgetRecord, FunctionRecord, NodeStatus,
                              EventRecord, Subscribe, Unsubscribe, QueryFunction, QueryObject,
                              QueryLineage>;
  struct ObjectEntry {
    std::uint64_t bytes = 0;
    std::vector<Rank> locations;
  };
  struct FunctionEntry {
    std::string name;
    std::vector<Rank> ranks;  // ascending
  };
  class Replies;

  Status decode(std::span<const std::byte> payload);
  void apply(Rank from, Record& record, Replies& out);
  void push_event(EventRecord&& event);

  int index_;
  int num_shards_;
  Config config_;

  std::unordered_map<TaskId, LineageRecord> tasks_;
  std::unordered_map<ObjectId, ObjectEntry> objects_;
  std::unordered_map<FunctionId, FunctionEntry> functions_;
  std::unordered_map<int, NodeStatus> nodes_;

  // A ring once full: oldest at events_head_. A deque, so that filling it (up to
  // event_capacity, a million by default) never moves the records already there: a
  // vector's doublings copied all of them and faulted in a new buffer each time, on
  // rank 0's cores, between its tasks.
  std::deque<EventRecord> events_;
  std::size_t events_head_ = 0;
  std::uint64_t dropped_events_ = 0;

  std::unordered_map<ObjectId, std::vector<Rank>> object_subscribers_;
  std::vector<Rank> node_subscribers_;  // ascending

  std::vector<Record> scratch_;  // decoded records of the message in hand
  ControlShardStats stats_;
};

// ---------------------------------------------------------------------------
// ControlClient

struct ControlClientConfig {
  // A batch is sent once it reaches this size (and never grows past it, except a
  // single record larger than the limit, which travels alone).
  std::size_t max_batch_bytes = std::size_t{64} << 10;
  // A non-empty batch is sent once its first record is this old.
  std::chrono::nanoseconds max_delay = std::chrono::milliseconds(2);
};

struct ControlClientStats {
  std::uint64_t records_written = 0;  // records appended (writes, subscriptions, queries)
  std::uint64_t batches_sent = 0;
  std::uint64_t bytes_sent = 0;       // payload bytes returned by flush()
  std::uint64_t notifications = 0;    // notifications decoded by handle()
  std::uint64_t rejected = 0;         // malformed messages refused by handle()
};

// ControlClient
//
// A rank's view of the control state. Writes go into one batch per shard index
// (records serialized straight into the batch's byte buffer: no allocation per
// record beyond the buffer's amortised growth); flush() hands over the batches that
// are due. Records to one shard index keep their order; records to different
// shards are unordered with respect to each other.
//
// Latency: subscribe, unsubscribe and query_* mark their shard's batch urgent, so
// the next flush() sends it whatever its age (earlier writes in that batch ride
// along, which keeps them ordered before the subscription or query).
//
// Example (the progress loop):
//   client.add_lineage(record);
//   for (Outgoing& m : client.flush(std::chrono::steady_clock::now()))
//     transport.send(m.to, encode_frame(FrameKind::kControl, m.payload));
class ControlClient {
 public:
  using Config = ControlClientConfig;
  using Clock = std::chrono::steady_clock;

  // Shard index i lives on shard_ranks[i]; several indices may share a rank.
  // Requires 1 <= shard_ranks.size() <= kMaxControlShards and max_batch_bytes > 0.
  ControlClient(Rank self, std::vector<Rank> shard_ranks, Config config = {});

  Rank self() const noexcept { return self_; }
  int num_shards() const noexcept { return static_cast<int>(shard_ranks_.size()); }
  const std::vector<Rank>& shard_ranks() const noexcept { return shard_ranks_; }

  int shard_for(TaskId id) const noexcept { return control_shard_for(id, num_shards()); }
  int shard_for(ObjectId id) const noexcept { return control_shard_for(id, num_shards()); }
  int shard_for(FunctionId id) const noexcept { return control_shard_for(id, num_shards()); }
  int shard_for(Rank node) const noexcept { return control_shard_for(node, num_shards()); }

  // Writes. Each appends one record to its shard's batch. The first record of a
  // batch reads steady_clock once, to start the batch's max_delay.
  void add_lineage(const LineageRecord& record);
  void add_object(const ObjectRecord& record);
  void forget(ObjectId object);
  void add_function(const FunctionRecord& record);
  void set_node_status(const NodeStatus& status);
  void add_event(const EventRecord& event);

  // Urgent records (see above). A nodes-channel (un)subscription goes to every
  // shard index.
  void subscribe(const Channel& channel);
  void unsubscribe(const Channel& channel);
  // Subscribes `channel` at one shard index only (after that shard moved).
  void subscribe_at(int shard, const Channel& channel);

  // Shard index `shard` now lives on `to` (its rank died and a fresh shard with that
  // index serves there): its batches, sealed ones included, go there from now on,
  // and notifications for it are accepted from there.
  void move_shard(int shard, Rank to);
  void query_function(FunctionId id);
  void query_object(ObjectId id);
  void query_lineage(TaskId id);

  // The batches due at `now`: full ones, urgent ones, those whose first record is
  // at least max_delay old; with force, every non-empty one. Batches come out in
  // the order they were sealed, then by shard index.
  std::vector<Outgoing> flush(Clock::time_point now, bool force = false);
  // The earliest time at which flush() has something to return: time_point::min()
  // when a batch is due whatever the time (full or urgent), nullopt when nothing
  // is pending. The progress loop may sleep until then.
  std::optional<Clock::time_point> next_deadline() const;
  // True when flush(now) would return something without waiting for age: a full
  // or urgent batch.
  bool pending_due() const noexcept;
  bool empty() const noexcept;

  // Decodes one kNotifications message from rank `from`, which must host the shard
  // the header names. kInvalidArgument on a malformed message (nothing returned).
  StatusOr<std::vector<Notification>> handle(Rank from, std::span<const std::byte> payload);

  const ControlClientStats& stats() const noexcept { return stats_; }

 private:
  struct Batch {
    Writer writer;  // header (count patched at seal time) + records
    std::uint32_t count = 0;
    Clock::time_point started{};
    bool urgent = false;
    std::size_t last_size = 0;  // of the previous batch: the next one reserves it
  };

  template <class Rec>
  void append(int shard, ControlRecordTag tag, const Rec& record, bool urgent);
  void start(Batch& batch, int shard);
  void seal(int shard, std::vector<Outgoing>& out);

  Rank self_;
  std::vector<Rank> shard_ranks_;
  Config config_;
  std::vector<Batch> batches_;   // one per shard index
  std::vector<Outgoing> sealed_; // full batches waiting for the next flush
  ControlClientStats stats_;
};

}  // namespace brisk
