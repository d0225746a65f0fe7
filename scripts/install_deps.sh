#!/usr/bin/env bash
# Debian 12 packages kvtax builds with (run as root). Idempotent: skips apt when everything is there.
set -euo pipefail
PKGS="cmake ninja-build g++ clang libclang-rt-14-dev libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev \
libgmock-dev libbenchmark-dev libcpp-httplib-dev"
missing=$(dpkg-query -W -f='${Package} ${Status}\n' $PKGS 2>/dev/null | grep -v "install ok installed" | cut -d' ' -f1 || true)
for p in $PKGS; do dpkg-query -W "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "${missing// /}" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
fi
