#!/usr/bin/env bash
# Installs what fa4 needs to build and test on a Debian/Ubuntu machine, skipping what is there.
# CUDA is optional: with nvcc on PATH (or /usr/local/cuda) the cuda backend is compiled too.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v pkg-config >/dev/null || need+=(pkg-config)   # CTest package_install checks fa4.pc
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
ls /usr/lib/*/libopenblas.so >/dev/null 2>&1 || need+=(libopenblas-dev)   # sgemm yardstick of the cpu benchmark
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
# With the cuda backend built, CTest reads the sm_90a SASS of the build (tests/check_sass_loops.py):
# cuobjdump + nvdisasm, from the toolkit when it has them, else NVIDIA's PyPI wheels (no GPU
# needed) unpacked into ~/.cache/fa4/cuda-tools (tests/CMakeLists.txt looks there), with pip.
nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
tools=$HOME/.cache/fa4/cuda-tools
fetch_sass_tools=0
if [ -n "$nvcc_bin" ] && ! [ -x "$(dirname "$nvcc_bin")/cuobjdump" -a -x "$(dirname "$nvcc_bin")/nvdisasm" ] &&
   ! [ -x "$tools/nvidia/cu13/bin/cuobjdump" -a -x "$tools/nvidia/cu13/bin/nvdisasm" ]; then
  fetch_sass_tools=1
  python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
fi
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "fa4: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

if [ "$fetch_sass_tools" = 1 ]; then
  echo "fa4: fetching cuobjdump / nvdisasm (PyPI wheels) into $tools"
  mkdir -p "$tools/wheels"
  python3 -m pip download -q --no-deps -d "$tools/wheels" "nvidia-cuda-cuobjdump==13.*" "nvidia-cuda-nvdisasm==13.*"
  python3 - "$tools" <<'PY'
import glob, os, sys, zipfile
root = sys.argv[1]
for whl in glob.glob(os.path.join(root, "wheels", "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if n.startswith("nvidia/cu13/bin/"):
                z.extract(n, root)
                os.chmod(os.path.join(root, n), 0o755)
PY
fi
