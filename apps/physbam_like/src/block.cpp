#include "physbam_like/block.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace physbam_like {

std::vector<double>& Block::field(Field f) {
  return const_cast<std::vector<double>&>(static_cast<const Block&>(*this).field(f));
}

const std::vector<double>& Block::field(Field f) const {
  switch (f) {
    case kU: return u;
    case kV: return v;
    case kW: return w;
    case kS: return s;
    case kP: return p;
    case kR: return r;
    case kZ: return z;
    case kD: return d;
    case kQ: return q;
  }
  throw std::invalid_argument("physbam_like: Block::field takes a single Field bit");
}

Block allocate_block(const Geometry& g, int b) {
  const Extent e = g.extent(b);
  Block blk;
  blk.index = b;
  blk.i0 = e.i0;
  blk.j0 = e.j0;
  blk.k0 = e.k0;
  blk.nx = e.nx;
  blk.ny = e.ny;
  blk.nz = e.nz;
  blk.h = g.h();
  blk.sides = 0;
  for (int face = 0; face < kFaceDirections; ++face) {
    if (g.neighbor(b, face) < 0) blk.sides |= 1 << face;
  }
  const std::size_t n = blk.size();
  for (Field f : {kU, kV, kW, kS, kP, kR, kZ, kD, kQ}) blk.field(f).assign(n, 0.0);
  return blk;
}

namespace {

struct Ball {
  double cx, cy, cz, radius;
  double swirl = 10.0;  // angular velocity about the vertical axis
  double rise = 1.0;   // initial upward speed at the centre

  // Smooth bump: 1 at the centre, 0 from the radius on.
  double profile(double x, double y, double z) const {
    const double q2 = ((x - cx) * (x - cx) + (y - cy) * (y - cy) + (z - cz) * (z - cz)) / (radius * radius);
    return q2 < 1 ? (1 - q2) * (1 - q2) : 0.0;
  }
};

}  // namespace

Block make_block(const Geometry& g, int b) {
  Block blk = allocate_block(g, b);
  const double h = g.h();
  const double lx = g.nx() * h, ly = g.ny() * h, lz = g.nz() * h;
  const Ball ball{0.5 * lx, 0.5 * ly, 0.25 * lz, 0.18 * std::min({lx, ly, lz})};
  for (int k = 0; k < blk.nz; ++k) {
    for (int j = 0; j < blk.ny; ++j) {
      for (int i = 0; i < blk.nx; ++i) {
        const std::ptrdiff_t c = blk.at(i, j, k);
        const double x = (blk.i0 + i) * h, y = (blk.j0 + j) * h, z = (blk.k0 + k) * h;  // low corner
        const double xc = x + 0.5 * h, yc = y + 0.5 * h, zc = z + 0.5 * h;              // centre
        blk.s[c] = ball.profile(xc, yc, zc);
        blk.u[c] = -ball.swirl * (yc - ball.cy) * ball.profile(x, yc, zc);
        blk.v[c] = ball.swirl * (xc - ball.cx) * ball.profile(xc, y, zc);
        blk.w[c] = ball.rise * ball.profile(xc, yc, z);
      }
    }
  }
  // The walls' own faces carry no flow.
  if (on_side(blk.sides, 0)) {
    for (int k = 0; k < blk.nz; ++k)
      for (int j = 0; j < blk.ny; ++j) blk.u[blk.at(0, j, k)] = 0;
  }
  if (on_side(blk.sides, 2)) {
    for (int k = 0; k < blk.nz; ++k)
      for (int i = 0; i < blk.nx; ++i) blk.v[blk.at(i, 0, k)] = 0;
  }
  return blk;
}

}  // namespace physbam_like
