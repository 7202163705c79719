#include "physbam_like/halo.hpp"

#include <array>
#include <stdexcept>
#include <string>

namespace physbam_like {
namespace {

constexpr std::array<Field, kNumFields> kFieldOrder{kU, kV, kW, kS, kP, kR, kZ, kD, kQ};

struct Range {
  int lo, hi;  // [lo, hi)
};

void check_width(int width) {
  if (width < 1 || width > kGhost) {
    throw std::invalid_argument("physbam_like: halo width " + std::to_string(width) + " is not in 1..3");
  }
}

// The interior slab sent toward direction d (ghost = false) or the ghost slab facing d.
std::array<Range, 3> region(const Block& b, int d, int width, bool ghost) {
  const auto o = direction_offset(d);
  const int n[3] = {b.nx, b.ny, b.nz};
  std::array<Range, 3> r{};
  for (int a = 0; a < 3; ++a) {
    if (o[a] == 0) {
      r[a] = {0, n[a]};
    } else if (o[a] < 0) {
      r[a] = ghost ? Range{-width, 0} : Range{0, width};
    } else {
      r[a] = ghost ? Range{n[a], n[a] + width} : Range{n[a] - width, n[a]};
    }
  }
  return r;
}

std::size_t count(const std::array<Range, 3>& r) {
  return static_cast<std::size_t>(r[0].hi - r[0].lo) * (r[1].hi - r[1].lo) * (r[2].hi - r[2].lo);
}

int fields_in(Fields mask) {
  int n = 0;
  for (Field f : kFieldOrder) n += (mask & f) != 0;
  return n;
}

enum class Rule { kEven, kOdd, kNormalWall, kExtrapolate };

Rule rule_for(Field f, int axis, bool high) {
  const bool open = axis == 2 && !high;  // the bottom
  switch (f) {
    case kU: return axis == 0 ? Rule::kNormalWall : Rule::kEven;
    case kV: return axis == 1 ? Rule::kNormalWall : Rule::kEven;
    case kW: return axis == 2 ? (open ? Rule::kExtrapolate : Rule::kNormalWall) : Rule::kEven;
    case kP:
    case kD: return open ? Rule::kOdd : Rule::kEven;
    default: return Rule::kEven;
  }
}

// Fills `width` ghost layers of one field on one side of one axis, over the whole
// (ghost-including) range of the other two axes.
void fill_side(Block& blk, double* origin, int axis, bool high, Rule rule, int width) {
  const std::ptrdiff_t stride[3] = {1, blk.sx(), blk.sxy()};
  const int n[3] = {blk.nx, blk.ny, blk.nz};
  const int b = axis == 0 ? 1 : 0;  // the faster of the other two axes
  const int c = axis == 2 ? 1 : 2;
  const std::ptrdiff_t sa = stride[axis], sb = stride[b], sc = stride[c];
  const int na = n[axis];
  for (int m = 1; m <= width; ++m) {
    std::ptrdiff_t dst, src;
    double sign = 1;
    bool zero = false;
    if (!high) {
      dst = -m;
      switch (rule) {
        case Rule::kEven: src = m - 1; break;
        case Rule::kOdd: src = m - 1; sign = -1; break;
        case Rule::kNormalWall: src = m; sign = -1; break;
        case Rule::kExtrapolate: src = 0; break;
      }
    } else {
      dst = na - 1 + m;
      switch (rule) {
        case Rule::kEven: src = na - m; break;
        case Rule::kOdd: src = na - m; sign = -1; break;
        case Rule::kNormalWall:  // slot na is the wall face itself
          src = na - (m - 1);
          sign = -1;
          zero = m == 1;
          break;
        case Rule::kExtrapolate: src = na - 1; break;
      }
    }
    for (int ic = -kGhost; ic < n[c] + kGhost; ++ic) {
      double* row = origin + ic * sc;
      for (int ib = -kGhost; ib < n[b] + kGhost; ++ib) {
        double* p = row + ib * sb;
        p[dst * sa] = zero ? 0.0 : sign * p[src * sa];
      }
    }
  }
}

}  // namespace

std::size_t halo_size(const Block& block, Fields mask, int d, int width) {
  check_width(width);
  return count(region(block, d, width, false)) * static_cast<std::size_t>(fields_in(mask));
}

void pack_halo(const Block& block, Fields mask, int d, std::vector<double>& out, int width) {
  check_width(width);
  const auto r = region(block, d, width, false);
  out.resize(count(r) * static_cast<std::size_t>(fields_in(mask)));
  double* o = out.data();
  const int len = r[0].hi - r[0].lo;
  for (Field f : kFieldOrder) {
    if (!(mask & f)) continue;
    const double* src = block.field(f).data();
    for (int k = r[2].lo; k < r[2].hi; ++k) {
      for (int j = r[1].lo; j < r[1].hi; ++j) {
        const double* row = src + block.at(r[0].lo, j, k);
        for (int i = 0; i < len; ++i) *o++ = row[i];
      }
    }
  }
}

void unpack_halo(Block& block, Fields mask, int d, const std::vector<double>& in, int width) {
  check_width(width);
  const auto r = region(block, d, width, true);
  const std::size_t want = count(r) * static_cast<std::size_t>(fields_in(mask));
  if (in.size() != want) {
    throw std::invalid_argument("physbam_like: unpack_halo into block " + std::to_string(block.index) +
                                " toward direction " + std::to_string(d) + ": buffer holds " +
                                std::to_string(in.size()) + " values, expected " + std::to_string(want));
  }
  const double* s = in.data();
  const int len = r[0].hi - r[0].lo;
  for (Field f : kFieldOrder) {
    if (!(mask & f)) continue;
    double* dst = block.field(f).data();
    for (int k = r[2].lo; k < r[2].hi; ++k) {
      for (int j = r[1].lo; j < r[1].hi; ++j) {
        double* row = dst + block.at(r[0].lo, j, k);
        for (int i = 0; i < len; ++i) row[i] = *s++;
      }
    }
  }
}

void fill_domain_ghosts(Block& block, Fields mask, int width) {
  check_width(width);
  // Axis by axis, each over the other axes' ghosts too, so that edges and corners
  // outside the domain get the composed reflection.
  for (int axis = 0; axis < 3; ++axis) {
    for (int high = 0; high <= 1; ++high) {
      if (!on_side(block.sides, 2 * axis + high)) continue;
      for (Field f : kFieldOrder) {
        if (!(mask & f)) continue;
        double* origin = block.field(f).data() + block.at(0, 0, 0);
        fill_side(block, origin, axis, high != 0, rule_for(f, axis, high != 0), width);
      }
    }
  }
}

void exchange_local(std::vector<Block>& blocks, const Geometry& g, const HaloSpec& spec) {
  std::vector<double> buf;
  for (auto& blk : blocks) {
    for (int d = 0; d < spec.directions(); ++d) {
      const int n = g.neighbor(blk.index, d);
      if (n < 0) continue;
      pack_halo(blocks[n], spec.mask, opposite(d), buf, spec.width);
      unpack_halo(blk, spec.mask, d, buf, spec.width);
    }
  }
  for (auto& blk : blocks) fill_domain_ghosts(blk, spec.mask, spec.width);
}

}  // namespace physbam_like
