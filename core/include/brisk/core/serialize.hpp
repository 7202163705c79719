// brisk/core/serialize.hpp — compact binary serialization for task arguments,
// task results and objects spilled to disk.
//
// Contract
//
//   std::vector<std::byte> bytes = brisk::to_bytes(value);
//   auto copy = brisk::from_bytes<T>(bytes);   // throws SerializationError
//
// Supported out of the box, recursively composable:
//   * trivially copyable types (arithmetic, enums, plain structs, unions), copied
//     with memcpy; empty trivially copyable types (std::monostate, tag structs)
//     take zero bytes;
//   * bool (one byte, 0 or 1);
//   * std::basic_string, std::vector (std::vector<bool> bit-packed), std::array,
//     C arrays, std::map, std::unordered_map, std::set, std::unordered_set,
//     std::optional, std::pair, std::tuple, std::variant.
//   Contiguous containers of trivially copyable elements are one memcpy.
//
// User types opt in, as in cereal, with one member used for both directions
//
//   template <class Archive> void serialize(Archive& ar) { ar(x, y, z); }
//
// or a free `serialize(Archive&, T&)` found by argument-dependent lookup. The
// archive is brisk::Writer, brisk::SizeCounter or brisk::Reader; compare it with
// std::is_same_v when the two directions must differ. A user serialize always
// wins over the memcpy path. Anything else fails to compile with a
// static_assert that starts with "brisk:".
//
// Reading needs default-constructible types: from_bytes<T> value-initializes a T,
// and container elements, map keys, optional payloads and variant alternatives
// are default-constructed before they are read into.
//
// Wire format: lengths are uint64 little-endian, then the elements; a
// std::variant is its index as uint32 then the alternative; a std::optional is
// one flag byte (0 or 1) then the value; a bool is one byte (0 or 1); a
// std::vector<bool> is its length then ceil(n / 8) bytes, least significant bit
// first, padding bits zero. Trivially copyable values are their object
// representation (the header requires a little-endian host), so a trivially
// copyable struct carries its padding bytes and must be valid for every bit
// pattern it may receive (give it a serialize member if it holds a bool, a
// pointer or a std:: type with invariants). There is no type tag or version:
// writer and reader must agree on the type.
//
// Robustness: Reader never reads past its span. A length that the remaining
// bytes cannot describe (n * minimum element size > remaining) throws before
// anything is allocated, and no more is reserved than the remaining bytes could
// describe. Bad bool bytes, optional flags, variant indices, vector<bool> padding
// and duplicate set or map keys throw. Nesting through user types is limited to
// 512 levels and each Reader accepts at most 2^20 container elements that encode
// to zero bytes (detail::serial::kMaxReadDepth, kZeroSizeElementBudget). Every
// failure on input is a SerializationError; after one the target object is valid
// but unspecified. Allocation failure still surfaces as std::bad_alloc.
//
// Internals live in brisk::detail::serial; its calls are qualified, so a user's
// own save/load functions are never picked up by argument-dependent lookup.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

static_assert(std::endian::native == std::endian::little,
              "brisk: the serialization wire format assumes a little-endian host");

namespace brisk {

// Thrown for malformed or truncated input, and for values that have no encoding
// (a valueless std::variant).
class SerializationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Writer;
class SizeCounter;
class Reader;

namespace detail {
bool array_memory_is_shared(const void* p) noexcept;  // brisk/core/array.hpp
}  // namespace detail

namespace detail::serial {

// Deepest nesting through user-defined types a Reader accepts (recursive types
// such as trees would otherwise let a hostile frame overflow the stack).
inline constexpr std::size_t kMaxReadDepth = 512;
// Container elements that encode to zero bytes a Reader accepts in total.
inline constexpr std::size_t kZeroSizeElementBudget = std::size_t{1} << 20;

// ---------------------------------------------------------------------------
// User serialize detection. The deleted declaration stops ordinary lookup here,
// so that `serialize(ar, t)` only finds functions through ADL.
void serialize() = delete;

template <class T, class A>
concept HasMemberSerialize = requires(T& t, A& a) { t.serialize(a); };

template <class T, class A>
concept HasFreeSerialize = requires(T& t, A& a) { serialize(a, t); };

template <class T, class A>
concept UserSerializableWith = HasMemberSerialize<T, A> || HasFreeSerialize<T, A>;

template <class T>
concept UserSerializable = UserSerializableWith<T, Writer> ||
                           UserSerializableWith<T, SizeCounter> ||
                           UserSerializableWith<T, Reader>;

// ---------------------------------------------------------------------------
// Standard library type recognition.
template <class T> struct IsString : std::false_type {};
template <class C, class Tr, class A>
struct IsString<std::basic_string<C, Tr, A>> : std::true_type {};

template <class T> struct IsVector : std::false_type {};
template <class T, class A> struct IsVector<std::vector<T, A>> : std::true_type {};

template <class T> struct IsStdArray : std::false_type {};
template <class T, std::size_t N> struct IsStdArray<std::array<T, N>> : std::true_type {};

template <class T> struct IsMap : std::false_type {};
template <class K, class V, class C, class A>
struct IsMap<std::map<K, V, C, A>> : std::true_type {};
template <class K, class V, class H, class E, class A>
struct IsMap<std::unordered_map<K, V, H, E, A>> : std::true_type {};

template <class T> struct IsSet : std::false_type {};
template <class K, class C, class A> struct IsSet<std::set<K, C, A>> : std::true_type {};
template <class K, class H, class E, class A>
struct IsSet<std::unordered_set<K, H, E, A>> : std::true_type {};

template <class T> struct IsUnordered : std::false_type {};
template <class K, class V, class H, class E, class A>
struct IsUnordered<std::unordered_map<K, V, H, E, A>> : std::true_type {};
template <class K, class H, class E, class A>
struct IsUnordered<std::unordered_set<K, H, E, A>> : std::true_type {};

template <class T> struct IsOptional : std::false_type {};
template <class T> struct IsOptional<std::optional<T>> : std::true_type {};

template <class T> struct IsVariant : std::false_type {};
template <class... Ts> struct IsVariant<std::variant<Ts...>> : std::true_type {};

template <class T> struct IsPair : std::false_type {};
template <class A, class B> struct IsPair<std::pair<A, B>> : std::true_type {};

template <class T> struct IsTuple : std::false_type {};
template <class... Ts> struct IsTuple<std::tuple<Ts...>> : std::true_type {};

// How a (cv-unqualified) type is encoded.
enum class Kind {
  kUser,        // user serialize member or free function
  kString,      // std::basic_string
  kVectorBool,  // std::vector<bool>, bit-packed
  kVector,      // std::vector
  kStdArray,    // std::array
  kCArray,      // T[N]
  kMap,         // std::map, std::unordered_map
  kSet,         // std::set, std::unordered_set
  kOptional,
  kVariant,
  kPair,
  kTuple,
  kBool,        // bool and enums whose underlying type is bool
  kEmpty,       // empty trivially copyable class: zero bytes
  kBitwise,     // other trivially copyable types: memcpy
  kNone,        // not serializable
};

template <class T>
consteval bool is_bool_like() {
  if constexpr (std::is_same_v<T, bool>) {
    return true;
  } else if constexpr (std::is_enum_v<T>) {
    return std::is_same_v<std::underlying_type_t<T>, bool>;
  } else {
    return false;
  }
}

template <class T>
consteval Kind kind_of() {
  if constexpr (std::is_reference_v<T> || std::is_const_v<T> || std::is_volatile_v<T> ||
                std::is_void_v<T> || std::is_function_v<T>) {
    return Kind::kNone;
  } else if constexpr (UserSerializable<T>) {
    return Kind::kUser;
  } else if constexpr (IsString<T>::value) {
    return Kind::kString;
  } else if constexpr (IsVector<T>::value) {
    return std::is_same_v<typename T::value_type, bool> ? Kind::kVectorBool : Kind::kVector;
  } else if constexpr (IsStdArray<T>::value) {
    return Kind::kStdArray;
  } else if constexpr (std::is_bounded_array_v<T>) {
    return Kind::kCArray;
  } else if constexpr (IsMap<T>::value) {
    return Kind::kMap;
  } else if constexpr (IsSet<T>::value) {
    return Kind::kSet;
  } else if constexpr (IsOptional<T>::value) {
    return Kind::kOptional;
  } else if constexpr (IsVariant<T>::value) {
    return Kind::kVariant;
  } else if constexpr (IsPair<T>::value) {
    return Kind::kPair;
  } else if constexpr (IsTuple<T>::value) {
    return Kind::kTuple;
  } else if constexpr (is_bool_like<T>()) {
    return Kind::kBool;
  } else if constexpr (std::is_pointer_v<T> || std::is_member_pointer_v<T> ||
                       std::is_null_pointer_v<T> || std::is_array_v<T>) {
    return Kind::kNone;  // addresses mean nothing on another rank
  } else if constexpr (std::is_trivially_copyable_v<T> && std::is_empty_v<T>) {
    return Kind::kEmpty;
  } else if constexpr (std::is_trivially_copyable_v<T>) {
    return Kind::kBitwise;
  } else {
    return Kind::kNone;
  }
}

template <class T>
inline constexpr Kind kind_v = kind_of<T>();

// True when a T (or an array of them) is exactly its object representation on
// the wire, so that a run of them is one memcpy.
template <class T>
consteval bool is_bitwise() {
  constexpr Kind k = kind_v<T>;
  if constexpr (k == Kind::kBitwise) {
    return true;
  } else if constexpr (k == Kind::kStdArray) {
    using E = typename T::value_type;
    return is_bitwise<E>() && sizeof(T) == sizeof(E) * std::tuple_size_v<T>;
  } else if constexpr (k == Kind::kCArray) {
    return is_bitwise<std::remove_extent_t<T>>();
  } else {
    return false;
  }
}

template <class T>
inline constexpr bool bitwise_v = is_bitwise<T>();

template <class T> consteval bool is_writable();
template <class T> consteval bool is_readable();

template <class... Ts>
consteval bool all_writable(std::type_identity<std::tuple<Ts...>>) {
  return (is_writable<std::remove_cv_t<Ts>>() && ...) && (!std::is_reference_v<Ts> && ...);
}
template <class... Ts>
consteval bool all_readable(std::type_identity<std::tuple<Ts...>>) {
  return ((!std::is_const_v<Ts> && !std::is_reference_v<Ts> && is_readable<Ts>()) && ...);
}
template <class... Ts>
consteval bool all_default_readable(std::type_identity<std::tuple<Ts...>>) {
  return ((std::default_initializable<Ts> && is_readable<Ts>()) && ...);
}

template <class T>
consteval bool is_writable() {
  constexpr Kind k = kind_v<T>;
  if constexpr (k == Kind::kUser) {
    return UserSerializableWith<T, Writer> && UserSerializableWith<T, SizeCounter>;
  } else if constexpr (k == Kind::kString || k == Kind::kVector || k == Kind::kStdArray ||
                       k == Kind::kSet || k == Kind::kOptional) {
    return is_writable<typename T::value_type>();
  } else if constexpr (k == Kind::kCArray) {
    return is_writable<std::remove_extent_t<T>>();
  } else if constexpr (k == Kind::kMap) {
    return is_writable<typename T::key_type>() && is_writable<typename T::mapped_type>();
  } else if constexpr (k == Kind::kVariant) {
    return all_writable([]<class... Ts>(std::variant<Ts...>*) {
      return std::type_identity<std::tuple<Ts...>>{};
    }(static_cast<T*>(nullptr)));
  } else if constexpr (k == Kind::kPair) {
    return all_writable(
        std::type_identity<std::tuple<typename T::first_type, typename T::second_type>>{});
  } else if constexpr (k == Kind::kTuple) {
    return all_writable(std::type_identity<T>{});
  } else {
    return k != Kind::kNone;
  }
}

template <class T>
consteval bool is_readable() {
  constexpr Kind k = kind_v<T>;
  if constexpr (k == Kind::kUser) {
    return UserSerializableWith<T, Reader>;
  } else if constexpr (k == Kind::kString || k == Kind::kStdArray) {
    return is_readable<typename T::value_type>();
  } else if constexpr (k == Kind::kCArray) {
    return is_readable<std::remove_extent_t<T>>();
  } else if constexpr (k == Kind::kVector || k == Kind::kOptional) {
    using E = typename T::value_type;
    return std::default_initializable<E> && is_readable<E>();
  } else if constexpr (k == Kind::kSet) {
    using K = typename T::key_type;
    return std::default_initializable<K> && is_readable<K>();
  } else if constexpr (k == Kind::kMap) {
    using K = typename T::key_type;
    using V = typename T::mapped_type;
    return std::default_initializable<K> && is_readable<K>() &&
           std::default_initializable<V> && is_readable<V>();
  } else if constexpr (k == Kind::kVariant) {
    return all_default_readable([]<class... Ts>(std::variant<Ts...>*) {
      return std::type_identity<std::tuple<Ts...>>{};
    }(static_cast<T*>(nullptr)));
  } else if constexpr (k == Kind::kPair) {
    return all_readable(
        std::type_identity<std::tuple<typename T::first_type, typename T::second_type>>{});
  } else if constexpr (k == Kind::kTuple) {
    return all_readable(std::type_identity<T>{});
  } else if constexpr (k == Kind::kBitwise) {
    return std::is_copy_assignable_v<T>;  // no const members to write through
  } else {
    return k != Kind::kNone;
  }
}

template <class T>
inline constexpr bool writable_v = is_writable<std::remove_cv_t<T>>();
template <class T>
inline constexpr bool readable_v = !std::is_const_v<T> && is_readable<T>();

// ---------------------------------------------------------------------------
// Wire sizes known at compile time.
inline constexpr std::size_t kVariableSize = std::numeric_limits<std::size_t>::max();

// A lower bound on the encoded size of any T (0 when unknown, as for user types).
template <class T>
consteval std::size_t min_wire_size() {
  constexpr Kind k = kind_v<T>;
  if constexpr (k == Kind::kString || k == Kind::kVectorBool || k == Kind::kVector ||
                k == Kind::kMap || k == Kind::kSet) {
    return sizeof(std::uint64_t);
  } else if constexpr (k == Kind::kStdArray) {
    return std::tuple_size_v<T> * min_wire_size<typename T::value_type>();
  } else if constexpr (k == Kind::kCArray) {
    return std::extent_v<T> * min_wire_size<std::remove_extent_t<T>>();
  } else if constexpr (k == Kind::kOptional || k == Kind::kBool) {
    return 1;
  } else if constexpr (k == Kind::kVariant) {
    return []<class... Ts>(std::variant<Ts...>*) {
      return sizeof(std::uint32_t) + std::min({min_wire_size<Ts>()...});
    }(static_cast<T*>(nullptr));
  } else if constexpr (k == Kind::kPair) {
    return min_wire_size<typename T::first_type>() + min_wire_size<typename T::second_type>();
  } else if constexpr (k == Kind::kTuple) {
    return []<class... Ts>(std::tuple<Ts...>*) {
      return (std::size_t{0} + ... + min_wire_size<Ts>());
    }(static_cast<T*>(nullptr));
  } else if constexpr (k == Kind::kBitwise) {
    return sizeof(T);
  } else {
    return 0;  // kUser, kEmpty
  }
}

template <class T>
inline constexpr std::size_t min_wire_size_v = min_wire_size<std::remove_cv_t<T>>();


template <class T> struct ArrayTraits;
template <class E, std::size_t N> struct ArrayTraits<std::array<E, N>> {
  using element_type = E;
  static constexpr std::size_t extent = N;
};
template <class E, std::size_t N> struct ArrayTraits<E[N]> {
  using element_type = E;
  static constexpr std::size_t extent = N;
};

// The encoded size of a T when every value has the same size, else kVariableSize.
// Lets SizeCounter size containers of such elements in O(1).
template <class T>
consteval std::size_t fixed_wire_size();

template <class... Ts>
consteval std::size_t fixed_sum() {
  const std::size_t sizes[] = {std::size_t{0}, fixed_wire_size<Ts>()...};
  std::size_t total = 0;
  for (std::size_t s : sizes) {
    if (s == kVariableSize) return kVariableSize;
    total += s;
  }
  return total;
}

template <class... Ts>
consteval std::size_t fixed_same(std::type_identity<std::tuple<Ts...>>) {
  const std::size_t sizes[] = {fixed_wire_size<Ts>()...};
  for (std::size_t s : sizes) {
    if (s == kVariableSize || s != sizes[0]) return kVariableSize;
  }
  return sizeof(std::uint32_t) + sizes[0];
}

template <class T>
consteval std::size_t fixed_wire_size() {
  constexpr Kind k = kind_v<T>;
  if constexpr (k == Kind::kBool) {
    return 1;
  } else if constexpr (k == Kind::kEmpty) {
    return 0;
  } else if constexpr (k == Kind::kBitwise) {
    return sizeof(T);
  } else if constexpr (k == Kind::kStdArray || k == Kind::kCArray) {
    constexpr std::size_t e = fixed_wire_size<typename ArrayTraits<T>::element_type>();
    return e == kVariableSize ? kVariableSize : e * ArrayTraits<T>::extent;
  } else if constexpr (k == Kind::kPair) {
    return fixed_sum<typename T::first_type, typename T::second_type>();
  } else if constexpr (k == Kind::kTuple) {
    return []<class... Ts>(std::tuple<Ts...>*) {
      return fixed_sum<Ts...>();
    }(static_cast<T*>(nullptr));
  } else if constexpr (k == Kind::kVariant) {
    return fixed_same([]<class... Ts>(std::variant<Ts...>*) {
      return std::type_identity<std::tuple<Ts...>>{};
    }(static_cast<T*>(nullptr)));
  } else {
    return kVariableSize;
  }
}

template <class T>
inline constexpr std::size_t fixed_wire_size_v = fixed_wire_size<std::remove_cv_t<T>>();

// True when SizeCounter sizes every T in O(1).
template <class T>
consteval bool size_in_constant_time() {
  constexpr Kind k = kind_v<T>;
  if constexpr (fixed_wire_size<T>() != kVariableSize || k == Kind::kString ||
                k == Kind::kVectorBool) {
    return true;
  } else if constexpr (k == Kind::kVector || k == Kind::kSet) {
    return fixed_wire_size<typename T::value_type>() != kVariableSize;
  } else if constexpr (k == Kind::kMap) {
    return fixed_sum<typename T::key_type, typename T::mapped_type>() != kVariableSize;
  } else {
    return false;
  }
}

template <class T>
inline constexpr bool size_in_constant_time_v = size_in_constant_time<std::remove_cv_t<T>>();

// Types that may alias any object, so bytes can be handed to them directly.
template <class T>
inline constexpr bool is_byte_like_v = std::is_same_v<T, char> ||
                                       std::is_same_v<T, unsigned char> ||
                                       std::is_same_v<T, std::byte>;

// A random-access iterator that yields the T stored at each sizeof(T) bytes of a
// byte range, so that a container can be filled straight from the input (with
// no zeroing pass first) while the copy stays a memcpy-like loop.
template <class T>
class BitwiseIterator {
 public:
  using iterator_category = std::random_access_iterator_tag;
  using value_type = T;
  using difference_type = std::ptrdiff_t;
  using pointer = const T*;
  using reference = T;

  BitwiseIterator() = default;
  explicit BitwiseIterator(const std::byte* p) noexcept : p_(p) {}

  T operator*() const noexcept {
    T value;
    std::memcpy(&value, p_, sizeof(T));
    return value;
  }
  T operator[](difference_type n) const noexcept { return *(*this + n); }

  BitwiseIterator& operator++() noexcept { p_ += sizeof(T); return *this; }
  BitwiseIterator operator++(int) noexcept { auto t = *this; ++*this; return t; }
  BitwiseIterator& operator--() noexcept { p_ -= sizeof(T); return *this; }
  BitwiseIterator operator--(int) noexcept { auto t = *this; --*this; return t; }
  BitwiseIterator& operator+=(difference_type n) noexcept { p_ += n * kStep; return *this; }
  BitwiseIterator& operator-=(difference_type n) noexcept { p_ -= n * kStep; return *this; }
  friend BitwiseIterator operator+(BitwiseIterator it, difference_type n) noexcept {
    return it += n;
  }
  friend BitwiseIterator operator+(difference_type n, BitwiseIterator it) noexcept {
    return it += n;
  }
  friend BitwiseIterator operator-(BitwiseIterator it, difference_type n) noexcept {
    return it -= n;
  }
  friend difference_type operator-(BitwiseIterator a, BitwiseIterator b) noexcept {
    return (a.p_ - b.p_) / kStep;
  }
  friend bool operator==(BitwiseIterator a, BitwiseIterator b) noexcept { return a.p_ == b.p_; }
  friend auto operator<=>(BitwiseIterator a, BitwiseIterator b) noexcept { return a.p_ <=> b.p_; }

 private:
  static constexpr difference_type kStep = static_cast<difference_type>(sizeof(T));
  const std::byte* p_ = nullptr;
};

// Asks the kernel for transparent huge pages over the whole 2 MiB pages inside
// [p, p + bytes) (madvise MADV_HUGEPAGE; nothing where that is unavailable), before
// they are first written: a large vector filled from the input then takes one page
// fault per 2 MiB instead of one per 4 KiB. (Storage that malloc took from its heap
// keeps the hint after it is freed; later blocks there may get huge pages too.)
void advise_huge_pages(void* p, std::size_t bytes) noexcept;
inline constexpr std::size_t kHugePageHintBytes = std::size_t{4} << 20;

// Freed storage that this process keeps for reuse (Array's cache of blocks, spare
// vectors) shares one bound, kKeptBytesLimit. Each pool of it is a KeptPool, and
// where the bound leaves no room for storage just freed, the oldest kept storage of
// any pool is freed first: what was freed last is likeliest to be asked for next (a
// loop's objects come back at the sizes they had). Without that, a job whose
// std::vectors filled the bound re-made every large brisk::Array in fresh pages,
// zero-filled by the kernel (a pulled 256 MiB Array at 0.7 of the rate of a vector
// beside it, and at a tenth when the kernel had no huge pages to give).
inline constexpr std::size_t kKeptBytesLimit = std::size_t{512} << 20;
class KeptPool {
 public:
  // The stamp (next_kept_stamp) of the oldest storage this pool keeps; UINT64_MAX
  // when it keeps none.
  virtual std::uint64_t oldest_kept() noexcept = 0;
  // Frees the oldest storage this pool keeps and releases its bytes; false when it
  // keeps none.
  virtual bool drop_oldest_kept() noexcept = 0;

 protected:
  ~KeptPool() = default;
};
// Registers a pool that lives until the process exits (at most 64 are; one past
// that keeps its storage, only never gives it up for another pool's).
void add_kept_pool(KeptPool* pool) noexcept;
// A stamp for storage a pool keeps now: later storage has a larger one.
std::uint64_t next_kept_stamp() noexcept;
// Claims `bytes` of the bound, freeing the oldest kept storage of the pools to make
// room; false where `bytes` would pass the bound even so. Called holding no pool's
// lock (it takes each pool's in turn). release_kept_bytes gives bytes back.
// Thread-safe.
bool reserve_kept_bytes(std::size_t bytes) noexcept;
void release_kept_bytes(std::size_t bytes) noexcept;

// The storage of freed std::vector<E> objects of at least kSpareVectorBytes, kept
// for the next vector of about that size that a pull or a load fills (E bitwise):
// its pages are in memory already. A fresh vector faults in every page when first
// written, and the kernel zeroes each page first; on the project's VMs, whose host
// takes freed memory back, filling a fresh 256 MiB vector took 65 or 300-350 ms, and
// 26-36 ms in reused storage (docs/BENCHMARKS.md). Bounded by kKeptBytesLimit,
// shared with Array's cache. Thread-safe; never destroyed (vectors may be freed
// during exit).
inline constexpr std::size_t kSpareVectorBytes = std::size_t{256} << 10;
template <class E>
class SpareVectors final : public KeptPool {
 public:
  static SpareVectors& instance() {
    static auto* spares = [] {
      auto* created = new SpareVectors;
      add_kept_pool(created);
      return created;
    }();
    return *spares;
  }
  // An empty vector whose capacity holds `n` elements and at most a quarter more,
  // or an empty vector without storage where no spare fits.
  std::vector<E> take(std::size_t n) {
    std::vector<E> v = take_filled(n);
    v.clear();
    return v;
  }
  // The same vector with the elements it had when it was given (stale values): a
  // vector that is to be overwritten is resized over them without writing them
  // first (a shrink writes nothing; a growth initializes only the new tail).
  std::vector<E> take_filled(std::size_t n) {
    std::vector<E> v;
    {
      std::lock_guard lock(mutex_);
      auto it = spares_.lower_bound(n);
      if (it == spares_.end() || it->first - n > n / 4) return v;
      v = std::move(it->second.vector);
      spares_.erase(it);
    }
    release_kept_bytes(v.capacity() * sizeof(E));
    return v;
  }
  // Keeps `v` (moved out: left empty), elements and all, where its storage is large
  // enough and the bound allows; otherwise leaves it as it is.
  // Storage in memory other ranks read (the arena, detail::set_new_memory) goes
  // back there: spares are the private destinations of pulls.
  void give(std::vector<E>& v) noexcept {
    const std::size_t bytes = v.capacity() * sizeof(E);
    if (bytes < kSpareVectorBytes || detail::array_memory_is_shared(v.data()) || !reserve_kept_bytes(bytes)) return;
    try {
      std::lock_guard lock(mutex_);
      const std::size_t capacity = v.capacity();  // before the move below
      spares_.emplace(capacity, Spare{next_kept_stamp(), std::move(v)});
    } catch (...) {
      release_kept_bytes(bytes);
    }
  }
  std::size_t count() {
    std::lock_guard lock(mutex_);
    return spares_.size();
  }
  std::uint64_t oldest_kept() noexcept override {
    std::lock_guard lock(mutex_);
    const auto it = oldest();
    return it == spares_.end() ? UINT64_MAX : it->second.stamp;
  }
  bool drop_oldest_kept() noexcept override {
    std::vector<E> dropped;
    {
      std::lock_guard lock(mutex_);
      const auto it = oldest();
      if (it == spares_.end()) return false;
      dropped = std::move(it->second.vector);
      spares_.erase(it);
    }
    release_kept_bytes(dropped.capacity() * sizeof(E));
    return true;  // its storage is freed here, outside the lock
  }

 private:
  struct Spare {
    std::uint64_t stamp;
    std::vector<E> vector;
  };
  SpareVectors() = default;
  ~SpareVectors() = default;
  // The spare kept longest (a scan: the bound holds at most a few thousand).
  auto oldest() {
    auto first = spares_.begin();
    for (auto it = spares_.begin(); it != spares_.end(); ++it) {
      if (it->second.stamp < first->second.stamp) first = it;
    }
    return first;
  }
  std::mutex mutex_;
  std::multimap<std::size_t, Spare> spares_;  // capacity -> a freed vector (its elements stale)
};

// Vectors whose storage SpareVectors keeps: std::vector<E> of bitwise elements.
template <class V>
inline constexpr bool kSpareVector = false;
template <class E>
inline constexpr bool kSpareVector<std::vector<E>> = !std::is_same_v<E, bool> && std::is_trivially_copyable_v<E>;

// Gives vector `v`, when it cannot hold `n` elements, storage for them before anything
// touches it: a spare vector's where one fits (kSpareVector), else, from
// kHugePageHintBytes, fresh storage hinted for huge pages. `v`'s elements are
// dropped; with `stale`, a spare's are kept (SpareVectors::take_filled), for a caller
// that resizes `v` and overwrites it whole.
template <class V>
void reserve_hinted(V& v, std::size_t n, bool stale = false) {
  const std::size_t bytes = n * sizeof(typename V::value_type);
  if (v.capacity() >= n) return;
  if constexpr (kSpareVector<V>) {
    if (bytes >= kSpareVectorBytes) {
      auto& spares = SpareVectors<typename V::value_type>::instance();
      if (V spare = stale ? spares.take_filled(n) : spares.take(n); spare.capacity()) {
        v.swap(spare);
        return;
      }
    }
  }
  if (bytes < kHugePageHintBytes) return;
  V(v.get_allocator()).swap(v);
  v.reserve(n);
  advise_huge_pages(v.data(), bytes);
}

// Private access to the archives for the encoders below.
struct ArchiveAccess;

template <class A, class T>
void save(A& ar, const T& value);
template <class T>
void load(Reader& r, T& value);

}  // namespace detail::serial

#define BRISK_DETAIL_NOT_SERIALIZABLE                                                     \
  "brisk: type is not serializable: give it a `template <class A> void serialize(A& ar)` " \
  "member (or a free `serialize(A& ar, T& value)` found by ADL); only trivially copyable " \
  "types without pointers and the supported std:: types are built in"
#define BRISK_DETAIL_NOT_READABLE                                                       \
  "brisk: type cannot be read: the target must not be const, and every element, key, " \
  "optional payload and variant alternative must be default-constructible and "         \
  "serializable for brisk::Reader"

// Serializable<T>
//
// T can be written by Writer and SizeCounter and read by Reader (into an existing
// object; from_bytes<T> also needs T to be default-constructible).
template <class T>
concept Serializable =
    detail::serial::writable_v<T> && detail::serial::is_readable<std::remove_cv_t<T>>();

// Writer
//
// An archive that appends the encoding of values to a byte buffer it owns. Growth
// is geometric, and a run of trivially copyable values is a single copy.
class Writer {
 public:
  Writer() = default;

  // Appends n raw bytes; `data` must not point into this writer's buffer.
  void write_bytes(const void* data, std::size_t n) {
    if (n == 0) return;
    const auto* first = static_cast<const std::byte*>(data);
    buf_.insert(buf_.end(), first, first + n);
  }

  // Appends each value in order: `w(a, b, c)`.
  template <class... Ts>
  Writer& operator()(const Ts&... values) {
    static_assert((detail::serial::writable_v<Ts> && ...), BRISK_DETAIL_NOT_SERIALIZABLE);
    if constexpr ((detail::serial::writable_v<Ts> && ...)) {
      (detail::serial::save(*this, values), ...);
    }
    return *this;
  }

  std::size_t size() const noexcept { return buf_.size(); }
  const std::vector<std::byte>& bytes() const noexcept { return buf_; }
  // Moves the buffer out; the writer is empty afterwards and can be reused.
  std::vector<std::byte> take() noexcept { return std::exchange(buf_, {}); }
  // Like std::vector::reserve: capacity for n bytes in total. An empty writer takes
  // a spare buffer's storage where one fits (SpareVectors: frames of 256 KiB and
  // more that a transport has sent), so that a large message does not fault in
  // fresh pages.
  void reserve(std::size_t n) {
    if (buf_.empty()) {
      detail::serial::reserve_hinted(buf_, n);
    }
    buf_.reserve(n);
  }

 private:
  friend struct detail::serial::ArchiveAccess;
  std::vector<std::byte> buf_;
};

// SizeCounter
//
// An archive that only counts the bytes a Writer would produce. Trivially
// copyable values and containers of fixed-size elements are counted in O(1).
class SizeCounter {
 public:
  // Counts n raw bytes (the size of Writer::write_bytes with the same n).
  void write_bytes(const void*, std::size_t n) noexcept { size_ += n; }

  template <class... Ts>
  SizeCounter& operator()(const Ts&... values) {
    static_assert((detail::serial::writable_v<Ts> && ...), BRISK_DETAIL_NOT_SERIALIZABLE);
    if constexpr ((detail::serial::writable_v<Ts> && ...)) {
      (detail::serial::save(*this, values), ...);
    }
    return *this;
  }

  std::size_t size() const noexcept { return size_; }

 private:
  friend struct detail::serial::ArchiveAccess;
  std::size_t size_ = 0;
};

// Reader
//
// An archive that decodes values from a span it does not own (the bytes must
// outlive the reader). Every read is bounds-checked; malformed input throws
// SerializationError.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) noexcept
      : data_(bytes.data()), size_(bytes.size()) {}

  // Copies the next n bytes to `out`; throws SerializationError, naming the bytes
  // needed and remaining, when fewer than n remain.
  void read_bytes(void* out, std::size_t n) {
    const std::byte* p = take(n);
    if (n != 0) std::memcpy(out, p, n);
  }

  // Reads into each value in order: `r(a, b, c)`.
  template <class... Ts>
  Reader& operator()(Ts&... values) {
    constexpr bool known =
        ((detail::serial::readable_v<Ts> || detail::serial::writable_v<Ts>) && ...);
    static_assert(known, BRISK_DETAIL_NOT_SERIALIZABLE);
    static_assert(!known || (detail::serial::readable_v<Ts> && ...), BRISK_DETAIL_NOT_READABLE);
    if constexpr ((detail::serial::readable_v<Ts> && ...)) {
      (detail::serial::load(*this, values), ...);
    }
    return *this;
  }

  std::size_t remaining() const noexcept { return size_ - pos_; }
  // The bytes not read yet (they stay unread).
  std::span<const std::byte> rest() const noexcept { return {data_ + pos_, remaining()}; }

 private:
  friend struct detail::serial::ArchiveAccess;

  const std::byte* take(std::size_t n) {
    if (n > remaining()) throw_truncated(n);
    const std::byte* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  [[noreturn]] void throw_truncated(std::size_t n) const {
    throw SerializationError("brisk: truncated input: need " + std::to_string(n) +
                             " bytes but only " + std::to_string(remaining()) +
                             " remain");
  }

  const std::byte* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::size_t depth_ = 0;
  std::size_t zero_size_budget_ = detail::serial::kZeroSizeElementBudget;
};

namespace detail::serial {

struct ArchiveAccess {
  static void put(Writer& w, const void* p, std::size_t n) {
    if (n <= kSmallWrite) {
      // Lengths, scalars and short strings: cheaper than the general insert.
      if (n == 0) return;
      std::vector<std::byte>& b = w.buf_;
      const std::size_t old = b.size();
      b.resize(old + n);
      std::memcpy(b.data() + old, p, n);
    } else {
      w.write_bytes(p, n);
    }
  }
  static constexpr std::size_t kSmallWrite = 32;
  static void put(SizeCounter& c, const void*, std::size_t n) noexcept { c.size_ += n; }

  // Makes room for n more bytes without giving up geometric growth.
  static void expect(Writer& w, std::size_t n) {
    std::vector<std::byte>& b = w.buf_;
    if (b.capacity() - b.size() < n) b.reserve(std::max(b.size() + n, 2 * b.capacity()));
  }
  static void expect(SizeCounter&, std::size_t) noexcept {}

  static const std::byte* take(Reader& r, std::size_t n) { return r.take(n); }
  static std::size_t zero_size_budget(const Reader& r) noexcept { return r.zero_size_budget_; }
  static void charge_zero_size_element(Reader& r) {
    if (r.zero_size_budget_ == 0) {
      throw SerializationError(
          "brisk: too many container elements that encode to zero bytes (limit " +
          std::to_string(kZeroSizeElementBudget) + " per reader)");
    }
    --r.zero_size_budget_;
  }
  static void enter(Reader& r) {
    if (r.depth_ == kMaxReadDepth) {
      throw SerializationError("brisk: input nests deeper than " +
                               std::to_string(kMaxReadDepth) + " user-defined types");
    }
    ++r.depth_;
  }
  static void leave(Reader& r) noexcept { --r.depth_; }
};

class DepthGuard {
 public:
  explicit DepthGuard(Reader& r) : r_(r) { ArchiveAccess::enter(r_); }
  ~DepthGuard() { ArchiveAccess::leave(r_); }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Reader& r_;
};

// ---------------------------------------------------------------------------
// Encoding.

template <class A>
void save_length(A& ar, std::size_t n) {
  const std::uint64_t len = n;
  ArchiveAccess::put(ar, &len, sizeof len);
}

template <class A>
void save_byte(A& ar, std::uint8_t b) {
  ArchiveAccess::put(ar, &b, 1);
}

// Saves the n elements of `range`, whose encodings are
// Fixed bytes each (or of variable size when Fixed is kVariableSize).
template <std::size_t Fixed, class A, class Range, class F>
void save_elements(A& ar, const Range& range, std::size_t n, F&& save_one) {
  if constexpr (Fixed != kVariableSize && std::is_same_v<A, SizeCounter>) {
    ArchiveAccess::put(ar, nullptr, n * Fixed);
  } else {
    if constexpr (Fixed != kVariableSize) ArchiveAccess::expect(ar, n * Fixed);
    for (const auto& e : range) save_one(e);
  }
}

template <class A>
void save_vector_bool(A& ar, const auto& v) {
  const std::size_t n = v.size();
  serial::save_length(ar, n);
  const std::size_t nbytes = n / 8 + (n % 8 != 0 ? 1 : 0);
  if constexpr (std::is_same_v<A, SizeCounter>) {
    ArchiveAccess::put(ar, nullptr, nbytes);
  } else {
    ArchiveAccess::expect(ar, nbytes);
    std::array<std::uint8_t, 256> chunk{};
    std::size_t used = 0;
    std::uint8_t cur = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (v[i]) cur = static_cast<std::uint8_t>(cur | (1u << (i % 8)));
      if (i % 8 == 7 || i + 1 == n) {
        chunk[used++] = cur;
        cur = 0;
        if (used == chunk.size()) {
          ArchiveAccess::put(ar, chunk.data(), used);
          used = 0;
        }
      }
    }
    ArchiveAccess::put(ar, chunk.data(), used);
  }
}

template <class A, class T>
void save_user(A& ar, const T& value) {
  // The archive only reads through the reference; one member serves both ways.
  T& v = const_cast<T&>(value);
  if constexpr (HasMemberSerialize<T, A>) {
    v.serialize(ar);
  } else {
    serialize(ar, v);
  }
}

template <class A, class T>
void save(A& ar, const T& value) {
  constexpr Kind k = kind_v<T>;
  static_assert(k != Kind::kNone, BRISK_DETAIL_NOT_SERIALIZABLE);
  if constexpr (k == Kind::kUser) {
    static_assert(UserSerializableWith<T, A>,
                  "brisk: the type's serialize member or function does not accept this "
                  "archive; make it a template over the archive type");
    serial::save_user(ar, value);
  } else if constexpr (k == Kind::kString) {
    serial::save_length(ar, value.size());
    ArchiveAccess::put(ar, value.data(), value.size() * sizeof(typename T::value_type));
  } else if constexpr (k == Kind::kVectorBool) {
    serial::save_vector_bool(ar, value);
  } else if constexpr (k == Kind::kVector) {
    using E = typename T::value_type;
    serial::save_length(ar, value.size());
    if constexpr (bitwise_v<E>) {
      ArchiveAccess::put(ar, value.data(), value.size() * sizeof(E));
    } else {
      serial::save_elements<fixed_wire_size_v<E>>(
          ar, value, value.size(), [&](const E& e) { serial::save(ar, e); });
    }
  } else if constexpr (k == Kind::kStdArray || k == Kind::kCArray) {
    using E = typename ArrayTraits<T>::element_type;
    if constexpr (bitwise_v<T>) {
      ArchiveAccess::put(ar, std::addressof(value), sizeof(T));
    } else {
      serial::save_elements<fixed_wire_size_v<E>>(
          ar, value, ArrayTraits<T>::extent, [&](const E& e) { serial::save(ar, e); });
    }
  } else if constexpr (k == Kind::kMap) {
    using K = typename T::key_type;
    using V = typename T::mapped_type;
    serial::save_length(ar, value.size());
    serial::save_elements<fixed_sum<K, V>()>(ar, value, value.size(), [&](const auto& kv) {
      serial::save(ar, kv.first);
      serial::save(ar, kv.second);
    });
  } else if constexpr (k == Kind::kSet) {
    using K = typename T::key_type;
    serial::save_length(ar, value.size());
    serial::save_elements<fixed_wire_size_v<K>>(
        ar, value, value.size(), [&](const K& e) { serial::save(ar, e); });
  } else if constexpr (k == Kind::kOptional) {
    serial::save_byte(ar, value.has_value() ? 1 : 0);
    if (value.has_value()) serial::save(ar, *value);
  } else if constexpr (k == Kind::kVariant) {
    if (value.valueless_by_exception()) {
      throw SerializationError("brisk: cannot serialize a valueless std::variant");
    }
    const auto index = static_cast<std::uint32_t>(value.index());
    ArchiveAccess::put(ar, &index, sizeof index);
    std::visit([&](const auto& alt) { serial::save(ar, alt); }, value);
  } else if constexpr (k == Kind::kPair) {
    serial::save(ar, value.first);
    serial::save(ar, value.second);
  } else if constexpr (k == Kind::kTuple) {
    std::apply([&](const auto&... elems) { (serial::save(ar, elems), ...); }, value);
  } else if constexpr (k == Kind::kBool) {
    serial::save_byte(ar, static_cast<bool>(value) ? 1 : 0);
  } else if constexpr (k == Kind::kEmpty) {
    // No state, no bytes.
  } else if constexpr (k == Kind::kBitwise) {
    ArchiveAccess::put(ar, std::addressof(value), sizeof(T));
  }
}

// ---------------------------------------------------------------------------
// Decoding.

inline std::uint8_t load_byte(Reader& r) {
  std::uint8_t b;
  r.read_bytes(&b, 1);
  return b;
}

// Reads a length and checks that the remaining bytes can describe that many
// elements of at least MinSize bytes each (elements of size zero draw on the
// reader's zero-size budget instead). Throws before anything is allocated.
template <std::size_t MinSize>
std::size_t load_count(Reader& r) {
  std::uint64_t n;
  r.read_bytes(&n, sizeof n);
  const std::size_t rem = r.remaining();
  bool ok;
  if constexpr (MinSize > 0) {
    ok = n <= rem / MinSize;
  } else {
    ok = n <= rem || n - rem <= ArchiveAccess::zero_size_budget(r);
  }
  if (!ok || n > std::numeric_limits<std::size_t>::max()) {
    if constexpr (MinSize > 0) {
      throw SerializationError("brisk: length " + std::to_string(n) +
                               " is more than the remaining " + std::to_string(rem) +
                               " bytes can hold (at least " + std::to_string(MinSize) +
                               " bytes per element)");
    } else {
      throw SerializationError(
          "brisk: length " + std::to_string(n) + " is more than the remaining " +
          std::to_string(rem) + " bytes and the reader's budget of " +
          std::to_string(ArchiveAccess::zero_size_budget(r)) +
          " elements that encode to zero bytes can hold");
    }
  }
  return static_cast<std::size_t>(n);
}

// How many elements of type E (each at least MinSize bytes on the wire) it is safe
// to reserve: no more than the remaining bytes could describe, and no more memory
// than a small multiple of them.
template <class E, std::size_t MinSize>
std::size_t reserve_hint(std::size_t n, std::size_t rem) {
  const std::size_t by_wire = rem / std::max<std::size_t>(MinSize, 1);
  const std::size_t by_memory = rem / sizeof(E) * 4 + 4096 / sizeof(E);
  return std::min({n, by_wire, by_memory});
}

template <std::size_t MinSize, class F>
void load_elements(Reader& r, std::size_t n, F&& load_one) {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (MinSize == 0) {
      const std::size_t before = r.remaining();
      load_one();
      if (r.remaining() == before) ArchiveAccess::charge_zero_size_element(r);
    } else {
      load_one();
    }
  }
}

[[noreturn]] inline void throw_duplicate_key() {
  throw SerializationError("brisk: duplicate key in a set or map");
}

template <class T>
void load_vector_bool(Reader& r, T& v) {
  std::uint64_t n;
  r.read_bytes(&n, sizeof n);
  const std::uint64_t nbytes = n / 8 + (n % 8 != 0 ? 1 : 0);
  if (nbytes > r.remaining()) {
    throw SerializationError("brisk: std::vector<bool> of length " + std::to_string(n) +
                             " needs " + std::to_string(nbytes) + " bytes but only " +
                             std::to_string(r.remaining()) + " remain");
  }
  const std::byte* p = ArchiveAccess::take(r, static_cast<std::size_t>(nbytes));
  if (n % 8 != 0 && (std::to_integer<unsigned>(p[nbytes - 1]) >> (n % 8)) != 0) {
    throw SerializationError("brisk: std::vector<bool> has nonzero padding bits");
  }
  v.assign(static_cast<std::size_t>(n), false);
  for (std::size_t i = 0; i < n; ++i) {
    if ((std::to_integer<unsigned>(p[i / 8]) >> (i % 8)) & 1u) v[i] = true;
  }
}

template <class V, std::size_t... I>
void load_variant(Reader& r, V& v, std::uint32_t index, std::index_sequence<I...>) {
  (void)((index == I ? (serial::load(r, v.template emplace<I>()), true) : false) || ...);
}

template <class T>
void load(Reader& r, T& value) {
  constexpr Kind k = kind_v<T>;
  static_assert(k != Kind::kNone, BRISK_DETAIL_NOT_SERIALIZABLE);
  if constexpr (k == Kind::kUser) {
    static_assert(UserSerializableWith<T, Reader>,
                  "brisk: the type's serialize member or function does not accept "
                  "brisk::Reader; make it a template over the archive type");
    DepthGuard guard(r);
    if constexpr (HasMemberSerialize<T, Reader>) {
      value.serialize(r);
    } else {
      serialize(r, value);
    }
  } else if constexpr (k == Kind::kString) {
    using C = typename T::value_type;
    const std::size_t n = serial::load_count<sizeof(C)>(r);
    const std::byte* p = ArchiveAccess::take(r, n * sizeof(C));
    if constexpr (is_byte_like_v<C>) {
      value.assign(reinterpret_cast<const C*>(p), n);
    } else {
      value.assign(BitwiseIterator<C>(p), BitwiseIterator<C>(p + n * sizeof(C)));
    }
  } else if constexpr (k == Kind::kVectorBool) {
    serial::load_vector_bool(r, value);
  } else if constexpr (k == Kind::kVector) {
    using E = typename T::value_type;
    constexpr std::size_t m = min_wire_size_v<E>;
    const std::size_t n = serial::load_count<m>(r);
    if constexpr (bitwise_v<E>) {
      const std::byte* p = ArchiveAccess::take(r, n * sizeof(E));
      reserve_hinted(value, n);  // before the copy below first touches the storage
      if constexpr (is_byte_like_v<E>) {
        const auto* first = reinterpret_cast<const E*>(p);
        value.assign(first, first + n);
      } else {
        value.assign(BitwiseIterator<E>(p), BitwiseIterator<E>(p + n * sizeof(E)));
      }
    } else {
      value.clear();
      value.reserve(serial::reserve_hint<E, m>(n, r.remaining()));
      serial::load_elements<m>(r, n, [&] { serial::load(r, value.emplace_back()); });
    }
  } else if constexpr (k == Kind::kStdArray || k == Kind::kCArray) {
    if constexpr (bitwise_v<T>) {
      r.read_bytes(std::addressof(value), sizeof(T));
    } else {
      for (auto& e : value) serial::load(r, e);
    }
  } else if constexpr (k == Kind::kMap) {
    using K = typename T::key_type;
    using V = typename T::mapped_type;
    constexpr std::size_t m = min_wire_size_v<K> + min_wire_size_v<V>;
    const std::size_t n = serial::load_count<m>(r);
    value.clear();
    if constexpr (IsUnordered<T>::value) {
      value.reserve(serial::reserve_hint<typename T::value_type, m>(n, r.remaining()));
    }
    serial::load_elements<m>(r, n, [&] {
      K key{};
      V mapped{};
      serial::load(r, key);
      serial::load(r, mapped);
      const std::size_t before = value.size();
      value.emplace_hint(value.end(), std::move(key), std::move(mapped));
      if (value.size() == before) serial::throw_duplicate_key();
    });
  } else if constexpr (k == Kind::kSet) {
    using K = typename T::key_type;
    constexpr std::size_t m = min_wire_size_v<K>;
    const std::size_t n = serial::load_count<m>(r);
    value.clear();
    if constexpr (IsUnordered<T>::value) {
      value.reserve(serial::reserve_hint<K, m>(n, r.remaining()));
    }
    serial::load_elements<m>(r, n, [&] {
      K key{};
      serial::load(r, key);
      const std::size_t before = value.size();
      value.insert(value.end(), std::move(key));
      if (value.size() == before) serial::throw_duplicate_key();
    });
  } else if constexpr (k == Kind::kOptional) {
    const std::uint8_t flag = serial::load_byte(r);
    if (flag == 0) {
      value.reset();
    } else if (flag == 1) {
      serial::load(r, value.emplace());
    } else {
      throw SerializationError("brisk: bad std::optional flag " + std::to_string(flag) +
                               " (expected 0 or 1)");
    }
  } else if constexpr (k == Kind::kVariant) {
    std::uint32_t index;
    r.read_bytes(&index, sizeof index);
    constexpr std::size_t alternatives = std::variant_size_v<T>;
    if (index >= alternatives) {
      throw SerializationError("brisk: bad std::variant index " + std::to_string(index) +
                               " (the variant has " + std::to_string(alternatives) +
                               " alternatives)");
    }
    serial::load_variant(r, value, index, std::make_index_sequence<alternatives>{});
  } else if constexpr (k == Kind::kPair) {
    serial::load(r, value.first);
    serial::load(r, value.second);
  } else if constexpr (k == Kind::kTuple) {
    std::apply([&](auto&... elems) { (serial::load(r, elems), ...); }, value);
  } else if constexpr (k == Kind::kBool) {
    const std::uint8_t b = serial::load_byte(r);
    if (b > 1) {
      throw SerializationError("brisk: bad bool byte " + std::to_string(b) +
                               " (expected 0 or 1)");
    }
    value = static_cast<T>(b == 1);
  } else if constexpr (k == Kind::kEmpty) {
    // No state, no bytes.
  } else if constexpr (k == Kind::kBitwise) {
    r.read_bytes(std::addressof(value), sizeof(T));
  }
}

}  // namespace detail::serial

// serialize_into()
//
// Appends the encoding of `value` to `w`.
template <class T>
void serialize_into(Writer& w, const T& value) {
  static_assert(detail::serial::writable_v<T>, BRISK_DETAIL_NOT_SERIALIZABLE);
  if constexpr (detail::serial::writable_v<T>) detail::serial::save(w, value);
}

// deserialize_from()
//
// Reads one value from `r` into `value`, overwriting it. Throws SerializationError
// on malformed input; bytes after the value are left for further reads.
template <class T>
void deserialize_from(Reader& r, T& value) {
  constexpr bool known = detail::serial::readable_v<T> || detail::serial::writable_v<T>;
  static_assert(known, BRISK_DETAIL_NOT_SERIALIZABLE);
  static_assert(!known || detail::serial::readable_v<T>, BRISK_DETAIL_NOT_READABLE);
  if constexpr (detail::serial::readable_v<T>) detail::serial::load(r, value);
}

// byte_size()
//
// The exact number of bytes to_bytes(value) produces. O(1) for trivially copyable
// types and for containers of fixed-size elements.
template <class T>
std::size_t byte_size(const T& value) {
  static_assert(detail::serial::writable_v<T>, BRISK_DETAIL_NOT_SERIALIZABLE);
  SizeCounter counter;
  if constexpr (detail::serial::writable_v<T>) detail::serial::save(counter, value);
  return counter.size();
}

// to_bytes()
//
// The encoding of `value` in a new buffer. Its capacity is exact where byte_size
// is O(1); otherwise the buffer grew geometrically and may have spare capacity.
template <class T>
std::vector<std::byte> to_bytes(const T& value) {
  static_assert(detail::serial::writable_v<T>, BRISK_DETAIL_NOT_SERIALIZABLE);
  Writer w;
  if constexpr (detail::serial::writable_v<T>) {
    // Sizing first pays off only where it is O(1); elsewhere growth is cheaper
    // than a second traversal.
    if constexpr (detail::serial::size_in_constant_time_v<T>) w.reserve(byte_size(value));
    detail::serial::save(w, value);
  }
  return w.take();
}

// from_bytes()
//
// Decodes a T that must occupy all of `bytes`. Throws SerializationError on
// truncated or malformed input and on trailing bytes. T must be
// default-constructible.
template <class T>
T from_bytes(std::span<const std::byte> bytes) {
  static_assert(std::default_initializable<T>,
                "brisk: from_bytes<T> needs a default-constructible T");
  Reader r(bytes);
  T value{};
  deserialize_from(r, value);
  if (r.remaining() != 0) {
    throw SerializationError("brisk: " + std::to_string(r.remaining()) +
                             " trailing bytes after the decoded value");
  }
  return value;
}

}  // namespace brisk

#undef BRISK_DETAIL_NOT_SERIALIZABLE
#undef BRISK_DETAIL_NOT_READABLE
