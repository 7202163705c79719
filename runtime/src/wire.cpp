#include "brisk/runtime/wire.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "brisk/checkpoint/format.hpp"

namespace brisk::wire {

namespace {

[[noreturn]] void fail(const std::string& what) { throw SerializationError(what); }

void check_rank(int rank, int ranks, const char* what) {
  if (rank < 0 || rank >= ranks) fail(fmt::format("{} {} is not a rank of a job of {}", what, rank, ranks));
}

// A flag written as 0 or 1.
bool read_flag(Reader& r, const char* what) {
  std::uint8_t b = 0;
  r(b);
  if (b > 1) fail(fmt::format("{} flag {} (expected 0 or 1)", what, b));
  return b == 1;
}

void check_end(const Reader& r) {
  if (r.remaining() != 0) fail(fmt::format("{} bytes left over", r.remaining()));
}

std::vector<std::byte> take(Writer& w) { return w.take(); }

}  // namespace

void append_record(std::vector<std::byte>& out, std::span<const std::byte> record) {
  const auto n = static_cast<std::uint32_t>(record.size());
  const std::size_t at = out.size();
  out.resize(at + 4 + record.size());
  std::memcpy(out.data() + at, &n, 4);
  if (!record.empty()) std::memcpy(out.data() + at + 4, record.data(), record.size());
}

void write_task_spec_header(Writer& w, std::uint8_t route, TaskId id, std::uint64_t function, int owner,
                            const TaskOptions* options, const ActorCallHeader* call,
                            const std::vector<std::pair<int, std::uint64_t>>& hints) {
  w(route, id.hi, id.lo, function, owner, static_cast<std::uint8_t>(options != nullptr));
  if (options) w(options->name, options->resources, options->max_retries, options->actor_creation);
  w(static_cast<std::uint8_t>(call != nullptr));
  if (call) w(call->actor.hi, call->actor.lo, call->caller, call->seq, call->incarnation);
  w(hints);
}

TaskSpecHeader read_task_spec_header(Reader& r, int ranks) {
  TaskSpecHeader h;
  r(h.route, h.id.hi, h.id.lo, h.function, h.owner);
  if (h.route != kRoutePlace && h.route != kRouteRun) fail(fmt::format("task spec route {}", h.route));
  if (read_flag(r, "task options")) {
    h.options = std::make_shared<TaskOptions>();
    r(h.options->name, h.options->resources, h.options->max_retries, h.options->actor_creation);
  }
  if (read_flag(r, "actor call")) {
    ActorCallHeader& c = h.call.emplace();
    r(c.actor.hi, c.actor.lo, c.caller, c.seq, c.incarnation);
  }
  r(h.hints);
  check_rank(h.owner, ranks, "task spec owner");
  return h;
}

RemoteObject read_remote_object(Reader& r, int ranks) {
  RemoteObject o;
  r(o.owner, o.lender, o.copy);
  check_rank(o.copy.region.owner.value, ranks, "holder");
  return o;
}

std::vector<std::byte> encode_refcount(const RefCountRecord& m) {
  Writer w;
  w(m.op, m.id.hi, m.id.lo);
  if (m.op == kRefDrop) {
    w(m.count);
  } else if (m.tag != kAllCopies) {
    w(m.tag);
  }
  return take(w);
}

RefCountRecord decode_refcount(std::span<const std::byte> record) {
  Reader r(record);
  RefCountRecord m;
  r(m.op, m.id.hi, m.id.lo);
  if (m.op == kRefDrop) {
    r(m.count);
  } else if (m.op == kRefFree) {
    if (r.remaining() > 0) r(m.tag);
  } else {
    fail(fmt::format("unknown reference-count op {}", m.op));
  }
  check_end(r);
  return m;
}

std::vector<std::byte> encode_actor_moved(const ActorMoved& m) {
  Writer w;
  w(kCtlActorMoved, m.actor.hi, m.actor.lo, m.rank, m.incarnation);
  return take(w);
}

ActorMoved decode_actor_moved(std::span<const std::byte> body, int ranks) {
  Reader r(body);
  ActorMoved m;
  r(m.actor.hi, m.actor.lo, m.rank, m.incarnation);
  check_end(r);
  check_rank(m.rank, ranks, "actor moved to rank");
  return m;
}

std::vector<std::byte> encode_end(const EndOfJob& m) {
  Writer w;
  w(kCtlEnd, m.code, static_cast<std::uint8_t>(m.without_mpi));
  return take(w);
}

EndOfJob decode_end(std::span<const std::byte> body) {
  Reader r(body);
  EndOfJob m;
  r(m.code);
  m.without_mpi = read_flag(r, "leave without MPI");
  check_end(r);
  return m;
}

std::vector<std::byte> encode_rank_death(const RankDeath& m) {
  Writer w;
  w(kCtlRankDead, m.rank, m.why);
  return take(w);
}

RankDeath decode_rank_death(std::span<const std::byte> body, int ranks) {
  Reader r(body);
  RankDeath m;
  r(m.rank, m.why);
  check_end(r);
  check_rank(m.rank, ranks, "dead rank");
  return m;
}

std::vector<std::byte> encode_checkpoint_request(const CheckpointRequest& m) {
  Writer w;
  w(kCtlCheckpoint, m.sequence, m.tag);
  return take(w);
}

CheckpointRequest decode_checkpoint_request(std::span<const std::byte> body) {
  Reader r(body);
  CheckpointRequest m;
  r(m.sequence, m.tag);
  check_end(r);
  if (m.sequence == 0) fail("checkpoint sequence 0");
  return m;
}

std::vector<std::byte> encode_locate(ObjectId id) {
  Writer w;
  w(kCtlLocate, id.hi, id.lo);
  return take(w);
}

ObjectId decode_locate(std::span<const std::byte> body) {
  Reader r(body);
  ObjectId id;
  r(id.hi, id.lo);
  check_end(r);
  return id;
}

std::vector<std::byte> encode_located(ObjectId id, const detail::RemoteCopy* copy, const ErrorInfo* lost) {
  Writer w;
  w(kCtlLocated, id.hi, id.lo, static_cast<std::uint8_t>(copy != nullptr));
  if (copy) {
    w(*copy);
  } else {
    detail::write_error_info(w, *lost);
  }
  return take(w);
}

Located decode_located(std::span<const std::byte> body, int ranks) {
  Reader r(body);
  Located m;
  r(m.id.hi, m.id.lo);
  if (read_flag(r, "object found")) {
    detail::RemoteCopy c;
    r(c);
    check_rank(c.region.owner.value, ranks, "holder");
    m.copy = std::move(c);
  } else {
    m.lost = detail::read_error_info(r);
  }
  check_end(r);
  return m;
}

std::vector<std::byte> encode_checkpoint_saved(const CheckpointSaved& m) {
  Writer w;
  w(kCtlCheckpointSaved, m.sequence, m.file, static_cast<std::uint64_t>(m.objects.size()));
  for (const auto& [id, holder] : m.objects) w(id.hi, id.lo, holder);
  return take(w);
}

CheckpointSaved decode_checkpoint_saved(std::span<const std::byte> body, int ranks) {
  Reader r(body);
  CheckpointSaved m;
  std::uint64_t count = 0;
  r(m.sequence, m.file, count);
  // 20 bytes per object: nothing is allocated for a count the message cannot hold.
  if (count > r.remaining() / 20) fail(fmt::format("{} objects in {} bytes", count, r.remaining()));
  m.objects.resize(count);
  for (auto& [id, holder] : m.objects) {
    r(id.hi, id.lo, holder);
    check_rank(holder, ranks, "holder");
  }
  check_end(r);
  return m;
}

RankEvents decode_timeline_part(std::span<const std::byte> body) {
  Reader r(body);
  RankEvents re;
  std::uint64_t threads = 0;
  r(re.rank, re.host, re.os_pid, threads);
  // A thread takes at least 28 bytes, an event 25.
  if (threads > r.remaining() / 28) fail(fmt::format("{} threads in {} bytes", threads, r.remaining()));
  re.threads.resize(threads);
  for (RankEvents::Thread& t : re.threads) {
    std::uint64_t n = 0;
    r(t.name, t.index, t.dropped, n);
    if (n > r.remaining() / 25) fail(fmt::format("{} events in {} bytes", n, r.remaining()));
    t.events.resize(n);
    for (auto& e : t.events) {
      std::uint8_t kind = 0;
      r(e.ts_ns, e.task, kind, e.name);
      if (kind > static_cast<std::uint8_t>(EventKind::kGet)) fail(fmt::format("unknown event kind {}", kind));
      e.kind = static_cast<EventKind>(kind);
    }
  }
  check_end(r);
  return re;
}

std::vector<std::byte> encode_checkpoint_report(const CheckpointReport& m) {
  Writer w;
  w(m.sequence, m.tag, static_cast<std::uint8_t>(m.status.code()), m.status.message(), m.shard, m.objects, m.settled);
  return take(w);
}

CheckpointReport decode_checkpoint_report(std::span<const std::byte> body, int from) {
  Reader r(body);
  CheckpointReport m;
  std::uint8_t code = 0;
  std::string message;
  r(m.sequence, m.tag, code, message, m.shard, m.objects, m.settled);
  check_end(r);
  if (code > static_cast<std::uint8_t>(StatusCode::kInternal)) fail(fmt::format("bad status code {}", code));
  m.status = Status(static_cast<StatusCode>(code), std::move(message));
  if (m.shard.empty() ? !m.objects.empty() : m.shard != checkpoint_shard_name(m.sequence, m.tag, from)) {
    fail(fmt::format("shard name '{}' is not rank {}'s or lists no objects", m.shard, from));
  }
  return m;
}

void encode_data_header(const DataHeader& h, std::byte* out) {
  std::memcpy(out, &h.epoch, 4);
  std::memcpy(out + 4, &h.from, 4);
  std::memcpy(out + 8, &h.to, 4);
}

std::optional<DataHeader> decode_data_header(std::span<const std::byte> payload) {
  if (payload.size() < kDataHeaderBytes) return std::nullopt;
  DataHeader h;
  std::memcpy(&h.epoch, payload.data(), 4);
  std::memcpy(&h.from, payload.data() + 4, 4);
  std::memcpy(&h.to, payload.data() + 8, 4);
  return h;
}

std::vector<int> decode_epoch_hosts(std::span<const std::byte> body, int ranks, int self) {
  Reader r(body);
  std::vector<int> hosts;
  r(hosts);
  check_end(r);
  if (hosts.empty() || hosts.size() > static_cast<std::size_t>(ranks)) {
    fail(fmt::format("an epoch with {} hosts in a job of {} ranks", hosts.size(), ranks));
  }
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const int h = hosts[i];
    if (h < 0 || h >= ranks) fail(fmt::format("an epoch with host {} outside [0, {})", h, ranks));
    if (std::find(hosts.begin(), hosts.begin() + static_cast<std::ptrdiff_t>(i), h) !=
        hosts.begin() + static_cast<std::ptrdiff_t>(i)) {
      fail(fmt::format("an epoch with host {} twice", h));
    }
  }
  if (std::find(hosts.begin(), hosts.end(), self) == hosts.end()) {
    fail(fmt::format("an epoch that leaves out rank {}, which is alive", self));
  }
  return hosts;
}

}  // namespace brisk::wire
