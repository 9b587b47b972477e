# Sourced by the scripts that run on the GPU machine (device_run.sh, ncu_*.sh), from the repo
# root: unpacks the staged binaries carried as build-device-pack/ (bench/device_run.sh --stage)
# once, creates $OUT (default: the caller's OUT_DEFAULT) and puts the staged libfa4 (and the
# OpenMP runtime the device image may lack) first on the library path.
DIR=build-device
[[ -f build-device-pack/bin.tgz && ! -d "$DIR" ]] && tar xzf build-device-pack/bin.tgz
OUT=${OUT:-$OUT_DEFAULT}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$DIR/lib:${LD_LIBRARY_PATH:-}"
