// Tests for brisk/core/serialize.hpp: round trips of every built-in encoding and
// of user types, the wire format, exact sizes, and the decoder's behaviour on
// truncated, malformed and randomly mutated input.
#include "brisk/core/serialize.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

namespace {

using brisk::SerializationError;

// ---------------------------------------------------------------------------
// Test types.

enum class Color : std::uint8_t { kRed = 1, kGreen = 2, kBlue = 3 };
enum class Flag : bool { kOff = false, kOn = true };

struct Pod {
  std::int32_t a;
  double b;
  bool operator==(const Pod&) const = default;
};

struct Tag {
  bool operator==(const Tag&) const = default;
};

// A user type with a member serialize.
struct Point {
  int x = 0;
  int y = 0;
  std::string label;
  template <class A>
  void serialize(A& ar) {
    ar(x, y, label);
  }
  bool operator==(const Point&) const = default;
};

// Trivially copyable, but its serialize must win over memcpy: only `kept` is
// encoded, `scratch` never is.
struct Partial {
  std::int64_t kept = 0;
  std::int64_t scratch = 0;
  template <class A>
  void serialize(A& ar) {
    ar(kept);
  }
};
static_assert(std::is_trivially_copyable_v<Partial>);

// A recursive user type.
struct Tree {
  int value = 0;
  std::vector<Tree> children;
  template <class A>
  void serialize(A& ar) {
    ar(value, children);
  }
  bool operator==(const Tree&) const = default;
};

// The struct of the benchmark, and a kitchen-sink record for the fuzz tests.
struct Small {
  int i = 0;
  double d = 0;
  std::string s;
  template <class A>
  void serialize(A& ar) {
    ar(i, d, s);
  }
  bool operator==(const Small&) const = default;
};

struct Record {
  std::uint32_t id = 0;
  std::string name;
  std::vector<double> values;
  std::map<std::string, std::vector<int>> tags;
  std::optional<std::variant<int, std::string, std::vector<bool>>> extra;
  std::set<std::int16_t> ids;
  std::unordered_map<int, std::string> names;
  bool flag = false;
  std::tuple<char, std::pair<int, float>, Color> misc{};
  std::vector<Tree> forest;
  std::array<std::optional<Small>, 2> smalls;
  template <class A>
  void serialize(A& ar) {
    ar(id, name, values, tags, extra, ids, names, flag, misc, forest, smalls);
  }
  bool operator==(const Record&) const = default;
};

// Not trivially copyable, so that std::variant cannot avoid the valueless state.
struct ThrowsOnInt {
  ThrowsOnInt() = default;
  explicit ThrowsOnInt(int) { throw 1; }
  ThrowsOnInt(const ThrowsOnInt&) {}
  template <class A>
  void serialize(A&) {}
};

struct NoDefault {
  explicit NoDefault(int v) : v(v) {}
  int v;
};

struct ConstMember {
  const int x = 0;
};

struct NotSerializable {
  std::string s;  // not trivially copyable and no serialize
};

}  // namespace

// A user type with a free serialize found by ADL.
namespace geo {
struct Vec3 {
  float x = 0, y = 0, z = 0;
  std::vector<int> ids;
  bool operator==(const Vec3&) const = default;
};
template <class A>
void serialize(A& ar, Vec3& v) {
  ar(v.x, v.y, v.z, v.ids);
}
}  // namespace geo

// A cereal-style user namespace with free save/load functions: brisk's internal
// calls must never pick them up through ADL.
namespace cerealish {
struct Item {
  int v = 0;
  template <class A>
  void serialize(A& ar) {
    ar(v);
  }
  bool operator==(const Item&) const = default;
};
template <class A>
void save(A&, const Item&) {
  throw std::logic_error("cerealish::save must not be called");
}
template <class A>
void load(A&, Item&) {
  throw std::logic_error("cerealish::load must not be called");
}
}  // namespace cerealish

namespace {

// ---------------------------------------------------------------------------
// Compile-time contract.

static_assert(brisk::Serializable<int>);
static_assert(brisk::Serializable<Pod>);
static_assert(brisk::Serializable<Point>);
static_assert(brisk::Serializable<geo::Vec3>);
static_assert(brisk::Serializable<Tree>);
static_assert(brisk::Serializable<Record>);
static_assert(brisk::Serializable<std::vector<std::map<std::string, std::vector<double>>>>);
static_assert(brisk::Serializable<std::variant<std::monostate, int, std::string>>);
static_assert(brisk::Serializable<std::tuple<>>);
static_assert(!brisk::Serializable<int*>);
static_assert(!brisk::Serializable<std::vector<int*>>);
static_assert(!brisk::Serializable<NotSerializable>);
static_assert(!brisk::Serializable<std::map<int, NotSerializable>>);
static_assert(!brisk::Serializable<std::optional<NotSerializable>>);
static_assert(!brisk::Serializable<std::vector<NoDefault>>);   // cannot be read
static_assert(!brisk::Serializable<std::pair<const int, int>>);  // cannot be read
static_assert(!brisk::Serializable<int&>);
static_assert(!brisk::Serializable<ConstMember>);  // can be written, not read

// ---------------------------------------------------------------------------
// Helpers.

std::span<const std::byte> as_span(const std::vector<std::byte>& b) { return b; }

// Encodes `value` through every path, checks the sizes agree, decodes it, and
// returns the encoding.
template <class T>
std::vector<std::byte> expect_round_trip(const T& value) {
  std::vector<std::byte> bytes = brisk::to_bytes(value);
  EXPECT_EQ(brisk::byte_size(value), bytes.size());

  brisk::Writer w;
  brisk::serialize_into(w, value);
  EXPECT_EQ(w.bytes(), bytes);

  brisk::SizeCounter counter;
  counter(value);
  EXPECT_EQ(counter.size(), bytes.size());

  T decoded = brisk::from_bytes<T>(bytes);
  EXPECT_TRUE(decoded == value);
  return bytes;
}

std::vector<std::byte> make_bytes(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

void append_u64(std::vector<std::byte>& b, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::byte>(v >> (8 * i)));
}

// Runs `fn`, which must throw SerializationError whose message contains `needle`.
template <class F>
void expect_error(F&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected SerializationError containing \"" << needle << "\"";
  } catch (const SerializationError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

Tree make_tree(std::mt19937& rng, int depth) {
  Tree t;
  t.value = static_cast<int>(rng());
  if (depth > 0) {
    const int n = static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) t.children.push_back(make_tree(rng, depth - 1));
  }
  return t;
}

std::string random_string(std::mt19937& rng, std::size_t max_len) {
  std::string s(rng() % (max_len + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

Record make_record(std::mt19937& rng) {
  Record r;
  r.id = rng();
  r.name = random_string(rng, 12);
  for (std::size_t i = rng() % 6; i > 0; --i) r.values.push_back(static_cast<double>(rng()) / 7);
  for (std::size_t i = rng() % 4; i > 0; --i) {
    r.tags[random_string(rng, 5)] = std::vector<int>(rng() % 4, static_cast<int>(rng()));
  }
  switch (rng() % 4) {
    case 0: break;
    case 1: r.extra = static_cast<int>(rng()); break;
    case 2: r.extra = random_string(rng, 8); break;
    default: r.extra = std::vector<bool>(rng() % 20, true); break;
  }
  for (std::size_t i = rng() % 5; i > 0; --i) r.ids.insert(static_cast<std::int16_t>(rng()));
  for (std::size_t i = rng() % 3; i > 0; --i) {
    r.names[static_cast<int>(rng())] = random_string(rng, 4);
  }
  r.flag = rng() % 2 == 1;
  r.misc = {static_cast<char>(rng()), {static_cast<int>(rng()), 1.5f}, Color::kBlue};
  for (std::size_t i = rng() % 2; i > 0; --i) r.forest.push_back(make_tree(rng, 3));
  if (rng() % 2) r.smalls[1] = Small{1, 2.5, random_string(rng, 6)};
  return r;
}

// Decoding must either succeed or throw SerializationError; anything else (another
// exception, a crash, a sanitizer report) fails the test.
template <class T>
void decode_must_not_misbehave(std::span<const std::byte> bytes, int& ok, int& rejected) {
  try {
    T value = brisk::from_bytes<T>(bytes);
    // A successful decode must re-encode to the same bytes, except for unordered
    // containers whose iteration order may differ; at least the size must agree.
    EXPECT_EQ(brisk::byte_size(value), bytes.size());
    ++ok;
  } catch (const SerializationError&) {
    ++rejected;
  }
}

// Applies one random mutation to a valid encoding.
void mutate(std::mt19937& rng, std::vector<std::byte>& b) {
  const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  switch (rng() % 7) {
    case 0:  // flip one bit
      if (!b.empty()) b[pick(b.size())] ^= static_cast<std::byte>(1u << (rng() % 8));
      break;
    case 1:  // overwrite a byte
      if (!b.empty()) b[pick(b.size())] = static_cast<std::byte>(rng());
      break;
    case 2:  // truncate
      b.resize(b.empty() ? 0 : pick(b.size()));
      break;
    case 3:  // insert garbage bytes
      for (std::size_t i = 1 + pick(4); i > 0; --i) {
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pick(b.size() + 1)),
                 static_cast<std::byte>(rng()));
      }
      break;
    case 4:  // erase a range
      if (!b.empty()) {
        const std::size_t at = pick(b.size());
        const std::size_t len = std::min<std::size_t>(1 + pick(8), b.size() - at);
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(at + len));
      }
      break;
    case 5:  // plant a huge or off-by-a-little length anywhere
      if (b.size() >= 8) {
        const std::size_t at = pick(b.size() - 7);
        const std::uint64_t candidates[] = {
            std::numeric_limits<std::uint64_t>::max(), std::uint64_t{1} << 61,
            std::uint64_t{1} << 32, b.size(), b.size() + 1, rng() % 64};
        std::uint64_t v = candidates[pick(std::size(candidates))];
        std::memcpy(b.data() + at, &v, 8);
      }
      break;
    default:  // smash a run of bytes with 0xff or 0x00
      if (!b.empty()) {
        const std::size_t at = pick(b.size());
        const std::size_t len = std::min<std::size_t>(1 + pick(6), b.size() - at);
        const auto fill = rng() % 2 ? std::byte{0xff} : std::byte{0};
        std::fill(b.begin() + static_cast<std::ptrdiff_t>(at),
                  b.begin() + static_cast<std::ptrdiff_t>(at + len), fill);
      }
      break;
  }
}

// ---------------------------------------------------------------------------
// Round trips.

TEST(SerializeTest, RoundTripsArithmeticAndEnums) {
  expect_round_trip(0);
  expect_round_trip(-123456789);
  expect_round_trip(std::numeric_limits<std::int64_t>::min());
  expect_round_trip(std::numeric_limits<std::uint64_t>::max());
  expect_round_trip('x');
  expect_round_trip(std::byte{0xab});
  expect_round_trip(3.25);
  expect_round_trip(-0.0f);
  expect_round_trip(std::numeric_limits<double>::infinity());
  expect_round_trip(Color::kGreen);
  expect_round_trip(true);
  expect_round_trip(false);
  expect_round_trip(Flag::kOn);
  expect_round_trip(Flag::kOff);
  EXPECT_EQ(brisk::to_bytes(std::int32_t{7}).size(), 4u);
  EXPECT_EQ(brisk::to_bytes(true).size(), 1u);

  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(brisk::from_bytes<double>(brisk::to_bytes(nan))));
}

TEST(SerializeTest, RoundTripsTriviallyCopyableStructsByMemcpy) {
  const Pod pod{42, -1.5};
  const auto bytes = expect_round_trip(pod);
  EXPECT_EQ(bytes.size(), sizeof(Pod));
  expect_round_trip(std::vector<Pod>{{1, 2.0}, {3, 4.0}});
  EXPECT_EQ(brisk::byte_size(std::vector<Pod>(10)), 8 + 10 * sizeof(Pod));
}

TEST(SerializeTest, EmptyTypesTakeNoBytes) {
  EXPECT_EQ(expect_round_trip(Tag{}).size(), 0u);
  EXPECT_EQ(expect_round_trip(std::monostate{}).size(), 0u);
  EXPECT_EQ(expect_round_trip(std::tuple<>{}).size(), 0u);
  EXPECT_EQ(expect_round_trip(std::vector<Tag>(1000)).size(), 8u);
  expect_round_trip(std::vector<std::tuple<>>(3));
  expect_round_trip(std::array<int, 0>{});
}

TEST(SerializeTest, RoundTripsStrings) {
  expect_round_trip(std::string());
  expect_round_trip(std::string("hello"));
  expect_round_trip(std::string("embedded\0nul", 12));
  expect_round_trip(std::string(100000, 'z'));
  expect_round_trip(std::u16string(u"wide \u00e9"));
  expect_round_trip(std::u32string(U"\U0001F600"));
  EXPECT_EQ(brisk::byte_size(std::string("abc")), 8u + 3u);
}

TEST(SerializeTest, RoundTripsVectors) {
  expect_round_trip(std::vector<int>{});
  expect_round_trip(std::vector<double>{1.0, 2.5, -3.75});
  expect_round_trip(std::vector<std::byte>{std::byte{1}, std::byte{255}});
  expect_round_trip(std::vector<char>{'a', 'b'});
  expect_round_trip(std::vector<unsigned char>{0, 200});
  expect_round_trip(std::vector<std::string>{"", "a", "bc"});
  expect_round_trip(std::vector<std::vector<int>>{{}, {1}, {2, 3}});
  expect_round_trip(std::vector<std::array<float, 3>>{{1, 2, 3}, {4, 5, 6}});
  expect_round_trip(std::vector<Color>{Color::kRed, Color::kBlue});
  expect_round_trip(std::vector<Flag>{Flag::kOn, Flag::kOff});
  std::vector<double> big(1 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i) * 0.5;
  EXPECT_EQ(expect_round_trip(big).size(), 8 + big.size() * sizeof(double));
}

TEST(SerializeTest, RoundTripsVectorBoolBitPacked) {
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 65u, 1000u, 4097u}) {
    std::vector<bool> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = (i * 7919) % 3 == 0;
    const auto bytes = expect_round_trip(v);
    EXPECT_EQ(bytes.size(), 8 + (n + 7) / 8) << n;
  }
  // Least significant bit first.
  const auto bytes = brisk::to_bytes(std::vector<bool>{true, false, true});
  ASSERT_EQ(bytes.size(), 9u);
  EXPECT_EQ(bytes[8], std::byte{0b101});
}

TEST(SerializeTest, RoundTripsArrays) {
  expect_round_trip(std::array<int, 4>{1, 2, 3, 4});
  expect_round_trip(std::array<std::string, 2>{"x", "yz"});
  expect_round_trip(std::array<bool, 3>{true, false, true});
  EXPECT_EQ(brisk::byte_size(std::array<double, 5>{}), 40u);

  int c_array[3] = {7, 8, 9};
  std::string c_strings[2] = {"a", "bcd"};
  brisk::Writer w;
  w(c_array, c_strings);
  EXPECT_EQ(w.size(), 12u + 8 + 1 + 8 + 3);
  int c_array_out[3] = {};
  std::string c_strings_out[2];
  brisk::Reader r(w.bytes());
  r(c_array_out, c_strings_out);
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(c_array_out[2], 9);
  EXPECT_EQ(c_strings_out[1], "bcd");
}

TEST(SerializeTest, RoundTripsMapsAndSets) {
  expect_round_trip(std::map<std::string, int>{});
  expect_round_trip(std::map<std::string, int>{{"a", 1}, {"bb", 2}, {"", 3}});
  expect_round_trip(std::map<int, double>{{1, 1.5}, {-2, 2.5}});
  expect_round_trip(std::unordered_map<int, std::string>{{1, "one"}, {2, "two"}, {3, ""}});
  expect_round_trip(std::set<std::string>{"x", "y", "zz"});
  expect_round_trip(std::unordered_set<std::uint64_t>{1, 5, 99});
  expect_round_trip(std::set<std::pair<int, int>>{{1, 2}, {1, 3}});
  EXPECT_EQ(brisk::byte_size(std::map<int, double>{{1, 1.5}, {2, 2.5}}), 8u + 2 * 12);
}

TEST(SerializeTest, RoundTripsOptionalVariantPairTuple) {
  expect_round_trip(std::optional<int>{});
  expect_round_trip(std::optional<int>{5});
  expect_round_trip(std::optional<std::string>{"s"});
  expect_round_trip(std::optional<std::vector<int>>{std::vector<int>{1, 2}});
  expect_round_trip(std::optional<bool>{false});

  using V = std::variant<std::monostate, int, std::string, std::vector<double>>;
  expect_round_trip(V{});
  expect_round_trip(V{17});
  expect_round_trip(V{std::string("str")});
  expect_round_trip(V{std::vector<double>{1, 2}});
  using Twins = std::variant<int, int>;
  const auto bytes = expect_round_trip(Twins{std::in_place_index<1>, 4});
  EXPECT_EQ(brisk::from_bytes<Twins>(bytes).index(), 1u);

  expect_round_trip(std::pair<int, std::string>{1, "one"});
  expect_round_trip(std::tuple<int, double, std::string, std::vector<int>>{1, 2.0, "3", {4}});
  expect_round_trip(std::tuple<bool, std::tuple<char, std::optional<int>>>{true, {'c', 3}});
}

TEST(SerializeTest, RoundTripsNestedContainers) {
  std::vector<std::map<std::string, std::vector<double>>> nested{
      {{"a", {1.0, 2.0}}, {"b", {}}}, {}, {{"c", {3.0}}}};
  expect_round_trip(nested);

  std::map<int, std::optional<std::variant<std::string, std::vector<int>>>> m;
  m[1] = std::nullopt;
  m[2] = std::variant<std::string, std::vector<int>>{"two"};
  m[3] = std::variant<std::string, std::vector<int>>{std::vector<int>{3, 3, 3}};
  expect_round_trip(m);

  std::unordered_map<std::string, std::set<std::pair<int, std::string>>> u{
      {"k", {{1, "a"}, {2, "b"}}}, {"", {}}};
  expect_round_trip(u);

  expect_round_trip(std::vector<std::vector<std::vector<bool>>>{{{true}, {}}, {}});
  expect_round_trip(std::optional<std::optional<std::optional<int>>>{std::optional<int>{}});
}

TEST(SerializeTest, RoundTripsUserTypes) {
  expect_round_trip(Point{1, -2, "p"});
  expect_round_trip(geo::Vec3{1.f, 2.f, 3.f, {4, 5}});
  expect_round_trip(std::vector<Point>{{1, 2, "a"}, {3, 4, "b"}});
  expect_round_trip(std::map<std::string, geo::Vec3>{{"v", {0, 1, 2, {}}}});
  expect_round_trip(std::optional<Point>{Point{5, 6, ""}});
  expect_round_trip(std::variant<Point, geo::Vec3>{geo::Vec3{}});

  std::mt19937 rng(1);
  expect_round_trip(make_tree(rng, 6));
  for (int i = 0; i < 20; ++i) expect_round_trip(make_record(rng));
}

TEST(SerializeTest, UserSaveAndLoadFunctionsAreNotFoundByAdl) {
  expect_round_trip(cerealish::Item{3});
  expect_round_trip(std::vector<cerealish::Item>{{1}, {2}});
  expect_round_trip(std::map<int, cerealish::Item>{{1, {5}}});
  expect_round_trip(std::optional<cerealish::Item>{cerealish::Item{6}});
}

TEST(SerializeTest, UserSerializeWinsOverMemcpy) {
  const Partial p{11, 99};
  const auto bytes = brisk::to_bytes(p);
  EXPECT_EQ(bytes.size(), sizeof(std::int64_t));
  EXPECT_EQ(brisk::byte_size(p), sizeof(std::int64_t));
  const Partial q = brisk::from_bytes<Partial>(bytes);
  EXPECT_EQ(q.kept, 11);
  EXPECT_EQ(q.scratch, 0);
  EXPECT_EQ(brisk::byte_size(std::vector<Partial>(3)), 8u + 3 * 8);
}

TEST(SerializeTest, DeserializeOverwritesTheTarget) {
  std::map<int, int> m{{1, 1}, {2, 2}};
  std::vector<std::string> v{"old", "values"};
  std::optional<int> o = 3;
  brisk::Writer w;
  w(std::map<int, int>{{9, 9}}, std::vector<std::string>{"new"}, std::optional<int>{});
  brisk::Reader r(w.bytes());
  r(m, v, o);
  EXPECT_EQ(m, (std::map<int, int>{{9, 9}}));
  EXPECT_EQ(v, std::vector<std::string>{"new"});
  EXPECT_FALSE(o.has_value());
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(SerializeTest, ArchivesStreamSeveralValues) {
  brisk::Writer w;
  w(1, std::string("two"), 3.0).write_bytes("raw", 3);
  brisk::serialize_into(w, Point{4, 5, "six"});
  EXPECT_EQ(w.size(), w.bytes().size());

  brisk::Reader r(w.bytes());
  int one = 0;
  std::string two;
  double three = 0;
  char raw[3];
  Point p;
  r(one, two, three).read_bytes(raw, 3);
  brisk::deserialize_from(r, p);
  EXPECT_EQ(one, 1);
  EXPECT_EQ(two, "two");
  EXPECT_EQ(three, 3.0);
  EXPECT_EQ(std::string(raw, 3), "raw");
  EXPECT_EQ(p, (Point{4, 5, "six"}));
  EXPECT_EQ(r.remaining(), 0u);
}

// From 4 MiB a bitwise vector is loaded into fresh storage hinted for huge pages:
// the values are the same whether the target was empty, smaller or large enough.
TEST(SerializeTest, LargeBitwiseVectorsLoadIntoAnyTarget) {
  std::vector<double> big(std::size_t{5} << 17);  // 5 MiB
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i) * 0.5;
  const auto bytes = brisk::to_bytes(big);
  for (const std::size_t before : {std::size_t{0}, std::size_t{3}, big.size() + 7}) {
    brisk::Reader r(bytes);
    std::vector<double> into(before, -1.0);
    r(into);
    EXPECT_EQ(into, big) << "target held " << before;
    EXPECT_EQ(r.remaining(), 0u);
  }
  std::vector<std::uint8_t> raw(std::size_t{6} << 20);
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::uint8_t>(i * 31);
  EXPECT_EQ(brisk::from_bytes<std::vector<std::uint8_t>>(brisk::to_bytes(raw)), raw);
}

// The storage of a freed large vector is kept and filled by the next load of about
// its size; one much larger, or one too small to keep, is not.
TEST(SerializeTest, SpareVectorStorageIsReusedByTheNextLoadOfItsSize) {
  namespace serial = brisk::detail::serial;
  struct Tag {
    std::uint64_t a, b;  // an element type of this test's own: no other spares
  };
  auto& spares = serial::SpareVectors<Tag>::instance();
  const std::size_t n = serial::kSpareVectorBytes / sizeof(Tag) * 2;  // 512 KiB
  std::vector<Tag> freed(n, Tag{1, 2});
  const Tag* storage = freed.data();
  spares.give(freed);
  EXPECT_TRUE(freed.empty());
  ASSERT_EQ(spares.count(), 1u);

  std::vector<Tag> sent(n - 10, Tag{3, 4});
  brisk::Reader r(brisk::to_bytes(sent));
  std::vector<Tag> into;
  r(into);
  EXPECT_EQ(into.data(), storage);  // the spare's storage, its pages in memory
  ASSERT_EQ(into.size(), sent.size());
  EXPECT_EQ(into.back().b, 4u);
  EXPECT_EQ(spares.count(), 0u);

  spares.give(into);
  EXPECT_EQ(spares.take(2 * n).capacity(), 0u);  // more than a quarter larger: no
  EXPECT_EQ(spares.take(n / 2).capacity(), 0u);  // more than a quarter smaller: no
  EXPECT_GE(spares.take(n).capacity(), n);
  std::vector<Tag> small(serial::kSpareVectorBytes / sizeof(Tag) / 2);
  spares.give(small);  // too small to keep
  EXPECT_EQ(spares.count(), 0u);
  EXPECT_FALSE(small.empty());
}

// A writer reserved while empty takes a spare buffer's storage (a large frame that a
// transport has sent); one that holds bytes keeps them.
TEST(SerializeTest, AnEmptyWriterReservesSpareStorage) {
  namespace serial = brisk::detail::serial;
  auto& spares = serial::SpareVectors<std::byte>::instance();
  while (spares.take(serial::kSpareVectorBytes * 2).capacity() != 0) {
  }
  std::vector<std::byte> sent(serial::kSpareVectorBytes * 2, std::byte{7});
  const std::byte* storage = sent.data();
  spares.give(sent);
  brisk::Writer w;
  w.reserve(serial::kSpareVectorBytes * 2 - 100);
  EXPECT_EQ(w.bytes().data(), storage);
  EXPECT_EQ(w.size(), 0u);
  w(std::uint32_t{42});
  w.reserve(serial::kSpareVectorBytes * 4);
  EXPECT_EQ(brisk::from_bytes<std::uint32_t>(w.bytes()), 42u);
  std::vector<std::byte> mine = w.take();
  spares.give(mine);
  EXPECT_EQ(spares.count(), 1u);
  EXPECT_GE(spares.take(serial::kSpareVectorBytes * 4).capacity(), serial::kSpareVectorBytes * 4);
}

// Spare vectors and Array's cache of blocks share one bound.
TEST(SerializeTest, KeptBytesAreBounded) {
  namespace serial = brisk::detail::serial;
  ASSERT_TRUE(serial::reserve_kept_bytes(0));
  EXPECT_FALSE(serial::reserve_kept_bytes(serial::kKeptBytesLimit + 1));
  std::size_t claimed = 0;
  while (claimed < serial::kKeptBytesLimit && serial::reserve_kept_bytes(std::size_t{1} << 20)) claimed += std::size_t{1} << 20;
  EXPECT_FALSE(serial::reserve_kept_bytes(std::size_t{1} << 20));
  struct Tag {
    std::uint64_t a;
  };
  std::vector<Tag> v(serial::kSpareVectorBytes);  // past the bound: not kept
  serial::SpareVectors<Tag>::instance().give(v);
  EXPECT_EQ(serial::SpareVectors<Tag>::instance().count(), 0u);
  serial::release_kept_bytes(claimed);
  EXPECT_TRUE(serial::reserve_kept_bytes(std::size_t{1} << 20));
  serial::release_kept_bytes(std::size_t{1} << 20);
}

TEST(SerializeTest, WriterTakeReserveAndReuse) {
  brisk::Writer w;
  w.reserve(1024);
  EXPECT_GE(w.bytes().capacity(), 1024u);
  w(std::uint32_t{0xdeadbeef});
  std::vector<std::byte> taken = w.take();
  EXPECT_EQ(taken.size(), 4u);
  EXPECT_EQ(w.size(), 0u);
  w(std::uint8_t{1});
  EXPECT_EQ(w.size(), 1u);
  EXPECT_EQ(brisk::from_bytes<std::uint32_t>(taken), 0xdeadbeefu);
}

// ---------------------------------------------------------------------------
// Wire format.

TEST(SerializeTest, WireFormatIsAsDocumented) {
  // Length: uint64 little-endian, then the bytes.
  EXPECT_EQ(brisk::to_bytes(std::string("ab")),
            make_bytes({2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b'}));
  // Optional: one flag byte.
  EXPECT_EQ(brisk::to_bytes(std::optional<std::uint8_t>{}), make_bytes({0}));
  EXPECT_EQ(brisk::to_bytes(std::optional<std::uint8_t>{7}), make_bytes({1, 7}));
  // Variant: uint32 index, then the alternative.
  EXPECT_EQ(brisk::to_bytes(std::variant<std::uint8_t, std::uint16_t>{std::uint16_t{0x0102}}),
            make_bytes({1, 0, 0, 0, 0x02, 0x01}));
  // Map: length, then key, value pairs in iteration order.
  EXPECT_EQ(brisk::to_bytes(std::map<std::uint8_t, bool>{{5, true}, {6, false}}),
            make_bytes({2, 0, 0, 0, 0, 0, 0, 0, 5, 1, 6, 0}));
  // Pair and tuple: the members back to back.
  EXPECT_EQ(brisk::to_bytes(std::tuple<std::uint8_t, std::uint16_t>{1, 2}),
            make_bytes({1, 2, 0}));
}

// ---------------------------------------------------------------------------
// Errors.

TEST(SerializeTest, TruncationThrowsWithNeededAndRemaining) {
  const auto bytes = brisk::to_bytes(std::uint64_t{5});
  expect_error([&] { brisk::from_bytes<std::uint64_t>(as_span(bytes).first(3)); },
               "need 8 bytes but only 3 remain");

  const auto str = brisk::to_bytes(std::string("hello"));
  expect_error([&] { brisk::from_bytes<std::string>(as_span(str).first(3)); },
               "need 8 bytes but only 3 remain");
  expect_error([&] { brisk::from_bytes<std::string>(as_span(str).first(10)); },
               "length 5 is more than the remaining 2 bytes");

  brisk::Reader r(as_span(bytes).first(2));
  char out[4];
  expect_error([&] { r.read_bytes(out, 4); }, "need 4 bytes but only 2 remain");
}

TEST(SerializeTest, EveryPrefixOfAValidEncodingThrows) {
  std::mt19937 rng(7);
  for (int i = 0; i < 10; ++i) {
    const Record rec = make_record(rng);
    const auto bytes = brisk::to_bytes(rec);
    for (std::size_t len = 0; len < bytes.size(); ++len) {
      EXPECT_THROW(brisk::from_bytes<Record>(as_span(bytes).first(len)), SerializationError)
          << "prefix " << len << " of " << bytes.size();
    }
  }
}

TEST(SerializeTest, TrailingBytesThrow) {
  auto bytes = brisk::to_bytes(std::vector<int>{1, 2});
  bytes.push_back(std::byte{0});
  bytes.push_back(std::byte{0});
  expect_error([&] { brisk::from_bytes<std::vector<int>>(bytes); },
               "2 trailing bytes after the decoded value");
  // The streaming interface leaves them for the caller.
  brisk::Reader r(bytes);
  std::vector<int> v;
  brisk::deserialize_from(r, v);
  EXPECT_EQ(r.remaining(), 2u);
}

TEST(SerializeTest, HugeLengthsThrowBeforeAllocating) {
  std::vector<std::byte> b;
  append_u64(b, std::uint64_t{1} << 60);
  b.resize(b.size() + 64);
  expect_error([&] { brisk::from_bytes<std::vector<double>>(b); }, "is more than the remaining");
  expect_error([&] { brisk::from_bytes<std::string>(b); }, "is more than the remaining");
  expect_error([&] { brisk::from_bytes<std::vector<std::string>>(b); },
               "at least 8 bytes per element");
  expect_error([&] { brisk::from_bytes<std::map<int, double>>(b); },
               "at least 12 bytes per element");
  expect_error([&] { brisk::from_bytes<std::unordered_set<int>>(b); },
               "is more than the remaining");
  expect_error([&] { brisk::from_bytes<std::vector<Point>>(b); },
               "is more than the remaining");
  expect_error([&] { brisk::from_bytes<std::vector<bool>>(b); }, "std::vector<bool> of length");
  expect_error([&] { brisk::from_bytes<std::vector<Tag>>(b); }, "is more than the remaining");

  // n * min_size must fit: 9 doubles cannot come out of 64 bytes.
  std::vector<std::byte> nine;
  append_u64(nine, 9);
  nine.resize(nine.size() + 64);
  expect_error([&] { brisk::from_bytes<std::vector<double>>(nine); },
               "length 9 is more than the remaining 64 bytes");

  // Lengths whose product with the element size overflows.
  std::vector<std::byte> wrap;
  append_u64(wrap, (std::numeric_limits<std::uint64_t>::max() / 8) + 2);
  wrap.resize(wrap.size() + 16);
  EXPECT_THROW(brisk::from_bytes<std::vector<double>>(wrap), SerializationError);
  std::vector<std::byte> max;
  append_u64(max, std::numeric_limits<std::uint64_t>::max());
  EXPECT_THROW(brisk::from_bytes<std::vector<bool>>(max), SerializationError);
  EXPECT_THROW(brisk::from_bytes<std::vector<Tag>>(max), SerializationError);
}

TEST(SerializeTest, BadTagsThrow) {
  expect_error([] { brisk::from_bytes<bool>(make_bytes({2})); }, "bad bool byte 2");
  expect_error([] { brisk::from_bytes<Flag>(make_bytes({255})); }, "bad bool byte 255");
  expect_error([] { brisk::from_bytes<std::optional<int>>(make_bytes({2, 0, 0, 0, 0})); },
               "bad std::optional flag 2");
  expect_error([] { brisk::from_bytes<std::variant<int, char>>(make_bytes({2, 0, 0, 0, 0})); },
               "bad std::variant index 2");
  expect_error(
      [] { brisk::from_bytes<std::variant<int, char>>(make_bytes({0, 0, 0, 1, 0, 0, 0, 0})); },
      "bad std::variant index 16777216");

  std::vector<std::byte> vb;
  append_u64(vb, 3);
  vb.push_back(std::byte{0b1001});  // bit 3 is padding
  expect_error([&] { brisk::from_bytes<std::vector<bool>>(vb); }, "nonzero padding bits");
}

TEST(SerializeTest, DuplicateKeysThrow) {
  std::vector<std::byte> b;
  append_u64(b, 2);
  b.insert(b.end(), {std::byte{1}, std::byte{10}, std::byte{1}, std::byte{20}});
  expect_error([&] { brisk::from_bytes<std::map<std::uint8_t, std::uint8_t>>(b); },
               "duplicate key");
  expect_error([&] { brisk::from_bytes<std::unordered_map<std::uint8_t, std::uint8_t>>(b); },
               "duplicate key");
  std::vector<std::byte> s;
  append_u64(s, 2);
  s.insert(s.end(), {std::byte{4}, std::byte{4}});
  expect_error([&] { brisk::from_bytes<std::set<std::uint8_t>>(s); }, "duplicate key");
  expect_error([&] { brisk::from_bytes<std::unordered_set<std::uint8_t>>(s); }, "duplicate key");
}

TEST(SerializeTest, DeepNestingIsBounded) {
  // A chain of nested Trees: each level is value (4 bytes) + length 1 (8 bytes).
  const auto chain = [](std::size_t depth) {
    std::vector<std::byte> b;
    for (std::size_t i = 0; i < depth; ++i) {
      b.insert(b.end(), 4, std::byte{0});
      append_u64(b, i + 1 < depth ? 1 : 0);
    }
    return b;
  };
  EXPECT_NO_THROW(brisk::from_bytes<Tree>(chain(400)));
  expect_error([&] { brisk::from_bytes<Tree>(chain(100000)); }, "nests deeper than");
}

TEST(SerializeTest, ZeroSizeElementsAreBudgeted) {
  std::vector<std::byte> b;
  append_u64(b, std::uint64_t{1} << 40);
  expect_error([&] { brisk::from_bytes<std::vector<std::tuple<>>>(b); },
               "is more than the remaining 0 bytes");
  // Many short vectors of empty elements: each passes its own check, the total
  // runs into the reader's budget.
  std::vector<std::byte> many;
  append_u64(many, 64);
  for (int i = 0; i < 64; ++i) append_u64(many, 1 << 19);
  expect_error([&] { brisk::from_bytes<std::vector<std::vector<Tag>>>(many); },
               "budget of 0 elements that encode to zero bytes");
  // A length that the bytes after it seem to cover, but whose elements take none
  // of them, runs into the budget while the elements are read.
  std::vector<std::byte> nested;
  append_u64(nested, 2);
  append_u64(nested, (1 << 20) + 8);
  append_u64(nested, 0);
  expect_error([&] { brisk::from_bytes<std::vector<std::vector<Tag>>>(nested); },
               "too many container elements that encode to zero bytes");
}

TEST(SerializeTest, ValuelessVariantCannotBeWritten) {
  std::variant<int, ThrowsOnInt> v;
  try {
    v.emplace<ThrowsOnInt>(0);
  } catch (int) {
  }
  ASSERT_TRUE(v.valueless_by_exception());
  EXPECT_THROW(brisk::to_bytes(v), SerializationError);
}

// ---------------------------------------------------------------------------
// Robustness against hostile frames.

TEST(SerializeTest, RandomMutationsOnlyEverThrowSerializationError) {
  std::mt19937 rng(20240601);
  int ok = 0;
  int rejected = 0;
  std::vector<std::vector<std::byte>> seeds;
  for (int i = 0; i < 40; ++i) seeds.push_back(brisk::to_bytes(make_record(rng)));
  for (int i = 0; i < 8000; ++i) {
    std::vector<std::byte> b = seeds[rng() % seeds.size()];
    for (std::size_t m = 1 + rng() % 3; m > 0; --m) mutate(rng, b);
    decode_must_not_misbehave<Record>(b, ok, rejected);
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(ok + rejected, 8000);
}

TEST(SerializeTest, MutatedEncodingsOfManyTypesAreSafe) {
  std::mt19937 rng(99);
  int ok = 0;
  int rejected = 0;
  const auto fuzz = [&]<class T>(const T& value) {
    const auto seed = brisk::to_bytes(value);
    for (int i = 0; i < 600; ++i) {
      std::vector<std::byte> b = seed;
      mutate(rng, b);
      decode_must_not_misbehave<T>(b, ok, rejected);
    }
  };
  fuzz(std::vector<std::map<std::string, std::vector<double>>>{{{"a", {1, 2}}, {"b", {}}}, {}});
  fuzz(std::map<int, std::optional<std::variant<std::string, std::vector<int>, bool>>>{
      {1, std::nullopt}, {2, std::variant<std::string, std::vector<int>, bool>{"x"}},
      {3, std::variant<std::string, std::vector<int>, bool>{true}}});
  fuzz(std::vector<std::vector<bool>>{{true, false, true}, std::vector<bool>(17, true)});
  fuzz(std::unordered_map<std::string, std::set<std::pair<int, std::string>>>{
      {"k", {{1, "a"}, {2, "b"}}}});
  fuzz(std::vector<Tree>{make_tree(rng, 4), make_tree(rng, 3)});
  fuzz(std::tuple<std::vector<Tag>, std::array<bool, 4>, Flag, std::optional<Point>>{
      std::vector<Tag>(5), {true, false, true, true}, Flag::kOn, Point{1, 2, "pt"}});
  fuzz(std::vector<Small>{{1, 2, "three"}, {4, 5, "six"}});
  EXPECT_GT(rejected, 0);
  EXPECT_GT(ok, 0);
}

TEST(SerializeTest, RandomGarbageBuffersAreSafe) {
  std::mt19937 rng(4242);
  int ok = 0;
  int rejected = 0;
  for (int i = 0; i < 4000; ++i) {
    std::vector<std::byte> b(rng() % 96);
    for (auto& x : b) {
      // Mostly small bytes, so that lengths and tags are sometimes plausible.
      x = static_cast<std::byte>(rng() % 4 == 0 ? rng() : rng() % 3);
    }
    decode_must_not_misbehave<Record>(b, ok, rejected);
    decode_must_not_misbehave<std::vector<Tree>>(b, ok, rejected);
    decode_must_not_misbehave<std::map<std::string, std::vector<double>>>(b, ok, rejected);
    decode_must_not_misbehave<std::variant<std::monostate, std::vector<Tag>, std::string>>(
        b, ok, rejected);
    decode_must_not_misbehave<std::optional<std::vector<bool>>>(b, ok, rejected);
  }
  EXPECT_EQ(ok + rejected, 5 * 4000);
  EXPECT_GT(rejected, 0);
}

}  // namespace
