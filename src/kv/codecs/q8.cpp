#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/f16.h"
#include "kv/codecs/formats.h"
#include "kv/codecs/layout.h"

namespace kvtax::kv {

size_t q8_row_bytes(int d) { return layout::q8_row_bytes(d); }

void q8_encode(const float* x, int d, uint8_t* row) {
  const int nb = d / kQBlock;
  int8_t* q = reinterpret_cast<int8_t*>(row + 2 * nb);
  for (int b = 0; b < nb; ++b) {
    const float* xb = x + b * kQBlock;
    float amax = 0;
    for (int i = 0; i < kQBlock; ++i)
      if (std::isfinite(xb[i])) amax = std::max(amax, std::fabs(xb[i]));
    // Quantize with the scale as stored (f16-rounded) so decode sees the same grid.
    const uint16_t h = f32_to_f16(std::min(amax / 127.0f, 65504.0f));
    std::memcpy(row + 2 * b, &h, 2);
    const float s = f16_to_f32(h);
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int i = 0; i < kQBlock; ++i) {
      float v = xb[i] * inv;
      v = v == v ? std::clamp(v, -127.0f, 127.0f) : 0.0f;
      q[b * kQBlock + i] = int8_t(std::nearbyint(v));
    }
  }
}

void q8_decode(const uint8_t* row, int d, float* y) {
  for (int u = 0; u < d / layout::kUnit; ++u) {
    const float s = layout::unit_decode<CodecId::q8>(row, d, u, nullptr, y + 8 * u);
    for (int k = 0; k < 8; ++k) y[8 * u + k] *= s;
  }
}

}  // namespace kvtax::kv
