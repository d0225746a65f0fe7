// AVX2 + FMA + F16C kernels (maddubs/madd integer dots).
#include "ops/cpu/dot_x86.inc"

namespace kvtax::mm {
const Kernels& kernels_avx2() { return kTable; }
}  // namespace kvtax::mm
