// brisk/scheduler/data_worker.hpp — one rank's half of data objects and templates.
//
// The DataWorker keeps this rank's partition instances and runs the commands the
// controller sends (data_protocol.hpp). Commands are ordered by their accesses to
// local instances, in arrival order: a command that writes an instance waits for
// the instance's last writer and every reader since; a reader waits for the last
// writer. A recv also waits for its data. Ready computes, sends and delivers run on
// the local executor's workers; a finished command releases its successors.
//
// Worker templates: kInstall caches this rank's part of a template (commands in
// program order, with their instances resolved); kInstantiate walks the cache with
// fresh ids, keys and parameters, and needs no validation; kEdit removes and adds
// single commands. An instantiation is ordered after everything that arrived before
// it, exactly as if its commands had been sent one by one.
//
// Thread safety: handle() from any thread (the transport's progress thread, or the
// controller on this rank); commands run on the executor's workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "brisk/core/data.hpp"
#include "brisk/core/detail/context.hpp"
#include "brisk/scheduler/data_protocol.hpp"

namespace brisk {

class EventLog;

class DataWorker {
 public:
  // Sends a message to a rank (this one included).
  using Send = std::function<void(int to, std::vector<std::byte> message)>;
  // Every message given to `send` begins with `headroom` bytes (zeros, at most
  // kMaxHeadroom) that are not part of it: room for the sender's own headers, so
  // that it can send the buffer as it is instead of copying the message behind them.
  static constexpr std::size_t kMaxHeadroom = 64;
  DataWorker(int rank, detail::Executor& executor, Send send, EventLog* events = nullptr, std::size_t headroom = 0);
  // Requires that no command of this worker is queued in or run by the executor (it
  // ran them all, or shut down); commands that never became ready (a recv whose copy
  // never came) are freed here.
  ~DataWorker();
  DataWorker(const DataWorker&) = delete;
  DataWorker& operator=(const DataWorker&) = delete;

  // Handles one message for this rank; a malformed one is reported on stderr and
  // dropped (returns false).
  bool handle(int from, std::span<const std::byte> message);
  // Queues a message to be handled in order on one of the executor's workers (the
  // caller does not wait for the commands to be linked); a copy is handled at once.
  void post(int from, std::vector<std::byte> message);
  // The same for bytes that stay valid only during the call (a transport's receive
  // buffer): a copy is handled at once, and unpacked from `message` itself when its
  // recv can run now; anything queued is copied first.
  void post_view(int from, std::span<const std::byte> message);

  // Checkpoints. The partitions this rank writes into checkpoint `sequence` (as its
  // kCheckpointPlan said), serialized: (object name, bytes). Call when the rank is
  // quiet (the controller synced before planning).
  std::vector<std::pair<std::string, std::vector<std::byte>>> checkpoint_objects(std::uint64_t sequence);
  // Reads an object from a checkpoint file (kRestore); set by the runtime.
  using RestoreLoader = std::function<std::vector<std::byte>(const std::string& file, const std::string& name)>;
  void set_restore_loader(RestoreLoader loader) { restore_loader_ = std::move(loader); }

  // Stops this worker for good (a rollback replaced it): queued messages are dropped,
  // later ones ignored, and its commands finish without running. Tasks already
  // running run to their end; then the partitions' values are freed.
  void cancel() noexcept;
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_seq_cst); }

  // Rollback: keeps the templates of `before` (the worker this one replaces on this
  // process), their peers mapped by `rank_map` (before's rank r is this epoch's rank
  // rank_map[r], -1: lost), until a kAdopt takes one over. Template messages that
  // `before` received and has not handled yet are applied first; its other queued
  // messages are dropped (they belong to the epoch that ends). Waits for a message
  // `before` is handling now (one message's handling: at most a partition restored
  // from a checkpoint). Names installed twice are left out, as the controller's
  // carry_templates does; the controller adopts only what every rank kept. Call
  // before `before` is cancelled.
  void carry_templates(DataWorker& before, const std::vector<int>& rank_map);

  // Called as each data task starts (fault injection); set before any command.
  void set_task_hook(std::function<void()> hook) { task_hook_ = std::move(hook); }

  std::uint64_t tasks_run() const noexcept { return tasks_run_.load(std::memory_order_relaxed); }
  // Fills the worker fields of `s` (tasks run, template times).
  void add_stats(detail::DataPlaneStats& s) const;
  // Commands received and not finished.
  std::int64_t outstanding() const noexcept { return outstanding_.load(std::memory_order_acquire); }
  const std::atomic<std::int64_t>& outstanding_counter() const noexcept { return outstanding_; }
  std::uint64_t malformed() const noexcept { return malformed_.load(std::memory_order_relaxed); }

 private:
  struct Instance;
  struct Entry;
  struct Batch;
  struct Node;
  class RunNode;
  struct Template;
  class DrainTask;
  class Busy;
  void drain() noexcept;
  // Handles the message now if its kind needs no ordering with the commands (copies,
  // checkpoint plans); false when it must be queued.
  bool handle_at_once(int from, std::span<const std::byte> message);
  struct DataSetInfo {
    std::string name;
    const detail::DataTypeOps* type = nullptr;
  };

  void on_dataset(Reader& r);
  void on_commands(Reader& r);
  void on_install(Reader& r);
  void on_instantiate(Reader& r);
  void on_edit(Reader& r);
  void on_copy(Reader& r);
  void on_sync(Reader& r);
  void on_checkpoint_plan(Reader& r);
  void on_restore(Reader& r);
  void on_adopt(Reader& r);

  // Resolves a command's instances (creating them); throws on an unknown data set.
  std::shared_ptr<Entry> make_entry(DataCommand cmd);
  Instance* instance(const detail::DataAccess& a);
  // Orders `node` after the instance's earlier accesses (mutex_ held).
  void link(Node* node);
  void add_edge(Node* from, Node* to);
  // Counts a linked batch's commands as outstanding and releases its nodes.
  void start(std::unique_ptr<Batch> batch) noexcept;
  void ready(Node* node) noexcept;
  void push_ready(Node* node) noexcept;
  Node* pop_ready() noexcept;
  void execute(Node* node) noexcept;
  void complete(Node* node) noexcept;
  void report_failure(const char* function, const std::string& message) noexcept;
  // Gives a finished node back to its batch; the last one frees the batch.
  static void release_to(Batch* batch) noexcept;
  // A writer for a message of about `body` bytes, the headroom written.
  Writer message(std::size_t body = 0) const;
  // Frees every instance's value (a cancelled worker, once no command runs).
  void release_values() noexcept;
  void finish_syncs() noexcept;

  static constexpr std::size_t kInlineRecvBytes = 1 << 20;

  int rank_;
  detail::Executor& executor_;
  Send send_;
  EventLog* events_;
  std::size_t headroom_;

  mutable std::mutex mutex_;  // instances, templates, arrivals, syncs
  std::unordered_map<std::uint32_t, DataSetInfo> datasets_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Instance>> instances_;
  std::unordered_map<std::uint32_t, std::unique_ptr<Template>> templates_;
  // Kept through a rollback (carry_templates), by name, until adopted: commands in
  // program order, with the data-set ids of the epoch the template was installed in
  // (kAdopt says what they are now).
  using CarriedTemplate = std::map<std::pair<std::uint64_t, std::uint64_t>, DataCommand>;
  std::unordered_map<std::string, CarriedTemplate> carried_;
  std::unordered_map<std::uint64_t, std::vector<std::byte>> arrived_;  // copies here before their recv
  std::unordered_map<std::uint64_t, Node*> awaiting_;                 // recvs waiting for their copy
  std::vector<std::pair<std::uint64_t, std::uint64_t>> syncs_;        // (token, mark) to answer when idle
  std::uint64_t settled_below_ = 0;  // copies keyed below this are all consumed (the last sync's mark)
  std::unordered_map<std::uint64_t, std::vector<CheckpointPart>> plans_;  // by checkpoint sequence
  RestoreLoader restore_loader_;
  std::function<void()> task_hook_;

  std::uint64_t next_order_ = 0;  // program order of the next command linked (mutex_)
  // Computes ready to run, by program order (a min-heap): executor turns take the first.
  std::mutex ready_mutex_;
  std::vector<std::pair<std::uint64_t, Node*>> ready_;

  std::mutex inbox_mutex_;
  std::deque<std::pair<int, std::vector<std::byte>>> inbox_;
  bool draining_ = false;
  std::atomic<int> in_hand_{0};  // messages taken from the inbox and being handled

  std::mutex batches_mutex_;
  std::unordered_set<Batch*> batches_;  // started and not finished (freed with the worker)

  std::atomic<bool> cancelled_{false};
  std::atomic<bool> released_{false};
  std::atomic<int> running_{0};  // commands being run and messages being handled (Busy)
  std::atomic<std::int64_t> outstanding_{0};
  std::atomic<std::uint64_t> tasks_run_{0};
  std::atomic<std::uint64_t> malformed_{0};
  // Template costs (written under mutex_).
  std::uint64_t install_ns_ = 0, installed_ = 0, instantiate_ns_ = 0, instantiated_ = 0, edit_ns_ = 0, edited_ = 0,
                edit_messages_ = 0;
};

}  // namespace brisk
