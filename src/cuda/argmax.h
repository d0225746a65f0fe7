#pragma once
// The index of a row's largest value on the device, so that greedy decoding reads one int instead of the vocabulary
// (128k logits are 0.5 MB to copy and, arriving cold in host memory, ~70 us for one host thread to scan).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvtax::cuda {

// Device scratch argmax() needs: its blocks' partial results and their counter, zeroed once (cudaMemset) before the
// first call; each call leaves the counter at zero again.
size_t argmax_scratch_bytes();

// *out = the index of x's largest value, the first of equal ones, as the CPU sampler's argmax picks it; NaNs are
// skipped (0 when every value is NaN). One launch; out is device memory. Calls sharing a scratch run in stream order.
cudaError_t argmax(const float* x, int n, void* scratch, int32_t* out, cudaStream_t s);

}  // namespace kvtax::cuda
