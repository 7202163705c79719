// brisk/checkpoint/reader.hpp — CheckpointReader: opens one checkpoint file, or the
// newest usable one in a directory, and reads its datasets with their checksums
// verified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "brisk/checkpoint/format.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/core/status.hpp"

namespace brisk {

// How much open_latest checks before it accepts a checkpoint.
enum class CheckpointVerify {
  kStructure,  // it opens, its manifest checksum matches, every dataset is there
               // with the listed size (reads metadata only)
  kChecksums,  // kStructure, and every dataset's CRC-32C matches (reads all bytes)
};

class CheckpointReader;

// A newer checkpoint that open_latest passed over, and why.
struct SkippedCheckpoint {
  std::filesystem::path path;
  Status reason;  // what open() or verify() said
};

struct LatestCheckpoint;

// CheckpointReader
//
// A read-only view of one checkpoint file (layout in format.hpp). Every rank may
// open the same file at once: it is opened with HDF5's POSIX driver, without MPI
// and without HDF5 file locking (a committed checkpoint never changes).
//
// Every read checks the bytes against the manifest's CRC-32C; a mismatch is a
// kInvalidArgument Status naming the file and the dataset. A bad file never
// crashes the reader and HDF5 prints nothing (its automatic error printing is
// turned off for the process the first time this library calls HDF5).
//
// Thread safety: every method may be called from any thread; HDF5 calls are
// serialized through the library's process-wide mutex (Debian's parallel HDF5 is
// not thread-safe). A moved-from reader may only be assigned to or destroyed.
// Example:
//   auto latest = brisk::CheckpointReader::open_latest("/scratch/ckpt");
//   if (!latest.ok()) return latest.status();
//   for (const auto& s : latest->skipped) log("skipped ", s.path, ": ", s.reason.message());
//   auto step = latest->reader.load<int>("iteration");
class CheckpointReader {
 public:
  // Opens a checkpoint file and checks its structure (as CheckpointVerify::kStructure).
  // Errors: kNotFound when `path` does not exist; kInvalidArgument when it is a
  // directory, not an HDF5 file, truncated or damaged, has no manifest or a bad
  // one, or a dataset is missing or of the wrong size; kFailedPrecondition for
  // another format version.
  static StatusOr<CheckpointReader> open(const std::filesystem::path& path);

  // The newest checkpoint in `dir` that passes `verify`; newer ones that fail are
  // listed in LatestCheckpoint::skipped (the caller reports them). .tmp files are
  // never considered. Errors: those of list_checkpoints, and kNotFound when no
  // checkpoint in `dir` is usable (the message then gives each one's reason).
  static StatusOr<LatestCheckpoint> open_latest(const std::filesystem::path& dir,
                                                CheckpointVerify verify = CheckpointVerify::kChecksums);

  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  const std::filesystem::path& path() const;
  const CheckpointInfo& info() const;
  // Every dataset in the manifest, sorted by section, then name.
  const std::vector<CheckpointEntry>& entries() const;
  // The entries of one section (the objects, for restoring them).
  std::vector<CheckpointEntry> entries(CheckpointSection section) const;
  std::vector<CheckpointEntry> objects() const { return entries(CheckpointSection::kObjects); }
  // The entry for a name, or nullptr.
  const CheckpointEntry* find(CheckpointSection section, std::string_view name) const;

  // The bytes of a dataset, checksum verified. Errors: kNotFound for an unknown
  // name; kInvalidArgument on a checksum mismatch or a read error (both name the
  // dataset).
  StatusOr<std::vector<std::byte>> read(CheckpointSection section, std::string_view name) const;
  // The same into `out` (resized; its capacity is reused, so a caller reading many
  // datasets keeps one buffer instead of fresh memory for each).
  Status read_into(CheckpointSection section, std::string_view name, std::vector<std::byte>& out) const;
  StatusOr<std::vector<std::byte>> read_object(std::string_view name) const {
    return read(CheckpointSection::kObjects, name);
  }
  StatusOr<std::vector<std::byte>> meta(std::string_view name) const {
    return read(CheckpointSection::kMeta, name);
  }

  // A driver value saved with CheckpointWriter::save<T>; T must be the type it was
  // saved as (the format has no type tags). Errors: those of read, and
  // kInvalidArgument when the bytes do not decode as a T.
  template <class T>
  StatusOr<T> load(std::string_view name) const {
    auto bytes = read(CheckpointSection::kDriver, name);
    if (!bytes.ok()) return bytes.status();
    try {
      return from_bytes<T>(*bytes);
    } catch (const SerializationError& e) {
      return invalid_argument("checkpoint " + path().string() + ": /driver/" + std::string(name) +
                              " does not decode as the requested type: " + e.what());
    }
  }

  // Reads every dataset and checks its CRC-32C (in slabs, so memory stays small).
  // OK, or the first mismatch or read error, naming the file and the dataset.
  Status verify() const;

 private:
  struct Impl;
  explicit CheckpointReader(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

// What open_latest found.
struct LatestCheckpoint {
  CheckpointReader reader;                 // open on the newest usable checkpoint
  std::vector<SkippedCheckpoint> skipped;  // newer ones passed over, newest first
};

}  // namespace brisk
