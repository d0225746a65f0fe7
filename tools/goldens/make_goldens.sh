#!/usr/bin/env bash
# Regenerates tests/data/goldens/*.bin: llama.cpp's logits on the same GGUF bytes kvtax reads.
# Needs llama.cpp and the dumper (tools/peers/build_llama.sh) and a release build of kvtax.
# The random-weight models are rebuilt bit for bit by the tests from (arch, layers, type, seed).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PEERS=${KVTAX_PEERS:-$HOME/.cache/kvtax/peers}
KVTAX=$ROOT/build/release/kvtax
DUMP=$PEERS/llama_logits
QUANT=$PEERS/llama.cpp/build/bin/llama-quantize
SHARED=$ROOT/../shared
OUT=$ROOT/tests/data/goldens
MODELS=${KVTAX_MODELS:-$HOME/.cache/kvtax/models}
mkdir -p "$OUT" "$MODELS"
[ -x "$DUMP" ] || { echo "build the peer first: tools/peers/build_llama.sh" >&2; exit 1; }

# stories260K: greedy 200 tokens after BOS + "Once upon a time"; f32 KV for the 1e-4 logit check, f16 KV for tokens.
"$DUMP" "$SHARED/fixtures/stories260K.gguf" "$OUT/stories260k_f32kv.bin" --prompt "Once upon a time" --greedy 200 \
  --ctk f32 --ctv f32
"$DUMP" "$SHARED/fixtures/stories260K.gguf" "$OUT/stories260k_f16kv.bin" --prompt "Once upon a time" --greedy 200 \
  --top 8

# 256 teacher-forced positions over random token ids (seeded, stored in the golden file).
tokens() { awk -v n="$1" -v v="$2" 'BEGIN { srand(7); printf "%d", 1; for (i = 1; i < n; i++) printf " %d", int(rand() * v); }'; }
for arch in llama3-8b qwen3-4b; do
  for type in f16 q8_0 q4_0 q4_K q6_K; do
    m=$MODELS/$arch-2l-$type-s1.gguf
    [ -f "$m" ] || "$KVTAX" make-model --arch "$arch" --layers 2 --type "$type" --seed 1 -o "$m"
    vocab=$("$KVTAX" inspect "$m" --json | grep -o '"n_vocab": *[0-9]*' | head -1 | grep -o '[0-9]*$')
    "$DUMP" "$m" "$OUT/$arch-2l-$type.bin" --tokens "$(tokens 256 "$vocab")" --top 32
  done
  # llama-quantize's own output from our f16 file: the same check on bytes made by the peer's quantizer.
  for type in Q4_0 Q4_K Q6_K; do
    q=$MODELS/$arch-2l-llamaquant-$type.gguf
    [ -f "$q" ] || "$QUANT" "$MODELS/$arch-2l-f16-s1.gguf" "$q" "$type" >/dev/null 2>&1
    "$DUMP" "$q" "$OUT/$arch-2l-llamaquant-$type.bin" --tokens "$(tokens 256 "$vocab")" --top 32
  done
  # q8_0 K and V with flash attention (issue: KV parity).
  "$DUMP" "$MODELS/$arch-2l-f16-s1.gguf" "$OUT/$arch-2l-f16-kvq8.bin" --tokens "$(tokens 256 "$vocab")" --top 32 \
    --ctk q8_0 --ctv q8_0 --fa
done
ls -la "$OUT"
