#include "shm/node_segment.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace brisk::detail {

void* create_node_segment(const std::string& name, std::size_t bytes, bool populate, bool& created,
                          std::string& error) {
  created = false;
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    error = fmt::format("shm_open {}: {}", name, std::strerror(errno));
    return nullptr;
  }
  created = true;
  void* map = nullptr;
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    error = fmt::format("reserving {} bytes of shared memory for {}: {}", bytes, name, std::strerror(err));
  } else {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED) {
      error = fmt::format("mmap {}: {}", name, std::strerror(errno));
    } else {
      map = p;
    }
  }
  ::close(fd);
  return map;
}

void* map_node_segment(const std::string& name, std::size_t bytes, int owner, std::string& error) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    error = fmt::format("shm_open {} (rank {}'s): {}", name, owner, std::strerror(errno));
    return nullptr;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    error = fmt::format("mmap {} (rank {}'s): {}", name, owner, std::strerror(errno));
    return nullptr;
  }
  return p;
}

bool all_ranks_ok(MPI_Comm comm, const std::string& error) {
  int ok = error.empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, comm);
  return ok != 0;
}

}  // namespace brisk::detail
