#include "brisk_rl/report.hpp"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string_view>

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

// 3x5 glyphs, one octal digit per row (top first), the high bit the left column.
constexpr std::string_view kGlyphChars = "0123456789-.ABCDEFGHIJKLMNOPQRSTUVWXYZ_:/()+=,%";
constexpr std::uint16_t kGlyphs[] = {
    075557, 026227, 071747, 071717, 055711, 074717, 074757, 071111, 075757, 075717, 000700, 000002,
    025755, 065656, 034443, 065556, 074647, 074644, 034553, 055755, 072227, 011152, 055655, 044447,
    057755, 075555, 025552, 065644, 025563, 065655, 034216, 072222, 055557, 055552, 055775, 055255,
    055222, 071247, 000007, 002020, 011244, 012221, 042224, 002720, 007070, 000024, 051245};
static_assert(std::size(kGlyphs) == kGlyphChars.size());

struct Rgb {
  std::uint8_t r, g, b;
};
constexpr Rgb kBlack{0, 0, 0}, kWhite{255, 255, 255}, kGrid{225, 225, 225};
constexpr Rgb kPalette[] = {{31, 119, 180}, {214, 39, 40},   {44, 160, 44},
                            {255, 127, 14}, {148, 103, 189}, {23, 190, 207}};

Rgb series_color(std::size_t k) { return kPalette[k % std::size(kPalette)]; }

class Canvas {
 public:
  Canvas(int width, int height) : width_(width), height_(height), pixels_(3u * width * height, 255) {}

  void dot(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
    std::uint8_t* p = &pixels_[3u * (std::size_t(y) * width_ + x)];
    p[0] = c.r, p[1] = c.g, p[2] = c.b;
  }
  void fill(int x, int y, int w, int h, Rgb c) {
    for (int j = y; j < y + h; ++j)
      for (int i = x; i < x + w; ++i) dot(i, j, c);
  }
  // Bresenham, `thick` pixels wide.
  void line(int x0, int y0, int x1, int y1, Rgb c, int thick = 1) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    for (int err = dx + dy;;) {
      fill(x0, y0, thick, thick, c);
      if (x0 == x1 && y0 == y1) return;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  // Returns the width drawn.
  int text(int x, int y, std::string_view s, Rgb c, int scale = 2) {
    for (std::size_t k = 0; k < s.size(); ++k) {
      const char ch = static_cast<char>(std::toupper(static_cast<unsigned char>(s[k])));
      const std::size_t g = kGlyphChars.find(ch);
      if (g == std::string_view::npos) continue;  // spaces and unknown characters
      for (int row = 0; row < 5; ++row)
        for (int col = 0; col < 3; ++col)
          if (kGlyphs[g] >> (3 * (4 - row) + 2 - col) & 1)
            fill(x + int(k) * 4 * scale + col * scale, y + row * scale, scale, scale, c);
    }
    return static_cast<int>(s.size()) * 4 * scale;
  }
  const std::uint8_t* data() const { return pixels_.data(); }

 private:
  int width_, height_;
  std::vector<std::uint8_t> pixels_;
};

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", std::abs(v) < 1e-12 ? 0.0 : v);
  return buffer;
}

// Evenly spaced round values (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / power < 1.5 ? power : raw / power < 3.5 ? 2 * power : 5 * power;
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(t);
  return out;
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
  const int w = options.width, h = options.height;
  if (w < 160 || h < 120) fail(path, "a plot needs at least 160x120 pixels");
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const Series& s : series) {
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (std::isnan(s.y[i]) || std::isnan(s.x[i])) continue;
      x_lo = std::min(x_lo, s.x[i]), x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]), y_hi = std::max(y_hi, s.y[i]);
    }
  }
  if (!(x_lo <= x_hi)) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;  // nothing to plot
  if (x_hi - x_lo < 1e-12) x_lo -= 0.5, x_hi += 0.5;
  if (y_hi - y_lo < 1e-12) y_lo -= 0.5, y_hi += 0.5;
  const double pad = 0.05 * (y_hi - y_lo);
  y_lo -= pad, y_hi += pad;

  Canvas canvas(w, h);
  const int left = 70, right = w - 15, top = 44, bottom = h - 40;
  const auto px = [&](double x) {
    return left + int(std::lround((x - x_lo) / (x_hi - x_lo) * (right - left)));
  };
  const auto py = [&](double y) {
    return bottom - int(std::lround((y - y_lo) / (y_hi - y_lo) * (bottom - top)));
  };
  for (double t : ticks(x_lo, x_hi)) {
    canvas.line(px(t), top, px(t), bottom, kGrid);
    const std::string label = number(t);
    canvas.text(px(t) - int(label.size()) * 4, bottom + 6, label, kBlack);
  }
  for (double t : ticks(y_lo, y_hi)) {
    canvas.line(left, py(t), right, py(t), kGrid);
    const std::string label = number(t);
    canvas.text(left - 6 - int(label.size()) * 8, py(t) - 5, label, kBlack);
  }
  canvas.line(left, top, left, bottom, kBlack);
  canvas.line(left, bottom, right, bottom, kBlack);
  canvas.text(left, 8, options.title, kBlack);
  canvas.text(right - int(options.x_label.size()) * 8, bottom + 22, options.x_label, kBlack);
  canvas.text(8, top - 16, options.y_label, kBlack);

  for (std::size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    const Rgb color = series_color(k);
    bool pen_down = false;
    int last_x = 0, last_y = 0;
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (std::isnan(s.y[i]) || std::isnan(s.x[i])) {
        pen_down = false;
        continue;
      }
      const int x = px(s.x[i]), y = py(s.y[i]);
      if (pen_down) {
        canvas.line(last_x, last_y, x, y, color, 2);
      } else {
        canvas.fill(x, y, 2, 2, color);
      }
      last_x = x, last_y = y, pen_down = true;
    }
  }
  std::size_t longest = 0;  // the legend, on white over the lines
  for (const Series& s : series) longest = std::max(longest, s.name.size());
  if (!series.empty())
    canvas.fill(left + 4, top + 2, 30 + int(longest) * 8, int(series.size()) * 14 + 6, kWhite);
  for (std::size_t k = 0; k < series.size(); ++k) {
    const int legend_y = top + 6 + int(k) * 14;
    canvas.fill(left + 8, legend_y + 3, 12, 4, series_color(k));
    canvas.text(left + 26, legend_y, series[k].name, kBlack);
  }
  write_png(path, canvas.data(), w, h, true);
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
