#!/usr/bin/env bash
# The Python package on the GPU machine, in one device call: built there (its Python, jaxlib's
# FFI headers and nanobind are the image's; sm_90a only, 16 cores: ~2-3 min), then the tests that
# need a GPU -- fa4.jax on the "CUDA" FFI target (python/tests/test_jax.py -k gpu), the ring on
# CUDA tensors at world size 1 (test_distributed.py -k cuda) -- and bench/ring_scaling.py at world
# size 1 (NPROC=2 on a two-GPU machine: torchrun, NVLink multicast kept off as KINDS.md asks).
#   OUT=/dir bash bench/device_python.sh [pytest -k expression]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fa4-device-py}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
PY=/tmp/fa4-py
start=$(date +%s)
FA4_CUDA=ON FA4_CUDA_ARCHS=90a FA4_JAX=ON CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) timeout 420 \
  python3 -m pip install --no-build-isolation --no-deps --target "$PY" -v . > "$OUT/pip.log" 2>&1
rc=$?
echo "build: rc=$rc ($(( $(date +%s) - start )) s)"
[[ $rc == 0 ]] || { grep -E "error|Error" "$OUT/pip.log" | head -20; exit 1; }
export PYTHONPATH=$PY
python3 -c "import fa4, jax; print('fa4', fa4.__version__, 'cuda', fa4.backend_available('cuda'), 'jax', jax.__version__, jax.devices())"
K=${1:-gpu or cuda}
start=$(date +%s)
(cd python/tests && timeout 240 python3 -m pytest -q -rs test_jax.py test_distributed.py -k "$K" > "$OUT/pytest.log" 2>&1)
echo "pytest -k '$K': rc=$? ($(( $(date +%s) - start )) s): $(tail -1 "$OUT/pytest.log")"
grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/pytest.log" | head -20
start=$(date +%s)
N=${NPROC:-1}
RUN=python3; [[ $N -gt 1 ]] && RUN="python3 -m torch.distributed.run --nproc_per_node $N"
timeout 200 $RUN bench/ring_scaling.py --seqlens 8k,32k,128k --comms ring,allgather --layouts zigzag,contiguous \
  --check --json "$OUT/ring.json" > "$OUT/ring.log" 2>&1
echo "ring_scaling (world $N): rc=$? ($(( $(date +%s) - start )) s)"
tail -15 "$OUT/ring.log"
