#include "brisk/core/error.hpp"

#include <fmt/format.h>

namespace brisk {
namespace {
std::string describe(const ErrorInfo& e) {
  switch (e.kind) {
    case ErrorKind::kTaskFailed:
      if (e.attempts > 1)
        return fmt::format("task '{}' failed on rank {} after {} attempts: {}", e.function, e.rank,
                           e.attempts, e.message);
      return fmt::format("task '{}' failed on rank {}: {}", e.function, e.rank, e.message);
    case ErrorKind::kInfeasible:
      return fmt::format("task '{}' cannot be scheduled: {}", e.function, e.message);
    case ErrorKind::kStoreFull:
      return fmt::format("result of task '{}' on rank {} could not be stored: {}", e.function,
                         e.rank, e.message);
    case ErrorKind::kNotRegistered:
      return fmt::format("task '{}': {}", e.function, e.message);
    case ErrorKind::kRankLost:
      return fmt::format("task '{}' was lost: {}", e.function, e.message);
    case ErrorKind::kObjectLost:
      if (e.function.empty()) return fmt::format("object lost: {}", e.message);
      return fmt::format("object lost (made by '{}'): {}", e.function, e.message);
  }
  return e.message;
}
}  // namespace

TaskError::TaskError(std::shared_ptr<const ErrorInfo> info)
    : Error(describe(*info)), info_(std::move(info)) {}

namespace detail {
void throw_error(const std::shared_ptr<const ErrorInfo>& info) {
  switch (info->kind) {
    case ErrorKind::kStoreFull: throw ObjectStoreError(info);
    case ErrorKind::kInfeasible: throw ResourceError(info);
    case ErrorKind::kObjectLost: throw ObjectLostError(info);
    default: throw TaskError(info);
  }
}
}  // namespace detail
}  // namespace brisk
