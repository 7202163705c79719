// Checkpoint files with bytes flipped, overwritten or cut off: the reader and
// `brisk-ckpt verify` either refuse them with a clear error or give back exactly what
// was written. Never different values accepted as good, never a crash or a hang.
//
//   mpirun -n 2 checkpoint_corruption write DIR
//       a collective checkpoint (parallel HDF5, both ranks write) and a sharded one (a
//       main file linking two shard files, as the ucx backend writes them);
//   checkpoint_corruption trials DIR N SEED BRISK_CKPT
//       N damaged copies, each checked in a child process (reader API: open, verify,
//       every read), one in 8 also by BRISK_CKPT verify; prints the figures and exits
//       1 if a copy was accepted with other values, crashed or hung a reader, got an
//       error that names neither the checkpoint nor the damaged file, or the tool
//       disagreed with the reader.
//
// Damage, in equal shares: 1-8 bits flipped anywhere in the file; 1-8 bits flipped in
// its metadata (the bytes outside every dataset's data, where uniform flips rarely
// land); 1-64 bytes overwritten with random ones; the file cut at a random length. The
// damaged file is the main file or, for the sharded checkpoint, one of its shards.
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "brisk/checkpoint/checkpoint.hpp"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

Bytes pattern(std::size_t n, unsigned seed) {
  Bytes v(n);
  std::mt19937 gen(seed);
  for (auto& b : v) b = static_cast<std::byte>(gen());
  return v;
}

int write_fixtures(const fs::path& dir) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Collective: every rank writes its objects into one file.
  auto w = brisk::CheckpointWriter::begin(MPI_COMM_WORLD, dir / "collective", 1, {});
  brisk::Status s = w.ok() ? brisk::Status() : w.status();
  if (s.ok()) {
    if (rank == 0) {
      s = w->add_object("alpha", pattern(300000, 1));
      if (s.ok()) s = w->save("step", 42);
      if (s.ok()) s = w->save("name", std::string("fixture"));
      if (s.ok()) s = w->add_meta("lineage", pattern(100, 2));
    }
    if (s.ok()) s = w->add_object("part/" + std::to_string(rank), pattern(20000 + 1000 * rank, 10 + rank));
    if (s.ok()) s = w->commit();
  }
  if (!s.ok()) {
    std::fprintf(stderr, "checkpoint_corruption: rank %d: %s\n", rank, s.to_string().c_str());
    return 1;
  }
  // Sharded: rank 0 writes the shards of two ranks and the main file that links them.
  if (rank == 0) {
    const fs::path sharded = dir / "sharded";
    auto main = brisk::CheckpointWriter::begin(MPI_COMM_SELF, sharded, 2, {.keep = 0, .ranks = 2});
    s = main.ok() ? brisk::Status() : main.status();
    for (int r = 0; r < 2 && s.ok(); ++r) {
      const std::string shard = brisk::checkpoint_shard_name(2, "t0", r);
      const std::vector<std::pair<std::string, Bytes>> objects{
          {brisk::checkpoint_held_name(1 - r, 7, 100 + r), pattern(5000 + 700 * r, 20 + r)},
          {"data/a/" + std::to_string(r), pattern(40000, 30 + r)}};
      auto list = brisk::write_checkpoint_shard(sharded, shard, objects);
      s = list.ok() ? brisk::Status() : list.status();
      for (std::size_t i = 0; s.ok() && i < list->size(); ++i) s = main->add_shard_object((*list)[i], shard, r);
    }
    if (s.ok()) s = main->save("step", 7);
    if (s.ok()) s = main->add_object("own", pattern(3000, 40));
    if (s.ok()) s = main->commit();
    if (!s.ok()) {
      std::fprintf(stderr, "checkpoint_corruption: the sharded checkpoint: %s\n", s.to_string().c_str());
      return 1;
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Trials.

Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes b(c.size());
  if (!c.empty()) std::memcpy(b.data(), c.data(), c.size());
  return b;
}

void write_file(const fs::path& p, const Bytes& b) {
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// What a reader gives back of a checkpoint: every field it returns but where in the
// file the bytes lie (file_offset), and every dataset's bytes.
std::string describe(const brisk::CheckpointReader& r, std::string* error) {
  const auto& i = r.info();
  std::string out = std::to_string(i.format_version) + " " + std::to_string(i.ranks) + " " + std::to_string(i.sequence) +
                    " " + std::to_string(i.created_unix_ns) + " " + i.created + " " + i.brisk_version + "\n";
  for (const auto& e : r.entries()) {
    out += std::to_string(static_cast<int>(e.section)) + " " + e.name + " " + e.path + " " + std::to_string(e.size) + " " +
           std::to_string(e.crc32c) + " " + std::to_string(e.rank) + " " + e.file + "\n";
    auto bytes = r.read(e.section, e.name);
    if (!bytes.ok()) {
      *error = bytes.status().message();
      return {};
    }
    out.append(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  }
  return out;
}

// One checkpoint and its files (the main file first).
struct Fixture {
  fs::path dir;
  std::vector<std::string> files;
  std::map<std::string, Bytes> pristine;
  std::map<std::string, std::vector<std::pair<std::uint64_t, std::uint64_t>>> data;  // [offset, end) per file
  std::string expected;
};

Fixture load(const fs::path& dir) {
  Fixture f;
  f.dir = dir;
  auto files = brisk::list_checkpoints(dir);
  if (!files.ok() || files->size() != 1) {
    std::fprintf(stderr, "checkpoint_corruption: expected one checkpoint in %s\n", dir.c_str());
    std::exit(2);
  }
  const std::string main = files->front().path.filename().string();
  f.files.push_back(main);
  auto reader = brisk::CheckpointReader::open(files->front().path);
  std::string error;
  if (!reader.ok() || !reader->verify().ok() || (f.expected = describe(*reader, &error)).empty()) {
    std::fprintf(stderr, "checkpoint_corruption: the pristine checkpoint in %s does not read back\n", dir.c_str());
    std::exit(2);
  }
  for (const auto& e : reader->entries()) {
    const std::string file = e.file.empty() ? main : e.file;
    if (std::find(f.files.begin(), f.files.end(), file) == f.files.end()) f.files.push_back(file);
    if (e.file_offset >= 0) {
      f.data[file].emplace_back(static_cast<std::uint64_t>(e.file_offset), static_cast<std::uint64_t>(e.file_offset) + e.size);
    }
  }
  for (const auto& file : f.files) f.pristine[file] = read_file(dir / file);
  return f;
}

enum class Verdict { kRejected, kIdentical, kDifferent, kCrashed, kHung };

struct Outcome {
  Verdict verdict;
  std::string detail;  // the reader's error, or what differed
};

// Opens, verifies and reads the checkpoint at `path` in a child process.
Outcome check_in_child(const fs::path& path, const std::string& expected) {
  int pipefd[2];
  if (pipe(pipefd) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    alarm(30);
    std::string verdict;
    auto reader = brisk::CheckpointReader::open(path);
    brisk::Status st = reader.ok() ? reader->verify() : reader.status();
    std::string error;
    if (st.ok()) {
      const std::string got = describe(*reader, &error);
      if (!error.empty()) {
        verdict = "R" + error;
      } else {
        verdict = got == expected ? "I" : "D";
      }
    } else {
      verdict = "R" + st.message();
    }
    (void)!write(pipefd[1], verdict.data(), verdict.size());
    _exit(0);
  }
  close(pipefd[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<std::size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    return {WTERMSIG(status) == SIGALRM ? Verdict::kHung : Verdict::kCrashed, strsignal(WTERMSIG(status))};
  }
  if (msg.empty()) return {Verdict::kCrashed, "no answer"};
  switch (msg[0]) {
    case 'I': return {Verdict::kIdentical, ""};
    case 'D': return {Verdict::kDifferent, "values differ"};
    default: return {Verdict::kRejected, msg.substr(1)};
  }
}

int run_tool(const std::string& tool, const fs::path& path) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    alarm(30);
    execl(tool.c_str(), tool.c_str(), "verify", path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const char* kDamage[] = {"bits flipped anywhere", "bits flipped in metadata", "bytes overwritten", "truncated"};

Bytes damage(const Bytes& good, int kind, const std::vector<std::pair<std::uint64_t, std::uint64_t>>& data,
             std::mt19937_64& gen) {
  Bytes b = good;
  auto any = [&] { return std::uniform_int_distribution<std::size_t>(0, b.size() - 1)(gen); };
  auto metadata = [&] {
    for (;;) {
      const std::size_t at = any();
      if (std::none_of(data.begin(), data.end(), [&](const auto& r) { return at >= r.first && at < r.second; })) return at;
    }
  };
  const int n = std::uniform_int_distribution<int>(1, 8)(gen);
  switch (kind) {
    case 0:
    case 1:
      for (int i = 0; i < n; ++i) b[kind == 0 ? any() : metadata()] ^= std::byte(1u << (gen() % 8));
      break;
    case 2: {
      const std::size_t len = std::uniform_int_distribution<std::size_t>(1, 64)(gen);
      const std::size_t at = any();
      for (std::size_t i = at; i < std::min(b.size(), at + len); ++i) b[i] = static_cast<std::byte>(gen());
      break;
    }
    case 3: b.resize(any()); break;
  }
  return b;
}

int run_trials(const fs::path& dir, int trials, std::uint64_t seed, const std::string& tool) {
  std::vector<Fixture> fixtures{load(dir / "collective"), load(dir / "sharded")};
  const fs::path scratch = dir / "scratch";
  std::mt19937_64 gen(seed);
  std::map<Verdict, int> count;
  std::map<std::string, int> by_damage_rejected, by_damage_identical;
  int tool_runs = 0, tool_disagreed = 0, unclear = 0;
  std::map<std::string, std::string> examples;  // the first rejection message per damage
  for (int t = 0; t < trials; ++t) {
    const Fixture& f = fixtures[static_cast<std::size_t>(t) % fixtures.size()];
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    for (const auto& [file, bytes] : f.pristine) write_file(scratch / file, bytes);
    const std::string victim = f.files[std::uniform_int_distribution<std::size_t>(0, f.files.size() - 1)(gen)];
    const int kind = static_cast<int>(gen() % 4);
    const auto it = f.data.find(victim);
    write_file(scratch / victim, damage(f.pristine.at(victim), kind, it == f.data.end() ? decltype(it->second){} : it->second, gen));
    const fs::path path = scratch / f.files.front();
    const Outcome o = check_in_child(path, f.expected);
    ++count[o.verdict];
    const std::string what = std::string(kDamage[kind]) + (victim == f.files.front() ? "" : " (shard)");
    if (o.verdict == Verdict::kRejected) {
      ++by_damage_rejected[what];
      examples.emplace(what, o.detail);
      // A clear error names the checkpoint or its file.
      if (o.detail.find(f.files.front()) == std::string::npos && o.detail.find(victim) == std::string::npos) {
        ++unclear;
        std::printf("unclear error (%s, %s): %s\n", f.dir.filename().c_str(), what.c_str(), o.detail.c_str());
      }
    } else if (o.verdict == Verdict::kIdentical) {
      ++by_damage_identical[what];
    } else {
      std::printf("FAIL trial %d (%s, %s in %s): %s\n", t, f.dir.filename().c_str(), what.c_str(), victim.c_str(),
                  o.detail.c_str());
      fs::copy(scratch, dir / ("failed-" + std::to_string(t)), fs::copy_options::recursive);
    }
    if (t % 8 == 0 && !tool.empty()) {
      ++tool_runs;
      const int rc = run_tool(tool, path);
      const bool agrees = (o.verdict == Verdict::kRejected && rc == 1) || (o.verdict == Verdict::kIdentical && rc == 0);
      if (!agrees) {
        ++tool_disagreed;
        std::printf("FAIL trial %d: brisk-ckpt verify exited %d, the reader said %s\n", t, rc,
                    o.verdict == Verdict::kRejected ? "rejected" : "other");
      }
    }
  }
  fs::remove_all(scratch);
  std::printf("checkpoint corruption: %d damaged files (seed %llu): rejected %d, accepted identical %d, "
              "accepted different %d, crashed %d, hung %d; brisk-ckpt verify run on %d, disagreed on %d; "
              "unclear errors %d\n",
              trials, static_cast<unsigned long long>(seed), count[Verdict::kRejected], count[Verdict::kIdentical],
              count[Verdict::kDifferent], count[Verdict::kCrashed], count[Verdict::kHung], tool_runs, tool_disagreed,
              unclear);
  for (const auto& [what, n] : by_damage_rejected) {
    std::printf("  %-36s rejected %5d, identical %5d; e.g. %s\n", what.c_str(), n, by_damage_identical[what],
                examples[what].c_str());
  }
  const bool ok = count[Verdict::kDifferent] == 0 && count[Verdict::kCrashed] == 0 && count[Verdict::kHung] == 0 &&
                  tool_disagreed == 0 && unclear == 0;
  std::printf("%s\n", ok ? "checkpoint corruption test OK" : "checkpoint corruption test FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "write") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    const int rc = write_fixtures(argv[2]);
    MPI_Finalize();
    return rc;
  }
  if (argc == 6 && std::string(argv[1]) == "trials") {
    return run_trials(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10), argv[5]);
  }
  std::fprintf(stderr, "usage: mpirun -n 2 checkpoint_corruption write DIR\n       checkpoint_corruption trials DIR N SEED BRISK_CKPT\n");
  return 2;
}
