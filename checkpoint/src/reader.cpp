#include "brisk/checkpoint/reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "brisk/core/frame.hpp"
#include "hdf5_util.hpp"

namespace brisk {

namespace fs = std::filesystem;
using detail::ckpt::Handle;

struct CheckpointReader::Impl {
  fs::path path;
  Handle file;
  CheckpointInfo info;
  std::vector<CheckpointEntry> entries;

  ~Impl() {
    auto lock = detail::ckpt::lock_hdf5();
    file.reset();
  }
  std::string where() const { return "checkpoint " + path.string(); }
  Status read_into(const CheckpointEntry& e, std::vector<std::byte>* out) const;
  // Leaves the dataset open in *ds (one traversal of a shard's link, not two).
  Status check(const CheckpointEntry& e, Handle* ds) const;
  // The shard file an external link at `dataset` points to, or "" for a dataset in
  // this file.
  StatusOr<std::string> shard_of(const std::string& dataset) const;
};

namespace {

using namespace detail::ckpt;

// Reads a scalar attribute of the root group into `value` (of memory type `type`).
bool read_attr(hid_t file, const char* name, hid_t type, void* value) {
  if (H5Aexists(file, name) <= 0) return false;
  Handle a = attr_handle(H5Aopen(file, name, H5P_DEFAULT));
  return a.valid() && H5Aread(a.get(), type, value) >= 0;
}

bool read_string_attr(hid_t file, const char* name, std::string* value) {
  if (H5Aexists(file, name) <= 0) return false;
  Handle a = attr_handle(H5Aopen(file, name, H5P_DEFAULT));
  if (!a.valid()) return false;
  Handle ftype = type_handle(H5Aget_type(a.get()));
  if (!ftype.valid() || H5Tget_class(ftype.get()) != H5T_STRING || H5Tis_variable_str(ftype.get()) != 0) {
    return false;
  }
  const std::size_t n = H5Tget_size(ftype.get());
  if (n == 0 || n > 4096) return false;
  Handle mtype = type_handle(H5Tcopy(H5T_C_S1));
  H5Tset_size(mtype.get(), n);
  H5Tset_strpad(mtype.get(), H5T_STR_NULLTERM);
  std::string buf(n, '\0');
  if (H5Aread(a.get(), mtype.get(), buf.data()) < 0) return false;
  buf.resize(strnlen(buf.c_str(), n));
  *value = std::move(buf);
  return true;
}

std::string hex32(std::uint32_t v) { return fmt::format("0x{:08x}", v); }

}  // namespace

StatusOr<CheckpointReader> CheckpointReader::open(const fs::path& path) {
  auto lock = lock_hdf5();
  const std::string p = path.string();
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return not_found(fmt::format("checkpoint {} does not exist", p));
  if (ec) return unavailable(fmt::format("cannot stat checkpoint {}: {}", p, ec.message()));
  if (st.type() == fs::file_type::directory) {
    return invalid_argument(fmt::format("{} is a directory; expected a checkpoint file (open_latest takes a "
                                        "directory)",
                                        p));
  }
  const auto file_size = fs::file_size(path, ec);
  if (ec) return unavailable(fmt::format("cannot read the size of {}: {}", p, ec.message()));

  const htri_t is_hdf5 = H5Fis_hdf5(p.c_str());
  if (is_hdf5 < 0) return unavailable(fmt::format("cannot read {}{}", p, hdf5_error()));
  if (is_hdf5 == 0) {
    return invalid_argument(fmt::format("{} is not an HDF5 file (no HDF5 signature); expected a brisk checkpoint",
                                        p));
  }
  // The POSIX driver, no MPI; no file locking: a committed checkpoint never
  // changes, and flock fails on some parallel file systems.
  Handle fapl = plist_handle(H5Pcreate(H5P_FILE_ACCESS));
  // Shard files reached through external links stay open while the checkpoint is
  // (else every dataset access opens and closes its shard again).
  if (!fapl.valid() || H5Pset_fapl_sec2(fapl.get()) < 0 || H5Pset_file_locking(fapl.get(), false, true) < 0 ||
      H5Pset_elink_file_cache_size(fapl.get(), kShardFilesKeptOpen) < 0) {
    return internal_error(fmt::format("cannot set up HDF5 file access for {}{}", p, hdf5_error()));
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = file_handle(H5Fopen(p.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!impl->file.valid()) {
    return invalid_argument(fmt::format("cannot open checkpoint {} (truncated or damaged){}", p, hdf5_error()));
  }
  const hid_t file = impl->file.get();
  const std::string where = impl->where();

  // Root attributes.
  CheckpointInfo& info = impl->info;
  if (!read_attr(file, kAttrFormat, H5T_NATIVE_UINT32, &info.format_version)) {
    // Absent (another HDF5 file), or present and unreadable (damaged metadata).
    if (const std::string why = hdf5_error(); !why.empty()) {
      return invalid_argument(fmt::format("{}: attribute {} is unreadable (damaged){}", where, kAttrFormat, why));
    }
    return invalid_argument(fmt::format("{} is an HDF5 file but not a brisk checkpoint (no {} attribute)", p,
                                        kAttrFormat));
  }
  if (info.format_version != kCheckpointFormatVersion) {
    return failed_precondition(fmt::format("{} has checkpoint format version {}; this brisk reads version {}",
                                           where, info.format_version, kCheckpointFormatVersion));
  }
  std::uint32_t ranks = 0;
  std::uint32_t stored_crc = 0;
  for (auto [name, type, value] : {std::tuple{kAttrRanks, H5T_NATIVE_UINT32, static_cast<void*>(&ranks)},
                                   std::tuple{kAttrSequence, H5T_NATIVE_UINT64, static_cast<void*>(&info.sequence)},
                                   std::tuple{kAttrCreatedNs, H5T_NATIVE_INT64,
                                              static_cast<void*>(&info.created_unix_ns)},
                                   std::tuple{kAttrManifestCrc, H5T_NATIVE_UINT32, static_cast<void*>(&stored_crc)}}) {
    if (!read_attr(file, name, type, value)) {
      return invalid_argument(fmt::format("{}: attribute {} is missing or unreadable{}", where, name, hdf5_error()));
    }
  }
  info.ranks = static_cast<int>(ranks);
  for (auto [name, value] : {std::pair{kAttrCreated, &info.created}, std::pair{kAttrVersion, &info.brisk_version}}) {
    if (!read_string_attr(file, name, value)) {
      return invalid_argument(fmt::format("{}: attribute {} is missing or unreadable{}", where, name, hdf5_error()));
    }
  }

  // The manifest.
  if (H5Lexists(file, "manifest", H5P_DEFAULT) <= 0) {
    hdf5_error();
    return invalid_argument(fmt::format("{} has no /manifest (an incomplete write, or not a brisk checkpoint)",
                                        where));
  }
  std::vector<ManifestRecord> records;
  {
    Handle ds = dataset_handle(H5Dopen2(file, kManifestPath, H5P_DEFAULT));
    Handle ftype = type_handle(ds.valid() ? H5Dget_type(ds.get()) : H5I_INVALID_HID);
    Handle space = space_handle(ds.valid() ? H5Dget_space(ds.get()) : H5I_INVALID_HID);
    const int path_index = ftype.valid() && H5Tget_class(ftype.get()) == H5T_COMPOUND
                               ? H5Tget_member_index(ftype.get(), "path")
                               : -1;
    Handle path_type = type_handle(path_index >= 0 ? H5Tget_member_type(ftype.get(), static_cast<unsigned>(path_index))
                                                   : H5I_INVALID_HID);
    hsize_t dims[1] = {0};
    if (!space.valid() || !path_type.valid() || H5Tget_class(path_type.get()) != H5T_STRING ||
        H5Sget_simple_extent_ndims(space.get()) != 1 || H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 0) {
      return invalid_argument(fmt::format("{}: /manifest is not a list of {{path, size, crc32c, rank}} records{}",
                                          where, hdf5_error()));
    }
    const std::size_t path_bytes = H5Tget_size(path_type.get());
    const std::size_t record_bytes = manifest_record_bytes(path_bytes);
    // The records are stored in the file, so they cannot outnumber its bytes (and a
    // damaged count must not make us allocate more than that).
    if (path_bytes == 0 || path_bytes > 4 * kCheckpointMaxNameBytes || dims[0] > file_size / record_bytes) {
      return invalid_argument(fmt::format("{}: /manifest has implausible dimensions ({} records of {} bytes)", where,
                                          dims[0], record_bytes));
    }
    // Exactly the type the writer stores: HDF5 converts what it reads to the memory
    // type, and a damaged compound type (member offsets or sizes) crashed that
    // conversion in HDF5 1.10.8.
    Handle expected = manifest_type(path_bytes, true);
    if (!expected.valid() || H5Tequal(ftype.get(), expected.get()) <= 0) {
      return invalid_argument(fmt::format("{}: /manifest's records are not of the type brisk writes ({{path: "
                                          "string of {} bytes, size: u64, crc32c: u32, rank: u32}}){}",
                                          where, path_bytes, hdf5_error()));
    }
    std::vector<std::byte> packed(dims[0] * record_bytes);
    Handle mtype = manifest_type(path_bytes, false);
    if (!packed.empty() &&
        (!mtype.valid() || H5Dread(ds.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, packed.data()) < 0)) {
      return invalid_argument(fmt::format("{}: cannot read /manifest{}", where, hdf5_error()));
    }
    records = unpack_manifest(packed, path_bytes);
  }
  const std::uint32_t crc = manifest_crc(info, records);
  if (crc != stored_crc) {
    return invalid_argument(fmt::format("{}: manifest checksum mismatch (stored {}, computed {}): the manifest or "
                                        "the root attributes are damaged",
                                        where, hex32(stored_crc), hex32(crc)));
  }
  // `created` is outside the checksum; the writer makes it of created_unix_ns, which
  // is inside: it must read as that time.
  if (info.created != iso8601_utc(info.created_unix_ns)) {
    return invalid_argument(fmt::format("{}: attribute {} is '{}', but {} says {}: the root attributes are damaged",
                                        where, kAttrCreated, info.created, kAttrCreatedNs,
                                        iso8601_utc(info.created_unix_ns)));
  }

  // Every listed dataset is there, a 1-D byte array of the listed size, inside the file.
  for (const ManifestRecord& r : records) {
    auto parsed = parse_dataset_path(r.path);
    if (!parsed.ok()) return invalid_argument(fmt::format("{}: {}", where, parsed.status().message()));
    CheckpointEntry e;
    e.section = parsed->first;
    e.name = std::move(parsed->second);
    e.path = r.path;
    e.size = r.size;
    e.crc32c = r.crc32c;
    e.rank = static_cast<int>(r.rank);
    // A dataset in a shard file: that file must be there, and its size bounds the data.
    std::uint64_t holder_size = file_size;
    if (auto shard = impl->shard_of(e.path); !shard.ok()) {
      return shard.status();
    } else if (!shard->empty()) {
      e.file = std::move(*shard);
      const fs::path shard_path = path.parent_path() / e.file;
      holder_size = fs::file_size(shard_path, ec);
      if (ec) {
        return invalid_argument(fmt::format("{}: {} is kept in the shard file {}, which cannot be read: {}", where,
                                            e.path, shard_path.string(), ec.message()));
      }
    }
    Handle ds;
    if (Status s = impl->check(e, &ds); !s.ok()) return s;
    const haddr_t offset = H5Dget_offset(ds.get());
    hdf5_error();  // HADDR_UNDEF for an empty dataset is not an error here
    if (offset != HADDR_UNDEF) {
      e.file_offset = static_cast<std::int64_t>(offset);
      if (offset + e.size > holder_size) {
        return invalid_argument(fmt::format("{}: {} ends at byte {}, past the end of {} ({} bytes): the "
                                            "file is truncated",
                                            where, e.path, offset + e.size,
                                            e.file.empty() ? std::string("the file") : e.file, holder_size));
      }
    } else if (e.size != 0) {
      return invalid_argument(fmt::format("{}: {} has no storage in the file", where, e.path));
    }
    impl->entries.push_back(std::move(e));
  }
  std::sort(impl->entries.begin(), impl->entries.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) {
    return std::tie(a.section, a.name) < std::tie(b.section, b.name);
  });
  return CheckpointReader(std::move(impl));
}

StatusOr<std::string> CheckpointReader::Impl::shard_of(const std::string& dataset) const {
  H5L_info_t link{};
  if (H5Lexists(file.get(), checkpoint_section_name(CheckpointSection::kObjects), H5P_DEFAULT) <= 0 ||
      H5Lexists(file.get(), dataset.c_str(), H5P_DEFAULT) <= 0 ||
      H5Lget_info(file.get(), dataset.c_str(), &link, H5P_DEFAULT) < 0) {
    hdf5_error();
    return std::string();  // check() says what is missing
  }
  if (link.type != H5L_TYPE_EXTERNAL) return std::string();
  std::vector<char> value(link.u.val_size);
  unsigned flags = 0;
  const char* target_file = nullptr;
  const char* target_path = nullptr;
  if (value.empty() || H5Lget_val(file.get(), dataset.c_str(), value.data(), value.size(), H5P_DEFAULT) < 0 ||
      H5Lunpack_elink_val(value.data(), value.size(), &flags, &target_file, &target_path) < 0 ||
      target_file == nullptr || target_path == nullptr) {
    return invalid_argument(fmt::format("{}: {} is an external link that cannot be read{}", where(), dataset,
                                        hdf5_error()));
  }
  // The writer links a shard by its bare name to the same path.
  std::uint64_t sequence = 0;
  if (!parse_shard_name(target_file, &sequence) || sequence != info.sequence || dataset != target_path) {
    return invalid_argument(fmt::format("{}: {} links to {}:{}, which is not a shard of this checkpoint", where(),
                                        dataset, target_file, target_path));
  }
  return std::string(target_file);
}

// The dataset exists and is a 1-D byte array of the manifest's size.
Status CheckpointReader::Impl::check(const CheckpointEntry& e, Handle* ds_out) const {
  if (H5Lexists(file.get(), checkpoint_section_name(e.section), H5P_DEFAULT) <= 0 ||
      H5Lexists(file.get(), e.path.c_str(), H5P_DEFAULT) <= 0) {
    hdf5_error();
    return invalid_argument(fmt::format("{}: {} is in the manifest but not in the file", where(), e.path));
  }
  Handle ds = dataset_handle(H5Dopen2(file.get(), e.path.c_str(), H5P_DEFAULT));
  Handle type = type_handle(ds.valid() ? H5Dget_type(ds.get()) : H5I_INVALID_HID);
  Handle space = space_handle(ds.valid() ? H5Dget_space(ds.get()) : H5I_INVALID_HID);
  hsize_t dims[1] = {0};
  if (!type.valid() || !space.valid() || H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 ||
      H5Sget_simple_extent_ndims(space.get()) != 1 || H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 0) {
    return invalid_argument(fmt::format("{}: {} is not a 1-D dataset of bytes{}", where(), e.path, hdf5_error()));
  }
  if (dims[0] != e.size) {
    return invalid_argument(fmt::format("{}: {} holds {} bytes, the manifest says {}", where(), e.path, dims[0],
                                        e.size));
  }
  *ds_out = std::move(ds);
  return Status();
}

Status CheckpointReader::Impl::read_into(const CheckpointEntry& e, std::vector<std::byte>* out) const {
  out->resize(e.size);
  Handle ds = dataset_handle(H5Dopen2(file.get(), e.path.c_str(), H5P_DEFAULT));
  if (!ds.valid() || read_bytes(ds.get(), 0, *out) < 0) {
    return invalid_argument(fmt::format("{}: reading {} failed{}", where(), e.path, hdf5_error()));
  }
  const std::uint32_t crc = crc32c(*out);
  if (crc != e.crc32c) {
    return invalid_argument(fmt::format("{}: checksum mismatch in {} ({} bytes): the manifest says {}, the data "
                                        "has {}",
                                        where(), e.path, e.size, hex32(e.crc32c), hex32(crc)));
  }
  return Status();
}

StatusOr<LatestCheckpoint> CheckpointReader::open_latest(const fs::path& dir, CheckpointVerify verify) {
  auto lock = lock_hdf5();
  auto files = list_checkpoints(dir);
  if (!files.ok()) return files.status();
  if (files->empty()) {
    return not_found(fmt::format("no checkpoint in {} (no file named ckpt-NNNNNN.h5)", dir.string()));
  }
  std::vector<SkippedCheckpoint> skipped;
  for (auto it = files->rbegin(); it != files->rend(); ++it) {
    auto reader = open(it->path);
    if (reader.ok() && verify == CheckpointVerify::kChecksums) {
      if (Status s = reader->verify(); !s.ok()) {
        skipped.push_back({it->path, std::move(s)});
        continue;
      }
    }
    if (!reader.ok()) {
      skipped.push_back({it->path, reader.status()});
      continue;
    }
    return LatestCheckpoint{std::move(*reader), std::move(skipped)};
  }
  std::string why;
  for (const auto& s : skipped) why += fmt::format("\n  {}: {}", s.path.filename().string(), s.reason.message());
  return not_found(fmt::format("no usable checkpoint in {}:{}", dir.string(), why));
}

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

const fs::path& CheckpointReader::path() const { return impl_->path; }
const CheckpointInfo& CheckpointReader::info() const { return impl_->info; }
const std::vector<CheckpointEntry>& CheckpointReader::entries() const { return impl_->entries; }

std::vector<CheckpointEntry> CheckpointReader::entries(CheckpointSection section) const {
  std::vector<CheckpointEntry> out;
  for (const auto& e : impl_->entries) {
    if (e.section == section) out.push_back(e);
  }
  return out;
}

const CheckpointEntry* CheckpointReader::find(CheckpointSection section, std::string_view name) const {
  auto it = std::lower_bound(impl_->entries.begin(), impl_->entries.end(), std::pair{section, name},
                             [](const CheckpointEntry& e, const std::pair<CheckpointSection, std::string_view>& k) {
                               return std::pair<CheckpointSection, std::string_view>(e.section, e.name) < k;
                             });
  if (it == impl_->entries.end() || it->section != section || it->name != name) return nullptr;
  return &*it;
}

StatusOr<std::vector<std::byte>> CheckpointReader::read(CheckpointSection section, std::string_view name) const {
  std::vector<std::byte> out;
  if (Status s = read_into(section, name, out); !s.ok()) return s;
  return out;
}

Status CheckpointReader::read_into(CheckpointSection section, std::string_view name, std::vector<std::byte>& out) const {
  auto lock = lock_hdf5();
  const CheckpointEntry* e = find(section, name);
  if (e == nullptr) {
    return not_found(fmt::format("{} has no /{}/{}", impl_->where(), checkpoint_section_name(section), name));
  }
  return impl_->read_into(*e, &out);
}

Status CheckpointReader::verify() const {
  auto lock = lock_hdf5();
  std::vector<std::byte> buf;
  for (const CheckpointEntry& e : impl_->entries) {
    Handle ds = dataset_handle(H5Dopen2(impl_->file.get(), e.path.c_str(), H5P_DEFAULT));
    if (!ds.valid()) {
      return invalid_argument(fmt::format("{}: cannot open {}{}", impl_->where(), e.path, hdf5_error()));
    }
    std::uint32_t crc = 0;
    for (std::uint64_t done = 0; done < e.size;) {
      const std::uint64_t n = std::min<std::uint64_t>(kVerifySlabBytes, e.size - done);
      buf.resize(n);
      if (read_bytes(ds.get(), done, buf) < 0) {
        return invalid_argument(fmt::format("{}: reading {} failed at byte {}{}", impl_->where(), e.path, done,
                                            hdf5_error()));
      }
      crc = crc32c(buf, crc);
      done += n;
    }
    if (crc != e.crc32c) {
      return invalid_argument(fmt::format("{}: checksum mismatch in {} ({} bytes): the manifest says {}, the data "
                                          "has {}",
                                          impl_->where(), e.path, e.size, hex32(e.crc32c), hex32(crc)));
    }
  }
  return Status();
}

}  // namespace brisk
