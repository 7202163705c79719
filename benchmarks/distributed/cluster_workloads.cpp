// The multi-rank workloads, each beside what the same job measures without brisk:
//
//   remote_e2e       get(task pinned to rank 1) from the driver, against a raw MPI
//                    Send/Recv round trip of 8 bytes; the time that get adds to a
//                    task of 3 ms (by its end both ranks' pollers have gone to
//                    sleep), and to a no-op after the driver idled for 1 ms; with 3
//                    ranks or more, also from a task on rank 1 to rank 2;
//   object_transfer  a std::vector, then a brisk::Array, made on rank A and read by a
//                    task on rank B that reads every byte, against raw MPI_Get (of
//                    clean bytes, of bytes just rewritten, and of those followed by
//                    reading every byte) and (with UCX) ucp_get_nbx of the same sizes;
//                    the transfer's time is a read's less that of the read of an
//                    empty object made just before it;
//   throughput       no-op tasks from the driver, and from one root task per rank;
//   spill            1 ms tasks from rank 0 only, spread by spill-over; efficiency
//                    against the cores the job may use.
//
// One JSON line per result: benchmark, transport, ranks, the figures and their units,
// and the cluster counters of every rank over the workload.
//
//   mpirun -np 2 --oversubscribe --bind-to none build/benchmarks/brisk_cluster_workloads
//       [--brisk-transport=mpi|ucx] [--only=NAME] [--quick] [--object=vector|array]
//       [--read=size] [--rounds=N]
//
// --quick: a tenth of the tasks and iterations, transfers up to 16 MiB.
// --rounds=N: object_transfer measures its raw reads and then brisk's, N times in
//   turn (1 to 9; 5 by default, 1 with --quick), each time in a new brisk::run; a
//   line gives the median over the rounds and each round's ratio to the raw read
//   that does the same work. The VM's speed drifts by a third over minutes, so a
//   ratio of two figures measured apart is as much drift as brisk; paired rounds
//   are not. (With four ranks on two cores, one round's ratio at 1 MiB on the get
//   path ranged from 0.4 to 1.5; medians of three rounds fell below 0.7 in four of
//   eight such figures.)
// --object: object_transfer moves only std::vector or only brisk::Array objects.
// --read=size: object_transfer's reading task reads only the object's size, not
//   every byte (the time is then the task's and the transfer's alone; an Array read
//   in place on the maker's node then moves nothing).
//
// The raw figures are measured in main, outside brisk::run: this program initialises
// MPI itself (brisk::run then neither initialises nor finalises it).
#include <mpi.h>
#include <nlohmann/json.hpp>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "brisk/brisk.hpp"
#include "brisk/core/detail/context.hpp"
#include "brisk/core/options.hpp"
#include "brisk/runtime/cluster.hpp"
#if BRISK_HAVE_UCX
#include <ucp/api/ucp.h>

#include "brisk/mpi_transport/ucx_transport.hpp"
#endif

namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Settings, read from argv before brisk::run (program_args() exists only inside it).

const std::string kWorkloads[] = {"remote_e2e", "object_transfer", "throughput", "spill"};

struct Settings {
  std::string only;
  std::string object;  // object_transfer: "vector" or "array" only ("": both)
  bool read_bytes = true;  // object_transfer: the reading task reads every byte (else only the size)
  bool quick = false;
  int rounds = 0;  // object_transfer's rounds (0: the default, 5, or 1 with --quick)
  std::string error;  // a malformed option, named
  bool help = false;  // --brisk-help: brisk::run prints the options; nothing is measured
  // As brisk reads it: the flag, else BRISK_TRANSPORT, else brisk's default.
  std::string transport = brisk::default_transport() == brisk::TransportKind::kUcx ? "ucx" : "mpi";
  bool want(const char* name) const { return !help && (only.empty() || only == name); }
};

Settings read_settings(int argc, char** argv) {
  Settings s;
  if (const char* env = std::getenv("BRISK_TRANSPORT")) s.transport = env;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--only=", 0) == 0) s.only = a.substr(7);
    if (a == "--quick") s.quick = true;
    if (a.rfind("--object=", 0) == 0) s.object = a.substr(9);
    if (a == "--read=size") s.read_bytes = false;
    if (a.rfind("--rounds=", 0) == 0) {
      const std::string v = a.substr(9);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 9) {
        s.error = "--rounds=" + v + ": expected a whole number from 1 to 9";
      } else {
        s.rounds = static_cast<int>(n);
      }
    }
    if (a == "--brisk-help") s.help = true;
    if (a.rfind("--brisk-transport=", 0) == 0) s.transport = a.substr(18);
    if (a == "--brisk-transport" && i + 1 < argc) s.transport = argv[i + 1];
  }
  if (s.rounds == 0) s.rounds = s.quick ? 1 : 5;
  return s;
}

// The rank that makes the objects and the rank that reads them (B != A; B is not
// the driver's rank when the job has more than two ranks).
struct Pair {
  int a, b;
};
// The reader is never rank 0, whose one core (at 2 ranks) is the driver's.
Pair transfer_pair(int size) { return size == 2 ? Pair{0, 1} : Pair{1, size - 1}; }

std::vector<std::size_t> transfer_sizes(bool quick) {
  std::vector<std::size_t> sizes{std::size_t{1} << 10, std::size_t{64} << 10, std::size_t{1} << 20,
                                 std::size_t{16} << 20};
  if (!quick) sizes.insert(sizes.end(), {std::size_t{64} << 20, std::size_t{256} << 20});
  return sizes;
}

// Repetitions per size, raw and brisk alike.
int transfer_reps(std::size_t bytes, bool quick) {
  if (quick) return bytes <= (64 << 10) ? 20 : 5;
  return bytes <= (64 << 10) ? 50 : bytes <= (16 << 20) ? 10 : 5;
}

// ---------------------------------------------------------------------------
// Statistics and output.

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

struct Summary {
  double median, p10, p90;
};
Summary summarize(std::vector<double> v) {
  if (v.empty()) return {NAN, NAN, NAN};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5))]; };
  return {at(0.5), at(0.1), at(0.9)};
}
// The middle value; of an even count, the mean of the two middle ones.
double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2) return v[mid];
  return (v[mid] + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

using Json = nlohmann::ordered_json;

// A figure to 6 significant digits; NaN and infinities stay, and nlohmann-json writes
// them as null (no value measured).
double number(double x) {
  if (!std::isfinite(x)) return x;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return std::strtod(buf, nullptr);
}

// A JSON array; floating-point values as number() makes them.
template <class T>
Json array(const std::vector<T>& v) {
  Json out = Json::array();
  for (const T& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      out.push_back(number(x));
    } else {
      out.push_back(x);
    }
  }
  return out;
}

// One JSON object on one line; the common fields first.
class Line {
 public:
  Line(const char* benchmark, const std::string& transport, int ranks) {
    text("benchmark", benchmark);
    text("transport", transport);
    integer("ranks", ranks);
  }
  Line& text(const char* key, const std::string& value) { return json(key, value); }
  Line& num(const char* key, double value) { return json(key, number(value)); }
  Line& integer(const char* key, long long value) { return json(key, value); }
  Line& json(const char* key, Json value) {
    body_[key] = std::move(value);
    return *this;
  }
  void emit() {
    std::printf("%s\n", body_.dump().c_str());
    std::fflush(stdout);
  }

 private:
  Json body_ = Json::object();
};

// Reads every byte, as a task that uses the object would (the bytes are all 1):
// returns the size when they are right, 0 otherwise. Eight independent 8-byte lanes,
// so that the read runs at memory speed (one chained lane ran at 11 GB/s here, eight
// at 14-16). The time is the task's, the transfer's and this read's.
std::uint64_t read_all(const std::uint8_t* p, std::size_t n) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  std::uint64_t lane[8] = {};
  const std::size_t blocks = n / 64;
  for (std::size_t i = 0; i < blocks; ++i) {
    for (int k = 0; k < 8; ++k) {
      std::uint64_t w;
      std::memcpy(&w, p + 64 * i + 8 * k, 8);
      lane[k] ^= w;
    }
  }
  bool ok = true;
  for (std::uint64_t x : lane) ok = ok && x == (blocks % 2 ? kOnes : 0);
  for (std::size_t i = blocks * 64; i < n; ++i) ok = ok && p[i] == 1;
  return ok ? n : 0;
}
// ---------------------------------------------------------------------------
// Raw baselines, measured outside brisk::run on every rank (collective).

struct Raw {
  Summary pingpong_us{NAN, NAN, NAN};  // 8-byte Send/Recv round trip, ranks 0 and 1
  int cores_available = 0;             // distinct cores the ranks may use, summed over hosts
  Json hosts = Json::array();
};

// object_transfer's raw reads, per transfer size: one set per round.
struct TransferRaw {
  std::vector<double> mpi_get_gbps;    // B reading A
  std::vector<double> mpi_get_fresh_gbps;  // the same, A rewriting the bytes before each read
  std::vector<double> mpi_get_read_gbps;   // fresh, and B then reads every byte it got
  std::vector<double> mpi_get_created_gbps;  // as mpi_get, from a window A made over a memfd
  std::vector<double> mpi_get_created_fresh_gbps;  // as mpi_get_fresh, from such a window
  std::vector<double> mpi_get_created_read_gbps;   // as mpi_get_read, from such a window
  std::vector<double> ucx_get_gbps;    // empty without UCX
  std::vector<double> ucx_get_fresh_gbps;  // as mpi_get_fresh, with ucp_get_nbx
  std::vector<double> ucx_get_read_gbps;   // as mpi_get_read, with ucp_get_nbx
  std::vector<double> ucx_get_created_fresh_gbps;  // as mpi_get_created_fresh, with ucp_get_nbx
  std::vector<double> ucx_get_created_read_gbps;   // as mpi_get_created_read, with ucp_get_nbx
};

// A barrier that sleeps while it waits: ranks left out of a raw measurement must not
// take the cores of the two that measure (the job may have more ranks than cores).
// A rank that must keep MPI progressing meanwhile passes sleep = false. (Every rank
// calls MPI_Ibarrier: it does not match a blocking MPI_Barrier.)
void quiet_barrier(bool sleep = true) {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  int done = 0;
  while (!done) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done && sleep) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// The communicator of the two ranks that measure (MPI_COMM_NULL on the others), for
// the barriers that step them through each repetition: the other ranks wait in
// quiet_barrier meanwhile, rather than spinning in every one (or, where they took no
// part, leaving the pair's barriers over MPI_COMM_WORLD unmatched: with 3 or more
// ranks that hung the ucx measurements). Collective; free it with MPI_Comm_free.
MPI_Comm pair_comm(int rank, Pair p) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank == p.a || rank == p.b ? 0 : MPI_UNDEFINED, rank, &comm);
  return comm;
}

Summary raw_pingpong(int rank, int iterations) {
  char buf[8] = {};
  std::vector<double> rt;
  const int warm = std::max(100, iterations / 10);
  quiet_barrier();
  if (rank <= 1) {
    const int peer = 1 - rank;
    for (int i = 0; i < warm + iterations; ++i) {
      const auto t0 = Clock::now();
      if (rank == 0) {
        MPI_Send(buf, sizeof buf, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, sizeof buf, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, sizeof buf, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, sizeof buf, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      }
      if (i >= warm) rt.push_back(us_since(t0));
    }
  }
  quiet_barrier();
  return summarize(rt);
}

// A page-aligned buffer, written once. The raw reads land in one: with Open MPI 4.1.4
// (osc/rdma, the default for MPI_Win_allocate here) MPI_Get into a destination at page
// offset 16, which is where glibc puts a large malloc'd block (std::vector), ran at
// 2-3.5 GB/s, and at 20-40 GB/s (1 MiB) at page offset 0, 8, 32, 48 or 64, in every
// run on the project VM; a plain memcpy shows no such difference.
class PageBuffer {
 public:
  // `shared`: memory mapped from a memfd, as brisk's node-shared arena is, instead
  // of private anonymous memory.
  explicit PageBuffer(std::size_t bytes, bool shared = false) : bytes_(bytes) {
    if (bytes_ == 0) return;
    void* p = MAP_FAILED;
    if (shared) {
      const int fd = memfd_create("brisk-raw-buffer", MFD_CLOEXEC);
      if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes_)) == 0) {
        p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      }
      if (fd >= 0) close(fd);
    } else {
      p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "cluster_workloads: cannot map %zu bytes\n", bytes_);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    data_ = static_cast<std::uint8_t*>(p);
    std::memset(data_, 1, bytes_);
  }
  ~PageBuffer() {
    if (data_) munmap(data_, bytes_);
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  std::uint8_t* data() const { return data_; }

 private:
  std::size_t bytes_;
  std::uint8_t* data_ = nullptr;
};

// B reads the first `bytes` of A's window with MPI_Get + MPI_Win_flush; GB/s, median
// of the repetitions after one warm-up get. The figures are B's, broadcast to all.
// `fresh`: A writes the bytes anew before each read (as a task that just made the
// object would), instead of B reading the same clean bytes again.
// `then_read` (with `fresh`): B reads every byte after the get, as the benchmark's
// reading task does; the figure is then the bytes over get plus read.
// `created`: A's window is memory it mapped itself from a memfd (MPI_Win_create), as
// brisk's node-shared arena is, instead of memory MPI allocated (MPI_Win_allocate):
// the like-for-like figure for brisk's get path with such an arena.
std::vector<double> raw_mpi_get(int rank, Pair p, const std::vector<std::size_t>& sizes, bool quick, bool fresh,
                                bool then_read = false, bool created = false) {
  const std::size_t largest = sizes.back();
  PageBuffer dst(rank == p.b ? largest : 0);
  void* base = nullptr;
  MPI_Win win;
  PageBuffer region(created && rank == p.a ? largest : 0, /*shared=*/true);
  if (created) {
    base = region.data();
    MPI_Win_create(base, static_cast<MPI_Aint>(rank == p.a ? largest : 0), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  } else {
    MPI_Win_allocate(static_cast<MPI_Aint>(rank == p.a ? largest : 0), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  }
  if (rank == p.a) std::memset(base, 1, largest);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
  MPI_Comm pair = pair_comm(rank, p);
  quiet_barrier();
  std::vector<double> gbps(sizes.size(), NAN);
  if (fresh && pair != MPI_COMM_NULL) {
    // Both ranks step through the repetitions together.
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      const int n = static_cast<int>(sizes[s]);
      std::vector<double> reps;
      for (int r = 0; r <= transfer_reps(sizes[s], quick); ++r) {
        if (rank == p.a) std::memset(base, 1, sizes[s]);  // rewritten: the lines are the writer's again
        MPI_Barrier(pair);
        if (rank == p.b) {
          const auto t0 = Clock::now();
          MPI_Get(dst.data(), n, MPI_BYTE, p.a, 0, n, MPI_BYTE, win);
          MPI_Win_flush(p.a, win);
          if (then_read && read_all(dst.data(), sizes[s]) != sizes[s]) {
            std::fprintf(stderr, "cluster_workloads: raw get read wrong bytes\n");
          }
          if (r > 0) reps.push_back(sizes[s] / (us_since(t0) * 1e3));
        }
        MPI_Barrier(pair);
      }
      if (rank == p.b) gbps[s] = median(reps);
    }
  } else if (rank == p.b) {
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      const int n = static_cast<int>(sizes[s]);
      std::vector<double> reps;
      for (int r = 0; r <= transfer_reps(sizes[s], quick); ++r) {
        const auto t0 = Clock::now();
        MPI_Get(dst.data(), n, MPI_BYTE, p.a, 0, n, MPI_BYTE, win);
        MPI_Win_flush(p.a, win);
        if (r > 0) reps.push_back(sizes[s] / (us_since(t0) * 1e3));
      }
      gbps[s] = median(reps);
    }
  }
  quiet_barrier(rank != p.a);  // A's progress may be needed for B's gets (e.g. osc/pt2pt)
  if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);
  MPI_Bcast(gbps.data(), static_cast<int>(gbps.size()), MPI_DOUBLE, p.b, MPI_COMM_WORLD);
  return gbps;
}

#if BRISK_HAVE_UCX
void ucx_check(ucs_status_t st, const char* what) {
  if (st == UCS_OK) return;
  std::fprintf(stderr, "cluster_workloads: %s: %s\n", what, ucs_status_string(st));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

void ignore_ep_error(void*, ucp_ep_h, ucs_status_t) {}

// Progresses `worker` until `request` (nullptr: done at once) completes.
void ucx_wait(ucp_worker_h worker, ucs_status_ptr_t request, const char* what) {
  if (request == nullptr) return;
  if (UCS_PTR_IS_ERR(request)) ucx_check(UCS_PTR_STATUS(request), what);
  ucs_status_t st;
  while ((st = ucp_request_check_status(request)) == UCS_INPROGRESS) ucp_worker_progress(worker);
  ucp_request_free(request);
  ucx_check(st, what);
}

// The same reads as raw_mpi_get with ucp_get_nbx: a minimal context and worker per
// rank, B's endpoint to A in peer error mode (as brisk's UcxTransport, so that both
// use the same UCX transports), A's buffer mapped and its rkey sent over MPI. A
// progresses its worker until B is done, as brisk's progress thread does. `fresh`,
// `then_read` and `created` (A's buffer mapped from a memfd) as for raw_mpi_get.
std::vector<double> raw_ucx_get(int rank, Pair p, const std::vector<std::size_t>& sizes, bool quick, bool fresh,
                                bool then_read = false, bool created = false) {
  std::vector<double> gbps(sizes.size(), NAN);
  const std::size_t largest = sizes.back();
  MPI_Comm pair = pair_comm(rank, p);
  quiet_barrier();
  if (rank == p.a || rank == p.b) {
    const int peer = rank == p.a ? p.b : p.a;
    ucp_config_t* config = nullptr;
    ucx_check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA;  // brisk's features
    ucp_context_h context = nullptr;
    ucx_check(ucp_init(&params, config, &context), "ucp_init");
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucp_worker_h worker = nullptr;
    ucx_check(ucp_worker_create(context, &wp, &worker), "ucp_worker_create");

    if (rank == p.a) {
      PageBuffer region(largest, created);
      ucp_mem_map_params_t mp{};
      mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
      mp.address = region.data();
      mp.length = largest;
      ucp_mem_h memh = nullptr;
      ucx_check(ucp_mem_map(context, &mp, &memh), "ucp_mem_map");
      void* rkey = nullptr;
      std::size_t rkey_len = 0;
      ucx_check(ucp_rkey_pack(context, memh, &rkey, &rkey_len), "ucp_rkey_pack");
      ucp_address_t* address = nullptr;
      std::size_t address_len = 0;
      ucx_check(ucp_worker_get_address(worker, &address, &address_len), "ucp_worker_get_address");
      const std::uint64_t header[3] = {address_len, rkey_len, reinterpret_cast<std::uintptr_t>(region.data())};
      MPI_Send(header, 3, MPI_UINT64_T, peer, 2, MPI_COMM_WORLD);
      MPI_Send(address, static_cast<int>(address_len), MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      MPI_Send(rkey, static_cast<int>(rkey_len), MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      ucp_worker_release_address(worker, address);
      ucp_rkey_buffer_release(rkey);
      // Progresses the worker until `req` completes.
      auto serve = [&](MPI_Request req) {
        int flag = 0;
        while (!flag) {
          ucp_worker_progress(worker);
          MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        }
      };
      if (fresh) {
        std::memset(region.data(), 1, largest);
        for (std::size_t s = 0; s < sizes.size(); ++s) {
          for (int r = 0; r <= transfer_reps(sizes[s], quick); ++r) {
            std::memset(region.data(), 1, sizes[s]);  // rewritten: the lines are the writer's again
            MPI_Barrier(pair);
            MPI_Request req;
            MPI_Ibarrier(pair, &req);
            serve(req);
          }
        }
      }
      int done = 0;
      MPI_Request req;
      MPI_Irecv(&done, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &req);
      serve(req);
      ucx_check(ucp_mem_unmap(context, memh), "ucp_mem_unmap");
    } else {
      std::uint64_t header[3];
      MPI_Recv(header, 3, MPI_UINT64_T, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      std::vector<char> address(header[0]), packed(header[1]);
      MPI_Recv(address.data(), static_cast<int>(address.size()), MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Recv(packed.data(), static_cast<int>(packed.size()), MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      ucp_ep_params_t ep_params{};
      ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                             UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep_params.address = reinterpret_cast<const ucp_address_t*>(address.data());
      ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep_params.err_handler.cb = ignore_ep_error;
      ucp_ep_h ep = nullptr;
      ucx_check(ucp_ep_create(worker, &ep_params, &ep), "ucp_ep_create");
      ucp_rkey_h rkey = nullptr;
      ucx_check(ucp_ep_rkey_unpack(ep, packed.data(), &rkey), "ucp_ep_rkey_unpack");
      PageBuffer dst(largest);
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        std::vector<double> reps;
        for (int r = 0; r <= transfer_reps(sizes[s], quick); ++r) {
          if (fresh) MPI_Barrier(pair);
          ucp_request_param_t rp{};
          const auto t0 = Clock::now();
          ucx_wait(worker, ucp_get_nbx(ep, dst.data(), sizes[s], header[2], rkey, &rp), "ucp_get_nbx");
          if (then_read && read_all(dst.data(), sizes[s]) != sizes[s]) {
            std::fprintf(stderr, "cluster_workloads: raw ucp_get_nbx read wrong bytes\n");
          }
          if (r > 0) reps.push_back(sizes[s] / (us_since(t0) * 1e3));
          if (fresh) {  // matches A's MPI_Ibarrier (a blocking barrier would not)
            MPI_Request req;
            MPI_Ibarrier(pair, &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
          }
        }
        gbps[s] = median(reps);
      }
      ucp_rkey_destroy(rkey);
      ucp_request_param_t cp{};
      ucx_wait(worker, ucp_ep_close_nbx(ep, &cp), "ucp_ep_close_nbx");
      const int done = 1;
      MPI_Send(&done, 1, MPI_INT, peer, 3, MPI_COMM_WORLD);
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
  }
  if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
  quiet_barrier();
  MPI_Bcast(gbps.data(), static_cast<int>(gbps.size()), MPI_DOUBLE, p.b, MPI_COMM_WORLD);
  return gbps;
}
#endif

// One round of object_transfer's raw reads (collective).
TransferRaw raw_transfers(int rank, int size, bool quick) {
  const auto sizes = transfer_sizes(quick);
  const Pair p = transfer_pair(size);
  TransferRaw raw;
  raw.mpi_get_gbps = raw_mpi_get(rank, p, sizes, quick, false);
  raw.mpi_get_fresh_gbps = raw_mpi_get(rank, p, sizes, quick, true);
  raw.mpi_get_read_gbps = raw_mpi_get(rank, p, sizes, quick, true, true);
  raw.mpi_get_created_gbps = raw_mpi_get(rank, p, sizes, quick, false, false, true);
  raw.mpi_get_created_fresh_gbps = raw_mpi_get(rank, p, sizes, quick, true, false, true);
  raw.mpi_get_created_read_gbps = raw_mpi_get(rank, p, sizes, quick, true, true, true);
#if BRISK_HAVE_UCX
  raw.ucx_get_gbps = raw_ucx_get(rank, p, sizes, quick, false);
  raw.ucx_get_fresh_gbps = raw_ucx_get(rank, p, sizes, quick, true);
  raw.ucx_get_read_gbps = raw_ucx_get(rank, p, sizes, quick, true, true);
  raw.ucx_get_created_fresh_gbps = raw_ucx_get(rank, p, sizes, quick, true, false, true);
  raw.ucx_get_created_read_gbps = raw_ucx_get(rank, p, sizes, quick, true, true, true);
#endif
  return raw;
}

// The cores the job may use: each rank's hostname and affinity mask gathered on rank
// 0, the masks united per host, the hosts' counts summed.
void cores_available(int rank, int size, Raw& raw) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  sched_getaffinity(0, sizeof mask, &mask);
  std::vector<char> hosts(rank == 0 ? sizeof host * size : 0);
  std::vector<cpu_set_t> masks(rank == 0 ? size : 0);
  MPI_Gather(host, sizeof host, MPI_CHAR, hosts.data(), sizeof host, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Gather(&mask, sizeof mask, MPI_BYTE, masks.data(), sizeof mask, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  std::map<std::string, std::pair<cpu_set_t, int>> per_host;  // host -> (united mask, ranks)
  for (int r = 0; r < size; ++r) {
    const std::string name(&hosts[sizeof host * r]);
    auto [it, fresh] = per_host.try_emplace(name);
    if (fresh) CPU_ZERO(&it->second.first);
    CPU_OR(&it->second.first, &it->second.first, &masks[r]);
    ++it->second.second;
  }
  raw.hosts = Json::array();
  for (auto& [name, entry] : per_host) {
    const int cores = CPU_COUNT(&entry.first);
    raw.cores_available += cores;
    raw.hosts.push_back({{"host", name}, {"cores", cores}, {"ranks", entry.second}});
  }
}

// ---------------------------------------------------------------------------
// Remote functions.

int where() { return brisk::rank(); }
BRISK_REMOTE(where);

// Spins (no sleep, no yield) for `d` of wall time.
void spin_for(Clock::duration d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}

// Spins for `us` microseconds; returns its rank.
int spin_us(int us) {
  spin_for(std::chrono::microseconds(us));
  return brisk::rank();
}
BRISK_REMOTE(spin_us);

std::vector<std::uint8_t> make_bytes(std::uint64_t n) { return std::vector<std::uint8_t>(n, 1); }
BRISK_REMOTE(make_bytes);

std::uint64_t sum_of(const std::vector<std::uint8_t>& v) { return read_all(v.data(), v.size()); }
BRISK_REMOTE(sum_of);
std::uint64_t size_of(const std::vector<std::uint8_t>& v) { return v.size(); }
BRISK_REMOTE(size_of);

// The same with brisk::Array, which a pull fills without zero-filling it first (and
// which a rank of the same node reads where it lies, with --brisk-node-shm).
brisk::Array<std::uint8_t> make_array(std::uint64_t n) { return brisk::Array<std::uint8_t>(n, 1); }
BRISK_REMOTE(make_array);
std::uint64_t array_sum_of(const brisk::Array<std::uint8_t>& v) { return read_all(v.data(), v.size()); }
BRISK_REMOTE(array_sum_of);
std::uint64_t array_size_of(const brisk::Array<std::uint8_t>& v) { return v.size(); }
BRISK_REMOTE(array_size_of);

// The object type an object_transfer series moves.
template <class C>
struct Container;
template <>
struct Container<std::vector<std::uint8_t>> {
  static constexpr auto make = make_bytes;
  static constexpr auto read = sum_of;
  static constexpr auto size = size_of;
  static constexpr const char* name = "std::vector<uint8_t>";
};
template <>
struct Container<brisk::Array<std::uint8_t>> {
  static constexpr auto make = make_array;
  static constexpr auto read = array_sum_of;
  static constexpr auto size = array_size_of;
  static constexpr const char* name = "brisk::Array<uint8_t>";
};

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Spins 1 ms of wall time; returns its rank and the CPU time it got meanwhile (less
// than 1 ms when the rank's workers outnumber the cores and it was preempted).
std::pair<int, double> busy_1ms() {
  const double cpu0 = thread_cpu_s();
  spin_for(std::chrono::milliseconds(1));
  return {brisk::rank(), thread_cpu_s() - cpu0};
}
BRISK_REMOTE(busy_1ms);

brisk::Cluster& cluster() { return *dynamic_cast<brisk::Cluster*>(brisk::detail::context()->distributed); }
std::map<std::string, double> on(int r) { return {{"rank" + std::to_string(r), 1}}; }

// A root task: submits `children` unpinned no-op tasks, gets them all, returns how
// many ran on each rank.
std::vector<std::uint64_t> spawn(std::uint64_t children) {
  std::vector<brisk::Ref<int>> refs;
  refs.reserve(children);
  for (std::uint64_t i = 0; i < children; ++i) refs.push_back(brisk::remote(where));
  std::vector<std::uint64_t> per_rank(static_cast<std::size_t>(cluster().size()));
  for (auto& r : refs) ++per_rank[static_cast<std::size_t>(brisk::get(r))];
  return per_rank;
}
BRISK_REMOTE(spawn);

// get(task pinned to rank `to`) from a task on this rank, `iterations` times after a
// tenth as many for warm-up: the median, p10 and p90 in microseconds, and how many
// ran elsewhere (none should).
std::vector<double> e2e_from_here(int to, int iterations) {
  for (int i = 0; i < std::max(100, iterations / 10); ++i) brisk::get(brisk::task(where).resources(on(to)).remote());
  std::vector<double> lat;
  lat.reserve(static_cast<std::size_t>(iterations));
  int elsewhere = 0;
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    elsewhere += brisk::get(brisk::task(where).resources(on(to)).remote()) != to;
    lat.push_back(us_since(t0));
  }
  const Summary s = summarize(lat);
  return {s.median, s.p10, s.p90, static_cast<double>(elsewhere)};
}
BRISK_REMOTE(e2e_from_here);

// The counters that matter, of the rank it runs on.
struct Counters {
  std::uint64_t frames_sent, tasks_sent, tasks_received, tasks_placed, results_received, fetches, fetched_bytes,
      fetched_shared, borrowed, arena_used, arena_bytes;
  bool arena_shared;
  template <class A>
  void serialize(A& ar) {
    ar(frames_sent, tasks_sent, tasks_received, tasks_placed, results_received, fetches, fetched_bytes,
       fetched_shared, borrowed, arena_used, arena_bytes, arena_shared);
  }
};
Counters counters_here() {
  const brisk::ClusterStats s = cluster().stats();
  return {s.frames_sent, s.tasks_sent, s.tasks_received, s.tasks_placed,
          s.results_received, s.fetches, s.fetched_bytes, s.fetched_shared, s.borrowed, s.arena_used,
          s.arena_bytes, s.arena_shared};
}
BRISK_REMOTE(counters_here);

Counters counters_on(int r) { return brisk::get(brisk::task(counters_here).resources(on(r)).remote()); }

std::vector<Counters> counters_all() {
  std::vector<Counters> out;
  for (int r = 0; r < cluster().size(); ++r) out.push_back(counters_on(r));
  return out;
}

// Every rank's counters over a workload, as per-rank arrays. The snapshots are tasks
// themselves: each rank's figures include a task or two and their frames.
Json cluster_json(const std::vector<Counters>& before, const std::vector<Counters>& after) {
  using Field = std::uint64_t Counters::*;
  const std::pair<const char*, Field> fields[] = {
      {"frames_sent", &Counters::frames_sent},       {"tasks_sent", &Counters::tasks_sent},
      {"tasks_received", &Counters::tasks_received}, {"tasks_placed", &Counters::tasks_placed},
      {"results_received", &Counters::results_received}, {"fetches", &Counters::fetches},
      {"fetched_bytes", &Counters::fetched_bytes},   {"fetched_shared", &Counters::fetched_shared},
      {"borrowed", &Counters::borrowed}};
  Json out = Json::object();
  for (const auto& [name, field] : fields) {
    std::vector<std::uint64_t> delta;
    for (std::size_t r = 0; r < after.size(); ++r) delta.push_back(after[r].*field - before[r].*field);
    out[name] = array(delta);
  }
  return out;
}

// Waits (up to 10 s) until rank r's arena holds nothing: freeing is asynchronous, and
// a transfer should not find the arena full of the previous repetition's copies.
void drain_arena(int r) {
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (counters_on(r).arena_used != 0 && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---------------------------------------------------------------------------
// The workloads (driver, rank 0).

struct Job {
  Settings settings;
  Raw raw;
  int ranks = 0;
  Line line(const char* benchmark) const { return Line(benchmark, settings.transport, ranks); }
};

void remote_e2e(const Job& job) {
  const int iterations = job.settings.quick ? 2000 : 20000;
  const auto before = counters_all();
  int elsewhere = 0;  // tasks that did not run on rank 1 (none should)
  for (int i = 0; i < std::max(100, iterations / 10); ++i) {
    brisk::get(brisk::task(where).resources(on(1)).remote());  // warm-up
  }
  std::vector<double> lat;
  lat.reserve(iterations);
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    const int ran_on = brisk::get(brisk::task(where).resources(on(1)).remote());
    lat.push_back(us_since(t0));
    elsewhere += ran_on != 1;
  }
  if (elsewhere) std::fprintf(stderr, "remote_e2e: %d tasks did not run on rank 1\n", elsewhere);
  const Summary s = summarize(lat);
  const Summary& raw = job.raw.pingpong_us;
  job.line("remote_e2e")
      .integer("iterations", iterations)
      .num("median", s.median)
      .num("p10", s.p10)
      .num("p90", s.p90)
      .text("unit", "us")
      .json("raw_mpi_pingpong", {{"bytes", 8},
                                {"median", number(raw.median)},
                                {"p10", number(raw.p10)},
                                {"p90", number(raw.p90)},
                                {"unit", "us/round_trip"}})
      .num("ratio_to_raw", s.median / raw.median)
      .json("cluster", cluster_json(before, counters_all()))
      .emit();
  // What waking sleeping ranks adds to a get, in two ways: `pause_us` of idling by the
  // driver before it submits (a request after a pause: every rank has gone to sleep),
  // and a task of `task_us` on rank 1 (its progress thread and the driver's sleep while
  // it runs: the result finds them asleep). The figure is the time beyond the task's.
  const auto woken = [&](const char* name, int pause_us, int task_us) {
    const int reps = job.settings.quick ? 30 : 300;
    std::vector<double> extra;
    int away = 0;
    for (int i = 0; i < reps; ++i) {
      if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
      const auto t0 = Clock::now();
      away += brisk::get(brisk::task(spin_us).resources(on(1)).remote(task_us)) != 1;
      extra.push_back(us_since(t0) - task_us);
    }
    if (away) std::fprintf(stderr, "%s: %d tasks did not run on rank 1\n", name, away);
    const Summary x = summarize(extra);
    job.line(name)
        .integer("iterations", reps)
        .integer("pause_us", pause_us)
        .integer("task_us", task_us)
        .num("median", x.median)
        .num("p10", x.p10)
        .num("p90", x.p90)
        .text("unit", "us beyond the task")
        .emit();
  };
  woken("remote_e2e_long_task", 0, 3000);
  woken("remote_e2e_after_pause", 1000, 0);
  if (job.ranks < 3) return;
  // The same from a task on rank 1 (no global scheduler there by default) to rank 2:
  // a task only one rank can run goes straight there.
  const auto before_workers = counters_all();
  const std::vector<double> w =
      brisk::get(brisk::task(e2e_from_here).resources(on(1)).remote(2, iterations));
  if (w[3] > 0) std::fprintf(stderr, "remote_e2e_between_workers: %.0f tasks did not run on rank 2\n", w[3]);
  job.line("remote_e2e_between_workers")
      .integer("iterations", iterations)
      .integer("from", 1)
      .integer("to", 2)
      .num("median", w[0])
      .num("p10", w[1])
      .num("p90", w[2])
      .text("unit", "us")
      .num("ratio_to_raw", w[0] / raw.median)
      .json("cluster", cluster_json(before_workers, counters_all()))
      .emit();
}

// The time of get(task on b reading `made`), the task reading every byte, or (`all`
// false) only the size. A task on the reader first, so that the read finds its ranks
// awake, as in a stream of work: after an idle millisecond a rank's progress thread
// naps (up to 1 ms), and the read would time the wake-up rather than the transfer.
template <class C>
double timed_read(Pair p, const brisk::Ref<C>& made, std::uint64_t bytes, bool all) {
  brisk::get(brisk::task(where).resources(on(p.b)).remote());
  const auto t0 = Clock::now();
  const std::uint64_t n =
      brisk::get(brisk::task(all ? Container<C>::read : Container<C>::size).resources(on(p.b)).remote(made));
  const double us = us_since(t0);
  if (n != bytes) {
    std::fprintf(stderr, "object_transfer: read %llu bytes of %llu\n", static_cast<unsigned long long>(n),
                 static_cast<unsigned long long>(bytes));
  }
  return us;
}

// Medians over the repetitions of one size's reads.
struct ReadTimes {
  double read_us = NAN;        // the read of `bytes`
  double round_trip_us = NAN;  // the read of an empty object, just before it
  double transfer_us = NAN;    // the difference of the two, per repetition
};

// Reads of `bytes` by a task on b, one fresh object per repetition, each right after
// the same read of an empty object: the difference is the transfer's time. With
// ranks sharing cores, what a round trip costs changes from one moment to the next
// as threads are scheduled (four ranks on two cores: 4-6 us or 55-75 us, for
// seconds at a time), so the round trip is measured beside each read, not once.
template <class C>
ReadTimes read_times(Pair p, std::uint64_t bytes, int reps, bool all) {
  std::vector<double> reads, empties, transfers;
  for (int r = 0; r < reps; ++r) {
    auto empty = brisk::task(Container<C>::make).resources(on(p.a)).remote(std::uint64_t{0});
    auto made = brisk::task(Container<C>::make).resources(on(p.a)).remote(bytes);
    brisk::wait(std::vector<brisk::Ref<C>>{empty, made});
    empties.push_back(timed_read(p, empty, 0, all));
    reads.push_back(timed_read(p, made, bytes, all));
    transfers.push_back(reads.back() - empties.back());
    made = {};
    empty = {};
    drain_arena(p.a);
  }
  return {median(reads), median(empties), median(transfers)};
}

// One size's figures from one round of object_transfer.
struct TransferSample {
  std::string path;
  bool created = false;  // pulled from the maker's node-shared arena: raw reads of a created window compare
  int reps = 0;
  int remeasured = 0;  // times the reads were made again for want of a figure
  double read_us = NAN, round_trip_us = NAN, transfer_us = NAN, gbps = NAN;
  long long maker_arena_bytes = 0;
  Json cluster;  // the ranks' counters over the reads
};
// One object type's samples, per transfer size.
struct TransferSeries {
  const char* object = "";
  std::vector<TransferSample> sizes;
};

template <class C>
TransferSeries object_transfer_of(const Job& job) {
  const Pair p = transfer_pair(job.ranks);
  const bool quick = job.settings.quick;
  const auto sizes = transfer_sizes(quick);
  const bool all = job.settings.read_bytes;
  read_times<C>(p, 0, 10, all);  // warm-up
  TransferSeries series{Container<C>::name, {}};
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    TransferSample x;
    x.reps = transfer_reps(sizes[s], quick);
    const auto before = counters_all();
    ReadTimes t = read_times<C>(p, sizes[s], x.reps, all);
    // Under load an empty read's round trip can take longer than a read of `bytes`
    // (the median difference is then no figure, null). From 1 MiB, where a transfer
    // outlasts a round trip on an idle machine, the reads are made again, twice at most.
    for (int again = 0; again < 2 && sizes[s] >= (std::size_t{1} << 20) && !(t.transfer_us > 0); ++again) {
      t = read_times<C>(p, sizes[s], x.reps, all);
      ++x.remeasured;
    }
    const auto after = counters_all();
    // Pulled one-sided by the reader, or carried inline in messages (small objects).
    const bool pulled = after[p.b].fetches > before[p.b].fetches;
    // Read from the maker's arena mapped on the reader's node: in place (an Array),
    // or with one copy; otherwise a one-sided get through the transport.
    x.path = !pulled                                                  ? "inline"
             : after[p.b].borrowed > before[p.b].borrowed             ? "node-shared, in place"
             : after[p.b].fetched_shared > before[p.b].fetched_shared ? "node-shared, copied"
                                                                      : "pulled";
    // An inline object read on rank 0 came with its result, before the clock started:
    // the read moved no bytes, and no bandwidth is reported for it.
    const bool moved = pulled || p.b != 0;
    x.read_us = t.read_us;
    x.round_trip_us = t.round_trip_us;
    x.transfer_us = t.transfer_us;
    x.gbps = moved && x.transfer_us > 0 ? sizes[s] / (x.transfer_us * 1e3) : NAN;
    x.created = x.path == "pulled" && after[p.a].arena_shared;
    x.maker_arena_bytes = static_cast<long long>(after[p.a].arena_bytes);
    x.cluster = cluster_json(before, after);
    series.sizes.push_back(std::move(x));
  }
  return series;
}

std::vector<TransferSeries> object_transfer(const Job& job) {
  std::vector<TransferSeries> out;
  if (job.settings.object != "array") out.push_back(object_transfer_of<std::vector<std::uint8_t>>(job));
  if (job.settings.object != "vector") out.push_back(object_transfer_of<brisk::Array<std::uint8_t>>(job));
  return out;
}

// The median of the finite values of `v` (NaN when there are none).
double finite_median(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  return median(std::move(v));
}

// The raw read that does the same work as a brisk read, and its name: a one-sided
// read of bytes the holder has just written (each repetition's object is new), from
// a window made over a memfd where the reader pulled from the maker's node-shared
// arena (`created`), as brisk's get path does, else from MPI's own window (the
// fastest on a node); followed by the same read of every byte where the task reads
// them (`all`). Over ucx, the same with ucp_get_nbx (whose window is always memory
// the holder mapped).
std::pair<const char*, double> like_for_like(const TransferRaw& raw, std::size_t s, bool ucx, bool created, bool all) {
  const auto at = [s](const std::vector<double>& v) { return s < v.size() ? v[s] : NAN; };
  if (ucx) {
    return created ? (all ? std::pair{"ucp_get_nbx_created_then_read", at(raw.ucx_get_created_read_gbps)}
                          : std::pair{"ucp_get_nbx_created_fresh", at(raw.ucx_get_created_fresh_gbps)})
                   : (all ? std::pair{"ucp_get_nbx_then_read", at(raw.ucx_get_read_gbps)}
                          : std::pair{"ucp_get_nbx_fresh", at(raw.ucx_get_fresh_gbps)});
  }
  return created ? (all ? std::pair{"mpi_get_created_window_then_read", at(raw.mpi_get_created_read_gbps)}
                        : std::pair{"mpi_get_created_window_fresh", at(raw.mpi_get_created_fresh_gbps)})
                 : (all ? std::pair{"mpi_get_then_read", at(raw.mpi_get_read_gbps)}
                        : std::pair{"mpi_get_fresh", at(raw.mpi_get_fresh_gbps)});
}

// The object_transfer lines (on the driver's rank, after every round): per object and
// size, the medians over the rounds of brisk's figures and of each raw read, and the
// median of the rounds' own ratios of brisk to the like-for-like raw read, each round
// beside the raw reads measured just before it. The counters are the last round's.
void emit_object_transfer(const Job& job, const std::vector<TransferRaw>& raws,
                          const std::vector<std::vector<TransferSeries>>& rounds) {
  if (rounds.empty()) return;
  const auto sizes = transfer_sizes(job.settings.quick);
  const bool ucx = job.settings.transport == "ucx";
  const bool all = job.settings.read_bytes;
  for (std::size_t i = 0; i < rounds.front().size(); ++i) {
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      std::vector<double> read, round_trip, transfer, gbps, likes, ratios;
      long long remeasured = 0;
      std::string path = rounds.front()[i].sizes[s].path;
      const char* like_name = "";
      for (std::size_t r = 0; r < rounds.size(); ++r) {
        const TransferSample& x = rounds[r][i].sizes[s];
        if (x.path != path) path = "differs between rounds";
        const auto [name, like] = like_for_like(raws[r], s, ucx, x.created, all);
        like_name = name;
        remeasured += x.remeasured;
        read.push_back(x.read_us);
        round_trip.push_back(x.round_trip_us);
        transfer.push_back(x.transfer_us);
        gbps.push_back(x.gbps);
        likes.push_back(like);
        ratios.push_back(x.gbps / like);
      }
      // A raw figure's median over the rounds.
      const auto raw_median = [&](std::vector<double> TransferRaw::*field) {
        std::vector<double> v;
        for (const TransferRaw& raw : raws) v.push_back(s < (raw.*field).size() ? (raw.*field)[s] : NAN);
        return finite_median(std::move(v));
      };
      const double mpi_get = raw_median(&TransferRaw::mpi_get_gbps), ucp_get = raw_median(&TransferRaw::ucx_get_gbps);
      const double mpi_fresh = raw_median(&TransferRaw::mpi_get_fresh_gbps);
      const double mpi_read = raw_median(&TransferRaw::mpi_get_read_gbps);
      const double mpi_created = raw_median(&TransferRaw::mpi_get_created_gbps);
      const TransferSample& last = rounds.back()[i].sizes[s];
      const double g = finite_median(gbps);
      job.line("object_transfer")
          .text("object", rounds.front()[i].object)
          .integer("bytes", static_cast<long long>(sizes[s]))
          .integer("maker", transfer_pair(job.ranks).a)
          .integer("reader", transfer_pair(job.ranks).b)
          .integer("maker_arena_bytes", last.maker_arena_bytes)
          .integer("reps", last.reps)
          .integer("remeasured", remeasured)
          .integer("rounds", static_cast<long long>(rounds.size()))
          .text("path", path)
          .text("task_reads", all ? "every byte" : "the size")
          .num("read_us", finite_median(read))
          .num("round_trip_us", finite_median(round_trip))
          .num("transfer_us", finite_median(transfer))
          .num("gbps", g)
          .text("unit", "GB/s")
          .json("raw", {{"mpi_get", number(mpi_get)},
                       {"mpi_get_fresh", number(mpi_fresh)},
                       {"mpi_get_then_read", number(mpi_read)},
                       {"mpi_get_created_window", number(mpi_created)},
                       {"mpi_get_created_window_fresh", number(raw_median(&TransferRaw::mpi_get_created_fresh_gbps))},
                       {"mpi_get_created_window_then_read", number(raw_median(&TransferRaw::mpi_get_created_read_gbps))},
                       {"ucp_get_nbx", number(ucp_get)},
                       {"ucp_get_nbx_fresh", number(raw_median(&TransferRaw::ucx_get_fresh_gbps))},
                       {"ucp_get_nbx_then_read", number(raw_median(&TransferRaw::ucx_get_read_gbps))},
                       {"ucp_get_nbx_created_fresh", number(raw_median(&TransferRaw::ucx_get_created_fresh_gbps))},
                       {"ucp_get_nbx_created_then_read", number(raw_median(&TransferRaw::ucx_get_created_read_gbps))},
                       {"unit", "GB/s"},
                       {"of", "medians over the rounds"}})
          .num("ratio_to_raw", g / (ucx ? ucp_get : mpi_get))
          .num("ratio_to_fresh_mpi_get", g / mpi_fresh)
          .num("ratio_to_mpi_get_then_read", g / mpi_read)
          .num("ratio_to_created_window_get", g / mpi_created)
          .text("ratio_against", ucx ? "ucp_get_nbx" : "mpi_get")
          .text("like_for_like", like_name)
          .num("ratio_like_for_like", finite_median(ratios))
          .json("ratio_like_for_like_by_round", array(ratios))
          .json("gbps_by_round", array(gbps))
          .json("like_for_like_gbps_by_round", array(likes))
          .json("round_trip_us_by_round", array(round_trip))
          .json("cluster", last.cluster)
          .emit();
    }
  }
}

void throughput(const Job& job) {
  const int n = job.settings.quick ? 100000 : 1000000;
  {
    // (a) From the driver, unpinned: the local queue spills to the global scheduler.
    const auto before = counters_all();
    std::vector<brisk::Ref<int>> refs;
    refs.reserve(n);
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) refs.push_back(brisk::remote(where));
    std::vector<std::uint64_t> per_rank(static_cast<std::size_t>(job.ranks));
    for (auto& r : refs) ++per_rank[static_cast<std::size_t>(brisk::get(r))];
    const double seconds = us_since(t0) * 1e-6;
    refs.clear();
    job.line("throughput")
        .text("submitter", "driver")
        .integer("tasks", n)
        .num("tasks_per_s", n / seconds)
        .text("unit", "tasks/s")
        .json("tasks_per_rank", array(per_rank))
        .json("cluster", cluster_json(before, counters_all()))
        .emit();
  }
  {
    // (b) One root task pinned to each rank, each submitting its share itself.
    const auto before = counters_all();
    const std::uint64_t share = static_cast<std::uint64_t>(n / job.ranks);
    const auto t0 = Clock::now();
    std::vector<brisk::Ref<std::vector<std::uint64_t>>> roots;
    for (int r = 0; r < job.ranks; ++r) roots.push_back(brisk::task(spawn).resources(on(r)).remote(share));
    std::vector<std::uint64_t> per_rank(static_cast<std::size_t>(job.ranks));
    for (auto& root : roots) {
      const auto counts = brisk::get(root);
      for (std::size_t r = 0; r < counts.size() && r < per_rank.size(); ++r) per_rank[r] += counts[r];
    }
    const double seconds = us_since(t0) * 1e-6;
    const std::uint64_t total = share * static_cast<std::uint64_t>(job.ranks);
    job.line("throughput")
        .text("submitter", "root_per_rank")
        .integer("tasks", static_cast<long long>(total))
        .num("tasks_per_s", total / seconds)
        .text("unit", "tasks/s")
        .json("tasks_per_rank", array(per_rank))
        .json("cluster", cluster_json(before, counters_all()))
        .emit();
  }
}

void spill(const Job& job) {
  const int n = job.settings.quick ? 1000 : 10000;
  const auto before = counters_all();
  std::vector<brisk::Ref<std::pair<int, double>>> refs;
  refs.reserve(n);
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) refs.push_back(brisk::remote(busy_1ms));
  std::vector<std::uint64_t> per_rank(static_cast<std::size_t>(job.ranks));
  double cpu_s = 0;
  for (auto& r : refs) {
    const auto [rank, cpu] = brisk::get(r);
    ++per_rank[static_cast<std::size_t>(rank)];
    cpu_s += cpu;
  }
  const double elapsed_s = us_since(t0) * 1e-6;
  const double capacity_s = elapsed_s * job.raw.cores_available;
  // Task time is wall time, 1 ms a task. With more workers than cores, tasks overlap
  // in wall time and this passes 1; the CPU time the tasks got does not.
  const double task_s = n * 1e-3;
  job.line("spill")
      .integer("tasks", n)
      .num("task_ms", 1)
      .num("elapsed_s", elapsed_s)
      .integer("cores_available", job.raw.cores_available)
      .json("hosts", job.raw.hosts)
      .num("efficiency", task_s / capacity_s)
      .text("unit", "task time / (elapsed x cores)")
      .num("task_cpu_s", cpu_s)
      .num("efficiency_cpu", cpu_s / capacity_s)
      .json("tasks_per_rank", array(per_rank))
      .json("cluster", cluster_json(before, counters_all()))
      .emit();
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Job job;
  job.settings = read_settings(argc, argv);
  job.ranks = size;
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "cluster_workloads: run with at least 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  const Settings& s = job.settings;
  if (!s.only.empty() && std::find(std::begin(kWorkloads), std::end(kWorkloads), s.only) == std::end(kWorkloads)) {
    if (rank == 0) {
      std::fprintf(stderr, "cluster_workloads: unknown --only=%s; one of remote_e2e, object_transfer, throughput, spill\n",
                   s.only.c_str());
    }
    MPI_Finalize();
    return 2;
  }
  if (!s.error.empty()) {
    if (rank == 0) std::fprintf(stderr, "cluster_workloads: %s\n", s.error.c_str());
    MPI_Finalize();
    return 2;
  }
  if (s.help) {  // brisk::run prints its options
    const int code = brisk::run(argc, argv, [] { return 0; });
    MPI_Finalize();
    return code;
  }
  if (s.want("remote_e2e")) job.raw.pingpong_us = raw_pingpong(rank, s.quick ? 2000 : 20000);
  if (s.want("spill")) cores_available(rank, size, job.raw);

  int code = 0;
  // Workloads other than object_transfer, in one brisk::run.
  const auto run_others = [&](std::initializer_list<const char*> names) {
    if (std::none_of(names.begin(), names.end(), [&](const char* n) { return s.want(n); })) return;
    const int c = brisk::run(argc, argv, [&job, names] {
      for (const char* name : names) {
        if (!job.settings.want(name)) continue;
        if (std::string_view(name) == "remote_e2e") remote_e2e(job);
        if (std::string_view(name) == "throughput") throughput(job);
        if (std::string_view(name) == "spill") spill(job);
      }
      return 0;
    });
    if (code == 0) code = c;
  };
  run_others({"remote_e2e"});
  if (s.want("object_transfer")) {
#if BRISK_HAVE_UCX
    // The raw ucp_get_nbx reads use the UCX transports brisk's endpoints use (shared
    // memory within a node where ranks can watch each other); set in this process's
    // environment, so only where brisk runs on UCX.
    if (s.transport == "ucx") brisk::UcxTransport::use_node_shared_memory(MPI_COMM_WORLD);
#endif
    // Rounds: the raw reads, then brisk's in a brisk::run of their own.
    std::vector<TransferRaw> raws;
    std::vector<std::vector<TransferSeries>> rounds;
    for (int r = 0; r < s.rounds && code == 0; ++r) {
      raws.push_back(raw_transfers(rank, size, s.quick));
      code = brisk::run(argc, argv, [&job, &rounds] {
        rounds.push_back(object_transfer(job));
        return 0;
      });
    }
    if (code == 0) emit_object_transfer(job, raws, rounds);  // rounds: the driver's, on rank 0 only
  }
  run_others({"throughput", "spill"});
  MPI_Finalize();
  return code;
}
