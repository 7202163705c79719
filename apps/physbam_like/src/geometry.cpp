#include "physbam_like/geometry.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace physbam_like {
namespace {

struct DirectionTable {
  std::array<std::array<int, 3>, kDirections> offset{};
  std::array<int, kDirections> opposite{};
  std::array<int, 27> by_offset{};  // (ox+1) + 3 (oy+1) + 9 (oz+1) -> d, -1 for (0,0,0)

  DirectionTable() {
    int d = 0;
    // Faces first, then edges, then corners; within a class, x fastest.
    for (int nonzero = 1; nonzero <= 3; ++nonzero) {
      for (int oz = -1; oz <= 1; ++oz) {
        for (int oy = -1; oy <= 1; ++oy) {
          for (int ox = -1; ox <= 1; ++ox) {
            if ((ox != 0) + (oy != 0) + (oz != 0) != nonzero) continue;
            offset[d++] = {ox, oy, oz};
          }
        }
      }
    }
    // The faces in the documented order -x, +x, -y, +y, -z, +z.
    offset[0] = {-1, 0, 0};
    offset[1] = {1, 0, 0};
    offset[2] = {0, -1, 0};
    offset[3] = {0, 1, 0};
    offset[4] = {0, 0, -1};
    offset[5] = {0, 0, 1};
    by_offset.fill(-1);
    for (int e = 0; e < kDirections; ++e) {
      const auto& o = offset[e];
      by_offset[(o[0] + 1) + 3 * (o[1] + 1) + 9 * (o[2] + 1)] = e;
    }
    for (int e = 0; e < kDirections; ++e) {
      const auto& o = offset[e];
      opposite[e] = by_offset[(1 - o[0]) + 3 * (1 - o[1]) + 9 * (1 - o[2])];
    }
  }
};

const DirectionTable& table() {
  static const DirectionTable t;
  return t;
}

void check_direction(int d) {
  if (d < 0 || d >= kDirections) {
    throw std::out_of_range("physbam_like: direction " + std::to_string(d) + " is not in 0..25");
  }
}

}  // namespace

std::array<int, 3> direction_offset(int d) {
  check_direction(d);
  return table().offset[d];
}

int opposite(int d) {
  check_direction(d);
  return table().opposite[d];
}

int direction_of(int ox, int oy, int oz) {
  if (ox < -1 || ox > 1 || oy < -1 || oy > 1 || oz < -1 || oz > 1 || (ox == 0 && oy == 0 && oz == 0)) {
    throw std::out_of_range("physbam_like: no direction with offset (" + std::to_string(ox) + "," +
                            std::to_string(oy) + "," + std::to_string(oz) + ")");
  }
  return table().by_offset[(ox + 1) + 3 * (oy + 1) + 9 * (oz + 1)];
}

Geometry::Geometry(int nx, int ny, int nz, int bx, int by, int bz) : n_{nx, ny, nz}, b_{bx, by, bz} {
  static const char* kAxis[3] = {"x", "y", "z"};
  for (int a = 0; a < 3; ++a) {
    if (n_[a] <= 0) {
      throw std::invalid_argument(std::string("grid size along ") + kAxis[a] + " is " + std::to_string(n_[a]) +
                                  ", expected a positive number of cells");
    }
    if (b_[a] <= 0) {
      throw std::invalid_argument(std::string("block count along ") + kAxis[a] + " is " + std::to_string(b_[a]) +
                                  ", expected a positive number");
    }
    if (n_[a] / b_[a] < 4) {
      throw std::invalid_argument(std::string("grid of ") + std::to_string(n_[a]) + " cells along " + kAxis[a] +
                                  " split into " + std::to_string(b_[a]) +
                                  " blocks leaves fewer than 4 cells per block; expected at most " +
                                  std::to_string(std::max(1, n_[a] / 4)) + " blocks along that axis");
    }
  }
  h_ = 1.0 / std::max({nx, ny, nz});
}

std::array<int, 3> Geometry::block_coords(int b) const {
  if (b < 0 || b >= num_blocks()) {
    throw std::out_of_range("physbam_like: block " + std::to_string(b) + " is not in 0.." +
                            std::to_string(num_blocks() - 1));
  }
  return {b % b_[0], (b / b_[0]) % b_[1], b / (b_[0] * b_[1])};
}

Extent Geometry::extent(int b) const {
  const auto c = block_coords(b);
  std::array<int, 3> lo{}, n{};
  for (int a = 0; a < 3; ++a) {
    lo[a] = static_cast<int>(std::int64_t{c[a]} * n_[a] / b_[a]);
    const int hi = static_cast<int>(std::int64_t{c[a] + 1} * n_[a] / b_[a]);
    n[a] = hi - lo[a];
  }
  return {lo[0], lo[1], lo[2], n[0], n[1], n[2]};
}

int Geometry::neighbor(int b, int d) const {
  const auto c = block_coords(b);
  const auto& o = table().offset.at(d);
  std::array<int, 3> m{};
  for (int a = 0; a < 3; ++a) {
    m[a] = c[a] + o[a];
    if (m[a] < 0 || m[a] >= b_[a]) return -1;
  }
  return block_index(m[0], m[1], m[2]);
}

}  // namespace physbam_like
