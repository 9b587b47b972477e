#!/usr/bin/env bash
# Repacks the FA4 (CuTe DSL) peer of .peers/ (laid out by ../shared/tools/peer-wheels.sh: peers-b,
# peers-c) so that every peer and a staged build reach the device in two consecutive calls
# instead of three: the 92 MB runtime wheel's contents re-compressed with xz (66 MB) and split in
# two, so that
#   call 1 carries [build-device-pack, .peers/fa4x-1]  (~19 + 44 MB: the small FA4 wheels, part 0)
#   call 2 carries [.peers/fa4x-2, .peers/peers-a]     (~32 + 28 MB: part 1, FA3)
# and the staged build unpacked by call 1 stays on the warm machine for call 2 (what is not named
# in a call's carry is kept). On the device, each call: bash bench/peers_fa4_install.sh (and, in
# call 2, bash .peers/peers-a/peer-install.sh for FA3). Run here once per machine (~5 min of xz).
#   bash bench/peers_repack.sh [.peers]
set -euo pipefail
src=$(realpath "${1:-.peers}")
[[ -f $src/peers-c/cu13.name && -f $src/peers-b/cu13.part00 ]] || { echo "peers_repack: run ../shared/tools/peer-wheels.sh $src first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
name=$(cat "$src/peers-c/cu13.name")
cat "$src"/peers-b/cu13.part* "$src"/peers-c/cu13.part* > "$tmp/$name"
(cd "$tmp" && md5sum -c "$src/peers-c/cu13.md5") >/dev/null ||
  { echo "peers_repack: $name does not match its checksum" >&2; exit 1; }
mkdir -p "$tmp/x" && (cd "$tmp/x" && python3 -m zipfile -e "$tmp/$name" .)
rm -rf "$src/fa4x-1" "$src/fa4x-2" && mkdir -p "$src/fa4x-1" "$src/fa4x-2"
(cd "$tmp/x" && tar cf - .) | xz -T0 -6 > "$tmp/cu13.txz"
split -b 34m -d "$tmp/cu13.txz" "$tmp/cu13.txz."
mv "$tmp/cu13.txz.00" "$src/fa4x-1/" && mv "$tmp"/cu13.txz.0[1-9] "$src/fa4x-2/"
(cd "$tmp" && md5sum cu13.txz) > "$src/fa4x-2/cu13.txz.md5"
for w in "$src"/peers-b/*.whl; do cp "$w" "$src/fa4x-1/"; done
du -sh "$src"/fa4x-*
