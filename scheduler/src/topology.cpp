// Topology over hwloc. hwloc stays in this file; the header only sees Impl.
#include "brisk/scheduler/topology.hpp"

#include <hwloc.h>

#include <cstring>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#ifdef BRISK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace brisk {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const noexcept { hwloc_topology_destroy(t); }
};
struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const noexcept { hwloc_bitmap_free(b); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

Bitmap make_bitmap() {
  Bitmap b(hwloc_bitmap_alloc());
  BRISK_CHECK(b != nullptr) << "hwloc_bitmap_alloc failed";
  return b;
}

Bitmap copy_bitmap(hwloc_const_bitmap_t src) {
  Bitmap b(hwloc_bitmap_dup(src));
  BRISK_CHECK(b != nullptr) << "hwloc_bitmap_dup failed";
  return b;
}

std::string list_string(hwloc_const_bitmap_t set) {
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set) < 0 || text == nullptr) return "";
  std::string out(text);
  std::free(text);
  return out;
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// The number of devices CUDA_VISIBLE_DEVICES lets CUDA see of `present`, or -1 when
// it is unset. CUDA stops at the first entry that is not a device (an empty or
// negative one, or an index past the last device), so "0,-1,1" shows one device, and
// "1" none on a machine with one; entries may also be UUIDs ("GPU-...", "MIG-...").
[[maybe_unused]] int cuda_visible_device_limit(int present) {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  if (value == nullptr) return -1;
  const std::string_view all(value);
  int count = 0;
  std::size_t pos = 0;
  while (pos <= all.size()) {
    const std::size_t comma = std::min(all.find(',', pos), all.size());
    std::string_view entry = all.substr(pos, comma - pos);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.empty() || entry.front() == '-') break;
    if (std::isdigit(static_cast<unsigned char>(entry.front())) && std::atol(std::string(entry).c_str()) >= present) break;
    ++count;
    pos = comma + 1;
  }
  return count;
}

int count_gpus([[maybe_unused]] hwloc_topology_t topo) {
#ifdef BRISK_HAVE_CUDA
  // The runtime honours CUDA_VISIBLE_DEVICES itself.
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later CUDA calls do not see it
    return 0;
  }
  return n;
#else
  constexpr unsigned kNvidia = 0x10de;
  constexpr unsigned kVgaController = 0x0300;
  constexpr unsigned k3dController = 0x0302;
  int n = 0;
  for (hwloc_obj_t dev = hwloc_get_next_pcidev(topo, nullptr); dev != nullptr;
       dev = hwloc_get_next_pcidev(topo, dev)) {
    const auto& pci = dev->attr->pcidev;
    if (pci.vendor_id == kNvidia && (pci.class_id == kVgaController || pci.class_id == k3dController)) {
      ++n;
    }
  }
  const int limit = cuda_visible_device_limit(n);
  return limit >= 0 && limit < n ? limit : n;
#endif
}

}  // namespace

struct Topology::Impl {
  TopologyPtr topo;
  Bitmap cpuset;
  std::vector<Bitmap> cores;  // each core's PUs inside cpuset, in hwloc's logical order
  int numa_node = -1;
  int num_gpus = 0;
  std::string hostname;
};

Topology::Topology(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;
Topology::~Topology() = default;

const Topology::Impl& Topology::impl() const {
  BRISK_CHECK(impl_ != nullptr) << "use of a moved-from Topology";
  return *impl_;
}

StatusOr<Topology> Topology::detect() {
  auto impl = std::make_unique<Impl>();

  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    return internal_error("hwloc_topology_init failed: " + errno_text(errno));
  }
  impl->topo.reset(raw);
  hwloc_topology_t topo = raw;
#ifndef BRISK_HAVE_CUDA
  // PCI devices are needed to count GPUs; their ids are enough. The GPU-library
  // plugins are kept out: they would initialise OpenCL/CUDA/NVML inside detect(),
  // which is slow and must not happen before a fork. The libpciaccess-based "pci"
  // component is kept out too: it leaks about 1 KiB per load (hwloc 2.9), and
  // without it hwloc's Linux component reads the same devices from sysfs.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  for (const char* plugin : {"pci", "opencl", "cuda", "nvml", "rsmi", "levelzero", "gl"}) {
    (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, plugin);
  }
#endif
  if (hwloc_topology_load(topo) != 0) {
    return internal_error("hwloc_topology_load failed: " + errno_text(errno));
  }

  // The binding the launcher gave us, restricted to what the OS allows (cgroups).
  impl->cpuset = make_bitmap();
  hwloc_bitmap_t cpuset = impl->cpuset.get();
  if (hwloc_get_cpubind(topo, cpuset, HWLOC_CPUBIND_PROCESS) != 0 &&
      hwloc_get_cpubind(topo, cpuset, HWLOC_CPUBIND_THREAD) != 0) {
    hwloc_bitmap_copy(cpuset, hwloc_topology_get_allowed_cpuset(topo));
  }
  hwloc_bitmap_and(cpuset, cpuset, hwloc_topology_get_allowed_cpuset(topo));
  if (hwloc_bitmap_iszero(cpuset)) {
    return internal_error("the process's CPU binding holds no CPU that the system allows (allowed: " +
                          list_string(hwloc_topology_get_allowed_cpuset(topo)) + ")");
  }

  // A core counts if any of its PUs is in the cpuset (a rank may be given one
  // hyperthread of a core); it is then used only through those PUs.
  for (hwloc_obj_t core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, nullptr); core != nullptr;
       core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)) {
    if (core->cpuset == nullptr || !hwloc_bitmap_intersects(core->cpuset, cpuset)) continue;
    Bitmap set = copy_bitmap(core->cpuset);
    hwloc_bitmap_and(set.get(), set.get(), cpuset);
    impl->cores.push_back(std::move(set));
  }
  if (impl->cores.empty()) {  // no core information: each PU is a core
    int pu = -1;
    while ((pu = hwloc_bitmap_next(cpuset, pu)) != -1) {
      Bitmap set = make_bitmap();
      hwloc_bitmap_only(set.get(), static_cast<unsigned>(pu));
      impl->cores.push_back(std::move(set));
    }
  }

  const int first_pu = hwloc_bitmap_first(impl->cores.front().get());
  for (hwloc_obj_t node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr);
       node != nullptr; node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)) {
    if (node->cpuset != nullptr && hwloc_bitmap_isset(node->cpuset, static_cast<unsigned>(first_pu))) {
      impl->numa_node = static_cast<int>(node->os_index);
      break;
    }
  }

  impl->num_gpus = count_gpus(topo);

  if (const char* host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo), "HostName")) {
    impl->hostname = host;
  } else {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) == 0) impl->hostname = buf;
  }
  return Topology(std::move(impl));
}

int Topology::num_cores() const { return static_cast<int>(impl().cores.size()); }

int Topology::num_pus() const { return hwloc_bitmap_weight(impl().cpuset.get()); }

std::string Topology::cpuset_string() const { return list_string(impl().cpuset.get()); }

int Topology::numa_node() const { return impl().numa_node; }

int Topology::num_gpus() const { return impl().num_gpus; }

std::string Topology::hostname() const { return impl().hostname; }

Status Topology::bind_memory_local(void* base, std::size_t length) const {
  const Impl& i = impl();
  if (i.numa_node < 0) return failed_precondition("the NUMA node of this rank is unknown");
  hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(i.topo.get(), static_cast<unsigned>(i.numa_node));
  if (!node) return failed_precondition("hwloc has no NUMA node " + std::to_string(i.numa_node));
  if (hwloc_set_area_membind(i.topo.get(), base, length, node->nodeset, HWLOC_MEMBIND_BIND,
                             HWLOC_MEMBIND_BYNODESET) != 0) {
    return failed_precondition(std::string("binding memory to NUMA node failed: ") + std::strerror(errno));
  }
  return Status::ok_status();
}

namespace {

Status bind_calling_thread(hwloc_topology_t topo, hwloc_const_cpuset_t set) {
  if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) == 0) return Status::ok_status();
  const int err = errno;
  if (err == ENOSYS) {
    return failed_precondition("binding threads to CPUs is not supported on this system");
  }
  return internal_error("cannot bind thread to CPUs " + list_string(set) + ": " + errno_text(err));
}

}  // namespace

Status Topology::bind_thread_to_core(int i) const {
  const Impl& im = impl();
  const int n = static_cast<int>(im.cores.size());
  const int k = ((i % n) + n) % n;
  return bind_calling_thread(im.topo.get(), im.cores[static_cast<std::size_t>(k)].get());
}

Status Topology::bind_thread_to_cpuset() const {
  const Impl& im = impl();
  return bind_calling_thread(im.topo.get(), im.cpuset.get());
}

std::string Topology::thread_binding_string() const {
  const Impl& im = impl();
  Bitmap set = make_bitmap();
  if (hwloc_get_cpubind(im.topo.get(), set.get(), HWLOC_CPUBIND_THREAD) != 0) return "";
  return list_string(set.get());
}

}  // namespace brisk
