// The 256-bit loops compiled for AVX-512 machines (VNNI int8 dots, EVEX encodings, 32 vector registers).
#include "attn/cpu/codec_loops_x86.h"

namespace kvtax::attn::avx512 {
const KLoops& k(kv::CodecId c) { return kK[int(c)]; }
const VLoops& v(kv::CodecId c) { return kV[int(c)]; }
const MathLoops& math() { return kMath; }
}  // namespace kvtax::attn::avx512
