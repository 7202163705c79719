#include "brisk/core/detail/futex.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

namespace brisk::detail {

namespace {
void wait_op(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::optional<std::chrono::nanoseconds> timeout,
             int op) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  timespec ts{};
  timespec* tsp = nullptr;
  if (timeout) {
    auto ns = timeout->count() < 0 ? 0 : timeout->count();
    ts.tv_sec = static_cast<time_t>(ns / 1000000000);
    ts.tv_nsec = static_cast<long>(ns % 1000000000);
    tsp = &ts;
  }
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, expected, tsp, nullptr, 0);
}

void wake_op(std::atomic<std::uint32_t>* word, int count, int op) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, count <= 0 ? INT_MAX : count, nullptr, nullptr, 0);
}
}  // namespace

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::optional<std::chrono::nanoseconds> timeout) noexcept {
  wait_op(word, expected, timeout, FUTEX_WAIT_PRIVATE);
}

void futex_wake(std::atomic<std::uint32_t>* word, int count) noexcept { wake_op(word, count, FUTEX_WAKE_PRIVATE); }

void futex_wait_shared(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::optional<std::chrono::nanoseconds> timeout) noexcept {
  wait_op(word, expected, timeout, FUTEX_WAIT);
}

void futex_wake_shared(std::atomic<std::uint32_t>* word, int count) noexcept { wake_op(word, count, FUTEX_WAKE); }

void set_os_thread_name(std::string_view name) noexcept {
  char buf[16] = {};
  const std::size_t n = std::min(name.size(), sizeof buf - 1);
  std::copy_n(name.data(), n, buf);
  pthread_setname_np(pthread_self(), buf);
}

}  // namespace brisk::detail
