#include "hdf5_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <tuple>

#include "brisk/core/frame.hpp"
#include "brisk/core/serialize.hpp"

namespace brisk::detail::ckpt {

std::unique_lock<std::recursive_mutex> lock_hdf5() {
  static std::recursive_mutex mutex;
  std::unique_lock<std::recursive_mutex> lock(mutex);
  static const bool silenced = [] {
    // Errors come back as Status with the stack's text (hdf5_error), never printed.
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)silenced;
  return lock;
}

namespace {
herr_t take_innermost(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (n == 0 && err->desc != nullptr) *out = err->desc;
  return 0;
}
}  // namespace

std::string hdf5_error() {
  std::string innermost;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_innermost, &innermost);
  H5Eclear2(H5E_DEFAULT);
  return innermost.empty() ? std::string() : ": " + innermost;
}

std::string escape_name(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  if (name == ".") return "%2E";
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '%' || c == '/' || c < 0x20 || c == 0x7f) {
      out += fmt::format("%{:02X}", c);
    } else {
      out += ch;
    }
  }
  return out;
}

StatusOr<std::string> unescape_name(std::string_view escaped) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(escaped.size());
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '%') {
      out += escaped[i];
      continue;
    }
    if (i + 2 >= escaped.size()) {
      return invalid_argument(fmt::format("bad escape at the end of dataset name '{}'", escaped));
    }
    const int hi = hex(escaped[i + 1]);
    const int lo = hex(escaped[i + 2]);
    if (hi < 0 || lo < 0) {
      return invalid_argument(fmt::format("bad escape '%{}{}' in dataset name '{}'", escaped[i + 1],
                                          escaped[i + 2], escaped));
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string dataset_path(CheckpointSection section, std::string_view name) {
  return fmt::format("/{}/{}", checkpoint_section_name(section), escape_name(name));
}

StatusOr<std::pair<CheckpointSection, std::string>> parse_dataset_path(std::string_view path) {
  for (auto section : {CheckpointSection::kObjects, CheckpointSection::kDriver, CheckpointSection::kMeta}) {
    const std::string prefix = fmt::format("/{}/", checkpoint_section_name(section));
    if (path.size() > prefix.size() && path.substr(0, prefix.size()) == prefix) {
      const std::string_view rest = path.substr(prefix.size());
      if (rest.find('/') != std::string_view::npos) break;
      auto name = unescape_name(rest);
      if (!name.ok()) return name.status();
      return std::pair{section, std::move(*name)};
    }
  }
  return invalid_argument(fmt::format("manifest path '{}' is not /objects/<name>, /driver/<name> or "
                                      "/meta/<name>",
                                      path));
}

std::uint32_t manifest_crc(const CheckpointInfo& info, const std::vector<ManifestRecord>& records) {
  std::vector<std::tuple<std::string, std::uint64_t, std::uint32_t, std::uint32_t>> rows;
  rows.reserve(records.size());
  for (const auto& r : records) rows.emplace_back(r.path, r.size, r.crc32c, r.rank);
  const auto bytes = to_bytes(std::tuple{info.format_version, static_cast<std::uint32_t>(info.ranks),
                                         info.sequence, info.created_unix_ns, info.brisk_version, rows});
  return crc32c(bytes);
}

namespace {
constexpr std::size_t kSizeOffset = 0;  // relative to the end of the path
constexpr std::size_t kCrcOffset = 8;
constexpr std::size_t kRankOffset = 12;
constexpr std::size_t kTailBytes = 16;
}  // namespace

std::size_t manifest_record_bytes(std::size_t path_bytes) { return path_bytes + kTailBytes; }

Handle manifest_type(std::size_t path_bytes, bool file_type) {
  Handle str = type_handle(H5Tcopy(H5T_C_S1));
  if (!str.valid() || H5Tset_size(str.get(), path_bytes) < 0 ||
      H5Tset_strpad(str.get(), H5T_STR_NULLTERM) < 0) {
    return {};
  }
  Handle t = type_handle(H5Tcreate(H5T_COMPOUND, manifest_record_bytes(path_bytes)));
  if (!t.valid()) return {};
  const hid_t u64 = file_type ? H5T_STD_U64LE : H5T_NATIVE_UINT64;
  const hid_t u32 = file_type ? H5T_STD_U32LE : H5T_NATIVE_UINT32;
  if (H5Tinsert(t.get(), "path", 0, str.get()) < 0 ||
      H5Tinsert(t.get(), "size", path_bytes + kSizeOffset, u64) < 0 ||
      H5Tinsert(t.get(), "crc32c", path_bytes + kCrcOffset, u32) < 0 ||
      H5Tinsert(t.get(), "rank", path_bytes + kRankOffset, u32) < 0) {
    return {};
  }
  return t;
}

std::vector<std::byte> pack_manifest(const std::vector<ManifestRecord>& records, std::size_t path_bytes) {
  const std::size_t rec = manifest_record_bytes(path_bytes);
  std::vector<std::byte> out(records.size() * rec);
  for (std::size_t i = 0; i < records.size(); ++i) {
    std::byte* p = out.data() + i * rec;
    std::memcpy(p, records[i].path.data(), std::min(records[i].path.size(), path_bytes - 1));
    std::memcpy(p + path_bytes + kSizeOffset, &records[i].size, 8);
    std::memcpy(p + path_bytes + kCrcOffset, &records[i].crc32c, 4);
    std::memcpy(p + path_bytes + kRankOffset, &records[i].rank, 4);
  }
  return out;
}

std::vector<ManifestRecord> unpack_manifest(std::span<const std::byte> packed, std::size_t path_bytes) {
  const std::size_t rec = manifest_record_bytes(path_bytes);
  std::vector<ManifestRecord> out(packed.size() / rec);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::byte* p = packed.data() + i * rec;
    const auto* chars = reinterpret_cast<const char*>(p);
    out[i].path.assign(chars, strnlen(chars, path_bytes));
    std::memcpy(&out[i].size, p + path_bytes + kSizeOffset, 8);
    std::memcpy(&out[i].crc32c, p + path_bytes + kCrcOffset, 4);
    std::memcpy(&out[i].rank, p + path_bytes + kRankOffset, 4);
  }
  return out;
}

std::string iso8601_utc(std::int64_t unix_ns) {
  const std::time_t secs = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

herr_t set_checksummed_format(hid_t fapl) { return H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST); }

herr_t read_bytes(hid_t dataset, std::uint64_t offset, std::span<std::byte> out) {
  if (out.empty()) return 0;
  Handle file_space = space_handle(H5Dget_space(dataset));
  if (!file_space.valid()) return -1;
  for (std::uint64_t done = 0; done < out.size();) {
    const std::uint64_t n = std::min<std::uint64_t>(kIoSlabBytes, out.size() - done);
    const hsize_t start[1] = {offset + done};
    const hsize_t count[1] = {n};
    Handle mem_space = space_handle(H5Screate_simple(1, count, nullptr));
    if (!mem_space.valid() ||
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
        H5Dread(dataset, H5T_NATIVE_UINT8, mem_space.get(), file_space.get(), H5P_DEFAULT,
                out.data() + done) < 0) {
      return -1;
    }
    done += n;
  }
  return 0;
}

herr_t write_bytes(hid_t dataset, std::span<const std::byte> bytes, hid_t dxpl) {
  if (bytes.empty()) return 0;
  Handle file_space = space_handle(H5Dget_space(dataset));
  if (!file_space.valid()) return -1;
  for (std::uint64_t done = 0; done < bytes.size();) {
    const std::uint64_t n = std::min<std::uint64_t>(kIoSlabBytes, bytes.size() - done);
    const hsize_t start[1] = {done};
    const hsize_t count[1] = {n};
    Handle mem_space = space_handle(H5Screate_simple(1, count, nullptr));
    if (!mem_space.valid() ||
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
        H5Dwrite(dataset, H5T_NATIVE_UINT8, mem_space.get(), file_space.get(), dxpl, bytes.data() + done) < 0) {
      return -1;
    }
    done += n;
  }
  return 0;
}

}  // namespace brisk::detail::ckpt
