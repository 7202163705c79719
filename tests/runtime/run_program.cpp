// A brisk program for the tests of brisk::run under mpirun: options, exit codes,
// driver exceptions, per-rank timelines.
//   run_program [--exit=N] [--throw] [--brisk-...]
#include <brisk/brisk.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace {
int square(int x) { return x * x; }
BRISK_REMOTE(square);
}  // namespace

int main(int argc, char** argv) {
  return brisk::run(argc, argv, []() -> int {
    int code = 0;
    for (const auto& a : brisk::program_args()) {
      if (a.rfind("--exit=", 0) == 0) code = std::stoi(a.substr(7));
      if (a == "--throw") throw std::runtime_error("driver failure on purpose");
      if (a.rfind("--brisk-", 0) == 0) {
        std::printf("a brisk option leaked into program_args: %s\n", a.c_str());
        return 10;
      }
    }
    int s = 0;
    for (int i = 0; i < 100; ++i) s += brisk::get(brisk::remote(square, i));
    std::printf("sum of squares %d\n", s);
    return s == 328350 ? code : 11;
  });
}
