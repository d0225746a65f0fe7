#include "ops/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

namespace kvtax {

void rmsnorm(const float* x, const float* w, float* out, int n, float eps) {
  // llama.cpp's rounding steps: float squares summed in double, a float mean, 1 / sqrtf in float.
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i] * x[i]);
  const float mean = float(ss / n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void silu_mul_inplace(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

namespace {
// The dimension pair index at which a rotation completes n_rot turns over the original context (YaRN).
float yarn_corr_dim(int n_dims, uint32_t n_ctx_orig, float n_rot, float base) {
  return n_dims * std::log(n_ctx_orig / (n_rot * 2 * float(M_PI))) / (2 * std::log(base));
}
}  // namespace

Rope::Rope(const ModelConfig& c, const float* freq_factors)
    : kind_(c.rope_kind), dim_(int(c.rope_dim ? c.rope_dim : c.head_dim)) {
  const int half = dim_ / 2;
  const auto& s = c.rope_scaling;
  freq_scale_ = (s.type == "linear" || s.type == "yarn") && s.factor > 0 ? 1.0f / s.factor : 1.0f;
  theta_scale_ = powf(c.rope_theta, -2.0f / float(dim_));
  factor_.assign(size_t(half), 1.0f);
  if (freq_factors) std::copy(freq_factors, freq_factors + half, factor_.begin());
  if (s.type == "yarn" && freq_scale_ < 1.0f) {
    const uint32_t orig = s.original_context ? s.original_context : c.context_length;
    const float lo = std::max(0.0f, std::floor(yarn_corr_dim(dim_, orig, 32.0f, c.rope_theta)));
    const float hi = std::min(float(dim_ - 1), std::ceil(yarn_corr_dim(dim_, orig, 1.0f, c.rope_theta)));
    ramp_.resize(half);
    for (int i = 0; i < half; ++i) {
      const float y = (i - lo) / std::max(0.001f, hi - lo);
      ramp_[i] = 1.0f - std::min(1.0f, std::max(0.0f, y));
    }
    mscale_ = 1.0f + 0.1f * std::log(1.0f / freq_scale_);
  }
}

void Rope::apply(float* x, int n_heads, int head_dim, int64_t pos) const {
  const int half = dim_ / 2;
  float cs[512], sn[512];  // dim_ <= 1024 is checked by the model loader
  // The angles in llama.cpp's order of float operations (pos times theta_scale, once per pair, divided by the
  // pair's factor, then scaled): the same angles to the bit, so logits can be compared closely.
  float theta = float(pos);
  for (int i = 0; i < half; ++i, theta *= theta_scale_) {
    const float extrap = theta / factor_[i];
    float th = freq_scale_ * extrap;
    if (!ramp_.empty()) th = th * (1 - ramp_[i]) + extrap * ramp_[i];
    cs[i] = std::cos(th) * mscale_;
    sn[i] = std::sin(th) * mscale_;
  }
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      // normal: adjacent pairs (2i, 2i+1); neox: halves (i, i + dim/2)
      const int a = kind_ == RopeKind::normal ? 2 * i : i;
      const int b = kind_ == RopeKind::normal ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cs[i] - x1 * sn[i];
      v[b] = x0 * sn[i] + x1 * cs[i];
    }
  }
}

}  // namespace kvtax
