#include <cstring>

#include "core/f16.h"
#include "kv/codecs/formats.h"

namespace kvtax::kv {

size_t f16_row_bytes(int d) { return size_t(d) * 2; }

void f16_encode(const float* x, int d, uint8_t* row) {
  for (int i = 0; i < d; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    std::memcpy(row + 2 * i, &h, 2);
  }
}

void f16_decode(const uint8_t* row, int d, float* y) {
  for (int i = 0; i < d; ++i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    y[i] = f16_to_f32(h);
  }
}

}  // namespace kvtax::kv
