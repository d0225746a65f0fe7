#!/usr/bin/env bash
# One call on the GPU machine: build the CUDA tests and benchmark (or take prebuilt ones from
# $KVTAX_GPU_BIN), check every kernel against the CPU reference, time them, time torch's SDPA at the
# same shape, and print the tables. Results go to the folder given as $1 (default $OUT, else
# bench/gpu/out): nvidia_smi.txt, tests.txt, bench.txt, kernels.jsonl, torch.txt, torch.jsonl.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-$here/out}}
mkdir -p "$out"

bin=${KVTAX_GPU_BIN:-}
if [ -z "$bin" ]; then
  root=$(cd "$here/../.." && pwd)
  cmake -S "$root" -B "$root/build/cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTAX_CUDA=ON
  cmake --build "$root/build/cuda" -j"$(nproc)" --target kvtax_cuda_tests kvtax_gpu_bench
  mkdir -p "$root/build/cuda/gpu-bin"
  cp "$root/build/cuda/tests/kvtax_cuda_tests" "$root/build/cuda/bench/kvtax_gpu_bench" "$root/build/cuda/gpu-bin/"
  bin=$root/build/cuda/gpu-bin
fi
bin=$(cd "$bin" && pwd)

# cuBLAS: the toolkit's, else the one PyTorch ships as a wheel.
extra=$(python3 -c 'import nvidia.cublas as m; print(list(m.__path__)[0] + "/lib")' 2>/dev/null || true)
export LD_LIBRARY_PATH="$bin:/usr/local/cuda/lib64:${extra}:${LD_LIBRARY_PATH:-}"
bench=$bin/kvtax_gpu_bench
if ldd "$bench" | grep -q "not found"; then
  ldd "$bench" | grep "not found"
  # A build without the cuBLAS reference rows, where one was carried along.
  if [ -x "$bin/kvtax_gpu_bench_nocublas" ]; then bench=$bin/kvtax_gpu_bench_nocublas; else bench=""; fi
fi

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv | tee "$out/nvidia_smi.txt"
echo "== correctness (CUDA kernels vs CPU/float64 references)"
"$bin/kvtax_cuda_tests" 2>&1 | tee "$out/tests.txt" | grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED) |FAILED|Failure|error" || true
grep -q "^\[  FAILED  \]" "$out/tests.txt" && echo "CUDA TESTS FAILED"
echo "== kernels"
if [ -n "$bench" ]; then
"$bench" --json "$out/kernels.jsonl" 2>"$out/bench_progress.txt" | tee "$out/bench.txt"
fi
copy=$(grep -o 'copy: [0-9]*' "$out/bench.txt" 2>/dev/null | grep -o '[0-9]*' || echo 0)
echo "== attention with a 2-wave grid"
[ -n "$bench" ] && "$bench" --no-gemv --codecs f16,fp8,q4r,tq3 --depths 32768,131072 --waves 2 2>>"$out/bench_progress.txt" \
  | tee "$out/bench_waves2.txt"
echo "== torch baselines (bf16 K/V)"
PYTHONUNBUFFERED=1 python3 "$here/sdpa.py" --copy-gbs "$copy" --json "$out/torch.jsonl" 2>&1 | tee "$out/torch.txt"
