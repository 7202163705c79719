// The transports (MPI, UCX) against raw MPI in the same run (2 ranks): message half round trip and
// one-sided get bandwidth. One JSON line per result.
//   mpirun -np 2 --bind-to core build/benchmarks/brisk_transport_pingpong
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "brisk/mpi_transport/mpi_transport.hpp"
#ifdef BRISK_HAVE_UCX
#include "brisk/mpi_transport/ucx_transport.hpp"
#endif
#include <functional>

namespace {
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double p99(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, v.size() * 99 / 100)];
}
// `x` to 4 decimal places (NaN and infinities stay, and are written as null).
double fixed4(double x) { return std::isfinite(x) ? std::round(x * 1e4) / 1e4 : x; }
// One JSON line (rank 0): name, parameters, median, p99, unit.
void emit(int rank, const char* name, const nlohmann::ordered_json& params, double med, double tail, const char* unit) {
  if (rank != 0) return;
  nlohmann::ordered_json line;
  line["name"] = name;
  line["params"] = params;
  line["median"] = fixed4(med);
  line["p99"] = fixed4(tail);
  line["unit"] = unit;
  std::printf("%s\n", line.dump().c_str());
}

void raw_pingpong(int rank, int iters, std::size_t bytes) {
  std::vector<char> buf(bytes);
  std::vector<double> half;
  int peer = 1 - rank;
  for (int i = 0; i < iters + 100; ++i) {
    auto t0 = Clock::now();
    if (rank == 0) {
      MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    }
    if (i >= 100) half.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
  }
  emit(rank, "mpi_raw_pingpong", {{"bytes", bytes}}, median(half), p99(half), "us/half_round_trip");
}

void transport_pingpong(brisk::Transport& t, const std::function<void()>& barrier, int iters, std::size_t bytes) {
  int rank = t.rank().value;
  int got = 0;
  t.set_message_handler([&](brisk::Rank, std::span<const std::byte>) { ++got; });
  std::vector<double> half;
  brisk::Rank peer{1 - rank};
  std::vector<std::byte> payload(bytes);
  for (int i = 0; i < iters + 100; ++i) {
    auto t0 = Clock::now();
    if (rank == 0) {
      (void)t.send(peer, payload);
      int want = got + 1;
      while (got < want) t.progress();
    } else {
      int want = got + 1;
      while (got < want) t.progress();
      (void)t.send(peer, payload);
    }
    if (i >= 100) half.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
  }
  for (int i = 0; i < 100; ++i) t.progress();
  barrier();
  emit(rank, (std::string(t.name()) + "_transport_pingpong").c_str(), {{"bytes", bytes}}, median(half), p99(half),
       "us/half_round_trip");
}

void raw_get(int rank, std::size_t bytes, int reps) {
  void* base = nullptr;
  MPI_Win win;
  MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  std::memset(base, 1, bytes);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
  std::vector<char> dst(bytes);
  std::vector<double> gbps;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      MPI_Get(dst.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, static_cast<int>(bytes), MPI_BYTE, win);
      MPI_Win_flush(1, win);
      gbps.push_back(bytes / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);
  if (rank == 0) emit(rank, "mpi_raw_get", {{"bytes", bytes}}, median(gbps), p99(gbps), "GB/s");
}

void transport_get(brisk::Transport& t, const std::function<void()>& barrier, std::span<std::byte> win,
                   std::size_t bytes, int reps) {
  int rank = t.rank().value;
  std::memset(win.data(), 1, bytes);
  auto reg = t.register_memory(win.data(), bytes);
  brisk::RemoteRegion remote = (*reg)->remote();
  // Rank 1's region: same layout, its own base (exchanged like any message).
  std::vector<std::uint64_t> addr(2);
  std::uint64_t mine = remote.address;
  MPI_Allgather(&mine, 1, MPI_UINT64_T, addr.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  remote.owner = brisk::Rank{1};
  remote.address = addr[1];
  // The key (UCX rkey) is rank 1's: exchange it too.
  int key_len = static_cast<int>(remote.key.size());
  MPI_Bcast(&key_len, 1, MPI_INT, 1, MPI_COMM_WORLD);
  remote.key.resize(static_cast<std::size_t>(key_len));
  MPI_Bcast(remote.key.data(), key_len, MPI_BYTE, 1, MPI_COMM_WORLD);
  std::vector<std::byte> dst(bytes);
  std::vector<double> gbps;
  barrier();
  if (rank == 0) {
    for (int r = 0; r < reps; ++r) {
      bool done = false;
      auto t0 = Clock::now();
      (void)t.get(remote, 0, dst.data(), bytes, [&](brisk::Status) { done = true; });
      while (!done) t.progress();
      gbps.push_back(bytes / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
    }
  }
  barrier();
  if (rank == 0) emit(rank, (std::string(t.name()) + "_transport_get").c_str(), {{"bytes", bytes}}, median(gbps), p99(gbps), "GB/s");
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "run with exactly 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  {
    auto t = brisk::MpiTransport::create(64 << 20);
    if (!t.ok()) MPI_Abort(MPI_COMM_WORLD, 2);
    std::function<void()> mpi_barrier = [&] { (*t)->barrier(); };
#ifdef BRISK_HAVE_UCX
    auto u = brisk::UcxTransport::create();
    if (!u.ok()) MPI_Abort(MPI_COMM_WORLD, 2);
    std::function<void()> ucx_barrier = [&] { (*u)->barrier(); };
    std::vector<std::byte> heap(64 << 20);
#endif
    for (std::size_t bytes : {8, 1024}) {
      raw_pingpong(rank, 5000, bytes);
      transport_pingpong(**t, mpi_barrier, 5000, bytes);
#ifdef BRISK_HAVE_UCX
      transport_pingpong(**u, ucx_barrier, 5000, bytes);
#endif
    }
    for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{64} << 20}) {
      raw_get(rank, bytes, 20);
      transport_get(**t, mpi_barrier, (*t)->window(), bytes, 20);
#ifdef BRISK_HAVE_UCX
      transport_get(**u, ucx_barrier, heap, bytes, 20);
#endif
    }
  }
  MPI_Finalize();
  return 0;
}
