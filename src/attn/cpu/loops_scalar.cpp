// Scalar loops: decode a row with the codec's reference decoder, then plain float math. They are the
// fallback on CPUs without AVX2 and the baseline the SIMD loops are tested against.
#include <cmath>
#include <cstring>

#include "attn/cpu/loops.h"

namespace kvtax::attn {

namespace scalar {
namespace {

size_t prep_bytes(int d) { return size_t(d) * 4; }
void prep(const float* q, int d, uint8_t* dst) { std::memcpy(dst, q, size_t(d) * 4); }

template <kv::CodecId C, int R>
void dot(const uint8_t* k, size_t stride, int n, int d, const uint8_t* const* q, float* const* s, const Prefetch&) {
  float row[1024];
  for (int t = 0; t < n; ++t) {
    kv::codec(C).decode(k + t * stride, d, row);
    for (int r = 0; r < R; ++r) {
      const float* qr = reinterpret_cast<const float*>(q[r]);
      float a = 0;
      for (int i = 0; i < d; ++i) a += qr[i] * row[i];
      s[r][t] = a;
    }
  }
}

template <kv::CodecId C, int R>
void acc(const uint8_t* v, size_t stride, int n, int d, const float* const* p, float* const* o, const Prefetch&) {
  float row[1024];
  for (int t = 0; t < n; ++t) {
    kv::codec(C).decode(v + t * stride, d, row);
    for (int r = 0; r < R; ++r) {
      const float w = p[r][t];
      for (int i = 0; i < d; ++i) o[r][i] += w * row[i];
    }
  }
}

template <kv::CodecId C>
constexpr KLoops make_k() { return {prep_bytes, prep, {dot<C, 1>, dot<C, 2>, dot<C, 3>, dot<C, 4>}}; }
template <kv::CodecId C>
void decode(const uint8_t* rows, size_t stride, int n, int d, float* out) {
  for (int t = 0; t < n; ++t) kv::codec(C).decode(rows + t * stride, d, out + size_t(t) * d);
}

template <kv::CodecId C>
constexpr VLoops make_v() { return {{acc<C, 1>, acc<C, 2>, acc<C, 3>, acc<C, 4>}, decode<C>}; }

using kv::CodecId;
const KLoops kK[] = {make_k<CodecId::f32>(), make_k<CodecId::f16>(), make_k<CodecId::bf16>(),
                     make_k<CodecId::fp8>(), make_k<CodecId::q8>(),  make_k<CodecId::q4>(),
                     make_k<CodecId::q4r>(), make_k<CodecId::tq4>(), make_k<CodecId::tq3>()};
const VLoops kV[] = {make_v<CodecId::f32>(), make_v<CodecId::f16>(), make_v<CodecId::bf16>(),
                     make_v<CodecId::fp8>(), make_v<CodecId::q8>(),  make_v<CodecId::q4>(),
                     make_v<CodecId::q4r>(), make_v<CodecId::tq4>(), make_v<CodecId::tq3>()};
static_assert(sizeof(kK) / sizeof(kK[0]) == kv::kNumCodecs);

float exp_sum(float* s, int n, float m) {
  float sum = 0;
  for (int t = 0; t < n; ++t) {
    s[t] = std::exp(s[t] - m);
    sum += s[t];
  }
  return sum;
}
void scale(float* x, int n, float c) {
  for (int i = 0; i < n; ++i) x[i] *= c;
}
const MathLoops kMath{exp_sum, scale};

}  // namespace

const KLoops& k(kv::CodecId c) { return kK[int(c)]; }
const VLoops& v(kv::CodecId c) { return kV[int(c)]; }
const MathLoops& math() { return kMath; }
}  // namespace scalar

const KLoops& k_loops(kv::CodecId c, SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512: return avx512::k(c);
    case SimdLevel::avx2: return avx2::k(c);
    default: return scalar::k(c);
  }
}
const VLoops& v_loops(kv::CodecId c, SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512: return avx512::v(c);
    case SimdLevel::avx2: return avx2::v(c);
    default: return scalar::v(c);
  }
}
const MathLoops& math_loops(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512: return avx512::math();
    case SimdLevel::avx2: return avx2::math();
    default: return scalar::math();
  }
}

}  // namespace kvtax::attn
