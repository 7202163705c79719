// brisk_rl/policy.hpp — features from frames, and a batched two-layer policy network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "brisk_rl/pong.hpp"
#include "brisk_rl/rng.hpp"

namespace brisk_rl {

inline constexpr int kPool = 4;                         // max-pool block side
inline constexpr int kPooledSide = kFrameSide / kPool;  // 21
inline constexpr int kPooledSize = kPooledSide * kPooledSide;
// The frame max-pooled to 21x21 and scaled to [0, 1], then its change since the
// previous frame.
inline constexpr int kFeatures = 2 * kPooledSize;
inline constexpr int kHidden = 64;
// Network outputs per row: kNumActions logits, then the value estimate.
inline constexpr int kOutputs = kNumActions + 1;

// Writes kFeatures floats for `frame` seen after `previous` (pass the same frame
// twice at the start of an episode). Most features are exactly zero.
void extract_features(const Frame& frame, const Frame& previous, float* out);

// Policy
//
// features -> ReLU(kHidden) -> kNumActions logits and a value. The parameters are
// one flat vector laid out as W1[kFeatures][kHidden], b1[kHidden],
// W2[kHidden][kOutputs], b2[kOutputs].
//
// Determinism: the outputs of a row depend only on the parameters and that row:
// not on the batch size, the other rows, or the thread; they are bit-identical on
// one build. Thread safety: const methods may run concurrently.
class Policy {
 public:
  static constexpr std::size_t kParamCount =
      std::size_t{kFeatures} * kHidden + kHidden + kHidden * kOutputs + kOutputs;

  // All parameters zero: a uniform policy.
  Policy() : params_(kParamCount, 0.0f) {}
  // Scaled random initial weights; the logits start near zero (about uniform).
  explicit Policy(std::uint64_t seed);

  // features: batch rows of kFeatures; logits: batch rows of kNumActions;
  // values (optional): batch floats. Rows are independent, so one call may cover
  // environments of any origin. Cost grows with the non-zero features.
  void forward_batch(const float* features, int batch, float* logits, float* values = nullptr) const;

  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }

  template <class Archive> void serialize(Archive& ar) { ar(params_); }

 private:
  std::vector<float> params_;
};

// The same network in plain loops with double accumulation, for tests.
void forward_reference(const Policy& policy, const float* features, int batch, float* logits, float* values);

// Samples an action from softmax(logits); deterministic for the generator's state.
int sample_action(const float* logits, Rng& rng);
// The most likely action (the lowest index on ties).
int greedy_action(const float* logits);

}  // namespace brisk_rl
