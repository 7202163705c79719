// physbam_like/cli.hpp — the command line and the timing line that every driver
// shares, so that the drivers take the same options and print the same JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <string>
#include <vector>

#include "physbam_like/driver.hpp"
#include "physbam_like/geometry.hpp"

namespace CLI {
class App;
}

namespace physbam_like {

struct RunOptions {
  Params params;
  std::string grid = "32";    // N or NX,NY,NZ
  std::string blocks = "2";   // B or BX,BY,BZ
  std::string out;            // directory for fields.h5 and density.png; empty: none
  bool json = false;          // one JSON line of timings at the end
  bool quiet = false;         // no progress lines on stderr
};

// Adds --grid, --blocks, --frames, --frame-dt, --cfl, --tol, --max-cg, --buoyancy,
// --out, --json and --quiet, bound to `o`.
void add_run_options(CLI::App& app, RunOptions& o);

// "N" or "NX,NY,NZ" with positive integers. Throws std::invalid_argument naming
// `option` and what was expected.
std::array<int, 3> parse_triple(const std::string& option, const std::string& text);

// The geometry the options ask for, after checking the parameters. Throws
// std::invalid_argument with a message that names the options at fault.
Geometry make_geometry(const RunOptions& o);

// One JSON line (no newline) of a run's timings:
//   {"name":NAME,HEAD...,"ranks":R,"grid":[..],"blocks":[..],"frames":F,"seconds":S,
//    "seconds_per_frame":[..],"median_frame_seconds":M,"substeps":N,"cg_iterations":C,TAIL...,"unit":"s"}
// HEAD and TAIL are objects whose fields go there, in their order (empty: none).
// Times are in seconds to 6 decimal places; one that is not finite is null.
std::string timing_json(const std::string& name, const nlohmann::ordered_json& head, int ranks, const Geometry& g,
                        const std::vector<double>& frame_seconds, long long substeps, long long cg_iterations,
                        const nlohmann::ordered_json& tail);

}  // namespace physbam_like
