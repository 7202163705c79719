// brisk/core/detail/distributed.hpp — what core needs from the multi-rank runtime.
//
// core knows objects and tasks; runtime/ knows ranks. When a task or an object
// crosses ranks, core encodes and decodes the parts whose types only core's
// templates know (argument values, result values) and asks the runtime, through
// ObjectCodec and Distributed, for the parts only it knows (where an object's bytes
// are, who owns it, reference counts across ranks).
//
// Wire form of one task argument, written by TypedTask::encode_args and read by the
// invoker that BRISK_REMOTE registers:
//   u8 tag = kArgValue   then the parameter's value, serialized
//   u8 tag = kArgObject  then one object (ObjectCodec::encode_object)
//   u8 tag = kArgObjects then u64 count and that many objects
// Wire form of one object:
//   u8 form = kObjInline then ObjectId and the value, serialized
//   u8 form = kObjRemote then ObjectId, owner rank, lender rank, RemoteCopy
//   u8 form = kObjError  then ObjectId and the ErrorInfo
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "brisk/core/error.hpp"
#include "brisk/core/ids.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/core/transport.hpp"

namespace brisk::detail {

class ObjectState;
class TaskBase;

enum : std::uint8_t { kArgValue = 0, kArgObject = 1, kArgObjects = 2 };
enum : std::uint8_t { kObjInline = 0, kObjRemote = 1, kObjError = 2 };

// Where the serialized bytes of an object are: `length` bytes at `offset` in a
// region the holder registered. `raw` marks the contiguous fast path: the bytes are
// the elements of a contiguous container (vector of trivially copyable elements or
// string) without the length prefix, and `count` is the element count.
struct RemoteCopy {
  RemoteRegion region;  // region.owner is the holder
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t count = 0;
  bool raw = false;
  // `region` was registered for this copy alone (the value's own storage): read
  // through the transport, never from a mapped arena.
  bool own_region = false;
  // Nonzero: the holder was still copying the bytes into its arena when it described
  // the copy (it sends the message first and copies after, so that a reader on its
  // node copies each part out as it lands). `fill` is then the arena offset of a u64
  // that counts the bytes copied so far, up to `length`. Such a copy goes only to
  // ranks that map the holder's arena; one that forwards it waits for the count.
  std::uint64_t fill = 0;

  template <class A>
  void serialize(A& ar) {
    ar(region, offset, length, count, raw, own_region, fill);
  }
  // Names the copy among its holder's copies (the holder's arena address of its
  // bytes, or the value's own address): what an owner sends back to free one.
  std::uint64_t tag() const noexcept { return region.address + offset; }
};

// The cross-rank bookkeeping of one ObjectState, made the first time the object
// crosses ranks. Guarded by `mutex` except where noted.
struct DistInfo {
  std::mutex mutex;
  Rank owner;                      // the rank whose ObjectState is authoritative
  bool proxy = false;              // this state stands for another rank's object
  bool in_directory = false;       // registered in the runtime's id -> state map
  bool lineage = false;            // its task's lineage is in the control state
  std::optional<RemoteCopy> copy;  // where the value can be pulled from
  // Proxy: references lent to this rank, per lender rank, returned on destruction.
  std::vector<std::pair<int, std::uint64_t>> borrowed;
  // Ranks holding an exported copy that the owner frees when the object dies.
  std::vector<int> holders;
  // This rank's exported copy (a block of the rank's registered arena), or the
  // value's own storage when it already lies in the arena (`exported_in_place`: the
  // block belongs to the value and is freed with it).
  std::optional<RemoteCopy> exported;
  bool exported_in_place = false;
  // The registration of the value's own storage, where `exported` is read there
  // (RemoteCopy::own_region); the value is pinned while it lasts.
  std::unique_ptr<MemoryRegistration> export_registration;
  // A pull in flight: completions to run when it ends.
  bool fetching = false;
  std::vector<std::function<void(const Status&)>> on_fetched;
  // The holder of `copy` died: a new copy is being made (the owner replays the
  // task from lineage) or asked for (a proxy asks its owner). Pulls wait for it.
  bool relocating = false;
  // Owner: ranks that asked where the new copy is, answered when it is known.
  std::vector<int> locators;
  // Set when no new copy can be made: every later pull fails with it.
  std::shared_ptr<const ErrorInfo> lost;
};

// Encodes and decodes objects for messages between ranks (implemented by the
// runtime; the typed parts call back into the object).
class ObjectCodec {
 public:
  virtual ~ObjectCodec() = default;
  // Writes `object` (complete) for rank `to`: inline when small and resident,
  // otherwise where to pull it from (lending a reference to `to`).
  virtual void encode_object(Writer& w, ObjectState* object, Rank to) = 0;
};

// What an object decoder needs to make typed states; `make` builds an empty
// TypedObject of the parameter's type.
class ObjectResolver {
 public:
  virtual ~ObjectResolver() = default;
  // A kObjRemote object: the live state for `id` on this rank (a reference added),
  // or a new proxy made with `make` and completed as remote. The lent reference is
  // accounted either way.
  virtual ObjectState* resolve_remote(ObjectId id, Rank owner, Rank lender, const RemoteCopy& copy,
                                      ObjectState* (*make)(ObjectId)) = 0;
};

// The multi-rank runtime, as core sees it (nullptr in RuntimeContext when the job
// has one rank and no transport).
class Distributed {
 public:
  virtual ~Distributed() = default;
  // Makes a remote object's value resident on this rank; blocks the calling thread
  // (not a progress thread) until it is. Throws brisk::Error on failure.
  virtual void fetch(ObjectState* object) = 0;
  // Starts making it resident; `done` runs once it is (on the progress thread, or
  // at once on the calling thread when nothing has to move).
  virtual void fetch_async(ObjectState* object, std::function<void(const Status&)> done) = 0;
  // The last reference to an object with DistInfo is gone: return borrowed
  // references, free exported copies. The state is deleted right after.
  virtual void on_destroy(ObjectState* object) noexcept = 0;
  // Moves messages along unless another thread is doing so; message handlers may
  // run on the calling thread (they never block). Waiting and idle threads call it
  // so that a message is handled by a thread that is already awake. Returns the
  // number of events handled.
  virtual int poll() noexcept = 0;
  // A worker between two tasks: polls (as poll()) where the progress thread leaves
  // polling to the workers (runtime/cluster.hpp, Config::workers_poll), else nothing.
  virtual int poll_after_task() noexcept { return 0; }
  // A worker of this rank stops polling: it is about to sleep (no task), park (a
  // spare no longer needed) or block in get/wait inside a task. Whoever stood back
  // from polling because workers were awake takes it up again if none is left.
  virtual void worker_sleeping() noexcept {}
  // A thread starts, or stops, spinning on poll() while it waits (get, wait, a
  // pull): while one does, it takes up what arrives, and the progress thread may
  // nap instead of taking turns with it on a shared core (runtime/cluster.hpp,
  // Config::nap_beside_waiters). `to_sleep`: the thread stops to sleep, not because
  // what it waited for came; the progress thread then polls again at once. (Idle
  // workers poll too but do not count: with the progress thread napping while they
  // spin, tasks across ranks ran a fifth slower.)
  virtual void spin_begin() noexcept {}
  virtual void spin_end(bool to_sleep) noexcept { (void)to_sleep; }
  // Sends an actor call (ready, see task.hpp) to the rank its actor lives on, where
  // it enters the actor's mailbox. Takes the task.
  virtual void send_actor_call(TaskBase* task, Rank to) noexcept = 0;
  // Whether `rank` is known dead (ranks are never revived).
  virtual bool rank_lost(Rank rank) const noexcept = 0;
  // Tells every other live rank that an actor was rebuilt on `rank` (actor.cpp).
  virtual void announce_actor_moved(TaskId actor, Rank rank, std::uint32_t incarnation) noexcept = 0;
  // Actor call replay, on the creator's rank (actor.cpp): the result `id` of a
  // logged call on `actor`, complete already. When its only copy died with its
  // holder, returns it (a reference taken) marked as being made again, and the
  // replay for build `incarnation` submits the call as a rebuild of it
  // (ActorCall::rebuild); nullptr when nothing needs making (gone, here, or its
  // copy lives).
  virtual ObjectState* take_actor_result(ObjectId id, TaskId actor, std::uint32_t incarnation) noexcept {
    (void)id, (void)actor, (void)incarnation;
    return nullptr;
  }
  // The replay of `actor`'s calls was submitted, or will not come: results that
  // waited for it and were not taken are lost.
  virtual void actor_replay_done(TaskId actor) noexcept { (void)actor; }
  // A result that take_actor_result handed out could not be made again.
  virtual void actor_result_lost(ObjectState* object, const std::string& why) noexcept { (void)object, (void)why; }
  // brisk::timeline on rank 0: one trace with every rank's events.
  virtual Status write_timeline(const std::string& path) = 0;
};

// Reads the ErrorInfo written by write_error_info.
void write_error_info(Writer& w, const ErrorInfo& e);
std::shared_ptr<const ErrorInfo> read_error_info(Reader& r);

}  // namespace brisk::detail
