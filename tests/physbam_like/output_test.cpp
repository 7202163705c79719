// The HDF5 frames and the PNG slice, read back.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "physbam_like/driver.hpp"
#include "physbam_like/output.hpp"

namespace physbam_like {
namespace {

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("physbam_output_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

std::vector<double> read_dataset(const std::string& path, const std::string& name) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0);
  const hid_t set = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(set, 0);
  const hid_t space = H5Dget_space(set);
  hsize_t dims[3] = {0, 0, 0};
  EXPECT_EQ(H5Sget_simple_extent_ndims(space), 3);
  H5Sget_simple_extent_dims(space, dims, nullptr);
  std::vector<double> out(dims[0] * dims[1] * dims[2]);
  EXPECT_GE(H5Dread(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0);
  H5Sclose(space);
  H5Dclose(set);
  H5Fclose(file);
  return out;
}

TEST(OutputTest, FramesReadBackAndSliceIsAPng) {
  const Geometry g(12, 8, 16, 3, 2, 2);
  LocalBlocks ex(g);
  const std::string h5 = scratch("fields.h5").string();
  const std::string png = scratch("density.png").string();
  write_frame_hdf5(h5, g, ex.blocks(), 0, 0.0, true);
  Params p;
  p.frame_dt = 0.02;
  run_frame(ex, g, p, 1);
  write_frame_hdf5(h5, g, ex.blocks(), 1, 0.02, false);
  write_density_slice_png(png, g, ex.blocks());

  EXPECT_EQ(read_dataset(h5, "/frame_0001/density"), gather_field(g, ex.blocks(), kS));
  EXPECT_EQ(read_dataset(h5, "/frame_0001/w"), gather_field(g, ex.blocks(), kW));
  const std::vector<double> first = read_dataset(h5, "/frame_0000/density");
  EXPECT_EQ(first.size(), 12u * 8 * 16);
  EXPECT_NE(first, gather_field(g, ex.blocks(), kS));

  std::ifstream in(png, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  EXPECT_GT(std::filesystem::file_size(png), 100u);
  EXPECT_THROW(write_density_slice_png("/nonexistent-dir/x.png", g, ex.blocks()), std::runtime_error);
  EXPECT_THROW(write_frame_hdf5("/nonexistent-dir/x.h5", g, ex.blocks(), 1, 0.0, true), std::runtime_error);
  std::filesystem::remove_all(std::filesystem::path(h5).parent_path());
}

}  // namespace
}  // namespace physbam_like
