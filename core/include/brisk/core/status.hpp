// brisk/core/status.hpp — Status and StatusOr<T> for expected failures at module
// boundaries (bad options, store full, I/O), and BRISK_CHECK for broken invariants.
#pragma once

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace brisk {

// A small fixed set of codes; the detail goes into the message.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad user input: options, configs, files, messages
  kNotFound,          // an id, function or file that does not exist
  kResourceExhausted, // store, disk or resource limits
  kUnavailable,       // a peer, rank or device cannot be reached
  kFailedPrecondition,
  kInternal,
};

const char* status_code_name(StatusCode code) noexcept;

// Status
//
// Either ok or a code with a message. Cheap to move; [[nodiscard]] so that a
// failure cannot be dropped silently.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const noexcept { return code_ == StatusCode::kOk; }
  StatusCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// StatusOr<T>
//
// A T or a non-ok Status. value() on an error is a broken invariant (aborts).
template <class T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}                 // NOLINT(implicit)
  StatusOr(Status status) : v_(std::move(status)) {           // NOLINT(implicit)
    if (std::get<Status>(v_).ok()) std::abort();              // an ok Status carries no T
  }
  bool ok() const noexcept { return std::holds_alternative<T>(v_); }
  const Status& status() const& {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { check(); return std::get<T>(v_); }
  const T& value() const& { check(); return std::get<T>(v_); }
  T&& value() && { check(); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void check() const {
    if (!ok()) std::abort();
  }
  std::variant<T, Status> v_;
};

namespace detail {

// Collects a message, then reports rank/file/line and aborts the job (MPI_Abort
// when MPI is up, through the hook the runtime installs; std::abort otherwise).
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  template <class T>
  CheckFailure& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

// Called by a failed BRISK_CHECK after the message is printed; the runtime sets it
// to MPI_Abort. Must not return.
using AbortHook = void (*)(int code);
void set_abort_hook(AbortHook hook) noexcept;
// The rank printed in check messages (-1 before the runtime knows it).
void set_log_rank(int rank) noexcept;
int log_rank() noexcept;

}  // namespace detail
}  // namespace brisk

// BRISK_CHECK(cond) << "detail";  — for broken invariants only, never for user input.
#define BRISK_CHECK(cond) \
  if (__builtin_expect(static_cast<bool>(cond), 1)) { \
  } else                                              \
    ::brisk::detail::CheckFailure(__FILE__, __LINE__, #cond)
