#!/usr/bin/env bash
# Stages the libfa4 of another revision next to the main build, for an A/B in one device call
# (bench/peers.py --ab: same process, same inputs, same interleaved rounds).
#   bash bench/device_run.sh --stage                       # the main build (build-cuda/)
#   bash bench/stage_ab.sh exp/cp-async-l2-128b l2hint      # builds REV in a worktree -> libfa4_l2hint.so
#   bash bench/stage_ab.sh --fast exp/sm90-x x             # REV changes only the sm90 kernel, its
#       launch, the planner or the dispatch: recompile those against the main build (~1-3 min,
#       bench/stage_sm90_variant.sh) instead of a whole build
#   device: OUT=... bash bench/device_run.sh --bench-args "--ab l2hint=build-device/lib/libfa4_l2hint.so"
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
[[ "${1:-}" == "--fast" ]] && { fast=1; shift; }
[[ $# -ge 2 && ($fast == 1 || $# -eq 2) ]] || { echo "usage: bash bench/stage_ab.sh [--fast] REV NAME [-DFA4_SM90_...=V ...]" >&2; exit 2; }
rev=$1 name=$2; shift 2
[[ -d build-device/lib ]] || { echo "stage_ab: run bash bench/device_run.sh --stage first" >&2; exit 2; }
wt=$(mktemp -d /tmp/fa4-ab-XXXXXX)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"' EXIT
git worktree add -q --detach "$wt" "$rev"
if [[ $fast == 1 ]]; then
  # Only what the fast path recompiles may differ from the staged main build's commit.
  other=$(git diff --name-only "$(cat build-device/commit)" "$rev" -- src include |
            grep -vE '^src/cuda/(sm90/|common/tile_schedule\.h|plan\.(cpp|h)|backend\.cpp)' || true)
  [[ -z $other ]] || { echo "stage_ab --fast: $rev also changes $other; stage it without --fast" >&2; exit 2; }
  cp bench/stage_sm90_variant.sh "$wt/bench/"
  MAIN_ROOT=$PWD bash "$wt/bench/stage_sm90_variant.sh" "$name" "$@"
  exit 0
fi
cmake -S "$wt" -B "$wt/build" -DFA4_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$wt/build" -j"$(nproc 2>/dev/null || echo 2)" --target fa4
cp -L "$wt/build/libfa4.so" "build-device/lib/libfa4_$name.so"
strip --strip-unneeded "build-device/lib/libfa4_$name.so"
echo "$name: $(git rev-parse --short "$rev")" >> build-device/ab_revs
bash bench/device_run.sh --pack
