# Sourced by the scripts that run on the GPU machine (device_run.sh, ncu_*.sh), from the repo
# root: unpacks the staged binaries carried as build-device-pack/ (bench/device_run.sh --stage)
# when they differ from what a warm machine kept from an earlier call (the pack's checksum is
# kept beside them), creates $OUT (default: the caller's OUT_DEFAULT) and puts the staged libfa4 (and the
# OpenMP runtime the device image may lack) first on the library path.
DIR=build-device
# (xz, device_run.sh --pack: the fatbins pack 2.4x smaller than with gzip)
# (FA4_PACK: another pack, e.g. a second folder carried beside the first for a later call on the
# same warm machine)
pack=${FA4_PACK:-build-device-pack/bin.txz}
if [[ -f $pack ]]; then
  sum=$(cksum < "$pack")
  if [[ ! -d $DIR || "$(cat "$DIR/.pack_sum" 2>/dev/null)" != "$sum" ]]; then
    rm -rf "$DIR" && tar xJf "$pack" && echo "$sum" > "$DIR/.pack_sum"
  fi
fi
OUT=${OUT:-$OUT_DEFAULT}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$DIR/lib:${LD_LIBRARY_PATH:-}"
# The peers' wheels install into /tmp/peers (../shared/PEERS.md; .peers/*/peer-install.sh, run
# after this file is sourced): on the import path from the start, or FA3 / FA4 silently drop out
# of the tables ("FA3 not available", 2026-12-06).
export PYTHONPATH="/tmp/peers/nvidia_cutlass_dsl/dsl_packages:/tmp/peers${PYTHONPATH:+:$PYTHONPATH}"
