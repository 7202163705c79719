# Every dependency is a Debian package; see .ci/run for the list.
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(UCX IMPORTED_TARGET ucx)
set(BRISK_HAVE_UCX OFF)
if(BRISK_ENABLE_UCX AND UCX_FOUND)
  set(BRISK_HAVE_UCX ON)
endif()
message(STATUS "brisk: UCX transport ${BRISK_HAVE_UCX}")
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)

# Parallel HDF5 for checkpoints (Debian: libhdf5-openmpi-dev). FindHDF5 probes the
# library with the C compiler, so C is enabled here; brisk's own code stays C++.
enable_language(C)
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "brisk: checkpoints need a parallel (MPI) build of HDF5, but the HDF5 found "
                      "(${HDF5_VERSION}, ${HDF5_C_INCLUDE_DIRS}) is serial; install libhdf5-openmpi-dev")
endif()
message(STATUS "brisk: parallel HDF5 ${HDF5_VERSION}")

# CUDA is optional: detected, never required unless BRISK_ENABLE_CUDA=ON.
set(BRISK_HAVE_CUDA OFF)
if(NOT BRISK_ENABLE_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(BRISK_HAVE_CUDA ON)
  elseif(BRISK_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "BRISK_ENABLE_CUDA=ON but no CUDA toolkit was found")
  endif()
endif()
message(STATUS "brisk: CUDA support ${BRISK_HAVE_CUDA}")

if(BRISK_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(BRISK_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
