// brisk/scheduler/data_controller.hpp — the controller of data objects and templates.
//
// One controller per job, on rank 0 next to the driver. It knows, for every
// partition, its version (writes issued) and which ranks hold that version; from a
// data task's declaration it picks the task's rank, issues the copies that make the
// task's inputs current there, and issues the task (data_protocol.hpp).
//
// Controller templates (Nimbus's execution templates, flattened): a recorded block
// becomes arrays of tasks (function, accesses, arguments, rank) and, per partition
// the block touches, its accesses in program order and what follows from them: the
// copies inside the block, the precondition (ranks that must hold the entry version)
// and the postcondition (who holds the exit version, and how many writes happened).
// Every rank caches its part as a worker template. Then:
//  - instantiate: one message per rank (fresh task ids, copy keys, parameters);
//    back-to-back instantiations of a template whose postcondition meets its own
//    precondition skip validation; the holder table is updated from the postcondition.
//  - patch: entered from elsewhere, the unmet preconditions become copies. The patch
//    is cached keyed by the template that ran before; only the entries that this
//    template's predecessor did not write are checked again on reuse.
//  - edit: moving tasks recomputes only the partitions those tasks touch and sends
//    each affected rank the commands to remove and add; nothing is reinstalled.
//
// Thread safety: the driver-side calls (create, submit, install, instantiate,
// move_tasks, fetch, sync) from one thread; handle() (replies from the ranks) from
// any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "brisk/core/data.hpp"
#include "brisk/core/error.hpp"
#include "brisk/scheduler/data_protocol.hpp"

namespace brisk {

class DataController {
 public:
  using Send = std::function<void(int to, std::vector<std::byte> message)>;
  // `poll` moves messages while the driver waits (may be empty).
  DataController(int size, Send send, std::function<int()> poll = {});

  std::uint32_t create(const std::string& name, const detail::DataTypeOps* type, std::vector<int> homes,
                       bool checkpointed = true);
  void submit(detail::DataTaskSpec spec, std::shared_ptr<const std::vector<std::byte>> params);
  std::uint32_t install(const std::string& name, std::vector<detail::DataTaskSpec> tasks);
  void instantiate(std::uint32_t tmpl, std::vector<std::byte> params);
  void move_tasks(std::uint32_t tmpl, std::span<const std::pair<std::uint32_t, int>> moves);
  int task_rank(std::uint32_t tmpl, std::uint32_t task) const;
  std::uint64_t fetch_start(std::uint32_t dataset, std::uint32_t part);
  std::vector<std::byte> fetch_wait(std::uint64_t key);
  void fetch_forget(std::uint64_t key) noexcept;
  void sync();
  std::uint64_t version(std::uint32_t dataset, std::uint32_t part) const;
  // Sends the commands batched so far.
  void flush();
  // A reply from a rank (kFetched, kSyncDone, kFailed).
  bool handle(int from, std::span<const std::byte> message);
  // Asked before a fetched value or a sync reply wakes the driver: true when the
  // calling thread wakes it later instead, by calling wake_driver (detail::Executor::
  // defer_wake). Unset: wake at once. Set before replies arrive.
  void set_wake_deferral(std::function<bool()> defer) { defer_ = std::move(defer); }
  // Wakes the driver if it waits for a reply. Any thread.
  void wake_driver() noexcept { reply_cv_.notify_all(); }
  detail::DataPlaneStats stats() const;
  std::uint64_t submitted() const noexcept { return stats_.commands; }
  int size() const noexcept { return size_; }

  // Checkpoints. Waits for every command, then tells each rank (kCheckpointPlan)
  // which partitions it writes into checkpoint `sequence`: every partition ever
  // written, by one rank that holds its latest version. Returns the data-set table
  // the checkpoint keeps as its kDataSetsValue driver value.
  std::vector<std::byte> plan_checkpoint(std::uint64_t sequence);
  // Restart: the data sets of the restored checkpoint `file` (its kDataSetsValue).
  // A data set created later under one of these names gets the partitions back (its
  // home ranks read them from the file) and its versions. Throws on a bad table.
  void restore_from(const std::string& file, std::span<const std::byte> table);
  // The installed templates as a checkpoint keeps them (kTemplatesValue).
  std::vector<std::byte> checkpoint_templates() const;
  // Restart: the templates of the restored checkpoint `file`. A template installed
  // later under one of these names, on as many ranks, is compared with it, and a
  // difference (the restart records other blocks than the run that wrote the
  // checkpoint) is reported on stderr. Throws on bytes that do not decode.
  void restore_templates(const std::string& file, std::span<const std::byte> bytes);

  // Rollback: keeps the templates of `before`, the controller of the epoch this one
  // replaces, whose rank r is this controller's rank `rank_map[r]` (-1: lost). A
  // template installed later under the name of a kept one, with the same tasks (the
  // same functions, arguments and partitions, data sets matched by name), is taken
  // over by an edit instead of installed: its tasks keep their ranks, those on a
  // lost rank or away from where this epoch places them move (move_tasks), and only
  // the partitions they touch are derived again. Every rank takes its part from the
  // one it kept (kAdopt, DataWorker::carry_templates), then gets the edit. A block of
  // another shape (one whose tasks depend on the rank count, for example) is
  // installed as usual. A name installed twice in `before` is not kept (ambiguous).
  void carry_templates(const DataController& before, const std::vector<int>& rank_map);

  // Whether data set `id` got its partitions from a checkpoint.
  bool restored(std::uint32_t id) const { return id < datasets_.size() && datasets_[id].restored; }

  // A rank was lost: every driver call from now on (and the one waiting now) throws
  // detail::DataRollback. Any thread.
  void abort(int lost_rank);
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire) >= 0; }
  // Throws detail::DataRollback after abort().
  void check_aborted() const;

  // Ranks holding the latest version of a partition (tests).
  std::vector<int> holders(std::uint32_t dataset, std::uint32_t part) const;

 private:
  struct DataSetInfo {
    std::string name;
    const detail::DataTypeOps* type;
    std::vector<int> homes;
    std::uint32_t first_slot;
    bool checkpointed = true;
    bool restored = false;
  };
  struct Copy {
    std::uint64_t id;
    int from, to;
    std::uint32_t writer, reader;  // task indices in the block
    friend bool operator==(const Copy& a, const Copy& b) {
      return a.from == b.from && a.to == b.to && a.writer == b.writer && a.reader == b.reader;
    }
  };
  // One partition touched by a template: its accesses and what follows from them.
  struct Use {
    std::uint32_t slot;
    detail::DataAccess access;  // dataset and part (mode unused)
    std::vector<std::pair<std::uint32_t, DataMode>> accesses;  // (task, mode) in program order
    std::vector<Copy> copies;
    std::vector<int> pre;   // ranks that must hold the entry version
    std::vector<int> post;  // written: the ranks holding the exit version
    std::uint32_t writes = 0;
    bool self_ok = true;    // post covers pre
  };
  struct PatchCopy {
    std::uint32_t slot;
    int from, to;
  };
  struct CachedPatch {
    std::uint64_t epoch;
    std::vector<PatchCopy> copies;                       // fixed by the predecessor's postcondition
    std::vector<std::pair<std::uint32_t, int>> checks;  // (use, rank) to check again on reuse
  };
  struct TemplateTask {
    FunctionId function;
    std::vector<detail::DataAccess> accesses;
    std::vector<std::byte> args;
    int rank;
    bool runs_inline = false;
  };
  struct ControllerTemplate {
    std::string name;
    std::vector<TemplateTask> tasks;
    std::vector<Use> uses;
    std::unordered_map<std::uint32_t, std::uint32_t> use_of_slot;
    std::vector<std::vector<std::uint32_t>> uses_of_task;  // task -> uses it touches
    std::uint64_t next_copy = 0;
    std::size_t bad_uses = 0;  // uses whose post does not cover their pre
    std::unordered_map<std::uint32_t, CachedPatch> patches;  // by predecessor (kNone: none)
  };
  // A template kept through a rollback (carry_templates).
  struct CarriedTemplate {
    ControllerTemplate t;  // ranks are this controller's (-1: lost); data sets by the names below
    std::shared_ptr<const std::vector<std::string>> datasets;  // names, by the data-set ids in `t`
  };
  struct Pending {
    std::vector<DataCommand> commands;
    std::vector<std::shared_ptr<const std::vector<std::byte>>> params;
    std::vector<std::vector<std::byte>> edits;  // kEdit messages, sent before the commands
  };
  static constexpr std::uint32_t kNone = 0xFFFFFFFFu;

  std::uint32_t slot_of(const detail::DataAccess& a) const;
  // The data set and partition of a slot (the inverse of slot_of).
  detail::DataAccess access_of(std::uint32_t slot) const noexcept;
  int place(const detail::DataTaskSpec& spec) const;
  bool holds(std::uint32_t slot, int rank) const noexcept;
  void set_only(std::uint32_t slot, int rank) noexcept;
  void add_holder(std::uint32_t slot, int rank) noexcept;
  int pick_source(std::uint32_t slot) const noexcept;
  // Issues one untemplated copy of `slot` from `from` to `to`.
  void issue_copy(std::uint32_t slot, int from, int to);
  void push(int rank, DataCommand cmd);
  void send_all(DataMessage kind, const Writer& body);
  void send_to(int rank, DataMessage kind, const Writer& body);
  void derive(ControllerTemplate& t, Use& u);
  DataCommand compute_command(const ControllerTemplate& t, std::uint32_t task) const;
  DataCommand copy_command(const Use& u, const Copy& c, bool sending) const;
  void apply_patch(ControllerTemplate& t, std::uint32_t tmpl);
  // When `specs` are the tasks of `c` (install takes it over then): the data sets of
  // `c` (its ids) as this controller numbers them, one for one.
  std::optional<std::map<std::uint32_t, std::uint32_t>> same_tasks(const CarriedTemplate& c,
                                                                    const std::vector<detail::DataTaskSpec>& specs) const;
  // Installs `c` for `specs` (same_tasks gave `ids`) by an edit; its template id.
  std::uint32_t adopt(const std::string& name, CarriedTemplate c, std::vector<detail::DataTaskSpec> specs,
                      const std::map<std::uint32_t, std::uint32_t>& ids);
  // Throws when a task of template `name` is placed outside [0, size).
  void check_rank(const std::string& name, std::size_t task, int rank) const;
  // Warns when the template just installed or adopted differs from the restored one.
  void check_restored(const ControllerTemplate& t);
  // Waits for replies; rethrows a reported failure.
  void wait_until(const std::function<bool()>& done);
  void rethrow_failure();

  int size_;
  Send send_;
  std::function<int()> poll_;
  std::function<bool()> defer_;
  std::size_t words_;  // holder bitset words per slot

  std::vector<DataSetInfo> datasets_;
  std::vector<std::uint64_t> versions_;  // per slot
  std::vector<std::uint64_t> holders_;   // per slot, words_ words
  std::vector<std::unique_ptr<ControllerTemplate>> templates_;
  std::uint32_t last_template_ = kNone;  // the holder table is this template's postcondition
  std::uint64_t epoch_ = 0;               // bumped by edits: cached patches older than it are stale

  std::vector<Pending> pending_;
  std::size_t pending_count_ = 0;
  std::uint64_t next_key_ = 1;
  std::uint64_t next_task_ = 1;
  std::uint64_t next_token_ = 1;

  detail::DataPlaneStats stats_;

  // The restored checkpoint's data sets, by name (consumed by create).
  std::string restored_file_;
  std::unordered_map<std::string, CheckpointDataSet> restorable_;
  std::string templates_file_;
  std::unordered_map<std::string, CheckpointTemplate> restored_templates_;  // by name, until installed
  std::unordered_map<std::string, CarriedTemplate> carried_;                // by name, until installed
  std::unordered_set<std::uint32_t> unsent_edits_;  // templates edited since the last flush

  // A template as checkpoints keep it.
  CheckpointTemplate template_record(const ControllerTemplate& t) const;
  // Warns on stderr where `now` (just installed) differs from `then` (restored).
  void check_restored_template(const CheckpointTemplate& then, const CheckpointTemplate& now) const;

  // Replies.
  mutable std::mutex reply_mutex_;
  std::condition_variable reply_cv_;
  std::unordered_map<std::uint64_t, std::vector<std::byte>> fetched_;
  std::unordered_set<std::uint64_t> forgotten_;  // fetches nobody waits for: dropped on arrival
  std::unordered_map<std::uint64_t, int> sync_replies_;
  std::shared_ptr<const ErrorInfo> failure_;
  std::atomic<int> aborted_{-1};  // the lost rank, once abort() was called
};

}  // namespace brisk
