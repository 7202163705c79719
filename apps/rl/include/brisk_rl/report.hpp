// brisk_rl/report.hpp — learning curves as CSV and as gnuplot charts, and game
// frames as PNG.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "brisk_rl/pong.hpp"

namespace brisk_rl {

// One row of a learning curve. mean_reward is NaN when no episode ended (the CSV
// cell is then empty).
struct CurvePoint {
  std::int64_t iteration = 0;
  std::int64_t steps = 0;  // environment steps so far, all environments together
  double wall_s = 0;
  double mean_reward = std::numeric_limits<double>::quiet_NaN();
  int episodes = 0;
  double entropy = 0;
  double policy_loss = 0;
  double value_loss = 0;
};

// Writes the header "iteration,steps,wall_s,mean_reward,episodes,entropy,
// policy_loss,value_loss" and one line per point. Throws std::runtime_error
// naming the path when the file cannot be written.
void write_curve_csv(const std::string& path, const std::vector<CurvePoint>& points);

// A line to plot; a point whose x or y is not finite (NaN, infinity) breaks the
// line. Points past the shorter of x and y are ignored.
struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct PlotOptions {
  int width = 640;   // pixels, at least 160
  int height = 400;  // pixels, at least 120
  std::string title, x_label, y_label;
};

// Draws the series as coloured lines on shared axes, with a grid, title, axis
// labels and a legend of the series' names, into a PNG of exactly width x height
// pixels. The chart is made by gnuplot (Debian: gnuplot-nox), run as a child
// process found on PATH, with the pngcairo terminal (png where gnuplot lacks it).
//
// Beside the PNG it leaves what gnuplot read: for "dir/chart.png", "dir/chart.dat"
// (the points, in gnuplot data blocks) and "dir/chart.gp" (the script), so that
// `gnuplot -c dir/chart.gp dir/chart.png dir/chart.dat` draws the chart again.
// The path must therefore not end in ".dat" or ".gp".
//
// No series, or no finite point in any, is not an error: the image then has empty
// axes from 0 to 1 (and a legend entry for each named series).
//
// Throws std::runtime_error naming the PNG's path when the options are out of
// range, when the data or script cannot be written (a missing directory), when
// gnuplot is not found ("gnuplot was not found on PATH"), or when it fails or makes
// no PNG (the message carries gnuplot's own output). Thread-safe for distinct paths;
// the caller must not change PATH while it runs.
void write_plot_png(const std::string& path, const std::vector<Series>& series,
                    const PlotOptions& options = {});

// Writes a frame as an 8-bit grayscale PNG, each pixel scaled to scale x scale.
void write_frame_png(const std::string& path, const Frame& frame, int scale = 1);

}  // namespace brisk_rl
