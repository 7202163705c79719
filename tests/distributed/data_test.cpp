// Data objects and execution templates under mpirun with 1 to 4 ranks (both
// transports, templates on and off): version ordering across ranks, copies,
// templates equal to untemplated runs, data-dependent loops, patches and edits.
// GoogleTest runs in the driver on rank 0; the other ranks serve.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "brisk/brisk.hpp"
#include "brisk/core/data.hpp"

namespace {

using Vec = std::vector<double>;

struct Step {
  double scale = 1;
  int iteration = 0;
  template <class A>
  void serialize(A& a) {
    a(scale, iteration);
  }
};

// partition p = {p, p, ..., p} (n values); args: (p, n).
void fill(brisk::DataTask& t) {
  auto [p, n] = t.args<std::pair<int, int>>();
  t.write<Vec>(0).assign(static_cast<std::size_t>(n), p);
}
BRISK_DATA_TASK(fill);

// fill, after 1 ms.
void fill_slowly(brisk::DataTask& t) {
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  fill(t);
}
BRISK_DATA_TASK(fill_slowly);

// out = (left + self + right) / 3 * scale, elementwise; accesses: out, left, self, right.
void smooth(brisk::DataTask& t) {
  const Vec& l = t.read<Vec>(1);
  const Vec& c = t.read<Vec>(2);
  const Vec& r = t.read<Vec>(3);
  const double scale = t.params_bytes().empty() ? 1.0 : t.params<Step>().scale;
  Vec& out = t.write<Vec>(0);
  out.resize(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) out[i] = (l[i] + c[i] + r[i]) / 3 * scale;
}
BRISK_DATA_TASK(smooth);

// dst = src.
void copy_vec(brisk::DataTask& t) { t.write<Vec>(0) = t.read<Vec>(1); }
BRISK_DATA_TASK(copy_vec);

// sum[0] = sum over all read partitions of their first element.
void total(brisk::DataTask& t) {
  double s = 0;
  for (std::size_t i = 1; i < t.accesses(); ++i) s += t.read<Vec>(i).at(0);
  t.write<Vec>(0).assign(1, s);
}
BRISK_DATA_TASK(total);

// Appends its argument and the rank it ran on.
void append(brisk::DataTask& t) {
  auto& v = t.write<std::vector<int>>(0);
  v.push_back(t.args<int>());
}
BRISK_DATA_TASK(append);

// out = in snapshot (read), used to check write-after-read ordering.
void snapshot(brisk::DataTask& t) { t.write<std::vector<int>>(0) = t.read<std::vector<int>>(1); }
BRISK_DATA_TASK(snapshot);

void fail_if_negative(brisk::DataTask& t) {
  if (t.args<int>() < 0) throw std::runtime_error("negative input " + std::to_string(t.args<int>()));
  t.write<Vec>(0).assign(1, 1.0);
}
BRISK_DATA_TASK(fail_if_negative);

// Halves the residual estimate: r[0] = r[0] / 2 (params.iteration counts).
void halve(brisk::DataTask& t) { t.write<Vec>(0)[0] /= 2; }
BRISK_DATA_TASK(halve);

int ranks() { return brisk::size(); }

// The serial reference of `steps` smoothing sweeps over n partitions (periodic).
std::vector<double> reference(int n, int steps, double scale) {
  std::vector<double> a(static_cast<std::size_t>(n));
  std::iota(a.begin(), a.end(), 0.0);
  for (int s = 0; s < steps; ++s) {
    std::vector<double> b(a.size());
    for (int p = 0; p < n; ++p) {
      b[static_cast<std::size_t>(p)] = (a[static_cast<std::size_t>((p + n - 1) % n)] + a[static_cast<std::size_t>(p)] +
                                        a[static_cast<std::size_t>((p + 1) % n)]) /
                                       3 * scale;
    }
    a = b;
  }
  return a;
}

// Two data sets ping-pong: a -> b -> a, one task per partition reading neighbours.
struct Grid {
  Grid(const std::string& name, int n, int width)
      : n(n), a(name + ".a", static_cast<std::size_t>(n)), b(name + ".b", static_cast<std::size_t>(n)) {
    for (int p = 0; p < n; ++p) brisk::data_task(fill).writes(a, p).args(std::make_pair(p, width)).submit();
  }
  // One sweep from `from` into `to`.
  void sweep(brisk::DataSet<Vec>& to, brisk::DataSet<Vec>& from) {
    for (int p = 0; p < n; ++p) {
      brisk::data_task(smooth)
          .writes(to, p)
          .reads(from, (p + n - 1) % n)
          .reads(from, p)
          .reads(from, (p + 1) % n)
          .submit();
    }
  }
  std::vector<double> firsts(brisk::DataSet<Vec>& d) {
    std::vector<double> out;
    for (int p = 0; p < n; ++p) out.push_back(d.fetch(p).at(0));
    return out;
  }
  int n;
  brisk::DataSet<Vec> a, b;
};

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], want[i]) << "partition " << i;
}

TEST(Data, FetchReturnsWhatATaskWrote) {
  brisk::DataSet<Vec> d("fetch", 6);
  for (int p = 0; p < 6; ++p) brisk::data_task(fill).writes(d, p).args(std::make_pair(p, 3)).submit();
  for (int p = 0; p < 6; ++p) EXPECT_EQ(d.fetch(p), Vec(3, p));
  EXPECT_EQ(d.version(2), 1u);
  EXPECT_EQ(d.home(5), 5 * ranks() / 6);
}

TEST(Data, UntouchedPartitionsAreDefaultValues) {
  brisk::DataSet<Vec> d("empty", 3, brisk::Placement::cyclic());
  EXPECT_TRUE(d.fetch(2).empty());
  EXPECT_EQ(d.version(2), 0u);
}

TEST(Data, SweepsMatchTheSerialReference) {
  Grid g("sweeps", 8, 4);
  for (int s = 0; s < 3; ++s) {
    g.sweep(g.b, g.a);
    g.sweep(g.a, g.b);
  }
  expect_near(g.firsts(g.a), reference(8, 6, 1.0));
}

TEST(Data, WritesAndReadsFollowProgramOrderAcrossRanks) {
  // One partition updated by tasks on every rank in turn; snapshots taken between
  // updates on other ranks must see exactly the updates before them.
  brisk::DataSet<std::vector<int>> log("log", 1);
  brisk::DataSet<std::vector<int>> snaps("snaps", 4, brisk::Placement::cyclic());
  for (int i = 0; i < 12; ++i) {
    brisk::data_task(append).updates(log, 0).args(i).on(i % ranks()).submit();
    if (i % 3 == 2) brisk::data_task(snapshot).writes(snaps, i / 3).reads(log, 0).submit();
  }
  std::vector<int> want(12);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(log.fetch(0), want);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(snaps.fetch(k), std::vector<int>(want.begin(), want.begin() + 3 * k + 3)) << "snapshot " << k;
  }
  EXPECT_EQ(log.version(0), 12u);
}

TEST(Data, FetchAsyncReturnsTheVersionOfItsCall) {
  brisk::DataSet<std::vector<int>> log("asynclog", 1);
  std::vector<brisk::DataFuture<std::vector<int>>> seen;
  for (int i = 0; i < 6; ++i) {
    brisk::data_task(append).updates(log, 0).args(i).on(i % ranks()).submit();
    seen.push_back(log.fetch_async(0));
  }
  brisk::DataFuture<std::vector<int>> dropped = log.fetch_async(0);  // never read: forgotten
  for (int i = 0; i < 6; ++i) {
    std::vector<int> want(static_cast<std::size_t>(i) + 1);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(seen[static_cast<std::size_t>(i)].get(), want);
    EXPECT_FALSE(seen[static_cast<std::size_t>(i)].valid());
  }
  EXPECT_THROW(seen[0].get(), brisk::Error);
}

TEST(Data, TemplateEqualsUntemplatedRun) {
  Grid plain("plain", 8, 2);
  Grid tmpl("tmpl", 8, 2);
  auto body = [&](Grid& g) {
    g.sweep(g.b, g.a);
    g.sweep(g.a, g.b);
  };
  auto t = brisk::record<Step>("sweep2", [&](const Step&) { body(tmpl); });
  auto u = brisk::record<Step>("sweep2.plain", [&](const Step&) { body(plain); });
  for (int i = 0; i < 5; ++i) {
    u.run_untemplated(Step{0.5 + 0.1 * i, i});  // the same block, submitted task by task
    t.instantiate(Step{0.5 + 0.1 * i, i});
  }
  EXPECT_EQ(t.tasks(), 16u);
  EXPECT_EQ(t.installed(), brisk::templates_enabled());
  const auto want = plain.firsts(plain.a);
  expect_near(tmpl.firsts(tmpl.a), want);
  for (int p = 0; p < 8; ++p) EXPECT_EQ(tmpl.a.version(p), plain.a.version(p));
}

TEST(Data, DataDependentLoopStaysInTheDriver) {
  brisk::DataSet<Vec> residual("residual", 1);
  brisk::data_task(fill).writes(residual, 0).args(std::make_pair(1, 1)).submit();
  auto step = brisk::record<Step>("halve", [&](const Step&) { brisk::data_task(halve).updates(residual, 0).submit(); });
  int iterations = 0;
  while (residual.fetch(0).at(0) > 1e-3) {
    step.instantiate(Step{1, iterations++});
  }
  EXPECT_EQ(iterations, 10);  // 2^-10 < 1e-3 < 2^-9
  if (brisk::templates_enabled()) EXPECT_GE(brisk::data_stats().validations_skipped, 8u);
}

// Each fetch's reply is handed to the driver by the worker that delivers it; where the
// driver shares the workers' cores that worker wakes it when it runs out of tasks
// (LocalScheduler::set_defer_wakes; multi-rank jobs). A wake-up lost on the way would
// leave the driver to its 100 ms safety-net timeout at every fetch (20 s here).
TEST(Data, ADriverFetchingInALoopIsWokenPromptly) {
  brisk::DataSet<Vec> residual("residual_loop", 1);
  brisk::data_task(fill).writes(residual, 0).args(std::make_pair(1, 1)).submit();
  // The task takes 1 ms, so the driver always waits when its reply comes.
  auto step = brisk::record<Step>("keep", [&](const Step&) {
    brisk::data_task(fill_slowly).writes(residual, 0).args(std::make_pair(1, 1)).submit();
  });
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) {
    step.instantiate(Step{1, i});
    ASSERT_EQ(residual.fetch(0).at(0), 1.0);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(12));
}

TEST(Data, PatchIsComputedOnceAndReused) {
  // Template A writes every partition of `a` on its home; template B reads all of
  // them into one reduction on the last rank, so entering B after A needs copies.
  const int n = 6;
  brisk::DataSet<Vec> a("patch.a", n);
  brisk::DataSet<Vec> sum("patch.sum", 1, brisk::Placement::on({ranks() - 1}));
  auto A = brisk::record<Step>("A", [&](const Step&) {
    for (int p = 0; p < n; ++p) brisk::data_task(fill).writes(a, p).args(std::make_pair(p, 1)).submit();
  });
  auto B = brisk::record<Step>("B", [&](const Step&) {
    auto t = brisk::data_task(total).writes(sum, 0);
    for (int p = 0; p < n; ++p) t.reads(a, p);
    t.submit();
  });
  const auto before = brisk::data_stats();
  for (int i = 0; i < 4; ++i) {
    A.instantiate(Step{});
    B.instantiate(Step{});
    B.instantiate(Step{});
    EXPECT_EQ(sum.fetch(0).at(0), 15.0);
  }
  if (brisk::templates_enabled()) {
    const auto after = brisk::data_stats();
    EXPECT_GE(after.patches_reused - before.patches_reused, 5u);  // A after B, B after A, from the 2nd round
    EXPECT_LE(after.patches_computed - before.patches_computed, 3u);
    EXPECT_GE(after.validations_skipped - before.validations_skipped, 4u);  // B after B
  }
}

TEST(Data, MovingTasksKeepsResults) {
  Grid plain("moveplain", 8, 2);
  Grid moved("moved", 8, 2);
  auto t = brisk::record<Step>("sweep", [&](const Step&) {
    moved.sweep(moved.b, moved.a);
    moved.sweep(moved.a, moved.b);
  });
  t.instantiate(Step{});
  plain.sweep(plain.b, plain.a);
  plain.sweep(plain.a, plain.b);
  if (brisk::templates_enabled()) {
    // Move every other task of the first sweep one rank on, then back half of them.
    std::vector<std::pair<std::uint32_t, int>> moves;
    for (std::uint32_t i = 0; i < 8; i += 2) moves.emplace_back(i, (t.rank_of(i) + 1) % ranks());
    t.move_tasks(moves);
    for (const auto& [i, r] : moves) EXPECT_EQ(t.rank_of(i), r);
    if (ranks() > 1) EXPECT_GE(brisk::data_stats().edits, 1u);  // on one rank every move is a no-op
  }
  for (int i = 0; i < 3; ++i) {
    t.instantiate(Step{});
    plain.sweep(plain.b, plain.a);
    plain.sweep(plain.a, plain.b);
  }
  if (brisk::templates_enabled()) {
    t.move_tasks({{0, 0}, {9, ranks() - 1}});
    t.instantiate(Step{});
    plain.sweep(plain.b, plain.a);
    plain.sweep(plain.a, plain.b);
  }
  expect_near(moved.firsts(moved.a), plain.firsts(plain.a));
}

TEST(Data, BadDeclarationsAreRefused) {
  brisk::DataSet<Vec> d("bad", 2);
  EXPECT_THROW(brisk::data_task(fill).writes(d, 2), brisk::Error);
  EXPECT_THROW(brisk::data_task(fill).on(ranks()), brisk::Error);
  EXPECT_THROW(brisk::DataSet<Vec>("none", 0), brisk::Error);
  EXPECT_THROW(brisk::DataSet<Vec>("far", 2, brisk::Placement::on({ranks()})), brisk::Error);
  EXPECT_THROW(d.fetch(7), brisk::Error);
}

TEST(Data, AFailedTaskIsReportedWithItsNameAndRank) {
  brisk::DataSet<Vec> d("fail", 2);
  brisk::data_task(fail_if_negative).writes(d, 0).args(1).submit();
  brisk::data_task(fail_if_negative).writes(d, 1).args(-5).on(ranks() - 1).submit();
  try {
    brisk::data_sync();
    FAIL() << "data_sync did not throw";
  } catch (const brisk::TaskError& e) {
    EXPECT_EQ(e.function_name(), "fail_if_negative");
    EXPECT_EQ(e.rank(), ranks() - 1);
    EXPECT_NE(e.message().find("negative input -5"), std::string::npos);
  }
  // Reported once: the job carries on.
  brisk::data_sync();
  EXPECT_EQ(d.fetch(0).at(0), 1.0);
}

TEST(Data, ReadingAsTheWrongTypeFails) {
  brisk::DataSet<std::vector<int>> ints("ints", 1);
  brisk::DataSet<Vec> out("wrongtype", 1);
  brisk::data_task(copy_vec).writes(out, 0).reads(ints, 0).submit();
  EXPECT_THROW(brisk::data_sync(), brisk::TaskError);
}

}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [&] {
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
  });
}
