#!/usr/bin/env bash
# Builds the release preset and runs every test. Used by the README and by .ci/run.
# Where nvcc exists (CUDA 12.8+), the same build also compiles the CUDA backend and its tests, which
# skip at run time without a GPU; KVTAX_CUDA=OFF in the environment turns that off.
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [ -n "$nvcc" ] && [ "${KVTAX_CUDA:-}" != OFF ]; then
  cuda_args=(-DKVTAX_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")
else
  cuda_args=(-DKVTAX_CUDA=OFF)
fi
cmake --preset release "${cuda_args[@]}"
cmake --build --preset release -j"$(nproc)"
ctest --preset release
