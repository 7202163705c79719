// physbam_like/geometry.hpp — the global grid, its partition into blocks, and the
// 26 neighbour directions between blocks.
#pragma once

#include <array>
#include <cstdint>

namespace physbam_like {

// Ghost width of every block: semi-Lagrangian backtraces reach up to 3 cells.
inline constexpr int kGhost = 3;
// Directions between blocks: 0..5 are the faces (-x, +x, -y, +y, -z, +z), 6..17 the
// edges, 18..25 the corners. kFaceDirections of them are faces.
inline constexpr int kDirections = 26;
inline constexpr int kFaceDirections = 6;

// The offset (-1, 0 or +1 per axis) of direction d in 0..25.
std::array<int, 3> direction_offset(int d);
// The direction with the negated offset: opposite(0) == 1, opposite(opposite(d)) == d.
int opposite(int d);
// The direction with this offset (not all zero).
int direction_of(int ox, int oy, int oz);

// Where one block's interior lies in the global grid.
struct Extent {
  int i0 = 0, j0 = 0, k0 = 0;  // global index of the block's first interior cell
  int nx = 0, ny = 0, nz = 0;  // interior cells per axis
};

// Geometry
//
// A grid of NX x NY x NZ cubic cells of size h = 1 / max(NX, NY, NZ), so that the
// longest side of the domain is 1, split into BX x BY x BZ blocks. Block b has
// coordinates (bi, bj, bk) with b = bi + BX * (bj + BY * bk); along each axis block
// bi covers cells [bi * NX / BX, (bi + 1) * NX / BX), so blocks differ by at most one
// cell per axis. Every block must have at least 4 cells per axis (the ghost width is
// 3, and the wall rule for normal velocities reads the fourth cell).
//
// The domain is a box with solid walls on five sides and an open bottom (z = 0),
// where the pressure is 0 (Dirichlet): see halo.hpp for the boundary rules.
// Immutable and cheap to copy.
class Geometry {
 public:
  // Throws std::invalid_argument naming the bad value when a size or block count is
  // not positive or a block would have fewer than 4 cells along some axis.
  Geometry(int nx, int ny, int nz, int bx, int by, int bz);

  int nx() const { return n_[0]; }
  int ny() const { return n_[1]; }
  int nz() const { return n_[2]; }
  int cells(int axis) const { return n_[axis]; }
  int blocks(int axis) const { return b_[axis]; }
  int num_blocks() const { return b_[0] * b_[1] * b_[2]; }
  std::int64_t num_cells() const { return std::int64_t{n_[0]} * n_[1] * n_[2]; }
  double h() const { return h_; }

  std::array<int, 3> block_coords(int b) const;
  int block_index(int bi, int bj, int bk) const { return bi + b_[0] * (bj + b_[1] * bk); }
  Extent extent(int b) const;

  // The block next to b in direction d, or -1 where that is outside the domain.
  int neighbor(int b, int d) const;

  // The rank that owns block b among nranks: blocked placement b * nranks / nblocks,
  // so consecutive blocks share a rank. Requires 0 <= b < num_blocks(), nranks >= 1.
  int home_rank(int b, int nranks) const {
    return static_cast<int>(std::int64_t{b} * nranks / num_blocks());
  }

  bool operator==(const Geometry&) const = default;

 private:
  std::array<int, 3> n_{};
  std::array<int, 3> b_{};
  double h_ = 0;
};

}  // namespace physbam_like
