// libFuzzer target: control messages, as a rank receives them from another rank.
//
//   * the control state's wire (scheduler/control_state.hpp): parse_control_header,
//     ControlShard::handle (three shards of a three-rank job, kept across the
//     messages of one input, so that later messages meet the tables earlier ones
//     filled), ControlClient::handle, and ControlPlane::handle (rank 1's, which
//     routes to its shard or its client and delivers locally);
//   * the runtime's own messages (runtime/wire.hpp): task spec headers, result and
//     reference-count records, every kControl body the Cluster decodes, checkpoint
//     reports, timeline parts, data-plane envelopes and epoch starts.
// Bad bytes must come back as a Status or a SerializationError. A message that
// decodes must encode back to exactly its bytes where the encoding is canonical.
//
// Input: messages, each a u32 length then [u8 target][u8 sender rank][bytes]
// (wire::append_record); an input that is not such a list is one message.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "brisk/core/detail/distributed.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/runtime/control_plane.hpp"
#include "brisk/runtime/wire.hpp"
#include "brisk/scheduler/control_state.hpp"
#include "brisk/scheduler/roles.hpp"

namespace {

namespace wire = brisk::wire;
using Bytes = std::span<const std::byte>;
constexpr int kRanks = 3;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "control_fuzzer: %s\n", what);
    std::abort();
  }
}

bool same(const std::vector<std::byte>& encoded, std::uint8_t type, Bytes body) {
  return encoded.size() == body.size() + 1 && std::to_integer<std::uint8_t>(encoded[0]) == type &&
         std::equal(body.begin(), body.end(), encoded.begin() + 1);
}

// Decodes a kControl payload as the Cluster does (Cluster::handle_control).
void control_body(std::uint8_t type, Bytes body, int from) {
  try {
    switch (type) {
      case wire::kCtlActorMoved:
        check(same(wire::encode_actor_moved(wire::decode_actor_moved(body, kRanks)), type, body), "actor moved");
        break;
      case wire::kCtlEnd: check(same(wire::encode_end(wire::decode_end(body)), type, body), "end"); break;
      case wire::kCtlRankDead:
        check(same(wire::encode_rank_death(wire::decode_rank_death(body, kRanks)), type, body), "rank death");
        break;
      case wire::kCtlCheckpoint:
        check(same(wire::encode_checkpoint_request(wire::decode_checkpoint_request(body)), type, body), "checkpoint");
        break;
      case wire::kCtlLocate: check(same(wire::encode_locate(wire::decode_locate(body)), type, body), "locate"); break;
      case wire::kCtlLocated: {
        const wire::Located m = wire::decode_located(body, kRanks);
        check(m.copy.has_value() != (m.lost != nullptr), "located: both or neither of a copy and an error");
        check(same(wire::encode_located(m.id, m.copy ? &*m.copy : nullptr, m.lost.get()), type, body), "located");
        break;
      }
      case wire::kCtlCheckpointSaved:
        check(same(wire::encode_checkpoint_saved(wire::decode_checkpoint_saved(body, kRanks)), type, body),
              "checkpoint saved");
        break;
      case wire::kCtlTimelinePart: (void)wire::decode_timeline_part(body); break;
      case wire::kCtlCheckpointReport: {
        const wire::CheckpointReport m = wire::decode_checkpoint_report(body, from);
        const auto again = wire::encode_checkpoint_report(m);
        check(std::equal(again.begin(), again.end(), body.begin(), body.end()), "checkpoint report");
        break;
      }
      default: break;
    }
  } catch (const brisk::SerializationError&) {
  }
}

// A result record, read as Cluster::handle_result reads it (the inline value's type
// is the task's own: not decoded here).
void result_record(Bytes record) {
  try {
    brisk::Reader r(record);
    brisk::TaskId task;
    std::uint8_t form = 0;
    brisk::ObjectId object;
    r(task.hi, task.lo, form, object.hi, object.lo);
    if (form == brisk::detail::kObjRemote) (void)wire::read_remote_object(r, kRanks);
    if (form == brisk::detail::kObjError) (void)brisk::detail::read_error_info(r);
  } catch (const brisk::SerializationError&) {
  }
}

struct Receiver {
  std::vector<std::unique_ptr<brisk::ControlShard>> shards;
  brisk::ControlClient client{brisk::Rank{1}, {brisk::Rank{0}, brisk::Rank{1}, brisk::Rank{2}}};
  std::unique_ptr<brisk::ControlPlane> plane;

  Receiver() {
    for (int i = 0; i < kRanks; ++i) shards.push_back(std::make_unique<brisk::ControlShard>(i, kRanks));
    auto roles = brisk::assign_roles(kRanks, kRanks, 1);
    check(roles.ok(), "roles");
    plane = std::make_unique<brisk::ControlPlane>(brisk::Rank{1}, *roles);
  }

  void message(std::uint8_t target, int from, Bytes bytes) {
    const brisk::Rank sender{from};
    switch (target % 8) {
      case 0: {
        auto header = brisk::parse_control_header(bytes);
        if (!header.ok()) break;
        if (header->shard < kRanks) (void)shards[static_cast<std::size_t>(header->shard)]->handle(sender, bytes);
        break;
      }
      case 1: (void)client.handle(sender, bytes); break;
      case 2:
        (void)plane->handle(sender, bytes);
        if (from == 0) (void)plane->flush(std::chrono::steady_clock::now(), true);
        break;
      case 3:
        try {
          brisk::Reader r(bytes);
          (void)wire::read_task_spec_header(r, kRanks);
        } catch (const brisk::SerializationError&) {
        }
        break;
      case 4: (void)wire::for_each_record(bytes, result_record); break;
      case 5:
        (void)wire::for_each_record(bytes, [](Bytes record) {
          try {
            (void)wire::decode_refcount(record);
          } catch (const brisk::SerializationError&) {
          }
        });
        break;
      case 6:
        if (!bytes.empty()) control_body(std::to_integer<std::uint8_t>(bytes[0]), bytes.subspan(1), from);
        break;
      case 7:
        if (auto h = wire::decode_data_header(bytes); h && h->to == -1 && bytes.size() > wire::kDataHeaderBytes) {
          try {
            (void)wire::decode_epoch_hosts(bytes.subspan(wire::kDataHeaderBytes + 1), kRanks, 1);
          } catch (const brisk::SerializationError&) {
          }
        }
        break;
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Bytes input(reinterpret_cast<const std::byte*>(data), size);
  std::vector<Bytes> messages;
  if (!wire::for_each_record(input, [&](Bytes m) { messages.push_back(m); }) || messages.empty()) messages = {input};
  Receiver receiver;
  for (Bytes m : messages) {
    if (m.size() < 2) continue;
    receiver.message(std::to_integer<std::uint8_t>(m[0]), std::to_integer<std::uint8_t>(m[1]) % (kRanks + 1),
                     m.subspan(2));
  }
  return 0;
}
