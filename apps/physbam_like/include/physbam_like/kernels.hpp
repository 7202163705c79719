// physbam_like/kernels.hpp — the numerics on one block: pure functions of the block
// and its ghost cells (no communication). Where a reduction follows, a kernel returns
// this block's partial; the driver combines the partials of all blocks in block-index
// order (summary.hpp). Each kernel states which ghost cells it reads; the driver must
// have exchanged them (and called fill_domain_ghosts) first. See driver.hpp for the
// order of the calls.
//
// Thread safety: a kernel touches only its own block; kernels on different blocks may
// run concurrently.
#pragma once

#include "physbam_like/block.hpp"

namespace physbam_like {

// Largest backtrace of advect(), in cells: the CFL number may not exceed it.
inline constexpr double kMaxCfl = 2.0;

// max(|u|, |v|, |w|) over the block's own faces, or +infinity when any of them is
// not finite. Reads no ghosts. Reduce with max.
double max_speed(const Block& b);

// Semi-Lagrangian advection by dt of u, v, w (on their faces) and of the density
// (at cell centres), with a first-order backtrace and trilinear interpolation;
// writes the block's own faces and cells. Reads ghosts of u, v, w, s to width 3
// (kAdvectionHalo). Requires dt * max_speed <= kMaxCfl * h (the backtrace is
// clamped to 2.99 cells). Leaves scratch in r, z, d, q and stale ghosts.
void advect(Block& b, double dt);

// Sets the velocity on the block's own wall faces (u on x = 0, v on y = 0) to 0.
// Reads no ghosts. Call after advect, before the kForcesHalo exchange.
void velocity_bc(Block& b);

// Buoyancy: w += dt * buoyancy * (density averaged onto the w face), on the block's
// own w faces and, where the block has a neighbour above, on the ghost face layer
// k = nz (as that neighbour does for its layer 0, bit for bit), so that
// setup_projection needs no further exchange. Reads ghosts of s and w, faces,
// width 1 (kForcesHalo).
void add_forces(Block& b, double dt, double buoyancy);

// Projection setup: r = b = -(sum of the outward face fluxes u(i+1) - u(i) + ...),
// i.e. -h times the divergence, and x = 0 (the pressure field p). Reads the high
// ghost faces of u, v, w (width 1). Returns this block's b . b.
double setup_projection(Block& b);

// Preconditioned CG on A x = b, with A the 7-point Laplacian times -h^2 (6 on the
// diagonal less one per wall side, plus one on the open bottom), Jacobi preconditioner.
// (a) z = r / diag(A). Reads no ghosts. Returns this block's r . z.
double precondition(Block& b);
// (b) d = z + beta * d; with beta == 0 exactly, d = z (the old d is not read).
void update_search_direction(Block& b, double beta);
// (c) q = A d. Reads ghosts of d, faces, width 1 (kSearchHalo). Returns d . q.
double apply_laplacian(Block& b);
// (d) x += alpha d, r -= alpha q. Returns this block's r . r.
double update_solution(Block& b, double alpha);

// u -= x(i) - x(i - 1) (the pressure gradient, with x in units of velocity) on the
// block's own faces except the walls. Reads the low ghosts of p, faces, width 1
// (kPressureHalo). Leaves the velocity divergence-free to the solver's tolerance.
void apply_pressure_gradient(Block& b);

// Per-block contributions to the frame summary; sum them in block order.
struct Summary {
  double kinetic_energy = 0;  // 1/2 h^3 sum over faces of u^2 + v^2 + w^2
  double divergence_sq = 0;   // h^3 sum over cells of (div u)^2
  double mass = 0;            // h^3 sum over cells of the density
  bool operator==(const Summary&) const = default;
};
// Reads the high ghost faces of u, v, w, width 1 (kSummaryHalo).
Summary partial_summary(const Block& b);

}  // namespace physbam_like
