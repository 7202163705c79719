// The transport conformance suite against the in-process fake (4 ranks on threads).
#include <barrier>
#include <thread>

#include "testing/fake_transport.hpp"
#include "testing/transport_conformance.hpp"

namespace {

using brisk::testing::FakeFabric;
namespace conformance = brisk::testing::conformance;

void run_spmd(int ranks, void (*body)(conformance::Env)) {
  FakeFabric fabric(ranks);
  std::barrier sync(ranks);
  std::vector<std::vector<std::byte>> exposed(static_cast<std::size_t>(ranks), std::vector<std::byte>(2 << 20));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      body(conformance::Env{fabric.endpoint(r), [&] { sync.arrive_and_wait(); }, exposed[static_cast<std::size_t>(r)]});
    });
  }
  for (auto& t : threads) t.join();
}

TEST(FakeTransportTest, OrderedMessagesBetweenAllPairs) { run_spmd(4, conformance::ordered_messages_between_all_pairs); }
TEST(FakeTransportTest, LargeMessage) { run_spmd(3, conformance::large_message); }
TEST(FakeTransportTest, OneSidedGet) { run_spmd(4, conformance::one_sided_get); }
TEST(FakeTransportTest, GetsFromManyRegistrations) { run_spmd(3, conformance::gets_from_many_registrations); }
TEST(FakeTransportTest, ConcurrentSenders) { run_spmd(2, conformance::concurrent_senders); }
TEST(FakeTransportTest, RejectsBadRanks) { run_spmd(2, conformance::rejects_bad_ranks); }

TEST(FakeTransportTest, KilledRankIsReportedAndUnreachable) {
  FakeFabric fabric(3);
  std::vector<int> dead;
  fabric.endpoint(0).set_failure_handler([&](brisk::Rank r, const brisk::Status&) { dead.push_back(r.value); });
  fabric.kill(2);
  fabric.endpoint(0).progress();
  fabric.endpoint(0).progress();
  EXPECT_EQ(dead, std::vector<int>{2});
  EXPECT_EQ(fabric.endpoint(0).send(brisk::Rank{2}, {}).code(), brisk::StatusCode::kUnavailable);
}

}  // namespace
