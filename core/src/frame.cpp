#include "brisk/core/frame.hpp"

#include <fmt/format.h>

#include <array>
#include <cstring>

namespace brisk {
namespace {

constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();

void put_u32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
std::uint32_t get_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t seed) noexcept;

namespace {
// Covers the first 12 header bytes and the payload: everything but the checksum.
std::uint32_t frame_checksum(std::span<const std::byte> frame) {
  std::uint32_t c = crc32c(frame.first(12));
  return crc32c(frame.subspan(kFrameHeaderBytes), c);
}
}  // namespace

namespace {
std::uint32_t crc32c_table(const std::byte* p, std::size_t n, std::uint32_t c) noexcept {
  for (std::size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ std::to_integer<std::uint8_t>(p[i])) & 0xff] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
// The SSE4.2 crc32 instruction computes the same CRC-32C, 8 bytes at a time (about
// 20x the table): large inline objects are checksummed at memory speed.
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const std::byte* p, std::size_t n,
                                                              std::uint32_t c) noexcept {
  std::uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = __builtin_ia32_crc32di(c64, v);
  }
  return crc32c_table(p, n, static_cast<std::uint32_t>(c64));
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif
}  // namespace

std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t seed) noexcept {
  std::uint32_t c = ~seed;
#if defined(__x86_64__)
  if (kHaveSse42) return ~crc32c_sse42(bytes.data(), bytes.size(), c);
#endif
  return ~crc32c_table(bytes.data(), bytes.size(), c);
}

const char* frame_kind_name(FrameKind kind) noexcept {
  switch (kind) {
    case FrameKind::kPing: return "ping";
    case FrameKind::kTask: return "task";
    case FrameKind::kResult: return "result";
    case FrameKind::kObjectRequest: return "object-request";
    case FrameKind::kObjectReply: return "object-reply";
    case FrameKind::kControl: return "control";
    case FrameKind::kRefCount: return "refcount";
    case FrameKind::kShutdown: return "shutdown";
    case FrameKind::kData: return "data";
  }
  return "unknown";
}

std::vector<std::byte> encode_frame(FrameKind kind, std::span<const std::byte> payload) {
  return encode_frame(kind, {}, payload);
}

std::vector<std::byte> encode_frame(FrameKind kind, std::span<const std::byte> head, std::span<const std::byte> body) {
  const std::size_t n = head.size() + body.size();
  BRISK_CHECK(n <= kMaxFramePayload) << "frame payload of " << n << " bytes";
  std::vector<std::byte> out(kFrameHeaderBytes + n);
  put_u32(out.data(), kFrameMagic);
  out[4] = static_cast<std::byte>(kFrameVersion);
  out[5] = static_cast<std::byte>(kind);
  out[6] = out[7] = std::byte{0};
  put_u32(out.data() + 8, static_cast<std::uint32_t>(n));
  if (!head.empty()) std::memcpy(out.data() + kFrameHeaderBytes, head.data(), head.size());
  if (!body.empty()) std::memcpy(out.data() + kFrameHeaderBytes + head.size(), body.data(), body.size());
  put_u32(out.data() + 12, frame_checksum(out));
  return out;
}

StatusOr<FrameView> decode_frame(std::span<const std::byte> bytes) {
  if (bytes.size() < kFrameHeaderBytes)
    return invalid_argument(fmt::format("truncated frame: {} bytes, the header alone is {}", bytes.size(), kFrameHeaderBytes));
  std::uint32_t magic = get_u32(bytes.data());
  if (magic != kFrameMagic) return invalid_argument(fmt::format("not a brisk frame: magic {:#010x}", magic));
  auto version = std::to_integer<std::uint8_t>(bytes[4]);
  if (version != kFrameVersion)
    return invalid_argument(fmt::format("frame version {} (this build speaks {})", version, kFrameVersion));
  auto kind = std::to_integer<std::uint8_t>(bytes[5]);
  if (kind == 0 || kind > kMaxFrameKind) return invalid_argument(fmt::format("unknown frame kind {}", kind));
  if (bytes[6] != std::byte{0} || bytes[7] != std::byte{0}) return invalid_argument("frame reserved bytes are not zero");
  std::uint32_t length = get_u32(bytes.data() + 8);
  if (length > kMaxFramePayload) return invalid_argument(fmt::format("frame payload length {} exceeds the limit {}", length, kMaxFramePayload));
  if (length != bytes.size() - kFrameHeaderBytes)
    return invalid_argument(fmt::format("frame says {} payload bytes but {} arrived", length, bytes.size() - kFrameHeaderBytes));
  auto payload = bytes.subspan(kFrameHeaderBytes);
  std::uint32_t want = get_u32(bytes.data() + 12);
  std::uint32_t got = frame_checksum(bytes);
  if (want != got) return invalid_argument(fmt::format("frame checksum mismatch ({:#010x} != {:#010x})", got, want));
  return FrameView{static_cast<FrameKind>(kind), payload};
}

}  // namespace brisk
