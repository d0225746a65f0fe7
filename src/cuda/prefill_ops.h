#pragma once
// Elementwise steps of the batched prefill that work on 16-bit activations (the GEMMs' operand type), so the
// [n, d_ff] intermediates cross device memory in 2 bytes instead of 4 and once instead of three times.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvtax::cuda::detail {

// gu: [rows][2 ff] 16-bit (gate in columns 0..ff-1, up in ff..2ff-1); out: [rows][ff] 16-bit,
// silu(gate) * up computed in f32 as the CPU does and rounded once. bf16 picks bf16, else f16. ff % 8 == 0.
cudaError_t silu_mul_half(const void* gu, int64_t rows, int ff, bool bf16, void* out, cudaStream_t s);

}  // namespace kvtax::cuda::detail
