#!/usr/bin/env bash
# CI for the Python distribution (fa4-attention, import name fa4):
#   1. `python -m build` at the repository root: an sdist, then the wheel built *from that sdist*
#      (so the sdist is proven to build on its own; the library compiles once, CPU-only unless
#      FA4_CUDA is set: FA4_CUDA=OFF by default here). The compile progress is shown.
#   2. the sdist is checked: it has the library sources and the package, not the C++ tests;
#   3. a fresh virtual environment away from the checkout gets the wheel (pip install *.whl)
#      plus pytest, ml_dtypes, mypy; `import fa4` must come from that environment;
#   4. the pytest suite, copied out of the checkout, runs against the installed wheel.
#      The venv also gets torch from PyPI (the default wheel: its CUDA libraries come along, ~5.5 GB
#      and ~2 min; a CPU-only index is not reachable from CI), so the torch, drop-in and
#      torch.distributed (gloo, multi-process) tests run. A failed torch install fails CI, and so
#      does a run in which torch cannot be imported (FA4_REQUIRE_TORCH: tests/conftest.py), rather
#      than the torch tests skipping silently. FA4_CI_TORCH=0 opts out (local runs; said loudly).
# Exit status: pytest's, except that "no tests collected" (5) is a failure too. Every test is
# capped at $FA4_PY_TEST_TIMEOUT s (pytest-timeout, default 300: a hang fails, CI does not stall);
# torch.compile's inductor cache is fresh per run ($tmp) and compiles with one thread (2 cores).
# The Python fuzz test uses its fixed default seed unless FA4_FUZZ_SEED is set (S or "random").
#   bash python/ci.sh            (from anywhere; $FA4_PY_VENV: the test venv, else a temporary one;
#                                 $FA4_DIST: keep the sdist and wheel there)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
py="${PYTHON:-python3}"
tmp="$(mktemp -d /tmp/fa4-py-ci.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
venv="${FA4_PY_VENV:-$tmp/venv}"
dist="${FA4_DIST:-$tmp/dist}"
export FA4_CUDA="${FA4_CUDA:-OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
start=$(date +%s)

# 1. sdist + wheel (from the sdist), in a build-only environment
"$py" -m venv "$tmp/buildenv"
"$tmp/buildenv/bin/python" -m pip install -q --upgrade pip build
# fa4.jax: jaxlib's XLA FFI headers are needed at build time (python -m build isolates its own
# environment, so they are passed in); FA4_JAX=ON fails the build if they are missing, and the
# test venv gets the same jax version the handlers were built against.
"$tmp/buildenv/bin/python" -m pip install -q jax
export FA4_JAX=ON FA4_JAX_INCLUDE_DIR="$("$tmp/buildenv/bin/python" -c 'import jax.ffi; print(jax.ffi.include_dir())')"
jax_req="jax==$("$tmp/buildenv/bin/python" -c 'import jax; print(jax.__version__)')"
echo "python/ci.sh: python -m build (FA4_CUDA=$FA4_CUDA, $CMAKE_BUILD_PARALLEL_LEVEL jobs)"
"$tmp/buildenv/bin/python" -m build --outdir "$dist" "$root"
sdist=$(ls "$dist"/fa4_attention-*.tar.gz)
wheel=$(ls "$dist"/fa4_attention-*.whl)
echo "python/ci.sh: built $(basename "$sdist") and $(basename "$wheel") in $(( $(date +%s) - start )) s"

# 2. what the sdist holds
list="$tmp/sdist.txt"
tar -tzf "$sdist" > "$list"
for f in CMakeLists.txt LICENSE include/fa4/fa4.h src/core/validate.cpp src/cpu python/CMakeLists.txt \
         python/src/fa4_ext.cpp python/src/fa4_jax.cpp python/fa4/jax.py python/fa4/__init__.py python/fa4/py.typed python/tests/test_basic.py; do
  grep -q "^fa4_attention-[^/]*/$f" "$list" || { echo "python/ci.sh: the sdist lacks $f" >&2; exit 1; }
done
if grep -q -E "^fa4_attention-[^/]*/(tests|bench|build[^/]*)/" "$list"; then
  echo "python/ci.sh: the sdist holds C++ tests, benchmarks or build output" >&2; exit 1
fi

# 3. a fresh environment with the wheel
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "$wheel" pytest pytest-timeout ml_dtypes mypy "$jax_req"
with_torch="${FA4_CI_TORCH:-1}"
if [ "$with_torch" = "0" ]; then
  echo "python/ci.sh: WARNING: FA4_CI_TORCH=0: torch is not installed, the torch / drop-in / distributed tests SKIP" >&2
  export FA4_REQUIRE_TORCH=0
else
  # torch + its CUDA wheels take ~5.5 GB in the venv, plus the downloads in pip's temporary dir
  need_gb=10
  for d in "$(dirname "$venv")" "${TMPDIR:-/tmp}"; do
    free_kb=$(df -Pk "$d" 2>/dev/null | awk 'NR == 2 {print $4}' || true)
    free_gb=$(( ${free_kb:-0} / 1024 / 1024 ))
    if [ "$free_gb" -lt "$need_gb" ]; then
      echo "python/ci.sh: only $free_gb GB free at $d; installing torch needs ~$need_gb GB (FA4_CI_TORCH=0 skips torch)" >&2
      exit 1
    fi
  done
  echo "python/ci.sh: pip install torch (PyPI; FA4_CI_TORCH=0 skips it)"
  t0=$(date +%s)
  if ! "$venv/bin/python" -m pip install -q --no-cache-dir torch; then
    echo "python/ci.sh: installing torch FAILED (the torch tests must run in CI; FA4_CI_TORCH=0 skips them locally)" >&2
    exit 1
  fi
  if ! tv=$("$venv/bin/python" -c 'import torch; print(torch.__version__)'); then
    echo "python/ci.sh: torch installed but does not import: FAILED" >&2
    exit 1
  fi
  echo "python/ci.sh: torch $tv installed in $(( $(date +%s) - t0 )) s"
  export FA4_REQUIRE_TORCH=1
fi
export TORCHINDUCTOR_CACHE_DIR="$tmp/inductor" TORCHINDUCTOR_COMPILE_THREADS=1
work="$tmp/run"
mkdir -p "$work"
cp -r "$here/tests" "$work/tests"
cd "$work"
"$venv/bin/python" - "$venv" <<'EOF'
import os, sys
import fa4
where = os.path.realpath(fa4.__file__)
assert where.startswith(os.path.realpath(sys.argv[1])), f"fa4 imported from {where}, not the test venv"
print(f"python/ci.sh: fa4 {fa4.__version__} (cuda: {fa4.built_with_cuda}) from {os.path.dirname(where)}")
EOF

# 4. the suite against the installed wheel
set +e
t0=$(date +%s)
"$venv/bin/python" -m pytest -q -rs "$work/tests" -p no:cacheprovider --timeout="${FA4_PY_TEST_TIMEOUT:-300}" \
  --durations=10
rc=$?
set -e
cd /
echo "python/ci.sh: pytest in $(( $(date +%s) - t0 )) s; done in $(( $(date +%s) - start )) s"
if [ "$rc" -eq 5 ]; then
  echo "python/ci.sh: pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
