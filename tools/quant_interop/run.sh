#!/usr/bin/env bash
# Cross-checks kvtax's block formats against llama.cpp: builds a random 1-layer llama GGUF, has
# llama.cpp's llama-quantize convert it to every legacy and K-quant type, and decodes the results
# with kvtax (tools/quant_interop/check.cpp). Needs a release build and a llama.cpp build.
# Usage: tools/quant_interop/run.sh [llama.cpp bin dir] [llama gguf to take the vocab from]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${1:-$HOME/.cache/kvtax/peers/llama.cpp/build/bin}
VOCAB=${2:-$ROOT/../shared/fixtures/stories260K.gguf}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
HERE="$ROOT/tools/quant_interop"
python3 "$HERE/make_random_gguf.py" "$VOCAB" "$WORK/f32.gguf"
python3 "$HERE/dump_tensors.py" "$WORK/f32.gguf" "$WORK/f32" > /dev/null
dirs=()
for t in Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0 Q4_1 Q5_0 Q5_1 Q3_K_M Q2_K F16 BF16; do
  "$BIN/llama-quantize" --pure "$WORK/f32.gguf" "$WORK/$t.gguf" "$t" > "$WORK/$t.log" 2>&1
  python3 "$HERE/dump_tensors.py" "$WORK/$t.gguf" "$WORK/$t" > /dev/null
  dirs+=("$WORK/$t")
done
c++ -std=c++20 -O2 -I"$ROOT/src" "$HERE/check.cpp" "$ROOT/build/release/libkvtax_lib.a" -lfmt -lpthread -o "$WORK/check"
"$WORK/check" "$WORK/f32" "${dirs[@]}"
