// brisk/runtime/cluster.hpp — one rank's part of a multi-rank job.
//
// The Cluster sits between core and the transport. It is the rank's executor: a
// ready task runs on the local scheduler unless the node cannot meet its resource
// demand or its queue is past the spill threshold; then the task is encoded and
// sent to a global scheduler, which places it by resources, load and where its
// arguments' bytes are, and forwards it to the chosen rank. The result comes back
// to the submitting rank (the object's owner): inline when small, otherwise as the
// place to pull it from.
//
// Objects: small ones travel inline; larger ones are copied into the rank's
// registered arena and pulled one-sided by the rank that reads them, once per rank
// (the pulled value is cached in that rank's proxy object while it is referenced).
// References lent to other ranks are counted on the lender's object and given back
// when the borrower's proxy dies, so an object is freed on every rank once no Ref
// is left anywhere and no pending task reads it.
//
// A progress thread per rank drives the transport, runs message handlers, flushes
// batched messages and the control-state client, and publishes heartbeats. It
// spins while there is traffic and backs off to short sleeps when idle.
//
// Threading: submit/fetch/post from any thread; message handlers on the progress
// thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "brisk/core/detail/context.hpp"
#include "brisk/core/detail/distributed.hpp"
#include "brisk/core/event_log.hpp"
#include "brisk/core/frame.hpp"
#include "brisk/core/transport.hpp"
#include "brisk/runtime/actor_results.hpp"
#include "brisk/runtime/arena.hpp"
#include "brisk/runtime/node_arena.hpp"
#include "brisk/scheduler/control_state.hpp"
#include "brisk/scheduler/global_scheduler.hpp"
#include "brisk/scheduler/roles.hpp"

namespace brisk {

class LocalScheduler;
class ControlPlane;
class CheckpointReader;
namespace wire {
struct TaskSpecHeader;
struct Located;
}  // namespace wire

struct ClusterStats {
  std::uint64_t tasks_sent = 0;       // tasks this rank encoded for another rank
  std::uint64_t tasks_received = 0;   // tasks run here for another rank
  std::uint64_t tasks_placed = 0;     // placements made by this rank's global scheduler
  std::uint64_t results_received = 0;
  std::uint64_t fetches = 0;          // one-sided pulls started
  std::uint64_t fetched_bytes = 0;
  std::uint64_t fetched_shared = 0;   // of the pulls, those read from a node peer's mapped arena
  std::uint64_t borrowed = 0;         // of those, values read where they lie (no copy)
  std::size_t exposed = 0;            // values exported where they lie, registered (Config::expose_bytes)
  std::uint64_t filled_later = 0;     // copies into the arena made after the task that reads them went
                                      // to a node peer, which copied them out as they landed
  std::size_t node_peers = 0;         // other ranks whose arenas this rank maps
  std::uint64_t malformed = 0;        // messages dropped as malformed
  std::uint64_t scheduler_stalls = 0;  // heartbeat checks of this rank's global scheduler that came a
                                       // quarter of the failure timeout late (that gap is no one's silence)
  std::uint64_t tasks_replayed = 0;   // tasks sent again because their rank died
  std::uint64_t objects_rebuilt = 0;  // results made again from lineage after their holder died
  std::uint64_t objects_lost = 0;     // objects found lost (no copy left, no lineage)
  std::size_t lineage = 0;            // results whose task is kept for replay
  std::uint64_t lineage_cut = 0;      // kept tasks dropped because the owner fetched the value
  std::uint64_t lineage_checkpointed = 0;  // kept tasks dropped because a checkpoint holds the value
  std::uint64_t objects_restored = 0;      // objects read back from a checkpoint after their holder died
  std::size_t saved = 0;                   // owned objects that a checkpoint holds (their holder is alive)
  std::uint64_t frames_sent = 0;
  std::uint64_t arena_used = 0;
  std::uint64_t arena_bytes = 0;      // the arena's size (0: no one-sided reads)
  bool arena_shared = false;          // it is node-shared memory (Config::arena_shared)
  std::size_t directory = 0;          // objects shared with other ranks, alive here
  std::size_t held = 0;               // exported copies kept for other ranks
  std::size_t pending = 0;            // tasks sent away, result not back yet
};

class Cluster final : public detail::Executor,
                      public detail::Distributed,
                      public detail::ObjectCodec,
                      public detail::ObjectResolver {
 public:
  struct Config {
    JobRoles roles;
    std::size_t inline_bytes = 64 * 1024;
    // Values with a contiguous form larger than this are read by other ranks
    // where they lie (their storage registered with the transport) rather than from
    // a copy in the arena, where the transport can (Transport::exposes_any_memory)
    // and no rank of the node maps this rank's arena (see expose_). 0: always a copy.
    std::size_t expose_bytes = std::size_t{4} << 20;
    // Allocations by operator new of at least this many bytes (a std::vector's
    // storage, among others) are placed in the arena while it has room, so that
    // readers read such values where they lie (detail::set_new_memory). Only for the
    // process's one cluster (brisk::run), over a node-shared arena; 0: off. The
    // arena must then outlive the Cluster until detail::retire_new_memory says so.
    std::size_t arena_new_bytes = 0;
    int spill_queue = 4;  // spill when more tasks than this wait locally
    std::chrono::milliseconds heartbeat{10};
    std::chrono::nanoseconds spin{std::chrono::microseconds(50)};  // progress thread spin when idle
    // Resources of every rank (index = rank), gathered at start.
    std::vector<std::map<std::string, double>> node_resources;
    // Added to this rank's steady-clock event times to put them on a clock shared
    // by all ranks (system clock), for the merged timeline.
    std::int64_t clock_offset_ns = 0;
    std::string host;
    int shard_events = 256;  // events sent to the control state per heartbeat
    // A global scheduler declares a rank dead when its heartbeats stop this long
    // (only where the transport can carry on without it: ucx).
    std::chrono::milliseconds failure_timeout{2000};
    // Argument bytes kept alive by lineage (the tasks of results held on other
    // ranks, kept to make those results again if their holder dies; ucx only).
    std::size_t lineage_bytes = std::size_t{1} << 30;
    // Where ranks cannot die without ending the job (mpi), a global scheduler that
    // hears nothing from a rank for `fatal_timeout` calls `fatal` with why; it ends
    // the job. Unset: nothing is checked.
    std::chrono::milliseconds fatal_timeout{10000};
    std::function<void(const std::string&)> fatal;
    // The arenas of the other ranks on this node, mapped read-only (index = rank;
    // empty where not mapped): objects they hold are read from there, not pulled.
    std::vector<std::span<const std::byte>> peer_arenas;
    // The arena is node-shared memory (a memfd that the node's other ranks may map)
    // that the transport exposes as it is (mpi: MPI_Win_create over it, not a window
    // MPI allocates). Reported in ClusterStats.
    bool arena_shared = false;
    // The rank's workers take every core of its cpuset, and poll the transport
    // between tasks and while they spin (LocalScheduler::set_poll_between_tasks):
    // while one of them is awake, the progress thread stands back (see
    // progress_main), instead of taking turns with them on their cores.
    bool workers_poll = false;
    // While a thread of this rank waits and spins on poll() (spin_begin), the
    // progress thread naps instead of polling beside it (see progress_main). Set
    // for the mpi backend, whose polls yield the core when they find nothing
    // (mpi_yield_when_idle); over ucx it measured no better or worse.
    bool nap_beside_waiters = false;
  };

  // `arena` is registered with `transport` through `arena_registration`; a null
  // registration (and empty arena) means no one-sided reads: objects go inline.
  Cluster(Transport& transport, LocalScheduler& local, EventLog* events, std::span<std::byte> arena,
          std::unique_ptr<MemoryRegistration> arena_registration, Config config);
  ~Cluster() override;
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Starts the progress thread.
  void start();
  // Stops it; no message is handled afterwards. Idempotent.
  void stop();

  // --- detail::Executor ---
  void submit(detail::TaskBase* task) noexcept override;
  void block_begin() noexcept override;
  void block_end() noexcept override;
  int current_worker() const noexcept override;

  // --- detail::Distributed ---
  void fetch(detail::ObjectState* object) override;
  void fetch_async(detail::ObjectState* object, std::function<void(const Status&)> done) override;
  void on_destroy(detail::ObjectState* object) noexcept override;
  int poll() noexcept override;
  int poll_after_task() noexcept override;
  void worker_sleeping() noexcept override;
  void spin_begin() noexcept override;
  void spin_end(bool to_sleep) noexcept override;
  bool workers_poll() const noexcept { return config_.workers_poll; }
  // Ends the progress thread's stand-back nap (something now needs it beside the
  // workers, or no worker is awake).
  void wake_standing_back() noexcept;
  void wake_main() noexcept;  // wait_for_end looks again
  void send_actor_call(detail::TaskBase* task, Rank to) noexcept override;
  bool rank_lost(Rank rank) const noexcept override;
  void announce_actor_moved(TaskId actor, Rank rank, std::uint32_t incarnation) noexcept override;
  detail::ObjectState* take_actor_result(ObjectId id, TaskId actor, std::uint32_t incarnation) noexcept override;
  void actor_replay_done(TaskId actor) noexcept override;
  void actor_result_lost(detail::ObjectState* object, const std::string& why) noexcept override;

  // --- the end of the job ---
  // Rank 0: tells every live rank the driver's exit code. `blocked`: a live rank's
  // main thread may never come back (its part of a checkpoint is overdue), so the
  // job leaves without MPI, as after a death (leave_without_mpi).
  void announce_end(int code, bool blocked = false);
  // Other ranks: waits (sleeping, polling) until rank 0 announces the end; returns
  // its code, or kDriverLost when rank 0 died. Meanwhile runs
  // `on_checkpoint(seq, tag)` on the calling thread when rank 0 asks for its part of
  // checkpoint `seq` (see RuntimeCheckpoints).
  int wait_for_end(const std::function<void(std::uint64_t, const std::string&)>& on_checkpoint = {});
  // Rank 0: asks every live rank for its part of checkpoint `sequence`; `tag` names
  // the attempt ("" for a collective one).
  void announce_checkpoint(std::uint64_t sequence, const std::string& tag);
  // Another rank: reports its part of a checkpoint to rank 0, whose handler gets the
  // bytes on its progress thread (set before start()).
  void send_checkpoint_report(std::span<const std::byte> report);
  void set_checkpoint_report_handler(std::function<void(Rank, std::span<const std::byte>)> handler) {
    checkpoint_report_handler_ = std::move(handler);
  }
  static constexpr int kDriverLost = -1000;
  // Whether any rank of the job died (MPI collectives would then hang).
  bool any_rank_lost() const noexcept { return any_lost_.load(std::memory_order_acquire); }
  // At the end: whether a rank died or may be blocked, so that MPI's collectives
  // (MPI_Finalize among them) would hang; the ranks then leave without MPI.
  bool leave_without_mpi() const noexcept {
    return any_rank_lost() || blocked_end_.load(std::memory_order_acquire);
  }

  // --- live objects in checkpoints (ucx) ---
  // The copies this rank holds of other ranks' live objects, named
  // checkpoint_held_name(owner, id), for its part of a checkpoint. Empty where a
  // rank's death ends the job (mpi).
  std::vector<std::pair<std::string, std::vector<std::byte>>> held_copies() const;
  // Rank 0: checkpoint file `path` is committed and holds these copies (name, the
  // rank that held it). Tells every live rank which of its objects the file holds:
  // an owner drops their lineage (the file replaces it), and when a holder dies its
  // owners read those objects back from the newest checkpoint that holds them.
  void checkpoint_committed(std::uint64_t sequence, const std::string& path,
                            const std::vector<std::pair<std::string, int>>& held);
  // The dead ranks whose copies this rank has finished reading back (it heard of
  // their loss, and no read is left): rank 0 carries a dead rank's copies from
  // checkpoint to checkpoint until every live rank has.
  // Any thread but the progress thread.
  std::vector<int> settled_losses();

  // --- detail::ObjectCodec / ObjectResolver ---
  void encode_object(Writer& w, detail::ObjectState* object, Rank to) override;
  detail::ObjectState* resolve_remote(ObjectId id, Rank owner, Rank lender, const detail::RemoteCopy& copy,
                                      detail::ObjectState* (*make)(ObjectId)) override;

  // Writes one Chrome trace with every rank's events (one process row per rank).
  // Rank 0 only; the other ranks answer through their progress threads.
  Status write_timeline(const std::string& path) override;

  // Data-object messages (scheduler/data_protocol.hpp): `handler` gets each kData
  // frame's payload on the progress thread. Set before start().
  void set_data_handler(std::function<void(Rank, std::span<const std::byte>)> handler) {
    data_handler_ = std::move(handler);
  }
  // A kData frame whose payload is `head` then `body`.
  void send_data(Rank to, std::span<const std::byte> head, std::span<const std::byte> body) {
    send_parts(to, FrameKind::kData, head, body);
  }
  // A kData frame made of `frame` in place: its first kFrameHeaderBytes are room for
  // the frame's header (seal_frame), the payload follows.
  void send_data_frame(Rank to, std::vector<std::byte> frame) {
    seal_frame(FrameKind::kData, frame);
    send_sealed(to, FrameKind::kData, std::move(frame));
  }
  // Called (on the progress thread) once a rank is found dead and its tasks and
  // roles are taken care of; for the parts of the runtime that cannot run through
  // the loss. Set before start().
  void set_loss_handler(std::function<void(Rank)> handler) { loss_handler_ = std::move(handler); }
  // Called as each copy described before it was made (RemoteCopy::fill) has its first
  // part published (fault injection: kill-in-fill). Set before start().
  void set_fill_hook(std::function<void()> hook) { fill_hook_ = std::move(hook); }

  ClusterStats stats() const;
  // Sends `bytes` to `to` exactly as given (tests of the receiving side's checks).
  Status send_raw(Rank to, std::vector<std::byte> bytes) { return transport_.send(to, std::move(bytes)); }
  const char* transport_name() const noexcept { return transport_.name(); }
  Rank rank() const noexcept { return self_; }
  int size() const noexcept { return size_; }
  ControlPlane* control() noexcept { return control_.get(); }

 private:
  struct Outbox;
  struct Pending {
    detail::ObjectState* result;  // one reference held
    const char* name;
    LineageRecord lineage;        // updated with the executor when the result comes
    // The task itself (owned, arguments and all), kept where ranks can die without
    // ending the job (ucx) so that a task lost with its rank runs again elsewhere
    // (same id, arguments encoded afresh). Null for actor calls and on mpi.
    detail::TaskBase* task = nullptr;
    // Its result is complete already and this run makes a new copy of it (the
    // holder of the old one died).
    bool rebuild = false;
    // Sent to a global scheduler for placement: the rank running it is not known
    // here, so any rank's death runs it again (a late duplicate result is dropped).
    bool placed_elsewhere = false;
    // A call on an actor that replays its calls (ActorOptions::replay_calls): if its
    // rank dies, the rebuilt actor runs it again and completes the result.
    bool actor_replay = false;
    TaskId actor;                        // actor_replay: whose call,
    std::uint32_t actor_incarnation = 0;  // and the build it was made for
  };
  // A result held on another rank, with the task that can make it again.
  struct Lineage {
    detail::TaskBase* task;  // owned
    std::uint64_t bytes;     // argument bytes it keeps alive
    std::uint64_t order;     // when it was kept (the oldest goes first)
  };
  struct Held {
    std::uint64_t tag;    // RemoteCopy::tag of the copy
    std::uint64_t offset;  // in the arena (unless `registration`)
    std::uint64_t length;
    const std::byte* bytes;  // where the copy lies here
    detail::ObjectState* value = nullptr;  // exported in place: a reference that keeps the bytes
    int owner = 0;
    // The value's own storage registered (RemoteCopy::own_region): `value` is pinned
    // while it lasts.
    std::unique_ptr<MemoryRegistration> registration;
  };
  // An owned object whose copy a committed checkpoint holds.
  struct Saved {
    std::shared_ptr<const std::string> file;  // the newest checkpoint that holds it
    std::uint64_t sequence = 0;               // that checkpoint's
    int holder = 0;                           // the rank whose copy was written
  };
  class ArenaMemory;
  class ResultForwarder;
  bool read_spec_header(Rank from, Reader& r, wire::TaskSpecHeader& header);

  void progress_main();
  void wake_progress() noexcept;  // wakes the progress thread if it sleeps
  // Sleeps the progress thread on its word as `state` (Transport::kAsleep, or
  // kAsleepUntilMessage: node peers that send to this rank wake it) until woken or
  // `most` has passed, if still `may_sleep()` once the word is set. Returns the
  // events of the poll it makes before it sleeps until a message (0: none, it slept).
  template <class MaySleep>
  int progress_sleep(std::uint32_t state, std::chrono::steady_clock::duration most, MaySleep may_sleep);
  int flush_outboxes(bool all);
  void post(Rank to, FrameKind kind, std::span<const std::byte> record);
  void send_frame(Rank to, FrameKind kind, std::vector<std::byte> payload);
  void send_parts(Rank to, FrameKind kind, std::span<const std::byte> head, std::span<const std::byte> body);
  void send_sealed(Rank to, FrameKind kind, std::vector<std::byte> frame);
  void send_control_state(const Outgoing& out);
  void handle_message(Rank from, std::span<const std::byte> bytes);
  void handle_task(Rank from, std::span<const std::byte> record);
  void handle_result(Rank from, std::span<const std::byte> record);
  void handle_refcount(Rank from, std::span<const std::byte> record);
  void handle_control(Rank from, std::span<const std::byte> payload);
  // Runs `handle` (which decodes a control message and applies it); one that throws
  // reports the message malformed.
  void read_control(Rank from, const char* what, const std::function<void()>& handle);
  // Sends a control message to every other rank not known dead.
  void send_to_live_ranks(std::span<const std::byte> control);
  void malformed(Rank from, const std::string& why);
  // A peer died (transport failure handler): fails what it held, rebuilds actors.
  // `announce`: found here, so every other live rank is told (kCtlRankDead).
  void on_rank_lost(Rank peer, const Status& why, bool announce = true);
  // Global scheduler: declares ranks dead whose heartbeats stopped (progress thread).
  void check_heartbeats(std::chrono::steady_clock::time_point now);
  void fail_pending_on(Rank peer);
  // The global scheduler this rank spills to: its own by the roles, or, once that
  // one died, the next live one (this rank itself when none is left).
  Rank scheduler() const noexcept;
  // Ships a kept task again (its result with it, one reference); `rebuild` when the
  // result is complete and only a new copy is wanted.
  void reship(detail::TaskBase* task, detail::ObjectState* result, bool rebuild) noexcept;
  // Gives up on a task that cannot be sent: fails its result with `why`, or, for a
  // rebuild (its object is complete already), marks the object lost. Deletes it.
  void abandon(detail::TaskBase* task, bool rebuild, std::shared_ptr<const ErrorInfo> why) noexcept;
  // The holder of a remote object's copy died: asks the owner for a new copy, or
  // (owner) makes one from lineage. Pulls wait until it is known.
  void relocate(detail::ObjectState* object) noexcept;
  // Owner: the new copy (or nullopt with the error) is known; answers the ranks that
  // asked and starts the pulls that waited.
  void relocated(detail::ObjectState* object, std::optional<detail::RemoteCopy> copy,
                 std::shared_ptr<const ErrorInfo> lost) noexcept;
  // Starts the pull of `copy` into `object` (after `fetching` was set).
  void start_pull(detail::ObjectState* object, const detail::RemoteCopy& copy);
  // The bytes of `copy` where this rank can read them directly (its own arena, or a
  // node peer's mapped one), or nullptr.
  const std::byte* readable_here(const detail::RemoteCopy& copy) const noexcept;
  // Whether a pull of `object` would be a copy from memory this rank maps (its copy
  // is known and readable_here), not a transfer through the transport.
  bool pull_is_local_copy(detail::ObjectState* object) const noexcept;
  // A pull failed because its holder died: ends it and relocates the object.
  void retry_pull(detail::ObjectState* object);
  void keep_lineage(ObjectId id, detail::TaskBase* task);
  // Takes the kept task of `id` out of the lineage (null when none is kept).
  detail::TaskBase* take_lineage(ObjectId id);
  // Where rank `to` can pull this rank's own resident value from: its export, made
  // now if there is none (nullopt when the arena has no room). Inside a FillLater
  // scope for `to`, a new copy into the arena is described before it is made (see
  // RemoteCopy::fill); otherwise the copy returned is complete for any reader where
  // `to` does not map this rank's arena (kAnyRank: never).
  static constexpr Rank kAnyRank{-1};
  std::optional<detail::RemoteCopy> local_copy(detail::ObjectState* object, Rank to);
  // Arena copies described before they are made (RemoteCopy::fill).
  struct Fill {
    detail::ObjectState* object;  // pinned, one reference held, until the copy is made
    const std::byte* from;
    std::uint64_t copy_offset;  // of the bytes in the arena
    std::uint64_t length;
    std::uint64_t word;  // arena offset of the count of bytes copied
  };
  class FillLater;
  // Makes the copies (publishing each part as it lands), then unpins and releases.
  void make_fills(std::vector<Fill>& fills) noexcept;
  // The arena of `holder` as this rank reads it: its own, a node peer's mapped view,
  // or empty (not mapped here).
  std::span<const std::byte> arena_of(Rank holder) const noexcept;
  // Whether rank `to` maps this rank's arena (and so can watch a fill's count); the
  // ranks of a node map each other's arenas or neither does (run.cpp).
  bool maps_arena_here(Rank to) const noexcept;
  // Waits until `copy` is complete where it is not for `to` (a copy still being
  // filled goes only from its holder to a rank that maps its arena).
  void settle_for(const detail::RemoteCopy& copy, Rank to);
  // The count of bytes copied so far of `copy` (RemoteCopy::fill), where this rank
  // maps its holder's arena; null otherwise (or where the offset is out of range).
  const std::uint64_t* fill_word(const detail::RemoteCopy& copy) const noexcept;
  // Waits until the fill count of `copy` reaches at least `at_least` (and returns the
  // count seen), or its holder is lost (returns what it saw then, less than asked).
  std::uint64_t await_fill(const detail::RemoteCopy& copy, std::uint64_t at_least);
  void handle_locate(Rank from, ObjectId id);
  void handle_located(Rank from, wire::Located answer);
  std::shared_ptr<const ErrorInfo> lost_error(detail::ObjectState* object, std::string why);
  // Owner: checkpoint `sequence` (`file`) holds these objects (id, holder): their
  // lineage goes.
  void apply_saved(std::uint64_t sequence, const std::string& file,
                   const std::vector<std::pair<ObjectId, int>>& objects);
  // Takes the checkpoint copy of `id` out of the table (nullopt when none);
  // `restore`: for a read-back, counted in restores_pending_ at once.
  std::optional<Saved> take_saved(ObjectId id, bool restore = false);
  // The eager read-back at a holder's death (on_rank_lost); returns how many.
  std::size_t restore_saved_on(Rank holder);
  // The restore thread: reads objects whose holder died back from checkpoints.
  void restore_main();
  // Fills `object` (owned, remote) from its copy in `saved`'s checkpoint, or the
  // newest one after it that holds it; throws on failure.
  // `open`: the files read so far, kept open.
  void read_saved(detail::ObjectState* object, const Saved& saved, std::map<std::string, CheckpointReader>& open);

  void run_here(detail::TaskBase* task) noexcept;
  // Where the arguments' bytes are (rank, bytes), for placement by locality.
  std::vector<std::pair<int, std::uint64_t>> locality_hints(const std::vector<detail::ObjectState*>& args) const;
  void ship(detail::TaskBase* task, Rank to, bool for_placement, bool rebuild = false) noexcept;
  // Global scheduler: picks a rank for a task spec and forwards it there.
  void place(std::span<const std::byte> record);
  // GlobalScheduler::choose with this rank's own load now. `actor`: an actor's
  // constructor (actors are spread over the ranks).
  Rank choose_node(const std::map<std::string, double>& demand,
                   const std::vector<std::pair<int, std::uint64_t>>& hints, bool actor = false);
  void send_error_result(Rank owner, TaskId task, std::shared_ptr<const ErrorInfo> error);
  void forward_result(Rank owner, TaskId task, detail::ObjectState* result) noexcept;

  // Where readers pull `object` from: a copy in the arena, or (`in_place`) the value's
  // own storage, which lies in the arena already or (`registration`, the object
  // pinned) is registered with the transport for this export.
  struct Export {
    detail::RemoteCopy copy;
    bool in_place = false;
    std::unique_ptr<MemoryRegistration> registration;
    // Set where the copy into the arena is still to be made (`later`), from here.
    const std::byte* fill_from = nullptr;
  };
  // `later`: a copy into the arena of a large contiguous value is only described
  // (RemoteCopy::fill, count zero); the caller makes it (Fill).
  std::optional<Export> export_object(detail::ObjectState* object, bool later = false);
  // Undoes export_object: frees the arena block at `offset` (a copy), or ends the
  // registration and unpins `object`.
  void drop_export(detail::ObjectState* object, std::uint64_t offset, bool in_place,
                   std::unique_ptr<MemoryRegistration> registration) noexcept;
  void remember(detail::ObjectState* object);  // into the directory
  void drop_borrow(Rank lender, ObjectId id, std::uint64_t count);
  // The object with this id that this rank shares with others (directory), or null.
  detail::ObjectState* shared_object(ObjectId id) const;
  // The same with a reference added (null when it is gone or going).
  detail::ObjectState* shared_object_ref(ObjectId id) const;
  // Frees the held copy of `id` with this RemoteCopy::tag, or every copy of it (kAllCopies).
  static constexpr std::uint64_t kAllCopies = ~std::uint64_t{0};
  void release_held(ObjectId id, std::uint64_t tag = kAllCopies);
  void finish_fetch(detail::ObjectState* object, const Status& status);
  void heartbeat();
  void apply_node_statuses(const std::vector<NodeStatus>& statuses);
  std::vector<std::byte> snapshot_events() const;

  Transport& transport_;
  LocalScheduler& local_;
  std::function<void(Rank, std::span<const std::byte>)> data_handler_;
  std::function<void(Rank)> loss_handler_;
  std::function<void()> fill_hook_;
  std::function<void(Rank, std::span<const std::byte>)> checkpoint_report_handler_;
  EventLog* events_;
  Config config_;
  Rank self_;
  int size_;
  std::span<std::byte> arena_;
  std::unique_ptr<MemoryRegistration> arena_registration_;
  ArenaAllocator arena_alloc_;
  ArenaMemory* shared_memory_ = nullptr;  // Array storage in the arena (never deleted)
  std::atomic<std::int64_t> exported_{0};  // objects others may pull from this rank now
  std::atomic<std::int64_t> exposed_{0};   // of those, registered where they lie
  std::atomic<std::uint64_t> filled_later_{0};  // ClusterStats::filled_later
  std::size_t node_peers_ = 0;              // other ranks whose arenas this rank maps (and they its)
  // Per rank: the pages of its arena mapped here (null where not mapped).
  std::vector<std::unique_ptr<PeerArenaPages>> peer_pages_;
  bool readers_need_progress_ = false;      // some rank reads this one's arena through the transport
  // Large values are exported where they lie (Config::expose_bytes): the transport
  // registers any memory, and no rank reads this one's arena where it lies.
  bool expose_ = false;
  std::atomic<std::size_t> awaited_{0};     // pending_.size(), read without its lock
  std::atomic<std::int64_t> last_shipped_{0};  // when a task last left for another rank (Clock ticks)
  std::atomic<std::int64_t> last_served_{0};   // when a task last came from another rank (Clock ticks)
  std::atomic<bool> standing_back_{false};     // the progress thread leaves polling to the workers
  std::atomic<std::uint64_t> other_polls_{0};  // Cluster::poll calls (threads other than the progress thread)
  std::unique_ptr<ControlPlane> control_;

  std::vector<std::unique_ptr<Outbox>> outboxes_;
  std::atomic<bool> deferred_{false};

  mutable std::mutex pending_mutex_;
  std::unordered_map<TaskId, Pending> pending_;

  mutable std::mutex directory_mutex_;
  std::unordered_map<ObjectId, detail::ObjectState*> directory_;

  mutable std::mutex held_mutex_;
  // Copies held for owners; one object may have more than one when its task ran
  // twice here (a replay): the owner frees the one it does not use by its offset.
  std::unordered_multimap<ObjectId, Held> held_;

  // Global scheduler state: choose() on ranks hosting a scheduler (or placing their
  // own work once none is left), sole() on every rank.
  GlobalScheduler gs_;
  bool is_scheduler_ = false;
  std::atomic<bool> idle_elsewhere_{false};  // another rank had an idle core at its last heartbeat
  std::uint64_t heartbeat_sequence_ = 0;
  std::chrono::steady_clock::time_point last_heartbeat_check_{};  // progress thread only
  std::vector<std::uint64_t> event_cursors_;  // progress thread only
  std::uint64_t events_missed_ = 0;

  // Timeline collection on rank 0.
  std::mutex timeline_mutex_;
  std::vector<std::vector<std::byte>> timeline_parts_;
  std::atomic<int> timeline_replies_{0};

  std::mutex progress_mutex_;  // one thread at a time moves the transport
  std::thread progress_;
  std::atomic<bool> running_{false};
  std::atomic<std::uint32_t> progress_sleeping_{0};  // Transport::kAwake etc., where the transport has no wake word
  // What the progress thread sleeps on: the transport's wake word where it has one
  // (shared with this rank's node: futex calls for shared memory), else
  // progress_sleeping_.
  std::atomic<std::uint32_t>* sleep_word_ = &progress_sleeping_;
  std::atomic<int> fetches_in_flight_{0};
  std::atomic<int> waiting_pollers_{0};  // threads polling in fetch()
  std::atomic<int> spin_pollers_{0};     // threads spinning on poll() (spin_begin/spin_end)
  std::atomic<bool> napping_for_spinners_{false};  // the progress thread naps while they spin
  std::atomic<bool> waiter_asleep_{false};  // a spinner went to sleep while others spun on

  static constexpr int kNoEnd = -1001;
  std::unique_ptr<std::atomic<bool>[]> lost_;       // per rank: found dead
  std::unique_ptr<std::atomic<bool>[]> lost_seen_;  // per rank: its loss is being handled
  std::unique_ptr<std::atomic<bool>[]> lost_queued_;  // per rank: its copies' read-back is queued
  std::atomic<bool> any_lost_{false};
  std::atomic<int> end_code_{kNoEnd};
  // Bumped (and futex-woken) when end_code_ is set or a checkpoint is requested:
  // wait_for_end sleeps on it.
  std::atomic<std::uint32_t> main_wake_{0};
  std::atomic<bool> blocked_end_{false};  // the end says to leave without MPI (a rank died or is blocked)
  // The last checkpoint request from rank 0, not yet taken by wait_for_end.
  std::mutex checkpoint_mutex_;
  std::uint64_t checkpoint_sequence_ = 0;  // 0: none
  std::string checkpoint_tag_;
  bool keep_specs_ = false;  // the transport reports dead ranks: keep specs to replay
  std::mutex lineage_mutex_;
  std::unordered_map<ObjectId, Lineage> lineage_;
  std::map<std::uint64_t, ObjectId> lineage_fifo_;  // by `order`
  std::uint64_t lineage_bytes_ = 0, lineage_order_ = 0;
  // Results of logged actor calls held on other ranks: made again by the actor's
  // replay, not by lineage, when their holder dies.
  ActorResults actor_results_;
  std::mutex replayed_mutex_;
  std::unordered_set<TaskId> replayed_;  // results of these may come twice: the second is dropped
  mutable std::mutex saved_mutex_;
  std::unordered_map<ObjectId, Saved> saved_;  // owned objects a checkpoint holds
  mutable std::mutex restore_mutex_;
  std::condition_variable restore_cv_;
  std::deque<std::pair<detail::ObjectState*, Saved>> restore_queue_;  // a reference each
  std::thread restorer_;  // started with the first restore
  bool restore_stop_ = false;
  // Taken from saved_ for a read-back and not done yet (changed under saved_mutex_
  // when taken, so that saved_ and it together say what is left to read).
  std::atomic<std::size_t> restores_pending_{0};

  std::atomic<std::uint64_t> tasks_sent_{0}, tasks_received_{0}, tasks_placed_{0}, results_received_{0},
      fetches_{0}, fetched_bytes_{0}, malformed_{0}, frames_sent_{0}, tasks_replayed_{0},
      objects_rebuilt_{0}, objects_lost_{0}, lineage_cut_{0}, lineage_checkpointed_{0}, objects_restored_{0},
      fetched_shared_{0}, borrowed_{0}, scheduler_stalls_{0};
};

}  // namespace brisk
