// Reference quantize/dequantize: dispatch, float formats and the legacy 32-value blocks.
#include "ggml/quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/f16.h"
#include "ggml/blocks.h"
#include "ggml/quants_k.h"

namespace kvtax {
namespace {

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((b[i].qs[j] & 0xF) - 8) * d;
      y[j + kQK / 2] = float((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(b[i].qs[j] & 0xF) * d + m;
      y[j + kQK / 2] = float(b[i].qs[j] >> 4) * d + m;
    }
  }
}

// Fifth bit of value j (0..31) of a Q5 block: bit j of the little-endian 32-bit qh.
inline int q5_high(const uint8_t qh[4], int j) { return ((qh[j / 8] >> (j % 8)) & 1) << 4; }

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(((b[i].qs[j] & 0xF) | q5_high(b[i].qh, j)) - 16) * d;
      y[j + kQK / 2] = float(((b[i].qs[j] >> 4) | q5_high(b[i].qh, j + kQK / 2)) - 16) * d;
    }
  }
}

void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((b[i].qs[j] & 0xF) | q5_high(b[i].qh, j)) * d + m;
      y[j + kQK / 2] = float((b[i].qs[j] >> 4) | q5_high(b[i].qh, j + kQK / 2)) * d + m;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = float(b[i].qs[j]) * d;
  }
}

void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = int8_t(std::lround(x[j] * id));
  }
}

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    // Map the value of largest magnitude to -8 so the asymmetric range -8..7 is fully used.
    float amax = 0, vmax = 0;
    for (int j = 0; j < kQK; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), vmax = x[j];
    const float d = vmax / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    auto q = [&](float v) { return uint8_t(std::clamp(int(std::lround(v * id)) + 8, 0, 15)); };
    for (int j = 0; j < kQK / 2; ++j) b[i].qs[j] = uint8_t(q(x[j]) | (q(x[j + kQK / 2]) << 4));
  }
}

}  // namespace

bool can_dequantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K: case GgmlType::Q8_K:
      return true;
    default:
      return false;
  }
}

bool can_quantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q4_0: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::Q8_K:
      return true;
    default:
      return false;
  }
}

namespace {
int64_t checked_blocks(GgmlType t, int64_t n, const char* what) {
  const auto& tr = ggml_traits(t);
  if (n < 0 || n % tr.block_size != 0)
    fail("{}: {} values is not a multiple of the {} block size {}", what, n, tr.name, tr.block_size);
  return n / tr.block_size;
}
}  // namespace

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  if (!can_dequantize(t)) fail("dequantize_row: unsupported type {}", ggml_type_name(t));
  const int64_t nb = checked_blocks(t, n, "dequantize_row");
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case GgmlType::Q4_0: return dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case GgmlType::Q4_1: return dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case GgmlType::Q5_0: return dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case GgmlType::Q5_1: return dequant_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case GgmlType::Q8_0: return dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case GgmlType::Q2_K: return dequant_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb);
    case GgmlType::Q3_K: return dequant_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb);
    case GgmlType::Q4_K: return dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case GgmlType::Q5_K: return dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
    case GgmlType::Q6_K: return dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    case GgmlType::Q8_K: return dequant_q8_k(static_cast<const BlockQ8_K*>(src), dst, nb);
    default: break;
  }
  fail("dequantize_row: unsupported type {}", ggml_type_name(t));
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  if (!can_quantize(t)) fail("quantize_row: unsupported type {}", ggml_type_name(t));
  const int64_t nb = checked_blocks(t, n, "quantize_row");
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case GgmlType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    case GgmlType::Q8_0: return quant_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case GgmlType::Q4_0: return quant_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case GgmlType::Q4_K: return quant_q4_k(src, static_cast<BlockQ4_K*>(dst), nb);
    case GgmlType::Q5_K: return quant_q5_k(src, static_cast<BlockQ5_K*>(dst), nb);
    case GgmlType::Q6_K: return quant_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
    case GgmlType::Q8_K: return quant_q8_k(src, static_cast<BlockQ8_K*>(dst), nb);
    default: break;
  }
  fail("quantize_row: unsupported type {}", ggml_type_name(t));
}

}  // namespace kvtax
