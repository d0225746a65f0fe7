// AVX-512 kernels: VNNI (vpdpbusd) integer dots on ymm registers, zmm float FMA for f32/f16/bf16.
// GCC 12's own AVX-512 headers trip -Wuninitialized inside _mm512_reduce_add_ps.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVTAX_X86_VNNI 1
#define KVTAX_X86_512 1
#include "ops/cpu/dot_x86.inc"

namespace kvtax::mm {
const Kernels& kernels_avx512() { return kTable; }
}  // namespace kvtax::mm
