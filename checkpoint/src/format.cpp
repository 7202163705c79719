#include "brisk/checkpoint/format.hpp"

#include "hdf5_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <system_error>

namespace brisk {

const char* checkpoint_section_name(CheckpointSection section) noexcept {
  switch (section) {
    case CheckpointSection::kObjects: return "objects";
    case CheckpointSection::kDriver: return "driver";
    case CheckpointSection::kMeta: return "meta";
  }
  return "?";
}

std::string checkpoint_file_name(std::uint64_t sequence) { return fmt::format("ckpt-{:06d}.h5", sequence); }

std::string checkpoint_shard_name(std::uint64_t sequence, std::string_view tag, int rank) {
  return fmt::format("ckpt-{:06d}.{}.r{}.h5", sequence, tag, rank);
}

std::string checkpoint_held_name(int owner, std::uint64_t hi, std::uint64_t lo) {
  return fmt::format("{}{}/{:016x}{:016x}", kCheckpointHeldPrefix, owner, hi, lo);
}

bool parse_checkpoint_held_name(std::string_view name, int* owner, std::uint64_t* hi, std::uint64_t* lo) {
  if (name.substr(0, kCheckpointHeldPrefix.size()) != kCheckpointHeldPrefix) return false;
  name.remove_prefix(kCheckpointHeldPrefix.size());
  const std::size_t slash = name.find('/');
  if (slash == std::string_view::npos || slash == 0 || name.size() - slash - 1 != 32) return false;
  const std::string_view rank = name.substr(0, slash), id = name.substr(slash + 1);
  // One spelling per name, checkpoint_held_name's: no leading zeros.
  if (rank.size() > 1 && rank[0] == '0') return false;
  auto number = [](std::string_view digits, int base, auto* out) {
    const bool valid = std::all_of(digits.begin(), digits.end(), [base](char c) {
      return (c >= '0' && c <= '9') || (base == 16 && c >= 'a' && c <= 'f');
    });
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *out, base);
    return valid && ec == std::errc() && end == digits.data() + digits.size();
  };
  return number(rank, 10, owner) && number(id.substr(0, 16), 16, hi) && number(id.substr(16), 16, lo);
}

namespace detail::ckpt {
bool parse_checkpoint_name(std::string_view name, bool tmp, std::uint64_t* sequence) {
  constexpr std::string_view kPrefix = "ckpt-";
  const std::string_view kSuffix = tmp ? ".h5.tmp" : ".h5";
  if (tmp) {
    // A temporary name may carry a tag after the suffix: ckpt-NNNNNN.h5.tmp-TAG.
    const std::size_t at = name.find(kSuffix);
    if (at != std::string_view::npos && at + kSuffix.size() < name.size() && name[at + kSuffix.size()] == '-') {
      name = name.substr(0, at + kSuffix.size());
    }
  }
  if (name.size() < kPrefix.size() + 6 + kSuffix.size()) return false;
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  if (name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) return false;
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size() - kSuffix.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return false;
  auto [end, ec] = std::from_chars(first, last, *sequence);
  return ec == std::errc() && end == last;
}

bool parse_shard_name(std::string_view name, std::uint64_t* sequence) {
  constexpr std::string_view kPrefix = "ckpt-";
  constexpr std::string_view kSuffix = ".h5";
  if (name.size() < kPrefix.size() + kSuffix.size() || name.substr(0, kPrefix.size()) != kPrefix ||
      name.substr(name.size() - kSuffix.size()) != kSuffix) {
    return false;
  }
  // <digits>.<tag>.r<digits>
  const std::string_view middle = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  const std::size_t dot = middle.find('.');
  const std::size_t last = middle.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || last == dot || last + 2 >= middle.size() || middle[last + 1] != 'r') {
    return false;
  }
  auto digits = [](std::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const std::string_view tag = middle.substr(dot + 1, last - dot - 1);
  if (!digits(middle.substr(0, dot)) || !digits(middle.substr(last + 2)) || tag.empty() ||
      !std::all_of(tag.begin(), tag.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; })) {
    return false;
  }
  auto [end, ec] = std::from_chars(middle.data(), middle.data() + dot, *sequence);
  return ec == std::errc() && end == middle.data() + dot;
}
}  // namespace detail::ckpt

StatusOr<std::vector<CheckpointFile>> list_checkpoints(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (st.type() == fs::file_type::not_found) {
    return not_found(fmt::format("checkpoint directory {} does not exist", dir.string()));
  }
  if (ec) return unavailable(fmt::format("cannot stat checkpoint directory {}: {}", dir.string(), ec.message()));
  if (st.type() != fs::file_type::directory) {
    return invalid_argument(fmt::format("{} is not a directory (expected a checkpoint directory)", dir.string()));
  }
  std::vector<CheckpointFile> out;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::uint64_t seq = 0;
    if (detail::ckpt::parse_checkpoint_name(it->path().filename().string(), false, &seq)) out.push_back({seq, it->path()});
  }
  if (ec) return unavailable(fmt::format("cannot list checkpoint directory {}: {}", dir.string(), ec.message()));
  // Two names for one sequence (ckpt-000007.h5, ckpt-0000007.h5) cannot come from
  // the writer; keep the order stable anyway.
  std::sort(out.begin(), out.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.sequence != b.sequence ? a.sequence < b.sequence : a.path < b.path;
  });
  return out;
}

}  // namespace brisk
