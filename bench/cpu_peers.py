#!/usr/bin/env python3
"""fa4's cpu backend against PyTorch's CPU attention, in one process, on the same tensors.

fa4 is called through its C ABI (libfa4.so via ctypes) on the torch tensors' data pointers
(BHSD tensors passed as strided BSHD views: no copies); the peer is
torch.nn.functional.scaled_dot_product_attention on CPU (its flash-attention CPU kernel for
these inputs). Both run with the same thread count (torch.get_num_threads(), or --threads).
Calls are interleaved: every round runs each implementation once, in a freshly shuffled order,
and the median wall time per implementation is reported (DESIGN.md §5). A torch bf16 matmul
(--gemm N, N^3, oneDNN: AMX on CPUs that have it) is timed before and after the attention cases,
interleaved the same way, as the machine's matrix-unit ceiling; the decode cases are set
against a streaming read of a large tensor (torch fp32 sum of 2 GB) as the memory-bandwidth ceiling,
timed once before the decode shapes and again inside every decode shape's interleaved rounds (the
"same rounds" columns: on a VM whose memory bandwidth moves with its host's load, only that ratio
is taken at one moment).

Accuracy (prefill, S <= --acc-max-s): rel-L2 and max-abs of fa4 and of torch against an fp64
evaluation of the same inputs. --acc-seeds N: accuracy only, N seeds per shape, the distribution
(median [min, max]) of each error for fa4, torch (and --base-lib), the seeds where fa4's is above
torch's, and for 16-bit outputs the error beyond one rounding of the fp64 result to the output
dtype (excess_rel_l2; miss = the fraction of elements that differ from that rounding).

Usage (torch from PyPI; a CUDA wheel works on a CPU-only machine given its CUDA libraries):
  python3 bench/cpu_peers.py --lib build-cpu/libfa4.so [--quick | --full] [--threads N]
         [--json FILE] [--isa amx|avx512|avx2|generic] [--base-lib OLD/libfa4.so]
--base-lib times a second build in the same interleaved rounds (before / after on a machine
whose rate drifts: only ratios inside one run mean anything).
FLOPs = 4 B H Sq Sk D, halved for causal; decode: GB/s of K + V bytes read.
"""

import argparse
import ctypes
import datetime
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time

MAX_DIMS = 6


class Fa4Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("stride", ctypes.c_int64 * MAX_DIMS),
                ("device", ctypes.c_int32), ("device_index", ctypes.c_int32)]


class Fa4Params(ctypes.Structure):  # include/fa4/fa4_c.h
    _fields_ = [("q", Fa4Tensor), ("k", Fa4Tensor), ("v", Fa4Tensor), ("out", Fa4Tensor), ("lse", Fa4Tensor),
                ("scale", ctypes.c_float), ("softcap", ctypes.c_float), ("causal", ctypes.c_int32),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64), ("chunk_size", ctypes.c_int64),
                ("sinks", Fa4Tensor), ("q_descale", Fa4Tensor), ("k_descale", Fa4Tensor), ("v_descale", Fa4Tensor),
                ("cu_seqlens_q", Fa4Tensor), ("cu_seqlens_k", Fa4Tensor), ("seqused_k", Fa4Tensor),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64),
                ("cache_seqlens", Fa4Tensor), ("cache_batch_idx", Fa4Tensor), ("page_table", Fa4Tensor),
                ("k_new", Fa4Tensor), ("v_new", Fa4Tensor),
                ("num_splits", ctypes.c_int32), ("backend", ctypes.c_int32), ("num_threads", ctypes.c_int32),
                ("stream", ctypes.c_void_p), ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
                ("workspace_alloc", ctypes.c_void_p), ("workspace_free", ctypes.c_void_p), ("workspace_ctx", ctypes.c_void_p)]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-cpu/libfa4.so")
    ap.add_argument("--threads", type=int, default=0, help="0 = torch.get_num_threads()")
    ap.add_argument("--quick", action="store_true", help="S <= 2048, D = 128, fewer decode shapes")
    ap.add_argument("--full", action="store_true", help="every D at S = 8192 and every decode shape")
    ap.add_argument("--budget-s", type=float, default=1.5, help="timed seconds per implementation per shape")
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--gemm", type=int, default=4096)
    ap.add_argument("--acc-max-s", type=int, default=2048)
    ap.add_argument("--dtypes", default="bf16,f16,f32")
    ap.add_argument("--seqlens", default=None, help="prefill S values to keep, e.g. 512,2048 (default: all)")
    ap.add_argument("--head-dims", default=None, help="prefill D values to keep, e.g. 64,128 (default: all)")
    ap.add_argument("--causal", choices=("both", "yes", "no"), default="both", help="prefill masks to run")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--no-prefill", action="store_true")
    ap.add_argument("--isa", default=None, help="sets FA4_CPU_ISA before libfa4 loads")
    ap.add_argument("--json", default=None)
    ap.add_argument("--base-lib", default=None,
                    help="a second libfa4 (e.g. an older build) timed in the same rounds: adds fa4 / base columns")
    ap.add_argument("--acc-seeds", type=int, default=0,
                    help="accuracy only: N seeds per prefill shape (S <= --acc-max-s), error distributions of fa4 "
                         "(and --base-lib) and torch against fp64; no timing")
    ap.add_argument("--acc-dist", choices=("normal", "outlier"), default="normal",
                    help="--acc-seeds inputs: randn, or randn with 1%% of K rows x 8 (rescales, large logits)")
    return ap.parse_args()


args = parse_args()
if args.isa:
    os.environ["FA4_CPU_ISA"] = args.isa

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
FA4_DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int32: 4}


def view(t):
    v = Fa4Tensor()
    v.data = t.data_ptr()
    v.dtype = FA4_DT[t.dtype]
    v.ndim = t.dim()
    for i in range(t.dim()):
        v.shape[i] = t.shape[i]
        v.stride[i] = t.stride(i)
    v.device = 0
    v.device_index = 0
    return v


class Fa4:
    def __init__(self, path, threads):
        self.lib = ctypes.CDLL(path)
        self.lib.fa4_attention_forward.argtypes = [ctypes.POINTER(Fa4Params)]
        self.lib.fa4_last_error.restype = ctypes.c_char_p
        self.lib.fa4_params_init.argtypes = [ctypes.POINTER(Fa4Params)]
        self.threads = threads

    def params(self, q, k, v, out, causal):
        """q/k/v/out are torch BHSD tensors; fa4 gets their BSHD views (strides, no copy)."""
        p = Fa4Params()
        self.lib.fa4_params_init(ctypes.byref(p))
        p.q, p.k, p.v, p.out = (view(t.transpose(1, 2)) for t in (q, k, v, out))
        p.causal = 1 if causal else 0
        p.backend = 2  # cpu
        p.num_threads = self.threads
        p.num_splits = 0
        return p

    def call(self, p):
        if self.lib.fa4_attention_forward(ctypes.byref(p)) != 0:
            raise RuntimeError("fa4: " + self.lib.fa4_last_error().decode())


def interleaved(fns, reps):
    """fns: {name: callable}; one call each per round, shuffled order; returns {name: [s]}."""
    t = {n: [] for n in fns}
    order = list(fns)
    for _ in range(reps):
        random.shuffle(order)
        for n in order:
            t0 = time.perf_counter()
            fns[n]()
            t[n].append(time.perf_counter() - t0)
    return t


def reps_for(fns):
    """Warm up once each; reps so that each implementation gets about --budget-s."""
    worst = 0.0
    for f in fns.values():
        t0 = time.perf_counter()
        f()
        worst = max(worst, time.perf_counter() - t0)
    return max(args.min_reps, min(50, int(args.budget_s / max(worst, 1e-6))))


def fp64_refs(q, k, v, causal):
    """(b, h, O) of every query head in fp64 (GQA: kv head h * Hk // H; causal bottom-right)."""
    B, H, S, D = q.shape
    Hk = k.shape[1]
    for b in range(B):
        for h in range(H):
            qd, kd, vd = q[b, h].double(), k[b, h * Hk // H].double(), v[b, h * Hk // H].double()
            s = (qd @ kd.T) / math.sqrt(D)
            if causal:
                Sk = kd.shape[0]
                mask = torch.ones(S, Sk, dtype=torch.bool).tril(Sk - S)
                s = s.masked_fill(~mask, float("-inf"))
            yield b, h, torch.softmax(s, dim=-1) @ vd


def fp64_errors(q, k, v, causal, outs):
    """rel-L2 / max-abs of each output against fp64 attention, one head at a time."""
    num = {n: 0.0 for n in outs}
    mx = {n: 0.0 for n in outs}
    den = 0.0
    for b, h, ref in fp64_refs(q, k, v, causal):
        den += float((ref * ref).sum())
        for n, o in outs.items():
            d = o[b, h].double() - ref
            num[n] += float((d * d).sum())
            mx[n] = max(mx[n], float(d.abs().max()))
    return {n: (math.sqrt(num[n] / den), mx[n]) for n in outs}


def gemm_rate(n, reps=5):
    a = torch.randn(n, n, dtype=torch.bfloat16)
    b = torch.randn(n, n, dtype=torch.bfloat16)
    torch.matmul(a, b)
    t = interleaved({"gemm": lambda: torch.matmul(a, b)}, reps)["gemm"]
    return 2 * n ** 3 / statistics.median(t) / 1e9


STREAM_GB = 2.0


def stream_tensor():
    x = torch.rand(int(STREAM_GB * 1e9 / 4), dtype=torch.float32)
    x.sum()
    return x


def stream_gbs(x, reps=5):
    """A streaming read: torch's fp32 sum (vectorized, memory-bound) over a tensor far beyond L3."""
    t = interleaved({"read": lambda: x.sum()}, reps)["read"]
    return x.numel() * 4 / statistics.median(t) / 1e9


def keep(csv):
    return {int(x) for x in csv.split(",") if x}


def prefill_shapes():
    dts = [d for d in args.dtypes.split(",") if d]
    for dt in dts:
        for d in (64, 128, 256):
            for s in (512, 2048, 8192):
                if args.quick and (s > 2048 or d != 128):
                    continue
                if s == 8192 and not args.full and d != 128:
                    continue
                if (args.seqlens and s not in keep(args.seqlens)) or (args.head_dims and d not in keep(args.head_dims)):
                    continue
                for causal in {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]:
                    yield dict(dt=dt, B=1, H=16, S=s, D=d, causal=causal)


def decode_shapes():
    for b in (1, 4, 16):
        for kv in (4096, 16384, 65536):
            if args.quick and (kv > 16384 or b == 16):
                continue
            if not args.full and b == 16 and kv == 65536:
                continue
            yield dict(dt="bf16", B=b, Hq=32, Hkv=8, Sk=kv, D=128)


def rounded_like(ref, dt):
    """ref (fp64) rounded once to the output dtype and back: the best any implementation can return."""
    return ref.to(dt).double()


def acc_errors(q, k, v, causal, outs):
    """Per output: rel-L2 and max-abs against fp64 attention, and for 16-bit outputs the error beyond
    one output rounding: rel-L2 of (out - round(ref)) and the fraction of elements != round(ref)."""
    dt = next(iter(outs.values())).dtype
    acc = {n: dict(num=0.0, mx=0.0, ex=0.0, miss=0) for n in outs}
    den = 0.0
    cnt = 0
    for b, h, ref in fp64_refs(q, k, v, causal):
        den += float((ref * ref).sum())
        cnt += ref.numel()
        rr = rounded_like(ref, dt)
        for n, o in outs.items():
            od = o[b, h].double()
            d = od - ref
            a = acc[n]
            a["num"] += float((d * d).sum())
            a["mx"] = max(a["mx"], float(d.abs().max()))
            if dt != torch.float32:
                e = od - rr
                a["ex"] += float((e * e).sum())
                a["miss"] += int((e != 0).sum())
    out = {}
    for n, a in acc.items():
        r = dict(rel_l2=math.sqrt(a["num"] / den), max_abs=a["mx"])
        if dt != torch.float32:
            r.update(excess_rel_l2=math.sqrt(a["ex"] / den), miss=a["miss"] / cnt)
        out[n] = r
    return out


def accuracy_sweep(fa4, base):
    """--acc-seeds: the error distributions over seeds, per prefill shape (no timing)."""
    impls = ["fa4", "torch"] + (["base"] if base else [])
    print("| dtype | S | D | causal | seeds | metric | " + " | ".join(f"{n} median [min, max]" for n in impls) +
          " | fa4 / torch median | seeds fa4 > torch |" + (" fa4 / base median |" if base else ""))
    print("|---|---|---|---|---|---|" + "---|" * len(impls) + "---|---|" + ("---|" if base else ""), flush=True)
    rows = []
    for sh in prefill_shapes():
        if sh["S"] > args.acc_max_s:
            continue
        dt = DT[sh["dt"]]
        B, H, S, D = sh["B"], sh["H"], sh["S"], sh["D"]
        per = []
        for seed in range(args.acc_seeds):
            g = torch.Generator().manual_seed(1000003 * seed + 7919 * S + 131 * D + (1 if sh["causal"] else 0))
            q, k, v = (torch.randn(B, H, S, D, generator=g, dtype=torch.float32) for _ in range(3))
            if args.acc_dist == "outlier":
                sel = torch.rand(B, H, S, 1, generator=g) < 0.01
                k = torch.where(sel, k * 8, k)
            q, k, v = q.to(dt), k.to(dt), v.to(dt)
            outs = {}
            o = torch.empty(B, S, H, D, dtype=dt).transpose(1, 2)
            fa4.call(fa4.params(q, k, v, o, sh["causal"]))
            outs["fa4"] = o
            if base:
                ob = torch.empty(B, S, H, D, dtype=dt).transpose(1, 2)
                base.call(base.params(q, k, v, ob, sh["causal"]))
                outs["base"] = ob
            outs["torch"] = F.scaled_dot_product_attention(q, k, v, is_causal=sh["causal"])
            per.append(acc_errors(q, k, v, sh["causal"], outs))
        metrics = ["rel_l2", "max_abs"] + (["excess_rel_l2", "miss"] if dt != torch.float32 else [])
        for m in metrics:
            vals = {n: [e[n][m] for e in per] for n in impls}
            med = {n: statistics.median(x) for n, x in vals.items()}
            worse = sum(1 for e in per if e["fa4"][m] > e["torch"][m])
            ratio = med["fa4"] / med["torch"] if med["torch"] else float("nan")
            print(f"| {sh['dt']} | {S} | {D} | {'yes' if sh['causal'] else 'no'} | {len(per)} | {m} | " +
                  " | ".join(f"{med[n]:.3g} [{min(vals[n]):.3g}, {max(vals[n]):.3g}]" for n in impls) +
                  f" | {ratio:.3f} | {worse} / {len(per)} |" +
                  (f" {med['fa4'] / med['base']:.3f} |" if base and med["base"] else (" - |" if base else "")), flush=True)
            rows.append(dict(sh, metric=m, seeds=len(per), **{n: vals[n] for n in impls}))
    return rows


def main():
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    fa4 = Fa4(args.lib, threads)
    base = None
    if args.base_lib:  # a copy: dlopen of a path already loaded would return the same library
        import shutil
        import tempfile
        tmp = os.path.join(tempfile.mkdtemp(), "libfa4_base.so")
        shutil.copy(args.base_lib, tmp)
        base = Fa4(tmp, threads)
    torch.manual_seed(0)
    random.seed(0)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    meta = dict(date=datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), commit=commit, cpu=cpu_model,
                threads=threads, torch=torch.__version__, torch_isa=torch.backends.cpu.get_cpu_capability(),
                fa4_isa=os.environ.get("FA4_CPU_ISA", "best"), load=os.getloadavg()[0], base_lib=args.base_lib)
    print("# " + json.dumps(meta), flush=True)
    if args.acc_seeds:
        rows = accuracy_sweep(fa4, base)
        print(f"load average now {os.getloadavg()[0]:.1f}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(meta, acc_seeds=args.acc_seeds, acc_dist=args.acc_dist, rows=rows), f, indent=1)
        return
    gemm0 = gemm_rate(args.gemm)
    print(f"torch bf16 matmul {args.gemm}^3: {gemm0:.1f} GFLOP/s", flush=True)
    rows = []
    if not args.no_prefill:
        print("| dtype | S | D | causal | fa4 GFLOP/s | torch GFLOP/s | fa4 / torch | fa4 / matmul | "
              "fa4 rel-L2 | torch rel-L2 | fa4 max-abs | torch max-abs |" + (" base / torch | fa4 / base |" if base else ""))
        print("|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if base else ""), flush=True)
        for sh in prefill_shapes():
            dt = DT[sh["dt"]]
            B, H, S, D = sh["B"], sh["H"], sh["S"], sh["D"]
            q, k, v = (torch.randn(B, H, S, D, dtype=dt) for _ in range(3))
            out = torch.empty(B, S, H, D, dtype=dt).transpose(1, 2)  # BHSD view of BSHD storage
            p = fa4.params(q, k, v, out, sh["causal"])
            res = {}
            fns = {"fa4": lambda: fa4.call(p),
                   "torch": lambda: res.__setitem__("t", F.scaled_dot_product_attention(q, k, v, is_causal=sh["causal"]))}
            if base:
                out_b = torch.empty(B, S, H, D, dtype=dt).transpose(1, 2)
                p_b = base.params(q, k, v, out_b, sh["causal"])
                fns["base"] = lambda: base.call(p_b)
            reps = reps_for(fns)
            t = interleaved(fns, reps)
            flops = 4 * B * H * S * S * D / (2 if sh["causal"] else 1)
            r = dict(sh, reps=reps, fa4_ms=statistics.median(t["fa4"]) * 1e3, torch_ms=statistics.median(t["torch"]) * 1e3)
            r["fa4_gflops"] = flops / r["fa4_ms"] / 1e6
            r["torch_gflops"] = flops / r["torch_ms"] / 1e6
            if base:
                r["base_ms"] = statistics.median(t["base"]) * 1e3
                r["base_gflops"] = flops / r["base_ms"] / 1e6
            if S <= args.acc_max_s:
                e = fp64_errors(q, k, v, sh["causal"], {"fa4": out, "torch": res["t"]})
                r["fa4_rel_l2"], r["fa4_max_abs"] = e["fa4"]
                r["torch_rel_l2"], r["torch_max_abs"] = e["torch"]
            rows.append(r)
            acc = (f"{r['fa4_rel_l2']:.2e} | {r['torch_rel_l2']:.2e} | {r['fa4_max_abs']:.2e} | {r['torch_max_abs']:.2e}"
                   if "fa4_rel_l2" in r else "- | - | - | -")
            print(f"| {sh['dt']} | {S} | {D} | {'yes' if sh['causal'] else 'no'} | {r['fa4_gflops']:.1f} | "
                  f"{r['torch_gflops']:.1f} | {r['fa4_gflops'] / r['torch_gflops']:.2f} | {r['fa4_gflops'] / gemm0:.2f} | "
                  f"{acc} |" + (f" {r['base_gflops'] / r['torch_gflops']:.2f} | {r['fa4_gflops'] / r['base_gflops']:.2f} |"
                                if base else ""), flush=True)
            del q, k, v, out, res
    bw = None
    if not args.no_decode:
        xs = stream_tensor()
        bw = stream_gbs(xs)
        print(f"streaming read (torch fp32 sum of 2 GB): {bw:.1f} GB/s", flush=True)
        # The stream is also timed inside every decode shape's rounds (one more implementation in
        # the shuffled order): this VM's memory bandwidth moves with its host's other tenants
        # (35-73 GB/s within minutes), so fa4 / stream is taken from the same rounds.
        print("| B | Hq/Hkv | kv len | fa4 GB/s | torch GB/s | fa4 / torch | fa4 / stream | stream GB/s (same rounds) | "
              "fa4 / stream (same rounds) |" + (" base / torch | fa4 / base | base / stream (same rounds) |" if base else ""))
        print("|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if base else ""), flush=True)
        for sh in decode_shapes():
            dt = DT[sh["dt"]]
            B, Hq, Hkv, Sk, D = sh["B"], sh["Hq"], sh["Hkv"], sh["Sk"], sh["D"]
            q = torch.randn(B, Hq, 1, D, dtype=dt)
            k, v = (torch.randn(B, Sk, Hkv, D, dtype=dt).transpose(1, 2) for _ in range(2))  # BSHD storage
            out = torch.empty(B, 1, Hq, D, dtype=dt).transpose(1, 2)
            p = fa4.params(q, k, v, out, False)
            fns = {"fa4": lambda: fa4.call(p),
                   "torch": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                   "stream": lambda: xs.sum()}
            if base:
                out_b = torch.empty(B, 1, Hq, D, dtype=dt).transpose(1, 2)
                p_b = base.params(q, k, v, out_b, False)
                fns["base"] = lambda: base.call(p_b)
            reps = reps_for({n: f for n, f in fns.items() if n != "stream"})
            t = interleaved(fns, reps)
            nbytes = 2 * B * Hkv * Sk * D * 2
            r = dict(sh, reps=reps, fa4_ms=statistics.median(t["fa4"]) * 1e3, torch_ms=statistics.median(t["torch"]) * 1e3)
            r["fa4_gbs"] = nbytes / r["fa4_ms"] / 1e6
            r["torch_gbs"] = nbytes / r["torch_ms"] / 1e6
            r["stream_gbs"] = xs.numel() * 4 / statistics.median(t["stream"]) / 1e9
            if base:
                r["base_ms"] = statistics.median(t["base"]) * 1e3
                r["base_gbs"] = nbytes / r["base_ms"] / 1e6
            rows.append(r)
            print(f"| {B} | {Hq}/{Hkv} | {Sk} | {r['fa4_gbs']:.1f} | {r['torch_gbs']:.1f} | "
                  f"{r['fa4_gbs'] / r['torch_gbs']:.2f} | {r['fa4_gbs'] / bw:.2f} | {r['stream_gbs']:.1f} | "
                  f"{r['fa4_gbs'] / r['stream_gbs']:.2f} |" +
                  (f" {r['base_gbs'] / r['torch_gbs']:.2f} | {r['fa4_gbs'] / r['base_gbs']:.2f} | "
                   f"{r['base_gbs'] / r['stream_gbs']:.2f} |" if base else ""), flush=True)
            del q, k, v, out
        del xs
    gemm1 = gemm_rate(args.gemm)
    print(f"torch bf16 matmul {args.gemm}^3 (after): {gemm1:.1f} GFLOP/s; load average now {os.getloadavg()[0]:.1f}",
          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta, gemm_gflops=[gemm0, gemm1], stream_gbs=bw, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
