#!/usr/bin/env bash
# fa4's 16-bit tile products against oneDNN's ukernel brgemm, one thread (bench/cpu_brgemm_ab.cpp
# says what is timed), then brgemm run on fa4's own panels (bench/cpu_brgemm_panels.cpp). Not part of the CMake build or CI.
#
#   bash bench/cpu_brgemm_ab.sh [rounds] [ms per batch]
#
# oneDNN: ONEDNN_ROOT (an install prefix with include/oneapi/dnnl/dnnl_ukernel.hpp and
# lib/libdnnl.*), else /tmp/onednn/install. The ukernel API is only in builds configured with
# ONEDNN_EXPERIMENTAL_UKERNEL=ON: Debian bookworm's libdnnl-dev is 2.6 (no ukernel), the PyPI
# wheels have no headers (onednn) or are 3.2 (onednn-devel-cpu-gomp) and none exports
# dnnl_brgemm_*. ONEDNN_SRC=/path/to/oneDNN makes this script build a small one (sequential
# runtime, matmul only, static; ~35 min on 2 cores):
#   cmake -S $ONEDNN_SRC -B $ONEDNN_SRC/build -DCMAKE_BUILD_TYPE=Release \
#     -DONEDNN_EXPERIMENTAL_UKERNEL=ON -DONEDNN_CPU_RUNTIME=SEQ -DONEDNN_GPU_RUNTIME=NONE \
#     -DONEDNN_BUILD_GRAPH=OFF -DONEDNN_BUILD_TESTS=OFF -DONEDNN_BUILD_EXAMPLES=OFF \
#     -DONEDNN_ENABLE_WORKLOAD=INFERENCE -DONEDNN_ENABLE_PRIMITIVE=MATMUL \
#     -DONEDNN_LIBRARY_TYPE=STATIC -DCMAKE_INSTALL_PREFIX=$ONEDNN_ROOT
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${ONEDNN_ROOT:-/tmp/onednn/install}
if [[ ! -f $ROOT/include/oneapi/dnnl/dnnl_ukernel.hpp ]]; then
  if [[ -n ${ONEDNN_SRC:-} ]]; then
    cmake -S "$ONEDNN_SRC" -B "$ONEDNN_SRC/build" -DCMAKE_BUILD_TYPE=Release -DONEDNN_EXPERIMENTAL_UKERNEL=ON \
      -DONEDNN_CPU_RUNTIME=SEQ -DONEDNN_GPU_RUNTIME=NONE -DONEDNN_BUILD_GRAPH=OFF -DONEDNN_BUILD_TESTS=OFF \
      -DONEDNN_BUILD_EXAMPLES=OFF -DONEDNN_ENABLE_WORKLOAD=INFERENCE -DONEDNN_ENABLE_PRIMITIVE=MATMUL \
      -DONEDNN_LIBRARY_TYPE=STATIC -DCMAKE_INSTALL_PREFIX="$ROOT" > /dev/null
    cmake --build "$ONEDNN_SRC/build" -j"$(nproc)" && cmake --install "$ONEDNN_SRC/build" > /dev/null
  else
    echo "no oneDNN with the ukernel API at $ROOT (set ONEDNN_ROOT, or ONEDNN_SRC to build one)" >&2
    exit 1
  fi
fi
grep -q "define DNNL_EXPERIMENTAL_UKERNEL" "$ROOT/include/oneapi/dnnl/dnnl_config.h" ||
  { echo "$ROOT: oneDNN built without ONEDNN_EXPERIMENTAL_UKERNEL=ON" >&2; exit 1; }
if [[ ! -f build-cpu/libfa4.a ]]; then
  cmake -S . -B build-cpu -DFA4_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build-cpu -j2 --target fa4_static
fi
LIBDIR=$ROOT/lib
[[ -d $LIBDIR ]] || LIBDIR=$ROOT/lib64
g++ -std=c++17 -O2 -march=native -Isrc -Iinclude -Ibuild-cpu/include -I"$ROOT/include" bench/cpu_brgemm_ab.cpp \
  -o build-cpu/cpu_brgemm_ab build-cpu/libfa4.a "$LIBDIR/libdnnl.a" -fopenmp -lpthread -ldl
g++ -std=c++17 -O2 -march=native -Isrc -Iinclude -Ibuild-cpu/include -I"$ROOT/include" bench/cpu_brgemm_panels.cpp \
  -o build-cpu/cpu_brgemm_panels build-cpu/libfa4.a "$LIBDIR/libdnnl.a" -fopenmp -lpthread -ldl
uptime
OMP_NUM_THREADS=1 taskset -c 0 build-cpu/cpu_brgemm_ab "${1:-9}" "${2:-20}"
OMP_NUM_THREADS=1 taskset -c 0 build-cpu/cpu_brgemm_panels
uptime
