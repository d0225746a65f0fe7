#!/usr/bin/env bash
# Binaries of other branches for an A/B in one call on the GPU machine, next to carry.sh's (bench/gpu/carry.sh).
#   bench/gpu/variants.sh BUILD_DIR NAME=BRANCH... [-- TARGET...]
# checks out each BRANCH in turn (the working tree must be clean), builds the TARGETs in BUILD_DIR (default: the
# CUDA tests and the three GPU benches), strips them into NAME/, then checks out the branch it started on and builds
# it again; writes .gpucarry/var.tar.xz. On the GPU machine: mkdir -p /tmp/var && tar -C /tmp/var -xJf
# .gpucarry/var.tar.xz, then /tmp/var/NAME/kvtax_gpu_bench etc. beside carry.sh's /tmp/gpubin (same libraries).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
usage() { echo "usage: variants.sh BUILD_DIR NAME=BRANCH... [-- TARGET...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
build=$(cd "$1" && pwd)
shift
pairs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  [[ "$1" == ?*=?* ]] || usage
  pairs+=("$1")
  shift
done
[ "${1:-}" = "--" ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(kvtax_cuda_tests kvtax_gpu_bench kvtax_gpu_decode_bench kvtax_gpu_prefill_bench)

cd "$root"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "variants.sh: the working tree has changes; commit or stash them first" >&2
  exit 1
fi
start=$(git symbolic-ref --quiet --short HEAD || git rev-parse HEAD)
stage=$(mktemp -d)
back() {
  git checkout -q "$start"
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" > /dev/null
  rm -rf "$stage"
}
trap back EXIT
for pair in "${pairs[@]}"; do
  name=${pair%%=*} branch=${pair#*=}
  git checkout -q "$branch"
  echo "== $name: $(git log --oneline -1)"
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" | tail -1
  mkdir -p "$stage/$name"
  for t in "${targets[@]}"; do
    f=$(find "$build" -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
    [ -n "$f" ] || { echo "variants.sh: no $t in $build" >&2; exit 1; }
    strip -o "$stage/$name/$t" "$f"
  done
done
mkdir -p "$root/.gpucarry"
tar -C "$stage" -cJf "$root/.gpucarry/var.tar.xz" .
ls -l "$root/.gpucarry/var.tar.xz"
