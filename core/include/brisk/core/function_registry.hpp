// brisk/core/function_registry.hpp — BRISK_REMOTE and the table of remote functions.
//
// A remote function is identified on every rank by FunctionId, the FNV-1a hash of
// the name it was registered under, never by its address (ranks may load the
// binary at different addresses). Register each function once, at namespace scope,
// with the same spelling in every binary of the job:
//
//   int add(int a, int b) { return a + b; }
//   BRISK_REMOTE(add);
//   struct Physics { static double step(double); };
//   BRISK_REMOTE(Physics::step);
//   struct Counter { int add(int n); };                  // an actor's method
//   BRISK_REMOTE(Counter::add);
//   int scale(int);  double scale(double);               // overloads:
//   BRISK_REMOTE_OVERLOAD(scale, int(int));
//   BRISK_REMOTE_OVERLOAD(scale, double(double));
//
// Thread safety: registration normally happens during static initialisation;
// lookups are safe from any thread at any time, concurrently with registration.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "brisk/core/ids.hpp"

namespace brisk {

namespace detail {
class TaskBase;
class ObjectState;
class ObjectResolver;
struct TaskDecodeArgs;
// Builds the task for a spec received from another rank (see task.hpp).
using TaskDecoder = TaskBase* (*)(const TaskDecodeArgs& args);
// The decoder for R(P...), or nullptr when its types cannot cross ranks.
template <class R, class... P>
TaskDecoder decoder_for() noexcept;
}  // namespace detail

struct FunctionInfo {
  FunctionId id;
  std::string name;       // as registered, e.g. "Physics::step" or "scale(int(int))"
  const void* address;    // this process's address of the function
  detail::TaskDecoder decode = nullptr;  // builds tasks received from other ranks
};

namespace detail {

// Registers `address` under `name`. Registering the same name again (from another
// translation unit or library) maps the new address to the same entry. Two different
// names with the same 64-bit id is a broken invariant (BRISK_CHECK).
const FunctionInfo* register_function(std::string_view name, const void* address,
                                      TaskDecoder decode = nullptr);

// The entry for a function address, or nullptr when it was never registered.
// Fast path: a per-thread cache in front of a read-mostly table.
const FunctionInfo* find_function(const void* address) noexcept;
const FunctionInfo* find_function(FunctionId id) noexcept;

// Every registered function (for diagnostics).
std::vector<const FunctionInfo*> registered_functions();

// Stores a function pointer as an untyped address.
template <class R, class... P>
const void* function_address(R (*f)(P...)) noexcept {
  return reinterpret_cast<const void*>(f);
}

// Methods of actor classes (actor.hpp): `call(&C::m, ...)` finds the invoker that
// BRISK_REMOTE(C::m) registered from the member pointer's bytes and type.
void register_method_key(const char* type, const void* key, std::size_t size, const FunctionInfo* info);
const FunctionInfo* find_method_key(const char* type, const void* key, std::size_t size) noexcept;
// Registers the invoker of method M under `name` (defined in actor.hpp).
template <auto M>
const FunctionInfo* register_method(std::string_view name);

struct FunctionRegistration {
  template <class R, class... P>
  FunctionRegistration(std::string_view name, R (*f)(P...))
      : info(register_function(name, function_address(f), decoder_for<R, P...>())) {}
  const FunctionInfo* info;
};

// BRISK_REMOTE's registration: a function, or a method of an actor class.
template <auto F>
struct Registered {
  explicit Registered(std::string_view name) {
    if constexpr (std::is_member_function_pointer_v<decltype(F)>) {
      info = register_method<F>(name);
    } else {
      info = FunctionRegistration(name, F).info;
    }
  }
  const FunctionInfo* info;
};

}  // namespace detail
}  // namespace brisk

#define BRISK_PP_CAT_(a, b) a##b
#define BRISK_PP_CAT(a, b) BRISK_PP_CAT_(a, b)

// Registers the free function, static member function or actor method `f` under
// the name "f".
#define BRISK_REMOTE(f)                                         \
  [[maybe_unused]] static const ::brisk::detail::Registered<&f> \
      BRISK_PP_CAT(brisk_remote_registration_, __COUNTER__)(#f)

// Registers one overload of `f`, chosen by its signature, under "f(signature)".
#define BRISK_REMOTE_OVERLOAD(f, ...)                                                      \
  [[maybe_unused]] static const ::brisk::detail::FunctionRegistration                   \
      BRISK_PP_CAT(brisk_remote_registration_, __COUNTER__)(#f "(" #__VA_ARGS__ ")", \
                                                            static_cast<std::add_pointer_t<__VA_ARGS__>>(&f))

// The decoders are defined with the task types.
#include "brisk/core/detail/task.hpp"
