#pragma once
// Run-time CPU feature detection: kernels pick AVX-512, AVX2 or scalar once, from this.
#include <string>

namespace kvtax {

struct CpuFeatures {
  bool avx2 = false;      // with FMA and F16C
  bool avx512 = false;    // F, BW, VL, DQ
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  int physical_cores = 1;
  int logical_cores = 1;
};

// Detected once; KVTAX_SIMD=scalar|avx2|avx512 in the environment caps the level (for tests and benches).
const CpuFeatures& cpu();
enum class SimdLevel { scalar, avx2, avx512 };
SimdLevel simd_level();
const char* simd_name(SimdLevel);
std::string cpu_model_name();

}  // namespace kvtax
