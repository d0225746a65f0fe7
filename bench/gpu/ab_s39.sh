#!/usr/bin/env bash
# Session 39's A/B call on the GPU machine (carry .gpucarry): SwiGLU codes out of gate|up (KVTAX_SWIGLU_CODES, one
# binary) and fp8's split kernel at 3 blocks per SM (variant f3: Cfg::kMinBlocks 3 for fp8's GQA form, measured slower
# and not kept; docs/perf.md, session 39), Q4_K llama3-8b shape, rounds alternated.
# Here: bash bench/gpu/carry.sh pack build/release; bash bench/gpu/variants.sh build/release f3=BRANCH -- \
#   kvtax_cuda_tests kvtax_gpu_bench kvtax_gpu_decode_bench
# There: bash bench/gpu/ab_s39.sh (AB_BUDGET seconds, default 500, bounds the rounds).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/ab}; mkdir -p "$out"
t0=$(date +%s); budget=${AB_BUDGET:-500}
left() { echo $(( budget - ($(date +%s) - t0) )); }
bash "$root/bench/gpu/carry.sh" unpack
mkdir -p /tmp/var && tar -C /tmp/var -xJf "$root/.gpucarry/var.tar.xz"
B=/tmp/gpubin F=/tmp/var/f3
export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
echo "== tests (main+swc) $(left) s left"
"$B/kvtax_cuda_tests" > "$out/tests.txt" 2>&1; tail -3 "$out/tests.txt"; grep -E "FAILED|Failure" "$out/tests.txt" | head
echo "== tests (f3: attention, model)"
"$F/kvtax_cuda_tests" --gtest_filter='CudaAttention*:CudaModel*:CudaFused*' > "$out/tests_f3.txt" 2>&1
tail -2 "$out/tests_f3.txt"; grep -E "FAILED|Failure" "$out/tests_f3.txt" | head
m=/tmp/q4k.gguf
"$B/kvtax" make-model --arch llama3-8b --layers 32 --type q4_K --vocab "$B/ggml-vocab-llama-bpe.gguf" -o "$m" > /dev/null
echo "== model made, $(left) s left"
step() {  # label binary-dir codecs [env]
  local label=$1 dir=$2 codecs=$3; shift 3
  env "$@" "$dir/kvtax_gpu_decode_bench" -m "$m" --label "$label" --codecs "$codecs" --depths 32768,131072 \
    --steps 32 --json "$out/steps.jsonl" 2>&1 | grep -E "^$label "
}
alone() {  # label binary-dir
  "$2/kvtax_gpu_bench" --no-gemv --codecs fp8,f16 --depths 32768,131072 2>&1 | grep -E "^attention" | sed "s/^/$1 /"
}
for r in 1 2 3; do
  [ "$(left)" -gt 150 ] || break
  echo "== round $r, $(left) s left"
  step main "$B" f16,fp8,q4r KVTAX_SWIGLU_CODES=0
  step swc "$B" f16,fp8,q4r KVTAX_SWIGLU_CODES=1
  step f3 "$F" fp8 KVTAX_SWIGLU_CODES=1
  alone main "$B"
  alone f3 "$F"
done
echo "== done, $(left) s left"
