#include "brisk/core/frame.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace {

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

TEST(FrameTest, RoundTrip) {
  auto payload = bytes_of("hello, rank 1");
  auto frame = brisk::encode_frame(brisk::FrameKind::kPing, payload);
  ASSERT_EQ(frame.size(), brisk::kFrameHeaderBytes + payload.size());
  auto view = brisk::decode_frame(frame);
  ASSERT_TRUE(view.ok()) << view.status().message();
  EXPECT_EQ(view->kind, brisk::FrameKind::kPing);
  EXPECT_TRUE(std::equal(view->payload.begin(), view->payload.end(), payload.begin(), payload.end()));
  auto empty = brisk::encode_frame(brisk::FrameKind::kShutdown, {});
  EXPECT_TRUE(brisk::decode_frame(empty).ok());
}

// A payload written behind room for the header, sealed in place, is the same frame
// that encode_frame copies together.
TEST(FrameTest, ASealedFrameEqualsTheEncodedOne) {
  const auto head = bytes_of("head");
  const auto body = bytes_of("and a body of some length");
  std::vector<std::byte> frame(brisk::kFrameHeaderBytes, std::byte{0x5a});  // whatever was there
  frame.insert(frame.end(), head.begin(), head.end());
  frame.insert(frame.end(), body.begin(), body.end());
  const std::byte* storage = frame.data();
  brisk::seal_frame(brisk::FrameKind::kData, frame);
  EXPECT_EQ(frame.data(), storage);
  EXPECT_EQ(frame, brisk::encode_frame(brisk::FrameKind::kData, head, body));
  auto view = brisk::decode_frame(frame);
  ASSERT_TRUE(view.ok()) << view.status().message();
  EXPECT_EQ(view->kind, brisk::FrameKind::kData);
  EXPECT_EQ(view->payload.size(), head.size() + body.size());
  std::vector<std::byte> bare(brisk::kFrameHeaderBytes);
  brisk::seal_frame(brisk::FrameKind::kPing, bare);
  EXPECT_TRUE(brisk::decode_frame(bare).ok());
}

TEST(FrameTest, Crc32cKnownValue) {
  // The standard check value of CRC-32C.
  EXPECT_EQ(brisk::crc32c(bytes_of("123456789")), 0xE3069283u);
  // Any split gives the same value (long runs take the 8-byte path, short ones the table).
  std::vector<std::byte> big(1000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 7 + 3);
  const std::uint32_t whole = brisk::crc32c(big);
  for (std::size_t cut : {0u, 1u, 7u, 8u, 9u, 500u, 999u}) {
    std::uint32_t c = brisk::crc32c(std::span<const std::byte>(big).first(cut));
    EXPECT_EQ(brisk::crc32c(std::span<const std::byte>(big).subspan(cut), c), whole) << cut;
  }
  std::uint32_t bytewise = 0;
  for (std::byte b : big) bytewise = brisk::crc32c(std::span<const std::byte>(&b, 1), bytewise);
  EXPECT_EQ(bytewise, whole);
}

TEST(FrameTest, Crc32cOfLongRunsEqualsBytewise) {
  // Long runs are checksummed as interleaved streams and combined: every length and
  // alignment around the stream sizes gives what one byte at a time gives.
  std::vector<std::byte> big(40000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  const auto bytewise = [](std::span<const std::byte> s, std::uint32_t c) {
    for (std::byte b : s) c = brisk::crc32c(std::span<const std::byte>(&b, 1), c);
    return c;
  };
  for (std::size_t offset : {0u, 1u, 5u}) {
    for (std::size_t n : {767u, 768u, 769u, 6143u, 6144u, 6151u, 7000u, 12288u, 39000u}) {
      const auto s = std::span<const std::byte>(big).subspan(offset, n);
      EXPECT_EQ(brisk::crc32c(s, 0x1234u), bytewise(s, 0x1234u)) << offset << " " << n;
    }
  }
}

std::string error_of(std::vector<std::byte> frame) {
  auto v = brisk::decode_frame(frame);
  EXPECT_FALSE(v.ok());
  return v.ok() ? "" : v.status().message();
}

TEST(FrameTest, RejectsMalformedFramesWithAReason) {
  auto good = brisk::encode_frame(brisk::FrameKind::kTask, bytes_of("payload"));
  EXPECT_NE(error_of({good.begin(), good.begin() + 10}).find("truncated frame"), std::string::npos);
  auto bad_magic = good;
  bad_magic[0] = std::byte{0};
  EXPECT_NE(error_of(bad_magic).find("magic"), std::string::npos);
  auto bad_version = good;
  bad_version[4] = std::byte{9};
  EXPECT_NE(error_of(bad_version).find("version 9"), std::string::npos);
  auto bad_kind = good;
  bad_kind[5] = std::byte{200};
  EXPECT_NE(error_of(bad_kind).find("unknown frame kind 200"), std::string::npos);
  auto short_payload = good;
  short_payload.pop_back();
  EXPECT_NE(error_of(short_payload).find("payload bytes"), std::string::npos);
  auto corrupt = good;
  corrupt.back() ^= std::byte{1};
  EXPECT_NE(error_of(corrupt).find("checksum"), std::string::npos);
  auto huge = good;
  huge[11] = std::byte{0x7f};
  EXPECT_NE(error_of(huge).find("exceeds the limit"), std::string::npos);
}

TEST(FrameTest, RandomMutationsNeverCrash) {
  std::mt19937 rng(42);
  auto good = brisk::encode_frame(brisk::FrameKind::kResult, bytes_of("some result bytes"));
  int accepted_changed = 0;
  for (int i = 0; i < 20000; ++i) {
    auto f = good;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) f[rng() % f.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
    if (rng() % 3 == 0) f.resize(rng() % (f.size() + 1));
    if (brisk::decode_frame(f).ok() && f != good) ++accepted_changed;
  }
  // CRC-32C detects every error of up to four bit flips in a frame this short.
  EXPECT_EQ(accepted_changed, 0);
}

}  // namespace
