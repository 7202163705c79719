// brisk/checkpoint/writer.hpp — CheckpointWriter: every rank adds what it holds, then
// one collective commit writes a checkpoint file with parallel HDF5.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "brisk/checkpoint/format.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/core/status.hpp"

namespace brisk {

// CheckpointWriter
//
// Writes <dir>/ckpt-<sequence>.h5 (layout in format.hpp) from all ranks of a
// communicator at once. Between begin() and commit() each rank adds the datasets
// it holds; nothing touches the file system until commit(), which is collective:
//
//   1. the ranks exchange their (section, name, size, CRC-32C) lists;
//   2. all ranks create the file <final>.tmp and every dataset together;
//   3. each rank writes its own bytes (independent MPI-IO);
//   4. the manifest is written, the file flushed (MPI_File_sync) and closed;
//   5. rank 0 fsyncs the file, renames it to the final name, fsyncs the directory,
//      and deletes checkpoints beyond the newest `keep` and older .tmp files.
//
// A writer destroyed before commit() leaves nothing on disk. A failed commit
// removes its .tmp file; a process killed mid-commit leaves at most the .tmp,
// which readers ignore and the next commit of that sequence overwrites. A commit
// replaces an existing checkpoint of the same sequence atomically.
//
// Names are unique per section across the whole job (a clash is reported by
// commit() on every rank), non-empty and at most kCheckpointMaxNameBytes bytes;
// any bytes are allowed ('/' too).
//
// Collective calls: begin() and commit() must be called by every rank of the
// communicator, in the same order as any other collective on it; both return the
// same Status on every rank (the ranks agree on failure, so an error on one rank
// never leaves the others hanging in HDF5). The writer works on its own duplicate
// of the communicator, so its traffic never matches anything else sent on `comm`.
// The file system under `dir` must be shared by the ranks (as parallel HDF5 needs).
//
// Threading: MPI must be initialized (any thread level; with the brisk runtime
// running it is MPI_THREAD_MULTIPLE) and not finalized. A writer is used by one
// thread at a time. All HDF5 calls of this library are serialized through one
// process-wide mutex, because Debian's parallel HDF5 is not thread-safe; commit()
// holds it while it waits in collectives, so a rank runs one commit at a time and
// other threads calling HDF5 through brisk wait for it.
//
// Example:
//   auto w = brisk::CheckpointWriter::begin(MPI_COMM_WORLD, "/scratch/ckpt", step);
//   if (!w.ok()) return w.status();
//   if (auto s = w->add_object("part-" + std::to_string(rank), my_bytes); !s.ok()) ...
//   if (rank == 0) (void)w->save("iteration", step);
//   brisk::Status s = w->commit();
// Fault injection: with BRISK_FAULT_INJECT=checkpoint-stall in its environment, a
// writer stops for 60 s right after it created its temporary file (tests kill it
// there, mid-commit).
// One dataset of a shard file (serializable: the writing rank sends a list of these
// to the committing one).
struct CheckpointShardEntry {
  std::string name;  // under /objects, as given
  std::uint64_t size = 0;
  std::uint32_t crc32c = 0;
  template <class A>
  void serialize(A& ar) {
    ar(name, size, crc32c);
  }
};

// Writes `objects` as /objects/<name> datasets into the shard file <dir>/<file>
// (see format.hpp), alone: HDF5's POSIX driver, no MPI. Creates `dir` (and its
// parents) when missing. The file is flushed to disk before this returns. Returns each dataset's size and checksum, for the rank that
// commits the checkpoint (CheckpointWriter::add_shard_object). Errors name the file:
// kInvalidArgument for a bad or repeated name, kUnavailable for I/O.
StatusOr<std::vector<CheckpointShardEntry>> write_checkpoint_shard(
    const std::filesystem::path& dir, const std::string& file,
    const std::vector<std::pair<std::string, std::vector<std::byte>>>& objects);

class CheckpointWriter {
 public:
  struct Options {
    // Checkpoints kept in the directory after a commit, the new one included
    // (the highest sequences stay); 0 keeps all.
    std::size_t keep = 3;
    // The job's rank count, written as the `ranks` attribute; 0: the size of the
    // communicator (a rank 0 committing alone what shards hold passes the job's).
    int ranks = 0;
  };

  // Collective over `comm`. Creates `dir` (and its parents) when missing. Errors:
  // kInvalidArgument when the ranks disagree on `sequence` or `dir` is not a
  // directory, kUnavailable when it cannot be created.
  static StatusOr<CheckpointWriter> begin(MPI_Comm comm, const std::filesystem::path& dir,
                                          std::uint64_t sequence, Options options);
  static StatusOr<CheckpointWriter> begin(MPI_Comm comm, const std::filesystem::path& dir,
                                          std::uint64_t sequence) {
    return begin(comm, dir, sequence, Options{});
  }

  CheckpointWriter(CheckpointWriter&&) noexcept;
  CheckpointWriter& operator=(CheckpointWriter&&) noexcept;
  ~CheckpointWriter();

  // Adds a dataset under /objects from this rank. The span is not copied: its
  // bytes must stay valid and unchanged until commit() returns. The vector
  // overload takes ownership (use it for temporaries such as to_bytes(x)).
  // Local. Errors: kInvalidArgument for a bad or repeated name,
  // kFailedPrecondition after commit().
  Status add_object(std::string_view name, std::span<const std::byte> bytes);
  Status add_object(std::string_view name, std::vector<std::byte>&& bytes);

  // Adds /objects/<name> as an external link to the same path in `shard_file` (a
  // name in the checkpoint's directory, from checkpoint_shard_name), which rank
  // `rank` of the job wrote with write_checkpoint_shard; `entry` is what that call
  // reported. The shard must be complete and flushed before commit(). Local; errors
  // as add_object.
  Status add_shard_object(const CheckpointShardEntry& entry, std::string_view shard_file, int rank);

  // Serializes `value` with brisk::to_bytes into /driver/<name> (read it back with
  // CheckpointReader::load<T>). Usually called on rank 0 by the driver; any rank
  // may save values as long as names do not clash. Local; errors as add_object.
  template <class T>
  Status save(std::string_view name, const T& value) {
    std::vector<std::byte> bytes;
    try {
      bytes = to_bytes(value);
    } catch (const SerializationError& e) {
      return invalid_argument("checkpoint driver value '" + std::string(name) +
                              "' cannot be serialized: " + e.what());
    }
    return add_owned(CheckpointSection::kDriver, name, std::move(bytes));
  }

  // Adds an opaque blob under /meta (lineage cut, template definitions). The bytes
  // are copied. Local; errors as add_object.
  Status add_meta(std::string_view name, std::span<const std::byte> bytes);
  // Adds bytes that are already brisk-serialized under /driver/<name> (read them
  // back with CheckpointReader::load<T>). Local; errors as add_object.
  Status add_driver_bytes(std::string_view name, std::vector<std::byte>&& bytes) {
    return add_owned(CheckpointSection::kDriver, name, std::move(bytes));
  }

  // Collective: writes, flushes, renames and prunes (see above). Returns the same
  // Status on every rank; on error the message names the file and, where there
  // is one, the dataset. Call once.
  Status commit();

  // The final path, <dir>/ckpt-<sequence>.h5.
  const std::filesystem::path& path() const;
  std::uint64_t sequence() const;
  int rank() const;   // in the communicator
  int ranks() const;  // its size

 private:
  struct Impl;
  explicit CheckpointWriter(std::unique_ptr<Impl> impl);
  Status add_owned(CheckpointSection section, std::string_view name, std::vector<std::byte> bytes);
  Status add(CheckpointSection section, std::string_view name, std::span<const std::byte> bytes,
             std::vector<std::byte> owned);

  std::unique_ptr<Impl> impl_;
};

}  // namespace brisk
