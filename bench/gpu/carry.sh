#!/usr/bin/env bash
# CUDA binaries built here, for the GPU machine, whose image lacks some of their shared libraries and the fixtures.
#   bench/gpu/carry.sh pack BUILD_DIR   (here) writes .gpucarry/gpubin.tar.xz: the stripped test and bench binaries
#                                       and kvtax, the libraries they link from outside libc, libstdc++, zlib and the
#                                       CUDA toolkit, and the llama3 vocabulary (~10 MB; a device call carries 64 MiB)
#   bash bench/gpu/carry.sh unpack      (there) unpacks it into /tmp/gpubin; then
#   KVTAX_GPU_BIN=/tmp/gpubin KVTAX_GPU_VOCAB=/tmp/gpubin/ggml-vocab-llama-bpe.gguf bash bench/gpu/run.sh
# runs as it would with a build there. Name .gpucarry in the device call's carry list (it is git-ignored).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
case "${1:-}" in
  pack)
    build=$(cd "${2:?usage: carry.sh pack BUILD_DIR}" && pwd)
    vocab=${KVTAX_GPU_VOCAB:-$root/../shared/fixtures/vocab/ggml-vocab-llama-bpe.gguf}
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    bins=("$build/tests/kvtax_cuda_tests" "$build/bench/kvtax_gpu_bench" "$build/bench/kvtax_gpu_decode_bench"
          "$build/bench/kvtax_gpu_prefill_bench" "$build/bench/kvtax_gpu_generate_bench"
          "$build/bench/kvtax_gpu_link_bench" "$build/bench/kvtax_gpu_queue_bench" "$build/bench/kvtax_gpu_phase_bench"
          "$build/kvtax")
    cp "${bins[@]}" "$stage/"
    strip "$stage"/kvtax*
    ldd "${bins[@]}" | awk '/=> \//{print $3}' | sort -u |
      grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libz)\.so|/cuda' |
      while read -r lib; do cp -L "$lib" "$stage/"; done
    cp "$vocab" "$stage/"
    mkdir -p "$root/.gpucarry"
    tar -C "$stage" -cJf "$root/.gpucarry/gpubin.tar.xz" .
    ls -l "$root/.gpucarry/gpubin.tar.xz" "$stage"
    ;;
  unpack)
    rm -rf /tmp/gpubin && mkdir -p /tmp/gpubin
    tar -C /tmp/gpubin -xJf "$root/.gpucarry/gpubin.tar.xz"
    ;;
  *)
    echo "usage: carry.sh pack BUILD_DIR | unpack" >&2
    exit 2
    ;;
esac
