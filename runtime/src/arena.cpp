#include "brisk/runtime/arena.hpp"

namespace brisk {

ArenaAllocator::ArenaAllocator(std::uint64_t size) : size_(size) {
  if (size_ > 0) free_.emplace(0, size_);
}

std::optional<std::uint64_t> ArenaAllocator::allocate(std::uint64_t bytes) {
  const std::uint64_t need = ((bytes ? bytes : 1) + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const std::uint64_t offset = it->first;
    const std::uint64_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + need, rest);
    used_.emplace(offset, need);
    used_bytes_ += need;
    return offset;
  }
  return std::nullopt;
}

void ArenaAllocator::free(std::uint64_t offset) {
  std::lock_guard lock(mutex_);
  auto u = used_.find(offset);
  if (u == used_.end()) return;
  std::uint64_t start = offset;
  std::uint64_t length = u->second;
  used_bytes_ -= length;
  used_.erase(u);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += length;
      return;
    }
  }
  free_.emplace(start, length);
}

std::uint64_t ArenaAllocator::used() const {
  std::lock_guard lock(mutex_);
  return used_bytes_;
}

std::size_t ArenaAllocator::blocks() const {
  std::lock_guard lock(mutex_);
  return used_.size();
}

}  // namespace brisk
