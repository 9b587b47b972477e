#!/usr/bin/env python3
"""fa4 against its peers on the same inputs, in one process (DESIGN.md §5).

fa4 is called through its C ABI (libfa4.so via ctypes, on torch tensors' data pointers); the
peers are FlashAttention-3 (`fa3_fwd_interface`, the fa3-fwd wheel) and FlashAttention-4's CuTe-DSL
package (`flash_attn.cute`) where they are installed (../shared/PEERS.md: tools/peer-install.sh),
PyTorch SDPA with the cuDNN and the flash (FlashAttention-2) backends, and a cuBLAS bf16 GEMM
(8192^3) as the matrix-unit ceiling. A peer that is not installed, or fails on a shape, is null
in the JSON and "-" in the tables; "best peer" is the fastest of those that ran.

Sweeps:
  prefill  B*S = 16384, H*D = 2048, D in {64, 128, 256}, causal in {0, 1},
           S in {512 .. 16k}, bf16; TFLOP/s with FLOPs = 4*B*H*Sq*Sk*D (halved for causal);
           --dims 192x128: D(q, k) = 192, D(v) = 128 (MLA prefill), FLOPs 2*B*H*Sq*Sk*(192 + 128)
           --dtypes fp16, e4m3 (fp8: q / k / v quantized per (batch, head), fa4 against FA3's fp8)
  decode   1 query token, B = 32, Hq = 32, Hkv = 8, D = 128, kv length {4k, 16k, 64k},
           contiguous and paged (page 16, 64, 256); GB/s of K+V bytes read

Timing: CUDA events around each call, median of >= 100 reps after warm-up, taken in >= 5 interleaved
rounds in a reshuffled order, each block after 30 ms of idle, so drift and the power state left
by the previous block hit every implementation alike; the L2 (60 MB) is
flushed before every prefill rep by writing a 256 MB buffer, outside the timed region.

Usage: python3 bench/peers.py --lib build-cuda/libfa4.so --out DIR [--quick] [--reps N]
                                [--ab NAME=other/libfa4.so ...]

--ab adds other builds of libfa4 (an experiment against its baseline) to the prefill sweep: they
are loaded into the same process (each keeps its own symbols: ctypes loads them RTLD_LOCAL) and
timed in the same interleaved rounds on the same inputs, which is a tighter A/B than two runs.
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import random
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

MAX_DIMS = 6


class Fa4Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("stride", ctypes.c_int64 * MAX_DIMS),
                ("device", ctypes.c_int32), ("device_index", ctypes.c_int32)]


class Fa4Params(ctypes.Structure):
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


DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float8_e4m3fn: 3, torch.int32: 4}
E4M3_MAX = 448.0  # the largest finite float8_e4m3fn


def quantize_e4m3(x, per_token=False):
    """x [B, S, H, D] -> (e4m3 values, fp32 descale factors f) with x ~ e4m3 * f: one factor per
    (batch, head), [B, H] (FlashAttention-3's q / k / v_descale, fa4's for all-fp8 inputs), or
    per (token, head), [B, S, H] (an fp8 KV cache's per-token factors); f = amax / 448, so the
    largest |x| of each group lands on e4m3's largest finite value. One sequence at a time: a
    decode cache in fp32 at once would be 8 GB."""
    b, s, h, _ = x.shape
    x8 = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    f = torch.empty((b, s, h) if per_token else (b, h), dtype=torch.float32, device=x.device)
    for i in range(b):
        xf = x[i].float()
        amax = xf.abs().amax(dim=-1)  # [S, H]
        # tiny: a group of zeros gets a factor that keeps it 0 (0 / 0 would be NaN)
        fi = (amax if per_token else amax.amax(dim=0)).clamp_min(torch.finfo(torch.float32).tiny) / E4M3_MAX
        f[i] = fi
        # Clamped: x / f may pass 448 by an ulp, and torch turns e4m3 overflow into NaN.
        x8[i] = (xf / fi[..., None]).clamp(-E4M3_MAX, E4M3_MAX)
    return x8, f


def dequantize_e4m3(x8, f, dtype=torch.float32):
    """The values e4m3 x8 [B, S, H, D] with factors f ([B, H] or [B, S, H]) stand for: x8 * f in
    dtype (float64: exact, for a reference)."""
    f = f.to(dtype)
    return x8.to(dtype) * (f[:, None, :, None] if f.dim() == 2 else f[..., None])


def fa4_tensor(t):
    v = Fa4Tensor()
    v.data = t.data_ptr()
    v.dtype = DTYPES[t.dtype]
    v.ndim = t.dim()
    for i in range(t.dim()):
        v.shape[i] = t.shape[i]
        v.stride[i] = t.stride(i)
    v.device = 1
    v.device_index = t.device.index or 0
    return v


class Fa4:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.fa4_attention_forward.argtypes = [ctypes.POINTER(Fa4Params)]
        self.lib.fa4_last_error.restype = ctypes.c_char_p
        self.lib.fa4_params_init.argtypes = [ctypes.POINTER(Fa4Params)]

    def params(self, q, k, v, out, causal=False, lse=None, cache_seqlens=None, page_table=None, num_splits=0,
               cu_seqlens=None, max_seqlen=0, q_descale=None, k_descale=None, v_descale=None):
        """q_descale / k_descale / v_descale: fp32 factors of e4m3 inputs (fa4/params.h: [B, Hkv],
        or for an fp8 KV cache under 16-bit q per token too); None = not given."""
        p = Fa4Params()
        self.lib.fa4_params_init(ctypes.byref(p))
        p.q, p.k, p.v, p.out = fa4_tensor(q), fa4_tensor(k), fa4_tensor(v), fa4_tensor(out)
        for name, t in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
            if t is not None:
                setattr(p, name, fa4_tensor(t))
        if cu_seqlens is not None:  # packed [tokens, H, D] q and k/v, one cu_seqlens for both
            p.cu_seqlens_q = fa4_tensor(cu_seqlens)
            p.cu_seqlens_k = fa4_tensor(cu_seqlens)
            p.max_seqlen_q = p.max_seqlen_k = max_seqlen  # hints (0 = unknown), as FA3's varlen call takes them
        if lse is not None:
            p.lse = fa4_tensor(lse)
        if cache_seqlens is not None:
            p.cache_seqlens = fa4_tensor(cache_seqlens)
        if page_table is not None:
            p.page_table = fa4_tensor(page_table)
        p.causal = 1 if causal else 0
        p.num_splits = num_splits
        p.backend = 3  # cuda
        p.stream = torch.cuda.current_stream().cuda_stream
        return p

    def call(self, p):
        rc = self.lib.fa4_attention_forward(ctypes.byref(p))
        if rc != 0:
            raise RuntimeError("fa4: " + self.lib.fa4_last_error().decode())


IDLE_S = 0.03  # GPU idle before every timed block (Timer.compare_ms)


class Timer:
    def __init__(self, reps, flush_mb=256):
        self.reps = reps
        self.flush_buf = torch.empty(flush_mb * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")

    def before_reps(self, reps):
        """Hook run after the warm-up, right before a block's timed reps (decode_peers.py queues
        GPU work there so the host's launch time stays out of short kernels' times)."""

    def samples_ms(self, fn, reps, flush=True, warmup=5):
        for _ in range(warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        self.before_reps(reps)
        for i in range(reps):
            if flush:
                self.flush_buf.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def median_ms(self, fn, flush=True, warmup=5):
        t = sorted(self.samples_ms(fn, self.reps, flush, warmup))
        return t[len(t) // 2]

    def compare_ms(self, fns, flush=True, rounds=5):
        """Median ms of each implementation (None where it fails), timed in interleaved rounds
        so clock or thermal drift during the run hits every one alike (short kernels, ~50 us,
        otherwise moved +-5% between blocks of the same run). Before every block the GPU idles
        IDLE_S, and the order is reshuffled every round: in a fixed cycle the block right after
        cuDNN's (the most power-hungry kernel here) ran up to 9% slow at long sequences, which
        showed as a "regression" of a copy of the same build (H200, 2026-11-29)."""
        live = {}
        for name, fn in fns.items():
            try:
                fn()
                torch.cuda.synchronize()
                live[name] = []
            except Exception as e:  # a peer backend that does not support the shape
                print(f"    ({name} failed: {type(e).__name__}: {str(e)[:120]})", flush=True)
        names = list(live)
        if names:  # at least one round per implementation
            rounds = max(rounds, len(names))
        per_round = max(1, -(-self.reps // rounds))
        order = random.Random(len(names) * 1000 + rounds)  # reproducible orders
        for _ in range(rounds):
            order.shuffle(names)
            for name in names:
                torch.cuda.synchronize()
                time.sleep(IDLE_S)
                live[name] += self.samples_ms(fns[name], per_round, flush, warmup=2)
        out = {}
        for name in fns:
            t = sorted(live[name]) if name in live else None
            out[name] = t[len(t) // 2] if t else None
        return out


def _import_fa3():
    try:
        import fa3_fwd_interface
        return fa3_fwd_interface
    except Exception as e:  # not installed on this machine
        print(f"  (FA3 not available: {type(e).__name__}: {str(e)[:100]})", flush=True)
        return None


def _import_fa4_cute():
    try:
        from flash_attn.cute import flash_attn_func
        return flash_attn_func
    except Exception as e:
        print(f"  (FA4 CuTe-DSL not available: {type(e).__name__}: {str(e)[:100]})", flush=True)
        return None


FA3 = _import_fa3()
FA4_CUTE = _import_fa4_cute()
PEERS = ("fa3", "fa4_cute", "cudnn", "flash")  # the "best peer" is the fastest of these


def first(x):
    """FA3 / FA4 return out or (out, lse)."""
    return x[0] if isinstance(x, (tuple, list)) else x


def peer_fns(q, k, v, causal):
    """The peers on BSHD q/k/v (SDPA on BHSD views of the same storage)."""
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    fns = {"flash": lambda: sdpa(qt, kt, vt, causal, SDPBackend.FLASH_ATTENTION),
           "cudnn": lambda: sdpa(qt, kt, vt, causal, SDPBackend.CUDNN_ATTENTION)}
    if FA3 is not None:
        fns["fa3"] = lambda: first(FA3.flash_attn_func(q, k, v, causal=causal))
    if FA4_CUTE is not None:
        fns["fa4_cute"] = lambda: first(FA4_CUTE(q, k, v, causal=causal))
    return fns


def fp8_peer_fns(q, k, v, causal, descales):
    """The peers on e4m3 q / k / v with [B, Hkv] descale factors: FA3 only (SDPA and FA4 CuTe
    take no fp8 inputs)."""
    if FA3 is None:
        return {}
    return {"fa3": lambda: first(FA3.flash_attn_func(q, k, v, causal=causal, **descales))}


def best_peer(r):
    xs = [r.get(n) for n in PEERS if r.get(n) is not None]
    return max(xs) if xs else None


def sdpa(q, k, v, causal, backend, gqa=False):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def bench_gemm(timer):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = timer.median_ms(lambda: torch.matmul(a, b), flush=False)
    return 2 * 8192 ** 3 / ms / 1e9


PREFILL_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn}


def parse_dims(spec):
    """'64,128,192x128' -> [(64, 64), (128, 128), (192, 128)]: (head dim of q / k, of v)."""
    dims = []
    for x in spec.split(","):
        a, _, b = x.partition("x")
        dims.append((int(a), int(b or a)))
    return dims


def bench_prefill(fa4, timer, dims, causals, seqs, check, variants=None, dtypes=("bf16",)):
    """dims: (dqk, dv) pairs; H = 2048 // dqk. dtype e4m3: q / k / v drawn in bf16 and quantized
    with one factor per (batch, head) (quantize_e4m3, FA3's descale convention), out bf16; fa4
    against FA3's fp8 path, and the check against FA2 on the dequantized values rounded to bf16."""
    variants = variants or {}
    rows = []
    for dname, (d, dv), causal, s in ((dn, d, c, s) for dn in dtypes for d in dims for c in causals for s in seqs):
        dt = PREFILL_DTYPES[dname]
        fp8 = dt == torch.float8_e4m3fn
        b, h = 16384 // s, 2048 // d
        q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16 if fp8 else dt)
        k = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16 if fp8 else dt)
        v = torch.randn(b, s, h, dv, device="cuda", dtype=torch.bfloat16 if fp8 else dt)
        ds = {}  # the descale factors of e4m3 inputs
        if fp8:
            (q, ds["q_descale"]), (k, ds["k_descale"]), (v, ds["v_descale"]) = (quantize_e4m3(x) for x in (q, k, v))
            ref_in = [dequantize_e4m3(x, ds[n]).to(torch.bfloat16) for x, n in
                      ((q, "q_descale"), (k, "k_descale"), (v, "v_descale"))]
        else:
            ref_in = (q, k, v)
        out = torch.empty_like(v, dtype=torch.bfloat16 if fp8 else dt)
        p = fa4.params(q, k, v, out, causal=causal, **ds)
        qt, kt, vt = (x.transpose(1, 2) for x in ref_in)  # BHSD views
        flops = 2 * b * h * s * s * (d + dv) / (2 if causal else 1)
        # The reference: FlashAttention-2 (SDPA) where it runs (equal head dims), else the
        # memory-efficient backend.
        ref_backend = SDPBackend.FLASH_ATTENTION if d == dv else SDPBackend.EFFICIENT_ATTENTION
        fns = {"fa4": lambda: fa4.call(p)}
        fns.update(fp8_peer_fns(q, k, v, causal, ds) if fp8 else peer_fns(q, k, v, causal))
        outs_ab = {}
        for name, lib in variants.items():
            outs_ab[name] = torch.empty_like(out)
            pv = lib.params(q, k, v, outs_ab[name], causal=causal, **ds)
            fns["ab_" + name] = (lambda lib, pv: lambda: lib.call(pv))(lib, pv)
        t = timer.compare_ms(fns)
        err = None
        if check and t["fa4"] is not None:  # a shape fa4 refuses (an fp8 head dim) stays a null row
            fa4.call(p)
            ref = sdpa(qt, kt, vt, causal, ref_backend).transpose(1, 2)
            err = (out.float() - ref.float()).abs().max().item()
        tf = lambda t: None if t is None else flops / t / 1e9
        r = dict(d=d if d == dv else f"{d}x{dv}", causal=int(causal), s=s, b=b, h=h, dtype=dname, fa4=tf(t["fa4"]),
                 **{n: tf(t.get(n)) for n in PEERS}, max_abs_diff_vs_flash=err)
        r["best_peer"] = best_peer(r)
        for name in variants:
            r["ab_" + name] = tf(t["ab_" + name])
            if check:
                fns["ab_" + name]()
                fa4.call(p)
                torch.cuda.synchronize()
                r[f"ab_{name}_max_abs_diff_vs_fa4"] = (outs_ab[name].float() - out.float()).abs().max().item()
        rows.append(r)
        print(f"  prefill {dname} d={d} causal={int(causal)} s={s}: fa4 {fmt(r['fa4'])}  " +
              "  ".join(f"{n} {fmt(r[n])}" for n in PEERS) + " TFLOP/s" +
              (f"  maxdiff {err:.3g}" if err is not None else "") +
              "".join(f"  {n} {fmt(r['ab_' + n])}" for n in variants), flush=True)
        del q, k, v, out, qt, kt, vt, outs_ab, ref_in, ds
    return rows


FEATURES = {  # name: group (Hq / Hkv), causal, softcap, window_left, chunk, d (default 128); bf16, H*D = 2048
    "gqa4": dict(group=4),
    "gqa4_causal": dict(group=4, causal=True),
    "softcap": dict(softcap=30.0),
    "softcap_causal": dict(softcap=30.0, causal=True),
    "softcap_d64": dict(softcap=30.0, d=64),
    "softcap_d256": dict(softcap=50.0, d=256),  # Gemma 2's head dim and cap
    "softcap_d256_causal": dict(softcap=50.0, d=256, causal=True),
    "window1k": dict(causal=True, window_left=1024),
    "chunk1k": dict(causal=True, chunk=1024),
}


def visible_pairs(s, causal=False, window_left=-1, chunk=0):
    """(query, key) pairs a square S x S mask keeps (DESIGN.md §1: bottom-right causal, a left
    window of window_left keys, Llama 4 chunks): the FLOP count of a masked problem."""
    if not causal:
        return s * s
    n = 0
    for i in range(s):
        lo = 0
        if window_left >= 0:
            lo = max(lo, i - window_left)
        if chunk > 0:
            lo = max(lo, i // chunk * chunk)
        n += i - lo + 1
    return n


def feature_reference(q, k, v, causal, softcap, window_left, chunk):
    """O of bench_features' problem in fp32 (torch math; bottom-right = top-left masks, S_q = S_k),
    [B, S, Hq, D] from BSHD q / k / v with Hq a multiple of Hkv."""
    qf, kf, vf = (x.float().transpose(1, 2) for x in (q, k, v))  # B H S D
    g = qf.shape[1] // kf.shape[1]
    kf, vf = kf.repeat_interleave(g, dim=1), vf.repeat_interleave(g, dim=1)
    sc = (qf @ kf.transpose(-1, -2)) * qf.shape[-1] ** -0.5
    if softcap:
        sc = softcap * torch.tanh(sc / softcap)
    n = sc.shape[-1]
    i = torch.arange(n, device=sc.device)[:, None]
    j = torch.arange(n, device=sc.device)[None, :]
    vis = torch.ones(n, n, dtype=torch.bool, device=sc.device)
    if causal:
        vis &= j <= i
    if window_left >= 0:
        vis &= j >= i - window_left
    if chunk:
        vis &= j >= i // chunk * chunk
    sc = sc.masked_fill(~vis, float("-inf"))
    return (torch.softmax(sc, dim=-1) @ vf).transpose(1, 2)


def bench_features(fa4, timer, seqs, check, variants=None, names=None):
    """The runtime features beside plain attention (FEATURES) against the peers that have them:
    FA3 for all (window_size, softcap, attention_chunk, GQA), FA4 CuTe where its call takes them,
    SDPA (cuDNN / FA2) for GQA only (enable_gqa); a peer without the feature is null."""
    variants = variants or {}
    rows = []
    for name, f in FEATURES.items():
        if names and name not in names:
            continue
        d = f.get("d", 128)
        hq = 2048 // d
        for s in seqs:
            b = 16384 // s
            hkv = hq // f.get("group", 1)
            causal = f.get("causal", False)
            wl, chunk, cap = f.get("window_left", -1), f.get("chunk", 0), f.get("softcap", 0.0)
            q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
            out = torch.empty_like(q)

            def params(lib, o):
                p = lib.params(q, k, v, o, causal=causal)
                p.softcap = cap
                if wl >= 0:
                    p.window_left, p.window_right = wl, 0
                p.chunk_size = chunk
                return p
            p = params(fa4, out)
            fns = {"fa4": lambda: fa4.call(p)}
            if FA3 is not None:
                kw = dict(causal=causal, softcap=cap, window_size=(wl, 0 if wl >= 0 else -1), attention_chunk=chunk)
                fns["fa3"] = lambda: first(FA3.flash_attn_func(q, k, v, **kw))
            if FA4_CUTE is not None:
                kw4 = dict(causal=causal, softcap=cap) if cap else dict(causal=causal)
                if wl >= 0:
                    kw4["window_size"] = (wl, 0)
                if not chunk:
                    fns["fa4_cute"] = lambda: first(FA4_CUTE(q, k, v, **kw4))
            if wl < 0 and not chunk and not cap:  # SDPA: plain masks only
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                fns["flash"] = lambda: sdpa(qt, kt, vt, causal, SDPBackend.FLASH_ATTENTION, True)
                fns["cudnn"] = lambda: sdpa(qt, kt, vt, causal, SDPBackend.CUDNN_ATTENTION, True)
            outs_ab = {}
            for vname, lib in variants.items():
                outs_ab[vname] = torch.empty_like(q)
                pv = params(lib, outs_ab[vname])
                fns["ab_" + vname] = (lambda lib, pv: lambda: lib.call(pv))(lib, pv)
            t = timer.compare_ms(fns)
            flops = 4 * b * hq * d * visible_pairs(s, causal, wl, chunk)
            tf = lambda x: None if x is None else flops / x / 1e9
            r = dict(feature=name, d=d, s=s, b=b, hq=hq, hkv=hkv, fa4=tf(t["fa4"]),
                     **{n: tf(t.get(n)) for n in PEERS}, **{"ab_" + n: tf(t.get("ab_" + n)) for n in variants})
            r["best_peer"] = best_peer(r)
            fa3_out = None
            if check and "fa3" in fns and t.get("fa3") is not None:
                fa4.call(p)
                fa3_out = fns["fa3"]()
                r["max_abs_diff_vs_fa3"] = (out.float() - fa3_out.float()).abs().max().item()
            if check:
                # Error against an fp32 evaluation of the same function (one batch entry: the
                # error statistics of S*H rows), for fa4, each --ab build (their outputs as the
                # timed calls left them) and FA3.
                exact = feature_reference(q[:1], k[:1], v[:1], causal, cap, wl, chunk)
                outs = {"fa4": out} | {"ab_" + n: o for n, o in outs_ab.items()}
                if fa3_out is not None:
                    outs["fa3"] = fa3_out
                torch.cuda.synchronize()
                for n, o in outs.items():
                    e = o[:1].float() - exact
                    r["rel_l2_" + n] = (e.norm() / exact.norm()).item()
                    r["max_abs_" + n] = e.abs().max().item()
                del exact
            rows.append(r)
            print(f"  feature {name} d={d} s={s}: fa4 {fmt(r['fa4'])}  " + "  ".join(f"{n} {fmt(r[n])}" for n in PEERS) +
                  "".join(f"  {n} {fmt(r['ab_' + n])}" for n in variants) + " TFLOP/s" +
                  (f"  maxdiff vs fa3 {r['max_abs_diff_vs_fa3']:.3g}" if "max_abs_diff_vs_fa3" in r else "") +
                  "".join(f"  {k[7:]} rel-L2 {r[k]:.3g} max-abs {r['max_abs_' + k[7:]]:.3g}"
                          for k in r if k.startswith("rel_l2_")), flush=True)
            del q, k, v, out, outs_ab
    return rows


def bench_varlen(fa4, timer, dims, seqs, check, variants=None):
    """Packed variable-length layout ([tokens, H, D] + cu_seqlens) with equal lengths, so the same
    problem runs dense in the peers: what the varlen path costs over dense (B*S = 16384). The
    varlen calls pass max_seqlen_q / k (as FA3's varlen API requires them); fa4_varlen_nohint is
    the same call without (device-resident lengths, nothing known on the host). Each --ab
    library's varlen call (with the hints) is timed in the same rounds (ab_NAME)."""
    variants = variants or {}
    rows = []
    for d in dims:
        for causal in (False, True):
            for s in seqs:
                b, h = 16384 // s, 2048 // d
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                out, out_v = torch.empty_like(q), torch.empty_like(q)
                cu = torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * s
                pd = fa4.params(q, k, v, out, causal=causal)
                pv = fa4.params(q.view(b * s, h, d), k.view(b * s, h, d), v.view(b * s, h, d), out_v.view(b * s, h, d),
                                causal=causal, cu_seqlens=cu, max_seqlen=s)
                pn = fa4.params(q.view(b * s, h, d), k.view(b * s, h, d), v.view(b * s, h, d), out_v.view(b * s, h, d),
                                causal=causal, cu_seqlens=cu)
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                fns = {"fa4_varlen": lambda: fa4.call(pv), "fa4_varlen_nohint": lambda: fa4.call(pn),
                       "fa4_dense": lambda: fa4.call(pd),
                       "flash_dense": lambda: sdpa(qt, kt, vt, causal, SDPBackend.FLASH_ATTENTION)}
                outs_ab = {}
                for name, lib in variants.items():
                    outs_ab[name] = torch.empty_like(q)
                    pa = lib.params(q.view(b * s, h, d), k.view(b * s, h, d), v.view(b * s, h, d),
                                    outs_ab[name].view(b * s, h, d), causal=causal, cu_seqlens=cu, max_seqlen=s)
                    fns["ab_" + name] = (lambda lib, pa: lambda: lib.call(pa))(lib, pa)
                t = timer.compare_ms(fns)
                r = dict(d=d, causal=int(causal), s=s, b=b, h=h, **{n: flops / x / 1e9 if x else None for n, x in t.items()})
                if check:
                    fa4.call(pn)
                    fa4.call(pd)
                    torch.cuda.synchronize()
                    r["max_abs_diff_varlen_nohint_vs_dense"] = (out_v.float() - out.float()).abs().max().item()
                    fa4.call(pv)
                    r["max_abs_diff_varlen_vs_dense"] = (out_v.float() - out.float()).abs().max().item()
                    for name in variants:
                        fns["ab_" + name]()
                        torch.cuda.synchronize()
                        r[f"ab_{name}_max_abs_diff_vs_fa4"] = (outs_ab[name].float() - out_v.float()).abs().max().item()
                rows.append(r)
                print(f"  varlen d={d} causal={int(causal)} s={s}: fa4 varlen {fmt(r['fa4_varlen'])}  dense "
                      f"{fmt(r['fa4_dense'])}  flash {fmt(r['flash_dense'])} TFLOP/s" +
                      "".join(f"  {n} {fmt(r['ab_' + n])}" for n in variants), flush=True)
                del q, k, v, out, out_v, qt, kt, vt, outs_ab
    return rows


def bench_decode(fa4, timer, lens, pages, check):
    rows = []
    B, HQ, HKV, D = 32, 32, 8, 128
    for L in lens:
        kbytes = 2 * B * L * HKV * D * 2  # K + V, bf16
        q = torch.randn(B, 1, HQ, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, L, HKV, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, L, HKV, D, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(q)
        seqlens = torch.full((B,), L, dtype=torch.int32, device="cuda")
        res = dict(kv_len=L)
        p = fa4.params(q, k, v, out, cache_seqlens=seqlens)
        gbs = lambda t: None if t is None else kbytes / t / 1e6
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        t = timer.compare_ms({"fa4": lambda: fa4.call(p),
                              "flash": lambda: sdpa(qt, kt, vt, False, SDPBackend.FLASH_ATTENTION, True),
                              "cudnn": lambda: sdpa(qt, kt, vt, False, SDPBackend.CUDNN_ATTENTION, True)}, flush=False)
        res["fa4_contiguous"], res["flash_gqa"], res["cudnn_gqa"] = gbs(t["fa4"]), gbs(t["flash"]), gbs(t["cudnn"])
        if check:
            fa4.call(p)
            ref = sdpa(qt, kt, vt, False, SDPBackend.FLASH_ATTENTION, True).transpose(1, 2)
            res["max_abs_diff_vs_flash"] = (out.float() - ref.float()).abs().max().item()
        del qt, kt, vt
        for ps in pages:
            npages = B * L // ps
            perm = torch.randperm(npages, device="cuda", dtype=torch.int64).to(torch.int32)
            table = perm.view(B, L // ps).contiguous()
            # Scatter the contiguous cache into pages so the paged run reads the same values.
            kp = torch.empty(npages, ps, HKV, D, device="cuda", dtype=torch.bfloat16)
            vp = torch.empty_like(kp)
            kp[perm.long()] = k.view(B * L // ps, ps, HKV, D)
            vp[perm.long()] = v.view(B * L // ps, ps, HKV, D)
            outp = torch.empty_like(q)
            pp = fa4.params(q, kp, vp, outp, cache_seqlens=seqlens, page_table=table)
            res[f"fa4_paged{ps}"] = gbs(timer.median_ms(lambda: fa4.call(pp), flush=False))
            if check:
                fa4.call(pp)
                fa4.call(p)
                torch.cuda.synchronize()
                res[f"paged{ps}_max_abs_diff_vs_contiguous"] = (outp.float() - out.float()).abs().max().item()
            del kp, vp, table, perm
        rows.append(res)
        print("  decode L=%d: " % L + "  ".join(f"{k} {fmt(v)}" for k, v in res.items() if k != "kv_len"), flush=True)
        del q, k, v, out
        torch.cuda.empty_cache()
    return rows


def fmt(x, nd=0):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}" if abs(x) >= 1 or x == 0 else f"{x:.3g}"
    return str(x)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def markdown(meta, gemm, prefill, decode, varlen=(), ab_names=(), features=()):
    L = [f"# fa4 vs peers: {meta['gpu']}, {meta['date']}", "",
         f"- commit: `{meta['commit']}`", f"- command: `{meta['command']}`",
         f"- torch {meta['torch']}, CUDA {meta['cuda']}, cuDNN {meta['cudnn']}",
         f"- timing: CUDA events, median of {meta['reps']} reps after warm-up, in >= 5 interleaved rounds of all"
         f" implementations, order reshuffled every round, {IDLE_S * 1000:.0f} ms idle before each block; prefill: L2 flushed before each rep;"
         " decode: inputs are far larger than the L2", "",
         f"cuBLAS bf16 GEMM 8192^3: **{gemm:.0f} TFLOP/s**", "",
         "## Prefill, TFLOP/s (B*S = 16384, H*D = 2048)", "",
         "| dtype | D | causal | S | B | H | fa4 | FA3 | FA4 (CuTe) | cuDNN | FA2 | fa4 / best peer |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in prefill:
        L.append(f"| {r['dtype']} | {r['d']} | {r['causal']} | {r['s']} | {r['b']} | {r['h']} | {fmt(r['fa4'])} | {fmt(r.get('fa3'))} | "
                 f"{fmt(r.get('fa4_cute'))} | {fmt(r.get('cudnn'))} | {fmt(r.get('flash'))} | "
                 f"**{fmt(ratio(r['fa4'], r.get('best_peer')), 3)}** |")
    if ab_names:
        L += ["", "## A/B: other builds of fa4, same rounds, same inputs (TFLOP/s)", "",
              "| dtype | D | causal | S | fa4 | " + " | ".join(ab_names) + " | fa4/flash | " +
              " | ".join(f"{n}/flash | {n}/fa4" for n in ab_names) + " |",
              "|---|---|---|---|---|" + "---|" * len(ab_names) + "---|" + "---|---|" * len(ab_names)]
        for r in prefill:
            L.append(f"| {r['dtype']} | {r['d']} | {r['causal']} | {r['s']} | {fmt(r['fa4'])} | " +
                     " | ".join(fmt(r['ab_' + n]) for n in ab_names) + f" | {fmt(ratio(r['fa4'], r['flash']), 3)} | " +
                     " | ".join(f"{fmt(ratio(r['ab_' + n], r['flash']), 3)} | {fmt(ratio(r['ab_' + n], r['fa4']), 3)}"
                                for n in ab_names) + " |")
    if varlen:
        L += ["", "## Varlen prefill, bf16, TFLOP/s (packed tokens + cu_seqlens, B equal lengths, B*S = 16384)", "",
              "| D | causal | S | B | fa4 varlen | no hint | fa4 dense | flash dense | varlen/dense | varlen/flash |" +
              "".join(f" {n} varlen | {n}/fa4 varlen |" for n in ab_names),
              "|---|---|---|---|---|---|---|---|---|---|" + "---|---|" * len(ab_names)]
        for r in varlen:
            L.append(f"| {r['d']} | {r['causal']} | {r['s']} | {r['b']} | {fmt(r['fa4_varlen'])} | "
                     f"{fmt(r.get('fa4_varlen_nohint'))} | {fmt(r['fa4_dense'])} | "
                     f"{fmt(r['flash_dense'])} | {fmt(ratio(r['fa4_varlen'], r['fa4_dense']), 2)} | "
                     f"{fmt(ratio(r['fa4_varlen'], r['flash_dense']), 2)} |" +
                     "".join(f" {fmt(r.get('ab_' + n))} | {fmt(ratio(r.get('ab_' + n), r['fa4_varlen']), 3)} |"
                             for n in ab_names))
    if features:
        L += ["", "## Features, bf16, H*D = 2048, B*S = 16384, TFLOP/s (visible (query, key) pairs)", "",
              "| feature | D | S | Hkv | fa4 | FA3 | FA4 (CuTe) | cuDNN | FA2 | fa4 / best peer |" +
              "".join(f" {n} | {n}/fa4 |" for n in ab_names),
              "|---|---|---|---|---|---|---|---|---|---|" + "---|---|" * len(ab_names)]
        for r in features:
            L.append(f"| {r['feature']} | {r['d']} | {r['s']} | {r['hkv']} | {fmt(r['fa4'])} | {fmt(r.get('fa3'))} | "
                     f"{fmt(r.get('fa4_cute'))} | {fmt(r.get('cudnn'))} | {fmt(r.get('flash'))} | "
                     f"**{fmt(ratio(r['fa4'], r.get('best_peer')), 3)}** |" +
                     "".join(f" {fmt(r.get('ab_' + n))} | {fmt(ratio(r.get('ab_' + n), r['fa4']), 3)} |" for n in ab_names))
    if decode:
        keys = [k for k in decode[0] if k.startswith("fa4_") or k.endswith("_gqa")]
        L += ["", "## Decode, bf16, GB/s of K+V read (B = 32, Hq = 32, Hkv = 8, D = 128, 1 query token)", "",
              "| kv len | " + " | ".join(keys) + " | fa4/flash | paged16/contig |",
              "|---|" + "---|" * (len(keys) + 2)]
        for r in decode:
            L.append(f"| {r['kv_len']} | " + " | ".join(fmt(r.get(k)) for k in keys) +
                     f" | {fmt(ratio(r.get('fa4_contiguous'), r.get('flash_gqa')), 2)} | "
                     f"{fmt(ratio(r.get('fa4_paged16'), r.get('fa4_contiguous')), 2)} |")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build-cuda/libfa4.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="a few shapes only")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--skip-prefill", action="store_true")
    ap.add_argument("--skip-varlen", action="store_true")
    ap.add_argument("--features", action="store_true",
                    help="also the feature sweep (GQA, softcap, sliding window, chunks; D 128) against FA3 / FA4 CuTe / SDPA")
    ap.add_argument("--feature-seqs", default="2048,8192", help="lengths of the feature sweep")
    ap.add_argument("--feature-names", default="", help="a subset of the feature sweep (comma-separated FEATURES keys)")
    ap.add_argument("--dims", default="64,128,256", help="prefill head dims (comma-separated); DQKxDV for a v head dim of its own (192x128)")
    ap.add_argument("--varlen-dims", default="128", help="varlen head dims (comma-separated)")
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192,16384", help="prefill lengths (comma-separated)")
    ap.add_argument("--dtypes", default="bf16", help="prefill input types, comma list of bf16, fp16, e4m3 (e4m3: "
                                                      "q / k / v quantized per (batch, head), against FA3's fp8)")
    ap.add_argument("--ab", action="append", default=[], metavar="NAME=LIB",
                    help="another libfa4 build timed in the same rounds on the prefill and varlen sweeps (repeatable)")
    args = ap.parse_args()
    variants = {}
    for spec in args.ab:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            ap.error(f"--ab: expected NAME=LIB, got {spec!r}")
        variants[name] = Fa4(os.path.abspath(path))

    torch.manual_seed(0)
    fa4 = Fa4(os.path.abspath(args.lib))
    timer = Timer(args.reps)
    # The staged binaries' commit (bench/device_run.sh sets it) wins over the checkout's HEAD:
    # the device machine's copy of the tree may not carry an up-to-date .git.
    commit = os.environ.get("FA4_COMMIT", "")
    staged = os.path.dirname(os.path.dirname(os.path.abspath(args.lib)))  # build-device/ of --lib
    if not commit and os.path.isfile(os.path.join(staged, "commit")):  # staged by device_run.sh --stage
        commit = open(os.path.join(staged, "commit")).read().strip()
    if not commit:
        try:
            commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
        except Exception:
            commit = "unknown"
    meta = dict(date=datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), commit=commit,
                gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(), reps=args.reps, command="python3 " + " ".join(sys.argv))
    if variants and os.path.isfile(os.path.join(staged, "ab_revs")):  # what each --ab library was built from
        meta["ab_revs"] = open(os.path.join(staged, "ab_revs")).read().split("\n")[:-1]
    print(f"fa4 peers: {meta['gpu']} commit {commit}", flush=True)
    gemm = bench_gemm(timer)
    print(f"  cuBLAS bf16 GEMM 8192^3: {gemm:.0f} TFLOP/s", flush=True)
    check = not args.no_check
    if args.quick:
        prefill = [] if args.skip_prefill else bench_prefill(fa4, timer, [(64, 64), (128, 128), (256, 256)], [False, True], [2048], check,
                                                             variants)
        decode = [] if args.skip_decode else bench_decode(fa4, timer, [4096, 16384], [16, 256], check)
        varlen = [] if args.skip_varlen else bench_varlen(fa4, timer, [128], [2048], check, variants)
    else:
        dims = parse_dims(args.dims)
        seqs = [int(x) for x in args.seqs.split(",")]
        dtypes = [x for x in args.dtypes.split(",") if x]
        if any(x not in PREFILL_DTYPES for x in dtypes):
            ap.error(f"--dtypes: expected a list of {', '.join(PREFILL_DTYPES)}, got {args.dtypes!r}")
        prefill = [] if args.skip_prefill else bench_prefill(fa4, timer, dims, [False, True], seqs, check, variants,
                                                             dtypes)
        decode = [] if args.skip_decode else bench_decode(fa4, timer, [4096, 16384, 65536], [16, 64, 256], check)
        varlen = [] if args.skip_varlen else bench_varlen(fa4, timer, [int(x) for x in args.varlen_dims.split(",")],
                                                          [256, 1024, 4096], check, variants)
    names = [x for x in args.feature_names.split(",") if x]
    if any(x not in FEATURES for x in names):
        ap.error(f"--feature-names: expected some of {', '.join(FEATURES)}, got {args.feature_names!r}")
    features = bench_features(fa4, timer, [int(x) for x in args.feature_seqs.split(",")], check,
                              variants, names) if args.features else []
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump(dict(meta=meta, gemm_tflops=gemm, prefill=prefill, decode=decode, varlen=varlen, features=features),
                  f, indent=1)
    md = markdown(meta, gemm, prefill, decode, varlen, list(variants), features)
    with open(os.path.join(args.out, "peers.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
