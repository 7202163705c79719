// hdf5_util.hpp — what the writer and the reader share: the process-wide HDF5 lock,
// RAII handles, HDF5 error text, name escaping and the manifest's encoding.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "brisk/checkpoint/format.hpp"
#include "brisk/core/status.hpp"

namespace brisk::detail::ckpt {

// Debian's parallel HDF5 is built without thread safety: every HDF5 call in the
// process must be serialized. Everything in brisk that calls HDF5 holds this lock
// (recursive: open_latest opens and verifies under one lock). The first lock also
// turns HDF5's automatic error printing off.
std::unique_lock<std::recursive_mutex> lock_hdf5();

// An owned hid_t, closed with the matching H5?close on destruction. Must be
// destroyed with the HDF5 lock held (declare it after the lock).
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  bool valid() const noexcept { return id_ >= 0; }
  hid_t get() const noexcept { return id_; }
  // Closes now; the result of the close (for H5Fclose, which may flush).
  herr_t reset() noexcept {
    herr_t rc = 0;
    if (id_ >= 0 && closer_ != nullptr) rc = closer_(id_);
    id_ = H5I_INVALID_HID;
    return rc;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

inline Handle file_handle(hid_t id) { return {id, H5Fclose}; }
inline Handle group_handle(hid_t id) { return {id, H5Gclose}; }
inline Handle dataset_handle(hid_t id) { return {id, H5Dclose}; }
inline Handle space_handle(hid_t id) { return {id, H5Sclose}; }
inline Handle type_handle(hid_t id) { return {id, H5Tclose}; }
inline Handle plist_handle(hid_t id) { return {id, H5Pclose}; }
inline Handle attr_handle(hid_t id) { return {id, H5Aclose}; }

// The most specific message on HDF5's error stack ("truncated file: eof = ...")
// prefixed with ": ", or "" when the stack is empty. Clears the stack.
std::string hdf5_error();

// Dataset names <-> HDF5 link names: '%', '/', bytes below 0x20, 0x7f and a
// lone "." become %XX (upper-case hex).
std::string escape_name(std::string_view name);
StatusOr<std::string> unescape_name(std::string_view escaped);

// "/objects/<escaped>" and back ("/objects/x" -> section, unescaped name).
std::string dataset_path(CheckpointSection section, std::string_view name);
StatusOr<std::pair<CheckpointSection, std::string>> parse_dataset_path(std::string_view path);

// One manifest record as stored in /manifest.
struct ManifestRecord {
  std::string path;
  std::uint64_t size = 0;
  std::uint32_t crc32c = 0;
  std::uint32_t rank = 0;
};

// The manifest's checksum (see format.hpp).
std::uint32_t manifest_crc(const CheckpointInfo& info, const std::vector<ManifestRecord>& records);

// The compound type of /manifest for strings of `path_bytes` (terminator
// included), and the packed record layout it describes:
//   path char[path_bytes] | size u64 | crc32c u32 | rank u32
Handle manifest_type(std::size_t path_bytes, bool file_type);
std::size_t manifest_record_bytes(std::size_t path_bytes);
std::vector<std::byte> pack_manifest(const std::vector<ManifestRecord>& records, std::size_t path_bytes);
std::vector<ManifestRecord> unpack_manifest(std::span<const std::byte> packed, std::size_t path_bytes);

// Root attribute names.
inline constexpr const char* kAttrFormat = "brisk_checkpoint_format";
inline constexpr const char* kAttrRanks = "ranks";
inline constexpr const char* kAttrSequence = "sequence";
inline constexpr const char* kAttrCreatedNs = "created_unix_ns";
inline constexpr const char* kAttrCreated = "created";
inline constexpr const char* kAttrVersion = "brisk_version";
inline constexpr const char* kAttrManifestCrc = "manifest_crc32c";
inline constexpr const char* kManifestPath = "/manifest";

// True when `name` is "ckpt-<at least 6 digits>.h5" (with tmp: followed by ".tmp");
// sets *sequence.
bool parse_checkpoint_name(std::string_view name, bool tmp, std::uint64_t* sequence);
// A shard name, ckpt-<digits>.<tag>.r<digits>.h5 (format.hpp): its sequence.
bool parse_shard_name(std::string_view name, std::uint64_t* sequence);

// ISO 8601 UTC, seconds precision.
std::string iso8601_utc(std::int64_t unix_ns);

// Most bytes per H5Dread/H5Dwrite call: keeps every MPI-IO or POSIX request under
// 2 GiB (int counts).
inline constexpr std::uint64_t kIoSlabBytes = std::uint64_t{1} << 30;
// Shard files a reader keeps open (HDF5's external file cache, least recently used
// out): a rank restores mostly from a few shards; bounded well under the usual limit
// of 1024 open files.
inline constexpr unsigned kShardFilesKeptOpen = 64;
// verify()'s buffer: checksums are computed slab by slab, memory stays small.
inline constexpr std::uint64_t kVerifySlabBytes = std::uint64_t{64} << 20;

// Makes files created with `fapl` use HDF5's file format of version 1.8 or later,
// whose metadata (superblock, object headers, B-trees, heaps) carries checksums that
// HDF5 checks before it decodes anything: damaged metadata is an error, not an
// address or a size taken at face value (HDF5 1.10.8 reading files of the earliest
// format crashed on some damaged ones; see docs/fuzzing.md).
herr_t set_checksummed_format(hid_t fapl);

// Reads [offset, offset + out.size()) of a 1-D byte dataset.
herr_t read_bytes(hid_t dataset, std::uint64_t offset, std::span<std::byte> out);
// Writes `bytes` over a 1-D byte dataset of that size, with transfer properties `dxpl`.
herr_t write_bytes(hid_t dataset, std::span<const std::byte> bytes, hid_t dxpl);

}  // namespace brisk::detail::ckpt
