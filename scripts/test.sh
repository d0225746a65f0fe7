#!/usr/bin/env bash
# Builds the release preset and runs every test. Used by the README and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release
cmake --build --preset release -j"$(nproc)"
ctest --preset release
