// brisk_rl/rng.hpp — the small seeded generator every brisk_rl component draws from.
#pragma once

#include <cmath>
#include <cstdint>

namespace brisk_rl {

// Rng
//
// splitmix64 with its whole state in one integer, so that it serializes with the
// state that holds it and a copy continues the same stream. Results depend only on
// the seed and the calls made (bit-identical on every IEEE-754 host).
// Thread safety: none; give each thread or environment its own.
struct Rng {
  std::uint64_t state = 0;

  Rng() = default;
  explicit Rng(std::uint64_t seed) : state(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0.
  int below(int n) { return static_cast<int>(((next() >> 32) * static_cast<std::uint64_t>(n)) >> 32); }
  // Standard normal (Box-Muller, one value per call).
  double normal() {
    const double u1 = (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  template <class Archive> void serialize(Archive& ar) { ar(state); }
};

// A seed derived from two values (for per-environment or per-rollout streams), so
// that seeds 1, 2, 3 do not give overlapping streams.
inline std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  Rng r(a ^ (b * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull));
  r.next();
  return r.next();
}

}  // namespace brisk_rl
