#include "brisk/core/ids.hpp"

#include <cstdio>

namespace brisk {

std::string UniqueId::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

}  // namespace brisk
