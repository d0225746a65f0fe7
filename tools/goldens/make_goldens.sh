#!/usr/bin/env bash
# Regenerates tests/data/goldens/*.bin: llama.cpp's logits on the same GGUF bytes kvtax reads.
#
#   tools/goldens/make_goldens.sh [GLOB]     only the goldens whose file name matches GLOB (default: all)
#
# Needs llama.cpp and the dumper (tools/peers/build_llama.sh) and a kvtax binary (KVTAX, default the release
# build). The random-weight models are made once into KVTAX_MODELS (default ~/.cache/kvtax/models, the names the
# parity test looks for under KVTAX_MODEL_CACHE); the tests rebuild the kvtax-made ones bit for bit from
# (arch, layers, type, seed). The llama-quantize-made ones cannot be rebuilt in CI: their tests skip without them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PEERS=${KVTAX_PEERS:-$HOME/.cache/kvtax/peers}
KVTAX=${KVTAX:-$ROOT/build/release/kvtax}
DUMP=$PEERS/llama_logits
DUMP_SSE=$PEERS/llama_logits_sse  # llama.cpp's SSE4.2 build: its own build-to-build spread (goldens/llama-sse/)
QUANT=$PEERS/llama.cpp/build/bin/llama-quantize
SHARED=$ROOT/../shared
OUT=$ROOT/tests/data/goldens
MODELS=${KVTAX_MODELS:-$HOME/.cache/kvtax/models}
ONLY=${1:-*}
mkdir -p "$OUT/llama-sse" "$MODELS"
[ -x "$DUMP" ] && [ -x "$DUMP_SSE" ] || { echo "build the peer first: tools/peers/build_llama.sh" >&2; exit 1; }
[ -x "$KVTAX" ] || { echo "no kvtax binary at $KVTAX (build it or set KVTAX)" >&2; exit 1; }

wanted() { [[ $1 == $ONLY ]]; }

# A llama3-8b random-model golden from both llama.cpp builds (its qwen3-4b ones agree at every position anyway).
dump_both() {  # model golden dumper-args...
  local m=$1 g=$2
  shift 2
  "$DUMP" "$m" "$OUT/$g" "$@"
  if [[ $g == llama3-* ]]; then "$DUMP_SSE" "$m" "$OUT/llama-sse/$g" "$@"; fi
}

# Makes a random-weight model unless it is already cached (written to a temporary name first, so an
# interrupted run never leaves a truncated model behind).
model() {  # arch type -> path
  local m=$MODELS/$1-2l-$2-s1.gguf
  if [ ! -f "$m" ]; then
    "$KVTAX" make-model --arch "$1" --layers 2 --type "$2" --seed 1 -o "$m.part" >/dev/null
    mv "$m.part" "$m"
  fi
  echo "$m"
}

# stories260K: greedy 200 tokens after BOS + "Once upon a time"; f32 KV for the 1e-4 logit check, f16 KV for tokens.
if wanted stories260k_f32kv.bin; then
  "$DUMP" "$SHARED/fixtures/stories260K.gguf" "$OUT/stories260k_f32kv.bin" --prompt "Once upon a time" --greedy 200 \
    --ctk f32 --ctv f32
fi
if wanted stories260k_f16kv.bin; then
  "$DUMP" "$SHARED/fixtures/stories260K.gguf" "$OUT/stories260k_f16kv.bin" --prompt "Once upon a time" --greedy 200 \
    --top 8
fi

# 256 teacher-forced positions over random token ids (seeded; the golden file stores them, so the awk flavour
# only matters when regenerating).
tokens() { awk -v n="$1" -v v="$2" 'BEGIN { srand(7); printf "%d", 1; for (i = 1; i < n; i++) printf " %d", int(rand() * v); }'; }
for arch in llama3-8b qwen3-4b; do
  case $arch in
    llama3-8b) vocab=128256 ;;
    qwen3-4b) vocab=151936 ;;
  esac
  # Weight types with f32 KV on both sides: the matmul path alone (llama.cpp rounds q and the attention weights
  # to f16 with an f16 cache, which alone moves its own top-1 at 10 of these 256 positions).
  for type in f16 q8_0 q4_0 q4_K q6_K; do
    g=$arch-2l-$type.bin
    wanted "$g" || continue
    m=$(model "$arch" "$type")
    dump_both "$m" "$g" --tokens "$(tokens 256 $vocab)" --top 32 --ctk f32 --ctv f32
  done
  # llama-quantize's own output from our f16 file: the same check on bytes made by the peer's quantizer.
  for type in Q4_0 Q4_K Q6_K; do
    g=$arch-2l-llamaquant-$type.bin
    wanted "$g" || continue
    q=$MODELS/$arch-2l-llamaquant-$type.gguf
    if [ ! -f "$q" ]; then
      "$QUANT" "$(model "$arch" f16)" "$q.part" "$type" >/dev/null 2>&1
      mv "$q.part" "$q"
    fi
    dump_both "$q" "$g" --tokens "$(tokens 256 $vocab)" --top 32 --ctk f32 --ctv f32
  done
  # q8_0 K and V with flash attention (KV parity) on the f16 model.
  g=$arch-2l-f16-kvq8.bin
  if wanted "$g"; then
    dump_both "$(model "$arch" f16)" "$g" --tokens "$(tokens 256 $vocab)" --top 32 --ctk q8_0 --ctv q8_0 --fa
  fi
done
ls -la "$OUT" "$OUT/llama-sse"
