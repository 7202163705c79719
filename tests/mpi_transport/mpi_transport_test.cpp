// The transport conformance suite against a real backend, one rank per process:
//   mpirun -np 4 mpi_transport_conformance_test --backend=mpi|ucx
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "brisk/core/detail/futex.hpp"

#include "brisk/mpi_transport/mpi_transport.hpp"
#ifdef BRISK_HAVE_UCX
#include "brisk/mpi_transport/ucx_transport.hpp"
#endif
#include "testing/transport_conformance.hpp"

namespace {

namespace conformance = brisk::testing::conformance;
brisk::Transport* g_transport = nullptr;
std::function<void()> g_barrier;
std::span<std::byte> g_exposed;
std::string g_backend = "mpi";

conformance::Env env() { return conformance::Env{*g_transport, g_barrier, g_exposed}; }

TEST(TransportConformance, OrderedMessagesBetweenAllPairs) { conformance::ordered_messages_between_all_pairs(env()); }
TEST(TransportConformance, LargeMessage) { conformance::large_message(env()); }
TEST(TransportConformance, OneSidedGet) { conformance::one_sided_get(env()); }
// ucx registers any memory; mpi only its window (OnlyWindowMemoryCanBeRegistered).
TEST(TransportConformance, GetsFromManyRegistrations) {
  ASSERT_EQ(g_transport->exposes_any_memory(), g_backend == "ucx");
  if (g_backend != "ucx") GTEST_SKIP() << "the mpi backend registers only its window";
  conformance::gets_from_many_registrations(env());
}
TEST(TransportConformance, ConcurrentSenders) { conformance::concurrent_senders(env()); }
TEST(TransportConformance, RejectsBadRanks) { conformance::rejects_bad_ranks(env()); }

TEST(TransportConformance, NameMatchesBackend) { EXPECT_EQ(g_transport->name(), g_backend); }

TEST(MpiTransportOnly, OnlyWindowMemoryCanBeRegistered) {
  if (g_backend != "mpi") GTEST_SKIP() << "mpi backend only";
  std::vector<std::byte> heap(64);
  auto r = g_transport->register_memory(heap.data(), heap.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), brisk::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("window"), std::string::npos);
}

// The count that lets the Cluster batch while a peer drains slowly: every send
// counts, per destination, until a progress() call finds it finished. (mpi counts
// every send until then; ucx only those that did not complete at once.)
TEST(TransportConformance, SendsInFlightAreCountedUntilFinished) {
  brisk::Transport& t = *g_transport;
  const bool exact = g_backend == "mpi";
  const int n = t.size();
  const brisk::Rank next{(t.rank().value + 1) % n};
  const brisk::Rank prev{(t.rank().value + n - 1) % n};
  constexpr int kToNext = 50, kToPrev = 20;
  std::atomic<int> received{0};
  t.set_message_handler([&](brisk::Rank, std::span<const std::byte>) { received.fetch_add(1); });
  g_barrier();
  EXPECT_EQ(t.sends_in_flight(next), 0u);
  for (int i = 0; i < kToNext; ++i) ASSERT_TRUE(t.send(next, std::vector<std::byte>(100 + i)).ok());
  for (int i = 0; i < kToPrev; ++i) ASSERT_TRUE(t.send(prev, std::vector<std::byte>(10 + i)).ok());
  // None was tested yet. (With 2 ranks, next and prev are one rank.)
  const auto expect_count = [&](brisk::Rank to, int sent) {
    if (exact) {
      EXPECT_EQ(t.sends_in_flight(to), static_cast<std::size_t>(sent)) << "to rank " << to.value;
    } else {
      EXPECT_LE(t.sends_in_flight(to), static_cast<std::size_t>(sent)) << "to rank " << to.value;
    }
  };
  if (next == prev) {
    expect_count(next, kToNext + kToPrev);
  } else {
    expect_count(next, kToNext);
    expect_count(prev, kToPrev);
  }
  EXPECT_EQ(t.sends_in_flight(brisk::Rank{-1}), 0u);
  EXPECT_EQ(t.sends_in_flight(brisk::Rank{n}), 0u);
  EXPECT_TRUE(conformance::pump(t, [&] {
    return received.load() == kToNext + kToPrev && t.sends_in_flight(next) == 0 && t.sends_in_flight(prev) == 0;
  })) << received.load() << " received, " << t.sends_in_flight(next) << " and " << t.sends_in_flight(prev)
      << " in flight";
  conformance::Env e = env();
  conformance::settle(e);
}

// Once sent, a large message's storage is kept for the next large message (a Writer
// reserved for one takes it) rather than handed back to the system.
TEST(UcxTransportOnly, ALargeMessagesStorageIsKeptOnceSent) {
  if (g_backend != "ucx") GTEST_SKIP() << "the ucx backend's";
  namespace serial = brisk::detail::serial;
  brisk::Transport& t = *g_transport;
  auto& spares = serial::SpareVectors<std::byte>::instance();
  while (spares.take(std::size_t{1} << 20).capacity() != 0) {
  }
  const std::size_t kept = spares.count();  // others' (earlier tests' messages)
  const brisk::Rank next{(t.rank().value + 1) % t.size()};
  std::atomic<int> received{0};
  t.set_message_handler([&](brisk::Rank, std::span<const std::byte> m) {
    if (m.size() == std::size_t{1} << 20) received.fetch_add(1);
  });
  g_barrier();
  std::vector<std::byte> big(std::size_t{1} << 20, std::byte{3});
  const std::byte* storage = big.data();
  ASSERT_TRUE(t.send(next, std::move(big)).ok());
  EXPECT_TRUE(conformance::pump(t, [&] { return received.load() == 1 && spares.count() > kept; }))
      << received.load() << " received, " << spares.count() << " kept";
  brisk::Writer w;
  w.reserve((std::size_t{1} << 20) - 64);
  EXPECT_EQ(w.bytes().data(), storage);
  conformance::Env e = env();
  conformance::settle(e);
}

// A rank that sleeps on its wake word until a message comes is woken by a node peer
// that sends it one, and one that sleeps for its own wakers only is not. (Every rank
// of these tests shares one node.)
TEST(TransportConformance, ANodePeersMessageWakesASleeper) {
  brisk::Transport& t = *g_transport;
  if (t.size() < 2) GTEST_SKIP() << "needs two ranks";
  const char* rings = std::getenv("BRISK_NODE_RING_BYTES");
  if (g_backend == "ucx" && rings && std::string(rings) == "0") GTEST_SKIP() << "no rings: UCX carries the node's messages";
  using brisk::Transport;
  std::atomic<std::uint32_t>* word = t.wake_word();
  ASSERT_NE(word, nullptr);
  ASSERT_EQ(word->load(), Transport::kAwake);
  std::atomic<int> received{0};
  t.set_message_handler([&](brisk::Rank, std::span<const std::byte>) { received.fetch_add(1); });
  const int me = t.rank().value;

  // Rank 0 sleeps until a message; rank 1 sends it one.
  if (me == 0) word->store(Transport::kAsleepUntilMessage);
  g_barrier();
  if (me == 1) ASSERT_TRUE(t.send(brisk::Rank{0}, std::vector<std::byte>(16)).ok());
  if (me == 0) {
    const auto start = std::chrono::steady_clock::now();
    const auto limit = std::chrono::seconds(20);
    while (word->load() == Transport::kAsleepUntilMessage && std::chrono::steady_clock::now() - start < limit) {
      brisk::detail::futex_wait_shared(word, Transport::kAsleepUntilMessage, limit);
    }
    EXPECT_EQ(word->load(), Transport::kAwake) << "the message did not wake rank 0";
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    EXPECT_TRUE(conformance::pump(t, [&] { return received.load() == 1; }));
  }
  g_barrier();

  // Asleep for its own wakers only: a message leaves the word as it is.
  if (me == 0) word->store(Transport::kAsleep);
  g_barrier();
  if (me == 1) ASSERT_TRUE(t.send(brisk::Rank{0}, std::vector<std::byte>(16)).ok());
  g_barrier();
  if (me == 0) {
    EXPECT_EQ(word->load(), Transport::kAsleep);
    word->store(Transport::kAwake);
    EXPECT_TRUE(conformance::pump(t, [&] { return received.load() == 2; }));
  }
  conformance::Env e = env();
  conformance::settle(e);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--backend=", 10) == 0) g_backend = argv[i] + 10;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = 0;
  std::vector<std::byte> heap(4 << 20);
  if (g_backend == "mpi") {
    auto t = brisk::MpiTransport::create(4 << 20);
    if (!t.ok()) MPI_Abort(MPI_COMM_WORLD, 2);
    g_transport = t->get();
    g_barrier = [p = t->get()] { p->barrier(); };
    g_exposed = (*t)->window();
    rc = RUN_ALL_TESTS();
#ifdef BRISK_HAVE_UCX
  } else if (g_backend == "ucx") {
    auto t = brisk::UcxTransport::create();
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().message().c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    g_transport = t->get();
    g_barrier = [p = t->get()] { p->barrier(); };
    g_exposed = heap;
    rc = RUN_ALL_TESTS();
#endif
  } else {
    if (rank == 0) std::fprintf(stderr, "unknown or unbuilt backend '%s'\n", g_backend.c_str());
    rc = 2;
  }
  g_transport = nullptr;
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
