// Symmetric 4-bit blocks: the block's value of largest magnitude maps exactly to code 0 (-8 * scale),
// which gives one more level on that side than a +-7 grid.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/f16.h"
#include "kv/codecs/formats.h"
#include "kv/codecs/layout.h"

namespace kvtax::kv {

size_t q4_row_bytes(int d) { return layout::q4_row_bytes(d); }

void q4_encode(const float* x, int d, uint8_t* row) {
  const int nb = d / kQBlock;
  uint8_t* q = row + 2 * nb;
  for (int b = 0; b < nb; ++b) {
    const float* xb = x + b * kQBlock;
    float amax = 0, vmax = 0;
    for (int i = 0; i < kQBlock; ++i)
      if (std::isfinite(xb[i]) && std::fabs(xb[i]) > amax) { amax = std::fabs(xb[i]); vmax = xb[i]; }
    const float s0 = std::clamp(vmax / -8.0f, -65504.0f, 65504.0f);
    const uint16_t h = f32_to_f16(s0);
    std::memcpy(row + 2 * b, &h, 2);
    const float s = f16_to_f32(h);
    const float inv = s != 0 ? 1.0f / s : 0.0f;
    auto code = [&](float v) {
      v = v * inv;
      v = v == v ? std::clamp(v, -8.0f, 7.0f) : 0.0f;
      return uint8_t(int(std::nearbyint(v)) + 8);
    };
    for (int j = 0; j < kQBlock / 2; ++j)
      q[b * 16 + j] = uint8_t(code(xb[j]) | (code(xb[j + 16]) << 4));
  }
}

void q4_decode(const uint8_t* row, int d, float* y) {
  for (int u = 0; u < d / layout::kUnit; ++u) {
    const float s = layout::unit_decode<CodecId::q4>(row, d, u, nullptr, y + 8 * u);
    for (int k = 0; k < 8; ++k) y[8 * u + k] *= s;
  }
}

}  // namespace kvtax::kv
