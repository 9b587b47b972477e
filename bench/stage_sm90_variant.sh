#!/usr/bin/env bash
# Stages a variant libfa4 whose sm90 kernel is built with other compile-time switches (the
# ablations of src/cuda/sm90/fwd_config.h), for an A/B in one device call (bench/peers.py --ab).
# Only what reads the switches is recompiled -- the sm90 kernel objects (sm_90a only: the variant
# runs on the H200 alone) and the host code that sizes its tiles (sm90/fwd_launch.cpp: the TMA
# boxes; cuda/plan.cpp: the planned tile and shared memory). A kernel built with other tiles than
# its host side expects waits forever on an mbarrier whose TMA boxes bring fewer bytes than it
# was told (that is how the first 176 / 192-key A/B hung). Every other object and the link line
# come from the main build, so a variant costs ~1 minute, not a whole CUDA build. (The CUDA
# backend's dispatch, cuda/backend.cpp, is recompiled too, so a branch that changes how the
# sm90 kernel is called can be staged this way: bench/stage_ab.sh --fast.)
#   bash bench/device_run.sh --stage                                   # the main build (build-cuda/)
#   bash bench/stage_sm90_variant.sh nopp -DFA4_SM90_PINGPONG=0         # -> build-device/lib/libfa4_nopp.so
#   device: OUT=... bash bench/device_run.sh --bench-args "--ab nopp=build-device/lib/libfa4_nopp.so"
# TESTS=1: also link the device test suite against the variant ($D/test_cuda_NAME), compiled from
# this checkout's tests/cuda/test_cuda.cpp.
# MAIN_ROOT=dir: take the main build (dir/build-cuda) and the staging folder (dir/build-device)
# from another checkout, compiling this checkout's sources (a worktree of a branch).
# HOST_ONLY=1: a switch only the host side reads (the planner's, e.g. FA4_SM90_DECODE_KEYS_M):
# recompile fwd_launch.cpp / plan.cpp / backend.cpp alone and link the main build's kernel objects
# (2 cores: seconds instead of ~20 minutes of nvcc).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: bash bench/stage_sm90_variant.sh NAME [-DFA4_SM90_...=V ...]" >&2; exit 2; }
name=$1; shift
root=$(realpath "${MAIN_ROOT:-.}")
B=$root/build-cuda D=$root/build-device
[[ -d $D/lib && -f $B/CMakeFiles/fa4.dir/link.txt ]] || { echo "stage_sm90_variant: build $B and run bash bench/device_run.sh --stage first" >&2; exit 2; }
out=$B/variant-$name
mkdir -p "$out"
objs=()
kernels=(src/cuda/sm90/*.cu)
[[ ${HOST_ONLY:-0} == 1 ]] && kernels=()
for src in "${kernels[@]}"; do
  o=$out/$(basename "$src").o
  nvcc -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-fPIC --use_fast_math -std=c++20 \
    --expt-relaxed-constexpr -lineinfo -DFA4_HAVE_CUDA=1 -Iinclude -Isrc "$@" -c "$src" -o "$o" &
  objs+=("$(realpath -m "$o")")
done
for src in src/cuda/sm90/fwd_launch.cpp src/cuda/plan.cpp src/cuda/backend.cpp; do
  o=$out/$(basename "$src").o
  c++ -O3 -DNDEBUG -fPIC -fno-math-errno -fopenmp -std=c++20 -DFA4_HAVE_CUDA=1 -Iinclude -Isrc \
    -isystem /usr/local/cuda/include "$@" -c "$src" -o "$o" &
  objs+=("$(realpath -m "$o")")
done
wait
# The main link line with the variant's sm90 objects in place of the main ones; a source the main
# build does not have (an instance file a branch adds) is linked in beside the variant's
# fwd_launch.cpp.o.
link=$(cat $B/CMakeFiles/fa4.dir/link.txt)
extra=()
for o in "${objs[@]}"; do
  base=$(basename "$o")
  rel=src/cuda/sm90/$base
  [[ $base == plan.cpp.o || $base == backend.cpp.o ]] && rel=src/cuda/$base
  if [[ $link == *"CMakeFiles/fa4_objects.dir/$rel "* ]]; then
    link=${link//CMakeFiles\/fa4_objects.dir\/$rel/$o}
  else
    extra+=("$o")
  fi
done
if [[ ${#extra[@]} -gt 0 ]]; then
  anchor=$(realpath -m "$out/fwd_launch.cpp.o")
  link=${link//$anchor/${extra[*]} $anchor}
fi
link=$(sed -E "s@-o libfa4\.so[0-9.]*@-o $(realpath -m "$out")/libfa4.so@; s@-Wl,-soname,libfa4\.so[0-9.]*@@" <<<"$link")
(cd $B && eval "$link")
cp "$out/libfa4.so" "$D/lib/libfa4_$name.so"
strip --strip-unneeded "$D/lib/libfa4_$name.so"
if [[ ${TESTS:-0} == 1 ]]; then
  # The device test suite of the variant ($D/test_cuda_NAME): the static library rebuilt from
  # the same object list (member names repeat across sm80 / sm90, so no in-place replacement),
  # and test_cuda's own link line pointed at it.
  (cd $B && ar rcs "$out/libfa4.a" $(tr ' ' '\n' <<<"$link" | grep -E '\.o$'))
  # This checkout's device tests (a branch's new ones too), against the main build's test utilities.
  c++ -O3 -DNDEBUG -fPIE -fopenmp -DGTEST_HAS_PTHREAD=1 -std=c++20 -DFA4_HAVE_CUDA=1 -Itests -Isrc -Iinclude \
    -isystem /usr/local/cuda/include "$@" -c tests/cuda/test_cuda.cpp -o "$out/test_cuda.cpp.o"
  tlink=$(cat $B/tests/cuda/CMakeFiles/test_cuda.dir/link.txt)
  tlink=${tlink//..\/..\/libfa4.a/$out/libfa4.a}
  tlink=${tlink//CMakeFiles\/test_cuda.dir\/test_cuda.cpp.o/$(realpath -m "$out/test_cuda.cpp.o")}
  tlink=$(sed -E "s@-o test_cuda( |$)@-o $out/test_cuda @" <<<"$tlink")
  (cd $B/tests/cuda && eval "$tlink")
  cp "$out/test_cuda" "$D/test_cuda_$name" && strip --strip-unneeded "$D/test_cuda_$name"
fi
echo "$name: $(git rev-parse --short HEAD) $*" >> "$D/ab_revs"
(cd "$root" && bash bench/device_run.sh --pack)
