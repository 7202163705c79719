// tests/fuzz/data_tasks.hpp — the data types and data tasks that the data fuzzer and
// the seed generator both register, so that the seeds' type and function ids name
// something the fuzzer knows (ids are hashes of the names).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "brisk/core/data.hpp"

namespace brisk_fuzz {

struct Log {
  std::vector<int> values;
  std::string note;
  template <class A>
  void serialize(A& ar) {
    ar(values, note);
  }
};
using Big = std::vector<double>;

inline const brisk::detail::DataTypeOps* log_type() { return brisk::detail::DataTypeRegistration<Log>::ops; }
inline const brisk::detail::DataTypeOps* big_type() { return brisk::detail::DataTypeRegistration<Big>::ops; }

// log(0) += args (+ the block's parameter), wrapping (the values are the fuzzer's).
inline void fz_append(brisk::DataTask& t) {
  const unsigned param = t.params_bytes().empty() ? 0u : static_cast<unsigned>(t.params<int>());
  t.write<Log>(0).values.push_back(static_cast<int>(static_cast<unsigned>(t.args<int>()) + param));
}
// log(0) = log(1) (declared: writes 0, reads 1).
inline void fz_copy(brisk::DataTask& t) { t.write<Log>(0) = t.read<Log>(1); }
// big(0) = args doubles of 1.5, at most 4096 (a user's allocation is not the fuzzer's concern).
inline void fz_fill(brisk::DataTask& t) {
  t.write<Big>(0).assign(static_cast<std::size_t>(std::clamp(t.args<int>(), 0, 4096)), 1.5);
}

}  // namespace brisk_fuzz

namespace {
using brisk_fuzz::fz_append;
using brisk_fuzz::fz_copy;
using brisk_fuzz::fz_fill;
BRISK_DATA_TASK(fz_append);
BRISK_DATA_TASK(fz_copy);
BRISK_DATA_TASK(fz_fill);
}  // namespace
