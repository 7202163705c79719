#include "brisk_rl/report.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
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

TEST(ReportTest, PlotIsAGnuplotPngOfTheRequestedSize) {
  Series a{"random", {0, 1, 2, 3}, {-4, -4.2, NAN, -3.9}}, b{"it's", {0, 1, 2, 3}, {-4, -1, 2.5, 4.6}};
  const std::string path = temp_path("plot.png");
  std::filesystem::remove(path);
  write_plot_png(path, {a, b},
                 {.width = 320, .height = 200, .title = "Curve_1", .x_label = "s", .y_label = "reward"});
  const std::string png = read(path);
  EXPECT_EQ(png_size(png), std::make_pair(320, 200));
  // What gnuplot read is left beside the PNG: the points, and the script with the
  // options and names (a quote doubled inside gnuplot's single-quoted strings).
  const std::string data = read(temp_path("plot.dat"));
  EXPECT_NE(data.find("\n1 -4.2\n\n3 -3.9\n"), std::string::npos) << data;  // NaN breaks the line
  EXPECT_NE(data.find("points alone\n3 -3.9\n"), std::string::npos) << data;  // drawn as a dot
  EXPECT_NE(data.find("\n3 4.6"), std::string::npos) << data;
  const std::string script = read(temp_path("plot.gp"));
  EXPECT_NE(script.find("size 320,200"), std::string::npos) << script;
  EXPECT_NE(script.find("set title 'Curve_1'"), std::string::npos) << script;
  EXPECT_NE(script.find("title 'it''s'"), std::string::npos) << script;
}

TEST(ReportTest, NothingToPlotStillMakesAnImage) {
  const std::string path = temp_path("empty.png");
  write_plot_png(path, {});
  EXPECT_EQ(png_size(read(path)), std::make_pair(640, 400));
  // A series with no finite point is a legend entry and nothing else.
  write_plot_png(path, {{"none", {0, 1}, {NAN, INFINITY}}},
                 {.width = 200, .height = 150, .title = "Nothing", .x_label = "x", .y_label = "y"});
  EXPECT_EQ(png_size(read(path)), std::make_pair(200, 150));
}

TEST(ReportTest, PlotIntoAMissingDirectoryThrowsNamingThePath) {
  const std::string path = temp_path("missing_dir/x.png");
  try {
    write_plot_png(path, {{"a", {0, 1}, {0, 1}}});
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(ReportTest, GnuplotsOwnMessageIsInTheError) {
  // The data and script can be written, but gnuplot cannot open a directory as its output.
  const std::string path = temp_path("a_directory.png");
  std::filesystem::create_directories(path);
  try {
    write_plot_png(path, {{"a", {0, 1}, {0, 1}}});
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("gnuplot failed"), std::string::npos) << what;
    EXPECT_NE(what.find("cannot open file"), std::string::npos) << what;  // gnuplot's words
  }
}

TEST(ReportTest, MissingGnuplotIsNamedInTheError) {
  const std::string path = temp_path("no_gnuplot.png");
  std::filesystem::remove(path);
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path ? old_path : "";
  ::setenv("PATH", "/nonexistent", 1);
  std::string what;
  try {
    write_plot_png(path, {{"a", {0, 1}, {0, 1}}});
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  if (old_path) {
    ::setenv("PATH", saved.c_str(), 1);
  } else {
    ::unsetenv("PATH");
  }
  EXPECT_NE(what.find("gnuplot was not found"), std::string::npos) << what;
  EXPECT_NE(what.find(path), std::string::npos) << what;
  EXPECT_FALSE(std::filesystem::exists(path));  // the chart is gnuplot's, nothing else draws it
}

TEST(ReportTest, TooSmallAPlotThrows) {
  const PlotOptions small{.width = 100, .height = 100, .title = "", .x_label = "", .y_label = ""};
  EXPECT_THROW(write_plot_png(temp_path("small.png"), {}, small), std::runtime_error);
}

TEST(ReportTest, FramePngIsScaled) {
  Frame frame{};
  frame[0] = 255;
  const std::string path = temp_path("frame.png");
  write_frame_png(path, frame, 3);
  EXPECT_EQ(png_size(read(path)), std::make_pair(3 * kFrameSide, 3 * kFrameSide));
}

TEST(ReportTest, UnwritableCsvPathThrowsNamingIt) {
  const std::string path = temp_path("missing_dir/x.csv");
  try {
    write_curve_csv(path, {});
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brisk_rl
