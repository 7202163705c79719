// libFuzzer target: the frame decoder, the batch splitter and the deserializer, on the
// payload types the runtime sends between ranks. Whatever the bytes, each either
// decodes or fails with its module's error (a Status, a SerializationError), and
// never reads past its input.
//
// Input: one selector byte, then the bytes. The whole input is decoded as a frame;
// the bytes are sealed into a frame (so that the checksum does not keep the fuzzer
// from what follows) that must decode to the same payload; then they are decoded as
// the payload type the selector names, whole and as a batch of records. A value that
// decodes must encode to bytes that decode to the same value (byte for byte).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "brisk/checkpoint/writer.hpp"
#include "brisk/core/detail/distributed.hpp"
#include "brisk/core/frame.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/runtime/wire.hpp"
#include "brisk/scheduler/control_state.hpp"
#include "brisk/scheduler/data_protocol.hpp"

namespace {

using Bytes = std::span<const std::byte>;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "frame_fuzzer: %s\n", what);
    std::abort();
  }
}

// Decodes `bytes` as a T; if it decodes, its encoding must decode and encode again to
// the same bytes (`stable`: the encoding is canonical for this type).
template <class T>
void decode_as(Bytes bytes, bool stable = true) {
  T value;
  try {
    value = brisk::from_bytes<T>(bytes);
  } catch (const brisk::SerializationError&) {
    return;
  }
  const std::vector<std::byte> once = brisk::to_bytes(value);
  check(brisk::byte_size(value) == once.size(), "byte_size disagrees with to_bytes");
  T again;
  try {
    again = brisk::from_bytes<T>(once);
  } catch (const brisk::SerializationError&) {
    check(false, "a decoded value's encoding does not decode");
  }
  if (stable) check(brisk::to_bytes(again) == once, "a value's encoding changed after a round trip");
}

// The ErrorInfo carried by error results and located answers.
void decode_error_info(Bytes bytes) {
  try {
    brisk::Reader r(bytes);
    auto e = brisk::detail::read_error_info(r);
    brisk::Writer w;
    brisk::detail::write_error_info(w, *e);
    brisk::Reader again(w.bytes());
    auto f = brisk::detail::read_error_info(again);
    check(f->message == e->message && f->function == e->function && f->kind == e->kind && f->rank == e->rank &&
              f->attempts == e->attempts,
          "an ErrorInfo changed after a round trip");
  } catch (const brisk::SerializationError&) {
  }
}

using Legacy = std::tuple<std::uint64_t, std::string, std::vector<double>, std::map<std::string, std::vector<int>>,
                          std::optional<std::variant<int, std::string>>>;
using StdMix = std::tuple<std::vector<bool>, std::unordered_map<std::string, std::int64_t>, std::set<std::string>,
                          std::array<std::uint16_t, 3>, std::pair<float, std::string>,
                          std::optional<std::vector<std::byte>>>;
// The writer's dataset list (checkpoint/src/writer.cpp, WireEntry).
using DatasetList = std::vector<std::tuple<std::uint8_t, std::string, std::uint64_t, std::uint32_t, std::string, std::int32_t>>;
using ObjectList = std::vector<std::pair<std::string, std::vector<std::byte>>>;

void decode_payload(std::uint8_t selector, Bytes bytes) {
  switch (selector % 12) {
    case 0: decode_as<Legacy>(bytes); break;
    case 1: decode_as<std::vector<brisk::NodeStatus>>(bytes); break;
    case 2: decode_as<brisk::LineageRecord>(bytes); break;
    case 3: decode_as<std::vector<brisk::DataCommand>>(bytes); break;
    case 4: decode_as<std::vector<brisk::CheckpointTemplate>>(bytes); break;
    case 5: decode_as<std::vector<brisk::CheckpointDataSet>>(bytes); break;
    case 6: decode_as<brisk::detail::RemoteCopy>(bytes); break;
    case 7: decode_error_info(bytes); break;
    case 8: decode_as<StdMix>(bytes, false); break;  // unordered_map: any order
    case 9: decode_as<std::vector<brisk::CheckpointShardEntry>>(bytes); break;
    case 10: decode_as<DatasetList>(bytes); break;
    case 11: decode_as<ObjectList>(bytes); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Bytes input(reinterpret_cast<const std::byte*>(data), size);
  // As it arrived: a frame that decodes is exactly its own encoding.
  if (auto frame = brisk::decode_frame(input); frame.ok()) {
    check(frame->payload.data() == input.data() + brisk::kFrameHeaderBytes &&
              frame->payload.size() == size - brisk::kFrameHeaderBytes,
          "a frame's payload is not the rest of its bytes");
    const auto again = brisk::encode_frame(frame->kind, frame->payload);
    check(std::equal(again.begin(), again.end(), input.begin(), input.end()), "a decoded frame re-encodes differently");
  }
  if (size == 0) return 0;
  const std::uint8_t selector = data[0];
  const Bytes bytes = input.subspan(1);
  const auto kind = static_cast<brisk::FrameKind>(1 + selector % brisk::kMaxFrameKind);
  const std::vector<std::byte> sealed = brisk::encode_frame(kind, bytes);
  auto frame = brisk::decode_frame(sealed);
  check(frame.ok() && frame->kind == kind && std::equal(frame->payload.begin(), frame->payload.end(), bytes.begin(), bytes.end()),
        "a sealed frame does not decode to its payload");
  // One flipped bit anywhere is caught (by a check or the CRC).
  std::vector<std::byte> flipped = sealed;
  const std::size_t at = (static_cast<std::size_t>(selector) * 7919u) % flipped.size();
  flipped[at] ^= std::byte{1};
  check(!brisk::decode_frame(flipped).ok(), "a frame with a flipped bit decodes");

  decode_payload(selector, bytes);
  // The same bytes as a batch (kTask, kResult, kRefCount frames).
  (void)brisk::wire::for_each_record(bytes, [&](Bytes record) { decode_payload(selector, record); });
  return 0;
}
