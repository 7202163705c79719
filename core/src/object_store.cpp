#include "brisk/core/object_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <vector>

#include "brisk/core/array.hpp"
#include "brisk/core/detail/object.hpp"
#include "brisk/core/serialize.hpp"

namespace brisk {
namespace fs = std::filesystem;
using detail::ObjectState;
using detail::Residency;

namespace {

Status write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return unavailable(fmt::format("cannot create spill file {}: {}", path, std::strerror(errno)));
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(path.c_str());
      return resource_exhausted(fmt::format("cannot write spill file {}: {}", path, std::strerror(err)));
    }
    off += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(path.c_str());
    return resource_exhausted(fmt::format("cannot write spill file {}: {}", path, std::strerror(err)));
  }
  return {};
}

StatusOr<std::vector<std::byte>> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return unavailable(fmt::format("cannot open spill file {}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return unavailable(fmt::format("cannot stat spill file {}: {}", path, std::strerror(errno)));
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return unavailable(fmt::format("cannot read spill file {}: {}", path,
                                     n < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    off += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return bytes;
}

}  // namespace

ObjectStore::ObjectStore(Config config) : config_(std::move(config)) {
  std::string parent = config_.spill_dir;
  if (parent.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    parent = tmp && *tmp ? tmp : "/tmp";
  }
  spill_path_ = fmt::format("{}/brisk-spill-{}-{}", parent, ::getpid(),
                            reinterpret_cast<std::uintptr_t>(this));
}

ObjectStore::~ObjectStore() {
  for (List* list : {&resident_, &spilled_}) {
    for (ObjectState* o = list->head; o;) {
      ObjectState* next = o->lru_next_;
      o->store_ = nullptr;
      o->in_lru_ = false;
      o->lru_prev_ = o->lru_next_ = nullptr;
      o = next;
    }
  }
  if (spill_dir_made_) {
    std::error_code ec;
    fs::remove_all(spill_path_, ec);
  }
}

StoreStats ObjectStore::stats() const {
  std::lock_guard lock(mutex_);
  return StoreStats{memory_bytes_, config_.capacity, spilled_bytes_, config_.spill_capacity, spills_, restores_};
}

std::string ObjectStore::file_for(const ObjectState* o) const {
  return fmt::format("{}/{}-{:x}", spill_path_, o->id().hex(), reinterpret_cast<std::uintptr_t>(o));
}

void ObjectStore::push_locked(List& list, ObjectState* o) {
  o->lru_prev_ = list.tail;
  o->lru_next_ = nullptr;
  if (list.tail) list.tail->lru_next_ = o; else list.head = o;
  list.tail = o;
  o->in_lru_ = true;
}

void ObjectStore::remove_locked(List& list, ObjectState* o) {
  if (!o->in_lru_) return;
  if (o->lru_prev_) o->lru_prev_->lru_next_ = o->lru_next_; else list.head = o->lru_next_;
  if (o->lru_next_) o->lru_next_->lru_prev_ = o->lru_prev_; else list.tail = o->lru_prev_;
  o->lru_prev_ = o->lru_next_ = nullptr;
  o->in_lru_ = false;
}

bool ObjectStore::spill_locked(ObjectState* o) {
  // An array in memory that other ranks read in place (this rank's arena) stays: a
  // spill would free its block under their reads, and not this process's memory.
  if (const ObjectState::RawView raw = o->raw_view(); raw.data && detail::array_memory_is_shared(raw.data)) return false;
  // Claim the object unless a reader holds a pin (Dekker with ObjectState::pin).
  o->residency_.store(Residency::kSpilling, std::memory_order_seq_cst);
  if (o->pins_.load(std::memory_order_seq_cst) != 0) {
    o->residency_.store(Residency::kMemory, std::memory_order_seq_cst);
    return false;
  }
  if (config_.spill_capacity && spilled_bytes_ + o->bytes_ > config_.spill_capacity) {
    o->residency_.store(Residency::kMemory, std::memory_order_seq_cst);
    return false;
  }
  Status st;
  if (!spill_dir_made_) {
    std::error_code ec;
    fs::create_directories(spill_path_, ec);
    if (ec) st = unavailable(fmt::format("cannot create spill directory {}: {}", spill_path_, ec.message()));
    else spill_dir_made_ = true;
  }
  if (st.ok()) {
    Writer w;
    w.reserve(o->bytes_);
    o->write_value(w);
    st = write_file(file_for(o), w.bytes());
  }
  if (!st.ok()) {
    o->residency_.store(Residency::kMemory, std::memory_order_seq_cst);
    return false;
  }
  o->destroy_value();
  o->residency_.store(Residency::kSpilled, std::memory_order_seq_cst);
  spilled_bytes_ += o->bytes_;
  ++spills_;
  return true;
}

void ObjectStore::evict_locked(std::size_t need) {
  ObjectState* o = resident_.head;
  while (o && memory_bytes_ + need > config_.capacity) {
    ObjectState* next = o->lru_next_;
    if (spill_locked(o)) {
      remove_locked(resident_, o);
      push_locked(spilled_, o);
      memory_bytes_ -= o->bytes_;
    }
    o = next;
  }
}

Status ObjectStore::admit(ObjectState* o, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (bytes <= config_.capacity && memory_bytes_ + bytes > config_.capacity) evict_locked(bytes);
  if (memory_bytes_ + bytes <= config_.capacity) {
    memory_bytes_ += bytes;
    push_locked(resident_, o);
    o->store_ = this;
    return {};
  }
  // It does not fit in memory: write it out itself.
  if (spill_locked(o)) {
    push_locked(spilled_, o);
    o->store_ = this;
    return {};
  }
  return resource_exhausted(fmt::format(
      "an object of {} bytes fits neither in memory ({} of {} bytes in use, --brisk-store-bytes) "
      "nor in the spill directory {} ({} bytes spilled, limit {}, --brisk-spill-bytes)",
      bytes, memory_bytes_, config_.capacity, spill_path_, spilled_bytes_,
      config_.spill_capacity ? fmt::format("{}", config_.spill_capacity) : std::string("the free disk")));
}

Status ObjectStore::restore_and_pin(ObjectState* o) {
  std::lock_guard lock(mutex_);
  if (o->residency_.load(std::memory_order_seq_cst) == Residency::kMemory) {
    o->pins_.fetch_add(1, std::memory_order_seq_cst);
    return {};
  }
  if (o->residency_.load(std::memory_order_seq_cst) != Residency::kSpilled) {
    return internal_error("brisk: object to restore is neither in memory nor spilled");
  }
  std::string path = file_for(o);
  auto bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  try {
    Reader r(std::span<const std::byte>(bytes->data(), bytes->size()));
    detail::PrivateArrays private_arrays;  // back in this process's memory, which the store counts and spills
    o->read_value(r);  // destroys what it constructed if it throws
  } catch (const std::exception& e) {
    return internal_error(fmt::format("spill file {} is corrupt: {}", path, e.what()));
  }
  ::unlink(path.c_str());
  spilled_bytes_ -= o->bytes_;
  ++restores_;
  // Make room if possible; a pinned object may overshoot the capacity until unpinned.
  if (memory_bytes_ + o->bytes_ > config_.capacity) evict_locked(o->bytes_);
  memory_bytes_ += o->bytes_;
  o->pins_.fetch_add(1, std::memory_order_seq_cst);
  o->residency_.store(Residency::kMemory, std::memory_order_seq_cst);
  remove_locked(spilled_, o);
  push_locked(resident_, o);
  return {};
}

void ObjectStore::evict_to_capacity() {
  std::lock_guard lock(mutex_);
  if (memory_bytes_ > config_.capacity) evict_locked(0);
}

void ObjectStore::forget(ObjectState* o) noexcept {
  std::lock_guard lock(mutex_);
  Residency r = o->residency_.load(std::memory_order_seq_cst);
  if (r == Residency::kMemory) {
    remove_locked(resident_, o);
    memory_bytes_ -= o->bytes_;
  } else if (r == Residency::kSpilled) {
    remove_locked(spilled_, o);
    ::unlink(file_for(o).c_str());
    spilled_bytes_ -= o->bytes_;
    o->residency_.store(Residency::kNone, std::memory_order_seq_cst);
  }
}

}  // namespace brisk
