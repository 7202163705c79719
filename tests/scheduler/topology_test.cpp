#include "brisk/scheduler/topology.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

namespace brisk {
namespace {

// The CPUs of `set` in list form, as hwloc writes it ("0-3,8").
std::string list_string(const cpu_set_t& set) {
  std::string out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    if (!out.empty()) out += ',';
    out += std::to_string(cpu);
    if (last > cpu) out += '-' + std::to_string(last);
    cpu = last;
  }
  return out;
}

cpu_set_t affinity_of_calling_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return set;
}

bool is_subset(const cpu_set_t& a, const cpu_set_t& b) {
  cpu_set_t both;
  CPU_AND(&both, &a, &b);
  return CPU_EQUAL(&both, &a);
}

Topology detect_or_die() {
  auto topo = Topology::detect();
  EXPECT_TRUE(topo.ok()) << topo.status().to_string();
  if (!topo.ok()) std::abort();
  return std::move(topo).value();
}

// Some checks need a freshly started process, as a launcher would start a rank:
// the CUDA runtime reads CUDA_VISIBLE_DEVICES only when it initialises, and a
// process binding covers every thread, including ones that runtimes (sanitizers,
// MPI) start before main. run_probe re-executes this binary with kProbeVar set; it
// then runs the probe below before main and exits with the probe's result.
constexpr const char* kProbeVar = "BRISK_TOPOLOGY_TEST_PROBE";

// The CPU the "cpu0" probe's process is restricted to (the first of the test's own).
constexpr const char* kProbeCpuVar = "BRISK_TOPOLOGY_TEST_CPU";

// Results of the "cpu0" probe.
enum Cpu0Result {
  kCpu0Ok = 0,
  kCpu0DetectFailed = 1,
  kCpu0WrongCores = 2,
  kCpu0WrongPus = 3,
  kCpu0WrongCpuset = 4,
  kCpu0BindFailed = 5,
  kCpu0BoundOutside = 6,
};

int run_cpu0_probe() {
  const char* cpu_var = getenv(kProbeCpuVar);
  const std::string cpu = cpu_var ? cpu_var : "0";
  auto topo = Topology::detect();
  if (!topo.ok()) return kCpu0DetectFailed;
  if (topo->num_cores() != 1) return kCpu0WrongCores;
  if (topo->num_pus() != 1) return kCpu0WrongPus;
  if (topo->cpuset_string() != cpu) return kCpu0WrongCpuset;
  for (int i : {0, 1, 7, -3}) {
    if (!topo->bind_thread_to_core(i).ok()) return kCpu0BindFailed;
    if (topo->thread_binding_string() != cpu) return kCpu0BoundOutside;
  }
  if (!topo->bind_thread_to_cpuset().ok()) return kCpu0BindFailed;
  if (topo->thread_binding_string() != cpu) return kCpu0BoundOutside;
  return kCpu0Ok;
}

// "gpus": exits with num_gpus() (at most 99; 100 if detect fails).
int run_gpus_probe() {
  auto topo = Topology::detect();
  return topo.ok() ? std::min(topo->num_gpus(), 99) : 100;
}

[[maybe_unused]] const bool kIsProbe = [] {
  const char* probe = getenv(kProbeVar);
  if (probe == nullptr) return false;
  const std::string mode(probe);
  _exit(mode == "cpu0" ? run_cpu0_probe() : mode == "gpus" ? run_gpus_probe() : 127);
}();

// Runs `probe` in a fresh process with CUDA_VISIBLE_DEVICES set to `visible` (unset
// when null) and, when `only_cpu` >= 0, the affinity restricted to that CPU first.
// Returns the probe's exit status, or -1 if the process did not exit normally.
int run_probe(const char* probe, const char* visible, int only_cpu = -1) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
    env_strings.push_back(entry);
  }
  if (visible != nullptr) env_strings.push_back(std::string("CUDA_VISIBLE_DEVICES=") + visible);
  env_strings.push_back(std::string(kProbeVar) + "=" + probe);
  if (only_cpu >= 0) env_strings.push_back(std::string(kProbeCpuVar) + "=" + std::to_string(only_cpu));
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  char* argv[] = {exe.data(), nullptr};
  cpu_set_t only;
  CPU_ZERO(&only);
  if (only_cpu >= 0) CPU_SET(only_cpu, &only);

  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (only_cpu >= 0 && sched_setaffinity(0, sizeof(only), &only) != 0) _exit(126);
    execve(argv[0], argv, envp.data());
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(TopologyTest, DetectReportsTheProcessCpuset) {
  const Topology topo = detect_or_die();
  EXPECT_GE(topo.num_cores(), 1);
  EXPECT_LE(static_cast<unsigned>(topo.num_cores()), std::thread::hardware_concurrency());
  EXPECT_GE(topo.num_pus(), topo.num_cores());
  EXPECT_LE(static_cast<unsigned>(topo.num_pus()), std::thread::hardware_concurrency());
  EXPECT_GE(topo.numa_node(), -1);
  EXPECT_GE(topo.num_gpus(), 0);
  // The test process is not restricted beyond its affinity mask, so hwloc must
  // report exactly that mask.
  const cpu_set_t mask = affinity_of_calling_thread();
  EXPECT_EQ(topo.cpuset_string(), list_string(mask));
  EXPECT_EQ(topo.num_pus(), CPU_COUNT(&mask));
}

TEST(TopologyTest, HostnameMatchesGethostname) {
  char buf[256] = {};
  ASSERT_EQ(gethostname(buf, sizeof(buf) - 1), 0);
  EXPECT_EQ(detect_or_die().hostname(), std::string(buf));
}

TEST(TopologyTest, BindingToACoreStaysInsideTheCpuset) {
  const Topology topo = detect_or_die();
  const cpu_set_t process_mask = affinity_of_calling_thread();
  std::thread worker([&] {
    std::vector<cpu_set_t> core_masks;
    for (int i = -topo.num_cores(); i < 2 * topo.num_cores(); ++i) {
      SCOPED_TRACE("core " + std::to_string(i));
      ASSERT_TRUE(topo.bind_thread_to_core(i).ok());
      const cpu_set_t mask = affinity_of_calling_thread();
      EXPECT_GE(CPU_COUNT(&mask), 1);
      EXPECT_TRUE(is_subset(mask, process_mask));
      EXPECT_EQ(topo.thread_binding_string(), list_string(mask));
      if (i >= 0 && i < topo.num_cores()) core_masks.push_back(mask);
      if (i >= topo.num_cores()) {  // i wraps modulo num_cores()
        EXPECT_TRUE(CPU_EQUAL(&mask, &core_masks[static_cast<std::size_t>(i - topo.num_cores())]));
      }
    }
    // Distinct cores are disjoint, and together they cover the cpuset.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (std::size_t a = 0; a < core_masks.size(); ++a) {
      for (std::size_t b = a + 1; b < core_masks.size(); ++b) {
        cpu_set_t both;
        CPU_AND(&both, &core_masks[a], &core_masks[b]);
        EXPECT_EQ(CPU_COUNT(&both), 0) << "cores " << a << " and " << b << " overlap";
      }
      CPU_OR(&all, &all, &core_masks[a]);
    }
    EXPECT_EQ(list_string(all), topo.cpuset_string());

    ASSERT_TRUE(topo.bind_thread_to_cpuset().ok());
    EXPECT_EQ(topo.thread_binding_string(), topo.cpuset_string());
  });
  worker.join();
  // Binding another thread leaves this one alone.
  const cpu_set_t after = affinity_of_calling_thread();
  EXPECT_TRUE(CPU_EQUAL(&after, &process_mask));
}

TEST(TopologyTest, ManyThreadsBindAtOnce) {
  const Topology topo = detect_or_die();
  const cpu_set_t process_mask = affinity_of_calling_thread();
  std::vector<std::thread> threads;
  std::vector<int> inside(static_cast<std::size_t>(4 * topo.num_cores()), 0);
  for (std::size_t i = 0; i < inside.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 50; ++round) {
        if (!topo.bind_thread_to_core(static_cast<int>(i) + round).ok()) return;
        cpu_set_t mask;
        CPU_ZERO(&mask);
        if (sched_getaffinity(0, sizeof(mask), &mask) != 0 || !is_subset(mask, process_mask)) return;
      }
      inside[i] = 1;
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < inside.size(); ++i) EXPECT_EQ(inside[i], 1) << "thread " << i;
}

// Restricted to one CPU (the first this process may use: CPU 0 where it may), a
// process sees one core and binds every worker there.
TEST(TopologyTest, ProcessRestrictedToOneCpuSeesOneCore) {
  const cpu_set_t mask = affinity_of_calling_thread();
  int first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &mask)) ++first;
  ASSERT_LT(first, CPU_SETSIZE) << "an empty affinity mask";
  EXPECT_EQ(run_probe("cpu0", nullptr, first), kCpu0Ok) << "see Cpu0Result (CPU " << first << ")";
}

TEST(TopologyTest, EmptyCudaVisibleDevicesGivesNoGpus) {
  EXPECT_EQ(run_probe("gpus", ""), 0);
  EXPECT_EQ(run_probe("gpus", "-1"), 0);
}

TEST(TopologyTest, CudaVisibleDevicesLimitsTheCount) {
  const int all = run_probe("gpus", nullptr);
  ASSERT_GE(all, 0);
  ASSERT_LT(all, 99);
  EXPECT_EQ(run_probe("gpus", "0"), std::min(all, 1));
  EXPECT_EQ(run_probe("gpus", "0,1"), std::min(all, 2));
  // CUDA stops at the first negative index, and at an index past the last device.
  EXPECT_EQ(run_probe("gpus", "0,-1,1"), std::min(all, 1));
  const std::string past_the_last = std::to_string(all);
  EXPECT_EQ(run_probe("gpus", past_the_last.c_str()), 0);
  EXPECT_EQ(run_probe("gpus", ("0," + past_the_last).c_str()), std::min(all, 1));
}

TEST(TopologyTest, MovesKeepTheSnapshot) {
  Topology a = detect_or_die();
  const std::string cpuset = a.cpuset_string();
  const int cores = a.num_cores();
  Topology b(std::move(a));
  EXPECT_EQ(b.cpuset_string(), cpuset);
  EXPECT_EQ(b.num_cores(), cores);
  Topology c = detect_or_die();
  c = std::move(b);
  EXPECT_EQ(c.cpuset_string(), cpuset);
  EXPECT_TRUE(c.bind_thread_to_cpuset().ok());
}

}  // namespace
}  // namespace brisk
