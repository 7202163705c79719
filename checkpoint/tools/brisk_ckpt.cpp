// brisk-ckpt — looks inside brisk checkpoints.
//
//   brisk-ckpt ls PATH|DIR       the manifest, every dataset (section, bytes, CRC-32C,
//                                rank, file offset, name) and the driver values
//   brisk-ckpt verify PATH|DIR   checks every dataset's CRC-32C
//   brisk-ckpt verify --all DIR  checks every checkpoint in DIR
//
// With a DIR, ls and verify work on the newest usable checkpoint, as a restart
// would, and say which newer ones they skipped and why (ls checks structure only;
// verify checks checksums). Exit status: 0 good, 1 a bad checkpoint or an error,
// 2 bad usage. Needs no MPI launcher.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "brisk/checkpoint/checkpoint.hpp"

namespace {

namespace fs = std::filesystem;

std::string human_bytes(std::uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  if (n < (1u << 20)) return fmt::format("{:.1f} KiB", n / 1024.0);
  if (n < (1u << 30)) return fmt::format("{:.1f} MiB", n / 1048576.0);
  return fmt::format("{:.2f} GiB", n / 1073741824.0);
}

// The checkpoint to look at: PATH itself, or the newest usable one in DIR (the
// skipped ones reported on stderr).
brisk::StatusOr<brisk::CheckpointReader> open_target(const std::string& target, brisk::CheckpointVerify verify) {
  if (!fs::is_directory(target)) return brisk::CheckpointReader::open(target);
  auto latest = brisk::CheckpointReader::open_latest(target, verify);
  if (!latest.ok()) return latest.status();
  for (const auto& s : latest->skipped) {
    fmt::print(stderr, "brisk-ckpt: skipped {}: {}\n", s.path.filename().string(), s.reason.message());
  }
  fmt::print("latest usable checkpoint in {}: {}\n", target, latest->reader.path().filename().string());
  return std::move(latest->reader);
}

int list(const std::string& target) {
  auto reader = open_target(target, brisk::CheckpointVerify::kStructure);
  if (!reader.ok()) {
    fmt::print(stderr, "brisk-ckpt: {}\n", reader.status().message());
    return 1;
  }
  const brisk::CheckpointInfo& info = reader->info();
  std::uint64_t total = 0;
  for (const auto& e : reader->entries()) total += e.size;
  fmt::print("checkpoint {}\n", reader->path().string());
  fmt::print("  format {}, brisk {}, sequence {}, written by {} rank{}, created {}\n", info.format_version,
             info.brisk_version, info.sequence, info.ranks, info.ranks == 1 ? "" : "s", info.created);
  fmt::print("  {} datasets, {} ({} bytes)\n", reader->entries().size(), human_bytes(total), total);
  fmt::print("  {:<8} {:>14} {:>10} {:>5} {:>12}  {}\n", "section", "bytes", "crc32c", "rank", "offset", "name");
  for (const auto& e : reader->entries()) {
    fmt::print("  {:<8} {:>14} 0x{:08x} {:>5} {:>12}  {}{}\n", brisk::checkpoint_section_name(e.section), e.size,
               e.crc32c, e.rank, e.file_offset < 0 ? std::string("-") : std::to_string(e.file_offset), e.path,
               e.file.empty() ? std::string() : " (in " + e.file + ")");
  }
  const auto driver = reader->entries(brisk::CheckpointSection::kDriver);
  if (!driver.empty()) {
    fmt::print("driver values (brisk::to_bytes encodings; the first bytes):\n");
    for (const auto& e : driver) {
      std::string shown = "(not read: large)";
      if (e.size <= 65536) {
        auto bytes = reader->read(e.section, e.name);
        if (!bytes.ok()) {
          shown = "BAD: " + bytes.status().message();
        } else {
          shown.clear();
          for (std::size_t i = 0; i < bytes->size() && i < 16; ++i) {
            shown += fmt::format("{:02x} ", std::to_integer<unsigned>((*bytes)[i]));
          }
          if (bytes->size() > 16) shown += "...";
        }
      }
      fmt::print("  {} ({} bytes): {}\n", e.name, e.size, shown);
    }
  }
  return 0;
}

int verify_one(const std::string& target) {
  auto reader = open_target(target, brisk::CheckpointVerify::kChecksums);
  if (!reader.ok()) {
    fmt::print(stderr, "brisk-ckpt: {}\n", reader.status().message());
    return 1;
  }
  // open_latest has verified a directory's pick already.
  if (brisk::Status s = fs::is_directory(target) ? brisk::Status() : reader->verify(); !s.ok()) {
    fmt::print(stderr, "brisk-ckpt: BAD {}\n", s.message());
    return 1;
  }
  std::uint64_t total = 0;
  for (const auto& e : reader->entries()) total += e.size;
  fmt::print("OK {}: {} datasets, {}, checksums match\n", reader->path().string(), reader->entries().size(),
             human_bytes(total));
  return 0;
}

int verify_all(const std::string& dir) {
  auto files = brisk::list_checkpoints(dir);
  if (!files.ok()) {
    fmt::print(stderr, "brisk-ckpt: {}\n", files.status().message());
    return 1;
  }
  if (files->empty()) {
    fmt::print(stderr, "brisk-ckpt: no checkpoint in {}\n", dir);
    return 1;
  }
  int bad = 0;
  for (const auto& f : *files) {
    auto reader = brisk::CheckpointReader::open(f.path);
    brisk::Status s = reader.ok() ? reader->verify() : reader.status();
    if (s.ok()) {
      fmt::print("OK  {}\n", f.path.filename().string());
    } else {
      ++bad;
      fmt::print("BAD {}: {}\n", f.path.filename().string(), s.message());
    }
  }
  fmt::print("{} of {} checkpoints good\n", files->size() - bad, files->size());
  return bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"brisk-ckpt: list and verify brisk checkpoints (HDF5 files ckpt-NNNNNN.h5)"};
  app.require_subcommand(1);
  std::string target;
  bool all = false;
  auto* ls = app.add_subcommand("ls", "show the manifest, datasets and driver values");
  ls->add_option("target", target, "a checkpoint file, or a directory (its newest usable checkpoint)")->required();
  auto* verify = app.add_subcommand("verify", "check every dataset's CRC-32C; exit 1 on a mismatch");
  verify->add_option("target", target, "a checkpoint file, or a directory (its newest usable checkpoint)")
      ->required();
  verify->add_flag("--all", all, "with a directory: verify every checkpoint in it");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  if (ls->parsed()) return list(target);
  if (all) {
    if (!fs::is_directory(target)) {
      fmt::print(stderr, "brisk-ckpt: verify --all takes a directory; {} is not one\n", target);
      return 2;
    }
    return verify_all(target);
  }
  return verify_one(target);
}
