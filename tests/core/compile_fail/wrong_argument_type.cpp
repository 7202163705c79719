// Must not compile: a std::string where the remote function takes an int.
#include <brisk/brisk.hpp>
#include <string>
int twice(int x) { return 2 * x; }
BRISK_REMOTE(twice);
void submit() { brisk::remote(twice, std::string("seven")); }
