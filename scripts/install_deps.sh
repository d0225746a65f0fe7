#!/usr/bin/env bash
# Debian 12 packages kvtax builds with (run as root). Idempotent: skips apt when everything is there.
set -euo pipefail
PKGS="cmake ninja-build g++ clang libclang-rt-14-dev libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev \
libgmock-dev libbenchmark-dev libcpp-httplib-dev"
# Node.js only from Debian when none is installed: a machine with its own node and npm (e.g. NodeSource's, which
# bundles npm) cannot take Debian's npm package next to it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then PKGS="$PKGS nodejs npm"; fi
missing=$(dpkg-query -W -f='${Package} ${Status}\n' $PKGS 2>/dev/null | grep -v "install ok installed" | cut -d' ' -f1 || true)
for p in $PKGS; do dpkg-query -W "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "${missing// /}" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
fi
# The official `openai` npm client, for the `kvtax serve` integration test (tests/serve_openai_client_test.cpp
# looks in $KVTAX_NPM_DIR, default ~/.cache/kvtax/npm; the test skips when it is absent).
NPM_DIR="${KVTAX_NPM_DIR:-$HOME/.cache/kvtax/npm}"
if [ ! -f "$NPM_DIR/node_modules/openai/package.json" ]; then
  mkdir -p "$NPM_DIR"
  npm install --silent --no-audit --no-fund --prefix "$NPM_DIR" openai@6 >/dev/null || echo "warning: npm install openai failed; the openai client test will skip" >&2
fi
