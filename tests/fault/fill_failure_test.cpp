// A rank dies while it copies a large argument into its arena for a node peer that
// copies it out at the same time (ucx, 3 ranks on one node):
//   BRISK_FAULT_INJECT=kill-in-fill:1:1-1 mpirun --enable-recovery \
//       --mca orte_abort_on_non_zero_status 0 -np 3 fill_failure_test --brisk-transport=ucx
// Rank 1 makes a vector and sends rank 2 a task that reads it: the task goes first,
// then rank 1 copies the vector into its arena part by part, and dies once the first
// part is there. Rank 2 must give the pull up (its holder is lost) instead of waiting
// for a count that no longer moves (it then finds the object lost, and counts it):
// the reading task fails, rank 1's task that waited for it is lost with its rank, and
// the job runs on. Rank 2 then reads a second
// vector of the same size made on rank 0 in full, and the job ends.
// Prints "fill failure test OK" on success.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "brisk/brisk.hpp"
#include "brisk/core/detail/context.hpp"
#include "brisk/runtime/cluster.hpp"

namespace {

constexpr std::uint64_t kBytes = 16 << 20;  // a few hundred 64 KiB parts: rank 2 is still reading when rank 1 dies

std::map<std::string, double> on(int r) { return {{"rank" + std::to_string(r), 1}}; }

std::vector<std::uint8_t> make_bytes(std::uint64_t n, int seed) {
  std::vector<std::uint8_t> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 131 + static_cast<std::uint64_t>(seed));
  return v;
}

std::uint64_t full_hash(const std::vector<std::uint8_t>& v) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::uint8_t x : v) h = (h ^ x) * 1099511628211ULL;
  return h;
}
BRISK_REMOTE(full_hash);

// Runs on rank 1: a vector made here, read by a task on `reader`.
std::uint64_t relay(int reader) {
  auto v = brisk::put(make_bytes(kBytes, 3));
  return brisk::get(brisk::task(full_hash).resources(on(reader)).remote(v));
}
BRISK_REMOTE(relay);

// Objects this rank found lost: rank 2's pull of rank 1's vector, given up.
std::uint64_t objects_lost_here() {
  return dynamic_cast<brisk::Cluster*>(brisk::detail::context()->distributed)->stats().objects_lost;
}
BRISK_REMOTE(objects_lost_here);

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [] {
    auto* cluster = dynamic_cast<brisk::Cluster*>(brisk::detail::context()->distributed);
    if (!cluster || cluster->size() != 3) {
      std::printf("fill failure test FAILED: needs 3 ranks\n");
      return 1;
    }
    if (cluster->stats().node_peers != 2) {
      std::printf("fill failure test FAILED: the ranks must share a node and map each other's arenas\n");
      return 1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    bool relay_failed = false;
    try {
      const std::uint64_t h = brisk::get(brisk::task(relay).resources(on(1)).remote(2));
      std::printf("relay returned %llu, though rank 1 was to die in it\n", static_cast<unsigned long long>(h));
    } catch (const brisk::Error& e) {
      relay_failed = true;
      std::printf("relay failed as expected: %s\n", e.what());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Rank 2's worker gave the pull up (had it kept waiting, it would find nothing lost).
    std::uint64_t given_up = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (given_up == 0 && std::chrono::steady_clock::now() < until) {
      given_up = brisk::get(brisk::task(objects_lost_here).resources(on(2)).remote());
      if (given_up == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Rank 2 reads a vector of the same size, made here, in full.
    auto again = brisk::put(make_bytes(kBytes, 4));
    const bool read_ok = brisk::get(brisk::task(full_hash).resources(on(2)).remote(again)) == full_hash(make_bytes(kBytes, 4));
    const auto stats = cluster->stats();
    const bool lost = cluster->rank_lost(brisk::Rank{1}) && !cluster->rank_lost(brisk::Rank{2});
    std::printf("relay ended after %.2f s; rank 1 lost: %s; objects rank 2 found lost: %llu; rank 2 read a second "
                "vector: %s; copies made after their task went here: %llu\n",
                seconds, lost ? "yes" : "no", static_cast<unsigned long long>(given_up), read_ok ? "yes" : "no",
                static_cast<unsigned long long>(stats.filled_later));
    const bool ok = relay_failed && lost && given_up > 0 && read_ok && stats.filled_later == 1;
    std::printf(ok ? "fill failure test OK\n" : "fill failure test FAILED\n");
    return ok ? 0 : 1;
  });
}
