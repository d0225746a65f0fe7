#!/usr/bin/env bash
# Decode attention alone (one query row, head_dim 128), kvtax vs llama.cpp's ggml_flash_attn_ext, same
# threads, same shapes and depths; prints a ratio table (llama.cpp ms / kvtax ms, >1 = kvtax faster) and
# each kvtax codec's fraction of the bound max(KV bytes / read bandwidth, arithmetic / SIMD peak).
#   bench/attn_vs_llama.sh [THREADS] [DEPTHS] [SHAPES]
# Needs the release build (build/release) and llama.cpp built by tools/peers/build_llama.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEERS=${KVTAX_PEERS:-$HOME/.cache/kvtax/peers}
T=${1:-2}
DEPTHS=${2:-4096,16384,32768,65536}
SHAPES=${3:-32/8,32/32}
B=$PEERS/llama.cpp/build
[ -d "$B/ggml/src" ] || { echo "llama.cpp is not built: run tools/peers/build_llama.sh" >&2; exit 1; }
PEER=$PEERS/ggml_attn
if [ ! -x "$PEER" ] || [ "$ROOT/bench/peers/ggml_attn.cpp" -nt "$PEER" ] || [ "$ROOT/bench/bench_util.h" -nt "$PEER" ]; then
  LIBS=$(find "$B/ggml/src" -name '*.a' | sort -r | tr '\n' ' ')
  g++ -O2 -std=c++17 -I "$PEERS/llama.cpp/ggml/include" "$ROOT/bench/peers/ggml_attn.cpp" \
    -Wl,--start-group $LIBS -Wl,--end-group -fopenmp -lpthread -ldl -o "$PEER"
fi
OUT=$(mktemp -d)
"$ROOT/build/release/bench/kvtax_attn_bench" --threads "$T" --depths "$DEPTHS" --shapes "$SHAPES" | tee "$OUT/kvtax.txt"
"$PEER" --threads "$T" --depths "$DEPTHS" --shapes "$SHAPES" | tee "$OUT/llama.txt"
echo
echo "# ratio = llama.cpp ms / kvtax ms at the same shape and depth (kvtax codec vs llama.cpp type: f16/f16, q8/q8_0, q4/q4_0)"
awk '
  FNR == 1 { file++ }
  file == 1 && /^# (cpu|bound)/ { print }
  file == 1 && $1 ~ /\// { k[$1 " " $2 " " $3] = $4; frac[$1 " " $2 " " $3] = $8; fb[$1 " " $2 " " $3] = $11 }
  file == 2 && $1 ~ /\// { t = $2; sub(/_0$/, "", t); l[$1 " " t " " $3] = $4 }
  END {
    printf "%-6s %-6s %7s %10s %10s %8s %8s %9s\n", "shape", "codec", "depth", "kvtax ms", "llama ms", "ratio", "of bw", "of bound"
    for (key in k) {
      split(key, f, " ")
      lm = (key in l) ? sprintf("%10.3f", l[key]) : sprintf("%10s", "-")
      r = (key in l) ? sprintf("%7.2fx", l[key] / k[key]) : sprintf("%8s", "-")
      printf "%-6s %-6s %7d %10.3f %s %s %8s %9s\n", f[1], f[2], f[3], k[key], lm, r, frac[key], fb[key] | "sort -k1,1 -k2,2 -k3,3n"
    }
  }' "$OUT/kvtax.txt" "$OUT/llama.txt"
rm -rf "$OUT"
