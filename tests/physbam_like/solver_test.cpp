// The pressure solver against a manufactured solution: the same block kernels and
// PCG loop as every driver, second-order convergence of the max error.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "physbam_like/driver.hpp"

namespace physbam_like {
namespace {

// p*(x, y, z) = cos(pi x) cos(pi y) sin(pi z / 2) on the unit cube: zero normal
// derivative on the walls (x = 0, 1; y = 0, 1; z = 1) and zero on the open bottom.
// -laplacian p* = (pi^2 + pi^2 + pi^2 / 4) p*.
double exact(double x, double y, double z) {
  using std::numbers::pi;
  return std::cos(pi * x) * std::cos(pi * y) * std::sin(0.5 * pi * z);
}

struct SolveOutcome {
  double max_error = 0;          // against p*
  double relative_residual = 0;  // |b - A x| / |b|, recomputed from x
  SolveResult result;
};

// Solves A x = h^2 (-laplacian p*) at the cell centres with the driver's solve_pressure.
SolveOutcome solve_manufactured(int n, int blocks, double tol) {
  const Geometry g(n, n, n, blocks, blocks, blocks);
  std::vector<Block> all;
  for (int b = 0; b < g.num_blocks(); ++b) all.push_back(allocate_block(g, b));
  LocalBlocks ex(g, std::move(all));
  const double h = g.h();
  const double k2 = 2.25 * std::numbers::pi * std::numbers::pi;
  const auto rhs = [&](const Block& b, int i, int j, int k) {
    return h * h * k2 * exact((b.i0 + i + 0.5) * h, (b.j0 + j + 0.5) * h, (b.k0 + k + 0.5) * h);
  };
  const double bb = ex.sum([&](Block& b) {
    double part = 0;
    for (int k = 0; k < b.nz; ++k)
      for (int j = 0; j < b.ny; ++j)
        for (int i = 0; i < b.nx; ++i) {
          b.r[b.at(i, j, k)] = rhs(b, i, j, k);
          part += rhs(b, i, j, k) * rhs(b, i, j, k);
        }
    return part;
  });
  Params p;
  p.tol = tol;
  p.max_cg = 5000;
  SolveOutcome out;
  out.result = solve_pressure(ex, bb, p);
  // The true residual, through the same halo and Laplacian: q = A x.
  ex.each([](Block& b) { b.d = b.p; });
  ex.exchange(kSearchHalo);
  ex.each([](Block& b) { apply_laplacian(b); });
  const double res = ex.sum([&](Block& b) {
    double part = 0;
    for (int k = 0; k < b.nz; ++k)
      for (int j = 0; j < b.ny; ++j)
        for (int i = 0; i < b.nx; ++i) {
          const double e = rhs(b, i, j, k) - b.q[b.at(i, j, k)];
          part += e * e;
        }
    return part;
  });
  out.relative_residual = std::sqrt(res / bb);
  for (const Block& b : ex.blocks()) {
    for (int k = 0; k < b.nz; ++k)
      for (int j = 0; j < b.ny; ++j)
        for (int i = 0; i < b.nx; ++i) {
          const double e = exact((b.i0 + i + 0.5) * h, (b.j0 + j + 0.5) * h, (b.k0 + k + 0.5) * h);
          out.max_error = std::max(out.max_error, std::abs(b.p[b.at(i, j, k)] - e));
        }
  }
  return out;
}

TEST(SolverTest, ManufacturedSolutionConvergesAtSecondOrder) {
  const SolveOutcome e16 = solve_manufactured(16, 2, 1e-11);
  const SolveOutcome e32 = solve_manufactured(32, 2, 1e-11);
  const SolveOutcome e64 = solve_manufactured(64, 4, 1e-11);
  for (const auto* e : {&e16, &e32, &e64}) EXPECT_TRUE(e->result.converged);
  std::printf("max error: h=1/16 %.3e (%d iterations), h=1/32 %.3e (%d), h=1/64 %.3e (%d); ratios %.3f %.3f\n",
              e16.max_error, e16.result.iterations, e32.max_error, e32.result.iterations, e64.max_error,
              e64.result.iterations, e16.max_error / e32.max_error, e32.max_error / e64.max_error);
  EXPECT_LT(e16.max_error, 1e-2);
  EXPECT_NEAR(e16.max_error / e32.max_error, 4.0, 0.4);
  EXPECT_NEAR(e32.max_error / e64.max_error, 4.0, 0.4);
}

TEST(SolverTest, StopsAtTheRelativeTolerance) {
  const SolveOutcome loose = solve_manufactured(16, 2, 1e-3);
  const SolveOutcome tight = solve_manufactured(16, 2, 1e-9);
  EXPECT_TRUE(loose.result.converged);
  EXPECT_TRUE(tight.result.converged);
  EXPECT_LT(loose.result.iterations, tight.result.iterations);
  EXPECT_LE(loose.relative_residual, 1e-3 * 1.001);
  EXPECT_GT(loose.relative_residual, 1e-6);  // it did stop early
  EXPECT_LE(tight.relative_residual, 1e-9 * 1.01);
}

TEST(SolverTest, ReportsTheIterationCap) {
  const Geometry g(16, 16, 16, 2, 2, 2);
  LocalBlocks ex(g);
  ex.exchange(kSummaryHalo);
  const double bb = ex.sum([](Block& b) { return setup_projection(b); });
  ASSERT_GT(bb, 0);
  Params p;
  p.tol = 1e-12;
  p.max_cg = 3;
  const SolveResult r = solve_pressure(ex, bb, p);
  EXPECT_FALSE(r.converged);
  EXPECT_EQ(r.iterations, 3);
}

TEST(SolverTest, ZeroRightHandSideTakesNoIterations) {
  const Geometry g(8, 8, 8, 1, 1, 1);
  std::vector<Block> all{allocate_block(g, 0)};
  LocalBlocks ex(g, std::move(all));
  const SolveResult r = solve_pressure(ex, 0.0, Params{});
  EXPECT_TRUE(r.converged);
  EXPECT_EQ(r.iterations, 0);
}

}  // namespace
}  // namespace physbam_like
