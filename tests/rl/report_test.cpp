#include "brisk_rl/report.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace brisk_rl {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Width and height from a PNG's header, after checking its signature.
std::pair<int, int> png_size(const std::string& bytes) {
  EXPECT_GE(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const auto be32 = [&](std::size_t at) {
    return int((unsigned char)bytes[at]) << 24 | int((unsigned char)bytes[at + 1]) << 16 |
           int((unsigned char)bytes[at + 2]) << 8 | int((unsigned char)bytes[at + 3]);
  };
  return {be32(16), be32(20)};
}

TEST(ReportTest, CurveCsvHasAHeaderAndOneLinePerPoint) {
  std::vector<CurvePoint> points;
  for (int i = 1; i <= 5; ++i)
    points.push_back({i, i * 512, i * 0.5, i == 3 ? NAN : -4.0 + i, 2, 1.0, 0.1, 0.2});
  const std::string path = temp_path("curve.csv");
  write_curve_csv(path, points);
  const std::string text = read(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 6);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "iteration,steps,wall_s,mean_reward,episodes,entropy,policy_loss,value_loss");
  EXPECT_NE(text.find("\n1,512,0.5,-3,2,1,0.1,0.2\n"), std::string::npos);
  EXPECT_NE(text.find("\n3,1536,1.5,,2,"), std::string::npos);  // no episode ended: empty cell
}

TEST(ReportTest, PlotIsAPngOfTheRequestedSize) {
  Series a{"RANDOM", {0, 1, 2, 3}, {-4, -4.2, NAN, -3.9}}, b{"A2C", {0, 1, 2, 3}, {-4, -1, 2.5, 4.6}};
  const std::string path = temp_path("plot.png");
  write_plot_png(path, {a, b},
                 {.width = 320, .height = 200, .title = "Curve", .x_label = "s", .y_label = "reward"});
  EXPECT_EQ(png_size(read(path)), std::make_pair(320, 200));
  write_plot_png(path, {});  // nothing to plot still makes an image
  EXPECT_EQ(png_size(read(path)), std::make_pair(640, 400));
}

TEST(ReportTest, FramePngIsScaled) {
  Frame frame{};
  frame[0] = 255;
  const std::string path = temp_path("frame.png");
  write_frame_png(path, frame, 3);
  EXPECT_EQ(png_size(read(path)), std::make_pair(3 * kFrameSide, 3 * kFrameSide));
}

TEST(ReportTest, UnwritablePathThrowsNamingIt) {
  const std::string path = temp_path("missing_dir/x.csv");
  try {
    write_curve_csv(path, {});
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_plot_png(temp_path("missing_dir/x.png"), {}), std::runtime_error);
}

}  // namespace
}  // namespace brisk_rl
