// brisk/scheduler/data_protocol.hpp — the messages of data objects and templates.
//
// The controller (rank 0) turns data-task declarations into commands for the ranks:
// compute (run a data task), send and recv (one copy of a partition between two
// ranks, matched by a 64-bit key), and deliver (send a partition to the driver).
// Each rank orders the commands it receives by their accesses to its local
// partition instances (read after write, write after read, write after write), in
// the order the commands arrived; so the controller only has to say what runs where
// and which copies make the right version local.
//
// Every message starts with one DataMessage byte. Bodies are serialized with
// brisk::Writer; a reader of a truncated or malformed body throws
// SerializationError, and the receiver drops the message and reports it.
//
//   kDataSet      u32 id, u64 type, string name, vector<i32> homes
//   kCommands     vector<bytes> params, vector<DataCommand>
//   kInstall      u32 template, string name, vector<DataCommand>
//   kInstantiate  u32 template, u64 first task sequence, u64 key base, bytes params
//   kEdit         u32 template, vector<u64> removed command ids, vector<DataCommand> added
//   kCopy         u64 key, bytes value (rank to rank)
//   kSync         u64 token, u64 mark: every copy key below `mark` was issued before
//                 the sync (a copy keyed below it that arrives later is rejected)
//   kFetched      u64 key, bytes value (to the controller)
//   kSyncDone     u64 token, i32 rank
//   kFailed       string function, string message, i32 rank
//   kCheckpointPlan  u64 sequence, vector<(u32 data set, u32 part, string name)>:
//                 the partitions this rank writes into checkpoint `sequence`
//   kRestore      u32 data set, u32 part, string file, string name: load the
//                 partition from a checkpoint file's object `name`
//   kAdopt        u32 template, string name, vector<(u32, u32)> data sets: after a
//                 rollback, this rank's part of the template of that name in the
//                 epoch before (which this rank kept, DataWorker::carry_templates)
//                 becomes template `template`, its data sets renumbered (kept id ->
//                 id now); the kEdit that follows moves what the rollback changed
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "brisk/core/data.hpp"
#include "brisk/core/ids.hpp"

namespace brisk {

enum class DataMessage : std::uint8_t {
  kDataSet = 1,
  kCommands = 2,
  kInstall = 3,
  kInstantiate = 4,
  kEdit = 5,
  kCopy = 6,
  kSync = 7,
  kFetched = 8,
  kSyncDone = 9,
  kFailed = 10,
  kCheckpointPlan = 11,
  kRestore = 12,
  kAdopt = 13,
};
inline constexpr std::uint8_t kMaxDataMessage = 13;
// Messages from the ranks to the controller.
inline bool to_controller(std::uint8_t m) noexcept {
  return m >= static_cast<std::uint8_t>(DataMessage::kFetched) && m <= static_cast<std::uint8_t>(DataMessage::kFailed);
}

// One partition in a checkpoint: data set, partition, and its object's name.
struct CheckpointPart {
  std::uint32_t dataset = 0;
  std::uint32_t part = 0;
  std::string name;
  template <class A>
  void serialize(A& ar) {
    ar(dataset, part, name);
  }
};

// The data sets a checkpoint holds (a driver value, kDataSetsValue): per set its
// name, element type and the version of every partition (0: never written, not in
// the checkpoint).
struct CheckpointDataSet {
  std::string name;
  std::uint64_t type = 0;
  std::vector<std::uint64_t> versions;
  template <class A>
  void serialize(A& ar) {
    ar(name, type, versions);
  }
};
inline constexpr const char* kDataSetsValue = "brisk.data_sets";
// The templates installed when a checkpoint was written (a driver value,
// kTemplatesValue): per template its tasks as recorded, with partitions named by
// data set, so that a restart on as many ranks can tell whether it records the same
// blocks (on another number of ranks, blocks that depend on it differ rightly).
struct CheckpointTemplateTask {
  std::string function;
  std::vector<std::string> datasets;  // per access
  std::vector<std::uint32_t> parts;   // per access
  std::vector<std::uint8_t> modes;    // per access
  std::vector<std::byte> args;
  std::int32_t rank = -1;
  template <class A>
  void serialize(A& ar) {
    ar(function, datasets, parts, modes, args, rank);
  }
  friend bool operator==(const CheckpointTemplateTask&, const CheckpointTemplateTask&) = default;
};
struct CheckpointTemplate {
  std::string name;
  std::int32_t ranks = 0;  // of the job that recorded it
  std::vector<CheckpointTemplateTask> tasks;
  template <class A>
  void serialize(A& ar) {
    ar(name, ranks, tasks);
  }
};
inline constexpr const char* kTemplatesValue = "brisk.templates";
// The checkpoint object that holds a partition.
inline std::string checkpoint_object_name(const std::string& dataset, std::uint32_t part) {
  return "data/" + dataset + "/" + std::to_string(part);
}

struct DataCommand {
  enum Kind : std::uint8_t { kCompute = 0, kSend = 1, kRecv = 2, kDeliver = 3 };
  enum Flags : std::uint8_t { kRunsInline = 1 };  // compute: DataTaskBuilder::runs_inline
  std::uint8_t kind = kCompute;
  std::uint8_t flags = 0;
  // Templates: a command id stable across edits (compute: 2 * task index; a copy's
  // send and recv: 2 * copy id + 1) and its position in program order.
  std::uint64_t id = 0;
  std::uint64_t position = 0;
  FunctionId function;                     // compute
  std::vector<detail::DataAccess> accesses;  // compute: as declared; copies: exactly one
  std::vector<std::byte> args;             // compute
  std::int32_t peer = -1;                  // send/deliver: destination; recv: source
  std::uint64_t key = 0;                   // copies: the key (templates: the copy id, added to the key base)
  std::uint64_t task = 0;                  // compute: the task's sequence number (templates: its index)
  std::uint32_t params = 0;                // untemplated compute: index into the message's params

  template <class A>
  void serialize(A& ar) {
    ar(kind, flags, id, position, function.value, accesses, args, peer, key, task, params);
  }
};

// Template positions: a copy into a reader's rank comes right before the reader, a
// copy out of the writer's rank right after the writer.
inline std::uint64_t recv_position(std::uint32_t reader) noexcept { return std::uint64_t{reader} * 4; }
inline std::uint64_t compute_position(std::uint32_t task) noexcept { return std::uint64_t{task} * 4 + 1; }
inline std::uint64_t send_position(std::uint32_t writer) noexcept { return std::uint64_t{writer} * 4 + 2; }
inline std::uint64_t compute_id(std::uint32_t task) noexcept { return std::uint64_t{task} * 2; }
inline std::uint64_t copy_command_id(std::uint64_t copy) noexcept { return copy * 2 + 1; }

// The TaskId of the data task with sequence number `seq` (fresh for every task and
// every instantiation).
inline TaskId data_task_id(std::uint64_t seq) noexcept { return TaskId{{0x6461746174736B00ULL, seq}}; }

inline bool reads(DataMode m) noexcept { return (static_cast<std::uint8_t>(m) & 1) != 0; }
inline bool writes(DataMode m) noexcept { return (static_cast<std::uint8_t>(m) & 2) != 0; }

}  // namespace brisk
