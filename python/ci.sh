#!/usr/bin/env bash
# CI for the Python package: a fresh virtual environment, `pip install ./python` (CPU-only build,
# FA4_CUDA=OFF unless set), then the pytest suite. Exit status: pytest's, except that "no tests
# collected" (5) is a failure too. Torch tests are skipped when torch is not installed.
#   bash python/ci.sh            (from anywhere; uses $FA4_PY_VENV or a temporary venv)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
if [ -n "${FA4_PY_VENV:-}" ]; then
  venv="$FA4_PY_VENV"
else
  venv="$(mktemp -d /tmp/fa4-py-venv.XXXXXX)"
  trap 'rm -rf "$venv"' EXIT
fi
export FA4_CUDA="${FA4_CUDA:-OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
start=$(date +%s)
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q pytest numpy ml_dtypes
"$venv/bin/python" -m pip install -q "$here"
echo "python/ci.sh: installed in $(( $(date +%s) - start )) s ($("$venv/bin/python" -c 'import fa4; print("fa4", fa4.__version__, "cuda:", fa4.built_with_cuda)'))"
# Run from a neutral directory so `import fa4` is the installed package, not python/fa4.
work="$(mktemp -d /tmp/fa4-py-run.XXXXXX)"
cd "$work"
set +e
"$venv/bin/python" -m pytest -q -rs "$here/tests" -p no:cacheprovider
rc=$?
set -e
cd / && rm -rf "$work"
if [ "$rc" -eq 5 ]; then
  echo "python/ci.sh: pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
