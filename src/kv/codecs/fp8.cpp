// fp8 e4m3 ("fn" variant: no infinities, max 448) with one f32 scale per (token, head) row:
// scale = max|x| / 448, so the row's largest value uses the top of the e4m3 range.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kv/codecs/formats.h"
#include "kv/codecs/layout.h"

namespace kvtax::kv {

uint8_t f32_to_e4m3(float x) {
  if (!(x == x)) return 0;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::min(std::fabs(x), 448.0f);
  if (a < 0.015625f) {  // below the smallest normal 2^-6: subnormal steps of 2^-9 (8 rounds up to 2^-6)
    const int m = int(std::nearbyint(a * 512.0f));
    return uint8_t(sign | m);
  }
  int e;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int m = int(std::nearbyint((f * 2.0f - 1.0f) * 8.0f));
  int be = e - 1 + 7;
  if (m == 8) { m = 0; ++be; }
  if (be > 15 || (be == 15 && m > 6)) { be = 15; m = 6; }  // 448
  return uint8_t(sign | (be << 3) | m);
}

float e4m3_to_f32(uint8_t b) { return layout::e4m3_to_f32(b); }

size_t fp8_row_bytes(int d) { return layout::fp8_row_bytes(d); }

void fp8_encode(const float* x, int d, uint8_t* row) {
  float amax = 0;
  for (int i = 0; i < d; ++i)
    if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 448.0f;
  std::memcpy(row, &scale, 4);
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  for (int i = 0; i < d; ++i) row[4 + i] = f32_to_e4m3(x[i] * inv);
}

void fp8_decode(const uint8_t* row, int d, float* y) {
  float scale;
  std::memcpy(&scale, row, 4);
  for (int i = 0; i < d; ++i) y[i] = scale * layout::e4m3_to_f32(row[4 + i]);
}

}  // namespace kvtax::kv
