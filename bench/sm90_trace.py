#!/usr/bin/env python3
"""Where an sm90 CTA's time goes, tile by tile: the timeline of a FA4_SM90_TRACE=1 libfa4.

The profilers say which instructions stall; this says how each consumer's time splits between
waiting for its tile's Q, the mainloop, the epilogue and the hand-off to the next tile, how the
mainloop's time grows with the tile's key tiles (a fit: fixed cost + cost per key tile), and how
long the last CTAs run after the mean one is done (the schedule's tail). Those decide the short
causal shapes, where a CTA's tiles are few and light.

  bash bench/stage_sm90_variant.sh trace -DFA4_SM90_TRACE=1       # build-device/lib/libfa4_trace.so
  device: python3 bench/sm90_trace.py --lib build-device/lib/libfa4_trace.so --out $OUT \\
              --shapes "128 2048 1" "128 8192 0"                   # D S causal (bf16, B*S = 16384, H*D = 2048)
              --decode "1 1 32 8 8192" "4 1 32 8 8192"             # B Sq Hq Hkv kv (D 128, a full cache)

The library writes the last launch's records to $FA4_SM90_TRACE_FILE (src/cuda/sm90/fwd_trace.cuh
has the layout); this script sets it, calls the kernel a few times and reads the last one.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import Fa4  # noqa: E402

MAGIC = 0x66613474726163


def read_trace(path):
    raw = np.fromfile(path, dtype=np.int64)
    h = raw[:16]
    assert h[0] == MAGIC, "not an fa4 sm90 trace"
    meta = dict(grid=int(h[1]), consumers=int(h[2]), block_m=int(h[3]), block_n=int(h[4]), dqk=int(h[5]),
                dv=int(h[6]), max_roles=int(h[7]), max_tiles=int(h[8]), slots=int(h[9]), header=int(h[10]),
                stride=int(h[11]), kernel_ns=int(h[12]))
    recs = raw[16:].reshape(meta["grid"], meta["stride"])
    return meta, recs


def analyze(meta, recs):
    """Per-consumer time shares (ns), the mainloop fit and the CTA tail."""
    g, nc, mt, sl, hd = meta["grid"], meta["consumers"], meta["max_tiles"], meta["slots"], meta["header"]
    gt0 = recs[:, 0].astype(np.float64)
    clk0 = recs[:, 1].astype(np.float64)
    roles = 1 + nc
    clk_end = recs[:, 4:4 + roles].astype(np.float64)
    gt_end = recs[:, 8:8 + roles].astype(np.float64)
    t0 = gt0.min()
    cta_end = gt_end.max(axis=1) - t0  # ns after the first CTA started
    span = cta_end.max()
    # clock rate per CTA (cycles per ns), from its longest-lived role
    ghz = (clk_end.max(axis=1) - clk0) / np.maximum(gt_end.max(axis=1) - gt0, 1.0)
    shares = dict(start=0.0, wait_q=0.0, mainloop=0.0, epilogue=0.0, handoff=0.0, end_idle=0.0)
    # with the finer events (kEvents = 6): the hand-off and the Q wait split into their parts
    fine = sl - 1 >= 6
    # tile_init: walk_start -> tile_start, the wait for the producer's published TileWork
    parts = dict(to_loop_top=0.0, tile_init=0.0, consumer_init=0.0, q_barrier=0.0)
    q_lat, q_empty_wait, q_late = [], [], []
    ns_list, main_list, epi_list = [], [], []
    tiles_per_cta = []
    cta_keys = np.zeros(g)  # key tiles each CTA ran (consumer 0's tiles)
    for b in range(g):
        f = ghz[b]
        for c in range(nc):
            r = 1 + c
            ev = recs[b, hd + r * mt * sl: hd + (r + 1) * mt * sl].reshape(mt, sl).astype(np.float64)
            used = ev[:, 0] > 0
            k = int(used.sum())
            if c == 0:
                tiles_per_cta.append(k)
                cta_keys[b] = ev[:k, sl - 1].sum()
            start_off = (gt0[b] - t0)  # this CTA started this late (ns)
            if k == 0:
                shares["end_idle"] += span - start_off
                continue
            e = ev[:k]
            shares["start"] += start_off + (e[0, 0] - clk0[b]) / f
            shares["wait_q"] += ((e[:, 1] - e[:, 0]) / f).sum()
            main = (e[:, 2] - e[:, 1]) / f
            epi = (e[:, 3] - e[:, 2]) / f
            shares["mainloop"] += main.sum()
            shares["epilogue"] += epi.sum()
            shares["handoff"] += ((e[1:, 0] - e[:-1, 3]) / f).sum()
            if fine:
                parts["to_loop_top"] += ((e[1:, 4] - e[:-1, 3]) / f).sum()
                parts["tile_init"] += ((e[:, 0] - e[:, 4]) / f).sum()
                parts["consumer_init"] += ((e[:, 5] - e[:, 0]) / f).sum()
                parts["q_barrier"] += ((e[:, 1] - e[:, 5]) / f).sum()
                if c == 0:  # the producer's Q against consumer 0's wait for it (one SM's clock)
                    pe = recs[b, hd: hd + mt * sl].reshape(mt, sl).astype(np.float64)[:k]
                    q_empty_wait += list((pe[:, 1] - pe[:, 5]) / f)   # producer: q_empty wait + issue
                    q_lat += list((e[:, 1] - pe[:, 1]) / f)           # Q issued -> consumer saw it land
                    q_late += list((pe[:, 1] - e[:, 5]) / f)          # Q issued after the consumer was ready
            end_ns = start_off + (clk_end[b, r] - clk0[b]) / f
            shares["handoff"] += (clk_end[b, r] - e[-1, 3]) / f
            shares["end_idle"] += span - end_ns
            ns_list += list(e[:, sl - 1])
            main_list += list(main)
            epi_list += list(epi)
    total = span * g * nc
    out = dict(meta, span_ns=span, clock_ghz=float(np.median(ghz)),
               tiles_per_cta=[int(min(tiles_per_cta)), float(np.mean(tiles_per_cta)), int(max(tiles_per_cta))],
               cta_end_us=[float(cta_end.min() / 1e3), float(cta_end.mean() / 1e3), float(span / 1e3)],
               tail_share=float((span - cta_end.mean()) / span),
               shares={k: v / total for k, v in shares.items()})
    # The tail: how much of the CTAs' end spread their work explains. A fit of each CTA's end on
    # (its key tiles, its tiles); the residual spread is what the work counts do not explain
    # (SM clocks, L2 / DRAM contention, start delays).
    tiles_arr = np.array(tiles_per_cta, dtype=np.float64)
    A = np.stack([cta_keys, tiles_arr, np.ones(g)], axis=1)
    coef, *_ = np.linalg.lstsq(A, cta_end, rcond=None)
    resid = cta_end - A @ coef
    out["cta_end_fit"] = dict(ns_per_key_tile=float(coef[0]), ns_per_tile=float(coef[1]), ns_fixed=float(coef[2]),
                              resid_std_us=float(resid.std() / 1e3))
    out["cta_key_tiles"] = [float(cta_keys.min()), float(cta_keys.mean()), float(cta_keys.max())]
    slowest = np.argsort(cta_end)[-3:]
    out["slowest_ctas"] = [dict(cta=int(i), sm=int(recs[i, 2]), end_us=float(cta_end[i] / 1e3), key_tiles=float(cta_keys[i]),
                                tiles=int(tiles_arr[i]), ghz=float(ghz[i])) for i in slowest]
    out["ghz_min_max"] = [float(ghz.min()), float(ghz.max())]
    n = np.array(ns_list)
    m = np.array(main_list)
    if len(n) > 1 and n.std() > 0:
        b1, a1 = np.polyfit(n, m, 1)
    else:
        b1, a1 = (m.mean() / max(n.mean(), 1)), 0.0
    out["mainloop_fit_ns"] = dict(fixed=float(a1), per_key_tile=float(b1))
    if fine:
        out["parts"] = {k: v / total for k, v in parts.items()}
        out["q_ns"] = dict(producer_q_wait_issue=float(np.mean(q_empty_wait)), issue_to_landed=float(np.mean(q_lat)),
                           issued_after_consumer_ready=float(np.mean(q_late)))
    out["epilogue_ns"] = float(np.mean(epi_list)) if epi_list else None
    out["key_tiles_mean"] = float(n.mean()) if len(n) else 0.0
    # The consumers' time if every key tile cost only the fit's slope, nothing fixed, no tail:
    out["slope_only_share"] = float(n.sum() * b1 / total) if len(n) else 0.0
    return out


def report(r, title):
    sh = r["shares"]
    fit = r["mainloop_fit_ns"]
    print(f"{title}, {r['grid']} CTAs x {r['consumers']} consumers, tiles/CTA {r['tiles_per_cta']}, "
          f"key tiles/tile {r['key_tiles_mean']:.1f}, clock {r['clock_ghz']:.2f} GHz", flush=True)
    print("   consumer time: " + "  ".join(f"{k} {100 * v:.1f}%" for k, v in sh.items()) +
          f"  | mainloop = {fit['fixed']:.0f} ns + {fit['per_key_tile']:.0f} ns/key tile, epilogue {r['epilogue_ns']:.0f} ns"
          f" | slope-only {100 * r['slope_only_share']:.1f}%  | CTA end min/mean/max us {r['cta_end_us'][0]:.1f}/"
          f"{r['cta_end_us'][1]:.1f}/{r['cta_end_us'][2]:.1f}", flush=True)
    if "parts" in r:
        print("   hand-off / Q wait parts: " + "  ".join(f"{k} {100 * v:.1f}%" for k, v in r["parts"].items()) +
              "  | Q (ns): " + "  ".join(f"{k} {v:.0f}" for k, v in r["q_ns"].items()), flush=True)
    cf = r["cta_end_fit"]
    print(f"   CTA key tiles min/mean/max {r['cta_key_tiles'][0]:.0f}/{r['cta_key_tiles'][1]:.1f}/{r['cta_key_tiles'][2]:.0f}"
          f"  end fit {cf['ns_per_key_tile']:.0f} ns/key tile + {cf['ns_per_tile']:.0f} ns/tile + {cf['ns_fixed']:.0f} ns,"
          f" residual sd {cf['resid_std_us']:.2f} us  clock {r['ghz_min_max'][0]:.2f}-{r['ghz_min_max'][1]:.2f} GHz"
          f"  slowest {[(s['sm'], round(s['end_us'], 1), s['key_tiles'], s['tiles']) for s in r['slowest_ctas']]}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--shapes", nargs="*", default=["128 2048 1", "128 8192 0"], help='"D S causal" each')
    ap.add_argument("--decode", nargs="*", default=[], help='"B Sq Hq Hkv kv" each: a decode call on a full '
                                                            'contiguous KV cache, D 128 (Sq > 1: causal)')
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)  # the library does not create the trace file's folder
    fa4 = Fa4(args.lib)
    dt = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    trace_file = os.path.join(args.out, "sm90_trace.bin")
    os.environ["FA4_SM90_TRACE_FILE"] = trace_file
    results = []
    def traced(p):
        for _ in range(4):
            fa4.call(p)
        torch.cuda.synchronize()
        meta, recs = read_trace(trace_file)
        return analyze(meta, recs)

    for spec in args.shapes:
        d, s, causal = (int(x) for x in spec.split())
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(3))
        out = torch.empty_like(q)
        r = traced(fa4.params(q, k, v, out, causal=bool(causal)))
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        r.update(d=d, s=s, causal=causal, b=b, h=h, tflops_traced=flops / r["kernel_ns"] / 1e3)
        results.append(r)
        report(r, f"D {d} S {s} causal {causal}: {r['kernel_ns'] / 1e3:.1f} us ({r['tflops_traced']:.0f} TFLOP/s traced)")
        del q, k, v, out
    for spec in args.decode:
        b, sq, hq, hkv, kv = (int(x) for x in spec.split())
        d = 128
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
        kc, vc = (torch.randn(b, kv, hkv, d, device="cuda", dtype=dt) for _ in range(2))
        out = torch.empty_like(q)
        seqlens = torch.full((b,), kv, device="cuda", dtype=torch.int32)
        r = traced(fa4.params(q, kc, vc, out, causal=sq > 1, cache_seqlens=seqlens))
        gbs = 2 * b * kv * hkv * d * q.element_size() / r["kernel_ns"]
        r.update(d=d, b=b, sq=sq, hq=hq, hkv=hkv, kv_len=kv, kernel_gbs=gbs)
        results.append(r)
        report(r, f"decode B {b} Sq {sq} {hq}/{hkv} kv {kv}: kernel {r['kernel_ns'] / 1e3:.1f} us ({gbs:.0f} GB/s of K+V)")
        del q, kc, vc, out
    with open(os.path.join(args.out, "sm90_trace.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
