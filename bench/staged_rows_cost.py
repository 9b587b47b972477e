#!/usr/bin/env python3
"""The price of unaligned rows on the GPU (cuda/stage_rows.h): fa4 on head dims whose rows break
the kernels' 16-byte rules (59, 111, 250; a packed-qkv slice) against the aligned head dim the
kernels pad them to (64, 128, 256) on the same shapes, same process, interleaved rounds (the
timer and flush of bench/peers.py). TFLOP/s are counted at the caller's head dim for both.

    python3 bench/staged_rows_cost.py --lib build-device/lib/libfa4.so [--out DIR]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import Fa4, Timer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    fa4 = Fa4(os.path.abspath(a.lib))
    timer = Timer(a.reps)
    rows = []
    torch.manual_seed(0)
    # (odd D, aligned D, B, S, causal) at B * S = 16k tokens, H * D ~ 2048
    cases = [(59, 64, 4, 4096, False), (111, 128, 4, 4096, False), (111, 128, 4, 4096, True), (250, 256, 2, 8192, False),
             (59, 64, 64, 256, False)]
    for d_odd, d_al, B, S, causal in cases:
        H = max(1, 2048 // d_al)
        res = {}
        fns = {}
        for name, d in (("odd", d_odd), ("aligned", d_al)):
            q, k, v = (torch.randn(B, S, H, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            o = torch.empty_like(q)
            p = fa4.params(q, k, v, o, causal=causal)
            fns[name] = (lambda p=p: fa4.call(p))
            res[name + "_tensors"] = (q, k, v, o)
        # the odd dim as a view of aligned rows (the last dim sliced from d_al: row strides stay
        # 16-byte multiples, nothing is staged): the padded-dim kernels' own cost, apart from the copies
        qa, ka, va, oa = (torch.randn(B, S, H, d_al, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        pv = fa4.params(qa[..., :d_odd], ka[..., :d_odd], va[..., :d_odd], oa[..., :d_odd], causal=causal)
        fns["odd_aligned_rows"] = lambda pv=pv: fa4.call(pv)
        # a packed qkv [B, S, 3, H, D] at the odd dim: q / k / v are slices
        qkv = torch.randn(B, S, 3, H, d_odd, device="cuda", dtype=torch.bfloat16)
        o = torch.empty(B, S, H, d_odd, device="cuda", dtype=torch.bfloat16)
        pq = fa4.params(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], o, causal=causal)
        fns["odd_qkv_slices"] = lambda pq=pq: fa4.call(pq)
        ms = timer.compare_ms(fns)
        flops = 4 * B * H * S * S * d_odd * (0.5 if causal else 1.0)
        r = dict(d_odd=d_odd, d_aligned=d_al, b=B, s=S, h=H, causal=causal,
                 **{k: (flops / (v * 1e-3) / 1e12 if v else None) for k, v in ms.items()})
        if r.get("odd") is None or r.get("aligned") is None:
            print(f"D {d_odd}: a run failed (see above)", flush=True)
            rows.append(r)
            continue
        r["odd_over_aligned"] = ms["aligned"] / ms["odd"]
        rows.append(r)
        print(f"D {d_odd} vs {d_al}, B {B} S {S} H {H} causal {int(causal)}: odd {r['odd']:.0f}, aligned "
              f"{r['aligned']:.0f}, odd dim on aligned rows (not staged) {r['odd_aligned_rows'] or 0:.0f}, qkv slices {r['odd_qkv_slices'] or 0:.0f} TFLOP/s (odd / aligned {r['odd_over_aligned']:.3f})",
              flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "staged_rows_cost.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
