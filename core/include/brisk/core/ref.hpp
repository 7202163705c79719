// brisk/core/ref.hpp — Ref<T>: a future for an object that a task (or put) produces.
#pragma once

#include <type_traits>
#include <utility>

#include "brisk/core/detail/object.hpp"
#include "brisk/core/ids.hpp"

namespace brisk {

namespace detail {
template <class T>
using stored_t = std::conditional_t<std::is_void_v<T>, Unit, T>;
}

// Ref<T>
//
// A cheap, copyable handle to an immutable object. Copies count as references: the
// object is freed when the last Ref to it is gone and no pending task reads it.
// Passing a Ref<T> to brisk::remote for a parameter of type T makes the task wait for
// the object: that is how a dependency is written.
// Thread safety: a Ref may be copied, destroyed and read from any thread.
// Example:
//   brisk::Ref<int> r = brisk::remote(add, 1, 2);
//   int v = brisk::get(r);
template <class T>
class Ref {
 public:
  using value_type = T;

  Ref() = default;
  Ref(const Ref& other) noexcept : state_(other.state_) {
    if (state_) state_->add_ref();
  }
  Ref(Ref&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  Ref& operator=(const Ref& other) noexcept {
    Ref(other).swap(*this);
    return *this;
  }
  Ref& operator=(Ref&& other) noexcept {
    Ref(std::move(other)).swap(*this);
    return *this;
  }
  ~Ref() {
    if (state_) state_->release();
  }
  void swap(Ref& other) noexcept { std::swap(state_, other.state_); }

  // False for a default-constructed or moved-from Ref.
  bool valid() const noexcept { return state_ != nullptr; }
  ObjectId id() const noexcept { return state_ ? state_->id() : ObjectId{}; }
  // True once the object holds its value or an error; never blocks.
  bool ready() const noexcept { return state_ && state_->ready(); }

  // Takes over one reference to `state` (which must hold a detail::stored_t<T>).
  static Ref adopt(detail::TypedObject<detail::stored_t<T>>* state) noexcept {
    Ref r;
    r.state_ = state;
    return r;
  }
  detail::TypedObject<detail::stored_t<T>>* state() const noexcept {
    return static_cast<detail::TypedObject<detail::stored_t<T>>*>(state_);
  }

  friend bool operator==(const Ref& a, const Ref& b) noexcept { return a.state_ == b.state_; }

 private:
  detail::ObjectState* state_ = nullptr;
};

template <class T>
struct is_ref : std::false_type {};
template <class T>
struct is_ref<Ref<T>> : std::true_type {};
template <class T>
inline constexpr bool is_ref_v = is_ref<std::remove_cvref_t<T>>::value;

}  // namespace brisk
