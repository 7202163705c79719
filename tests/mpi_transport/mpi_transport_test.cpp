// The transport conformance suite against the MPI backend, one rank per process:
//   mpirun -np 2 (and -np 4) mpi_transport_mpi_transport_test
#include "brisk/mpi_transport/mpi_transport.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include "testing/transport_conformance.hpp"

namespace {

namespace conformance = brisk::testing::conformance;
brisk::MpiTransport* g_transport = nullptr;

conformance::Env env() {
  return conformance::Env{*g_transport, [] { g_transport->barrier(); }, g_transport->window()};
}

TEST(MpiTransportTest, OrderedMessagesBetweenAllPairs) { conformance::ordered_messages_between_all_pairs(env()); }
TEST(MpiTransportTest, LargeMessage) { conformance::large_message(env()); }
TEST(MpiTransportTest, OneSidedGet) { conformance::one_sided_get(env()); }
TEST(MpiTransportTest, ConcurrentSenders) { conformance::concurrent_senders(env()); }
TEST(MpiTransportTest, RejectsBadRanks) { conformance::rejects_bad_ranks(env()); }

TEST(MpiTransportTest, OnlyWindowMemoryCanBeRegistered) {
  std::vector<std::byte> heap(64);
  auto r = g_transport->register_memory(heap.data(), heap.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), brisk::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("window"), std::string::npos);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = 0;
  {
    auto t = brisk::MpiTransport::create(4 << 20);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().message().c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    g_transport = t->get();
    rc = RUN_ALL_TESTS();
    g_transport = nullptr;
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
