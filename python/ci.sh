#!/usr/bin/env bash
# CI for the Python distribution (fa4-attention, import name fa4):
#   1. `python -m build` at the repository root: an sdist, then the wheel built *from that sdist*
#      (so the sdist is proven to build on its own; the library compiles once, CPU-only unless
#      FA4_CUDA is set: FA4_CUDA=OFF by default here). The compile progress is shown.
#   2. the sdist is checked: it has the library sources and the package, not the C++ tests;
#   3. a fresh virtual environment away from the checkout gets the wheel (pip install *.whl)
#      plus pytest, ml_dtypes, mypy; `import fa4` must come from that environment;
#   4. the pytest suite, copied out of the checkout, runs against the installed wheel.
# Exit status: pytest's, except that "no tests collected" (5) is a failure too. Torch tests are
# skipped when torch is not installed.
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
echo "python/ci.sh: python -m build (FA4_CUDA=$FA4_CUDA, $CMAKE_BUILD_PARALLEL_LEVEL jobs)"
"$tmp/buildenv/bin/python" -m build --outdir "$dist" "$root"
sdist=$(ls "$dist"/fa4_attention-*.tar.gz)
wheel=$(ls "$dist"/fa4_attention-*.whl)
echo "python/ci.sh: built $(basename "$sdist") and $(basename "$wheel") in $(( $(date +%s) - start )) s"

# 2. what the sdist holds
list="$tmp/sdist.txt"
tar -tzf "$sdist" > "$list"
for f in CMakeLists.txt LICENSE include/fa4/fa4.h src/core/validate.cpp src/cpu python/CMakeLists.txt \
         python/src/fa4_ext.cpp python/fa4/__init__.py python/fa4/py.typed python/tests/test_basic.py; do
  grep -q "^fa4_attention-[^/]*/$f" "$list" || { echo "python/ci.sh: the sdist lacks $f" >&2; exit 1; }
done
if grep -q -E "^fa4_attention-[^/]*/(tests|bench|build[^/]*)/" "$list"; then
  echo "python/ci.sh: the sdist holds C++ tests, benchmarks or build output" >&2; exit 1
fi

# 3. a fresh environment with the wheel
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "$wheel" pytest ml_dtypes mypy
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
"$venv/bin/python" -m pytest -q -rs "$work/tests" -p no:cacheprovider
rc=$?
set -e
cd /
echo "python/ci.sh: done in $(( $(date +%s) - start )) s"
if [ "$rc" -eq 5 ]; then
  echo "python/ci.sh: pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
