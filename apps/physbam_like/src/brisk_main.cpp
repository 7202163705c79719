// physbam_brisk: the physbam-like simulation on brisk data objects, with execution
// templates (the default) or without (--brisk-templates=off): the same kernels and
// the same reductions as physbam_mpi, so both print identical frame summaries.
//
//   mpirun -np 2 --bind-to none build/apps/physbam_like/physbam_brisk --grid=64 --blocks=2 --frames=4
//   mpirun -np 2 --bind-to none build/apps/physbam_like/physbam_brisk --brisk-templates=off --json
//
// Data objects: the blocks (one partition per block, on Geometry::home_rank), the halo
// buffers (one partition per block and direction, written by the block's pack task
// and read by the neighbour's unpack), one partial per block for each reduction, one
// vector of partials per rank, and the solver's scalars, one copy per rank. A
// reduction is an allreduce made of tasks: each rank gathers its blocks' partials
// into a vector with one slot per block (zeros elsewhere), every rank reads every
// rank's vector, adds them (adding zeros is exact) and sums in block order, as
// physbam_mpi does; both tasks are declared runs_inline, so no hand-off to a worker
// lengthens the reduction. The scalars (beta, alpha, converged) are then local on every
// rank, so only the loops' branches go through the driver, and the CG loop keeps one
// iteration in flight ahead of its branch: an iteration issued after convergence
// finds `converged` set and leaves everything as it is.
//
// Templates, each instantiated by the driver's loops:
//   begin    (per substep)   advection halo (26 directions, width 3); max_speed; MAX
//   project  (dt)            advect + velocity_bc + pack the forces halo; add_forces +
//                            setup_projection; SUM -> bb, solver reset
//   cg       (per iteration) precondition, SUM rho, beta; search direction + pack d;
//                            A d, SUM dq, alpha; update x and r, SUM rr, converged?
//   finish   (per substep)   pressure halo; apply_pressure_gradient
//   summary  (per frame)     summary halo; partial_summary; SUM
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "brisk/brisk.hpp"
#include "physbam_like/block.hpp"
#include "physbam_like/cli.hpp"
#include "physbam_like/driver.hpp"
#include "physbam_like/geometry.hpp"
#include "physbam_like/halo.hpp"
#include "physbam_like/kernels.hpp"
#include "physbam_like/output.hpp"
#include "physbam_like/summary.hpp"

namespace pl = physbam_like;

namespace {

// The solver's scalars (one partition, on rank 0).
struct Scalars {
  double umax = 0, bb = 0, rho = 0, rho_old = 0, beta = 0, alpha = 0, rr = 0, tol = 0;
  int it = 0;
  bool converged = false;
  template <class A>
  void serialize(A& a) {
    a(umax, bb, rho, rho_old, beta, alpha, rr, tol, it, converged);
  }
};

using Partial = double;
// Per-rank data sets are recomputed every step: kept out of checkpoints, so that a
// run can restart on another number of ranks.
constexpr brisk::DataSetOptions kScratch{.checkpoint = false};
using RankPartials = std::vector<double>;  // one slot per block
using SummaryPart = std::array<double, 3>;  // kinetic energy, divergence squared, mass

// Which halo: an index into kSpecs.
enum HaloKind : int { kAdvection = 0, kForces = 1, kSearch = 2, kPressure = 3, kSummaryH = 4 };
constexpr pl::HaloSpec kSpecs[] = {pl::kAdvectionHalo, pl::kForcesHalo, pl::kSearchHalo, pl::kPressureHalo,
                                   pl::kSummaryHalo};

// What a per-block task needs to know: its block, the halo concerned and the
// directions in which the block has a neighbour (bit d), in the order its halo
// accesses were declared.
struct BlockArgs {
  int block = 0;
  int halo = 0;
  std::uint32_t dirs = 0;
  double buoyancy = 0;
  template <class A>
  void serialize(A& a) {
    a(block, halo, dirs, buoyancy);
  }
};

struct GeometryArgs {
  int n[3] = {}, b[3] = {};
  int block = 0;
  template <class A>
  void serialize(A& a) {
    a(n, b, block);
  }
};

struct Dt {
  double dt = 0;
  template <class A>
  void serialize(A& a) {
    a(dt);
  }
};

// Unpacks the halo accesses [first, ...) of `t` into `b` for the directions in
// args.dirs, then fills the domain ghosts.
void unpack_all(brisk::DataTask& t, pl::Block& b, const BlockArgs& args, std::size_t first) {
  const pl::HaloSpec& spec = kSpecs[args.halo];
  std::size_t i = first;
  for (int d = 0; d < spec.directions(); ++d) {
    if (!(args.dirs >> d & 1u)) continue;
    pl::unpack_halo(b, spec.mask, d, t.read<std::vector<double>>(i++), spec.width);
  }
  pl::fill_domain_ghosts(b, spec.mask, spec.width);
}

// Packs what each neighbour needs into the halo accesses [first, ...).
void pack_all(brisk::DataTask& t, const pl::Block& b, const BlockArgs& args, std::size_t first) {
  const pl::HaloSpec& spec = kSpecs[args.halo];
  std::size_t i = first;
  for (int d = 0; d < spec.directions(); ++d) {
    if (!(args.dirs >> d & 1u)) continue;
    pl::pack_halo(b, spec.mask, d, t.write<std::vector<double>>(i++), spec.width);
  }
}

// --- the data tasks -----------------------------------------------------------

void init_block(brisk::DataTask& t) {
  const auto a = t.args<GeometryArgs>();
  const pl::Geometry g(a.n[0], a.n[1], a.n[2], a.b[0], a.b[1], a.b[2]);
  t.write<pl::Block>(0) = pl::make_block(g, a.block);
}
BRISK_DATA_TASK(init_block);

// block (read), halos (write).
void pack(brisk::DataTask& t) { pack_all(t, t.read<pl::Block>(0), t.args<BlockArgs>(), 1); }
BRISK_DATA_TASK(pack);

// block (update), umax partial (write), halos (read).
void unpack_speed(brisk::DataTask& t) {
  pl::Block& b = t.write<pl::Block>(0);
  unpack_all(t, b, t.args<BlockArgs>(), 2);
  t.write<Partial>(1) = pl::max_speed(b);
}
BRISK_DATA_TASK(unpack_speed);

// rank partials (write), this rank's block partials (read); args: their blocks and
// the block count.
void gather_partials(brisk::DataTask& t) {
  const auto [blocks, nb] = t.args<std::pair<std::vector<int>, int>>();
  RankPartials& out = t.write<RankPartials>(0);
  out.assign(static_cast<std::size_t>(nb), 0.0);
  for (std::size_t i = 0; i < blocks.size(); ++i) out[static_cast<std::size_t>(blocks[i])] = t.read<Partial>(i + 1);
}
BRISK_DATA_TASK(gather_partials);

// Every rank's partials (accesses [first, ...)), slot by slot.
std::vector<double> all_partials(brisk::DataTask& t, std::size_t first) {
  std::vector<double> sum = t.read<RankPartials>(first);
  for (std::size_t i = first + 1; i < t.accesses(); ++i) {
    const RankPartials& p = t.read<RankPartials>(i);
    for (std::size_t b = 0; b < sum.size(); ++b) sum[b] += p[b];
  }
  return sum;
}

// scalars (update), rank partials (read): umax = MAX.
void reduce_max(brisk::DataTask& t) {
  double m = 0;
  for (double x : all_partials(t, 1)) m = std::max(m, x);
  t.write<Scalars>(0).umax = m;
}
BRISK_DATA_TASK(reduce_max);

// block (update), forces halos (write): advect, boundary conditions, pack.
void advect_pack(brisk::DataTask& t) {
  pl::Block& b = t.write<pl::Block>(0);
  const double dt = t.params<Dt>().dt;
  pl::advect(b, dt);
  pl::velocity_bc(b);
  pack_all(t, b, t.args<BlockArgs>(), 1);
}
BRISK_DATA_TASK(advect_pack);

// block (update), bb partial (write), forces halos (read).
void forces_setup(brisk::DataTask& t) {
  pl::Block& b = t.write<pl::Block>(0);
  const auto args = t.args<BlockArgs>();
  unpack_all(t, b, args, 2);
  pl::add_forces(b, t.params<Dt>().dt, args.buoyancy);
  t.write<Partial>(1) = pl::setup_projection(b);
}
BRISK_DATA_TASK(forces_setup);

// scalars (update), rank partials (read): the solver starts.
void reduce_bb(brisk::DataTask& t) {
  Scalars& s = t.write<Scalars>(0);
  s.bb = pl::sum_in_block_order(all_partials(t, 1));
  s.it = 0;
  s.rho = s.rho_old = s.beta = s.alpha = s.rr = 0;
  s.converged = s.bb == 0;
  s.tol = t.args<double>();
}
BRISK_DATA_TASK(reduce_bb);

// Every CG task reads its rank's scalars first and does nothing once the solve has
// converged (the iteration issued ahead of the branch).

// block (update), rho partial (write), scalars (read).
void cg_precondition(brisk::DataTask& t) {
  if (t.read<Scalars>(2).converged) return;
  t.write<Partial>(1) = pl::precondition(t.write<pl::Block>(0));
}
BRISK_DATA_TASK(cg_precondition);

// scalars (update), rank partials (read).
void reduce_rho(brisk::DataTask& t) {
  Scalars& s = t.write<Scalars>(0);
  if (s.converged) return;
  s.rho = pl::sum_in_block_order(all_partials(t, 1));
  s.beta = pl::cg_beta(s.it, s.rho, s.rho_old);
}
BRISK_DATA_TASK(reduce_rho);

// block (update), scalars (read), d halos (write).
void cg_search(brisk::DataTask& t) {
  const Scalars& s = t.read<Scalars>(1);
  if (s.converged) return;
  pl::Block& b = t.write<pl::Block>(0);
  pl::update_search_direction(b, s.beta);
  pack_all(t, b, t.args<BlockArgs>(), 2);
}
BRISK_DATA_TASK(cg_search);

// block (update), dq partial (write), scalars (read), d halos (read).
void cg_laplacian(brisk::DataTask& t) {
  if (t.read<Scalars>(2).converged) return;
  pl::Block& b = t.write<pl::Block>(0);
  unpack_all(t, b, t.args<BlockArgs>(), 3);
  t.write<Partial>(1) = pl::apply_laplacian(b);
}
BRISK_DATA_TASK(cg_laplacian);

// scalars (update), rank partials (read).
void reduce_alpha(brisk::DataTask& t) {
  Scalars& s = t.write<Scalars>(0);
  if (s.converged) return;
  s.alpha = pl::cg_alpha(s.rho, pl::sum_in_block_order(all_partials(t, 1)));
}
BRISK_DATA_TASK(reduce_alpha);

// block (update), scalars (read), rr partial (write).
void cg_update(brisk::DataTask& t) {
  const Scalars& s = t.read<Scalars>(1);
  if (s.converged) return;
  t.write<Partial>(2) = pl::update_solution(t.write<pl::Block>(0), s.alpha);
}
BRISK_DATA_TASK(cg_update);

// scalars (update), rank partials (read): the branch the driver reads.
void reduce_rr(brisk::DataTask& t) {
  Scalars& s = t.write<Scalars>(0);
  if (s.converged) return;
  s.rr = pl::sum_in_block_order(all_partials(t, 1));
  s.converged = pl::cg_converged(s.rr, s.bb, s.tol);
  s.rho_old = s.rho;
  ++s.it;
}
BRISK_DATA_TASK(reduce_rr);

// block (update), pressure halos (read).
void pressure_gradient(brisk::DataTask& t) {
  pl::Block& b = t.write<pl::Block>(0);
  unpack_all(t, b, t.args<BlockArgs>(), 1);
  pl::apply_pressure_gradient(b);
}
BRISK_DATA_TASK(pressure_gradient);

// block (update), summary partial (write), summary halos (read).
void summarize(brisk::DataTask& t) {
  pl::Block& b = t.write<pl::Block>(0);
  unpack_all(t, b, t.args<BlockArgs>(), 2);
  const pl::Summary s = pl::partial_summary(b);
  t.write<SummaryPart>(1) = {s.kinetic_energy, s.divergence_sq, s.mass};
}
BRISK_DATA_TASK(summarize);

// total (write), summary partials (read).
void reduce_summary(brisk::DataTask& t) {
  std::vector<pl::Summary> per_block;
  for (std::size_t i = 1; i < t.accesses(); ++i) {
    const SummaryPart& p = t.read<SummaryPart>(i);
    per_block.push_back({p[0], p[1], p[2]});
  }
  const pl::Summary s = pl::sum_in_block_order(per_block);
  t.write<SummaryPart>(0) = {s.kinetic_energy, s.divergence_sq, s.mass};
}
BRISK_DATA_TASK(reduce_summary);

// --- the simulation -----------------------------------------------------------

std::vector<int> homes(const pl::Geometry& g, int ranks, int per_block) {
  std::vector<int> h;
  for (int b = 0; b < g.num_blocks(); ++b) {
    for (int k = 0; k < per_block; ++k) h.push_back(g.home_rank(b, ranks));
  }
  return h;
}

class Simulation {
 public:
  Simulation(const pl::Geometry& g, const pl::Params& p)
      : g_(g),
        p_(p),
        nb_(g.num_blocks()),
        blocks_("physbam.blocks", nb(), brisk::Placement::on(homes(g, brisk::data_ranks(), 1))),
        halos_("physbam.halos", nb() * pl::kDirections, brisk::Placement::on(homes(g, brisk::data_ranks(), pl::kDirections))),
        umax_("physbam.umax", nb(), brisk::Placement::on(homes(g, brisk::data_ranks(), 1))),
        bb_("physbam.bb", nb(), brisk::Placement::on(homes(g, brisk::data_ranks(), 1))),
        rho_("physbam.rho", nb(), brisk::Placement::on(homes(g, brisk::data_ranks(), 1))),
        dq_("physbam.dq", nb(), brisk::Placement::on(homes(g, brisk::data_ranks(), 1))),
        rr_("physbam.rr", nb(), brisk::Placement::on(homes(g, brisk::data_ranks(), 1))),
        parts_("physbam.summary_parts", nb(), brisk::Placement::on(homes(g, brisk::data_ranks(), 1))),
        rp_umax_("physbam.rp.umax", ranks(), brisk::Placement::cyclic(), kScratch),
        rp_bb_("physbam.rp.bb", ranks(), brisk::Placement::cyclic(), kScratch),
        rp_rho_("physbam.rp.rho", ranks(), brisk::Placement::cyclic(), kScratch),
        rp_dq_("physbam.rp.dq", ranks(), brisk::Placement::cyclic(), kScratch),
        rp_rr_("physbam.rp.rr", ranks(), brisk::Placement::cyclic(), kScratch),
        scalars_("physbam.scalars", ranks(), brisk::Placement::cyclic(), kScratch),
        total_("physbam.summary", 1, brisk::Placement::on({0})),
        begin_(brisk::record<int>("begin", [this](const int&) { record_begin(); })),
        project_(brisk::record<Dt>("project", [this](const Dt&) { record_project(); })),
        cg_(brisk::record<int>("cg", [this](const int&) { record_cg(); })),
        finish_(brisk::record<int>("finish", [this](const int&) { record_finish(); })),
        summary_(brisk::record<int>("summary", [this](const int&) { record_summary(); })) {
    for (int b = 0; b < nb_; ++b) blocks_of_[static_cast<std::size_t>(g.home_rank(b, brisk::data_ranks()))].push_back(b);
    if (blocks_.restored()) return;  // the blocks come from a checkpoint
    for (int b = 0; b < nb_; ++b) {
      GeometryArgs a;
      for (int x = 0; x < 3; ++x) {
        a.n[x] = g.cells(x);
        a.b[x] = g.blocks(x);
      }
      a.block = b;
      brisk::data_task(init_block).writes(blocks_, static_cast<std::size_t>(b)).args(a).submit();
    }
  }

  pl::FrameSummary frame(int f) {
    pl::FrameClock clock(f, p_.frame_dt);
    int substeps = 0, iterations = 0, capped = 0;
    while (!clock.done()) {
      if (substeps == p_.max_substeps) {
        throw std::runtime_error("physbam_like: frame " + std::to_string(f) + " needs more than " +
                                 std::to_string(p_.max_substeps) + " substeps");
      }
      begin_.instantiate(0);
      const double dt = clock.next_dt(scalars_.fetch(0).umax, g_.h(), p_.cfl);
      project_.instantiate(Dt{dt});
      Scalars s = scalars_.fetch(0);
      if (!s.converged) {
        // One iteration in flight ahead of the branch: iteration it + 1 is issued
        // before the driver reads whether iteration it converged.
        cg_.instantiate(0);
        brisk::DataFuture<Scalars> after = scalars_.fetch_async(0);
        for (int it = 0;; ++it) {
          const bool more = it + 1 < p_.max_cg;
          brisk::DataFuture<Scalars> next;
          if (more) {
            cg_.instantiate(it + 1);
            next = scalars_.fetch_async(0);
          }
          s = after.get();
          if (s.converged || !more) break;
          after = std::move(next);
        }
      }
      iterations += s.it;
      capped += s.converged ? 0 : 1;
      finish_.instantiate(0);
      ++substeps;
    }
    summary_.instantiate(0);
    const SummaryPart t = total_.fetch(0);
    return pl::make_frame_summary(f, clock.time(), substeps, iterations, capped, pl::Summary{t[0], t[1], t[2]});
  }

  // Every block, fetched to the driver.
  std::vector<pl::Block> gather() {
    std::vector<pl::Block> all;
    for (int b = 0; b < nb_; ++b) all.push_back(blocks_.fetch(static_cast<std::size_t>(b)));
    return all;
  }

  std::size_t tasks_per_cg_iteration() const { return cg_.tasks(); }

 private:
  std::size_t nb() const { return static_cast<std::size_t>(nb_); }
  static std::size_t ranks() { return static_cast<std::size_t>(brisk::data_ranks()); }
  std::size_t halo(int b, int d) const { return static_cast<std::size_t>(b * pl::kDirections + d); }

  BlockArgs args(int b, int kind) const {
    BlockArgs a;
    a.block = b;
    a.halo = kind;
    a.buoyancy = p_.buoyancy;
    for (int d = 0; d < kSpecs[kind].directions(); ++d) {
      if (g_.neighbor(b, d) >= 0) a.dirs |= 1u << d;
    }
    return a;
  }
  // Declares the halos block b sends (writes) for `kind`.
  void sends(brisk::DataTaskBuilder& t, int b, int kind) {
    for (int d = 0; d < kSpecs[kind].directions(); ++d) {
      if (g_.neighbor(b, d) >= 0) t.writes(halos_, halo(b, d));
    }
  }
  // Declares the halos block b receives (reads) for `kind`: its neighbour's buffer
  // packed for the opposite direction.
  void receives(brisk::DataTaskBuilder& t, int b, int kind) {
    for (int d = 0; d < kSpecs[kind].directions(); ++d) {
      const int n = g_.neighbor(b, d);
      if (n >= 0) t.reads(halos_, halo(n, pl::opposite(d)));
    }
  }
  void pack_halos(int kind) {
    for (int b = 0; b < nb_; ++b) {
      auto t = brisk::data_task(pack);
      t.reads(blocks_, static_cast<std::size_t>(b)).args(args(b, kind));
      sends(t, b, kind);
      t.submit();
    }
  }
  // An allreduce of the per-block `partials` into every rank's scalars with `f`
  // (rank partials, then one reduce task per rank that reads all of them). Both
  // tasks take a microsecond or less: they run inline, on the thread that finished
  // the last partial or received the last rank's.
  void allreduce(brisk::DataFunction f, brisk::DataSet<Partial>& partials, brisk::DataSet<RankPartials>& rp,
                 double arg = 0) {
    const int n = brisk::data_ranks();
    for (int r = 0; r < n; ++r) {
      const auto& mine = blocks_of_[static_cast<std::size_t>(r)];
      auto t = brisk::data_task(gather_partials);
      t.writes(rp, static_cast<std::size_t>(r)).args(std::make_pair(mine, nb_)).runs_inline();
      for (int b : mine) t.reads(partials, static_cast<std::size_t>(b));
      t.submit();
    }
    for (int r = 0; r < n; ++r) {
      auto t = brisk::data_task(f);
      t.updates(scalars_, static_cast<std::size_t>(r)).args(arg).runs_inline();
      for (int q = 0; q < n; ++q) t.reads(rp, static_cast<std::size_t>(q));
      t.submit();
    }
  }
  std::size_t scalars_of(int b) const { return static_cast<std::size_t>(g_.home_rank(b, brisk::data_ranks())); }

  void record_begin() {
    pack_halos(kAdvection);
    for (int b = 0; b < nb_; ++b) {
      auto t = brisk::data_task(unpack_speed);
      t.updates(blocks_, static_cast<std::size_t>(b)).writes(umax_, static_cast<std::size_t>(b)).args(args(b, kAdvection));
      receives(t, b, kAdvection);
      t.submit();
    }
    allreduce(reduce_max, umax_, rp_umax_);
  }
  void record_project() {
    for (int b = 0; b < nb_; ++b) {
      auto t = brisk::data_task(advect_pack);
      t.updates(blocks_, static_cast<std::size_t>(b)).args(args(b, kForces));
      sends(t, b, kForces);
      t.submit();
    }
    for (int b = 0; b < nb_; ++b) {
      auto t = brisk::data_task(forces_setup);
      t.updates(blocks_, static_cast<std::size_t>(b)).writes(bb_, static_cast<std::size_t>(b)).args(args(b, kForces));
      receives(t, b, kForces);
      t.submit();
    }
    allreduce(reduce_bb, bb_, rp_bb_, p_.tol);
  }
  void record_cg() {
    for (int b = 0; b < nb_; ++b) {
      brisk::data_task(cg_precondition)
          .updates(blocks_, static_cast<std::size_t>(b))
          .writes(rho_, static_cast<std::size_t>(b))
          .reads(scalars_, scalars_of(b))
          .submit();
    }
    allreduce(reduce_rho, rho_, rp_rho_);
    for (int b = 0; b < nb_; ++b) {
      auto t = brisk::data_task(cg_search);
      t.updates(blocks_, static_cast<std::size_t>(b)).reads(scalars_, scalars_of(b)).args(args(b, kSearch));
      sends(t, b, kSearch);
      t.submit();
    }
    for (int b = 0; b < nb_; ++b) {
      auto t = brisk::data_task(cg_laplacian);
      t.updates(blocks_, static_cast<std::size_t>(b))
          .writes(dq_, static_cast<std::size_t>(b))
          .reads(scalars_, scalars_of(b))
          .args(args(b, kSearch));
      receives(t, b, kSearch);
      t.submit();
    }
    allreduce(reduce_alpha, dq_, rp_dq_);
    for (int b = 0; b < nb_; ++b) {
      brisk::data_task(cg_update)
          .updates(blocks_, static_cast<std::size_t>(b))
          .reads(scalars_, scalars_of(b))
          .writes(rr_, static_cast<std::size_t>(b))
          .submit();
    }
    allreduce(reduce_rr, rr_, rp_rr_);
  }
  void record_finish() {
    pack_halos(kPressure);
    for (int b = 0; b < nb_; ++b) {
      auto t = brisk::data_task(pressure_gradient);
      t.updates(blocks_, static_cast<std::size_t>(b)).args(args(b, kPressure));
      receives(t, b, kPressure);
      t.submit();
    }
  }
  void record_summary() {
    pack_halos(kSummaryH);
    for (int b = 0; b < nb_; ++b) {
      auto t = brisk::data_task(summarize);
      t.updates(blocks_, static_cast<std::size_t>(b)).writes(parts_, static_cast<std::size_t>(b)).args(args(b, kSummaryH));
      receives(t, b, kSummaryH);
      t.submit();
    }
    auto t = brisk::data_task(reduce_summary);
    t.writes(total_, 0);
    for (int b = 0; b < nb_; ++b) t.reads(parts_, static_cast<std::size_t>(b));
    t.submit();
  }

  pl::Geometry g_;
  pl::Params p_;
  int nb_;
  brisk::DataSet<pl::Block> blocks_;
  brisk::DataSet<std::vector<double>> halos_;
  brisk::DataSet<Partial> umax_, bb_, rho_, dq_, rr_;
  brisk::DataSet<SummaryPart> parts_;
  brisk::DataSet<RankPartials> rp_umax_, rp_bb_, rp_rho_, rp_dq_, rp_rr_;
  brisk::DataSet<Scalars> scalars_;  // one copy per rank
  std::vector<std::vector<int>> blocks_of_ = std::vector<std::vector<int>>(ranks());  // per rank
  brisk::DataSet<SummaryPart> total_;
  brisk::Template<int> begin_;
  brisk::Template<Dt> project_;
  brisk::Template<int> cg_;
  brisk::Template<int> finish_;
  brisk::Template<int> summary_;
};

int drive() {
  pl::RunOptions opts;
  CLI::App app{"physbam_brisk: the physbam-like smoke simulation on brisk data objects, with execution templates "
               "(--brisk-templates=off: without)"};
  pl::add_run_options(app, opts);
  int checkpoint_frames = 0;
  app.add_option("--checkpoint-frames", checkpoint_frames,
                 "write a brisk checkpoint (all data objects) every this many frames; 0: only when asked")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  std::vector<std::string> args = brisk::program_args();
  std::vector<const char*> cargs;
  for (const auto& s : args) cargs.push_back(s.c_str());
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::optional<pl::Geometry> geometry;
  try {
    geometry.emplace(pl::make_geometry(opts));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "physbam_brisk: %s\n", e.what());
    return 2;
  }
  const pl::Params& params = opts.params;
  const std::string& out = opts.out;
  const bool json = opts.json, quiet = opts.quiet;
  const pl::Geometry& g = *geometry;
  if (!out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    if (ec) {
      std::fprintf(stderr, "physbam_brisk: cannot create --out directory %s: %s\n", out.c_str(), ec.message().c_str());
      return 2;
    }
  }
  const bool templates = brisk::templates_enabled();
  // After a rank's loss (ucx) the driver runs again with its data on the survivors.
  const std::string data_on =
      brisk::data_ranks() == brisk::size() ? std::string() : " (data on " + std::to_string(brisk::data_ranks()) + ")";
  std::printf("physbam_brisk: grid %dx%dx%d, blocks %dx%dx%d (%d), ranks %d%s, frames %d, tol %g, max-cg %d, templates %s\n",
              g.nx(), g.ny(), g.nz(), g.blocks(0), g.blocks(1), g.blocks(2), g.num_blocks(), brisk::size(),
              data_on.c_str(), params.frames, params.tol, params.max_cg, templates ? "on" : "off");
  std::fflush(stdout);
  Simulation sim(g, params);
  brisk::data_sync();
  // A restarted run (--brisk-restore) resumes after the last frame it checkpointed.
  const int first_frame = brisk::checkpoint::load<int>("frame").value_or(0) + 1;
  if (brisk::checkpoint::restored()) std::printf("physbam_brisk: resuming at frame %d\n", first_frame);
  const std::string h5 = out.empty() ? "" : out + "/fields.h5";
  std::vector<double> frame_seconds;
  long long cg_total = 0, substeps_total = 0;
  for (int f = first_frame; f <= params.frames; ++f) {
    const auto t0 = std::chrono::steady_clock::now();
    const pl::FrameSummary s = sim.frame(f);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    frame_seconds.push_back(seconds);
    cg_total += s.cg_iterations;
    substeps_total += s.substeps;
    std::printf("%s\n", pl::format_summary(s).c_str());
    std::fflush(stdout);
    if (!quiet) {
      std::fprintf(stderr, "physbam_brisk: frame %d/%d done in %.3f s (%d substeps, %d CG iterations)\n", f,
                   params.frames, seconds, s.substeps, s.cg_iterations);
    }
    // Checkpoint every --checkpoint-frames frames, and when asked (SIGUSR1, which
    // Slurm sends before a time limit, or --brisk-checkpoint-every).
    if ((checkpoint_frames > 0 && f % checkpoint_frames == 0) || brisk::checkpoint::requested()) {
      brisk::checkpoint::save("frame", f);
      const auto t0 = std::chrono::steady_clock::now();
      const auto seq = brisk::checkpoint::now();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf("physbam_brisk: checkpoint %llu after frame %d (%.1f ms)\n", static_cast<unsigned long long>(seq), f,
                  ms);
      std::fflush(stdout);
    }
    if (!h5.empty()) {
      const std::vector<pl::Block> all = sim.gather();
      pl::write_frame_hdf5(h5, g, all, f, s.time, f == 1);
      if (f == params.frames) {
        pl::write_density_slice_png(out + "/density.png", g, all);
        std::printf("physbam_brisk: wrote %s and %s/density.png\n", h5.c_str(), out.c_str());
      }
    }
  }
  if (json) {
    const auto st = brisk::data_stats();
    const nlohmann::ordered_json head = {{"templates", templates}};
    const nlohmann::ordered_json tail = {{"tasks_per_cg_iteration", sim.tasks_per_cg_iteration()},
                                         {"instantiations", st.instantiations}};
    std::printf("%s\n", pl::timing_json("physbam_brisk", head, brisk::size(), g, frame_seconds, substeps_total, cg_total,
                                        tail).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return brisk::run(argc, argv, [] { return drive(); }); }
