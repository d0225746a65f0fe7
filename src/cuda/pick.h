#pragma once
// The next token picked on the device from a row of logits (TokenPick), so that the host reads one int instead of the
// vocabulary (128k logits are 0.5 MB to copy and, arriving cold in host memory, 76-102 us for a host thread to scan).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvtax::cuda {

// Device scratch the picks need: their blocks' partial results and a counter, zeroed once (cudaMemset) before the
// first call; each call leaves the counter at zero again. Calls sharing a scratch run in stream order.
size_t pick_scratch_bytes();

// *out = the index of x's largest value, the first of equal ones, as the CPU sampler's argmax picks it; NaNs are
// skipped (-1, the sampler's kNoPick, when every value is NaN). One launch; out is device memory.
cudaError_t argmax(const float* x, int n, void* scratch, int32_t* out, cudaStream_t s);

// *out = a draw from softmax(x * inv_t) (inv_t > 0) at u in [0, 1): the first index whose running sum of weights, in
// index order, passes u times their total, as the CPU sampler draws with no cut (the last index with weight if
// rounding leaves the sum short of it; -1, kNoPick, when the weights have no positive finite total: a NaN logit, or
// all -inf).
// One launch; out is device memory.
cudaError_t draw(const float* x, int n, float inv_t, double u, void* scratch, int32_t* out, cudaStream_t s);

}  // namespace kvtax::cuda
