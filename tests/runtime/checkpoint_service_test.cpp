// RuntimeCheckpoints' sharded way, three ranks played in one process: the copies
// that ranks hold of other ranks' objects go into each checkpoint, and a dead rank's
// are carried from checkpoint to checkpoint until every live rank has settled them.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "brisk/checkpoint/format.hpp"
#include "brisk/checkpoint/reader.hpp"
#include "brisk/runtime/checkpoint_service.hpp"

namespace {

class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  void TearDown() override { MPI_Finalize(); }
};
[[maybe_unused]] auto* const g_mpi = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

// The held copies in checkpoint `path`: name -> bytes.
std::map<std::string, std::vector<std::byte>> held_in(const std::filesystem::path& path) {
  std::map<std::string, std::vector<std::byte>> out;
  auto reader = brisk::CheckpointReader::open(path);
  EXPECT_TRUE(reader.ok()) << reader.status().message();
  if (!reader.ok()) return out;
  for (const auto& e : reader->entries()) {
    if (e.section != brisk::CheckpointSection::kObjects || !e.name.starts_with(brisk::kCheckpointHeldPrefix)) continue;
    auto bytes = reader->read(brisk::CheckpointSection::kObjects, e.name);
    EXPECT_TRUE(bytes.ok()) << bytes.status().message();
    if (bytes.ok()) out[e.name] = std::move(*bytes);
  }
  return out;
}

TEST(RuntimeCheckpointsTest, HeldCopiesOfADeadRankAreCarriedUntilEveryRankSettled) {
  const auto dir = std::filesystem::temp_directory_path() / ("brisk_ckpt_service_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  using ObjectList = brisk::RuntimeCheckpoints::ObjectList;
  const std::string x1 = brisk::checkpoint_held_name(0, 1, 1), x2 = brisk::checkpoint_held_name(0, 2, 2);
  const std::string y = brisk::checkpoint_held_name(1, 3, 3);
  std::map<int, ObjectList> held_of;
  // Rank 2 holds x1 too: a task that ran twice, its duplicate copy not freed yet.
  held_of[1] = {{x1, bytes_of("one")}, {brisk::checkpoint_held_name(2, 4, 4), bytes_of("rank 2's")}};
  held_of[2] = {{x1, bytes_of("one")}, {x2, bytes_of("two")}, {y, bytes_of("rank 1's")}};
  std::set<int> lost;
  std::map<int, std::vector<int>> settled;  // per rank
  struct Saved {
    std::uint64_t sequence;
    std::string path;
    std::vector<std::pair<std::string, int>> held;
  };
  std::vector<Saved> saved;

  std::unique_ptr<brisk::RuntimeCheckpoints> ranks[3];
  for (int r = 0; r < 3; ++r) {
    brisk::RuntimeCheckpoints::Peers p;
    p.size = 3;
    p.sharded = true;
    p.settled = [&settled, r] { return settled[r]; };
    if (r == 0) {
      // Rank 0 asks the live ranks, which write their parts at once.
      p.announce = [&](std::uint64_t seq, const std::string& tag) {
        for (int k = 1; k < 3; ++k) {
          if (!lost.count(k)) EXPECT_TRUE(ranks[k]->participate(seq, tag).ok());
        }
      };
      p.lost = [&lost](int k) { return lost.count(k) > 0; };
      p.saved = [&saved](std::uint64_t seq, const std::string& path, const std::vector<std::pair<std::string, int>>& held) {
        saved.push_back({seq, path, held});
      };
    } else {
      p.report = [&ranks, r](std::span<const std::byte> report) { ranks[0]->on_report(r, report); };
      p.held = [&held_of, r] { return held_of[r]; };
    }
    ranks[r] = std::make_unique<brisk::RuntimeCheckpoints>(r, dir.string(), 1, std::chrono::seconds(0), std::move(p));
  }
  auto listed = [&](const Saved& s) { return std::map<std::string, int>(s.held.begin(), s.held.end()); };

  // 1: every copy once, each with the rank that held it.
  const std::uint64_t first = ranks[0]->write();
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].sequence, first);
  auto in = held_in(saved[0].path);
  EXPECT_EQ(in.size(), 4u);
  EXPECT_EQ(in[x2], bytes_of("two"));
  EXPECT_EQ(listed(saved[0]).size(), 4u);
  EXPECT_EQ(listed(saved[0]).at(x2), 2);

  // 2: rank 2 died and nobody has read its copies back yet: they are carried, but
  // for x1, which rank 1 holds too.
  lost.insert(2);
  ranks[0]->write();
  ASSERT_EQ(saved.size(), 2u);
  in = held_in(saved[1].path);
  EXPECT_EQ(in[x2], bytes_of("two")) << "rank 2's copy carried from the checkpoint before";
  EXPECT_EQ(in[y], bytes_of("rank 1's"));
  EXPECT_EQ(listed(saved[1]).at(x2), 2) << "listed with the rank that held it";
  EXPECT_EQ(listed(saved[1]).at(x1), 1);
  EXPECT_FALSE(std::filesystem::exists(saved[0].path)) << "--brisk-checkpoint-keep=1 pruned the first";

  // 3: rank 1 has settled rank 2, rank 0 has not: still carried (from checkpoint 2).
  // Rank 1 holds x2 now (made again from lineage): its copy is the one written.
  settled[1] = {2};
  held_of[1].emplace_back(x2, bytes_of("two, made again"));
  ranks[0]->write();
  ASSERT_EQ(saved.size(), 3u);
  in = held_in(saved[2].path);
  EXPECT_EQ(in[x2], bytes_of("two, made again"));
  EXPECT_EQ(listed(saved[2]).at(x2), 1);
  EXPECT_EQ(in[y], bytes_of("rank 1's"));
  EXPECT_EQ(listed(saved[2]).at(y), 2);
  held_of[1].pop_back();

  // 4: every live rank has: rank 2's copies are left out; rank 1's stay.
  settled[0] = {2};
  ranks[0]->write();
  ASSERT_EQ(saved.size(), 4u);
  in = held_in(saved[3].path);
  EXPECT_EQ(in.count(x2), 0u);
  EXPECT_EQ(in.count(y), 0u);
  EXPECT_EQ(in[x1], bytes_of("one"));
  EXPECT_EQ(listed(saved[3]).size(), 2u);

  for (auto& r : ranks) r.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
