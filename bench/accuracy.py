#!/usr/bin/env python3
"""Accuracy of fa4 and its peers against an fp64 reference, on the same inputs (DESIGN.md §4).

For each case (dtype, D, S, causal, input distribution) the inputs are drawn once in the 16-bit
dtype; the reference is softmax(scale * Q K^T + mask) V computed in float64 from those very
16-bit values; every implementation's output is compared with it: max-abs error and rel-L2
(||O - O_ref|| / ||O_ref||). Distributions:
  normal    N(0, 1) q, k, v
  uniform   U(-1, 1)
  outliers  normal, with every 16th query row and key row scaled by 8 (scores of ~60: the
            running max moves by far more than the rescale threshold, many rescales)

Implementations: fa4 (its cuda backend through the C ABI, bench/peers.py's Fa4; every kernel the
planner picks, and with FA4_CUDA_KERNEL=sm80 / sm90 set before the run, that kernel), and where
installed FA3, FA4 (CuTe DSL), PyTorch SDPA cuDNN and flash (FA2).

  python3 bench/accuracy.py --lib build-device/lib/libfa4.so --out DIR [--quick]
  python3 bench/accuracy.py --cpu-smoke        # the harness itself on the CPU (fa4's cpu backend
                                               # through the Python package; no peers)
Writes DIR/accuracy.json and DIR/accuracy.md; prints the table.
"""
import argparse
import json
import math
import os
import sys

import torch

CASES_FULL = [(dt, d, s, c, dist) for dt in ("bfloat16", "float16") for d in (64, 128, 256) for s in (2048,)
              for c in (False, True) for dist in ("normal", "uniform", "outliers")]
CASES_QUICK = [(dt, 128, 2048, c, dist) for dt in ("bfloat16", "float16") for c in (False, True)
               for dist in ("normal", "outliers")]


def make_inputs(dtype, d, s, dist, device, b=2, h=4, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    shape = (b, s, h, d)
    if dist == "uniform":
        q, k, v = (torch.rand(shape, generator=g) * 2 - 1 for _ in range(3))
    else:
        q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
        if dist == "outliers":
            q[:, ::16] *= 8
            k[:, ::16] *= 8
    dt = getattr(torch, dtype)
    return tuple(x.to(dt).to(device) for x in (q, k, v))


def reference(q, k, v, causal):
    """float64 softmax(QK^T * scale + mask) V, BSHD in and out, bottom-right causal (Sq == Sk)."""
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))  # B H S D
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = torch.empty_like(qd)
    for i0 in range(0, qd.shape[2], 512):  # row blocks bound the fp64 score matrix
        sc = torch.matmul(qd[:, :, i0:i0 + 512], kd.transpose(-1, -2)) * scale
        if causal:
            i = torch.arange(i0, min(i0 + 512, qd.shape[2]), device=q.device)[:, None]
            j = torch.arange(kd.shape[2], device=q.device)[None, :]
            sc = sc.masked_fill(j > i + (kd.shape[2] - qd.shape[2]), float("-inf"))
        out[:, :, i0:i0 + 512] = torch.matmul(torch.softmax(sc, dim=-1), vd)
    return out.transpose(1, 2)


def errors(o, ref):
    diff = (o.double() - ref).abs()
    return {"max_abs": diff.max().item(), "rel_l2": (torch.linalg.vector_norm(o.double() - ref) /
                                                     torch.linalg.vector_norm(ref)).item()}


def implementations(args):
    """name -> fn(q, k, v, causal) returning BSHD out."""
    impls = {}
    if args.cpu_smoke:
        import fa4  # the installed Python package
        impls["fa4_cpu"] = lambda q, k, v, c: fa4.attention(q, k, v, causal=c, backend="cpu")
        return impls
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import peers
    lib = peers.Fa4(os.path.abspath(args.lib))

    def run_fa4(q, k, v, c):
        out = torch.full_like(q, float("nan"))  # poisoned: an unwritten element shows as NaN
        lib.call(lib.params(q, k, v, out, causal=c))
        return out
    impls["fa4"] = run_fa4
    from torch.nn.attention import SDPBackend
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        impls[name] = (lambda be: lambda q, k, v, c: peers.sdpa(q.transpose(1, 2), k.transpose(1, 2),
                                                                v.transpose(1, 2), c, be).transpose(1, 2))(be)
    if peers.FA3 is not None:
        impls["fa3"] = lambda q, k, v, c: peers.first(peers.FA3.flash_attn_func(q, k, v, causal=c))
    if peers.FA4_CUTE is not None:
        impls["fa4_cute"] = lambda q, k, v, c: peers.first(peers.FA4_CUTE(q, k, v, causal=c))
    return impls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-device/lib/libfa4.so")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args()
    device = "cpu" if args.cpu_smoke else "cuda"
    cases = CASES_QUICK if args.quick or args.cpu_smoke else CASES_FULL
    if args.cpu_smoke:
        cases = [(dt, 64, 256, c, dist) for dt, _, _, c, dist in cases]
    impls = implementations(args)
    rows = []
    for n, (dtype, d, s, causal, dist) in enumerate(cases):
        q, k, v = make_inputs(dtype, d, s, dist, device, seed=n)
        ref = reference(q, k, v, causal)
        row = {"dtype": dtype, "d": d, "s": s, "causal": causal, "dist": dist}
        for name, fn in impls.items():
            try:
                row[name] = errors(fn(q, k, v, causal), ref)
            except Exception as e:  # a peer that cannot run the case
                row[name] = None
                print(f"  {name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
        rows.append(row)
        print(json.dumps(row), flush=True)
    names = list(impls)
    md = ["| dtype | D | S | causal | dist | " + " | ".join(f"{n} max-abs / rel-L2" for n in names) + " |",
          "|---|---|---|---|---|" + "---|" * len(names)]
    for r in rows:
        cells = [f"{r[n]['max_abs']:.2e} / {r[n]['rel_l2']:.2e}" if r.get(n) else "-" for n in names]
        md.append(f"| {r['dtype']} | {r['d']} | {r['s']} | {int(r['causal'])} | {r['dist']} | " + " | ".join(cells) + " |")
    text = "\n".join(md)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "accuracy.json"), "w") as f:
            json.dump({"commit": os.environ.get("FA4_COMMIT", "unknown"), "rows": rows}, f, indent=1)
        with open(os.path.join(args.out, "accuracy.md"), "w") as f:
            f.write(text + "\n")
    # Every implementation must have run every case it claims, with finite errors.
    bad = [r for r in rows for n in names if r.get(n) and not math.isfinite(r[n]["max_abs"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
