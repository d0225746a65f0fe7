// The one table of KV codecs. Adding a codec: a formats.h entry, its .cpp, a row here, and its inner
// loops in attn/cpu/codec_loops_*.h.
#include <cmath>

#include "core/error.h"
#include "kv/codecs/codec.h"
#include "kv/codecs/formats.h"
#include "kv/rotation.h"

namespace kvtax::kv {

namespace {
const CodecInfo kTable[kNumCodecs] = {
    {CodecId::f32, "f32", "f32 values (32 bits)", false, 1, f32_row_bytes, f32_encode, f32_decode},
    {CodecId::f16, "f16", "IEEE half values (16 bits)", false, 1, f16_row_bytes, f16_encode, f16_decode},
    {CodecId::bf16, "bf16", "bfloat16 values (16 bits)", false, 1, bf16_row_bytes, bf16_encode, bf16_decode},
    {CodecId::fp8, "fp8", "e4m3 + f32 scale per (token, head) (8 + 32/d bits)", false, 1, fp8_row_bytes,
     fp8_encode, fp8_decode},
    {CodecId::q8, "q8", "int8 in 32-value blocks + f16 scale (8.5 bits)", false, 32, q8_row_bytes, q8_encode,
     q8_decode},
    {CodecId::q4, "q4", "int4 in 32-value blocks + f16 scale (4.5 bits)", false, 32, q4_row_bytes, q4_encode,
     q4_decode},
    {CodecId::q4r, "q4r", "q4 after a randomized Hadamard rotation (4.5 bits)", true, 32, q4_row_bytes,
     q4_encode, q4_decode},
    {CodecId::tq4, "tq4", "rotation + 4-bit Lloyd-Max codes + f32 gain (4 + 32/d bits)", true, 2, tq4_row_bytes,
     tq4_encode, tq4_decode},
    {CodecId::tq3, "tq3", "rotation + 3-bit Lloyd-Max codes + f32 gain (3 + 32/d bits)", true, 8, tq3_row_bytes,
     tq3_encode, tq3_decode},
};
}  // namespace

const CodecInfo& codec(CodecId id) { return kTable[int(id)]; }

const CodecInfo* find_codec(std::string_view name) {
  for (const auto& c : kTable)
    if (name == c.name) return &c;
  return nullptr;
}

double bits_per_value(const CodecInfo& c, int d) { return double(c.row_bytes(d)) * 8.0 / d; }

void check_head_dim(const CodecInfo& c, int d) {
  if (d <= 0 || d > 1024) fail("KV codec {}: head_dim {} out of range 1..1024", c.name, d);
  if (d % c.group != 0) fail("KV codec {} needs head_dim to be a multiple of {}, got {}", c.name, c.group, d);
  if (c.rotated && !is_pow2(d)) fail("KV codec {} rotates head vectors and needs a power-of-two head_dim, got {}", c.name, d);
}

}  // namespace kvtax::kv
