// physbam_like/block.hpp — one block of the grid: its fields with ghost cells, and the
// initial condition.
#pragma once

#include <cstddef>
#include <vector>

#include "physbam_like/geometry.hpp"

namespace physbam_like {

// Field bits, combined into a Fields mask (for halos and boundary conditions). The
// fixed order of the bits is the order in which packed halo buffers hold fields.
enum Field : unsigned {
  kU = 1u << 0,  // x-velocity on the low x-face of each cell (MAC grid)
  kV = 1u << 1,  // y-velocity on the low y-face
  kW = 1u << 2,  // z-velocity on the low z-face
  kS = 1u << 3,  // smoke density, cell-centred
  kP = 1u << 4,  // pressure unknown x of the projection, cell-centred
  kR = 1u << 5,  // CG residual r (and the right-hand side b after setup_projection)
  kZ = 1u << 6,  // CG preconditioned residual z
  kD = 1u << 7,  // CG search direction d
  kQ = 1u << 8,  // CG product q = A d
};
using Fields = unsigned;
inline constexpr Fields kVelocity = kU | kV | kW;
inline constexpr Fields kAllFields = kU | kV | kW | kS | kP | kR | kZ | kD | kQ;
inline constexpr int kNumFields = 9;

// Sides of a block that lie on the domain boundary: bit d for face direction d
// (0 -x, 1 +x, 2 -y, 3 +y, 4 -z, 5 +z).
inline constexpr bool on_side(int sides, int face) { return (sides >> face) & 1; }

// Block
//
// The interior cells [0, nx) x [0, ny) x [0, nz) of block `index` plus a ghost layer
// of width kGhost on every side. Each field is one std::vector<double> of
// (nx + 6)(ny + 6)(nz + 6) values, x fastest; at(i, j, k) takes local indices in
// [-3, n + 3). Velocity component u(i, j, k) lives on the face between cells i - 1 and
// i (so global face 0 is the x = 0 wall, and the x = 1 wall is ghost slot nx of the
// last block); v and w likewise. A block owns faces [0, n) along every axis.
//
// After advect() the CG vectors r, z, d, q hold scratch (the old velocity and
// density); they are meaningful only inside a pressure solve.
//
// A plain value: copyable, and serializable as a whole with serialize(ar), which a
// brisk::Writer/Reader (or cereal) accepts.
struct Block {
  int index = -1;
  int i0 = 0, j0 = 0, k0 = 0;  // global index of interior cell (0, 0, 0)
  int nx = 0, ny = 0, nz = 0;
  int sides = 0;                 // domain-boundary sides, see on_side()
  double h = 0;                  // cell size
  std::vector<double> u, v, w, s, p, r, z, d, q;

  std::ptrdiff_t sx() const { return nx + 2 * kGhost; }
  std::ptrdiff_t sxy() const { return sx() * (ny + 2 * kGhost); }
  std::size_t size() const { return static_cast<std::size_t>(sxy() * (nz + 2 * kGhost)); }
  // Offset of local cell (i, j, k), each index in [-3, n + 3).
  std::ptrdiff_t at(int i, int j, int k) const {
    return (i + kGhost) + sx() * (j + kGhost) + sxy() * (k + kGhost);
  }
  // The storage of field f (one bit of Field).
  std::vector<double>& field(Field f);
  const std::vector<double>& field(Field f) const;

  template <class A> void serialize(A& ar) { ar(index, i0, j0, k0, nx, ny, nz, sides, h, u, v, w, s, p, r, z, d, q); }
};

// A block of the geometry with every field zero (ghosts included).
Block allocate_block(const Geometry& g, int b);

// Block b with the initial condition: a ball of smoke (density up to 1) centred at
// (0.5, 0.5, 0.25) of the domain's extent, radius 0.18 of its shortest side, swirling
// about the vertical axis and rising at 1.0; zero elsewhere. Pressure and CG vectors
// are zero. A function of the global position only, so that any decomposition gives
// the same global field.
Block make_block(const Geometry& g, int b);

}  // namespace physbam_like
