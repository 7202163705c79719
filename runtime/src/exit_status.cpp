// Each rank's exit status for the launcher (brisk/runtime/exit_status.hpp).
#include "brisk/runtime/exit_status.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace brisk::detail {
namespace {

// Filled once by init_exit_status; record_exit_status only formats into fixed
// buffers and makes system calls, so that it also works from an abort path.
char g_path[4096];
char g_tmp[4096 + 16];
int g_rank = -1;
int g_size = 0;
std::atomic<bool> g_recorded{false};

}  // namespace

void init_exit_status(int rank, int size) {
  g_rank = rank;
  g_size = size;
  const char* dir = std::getenv("BRISK_STATUS_DIR");
  if (!dir || !*dir) return;
  const int n = std::snprintf(g_path, sizeof g_path, "%s/rank-%d", dir, rank);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof g_path) {
    std::fprintf(stderr, "brisk: rank %d: BRISK_STATUS_DIR is too long; no exit status is written\n", rank);
    g_path[0] = '\0';
    return;
  }
  std::snprintf(g_tmp, sizeof g_tmp, "%s.tmp", g_path);
}

std::string lost_ranks_text(int size, const std::function<bool(int)>& lost) {
  std::string text;
  for (int r = 0; r < size; ++r) {
    if (!lost(r)) continue;
    if (!text.empty()) text += ',';
    text += std::to_string(r);
  }
  return text;
}

void record_exit_status(int code, std::string_view why, std::string_view lost) noexcept {
  if (g_recorded.exchange(true, std::memory_order_acq_rel) || g_path[0] == '\0') return;
  char line[1024];
  const std::size_t why_len = why.size() < 400 ? why.size() : 400;
  const std::size_t lost_len = lost.size() < 400 ? lost.size() : 400;
  int n = std::snprintf(line, sizeof line, "exit=%d rank=%d size=%d lost=%.*s why=%.*s\n", code, g_rank, g_size,
                        static_cast<int>(lost_len), lost.data(), static_cast<int>(why_len), why.data());
  if (n < 0) return;
  if (static_cast<std::size_t>(n) >= sizeof line) n = sizeof line - 1;
  for (int i = 0; i + 1 < n; ++i) {
    if (line[i] == '\n') line[i] = ' ';  // one line, whatever `why` holds
  }
  const int fd = ::open(g_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "brisk: rank %d: cannot write the exit status to %s: %s\n", g_rank, g_tmp,
                 std::strerror(errno));
    return;
  }
  const bool written = ::write(fd, line, static_cast<std::size_t>(n)) == n;
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || ::rename(g_tmp, g_path) != 0) {
    std::fprintf(stderr, "brisk: rank %d: cannot write the exit status to %s: %s\n", g_rank, g_path,
                 std::strerror(errno));
  }
}

}  // namespace brisk::detail
