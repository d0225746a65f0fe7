#!/usr/bin/env bash
# Cross-checks kvtax's block formats against llama.cpp in both directions:
#  1. llama-quantize turns a random 1-layer llama GGUF into every legacy and K-quant type; kvtax
#     decodes the tensors and checks the error against the f32 originals, and runs matmul on them
#     (check.cpp).
#  2. Bit-level: llama.cpp decodes (requantizes to F32) both its own quantized files and files that
#     kvtax quantized; kvtax's dequantization of the same bytes must agree (exact.cpp).
# Needs a release build of kvtax and a llama.cpp build.
# Usage: tools/quant_interop/run.sh [llama.cpp bin dir] [llama gguf to take the vocab from]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${1:-$HOME/.cache/kvtax/peers/llama.cpp/build/bin}
VOCAB=${2:-$ROOT/../shared/fixtures/stories260K.gguf}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
HERE="$ROOT/tools/quant_interop"
LIB="$ROOT/build/release/libkvtax_lib.a"
c++ -std=c++20 -O2 -I"$ROOT/src" "$HERE/check.cpp" "$LIB" -lfmt -lpthread -o "$WORK/check"
c++ -std=c++20 -O2 -I"$ROOT/src" "$HERE/exact.cpp" "$LIB" -lfmt -lpthread -o "$WORK/exact"
quant() { "$BIN/llama-quantize" "$@" > "$WORK/quantize.log" 2>&1 || { cat "$WORK/quantize.log"; exit 1; }; }

python3 "$HERE/make_random_gguf.py" "$VOCAB" "$WORK/f32.gguf"
python3 "$HERE/dump_tensors.py" "$WORK/f32.gguf" "$WORK/f32" > /dev/null
dirs=()
status=0
for t in Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 Q4_1 Q5_0 Q5_1 Q3_K_M Q2_K F16 BF16; do
  quant --pure "$WORK/f32.gguf" "$WORK/$t.gguf" "$t"
  python3 "$HERE/dump_tensors.py" "$WORK/$t.gguf" "$WORK/$t" > /dev/null
  dirs+=("$WORK/$t")
  echo "== llama.cpp $t decoded by llama.cpp vs kvtax"
  quant --allow-requantize --pure "$WORK/$t.gguf" "$WORK/$t.back.gguf" F32
  "$WORK/exact" compare "$WORK/$t.gguf" "$WORK/$t.back.gguf" || status=1
done
echo "== llama.cpp-quantized tensors decoded by kvtax vs f32 originals; kvtax matmul vs reference"
"$WORK/check" "$WORK/f32" "${dirs[@]}" || status=1
for t in q8_0 q4_0 q4_K q5_K q6_K; do
  echo "== kvtax $t decoded by llama.cpp vs kvtax"
  "$WORK/exact" quantize "$WORK/f32.gguf" "$WORK/kv_$t.gguf" "$t"
  quant --allow-requantize --pure "$WORK/kv_$t.gguf" "$WORK/kv_$t.back.gguf" F32
  "$WORK/exact" compare "$WORK/kv_$t.gguf" "$WORK/kv_$t.back.gguf" || status=1
done
[ $status = 0 ] && echo "ALL PASSED" || echo "FAILURES"
exit $status
