// brisk/core/object_store.hpp — the rank's object store: accounting, spilling, freeing.
//
// Values live in their ObjectState (no copy into a separate arena). The store counts
// the bytes of objects of at least ObjectState::kMinSpillBytes against a capacity;
// past it, the oldest unpinned objects are serialized to files in a spill directory
// and read back when a task or a get needs them. A value that fits neither in memory
// nor on disk turns its object into a kStoreFull error (put throws it); no other
// object is touched. Smaller objects are always kept in memory.
//
// Thread safety: all members may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "brisk/core/status.hpp"

namespace brisk {

namespace detail {
class ObjectState;
}

struct StoreStats {
  std::size_t memory_bytes = 0;    // accounted bytes resident in memory
  std::size_t capacity = 0;
  std::size_t spilled_bytes = 0;   // bytes currently in spill files
  std::size_t spill_capacity = 0;  // 0 = limited by the disk only
  std::uint64_t spills = 0;        // objects written out so far
  std::uint64_t restores = 0;      // objects read back so far
};

class ObjectStore {
 public:
  struct Config {
    std::size_t capacity = std::size_t{1} << 30;
    std::string spill_dir;             // parent directory; a private subdirectory is made in it
    std::size_t spill_capacity = 0;    // 0 = unlimited
  };

  explicit ObjectStore(Config config);
  // Removes the private spill directory and its files, and detaches the objects it
  // still accounts (a spilled one then fails to read with a clear error).
  ~ObjectStore();
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  StoreStats stats() const;
  const std::string& spill_path() const noexcept { return spill_path_; }

  // --- used by ObjectState ---
  // Accounts a freshly constructed value of `bytes`; may spill older objects or the
  // object itself. Returns non-ok (kResourceExhausted) if it fits nowhere; the caller
  // then destroys the value and completes the object with an error.
  Status admit(detail::ObjectState* object, std::size_t bytes);
  // Makes a spilled object resident again and pins it (pins_ incremented under lock).
  Status restore_and_pin(detail::ObjectState* object);
  // Forgets the object (unaccounts it, removes its spill file).
  void forget(detail::ObjectState* object) noexcept;
  // Spills until the store is under capacity again (after a restore overshot it).
  void evict_to_capacity();

 private:
  bool spill_locked(detail::ObjectState* object);   // true when written out
  struct List {
    detail::ObjectState* head = nullptr;  // oldest
    detail::ObjectState* tail = nullptr;
  };
  static void push_locked(List& list, detail::ObjectState* object);
  static void remove_locked(List& list, detail::ObjectState* object);
  void evict_locked(std::size_t need);
  std::string file_for(const detail::ObjectState* object) const;

  Config config_;
  std::string spill_path_;
  mutable std::mutex mutex_;
  std::size_t memory_bytes_ = 0;
  std::size_t spilled_bytes_ = 0;
  std::uint64_t spills_ = 0;
  std::uint64_t restores_ = 0;
  List resident_;  // spill candidates, oldest first
  List spilled_;
  bool spill_dir_made_ = false;
};

}  // namespace brisk
