#include "brisk_rl/policy.hpp"

#include <algorithm>
#include <cmath>

#include "network.hpp"

namespace brisk_rl {
namespace {

void max_pool(const Frame& frame, std::uint8_t* pooled) {
  for (int block_row = 0; block_row < kPooledSide; ++block_row) {
    const std::uint8_t* r = frame.data() + block_row * kPool * kFrameSide;
    std::uint8_t column[kFrameSide];
    for (int c = 0; c < kFrameSide; ++c) {
      column[c] =
          std::max(std::max(r[c], r[c + kFrameSide]), std::max(r[c + 2 * kFrameSide], r[c + 3 * kFrameSide]));
    }
    for (int c = 0; c < kPooledSide; ++c) {
      const std::uint8_t* b = column + c * kPool;
      pooled[block_row * kPooledSide + c] = std::max(std::max(b[0], b[1]), std::max(b[2], b[3]));
    }
  }
}

}  // namespace

void extract_features(const Frame& frame, const Frame& previous, float* out) {
  std::uint8_t now[kPooledSize], before[kPooledSize];
  max_pool(frame, now);
  max_pool(previous, before);
  constexpr float kScale = 1.0f / 255.0f;
  for (int i = 0; i < kPooledSize; ++i) {
    out[i] = now[i] * kScale;
    out[kPooledSize + i] = (now[i] - before[i]) * kScale;
  }
}

Policy::Policy(std::uint64_t seed) : params_(kParamCount, 0.0f) {
  Rng rng(mix_seed(seed, 0x9011c1));
  for (std::size_t i = 0; i < detail::kB1; ++i) params_[i] = 0.1f * static_cast<float>(rng.normal());
  for (std::size_t i = detail::kW2; i < detail::kB2; ++i) {
    params_[i] = 0.01f * static_cast<float>(rng.normal());
  }
}

void Policy::forward_batch(const float* features, int batch, float* logits, float* values) const {
  float hidden[kHidden], out[kOutputs];
  for (int b = 0; b < batch; ++b) {
    detail::forward_row(params_.data(), features + std::size_t(b) * kFeatures, hidden, out);
    std::copy_n(out, kNumActions, logits + std::size_t(b) * kNumActions);
    if (values) values[b] = out[kNumActions];
  }
}

void forward_reference(const Policy& policy, const float* features, int batch, float* logits, float* values) {
  const std::vector<float>& p = policy.params();
  for (int b = 0; b < batch; ++b) {
    const float* x = features + std::size_t(b) * kFeatures;
    double hidden[kHidden];
    for (int j = 0; j < kHidden; ++j) {
      double sum = p[detail::kB1 + j];
      for (int i = 0; i < kFeatures; ++i) sum += double{x[i]} * p[std::size_t(i) * kHidden + j];
      hidden[j] = std::max(sum, 0.0);
    }
    for (int k = 0; k < kOutputs; ++k) {
      double sum = p[detail::kB2 + k];
      for (int j = 0; j < kHidden; ++j) sum += hidden[j] * p[detail::kW2 + j * kOutputs + k];
      if (k < kNumActions) {
        logits[b * kNumActions + k] = static_cast<float>(sum);
      } else if (values) {
        values[b] = static_cast<float>(sum);
      }
    }
  }
}

int sample_action(const float* logits, Rng& rng) {
  const float top = *std::max_element(logits, logits + kNumActions);
  double weights[kNumActions], total = 0;
  for (int a = 0; a < kNumActions; ++a) total += weights[a] = std::exp(double{logits[a]} - top);
  double u = rng.uniform() * total;
  for (int a = 0; a < kNumActions - 1; ++a) {
    if ((u -= weights[a]) < 0) return a;
  }
  return kNumActions - 1;
}

int greedy_action(const float* logits) {
  return static_cast<int>(std::max_element(logits, logits + kNumActions) - logits);
}

}  // namespace brisk_rl
