#!/usr/bin/env bash
# Builds llama.cpp (from the npm package's git bundle, see ../shared/docs/PEERS.md) and the logits dumper in
# ~/.cache/kvtax/peers. Never part of CI; nothing of llama.cpp is committed.
set -euo pipefail
PEERS=${KVTAX_PEERS:-$HOME/.cache/kvtax/peers}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$PEERS" && cd "$PEERS"
if [ ! -d llama.cpp ]; then
  npm pack node-llama-cpp@3.21.1 >/dev/null
  tar xzf node-llama-cpp-3.21.1.tgz
  git clone -q package/llama/gitRelease.bundle llama.cpp
fi
cmake -S llama.cpp -B llama.cpp/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_HTML=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
cmake --build llama.cpp/build -j"$(nproc)" --target llama llama-completion llama-quantize llama-tokenize llama-bench \
  test-backend-ops llama-server llama-perplexity
# The dumper links the static libraries the build just made.
B=llama.cpp/build
LIBS=$(find $B/src $B/ggml/src -name '*.a' | sort -r | tr '\n' ' ')
g++ -O2 -std=c++17 -I llama.cpp/include -I llama.cpp/ggml/include "$HERE/llama_logits.cpp" \
  -Wl,--start-group $LIBS -Wl,--end-group -fopenmp -lpthread -ldl -o "$PEERS/llama_logits"
# A second build with SSE4.2 only (no AVX/AVX2/FMA/F16C, hence no weight repacking): the same llama.cpp taking
# its other code paths, whose logits measure how far llama.cpp's own builds differ from each other.
S=llama.cpp/build-sse
cmake -S llama.cpp -B $S -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_HTML=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF \
  -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF -DGGML_SSE42=ON >/dev/null
cmake --build $S -j"$(nproc)" --target llama
LIBS=$(find $S/src $S/ggml/src -name '*.a' | sort -r | tr '\n' ' ')
g++ -O2 -std=c++17 -I llama.cpp/include -I llama.cpp/ggml/include "$HERE/llama_logits.cpp" \
  -Wl,--start-group $LIBS -Wl,--end-group -fopenmp -lpthread -ldl -o "$PEERS/llama_logits_sse"
echo "built $PEERS/llama_logits, $PEERS/llama_logits_sse and $B/bin/*"
