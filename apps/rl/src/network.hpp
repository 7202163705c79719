// Private: one row of the policy network forwards and backwards, shared by the
// batched forward and the learner, so both compute bit-identical outputs.
#pragma once

#include <algorithm>

#include "brisk_rl/policy.hpp"

namespace brisk_rl::detail {

inline constexpr std::size_t kB1 = std::size_t{kFeatures} * kHidden;
inline constexpr std::size_t kW2 = kB1 + kHidden;
inline constexpr std::size_t kB2 = kW2 + std::size_t{kHidden} * kOutputs;

// Fills hidden (post-ReLU, kHidden) and out (kOutputs). Zero features are skipped:
// the inputs are mostly background. The loops over kHidden are vectorised.
inline void forward_row(const float* __restrict p, const float* __restrict x, float* __restrict hidden,
                        float* __restrict out) {
  std::copy_n(p + kB1, kHidden, hidden);
  for (int i = 0; i < kFeatures; ++i) {
    const float v = x[i];
    if (v == 0.0f) continue;
    const float* __restrict w = p + std::size_t(i) * kHidden;
    for (int j = 0; j < kHidden; ++j) hidden[j] += v * w[j];
  }
  for (int j = 0; j < kHidden; ++j) hidden[j] = std::max(hidden[j], 0.0f);
  std::copy_n(p + kB2, kOutputs, out);
  for (int j = 0; j < kHidden; ++j) {
    for (int k = 0; k < kOutputs; ++k) out[k] += hidden[j] * p[kW2 + j * kOutputs + k];
  }
}

// Adds to grad the gradient of the loss for a row whose output gradient is d_out.
inline void backward_row(const float* __restrict p, const float* __restrict x, const float* __restrict hidden,
                         const float* __restrict d_out, float* __restrict grad) {
  float d_hidden[kHidden];
  for (int j = 0; j < kHidden; ++j) {
    float d = 0;
    for (int k = 0; k < kOutputs; ++k) {
      grad[kW2 + j * kOutputs + k] += hidden[j] * d_out[k];
      d += p[kW2 + j * kOutputs + k] * d_out[k];
    }
    d_hidden[j] = hidden[j] > 0 ? d : 0.0f;
  }
  for (int k = 0; k < kOutputs; ++k) grad[kB2 + k] += d_out[k];
  for (int j = 0; j < kHidden; ++j) grad[kB1 + j] += d_hidden[j];
  for (int i = 0; i < kFeatures; ++i) {
    const float v = x[i];
    if (v == 0.0f) continue;
    float* __restrict g = grad + std::size_t(i) * kHidden;
    for (int j = 0; j < kHidden; ++j) g[j] += v * d_hidden[j];
  }
}

}  // namespace brisk_rl::detail
