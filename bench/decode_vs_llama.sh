#!/usr/bin/env bash
# Whole-model decode and prefill, kvtax vs llama.cpp, on the same llama3-8b-shaped GGUF files (random
# weights from `kvtax make-model`, quantized by llama-quantize so both engines read identical bytes),
# same thread count:
#   (a) issue 3 item 7: prefill tok/s of a 512-token prompt (llama.cpp: llama-bench -p 512) and decode
#       tok/s at depth 0 (llama.cpp: llama-bench -n 32, and the peer) and depth 4096 (the peer), f16 KV,
#       F16 / Q8_0 / Q4_K weights, 4 layers, plus the fraction of the measured read bandwidth decode reaches
#       ((weight + KV bytes per token) / time / bandwidth of a plain read loop, from kvtax_decode_bench).
#   (b) issue 4 item 6b/6c: decode tok/s at depth 32768, Q4_K weights, 8 layers, kvtax KV f16/q8/q4r/q4
#       vs llama.cpp f16/q8_0/q4_0, and kvtax's peak RSS - (weights read + KV bytes) per codec.
# Decode at depth never prefills D tokens: kvtax tiles a 64-token prefill's K/V rows (engine/kv_fill.h);
# the peer (bench/peers/llama_decode.cpp) tiles a 256-token prefill's llama_state_seq_get_data state.
# Q4_K is llama-quantize's "Q4_K" (= Q4_K_M: Q4_K with Q6_K for output and some attn_v/ffn_down).
#
# Each measurement is one JSON line appended to $RESULTS as soon as it finishes; a rerun skips rows already
# there (the key holds part, layers, weights, engine, mode, depth, KV type, threads), so an interrupted run
# resumes where it stopped. Tables are printed from $RESULTS at the end.
#   bench/decode_vs_llama.sh [a|b|all|table]
# Knobs (environment): RESULTS (default ~/.cache/kvtax/decode_vs_llama.jsonl), THREADS (2), N (32 decode
# steps), PREFILL (512), LAYERS_A (4), WEIGHTS_A ("F16 Q8_0 Q4_K"), DEPTHS_A ("0 4096"), LAYERS_B (8),
# DEPTH_B (32768), KV_B ("f16 q8 q4r q4"), LLAMA_KV_B ("f16 q8_0 q4_0"), REPS (3, prefill and llama-bench),
# KVTAX_MODEL_CACHE (~/.cache/kvtax/models), KVTAX_PEERS (~/.cache/kvtax/peers).
# Needs the release build (build/release) and llama.cpp built by tools/peers/build_llama.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PART=${1:-all}
PEERS=${KVTAX_PEERS:-$HOME/.cache/kvtax/peers}
MODELS=${KVTAX_MODEL_CACHE:-$HOME/.cache/kvtax/models}
RESULTS=${RESULTS:-$HOME/.cache/kvtax/decode_vs_llama.jsonl}
THREADS=${THREADS:-2}
N=${N:-32}
PREFILL=${PREFILL:-512}
REPS=${REPS:-3}
LAYERS_A=${LAYERS_A:-4}
WEIGHTS_A=${WEIGHTS_A:-F16 Q8_0 Q4_K}
DEPTHS_A=${DEPTHS_A:-0 4096}
LAYERS_B=${LAYERS_B:-8}
DEPTH_B=${DEPTH_B:-32768}
KV_B=${KV_B:-f16 q8 q4r q4}
LLAMA_KV_B=${LLAMA_KV_B:-f16 q8_0 q4_0}
KVTAX=$ROOT/build/release/kvtax
BENCH=$ROOT/build/release/bench/kvtax_decode_bench
B=$PEERS/llama.cpp/build
QUANT=$B/bin/llama-quantize
LLAMA_BENCH=$B/bin/llama-bench
PEER=$PEERS/llama_decode
command -v jq >/dev/null || { echo "decode_vs_llama.sh needs jq" >&2; exit 1; }
mkdir -p "$MODELS" "$(dirname "$RESULTS")"
touch "$RESULTS"

need_tools() {
  [ -x "$KVTAX" ] && [ -x "$BENCH" ] || { echo "build first: cmake --build --preset release" >&2; exit 1; }
  [ -x "$QUANT" ] && [ -x "$LLAMA_BENCH" ] && [ -d "$B/src" ] || { echo "llama.cpp is not built: run tools/peers/build_llama.sh" >&2; exit 1; }
  if [ ! -x "$PEER" ] || [ "$ROOT/bench/peers/llama_decode.cpp" -nt "$PEER" ] || [ "$ROOT/bench/bench_util.h" -nt "$PEER" ]; then
    echo "building $PEER" >&2
    LIBS=$(find "$B/src" "$B/ggml/src" -name '*.a' | sort -r | tr '\n' ' ')
    g++ -O2 -std=c++17 -I "$PEERS/llama.cpp/include" -I "$PEERS/llama.cpp/ggml/include" \
      "$ROOT/bench/peers/llama_decode.cpp" -Wl,--start-group $LIBS -Wl,--end-group -fopenmp -lpthread -ldl -o "$PEER.part"
    mv "$PEER.part" "$PEER"
  fi
}

# model LAYERS WEIGHTS -> path of the GGUF (made on first use; F16 by make-model, the rest by llama-quantize).
model() {
  local f16=$MODELS/llama3-8b-$1l-f16-s1.gguf
  if [ ! -f "$f16" ]; then
    echo "making $f16" >&2
    "$KVTAX" make-model --arch llama3-8b --layers "$1" --type f16 --seed 1 -o "$f16.part" >&2
    mv "$f16.part" "$f16"
  fi
  if [ "$2" = F16 ]; then echo "$f16"; return; fi
  local q=$MODELS/llama3-8b-$1l-llamaquant-$2.gguf
  if [ ! -f "$q" ]; then
    echo "llama-quantize $f16 -> $2" >&2
    "$QUANT" "$f16" "$q.part" "$2" >/dev/null 2>&1 || { echo "llama-quantize failed for $q" >&2; exit 1; }
    mv "$q.part" "$q"
  fi
  echo "$q"
}

have() { grep -qF "\"row\":\"$1\"" "$RESULTS"; }
# record KEY JSON: appends the JSON object with its key (and the time) as one line.
record() {
  jq -c --arg row "$1" --arg at "$(date -u +%FT%TZ)" '{row: $row, at: $at} + .' <<<"$2" >>"$RESULTS"
  echo "  $1: $(jq -r '"\(.tok_s | . * 100 | round / 100) tok/s"' <<<"$2")" >&2
}

run_kvtax() {  # KEY ARGS...
  local key=$1; shift
  have "$key" && return 0
  local out
  out=$("$BENCH" --json -t "$THREADS" "$@") || { echo "kvtax_decode_bench failed: $*" >&2; exit 1; }
  record "$key" "$out"
}

run_peer() {  # KEY ARGS...
  local key=$1; shift
  have "$key" && return 0
  local out
  out=$("$PEER" -t "$THREADS" "$@") || { echo "llama_decode failed: $*" >&2; exit 1; }
  record "$key" "$out"
}

run_llama_bench() {  # KEY_PREFIX MODEL: pp$PREFILL and tg$N at depth 0, f16 KV, flash attention on
  local key=$1 m=$2
  have "$key/prefill" && have "$key/decode" && return 0
  local out
  out=$("$LLAMA_BENCH" -m "$m" -p "$PREFILL" -n "$N" -d 0 -t "$THREADS" -fa on -r "$REPS" -o jsonl 2>/dev/null) ||
    { echo "llama-bench failed on $m" >&2; exit 1; }
  have "$key/prefill" || record "$key/prefill" "$(jq -c "select(.n_prompt == $PREFILL and .n_gen == 0) | {engine: \"llama-bench\", mode: \"prefill\", tok_s: .avg_ts, stddev_tok_s: .stddev_ts}" <<<"$out")"
  have "$key/decode" || record "$key/decode" "$(jq -c "select(.n_gen == $N and .n_prompt == 0) | {engine: \"llama-bench\", mode: \"decode\", depth: 0, tok_s: .avg_ts, stddev_tok_s: .stddev_ts, ms_per_token: (1000 / .avg_ts)}" <<<"$out")"
}

part_a() {
  local L=$LAYERS_A w m k
  for w in $WEIGHTS_A; do
    m=$(model "$L" "$w")
    k="a|${L}l|$w|t$THREADS"
    echo "(a) $w, $L layers: $m" >&2
    run_kvtax "$k|kvtax|prefill|$PREFILL" -m "$m" --prefill "$PREFILL" --reps "$REPS" --kv f16
    run_llama_bench "$k|llama-bench" "$m"
    for d in $DEPTHS_A; do
      run_kvtax "$k|kvtax|decode|$d|f16" -m "$m" --depth "$d" -n "$N" --kv f16
      run_peer "$k|llama|decode|$d|f16" -m "$m" --depth "$d" -n "$N" --ctk f16 --ctv f16
    done
  done
}

part_b() {
  local L=$LAYERS_B m k kv
  m=$(model "$L" Q4_K)
  k="b|${L}l|Q4_K|t$THREADS"
  echo "(b) Q4_K, $L layers, depth $DEPTH_B: $m" >&2
  for kv in $KV_B; do run_kvtax "$k|kvtax|decode|$DEPTH_B|$kv" -m "$m" --depth "$DEPTH_B" -n "$N" --kv "$kv"; done
  for kv in $LLAMA_KV_B; do run_peer "$k|llama|decode|$DEPTH_B|$kv" -m "$m" --depth "$DEPTH_B" -n "$N" --ctk "$kv" --ctv "$kv"; done
}

# Tables from the results file (rows of the current knobs only).
table_a() {
  local L=$LAYERS_A
  echo
  echo "## (a) llama3-8b shape, $L layers, f16 KV, $THREADS threads: kvtax vs llama.cpp (ratio = kvtax / llama.cpp, > 1: kvtax faster)"
  echo "## decode 'of bw' = (weights read + KV bytes) per token / time / read bandwidth measured by kvtax_decode_bench"
  jq -rs --arg L "${L}l" --arg T "t$THREADS" --arg P "$PREFILL" --arg depths "$DEPTHS_A" --arg weights "$WEIGHTS_A" '
    def r(k): (map(select(.row == k)) | last);
    def f(x; n): if x == null then "-" else (x * pow(10; n) | round / pow(10; n) | tostring) end;
    def ratio(a; b): if a == null or b == null then "-" else f(a / b; 2) + "x" end;
    . as $all
    | ($weights | split(" ") | map(select(. != ""))) as $W
    | ($depths | split(" ") | map(select(. != ""))) as $D
    | "| weights | prefill \($P) kvtax | llama-bench | ratio | " +
      ($D | map("decode d\(.) kvtax | llama.cpp | ratio | kvtax of bw | llama of bw") | join(" | ")) + " | llama-bench tg d0 |",
      "|---|---|---|---|" + ($D | map("---|---|---|---|---") | join("|")) + "|---|",
      ($W[] as $w
       | ("a|\($L)|\($w)|\($T)") as $k
       | ($all | r("\($k)|kvtax|prefill|\($P)")) as $kp
       | ($all | r("\($k)|llama-bench/prefill")) as $lp
       | ($all | r("\($k)|llama-bench/decode")) as $lt
       | "| \($w) | \(f($kp.tok_s; 2)) | \(f($lp.tok_s; 2)) | \(ratio($kp.tok_s; $lp.tok_s)) | " +
         ($D | map(. as $d
            | ($all | r("\($k)|kvtax|decode|\($d)|f16")) as $kd
            | ($all | r("\($k)|llama|decode|\($d)|f16")) as $ld
            | (if $kd == null or $ld == null then null
               else ($kd.weight_bytes_read_per_step + $kd.kv_bytes_per_token * ($d | tonumber)) / ($ld.ms_per_token / 1000) / 1e9 / $kd.read_bw_gbs end) as $lfrac
            | "\(f($kd.tok_s; 3)) | \(f($ld.tok_s; 3)) | \(ratio($kd.tok_s; $ld.tok_s)) | \(f($kd.frac_bw; 2)) | \(f($lfrac; 2))")
          | join(" | ")) + " | \(f($lt.tok_s; 3)) |")
  ' "$RESULTS"
  jq -rs --arg L "${L}l" --arg T "t$THREADS" '
    map(select((.row | startswith("a|\($L)|")) and (.row | contains("|\($T)|kvtax|decode|")) and .read_bw_gbs != null))
    | if length > 0 then "read bandwidth (plain read loop, \(.[0].threads) threads): " + (map(.read_bw_gbs * 10 | round / 10 | tostring) | join(", ")) + " GB/s over the decode rows" else empty end
  ' "$RESULTS"
}

table_b() {
  local L=$LAYERS_B
  echo
  echo "## (b) llama3-8b shape, $L layers, Q4_K weights, decode at depth $DEPTH_B, $THREADS threads"
  echo "## ratio = kvtax tok/s / llama.cpp tok/s with the matching KV type; vs f16 = kvtax tok/s / kvtax f16 KV tok/s"
  echo "## overhead = peak RSS - (weights read per token + KV bytes) (6c target: <= 64 MiB)"
  jq -rs --arg L "${L}l" --arg T "t$THREADS" --arg D "$DEPTH_B" --arg kvs "$KV_B" '
    def r(k): (map(select(.row == k)) | last);
    def f(x; n): if x == null then "-" else (x * pow(10; n) | round / pow(10; n) | tostring) end;
    def ratio(a; b): if a == null or b == null then "-" else f(a / b; 2) + "x" end;
    def peer(kv): {"f16": "f16", "q8": "q8_0", "q4": "q4_0", "q4r": "q4_0"}[kv] // null;
    . as $all
    | ("b|\($L)|Q4_K|\($T)") as $k
    | ($all | r("\($k)|kvtax|decode|\($D)|f16")) as $base
    | "| kvtax KV | tok/s | ms/token | vs f16 | llama.cpp KV | tok/s | ratio | KV MiB | peak RSS MiB | overhead MiB | of bw |",
      "|---|---|---|---|---|---|---|---|---|---|---|",
      ($kvs | split(" ") | map(select(. != "")))[] as $kv
      | ($all | r("\($k)|kvtax|decode|\($D)|\($kv)")) as $x
      | peer($kv) as $p
      | (if $p == null then null else ($all | r("\($k)|llama|decode|\($D)|\($p)")) end) as $l
      | "| \($kv) | \(f($x.tok_s; 3)) | \(f($x.ms_per_token; 1)) | \(ratio($x.tok_s; $base.tok_s)) | \($p // "-") | \(f($l.tok_s; 3)) | \(ratio($x.tok_s; $l.tok_s)) | \(f(if $x then $x.kv_bytes / 1048576 else null end; 1)) | \(f(if $x then $x.peak_rss_bytes / 1048576 else null end; 1)) | \(f($x.overhead_mib; 1)) | \(f($x.frac_bw; 2)) |"
  ' "$RESULTS"
}

case $PART in
  a) need_tools; part_a ;;
  b) need_tools; part_b ;;
  all) need_tools; part_a; part_b ;;
  table) ;;
  *) echo "usage: $0 [a|b|all|table]" >&2; exit 2 ;;
esac
echo "# results: $RESULTS"
case $PART in a) table_a ;; b) table_b ;; *) table_a; table_b ;; esac
