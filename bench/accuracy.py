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

fp8 section (--fp8 on, the default; cheap: the same small shapes), issue 15 item 3. The inputs
above are drawn in bf16 and quantized to e4m3 with one factor per (batch, kv head), amax / 448
(bench/peers.py quantize_e4m3: FA3's descale convention); the reference is computed in float64
from the same e4m3 values times their factors, so it measures the kernels, not the quantization:
  e4m3      q / k / v all e4m3 with q / k / v_descale [B, Hkv], out bf16: fa4 against FA3's fp8
            path (DESIGN.md §4: rel-L2 <= 5e-2, cosine >= 0.999; the goal: fa4 no worse than FA3),
            and the LSE of both against the fp64 reference's (max abs): on Hopper's fp8 wgmma the
            scores carry the accumulator's ~13-bit sums, which O divides out and the LSE keeps
  fp8 KV    bf16 or fp16 q, e4m3 k / v with k / v_descale per (batch, kv head) [B, Hkv] or per
            token [B, S, Hkv]; Sq = S and Sq = 1 (decode: the last query row); fa4 only (FA3
            takes no mixed dtypes); bounds: q's 16-bit ones (DESIGN.md §4)

  python3 bench/accuracy.py --lib build-device/lib/libfa4.so --out DIR [--quick] [--fp8 on|off|only]
  python3 bench/accuracy.py --cpu-smoke        # the harness itself on the CPU (fa4's cpu backend
                                               # through the Python package; no peers)
Writes DIR/accuracy.json ("rows", "fp8_rows") and DIR/accuracy.md; prints the tables.
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
# fp8: (q dtype: "e4m3" = all three e4m3, else the 16-bit q of an fp8 KV cache; factors; D; S; Sq;
# causal; dist). Sq = 1 is the last query row (decode: causal sees every key).
FP8_DISTS = ("normal", "uniform", "outliers")
CASES_FP8_FULL = ([("e4m3", "per-head", d, 2048, 2048, c, dist) for d in (64, 128, 256) for c in (False, True)
                   for dist in FP8_DISTS] +
                  [(dt, sc, 128, 2048, sq, sq > 1, dist) for dt in ("bfloat16", "float16")
                   for sc in ("per-head", "per-token") for sq in (2048, 1) for dist in FP8_DISTS])
CASES_FP8_QUICK = ([("e4m3", "per-head", 128, 2048, 2048, c, dist) for c in (False, True) for dist in ("normal", "outliers")] +
                   [("bfloat16", sc, 128, 2048, sq, sq > 1, "outliers") for sc in ("per-head", "per-token") for sq in (2048, 1)])
# DESIGN.md §4 bounds: (rel-L2, max abs or None, cosine or None) by q's dtype
BOUNDS = {"e4m3": (5e-2, None, 0.999), "bfloat16": (1e-2, 5e-2, None), "float16": (2e-3, 1e-2, None)}


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


def reference(q, k, v, causal, with_lse=False):
    """float64 softmax(QK^T * scale + mask) V, BSHD in and out, bottom-right causal (Sq == Sk);
    with_lse: (out, lse [B, H, Sq], natural log of the row's sum of exp(scale q.k))."""
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))  # B H S D
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = torch.empty_like(qd)
    lse = torch.empty(qd.shape[:3], dtype=torch.float64, device=q.device)
    for i0 in range(0, qd.shape[2], 512):  # row blocks bound the fp64 score matrix
        sc = torch.matmul(qd[:, :, i0:i0 + 512], kd.transpose(-1, -2)) * scale
        if causal:
            i = torch.arange(i0, min(i0 + 512, qd.shape[2]), device=q.device)[:, None]
            j = torch.arange(kd.shape[2], device=q.device)[None, :]
            sc = sc.masked_fill(j > i + (kd.shape[2] - qd.shape[2]), float("-inf"))
        out[:, :, i0:i0 + 512] = torch.matmul(torch.softmax(sc, dim=-1), vd)
        lse[:, :, i0:i0 + 512] = torch.logsumexp(sc, dim=-1)
    return (out.transpose(1, 2), lse) if with_lse else out.transpose(1, 2)


def errors(o, ref):
    diff = (o.double() - ref).abs()
    return {"max_abs": diff.max().item(), "rel_l2": (torch.linalg.vector_norm(o.double() - ref) /
                                                     torch.linalg.vector_norm(ref)).item()}


def fp8_errors(o, ref):
    """errors() and the cosine of o and ref (DESIGN.md §4's fp8 criterion)."""
    e = errors(o, ref)
    od, rd = o.double().flatten(), ref.flatten()
    e["cos"] = (od @ rd / (torch.linalg.vector_norm(od) * torch.linalg.vector_norm(rd))).item()
    return e


def lse_error(lse, ref_lse):
    """Max abs error of an implementation's lse [B, H, Sq] against the reference's (rows with a
    finite reference; a non-finite lse there counts as inf), or None without an lse."""
    if lse is None:
        return None
    fin = torch.isfinite(ref_lse)
    d = (lse.double() - ref_lse)[fin].abs()
    return d.max().item() if d.numel() else 0.0


def within_bounds(dtype, e):
    rel, max_abs, cos = BOUNDS[dtype]
    return (e["rel_l2"] <= rel and (max_abs is None or e["max_abs"] <= max_abs) and
            (cos is None or e["cos"] >= cos))


def fp8_inputs(dtype, scales, d, s, sq, dist, device, seed):
    """(q, k, v, descale kwargs, fp64 reference inputs) of one fp8 case: make_inputs' draws (bf16
    for "e4m3", else q's dtype), k / v quantized (q too for "e4m3"), q cut to its last sq rows."""
    peers = _peers()
    q, k, v = make_inputs("bfloat16" if dtype == "e4m3" else dtype, d, s, dist, device, seed=seed)
    q = q[:, s - sq:]
    ds = {}
    (k, ds["k_descale"]), (v, ds["v_descale"]) = (peers.quantize_e4m3(x, scales == "per-token") for x in (k, v))
    if dtype == "e4m3":
        q, ds["q_descale"] = peers.quantize_e4m3(q)
        qd = peers.dequantize_e4m3(q, ds["q_descale"], torch.float64)
    else:
        qd = q
    exact = (qd, peers.dequantize_e4m3(k, ds["k_descale"], torch.float64),
             peers.dequantize_e4m3(v, ds["v_descale"], torch.float64))
    return q, k, v, ds, exact


def _peers():
    """bench/peers.py, imported on demand (--cpu-smoke's 16-bit cases run without it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    import peers
    return peers


def implementations(args):
    """name -> fn(q, k, v, causal) returning BSHD out."""
    impls = {}
    if args.cpu_smoke:
        import fa4  # the installed Python package
        impls["fa4_cpu"] = lambda q, k, v, c: fa4.attention(q, k, v, causal=c, backend="cpu")
        return impls
    peers = _peers()
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


def fa3_out_lse(fa3, q, k, v, **kw):
    """FA3's (out, softmax_lse [B, H, Sq]): newer flash_attn_func returns the lse only with
    return_attn_probs=True, older ones always (out, lse, ...); lse None if neither gives it."""
    try:
        r = fa3.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
    except TypeError:  # no such argument
        r = fa3.flash_attn_func(q, k, v, **kw)
    if isinstance(r, (tuple, list)):
        return r[0], (r[1] if len(r) > 1 and torch.is_tensor(r[1]) else None)
    return r, None


def fp8_implementations(args):
    """name -> fn(q, k, v, causal, descales) returning (BSHD out (bf16 for e4m3 q, else q's dtype),
    lse [B, H, Sq] or None), or None where the implementation does not take the inputs (FA3: no
    fp8 KV under 16-bit q)."""
    if args.cpu_smoke:
        import fa4
        return {"fa4_cpu": lambda q, k, v, c, ds: fa4.attention(q, k, v, causal=c, backend="cpu", return_lse=True,
                                                                **ds)}
    peers = _peers()
    lib = peers.Fa4(os.path.abspath(args.lib))

    def run_fa4(q, k, v, c, ds):
        out_dtype = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
        out = torch.full(q.shape[:-1] + v.shape[-1:], float("nan"), dtype=out_dtype, device=q.device)  # poisoned
        # lse [B, H, Sq] fp32, rows padded to 16 bytes (the cuda contract's row strides), poisoned
        b, sq, h = q.shape[:3]
        lse = torch.full((b, h, (sq + 3) // 4 * 4), float("nan"), dtype=torch.float32, device=q.device)[..., :sq]
        lib.call(lib.params(q, k, v, out, causal=c, lse=lse, **ds))
        return out, lse
    impls = {"fa4": run_fa4}
    if peers.FA3 is not None:
        impls["fa3"] = lambda q, k, v, c, ds: (fa3_out_lse(peers.FA3, q, k, v, causal=c, **ds)
                                               if q.dtype == torch.float8_e4m3fn else None)
    return impls


def run_fp8(args, device):
    """The fp8 rows: every case of CASES_FP8_* against its fp64 reference."""
    cases = CASES_FP8_QUICK if args.quick or args.cpu_smoke else CASES_FP8_FULL
    if args.cpu_smoke:
        cases = [(dt, sc, 64, 256, min(sq, 256), c, dist) for dt, sc, _, _, sq, c, dist in cases]
    impls = fp8_implementations(args)
    rows = []
    for n, (dtype, scales, d, s, sq, causal, dist) in enumerate(cases):
        q, k, v, ds, exact = fp8_inputs(dtype, scales, d, s, sq, dist, device, seed=1000 + n)
        ref, ref_lse = reference(*exact, causal, with_lse=True)
        row = {"dtype": dtype, "scales": scales, "d": d, "s": s, "sq": sq, "causal": causal, "dist": dist}
        for name, fn in impls.items():
            try:
                r = fn(q, k, v, causal, ds)
                row[name] = None if r is None else dict(fp8_errors(r[0], ref), lse_max_abs=lse_error(r[1], ref_lse))
            except Exception as e:  # a kernel that refuses the case
                row[name] = None
                print(f"  {name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
        fa4_name = next(iter(impls))
        row["fa4_within_bounds"] = None if row[fa4_name] is None else within_bounds(dtype, row[fa4_name])
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows, list(impls)


def _ratio(a, b, fmt=".3f"):
    """a / b formatted, or "-" where either is missing or b is 0."""
    return f"{a / b:{fmt}}" if a is not None and b else "-"


def fp8_markdown(rows, names):
    md = ["| q | k / v factors | D | S | Sq | causal | dist | " +
          " | ".join(f"{n} max-abs / rel-L2 / cos" for n in names) + " | fa4 / FA3 rel-L2 | " +
          " | ".join(f"{n} LSE max-abs" for n in names) + " | fa4 / FA3 LSE | fa4 within §4 |",
          "|---|---|---|---|---|---|---|" + "---|" * (2 * len(names)) + "---|---|---|"]
    for r in rows:
        cells = [f"{r[n]['max_abs']:.2e} / {r[n]['rel_l2']:.2e} / {r[n]['cos']:.6f}" if r.get(n) else "-" for n in names]
        lse = [f"{r[n]['lse_max_abs']:.2e}" if r.get(n) and r[n].get("lse_max_abs") is not None else "-" for n in names]
        fa4, fa3 = r.get("fa4"), r.get("fa3")
        ratio = _ratio(fa4 and fa4["rel_l2"], fa3 and fa3["rel_l2"])
        lse_ratio = _ratio(fa4 and fa4.get("lse_max_abs"), fa3 and fa3.get("lse_max_abs"))
        ok = {None: "-", True: "yes", False: "**no**"}[r["fa4_within_bounds"]]
        md.append(f"| {r['dtype'] if r['dtype'] == 'e4m3' else r['dtype'] + ' + e4m3 KV'} | {r['scales']} | {r['d']} | "
                  f"{r['s']} | {r['sq']} | {int(r['causal'])} | {r['dist']} | " + " | ".join(cells) + f" | {ratio} | " +
                  " | ".join(lse) + f" | {lse_ratio} | {ok} |")
    both = [r for r in rows if r.get("fa4") and r.get("fa3")]
    lse_both = [r for r in both if r["fa4"].get("lse_max_abs") is not None and r["fa3"].get("lse_max_abs") is not None]
    checked = [r for r in rows if r["fa4_within_bounds"] is not None]
    md += ["", f"fa4 within DESIGN.md §4 bounds: {sum(r['fa4_within_bounds'] for r in checked)} / {len(checked)} rows; "
               f"fa4 rel-L2 <= FA3's: {sum(r['fa4']['rel_l2'] <= r['fa3']['rel_l2'] for r in both)} / {len(both)} rows; "
               f"fa4 LSE max-abs <= FA3's: "
               f"{sum(r['fa4']['lse_max_abs'] <= r['fa3']['lse_max_abs'] for r in lse_both)} / {len(lse_both)} rows"]
    return md


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-device/lib/libfa4.so")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu-smoke", action="store_true")
    ap.add_argument("--fp8", choices=("on", "off", "only"), default="on",
                    help="the fp8 section (e4m3 q / k / v against FA3's fp8, fp8 KV caches): with the 16-bit cases, "
                         "without it, or alone")
    args = ap.parse_args()
    device = "cpu" if args.cpu_smoke else "cuda"
    cases = CASES_QUICK if args.quick or args.cpu_smoke else CASES_FULL
    if args.cpu_smoke:
        cases = [(dt, 64, 256, c, dist) for dt, _, _, c, dist in cases]
    if args.fp8 == "only":
        cases = []
    impls = implementations(args) if cases else {}
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
    md = []
    if rows:
        md = ["| dtype | D | S | causal | dist | " + " | ".join(f"{n} max-abs / rel-L2" for n in names) + " |",
              "|---|---|---|---|---|" + "---|" * len(names)]
        for r in rows:
            cells = [f"{r[n]['max_abs']:.2e} / {r[n]['rel_l2']:.2e}" if r.get(n) else "-" for n in names]
            md.append(f"| {r['dtype']} | {r['d']} | {r['s']} | {int(r['causal'])} | {r['dist']} | " + " | ".join(cells) + " |")
    fp8_rows, fp8_names = run_fp8(args, device) if args.fp8 != "off" else ([], [])
    if fp8_rows:
        md += ([""] if md else []) + ["fp8 (reference: float64 on the e4m3 values times their factors)", ""]
        md += fp8_markdown(fp8_rows, fp8_names)
    text = "\n".join(md)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "accuracy.json"), "w") as f:
            js = {"commit": os.environ.get("FA4_COMMIT", "unknown"), "rows": rows}
            if args.fp8 != "off":
                js["fp8_rows"] = fp8_rows
            json.dump(js, f, indent=1)
        with open(os.path.join(args.out, "accuracy.md"), "w") as f:
            f.write(text + "\n")
    # Every implementation must have run every case it claims, with finite errors (its lse too).
    bad = [r for rs, ns in ((rows, names), (fp8_rows, fp8_names)) for r in rs for n in ns
           if r.get(n) and (not math.isfinite(r[n]["max_abs"]) or
                            (r[n].get("lse_max_abs") is not None and not math.isfinite(r[n]["lse_max_abs"])))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
