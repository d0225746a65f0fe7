#pragma once
// The stand-alone GPU benches (link_bench, queue_bench, phase_bench: no kvtax_cuda library, whose cuda::check
// throws): a failed CUDA call ends the program with the bench's name and the call's message.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace kvtax_bench {

inline void cuda_check(cudaError_t e, const char* bench, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", bench, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace kvtax_bench
