// Geometry, halos and domain ghosts, and the decomposition: blocks must compute what
// one block computes, bit for bit, when they share the reductions' scalars.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "brisk/core/serialize.hpp"
#include "physbam_like/driver.hpp"
#include "physbam_like/output.hpp"

namespace physbam_like {
namespace {

static_assert(brisk::Serializable<Block>);
static_assert(Executor<LocalBlocks>);

TEST(GeometryTest, DirectionsAndNeighbours) {
  std::set<std::array<int, 3>> seen;
  for (int d = 0; d < kDirections; ++d) {
    const auto o = direction_offset(d);
    seen.insert(o);
    EXPECT_EQ(opposite(opposite(d)), d);
    const auto p = direction_offset(opposite(d));
    EXPECT_EQ(p[0], -o[0]);
    EXPECT_EQ(p[1], -o[1]);
    EXPECT_EQ(p[2], -o[2]);
    EXPECT_EQ(direction_of(o[0], o[1], o[2]), d);
    EXPECT_EQ(std::abs(o[0]) + std::abs(o[1]) + std::abs(o[2]) == 1, d < kFaceDirections);
  }
  EXPECT_EQ(seen.size(), 26u);
  EXPECT_EQ(direction_offset(0), (std::array<int, 3>{-1, 0, 0}));
  EXPECT_EQ(direction_offset(5), (std::array<int, 3>{0, 0, 1}));

  const Geometry g(20, 16, 24, 3, 2, 4);
  EXPECT_EQ(g.num_blocks(), 24);
  int cells = 0;
  for (int b = 0; b < g.num_blocks(); ++b) {
    const auto c = g.block_coords(b);
    EXPECT_EQ(g.block_index(c[0], c[1], c[2]), b);
    const Extent e = g.extent(b);
    cells += e.nx * e.ny * e.nz;
    for (int d = 0; d < kDirections; ++d) {
      const int n = g.neighbor(b, d);
      if (n >= 0) EXPECT_EQ(g.neighbor(n, opposite(d)), b);
    }
  }
  EXPECT_EQ(cells, 20 * 16 * 24);
  EXPECT_EQ(g.neighbor(0, 0), -1);
  EXPECT_EQ(g.neighbor(0, 1), 1);
  EXPECT_EQ(g.neighbor(0, 5), 6);
}

TEST(GeometryTest, HomeRankIsBlocked) {
  const Geometry g(32, 32, 32, 2, 2, 2);
  std::vector<int> owners;
  for (int b = 0; b < 8; ++b) owners.push_back(g.home_rank(b, 3));
  EXPECT_EQ(owners, (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2}));
  for (int b = 0; b < 8; ++b) EXPECT_EQ(g.home_rank(b, 1), 0);
  for (int b = 0; b < 8; ++b) EXPECT_EQ(g.home_rank(b, 8), b);
}

TEST(GeometryTest, BadSizesAreExplained) {
  try {
    Geometry(16, 16, 16, 5, 1, 1);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than 4 cells per block"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Geometry(0, 16, 16, 1, 1, 1), std::invalid_argument);
  EXPECT_THROW(Geometry(16, 16, 16, 1, -1, 1), std::invalid_argument);
  EXPECT_THROW(opposite(26), std::out_of_range);
}

// A smooth function of the global cell index, different per field.
double pattern(Field f, int gi, int gj, int gk) {
  return std::sin(0.37 * gi + 0.11 * static_cast<double>(f)) + 0.5 * std::cos(0.23 * gj) * (1 + 0.1 * gk) +
         0.01 * static_cast<double>(f);
}

std::vector<Block> patterned(const Geometry& g) {
  std::vector<Block> blocks;
  for (int b = 0; b < g.num_blocks(); ++b) {
    Block blk = allocate_block(g, b);
    for (Field f : {kU, kV, kW, kS, kP, kR, kZ, kD, kQ}) {
      auto& v = blk.field(f);
      // Ghosts get garbage, so that an unfilled ghost shows.
      std::fill(v.begin(), v.end(), 1e30);
      for (int k = 0; k < blk.nz; ++k)
        for (int j = 0; j < blk.ny; ++j)
          for (int i = 0; i < blk.nx; ++i) v[blk.at(i, j, k)] = pattern(f, blk.i0 + i, blk.j0 + j, blk.k0 + k);
    }
    blocks.push_back(std::move(blk));
  }
  return blocks;
}

// After a full exchange, every ghost of every block equals the value one block
// covering the whole grid has at the same global place (interior or domain ghost).
void expect_ghosts_match_single_block(const Geometry& many, const HaloSpec& spec) {
  const Geometry one(many.nx(), many.ny(), many.nz(), 1, 1, 1);
  std::vector<Block> single = patterned(one);
  exchange_local(single, one, spec);
  std::vector<Block> blocks = patterned(many);
  exchange_local(blocks, many, spec);
  const Block& s = single[0];
  int checked = 0;
  for (const Block& b : blocks) {
    for (Field f : {kU, kV, kW, kS, kP, kR, kZ, kD, kQ}) {
      if (!(spec.mask & f)) continue;
      for (int k = -spec.width; k < b.nz + spec.width; ++k)
        for (int j = -spec.width; j < b.ny + spec.width; ++j)
          for (int i = -spec.width; i < b.nx + spec.width; ++i) {
            const int out = (i < 0 || i >= b.nx) + (j < 0 || j >= b.ny) + (k < 0 || k >= b.nz);
            if (out == 0 || (spec.faces_only && out > 1)) continue;  // interior, or not carried
            const int gi = b.i0 + i, gj = b.j0 + j, gk = b.k0 + k;
            const double want = s.field(f)[s.at(gi, gj, gk)];
            const double got = b.field(f)[b.at(i, j, k)];
            ASSERT_EQ(got, want) << "field " << f << " block " << b.index << " local (" << i << "," << j << ","
                                 << k << ")";
            ++checked;
          }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(HaloTest, AllGhostsMatchOneBlock) {
  expect_ghosts_match_single_block(Geometry(16, 12, 20, 2, 2, 3), {kAllFields, kGhost, false});
  expect_ghosts_match_single_block(Geometry(13, 9, 11, 3, 2, 2), {kAllFields, kGhost, false});
}

TEST(HaloTest, FaceHalosMatchOneBlock) {
  expect_ghosts_match_single_block(Geometry(16, 12, 20, 2, 2, 3), kSearchHalo);
  expect_ghosts_match_single_block(Geometry(16, 12, 20, 2, 3, 2), kForcesHalo);
}

TEST(HaloTest, PackThenUnpackMovesTheFacingSlab) {
  const Geometry g(8, 8, 8, 2, 1, 1);
  std::vector<Block> blocks = patterned(g);
  std::vector<double> buf;
  pack_halo(blocks[1], kS | kP, opposite(1), buf, 2);  // block 1 is at +x of block 0
  EXPECT_EQ(buf.size(), 2u * 2 * 8 * 8);
  EXPECT_EQ(buf.size(), halo_size(blocks[0], kS | kP, 1, 2));
  unpack_halo(blocks[0], kS | kP, 1, buf, 2);
  EXPECT_EQ(blocks[0].s[blocks[0].at(4, 3, 5)], pattern(kS, 4, 3, 5));
  EXPECT_EQ(blocks[0].p[blocks[0].at(5, 7, 0)], pattern(kP, 5, 7, 0));
  EXPECT_EQ(blocks[0].s[blocks[0].at(6, 0, 0)], 1e30);  // beyond the width
  EXPECT_EQ(blocks[0].u[blocks[0].at(4, 0, 0)], 1e30);  // not in the mask
  buf.pop_back();
  EXPECT_THROW(unpack_halo(blocks[0], kS | kP, 1, buf, 2), std::invalid_argument);
}

TEST(HaloTest, DomainGhostRules) {
  const Geometry g(8, 8, 8, 1, 1, 1);
  std::vector<Block> blocks = patterned(g);
  Block& b = blocks[0];
  fill_domain_ghosts(b, kAllFields);
  // u is odd about the x = 0 wall face and 0 on the x = 1 wall face (ghost slot 8).
  EXPECT_EQ(b.u[b.at(-2, 3, 3)], -b.u[b.at(2, 3, 3)]);
  EXPECT_EQ(b.u[b.at(8, 3, 3)], 0.0);
  EXPECT_EQ(b.u[b.at(10, 3, 3)], -b.u[b.at(6, 3, 3)]);
  // Tangential velocity and density even.
  EXPECT_EQ(b.v[b.at(-1, 3, 3)], b.v[b.at(0, 3, 3)]);
  EXPECT_EQ(b.s[b.at(3, 3, 10)], b.s[b.at(3, 3, 5)]);
  // The open bottom: w extrapolated, pressure and d odd, density even.
  EXPECT_EQ(b.w[b.at(3, 3, -3)], b.w[b.at(3, 3, 0)]);
  EXPECT_EQ(b.p[b.at(3, 3, -1)], -b.p[b.at(3, 3, 0)]);
  EXPECT_EQ(b.d[b.at(3, 3, -2)], -b.d[b.at(3, 3, 1)]);
  EXPECT_EQ(b.s[b.at(3, 3, -1)], b.s[b.at(3, 3, 0)]);
  // The lid: w 0 on its face, odd beyond; pressure even.
  EXPECT_EQ(b.w[b.at(3, 3, 8)], 0.0);
  EXPECT_EQ(b.w[b.at(3, 3, 9)], -b.w[b.at(3, 3, 7)]);
  EXPECT_EQ(b.p[b.at(3, 3, 8)], b.p[b.at(3, 3, 7)]);
  // A corner outside the domain on two axes composes the reflections.
  EXPECT_EQ(b.p[b.at(-1, 3, -1)], -b.p[b.at(0, 3, 0)]);
  EXPECT_EQ(b.u[b.at(-1, -1, 3)], -b.u[b.at(1, 0, 3)]);
}

TEST(BlockTest, SerializesAsAWhole) {
  const Geometry g(16, 16, 16, 2, 2, 2);
  const Block b = make_block(g, 5);
  const auto bytes = brisk::to_bytes(b);
  const Block back = brisk::from_bytes<Block>(bytes);
  EXPECT_EQ(back.index, 5);
  EXPECT_EQ(back.i0, b.i0);
  EXPECT_EQ(back.sides, b.sides);
  EXPECT_EQ(back.h, b.h);
  EXPECT_EQ(back.u, b.u);
  EXPECT_EQ(back.s, b.s);
  EXPECT_EQ(back.q, b.q);
}

TEST(BlockTest, InitialConditionIsIndependentOfTheDecomposition) {
  const Geometry one(16, 20, 24, 1, 1, 1), many(16, 20, 24, 3, 4, 2);
  std::vector<Block> a{make_block(one, 0)}, b;
  for (int i = 0; i < many.num_blocks(); ++i) b.push_back(make_block(many, i));
  for (Field f : {kU, kV, kW, kS}) EXPECT_EQ(gather_field(one, a, f), gather_field(many, b, f)) << f;
  double mass = 0;
  for (double s : gather_field(one, a, kS)) mass += s;
  EXPECT_GT(mass, 10);
}

// An executor that records the reductions of a run, or replays recorded ones (and
// checks that its own agree to roundoff).
class Replaying {
 public:
  Replaying(const Geometry& g, std::vector<double>& log, bool replay) : inner_(g), log_(log), replay_(replay) {}
  void exchange(const HaloSpec& s) { inner_.exchange(s); }
  template <class F> double sum(F&& f) { return next(inner_.sum(f), false); }
  template <class F> double max(F&& f) { return next(inner_.max(f), true); }
  template <class F> void each(F&& f) { inner_.each(f); }
  Summary summary() const { return inner_.summary(); }
  LocalBlocks& inner() { return inner_; }

 private:
  double next(double own, bool exact) {
    if (!replay_) {
      log_.push_back(own);
      return own;
    }
    EXPECT_LT(pos_, log_.size());
    if (pos_ >= log_.size()) return own;
    const double recorded = log_[pos_++];
    if (exact) {
      EXPECT_EQ(own, recorded);
    } else {
      EXPECT_NEAR(own, recorded, 1e-9 * std::abs(recorded) + 1e-300);
    }
    return recorded;
  }
  LocalBlocks inner_;
  std::vector<double>& log_;
  bool replay_;
  std::size_t pos_ = 0;
};
static_assert(Executor<Replaying>);

TEST(DecompositionTest, BlocksMatchOneBlockBitwiseWithSharedScalars) {
  Params p;
  p.frames = 2;
  p.frame_dt = 0.2;  // several substeps per frame
  p.tol = 1e-8;
  for (const auto& dims : {std::array<int, 3>{2, 2, 2}, std::array<int, 3>{3, 1, 4}}) {
    const Geometry one(16, 16, 20, 1, 1, 1);
    const Geometry many(16, 16, 20, dims[0], dims[1], dims[2]);
    std::vector<double> log;
    Replaying a(one, log, false), b(many, log, true);
    int substeps = 0;
    for (int f = 1; f <= p.frames; ++f) {
      const FrameSummary sa = run_frame(a, one, p, f);
      const FrameSummary sb = run_frame(b, many, p, f);
      EXPECT_EQ(sa.substeps, sb.substeps);
      substeps += sa.substeps;
      EXPECT_EQ(sa.cg_iterations, sb.cg_iterations);
      EXPECT_GT(sa.cg_iterations, 5);
      for (Field fld : {kU, kV, kW, kS, kP}) {
        ASSERT_EQ(gather_field(one, a.inner().blocks(), fld), gather_field(many, b.inner().blocks(), fld))
            << "field " << fld << " frame " << f << " blocks " << dims[0] << "x" << dims[1] << "x" << dims[2];
      }
    }
    EXPECT_GE(substeps, 3);
    EXPECT_GT(log.size(), 20u);
  }
}

TEST(DecompositionTest, SummariesAgreeToRoundoffOnTheirOwn) {
  Params p;
  p.frame_dt = 0.05;
  const Geometry one(16, 16, 16, 1, 1, 1), many(16, 16, 16, 2, 2, 2);
  LocalBlocks a(one), b(many);
  for (int f = 1; f <= 2; ++f) {
    const FrameSummary sa = run_frame(a, one, p, f);
    const FrameSummary sb = run_frame(b, many, p, f);
    EXPECT_EQ(sa.substeps, sb.substeps);
    EXPECT_NEAR(sa.cg_iterations, sb.cg_iterations, 1);
    EXPECT_NEAR(sa.kinetic_energy, sb.kinetic_energy, 1e-10 * sa.kinetic_energy);
    EXPECT_NEAR(sa.mass, sb.mass, 1e-10 * sa.mass);
  }
}

TEST(DriverTest, ProjectionRemovesTheDivergence) {
  const Geometry g(16, 16, 16, 2, 2, 2);
  LocalBlocks ex(g);
  ex.exchange(kSummaryHalo);
  const double before = std::sqrt(ex.summary().divergence_sq);
  Params p;
  p.tol = 1e-8;
  const FrameSummary s = run_frame(ex, g, p, 1);
  EXPECT_GT(before, 1e-2);
  EXPECT_LT(s.divergence_l2, 1e-6 * before);
  EXPECT_GT(s.kinetic_energy, 0);
  EXPECT_EQ(s.cg_unconverged, 0);
}

TEST(DriverTest, FrameClockLandsOnTheFrameEnd) {
  FrameClock c(3, 0.1);
  EXPECT_DOUBLE_EQ(c.time(), 0.2);
  EXPECT_DOUBLE_EQ(c.next_dt(1.0, 0.01, 2.0), 0.02);  // cfl h / umax
  double t = 0.2 + 0.02;
  int steps = 1;
  while (!c.done()) {
    const double dt = c.next_dt(1.0, 0.01, 2.0);
    EXPECT_GT(dt, 0.0099);  // half the rest at worst, never a sliver
    EXPECT_LE(dt, 0.02);
    t += dt;
    ++steps;
  }
  EXPECT_EQ(c.time(), 3 * 0.1);  // exactly the frame's end
  EXPECT_NEAR(t, 0.3, 1e-12);
  EXPECT_GE(steps, 5);
  EXPECT_LE(steps, 6);
  FrameClock still(1, 0.5);
  EXPECT_EQ(still.next_dt(0.0, 0.01, 2.0), 0.5);  // no motion: one substep
  EXPECT_TRUE(still.done());
  FrameClock broken(1, 0.5);
  EXPECT_THROW(broken.next_dt(std::nan(""), 0.01, 2.0), std::runtime_error);
  EXPECT_THROW(broken.next_dt(INFINITY, 0.01, 2.0), std::runtime_error);
}

TEST(DriverTest, ParamsAreValidated) {
  Params p;
  EXPECT_NO_THROW(validate(p));
  p.cfl = 2.5;
  EXPECT_THROW(validate(p), std::invalid_argument);
  p = Params{};
  p.tol = 0;
  EXPECT_THROW(validate(p), std::invalid_argument);
  p = Params{};
  p.max_cg = 0;
  EXPECT_THROW(validate(p), std::invalid_argument);
}

TEST(SummaryTest, FormatAndBlockOrder) {
  FrameSummary s;
  s.frame = 3;
  s.time = 0.125;
  s.substeps = 2;
  s.cg_iterations = 40;
  s.kinetic_energy = 0.1;
  s.divergence_l2 = 1e-9;
  s.mass = 2;
  EXPECT_EQ(format_summary(s),
            "frame 3 time 0.125 substeps 2 cg_iterations 40 cg_capped 0 kinetic 0.10000000000000001 "
            "divergence_l2 1.0000000000000001e-09 mass 2");
  // Block order, not a tree: (2^53 + 1) + 1 rounds to 2^53, but (1 + 1) + 2^53 is exact.
  const double big = 9007199254740992.0;
  EXPECT_EQ(sum_in_block_order(std::vector<double>{big, 1.0, 1.0}), big);
  EXPECT_EQ(sum_in_block_order(std::vector<double>{1.0, 1.0, big}), big + 2);
  EXPECT_EQ(std::signbit(sum_in_block_order(std::vector<double>{-0.0})), false);
  const Summary t = sum_in_block_order(std::vector<Summary>{{1, 2, 3}, {4, 5, 6}});
  EXPECT_EQ(t, (Summary{5, 7, 9}));
}

}  // namespace
}  // namespace physbam_like
