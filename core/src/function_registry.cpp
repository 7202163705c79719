#include "brisk/core/function_registry.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "brisk/core/status.hpp"

namespace brisk::detail {
namespace {

struct Registry {
  std::shared_mutex mutex;
  std::unordered_map<const void*, const FunctionInfo*> by_address;
  std::unordered_map<FunctionId, std::unique_ptr<FunctionInfo>> by_id;
  std::atomic<std::uint64_t> version{0};
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: lookups may run during exit
  return *r;
}

// A small direct-mapped per-thread cache; invalidated when the table changes.
struct Cache {
  static constexpr int kSlots = 16;
  std::uint64_t version = ~std::uint64_t{0};
  const void* keys[kSlots] = {};
  const FunctionInfo* values[kSlots] = {};
};
thread_local Cache t_cache;

}  // namespace

const FunctionInfo* register_function(std::string_view name, const void* address, TaskDecoder decode) {
  Registry& r = registry();
  FunctionId id = FunctionId::from_name(name.data(), name.size());
  std::unique_lock lock(r.mutex);
  auto& slot = r.by_id[id];
  if (!slot) {
    slot = std::make_unique<FunctionInfo>(FunctionInfo{id, std::string(name), address, decode});
  } else {
    BRISK_CHECK(slot->name == name) << "function names '" << slot->name << "' and '" << name
                                    << "' hash to the same id; rename one of them";
  }
  if (!slot->decode) slot->decode = decode;
  r.by_address[address] = slot.get();
  r.version.fetch_add(1, std::memory_order_release);
  return slot.get();
}

const FunctionInfo* find_function(const void* address) noexcept {
  Registry& r = registry();
  Cache& c = t_cache;
  std::uint64_t version = r.version.load(std::memory_order_acquire);
  if (c.version != version) {
    c = Cache{};
    c.version = version;
  }
  int slot = static_cast<int>((reinterpret_cast<std::uintptr_t>(address) >> 4) & (Cache::kSlots - 1));
  if (c.keys[slot] == address) return c.values[slot];
  std::shared_lock lock(r.mutex);
  auto it = r.by_address.find(address);
  const FunctionInfo* info = it == r.by_address.end() ? nullptr : it->second;
  if (info) {
    c.keys[slot] = address;
    c.values[slot] = info;
  }
  return info;
}

const FunctionInfo* find_function(FunctionId id) noexcept {
  Registry& r = registry();
  std::shared_lock lock(r.mutex);
  auto it = r.by_id.find(id);
  return it == r.by_id.end() ? nullptr : it->second.get();
}

namespace {
struct MethodKeys {
  std::shared_mutex mutex;
  std::unordered_map<std::string, const FunctionInfo*> by_key;
};
MethodKeys& method_keys() {
  static MethodKeys* m = new MethodKeys;
  return *m;
}
std::string method_key(const char* type, const void* key, std::size_t size) {
  std::string k(type);
  k.push_back('\0');
  k.append(static_cast<const char*>(key), size);
  return k;
}
}  // namespace

void register_method_key(const char* type, const void* key, std::size_t size, const FunctionInfo* info) {
  MethodKeys& m = method_keys();
  std::unique_lock lock(m.mutex);
  m.by_key[method_key(type, key, size)] = info;
}

const FunctionInfo* find_method_key(const char* type, const void* key, std::size_t size) noexcept {
  MethodKeys& m = method_keys();
  try {
    const std::string k = method_key(type, key, size);
    std::shared_lock lock(m.mutex);
    auto it = m.by_key.find(k);
    return it == m.by_key.end() ? nullptr : it->second;
  } catch (...) {
    return nullptr;
  }
}

std::vector<const FunctionInfo*> registered_functions() {
  Registry& r = registry();
  std::shared_lock lock(r.mutex);
  std::vector<const FunctionInfo*> out;
  for (auto& [id, info] : r.by_id) out.push_back(info.get());
  return out;
}

}  // namespace brisk::detail
