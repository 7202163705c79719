// physbam_like/output.hpp — the fields as global arrays, an HDF5 file of frames and a
// PNG slice of the density. Called by one process holding every block (a driver
// gathers them first).
#pragma once

#include <string>
#include <vector>

#include "physbam_like/block.hpp"
#include "physbam_like/geometry.hpp"

namespace physbam_like {

// Field f of the whole grid, NX * NY * NZ values with x fastest (for u, v, w: the
// low faces of the cells). `blocks` holds every block of g, in any order.
std::vector<double> gather_field(const Geometry& g, const std::vector<Block>& blocks, Field f);

// Writes group "/frame_NNNN" (frame number, 4 digits) with datasets density,
// pressure, u, v, w, each of shape [NZ][NY][NX], and attributes time and h. With
// create, the file is created (truncated); otherwise it is opened to add the group.
// Throws std::runtime_error naming the path on any HDF5 failure.
void write_frame_hdf5(const std::string& path, const Geometry& g, const std::vector<Block>& blocks, int frame,
                      double time, bool create);

// The density on the vertical plane through the middle of the y extent, as an 8-bit
// grayscale PNG (x to the right, z up, density 0 black and 1 or more white), each
// cell scaled up to a square of pixels so that the image is at least 256 pixels
// across. Throws std::runtime_error naming the path on failure.
void write_density_slice_png(const std::string& path, const Geometry& g, const std::vector<Block>& blocks);

}  // namespace physbam_like
