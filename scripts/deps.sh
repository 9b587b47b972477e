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
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "fa4: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
