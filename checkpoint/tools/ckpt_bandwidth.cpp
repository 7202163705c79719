// ckpt_bandwidth — checkpoint write bandwidth against a raw parallel HDF5 write of
// the same bytes, side by side in one run.
//
//   mpirun -n 2 ckpt_bandwidth --mib-per-rank=256 --reps=5 --dir=/scratch/bw
//
// Each repetition times, between barriers, in alternating order:
//   raw_collective    one shared dataset of ranks x bytes, each rank writes its
//                     slice with collective MPI-IO, H5Fflush (MPI_File_sync), close
//   raw_independent   the same with independent MPI-IO (what the writer uses)
//   checkpoint        CheckpointWriter: begin, add_object, commit (CRC-32C, name
//                     exchange, dataset creation, independent writes, manifest,
//                     flush, close, fsync, rename, prune)
//   sharded           the runtime's way on ucx (no collective I/O): every rank but 0
//                     writes its objects into its own shard (write_checkpoint_shard:
//                     POSIX driver, fsync) and sends rank 0 their names, sizes and
//                     CRCs (here MPI_Gatherv; the runtime uses its transport); rank 0
//                     commits the checkpoint file alone, its own objects inside and
//                     external links to the shards
// then, reading back the last files written:
//   raw_read          each rank reads its slice of the raw file (independent MPI-IO)
//   restore           each rank opens the newest checkpoint (CheckpointReader) and
//                     reads its objects into a reused buffer, checksums verified
//                     (what a restart does)
//   restore_sharded   the same from the newest sharded checkpoint (through the links)
// and prints one JSON line per way (median and p99 = slowest repetition, seconds;
// GiB/s of the whole job at the median) and the ratios. --dir must be on a file
// system all ranks share; its contents are replaced.
//
// --ways=checkpoint or --ways=sharded times only that way (and its restore) beside the
// raw ones: on this VM the ways disturb each other's timing when they share a run (the
// page-cache memory each file set takes is fresh to the guest; see below).
//
// The first --warmup repetitions are not timed. On a VM, page-cache pages the
// guest has never used before are slow to get (about 0.4 GB/s here): the raw
// ways rewrite one file and reuse its pages, while the checkpoint holds two files
// (the previous one is deleted only after the new one is renamed), so without a
// warm-up its first two writes pay for fresh memory and the raw ways do not.
#include <hdf5.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "brisk/checkpoint/checkpoint.hpp"
#include "brisk/core/frame.hpp"

namespace {

namespace fs = std::filesystem;

// `x` rounded to `decimals` places (NaN and infinities stay, and are written as null).
double fixed(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::isfinite(x) ? std::round(x * scale) / scale : x;
}
// One JSON line.
void print_line(const nlohmann::ordered_json& line) { std::printf("%s\n", line.dump().c_str()); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// This rank's contiguous slice of the one dataset, moved in pieces of at most 1 GiB
// (every rank the same number, as collective I/O needs): written from or read into
// `mine` (written when its bytes are const, read otherwise).
template <class Byte>
bool move_slice(hid_t ds, hid_t space, hid_t dxpl, std::span<Byte> mine, int rank) {
  constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
  bool ok = true;
  for (std::uint64_t done = 0; ok && done < mine.size(); done += kPiece) {
    const hsize_t start[1] = {static_cast<hsize_t>(rank) * mine.size() + done};
    const hsize_t count[1] = {std::min<std::uint64_t>(kPiece, mine.size() - done)};
    hid_t mem = H5Screate_simple(1, count, nullptr);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    if constexpr (std::is_const_v<Byte>) {
      ok = H5Dwrite(ds, H5T_NATIVE_UINT8, mem, space, dxpl, mine.data() + done) >= 0;
    } else {
      ok = H5Dread(ds, H5T_NATIVE_UINT8, mem, space, dxpl, mine.data() + done) >= 0;
    }
    H5Sclose(mem);
  }
  return ok;
}

// One parallel HDF5 file with one dataset; each rank writes its contiguous slice.
bool raw_write(const fs::path& file, std::span<const std::byte> mine, int rank, int ranks, bool collective) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
  H5Pset_all_coll_metadata_ops(fapl, true);
  H5Pset_coll_metadata_write(fapl, true);
  H5Pset_alignment(fapl, hsize_t{1} << 20, hsize_t{1} << 20);
  hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (f < 0) return false;
  const hsize_t dims[1] = {static_cast<hsize_t>(mine.size()) * static_cast<hsize_t>(ranks)};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  hid_t ds = H5Dcreate2(f, "data", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
  bool ok = ds >= 0 && move_slice(ds, space, dxpl, mine, rank);
  ok = H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0 && ok;
  H5Pclose(dxpl);
  H5Pclose(dcpl);
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(space);
  return H5Fclose(f) >= 0 && ok;
}

// Reads this rank's slice of raw_write's file back with independent MPI-IO.
bool raw_read(const fs::path& file, std::span<std::byte> mine, int rank) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  if (f < 0) return false;
  hid_t ds = H5Dopen2(f, "data", H5P_DEFAULT);
  hid_t space = ds >= 0 ? H5Dget_space(ds) : -1;
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_INDEPENDENT);
  const bool ok = ds >= 0 && space >= 0 && move_slice(ds, space, dxpl, mine, rank);
  H5Pclose(dxpl);
  if (space >= 0) H5Sclose(space);
  if (ds >= 0) H5Dclose(ds);
  return H5Fclose(f) >= 0 && ok;
}

// This rank's objects for the sharded way, as (name, bytes): made once, untimed, as
// the collective way's spans are (the runtime serializes each partition first).
std::vector<std::pair<std::string, std::vector<std::byte>>> split_objects(std::span<const std::byte> data, int objects,
                                                                          int rank) {
  const std::uint64_t per_object = data.size() / static_cast<std::uint64_t>(objects);
  std::vector<std::pair<std::string, std::vector<std::byte>>> out;
  for (int i = 0; i < objects; ++i) {
    const std::uint64_t off = static_cast<std::uint64_t>(i) * per_object;
    const auto part = data.subspan(off, i + 1 == objects ? data.size() - off : per_object);
    out.emplace_back(fmt::format("rank{}-obj{}", rank, i), std::vector<std::byte>(part.begin(), part.end()));
  }
  return out;
}

// The sharded way (see above); rank 0 returns the commit's status to all.
bool sharded_write(const fs::path& dir, std::uint64_t seq,
                   const std::vector<std::pair<std::string, std::vector<std::byte>>>& mine, int rank, int ranks) {
  const std::string tag = fmt::format("b{}", seq);
  std::vector<brisk::CheckpointShardEntry> list;
  bool ok = true;
  if (rank != 0) {
    auto written = brisk::write_checkpoint_shard(dir, brisk::checkpoint_shard_name(seq, tag, rank), mine);
    ok = written.ok();
    if (ok) {
      list = std::move(written).value();
    } else {
      fmt::print(stderr, "{}\n", written.status().message());
    }
  }
  const std::vector<std::byte> report = brisk::to_bytes(std::pair{ok, list});
  int n = static_cast<int>(report.size());
  std::vector<int> counts(static_cast<std::size_t>(ranks)), displs(static_cast<std::size_t>(ranks));
  MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int r = 1; r < ranks; ++r) displs[static_cast<std::size_t>(r)] = displs[static_cast<std::size_t>(r - 1)] + counts[static_cast<std::size_t>(r - 1)];
  std::vector<std::byte> all(rank == 0 ? static_cast<std::size_t>(displs.back() + counts.back()) : 0);
  MPI_Gatherv(report.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, 0, MPI_COMM_WORLD);
  int committed = 1;
  if (rank == 0) {
    auto w = brisk::CheckpointWriter::begin(MPI_COMM_SELF, dir, seq, {.keep = 1, .ranks = ranks});
    brisk::Status s = w.status();
    for (int r = 1; r < ranks && s.ok(); ++r) {
      auto [their_ok, theirs] = brisk::from_bytes<std::pair<bool, decltype(list)>>(std::span(all).subspan(
          static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]), static_cast<std::size_t>(counts[static_cast<std::size_t>(r)])));
      if (!their_ok) s = brisk::unavailable(fmt::format("rank {}'s shard failed", r));
      for (const auto& e : theirs) {
        if (s.ok()) s = w->add_shard_object(e, brisk::checkpoint_shard_name(seq, tag, r), r);
      }
    }
    for (const auto& [name, bytes] : mine) {
      if (s.ok()) s = w->add_object(name, std::span<const std::byte>(bytes));
    }
    if (s.ok()) s = w->commit();
    if (!s.ok()) fmt::print(stderr, "{}\n", s.message());
    committed = s.ok() ? 1 : 0;
  }
  MPI_Bcast(&committed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok && committed == 1;
}

// Each rank reads its objects from checkpoint `file` into `back`, checksums verified.
bool restore_objects(const fs::path& file, std::vector<std::byte>& back, std::uint64_t bytes, int objects, int rank) {
  auto r = brisk::CheckpointReader::open(file);
  if (!r.ok()) {
    fmt::print(stderr, "{}\n", r.status().message());
    return false;
  }
  const std::uint64_t per_object = bytes / static_cast<std::uint64_t>(objects);
  for (int i = 0; i < objects; ++i) {
    if (!r->read_into(brisk::CheckpointSection::kObjects, fmt::format("rank{}-obj{}", rank, i), back).ok()) {
      return false;
    }
    const std::uint64_t off = static_cast<std::uint64_t>(i) * per_object;
    if (back.size() != (i + 1 == objects ? bytes - off : per_object)) return false;
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  CLI::App app{"checkpoint write bandwidth vs raw parallel HDF5"};
  std::uint64_t mib = 256;
  int objects = 1;
  int reps = 5;
  int warmup = 2;
  std::string dir = "ckpt_bandwidth_dir";
  std::string ways = "all";
  app.add_option("--mib-per-rank", mib, "MiB each rank writes")->capture_default_str();
  app.add_option("--objects-per-rank", objects, "the checkpoint's objects per rank (same bytes in total)")
      ->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions of each way")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed repetitions first (see the note above)")->capture_default_str();
  app.add_option("--dir", dir, "scratch directory on a shared file system")->capture_default_str();
  app.add_option("--ways", ways, "which checkpoint ways to time beside the raw ones")
      ->check(CLI::IsMember({"all", "checkpoint", "sharded"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = rank == 0 ? app.exit(e) : 1;
    MPI_Finalize();
    return rc;
  }
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);

  const std::uint64_t bytes = mib << 20;
  std::vector<std::byte> data(bytes);
  std::mt19937_64 rng(1234 + static_cast<unsigned>(rank));
  for (std::size_t i = 0; i + 8 <= data.size(); i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(data.data() + i, &v, 8);
  }
  if (rank == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // CRC-32C alone, for reference (the writer checksums before it writes).
  const double c0 = now_s();
  volatile std::uint32_t sink = brisk::crc32c(data);
  (void)sink;
  const double crc_s = now_s() - c0;

  std::map<std::string, std::vector<double>> times;
  int failures = 0;
  int rep = 0;
  auto timed = [&](const std::string& name, auto&& body) {
    if (ways != "all" && name.find("raw") == std::string::npos && name != ways && name != "restore_" + ways &&
        !(ways == "checkpoint" && name == "restore")) {
      return;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_s();
    const bool ok = body();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rep >= warmup) times[name].push_back(now_s() - t0);
    if (!ok) ++failures;
  };
  const std::uint64_t per_object = bytes / static_cast<std::uint64_t>(objects);
  const auto shard_objects = split_objects(data, objects, rank);
  for (rep = 0; rep < warmup + reps; ++rep) {
    auto raw_c = [&] { return raw_write(fs::path(dir) / "raw.h5", data, rank, ranks, true); };
    auto raw_i = [&] { return raw_write(fs::path(dir) / "raw.h5", data, rank, ranks, false); };
    auto ckpt = [&] {
      auto w = brisk::CheckpointWriter::begin(MPI_COMM_WORLD, fs::path(dir) / "ckpt",
                                              static_cast<std::uint64_t>(rep + 1), {.keep = 1});
      if (!w.ok()) return false;
      for (int i = 0; i < objects; ++i) {
        const std::uint64_t off = static_cast<std::uint64_t>(i) * per_object;
        const std::uint64_t n = i + 1 == objects ? bytes - off : per_object;
        if (!w->add_object(fmt::format("rank{}-obj{}", rank, i), std::span(data).subspan(off, n)).ok()) return false;
      }
      brisk::Status s = w->commit();
      if (!s.ok() && rank == 0) fmt::print(stderr, "{}\n", s.message());
      return s.ok();
    };
    auto sharded = [&] {
      return sharded_write(fs::path(dir) / "sharded", static_cast<std::uint64_t>(rep + 1), shard_objects, rank, ranks);
    };
    if (rep % 2 == 0) {
      timed("raw_collective", raw_c);
      timed("raw_independent", raw_i);
      timed("checkpoint", ckpt);
      timed("sharded", sharded);
    } else {
      timed("sharded", sharded);
      timed("checkpoint", ckpt);
      timed("raw_independent", raw_i);
      timed("raw_collective", raw_c);
    }
  }

  // Reading back: the raw file and the newest checkpoint, as a restart does, each
  // into a buffer of its own that the repetitions reuse.
  std::vector<std::byte> back;
  const fs::path newest = fs::path(dir) / "ckpt" / fmt::format("ckpt-{:06d}.h5", warmup + reps);
  const fs::path newest_sharded = fs::path(dir) / "sharded" / fmt::format("ckpt-{:06d}.h5", warmup + reps);
  std::vector<std::byte> raw_back(bytes);
  for (rep = 0; rep < warmup + reps; ++rep) {
    auto raw_r = [&] { return raw_read(fs::path(dir) / "raw.h5", raw_back, rank); };
    auto restore = [&] { return restore_objects(newest, back, bytes, objects, rank); };
    auto restore_sharded = [&] { return restore_objects(newest_sharded, back, bytes, objects, rank); };
    if (rep % 2 == 0) {
      timed("raw_read", raw_r);
      timed("restore", restore);
      timed("restore_sharded", restore_sharded);
    } else {
      timed("restore_sharded", restore_sharded);
      timed("restore", restore);
      timed("raw_read", raw_r);
    }
  }

  if (rank == 0) {
    const double total_gib = static_cast<double>(bytes) * ranks / (1 << 30);
    std::map<std::string, double> med;
    for (const auto& [name, v] : times) {
      med[name] = median(v);
      print_line({{"name", "ckpt_bandwidth/" + name},
                  {"ranks", ranks},
                  {"mib_per_rank", mib},
                  {"objects_per_rank", objects},
                  {"reps", reps},
                  {"median", fixed(med[name], 4)},
                  {"p99", fixed(*std::max_element(v.begin(), v.end()), 4)},
                  {"unit", "s"},
                  {"gib_per_s", fixed(total_gib / med[name], 3)}});
    }
    // The ways timed in this run against their raw counterparts (time ratios).
    for (const auto& [way, raw] : {std::pair{"checkpoint", "raw_collective"}, std::pair{"checkpoint", "raw_independent"},
                                   std::pair{"sharded", "raw_independent"}, std::pair{"restore", "raw_read"},
                                   std::pair{"restore_sharded", "raw_read"}}) {
      if (!med.count(way) || !med.count(raw)) continue;
      print_line({{"name", fmt::format("ckpt_bandwidth/{}_vs_{}", way, raw)},
                  {"ratio", fixed(med[way] / med[raw], 3)},
                  {"unit", "time ratio"}});
    }
    print_line({{"name", "ckpt_bandwidth/crc32c_one_rank"},
                {"mib", mib},
                {"seconds", fixed(crc_s, 4)},
                {"gib_per_s", fixed(static_cast<double>(bytes) / (1 << 30) / crc_s, 2)}});
    if (failures > 0) fmt::print(stderr, "ckpt_bandwidth: {} writes failed\n", failures);
    fs::remove_all(dir);
  }
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
