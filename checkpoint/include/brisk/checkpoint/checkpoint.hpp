// brisk/checkpoint/checkpoint.hpp — checkpoints in HDF5: the file format
// (format.hpp), the collective writer (writer.hpp) and the reader (reader.hpp).
#pragma once

#include "brisk/checkpoint/format.hpp"
#include "brisk/checkpoint/reader.hpp"
#include "brisk/checkpoint/writer.hpp"
