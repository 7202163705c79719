// Actors when a rank dies: a real process killed with SIGKILL (ucx transport, 3 ranks).
//   mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 -np 3 \
//       actor_failure_test --brisk-transport=ucx
// The actors on the victim (the last rank): a call in flight fails with a rank-lost
// error; an actor without restarts fails every later call; one with max_restarts is
// rebuilt elsewhere from its constructor and answers again, also through a handle
// that a task on another rank holds; one with replay_calls comes back with the state
// its calls had built, and its calls in flight get their results. Prints "actor
// failure test OK" on success.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "brisk/brisk.hpp"

namespace {

struct Counter {
  explicit Counter(long start) : total(start) {}
  long add(long k) { return total += k; }
  int where() const { return brisk::rank(); }
  long slow_add(long k) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    return total += k;
  }
  long total;
};
BRISK_REMOTE(Counter::add);
BRISK_REMOTE(Counter::where);
BRISK_REMOTE(Counter::slow_add);

int die() {
  raise(SIGKILL);
  return 0;
}
BRISK_REMOTE(die);

// Calls the actor through a handle received as an argument.
long add_through(brisk::Actor<Counter> c, long k) { return brisk::get(c.call(&Counter::add, k)); }
BRISK_REMOTE(add_through);

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

template <class T>
std::string error_of(const brisk::Ref<T>& r) {
  try {
    brisk::get(r);
    return "";
  } catch (const brisk::Error& e) {
    return e.what();
  }
}

// An actor of this kind on `rank`: the actors spread over the ranks in turn.
template <class... A>
brisk::Actor<Counter> actor_on(int rank, const brisk::ActorOptions& options, A... args) {
  for (int i = 0; i < 4 * brisk::size(); ++i) {
    auto a = brisk::actor<Counter>(options, args...);
    if (a.rank() == rank) return a;
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [] {
    const int victim = brisk::size() - 1;
    const std::map<std::string, double> on_zero{{"rank0", 1}};
    auto plain = actor_on(victim, {}, 10L);
    auto rebuilt = actor_on(victim, brisk::ActorOptions{.max_restarts = 1}, 100L);
    auto replayed = actor_on(victim, brisk::ActorOptions{.max_restarts = 1, .replay_calls = true}, 1000L);
    if (!plain.valid() || !rebuilt.valid() || !replayed.valid()) {
      std::printf("could not place the actors on rank %d\n", victim);
      return 1;
    }
    check(brisk::get(plain.call(&Counter::add, 1L)) == 11, "plain actor answers before the failure");
    check(brisk::get(rebuilt.call(&Counter::add, 5L)) == 105, "restartable actor answers before the failure");
    // The replaying actor: 10 calls done, then one in flight and 5 queued behind it.
    for (long k = 1; k <= 10; ++k) (void)replayed.call(&Counter::add, k);
    check(brisk::get(replayed.call(&Counter::add, 0L)) == 1055, "replaying actor answers before the failure");
    auto replay_in_flight = replayed.call(&Counter::slow_add, 100L);
    std::vector<brisk::Ref<long>> queued;
    for (long k = 1; k <= 5; ++k) queued.push_back(replayed.call(&Counter::add, k));
    auto in_flight = plain.call(&Counter::slow_add, 1L);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));

    const auto t0 = std::chrono::steady_clock::now();
    (void)brisk::task(die).resources({{"rank" + std::to_string(victim), 1}}).remote();
    const std::string lost = error_of(in_flight);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    check(lost.find("rank " + std::to_string(victim) + " was lost") != std::string::npos,
          "the call in flight fails with a rank-lost error (" + lost + ")");
    std::printf("failure noticed after %.0f ms\n", ms);

    const std::string later = error_of(plain.call(&Counter::add, 1L));
    check(later.find("was lost") != std::string::npos, "later calls on the plain actor fail (" + later + ")");

    const long after = brisk::get(rebuilt.call(&Counter::add, 1L));
    check(after == 101, "the rebuilt actor starts from its constructor: 100 + 1 = " + std::to_string(after));
    check(rebuilt.rank() != victim, "the rebuilt actor lives on rank " + std::to_string(rebuilt.rank()));
    const long through = brisk::get(brisk::task(add_through).resources(on_zero).remote(rebuilt, 2L));
    check(through == 103, "a handle passed to a task reaches the rebuilt actor: " + std::to_string(through));
    for (int i = 0; i < 20; ++i) (void)rebuilt.call(&Counter::add, 1L);
    check(brisk::get(rebuilt.call(&Counter::add, 0L)) == 123, "calls keep their order after the rebuild");

    // 1000 + 55 before; the call in flight and the queued ones complete with the
    // values an unbroken run gives; later calls continue from there.
    const std::string replay_error = error_of(replay_in_flight);
    check(replay_error.empty() && brisk::get(replay_in_flight) == 1155,
          "the replaying actor's call in flight gets its result after the rebuild" +
              (replay_error.empty() ? ": " + std::to_string(brisk::get(replay_in_flight)) : " (" + replay_error + ")"));
    long expect = 1155;
    bool queued_ok = true;
    for (long k = 1; k <= 5; ++k) {
      expect += k;
      const std::string e = error_of(queued[static_cast<std::size_t>(k - 1)]);
      queued_ok = queued_ok && e.empty() && brisk::get(queued[static_cast<std::size_t>(k - 1)]) == expect;
    }
    check(queued_ok, "the queued calls get their results in order");
    const long next = brisk::get(replayed.call(&Counter::add, 1L));
    check(next == expect + 1, "the replayed state goes on: " + std::to_string(next) + " (want " + std::to_string(expect + 1) + ")");
    check(replayed.rank() != victim, "the replaying actor lives on rank " + std::to_string(replayed.rank()));
    std::printf(failures == 0 ? "actor failure test OK\n" : "actor failure test FAILED\n");
    return failures == 0 ? 0 : 1;
  });
}
