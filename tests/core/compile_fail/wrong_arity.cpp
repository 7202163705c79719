// Must not compile: two arguments for a one-parameter function.
#include <brisk/brisk.hpp>
int twice(int x) { return 2 * x; }
BRISK_REMOTE(twice);
void submit() { brisk::remote(twice, 1, 2); }
