#include "brisk/core/status.hpp"

#include <atomic>
#include <cstdio>

#include "brisk/core/run.hpp"

namespace brisk {

const char* status_code_name(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

namespace detail {
namespace {
std::atomic<AbortHook> g_abort_hook{nullptr};
std::atomic<int> g_log_rank{-1};
}  // namespace

void set_abort_hook(AbortHook hook) noexcept { g_abort_hook.store(hook); }
void set_log_rank(int rank) noexcept { g_log_rank.store(rank); }
int log_rank() noexcept { return g_log_rank.load(std::memory_order_relaxed); }

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << "brisk: check failed on rank " << log_rank() << " at " << file << ":" << line
          << ": " << condition << ": ";
}

CheckFailure::~CheckFailure() {
  std::string msg = stream_.str();
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  if (AbortHook hook = g_abort_hook.load()) hook(exit_code::kInternalError);
  std::abort();
}

}  // namespace detail
}  // namespace brisk
