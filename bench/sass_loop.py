#!/usr/bin/env python3
"""Per-kernel counts of what ptxas put in an sm90 kernel's key loop, from `cuobjdump -sass` text.

  nvcc -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a --use_fast_math -std=c++20 \
       --expt-relaxed-constexpr -DFA4_HAVE_CUDA=1 -Iinclude -Isrc [-D...] -cubin src/cuda/sm90/fwd_d128.cu -o x.cubin
  cuobjdump -sass x.cubin > x.sass && python3 bench/sass_loop.py x.sass

(cuobjdump / nvdisasm without a GPU toolkit that ships them: NVIDIA's PyPI wheels
nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm, `pip download --no-deps`, unzip, nvidia/cu13/bin/.)

The loop is taken as the span from the first wgmma past the first quarter of the kernel's
wgmmas (after the prologue's first S = Q K^T) to its last one. Printed per kernel: its length,
R2UR (a descriptor moved from vector to uniform registers before its wgmma: the loop state is not
warp-uniform for ptxas) and BRA.DIV / WARPSYNC (ptxas guards warp-synchronous instructions of a
region it takes for divergent). In a healthy consumer loop both are 0 (the standard D 128 tile);
docs/perf/h100-2026-12-07-session.md has the case that cost 5-6 %.
"""
import re
import sys


def kernels(lines):
    """{kernel name: its instructions} from `cuobjdump -sass` lines. A build's object file holds
    each kernel once per architecture it was compiled for (sm_90a and a short sm_80 stub of the
    same name): the longest listing of a name is kept."""
    listings, cur = [], None
    for line in lines:
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = []
            listings.append((m.group(1), cur))
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,6}\*/\s+(.*?);", line)
        if m and cur is not None:
            cur.append(re.sub(r"^@!?U?P\w+\s+", "", m.group(1).strip()))
    funcs = {}
    for name, ins in listings:
        if len(ins) > len(funcs.get(name, [])):
            funcs[name] = ins
    return funcs


def label(name):
    dt = "bf16" if "bfloat16" in name else "e4m3" if "e4m3" in name else "fp16"
    tile = re.search(r"TileE(\d)", name)
    extra = " gather" if "Gather" in name else " f16compute" if "F16Compute" in name else ""
    return f"{dt} Tile {tile.group(1) if tile else '?'}{extra}"


def loop_counts(ins):
    """{'length', 'R2UR', 'BRA.DIV', 'WARPSYNC'} of a kernel's key loop, None without one."""
    idx = [i for i, x in enumerate(ins) if re.match(r"[HQ]GMMA", x)]
    if len(idx) < 8:  # (the D 64 fp8 kernel has 12: k = 32 per wgmma)
        return None
    seg = ins[idx[len(idx) // 4]:idx[-1]]
    count = lambda op: sum(1 for x in seg if x.startswith(op))
    return {"length": len(seg), "R2UR": count("R2UR"), "BRA.DIV": count("BRA.DIV"), "WARPSYNC": count("WARPSYNC")}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 bench/sass_loop.py KERNELS.sass")
    with open(sys.argv[1]) as f:
        funcs = kernels(f)
    for name, ins in funcs.items():
        c = loop_counts(ins)
        if c is None:
            continue
        print(f"{label(name):24s} instructions {len(ins):5d}  loop {c['length']:5d}  R2UR {c['R2UR']:3d}  "
              f"BRA.DIV {c['BRA.DIV']:2d}  WARPSYNC {c['WARPSYNC']:2d}")


if __name__ == "__main__":
    main()
