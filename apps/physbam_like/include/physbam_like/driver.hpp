// physbam_like/driver.hpp — the control flow that every driver follows, written once
// against an Executor (how kernels run on the blocks, how halos move, how partials
// are reduced), plus LocalBlocks, the executor for all blocks in one process.
//
// The loops, as PhysBAM's water benchmark (without particles):
//
//   for frame = 1..frames:                                   (loop 1, fixed count)
//     clock = FrameClock(frame, frame_dt)
//     while !clock.done():                                   (loop 2, data-dependent)
//       exchange kAdvectionHalo        (u v w s, width 3, 26 directions)
//       umax = MAX over blocks of max_speed(b)
//       dt = clock.next_dt(umax, h, cfl)
//       each block: advect(b, dt); velocity_bc(b)
//       exchange kForcesHalo           (u v w s, width 1, 6 faces)
//       each block: add_forces(b, dt, buoyancy)
//       bb = SUM of setup_projection(b)
//       PCG (solve_pressure):                                (loop 3, data-dependent)
//         if bb == 0: no iterations
//         for it = 0 .. max_cg - 1:
//           rho = SUM of precondition(b)
//           beta = cg_beta(it, rho, rho_old)
//           each block: update_search_direction(b, beta)
//           exchange kSearchHalo       (d, width 1, 6 faces)
//           dq = SUM of apply_laplacian(b)
//           alpha = cg_alpha(rho, dq)
//           rr = SUM of update_solution(b, alpha)
//           if cg_converged(rr, bb, tol): iterations = it + 1; stop
//           rho_old = rho
//       exchange kPressureHalo         (p, width 1, 6 faces)
//       each block: apply_pressure_gradient(b)
//     exchange kSummaryHalo            (u v w, width 1, 6 faces)
//     summary = SUM (block order) of partial_summary(b); print format_summary(...)
//
// "exchange" is the complete exchange of halo.hpp, fill_domain_ghosts included; SUM is
// sum_in_block_order over the partials of all blocks; MAX is exact in any order.
#pragma once

#include <algorithm>
#include <concepts>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "physbam_like/block.hpp"
#include "physbam_like/geometry.hpp"
#include "physbam_like/halo.hpp"
#include "physbam_like/kernels.hpp"
#include "physbam_like/summary.hpp"

namespace physbam_like {

struct Params {
  int frames = 4;
  double frame_dt = 1.0 / 24;
  double cfl = kMaxCfl;      // cells a value may travel per substep, in (0, kMaxCfl]
  double tol = 1e-6;         // CG stops when |r| <= tol |b|
  int max_cg = 1000;         // CG iteration cap per solve
  double buoyancy = 4.0;     // upward acceleration per unit density
  int max_substeps = 10000;  // per frame; more is reported as an error
};

// Throws std::invalid_argument naming the bad value and what was expected.
void validate(const Params& p);

// FrameClock
//
// The substep clock of one frame: from (frame - 1) * frame_dt to frame * frame_dt.
// next_dt picks dt = cfl * h / max_speed, takes the rest of the frame when dt would
// reach it (landing exactly on the frame's end), and half the rest when two dt
// would overshoot it, so that the last substep is not a sliver.
class FrameClock {
 public:
  FrameClock(int frame, double frame_dt) : t_((frame - 1) * frame_dt), end_(frame * frame_dt) {}
  bool done() const { return t_ >= end_; }
  double time() const { return t_; }
  // Throws std::runtime_error when max_speed is not finite.
  double next_dt(double max_speed, double h, double cfl);

 private:
  double t_, end_;
};

// The CG scalars; every driver computes them with these, for identical bits.
inline double cg_beta(int iteration, double rho, double rho_old) { return iteration == 0 ? 0.0 : rho / rho_old; }
inline double cg_alpha(double rho, double dq) { return rho / dq; }
inline bool cg_converged(double rr, double bb, double tol) { return rr <= tol * tol * bb; }

// Executor: runs f on every block it holds (each), or on every block with the
// results reduced over all blocks of the job (sum: sum_in_block_order; max), moves
// one HaloSpec's halos and fills domain ghosts (exchange), and reduces
// partial_summary (summary). In a multi-rank executor every call is collective.
template <class E>
concept Executor = requires(E& e, const HaloSpec& spec, double (*f)(Block&), void (*g)(Block&)) {
  e.exchange(spec);
  { e.sum(f) } -> std::same_as<double>;
  { e.max(f) } -> std::same_as<double>;
  e.each(g);
  { e.summary() } -> std::same_as<Summary>;
};

struct SolveResult {
  int iterations = 0;
  bool converged = true;
};

// Loop 3: PCG for the pressure, after setup_projection returned partials summing to bb.
template <Executor E>
SolveResult solve_pressure(E& ex, double bb, const Params& p) {
  if (bb == 0) return {0, true};
  double rho_old = 0;
  for (int it = 0; it < p.max_cg; ++it) {
    const double rho = ex.sum([](Block& b) { return precondition(b); });
    const double beta = cg_beta(it, rho, rho_old);
    ex.each([beta](Block& b) { update_search_direction(b, beta); });
    ex.exchange(kSearchHalo);
    const double dq = ex.sum([](Block& b) { return apply_laplacian(b); });
    const double alpha = cg_alpha(rho, dq);
    const double rr = ex.sum([alpha](Block& b) { return update_solution(b, alpha); });
    if (cg_converged(rr, bb, p.tol)) return {it + 1, true};
    rho_old = rho;
  }
  return {p.max_cg, false};
}

// One substep of loop 2; advances the clock.
template <Executor E>
SolveResult substep(E& ex, FrameClock& clock, const Geometry& g, const Params& p) {
  ex.exchange(kAdvectionHalo);
  const double umax = ex.max([](Block& b) { return max_speed(b); });
  const double dt = clock.next_dt(umax, g.h(), p.cfl);
  ex.each([dt](Block& b) {
    advect(b, dt);
    velocity_bc(b);
  });
  ex.exchange(kForcesHalo);
  const double buoyancy = p.buoyancy;
  ex.each([dt, buoyancy](Block& b) { add_forces(b, dt, buoyancy); });
  const double bb = ex.sum([](Block& b) { return setup_projection(b); });
  const SolveResult solve = solve_pressure(ex, bb, p);
  ex.exchange(kPressureHalo);
  ex.each([](Block& b) { apply_pressure_gradient(b); });
  return solve;
}

// One frame of loop 1 and its summary.
template <Executor E>
FrameSummary run_frame(E& ex, const Geometry& g, const Params& p, int frame) {
  FrameClock clock(frame, p.frame_dt);
  int substeps = 0, iterations = 0, capped = 0;
  while (!clock.done()) {
    if (substeps == p.max_substeps) {
      throw std::runtime_error("physbam_like: frame " + std::to_string(frame) + " needs more than " +
                               std::to_string(p.max_substeps) + " substeps");
    }
    const SolveResult s = substep(ex, clock, g, p);
    ++substeps;
    iterations += s.iterations;
    capped += s.converged ? 0 : 1;
  }
  ex.exchange(kSummaryHalo);
  return make_frame_summary(frame, clock.time(), substeps, iterations, capped, ex.summary());
}

// LocalBlocks
//
// Every block of the geometry in one process, run one after another; halos are
// copied directly. The reference executor, and the one the tests use.
class LocalBlocks {
 public:
  explicit LocalBlocks(const Geometry& g);  // the initial condition, make_block
  LocalBlocks(const Geometry& g, std::vector<Block> blocks);

  const Geometry& geometry() const { return g_; }
  std::vector<Block>& blocks() { return blocks_; }
  const std::vector<Block>& blocks() const { return blocks_; }

  void exchange(const HaloSpec& spec) { exchange_local(blocks_, g_, spec); }
  template <class F> double sum(F&& f) {
    std::vector<double> part(blocks_.size());
    for (std::size_t i = 0; i < blocks_.size(); ++i) part[i] = f(blocks_[i]);
    return sum_in_block_order(part);
  }
  template <class F> double max(F&& f) {
    double m = 0;
    for (auto& b : blocks_) m = std::max(m, f(b));
    return m;
  }
  template <class F> void each(F&& f) {
    for (auto& b : blocks_) f(b);
  }
  Summary summary() const;

 private:
  Geometry g_;
  std::vector<Block> blocks_;
};

}  // namespace physbam_like
