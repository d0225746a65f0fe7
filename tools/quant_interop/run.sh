#!/usr/bin/env bash
# Cross-checks kvtax's block formats against llama.cpp in both directions (quant_interop.cpp does kvtax's side):
#  1. llama-quantize turns a random 1-layer llama GGUF into every legacy and K-quant type; kvtax decodes
#     the tensors and checks the error against the f32 originals, and runs matmul on them (check).
#  2. Bit-level: llama.cpp decodes (requantizes to F32) both its own quantized files and files that kvtax
#     quantized; kvtax's dequantization of the same bytes must agree (compare).
# Needs a release build (it builds build/release/tools/kvtax_quant_interop) and a llama.cpp build.
# Usage: tools/quant_interop/run.sh [llama.cpp bin dir] [llama gguf to take the vocab from]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${1:-$HOME/.cache/kvtax/peers/llama.cpp/build/bin}
VOCAB=${2:-$ROOT/../shared/fixtures/stories260K.gguf}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cmake --build "$ROOT/build/release" --target kvtax_quant_interop > "$WORK/build.log" || { cat "$WORK/build.log"; exit 1; }
QI=$ROOT/build/release/tools/kvtax_quant_interop
quant() { "$BIN/llama-quantize" "$@" > "$WORK/quantize.log" 2>&1 || { cat "$WORK/quantize.log"; exit 1; }; }

"$QI" make-random "$VOCAB" "$WORK/f32.gguf"
files=()
status=0
for t in Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 Q4_1 Q5_0 Q5_1 Q3_K_M Q2_K F16 BF16; do
  quant --pure "$WORK/f32.gguf" "$WORK/$t.gguf" "$t"
  files+=("$WORK/$t.gguf")
  echo "== llama.cpp $t decoded by llama.cpp vs kvtax"
  quant --allow-requantize --pure "$WORK/$t.gguf" "$WORK/$t.back.gguf" F32
  "$QI" compare "$WORK/$t.gguf" "$WORK/$t.back.gguf" || status=1
done
echo "== llama.cpp-quantized tensors decoded by kvtax vs f32 originals; kvtax matmul vs reference"
"$QI" check "$WORK/f32.gguf" "${files[@]}" || status=1
for t in q8_0 q4_0 q4_K q5_K q6_K; do
  echo "== kvtax $t decoded by llama.cpp vs kvtax"
  "$QI" quantize "$WORK/f32.gguf" "$WORK/kv_$t.gguf" "$t"
  quant --allow-requantize --pure "$WORK/kv_$t.gguf" "$WORK/kv_$t.back.gguf" F32
  "$QI" compare "$WORK/kv_$t.gguf" "$WORK/kv_$t.back.gguf" || status=1
done
[ $status = 0 ] && echo "ALL PASSED" || echo "FAILURES"
exit $status
