// The README's ten-line example: futures, a dependency, a nested task.
#include <brisk/brisk.hpp>
#include <cstdio>

int add(int a, int b) { return a + b; }
BRISK_REMOTE(add);

int main(int argc, char** argv) {
  return brisk::run(argc, argv, [] {
    auto a = brisk::remote(add, 1, 2);      // a future, at once
    auto b = brisk::remote(add, a, 10);     // waits for a: a dependency
    std::printf("1 + 2 + 10 = %d\n", brisk::get(b));
    return brisk::get(b) == 13 ? 0 : 1;
  });
}
