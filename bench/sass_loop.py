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


def kernels(path):
    funcs, cur = {}, None
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,6}\*/\s+(.*?);", line)
        if m and cur:
            funcs[cur].append(re.sub(r"^@!?U?P\w+\s+", "", m.group(1).strip()))
    return funcs


def label(name):
    dt = "bf16" if "bfloat16" in name else "e4m3" if "e4m3" in name else "fp16"
    tile = re.search(r"TileE(\d)", name)
    extra = " gather" if "Gather" in name else " f16compute" if "F16Compute" in name else ""
    return f"{dt} Tile {tile.group(1) if tile else '?'}{extra}"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 bench/sass_loop.py KERNELS.sass")
    for name, ins in kernels(sys.argv[1]).items():
        idx = [i for i, x in enumerate(ins) if re.match(r"[HQ]GMMA", x)]
        if len(idx) < 16:
            continue
        seg = ins[idx[len(idx) // 4]:idx[-1]]
        count = lambda op: sum(1 for x in seg if x.startswith(op))
        print(f"{label(name):24s} instructions {len(ins):5d}  loop {len(seg):5d}  R2UR {count('R2UR'):3d}  "
              f"BRA.DIV {count('BRA.DIV'):2d}  WARPSYNC {count('WARPSYNC'):2d}")


if __name__ == "__main__":
    main()
