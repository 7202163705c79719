// The block kernels. Every loop runs k, j outer and i inner over contiguous memory;
// each kernel works through raw pointers to the block's interior origin, with
// neighbours at offsets +-1 (x), +-sx (y), +-sxy (z).
#include "physbam_like/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

namespace physbam_like {
namespace {

using Index = std::ptrdiff_t;

// Backtraces are clamped just inside the ghost width.
constexpr double kClamp = 2.99;

// Splits t in [-kClamp, kClamp] into an integer offset o and a weight t - o. The
// offset is trunc(t + 4) - 4 (floor for these t, up to rounding of t + 4), which is
// cheaper than std::floor; either way it depends on t alone, not on where the
// block lies, so every decomposition interpolates alike.
inline void split(double t, int& o, double& w) {
  o = static_cast<int>(t + 4.0) - 4;
  w = t - o;
}

// Trilinear interpolation of f at local position (c) - (ax, ay, az) cells, where c is
// the offset of a grid point of f.
inline double interpolate(const double* f, Index c, double ax, double ay, double az, Index sx, Index sxy) {
  int ox, oy, oz;
  double wx, wy, wz;
  split(-std::clamp(ax, -kClamp, kClamp), ox, wx);
  split(-std::clamp(ay, -kClamp, kClamp), oy, wy);
  split(-std::clamp(az, -kClamp, kClamp), oz, wz);
  const double* p = f + c + ox + oy * sx + oz * sxy;
  const double c00 = p[0] + wx * (p[1] - p[0]);
  const double c10 = p[sx] + wx * (p[sx + 1] - p[sx]);
  const double c01 = p[sxy] + wx * (p[sxy + 1] - p[sxy]);
  const double c11 = p[sxy + sx] + wx * (p[sxy + sx + 1] - p[sxy + sx]);
  const double c0 = c00 + wy * (c10 - c00);
  const double c1 = c01 + wy * (c11 - c01);
  return c0 + wz * (c1 - c0);
}

struct Strides {
  Index o, sx, sxy;
  explicit Strides(const Block& b) : o(b.at(0, 0, 0)), sx(b.sx()), sxy(b.sxy()) {}
  Index row(int j, int k) const { return j * sx + k * sxy; }
};

// diag(A) of a cell: 6, less one per wall neighbour, plus one on the open bottom.
inline double row_diagonal(const Block& b, int j, int k) {
  double diag = 6;
  if (j == 0 && on_side(b.sides, 2)) diag -= 1;
  if (j == b.ny - 1 && on_side(b.sides, 3)) diag -= 1;
  if (k == 0 && on_side(b.sides, 4)) diag += 1;
  if (k == b.nz - 1 && on_side(b.sides, 5)) diag -= 1;
  return diag;
}

}  // namespace

double max_speed(const Block& b) {
  const Strides st(b);
  const double* U = b.u.data() + st.o;
  const double* V = b.v.data() + st.o;
  const double* W = b.w.data() + st.o;
  double m = 0;
  bool finite = true;  // a NaN would vanish in std::max: report it as infinity
  for (int k = 0; k < b.nz; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      for (int i = 0; i < b.nx; ++i) {
        const double au = std::abs(U[r + i]), av = std::abs(V[r + i]), aw = std::abs(W[r + i]);
        constexpr double kBig = std::numeric_limits<double>::max();
        finite &= (au <= kBig) & (av <= kBig) & (aw <= kBig);
        m = std::max(m, std::max(au, std::max(av, aw)));
      }
    }
  }
  return finite ? m : std::numeric_limits<double>::infinity();
}

void advect(Block& b, double dt) {
  const Strides st(b);
  const Index sx = st.sx, sxy = st.sxy;
  const double s = dt / b.h;  // cells per unit velocity
  const double s2 = 0.5 * s, s4 = 0.25 * s;
  const double* U = b.u.data() + st.o;
  const double* V = b.v.data() + st.o;
  const double* W = b.w.data() + st.o;
  const double* S = b.s.data() + st.o;
  // The new values go to the CG vectors, which are swapped in at the end.
  double* Un = b.r.data() + st.o;
  double* Vn = b.z.data() + st.o;
  double* Wn = b.d.data() + st.o;
  double* Sn = b.q.data() + st.o;
  for (int k = 0; k < b.nz; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      // u at (i, j + 1/2, k + 1/2): v and w averaged from the four nearest faces.
      for (Index c = r; c < r + b.nx; ++c) {
        const double ax = s * U[c];
        const double ay = s4 * (V[c - 1] + V[c] + V[c - 1 + sx] + V[c + sx]);
        const double az = s4 * (W[c - 1] + W[c] + W[c - 1 + sxy] + W[c + sxy]);
        Un[c] = interpolate(U, c, ax, ay, az, sx, sxy);
      }
      // v at (i + 1/2, j, k + 1/2).
      for (Index c = r; c < r + b.nx; ++c) {
        const double ax = s4 * (U[c] + U[c + 1] + U[c - sx] + U[c + 1 - sx]);
        const double ay = s * V[c];
        const double az = s4 * (W[c - sx] + W[c] + W[c - sx + sxy] + W[c + sxy]);
        Vn[c] = interpolate(V, c, ax, ay, az, sx, sxy);
      }
      // w at (i + 1/2, j + 1/2, k).
      for (Index c = r; c < r + b.nx; ++c) {
        const double ax = s4 * (U[c] + U[c + 1] + U[c - sxy] + U[c + 1 - sxy]);
        const double ay = s4 * (V[c] + V[c + sx] + V[c - sxy] + V[c + sx - sxy]);
        const double az = s * W[c];
        Wn[c] = interpolate(W, c, ax, ay, az, sx, sxy);
      }
      // density at the cell centre.
      for (Index c = r; c < r + b.nx; ++c) {
        const double ax = s2 * (U[c] + U[c + 1]);
        const double ay = s2 * (V[c] + V[c + sx]);
        const double az = s2 * (W[c] + W[c + sxy]);
        Sn[c] = interpolate(S, c, ax, ay, az, sx, sxy);
      }
    }
  }
  std::swap(b.u, b.r);
  std::swap(b.v, b.z);
  std::swap(b.w, b.d);
  std::swap(b.s, b.q);
}

void velocity_bc(Block& b) {
  if (on_side(b.sides, 0)) {
    for (int k = 0; k < b.nz; ++k)
      for (int j = 0; j < b.ny; ++j) b.u[b.at(0, j, k)] = 0;
  }
  if (on_side(b.sides, 2)) {
    for (int k = 0; k < b.nz; ++k)
      for (int i = 0; i < b.nx; ++i) b.v[b.at(i, 0, k)] = 0;
  }
}

void add_forces(Block& b, double dt, double buoyancy) {
  const Strides st(b);
  const double f = dt * buoyancy * 0.5;
  const double* S = b.s.data() + st.o;
  double* W = b.w.data() + st.o;
  // Layer nz is the neighbour's layer 0 when there is one above.
  const int kend = on_side(b.sides, 5) ? b.nz : b.nz + 1;
  for (int k = 0; k < kend; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      for (Index c = r; c < r + b.nx; ++c) W[c] += f * (S[c] + S[c - st.sxy]);
    }
  }
}

double setup_projection(Block& b) {
  const Strides st(b);
  const Index sx = st.sx, sxy = st.sxy;
  const double* U = b.u.data() + st.o;
  const double* V = b.v.data() + st.o;
  const double* W = b.w.data() + st.o;
  double* R = b.r.data() + st.o;
  double* P = b.p.data() + st.o;
  double bb = 0;
  for (int k = 0; k < b.nz; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      for (Index c = r; c < r + b.nx; ++c) {
        const double flux = (U[c + 1] - U[c]) + (V[c + sx] - V[c]) + (W[c + sxy] - W[c]);
        R[c] = -flux;
        P[c] = 0;
        bb += flux * flux;
      }
    }
  }
  return bb;
}

double precondition(Block& b) {
  const Strides st(b);
  const double* R = b.r.data() + st.o;
  double* Z = b.z.data() + st.o;
  const bool lo = on_side(b.sides, 0), hi = on_side(b.sides, 1);
  double rz = 0;
  for (int k = 0; k < b.nz; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      const double diag = row_diagonal(b, j, k);
      const double inv = 1.0 / diag;
      for (Index c = r; c < r + b.nx; ++c) Z[c] = R[c] * inv;
      // The cells next to the x walls have one neighbour fewer.
      if (lo) Z[r] = R[r] * (1.0 / (diag - 1));
      if (hi) Z[r + b.nx - 1] = R[r + b.nx - 1] * (1.0 / (diag - 1));
      for (Index c = r; c < r + b.nx; ++c) rz += R[c] * Z[c];
    }
  }
  return rz;
}

void update_search_direction(Block& b, double beta) {
  const Strides st(b);
  const double* Z = b.z.data() + st.o;
  double* D = b.d.data() + st.o;
  for (int k = 0; k < b.nz; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      if (beta == 0) {
        for (Index c = r; c < r + b.nx; ++c) D[c] = Z[c];
      } else {
        for (Index c = r; c < r + b.nx; ++c) D[c] = Z[c] + beta * D[c];
      }
    }
  }
}

double apply_laplacian(Block& b) {
  const Strides st(b);
  const Index sx = st.sx, sxy = st.sxy;
  const double* D = b.d.data() + st.o;
  double* Q = b.q.data() + st.o;
  double dq = 0;
  for (int k = 0; k < b.nz; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      for (Index c = r; c < r + b.nx; ++c) {
        const double q = 6 * D[c] - ((D[c - 1] + D[c + 1]) + (D[c - sx] + D[c + sx]) + (D[c - sxy] + D[c + sxy]));
        Q[c] = q;
        dq += D[c] * q;
      }
    }
  }
  return dq;
}

double update_solution(Block& b, double alpha) {
  const Strides st(b);
  const double* D = b.d.data() + st.o;
  const double* Q = b.q.data() + st.o;
  double* P = b.p.data() + st.o;
  double* R = b.r.data() + st.o;
  double rr = 0;
  for (int k = 0; k < b.nz; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      for (Index c = r; c < r + b.nx; ++c) {
        P[c] += alpha * D[c];
        R[c] -= alpha * Q[c];
        rr += R[c] * R[c];
      }
    }
  }
  return rr;
}

void apply_pressure_gradient(Block& b) {
  const Strides st(b);
  const Index sx = st.sx, sxy = st.sxy;
  const double* P = b.p.data() + st.o;
  double* U = b.u.data() + st.o;
  double* V = b.v.data() + st.o;
  double* W = b.w.data() + st.o;
  const int i_first = on_side(b.sides, 0) ? 1 : 0;  // the x = 0 wall face stays 0
  const int j_first = on_side(b.sides, 2) ? 1 : 0;  // the y = 0 wall face stays 0
  for (int k = 0; k < b.nz; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      for (Index c = r + i_first; c < r + b.nx; ++c) U[c] -= P[c] - P[c - 1];
      if (j >= j_first) {
        for (Index c = r; c < r + b.nx; ++c) V[c] -= P[c] - P[c - sx];
      }
      for (Index c = r; c < r + b.nx; ++c) W[c] -= P[c] - P[c - sxy];
    }
  }
}

Summary partial_summary(const Block& b) {
  const Strides st(b);
  const Index sx = st.sx, sxy = st.sxy;
  const double* U = b.u.data() + st.o;
  const double* V = b.v.data() + st.o;
  const double* W = b.w.data() + st.o;
  const double* S = b.s.data() + st.o;
  double ke = 0, div = 0, mass = 0;
  for (int k = 0; k < b.nz; ++k) {
    for (int j = 0; j < b.ny; ++j) {
      const Index r = st.row(j, k);
      for (Index c = r; c < r + b.nx; ++c) {
        ke += U[c] * U[c] + V[c] * V[c] + W[c] * W[c];
        const double flux = (U[c + 1] - U[c]) + (V[c + sx] - V[c]) + (W[c + sxy] - W[c]);
        div += flux * flux;
        mass += S[c];
      }
    }
  }
  const double h3 = b.h * b.h * b.h;
  return {0.5 * h3 * ke, b.h * div, h3 * mass};  // (flux / h)^2 h^3 = flux^2 h
}

}  // namespace physbam_like
