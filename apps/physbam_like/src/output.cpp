#include "physbam_like/output.hpp"

#include <hdf5.h>
#include <png.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

namespace physbam_like {

std::vector<double> gather_field(const Geometry& g, const std::vector<Block>& blocks, Field f) {
  const std::size_t nx = g.nx(), ny = g.ny();
  std::vector<double> out(static_cast<std::size_t>(g.num_cells()));
  if (static_cast<int>(blocks.size()) != g.num_blocks()) {
    throw std::invalid_argument("gather_field: " + std::to_string(blocks.size()) + " blocks for a geometry of " +
                                std::to_string(g.num_blocks()));
  }
  for (const auto& b : blocks) {
    const std::vector<double>& src = b.field(f);
    for (int k = 0; k < b.nz; ++k) {
      for (int j = 0; j < b.ny; ++j) {
        const double* row = src.data() + b.at(0, j, k);
        double* dst = out.data() + (static_cast<std::size_t>(b.k0 + k) * ny + (b.j0 + j)) * nx + b.i0;
        std::copy(row, row + b.nx, dst);
      }
    }
  }
  return out;
}

namespace {

// Closes an HDF5 handle on scope exit.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

void check(bool ok, const std::string& path, const char* what) {
  if (!ok) throw std::runtime_error("physbam_like: HDF5 " + std::string(what) + " failed for " + path);
}

void write_attribute(hid_t where, const char* name, double value, const std::string& path) {
  Handle space{H5Screate(H5S_SCALAR), H5Sclose};
  check(space.id >= 0, path, "H5Screate");
  Handle attr{H5Acreate2(where, name, H5T_NATIVE_DOUBLE, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  check(attr.id >= 0, path, "H5Acreate2");
  check(H5Awrite(attr.id, H5T_NATIVE_DOUBLE, &value) >= 0, path, "H5Awrite");
}

}  // namespace

void write_frame_hdf5(const std::string& path, const Geometry& g, const std::vector<Block>& blocks, int frame,
                      double time, bool create) {
  Handle file{create ? H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)
                     : H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT),
              H5Fclose};
  check(file.id >= 0, path, create ? "H5Fcreate" : "H5Fopen");
  char name[32];
  std::snprintf(name, sizeof name, "frame_%04d", frame);
  Handle group{H5Gcreate2(file.id, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
  check(group.id >= 0, path, "H5Gcreate2 (does the frame exist already?)");
  write_attribute(group.id, "time", time, path);
  write_attribute(group.id, "h", g.h(), path);
  const hsize_t dims[3] = {static_cast<hsize_t>(g.nz()), static_cast<hsize_t>(g.ny()),
                           static_cast<hsize_t>(g.nx())};
  Handle space{H5Screate_simple(3, dims, nullptr), H5Sclose};
  check(space.id >= 0, path, "H5Screate_simple");
  const std::pair<const char*, Field> fields[] = {{"density", kS}, {"pressure", kP}, {"u", kU}, {"v", kV}, {"w", kW}};
  for (const auto& [dname, f] : fields) {
    const std::vector<double> data = gather_field(g, blocks, f);
    Handle set{H5Dcreate2(group.id, dname, H5T_IEEE_F64LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
               H5Dclose};
    check(set.id >= 0, path, "H5Dcreate2");
    check(H5Dwrite(set.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) >= 0, path, "H5Dwrite");
  }
}

void write_density_slice_png(const std::string& path, const Geometry& g, const std::vector<Block>& blocks) {
  const std::vector<double> s = gather_field(g, blocks, kS);
  const int nx = g.nx(), ny = g.ny(), nz = g.nz();
  const int scale = std::max(1, (256 + std::max(nx, nz) - 1) / std::max(nx, nz));
  const int width = nx * scale, height = nz * scale;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(width) * height);
  const int j = ny / 2;
  for (int y = 0; y < height; ++y) {
    const int k = nz - 1 - y / scale;  // z up
    for (int x = 0; x < width; ++x) {
      double v = s[(static_cast<std::size_t>(k) * ny + j) * nx + x / scale];
      if (!(v == v)) v = 0;  // NaN
      pixels[static_cast<std::size_t>(y) * width + x] = static_cast<std::uint8_t>(std::clamp(v, 0.0, 1.0) * 255 + 0.5);
    }
  }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_GRAY;
  if (!png_image_write_to_file(&image, path.c_str(), 0, pixels.data(), 0, nullptr)) {
    const std::string why = image.message;
    png_image_free(&image);
    throw std::runtime_error("physbam_like: cannot write PNG " + path + ": " + why);
  }
}

}  // namespace physbam_like
