// Benchmarks brisk serialization against cereal's binary archives on three
// payloads: a vector<double> of 1M elements, a map<string, int> of 1,000 entries
// and a vector of 10,000 small user structs {int, double, std::string}.
//
// Each payload has a RoundTrip benchmark (encode, then decode into a fresh
// object), plus Encode and Decode alone. cereal goes through std::stringstream,
// as its binary archives require.
#include "brisk/core/serialize.hpp"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#ifdef BRISK_HAVE_CEREAL
#include <cereal/archives/binary.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#endif

namespace {

// The same member serves brisk and cereal.
struct Small {
  int i = 0;
  double d = 0;
  std::string s;
  template <class A>
  void serialize(A& ar) {
    ar(i, d, s);
  }
};

std::vector<double> make_doubles() {
  std::vector<double> v(1'000'000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * 0.25;
  return v;
}

std::map<std::string, int> make_map() {
  std::mt19937 rng(1);
  std::map<std::string, int> m;
  for (int i = 0; i < 1000; ++i) {
    m.emplace("key_" + std::to_string(rng() % 1'000'000) + "_" + std::to_string(i), i);
  }
  return m;
}

std::vector<Small> make_smalls() {
  std::vector<Small> v(10'000);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = Small{static_cast<int>(i), static_cast<double>(i) * 1.5,
                 "name-" + std::to_string(i * 7919 % 100000)};
  }
  return v;
}

const std::vector<double>& doubles() {
  static const auto v = make_doubles();
  return v;
}
const std::map<std::string, int>& string_map() {
  static const auto m = make_map();
  return m;
}
const std::vector<Small>& smalls() {
  static const auto v = make_smalls();
  return v;
}

// ---------------------------------------------------------------------------
// brisk

template <class T>
void brisk_round_trip(benchmark::State& state, const T& value) {
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::vector<std::byte> buf = brisk::to_bytes(value);
    T out = brisk::from_bytes<T>(buf);
    bytes = buf.size();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
  state.counters["wire_bytes"] = static_cast<double>(bytes);
}

template <class T>
void brisk_encode(benchmark::State& state, const T& value) {
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::vector<std::byte> buf = brisk::to_bytes(value);
    bytes = buf.size();
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}

template <class T>
void brisk_decode(benchmark::State& state, const T& value) {
  const std::vector<std::byte> buf = brisk::to_bytes(value);
  for (auto _ : state) {
    T out = brisk::from_bytes<T>(buf);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(buf.size()));
}

void BM_Brisk_RoundTrip_VectorDouble1M(benchmark::State& s) { brisk_round_trip(s, doubles()); }
void BM_Brisk_RoundTrip_MapString1K(benchmark::State& s) { brisk_round_trip(s, string_map()); }
void BM_Brisk_RoundTrip_SmallStruct10K(benchmark::State& s) { brisk_round_trip(s, smalls()); }
void BM_Brisk_Encode_VectorDouble1M(benchmark::State& s) { brisk_encode(s, doubles()); }
void BM_Brisk_Encode_MapString1K(benchmark::State& s) { brisk_encode(s, string_map()); }
void BM_Brisk_Encode_SmallStruct10K(benchmark::State& s) { brisk_encode(s, smalls()); }
void BM_Brisk_Decode_VectorDouble1M(benchmark::State& s) { brisk_decode(s, doubles()); }
void BM_Brisk_Decode_MapString1K(benchmark::State& s) { brisk_decode(s, string_map()); }
void BM_Brisk_Decode_SmallStruct10K(benchmark::State& s) { brisk_decode(s, smalls()); }

BENCHMARK(BM_Brisk_RoundTrip_VectorDouble1M)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Brisk_RoundTrip_MapString1K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Brisk_RoundTrip_SmallStruct10K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Brisk_Encode_VectorDouble1M)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Brisk_Encode_MapString1K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Brisk_Encode_SmallStruct10K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Brisk_Decode_VectorDouble1M)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Brisk_Decode_MapString1K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Brisk_Decode_SmallStruct10K)->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------
// cereal

#ifdef BRISK_HAVE_CEREAL

template <class T>
std::string cereal_encode_to_string(const T& value) {
  std::ostringstream os(std::ios::binary);
  {
    cereal::BinaryOutputArchive ar(os);
    ar(value);
  }
  return std::move(os).str();
}

template <class T>
void cereal_round_trip(benchmark::State& state, const T& value) {
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::stringstream ss(std::ios::in | std::ios::out | std::ios::binary);
    {
      cereal::BinaryOutputArchive out_ar(ss);
      out_ar(value);
    }
    bytes = static_cast<std::size_t>(ss.tellp());
    T out;
    {
      cereal::BinaryInputArchive in_ar(ss);
      in_ar(out);
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
  state.counters["wire_bytes"] = static_cast<double>(bytes);
}

template <class T>
void cereal_encode(benchmark::State& state, const T& value) {
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::stringstream ss(std::ios::in | std::ios::out | std::ios::binary);
    {
      cereal::BinaryOutputArchive ar(ss);
      ar(value);
    }
    bytes = static_cast<std::size_t>(ss.tellp());
    benchmark::DoNotOptimize(ss);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}

template <class T>
void cereal_decode(benchmark::State& state, const T& value) {
  const std::string encoded = cereal_encode_to_string(value);
  for (auto _ : state) {
    std::stringstream ss(encoded, std::ios::in | std::ios::binary);
    T out;
    {
      cereal::BinaryInputArchive ar(ss);
      ar(out);
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(encoded.size()));
}

void BM_Cereal_RoundTrip_VectorDouble1M(benchmark::State& s) { cereal_round_trip(s, doubles()); }
void BM_Cereal_RoundTrip_MapString1K(benchmark::State& s) { cereal_round_trip(s, string_map()); }
void BM_Cereal_RoundTrip_SmallStruct10K(benchmark::State& s) { cereal_round_trip(s, smalls()); }
void BM_Cereal_Encode_VectorDouble1M(benchmark::State& s) { cereal_encode(s, doubles()); }
void BM_Cereal_Encode_MapString1K(benchmark::State& s) { cereal_encode(s, string_map()); }
void BM_Cereal_Encode_SmallStruct10K(benchmark::State& s) { cereal_encode(s, smalls()); }
void BM_Cereal_Decode_VectorDouble1M(benchmark::State& s) { cereal_decode(s, doubles()); }
void BM_Cereal_Decode_MapString1K(benchmark::State& s) { cereal_decode(s, string_map()); }
void BM_Cereal_Decode_SmallStruct10K(benchmark::State& s) { cereal_decode(s, smalls()); }

BENCHMARK(BM_Cereal_RoundTrip_VectorDouble1M)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cereal_RoundTrip_MapString1K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cereal_RoundTrip_SmallStruct10K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cereal_Encode_VectorDouble1M)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cereal_Encode_MapString1K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cereal_Encode_SmallStruct10K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cereal_Decode_VectorDouble1M)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cereal_Decode_MapString1K)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cereal_Decode_SmallStruct10K)->Unit(benchmark::kMicrosecond);

#endif  // BRISK_HAVE_CEREAL

}  // namespace

BENCHMARK_MAIN();
