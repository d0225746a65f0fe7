#!/usr/bin/env bash
# Issue 4 item 6d: KV codec quality as the mean KL divergence of next-token distributions from f16 KV,
# teacher-forced over one text, kvtax (every codec, kvtax_kld_bench) beside llama.cpp's own figures for
# q8_0 and q4_0 KV (llama-perplexity --kl-divergence against its f16-KV base), on the same GGUF files:
#   tiny   make-model --arch tiny --layers 4 (d 512, head_dim 64, byte vocabulary): stories260K-sized
#   llama3 make-model --arch llama3-8b --layers 2 (head_dim 128, GQA 4:1)
# Both engines score alike: chunks of CTX tokens from an empty cache, first token set to BOS where the
# vocabulary adds one, positions CTX/2 .. CTX-2 scored; flash attention on for llama.cpp.
# Each result is one JSON line appended to $RESULTS (rerun skips rows already there); table at the end.
#   bench/kld_vs_llama.sh [run|table]
# Knobs: RESULTS (~/.cache/kvtax/kld_vs_llama.jsonl), TEXT (default: ../shared/docs/*.md concatenated),
# CTX ("512 2048"), CHUNKS (8), THREADS (2), MODELS_KLD ("tiny llama3"), KV ("f32 f16 bf16 fp8 q8 q4 q4r tq4 tq3"),
# KVTAX_MODEL_CACHE, KVTAX_PEERS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PART=${1:-run}
PEERS=${KVTAX_PEERS:-$HOME/.cache/kvtax/peers}
MODELS=${KVTAX_MODEL_CACHE:-$HOME/.cache/kvtax/models}
RESULTS=${RESULTS:-$HOME/.cache/kvtax/kld_vs_llama.jsonl}
CTX=${CTX:-512 2048}
CHUNKS=${CHUNKS:-8}
THREADS=${THREADS:-2}
MODELS_KLD=${MODELS_KLD:-tiny llama3}
KV=${KV:-f32 f16 bf16 fp8 q8 q4 q4r tq4 tq3}
KVTAX=$ROOT/build/release/kvtax
BENCH=$ROOT/build/release/bench/kvtax_kld_bench
PPL=$PEERS/llama.cpp/build/bin/llama-perplexity
command -v jq >/dev/null || { echo "kld_vs_llama.sh needs jq" >&2; exit 1; }
mkdir -p "$MODELS" "$(dirname "$RESULTS")"
touch "$RESULTS"
WORK=$HOME/.cache/kvtax/kld
mkdir -p "$WORK"
if [ -z "${TEXT:-}" ]; then
  TEXT=$WORK/shared-docs.txt
  cat "$ROOT"/../shared/docs/*.md >"$TEXT.part" 2>/dev/null || { echo "set TEXT=FILE (../shared/docs is absent)" >&2; exit 1; }
  mv "$TEXT.part" "$TEXT"
fi
TEXT_ID=$(basename "$TEXT")-$(cksum <"$TEXT" | cut -d' ' -f1)

model() {  # tiny|llama3 -> GGUF path (made on first use)
  local arch layers
  case $1 in tiny) arch=tiny layers=4 ;; llama3) arch=llama3-8b layers=2 ;; *) echo "unknown model $1" >&2; exit 1 ;; esac
  local f=$MODELS/$arch-${layers}l-f16-s1.gguf
  if [ ! -f "$f" ]; then
    "$KVTAX" make-model --arch "$arch" --layers "$layers" --type f16 --seed 1 -o "$f.part" >&2
    mv "$f.part" "$f"
  fi
  echo "$f"
}

have() { grep -qF "\"row\":\"$1\"" "$RESULTS"; }
record() { jq -c --arg row "$1" --arg at "$(date -u +%FT%TZ)" '{row: $row, at: $at} + .' <<<"$2" >>"$RESULTS"; }

run_all() {
  [ -x "$BENCH" ] || { echo "build first: cmake --build --preset release" >&2; exit 1; }
  [ -x "$PPL" ] || { echo "llama.cpp is not built: run tools/peers/build_llama.sh" >&2; exit 1; }
  local name m c key kvargs kv out base t
  for name in $MODELS_KLD; do
    m=$(model "$name")
    for c in $CTX; do
      # llama-perplexity prints no statistics below 100 scored positions.
      [ $(((c / 2 - 1) * CHUNKS)) -ge 100 ] || { echo "ctx $c x $CHUNKS chunks scores fewer than 100 positions: raise CHUNKS" >&2; exit 1; }
      key="$name|$TEXT_ID|c$c|k$CHUNKS|t$THREADS"
      if ! have "$key|kvtax"; then
        echo "kvtax $name ctx $c" >&2
        kvargs=()
        for kv in $KV; do kvargs+=(--kv "$kv"); done
        out=$("$BENCH" -m "$m" -f "$TEXT" --ctx "$c" --chunks "$CHUNKS" -t "$THREADS" "${kvargs[@]}" --json)
        record "$key|kvtax" "$out"
      fi
      base=$WORK/$name-$TEXT_ID-c$c-k$CHUNKS.base
      for t in q8_0 q4_0; do
        have "$key|llama|$t" && continue
        if [ ! -f "$base" ]; then
          echo "llama-perplexity $name ctx $c: f16 base" >&2
          "$PPL" -m "$m" -f "$TEXT" -c "$c" -b "$c" --chunks "$CHUNKS" -t "$THREADS" -fa on -ctk f16 -ctv f16 \
            --kl-divergence-base "$base.part" >"$WORK/base.log" 2>&1 || { tail -5 "$WORK/base.log" >&2; exit 1; }
          mv "$base.part" "$base"
        fi
        local mean="" err="" top="" try
        # llama-perplexity's logger sometimes loses the closing statistics at exit (rc 0, output cut after
        # the per-chunk lines): run it again when the figures are missing.
        for try in 1 2 3; do
          echo "llama-perplexity $name ctx $c: $t (try $try)" >&2
          "$PPL" -m "$m" -c "$c" -b "$c" --chunks "$CHUNKS" -t "$THREADS" -fa on -ctk "$t" -ctv "$t" \
            --kl-divergence-base "$base" --kl-divergence --log-file "$WORK/kld.file.log" >"$WORK/kld.log" 2>&1 ||
            { tail -5 "$WORK/kld.log" >&2; exit 1; }
          # The --log-file copy is written synchronously and keeps the closing statistics more often.
          cat "$WORK/kld.file.log" >>"$WORK/kld.log"
          mean=$(awk '/^Mean +KLD:/ { print $3; exit }' "$WORK/kld.log")
          err=$(awk '/^Mean +KLD:/ { print $5; exit }' "$WORK/kld.log")
          top=$(awk '/^Same top p:/ { print $4; exit }' "$WORK/kld.log")
          [ -n "$mean" ] && [ -n "$top" ] && break
        done
        [ -n "$mean" ] && [ -n "$top" ] || { echo "no KLD figures in llama-perplexity's output:" >&2; tail -20 "$WORK/kld.log" >&2; exit 1; }
        record "$key|llama|$t" "{\"engine\": \"llama.cpp\", \"kv\": \"$t\", \"mean_kld\": $mean, \"kld_stderr\": $err, \"same_top\": $(awk -v p="$top" 'BEGIN { print p / 100 }')}"
      done
    done
  done
}

table() {
  echo
  echo "## KLD of next-token distributions vs f16 KV (nats, mean +- standard error; same top = top-1 agrees with f16 KV)"
  echo "## text $TEXT_ID, $CHUNKS chunks per context, positions ctx/2..ctx-2 of each chunk, $THREADS threads"
  local name c key
  for name in $MODELS_KLD; do
    for c in $CTX; do
      key="$name|$TEXT_ID|c$c|k$CHUNKS|t$THREADS"
      jq -rs --arg k "$key" --arg name "$name" --arg c "$c" '
        def r(k): (map(select(.row == k)) | last);
        def g(x): if x == null then "-" elif x == 0 then "0"
                  else ((x | fabs | log10 | floor) as $e | "\(x / pow(10; $e) * 100 | round / 100)e\($e)") end;
        r("\($k)|kvtax") as $kv
        | { "q8": r("\($k)|llama|q8_0"), "q4": r("\($k)|llama|q4_0"), "q4r": r("\($k)|llama|q4_0") } as $peer
        | "\n### \($name), ctx \($c)" + (if $kv then " (\($kv.chunks) chunks, \($kv.rows[0].positions) positions)" else "" end),
          "| kvtax KV | mean KLD | +- | max KLD | same top | llama.cpp KV | mean KLD | +- | same top |",
          "|---|---|---|---|---|---|---|---|---|",
          (($kv.rows // [])[] as $x
           | ($peer[$x.kv]) as $l
           | "| \($x.kv) | \(g($x.mean_kld)) | \(g($x.kld_stderr)) | \(g($x.max_kld)) | \($x.same_top * 10000 | round / 100)% | \(if $l then $l.kv else "-" end) | \(g($l.mean_kld)) | \(g($l.kld_stderr)) | \(if $l then "\($l.same_top * 10000 | round / 100)%" else "-" end) |")
      ' "$RESULTS"
    done
  done
}

case $PART in
  run) run_all ;;
  table) ;;
  *) echo "usage: $0 [run|table]" >&2; exit 2 ;;
esac
echo "# results: $RESULTS"
table
