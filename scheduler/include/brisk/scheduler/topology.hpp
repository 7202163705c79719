// brisk/scheduler/topology.hpp — the cores, NUMA node and GPUs that this rank may
// use, and binding of threads inside them.
#pragma once

#include <memory>
#include <string>

#include "brisk/core/status.hpp"

namespace brisk {

// Topology
//
// A snapshot, taken by detect(), of the machine (through hwloc) and of the cpuset
// the launcher gave this process: mpirun, srun or taskset may bind a rank to a few
// cores, and brisk must stay inside them. "Cores" below are always the cores with
// at least one PU inside that cpuset; binding never leaves it.
//
// CPU numbers in the list strings ("0-3,8") are OS indexes, as in taskset and
// /proc/self/status.
//
// Thread safety: after detect() returns, every const method may be called from any
// number of threads at once (each worker binds itself). A moved-from Topology may
// only be assigned to or destroyed.
// Example:
//   auto topo = brisk::Topology::detect();
//   if (!topo.ok()) return topo.status();
//   for (int i = 0; i < topo->num_cores(); ++i)
//     threads.emplace_back([&, i] { (void)topo->bind_thread_to_core(i); work(); });
class Topology {
 public:
  // Loads the machine topology and reads the process's CPU binding (the process
  // binding, else the calling thread's), intersected with the CPUs the system
  // allows; an unbound process gets all allowed CPUs. Also counts GPUs (see
  // num_gpus) and reads CUDA_VISIBLE_DEVICES. On Linux the process binding is the
  // union of all its threads' bindings, so call detect() before brisk binds any
  // thread (threads that other libraries start inherit the launcher's binding).
  // Errors: kInternal when hwloc cannot load the topology or the cpuset is empty.
  static StatusOr<Topology> detect();

  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;
  ~Topology();

  // Cores with at least one PU inside the cpuset; at least 1. On a machine where
  // hwloc reports no cores, every PU counts as a core.
  int num_cores() const;
  // PUs (hardware threads) inside the cpuset; at least num_cores().
  int num_pus() const;
  // The cpuset in list form, e.g. "0-3,8".
  std::string cpuset_string() const;
  // OS index of the NUMA node holding the cpuset's first core; -1 if unknown.
  int numa_node() const;
  // GPUs usable by this process. With CUDA support compiled in
  // (BRISK_HAVE_CUDA), cudaGetDeviceCount (0 on error). Otherwise the NVIDIA
  // display/3D controllers on the PCI bus, limited as CUDA would limit them by
  // CUDA_VISIBLE_DEVICES when it is set: entries up to the first empty or negative
  // one or index past the last device ("", "-1" and, with one GPU, "1" mean none).
  int num_gpus() const;
  // This machine's host name.
  std::string hostname() const;
  // Places the pages of [base, base + length) on this rank's NUMA node (pages not
  // yet touched go there when first touched). kFailedPrecondition when the system
  // cannot bind memory or the NUMA node is unknown.
  Status bind_memory_local(void* base, std::size_t length) const;

  // Binds the calling thread to the PUs of core i % num_cores() of the cpuset
  // (i may be any int, negative ones wrap too). Errors: kFailedPrecondition when
  // the OS does not support thread binding, kInternal when the call fails.
  Status bind_thread_to_core(int i) const;
  // Binds the calling thread to the whole cpuset (undoes bind_thread_to_core).
  Status bind_thread_to_cpuset() const;
  // The calling thread's current binding in list form, or "" if it cannot be read.
  std::string thread_binding_string() const;

 private:
  struct Impl;
  explicit Topology(std::unique_ptr<Impl> impl);
  const Impl& impl() const;

  std::unique_ptr<Impl> impl_;
};

}  // namespace brisk
