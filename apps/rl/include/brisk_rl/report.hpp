// brisk_rl/report.hpp — learning curves as CSV and PNG, and frames as PNG.
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

// A line to plot; points whose y is NaN break the line.
struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct PlotOptions {
  int width = 640;
  int height = 400;
  std::string title, x_label, y_label;
};

// Plots the series as coloured lines on shared axes, with ticks, labels and a
// legend (a built-in 3x5 font: digits, upper-case letters, a few symbols).
// Throws std::runtime_error naming the path on failure. Thread-safe.
void write_plot_png(const std::string& path, const std::vector<Series>& series,
                    const PlotOptions& options = {});

// Writes a frame as an 8-bit grayscale PNG, each pixel scaled to scale x scale.
void write_frame_png(const std::string& path, const Frame& frame, int scale = 1);

}  // namespace brisk_rl
