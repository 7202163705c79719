// brisk/checkpoint/format.hpp — what a brisk checkpoint file holds, and where.
//
// A checkpoint is one HDF5 file <dir>/ckpt-<sequence, at least 6 digits>.h5. It is
// written as <name>.tmp and renamed only when complete and flushed, so a file with
// the final name is always whole; a crash mid-write leaves at most a .tmp, which
// readers ignore.
//
//   /                 attributes: brisk_checkpoint_format (u32, kCheckpointFormatVersion),
//                     ranks (u32), sequence (u64), created_unix_ns (i64),
//                     created (string, ISO 8601 UTC), brisk_version (string),
//                     manifest_crc32c (u32, see below)
//   /objects/<name>   live objects and data partitions, written by the rank that held them;
//                     either a dataset in this file or an HDF5 external link to the
//                     same path in a shard file of this checkpoint (below). The brisk
//                     runtime names the copies a rank held for other ranks' objects
//                     held/<owner rank>/<object id, 32 hex digits> (checkpoint_held_name)
//   /driver/<name>    values the driver saved (brisk::to_bytes encodings)
//   /meta/<name>      anything else, opaque blobs (lineage cut, template definitions)
//   /manifest         one record per dataset above, sorted by path:
//                     {path: string, size: u64, crc32c: u32, rank: u32}
//
// Every dataset is a 1-D array of bytes (H5T_STD_U8LE), contiguous, so `h5dump`
// and `h5py` read it directly. Files (and shards) are written in HDF5's file format
// 1.8 or later, whose metadata (superblock, object headers, B-trees, heaps) carries
// checksums that HDF5 checks before decoding: damaged metadata is an error. Files
// written in the earliest HDF5 format (by brisk before this) are still read; HDF5
// 1.10.8 crashed on some of those when damaged in metadata (docs/fuzzing.md). A name is stored with '%', '/', control characters
// and a lone "." escaped as %XX (a name may contain '/'). manifest_crc32c is the
// CRC-32C of brisk::to_bytes(std::tuple{format, ranks, sequence, created_unix_ns,
// brisk_version, records}) with records a std::vector of std::tuple{path, size,
// crc32c, rank}: it covers the attributes and the manifest, so metadata damage is
// detected too; `created` is not in it, and a reader requires it to be
// the ISO 8601 form of created_unix_ns, as the writer makes it. Checksums are CRC-32C
// (Castagnoli), as brisk::crc32c.
//
// Shards: a job can write its objects without any collective (the brisk runtime does
// on the ucx backend, so that a rank dying mid-checkpoint blocks nobody): each rank
// writes its own file ckpt-<sequence>.<tag>.r<rank>.h5 next to the checkpoint, with
// its objects at the same paths, and rank 0 writes the checkpoint file alone, with
// external links to them. <tag> is new for every attempt, so a shard never changes
// once a checkpoint links it; the checkpoint's rename still commits everything. The
// manifest covers the linked datasets like the others; readers follow the links
// (h5dump shows a link as EXTERNAL_LINK and `h5dump -d PATH` prints its data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "brisk/core/status.hpp"

namespace brisk {

// The version this library writes and the only one it reads.
inline constexpr std::uint32_t kCheckpointFormatVersion = 1;
// Longest dataset name accepted, in bytes (before escaping).
inline constexpr std::size_t kCheckpointMaxNameBytes = 1024;

// The three groups a dataset can live in.
enum class CheckpointSection : std::uint8_t {
  kObjects = 0,  // /objects
  kDriver = 1,   // /driver
  kMeta = 2,     // /meta
};

// "objects", "driver" or "meta".
const char* checkpoint_section_name(CheckpointSection section) noexcept;

// One dataset of a checkpoint, as its manifest lists it.
struct CheckpointEntry {
  CheckpointSection section = CheckpointSection::kObjects;
  std::string name;           // as given to the writer (unescaped)
  std::string path;           // the HDF5 path, e.g. "/objects/rank1%2Fpart"
  std::uint64_t size = 0;     // bytes
  std::uint32_t crc32c = 0;   // of the bytes
  int rank = 0;               // the rank that wrote it
  // The shard file that holds the bytes (its name, in the checkpoint's directory),
  // or "" when the checkpoint file itself does.
  std::string file;
  // Where the bytes start in that file (from HDF5, not the manifest); -1 when the
  // dataset is empty. For forensics and tests: `dd` can reach the data there.
  std::int64_t file_offset = -1;
};

// The manifest's header.
struct CheckpointInfo {
  std::uint32_t format_version = 0;
  int ranks = 0;                 // size of the communicator that wrote it
  std::uint64_t sequence = 0;
  std::int64_t created_unix_ns = 0;
  std::string created;           // ISO 8601 UTC, e.g. "2026-11-29T19:33:49Z"
  std::string brisk_version;     // of the writer
};

// A file in a checkpoint directory whose name says it is a complete checkpoint.
struct CheckpointFile {
  std::uint64_t sequence = 0;
  std::filesystem::path path;
};

// "ckpt-000042.h5" for sequence 42 (more digits when the sequence needs them).
std::string checkpoint_file_name(std::uint64_t sequence);

// "ckpt-000042.<tag>.r3.h5": rank 3's shard of checkpoint 42, attempt <tag>
// (letters and digits). Not a checkpoint name: list_checkpoints skips it.
std::string checkpoint_shard_name(std::uint64_t sequence, std::string_view tag, int rank);

// "held/3/<32 hex digits>": the copy of object (hi, lo), owned by rank `owner`, that
// another rank held for it. parse_checkpoint_held_name takes such a name apart
// (false for any other name, and for another spelling of one: "held/012/...").
inline constexpr std::string_view kCheckpointHeldPrefix = "held/";
std::string checkpoint_held_name(int owner, std::uint64_t hi, std::uint64_t lo);
bool parse_checkpoint_held_name(std::string_view name, int* owner, std::uint64_t* hi, std::uint64_t* lo);

// The checkpoints in `dir` (files named ckpt-<digits>.h5; .tmp files and anything
// else are ignored), oldest first. Nothing is opened. Errors: kNotFound when `dir`
// does not exist, kInvalidArgument when it is not a directory, kUnavailable when
// it cannot be listed.
StatusOr<std::vector<CheckpointFile>> list_checkpoints(const std::filesystem::path& dir);

}  // namespace brisk
