// The runtime's messages (runtime/wire.hpp): what each encoder writes its decoder
// reads back, and bad bytes (truncated, trailing, out-of-range ranks, bad flags) are
// a SerializationError, never a value.
#include "brisk/runtime/wire.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "brisk/checkpoint/format.hpp"

namespace {

using brisk::SerializationError;
using Bytes = std::vector<std::byte>;
namespace wire = brisk::wire;

// The body of an encoded control message (without its type byte), checked.
Bytes body_of(const Bytes& message, std::uint8_t type) {
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(std::to_integer<std::uint8_t>(message.at(0)), type);
  return Bytes(message.begin() + 1, message.end());
}

// Every proper prefix of `bytes`, and `bytes` with one byte more, fail to decode.
void expect_only_whole(const Bytes& bytes, const std::function<void(const Bytes&)>& decode) {
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(decode(Bytes(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n))), SerializationError)
        << "prefix of " << n << " of " << bytes.size() << " bytes";
  }
  Bytes longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_THROW(decode(longer), SerializationError) << "one trailing byte";
}

brisk::detail::RemoteCopy copy_held_by(int rank) {
  brisk::detail::RemoteCopy c;
  c.region.owner = brisk::Rank{rank};
  c.region.address = 0x1000;
  c.region.length = 1 << 20;
  c.region.key = {std::byte{1}, std::byte{2}};
  c.offset = 64;
  c.length = 4096;
  c.raw = true;
  return c;
}

TEST(WireTest, RecordsSplitAndTruncatedBatchesAreRefused) {
  Bytes batch;
  wire::append_record(batch, Bytes{std::byte{1}, std::byte{2}});
  wire::append_record(batch, Bytes{});
  wire::append_record(batch, Bytes(300, std::byte{7}));
  std::vector<std::size_t> sizes;
  EXPECT_TRUE(wire::for_each_record(batch, [&](std::span<const std::byte> r) { sizes.push_back(r.size()); }));
  EXPECT_EQ(sizes, (std::vector<std::size_t>{2, 0, 300}));
  for (std::size_t cut : {batch.size() - 1, std::size_t{3}, std::size_t{7}}) {
    int seen = 0;
    EXPECT_FALSE(wire::for_each_record(std::span(batch).first(cut), [&](std::span<const std::byte>) { ++seen; }));
  }
}

TEST(WireTest, TaskSpecHeaderRoundTrips) {
  brisk::TaskOptions options;
  options.name = "step";
  options.resources = {{"CPU", 1.0}, {"GPU", 0.5}};
  options.max_retries = 3;
  options.actor_creation = true;
  const wire::ActorCallHeader call{brisk::TaskId{{5, 6}}, 7, 8, 9};
  brisk::Writer w;
  wire::write_task_spec_header(w, wire::kRoutePlace, brisk::TaskId{{1, 2}}, 42, 1, &options, &call, {{1, 4096}});
  w(std::uint8_t{0xAB});  // an argument follows
  brisk::Reader r(w.bytes());
  const wire::TaskSpecHeader h = wire::read_task_spec_header(r, 2);
  EXPECT_EQ(h.route, wire::kRoutePlace);
  EXPECT_EQ(h.id, (brisk::TaskId{{1, 2}}));
  EXPECT_EQ(h.function, 42u);
  EXPECT_EQ(h.owner, 1);
  ASSERT_TRUE(h.options);
  EXPECT_EQ(h.options->name, "step");
  EXPECT_EQ(h.options->resources, options.resources);
  EXPECT_EQ(h.options->max_retries, 3);
  EXPECT_TRUE(h.options->actor_creation);
  ASSERT_TRUE(h.call);
  EXPECT_EQ(h.call->actor, (brisk::TaskId{{5, 6}}));
  EXPECT_EQ(h.call->caller, 7u);
  EXPECT_EQ(h.call->seq, 8u);
  EXPECT_EQ(h.call->incarnation, 9u);
  EXPECT_EQ(h.hints, (std::vector<std::pair<int, std::uint64_t>>{{1, 4096}}));
  EXPECT_EQ(r.remaining(), 1u);

  brisk::Writer plain;
  wire::write_task_spec_header(plain, wire::kRouteRun, brisk::TaskId{{1, 2}}, 42, 0, nullptr, nullptr, {});
  brisk::Reader pr(plain.bytes());
  const wire::TaskSpecHeader p = wire::read_task_spec_header(pr, 1);
  EXPECT_FALSE(p.options);
  EXPECT_FALSE(p.call);
  EXPECT_EQ(pr.remaining(), 0u);
}

TEST(WireTest, TaskSpecHeaderChecksOwnerRouteAndFlags) {
  auto header = [](std::uint8_t route, int owner, std::uint8_t has_options) {
    brisk::Writer w;
    w(route, std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3}, owner, has_options, std::uint8_t{0},
      std::vector<std::pair<int, std::uint64_t>>{});
    return w.take();
  };
  auto read = [](const Bytes& b, int ranks) {
    brisk::Reader r(b);
    return wire::read_task_spec_header(r, ranks);
  };
  EXPECT_NO_THROW(read(header(wire::kRouteRun, 1, 0), 2));
  EXPECT_THROW(read(header(wire::kRouteRun, 2, 0), 2), SerializationError);
  EXPECT_THROW(read(header(wire::kRouteRun, -1, 0), 2), SerializationError);
  EXPECT_THROW(read(header(2, 0, 0), 2), SerializationError);
  EXPECT_THROW(read(header(wire::kRouteRun, 0, 2), 2), SerializationError);
  const Bytes good = header(wire::kRouteRun, 1, 0);
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(read(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)), 2), SerializationError);
  }
}

TEST(WireTest, RemoteObjectNamesAHolderOfTheJob) {
  for (int holder : {0, 1, 2, -1}) {
    brisk::Writer w;
    w(0, 1, copy_held_by(holder));
    brisk::Reader r(w.bytes());
    if (holder >= 0 && holder < 2) {
      EXPECT_EQ(wire::read_remote_object(r, 2).copy.tag(), copy_held_by(holder).tag());
    } else {
      EXPECT_THROW(wire::read_remote_object(r, 2), SerializationError) << holder;
    }
  }
}

TEST(WireTest, RefCountRecords) {
  const brisk::ObjectId id{{3, 4}};
  for (const wire::RefCountRecord& m : {wire::RefCountRecord{wire::kRefDrop, id, 5, wire::kAllCopies},
                                        wire::RefCountRecord{wire::kRefFree, id, 0, wire::kAllCopies},
                                        wire::RefCountRecord{wire::kRefFree, id, 0, 0x1040}}) {
    const Bytes b = wire::encode_refcount(m);
    const wire::RefCountRecord back = wire::decode_refcount(b);
    EXPECT_EQ(back.op, m.op);
    EXPECT_EQ(back.id, m.id);
    EXPECT_EQ(back.count, m.count);
    EXPECT_EQ(back.tag, m.tag);
  }
  expect_only_whole(wire::encode_refcount({wire::kRefDrop, id, 5, wire::kAllCopies}),
                    [](const Bytes& b) { wire::decode_refcount(b); });
  Bytes bad_op = wire::encode_refcount({wire::kRefDrop, id, 5, wire::kAllCopies});
  bad_op[0] = std::byte{2};
  EXPECT_THROW(wire::decode_refcount(bad_op), SerializationError);
}

TEST(WireTest, ControlMessagesRoundTrip) {
  const auto moved = wire::decode_actor_moved(
      body_of(wire::encode_actor_moved({brisk::TaskId{{1, 2}}, 1, 3}), wire::kCtlActorMoved), 2);
  EXPECT_EQ(moved.actor, (brisk::TaskId{{1, 2}}));
  EXPECT_EQ(moved.rank, 1);
  EXPECT_EQ(moved.incarnation, 3u);

  const auto end = wire::decode_end(body_of(wire::encode_end({3, true}), wire::kCtlEnd));
  EXPECT_EQ(end.code, 3);
  EXPECT_TRUE(end.without_mpi);

  const auto dead = wire::decode_rank_death(body_of(wire::encode_rank_death({1, "silent"}), wire::kCtlRankDead), 2);
  EXPECT_EQ(dead.rank, 1);
  EXPECT_EQ(dead.why, "silent");

  const auto ckpt =
      wire::decode_checkpoint_request(body_of(wire::encode_checkpoint_request({7, "a1b2"}), wire::kCtlCheckpoint));
  EXPECT_EQ(ckpt.sequence, 7u);
  EXPECT_EQ(ckpt.tag, "a1b2");

  EXPECT_EQ(wire::decode_locate(body_of(wire::encode_locate(brisk::ObjectId{{8, 9}}), wire::kCtlLocate)),
            (brisk::ObjectId{{8, 9}}));

  const auto copy = copy_held_by(1);
  const auto found =
      wire::decode_located(body_of(wire::encode_located(brisk::ObjectId{{8, 9}}, &copy, nullptr), wire::kCtlLocated), 2);
  EXPECT_EQ(found.id, (brisk::ObjectId{{8, 9}}));
  ASSERT_TRUE(found.copy);
  EXPECT_EQ(found.copy->tag(), copy.tag());
  EXPECT_FALSE(found.lost);
  brisk::ErrorInfo gone;
  gone.kind = brisk::ErrorKind::kObjectLost;
  gone.message = "gone";
  const auto lost =
      wire::decode_located(body_of(wire::encode_located(brisk::ObjectId{{8, 9}}, nullptr, &gone), wire::kCtlLocated), 2);
  EXPECT_FALSE(lost.copy);
  ASSERT_TRUE(lost.lost);
  EXPECT_EQ(lost.lost->message, "gone");
  EXPECT_EQ(lost.lost->kind, brisk::ErrorKind::kObjectLost);

  const wire::CheckpointSaved saved{4, "/ckpt/ckpt-000004.h5", {{brisk::ObjectId{{1, 1}}, 1}, {brisk::ObjectId{{2, 2}}, 0}}};
  const auto back =
      wire::decode_checkpoint_saved(body_of(wire::encode_checkpoint_saved(saved), wire::kCtlCheckpointSaved), 2);
  EXPECT_EQ(back.sequence, 4u);
  EXPECT_EQ(back.file, saved.file);
  EXPECT_EQ(back.objects, saved.objects);
}

TEST(WireTest, ControlMessagesRefuseBadBytes) {
  expect_only_whole(body_of(wire::encode_actor_moved({brisk::TaskId{{1, 2}}, 1, 3}), wire::kCtlActorMoved),
                    [](const Bytes& b) { wire::decode_actor_moved(b, 2); });
  EXPECT_THROW(wire::decode_actor_moved(body_of(wire::encode_actor_moved({brisk::TaskId{{1, 2}}, 2, 3}), wire::kCtlActorMoved), 2),
               SerializationError);
  expect_only_whole(body_of(wire::encode_end({3, false}), wire::kCtlEnd), [](const Bytes& b) { wire::decode_end(b); });
  Bytes end = body_of(wire::encode_end({3, false}), wire::kCtlEnd);
  end.back() = std::byte{2};
  EXPECT_THROW(wire::decode_end(end), SerializationError);
  expect_only_whole(body_of(wire::encode_rank_death({1, "x"}), wire::kCtlRankDead),
                    [](const Bytes& b) { wire::decode_rank_death(b, 2); });
  EXPECT_THROW(wire::decode_rank_death(body_of(wire::encode_rank_death({-1, "x"}), wire::kCtlRankDead), 2),
               SerializationError);
  EXPECT_THROW(wire::decode_checkpoint_request(body_of(wire::encode_checkpoint_request({0, ""}), wire::kCtlCheckpoint)),
               SerializationError);
  expect_only_whole(body_of(wire::encode_locate(brisk::ObjectId{{8, 9}}), wire::kCtlLocate),
                    [](const Bytes& b) { wire::decode_locate(b); });
  const auto copy = copy_held_by(2);
  EXPECT_THROW(
      wire::decode_located(body_of(wire::encode_located(brisk::ObjectId{{8, 9}}, &copy, nullptr), wire::kCtlLocated), 2),
      SerializationError);
  // More objects than the body can hold, and a holder outside the job.
  brisk::Writer many;
  many(std::uint64_t{1}, std::string("f"), std::uint64_t{1000000});
  EXPECT_THROW(wire::decode_checkpoint_saved(many.bytes(), 2), SerializationError);
  const wire::CheckpointSaved outside{4, "f", {{brisk::ObjectId{{1, 1}}, 5}}};
  EXPECT_THROW(wire::decode_checkpoint_saved(body_of(wire::encode_checkpoint_saved(outside), wire::kCtlCheckpointSaved), 2),
               SerializationError);
}

TEST(WireTest, TimelinePartsDecodeAndHugeCountsAreRefused) {
  brisk::Writer w;
  w(1, std::string("node7"), std::int64_t{4242}, std::uint64_t{1});
  w(std::string("worker 0"), 0, std::uint64_t{2}, std::uint64_t{1});
  w(std::int64_t{100}, std::uint64_t{5}, static_cast<std::uint8_t>(brisk::EventKind::kEnd), std::string("step"));
  const brisk::RankEvents re = wire::decode_timeline_part(w.bytes());
  EXPECT_EQ(re.rank, 1);
  EXPECT_EQ(re.host, "node7");
  ASSERT_EQ(re.threads.size(), 1u);
  ASSERT_EQ(re.threads[0].events.size(), 1u);
  EXPECT_EQ(re.threads[0].events[0].kind, brisk::EventKind::kEnd);
  EXPECT_EQ(re.threads[0].events[0].name, "step");
  expect_only_whole(w.take(), [](const Bytes& b) { wire::decode_timeline_part(b); });

  brisk::Writer huge;
  huge(1, std::string("h"), std::int64_t{1}, std::uint64_t{1} << 60);
  EXPECT_THROW(wire::decode_timeline_part(huge.bytes()), SerializationError);
}

TEST(WireTest, CheckpointReports) {
  const std::string shard = brisk::checkpoint_shard_name(3, "ab12", 1);
  const wire::CheckpointReport m{3, "ab12", brisk::Status(), shard, {{"held/0/x", 10, 0x1234}}, {2}};
  const auto back = wire::decode_checkpoint_report(wire::encode_checkpoint_report(m), 1);
  EXPECT_EQ(back.sequence, 3u);
  EXPECT_EQ(back.tag, "ab12");
  EXPECT_TRUE(back.status.ok());
  EXPECT_EQ(back.shard, shard);
  ASSERT_EQ(back.objects.size(), 1u);
  EXPECT_EQ(back.objects[0].crc32c, 0x1234u);
  EXPECT_EQ(back.settled, std::vector<int>{2});
  // Another rank's shard name, and objects without a shard.
  EXPECT_THROW(wire::decode_checkpoint_report(wire::encode_checkpoint_report(m), 2), SerializationError);
  wire::CheckpointReport no_shard = m;
  no_shard.shard.clear();
  EXPECT_THROW(wire::decode_checkpoint_report(wire::encode_checkpoint_report(no_shard), 1), SerializationError);
  const wire::CheckpointReport failed{3, "ab12", brisk::unavailable("disk full"), "", {}, {}};
  const auto f = wire::decode_checkpoint_report(wire::encode_checkpoint_report(failed), 1);
  EXPECT_EQ(f.status.code(), brisk::StatusCode::kUnavailable);
  EXPECT_EQ(f.status.message(), "disk full");
  Bytes bad_code = wire::encode_checkpoint_report(failed);
  bad_code[8 + 8 + 4] = std::byte{99};  // after the sequence and the tag "ab12"
  EXPECT_THROW(wire::decode_checkpoint_report(bad_code, 1), SerializationError);
  expect_only_whole(wire::encode_checkpoint_report(m), [](const Bytes& b) { wire::decode_checkpoint_report(b, 1); });
}

TEST(WireTest, DataHeadersAndEpochHosts) {
  Bytes payload(wire::kDataHeaderBytes + 3);
  wire::encode_data_header({7, 1, -1}, payload.data());
  const auto h = wire::decode_data_header(payload);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->epoch, 7u);
  EXPECT_EQ(h->from, 1);
  EXPECT_EQ(h->to, -1);
  EXPECT_FALSE(wire::decode_data_header(std::span(payload).first(wire::kDataHeaderBytes - 1)));

  auto hosts = [](std::vector<int> v) {
    brisk::Writer w;
    w(v);
    return w.take();
  };
  EXPECT_EQ(wire::decode_epoch_hosts(hosts({0, 2}), 3, 2), (std::vector<int>{0, 2}));
  EXPECT_THROW(wire::decode_epoch_hosts(hosts({}), 3, 0), SerializationError);
  EXPECT_THROW(wire::decode_epoch_hosts(hosts({0, 3}), 3, 0), SerializationError);
  EXPECT_THROW(wire::decode_epoch_hosts(hosts({0, 0}), 3, 0), SerializationError);
  EXPECT_THROW(wire::decode_epoch_hosts(hosts({0, 1}), 3, 2), SerializationError);
  EXPECT_THROW(wire::decode_epoch_hosts(hosts({0, 1, 2, 1}), 3, 0), SerializationError);
  expect_only_whole(hosts({0, 2}), [](const Bytes& b) { wire::decode_epoch_hosts(b, 3, 2); });
}

}  // namespace
