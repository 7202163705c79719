# brisk_set_install_rpath(<target>)
#
# An installed brisk loads without LD_LIBRARY_PATH from wherever its prefix is copied:
# a library finds its siblings through $ORIGIN, an executable in bindir through
# $ORIGIN/<bindir to libdir>. Directories of dependencies outside the system's
# (an MPI, HDF5 or CUDA from a cluster's modules) follow, as they were at link time.
# The build tree keeps CMake's own build RPATH.
function(brisk_set_install_rpath target)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    file(RELATIVE_PATH to_libdir "/prefix/${CMAKE_INSTALL_BINDIR}" "/prefix/${CMAKE_INSTALL_LIBDIR}")
    set(origin "$ORIGIN/${to_libdir}")
  else()
    set(origin "$ORIGIN")
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${origin}"
                        INSTALL_RPATH_USE_LINK_PATH ON)
endfunction()

# brisk's libraries carry SONAME lib<name>.so.<BRISK_SOVERSION>. Before 1.0 the ABI may
# change with every minor version (as the package's version file says, SameMinorVersion).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(BRISK_SOVERSION "${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}")
else()
  set(BRISK_SOVERSION "${PROJECT_VERSION_MAJOR}")
endif()

# brisk_add_library(<module> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
#
# Creates target brisk_<module> with alias brisk::<module>, public headers in
# <module>/include, installed (versioned, with namelink) and exported in briskTargets.
function(brisk_add_library module)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target brisk_${module})
  add_library(${target} ${ARG_SOURCES})
  add_library(brisk::${module} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${module}
                        OUTPUT_NAME brisk_${module}
                        VERSION ${PROJECT_VERSION} SOVERSION ${BRISK_SOVERSION})
  brisk_set_install_rpath(${target})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  install(TARGETS ${target} EXPORT briskTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  set_property(GLOBAL APPEND PROPERTY BRISK_HEADER_DIRS "${CMAKE_CURRENT_SOURCE_DIR}/include")
  set_property(GLOBAL APPEND PROPERTY BRISK_LIBRARIES ${target})
endfunction()

# brisk_add_test(<name> SOURCES ... [LIBS ...] [LABELS ...] [TIMEOUT s] [RANKS n])
#
# A GoogleTest binary registered with CTest. With RANKS, it runs under
# ${MPIEXEC_EXECUTABLE} -n RANKS. Every test has a timeout (default 60 s).
function(brisk_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;RANKS" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  if(ARG_RANKS)
    add_test(NAME ${name} COMMAND ${MPIEXEC_EXECUTABLE} ${BRISK_MPIEXEC_FLAGS}
             ${MPIEXEC_NUMPROC_FLAG} ${ARG_RANKS} $<TARGET_FILE:${name}> ${ARG_ARGS})
  else()
    add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}"
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1;OMPI_MCA_rmaps_base_oversubscribe=1")
endfunction()

# brisk_add_header_check()
#
# Compiles every public header on its own, so that each one includes what it uses.
function(brisk_add_header_check)
  get_property(dirs GLOBAL PROPERTY BRISK_HEADER_DIRS)
  get_property(libs GLOBAL PROPERTY BRISK_LIBRARIES)
  set(sources)
  foreach(dir ${dirs})
    file(GLOB_RECURSE headers RELATIVE ${dir} CONFIGURE_DEPENDS ${dir}/brisk/*.hpp)
    foreach(h ${headers})
      string(MAKE_C_IDENTIFIER ${h} id)
      set(src ${CMAKE_BINARY_DIR}/header_check/${id}.cpp)
      file(CONFIGURE OUTPUT ${src} CONTENT "#include <${h}>\n#include <${h}>\n")
      list(APPEND sources ${src})
    endforeach()
  endforeach()
  add_library(brisk_header_check OBJECT ${sources})
  target_link_libraries(brisk_header_check PRIVATE ${libs})
endfunction()
