#!/usr/bin/env bash
# One call on the GPU machine: build the CUDA tests and benchmarks (or take prebuilt ones from
# $KVTAX_GPU_BIN), check every kernel and the whole model against the CPU reference, then
#   part a: decode attention and GEMV alone (kvtax_gpu_bench) and torch's SDPA at the same shape;
#   part b: the whole decode step of a 32-layer llama3-8b-shaped model generated here with
#           `kvtax make-model` (BF16 and Q4_K weights) at 2k-128k KV depth per codec, vs the roofline
#           (kvtax_gpu_decode_bench), each row followed by the step's time per kernel class;
#   part c: prefill TTFT of a 32k prompt on the same models per codec through the batched prefill, vs the
#           FLOP floor (kvtax_gpu_prefill_bench).
# Results go to the folder given as $1 (default $OUT, else bench/gpu/out): nvidia_smi.txt, tests.txt,
# bench.txt, kernels.jsonl, torch.txt, torch.jsonl, decode_step.txt, decode_step.jsonl, prefill.txt,
# prefill.jsonl, and targets.txt: every target of the CUDA issue, met or missed (bench/gpu/targets.py).
# KVTAX_GPU_PARTS="a b c" (default) picks the parts; KVTAX_GPU_VOCAB is the llama3 vocabulary GGUF for
# make-model (default: the shared fixtures); KVTAX_GPU_LAYERS (default 32) and KVTAX_GPU_DEPTHS the size of b,
# KVTAX_GPU_CODECS (default: all nine) the KV codecs of b, KVTAX_GPU_BENCH_ARGS extra flags for part a's
# kvtax_gpu_bench (e.g. --no-attention), KVTAX_GPU_TEST_FILTER picks tests; KVTAX_GPU_PREFILL_LENGTH (default
# 32768) and KVTAX_GPU_PREFILL_CODECS (default all) those of c.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-$here/out}}
mkdir -p "$out"

bin=${KVTAX_GPU_BIN:-}
if [ -z "$bin" ]; then
  root=$(cd "$here/../.." && pwd)
  cmake -S "$root" -B "$root/build/cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTAX_CUDA=ON
  cmake --build "$root/build/cuda" -j"$(nproc)" --target kvtax_cuda_tests kvtax_gpu_bench kvtax_gpu_decode_bench \
    kvtax_gpu_prefill_bench kvtax
  mkdir -p "$root/build/cuda/gpu-bin"
  cp "$root/build/cuda/tests/kvtax_cuda_tests" "$root/build/cuda/bench/kvtax_gpu_bench" \
     "$root/build/cuda/bench/kvtax_gpu_decode_bench" \
     "$root/build/cuda/bench/kvtax_gpu_prefill_bench" "$root/build/cuda/kvtax" "$root/build/cuda/gpu-bin/"
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
"$bin/kvtax_cuda_tests" --gtest_filter="${KVTAX_GPU_TEST_FILTER:-*}" 2>&1 | tee "$out/tests.txt" | grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED) |FAILED|Failure|error|cuda-model" || true
grep -q "^\[  FAILED  \]" "$out/tests.txt" && echo "CUDA TESTS FAILED"
part_a() {
  echo "== part a: kernels"
  if [ -n "$bench" ]; then
    # shellcheck disable=SC2086  # KVTAX_GPU_BENCH_ARGS: extra flags, e.g. --no-attention
    "$bench" --json "$out/kernels.jsonl" ${KVTAX_GPU_BENCH_ARGS:-} 2>"$out/bench_progress.txt" | tee "$out/bench.txt" || echo "kernel bench FAILED"
  fi
  copy=$(grep -o 'copy: [0-9]*' "$out/bench.txt" 2>/dev/null | grep -o '[0-9]*' || echo 0)
  if [ "${KVTAX_GPU_TORCH:-1}" != 0 ]; then
    echo "== torch baselines (bf16 K/V)"
    PYTHONUNBUFFERED=1 python3 "$here/sdpa.py" --copy-gbs "$copy" --json "$out/torch.jsonl" 2>&1 | tee "$out/torch.txt" ||
      echo "torch baseline FAILED"
  fi
}

# The llama3-8b-shaped model of one weight type, made once per run (parts b and c share it).
tmp=${TMPDIR:-/tmp}/kvtax-gpu-models
model_for() {
  local type=$1 m t0 vocab=()
  m=$tmp/llama3-8b-$type.gguf
  [ -n "${KVTAX_GPU_VOCAB:-}" ] && vocab=(--vocab "$KVTAX_GPU_VOCAB")
  if [ ! -f "$m" ]; then
    mkdir -p "$tmp"
    t0=$(date +%s)
    timeout "${KVTAX_GPU_MAKE_TIMEOUT:-300}" "$bin/kvtax" make-model --arch llama3-8b --layers "${KVTAX_GPU_LAYERS:-32}" \
      --type "$type" "${vocab[@]}" -o "$m" > "$out/make_model_$type.txt" 2>&1 || { cat "$out/make_model_$type.txt" >&2; rm -f "$m"; return 1; }
    echo "make-model $type: $(( $(date +%s) - t0 )) s, $(du -h "$m" | cut -f1)" >&2
  fi
  echo "$m"
}

part_b() {
  echo "== part b: whole decode step, llama3-8b shape"
  local type m
  for type in ${KVTAX_GPU_TYPES:-bf16 q4_K}; do
    m=$(model_for "$type") || continue
    "$bin/kvtax_gpu_decode_bench" -m "$m" --label "$type" --json "$out/decode_step.jsonl" \
      --parts --codecs "${KVTAX_GPU_CODECS:-f32,f16,bf16,fp8,q8,q4,q4r,tq4,tq3}" --depths "${KVTAX_GPU_DEPTHS:-2048,8192,32768,131072}" 2>&1 | tee -a "$out/decode_step.txt" ||
      echo "decode bench FAILED ($type)"
  done
}

part_c() {
  echo "== part c: prefill TTFT, llama3-8b shape"
  local type m
  for type in ${KVTAX_GPU_TYPES:-bf16 q4_K}; do
    m=$(model_for "$type") || continue
    "$bin/kvtax_gpu_prefill_bench" -m "$m" --label "$type" --json "$out/prefill.jsonl" \
      --length "${KVTAX_GPU_PREFILL_LENGTH:-32768}" --codecs "${KVTAX_GPU_PREFILL_CODECS:-f32,f16,bf16,fp8,q8,q4,q4r,tq4,tq3}" \
      2>&1 | tee -a "$out/prefill.txt" || echo "prefill bench FAILED ($type)"
  done
}

for part in ${KVTAX_GPU_PARTS:-a b c}; do "part_$part"; done
rm -rf "$tmp"
echo "== the issue's targets (bench/gpu/targets.py)"
python3 "$here/targets.py" "$out" | tee "$out/targets.txt" || echo "targets summary FAILED"
