#!/usr/bin/env bash
# One command for a new machine: install dependencies, build, run a demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh
echo
./build/tools/fa4 info
echo
echo "demo: causal GQA attention, bf16, on the cpu backend, checked against the fp64 reference"
./build/tools/fa4 run --batch 2 --seqlen 512 --heads 8 --kv-heads 2 --head-dim 128 --dtype bf16 --causal --check
