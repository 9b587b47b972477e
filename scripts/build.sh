#!/usr/bin/env bash
# Configures and builds fa4 (library, CLI, tests) into ./build. FA4_CUDA=AUTO|ON|OFF (default
# AUTO: the cuda backend is compiled when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFA4_CUDA="${FA4_CUDA:-AUTO}" >/dev/null
cmake --build build -j"$jobs"
