#!/usr/bin/env python3
"""fa4 against its peers on KV caches: decode, speculative decode and chunked prefill (issue 13 item 6).

Same process, same inputs, same interleaved timing as bench/peers.py, whose pieces this imports
(Fa4 / Fa4Params through the C ABI, Timer.compare_ms, the FA3 import, the SDPA helper). Peers:
  fa3        FlashAttention-3 `flash_attn_with_kvcache` (fa3-fwd wheel; ../shared/PEERS.md), its own
             split / PackGQA heuristics (num_splits=0, pack_gqa=None), scheduler metadata computed
             inside the call
  fa3_sched  the same call with `scheduler_metadata` from `get_scheduler_metadata` computed once
             outside the timed region (how vLLM calls it: one metadata per step, shared by the layers)
  cudnn      cuDNN through torch SDPA (enable_gqa, BHSD views of the same cache); Sq = 1 only
  flash      PyTorch SDPA's flash backend (FlashAttention-2), same views; Sq = 1 only (SDPA's causal
             mask is top-left aligned, which is not the KV-cache mask for Sq > 1)
FA3 on paged caches is tried on every paged layout (one probe call; --no-fa3-paged skips it): fa3-fwd
0.0.3 is built with FLASHATTENTION_DISABLE_PAGEDKV, which leaves only its TMA paged path, taken when
page_size % kBlockN == 0 (kBlockN 128 causal / 176 not, at D = 128) and Sq * Hq / Hkv > kBlockM (128):
so no decode point and, of the chunked-prefill layouts, page 256 only; the others raise "does not
support paged KV" and are null ("fa3_note" in the row says why). (D 64: kBlockM 192, kBlockN 128
causal / 192 not, so again chunked page 256 only; D 256: kBlockN 80, no layout here: fa3_tile_sm90.)
A peer that is not installed or fails on a shape is null in the JSON and "-" in the tables; the run
never stops on one.

Sweeps (D = 128, bf16, scale 1/sqrt(D); --head-dim 64 / 256 runs every point, decode, chunked and
--fp8-kv, at that head dim instead: q / k / v / out, the bytes and FLOPs, the --max-gb skips, the
checks, FA3's scheduler metadata; "head_dim" in the JSON meta, the markdown header says it):
  decode   B {1, 4, 32, 128} x (Hq, Hkv) {32/32, 32/8, 64/8, 128/8} x Sq {1, 2, 4, 8} x kv length
           {2k, 8k, 32k, 128k}; Sq > 1 is speculative decode: causal, bottom-right aligned (query i
           sees keys 0 .. kv_len - Sq + i), as fa4 and FA3 define it. Every point: a contiguous cache
           [B, kv_len, Hkv, D] with cache_seqlens = kv_len, and paged caches with page size 16, 64,
           256 (page 1 too for Sq = 1, 32/8): the contiguous cache's values scattered over pages in a
           random order, page_table [B, kv_len / page] int32, so every layout reads the same numbers.
           Points whose K+V exceed --max-gb (60 GB) are skipped (listed in the JSON).
  chunked  chunked prefill against a cache: B = 4, 32/8, Sq {128, 512, 2048}, kv {8k, 64k} (the
           chunk is the cache's last Sq positions), causal bottom-right, contiguous, page 64 and page
           256 (the page size FA3's paged path takes); TFLOP/s too (FLOPs = 4 * B * Hq * D * visible (query, key) pairs).
  fp8 KV   --fp8-kv (issue 15 item 4): fa4 only, the same bf16 q against the bf16 cache and
           against an e4m3 cache quantized from it (factors amax / 448 per (batch, kv head), or per
           token with --kv-scale per-token; bench/peers.py quantize_e4m3), both timed in the same
           rounds on every layout. Default points B = 32, 32/8, Sq 1, kv {4k, 16k, 64k}, contiguous
           and page 16 / 64; --b / --heads / --sq / --kv / --pages replace their list (--quick changes
           nothing). GB/s of what each call reads (e4m3 K + V and the fp32 factors; bf16 K + V), the
           fraction of 4.8 TB/s, and tokens/s fp8 / bf16 (= bf16 time / fp8 time). Checks: each
           output against fp32 attention on the values its cache holds (the e4m3 one dequantized),
           every sequence: max abs (2e-2) and rel-L2 (1e-2: q is bf16, DESIGN.md §4); "quant_rel_l2"
           is the fp8 output against the bf16 cache's fp32 result (what quantizing costs; no bound).
Metric: GB/s of K+V bytes read = 2 * B * kv_len * Hkv * D * 2 bytes / time (the same bytes for
Sq > 1); the tables show TB/s and the fraction of the H200's 4.8 TB/s HBM. Each row is one
(point, layout): page 0 = contiguous. "best peer" is the fastest peer on the row's layout; on a paged
row where no peer runs paged, the fastest peer on the contiguous cache (marked "(c)").

Timing: Timer.compare_ms of bench/peers.py (CUDA events, interleaved rounds, order reshuffled every
round, idle before every block: --idle-ms, 5 by default instead of peers.py's 30, which would be most
of this sweep's time). Two changes for short kernels, in DecodeTimer: before each block of reps the
GPU gets a spin kernel (torch.cuda._sleep) long enough for the host to enqueue the whole block behind
it, so host launch overhead (FA3's / SDPA's Python wrappers: tens of us) does not show up as kernel
time (--no-hide-launch: eager timing), and large points run fewer reps (each implementation about
--target-ms per point, at least 10 reps, at most --reps). The L2 (60 MB, --l2-mb) is not flushed
except on points whose K+V is at most twice its size, which then get peers.py's 256 MB flush before
every rep (the "L2" note in the table marks K+V that fits in it).

Correctness, every point: fa4's output (every layout) against the reference, max abs diff in the
JSON ("maxdiff"; "ref" names it: FA3's contiguous output where it ran, else SDPA flash, else fp32);
fa4's output is filled with NaN before the checked call, so a kernel that writes nothing shows as
nan. Also fa4 (contiguous) and FA3 against an fp32 computation on the first and last sequence
("maxdiff_fp32", "maxdiff_fa3_fp32"). Over 2e-2 is printed as MISMATCH.

Usage: python3 bench/decode_peers.py --lib build-cuda/libfa4.so --out DIR [--quick]
           [--b 1,32] [--heads 32/8,64/8] [--sq 1,4] [--kv 8k,128k] [--pages 0,64]
           [--splits N] [--ab NAME=other/libfa4.so ...] [--skip-decode] [--skip-chunked] [--head-dim 64]
       python3 bench/decode_peers.py --fp8-kv [--kv-scale per-token] [--b ...] --lib ... --out DIR
       python3 bench/decode_peers.py --dry-run [...]   # the points and a time estimate, no GPU
Outputs: DIR/decode.json (meta + rows, rewritten after every point; "fp8_kv" rows with --fp8-kv),
DIR/decode.md (tables), and a summary printed last (fa4 / best peer min and median, paged /
contiguous per page size, points < 1x; with --fp8-kv tokens/s fp8 / bf16 per layout).
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (bench/peers.py: Fa4, Timer, FA3, sdpa, fmt, ratio)

D = 128  # the default head dim (--head-dim); every count below takes d= (default D)
HBM_GBS = 4800.0  # H200 HBM3e peak, GB/s
TOL = 2e-2
REL_L2_TOL = 1e-2  # fp8-KV rows: bf16 q's rel-L2 bound (DESIGN.md §4) on the dequantized reference
DEC_B = (1, 4, 32, 128)
DEC_HEADS = ((32, 32), (32, 8), (64, 8), (128, 8))
DEC_SQ = (1, 2, 4, 8)
DEC_KV = (2048, 8192, 32768, 131072)
DEC_PAGES = (0, 16, 64, 256)
CHUNK_B, CHUNK_HEADS = 4, (32, 8)
CHUNK_SQ = (128, 512, 2048)
CHUNK_KV = (8192, 65536)
CHUNK_PAGES = (0, 64, 256)
QUICK = dict(b=(1, 4, 32), heads=((32, 8),), sq=(1, 4), kv=(8192, 131072), pages=(0, 64))
QUICK_CHUNK = dict(sq=(512, 2048), kv=(65536,), pages=(0, 64, 256))
FP8_KV = dict(b=(32,), heads=((32, 8),), sq=(1,), kv=(4096, 16384, 65536), pages=(0, 16, 64))  # issue 15 item 4
PEER_COLS = ("fa3", "fa3_sched", "cudnn", "flash")  # "best peer" candidates


# ---------------------------------------------------------------- shapes, bytes, plans (no GPU)

def parse_len(x):
    """'8k' -> 8192, '128K' -> 131072, '1000' -> 1000."""
    x = x.strip().lower()
    return int(x[:-1]) * 1024 if x.endswith("k") else int(x)


def parse_ints(spec):
    return tuple(parse_len(x) for x in spec.split(",") if x.strip())


def parse_heads(spec):
    """'32/8,64/8' -> ((32, 8), (64, 8))."""
    out = []
    for x in spec.split(","):
        if x.strip():
            hq, _, hkv = x.partition("/")
            hq, hkv = int(hq), int(hkv or hq)
            if hq % hkv:
                raise ValueError(f"--heads: Hq {hq} is not a multiple of Hkv {hkv}")
            out.append((hq, hkv))
    return tuple(out)


def kv_bytes(b, kv_len, hkv, d=D, elem=2):
    """K + V bytes a call reads: 2 * B * kv_len * Hkv * D * elem."""
    return 2 * b * kv_len * hkv * d * elem


def fp8_kv_bytes(b, kv_len, hkv, per_token, d=D):
    """What an fp8-KV call reads: the e4m3 K + V (half the bf16 bytes) and their fp32 factors, one
    per (batch, kv head) or per (token, kv head), for K and for V."""
    return kv_bytes(b, kv_len, hkv, d, elem=1) + 2 * 4 * b * hkv * (kv_len if per_token else 1)


def visible_pairs(sq, kv_len, causal):
    """(query, key) pairs one sequence and head computes; causal is bottom-right aligned: query i
    sees keys 0 .. kv_len - sq + i (all of them when kv_len - sq + i >= kv_len - 1)."""
    if not causal:
        return sq * kv_len
    return sum(max(0, min(kv_len, kv_len - sq + i + 1)) for i in range(sq))


def attn_flops(b, hq, sq, kv_len, causal, d=D):
    return 4 * b * hq * d * visible_pairs(sq, kv_len, causal)


def decode_points(bs, heads, sqs, kvs, pages, max_bytes, page1_subset=True, kind="decode", d=D):
    """The sweep's points, in run order, and the ones skipped for memory (K+V at head dim d).
    Each point: dict(kind, b, sq, hq, hkv, kv_len, pages) with pages the layouts to run (0 =
    contiguous, always first). page1_subset adds page 1 to the Sq = 1, 32/8 points."""
    points, skipped = [], []
    for hq, hkv in heads:
        for sq in sqs:
            for kv in kvs:
                for b in bs:
                    pt = dict(kind=kind, b=b, sq=sq, hq=hq, hkv=hkv, kv_len=kv)
                    nb = kv_bytes(b, kv, hkv, d)
                    if nb > max_bytes:
                        skipped.append(dict(pt, kv_gb=nb / 1e9, reason=f"K+V {nb / 1e9:.1f} GB > {max_bytes / 1e9:.0f} GB"))
                        continue
                    if sq > kv:
                        skipped.append(dict(pt, kv_gb=nb / 1e9, reason="Sq > kv_len"))
                        continue
                    ps = [0] + sorted(set(p for p in pages if p > 0))
                    if page1_subset and sq == 1 and (hq, hkv) == (32, 8) and 1 not in ps:
                        ps.append(1)
                    pt["pages"] = ps
                    points.append(pt)
    return points, skipped


def make_page_table(b, kv_len, page, gen=None, device="cpu"):
    """A scattered page table: [B, ceil(kv_len / page)] int32, a random permutation of all
    B * pages_per_seq physical pages (logical page j of sequence s lives at table[s, j])."""
    per_seq = -(-kv_len // page)
    perm = torch.randperm(b * per_seq, generator=gen, device=device, dtype=torch.int64)
    return perm.to(torch.int32).view(b, per_seq).contiguous()


def scatter_pages(k, table, page):
    """Copies a contiguous cache k[B, >= kv_len, H, D] into pages [B * pages_per_seq, page, H, D]
    at table's slots (logical page j of sequence s at table[s, j]). A last partial page is padded
    with zeros (past cache_seqlens: never read)."""
    b, cap, h, d = k.shape
    per_seq = table.shape[1]
    kv_len = min(cap, per_seq * page)
    full, rem = kv_len // page, kv_len % page
    kp = torch.zeros(b * per_seq, page, h, d, dtype=k.dtype, device=k.device) if rem else \
        torch.empty(b * per_seq, page, h, d, dtype=k.dtype, device=k.device)
    idx = table.long()
    for s in range(b):  # one sequence at a time: no temporary of the whole cache
        if full:
            kp.index_copy_(0, idx[s, :full], k[s, :full * page].reshape(full, page, h, d))
        if rem:
            kp[idx[s, full], :rem] = k[s, full * page:kv_len]
    return kp


def scatter_fp8_pages(x8, f, table, page):
    """scatter_pages for an e4m3 cache and its factors: the bytes move as uint8 (torch's index
    kernels need not take float8); per-token factors [B, L, H] follow their tokens into
    [num_pages, page, H], per-(batch, head) ones [B, H] are the same for every layout."""
    xp = scatter_pages(x8.view(torch.uint8), table, page).view(torch.float8_e4m3fn)
    return xp, (scatter_pages(f[..., None], table, page)[..., 0] if f.dim() == 3 else f)


def gather_pages(kp, table, kv_len):
    """The inverse of scatter_pages (for the tests): [B, kv_len, H, D]."""
    b = table.shape[0]
    return kp[table.long().view(-1)].view(b, -1, kp.shape[2], kp.shape[3])[:, :kv_len]


def plan_groups(pages, nbytes, free_bytes, margin_bytes):
    """Which layouts are timed together. The contiguous cache is allocated already; each paged
    layout needs its own copy (nbytes). Greedy: as many paged copies as fit in free_bytes -
    margin_bytes share the contiguous layout's group (one set of interleaved rounds); the rest
    go in further groups, one copy at a time, or are returned in `no_room` when even one does
    not fit. Page tables are small and counted in the margin."""
    paged = [p for p in pages if p > 0]
    room = free_bytes - margin_bytes
    groups, cur, used, no_room = [], [0] if 0 in pages else [], 0, []
    for p in paged:
        if nbytes > room:
            no_room.append(p)
            continue
        if used + nbytes > room:
            groups.append(cur)
            cur, used = [], 0
        cur.append(p)
        used += nbytes
    if cur:
        groups.append(cur)
    return groups, no_room


def reps_for(est_ms, max_reps, target_ms, min_reps=10):
    """Reps per implementation: about target_ms of kernel time, in [min_reps, max_reps]."""
    if est_ms <= 0:
        return max_reps
    return int(max(min(min_reps, max_reps), min(max_reps, target_ms / est_ms)))


def est_call_ms(nbytes, flops, gbs=3800.0, tflops=450.0):
    """A guess of one call's time on an H200 (for the rep counts and the --dry-run estimate)."""
    return max(nbytes / gbs / 1e6, flops / tflops / 1e9) + 0.008


def fa3_tile_sm90(d, causal):
    """(kBlockM, kBlockN) of FA3's sm90 forward for bf16 q / k / v of head dim d (v's the same), no
    window, as get_pagedkv_tma asks it (paged_kv_non_TMA false): flash-attention's
    hopper/tile_size.h, tile_size_fwd_sm90, whose last change (199401d3, 2025-08) predates the
    torch-stable-ABI API (flash_api_stable.cpp, 2025-09) that fa3-fwd 0.0.3 (../shared/PEERS.md) needs:
      D  64: 192 x 128 causal, 192 x 192 not
      D 128: 128 x 128 causal, 128 x 176 not
      D 256: 128 x 80 either way
    The script calls FA3 causal only for Sq > 1, as FA3 itself drops causal at Sq = 1. None for any
    other head dim (96, 192, ... are not in this table): fa3_paged_expected then expects no paged
    layout, the conservative answer (the run probes every layout anyway)."""
    return {64: (192, 128 if causal else 192), 128: (128, 128 if causal else 176), 256: (128, 80)}.get(d)


def fa3_paged_expected(pt, page, d=D):
    """Whether fa3-fwd 0.0.3 (TMA paged path only) should take this paged layout at head dim d:
    page a multiple of kBlockN and Sq * Hq / Hkv > kBlockM (get_pagedkv_tma), with fa3_tile_sm90's
    tile (at D = 128: kBlockN 128 causal, 176 not, kBlockM 128; D 64: 128 / 192, kBlockM 192; D 256:
    kBlockN 80, which no page size here is a multiple of); False for a head dim the table lacks.
    For the estimate: the run tries every paged layout."""
    tile = fa3_tile_sm90(d, pt["sq"] > 1)
    if tile is None:
        return False
    block_m, block_n = tile
    return page > 0 and page % block_n == 0 and pt["sq"] * pt["hq"] // pt["hkv"] > block_m


def impl_names(pt, fa3=True, fa3_paged=True, n_ab=0, d=D):
    """(name, page) pairs timed at a point (FA3 paged where fa3_paged_expected at head dim d)."""
    out = []
    for page in pt["pages"]:
        out.append(("fa4", page))
        if pt["kind"] == "fp8kv":  # fa4 on the e4m3 cache and on the bf16 one
            out.append(("fa4_bf16", page))
            continue
        out += [(f"ab{i}", page) for i in range(n_ab)]
        if fa3 and (page == 0 or (fa3_paged and fa3_paged_expected(pt, page, d))):
            out += [("fa3", page), ("fa3_sched", page)]
        if page == 0 and pt["sq"] == 1 and pt["kind"] == "decode":
            out += [("cudnn", 0), ("flash", 0)]
    return out


def estimate_seconds(points, max_reps, target_ms, idle_s, l2_bytes, fa3=True, fa3_paged=True, n_ab=0,
                     host_us=40.0, warmup=2, d=D):
    """(seconds, timed calls) the sweep should take on an H200 at head dim d: kernel time of every call
    (trial + warm-up + reps + checks), the idle before every block, the L2 flushes, the host
    time where it exceeds the kernel's, the setup (random caches, page scatters, the checks)."""
    total_s, calls = 0.0, 0
    for pt in points:
        nb = kv_bytes(pt["b"], pt["kv_len"], pt["hkv"], d)
        fl = attn_flops(pt["b"], pt["hq"], pt["sq"], pt["kv_len"], pt["sq"] > 1, d)
        est = est_call_ms(nb, fl)
        reps = reps_for(est, max_reps, target_ms)
        n = len(impl_names(pt, fa3, fa3_paged, n_ab, d))
        rounds = max(5, n)
        per_round = -(-reps // rounds)
        w = 1 if est > 1.0 else warmup
        per_impl = 1 + rounds * (w + per_round) + 3
        flush = nb <= 2 * l2_bytes
        lead_ms = n * rounds * min(per_round, 100) * 0.1  # DecodeTimer's spin kernel ahead of each block
        gpu_ms = n * per_impl * (est + (0.09 if flush else 0.0)) + lead_ms
        host_ms = n * per_impl * host_us / 1e3
        setup_ms = 3 * nb / 1.5e9 + (len(pt["pages"]) - 1) * 2 * nb / 2.5e9 + 30.0
        total_s += (max(gpu_ms, host_ms) + setup_ms) / 1e3 + n * rounds * idle_s
        calls += n * per_impl
    return total_s, calls


# ---------------------------------------------------------------- reference, rows, markdown

def ref_attention_fp32(q, k, v, kv_len, causal, scale=None, max_elems=1 << 27):
    """fp32 attention of one sequence: q[Sq, Hq, D], k/v[>= kv_len, Hkv, D] -> [Sq, Hq, D] fp32,
    causal bottom-right aligned, query rows in chunks of at most max_elems scores."""
    sq, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    scale = scale or d ** -0.5
    out = torch.empty(sq, hq, v.shape[-1], dtype=torch.float32, device=q.device)
    rows = max(1, max_elems // (g * kv_len))
    kpos = torch.arange(kv_len, device=q.device)
    for h in range(hkv):
        kh, vh = k[:kv_len, h].float(), v[:kv_len, h].float()
        for r0 in range(0, sq, rows):
            r1 = min(sq, r0 + rows)
            qh = q[r0:r1, h * g:(h + 1) * g].float().permute(1, 0, 2)  # [g, rows, D]
            s = torch.matmul(qh, kh.t()) * scale
            if causal:
                last = kv_len - sq + torch.arange(r0, r1, device=q.device)  # last visible key per row
                s.masked_fill_(kpos[None, :] > last[:, None], float("-inf"))
            out[r0:r1, h * g:(h + 1) * g] = torch.matmul(torch.softmax(s, -1), vh).permute(1, 0, 2)
    return out


def ref_fp32_batch(q, k_at, v_at, kv_len, causal):
    """ref_attention_fp32 of every sequence: [B, Sq, Hq, Dv] fp32; k_at(s) / v_at(s) give sequence
    s's cache [>= kv_len, Hkv, D], so one sequence's fp32 copy exists at a time."""
    return torch.stack([ref_attention_fp32(q[s], k_at(s), v_at(s), kv_len, causal) for s in range(q.shape[0])])


def maxdiff(a, b):
    """max |a - b| as a float (nan when either holds a NaN: a poisoned output left unwritten)."""
    d = (a.float() - b.float()).abs()
    if torch.isnan(d).any():
        return float("nan")
    return d.max().item()


def worst(xs):
    """The largest of some max-abs diffs, nan if any is nan (Python's max() may skip a nan)."""
    xs = list(xs)
    return float("nan") if any(math.isnan(x) for x in xs) else max(xs)


def jnum(x):
    """JSON-safe number: NaN / inf as strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def rel_l2(a, ref):
    """||a - ref|| / ||ref|| as a float (nan when a holds a NaN)."""
    return ((a.float() - ref.float()).norm() / ref.float().norm()).item()


def bad(x, tol=TOL):
    """A max-abs diff (or with tol another error) that fails the check (nan, string nan, or over tol)."""
    if x is None:
        return False
    if isinstance(x, str):
        return True
    return not (x <= tol)


def fp8_fails(r):
    """The checks an fp8-KV row fails: max abs over TOL, rel-L2 over REL_L2_TOL, either cache."""
    return ([k for k in ("maxdiff", "maxdiff_bf16") if bad(r.get(k))] +
            [k for k in ("rel_l2", "rel_l2_bf16") if bad(r.get(k), REL_L2_TOL)])


def finish_rows(rows):
    """Fills best peer, fa4/best, the HBM fraction and paged/contiguous in the rows of one point
    (rows: page -> row; page 0 is the contiguous one)."""
    contig = rows.get(0, {})
    cbest, cname = _best(contig)
    for page, r in rows.items():
        best, name = _best(r)
        if best is None and page > 0 and cbest is not None:
            best, name = cbest, cname + " (c)"
        r["best_peer"], r["best_peer_name"] = best, name
        r["fa4_over_best"] = peers.ratio(r.get("fa4"), best)
        r["hbm_frac"] = None if r.get("fa4") is None else r["fa4"] / HBM_GBS
        if page > 0:
            r["fa4_contig"] = contig.get("fa4")
            r["paged_over_contig"] = peers.ratio(r.get("fa4"), contig.get("fa4"))
    return rows


def finish_fp8_rows(rows):
    """Fills the fp8-KV rows of one point (page -> row; page 0 contiguous): tokens/s fp8 / bf16,
    the fractions of HBM peak, the fp8 call's paged / contiguous."""
    contig = rows.get(0, {})
    for page, r in rows.items():
        r["tokens_ratio_fp8_bf16"] = peers.ratio(r.get("fa4_bf16_us"), r.get("fa4_us"))
        r["hbm_frac"] = None if r.get("fa4_gbs") is None else r["fa4_gbs"] / HBM_GBS
        r["hbm_frac_bf16"] = None if r.get("fa4_bf16_gbs") is None else r["fa4_bf16_gbs"] / HBM_GBS
        if page > 0:
            r["paged_over_contig"] = peers.ratio(contig.get("fa4_us"), r.get("fa4_us"))
    return rows


def _best(r):
    xs = [(r[n], n) for n in PEER_COLS if r.get(n) is not None]
    return max(xs) if xs else (None, None)


def tbs(x):
    return "-" if x is None else f"{x / 1000:.2f}"


def _ratio_s(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def _diff_s(x, tol=TOL):
    if x is None:
        return "-"
    if isinstance(x, str) or not math.isfinite(x):
        return f"**{x}**"
    return f"**{x:.2g}**" if x > tol else f"{x:.2g}"


def _pct_s(frac):
    return _ratio_s(None if frac is None else 100 * frac, 0)


def _kv_s(n):
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def markdown(meta, dec, chunk, skipped, ab_names=(), fp8=()):
    L = [f"# fa4 vs peers on KV caches: {meta.get('gpu')}, {meta.get('date')}", "",
         f"- commit: `{meta.get('commit')}`", f"- command: `{meta.get('command')}`",
         f"- torch {meta.get('torch')}, CUDA {meta.get('cuda')}, cuDNN {meta.get('cudnn')}, FA3 {meta.get('fa3')}"
         f" (paged layouts tried: {meta.get('fa3_paged')})"]
    if not fp8:  # the peers' sweep; the fp8-KV table says what it measures itself
        L.append(f"- D = {meta.get('head_dim', D)}, bf16; GB/s of K+V read (2 * B * kv * Hkv * D * 2 bytes), shown in TB/s; %HBM of {HBM_GBS / 1000:.1f} TB/s;"
                 f" fa4 num_splits {meta.get('num_splits')}")
    L.append("- timing: bench/peers.py's interleaved rounds (CUDA events, median), launch overhead hidden behind a spin kernel"
             f" ({'on' if meta.get('hide_launch') else 'off'}); L2 flushed before each rep where K+V <= 2 x L2 (note L2: K+V fits in it)")
    if not fp8:
        L.append("- page 0 = contiguous cache; best peer: fastest of FA3, FA3 with precomputed scheduler metadata, cuDNN, FA2 on the"
                 " same layout, or on the contiguous cache where no peer runs paged ((c))")
    L.append("")
    if dec:
        L += ["## Decode and speculative decode (TB/s)", "",
              "| B | Sq | Hq/Hkv | kv | page | K+V GB | fa4 | FA3 | FA3 md | cuDNN | FA2 | best peer | fa4/best | %HBM | paged/contig | maxdiff (ref) | note |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        L += [_md_row(r) for r in dec]
    if chunk:
        L += ["", "## Chunked prefill against a cache, causal bottom-right (TFLOP/s, TB/s of K+V)", "",
              "| B | Sq | Hq/Hkv | kv | page | fa4 TFLOP/s | FA3 | FA3 md | fa4 TB/s | FA3 TB/s | best peer | fa4/best | paged/contig | maxdiff (ref) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in chunk:
            L.append(f"| {r['b']} | {r['sq']} | {r['hq']}/{r['hkv']} | {_kv_s(r['kv_len'])} | {r['page']} | "
                     f"{peers.fmt(r.get('tflops_fa4'))} | {peers.fmt(r.get('tflops_fa3'))} | {peers.fmt(r.get('tflops_fa3_sched'))} | "
                     f"{tbs(r.get('fa4'))} | {tbs(r.get('fa3'))} | {r.get('best_peer_name') or '-'} | "
                     f"**{_ratio_s(r.get('fa4_over_best'), 3)}** | {_ratio_s(r.get('paged_over_contig'), 3)} | "
                     f"{_diff_s(r.get('maxdiff'))} ({r.get('ref') or '-'}) |")
    rows_ab = [r for r in list(dec) + list(chunk) if any(r.get("ab_" + n) is not None for n in ab_names)]
    if ab_names and rows_ab:
        L += ["", "## A/B: other builds of fa4, same rounds, same inputs (TB/s)", "",
              "| kind | B | Sq | Hq/Hkv | kv | page | fa4 | " + " | ".join(f"{n} | {n}/fa4 | {n} maxdiff" for n in ab_names) + " |",
              "|---|---|---|---|---|---|---|" + "---|---|---|" * len(ab_names)]
        for r in rows_ab:
            L.append(f"| {r['kind']} | {r['b']} | {r['sq']} | {r['hq']}/{r['hkv']} | {_kv_s(r['kv_len'])} | {r['page']} | {tbs(r.get('fa4'))} | " +
                     " | ".join(f"{tbs(r.get('ab_' + n))} | {_ratio_s(peers.ratio(r.get('ab_' + n), r.get('fa4')), 3)} | "
                                f"{_diff_s(r.get('ab_' + n + '_maxdiff_vs_fa4'))}" for n in ab_names) + " |")
    if fp8:
        L += _fp8_md(fp8, meta.get("num_splits"), meta.get("head_dim", D))
    if skipped:
        L += ["", f"Skipped ({len(skipped)}): " + "; ".join(
            f"B {s['b']} Sq {s['sq']} {s['hq']}/{s['hkv']} kv {_kv_s(s['kv_len'])} ({s['reason']})" for s in skipped)]
    L += ["", "## Summary", "", "```", summary(dec, chunk, fp8), "```"]
    return "\n".join(L) + "\n"


def _fp8_md(rows, num_splits, d=D):
    L = ["## fp8 KV cache: e4m3 K / V against the bf16 cache (fa4 both, same q, same rounds)", "",
         f"D = {d}, bf16 q; TB/s of what each call reads (e4m3 K + V and the fp32 factors; bf16 K + V); %HBM of "
         f"{HBM_GBS / 1000:.1f} TB/s; tokens/s fp8 / bf16 = bf16 time / fp8 time; fa4 num_splits {num_splits}. "
         "maxdiff / rel-L2: against fp32 attention on the values the call's cache holds (the e4m3 one dequantized), "
         f"bounds {TOL:g} / {REL_L2_TOL:g}; quant rel-L2: the fp8 output against the bf16 cache's fp32 result.", "",
         "| B | Sq | Hq/Hkv | kv | page | factors | e4m3 GB | fp8 TB/s | %HBM | bf16 TB/s | %HBM | tokens/s fp8/bf16 |"
         " fp8 paged/contig | fp8 maxdiff / rel-L2 | bf16 maxdiff / rel-L2 | quant rel-L2 | note |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        note = (["L2"] if r.get("l2_resident") else []) + ([str(r["error"])[:60]] if r.get("error") else [])
        L.append(f"| {r['b']} | {r['sq']} | {r['hq']}/{r['hkv']} | {_kv_s(r['kv_len'])} | {r['page']} | {r['kv_scale']} | "
                 f"{r.get('kv_gb', 0):.3g} | {tbs(r.get('fa4_gbs'))} | {_pct_s(r.get('hbm_frac'))} | "
                 f"{tbs(r.get('fa4_bf16_gbs'))} | {_pct_s(r.get('hbm_frac_bf16'))} | "
                 f"**{_ratio_s(r.get('tokens_ratio_fp8_bf16'), 3)}** | {_ratio_s(r.get('paged_over_contig'), 3)} | "
                 f"{_diff_s(r.get('maxdiff'))} / {_diff_s(r.get('rel_l2'), REL_L2_TOL)} | "
                 f"{_diff_s(r.get('maxdiff_bf16'))} / {_diff_s(r.get('rel_l2_bf16'), REL_L2_TOL)} | "
                 f"{_ratio_s(r.get('quant_rel_l2'), 4)} | {' '.join(note)} |")
    return L


def _md_row(r):
    note = []
    if r.get("l2_resident"):
        note.append("L2")
    if r.get("error"):
        note.append(str(r["error"])[:60])
    return (f"| {r['b']} | {r['sq']} | {r['hq']}/{r['hkv']} | {_kv_s(r['kv_len'])} | {r['page']} | {r.get('kv_gb', 0):.3g} | "
            f"{tbs(r.get('fa4'))} | {tbs(r.get('fa3'))} | {tbs(r.get('fa3_sched'))} | {tbs(r.get('cudnn'))} | "
            f"{tbs(r.get('flash'))} | {r.get('best_peer_name') or '-'} | **{_ratio_s(r.get('fa4_over_best'), 3)}** | "
            f"{_ratio_s(None if r.get('hbm_frac') is None else 100 * r['hbm_frac'], 0)} | "
            f"{_ratio_s(r.get('paged_over_contig'), 3)} | {_diff_s(r.get('maxdiff'))} ({r.get('ref') or '-'}) | {' '.join(note)} |")


def _stats(xs):
    xs = sorted(xs)
    if not xs:
        return "-"
    return f"min {xs[0]:.3f}  median {xs[len(xs) // 2]:.3f}  max {xs[-1]:.3f}  (n={len(xs)})"


def _label(r):
    return f"{r['kind']} B{r['b']} Sq{r['sq']} {r['hq']}/{r['hkv']} kv{_kv_s(r['kv_len'])} page{r['page']}"


def summary(dec, chunk=(), fp8=()):
    """The lines printed last: fa4 / best peer, paged / contiguous per page size, points < 1x and
    the failed checks (fp8-KV rows: fp8_summary)."""
    L = fp8_summary(fp8) if fp8 else []
    for title, rows in (("decode", dec), ("chunked prefill", chunk)):
        if not rows:
            continue
        c = [r["fa4_over_best"] for r in rows if r["page"] == 0 and r.get("fa4_over_best") is not None]
        p = [r["fa4_over_best"] for r in rows if r["page"] > 0 and r.get("fa4_over_best") is not None]
        L.append(f"{title}: fa4/best peer, contiguous: {_stats(c)}")
        L.append(f"{title}: fa4/best peer, paged (vs a paged peer, else the best contiguous one): {_stats(p)}")
        for page in sorted(set(r["page"] for r in rows if r["page"] > 0)):
            xs = [r["paged_over_contig"] for r in rows if r["page"] == page and r.get("paged_over_contig") is not None]
            L.append(f"{title}: fa4 paged {page} / contiguous: {_stats(xs)}")
        if title == "decode":
            h = [r["hbm_frac"] for r in rows if r["page"] == 0 and r.get("hbm_frac") is not None and not r.get("l2_resident")]
            L.append(f"{title}: fa4 contiguous fraction of HBM peak (points not L2-resident): {_stats(h)}")
        below = sorted((r for r in rows if r.get("fa4_over_best") is not None and r["fa4_over_best"] < 1.0),
                       key=lambda r: r["fa4_over_best"])
        L.append(f"{title}: {len(below)} rows below 1.0x" + (":" if below else ""))
        L += [f"    {r['fa4_over_best']:.3f}  {_label(r)}  (fa4 {tbs(r.get('fa4'))} TB/s, {r['best_peer_name']} "
              f"{tbs(r.get('best_peer'))})" for r in below]
        fails = [r for r in rows if any(bad(r.get(k)) for k in r if "maxdiff" in k)]
        missing = [r for r in rows if r.get("fa4") is None]
        if fails:
            L.append(f"{title}: !!! {len(fails)} rows FAIL the {TOL:g} max-abs check:")
            L += ["    " + _label(r) + "  " + "  ".join(f"{k}={r[k]}" for k in r if "maxdiff" in k and bad(r.get(k)))
                  for r in fails]
        if missing:
            L.append(f"{title}: {len(missing)} rows without an fa4 time: " + "; ".join(_label(r) for r in missing[:20]))
    return "\n".join(L)


def fp8_summary(rows):
    """tokens/s fp8 / bf16 per layout, both caches' fractions of HBM peak, the failed checks."""
    L = []
    for page in sorted(set(r["page"] for r in rows)):
        xs = [r["tokens_ratio_fp8_bf16"] for r in rows if r["page"] == page and r.get("tokens_ratio_fp8_bf16") is not None]
        L.append(f"fp8 KV: tokens/s fp8 / bf16, {'contiguous' if page == 0 else f'page {page}'}: {_stats(xs)}")
    for key, what in (("hbm_frac", "e4m3"), ("hbm_frac_bf16", "bf16")):
        h = [r[key] for r in rows if r["page"] == 0 and r.get(key) is not None and not r.get("l2_resident")]
        L.append(f"fp8 KV: fa4 on the {what} cache, contiguous, fraction of HBM peak (points not L2-resident): {_stats(h)}")
    fails = [r for r in rows if fp8_fails(r)]
    if fails:
        L.append(f"fp8 KV: !!! {len(fails)} rows FAIL the checks (max abs {TOL:g}, rel-L2 {REL_L2_TOL:g}):")
        L += ["    " + _label(r) + "  " + "  ".join(f"{k}={r[k]}" for k in fp8_fails(r)) for r in fails]
    missing = [r for r in rows if r.get("fa4_gbs") is None or r.get("fa4_bf16_gbs") is None]
    if missing:
        L.append(f"fp8 KV: {len(missing)} rows without both fa4 times: " + "; ".join(_label(r) for r in missing[:20]))
    return L


# ---------------------------------------------------------------- GPU side

class DecodeTimer(peers.Timer):
    """peers.Timer with two changes for short kernels: a spin kernel before each block of reps
    (the host enqueues the block while it runs, so the events time the GPU, not the Python
    wrappers), and a cap on warm-up calls (set per point: 1 for long calls)."""

    def __init__(self, reps, hide_launch=True):
        super().__init__(reps)
        self.hide_launch = hide_launch and hasattr(torch.cuda, "_sleep")
        self.max_warmup = 2
        self.lead_cycles_per_rep = 200_000  # ~100 us at 1.98 GHz: more than any wrapper's host time

    def samples_ms(self, fn, reps, flush=True, warmup=5):
        return super().samples_ms(fn, reps, flush, min(warmup, self.max_warmup))

    def before_reps(self, reps):
        if self.hide_launch:
            torch.cuda._sleep(int(min(reps, 100) * self.lead_cycles_per_rep))


class Ctx:
    """What run_point needs: args, fa4, variants, timer, l2_bytes, margin_bytes, fa3_paged, device
    (and free_bytes off CUDA: the tests run the whole point on CPU with stand-ins)."""
    device = "cuda"
    free_bytes = 1 << 40
    fa3_paged = True

    def __init__(self):
        self.notes = set()  # messages printed once


def _fa4_fn(lib, p):
    return lambda: lib.call(p)


def _fa3_fn(q, kc, vc, seqlens, table, causal, md=None):
    fa3 = peers.FA3
    if md is None:
        return lambda: fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, page_table=table, causal=causal)
    return lambda: fa3.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, page_table=table, causal=causal,
                                               scheduler_metadata=md)


def _sdpa_fn(qt, kt, vt, backend):
    return lambda: peers.sdpa(qt, kt, vt, False, backend, True)


def _time_like(timer, est_ms, args):
    """The timer's reps and warm-up for a call estimated at est_ms."""
    timer.reps = reps_for(est_ms, args.reps, args.target_ms)
    timer.max_warmup = 1 if est_ms > 1.0 else 2
    return timer


def _point_inputs(ctx, pt, d, seed):
    """One point's bf16 q [B, Sq, Hq, D] and k / v [B, kv, Hkv, D] from `seed`, its cache lengths, the
    generator (drawn on for the page tables after them) and the device's synchronize."""
    b, sq, hq, hkv, L = pt["b"], pt["sq"], pt["hq"], pt["hkv"], pt["kv_len"]
    dev, bf = ctx.device, torch.bfloat16
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    q = torch.randn(b, sq, hq, d, device=dev, dtype=bf, generator=gen)
    k = torch.randn(b, L, hkv, d, device=dev, dtype=bf, generator=gen)
    v = torch.randn(b, L, hkv, d, device=dev, dtype=bf, generator=gen)
    seqlens = torch.full((b,), L, dtype=torch.int32, device=dev)
    return q, k, v, seqlens, gen, sync


def run_point(ctx, pt, seed):
    """Times and checks one point on all its layouts (head dim ctx.args.head_dim); returns {page: row}."""
    from torch.nn.attention import SDPBackend
    b, sq, hq, hkv, L = pt["b"], pt["sq"], pt["hq"], pt["hkv"], pt["kv_len"]
    d = ctx.args.head_dim
    causal = sq > 1
    nb = kv_bytes(b, L, hkv, d)
    fl = attn_flops(b, hq, sq, L, causal, d)
    est = est_call_ms(nb, fl)
    timer = _time_like(ctx.timer, est, ctx.args)
    flush = nb <= 2 * ctx.l2_bytes
    base = dict(kind=pt["kind"], b=b, sq=sq, hq=hq, hkv=hkv, kv_len=L, kv_gb=nb / 1e9, l2_resident=nb <= ctx.l2_bytes,
                flushed=flush, reps=timer.reps, causal=int(causal))
    cols = ("fa4",) + PEER_COLS + tuple("ab_" + n for n in ctx.variants)
    base.update({c: None for c in cols})  # null where an implementation cannot run the point
    if pt["kind"] == "chunked":
        base.update({"tflops_" + c: None for c in cols})
    rows = {page: dict(base, page=page) for page in pt["pages"]}
    dev, bf = ctx.device, torch.bfloat16
    q, k, v, seqlens, gen, sync = _point_inputs(ctx, pt, d, seed)
    gbs = lambda t: None if t is None else nb / t / 1e6
    tfl = lambda t: None if t is None else fl / t / 1e9
    outs = {page: torch.empty_like(q) for page in pt["pages"]}
    outs_ab = {(n, page): torch.empty_like(q) for n in ctx.variants for page in pt["pages"]}
    fa3_ok = peers.FA3 is not None
    md_cache = {}

    def fa3_md(page):
        if page not in md_cache:
            try:
                md_cache[page] = peers.FA3.get_scheduler_metadata(
                    b, sq, L, hq, hkv, d, seqlens, qkv_dtype=bf, page_size=page or None, causal=causal)
            except Exception as e:
                print(f"    (fa3 get_scheduler_metadata failed: {type(e).__name__}: {str(e)[:120]})", flush=True)
                md_cache[page] = None
        return md_cache[page]

    # The references, once per point, on the contiguous cache: FA3, else SDPA flash (Sq = 1),
    # and fp32 on the first and last sequence.
    ref, ref_name = None, None
    check = not ctx.args.no_check
    sel = sorted(set([0, b - 1]))
    ref32 = None
    if check:
        ref32 = [ref_attention_fp32(q[s], k[s], v[s], L, causal) for s in sel]
        if fa3_ok:
            try:
                ref = peers.first(peers.FA3.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=causal))
                sync()
                ref_name = "fa3"
                d32 = worst(maxdiff(ref[s], r) for s, r in zip(sel, ref32))
                rows[0]["maxdiff_fa3_fp32"] = jnum(d32)
            except Exception as e:
                print(f"    (fa3 reference failed: {type(e).__name__}: {str(e)[:120]})", flush=True)
                ref = None
        if ref is None and sq == 1 and pt["kind"] == "decode":
            try:
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                ref = peers.sdpa(qt, kt, vt, False, SDPBackend.FLASH_ATTENTION, True).transpose(1, 2)
                sync()
                ref_name = "flash"
            except Exception as e:
                print(f"    (sdpa flash reference failed: {type(e).__name__}: {str(e)[:120]})", flush=True)
                ref = None
        if ref is None:
            ref_name = "fp32"

    free = torch.cuda.mem_get_info()[0] if dev == "cuda" else ctx.free_bytes
    groups, no_room = plan_groups(pt["pages"], nb, free, ctx.margin_bytes)
    for page in no_room:
        rows[page]["error"] = "no memory for the paged copy"
    for group in groups:
        caches = {}
        for page in group:
            if page == 0:
                caches[0] = (k, v, None)
                continue
            try:
                table = make_page_table(b, L, page, gen=gen, device=dev)
                caches[page] = (scatter_pages(k, table, page), scatter_pages(v, table, page), table)
            except torch.cuda.OutOfMemoryError:
                rows[page]["error"] = "out of memory building the paged copy"
                if dev == "cuda":
                    torch.cuda.empty_cache()
        fns, params = {}, {}
        for page in group:
            if page not in caches:
                continue
            kc, vc, table = caches[page]
            try:
                params[page] = ctx.fa4.params(q, kc, vc, outs[page], causal=causal, cache_seqlens=seqlens,
                                              page_table=table, num_splits=ctx.args.splits)
                fns[f"fa4@{page}"] = _fa4_fn(ctx.fa4, params[page])
            except Exception as e:
                rows[page]["error"] = f"fa4 params: {e}"
            for n, lib in ctx.variants.items():
                pv = lib.params(q, kc, vc, outs_ab[(n, page)], causal=causal, cache_seqlens=seqlens, page_table=table,
                                num_splits=ctx.args.splits)
                params[(n, page)] = pv
                fns[f"ab_{n}@{page}"] = _fa4_fn(lib, pv)
            if fa3_ok and (page == 0 or ctx.fa3_paged):
                f3 = _fa3_fn(q, kc, vc, seqlens, table, causal)
                ok = True
                if page > 0:  # a probe: most paged layouts are refused by this FA3 build (host-side check)
                    try:
                        f3()
                        sync()
                    except Exception as e:
                        ok = False
                        msg = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
                        rows[page]["fa3_note"] = msg
                        if msg not in ctx.notes:
                            ctx.notes.add(msg)
                            print(f"    (fa3 paged, page {page}: {msg}; null wherever it recurs)", flush=True)
                if ok:
                    fns[f"fa3@{page}"] = f3
                    md = fa3_md(page)
                    if md is not None:
                        fns[f"fa3_sched@{page}"] = _fa3_fn(q, kc, vc, seqlens, table, causal, md)
            if page == 0 and sq == 1 and pt["kind"] == "decode":
                qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                fns["cudnn@0"] = _sdpa_fn(qt, kt, vt, SDPBackend.CUDNN_ATTENTION)
                fns["flash@0"] = _sdpa_fn(qt, kt, vt, SDPBackend.FLASH_ATTENTION)
        t = timer.compare_ms(fns, flush=flush) if fns else {}
        for key, ms in t.items():
            name, _, page = key.partition("@")
            r = rows[int(page)]
            r[name] = gbs(ms)
            if pt["kind"] == "chunked":
                r["tflops_" + name] = tfl(ms)
        if check:
            for page in group:
                if page not in params:
                    continue
                r = rows[page]
                try:
                    outs[page].fill_(float("nan"))
                    ctx.fa4.call(params[page])
                    sync()
                    o = outs[page]
                    d32 = worst(maxdiff(o[s], r32) for s, r32 in zip(sel, ref32))
                    r["maxdiff"] = jnum(d32 if ref is None else maxdiff(o, ref))
                    r["ref"] = ref_name
                    r["maxdiff_fp32"] = jnum(d32)
                    for n, lib in ctx.variants.items():
                        oa = outs_ab[(n, page)]
                        oa.fill_(float("nan"))
                        lib.call(params[(n, page)])
                        sync()
                        r[f"ab_{n}_maxdiff_vs_fa4"] = jnum(maxdiff(oa, o))
                    if f"fa3_sched@{page}" in fns and r.get("fa3_sched") is not None and ref_name == "fa3":
                        r["maxdiff_fa3_sched_vs_fa3"] = jnum(maxdiff(peers.first(fns[f"fa3_sched@{page}"]()), ref))
                    if page > 0 and f"fa3@{page}" in fns and r.get("fa3") is not None:
                        o3 = peers.first(fns[f"fa3@{page}"]())
                        r["maxdiff_fa3_paged_vs_fa3"] = jnum(maxdiff(o3, ref)) if ref_name == "fa3" else None
                except Exception as e:
                    r["error"] = f"check: {type(e).__name__}: {str(e)[:120]}"
        del caches, fns, params
    del q, k, v, outs, outs_ab, ref
    return finish_rows(rows)


def run_fp8_point(ctx, pt, seed):
    """One --fp8-kv point on all its layouts: the same bf16 q against the bf16 cache and against
    an e4m3 cache quantized from it (ctx.args.kv_scale factors), both fa4, every layout in one set
    of interleaved rounds (as many paged copies as fit: plan_groups); each output checked against
    fp32 attention on its cache's values, every sequence. Head dim ctx.args.head_dim. Returns {page: row}."""
    b, sq, hq, hkv, L = pt["b"], pt["sq"], pt["hq"], pt["hkv"], pt["kv_len"]
    d = ctx.args.head_dim
    causal = sq > 1
    per_token = ctx.args.kv_scale == "per-token"
    nb16, nb8 = kv_bytes(b, L, hkv, d), fp8_kv_bytes(b, L, hkv, per_token, d)
    est = est_call_ms(nb16, attn_flops(b, hq, sq, L, causal, d))  # the bf16 call's: the longer of the two
    timer = _time_like(ctx.timer, est, ctx.args)
    flush = nb16 <= 2 * ctx.l2_bytes
    base = dict(kind=pt["kind"], b=b, sq=sq, hq=hq, hkv=hkv, kv_len=L, kv_scale=ctx.args.kv_scale, kv_gb=nb8 / 1e9,
                bf16_gb=nb16 / 1e9, l2_resident=nb8 <= ctx.l2_bytes, flushed=flush, reps=timer.reps, causal=int(causal),
                fa4_gbs=None, fa4_bf16_gbs=None, fa4_us=None, fa4_bf16_us=None)
    rows = {page: dict(base, page=page) for page in pt["pages"]}
    dev, bf = ctx.device, torch.bfloat16
    q, k, v, seqlens, gen, sync = _point_inputs(ctx, pt, d, seed)
    if ctx.args.fp8_q_dtype == "fp16":  # q and the 16-bit baseline cache in fp16 (the fp16 widening)
        q, k, v = q.half(), k.half(), v.half()
    (k8, kf), (v8, vf) = peers.quantize_e4m3(k, per_token), peers.quantize_e4m3(v, per_token)
    outs = {(c, page): torch.empty_like(q) for c in ("bf16", "fp8") for page in pt["pages"]}
    check = not ctx.args.no_check
    if check:
        deq = lambda x8, f: lambda s: peers.dequantize_e4m3(x8[s:s + 1], f[s:s + 1])[0]
        ref16 = ref_fp32_batch(q, lambda s: k[s], lambda s: v[s], L, causal)
        ref8 = ref_fp32_batch(q, deq(k8, kf), deq(v8, vf), L, causal)

    free = torch.cuda.mem_get_info()[0] if dev == "cuda" else ctx.free_bytes
    groups, no_room = plan_groups(pt["pages"], nb16 + nb8, free, ctx.margin_bytes)  # a paged copy of both caches
    for page in no_room:
        rows[page]["error"] = "no memory for the paged copies"
    for group in groups:
        caches = {}  # page -> (bf16 k, v, e4m3 k, v, their factors, page table)
        for page in group:
            if page == 0:
                caches[0] = (k, v, k8, v8, kf, vf, None)
                continue
            try:
                table = make_page_table(b, L, page, gen=gen, device=dev)
                (k8p, kfp), (v8p, vfp) = (scatter_fp8_pages(x8, f, table, page) for x8, f in ((k8, kf), (v8, vf)))
                caches[page] = (scatter_pages(k, table, page), scatter_pages(v, table, page), k8p, v8p, kfp, vfp, table)
            except torch.cuda.OutOfMemoryError:
                rows[page]["error"] = "out of memory building the paged copies"
                if dev == "cuda":
                    torch.cuda.empty_cache()
        fns, params = {}, {}
        for page, (kc, vc, k8c, v8c, kfc, vfc, table) in caches.items():
            common = dict(causal=causal, cache_seqlens=seqlens, page_table=table, num_splits=ctx.args.splits)
            params[("bf16", page)] = ctx.fa4.params(q, kc, vc, outs[("bf16", page)], **common)
            params[("fp8", page)] = ctx.fa4.params(q, k8c, v8c, outs[("fp8", page)], k_descale=kfc, v_descale=vfc,
                                                   **common)
            for c in ("bf16", "fp8"):
                fns[f"{c}@{page}"] = _fa4_fn(ctx.fa4, params[(c, page)])
        t = timer.compare_ms(fns, flush=flush) if fns else {}
        for page in caches:
            r = rows[page]
            for c, nb, sfx in (("fp8", nb8, ""), ("bf16", nb16, "_bf16")):
                ms = t.get(f"{c}@{page}")
                r[f"fa4{sfx}_gbs"] = None if ms is None else nb / ms / 1e6
                r[f"fa4{sfx}_us"] = None if ms is None else ms * 1e3
        if check:
            for page in caches:
                r = rows[page]
                try:  # bf16 first: an fp8 call that fails leaves the bf16 check standing
                    for c, ref, sfx in (("bf16", ref16, "_bf16"), ("fp8", ref8, "")):
                        o = outs[(c, page)]
                        o.fill_(float("nan"))
                        ctx.fa4.call(params[(c, page)])
                        sync()
                        r["maxdiff" + sfx] = jnum(maxdiff(o, ref))
                        r["rel_l2" + sfx] = jnum(rel_l2(o, ref))
                    r["ref"] = "fp32"
                    r["quant_rel_l2"] = jnum(rel_l2(outs[("fp8", page)], ref16))
                except Exception as e:
                    r["error"] = f"check: {type(e).__name__}: {str(e)[:120]}"
        del caches, fns, params
    return finish_fp8_rows(rows)


def _print_fp8_rows(rows):
    g = lambda x: "-" if x is None else x if isinstance(x, str) else f"{x:.3g}"
    for r in rows.values():
        flag = "  !!! MISMATCH" if fp8_fails(r) else ""
        print(f"  {_label(r)} {r['kv_scale']}: fp8 {tbs(r.get('fa4_gbs'))} TB/s ({_pct_s(r.get('hbm_frac'))} % HBM)"
              f"  bf16 {tbs(r.get('fa4_bf16_gbs'))} TB/s ({_pct_s(r.get('hbm_frac_bf16'))} %)"
              f"  tokens/s fp8/bf16 {_ratio_s(r.get('tokens_ratio_fp8_bf16'), 3)}"
              f"  maxdiff {g(r.get('maxdiff'))} rel-L2 {g(r.get('rel_l2'))} (bf16 cache {g(r.get('maxdiff_bf16'))},"
              f" {g(r.get('rel_l2_bf16'))})  quant rel-L2 {g(r.get('quant_rel_l2'))}{flag}" +
              (f"  [{r['error']}]" if r.get("error") else ""), flush=True)


def _print_rows(rows):
    for page, r in rows.items():
        flag = "  !!! MISMATCH" if any(bad(r.get(k2)) for k2 in r if "maxdiff" in k2) else ""
        chunk = r["kind"] == "chunked"
        cols = "  ".join(f"{n} {tbs(r.get(n))}" for n in ("fa4",) + PEER_COLS if n == "fa4" or r.get(n) is not None)
        extra = f"  {peers.fmt(r.get('tflops_fa4'))} TFLOP/s" if chunk else ""
        ab = "".join(f"  {k2} {tbs(r.get(k2))}" for k2 in r if k2.startswith("ab_") and "maxdiff" not in k2)
        print(f"  {_label(r)}: {cols} TB/s{extra}{ab}  fa4/best {_ratio_s(r.get('fa4_over_best'), 3)}"
              f" ({r.get('best_peer_name') or '-'})"
              f"{'  paged/contig ' + _ratio_s(r.get('paged_over_contig'), 3) if page else ''}"
              f"  maxdiff {r.get('maxdiff')} ({r.get('ref')}){flag}" + (f"  [{r['error']}]" if r.get("error") else ""),
              flush=True)


def commit_of(lib):
    """peers.py's rule: FA4_COMMIT, else build-device/commit next to the staged library, else git."""
    commit = os.environ.get("FA4_COMMIT", "")
    staged = os.path.dirname(os.path.dirname(os.path.abspath(lib)))
    if not commit and os.path.isfile(os.path.join(staged, "commit")):
        commit = open(os.path.join(staged, "commit")).read().strip()
    if not commit:
        try:
            commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                             stderr=subprocess.DEVNULL).strip()
        except Exception:
            commit = "unknown"
    return commit, staged


def build_args(argv=None):
    ap = argparse.ArgumentParser(description="fa4 vs FA3 / cuDNN / FA2 on KV caches: decode, speculative decode, "
                                             "chunked prefill (see the module docstring)")
    ap.add_argument("--lib", default="build-cuda/libfa4.so")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help="~12 decode points (B 1/4/32, 32/8, Sq 1/4, kv 8k/128k, "
                                                         "contiguous + page 64) and 2 chunked-prefill points")
    ap.add_argument("--b", help="decode batch sizes, comma list (default 1,4,32,128)")
    ap.add_argument("--heads", help="decode Hq/Hkv pairs, comma list (default 32/32,32/8,64/8,128/8)")
    ap.add_argument("--sq", help="decode query lengths, comma list (default 1,2,4,8; > 1 = causal)")
    ap.add_argument("--kv", help="decode kv lengths, comma list, k suffix allowed (default 2k,8k,32k,128k)")
    ap.add_argument("--pages", help="layouts, comma list, 0 = contiguous (default 0,16,64,256, plus 1 on the Sq 1, "
                                    "32/8 points); given, exactly these everywhere")
    ap.add_argument("--chunk-sq", help="chunked-prefill query lengths (default 128,512,2048)")
    ap.add_argument("--chunk-kv", help="chunked-prefill kv lengths (default 8k,64k)")
    ap.add_argument("--chunk-pages", help="chunked-prefill layouts (default 0,64)")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--skip-chunked", action="store_true")
    ap.add_argument("--max-gb", type=float, default=60.0, help="skip points whose K+V exceed this many GB (1e9 bytes)")
    ap.add_argument("--splits", type=int, default=0, help="fa4 num_splits (0 = automatic)")
    ap.add_argument("--reps", type=int, default=100, help="reps per implementation and point at most")
    ap.add_argument("--target-ms", type=float, default=40.0, help="kernel time per implementation and point the "
                                                                  "rep count aims at (at least 10 reps)")
    ap.add_argument("--idle-ms", type=float, default=5.0, help="GPU idle before each timed block (peers.py: 30)")
    ap.add_argument("--l2-mb", type=float, default=60.0, help="L2 size: flush before each rep where K+V <= 2x this")
    ap.add_argument("--no-hide-launch", action="store_true", help="eager timing: no spin kernel ahead of the reps")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-fa3-paged", action="store_true", help="do not try FA3 on paged caches")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the points and the time estimate; no GPU")
    ap.add_argument("--ab", action="append", default=[], metavar="NAME=LIB",
                    help="another libfa4 build timed in the same rounds on every layout (repeatable)")
    ap.add_argument("--fp8-kv", action="store_true",
                    help="instead of the peers' sweep: fa4 on an e4m3 KV cache against the bf16 one (default points "
                         "B 32, 32/8, Sq 1, kv 4k/16k/64k, contiguous + page 16/64; the list options replace theirs)")
    ap.add_argument("--fp8-q-dtype", choices=("bf16", "fp16"), default="bf16",
                    help="--fp8-kv: q's dtype and the 16-bit baseline cache's (default bf16; fp16 widens e4m3 "
                         "in one conversion per pair, bf16 in ~2.5: the A/B of the widening's cost)")
    ap.add_argument("--kv-scale", choices=("per-head", "per-token"),
                    help="--fp8-kv factors: per (batch, kv head) [B, Hkv] (default) or per (token, kv head)")
    ap.add_argument("--head-dim", type=int, default=D, metavar="D",
                    help=f"head dim of q / k / v (default {D}) for every point of the run (decode, chunked, --fp8-kv); "
                         "a multiple of 8 (64 and 256: FA3's other tiles; a dim a peer or fa4 refuses shows as '-')")
    args = ap.parse_args(argv)
    if args.head_dim <= 0 or args.head_dim % 8:
        ap.error(f"--head-dim: a positive multiple of 8, got {args.head_dim}")
    for spec in args.ab:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            ap.error(f"--ab: expected NAME=LIB, got {spec!r}")
    if args.fp8_kv and args.ab:
        ap.error("--ab: not with --fp8-kv (its rounds time one build on two caches)")
    if args.kv_scale and not args.fp8_kv:
        ap.error("--kv-scale: only with --fp8-kv")
    if args.fp8_kv:
        args.kv_scale = args.kv_scale or "per-head"
    return ap, args


def fp8_sweep(args):
    """(fp8-KV points, [], skipped): FP8_KV's lists where the arguments give none."""
    pick = lambda spec, parse, key: parse(spec) if spec else FP8_KV[key]
    pts, skipped = decode_points(pick(args.b, parse_ints, "b"), pick(args.heads, parse_heads, "heads"),
                                 pick(args.sq, parse_ints, "sq"), pick(args.kv, parse_ints, "kv"),
                                 pick(args.pages, parse_ints, "pages"), args.max_gb * 1e9, False, kind="fp8kv",
                                 d=args.head_dim)
    return pts, [], skipped


def sweep(args):
    """(decode points, chunked points, skipped) for the arguments (--fp8-kv: fp8_sweep)."""
    if args.fp8_kv:
        return fp8_sweep(args)
    q = args.quick
    bs = parse_ints(args.b) if args.b else (QUICK["b"] if q else DEC_B)
    heads = parse_heads(args.heads) if args.heads else (QUICK["heads"] if q else DEC_HEADS)
    sqs = parse_ints(args.sq) if args.sq else (QUICK["sq"] if q else DEC_SQ)
    kvs = parse_ints(args.kv) if args.kv else (QUICK["kv"] if q else DEC_KV)
    pages = parse_ints(args.pages) if args.pages else (QUICK["pages"] if q else DEC_PAGES)
    page1 = not args.pages and not q
    max_bytes = args.max_gb * 1e9
    d = args.head_dim
    dec, skipped = ([], []) if args.skip_decode else decode_points(bs, heads, sqs, kvs, pages, max_bytes, page1, d=d)
    csq = parse_ints(args.chunk_sq) if args.chunk_sq else (QUICK_CHUNK["sq"] if q else CHUNK_SQ)
    ckv = parse_ints(args.chunk_kv) if args.chunk_kv else (QUICK_CHUNK["kv"] if q else CHUNK_KV)
    cpg = parse_ints(args.chunk_pages) if args.chunk_pages else (QUICK_CHUNK["pages"] if q else CHUNK_PAGES)
    chunk, cskip = ([], []) if args.skip_chunked else decode_points((CHUNK_B,), (CHUNK_HEADS,), csq, ckv, cpg, max_bytes,
                                                                    False, kind="chunked", d=d)
    return dec, chunk, skipped + cskip


def main(argv=None):
    ap, args = build_args(argv)
    dec_pts, chunk_pts, skipped = sweep(args)
    fa3_paged = not args.no_fa3_paged and peers.FA3 is not None
    n_ab = len(args.ab)
    d = args.head_dim
    dtag = "" if d == D else f" at head dim {d}"  # the default run prints what it printed before --head-dim
    est_s, est_calls = estimate_seconds(dec_pts + chunk_pts, args.reps, args.target_ms, args.idle_ms / 1e3,
                                        args.l2_mb * 1e6, fa3=True, fa3_paged=fa3_paged, n_ab=n_ab, d=d)
    n_rows = sum(len(p["pages"]) for p in dec_pts + chunk_pts)
    fp8 = args.fp8_kv
    if fp8:
        print(f"decode_peers --fp8-kv ({args.kv_scale} factors): {len(dec_pts)} points ({n_rows} rows){dtag}, "
              f"{len(skipped)} skipped; estimate on an H200: {est_s:.0f} s, {est_calls} timed calls", flush=True)
    else:
        print(f"decode_peers: {len(dec_pts)} decode + {len(chunk_pts)} chunked-prefill points ({n_rows} rows){dtag}, "
              f"{len(skipped)} skipped; estimate on an H200 (with FA3): {est_s:.0f} s, {est_calls} timed calls", flush=True)
    if args.dry_run:
        for p in dec_pts + chunk_pts:
            e4m3 = (f" bf16, {fp8_kv_bytes(p['b'], p['kv_len'], p['hkv'], args.kv_scale == 'per-token', d) / 1e9:.3g} GB"
                    f" e4m3 + {args.kv_scale} factors") if fp8 else ""
            print(f"  {p['kind']} B{p['b']} Sq{p['sq']} {p['hq']}/{p['hkv']} kv{_kv_s(p['kv_len'])} pages {p['pages']}"
                  f"  K+V {kv_bytes(p['b'], p['kv_len'], p['hkv'], d) / 1e9:.3g} GB{e4m3}")
        for s in skipped:
            print(f"  skipped: {s['kind']} B{s['b']} Sq{s['sq']} {s['hq']}/{s['hkv']} kv{_kv_s(s['kv_len'])}: {s['reason']}")
        return 0

    peers.IDLE_S = args.idle_ms / 1e3  # compare_ms reads it at call time
    ctx = Ctx()
    ctx.args = args
    ctx.fa4 = peers.Fa4(os.path.abspath(args.lib))
    ctx.variants = {}
    for spec in args.ab:
        name, _, path = spec.partition("=")
        ctx.variants[name] = peers.Fa4(os.path.abspath(path))
    ctx.timer = DecodeTimer(args.reps, hide_launch=not args.no_hide_launch)
    ctx.l2_bytes = args.l2_mb * 1e6
    ctx.margin_bytes = 6e9  # outputs, FA3's split accumulators, cuDNN workspace, the fp32 checks
    ctx.fa3_paged = fa3_paged
    commit, staged = commit_of(args.lib)
    fa3_version = None
    try:
        import importlib.metadata as im
        fa3_version = im.version("fa3_fwd")
    except Exception:
        pass
    meta = dict(date=datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), commit=commit,
                gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(), fa3=fa3_version if peers.FA3 is not None else None,
                fa3_paged=fa3_paged, head_dim=d, num_splits=args.splits, max_reps=args.reps, target_ms=args.target_ms,
                idle_ms=args.idle_ms, hide_launch=ctx.timer.hide_launch, l2_mb=args.l2_mb, max_gb=args.max_gb,
                hbm_gbs=HBM_GBS, tol=TOL, estimate_s=round(est_s), command="python3 " + " ".join(sys.argv))
    if ctx.variants and os.path.isfile(os.path.join(staged, "ab_revs")):
        meta["ab_revs"] = open(os.path.join(staged, "ab_revs")).read().split("\n")[:-1]
    if fp8:
        meta.update(fp8_kv=True, kv_scale=args.kv_scale, q_dtype=args.fp8_q_dtype, rel_l2_tol=REL_L2_TOL)
    print(f"decode_peers: {meta['gpu']} commit {commit}; FA3 {meta['fa3']} (paged layouts tried: {fa3_paged}){dtag}",
          flush=True)
    os.makedirs(args.out, exist_ok=True)
    dec_rows, chunk_rows, fp8_rows = [], [], []
    t0 = time.time()

    def save():
        out = dict(meta=dict(meta, elapsed_s=round(time.time() - t0)), decode=dec_rows, chunked_prefill=chunk_rows,
                   skipped=skipped)
        if fp8:
            out["fp8_kv"] = fp8_rows
        with open(os.path.join(args.out, "decode.json"), "w") as f:
            json.dump(out, f, indent=1)
        with open(os.path.join(args.out, "decode.md"), "w") as f:  # partial tables survive a time-out
            f.write(markdown(dict(meta, elapsed_s=round(time.time() - t0)), dec_rows, chunk_rows, skipped,
                             list(ctx.variants), fp8_rows))

    for i, pt in enumerate(dec_pts + chunk_pts):
        try:
            rows = (run_fp8_point if fp8 else run_point)(ctx, pt, args.seed * 100003 + i)
        except Exception as e:  # out of memory, a broken context: the point is recorded, the run goes on
            print(f"  {pt['kind']} point {pt} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            err = f"{type(e).__name__}: {str(e)[:200]}"
            where = dict(kind=pt["kind"], b=pt["b"], sq=pt["sq"], hq=pt["hq"], hkv=pt["hkv"], kv_len=pt["kv_len"])
            if fp8:
                nb8 = fp8_kv_bytes(pt["b"], pt["kv_len"], pt["hkv"], args.kv_scale == "per-token", d)
                rows = finish_fp8_rows({page: dict(where, page=page, kv_scale=args.kv_scale, kv_gb=nb8 / 1e9, fa4_gbs=None,
                                                   fa4_bf16_gbs=None, error=err) for page in pt["pages"]})
            else:
                blank = {c: None for c in ("fa4",) + PEER_COLS + tuple("ab_" + n for n in ctx.variants)}
                rows = finish_rows({page: dict(blank, **where, page=page,
                                               kv_gb=kv_bytes(pt["b"], pt["kv_len"], pt["hkv"], d) / 1e9, error=err)
                                    for page in pt["pages"]})
        try:
            torch.cuda.empty_cache()
        except Exception:
            pass
        (_print_fp8_rows if fp8 else _print_rows)(rows)
        (fp8_rows if fp8 else dec_rows if pt["kind"] == "decode" else chunk_rows).extend(rows.values())
        save()
    save()
    print(f"decode_peers: {time.time() - t0:.0f} s (estimate {est_s:.0f} s); {args.out}/decode.json, decode.md", flush=True)
    print(summary(dec_rows, chunk_rows, fp8_rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
