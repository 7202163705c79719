// The global operator new and delete, replaced: in a multi-rank job, a large
// allocation (a std::vector's storage, among others) is placed in the rank's
// node-shared arena while the runtime has one installed (detail::set_new_memory,
// --brisk-arena-new-bytes), so that another rank reads such a value where it lies
// instead of from a copy the holder makes first. Everything else is malloc's.
//
// This file defines nothing else. A program that replaces operator new and delete
// itself keeps its own (an executable's definitions win over a shared library's, and
// a static link leaves this object out), and placement is then off.
#include <cstdlib>
#include <new>

#include "brisk/core/array.hpp"

namespace {

void* allocate(std::size_t n) {
  if (n >= brisk::detail::g_new_min_bytes.load(std::memory_order_relaxed)) [[unlikely]] {
    if (void* p = brisk::detail::new_memory_allocate(n)) return p;
  }
  for (;;) {
    if (void* p = std::malloc(n ? n : 1)) return p;
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}

void* allocate_nothrow(std::size_t n) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}

void release(void* p) noexcept {
  if (!p) return;
  if (brisk::detail::g_new_high.load(std::memory_order_relaxed) != 0 && brisk::detail::new_memory_release(p)) return;
  std::free(p);
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate_nothrow(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate_nothrow(n); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
