#!/usr/bin/env bash
# libfa4.so must keep its state to itself: a function-local static in an externally visible
# template/inline function is emitted as an STB_GNU_UNIQUE symbol, which the dynamic linker binds
# process-wide even under RTLD_LOCAL. Two copies of the library in one process (an A/B build next
# to the installed one, two packages each shipping fa4) would then share such state; the sm80
# launcher's per-device "shared memory opt-in done" flags did exactly that and every launch of
# the second copy failed. This fails if any fa4 symbol of that kind is exported again.
#   usage: check_exports.sh path/to/libfa4.so
set -euo pipefail
lib=$1
[[ -f $lib ]] || { echo "check_exports: no such file: $lib" >&2; exit 2; }
syms=$(readelf -W --dyn-syms "$lib")
[[ -n $syms ]] || { echo "check_exports: readelf printed nothing for $lib" >&2; exit 2; }
bad=$(awk '$5 == "UNIQUE" && $8 ~ /3fa4/ {print $8}' <<< "$syms")
if [[ -n $bad ]]; then
  echo "libfa4 exports process-wide (UNIQUE) fa4 symbols; give them internal linkage:" >&2
  c++filt <<< "$bad" | head -20 >&2 || true
  exit 1
fi
echo "check_exports: $(wc -l <<< "$syms") dynamic symbols, no UNIQUE fa4 state"
