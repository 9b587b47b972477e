#!/usr/bin/env python3
"""Runs one prefill shape through fa4 (and the FA2 peer) a few times, for ncu to profile.

  ncu --clock-control none -k regex:fwd_kernel --launch-skip 2 --launch-count 1 \
      python3 bench/cuda_ncu_case.py --d 128 --s 512 [--causal] [--dtype e4m3]

--dtype e4m3: e4m3 q / k / v with [B, H] descales (peers.quantize_e4m3), fa4 against FA3's fp8
path only (the FA2 peer has no fp8).
--dtype fp8kv: decode against an e4m3 KV cache, fa4 only: B 32, Hq 32, Hkv 8, one bf16 query
token, --s cached keys with [B, Hkv] k / v descales (decode_peers.py --fp8-kv's shape; the sm90
fp8_kv tile on Hopper).
"""
import argparse
import os
import sys

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--lib", default="build-device/lib/libfa4.so")
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--s", type=int, default=512)
ap.add_argument("--causal", action="store_true")
ap.add_argument("--reps", type=int, default=4)
ap.add_argument("--dtype", choices=("bf16", "e4m3", "fp8kv"), default="bf16")
ap.add_argument("--cudnn", action="store_true", help="also PyTorch SDPA's cuDNN backend (bf16 only)")
a = ap.parse_args()
fa4 = peers.Fa4(os.path.abspath(a.lib))
if a.dtype == "fp8kv":
    q = torch.randn(32, 1, 32, a.d, device="cuda", dtype=torch.bfloat16)
    (k, kd), (v, vd) = (peers.quantize_e4m3(torch.randn(32, a.s, 8, a.d, device="cuda", dtype=torch.bfloat16))
                        for _ in range(2))
    out = torch.empty_like(q)
    p = fa4.params(q, k, v, out, causal=a.causal, k_descale=kd, v_descale=vd)
    for _ in range(a.reps):
        fa4.call(p)
    torch.cuda.synchronize()
    sys.exit(0)
b, h = 16384 // a.s, 2048 // a.d
q, k, v = (torch.randn(b, a.s, h, a.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out = torch.empty_like(q)
ds = {}
if a.dtype == "e4m3":
    (q, ds["q_descale"]), (k, ds["k_descale"]), (v, ds["v_descale"]) = (peers.quantize_e4m3(x) for x in (q, k, v))
p = fa4.params(q, k, v, out, causal=a.causal, **ds)
for _ in range(a.reps):
    fa4.call(p)
if not ds:
    for _ in range(a.reps):
        peers.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), a.causal, SDPBackend.FLASH_ATTENTION)
    if a.cudnn:
        for _ in range(a.reps):
            peers.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), a.causal, SDPBackend.CUDNN_ATTENTION)
if peers.FA3 is not None:  # FlashAttention-3 where its wheel is installed (../shared/PEERS.md)
    for _ in range(a.reps):
        peers.FA3.flash_attn_func(q, k, v, causal=a.causal, **ds)
torch.cuda.synchronize()
