#include "physbam_like/cli.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace physbam_like {

void add_run_options(CLI::App& app, RunOptions& o) {
  Params& p = o.params;
  app.add_option("--grid", o.grid, "cells: N or NX,NY,NZ")->capture_default_str();
  app.add_option("--blocks", o.blocks, "blocks per axis: B or BX,BY,BZ")->capture_default_str();
  app.add_option("--frames", p.frames, "frames to simulate")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--frame-dt", p.frame_dt, "simulated time per frame")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--cfl", p.cfl, "cells a value may travel per substep, at most 2")
      ->capture_default_str()
      ->check(CLI::Range(0.0, kMaxCfl));
  app.add_option("--tol", p.tol, "CG relative residual tolerance")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-cg", p.max_cg, "CG iteration cap per solve")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--buoyancy", p.buoyancy, "upward acceleration per unit density")->capture_default_str();
  app.add_option("--out", o.out, "directory for fields.h5 (every frame) and density.png (last frame); empty: none")
      ->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON line with the timings at the end");
  app.add_flag("--quiet", o.quiet, "no progress lines on stderr");
}

std::array<int, 3> parse_triple(const std::string& option, const std::string& text) {
  std::vector<int> v;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    std::size_t used = 0;
    int x = 0;
    try {
      x = std::stoi(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size() || x <= 0) {
      throw std::invalid_argument(option + " '" + text + "': expected N or NX,NY,NZ with positive integers");
    }
    v.push_back(x);
  }
  if (v.size() == 1) return {v[0], v[0], v[0]};
  if (v.size() == 3) return {v[0], v[1], v[2]};
  throw std::invalid_argument(option + " '" + text + "': expected N or NX,NY,NZ with positive integers");
}

Geometry make_geometry(const RunOptions& o) {
  const std::array<int, 3> n = parse_triple("--grid", o.grid);
  const std::array<int, 3> b = parse_triple("--blocks", o.blocks);
  validate(o.params);
  try {
    return Geometry(n[0], n[1], n[2], b[0], b[1], b[2]);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--grid " + o.grid + " with --blocks " + o.blocks + ": " + e.what());
  }
}

std::string timing_json(const std::string& name, const nlohmann::ordered_json& head, int ranks, const Geometry& g,
                        const std::vector<double>& frame_seconds, long long substeps, long long cg_iterations,
                        const nlohmann::ordered_json& tail) {
  const auto seconds = [](double x) { return std::isfinite(x) ? std::round(x * 1e6) / 1e6 : x; };
  double total = 0;
  for (double x : frame_seconds) total += x;
  std::vector<double> sorted = frame_seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  nlohmann::ordered_json line;
  line["name"] = name;
  for (const auto& [key, value] : head.items()) line[key] = value;
  line["ranks"] = ranks;
  line["grid"] = {g.nx(), g.ny(), g.nz()};
  line["blocks"] = {g.blocks(0), g.blocks(1), g.blocks(2)};
  line["frames"] = frame_seconds.size();
  line["seconds"] = seconds(total);
  line["seconds_per_frame"] = nlohmann::ordered_json::array();
  for (double x : frame_seconds) line["seconds_per_frame"].push_back(seconds(x));
  line["median_frame_seconds"] = seconds(median);
  line["substeps"] = substeps;
  line["cg_iterations"] = cg_iterations;
  for (const auto& [key, value] : tail.items()) line[key] = value;
  line["unit"] = "s";
  return line.dump();
}

}  // namespace physbam_like
