// brisk/core/error.hpp — the exceptions that brisk's API throws.
//
// Exceptions thrown by user task code never cross a rank: the worker catches them,
// stores an ErrorInfo as the task's result, and `get` rethrows it as TaskError (or
// a subclass) on whichever rank asks. Errors flow through dependent tasks: a task
// whose argument is an error does not run, and its result is that same error.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

namespace brisk {

// Base of everything brisk throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Why an object holds an error instead of a value.
enum class ErrorKind {
  kTaskFailed,    // the user function threw
  kInfeasible,    // no node can ever meet the task's resource demand
  kStoreFull,     // the value fits neither in memory nor on the spill disk
  kNotRegistered, // the function is not registered (BRISK_REMOTE)
  kRankLost,      // the rank that ran it (or held its actor) died
  kObjectLost,    // its only copy died with a rank and it cannot be made again
};

// What a failed task leaves behind; shared by every object the failure reaches.
struct ErrorInfo {
  ErrorKind kind = ErrorKind::kTaskFailed;
  std::string message;   // the original exception's what()
  std::string function;  // the registered name (or task name) of the failing task
  int rank = -1;         // the rank that ran it
  int attempts = 1;      // how many times it ran (1 + retries used)
};

// TaskError
//
// Thrown by get/wait consumers when the object's producing task (or one of its
// inputs, transitively) failed. what() reads
//   "task 'name' failed on rank R: original message".
class TaskError : public Error {
 public:
  explicit TaskError(std::shared_ptr<const ErrorInfo> info);
  const std::string& message() const noexcept { return info_->message; }
  const std::string& function_name() const noexcept { return info_->function; }
  int rank() const noexcept { return info_->rank; }
  ErrorKind kind() const noexcept { return info_->kind; }
  const ErrorInfo& info() const noexcept { return *info_; }

 private:
  std::shared_ptr<const ErrorInfo> info_;
};

// ObjectStoreError
//
// The object fits neither in the store's memory nor in its spill directory. Thrown
// by put, and by get for a task result that could not be stored. No other object
// is affected.
class ObjectStoreError : public TaskError {
 public:
  using TaskError::TaskError;
};

// ResourceError
//
// The task demands resources that no node of the job has; it failed at submission.
class ResourceError : public TaskError {
 public:
  using TaskError::TaskError;
};

// ObjectLostError
//
// The object's only copy was on a rank that died, and it cannot be made again: it
// was made by put (no lineage), its owner died too, or its lineage was evicted
// (--brisk-lineage-bytes). Thrown by get; tasks that read it fail with it.
class ObjectLostError : public TaskError {
 public:
  using TaskError::TaskError;
};

namespace detail {
// Throws the TaskError subclass that matches info->kind.
[[noreturn]] void throw_error(const std::shared_ptr<const ErrorInfo>& info);
}  // namespace detail

}  // namespace brisk
