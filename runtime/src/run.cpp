// brisk::run: MPI, options, topology and the node runtime, wired together.
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "brisk/core/options.hpp"
#include "brisk/core/run.hpp"
#include "brisk/core/status.hpp"
#include "brisk/mpi_transport/mpi_environment.hpp"
#include "brisk/runtime/node_runtime.hpp"
#include "brisk/scheduler/topology.hpp"

namespace brisk::detail {
namespace {
void abort_hook(int code) { MpiEnvironment::abort_job(code); }

std::string timeline_path(const std::string& path, int rank, int size) {
  if (size == 1) return path;
  auto dot = path.rfind('.');
  auto slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return fmt::format("{}.rank{}", path, rank);
  return fmt::format("{}.rank{}{}", path.substr(0, dot), rank, path.substr(dot));
}
}  // namespace

int run_main(int argc, char** argv, std::function<int()> driver) {
  auto mpi_or = MpiEnvironment::init(&argc, &argv);
  if (!mpi_or.ok()) {
    std::fprintf(stderr, "brisk: %s\n", mpi_or.status().message().c_str());
    return 2;
  }
  std::unique_ptr<MpiEnvironment> mpi = std::move(mpi_or).value();
  const int rank = mpi->rank();
  set_log_rank(rank);
  set_abort_hook(&abort_hook);

  auto parsed = parse_options(argc, argv);
  if (!parsed.ok()) {
    if (rank == 0) std::fprintf(stderr, "brisk: %s\n", parsed.status().message().c_str());
    return 2;
  }
  if (parsed->help_requested) {
    if (rank == 0) std::fputs(options_help().c_str(), stdout);
    return 0;
  }
  const Options& options = parsed->options;
  auto topology = Topology::detect();
  if (!topology.ok()) {
    std::fprintf(stderr, "brisk: rank %d: %s\n", rank, topology.status().message().c_str());
    return 2;
  }

  int exit_code = 0;
  {
    NodeRuntime node(options, &*topology, rank, parsed->program_args);
    if (rank == 0) {
      try {
        exit_code = driver();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "brisk: the driver on rank 0 threw: %s\n", e.what());
        exit_code = 1;
      } catch (...) {
        std::fprintf(stderr, "brisk: the driver on rank 0 threw an unknown exception\n");
        exit_code = 1;
      }
    }
    exit_code = mpi->agree_exit_code(exit_code);
    node.shutdown();
    if (!options.timeline.empty() && node.events()) {
      Status st = node.events()->write_chrome_trace(timeline_path(options.timeline, rank, mpi->size()), rank);
      if (!st.ok()) std::fprintf(stderr, "brisk: rank %d: %s\n", rank, st.message().c_str());
    }
  }
  set_abort_hook(nullptr);
  return exit_code;
}

}  // namespace brisk::detail
