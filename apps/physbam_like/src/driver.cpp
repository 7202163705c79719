#include "physbam_like/driver.hpp"

#include <cmath>

namespace physbam_like {

void validate(const Params& p) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (p.frames < 0) bad("frames is " + std::to_string(p.frames) + ", expected 0 or more");
  if (!(p.frame_dt > 0) || !std::isfinite(p.frame_dt)) bad("frame time step must be a positive number");
  if (!(p.cfl > 0) || p.cfl > kMaxCfl) {
    bad("CFL number " + std::to_string(p.cfl) + " is not in (0, " + std::to_string(kMaxCfl) +
        "]: semi-Lagrangian backtraces must stay within the ghost width");
  }
  if (!(p.tol > 0) || !(p.tol < 1)) bad("CG tolerance " + std::to_string(p.tol) + " is not in (0, 1)");
  if (p.max_cg < 1) bad("CG iteration cap " + std::to_string(p.max_cg) + " is not positive");
  if (!std::isfinite(p.buoyancy)) bad("buoyancy must be finite");
  if (p.max_substeps < 1) bad("substep cap " + std::to_string(p.max_substeps) + " is not positive");
}

double FrameClock::next_dt(double max_speed, double h, double cfl) {
  if (!std::isfinite(max_speed)) {
    throw std::runtime_error("physbam_like: the velocity is not finite at time " + std::to_string(t_));
  }
  const double rest = end_ - t_;
  double dt = max_speed > 0 ? cfl * h / max_speed : rest;
  if (dt >= rest) {
    dt = rest;
    t_ = end_;
  } else {
    if (2 * dt > rest) dt = 0.5 * rest;
    t_ += dt;
  }
  return dt;
}

LocalBlocks::LocalBlocks(const Geometry& g) : g_(g) {
  blocks_.reserve(g.num_blocks());
  for (int b = 0; b < g.num_blocks(); ++b) blocks_.push_back(make_block(g, b));
}

LocalBlocks::LocalBlocks(const Geometry& g, std::vector<Block> blocks) : g_(g), blocks_(std::move(blocks)) {
  if (static_cast<int>(blocks_.size()) != g.num_blocks()) {
    throw std::invalid_argument("LocalBlocks: " + std::to_string(blocks_.size()) + " blocks for a geometry of " +
                                std::to_string(g.num_blocks()));
  }
  for (int b = 0; b < g.num_blocks(); ++b) {
    if (blocks_[b].index != b) throw std::invalid_argument("LocalBlocks: blocks must be in block-index order");
  }
}

Summary LocalBlocks::summary() const {
  std::vector<Summary> part;
  part.reserve(blocks_.size());
  for (const auto& b : blocks_) part.push_back(partial_summary(b));
  return sum_in_block_order(part);
}

}  // namespace physbam_like
