#include <cstring>

#include "kv/codecs/formats.h"

namespace kvtax::kv {

size_t f32_row_bytes(int d) { return size_t(d) * 4; }
void f32_encode(const float* x, int d, uint8_t* row) { std::memcpy(row, x, size_t(d) * 4); }
void f32_decode(const uint8_t* row, int d, float* y) { std::memcpy(y, row, size_t(d) * 4); }

}  // namespace kvtax::kv
