// Cost of one task event: what the event log adds to every task (4 events each).
#include <benchmark/benchmark.h>

#include "brisk/core/event_log.hpp"

static void BM_EventRecord(benchmark::State& state) {
  brisk::EventLog log(1 << 16);
  std::uint64_t task = 0;
  for (auto _ : state) log.record(brisk::EventKind::kStart, ++task, "noop");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventRecord);

static void BM_EventRecordThreads(benchmark::State& state) {
  static brisk::EventLog* log = new brisk::EventLog(1 << 16);
  std::uint64_t task = 0;
  for (auto _ : state) log->record(brisk::EventKind::kStart, ++task, "noop");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventRecordThreads)->Threads(2);

BENCHMARK_MAIN();
