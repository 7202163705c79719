// physbam_like/halo.hpp — ghost cells: halo buffers between neighbouring blocks and
// the boundary conditions on the domain's sides.
#pragma once

#include <vector>

#include "physbam_like/block.hpp"
#include "physbam_like/geometry.hpp"

namespace physbam_like {

// HaloSpec
//
// What one ghost exchange carries: the fields, the width (1..kGhost) and the
// directions (all 26, or only the 6 faces). A complete exchange of a spec is: for
// every block b and every direction d of the spec whose neighbour n = neighbor(b, d)
// exists, pack_halo(block n, mask, opposite(d), buf, width) and then
// unpack_halo(block b, mask, d, buf, width); after all of b's halos are unpacked,
// fill_domain_ghosts(block b, mask, width).
struct HaloSpec {
  Fields mask = 0;
  int width = kGhost;
  bool faces_only = false;
  int directions() const { return faces_only ? kFaceDirections : kDirections; }  // d in [0, directions())
};

// The exchanges of one substep (see driver.hpp for where each one goes).
inline constexpr HaloSpec kAdvectionHalo{kU | kV | kW | kS, kGhost, false};  // before max_speed/advect
inline constexpr HaloSpec kForcesHalo{kU | kV | kW | kS, 1, true};          // after advect, before add_forces
inline constexpr HaloSpec kSearchHalo{kD, 1, true};                         // each CG iteration, before apply_laplacian
inline constexpr HaloSpec kPressureHalo{kP, 1, true};                       // after the solve, before apply_pressure_gradient
inline constexpr HaloSpec kSummaryHalo{kU | kV | kW, 1, true};              // end of frame, before partial_summary

// Number of doubles in the halo of `block` toward direction d for these fields.
std::size_t halo_size(const Block& block, Fields mask, int d, int width = kGhost);

// Writes into `out` (resized) the interior cells of `block` that its neighbour in
// direction d needs as ghosts: the slab of `width` cells next to that neighbour, for
// each field of mask in Field bit order, x fastest. Reads interior cells only.
void pack_halo(const Block& block, Fields mask, int d, std::vector<double>& out, int width = kGhost);

// Writes the ghost cells of `block` that face direction d from `in`, which the
// neighbour in direction d packed with pack_halo(neighbour, mask, opposite(d), ...).
// Writes ghost cells only. Throws std::invalid_argument when in.size() is wrong.
void unpack_halo(Block& block, Fields mask, int d, const std::vector<double>& in, int width = kGhost);

// Fills the ghost cells of `block` that lie outside the domain (the first `width`
// layers), for the fields of mask. Call it after every halo of the same fields has
// been unpacked: a ghost outside the domain along one axis may copy a ghost that a
// neighbour sent along another. Rules, by reflection about the wall:
//   walls (x = 0, x = 1, y = 0, y = 1, z = top): the normal velocity is odd about the
//     wall face (and 0 on it), tangential velocities, density and pressure even;
//   the open bottom z = 0: w is extrapolated as constant, u, v and density even, and
//     the pressure and the search direction d odd (pressure 0 on the face).
// Also sets the x = 1, y = 1 and top wall faces (ghost slots nx, ny, nz) to 0.
void fill_domain_ghosts(Block& block, Fields mask, int width = kGhost);

// One halo exchange among blocks held in one process, in the order stated for
// HaloSpec: blocks[i] must be block i of g.
void exchange_local(std::vector<Block>& blocks, const Geometry& g, const HaloSpec& spec);

}  // namespace physbam_like
