#include "brisk/core/detail/futex.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

namespace brisk::detail {

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  timespec ts{};
  timespec* tsp = nullptr;
  if (timeout) {
    auto ns = timeout->count() < 0 ? 0 : timeout->count();
    ts.tv_sec = static_cast<time_t>(ns / 1000000000);
    ts.tv_nsec = static_cast<long>(ns % 1000000000);
    tsp = &ts;
  }
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, tsp,
          nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>* word, int count) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE,
          count <= 0 ? INT_MAX : count, nullptr, nullptr, 0);
}

void set_os_thread_name(std::string_view name) noexcept {
  char buf[16] = {};
  const std::size_t n = std::min(name.size(), sizeof buf - 1);
  std::copy_n(name.data(), n, buf);
  pthread_setname_np(pthread_self(), buf);
}

}  // namespace brisk::detail
