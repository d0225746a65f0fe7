#pragma once
// The two inner loops attention needs from each KV codec, per SIMD level, as function tables.
// The attention driver (attention.cpp) is written once against these tables; the loops read the
// codec's rows in place (no decoded copy of the cache is ever made).
#include <cstddef>
#include <cstdint>

#include "core/cpu.h"
#include "kv/codecs/codec.h"

namespace kvtax::attn {

constexpr int kMaxRows = 4;  // query rows handled per pass over a run of K/V rows

// Bytes the caller reads next (the V rows of this tile, the K rows of the next one). The SIMD loops
// stream them into the cache a few lines per step, so DRAM latency overlaps the arithmetic instead of
// stalling the first touch of each row; scalar loops ignore it.
struct Prefetch {
  const uint8_t* p = nullptr;
  size_t bytes = 0;
};

// K side: the query is first prepared into the codec's dot format (f32 for float codecs, int8 blocks
// with f32 scales for q8/q4), then dot[R-1] computes s[r][t] = q_r . K_t for R rows at once, so each
// K row is read once for R query heads.
struct KLoops {
  size_t (*prep_bytes)(int d);
  void (*prep)(const float* q, int d, uint8_t* dst);
  void (*dot[kMaxRows])(const uint8_t* k, size_t stride, int n, int d, const uint8_t* const* q, float* const* s,
                        const Prefetch& pf);
};

// V side: o[r][0..d) += sum_t p[r][t] * V_t for R rows at once. decode writes n rows of the codec (K or V
// rows: the formats are the same) as f32 [n][d], in the codec's stored (possibly rotated) space: prefill
// decodes each tile once and runs the f32 loops over it for all its query rows.
struct VLoops {
  void (*acc[kMaxRows])(const uint8_t* v, size_t stride, int n, int d, const float* const* p, float* const* o,
                        const Prefetch& pf);
  void (*decode)(const uint8_t* rows, size_t stride, int n, int d, float* out);
};

// Softmax helpers: exp_sum sets s[t] = exp(s[t] - m) and returns the sum; scale multiplies x by c.
struct MathLoops {
  float (*exp_sum)(float* s, int n, float m);
  void (*scale)(float* x, int n, float c);
};

const KLoops& k_loops(kv::CodecId c, SimdLevel level);
const VLoops& v_loops(kv::CodecId c, SimdLevel level);
const MathLoops& math_loops(SimdLevel level);

// Per-level tables (defined in loops_scalar.cpp, loops_avx2.cpp, loops_avx512.cpp).
namespace scalar { const KLoops& k(kv::CodecId); const VLoops& v(kv::CodecId); const MathLoops& math(); }
namespace avx2 { const KLoops& k(kv::CodecId); const VLoops& v(kv::CodecId); const MathLoops& math(); }
namespace avx512 { const KLoops& k(kv::CodecId); const VLoops& v(kv::CodecId); const MathLoops& math(); }

}  // namespace kvtax::attn
