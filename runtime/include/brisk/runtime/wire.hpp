// brisk/runtime/wire.hpp — the runtime's own messages between ranks: their layout,
// their encoders, and decoders for the bytes another rank sent.
//
// The decoders are pure functions (no Cluster, no transport, no clock): each returns
// the message or throws SerializationError naming what was wrong, checks every rank
// number it reads against the job's size and, for control bodies, that no bytes
// follow. The Cluster, the data plane and the checkpoint service apply what they
// return; tests/runtime/wire_test.cpp and the fuzzers in tests/fuzz feed them bytes.
//
// Records and bodies use brisk serialization (serialize.hpp): integers little-endian,
// strings and containers with a u64 length, bool one byte 0 or 1.
//
// kTask, kResult and kRefCount frames (core/frame.hpp) carry batches: records, each a
// u32 length then that many bytes (append_record, for_each_record).
//   task spec (kTask)      u8 route (kRoutePlace | kRouteRun), u64 id.hi, id.lo,
//                          u64 function, i32 owner, u8 has_options (0 | 1)
//                          [string name, map<string, f64> resources, i32 max_retries,
//                           bool actor_creation],
//                          u8 is_call (0 | 1) [u64 actor.hi, actor.lo, u64 caller,
//                           u64 seq, u32 incarnation],
//                          vector<pair<i32, u64>> hints (rank, bytes of arguments there),
//                          then the arguments (core/detail/distributed.hpp)
//   result (kResult)       u64 task.hi, task.lo, then one object (distributed.hpp):
//                          u8 form, u64 id.hi, id.lo, then kObjInline: the value;
//                          kObjRemote: i32 owner, i32 lender, RemoteCopy;
//                          kObjError: the ErrorInfo
//   reference (kRefCount)  u8 op, u64 id.hi, id.lo; kRefDrop: u64 count;
//                          kRefFree: [u64 copy tag] (absent: every copy)
// kControl frames: u8 type, then
//   kCtlState              a control-state message (scheduler/control_state.hpp)
//   kCtlTimelineAsk        nothing
//   kCtlTimelinePart       i32 rank, string host, i64 pid, u64 threads, per thread
//                          string name, i32 index, u64 dropped, u64 events, per event
//                          i64 ts_ns, u64 task, u8 kind (EventKind), string name
//   kCtlActorMoved         u64 actor.hi, actor.lo, i32 rank, u32 incarnation
//   kCtlEnd                i32 exit code, u8 leave without MPI (0 | 1)
//   kCtlRankDead           i32 rank, string why
//   kCtlCheckpoint         u64 sequence (not 0), string tag
//   kCtlLocate             u64 id.hi, id.lo
//   kCtlLocated            u64 id.hi, id.lo, u8 found (0 | 1), then RemoteCopy or ErrorInfo
//   kCtlCheckpointReport   a checkpoint report (below)
//   kCtlCheckpointSaved    u64 sequence, string file, u64 count, count x
//                          (u64 id.hi, id.lo, i32 holder)
// Checkpoint report (a rank's part of a sharded checkpoint, to rank 0):
//   u64 sequence, string tag, u8 status code, string message, string shard file,
//   vector<CheckpointShardEntry> objects, vector<i32> settled (dead ranks read back)
// kData frames (runtime/data_plane.hpp): a 12-byte header (u32 epoch, i32 from,
// i32 to: logical ranks; to = -1 for the receiving process's data plane) then a
// data message (scheduler/data_protocol.hpp) or, for to = -1, a plane message:
//   kStartEpoch            vector<i32> hosts (distinct processes of the job)
//   kEpochStarted          nothing
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "brisk/checkpoint/writer.hpp"
#include "brisk/core/detail/distributed.hpp"
#include "brisk/core/detail/task.hpp"
#include "brisk/core/event_log.hpp"
#include "brisk/core/ids.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/core/status.hpp"

namespace brisk::wire {

// kControl payloads start with one of these.
enum : std::uint8_t {
  kCtlState = 1,              // control-state traffic (ControlPlane)
  kCtlTimelineAsk = 2,        // rank 0 asks for every rank's events
  kCtlTimelinePart = 3,       // one rank's events
  kCtlActorMoved = 4,         // an actor was rebuilt on another rank (from its creator)
  kCtlEnd = 5,                // rank 0: the driver returned this exit code
  kCtlRankDead = 6,           // a global scheduler declared a rank dead (its heartbeats stopped)
  kCtlCheckpoint = 7,         // rank 0: take part in checkpoint N
  kCtlLocate = 8,             // a borrower asks the owner where an object's copy is now (its holder died)
  kCtlLocated = 9,            // the owner's answer: the new copy, or why there is none
  kCtlCheckpointReport = 10,  // to rank 0: this rank's part of a checkpoint (RuntimeCheckpoints)
  kCtlCheckpointSaved = 11,   // rank 0 to an owner: a committed checkpoint holds these objects of yours
};

// Task spec routes.
enum : std::uint8_t { kRoutePlace = 0, kRouteRun = 1 };

// kRefCount record ops.
enum : std::uint8_t { kRefDrop = 0, kRefFree = 1 };

// kRefFree without a tag: the owner frees every copy.
inline constexpr std::uint64_t kAllCopies = ~std::uint64_t{0};

// ---------------------------------------------------------------------------
// Batches.

// Appends `record` to a batch payload.
void append_record(std::vector<std::byte>& out, std::span<const std::byte> record);

// Calls f(record) for each record of a batch payload, in order; false (after the
// records before it) if the payload ends inside a record or its length.
template <class F>
bool for_each_record(std::span<const std::byte> payload, F&& f) {
  std::size_t pos = 0;
  while (pos < payload.size()) {
    if (payload.size() - pos < 4) return false;
    std::uint32_t n = 0;
    std::memcpy(&n, payload.data() + pos, 4);
    pos += 4;
    if (n > payload.size() - pos) return false;
    f(payload.subspan(pos, n));
    pos += n;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Task specs and results.

// The actor call a task spec carries (the rest of detail::ActorCall is the
// receiver's own).
struct ActorCallHeader {
  TaskId actor;
  std::uint64_t caller = 0;
  std::uint64_t seq = 0;
  std::uint32_t incarnation = 0;
};

// The part of a task spec before the arguments (Cluster::ship writes it).
struct TaskSpecHeader {
  std::uint8_t route = kRouteRun;
  TaskId id;
  std::uint64_t function = 0;
  int owner = 0;
  std::shared_ptr<TaskOptions> options;  // null when the task has none (interned_name unset)
  std::optional<ActorCallHeader> call;
  std::vector<std::pair<int, std::uint64_t>> hints;
};

// Writes a task spec header (the arguments follow). `options` and `call` may be null.
void write_task_spec_header(Writer& w, std::uint8_t route, TaskId id, std::uint64_t function, int owner,
                            const TaskOptions* options, const ActorCallHeader* call,
                            const std::vector<std::pair<int, std::uint64_t>>& hints);
// Reads a task spec header from `r`, leaving the arguments. Checks the route and
// that the owner is a rank of a job of `ranks`.
TaskSpecHeader read_task_spec_header(Reader& r, int ranks);

// A kObjRemote object after its form and id (in a result record).
struct RemoteObject {
  int owner = 0;
  int lender = 0;
  detail::RemoteCopy copy;
};
// Checks that the copy's holder is a rank of the job.
RemoteObject read_remote_object(Reader& r, int ranks);


// ---------------------------------------------------------------------------
// Reference counts.

struct RefCountRecord {
  std::uint8_t op = kRefDrop;
  ObjectId id;
  std::uint64_t count = 0;         // kRefDrop: references given back
  std::uint64_t tag = kAllCopies;  // kRefFree: the copy freed
};
std::vector<std::byte> encode_refcount(const RefCountRecord& record);
RefCountRecord decode_refcount(std::span<const std::byte> record);

// ---------------------------------------------------------------------------
// Control messages (the body after the type byte; encoders write the type too).

struct ActorMoved {
  TaskId actor;
  int rank = 0;
  std::uint32_t incarnation = 0;
};
std::vector<std::byte> encode_actor_moved(const ActorMoved& m);
ActorMoved decode_actor_moved(std::span<const std::byte> body, int ranks);

struct EndOfJob {
  int code = 0;
  bool without_mpi = false;
};
std::vector<std::byte> encode_end(const EndOfJob& m);
EndOfJob decode_end(std::span<const std::byte> body);

struct RankDeath {
  int rank = 0;
  std::string why;
};
std::vector<std::byte> encode_rank_death(const RankDeath& m);
RankDeath decode_rank_death(std::span<const std::byte> body, int ranks);

struct CheckpointRequest {
  std::uint64_t sequence = 0;
  std::string tag;  // the attempt ("" for a collective checkpoint)
};
std::vector<std::byte> encode_checkpoint_request(const CheckpointRequest& m);
CheckpointRequest decode_checkpoint_request(std::span<const std::byte> body);

std::vector<std::byte> encode_locate(ObjectId id);
ObjectId decode_locate(std::span<const std::byte> body);

struct Located {
  ObjectId id;
  std::optional<detail::RemoteCopy> copy;       // found: where the copy is now,
  std::shared_ptr<const ErrorInfo> lost;        // or why there is none
};
std::vector<std::byte> encode_located(ObjectId id, const detail::RemoteCopy* copy, const ErrorInfo* lost);
Located decode_located(std::span<const std::byte> body, int ranks);

struct CheckpointSaved {
  std::uint64_t sequence = 0;
  std::string file;
  std::vector<std::pair<ObjectId, int>> objects;  // (object, the rank that held its copy)
};
std::vector<std::byte> encode_checkpoint_saved(const CheckpointSaved& m);
CheckpointSaved decode_checkpoint_saved(std::span<const std::byte> body, int ranks);

// One rank's events (Cluster::snapshot_events writes them, rank 0 merges them).
RankEvents decode_timeline_part(std::span<const std::byte> body);

// ---------------------------------------------------------------------------
// Checkpoint reports (RuntimeCheckpoints::participate -> on_report).

struct CheckpointReport {
  std::uint64_t sequence = 0;
  std::string tag;
  Status status;
  std::string shard;                           // the shard file, or "" when it wrote none
  std::vector<CheckpointShardEntry> objects;   // what the shard holds
  std::vector<int> settled;                    // dead ranks whose copies it has read back
};
std::vector<std::byte> encode_checkpoint_report(const CheckpointReport& m);
// From rank `from`: a shard must be named as that rank's shard of the attempt
// (checkpoint_shard_name); objects without a shard are refused. (A shard that lists
// no objects comes with the error that kept the rank from writing it.)
CheckpointReport decode_checkpoint_report(std::span<const std::byte> body, int from);

// ---------------------------------------------------------------------------
// Data-plane envelopes (kData frames).

inline constexpr std::size_t kDataHeaderBytes = 12;
struct DataHeader {
  std::uint32_t epoch = 0;
  std::int32_t from = 0, to = 0;
};
void encode_data_header(const DataHeader& h, std::byte* out);  // kDataHeaderBytes
// nullopt when `payload` is shorter than the header.
std::optional<DataHeader> decode_data_header(std::span<const std::byte> payload);

enum : std::uint8_t {
  kStartEpoch = 0xF0,    // rank 0 -> every rank: (hosts): start the header's epoch
  kEpochStarted = 0xF1,  // every rank -> rank 0: done
};
// The hosts of a kStartEpoch body (after its type byte), for process `self` of a job
// of `ranks` processes: distinct processes of the job, `self` among them.
std::vector<int> decode_epoch_hosts(std::span<const std::byte> body, int ranks, int self);

}  // namespace brisk::wire
