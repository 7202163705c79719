// physbam_kernel_timing: the time of each block kernel on one interior block (n^3
// cells, default 32^3), one JSON line per kernel (name, cells, median, p99, unit us),
// so that task sizes of the drivers can be judged.
//
//   build/apps/physbam_like/physbam_kernel_timing --n=32 --reps=50
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "physbam_like/driver.hpp"

namespace pl = physbam_like;

namespace {

struct Timing {
  double median_us, p99_us;
};

Timing time_it(int reps, const std::function<void()>& f) {
  f();  // warm the caches and the page tables
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  const auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<std::size_t>(q * us.size()))]; };
  return {at(0.5), at(0.99)};
}

}  // namespace

int main(int argc, char** argv) {
  int n = 32, reps = 50;
  CLI::App app{"physbam_kernel_timing: time of each physbam_like kernel on one block"};
  app.add_option("--n", n, "interior cells per axis of the block")->capture_default_str()->check(CLI::Range(4, 256));
  app.add_option("--reps", reps, "timed repetitions per kernel")->capture_default_str()->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);

  // 3 x 3 x 3 blocks; the middle one has a neighbour on every side.
  const pl::Geometry g(3 * n, 3 * n, 3 * n, 3, 3, 3);
  pl::LocalBlocks ex(g);
  ex.exchange(pl::kAdvectionHalo);
  pl::Block& b = ex.blocks()[13];
  pl::Block& corner = ex.blocks()[0];
  const double dt = pl::kMaxCfl * g.h() / std::max(1e-3, pl::max_speed(b));
  double sink = 0;
  std::vector<double> buf;
  struct Row {
    std::string name;
    std::function<void()> f;
  };
  const std::vector<Row> rows = {
      {"max_speed", [&] { sink += pl::max_speed(b); }},
      {"advect", [&] { pl::advect(b, dt); }},
      {"velocity_bc", [&] { pl::velocity_bc(corner); }},
      {"add_forces", [&] { pl::add_forces(b, dt, 4.0); }},
      {"setup_projection", [&] { sink += pl::setup_projection(b); }},
      {"precondition", [&] { sink += pl::precondition(b); }},
      {"update_search_direction", [&] { pl::update_search_direction(b, 0.5); }},
      {"apply_laplacian", [&] { sink += pl::apply_laplacian(b); }},
      {"update_solution", [&] { sink += pl::update_solution(b, 1e-3); }},
      {"apply_pressure_gradient", [&] { pl::apply_pressure_gradient(b); }},
      {"partial_summary", [&] { sink += pl::partial_summary(b).mass; }},
      {"pack_halo_advection_26dirs",
       [&] {
         for (int d = 0; d < pl::kDirections; ++d) pl::pack_halo(b, pl::kAdvectionHalo.mask, d, buf, pl::kGhost);
       }},
      {"unpack_halo_advection_26dirs",
       [&] {
         for (int d = 0; d < pl::kDirections; ++d) {
           pl::pack_halo(b, pl::kAdvectionHalo.mask, pl::opposite(d), buf, pl::kGhost);
           pl::unpack_halo(b, pl::kAdvectionHalo.mask, d, buf, pl::kGhost);
         }
       }},
      {"pack_halo_search_6faces",
       [&] {
         for (int d = 0; d < pl::kFaceDirections; ++d) pl::pack_halo(b, pl::kD, d, buf, 1);
       }},
      {"fill_domain_ghosts_advection_corner_block",
       [&] { pl::fill_domain_ghosts(corner, pl::kAdvectionHalo.mask, pl::kGhost); }},
      {"fill_domain_ghosts_search_corner_block", [&] { pl::fill_domain_ghosts(corner, pl::kD, 1); }},
  };
  std::printf("# %d^3 interior cells per block (%zu values per field with ghosts), %d repetitions\n", n, b.size(), reps);
  for (const auto& row : rows) {
    const Timing t = time_it(reps, row.f);
    const auto us = [](double x) { return std::isfinite(x) ? std::round(x * 10) / 10 : x; };  // null if not finite
    const nlohmann::ordered_json line = {{"name", "physbam_kernel_" + row.name},
                                         {"cells", n * n * n},
                                         {"median", us(t.median_us)},
                                         {"p99", us(t.p99_us)},
                                         {"unit", "us"}};
    std::printf("%s\n", line.dump().c_str());
  }
  std::fprintf(stderr, "(checksum %g)\n", sink);
  return 0;
}
