// physbam_like/summary.hpp — deterministic reductions and the per-frame summary that
// every driver prints in the same format.
#pragma once

#include <string>
#include <vector>

#include "physbam_like/kernels.hpp"

namespace physbam_like {

// The sum of per-block partials in block-index order, starting from +0.0:
// ((0 + p[0]) + p[1]) + ... . Every driver reduces this way, so all of them (any
// number of ranks, with or without brisk) get the same bits for the same
// decomposition. Under MPI: each rank writes its blocks' partials into a vector of
// nblocks zeros, one MPI_Allreduce(MPI_SUM) over the vector (exact: every entry is
// one partial plus zeros), then this.
double sum_in_block_order(const std::vector<double>& per_block);
Summary sum_in_block_order(const std::vector<Summary>& per_block);

// What a driver prints after each frame.
struct FrameSummary {
  int frame = 0;           // 1-based
  double time = 0;         // simulated time at the end of the frame
  int substeps = 0;        // substeps in the frame
  int cg_iterations = 0;   // CG iterations over the frame's substeps
  int cg_unconverged = 0;  // substeps whose solve stopped at the iteration cap
  double kinetic_energy = 0;
  double divergence_l2 = 0;  // sqrt of the summed divergence_sq
  double mass = 0;
  bool operator==(const FrameSummary&) const = default;
};

FrameSummary make_frame_summary(int frame, double time, int substeps, int cg_iterations, int cg_unconverged,
                                const Summary& total);

// One line, no newline, with every double written as %.17g (so that two lines are
// equal exactly when the values are bitwise equal):
//   frame 3 time 0.125 substeps 4 cg_iterations 212 cg_capped 0 kinetic 0.0123... divergence_l2 1.2e-09 mass 0.0213...
std::string format_summary(const FrameSummary& s);

}  // namespace physbam_like
