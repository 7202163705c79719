#include "physbam_like/summary.hpp"

#include <cmath>
#include <cstdio>

namespace physbam_like {

double sum_in_block_order(const std::vector<double>& per_block) {
  double s = 0.0;
  for (double x : per_block) s += x;
  return s;
}

Summary sum_in_block_order(const std::vector<Summary>& per_block) {
  Summary s;
  for (const auto& x : per_block) {
    s.kinetic_energy += x.kinetic_energy;
    s.divergence_sq += x.divergence_sq;
    s.mass += x.mass;
  }
  return s;
}

FrameSummary make_frame_summary(int frame, double time, int substeps, int cg_iterations, int cg_unconverged,
                                const Summary& total) {
  FrameSummary f;
  f.frame = frame;
  f.time = time;
  f.substeps = substeps;
  f.cg_iterations = cg_iterations;
  f.cg_unconverged = cg_unconverged;
  f.kinetic_energy = total.kinetic_energy;
  f.divergence_l2 = std::sqrt(total.divergence_sq);
  f.mass = total.mass;
  return f;
}

std::string format_summary(const FrameSummary& s) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "frame %d time %.17g substeps %d cg_iterations %d cg_capped %d kinetic %.17g divergence_l2 %.17g "
                "mass %.17g",
                s.frame, s.time, s.substeps, s.cg_iterations, s.cg_unconverged, s.kinetic_energy, s.divergence_l2,
                s.mass);
  return buf;
}

}  // namespace physbam_like
