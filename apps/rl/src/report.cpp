#include "brisk_rl/report.hpp"

#include <fcntl.h>
#include <png.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string_view>

extern char** environ;

namespace brisk_rl {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error("brisk_rl: cannot write " + path + ": " + why);
}

void write_png(const std::string& path, const std::uint8_t* pixels, int width, int height, bool rgb) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = rgb ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  if (!png_image_write_to_file(&image, path.c_str(), 0, pixels, 0, nullptr)) {
    fail(path, image.message);
  }
}

// A string as a gnuplot single-quoted literal: nothing inside is special but the
// quote, written twice. Line breaks and other control characters become spaces,
// since a script line cannot hold them.
std::string gnuplot_literal(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "''";
    else out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;
  }
  return out + "'";
}

// The shortest text that reads back as exactly v.
std::string shortest(double v) {
  char buffer[32];
  return {buffer, std::to_chars(buffer, buffer + sizeof buffer, v).ptr};
}

// The tab10 colours, by series.
constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf"};

// What gnuplot reads: for each series with finite points, one data block of its
// runs (the points between non-finite ones, apart by one blank line), and after
// it, where the series has runs of one point, which a line cannot show, a block
// of those points to draw as dots. Blocks stand apart by two blank lines.
struct PlotData {
  std::string text;
  std::vector<int> line_block, dot_block;  // by series; -1: none
  double x_lo = INFINITY, x_hi = -INFINITY;  // over all finite points
};

PlotData plot_data(const std::vector<Series>& series) {
  PlotData data{{}, std::vector<int>(series.size(), -1), std::vector<int>(series.size(), -1)};
  int blocks = 0;
  const auto start_block = [&](const std::string& comment) {
    data.text += (blocks > 0 ? "\n\n# " : "# ") + comment + '\n';
    return blocks++;
  };
  const auto point = [](double x, double y) { return shortest(x) + ' ' + shortest(y) + '\n'; };
  for (std::size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    const std::size_t n = std::min(s.x.size(), s.y.size());
    const auto finite = [&](std::size_t i) { return i < n && std::isfinite(s.x[i]) && std::isfinite(s.y[i]); };
    std::string dots;
    for (std::size_t i = 0; i < n; ++i) {
      if (!finite(i)) continue;
      if (data.line_block[k] < 0) data.line_block[k] = start_block(gnuplot_literal(s.name));
      else if (!finite(i - 1)) data.text += '\n';
      data.text += point(s.x[i], s.y[i]);
      if ((i == 0 || !finite(i - 1)) && !finite(i + 1)) dots += point(s.x[i], s.y[i]);
      data.x_lo = std::min(data.x_lo, s.x[i]), data.x_hi = std::max(data.x_hi, s.x[i]);
    }
    if (!dots.empty()) {
      data.dot_block[k] = start_block(gnuplot_literal(s.name) + ", points alone");
      data.text += dots;
    }
  }
  return data;
}

// A round tick spacing (1, 2 or 5 times a power of ten) giving about 5 ticks over
// [lo, hi]; gnuplot's own choice crowds long labels such as 1.2e+06.
double tick_step(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  return raw / power < 1.5 ? power : raw / power < 3.5 ? 2 * power : 5 * power;
}

// Writes one of the files that gnuplot reads to draw the chart at `png`.
void write_for_chart(const std::string& png, const std::string& file, const std::string& text) {
  std::ofstream out(file);
  out << text;
  out.close();
  if (!out) fail(png, "cannot write " + file + ": " + std::strerror(errno));
}

// The script that draws the chart; ARG1 is the PNG's path, ARG2 the data's.
std::string plot_script(const std::vector<Series>& series, const PlotData& data, const PlotOptions& options) {
  // Text at gnuplot's usual size on a 640x400 chart, smaller on a smaller one.
  const double font_scale =
      std::clamp(std::min(options.width / 640.0, options.height / 400.0), 0.6, 1.0);
  const std::string size = std::to_string(options.width) + "," + std::to_string(options.height) +
                           " fontscale " + shortest(font_scale) + " noenhanced";
  std::string script =
      "# Draws a chart written by brisk_rl::write_plot_png:\n"
      "#   gnuplot -c this.gp chart.png chart.dat\n"
      "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
      "  set terminal pngcairo size " + size + "\n"
      "} else {\n"
      "  set terminal png size " + size + "\n"
      "}\n"
      "set output ARG1\n"
      "set title " + gnuplot_literal(options.title) + "\n"
      "set xlabel " + gnuplot_literal(options.x_label) + "\n"
      "set ylabel " + gnuplot_literal(options.y_label) + "\n"
      "set format x '%g'\n"
      "set format y '%g'\n"
      "set grid\n"
      "set key top left reverse Left box opaque\n";
  if (!(data.x_lo <= data.x_hi)) {  // nothing to plot: empty axes
    script += "set xrange [0:1]\nset yrange [0:1]\n";
  } else {
    script += "set autoscale xfix\nset offsets 0, 0, graph 0.05, graph 0.05\n";
    const double step = tick_step(data.x_lo, data.x_hi);
    if (data.x_hi - data.x_lo > 1e-12 * std::max(1.0, std::abs(data.x_hi)) && std::isfinite(step) && step > 0) {
      script += "set xtics " + shortest(step) + "\n";
    }
  }
  std::string plots;
  const auto add = [&](const std::string& what) { plots += (plots.empty() ? "plot " : ", \\\n     ") + what; };
  for (std::size_t k = 0; k < series.size(); ++k) {
    const std::string color = std::string(" linecolor rgb '") + kPalette[k % std::size(kPalette)] + "'";
    const std::string title = " title " + gnuplot_literal(series[k].name);
    const int lines = data.line_block[k], dots = data.dot_block[k];
    // A series with no point is still named in the legend.
    add((lines < 0 ? "NaN" : "ARG2 index " + std::to_string(lines) + " using 1:2") + " with lines linewidth 2" +
        color + title);
    if (dots >= 0) {
      add("ARG2 index " + std::to_string(dots) + " using 1:2 with points pointtype 7 pointsize 0.5" + color +
          " notitle");
    }
  }
  if (plots.empty()) plots = "plot NaN notitle";
  return script + plots + "\nunset output\n";
}

// Runs gnuplot with argv (no shell) and returns its exit status; its stdout and
// stderr together go to `output`. Throws, naming `png`, when it cannot be started.
int run_gnuplot(const std::string& png, const std::vector<std::string>& args, std::string& output) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) fail(png, std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    if (spawned == ENOENT) fail(png, "gnuplot was not found on PATH (install gnuplot-nox)");
    fail(png, std::string("cannot run gnuplot: ") + std::strerror(spawned));
  }
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n > 0) output.append(buffer, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::string trimmed(const std::string& text) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  const auto first = std::ranges::find_if_not(text, space);
  const auto last = std::find_if_not(text.rbegin(), text.rend(), space).base();
  return first < last ? std::string(first, last) : std::string();
}

}  // namespace

void write_curve_csv(const std::string& path, const std::vector<CurvePoint>& points) {
  std::ofstream out(path);
  if (!out) fail(path, std::strerror(errno));
  out << "iteration,steps,wall_s,mean_reward,episodes,entropy,policy_loss,value_loss\n";
  for (const CurvePoint& p : points) {
    out << p.iteration << ',' << p.steps << ',' << p.wall_s << ',';
    if (!std::isnan(p.mean_reward)) out << p.mean_reward;
    out << ',' << p.episodes << ',' << p.entropy << ',' << p.policy_loss << ',' << p.value_loss << '\n';
  }
  out.close();
  if (!out) fail(path, std::strerror(errno));
}

void write_plot_png(const std::string& path, const std::vector<Series>& series, const PlotOptions& options) {
  if (options.width < 160 || options.height < 120) fail(path, "a plot needs at least 160x120 pixels");
  const std::filesystem::path png(path);
  const std::string data = std::filesystem::path(png).replace_extension(".dat").string();
  const std::string script = std::filesystem::path(png).replace_extension(".gp").string();
  if (data == path || script == path) fail(path, "a chart's path must not end in .dat or .gp");
  const PlotData points = plot_data(series);
  write_for_chart(path, data, points.text);
  write_for_chart(path, script, plot_script(series, points, options));
  std::string output;
  const int status = run_gnuplot(path, {"gnuplot", "--default-settings", "-c", script, path, data}, output);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                              : "signal " + std::to_string(WTERMSIG(status));
    fail(path, "gnuplot failed (" + how + "): " + trimmed(output));
  }
  std::error_code error;
  const std::uintmax_t bytes = std::filesystem::file_size(png, error);
  if (error || bytes == 0) fail(path, "gnuplot made no PNG: " + trimmed(output));
}

void write_frame_png(const std::string& path, const Frame& frame, int scale) {
  if (scale < 1) fail(path, "scale must be at least 1");
  const int side = kFrameSide * scale;
  std::vector<std::uint8_t> pixels(std::size_t(side) * side);
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x)
      pixels[std::size_t(y) * side + x] = frame[(y / scale) * kFrameSide + x / scale];
  write_png(path, pixels.data(), side, side, false);
}

}  // namespace brisk_rl
