// libFuzzer target: what brisk decodes from a checkpoint file or directory.
//
//   0  held-object names (parse_checkpoint_held_name): a name it accepts is exactly
//      the name checkpoint_held_name makes of what it returns;
//   1  file names in a checkpoint directory (checkpoint and shard names);
//   2  dataset names and manifest paths (escaping, parse_dataset_path): any name
//      survives escaping and unescaping;
//   3  the packed /manifest records (unpack_manifest, manifest_crc), for a string
//      width the input gives;
//   4  the data-set table and the templates read back on restore
//      (DataController::restore_from, restore_templates), then used: data sets and a
//      template of the names the seeds use are created and checked against them.
// Bad bytes must come back as a Status, a SerializationError or a brisk::Error.
// (The HDF5 file itself is tested by tests/checkpoint/corruption_test.cpp.)
//
// Input: a selector byte, then the bytes; for 4, records (wire::append_record): the
// table, the templates, then optional extra records ignored.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "brisk/checkpoint/format.hpp"
#include "brisk/core/error.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/runtime/wire.hpp"
#include "brisk/scheduler/data_controller.hpp"
#include "data_tasks.hpp"
#include "hdf5_util.hpp"

namespace {

using Bytes = std::span<const std::byte>;
namespace ckpt = brisk::detail::ckpt;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "checkpoint_fuzzer: %s\n", what);
    std::abort();
  }
}

void held_name(std::string_view name) {
  int owner = 0;
  std::uint64_t hi = 0, lo = 0;
  if (brisk::parse_checkpoint_held_name(name, &owner, &hi, &lo)) {
    check(brisk::checkpoint_held_name(owner, hi, lo) == name, "a held-object name that is not its own canonical form");
  }
}

void file_name(std::string_view name) {
  std::uint64_t seq = 0;
  for (bool tmp : {false, true}) {
    if (ckpt::parse_checkpoint_name(name, tmp, &seq) && !tmp) {
      check(name.size() >= brisk::checkpoint_file_name(seq).size(), "a checkpoint name shorter than its canonical form");
    }
  }
  (void)ckpt::parse_shard_name(name, &seq);
}

void dataset_name(std::string_view text) {
  const std::string escaped = ckpt::escape_name(text);
  auto back = ckpt::unescape_name(escaped);
  check(back.ok() && *back == text, "a name does not survive escaping");
  check(escaped.find('/') == std::string::npos, "an escaped name holds a '/'");
  auto parsed = ckpt::parse_dataset_path(text);
  if (parsed.ok()) {
    // The path of what it names parses to the same.
    auto again = ckpt::parse_dataset_path(ckpt::dataset_path(parsed->first, parsed->second));
    check(again.ok() && again->first == parsed->first && again->second == parsed->second,
          "a manifest path and its canonical form name different datasets");
  } else {
    check(parsed.status().code() == brisk::StatusCode::kInvalidArgument, "parse_dataset_path failed oddly");
  }
}

void manifest(Bytes bytes) {
  if (bytes.size() < 2) return;
  const std::size_t path_bytes = 1 + (std::to_integer<std::size_t>(bytes[0]) | std::to_integer<std::size_t>(bytes[1]) << 8) % 4096;
  const auto records = ckpt::unpack_manifest(bytes.subspan(2), path_bytes);
  check(records.size() == (bytes.size() - 2) / ckpt::manifest_record_bytes(path_bytes), "unpack_manifest's count");
  const auto again = ckpt::unpack_manifest(ckpt::pack_manifest(records, path_bytes), path_bytes);
  check(again.size() == records.size(), "a repacked manifest lost records");
  for (std::size_t i = 0; i < records.size(); ++i) {
    check(records[i].path.size() <= path_bytes, "a manifest path longer than its field");
    // (HDF5 terminates what it reads: a path that fills its field comes only from raw bytes.)
    const bool whole = records[i].path.size() < path_bytes;
    check(again[i].size == records[i].size && again[i].crc32c == records[i].crc32c && again[i].rank == records[i].rank &&
              (!whole || again[i].path == records[i].path),
          "a repacked manifest record changed");
    (void)ckpt::parse_dataset_path(records[i].path);
  }
  brisk::CheckpointInfo info;
  info.format_version = brisk::kCheckpointFormatVersion;
  (void)ckpt::manifest_crc(info, records);
}

void restore(Bytes bytes) {
  std::vector<Bytes> parts;
  if (!brisk::wire::for_each_record(bytes, [&](Bytes p) { parts.push_back(p); })) return;
  brisk::DataController controller{2, [](int, std::vector<std::byte>) {}};
  try {
    if (!parts.empty()) controller.restore_from("ckpt-000001.h5", parts[0]);
    if (parts.size() > 1) controller.restore_templates("ckpt-000001.h5", parts[1]);
    // The names and shapes the seeds use (tests/fuzz/make_corpus.cpp).
    const std::uint32_t a = controller.create("a", brisk_fuzz::log_type(), {0, 1}, true);
    const std::uint32_t b = controller.create("b", brisk_fuzz::big_type(), {1}, true);
    std::vector<brisk::detail::DataTaskSpec> tasks;
    const auto fn = [](brisk::DataFunction f) { return brisk::detail::find_function(reinterpret_cast<const void*>(f))->id; };
    tasks.push_back({fn(&fz_append), {{a, 0, brisk::DataMode::kReadWrite}}, brisk::to_bytes(1), -1});
    tasks.push_back({fn(&fz_copy), {{a, 1, brisk::DataMode::kWrite}, {a, 0, brisk::DataMode::kRead}}, {}, -1});
    tasks.push_back({fn(&fz_fill), {{b, 0, brisk::DataMode::kWrite}}, brisk::to_bytes(8), -1});
    (void)controller.install("t", std::move(tasks));
  } catch (const brisk::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Bytes bytes(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: held_name(text); break;
    case 1: file_name(text); break;
    case 2: dataset_name(text); break;
    case 3: manifest(bytes); break;
    case 4: restore(bytes); break;
  }
  return 0;
}
