#pragma once
// The small per-token operations of a transformer block. They are a few percent of decode time; plain
// loops the compiler vectorises are enough.
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace kvtax {

// out[i] = x[i] / rms(x) * w[i], for n values (out may alias x).
void rmsnorm(const float* x, const float* w, float* out, int n, float eps);

void add_inplace(float* x, const float* y, int64_t n);       // x += y
void silu_mul_inplace(float* gate, const float* up, int64_t n); // gate = silu(gate) * up

// Precomputed rotary angles for one model: per position, cos/sin for rope_dim/2 frequencies.
class Rope {
 public:
  Rope(const ModelConfig& c, const float* freq_factors /* rope_freqs.weight or nullptr */);
  // Rotates n_heads vectors of head_dim values (only the first rope_dim dims) at position pos.
  void apply(float* x, int n_heads, int head_dim, int64_t pos) const;
  // The tables apply() uses, for device copies (src/cuda).
  RopeKind kind() const { return kind_; }
  int dim() const { return dim_; }
  float theta_scale() const { return theta_scale_; }
  float freq_scale() const { return freq_scale_; }
  float mscale() const { return mscale_; }
  const std::vector<float>& factors() const { return factor_; }
  const std::vector<float>& ramp() const { return ramp_; }
 private:
  RopeKind kind_;
  int dim_;
  float theta_scale_;            // theta_i = pos * theta_scale^i
  float freq_scale_ = 1.0f;      // linear / YaRN context scaling
  std::vector<float> factor_;    // per-pair divisor (llama3 rope_freqs.weight), 1 without
  float mscale_ = 1.0f;          // YaRN magnitude correction
  std::vector<float> ramp_;      // YaRN extrapolation mix per pair (empty unless yarn)
};

}  // namespace kvtax
