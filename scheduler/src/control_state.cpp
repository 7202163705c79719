// The sharded control state: wire encoding, ControlShard, ControlClient.
#include "brisk/scheduler/control_state.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace brisk {

namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

// The smallest record on the wire: a tag byte and an 8-byte body (a query by
// FunctionId). A header count larger than the remaining bytes can describe is
// refused before anything is reserved.
constexpr std::size_t kMinRecordBytes = 9;
constexpr std::size_t kCountOffset = 4;
// The smallest buffer a client batch starts with.
constexpr std::size_t kMinReserve = 256;

void write_header(Writer& w, ControlMessageType type, int shard) {
  const std::uint8_t head[2] = {kControlWireVersion, static_cast<std::uint8_t>(type)};
  const auto index = static_cast<std::uint16_t>(shard);
  const std::uint32_t count = 0;  // patched by patch_count()
  w.write_bytes(head, sizeof head);
  w.write_bytes(&index, sizeof index);
  w.write_bytes(&count, sizeof count);
}

void patch_count(std::vector<std::byte>& message, std::uint32_t count) {
  std::memcpy(message.data() + kCountOffset, &count, sizeof count);
}

template <class Rec>
void write_record(Writer& w, ControlRecordTag tag, const Rec& record) {
  w(static_cast<std::uint8_t>(tag), record);
}

const char* tag_name(std::uint8_t tag) {
  switch (static_cast<ControlRecordTag>(tag)) {
    case ControlRecordTag::kLineage: return "lineage";
    case ControlRecordTag::kObject: return "object";
    case ControlRecordTag::kForget: return "forget";
    case ControlRecordTag::kFunction: return "function";
    case ControlRecordTag::kNodeStatus: return "node status";
    case ControlRecordTag::kEvent: return "event";
    case ControlRecordTag::kSubscribe: return "subscribe";
    case ControlRecordTag::kUnsubscribe: return "unsubscribe";
    case ControlRecordTag::kQueryFunction: return "query function";
    case ControlRecordTag::kQueryObject: return "query object";
    case ControlRecordTag::kQueryLineage: return "query lineage";
    case ControlRecordTag::kObjectLocated: return "object located";
    case ControlRecordTag::kNodeChanged: return "node changed";
    case ControlRecordTag::kFunctionInfo: return "function info";
    case ControlRecordTag::kObjectInfo: return "object info";
    case ControlRecordTag::kLineageReply: return "lineage reply";
  }
  return "unknown";
}

// A failure inside one record: thrown by the decoders below, caught once per
// message and turned into a Status.
struct RecordError {
  std::string what;
};

void check_rank(Rank r, const char* field) {
  if (r.value < 0) throw RecordError{std::string(field) + " is a negative rank (" + std::to_string(r.value) + ")"};
}

// Checks a record count against the bytes that must hold the records.
Status check_count(const char* who, std::uint32_t count, std::size_t body_bytes) {
  if (count > body_bytes / kMinRecordBytes) {
    return invalid_argument(std::string(who) + ": header claims " + std::to_string(count) +
                            " records but only " + std::to_string(body_bytes) +
                            " bytes follow (at least " + std::to_string(kMinRecordBytes) +
                            " per record)");
  }
  return Status();
}

void insert_sorted(std::vector<Rank>& ranks, Rank r) {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), r);
  if (it == ranks.end() || *it != r) ranks.insert(it, r);
}

bool erase_rank(std::vector<Rank>& ranks, Rank r) {
  auto it = std::find(ranks.begin(), ranks.end(), r);
  if (it == ranks.end()) return false;
  ranks.erase(it);
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------
// Header and routing.

StatusOr<ControlHeader> parse_control_header(std::span<const std::byte> payload) {
  if (payload.size() < kControlHeaderBytes) {
    return invalid_argument("control message of " + std::to_string(payload.size()) +
                            " bytes is shorter than its " + std::to_string(kControlHeaderBytes) +
                            "-byte header");
  }
  const auto version = static_cast<std::uint8_t>(payload[0]);
  if (version != kControlWireVersion) {
    return invalid_argument("control message has wire version " + std::to_string(version) +
                            ", expected " + std::to_string(kControlWireVersion));
  }
  const auto type = static_cast<std::uint8_t>(payload[1]);
  if (type != static_cast<std::uint8_t>(ControlMessageType::kShardBatch) &&
      type != static_cast<std::uint8_t>(ControlMessageType::kNotifications)) {
    return invalid_argument("control message has unknown type " + std::to_string(type) +
                            " (expected 1, shard batch, or 2, notifications)");
  }
  std::uint16_t shard;
  std::uint32_t count;
  std::memcpy(&shard, payload.data() + 2, sizeof shard);
  std::memcpy(&count, payload.data() + kCountOffset, sizeof count);
  return ControlHeader{static_cast<ControlMessageType>(type), shard, count};
}

int control_shard_for(const UniqueId& id, int num_shards) noexcept {
  return static_cast<int>(detail::mix64(id.hi ^ detail::mix64(id.lo)) %
                          static_cast<std::uint64_t>(num_shards));
}
int control_shard_for(FunctionId id, int num_shards) noexcept {
  return static_cast<int>(id.value % static_cast<std::uint64_t>(num_shards));
}
int control_shard_for(Rank node, int num_shards) noexcept {
  return static_cast<int>(static_cast<std::uint32_t>(node.value) %
                          static_cast<std::uint32_t>(num_shards));
}
int control_shard_for_event(std::uint64_t task, int num_shards) noexcept {
  return static_cast<int>(detail::mix64(task) % static_cast<std::uint64_t>(num_shards));
}

// ---------------------------------------------------------------------------
// ControlShard

// The notifications produced while one message is applied: one message per
// destination rank, records in production order.
class ControlShard::Replies {
 public:
  explicit Replies(int shard) : shard_(shard) {}

  template <class Rec>
  void add(Rank to, ControlRecordTag tag, const Rec& record) {
    Dest& d = dest(to);
    write_record(d.writer, tag, record);
    ++d.count;
  }

  // Sends one record to many ranks, encoding it once.
  template <class Rec>
  void broadcast(std::span<const Rank> to, ControlRecordTag tag, const Rec& record) {
    if (to.empty()) return;
    if (to.size() == 1) return add(to[0], tag, record);
    Writer w;
    write_record(w, tag, record);
    for (Rank r : to) {
      Dest& d = dest(r);
      d.writer.write_bytes(w.bytes().data(), w.size());
      ++d.count;
    }
  }

  std::uint64_t records() const noexcept {
    std::uint64_t n = 0;
    for (const Dest& d : dests_) n += d.count;
    return n;
  }

  std::vector<Outgoing> take() {
    std::vector<Outgoing> out;
    out.reserve(dests_.size());
    for (Dest& d : dests_) {
      std::vector<std::byte> bytes = d.writer.take();
      patch_count(bytes, d.count);
      out.push_back(Outgoing{d.to, std::move(bytes)});
    }
    return out;
  }

 private:
  struct Dest {
    Rank to;
    Writer writer;
    std::uint32_t count = 0;
  };

  Dest& dest(Rank to) {
    auto [it, inserted] = index_.try_emplace(to.value, dests_.size());
    if (inserted) {
      dests_.push_back(Dest{to, Writer(), 0});
      write_header(dests_.back().writer, ControlMessageType::kNotifications, shard_);
    }
    Dest& d = dests_[it->second];
    BRISK_CHECK(d.count < std::numeric_limits<std::uint32_t>::max()) << "too many notifications for one rank";
    return d;
  }

  int shard_;
  std::vector<Dest> dests_;
  std::unordered_map<int, std::size_t> index_;
};

ControlShard::ControlShard(int shard_index, int num_shards, Config config)
    : index_(shard_index), num_shards_(num_shards), config_(config) {
  BRISK_CHECK(num_shards >= 1 && num_shards <= kMaxControlShards)
      << "num_shards " << num_shards << " must be in [1, " << kMaxControlShards << "]";
  BRISK_CHECK(shard_index >= 0 && shard_index < num_shards)
      << "shard index " << shard_index << " out of range for " << num_shards << " shards";
}

Status ControlShard::decode(std::span<const std::byte> payload) {
  scratch_.clear();
  const std::string who = "control shard " + std::to_string(index_);
  StatusOr<ControlHeader> header = parse_control_header(payload);
  if (!header.ok()) return invalid_argument(who + ": " + header.status().message());
  if (header->type != ControlMessageType::kShardBatch) {
    return invalid_argument(who + ": got a notifications message; shards take shard batches (type 1)");
  }
  if (header->shard >= num_shards_) {
    return invalid_argument(who + ": message names shard " + std::to_string(header->shard) +
                            ", out of range for " + std::to_string(num_shards_) + " shards");
  }
  if (header->shard != index_) {
    return invalid_argument(who + ": message is addressed to shard " + std::to_string(header->shard));
  }
  const std::span<const std::byte> body = payload.subspan(kControlHeaderBytes);
  const std::uint32_t count = header->count;
  if (Status s = check_count(who.c_str(), count, body.size()); !s.ok()) return s;

  // The shard a record belongs to must be this one: a mismatch means the sender
  // disagrees about the number of shards or misrouted the message.
  auto expect_here = [&](int shard, const char* key) {
    if (shard != index_) {
      throw RecordError{std::string(key) + " belongs to shard " + std::to_string(shard)};
    }
  };

  Reader r(body);
  scratch_.reserve(count);
  std::uint8_t tag = 0;
  std::uint32_t i = 0;
  try {
    for (; i < count; ++i) {
      r(tag);
      switch (static_cast<ControlRecordTag>(tag)) {
        case ControlRecordTag::kLineage: {
          LineageRecord& rec = scratch_.emplace_back().emplace<LineageRecord>();
          r(rec);
          check_rank(rec.owner, "owner");
          check_rank(rec.executor, "executor");
          expect_here(control_shard_for(rec.task, num_shards_), "its task id");
          break;
        }
        case ControlRecordTag::kObject: {
          ObjectRecord& rec = scratch_.emplace_back().emplace<ObjectRecord>();
          r(rec);
          check_rank(rec.location, "location");
          expect_here(control_shard_for(rec.id, num_shards_), "its object id");
          break;
        }
        case ControlRecordTag::kForget: {
          ForgetRecord& rec = scratch_.emplace_back().emplace<ForgetRecord>();
          r(rec);
          expect_here(control_shard_for(rec.object, num_shards_), "its object id");
          break;
        }
        case ControlRecordTag::kFunction: {
          FunctionRecord& rec = scratch_.emplace_back().emplace<FunctionRecord>();
          r(rec);
          check_rank(rec.rank, "rank");
          expect_here(control_shard_for(rec.id, num_shards_), "its function id");
          break;
        }
        case ControlRecordTag::kNodeStatus: {
          NodeStatus& rec = scratch_.emplace_back().emplace<NodeStatus>();
          r(rec);
          check_rank(rec.rank, "rank");
          expect_here(control_shard_for(rec.rank, num_shards_), "its rank");
          break;
        }
        case ControlRecordTag::kEvent: {
          EventRecord& rec = scratch_.emplace_back().emplace<EventRecord>();
          r(rec);
          check_rank(rec.rank, "rank");
          expect_here(control_shard_for_event(rec.task, num_shards_), "its task");
          break;
        }
        case ControlRecordTag::kSubscribe:
        case ControlRecordTag::kUnsubscribe: {
          Channel channel;
          r(channel);
          if (channel.kind == Channel::kObject) {
            expect_here(control_shard_for(channel.object, num_shards_), "its object id");
          }
          if (static_cast<ControlRecordTag>(tag) == ControlRecordTag::kSubscribe) {
            scratch_.emplace_back(Subscribe{channel});
          } else {
            scratch_.emplace_back(Unsubscribe{channel});
          }
          break;
        }
        case ControlRecordTag::kQueryFunction: {
          QueryFunction q;
          r(q.id);
          expect_here(control_shard_for(q.id, num_shards_), "its function id");
          scratch_.emplace_back(q);
          break;
        }
        case ControlRecordTag::kQueryObject: {
          QueryObject q;
          r(q.id);
          expect_here(control_shard_for(q.id, num_shards_), "its object id");
          scratch_.emplace_back(q);
          break;
        }
        case ControlRecordTag::kQueryLineage: {
          QueryLineage q;
          r(q.id);
          expect_here(control_shard_for(q.id, num_shards_), "its task id");
          scratch_.emplace_back(q);
          break;
        }
        default:
          throw RecordError{"unknown record tag " + std::to_string(tag) +
                            " (a shard batch takes tags 1 to 11)"};
      }
    }
  } catch (const SerializationError& e) {
    scratch_.clear();
    return invalid_argument(who + ": record " + std::to_string(i) + " of " + std::to_string(count) +
                            " (" + tag_name(tag) + ") is malformed: " + e.what());
  } catch (const RecordError& e) {
    scratch_.clear();
    return invalid_argument(who + ": record " + std::to_string(i) + " of " + std::to_string(count) +
                            " (" + tag_name(tag) + "): " + e.what);
  }
  if (r.remaining() != 0) {
    scratch_.clear();
    return invalid_argument(who + ": " + std::to_string(r.remaining()) + " trailing bytes after " +
                            std::to_string(count) + " records");
  }
  return Status();
}

StatusOr<std::vector<Outgoing>> ControlShard::handle(Rank from, std::span<const std::byte> payload) {
  if (Status s = decode(payload); !s.ok()) {
    ++stats_.rejected;
    return s;
  }
  Replies out(index_);
  for (Record& rec : scratch_) apply(from, rec, out);
  stats_.records += scratch_.size();
  ++stats_.messages;
  stats_.notifications += out.records();
  scratch_.clear();
  return out.take();
}

void ControlShard::apply(Rank from, Record& record, Replies& out) {
  std::visit(
      Overloaded{
          [&](LineageRecord& r) {
            const TaskId key = r.task;
            tasks_.insert_or_assign(key, std::move(r));
          },
          [&](ObjectRecord& r) {
            if (r.removed) {
              if (auto it = objects_.find(r.id); it != objects_.end()) {
                erase_rank(it->second.locations, r.location);
              }
              return;
            }
            ObjectEntry& e = objects_[r.id];
            e.bytes = r.bytes;
            if (std::find(e.locations.begin(), e.locations.end(), r.location) != e.locations.end()) return;
            e.locations.push_back(r.location);
            if (auto it = object_subscribers_.find(r.id); it != object_subscribers_.end()) {
              out.broadcast(it->second, ControlRecordTag::kObjectLocated, ObjectLocated{r});
              object_subscribers_.erase(it);  // one-shot
            }
          },
          [&](ForgetRecord& r) {
            objects_.erase(r.object);
            tasks_.erase(TaskId{{r.object.hi, r.object.lo}});
            object_subscribers_.erase(r.object);
          },
          [&](FunctionRecord& r) {
            auto [it, inserted] = functions_.try_emplace(r.id);
            if (inserted) {
              it->second.name = std::move(r.name);
            } else if (it->second.name != r.name) {
              ++stats_.function_conflicts;
              return;
            }
            insert_sorted(it->second.ranks, r.rank);
          },
          [&](NodeStatus& r) {
            auto it = nodes_.find(r.rank.value);
            if (it != nodes_.end() && r.sequence <= it->second.sequence) {
              ++stats_.stale_heartbeats;
              return;
            }
            const int key = r.rank.value;
            NodeStatus& stored = nodes_.insert_or_assign(key, std::move(r)).first->second;
            out.broadcast(node_subscribers_, ControlRecordTag::kNodeChanged, NodeChanged{stored});
          },
          [&](EventRecord& r) { push_event(std::move(r)); },
          [&](Subscribe& s) {
            if (s.channel.kind == Channel::kNodes) {
              insert_sorted(node_subscribers_, from);
              for (const NodeStatus& n : nodes()) out.add(from, ControlRecordTag::kNodeChanged, NodeChanged{n});
              return;
            }
            const ObjectId id = s.channel.object;
            if (auto it = objects_.find(id); it != objects_.end() && !it->second.locations.empty()) {
              for (Rank loc : it->second.locations) {
                out.add(from, ControlRecordTag::kObjectLocated,
                        ObjectLocated{ObjectRecord{id, loc, it->second.bytes, false}});
              }
              return;
            }
            std::vector<Rank>& subs = object_subscribers_[id];
            if (std::find(subs.begin(), subs.end(), from) == subs.end()) subs.push_back(from);
          },
          [&](Unsubscribe& u) {
            if (u.channel.kind == Channel::kNodes) {
              erase_rank(node_subscribers_, from);
              return;
            }
            if (auto it = object_subscribers_.find(u.channel.object); it != object_subscribers_.end()) {
              erase_rank(it->second, from);
              if (it->second.empty()) object_subscribers_.erase(it);
            }
          },
          [&](QueryFunction& q) {
            FunctionInfoReply reply{q.id, {}, {}, false};
            if (auto it = functions_.find(q.id); it != functions_.end()) {
              reply.name = it->second.name;
              reply.ranks = it->second.ranks;
              reply.found = true;
            }
            out.add(from, ControlRecordTag::kFunctionInfo, reply);
          },
          [&](QueryObject& q) {
            ObjectInfoReply reply{q.id, {}, 0, false};
            if (auto it = objects_.find(q.id); it != objects_.end()) {
              reply.locations = it->second.locations;
              reply.bytes = it->second.bytes;
              reply.found = true;
            }
            out.add(from, ControlRecordTag::kObjectInfo, reply);
          },
          [&](QueryLineage& q) {
            LineageReply reply{q.id, std::nullopt};
            if (auto it = tasks_.find(q.id); it != tasks_.end()) reply.record = it->second;
            out.add(from, ControlRecordTag::kLineageReply, reply);
          },
      },
      record);
}

void ControlShard::push_event(EventRecord&& event) {
  const std::size_t cap = config_.event_capacity;
  if (cap == 0) {
    ++dropped_events_;
    return;
  }
  if (events_.size() < cap) {
    events_.push_back(std::move(event));
    return;
  }
  events_[events_head_] = std::move(event);
  events_head_ = events_head_ + 1 == cap ? 0 : events_head_ + 1;
  ++dropped_events_;
}

const LineageRecord* ControlShard::task(TaskId id) const {
  auto it = tasks_.find(id);
  return it == tasks_.end() ? nullptr : &it->second;
}

std::vector<Rank> ControlShard::object_locations(ObjectId id) const {
  auto it = objects_.find(id);
  return it == objects_.end() ? std::vector<Rank>{} : it->second.locations;
}

std::optional<std::uint64_t> ControlShard::object_bytes(ObjectId id) const {
  auto it = objects_.find(id);
  if (it == objects_.end()) return std::nullopt;
  return it->second.bytes;
}

bool ControlShard::has_object(ObjectId id) const { return objects_.contains(id); }

const std::string* ControlShard::function_name(FunctionId id) const {
  auto it = functions_.find(id);
  return it == functions_.end() ? nullptr : &it->second.name;
}

std::vector<Rank> ControlShard::function_ranks(FunctionId id) const {
  auto it = functions_.find(id);
  return it == functions_.end() ? std::vector<Rank>{} : it->second.ranks;
}

std::vector<FunctionId> ControlShard::functions_on(Rank rank) const {
  std::vector<FunctionId> ids;
  for (const auto& [id, entry] : functions_) {
    if (std::binary_search(entry.ranks.begin(), entry.ranks.end(), rank)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

const NodeStatus* ControlShard::node(Rank rank) const {
  auto it = nodes_.find(rank.value);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::vector<NodeStatus> ControlShard::nodes() const {
  std::vector<NodeStatus> all;
  all.reserve(nodes_.size());
  for (const auto& [rank, status] : nodes_) all.push_back(status);
  std::sort(all.begin(), all.end(),
            [](const NodeStatus& a, const NodeStatus& b) { return a.rank < b.rank; });
  return all;
}

std::vector<EventRecord> ControlShard::events() const {
  std::vector<EventRecord> ordered;
  ordered.reserve(events_.size());
  ordered.insert(ordered.end(), events_.begin() + static_cast<std::ptrdiff_t>(events_head_), events_.end());
  ordered.insert(ordered.end(), events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(events_head_));
  return ordered;
}

std::size_t ControlShard::num_object_subscriptions() const noexcept {
  std::size_t n = 0;
  for (const auto& [id, subs] : object_subscribers_) n += subs.size();
  return n;
}

// ---------------------------------------------------------------------------
// ControlClient

ControlClient::ControlClient(Rank self, std::vector<Rank> shard_ranks, Config config)
    : self_(self), shard_ranks_(std::move(shard_ranks)), config_(config) {
  BRISK_CHECK(!shard_ranks_.empty() && shard_ranks_.size() <= static_cast<std::size_t>(kMaxControlShards))
      << "a control client needs 1 to " << kMaxControlShards << " shard ranks, got "
      << shard_ranks_.size();
  BRISK_CHECK(config_.max_batch_bytes > 0) << "max_batch_bytes must be positive";
  batches_.resize(shard_ranks_.size());
}

void ControlClient::start(Batch& batch, int shard) {
  // A shard that streams gets full-size buffers at once; one that sees an
  // occasional query keeps small ones.
  batch.writer.reserve(std::min(std::max(batch.last_size, kMinReserve), config_.max_batch_bytes));
  write_header(batch.writer, ControlMessageType::kShardBatch, shard);
  batch.count = 0;
  batch.urgent = false;
  batch.started = Clock::now();
}

void ControlClient::seal(int shard, std::vector<Outgoing>& out) {
  Batch& b = batches_[static_cast<std::size_t>(shard)];
  std::vector<std::byte> bytes = b.writer.take();
  patch_count(bytes, b.count);
  b.last_size = bytes.size();
  out.push_back(Outgoing{shard_ranks_[static_cast<std::size_t>(shard)], std::move(bytes)});
  b.count = 0;
  b.urgent = false;
}

template <class Rec>
void ControlClient::append(int shard, ControlRecordTag tag, const Rec& record, bool urgent) {
  Batch& b = batches_[static_cast<std::size_t>(shard)];
  if (b.count == 0) start(b, shard);
  const std::size_t before = b.writer.size();
  write_record(b.writer, tag, record);
  ++b.count;
  b.urgent = b.urgent || urgent;
  ++stats_.records_written;

  const std::size_t limit = config_.max_batch_bytes;
  if (b.writer.size() > limit && b.count > 1) {
    // This record overflowed the batch: seal the batch without it and start the
    // next batch with it (one record's bytes copied, once per full batch).
    std::vector<std::byte> bytes = b.writer.take();
    Writer next;
    next.reserve(limit);
    write_header(next, ControlMessageType::kShardBatch, shard);
    next.write_bytes(bytes.data() + before, bytes.size() - before);
    bytes.resize(before);
    patch_count(bytes, b.count - 1);
    sealed_.push_back(Outgoing{shard_ranks_[static_cast<std::size_t>(shard)], std::move(bytes)});
    b.last_size = before;
    b.writer = std::move(next);
    b.count = 1;
    b.urgent = urgent;
    b.started = Clock::now();
  }
  if (b.writer.size() >= limit || b.count == std::numeric_limits<std::uint32_t>::max()) {
    seal(shard, sealed_);
  }
}

void ControlClient::add_lineage(const LineageRecord& record) {
  append(shard_for(record.task), ControlRecordTag::kLineage, record, false);
}
void ControlClient::add_object(const ObjectRecord& record) {
  append(shard_for(record.id), ControlRecordTag::kObject, record, false);
}
void ControlClient::forget(ObjectId object) {
  append(shard_for(object), ControlRecordTag::kForget, ForgetRecord{object}, false);
}
void ControlClient::add_function(const FunctionRecord& record) {
  append(shard_for(record.id), ControlRecordTag::kFunction, record, false);
}
void ControlClient::set_node_status(const NodeStatus& status) {
  append(shard_for(status.rank), ControlRecordTag::kNodeStatus, status, false);
}
void ControlClient::add_event(const EventRecord& event) {
  append(control_shard_for_event(event.task, num_shards()), ControlRecordTag::kEvent, event, false);
}

void ControlClient::subscribe(const Channel& channel) {
  if (channel.kind == Channel::kNodes) {
    for (int s = 0; s < num_shards(); ++s) append(s, ControlRecordTag::kSubscribe, channel, true);
  } else {
    append(shard_for(channel.object), ControlRecordTag::kSubscribe, channel, true);
  }
}
void ControlShard::drop_subscriber(Rank dead) {
  std::erase(node_subscribers_, dead);
  for (auto it = object_subscribers_.begin(); it != object_subscribers_.end();) {
    std::erase(it->second, dead);
    it = it->second.empty() ? object_subscribers_.erase(it) : std::next(it);
  }
}

void ControlClient::subscribe_at(int shard, const Channel& channel) {
  if (shard < 0 || shard >= num_shards()) return;
  append(shard, ControlRecordTag::kSubscribe, channel, true);
}

void ControlClient::move_shard(int shard, Rank to) {
  if (shard < 0 || shard >= num_shards()) return;
  shard_ranks_[static_cast<std::size_t>(shard)] = to;
  for (Outgoing& o : sealed_) {
    auto header = parse_control_header(o.payload);
    if (header.ok() && header->shard == shard) o.to = to;
  }
}

void ControlClient::unsubscribe(const Channel& channel) {
  if (channel.kind == Channel::kNodes) {
    for (int s = 0; s < num_shards(); ++s) append(s, ControlRecordTag::kUnsubscribe, channel, true);
  } else {
    append(shard_for(channel.object), ControlRecordTag::kUnsubscribe, channel, true);
  }
}
void ControlClient::query_function(FunctionId id) {
  append(shard_for(id), ControlRecordTag::kQueryFunction, id, true);
}
void ControlClient::query_object(ObjectId id) {
  append(shard_for(id), ControlRecordTag::kQueryObject, id, true);
}
void ControlClient::query_lineage(TaskId id) {
  append(shard_for(id), ControlRecordTag::kQueryLineage, id, true);
}

std::vector<Outgoing> ControlClient::flush(Clock::time_point now, bool force) {
  std::vector<Outgoing> out = std::move(sealed_);
  sealed_.clear();
  for (int s = 0; s < num_shards(); ++s) {
    const Batch& b = batches_[static_cast<std::size_t>(s)];
    if (b.count == 0) continue;
    if (force || b.urgent || now - b.started >= config_.max_delay) seal(s, out);
  }
  for (const Outgoing& m : out) {
    ++stats_.batches_sent;
    stats_.bytes_sent += m.payload.size();
  }
  return out;
}

std::optional<ControlClient::Clock::time_point> ControlClient::next_deadline() const {
  if (pending_due()) return Clock::time_point::min();
  std::optional<Clock::time_point> earliest;
  for (const Batch& b : batches_) {
    if (b.count == 0) continue;
    const auto due = b.started + std::chrono::duration_cast<Clock::duration>(config_.max_delay);
    if (!earliest || due < *earliest) earliest = due;
  }
  return earliest;
}

bool ControlClient::pending_due() const noexcept {
  if (!sealed_.empty()) return true;
  return std::any_of(batches_.begin(), batches_.end(),
                     [](const Batch& b) { return b.count != 0 && b.urgent; });
}

bool ControlClient::empty() const noexcept {
  return sealed_.empty() &&
         std::all_of(batches_.begin(), batches_.end(), [](const Batch& b) { return b.count == 0; });
}

StatusOr<std::vector<Notification>> ControlClient::handle(Rank from, std::span<const std::byte> payload) {
  const std::string who = "control client on rank " + std::to_string(self_.value);
  auto reject = [&](std::string message) -> Status {
    ++stats_.rejected;
    return invalid_argument(who + ": " + std::move(message));
  };
  StatusOr<ControlHeader> header = parse_control_header(payload);
  if (!header.ok()) return reject(header.status().message());
  if (header->type != ControlMessageType::kNotifications) {
    return reject("got a shard batch; clients take notifications (type 2)");
  }
  if (header->shard >= num_shards()) {
    return reject("message names shard " + std::to_string(header->shard) + ", out of range for " +
                  std::to_string(num_shards()) + " shards");
  }
  const Rank host = shard_ranks_[static_cast<std::size_t>(header->shard)];
  if (from != host) {
    return reject("message from rank " + std::to_string(from.value) + " names shard " +
                  std::to_string(header->shard) + ", which lives on rank " + std::to_string(host.value));
  }
  const std::span<const std::byte> body = payload.subspan(kControlHeaderBytes);
  const std::uint32_t count = header->count;
  if (Status s = check_count("notifications", count, body.size()); !s.ok()) return reject(s.message());

  std::vector<Notification> out;
  out.reserve(count);
  Reader r(body);
  std::uint8_t tag = 0;
  std::uint32_t i = 0;
  try {
    for (; i < count; ++i) {
      r(tag);
      switch (static_cast<ControlRecordTag>(tag)) {
        case ControlRecordTag::kObjectLocated: r(out.emplace_back().emplace<ObjectLocated>()); break;
        case ControlRecordTag::kNodeChanged: r(out.emplace_back().emplace<NodeChanged>()); break;
        case ControlRecordTag::kFunctionInfo: r(out.emplace_back().emplace<FunctionInfoReply>()); break;
        case ControlRecordTag::kObjectInfo: r(out.emplace_back().emplace<ObjectInfoReply>()); break;
        case ControlRecordTag::kLineageReply: r(out.emplace_back().emplace<LineageReply>()); break;
        default:
          return reject("record " + std::to_string(i) + " of " + std::to_string(count) +
                        " has unknown tag " + std::to_string(tag) +
                        " (notifications take tags 32 to 36)");
      }
    }
  } catch (const SerializationError& e) {
    return reject("record " + std::to_string(i) + " of " + std::to_string(count) + " (" + tag_name(tag) +
                  ") is malformed: " + e.what());
  }
  if (r.remaining() != 0) {
    return reject(std::to_string(r.remaining()) + " trailing bytes after " + std::to_string(count) +
                  " records");
  }
  stats_.notifications += out.size();
  return out;
}

}  // namespace brisk
