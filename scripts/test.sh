#!/usr/bin/env bash
# The whole test suite: C++ (GoogleTest via CTest, incl. the CLI tests) and the Python package
# (pytest in a fresh virtual environment). Builds first if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)")
if [ -f python/ci.sh ]; then
  bash python/ci.sh
fi
