// brisk/core/frame.hpp — the envelope of every message between ranks.
//
//   offset 0  u32  magic 0x4B535242 ("BRSK" little-endian)
//          4  u8   version (kFrameVersion)
//          5  u8   kind (FrameKind)
//          6  u16  reserved, zero
//          8  u32  payload length in bytes
//         12  u32  CRC-32C of bytes 0-11 and the payload
//         16       payload (the kind's serialized body)
//
// decode_frame never reads past its input and never trusts a length it has not
// checked: a malformed or truncated frame is a kInvalidArgument Status naming what
// was wrong, and the caller drops it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "brisk/core/status.hpp"

namespace brisk {

inline constexpr std::uint32_t kFrameMagic = 0x4B535242u;
inline constexpr std::uint8_t kFrameVersion = 1;
inline constexpr std::size_t kFrameHeaderBytes = 16;
// Frames above this are refused (objects this large travel by one-sided get).
inline constexpr std::uint32_t kMaxFramePayload = 1u << 30;

enum class FrameKind : std::uint8_t {
  kPing = 1,         // transport tests and liveness
  kTask = 2,         // a task spec (function id, arguments or argument ids)
  kResult = 3,       // a task's result (inline value, or where to get it)
  kObjectRequest = 4,
  kObjectReply = 5,
  kControl = 6,      // control-state shard traffic
  kRefCount = 7,     // distributed reference counting
  kShutdown = 8,
  kData = 9,         // data objects and templates (scheduler/data_protocol.hpp)
};
inline constexpr std::uint8_t kMaxFrameKind = 9;

const char* frame_kind_name(FrameKind kind) noexcept;

struct FrameView {
  FrameKind kind;
  std::span<const std::byte> payload;  // points into the decoded buffer
};

// Header + payload, ready to send.
std::vector<std::byte> encode_frame(FrameKind kind, std::span<const std::byte> payload);
// The same frame with `head` then `body` as its payload (one copy of each).
std::vector<std::byte> encode_frame(FrameKind kind, std::span<const std::byte> head, std::span<const std::byte> body);
// Makes `frame` a frame in place: its first kFrameHeaderBytes are room for the
// header, which this fills (the checksum covers the rest, the payload). For
// senders that write their payload behind that room themselves, with no copy.
void seal_frame(FrameKind kind, std::vector<std::byte>& frame);

// Checks and splits a received buffer (exactly one frame).
StatusOr<FrameView> decode_frame(std::span<const std::byte> bytes);

// CRC-32C (Castagnoli), software; used for frames and checkpoints.
std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t seed = 0) noexcept;

}  // namespace brisk
