// physbam_mpi: the physbam-like simulation written by hand on MPI. Each rank owns the
// blocks that Geometry::home_rank gives it; halos go by MPI_Irecv/MPI_Isend between
// blocks on different ranks and by direct copies between blocks on the same rank;
// every reduction is one MPI_Allreduce over a vector with one slot per block, summed
// in block order afterwards, so any number of ranks prints the same summaries.
//
//   mpirun -np 4 build/apps/physbam_like/physbam_mpi --grid=64 --blocks=2 --frames=8
//   mpirun -np 2 build/apps/physbam_like/physbam_mpi --grid=128,128,128 --blocks=4 --json --out=out
#include <mpi.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "physbam_like/block.hpp"
#include "physbam_like/cli.hpp"
#include "physbam_like/driver.hpp"
#include "physbam_like/geometry.hpp"
#include "physbam_like/halo.hpp"
#include "physbam_like/output.hpp"
#include "physbam_like/summary.hpp"

namespace pl = physbam_like;

namespace {

// The Executor over MPI: this rank's blocks, collective calls.
class MpiBlocks {
 public:
  MpiBlocks(const pl::Geometry& g, MPI_Comm comm) : g_(g), comm_(comm), slot_(g.num_blocks(), -1) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
    for (int b = 0; b < g.num_blocks(); ++b) {
      if (owner(b) != rank_) continue;
      slot_[b] = static_cast<int>(blocks_.size());
      blocks_.push_back(pl::make_block(g, b));
    }
    recv_.resize(blocks_.size() * pl::kDirections);
    send_.resize(blocks_.size() * pl::kDirections);
    // Halo tags are receiver block * 26 + direction.
    void* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag);
    const long long tag_ub = flag ? *static_cast<int*>(ub) : 32767;
    if (static_cast<long long>(g.num_blocks()) * pl::kDirections > tag_ub + 1) {
      throw std::invalid_argument(std::to_string(g.num_blocks()) + " blocks need more MPI tags than this MPI's " +
                                  std::to_string(tag_ub));
    }
  }

  int owner(int b) const { return g_.home_rank(b, size_); }
  int rank() const { return rank_; }
  int ranks() const { return size_; }
  std::vector<pl::Block>& blocks() { return blocks_; }

  void exchange(const pl::HaloSpec& spec) {
    requests_.clear();
    const int dirs = spec.directions();
    // Receives first, so that the sends find them posted.
    for (std::size_t s = 0; s < blocks_.size(); ++s) {
      const pl::Block& b = blocks_[s];
      for (int d = 0; d < dirs; ++d) {
        const int n = g_.neighbor(b.index, d);
        if (n < 0 || owner(n) == rank_) continue;
        auto& buf = recv_[s * pl::kDirections + d];
        buf.resize(pl::halo_size(b, spec.mask, d, spec.width));
        requests_.emplace_back();
        MPI_Irecv(buf.data(), static_cast<int>(buf.size()), MPI_DOUBLE, owner(n), b.index * pl::kDirections + d,
                  comm_, &requests_.back());
      }
    }
    const std::size_t receives = requests_.size();
    for (std::size_t s = 0; s < blocks_.size(); ++s) {
      const pl::Block& b = blocks_[s];
      for (int d = 0; d < dirs; ++d) {
        const int n = g_.neighbor(b.index, d);
        if (n < 0 || owner(n) == rank_) continue;
        auto& buf = send_[s * pl::kDirections + d];
        pl::pack_halo(b, spec.mask, d, buf, spec.width);
        requests_.emplace_back();
        MPI_Isend(buf.data(), static_cast<int>(buf.size()), MPI_DOUBLE, owner(n),
                  n * pl::kDirections + pl::opposite(d), comm_, &requests_.back());
      }
    }
    // Neighbours on this rank, while the messages travel.
    for (auto& b : blocks_) {
      for (int d = 0; d < dirs; ++d) {
        const int n = g_.neighbor(b.index, d);
        if (n < 0 || owner(n) != rank_) continue;
        pl::pack_halo(blocks_[slot_[n]], spec.mask, pl::opposite(d), local_, spec.width);
        pl::unpack_halo(b, spec.mask, d, local_, spec.width);
      }
    }
    MPI_Waitall(static_cast<int>(receives), requests_.data(), MPI_STATUSES_IGNORE);
    for (std::size_t s = 0; s < blocks_.size(); ++s) {
      pl::Block& b = blocks_[s];
      for (int d = 0; d < dirs; ++d) {
        const int n = g_.neighbor(b.index, d);
        if (n < 0 || owner(n) == rank_) continue;
        pl::unpack_halo(b, spec.mask, d, recv_[s * pl::kDirections + d], spec.width);
      }
      pl::fill_domain_ghosts(b, spec.mask, spec.width);
    }
    MPI_Waitall(static_cast<int>(requests_.size() - receives), requests_.data() + receives, MPI_STATUSES_IGNORE);
  }

  template <class F> double sum(F&& f) {
    std::vector<double> part(g_.num_blocks(), 0.0);
    for (auto& b : blocks_) part[b.index] = f(b);
    MPI_Allreduce(MPI_IN_PLACE, part.data(), static_cast<int>(part.size()), MPI_DOUBLE, MPI_SUM, comm_);
    return pl::sum_in_block_order(part);
  }

  template <class F> double max(F&& f) {
    double m = 0;
    for (auto& b : blocks_) m = std::max(m, f(b));
    MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, comm_);
    return m;
  }

  template <class F> void each(F&& f) {
    for (auto& b : blocks_) f(b);
  }

  pl::Summary summary() {
    const int n = g_.num_blocks();
    std::vector<double> part(3 * static_cast<std::size_t>(n), 0.0);
    for (const auto& b : blocks_) {
      const pl::Summary s = pl::partial_summary(b);
      part[b.index] = s.kinetic_energy;
      part[n + b.index] = s.divergence_sq;
      part[2 * n + b.index] = s.mass;
    }
    MPI_Allreduce(MPI_IN_PLACE, part.data(), static_cast<int>(part.size()), MPI_DOUBLE, MPI_SUM, comm_);
    std::vector<pl::Summary> per_block(n);
    for (int b = 0; b < n; ++b) per_block[b] = {part[b], part[n + b], part[2 * n + b]};
    return pl::sum_in_block_order(per_block);
  }

  // Every block on rank 0 (u, v, w, s, p; the other fields zero), nothing elsewhere.
  // Collective.
  std::vector<pl::Block> gather_to_root() {
    constexpr pl::Field kSent[] = {pl::kU, pl::kV, pl::kW, pl::kS, pl::kP};
    std::vector<pl::Block> all;
    if (rank_ == 0) {
      all.reserve(g_.num_blocks());
      for (int b = 0; b < g_.num_blocks(); ++b) {
        if (owner(b) == 0) {
          all.push_back(blocks_[slot_[b]]);
          continue;
        }
        all.push_back(pl::allocate_block(g_, b));
        for (int f = 0; f < 5; ++f) {
          auto& v = all.back().field(kSent[f]);
          MPI_Recv(v.data(), static_cast<int>(v.size()), MPI_DOUBLE, owner(b), b * 5 + f, comm_, MPI_STATUS_IGNORE);
        }
      }
    } else {
      for (const auto& blk : blocks_) {
        for (int f = 0; f < 5; ++f) {
          const auto& v = blk.field(kSent[f]);
          MPI_Send(v.data(), static_cast<int>(v.size()), MPI_DOUBLE, 0, blk.index * 5 + f, comm_);
        }
      }
    }
    return all;
  }

 private:
  pl::Geometry g_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<int> slot_;  // block -> index in blocks_, or -1
  std::vector<pl::Block> blocks_;
  std::vector<std::vector<double>> recv_, send_;  // per local block and direction
  std::vector<double> local_;
  std::vector<MPI_Request> requests_;
};

static_assert(pl::Executor<MpiBlocks>);

struct NullBuffer : std::streambuf {
  int overflow(int c) override { return c; }
};

int run(int argc, char** argv) {
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  pl::RunOptions opts;
  CLI::App app{"physbam_mpi: a PhysBAM-style smoke simulation (advection, buoyancy, PCG pressure projection) on "
               "hand-written MPI"};
  pl::add_run_options(app, opts);
  NullBuffer null_buffer;
  std::ostream null_stream(&null_buffer);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : app.exit(e, null_stream, null_stream);
  }

  std::optional<pl::Geometry> geometry;
  try {
    geometry.emplace(pl::make_geometry(opts));
  } catch (const std::invalid_argument& e) {
    if (rank == 0) std::fprintf(stderr, "physbam_mpi: %s\n", e.what());
    return 2;
  }
  const pl::Params& params = opts.params;
  const std::string& out = opts.out;
  const bool json = opts.json, quiet = opts.quiet;
  const pl::Geometry& g = *geometry;
  if (rank == 0 && !out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    if (ec) {
      std::fprintf(stderr, "physbam_mpi: cannot create --out directory %s: %s\n", out.c_str(), ec.message().c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }

  MpiBlocks ex(g, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("physbam_mpi: grid %dx%dx%d, blocks %dx%dx%d (%d), ranks %d, frames %d, tol %g, max-cg %d\n", g.nx(),
                g.ny(), g.nz(), g.blocks(0), g.blocks(1), g.blocks(2), g.num_blocks(), nranks, params.frames,
                params.tol, params.max_cg);
    std::fflush(stdout);
  }
  const std::string h5 = out.empty() ? "" : out + "/fields.h5";
  std::vector<double> frame_seconds;
  long long cg_total = 0, substeps_total = 0;
  for (int f = 1; f <= params.frames; ++f) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    const pl::FrameSummary s = pl::run_frame(ex, g, params, f);
    const double seconds = MPI_Wtime() - t0;
    frame_seconds.push_back(seconds);
    cg_total += s.cg_iterations;
    substeps_total += s.substeps;
    if (rank == 0) {
      std::printf("%s\n", pl::format_summary(s).c_str());
      std::fflush(stdout);
      if (!quiet) {
        std::fprintf(stderr, "physbam_mpi: frame %d/%d done in %.3f s (%d substeps, %d CG iterations)\n", f,
                     params.frames, seconds, s.substeps, s.cg_iterations);
      }
    }
    if (!h5.empty()) {
      const std::vector<pl::Block> all = ex.gather_to_root();
      if (rank == 0) pl::write_frame_hdf5(h5, g, all, f, s.time, f == 1);
      if (rank == 0 && f == params.frames) {
        pl::write_density_slice_png(out + "/density.png", g, all);
        std::printf("physbam_mpi: wrote %s and %s/density.png\n", h5.c_str(), out.c_str());
      }
    }
  }
  if (rank == 0 && json) {
    const auto none = nlohmann::ordered_json::object();
    std::printf("%s\n",
                pl::timing_json("physbam_mpi", none, nranks, g, frame_seconds, substeps_total, cg_total, none).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "physbam_mpi: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
