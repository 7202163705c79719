// Must not compile: a Ref<std::string> where the remote function takes an int.
#include <brisk/brisk.hpp>
#include <string>
int twice(int x) { return 2 * x; }
BRISK_REMOTE(twice);
void submit(brisk::Ref<std::string> s) { brisk::remote(twice, s); }
