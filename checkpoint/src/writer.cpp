#include "brisk/checkpoint/writer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <map>
#include <set>
#include <tuple>

#include "brisk/core/frame.hpp"
#include "hdf5_util.hpp"

namespace brisk {

namespace fs = std::filesystem;
using detail::ckpt::Handle;
using detail::ckpt::ManifestRecord;

namespace {

// BRISK_FAULT_INJECT names checkpoint-stall (alone or among comma-separated ones).
bool injects_checkpoint_stall(std::string_view value) {
  for (std::size_t start = 0; start <= value.size();) {
    const std::size_t end = std::min(value.find(',', start), value.size());
    if (value.substr(start, end - start) == "checkpoint-stall") return true;
    start = end + 1;
  }
  return false;
}

// What a rank added: the bytes (owned or borrowed) and, at commit, their checksum.
struct LocalEntry {
  CheckpointSection section;
  std::string name;
  std::span<const std::byte> bytes;
  std::vector<std::byte> owned;  // when set, `bytes` points into it
  // An external link instead (add_shard_object): the shard file, and what the
  // manifest says of the bytes there.
  std::string shard;
  int shard_rank = -1;
  std::uint64_t shard_size = 0;
  std::uint32_t shard_crc = 0;
};

// A dataset of the whole job, as every rank learns it in commit().
struct JobEntry {
  CheckpointSection section;
  std::string name;
  std::string path;
  std::uint64_t size = 0;
  std::uint32_t crc32c = 0;
  int rank = 0;                 // the manifest's: the rank whose bytes these are
  int writer = 0;               // the rank (in the communicator) that added it
  std::size_t local_index = 0;  // into the writer's LocalEntry list
  std::string shard;            // an external link to this shard file, or ""
};

// (section, name, size, crc, shard file or "", the manifest's rank or -1 for the writer)
using WireEntry = std::tuple<std::uint8_t, std::string, std::uint64_t, std::uint32_t, std::string, std::int32_t>;

bool mpi_usable() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// Every rank gets the same Status: OK when all were OK, else the error of the
// lowest failing rank (its code and message).
Status agree(MPI_Comm comm, int rank, int size, const Status& mine) {
  if (size == 1) return mine;
  int first_bad = mine.ok() ? size : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, comm);
  if (first_bad == size) return Status();
  int code = static_cast<int>(mine.code());
  std::string message = mine.message();
  unsigned long long length = message.size();
  MPI_Bcast(&code, 1, MPI_INT, first_bad, comm);
  MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, first_bad, comm);
  message.resize(length);
  MPI_Bcast(message.data(), static_cast<int>(length), MPI_CHAR, first_bad, comm);
  return Status(static_cast<StatusCode>(code), std::move(message));
}

Status fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  if (fd < 0) return unavailable(fmt::format("cannot open {} to flush it: {}", path.string(), strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return unavailable(fmt::format("fsync of {} failed: {}", path.string(), strerror(err)));
  return Status();
}

}  // namespace

struct CheckpointWriter::Impl {
  MPI_Comm comm = MPI_COMM_NULL;  // our duplicate of the caller's communicator
  int rank = 0;
  int size = 1;
  fs::path dir;
  fs::path path;
  fs::path tmp_path;
  std::uint64_t sequence = 0;
  Options options;
  std::vector<LocalEntry> entries;
  std::set<std::pair<CheckpointSection, std::string>> names;
  bool committed = false;

  ~Impl() { free_comm(); }
  void free_comm() {
    if (comm != MPI_COMM_NULL && mpi_usable()) MPI_Comm_free(&comm);
    comm = MPI_COMM_NULL;
  }
  std::string where() const { return "checkpoint " + path.string(); }

  Status gather(std::vector<JobEntry>* job);
  Status write_file(const std::vector<JobEntry>& job, std::int64_t created_ns);
  Status publish();
  void prune();
  std::set<std::string> linked_shards;  // shard files the committed file links to (prune)
};

StatusOr<CheckpointWriter> CheckpointWriter::begin(MPI_Comm comm, const fs::path& dir, std::uint64_t sequence,
                                                   Options options) {
  if (!mpi_usable()) {
    return failed_precondition("CheckpointWriter::begin needs MPI initialized and not finalized");
  }
  auto impl = std::make_unique<Impl>();
  if (MPI_Comm_dup(comm, &impl->comm) != MPI_SUCCESS) {
    return unavailable("CheckpointWriter::begin: MPI_Comm_dup failed");
  }
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  impl->dir = dir;
  impl->sequence = sequence;
  impl->options = options;
  impl->path = dir / checkpoint_file_name(sequence);
  // The temporary name is new for every attempt (rank 0's pid and clock): Open MPI's
  // MPI-IO keeps a named semaphore per file name in /dev/shm (sharedfp/sm), and a
  // writer killed inside MPI_File_open leaves it held, so that reopening the same
  // name later would hang for ever.
  std::uint64_t tag[2] = {static_cast<std::uint64_t>(::getpid()),
                          static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  MPI_Bcast(tag, 2, MPI_UINT64_T, 0, impl->comm);
  impl->tmp_path = impl->path;
  impl->tmp_path += fmt::format(".tmp-{:x}-{:x}", tag[0], tag[1] & 0xffffffffffULL);

  // The ranks must name the same file.
  const std::string dir_string = dir.string();
  const std::uint32_t dir_crc = crc32c(std::as_bytes(std::span(dir_string)));
  std::uint64_t lo[2] = {sequence, dir_crc};
  std::uint64_t hi[2] = {sequence, dir_crc};
  MPI_Allreduce(MPI_IN_PLACE, lo, 2, MPI_UINT64_T, MPI_MIN, impl->comm);
  MPI_Allreduce(MPI_IN_PLACE, hi, 2, MPI_UINT64_T, MPI_MAX, impl->comm);
  if (lo[0] != hi[0]) {
    return invalid_argument(fmt::format("CheckpointWriter::begin: the ranks disagree on the sequence "
                                        "(from {} to {}); every rank must pass the same one",
                                        lo[0], hi[0]));
  }
  if (lo[1] != hi[1]) {
    return invalid_argument(fmt::format("CheckpointWriter::begin: the ranks disagree on the directory "
                                        "(rank {} has {}); every rank must pass the same one",
                                        impl->rank, dir_string));
  }

  Status made;
  if (impl->rank == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec && !fs::is_directory(dir)) {
      made = fs::exists(dir) ? invalid_argument(fmt::format("checkpoint directory {} is not a directory",
                                                           dir_string))
                             : unavailable(fmt::format("cannot create checkpoint directory {}: {}",
                                                       dir_string, ec.message()));
    } else if (!fs::is_directory(dir)) {
      made = invalid_argument(fmt::format("checkpoint directory {} is not a directory", dir_string));
    }
  }
  if (Status s = agree(impl->comm, impl->rank, impl->size, made); !s.ok()) return s;
  Status seen;
  if (impl->rank != 0 && !fs::is_directory(dir)) {
    seen = unavailable(fmt::format("rank {} cannot see checkpoint directory {}, which rank 0 created; "
                                   "checkpoints need a file system shared by all ranks",
                                   impl->rank, dir_string));
  }
  if (Status s = agree(impl->comm, impl->rank, impl->size, seen); !s.ok()) return s;
  return CheckpointWriter(std::move(impl));
}

CheckpointWriter::CheckpointWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointWriter::CheckpointWriter(CheckpointWriter&&) noexcept = default;
CheckpointWriter& CheckpointWriter::operator=(CheckpointWriter&&) noexcept = default;
CheckpointWriter::~CheckpointWriter() = default;

const fs::path& CheckpointWriter::path() const { return impl_->path; }
std::uint64_t CheckpointWriter::sequence() const { return impl_->sequence; }
int CheckpointWriter::rank() const { return impl_->rank; }
int CheckpointWriter::ranks() const { return impl_->size; }

Status CheckpointWriter::add_object(std::string_view name, std::span<const std::byte> bytes) {
  return add(CheckpointSection::kObjects, name, bytes, {});
}

Status CheckpointWriter::add_object(std::string_view name, std::vector<std::byte>&& bytes) {
  return add_owned(CheckpointSection::kObjects, name, std::move(bytes));
}

Status CheckpointWriter::add_meta(std::string_view name, std::span<const std::byte> bytes) {
  return add_owned(CheckpointSection::kMeta, name, std::vector<std::byte>(bytes.begin(), bytes.end()));
}

Status CheckpointWriter::add_shard_object(const CheckpointShardEntry& entry, std::string_view shard_file, int rank) {
  std::uint64_t seq = 0;
  if (!detail::ckpt::parse_shard_name(shard_file, &seq) || seq != impl_->sequence) {
    return invalid_argument(fmt::format("{}: {} is not a shard name of this checkpoint (ckpt-{:06d}.TAG.rRANK.h5)",
                                        impl_->where(), shard_file, impl_->sequence));
  }
  if (Status s = add(CheckpointSection::kObjects, entry.name, {}, {}); !s.ok()) return s;
  LocalEntry& e = impl_->entries.back();
  e.shard = std::string(shard_file);
  e.shard_rank = rank;
  e.shard_size = entry.size;
  e.shard_crc = entry.crc32c;
  return Status();
}

Status CheckpointWriter::add_owned(CheckpointSection section, std::string_view name,
                                   std::vector<std::byte> bytes) {
  return add(section, name, {}, std::move(bytes));
}

Status CheckpointWriter::add(CheckpointSection section, std::string_view name,
                             std::span<const std::byte> bytes, std::vector<std::byte> owned) {
  Impl& im = *impl_;
  const char* sec = checkpoint_section_name(section);
  if (im.committed) {
    return failed_precondition(fmt::format("{}: /{}/{} added after commit()", im.where(), sec, name));
  }
  if (name.empty()) return invalid_argument(fmt::format("{}: a /{} dataset name is empty", im.where(), sec));
  if (name.size() > kCheckpointMaxNameBytes) {
    return invalid_argument(fmt::format("{}: a /{} dataset name of {} bytes is longer than the {} allowed",
                                        im.where(), sec, name.size(), kCheckpointMaxNameBytes));
  }
  if (!im.names.emplace(section, std::string(name)).second) {
    return invalid_argument(fmt::format("{}: /{}/{} added twice on rank {}", im.where(), sec, name, im.rank));
  }
  LocalEntry& e = im.entries.emplace_back();
  e.section = section;
  e.name = std::string(name);
  e.bytes = bytes;
  e.owned = std::move(owned);
  if (!e.owned.empty()) e.bytes = e.owned;
  return Status();
}

// Exchanges every rank's (section, name, size, crc) list; all ranks end up with the
// same job-wide list, sorted by section and name, or the same error.
Status CheckpointWriter::Impl::gather(std::vector<JobEntry>* job) {
  std::vector<WireEntry> mine;
  mine.reserve(entries.size());
  for (const auto& e : entries) {
    if (!e.shard.empty()) {
      mine.emplace_back(static_cast<std::uint8_t>(e.section), e.name, e.shard_size, e.shard_crc, e.shard,
                        e.shard_rank);
    } else {
      mine.emplace_back(static_cast<std::uint8_t>(e.section), e.name, e.bytes.size(), crc32c(e.bytes),
                        std::string(), -1);
    }
  }
  const std::vector<std::byte> payload = to_bytes(mine);
  std::vector<unsigned long long> lengths(static_cast<std::size_t>(size));
  unsigned long long my_length = payload.size();
  MPI_Allgather(&my_length, 1, MPI_UNSIGNED_LONG_LONG, lengths.data(), 1, MPI_UNSIGNED_LONG_LONG, comm);
  unsigned long long total = 0;
  for (auto n : lengths) total += n;
  if (total > static_cast<unsigned long long>(INT_MAX)) {
    return resource_exhausted(fmt::format("{}: the list of datasets takes {} bytes, more than one "
                                          "MPI_Allgatherv can carry (2 GiB); use fewer or shorter names",
                                          where(), total));
  }
  std::vector<int> counts(lengths.size());
  std::vector<int> displs(lengths.size());
  for (std::size_t r = 0, off = 0; r < lengths.size(); ++r) {
    counts[r] = static_cast<int>(lengths[r]);
    displs[r] = static_cast<int>(off);
    off += lengths[r];
  }
  std::vector<std::byte> all(total);
  MPI_Allgatherv(payload.data(), static_cast<int>(payload.size()), MPI_BYTE, all.data(), counts.data(),
                 displs.data(), MPI_BYTE, comm);

  job->clear();
  for (int r = 0; r < size; ++r) {
    std::vector<WireEntry> theirs;
    try {
      theirs = from_bytes<std::vector<WireEntry>>(
          std::span(all).subspan(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(counts[r])));
    } catch (const SerializationError& e) {
      return internal_error(fmt::format("{}: rank {}'s dataset list does not decode: {}", where(), r, e.what()));
    }
    for (std::size_t i = 0; i < theirs.size(); ++i) {
      auto& [sec, name, bytes, crc, shard, owner] = theirs[i];
      JobEntry je;
      je.section = static_cast<CheckpointSection>(sec);
      je.name = std::move(name);
      je.path = detail::ckpt::dataset_path(je.section, je.name);
      je.size = bytes;
      je.crc32c = crc;
      je.rank = owner >= 0 ? owner : r;
      je.writer = r;
      je.local_index = i;
      je.shard = std::move(shard);
      job->push_back(std::move(je));
    }
  }
  std::sort(job->begin(), job->end(), [](const JobEntry& a, const JobEntry& b) {
    return std::tie(a.section, a.name, a.rank) < std::tie(b.section, b.name, b.rank);
  });
  for (std::size_t i = 1; i < job->size(); ++i) {
    const JobEntry& a = (*job)[i - 1];
    const JobEntry& b = (*job)[i];
    if (a.section == b.section && a.name == b.name) {
      return invalid_argument(fmt::format("{}: {} was added by rank {} and by rank {}; names must be unique "
                                          "across the job",
                                          where(), a.path, a.rank, b.rank));
    }
  }
  return Status();
}

// Creates <path>.tmp collectively, writes every dataset and the manifest, flushes
// and closes it. Each step ends with agree(): the ranks take the same branch, so
// the collective HDF5 calls (create, close) always line up.
Status CheckpointWriter::Impl::write_file(const std::vector<JobEntry>& job, std::int64_t created_ns) {
  using namespace detail::ckpt;
  const std::string tmp = tmp_path.string();
  auto fail = [&](std::string what) {
    return unavailable(fmt::format("{}: {}{}", where(), what, hdf5_error()));
  };

  Handle fapl = plist_handle(H5Pcreate(H5P_FILE_ACCESS));
  Status local;
  // One rank alone writes through the POSIX driver: MPI-IO on a communicator of one
  // adds nothing but its shared-file-pointer machinery.
  const bool mpio = size > 1;
  if (!fapl.valid() ||
      (mpio && (H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL) < 0 ||
                // Metadata is read and written collectively: one rank does the I/O and
                // broadcasts, instead of every rank reading the same blocks.
                H5Pset_all_coll_metadata_ops(fapl.get(), true) < 0 ||
                H5Pset_coll_metadata_write(fapl.get(), true) < 0)) ||
      // No file locking, as the reader: flock fails on some parallel file systems.
      (!mpio && (H5Pset_fapl_sec2(fapl.get()) < 0 || H5Pset_file_locking(fapl.get(), false, true) < 0)) ||
      // Datasets of 1 MiB or more start on a 1 MiB boundary: whole stripes on
      // parallel file systems, at most 1 MiB of padding each.
      H5Pset_alignment(fapl.get(), hsize_t{1} << 20, hsize_t{1} << 20) < 0 ||
      set_checksummed_format(fapl.get()) < 0) {
    local = fail("cannot set up the file access properties");
  }
  if (Status s = agree(comm, rank, size, local); !s.ok()) return s;

  // A failure of this collective create on some ranks only would leave the others
  // holding a file that needs a collective close; MPI_File_open fails on all ranks
  // alike in practice (it is collective too).
  Handle file = file_handle(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
  if (!file.valid()) local = fail("cannot create " + tmp);
  if (Status s = agree(comm, rank, size, local); !s.ok()) return s;
  // Fault injection for tests: a writer that stops here, its temporary file
  // created, can be killed mid-commit at a known point.
  if (const char* f = std::getenv("BRISK_FAULT_INJECT"); f && injects_checkpoint_stall(f)) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }

  // Groups and datasets, created by every rank in the same order.
  Handle dcpl = plist_handle(H5Pcreate(H5P_DATASET_CREATE));
  std::map<std::size_t, Handle> own;  // local index -> dataset
  [&] {
    // Without this, parallel HDF5 writes fill values into every byte first.
    if (!dcpl.valid() || H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) < 0 ||
        H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY) < 0) {
      local = fail("cannot set up the dataset creation properties");
      return;
    }
    for (auto section : {CheckpointSection::kObjects, CheckpointSection::kDriver, CheckpointSection::kMeta}) {
      const std::string g = std::string("/") + checkpoint_section_name(section);
      Handle group = group_handle(H5Gcreate2(file.get(), g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      if (!group.valid()) {
        local = fail("cannot create group " + g);
        return;
      }
    }
    for (const JobEntry& e : job) {
      if (!e.shard.empty()) {
        // The bytes stay in the shard; HDF5 resolves the bare name against this
        // file's directory (it also looks in the working directory, where the
        // attempt's unique tag makes a file of that name unlikely).
        if (H5Lcreate_external(e.shard.c_str(), e.path.c_str(), file.get(), e.path.c_str(), H5P_DEFAULT,
                               H5P_DEFAULT) < 0) {
          local = fail(fmt::format("cannot link {} to shard {}", e.path, e.shard));
          return;
        }
        continue;
      }
      const hsize_t dims[1] = {e.size};
      Handle space = space_handle(H5Screate_simple(1, dims, nullptr));
      Handle ds = dataset_handle(space.valid() ? H5Dcreate2(file.get(), e.path.c_str(), H5T_STD_U8LE,
                                                            space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)
                                               : H5I_INVALID_HID);
      if (!ds.valid()) {
        local = fail(fmt::format("cannot create dataset {} ({} bytes)", e.path, e.size));
        return;
      }
      if (e.writer == rank) own.emplace(e.local_index, std::move(ds));
    }
  }();
  if (Status s = agree(comm, rank, size, local); !s.ok()) return s;

  // This rank's bytes, with independent I/O: no rank waits for another's data.
  Handle dxpl = plist_handle(H5Pcreate(H5P_DATASET_XFER));
  if (!dxpl.valid() || H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT) < 0) {
    local = fail("cannot set up the transfer properties");
  }
  for (auto& [index, ds] : own) {
    if (!local.ok()) break;
    const LocalEntry& e = entries[index];
    if (write_bytes(ds.get(), e.bytes, dxpl.get()) < 0) {
      local = fail(fmt::format("writing {} failed on rank {}", detail::ckpt::dataset_path(e.section, e.name), rank));
    }
  }
  own.clear();
  if (Status s = agree(comm, rank, size, local); !s.ok()) return s;

  // The manifest and the root attributes: created by all, the same values
  // everywhere; rank 0 writes the records.
  CheckpointInfo info;
  info.format_version = kCheckpointFormatVersion;
  info.ranks = options.ranks > 0 ? options.ranks : size;
  info.sequence = sequence;
  info.created_unix_ns = created_ns;
  info.created = iso8601_utc(created_ns);
  info.brisk_version = BRISK_CHECKPOINT_BRISK_VERSION;
  std::vector<ManifestRecord> records;
  records.reserve(job.size());
  std::size_t path_bytes = 2;
  for (const JobEntry& e : job) {
    records.push_back({e.path, e.size, e.crc32c, static_cast<std::uint32_t>(e.rank)});
    path_bytes = std::max(path_bytes, e.path.size() + 1);
  }
  const std::uint32_t crc = manifest_crc(info, records);
  [&] {
    Handle ftype = manifest_type(path_bytes, true);
    Handle mtype = manifest_type(path_bytes, false);
    const hsize_t dims[1] = {records.size()};
    Handle space = space_handle(H5Screate_simple(1, dims, nullptr));
    Handle ds = dataset_handle(ftype.valid() && space.valid()
                                   ? H5Dcreate2(file.get(), kManifestPath, ftype.get(), space.get(), H5P_DEFAULT,
                                                dcpl.get(), H5P_DEFAULT)
                                   : H5I_INVALID_HID);
    if (!mtype.valid() || !ds.valid()) {
      local = fail("cannot create /manifest");
      return;
    }
    auto attr = [&](const char* name, hid_t type, const void* value) {
      if (!local.ok()) return;
      Handle scalar = space_handle(H5Screate(H5S_SCALAR));
      Handle a = attr_handle(H5Acreate2(file.get(), name, type, scalar.get(), H5P_DEFAULT, H5P_DEFAULT));
      if (!a.valid() || H5Awrite(a.get(), type, value) < 0) local = fail(fmt::format("cannot write attribute {}", name));
    };
    auto string_attr = [&](const char* name, const std::string& value) {
      Handle t = type_handle(H5Tcopy(H5T_C_S1));
      H5Tset_size(t.get(), value.size() + 1);
      H5Tset_strpad(t.get(), H5T_STR_NULLTERM);
      attr(name, t.get(), value.c_str());
    };
    const auto ranks = static_cast<std::uint32_t>(info.ranks);
    attr(kAttrFormat, H5T_NATIVE_UINT32, &info.format_version);
    attr(kAttrRanks, H5T_NATIVE_UINT32, &ranks);
    attr(kAttrSequence, H5T_NATIVE_UINT64, &info.sequence);
    attr(kAttrCreatedNs, H5T_NATIVE_INT64, &info.created_unix_ns);
    string_attr(kAttrCreated, info.created);
    string_attr(kAttrVersion, info.brisk_version);
    attr(kAttrManifestCrc, H5T_NATIVE_UINT32, &crc);
    if (local.ok() && rank == 0 && !records.empty()) {
      const std::vector<std::byte> packed = pack_manifest(records, path_bytes);
      if (H5Dwrite(ds.get(), mtype.get(), H5S_ALL, H5S_ALL, dxpl.get(), packed.data()) < 0) {
        local = fail("writing /manifest failed");
      }
    }
  }();
  if (Status s = agree(comm, rank, size, local); !s.ok()) return s;

  // MPI_File_sync through HDF5, then the collective close.
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) local = fail("flushing " + tmp + " failed");
  if (Status s = agree(comm, rank, size, local); !s.ok()) return s;
  if (file.reset() < 0) local = fail("closing " + tmp + " failed");
  return agree(comm, rank, size, local);
}

// Rank 0: make the file durable under its final name.
Status CheckpointWriter::Impl::publish() {
  if (Status s = fsync_path(tmp_path, false); !s.ok()) return s;
  std::error_code ec;
  fs::rename(tmp_path, path, ec);
  if (ec) return unavailable(fmt::format("{}: cannot rename {}: {}", where(), tmp_path.string(), ec.message()));
  // The rename itself must survive a crash; failure here leaves a valid file.
  (void)fsync_path(dir, true);
  return Status();
}

// Rank 0: keep the newest `keep` checkpoints (the new one always) and drop .tmp
// files of older sequences, which no writer will finish. A file that cannot be
// removed stays; the next commit tries again.
void CheckpointWriter::Impl::prune() {
  std::error_code ec;
  std::vector<std::pair<std::uint64_t, fs::path>> done;
  std::vector<std::pair<std::uint64_t, fs::path>> shards;  // of this sequence or older
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::uint64_t seq = 0;
    if (detail::ckpt::parse_checkpoint_name(name, true, &seq)) {
      // Leftovers of this sequence too: this attempt's own was renamed already.
      if (seq <= sequence) fs::remove(it->path(), ec);
      ec.clear();
    } else if (detail::ckpt::parse_checkpoint_name(name, false, &seq)) {
      done.emplace_back(seq, it->path());
    } else if (detail::ckpt::parse_shard_name(name, &seq) && seq <= sequence) {
      shards.emplace_back(seq, it->path());
    }
  }
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::set<std::uint64_t> kept_sequences{sequence};
  std::size_t kept = 1;  // the new one
  for (const auto& [seq, p] : done) {
    if (p.filename() == path.filename()) continue;
    if (options.keep == 0 || kept < options.keep) {
      ++kept;
      kept_sequences.insert(seq);
    } else {
      fs::remove(p, ec);
    }
  }
  // Shards: of this sequence, those this checkpoint links (other attempts' go); of
  // older sequences, those whose checkpoint stays (the others, failed attempts', go;
  // a failed attempt's at a sequence whose checkpoint stays goes with it). Newer
  // ones may belong to a writer still at work.
  for (const auto& [seq, p] : shards) {
    const bool keep = seq == sequence ? linked_shards.count(p.filename().string()) > 0 : kept_sequences.count(seq) > 0;
    if (!keep) fs::remove(p, ec);
  }
}

Status CheckpointWriter::commit() {
  auto lock = detail::ckpt::lock_hdf5();
  Impl& im = *impl_;
  if (im.committed) return failed_precondition(fmt::format("{}: commit() called twice", im.where()));
  if (im.comm == MPI_COMM_NULL || !mpi_usable()) {
    return failed_precondition(fmt::format("{}: commit() needs MPI initialized and not finalized", im.where()));
  }
  im.committed = true;

  std::vector<JobEntry> job;
  Status status = im.gather(&job);  // the same on every rank
  if (!status.ok()) {
    im.free_comm();
    return status;
  }
  std::int64_t created_ns = 0;
  if (im.rank == 0) {
    created_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  }
  MPI_Bcast(&created_ns, 1, MPI_INT64_T, 0, im.comm);

  for (const JobEntry& e : job) {
    if (!e.shard.empty()) im.linked_shards.insert(e.shard);
  }
  status = im.write_file(job, created_ns);
  if (status.ok()) {
    Status published;
    if (im.rank == 0) {
      published = im.publish();
      if (published.ok()) im.prune();
    }
    status = agree(im.comm, im.rank, im.size, published);
  }
  if (!status.ok() && im.rank == 0) {
    std::error_code ec;
    fs::remove(im.tmp_path, ec);
  }
  // Nobody returns before rank 0 has renamed, pruned or cleaned up.
  MPI_Barrier(im.comm);
  im.free_comm();
  // The spans may go now; owned buffers too.
  im.entries.clear();
  im.entries.shrink_to_fit();
  return status;
}

StatusOr<std::vector<CheckpointShardEntry>> write_checkpoint_shard(
    const fs::path& dir, const std::string& file_name,
    const std::vector<std::pair<std::string, std::vector<std::byte>>>& objects) {
  using namespace detail::ckpt;
  auto lock = lock_hdf5();
  const fs::path path = dir / file_name;
  const std::string where = "checkpoint shard " + path.string();
  auto fail = [&](std::string what) { return unavailable(fmt::format("{}: {}{}", where, what, hdf5_error())); };
  std::vector<CheckpointShardEntry> out;
  std::set<std::string_view> names;
  for (const auto& [name, bytes] : objects) {
    if (name.empty() || name.size() > kCheckpointMaxNameBytes || !names.insert(name).second) {
      return invalid_argument(fmt::format("{}: object name '{}' is empty, longer than {} bytes or given twice",
                                          where, name, kCheckpointMaxNameBytes));
    }
    out.push_back({name, bytes.size(), crc32c(bytes)});
  }
  Status status = [&]() -> Status {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec && !fs::is_directory(dir)) {
      return unavailable(fmt::format("{}: cannot create the directory: {}", where, ec.message()));
    }
    Handle fapl = plist_handle(H5Pcreate(H5P_FILE_ACCESS));
    if (!fapl.valid() || H5Pset_fapl_sec2(fapl.get()) < 0 || H5Pset_file_locking(fapl.get(), false, true) < 0 ||
        H5Pset_alignment(fapl.get(), hsize_t{1} << 20, hsize_t{1} << 20) < 0 ||
        set_checksummed_format(fapl.get()) < 0) {
      return fail("cannot set up the file access properties");
    }
    Handle file = file_handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
    if (!file.valid()) return fail("cannot create the file");
    const std::string group = std::string("/") + checkpoint_section_name(CheckpointSection::kObjects);
    Handle g = group_handle(H5Gcreate2(file.get(), group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!g.valid()) return fail("cannot create group " + group);
    Handle dcpl = plist_handle(H5Pcreate(H5P_DATASET_CREATE));
    if (!dcpl.valid() || H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) < 0 ||
        H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY) < 0) {
      return fail("cannot set up the dataset creation properties");
    }
    for (const auto& [name, bytes] : objects) {
      const std::string ds_path = dataset_path(CheckpointSection::kObjects, name);
      const hsize_t dims[1] = {bytes.size()};
      Handle space = space_handle(H5Screate_simple(1, dims, nullptr));
      Handle ds = dataset_handle(space.valid() ? H5Dcreate2(file.get(), ds_path.c_str(), H5T_STD_U8LE, space.get(),
                                                            H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)
                                               : H5I_INVALID_HID);
      if (!ds.valid()) return fail(fmt::format("cannot create dataset {} ({} bytes)", ds_path, bytes.size()));
      if (write_bytes(ds.get(), bytes, H5P_DEFAULT) < 0) return fail("writing " + ds_path + " failed");
    }
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) return fail("flushing failed");
    if (file.reset() < 0) return fail("closing failed");
    return fsync_path(path, false);
  }();
  if (!status.ok()) {
    std::error_code ec;
    fs::remove(path, ec);
    return status;
  }
  return out;
}

}  // namespace brisk
