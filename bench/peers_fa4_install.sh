#!/usr/bin/env bash
# On the device: installs FA4 (CuTe DSL) into /tmp/peers from the two halves bench/peers_repack.sh
# made (.peers/fa4x-1 in one call, .peers/fa4x-2 in the next, back to back: /tmp lasts while the
# machine stays warm, 30 s after a call). Each call runs it; the call that completes the set
# installs, and afterwards:
#   export PYTHONPATH=/tmp/peers/nvidia_cutlass_dsl/dsl_packages:/tmp/peers:$PYTHONPATH
#   python3 -c "from flash_attn.cute import flash_attn_func"
set -euo pipefail
cd "$(dirname "$0")/.."
stage=/tmp/peers-fa4x
mkdir -p "$stage" /tmp/peers
for d in .peers/fa4x-1 .peers/fa4x-2; do [[ -d $d ]] && cp "$d"/* "$stage/"; done
if [[ ! -f $stage/cu13.txz.00 || ! -f $stage/cu13.txz.md5 ]]; then
  echo "peers_fa4_install: $(ls "$stage" | wc -l) files staged; the other half comes with the next call"
  exit 0
fi
cat "$stage"/cu13.txz.0* > "$stage/cu13.txz"
(cd "$stage" && md5sum -c cu13.txz.md5 >/dev/null) || { echo "peers_fa4_install: cu13.txz does not match its checksum" >&2; exit 1; }
# The small wheels share the top-level package nvidia_cutlass_dsl with the runtime: one pip call,
# then the runtime's files (the unzipped wheel, its .dist-info included) merged in.
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/peers "$stage"/*.whl
xz -dc "$stage/cu13.txz" | tar xf - -C /tmp/peers
echo "peers_fa4_install: done; /tmp/peers holds: $(ls /tmp/peers | grep -E '^(flash_attn|nvidia_cutlass_dsl|quack)' | tr '\n' ' ')"
