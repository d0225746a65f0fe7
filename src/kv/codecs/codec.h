#pragma once
// The KV codec unit. A codec stores one (token, head) vector of head_dim values as a fixed-size row
// of bytes. Attention never decodes a whole cache: it calls the codec's two inner loops on a run of
// rows (scores += q.K, out += p.V), at the SIMD level picked at run time.
//
// Rotated codecs (q4r, tq4, tq3) work on vectors already rotated by rotation.h's randomized Hadamard
// transform. The cache rotates K and V on write; attention rotates q (q.K is preserved because the
// rotation is orthonormal) and un-rotates the attention output, which lives in V's rotated space.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvtax::kv {

enum class CodecId : uint8_t { f32, f16, bf16, fp8, q8, q4, q4r, tq4, tq3, count };
constexpr int kNumCodecs = int(CodecId::count);

using EncodeFn = void (*)(const float* x, int d, uint8_t* row);
using DecodeFn = void (*)(const uint8_t* row, int d, float* y);

struct CodecInfo {
  CodecId id;
  const char* name;
  const char* description;  // storage format and exact bits, for docs and `kvtax plan`
  bool rotated;             // rows hold rotated vectors
  int group;                // head_dim must be a multiple of this
  size_t (*row_bytes)(int d);
  EncodeFn encode;          // x: d floats (already rotated when `rotated`)
  DecodeFn decode;          // y: d floats in the codec's (possibly rotated) space
};

const CodecInfo& codec(CodecId id);
const CodecInfo* find_codec(std::string_view name);  // nullptr if unknown
// Bits per value of one stored row, counting scales and norms.
double bits_per_value(const CodecInfo& c, int d);
// Throws kvtax::Error when head_dim d cannot be stored by c.
void check_head_dim(const CodecInfo& c, int d);

}  // namespace kvtax::kv
