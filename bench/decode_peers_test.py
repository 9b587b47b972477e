#!/usr/bin/env python3
"""CPU checks of bench/decode_peers.py (no GPU needed): the sweep's points and skips, the byte and
FLOP counts, the scattered page tables, the groups that share timing rounds, the fp32 reference's
bottom-right mask, the markdown / summary with nulls, and one whole point end to end with stand-ins
for fa4, FA3 and the timer (the rows, the poisoned checks, a stand-in fa4 that writes nothing).
--fp8-kv: its points and argument rules, the e4m3 byte counts, bench/peers.py's quantize_e4m3 /
dequantize_e4m3 and the e4m3 dtype code / descale fields of its C ABI wrapper, the paged e4m3
copies and their factors, and fp8-KV points end to end (a stand-in fa4 that dequantizes by the
contract of fa4/params.h, and one that ignores the factors, which the check must catch).
--head-dim: the byte / FLOP counts, skips and FA3 paged estimate at D 64 / 256, the q / k / v / out
shapes every call gets (fa4 and an --ab build), the JSON meta and markdown header, --dry-run.

Usage: python3 bench/decode_peers_test.py   (needs torch; prints 'N passed, N failed')
"""
import contextlib
import inspect
import io
import json
import math
import os
import re
import sys
import types
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_peers as dp  # noqa: E402
import peers  # noqa: E402


def naive_attention(q, k, v, kv_len, causal):
    """[Sq, Hq, D] q against [kv_len, Hkv, D] k / v through SDPA's math path with an explicit
    bottom-right mask: the definition the sweep's Sq > 1 points use."""
    sq, hq, d = q.shape
    g = hq // k.shape[1]
    kk = k[:kv_len].float().repeat_interleave(g, dim=1).transpose(0, 1)  # [Hq, L, D]
    vv = v[:kv_len].float().repeat_interleave(g, dim=1).transpose(0, 1)
    qq = q.float().transpose(0, 1)  # [Hq, Sq, D]
    mask = None
    if causal:
        i = torch.arange(sq)[:, None]
        j = torch.arange(kv_len)[None, :]
        mask = j <= kv_len - sq + i
    return F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask).transpose(0, 1)


class Shapes(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(dp.parse_heads("32/8,64/8"), ((32, 8), (64, 8)))
        self.assertEqual(dp.parse_heads("32"), ((32, 32),))
        self.assertEqual(dp.parse_ints("2k,8K,1000"), (2048, 8192, 1000))
        with self.assertRaises(ValueError):
            dp.parse_heads("32/5")

    def test_bytes_flops(self):
        self.assertEqual(dp.kv_bytes(32, 8192, 8), 2 * 32 * 8192 * 8 * 128 * 2)
        for sq, L in ((1, 7), (4, 10), (8, 8), (3, 50)):
            brute = sum(1 for i in range(sq) for j in range(L) if j <= L - sq + i)
            self.assertEqual(dp.visible_pairs(sq, L, True), brute)
            self.assertEqual(dp.visible_pairs(sq, L, False), sq * L)
        self.assertEqual(dp.visible_pairs(1, 100, True), 100)  # decode: causal sees everything
        self.assertEqual(dp.attn_flops(2, 4, 1, 100, False), 4 * 2 * 4 * 128 * 100)

    def test_default_sweep_skips_exactly_the_points_over_the_limit(self):
        _, args = dp.build_args([])
        dec, chunk, skipped = dp.sweep(args)
        limit = 60e9
        for p in dec:
            self.assertLessEqual(dp.kv_bytes(p["b"], p["kv_len"], p["hkv"]), limit)
        for s in skipped:
            self.assertGreater(dp.kv_bytes(s["b"], s["kv_len"], s["hkv"]), limit)
        everything = {(b, sq, hq, hkv, L) for b in dp.DEC_B for hq, hkv in dp.DEC_HEADS for sq in dp.DEC_SQ
                      for L in dp.DEC_KV}
        ran = {(p["b"], p["sq"], p["hq"], p["hkv"], p["kv_len"]) for p in dec}
        sk = {(p["b"], p["sq"], p["hq"], p["hkv"], p["kv_len"]) for p in skipped}
        self.assertEqual(ran | sk, everything)
        self.assertFalse(ran & sk)
        self.assertEqual(len(dec), 232)
        self.assertEqual(len(skipped), 24)  # B128 x (32k, 128k) at Hkv 32, B32 x 128k at Hkv 32, B128 x 128k at Hkv 8
        for p in dec:
            self.assertEqual(p["pages"][:4], [0, 16, 64, 256])
            self.assertEqual(1 in p["pages"], p["sq"] == 1 and (p["hq"], p["hkv"]) == (32, 8))
        self.assertEqual(len(chunk), 6)
        self.assertTrue(all(p["pages"] == [0, 64, 256] and p["b"] == 4 for p in chunk))

    def test_quick_and_narrowing(self):
        _, args = dp.build_args(["--quick"])
        dec, chunk, skipped = dp.sweep(args)
        self.assertEqual(len(dec), 12)
        self.assertTrue(all(p["pages"] == [0, 64] for p in dec))
        self.assertEqual(skipped, [])
        _, args = dp.build_args(["--b", "4", "--heads", "64/8", "--sq", "2", "--kv", "8k", "--pages", "0,1", "--skip-chunked"])
        dec, chunk, _ = dp.sweep(args)
        self.assertEqual([(p["b"], p["hq"], p["hkv"], p["sq"], p["kv_len"], p["pages"]) for p in dec],
                         [(4, 64, 8, 2, 8192, [0, 1])])
        self.assertEqual(chunk, [])

    def test_estimate_under_six_minutes(self):
        _, args = dp.build_args([])
        dec, chunk, _ = dp.sweep(args)
        s, calls = dp.estimate_seconds(dec + chunk, args.reps, args.target_ms, args.idle_ms / 1e3, args.l2_mb * 1e6)
        self.assertLess(s, 360)
        self.assertGreater(calls, 0)

    def test_reps(self):
        self.assertEqual(dp.reps_for(0.01, 100, 40), 100)
        self.assertEqual(dp.reps_for(4.0, 100, 40), 10)
        self.assertEqual(dp.reps_for(100.0, 100, 40), 10)
        self.assertEqual(dp.reps_for(1.0, 5, 40), 5)


class Fp8Kv(unittest.TestCase):
    def test_points_and_arguments(self):
        _, args = dp.build_args(["--fp8-kv"])
        self.assertEqual(args.kv_scale, "per-head")
        dec, chunk, skipped = dp.sweep(args)
        self.assertEqual([(p["kind"], p["b"], p["hq"], p["hkv"], p["sq"], p["kv_len"], p["pages"]) for p in dec],
                         [("fp8kv", 32, 32, 8, 1, L, [0, 16, 64]) for L in (4096, 16384, 65536)])
        self.assertEqual((chunk, skipped), ([], []))
        _, args = dp.build_args(["--fp8-kv", "--quick", "--kv-scale", "per-token", "--b", "1,4", "--kv", "8k",
                                 "--pages", "0,256", "--sq", "2"])
        dec, _, _ = dp.sweep(args)
        self.assertEqual([(p["b"], p["sq"], p["kv_len"], p["pages"]) for p in dec], [(1, 2, 8192, [0, 256]),
                                                                                  (4, 2, 8192, [0, 256])])
        self.assertEqual(args.kv_scale, "per-token")
        for bad_args in (["--fp8-kv", "--ab", "x=y.so"], ["--kv-scale", "per-token"]):
            with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
                dp.build_args(bad_args)
        _, args = dp.build_args([])  # the peers' sweep keeps its own lists
        self.assertIsNone(args.kv_scale)
        self.assertEqual(len(dp.sweep(args)[0]), 232)

    def test_bytes_and_timed_calls(self):
        self.assertEqual(dp.fp8_kv_bytes(32, 4096, 8, False), dp.kv_bytes(32, 4096, 8) // 2 + 2 * 4 * 32 * 8)
        self.assertEqual(dp.fp8_kv_bytes(32, 4096, 8, True), dp.kv_bytes(32, 4096, 8) // 2 + 2 * 4 * 32 * 4096 * 8)
        pt = dict(kind="fp8kv", b=32, sq=1, hq=32, hkv=8, kv_len=4096, pages=[0, 16])
        self.assertEqual(dp.impl_names(pt, fa3=True, n_ab=1), [("fa4", 0), ("fa4_bf16", 0), ("fa4", 16), ("fa4_bf16", 16)])

    def test_c_abi_dtype_code_and_descales(self):
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "fa4", "fa4_c.h")) as f:
            header = f.read()
        code = int(re.search(r"FA4_FLOAT8_E4M3\s*=\s*(\d+)", header).group(1))
        x8 = torch.zeros(2, 3, 4, dtype=torch.float8_e4m3fn)
        self.assertEqual(peers.fa4_tensor(x8).dtype, code)
        lib = peers.Fa4.__new__(peers.Fa4)
        lib.lib = types.SimpleNamespace(fa4_params_init=lambda p: None)
        saved = torch.cuda.current_stream
        torch.cuda.current_stream = lambda: types.SimpleNamespace(cuda_stream=None)
        try:
            q = torch.zeros(2, 1, 4, 8, dtype=torch.bfloat16)
            k8 = torch.zeros(2, 16, 2, 8, dtype=torch.float8_e4m3fn)
            kf = torch.ones(2, 16, 2)[:, :, :1].expand(2, 16, 2)  # per token, broadcast over heads: stride 0
            p = lib.params(q, k8, k8, q, k_descale=kf, v_descale=torch.ones(2, 2))
            self.assertEqual(p.k.dtype, code)
            self.assertEqual(p.q_descale.ndim, 0)  # absent = not given
            self.assertEqual((p.k_descale.ndim, tuple(p.k_descale.shape[:3]), tuple(p.k_descale.stride[:3])),
                             (3, (2, 16, 2), (32, 2, 0)))
            self.assertEqual((p.v_descale.ndim, p.v_descale.dtype), (2, 0))
            self.assertEqual(lib.params(q, k8, k8, q).k_descale.ndim, 0)
        finally:
            torch.cuda.current_stream = saved

    def test_quantize_round_trip(self):
        g = torch.Generator().manual_seed(3)
        x = (torch.randn(3, 40, 4, 16, generator=g) * torch.rand(3, 40, 4, 1, generator=g) * 10).to(torch.bfloat16)
        x[1, :, 2] = 0  # a (batch, head) of zeros: stays zero, no NaN
        for per_token in (False, True):
            x8, f = peers.quantize_e4m3(x, per_token)
            self.assertEqual(x8.dtype, torch.float8_e4m3fn)
            self.assertEqual(tuple(f.shape), (3, 40, 4) if per_token else (3, 4))
            self.assertEqual(f.dtype, torch.float32)
            amax = x.float().abs().amax(dim=-1)
            amax = amax if per_token else amax.amax(dim=1)
            nz = amax > 0
            self.assertTrue(torch.allclose(f[nz], amax[nz] / 448))
            # every group's largest |x| lands on 448; each element within half an e4m3 step of x / f
            top = x8.float().abs().amax(dim=-1)
            top = top if per_token else top.amax(dim=1)
            self.assertTrue(torch.equal(top[nz], torch.full_like(top[nz], 448.0)))
            back = peers.dequantize_e4m3(x8, f)
            self.assertFalse(torch.isnan(back).any())
            self.assertTrue(torch.equal(back[1, :, 2], torch.zeros_like(back[1, :, 2])))
            fb = f[:, None, :, None] if f.dim() == 2 else f[..., None]
            err = (back - x.float()).abs() / fb  # in units of e4m3 values
            step = torch.exp2(torch.floor(torch.log2((x.float() / fb).abs().clamp_min(2.0 ** -6))) - 3)
            self.assertTrue(bool((err <= step / 2 * (1 + 1e-5)).all()))  # ties: exactly half
            exact = peers.dequantize_e4m3(x8, f, torch.float64)
            self.assertEqual(exact.dtype, torch.float64)
            self.assertLess((exact - back.double()).abs().max().item(), 1e-5)

    def test_paged_e4m3_copies(self):
        g = torch.Generator().manual_seed(4)
        b, L, page = 3, 100, 16  # a partial last page
        x = torch.randn(b, L, 2, 8, generator=g).to(torch.bfloat16)
        table = dp.make_page_table(b, L, page, gen=g)
        for per_token in (False, True):
            x8, f = peers.quantize_e4m3(x, per_token)
            xp, fp = dp.scatter_fp8_pages(x8, f, table, page)
            self.assertEqual(xp.dtype, torch.float8_e4m3fn)
            self.assertEqual(tuple(xp.shape), (b * 7, page, 2, 8))
            back = dp.gather_pages(xp.view(torch.uint8), table, L).view(torch.float8_e4m3fn)
            self.assertTrue(torch.equal(back.view(torch.uint8), x8.view(torch.uint8)))
            if per_token:  # fa4's per-token pattern for paged caches: [num_pages, page_size, Hkv]
                self.assertEqual(tuple(fp.shape), (b * 7, page, 2))
                self.assertTrue(torch.equal(dp.gather_pages(fp[..., None], table, L)[..., 0], f))
                s, t = 2, L - 1
                self.assertEqual(fp[table[s, t // page].item(), t % page, 1].item(), f[s, t, 1].item())
            else:
                self.assertIs(fp, f)


class Pages(unittest.TestCase):
    def test_scatter_gathers_back(self):
        g = torch.Generator().manual_seed(1)
        for b, L, page in ((3, 256, 16), (2, 256, 64), (2, 256, 256), (2, 40, 1), (2, 1000, 64), (1, 7, 16)):
            k = torch.randn(b, L, 2, 8, generator=g).to(torch.bfloat16)
            table = dp.make_page_table(b, L, page, gen=g)
            per_seq = -(-L // page)
            self.assertEqual(tuple(table.shape), (b, per_seq))
            self.assertEqual(table.dtype, torch.int32)
            self.assertTrue(torch.equal(table.flatten().sort().values, torch.arange(b * per_seq, dtype=torch.int32)))
            kp = dp.scatter_pages(k, table, page)
            self.assertEqual(tuple(kp.shape), (b * per_seq, page, 2, 8))
            self.assertTrue(torch.equal(dp.gather_pages(kp, table, L), k))
            # by hand: token t of sequence s is row t % page of page table[s, t // page]
            s, t = b - 1, L - 1
            self.assertTrue(torch.equal(kp[table[s, t // page].item(), t % page], k[s, t]))
            if b * per_seq > 4:
                self.assertFalse(torch.equal(table.flatten(), torch.arange(b * per_seq, dtype=torch.int32)))

    def test_plan_groups(self):
        G = 1e9
        self.assertEqual(dp.plan_groups([0, 16, 64, 256], 10 * G, 100 * G, 6 * G), ([[0, 16, 64, 256]], []))
        self.assertEqual(dp.plan_groups([0, 16, 64, 256], 30 * G, 80 * G, 6 * G), ([[0, 16, 64], [256]], []))
        self.assertEqual(dp.plan_groups([0, 16, 64], 50 * G, 60 * G, 6 * G), ([[0, 16], [64]], []))
        self.assertEqual(dp.plan_groups([0, 16, 64], 60 * G, 50 * G, 6 * G), ([[0]], [16, 64]))
        self.assertEqual(dp.plan_groups([0], 1 * G, 50 * G, 6 * G), ([[0]], []))


class Reference(unittest.TestCase):
    def test_fp32_reference_bottom_right(self):
        g = torch.Generator().manual_seed(2)
        for sq, hq, hkv, L, causal in ((1, 4, 2, 33, False), (4, 8, 2, 50, True), (8, 4, 4, 8, True), (5, 6, 3, 64, True)):
            q = torch.randn(sq, hq, 16, generator=g)
            k = torch.randn(L + 3, hkv, 16, generator=g)  # capacity beyond kv_len: never read
            v = torch.randn(L + 3, hkv, 16, generator=g)
            want = naive_attention(q, k, v, L, causal)
            for max_elems in (1 << 27, 64):  # one chunk; a few query rows per chunk
                got = dp.ref_attention_fp32(q, k, v, L, causal, max_elems=max_elems)
                self.assertLess((got - want).abs().max().item(), 1e-5, (sq, hq, hkv, L, causal, max_elems))

    def test_maxdiff_poison(self):
        a = torch.zeros(2, 3)
        b = torch.full((2, 3), float("nan"))
        self.assertTrue(math.isnan(dp.maxdiff(b, a)))
        self.assertTrue(dp.bad(dp.jnum(dp.maxdiff(b, a))))
        self.assertEqual(dp.jnum(float("nan")), "nan")
        self.assertFalse(dp.bad(0.01))
        self.assertTrue(dp.bad(0.03))
        self.assertFalse(dp.bad(None))
        self.assertTrue(math.isnan(dp.worst([0.1, float("nan")])))
        self.assertTrue(math.isnan(dp.worst([float("nan"), 0.1])))
        self.assertEqual(dp.worst([0.1, 0.3]), 0.3)


def _row(page, fa4, fa3=None, cudnn=None, flash=None, **kw):
    r = dict(kind="decode", b=4, sq=1, hq=32, hkv=8, kv_len=8192, page=page, kv_gb=0.134, fa4=fa4, fa3=fa3,
             fa3_sched=None, cudnn=cudnn, flash=flash, maxdiff=0.004, ref="fa3")
    r.update(kw)
    return r


class Tables(unittest.TestCase):
    def test_best_peer_and_ratios(self):
        rows = dp.finish_rows({0: _row(0, 3000.0, fa3=2500.0, cudnn=2000.0), 64: _row(64, 2700.0)})
        self.assertEqual(rows[0]["best_peer_name"], "fa3")
        self.assertAlmostEqual(rows[0]["fa4_over_best"], 1.2)
        self.assertEqual(rows[64]["best_peer_name"], "fa3 (c)")  # no paged peer: the contiguous one
        self.assertAlmostEqual(rows[64]["paged_over_contig"], 0.9)
        self.assertAlmostEqual(rows[0]["hbm_frac"], 3000 / 4800)
        rows = dp.finish_rows({0: _row(0, None), 16: _row(16, None)})  # nothing ran
        self.assertIsNone(rows[0]["fa4_over_best"])
        self.assertIsNone(rows[16]["paged_over_contig"])

    def test_markdown_with_nulls(self):
        dec = list(dp.finish_rows({0: _row(0, 3000.0, fa3=3500.0, l2_resident=True),
                                   16: _row(16, None, error="fa4: page size 16 unsupported"),
                                   64: _row(64, 2800.0, maxdiff="nan")}).values())
        chunk = list(dp.finish_rows({0: dict(_row(0, 900.0, fa3=800.0), kind="chunked", sq=512, tflops_fa4=300.0,
                                             tflops_fa3=270.0)}).values())
        meta = dict(gpu="H200", date="d", commit="c", command="x", torch="t", cuda="12", cudnn=9, fa3_paged=False,
                    num_splits=0, hide_launch=True)
        md = dp.markdown(meta, dec, chunk, [dict(kind="decode", b=128, sq=1, hq=32, hkv=32, kv_len=131072,
                                                 reason="K+V 275 GB > 60 GB")], ab_names=["x"])
        self.assertIn("| 4 | 1 | 32/8 | 8k | 0 | 0.134 | 3.00 | 3.50 | - | - | - | fa3 | **0.857** |", md)
        self.assertIn("| 4 | 1 | 32/8 | 8k | 16 |", md)
        self.assertIn("**nan**", md)
        self.assertIn("L2", md)
        self.assertIn("Skipped (1)", md)
        self.assertIn("| 4 | 512 | 32/8 | 8k | 0 | 300 | 270 |", md)
        s = dp.summary(dec, chunk)
        self.assertIn("2 rows below 1.0x", s)  # contiguous 0.857, page 64 0.8 against fa3 (c)
        self.assertIn("FAIL", s)
        self.assertIn("rows without an fa4 time", s)
        json.dumps(dec)  # strict-JSON safe (nan stored as a string)


# ---------------------------------------------------------------- one point, end to end, on CPU

class FakeLib:
    """Stands in for peers.Fa4: same params() keywords, computes the fp32 reference into out
    (or writes nothing, to show that the poisoned check catches it)."""

    def __init__(self, writes=True):
        self.writes = writes
        self.calls = 0

    def params(self, q, k, v, out, causal=False, lse=None, cache_seqlens=None, page_table=None, num_splits=0,
               cu_seqlens=None, max_seqlen=0, q_descale=None, k_descale=None, v_descale=None):
        return dict(q=q, k=k, v=v, out=out, causal=causal, seqlens=cache_seqlens, table=page_table,
                    k_descale=k_descale, v_descale=v_descale)

    def call(self, p):
        self.calls += 1
        if not self.writes:
            return
        k, v, table = p["k"], p["v"], p["table"]
        if k.dtype == torch.float8_e4m3fn:
            L = int(p["seqlens"][0])
            k, v = (fake_dequantize(x, p[n], table, L) for x, n in ((k, "k_descale"), (v, "v_descale")))
            table = None
        o = fake_attention(p["q"], k, v, p["seqlens"], table, p["causal"])
        p["out"].copy_(o)


def fake_dequantize(x8, f, table, kv_len):
    """What fa4 reads from an e4m3 cache, written from fa4/params.h (not from the helpers under
    test): e4m3 value x factor, the factor per (batch, kv head) [B, Hkv] or per token (k's shape
    without its last dim); fp32 [B, kv_len, Hkv, D]. Checks the factors' shapes as validate does."""
    b = table.shape[0] if table is not None else x8.shape[0]
    hkv = x8.shape[2]
    assert f.dtype == torch.float32 and tuple(f.shape) in ((b, hkv), tuple(x8.shape[:3])), tuple(f.shape)
    x = x8.float()
    if f.dim() == 3:
        x = x * f[..., None]
    if table is not None:
        x = dp.gather_pages(x, table, kv_len)
    return x[:, :kv_len] * (f[:, None, :, None] if f.dim() == 2 else 1.0)


def fake_attention(q, k, v, seqlens, table, causal):
    b = q.shape[0]
    L = int(seqlens[0])
    if table is not None:
        k, v = dp.gather_pages(k, table, L), dp.gather_pages(v, table, L)
    return torch.stack([dp.ref_attention_fp32(q[s], k[s], v[s], L, causal) for s in range(b)]).to(q.dtype)


def fake_fa3():
    m = types.SimpleNamespace()
    m.metadata_calls = []
    m.paged_decode = False

    def kvcache(q, k_cache, v_cache, cache_seqlens=None, page_table=None, causal=False, scheduler_metadata=None):
        if page_table is not None and not m.paged_decode and q.shape[1] == 1:  # fa3-fwd 0.0.3's refusal
            raise RuntimeError("This flash attention build does not support paged KV.")
        return fake_attention(q, k_cache, v_cache, cache_seqlens, page_table, causal)

    def md(batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv, headdim, cache_seqlens, qkv_dtype=None,
           page_size=None, causal=False):
        m.metadata_calls.append((batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv, headdim, page_size, causal))
        return torch.zeros(4, dtype=torch.int32)

    m.flash_attn_with_kvcache = kvcache
    m.get_scheduler_metadata = md
    return m


class FakeTimer:
    """compare_ms: calls each implementation once; fixed times by name (failures: None)."""
    MS = {"fa4": 1.0, "ab_x": 0.9, "fa3": 1.25, "fa3_sched": 1.1, "cudnn": 2.0, "flash": 1.5, "bf16": 1.0, "fp8": 0.6}

    def __init__(self):
        self.reps, self.max_warmup, self.flushes, self.seen = 100, 2, [], []

    def compare_ms(self, fns, flush=True, rounds=5):
        self.flushes.append(flush)
        self.seen.append(sorted(fns))
        out = {}
        for name, fn in fns.items():
            try:
                fn()
                base = name.partition("@")[0]
                out[name] = self.MS[base] * (1.1 if name.endswith("@16") else 1.0)
            except Exception:
                out[name] = None
        return out


class EndToEnd(unittest.TestCase):
    def setUp(self):
        self.saved = peers.FA3
        peers.FA3 = fake_fa3()

    def tearDown(self):
        peers.FA3 = self.saved

    def ctx(self, fa4, variants=None, fa3_paged=True, free=1 << 40, argv=()):
        _, args = dp.build_args(list(argv))
        c = dp.Ctx()
        c.device, c.free_bytes = "cpu", free
        c.args, c.fa4, c.variants, c.timer = args, fa4, variants or {}, FakeTimer()
        c.l2_bytes, c.margin_bytes, c.fa3_paged = 60e6, 0, fa3_paged
        return c

    def test_decode_point(self):
        self.assertTrue({"causal", "cache_seqlens", "page_table", "num_splits"} <=
                        set(inspect.signature(peers.Fa4.params).parameters))
        c = self.ctx(FakeLib(), {"x": FakeLib()})
        pt = dict(kind="decode", b=2, sq=1, hq=4, hkv=2, kv_len=64, pages=[0, 16, 1])
        rows = dp.run_point(c, pt, 0)
        self.assertEqual(sorted(rows), [0, 1, 16])
        nb = dp.kv_bytes(2, 64, 2)
        r0, r16 = rows[0], rows[16]
        self.assertAlmostEqual(r0["fa4"], nb / 1.0 / 1e6)
        self.assertAlmostEqual(r0["fa3"], nb / 1.25 / 1e6)
        self.assertEqual(r0["best_peer_name"], "fa3_sched")
        self.assertIsNone(r16["fa3"])  # the stand-in refuses paged decode, as fa3-fwd 0.0.3 does
        self.assertIn("does not support paged KV", r16["fa3_note"])
        self.assertEqual(r16["best_peer_name"], "fa3_sched (c)")
        self.assertAlmostEqual(r16["paged_over_contig"], 1 / 1.1)
        for r in rows.values():
            self.assertEqual(r["ref"], "fa3")
            self.assertLess(r["maxdiff"], 1e-2)
            self.assertLess(r["maxdiff_fp32"], 1e-2)
            self.assertEqual(r["ab_x_maxdiff_vs_fa4"], 0.0)
            self.assertTrue(r["flushed"] and r["l2_resident"])
        self.assertLess(r0["maxdiff_fa3_fp32"], 1e-2)
        self.assertEqual(r0["maxdiff_fa3_sched_vs_fa3"], 0.0)
        # cudnn / flash are SDPA on BHSD views: on CPU the flash backend may run, cuDNN cannot
        self.assertIsNone(r0["cudnn"])
        self.assertEqual(c.timer.seen, [sorted(["fa4@0", "ab_x@0", "fa3@0", "fa3_sched@0", "cudnn@0", "flash@0",
                                                "fa4@16", "ab_x@16", "fa4@1", "ab_x@1"])])
        self.assertEqual(peers.FA3.metadata_calls, [(2, 1, 64, 4, 2, 128, None, False)])
        json.dumps(list(rows.values()))

    def test_spec_decode_paged_fa3_and_groups(self):
        c = self.ctx(FakeLib(), fa3_paged=True, free=int(1.5 * dp.kv_bytes(1, 64, 2)))
        pt = dict(kind="decode", b=1, sq=4, hq=4, hkv=2, kv_len=64, pages=[0, 16, 64])
        rows = dp.run_point(c, pt, 0)
        self.assertEqual(len(c.timer.seen), 2)  # room for one paged copy at a time
        self.assertEqual(rows[0]["causal"], 1)
        self.assertIsNone(rows[0].get("cudnn"))  # Sq > 1: no SDPA
        self.assertIsNotNone(rows[16]["fa3"])
        self.assertEqual(rows[16]["best_peer_name"], "fa3_sched")
        self.assertEqual(rows[64]["maxdiff_fa3_paged_vs_fa3"], 0.0)
        self.assertIn((1, 4, 64, 4, 2, 128, 16, True), peers.FA3.metadata_calls)

    def test_chunked_point_tflops(self):
        c = self.ctx(FakeLib())
        pt = dict(kind="chunked", b=1, sq=16, hq=4, hkv=2, kv_len=64, pages=[0, 16])
        rows = dp.run_point(c, pt, 0)
        fl = dp.attn_flops(1, 4, 16, 64, True)
        self.assertAlmostEqual(rows[0]["tflops_fa4"], fl / 1.0 / 1e9)
        self.assertAlmostEqual(rows[16]["tflops_fa4"], fl / 1.1 / 1e9)
        self.assertLess(rows[16]["maxdiff"], 1e-2)

    def test_kernel_that_writes_nothing_is_caught(self):
        c = self.ctx(FakeLib(writes=False))
        pt = dict(kind="decode", b=1, sq=2, hq=4, hkv=2, kv_len=32, pages=[0, 64])
        rows = dp.run_point(c, pt, 0)
        for r in rows.values():
            self.assertEqual(r["maxdiff"], "nan")
            self.assertTrue(dp.bad(r["maxdiff"]))
        self.assertIn("FAIL", dp.summary(list(rows.values())))

    def test_nan_in_the_last_sequence_only_is_caught(self):
        class HalfLib(FakeLib):
            def call(self, p):
                super().call(p)
                p["out"][-1, :, 0, 0] = float("nan")
        c = self.ctx(HalfLib())
        peers.FA3 = None  # fp32 reference on sequences 0 and B - 1 only
        rows = dp.run_point(c, dict(kind="decode", b=3, sq=1, hq=4, hkv=2, kv_len=32, pages=[0]), 0)
        self.assertIn(rows[0]["ref"], ("flash", "fp32"))
        self.assertEqual(rows[0]["maxdiff_fp32"], "nan")

    def test_main_writes_json_and_markdown(self):
        js, md, _ = _main_with_fakes(["--b", "1,2", "--heads", "4/2", "--sq", "1,2", "--kv", "64", "--pages", "0,16",
                                      "--chunk-sq", "16", "--chunk-kv", "64", "--ab", "x=nowhere.so"])
        if os.environ.get("KEEP_MD"):
            with open(os.environ["KEEP_MD"], "w") as f:
                f.write(md)
        self.assertEqual(len(js["decode"]), 8)  # 4 points x 2 layouts
        self.assertEqual(len(js["chunked_prefill"]), 3)  # 1 point x (0, 64, 256)
        for r in js["decode"]:
            for key in ("b", "sq", "hq", "hkv", "kv_len", "page", "fa4", "fa3", "cudnn", "flash", "maxdiff", "ab_x"):
                self.assertIn(key, r)
        self.assertEqual(js["meta"]["gpu"], "cpu (test)")
        self.assertIn("## Decode", md)
        self.assertIn("## Chunked prefill", md)
        self.assertIn("## A/B", md)
        self.assertIn("## Summary", md)
        self.assertNotIn("fp8_kv", js)  # the peers' sweep writes what it wrote before --fp8-kv
        self.assertNotIn("fp8 KV", md)

    def test_fp8_kv_points(self):
        for scale in ("per-head", "per-token"):
            c = self.ctx(FakeLib(), argv=["--fp8-kv", "--kv-scale", scale])
            b, hkv, L = 2, 2, 100  # a partial last page at page 16 and 64
            rows = dp.run_fp8_point(c, dict(kind="fp8kv", b=b, sq=1, hq=4, hkv=hkv, kv_len=L, pages=[0, 16, 64]), 0)
            self.assertEqual(sorted(rows), [0, 16, 64])
            self.assertEqual(c.timer.seen, [sorted(f"{x}@{p}" for x in ("bf16", "fp8") for p in (0, 16, 64))])
            nb8, nb16 = dp.fp8_kv_bytes(b, L, hkv, scale == "per-token"), dp.kv_bytes(b, L, hkv)
            for page, r in rows.items():
                slow = 1.1 if page == 16 else 1.0  # FakeTimer's page-16 penalty
                self.assertEqual((r["kind"], r["kv_len"], r["page"], r["kv_scale"]), ("fp8kv", L, page, scale))
                self.assertAlmostEqual(r["fa4_gbs"], nb8 / (0.6 * slow) / 1e6)
                self.assertAlmostEqual(r["fa4_bf16_gbs"], nb16 / (1.0 * slow) / 1e6)
                self.assertAlmostEqual(r["tokens_ratio_fp8_bf16"], 1 / 0.6)
                self.assertAlmostEqual(r["hbm_frac"], r["fa4_gbs"] / dp.HBM_GBS)
                self.assertAlmostEqual(r["kv_gb"], nb8 / 1e9)
                self.assertEqual(dp.fp8_fails(r), [], r)
                self.assertLess(r["maxdiff"], 1e-2)  # the stand-in's bf16 output rounding
                self.assertLess(r["rel_l2"], 1e-2)
                self.assertLess(r["rel_l2_bf16"], 1e-2)
                self.assertGreater(r["quant_rel_l2"], 1e-3)  # e4m3 rounding: a few percent, not a check
                self.assertLess(r["quant_rel_l2"], 0.1)
            self.assertAlmostEqual(rows[16]["paged_over_contig"], 1 / 1.1)
            json.dumps(list(rows.values()))

    def test_fp8_check_catches_ignored_factors_and_unwritten_outputs(self):
        class NoFactors(FakeLib):  # reads the e4m3 values as if every factor were 1
            def call(self, p):
                if p["k_descale"] is not None:
                    p = dict(p, k_descale=torch.ones_like(p["k_descale"]), v_descale=torch.ones_like(p["v_descale"]))
                super().call(p)
        pt = dict(kind="fp8kv", b=1, sq=2, hq=4, hkv=2, kv_len=32, pages=[0, 16])
        rows = dp.run_fp8_point(self.ctx(NoFactors(), argv=["--fp8-kv"]), pt, 0)
        for r in rows.values():
            self.assertEqual(r["causal"], 1)
            self.assertEqual(dp.fp8_fails(r), ["maxdiff", "rel_l2"])  # the bf16 cache's checks pass
        self.assertIn("FAIL", dp.summary([], [], list(rows.values())))
        rows = dp.run_fp8_point(self.ctx(FakeLib(writes=False), argv=["--fp8-kv"]), pt, 0)
        for r in rows.values():
            self.assertEqual((r["maxdiff"], r["maxdiff_bf16"]), ("nan", "nan"))

    def test_fp8_markdown_with_nulls(self):
        rows = dp.finish_fp8_rows({0: dict(kind="fp8kv", b=32, sq=1, hq=32, hkv=8, kv_len=4096, page=0, kv_scale="per-head",
                                           kv_gb=0.27, fa4_gbs=3000.0, fa4_bf16_gbs=3300.0, fa4_us=89.5, fa4_bf16_us=162.7,
                                           maxdiff=0.001, rel_l2=0.003, maxdiff_bf16=0.001, rel_l2_bf16=0.002,
                                           quant_rel_l2=0.04),
                                   16: dict(kind="fp8kv", b=32, sq=1, hq=32, hkv=8, kv_len=4096, page=16, kv_scale="per-head",
                                            kv_gb=0.27, fa4_gbs=None, fa4_bf16_gbs=None, error="fa4: out of memory")})
        self.assertAlmostEqual(rows[0]["tokens_ratio_fp8_bf16"], 162.7 / 89.5)
        self.assertIsNone(rows[16]["tokens_ratio_fp8_bf16"])
        meta = dict(gpu="H100", date="d", commit="c", command="x", torch="t", cuda="12", cudnn=9, fa3_paged=False,
                    num_splits=0, hide_launch=True)
        md = dp.markdown(meta, [], [], [], fp8=list(rows.values()))
        self.assertIn("| 32 | 1 | 32/8 | 4k | 0 | per-head | 0.27 | 3.00 | 62 | 3.30 | 69 | **1.818** | - |", md)
        self.assertIn("| 32 | 1 | 32/8 | 4k | 16 | per-head |", md)
        self.assertNotIn("best peer: fastest", md)
        s = dp.summary([], [], list(rows.values()))
        self.assertIn("tokens/s fp8 / bf16, contiguous: min 1.818", s)
        self.assertIn("1 rows without both fa4 times", s)
        self.assertNotIn("FAIL", s)

    def test_fp8_main_and_dry_run(self):
        import tempfile
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            self.assertEqual(dp.main(["--fp8-kv", "--dry-run"]), 0)
        listed = [x for x in buf.getvalue().splitlines() if x.startswith("  fp8kv")]
        self.assertEqual(len(listed), 3)
        self.assertIn("fp8kv B32 Sq1 32/8 kv64k pages [0, 16, 64]  K+V 8.59 GB bf16, 4.29 GB e4m3 + per-head factors",
                      listed[2])
        saved = (dp.DecodeTimer, peers.Fa4, torch.cuda.get_device_name, dp.Ctx.device, dp.Ctx.free_bytes)
        try:
            dp.DecodeTimer, peers.Fa4 = (lambda reps, hide_launch=True: FakeTimer()), (lambda path: FakeLib())
            torch.cuda.get_device_name = lambda *a: "cpu (test)"
            dp.Ctx.device, dp.Ctx.free_bytes = "cpu", 1 << 40
            FakeTimer.hide_launch = True
            with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
                rc = dp.main(["--fp8-kv", "--kv-scale", "per-token", "--out", out, "--b", "2", "--heads", "4/2",
                              "--kv", "64", "--pages", "0,16"])
                with open(os.path.join(out, "decode.json")) as f:
                    js = json.load(f)
                with open(os.path.join(out, "decode.md")) as f:
                    md = f.read()
        finally:
            dp.DecodeTimer, peers.Fa4, torch.cuda.get_device_name, dp.Ctx.device, dp.Ctx.free_bytes = saved
            del FakeTimer.hide_launch
        self.assertEqual(rc, 0)
        self.assertEqual((js["decode"], js["chunked_prefill"]), ([], []))
        self.assertEqual((js["meta"]["fp8_kv"], js["meta"]["kv_scale"]), (True, "per-token"))
        self.assertEqual([r["page"] for r in js["fp8_kv"]], [0, 16])
        for r in js["fp8_kv"]:
            for key in ("kv_len", "page", "fa4_gbs", "fa4_bf16_gbs", "tokens_ratio_fp8_bf16", "hbm_frac", "maxdiff",
                        "rel_l2", "maxdiff_bf16", "rel_l2_bf16", "quant_rel_l2"):
                self.assertIsNotNone(r[key], key)
        self.assertIn("## fp8 KV cache", md)
        self.assertIn("fp8 KV: tokens/s fp8 / bf16, page 16", md)

    def test_no_fa3(self):
        peers.FA3 = None
        c = self.ctx(FakeLib())
        rows = dp.run_point(c, dict(kind="decode", b=1, sq=2, hq=4, hkv=2, kv_len=32, pages=[0]), 0)
        self.assertEqual(rows[0]["ref"], "fp32")
        self.assertIsNone(rows[0]["fa4_over_best"])
        self.assertLess(rows[0]["maxdiff"], 1e-2)


# ---------------------------------------------------------------- --head-dim (D 64 / 256 A/B runs)

class ShapeLib(FakeLib):
    """FakeLib that records the shapes of what each call gets: [(q, k, v, out)]."""

    def __init__(self, writes=True):
        super().__init__(writes)
        self.shapes = []

    def call(self, p):
        self.shapes.append(tuple(tuple(p[n].shape) for n in ("q", "k", "v", "out")))
        super().call(p)


def _main_with_fakes(argv):
    """dp.main(argv) on CPU with the stand-ins; (json, markdown, stdout)."""
    import tempfile
    saved = (dp.DecodeTimer, peers.Fa4, torch.cuda.get_device_name, dp.Ctx.device, dp.Ctx.free_bytes)

    def timer(reps, hide_launch=True):
        t = FakeTimer()
        t.hide_launch = hide_launch
        return t
    buf = io.StringIO()
    try:
        dp.DecodeTimer, peers.Fa4 = timer, (lambda path: ShapeLib())
        torch.cuda.get_device_name = lambda *a: "cpu (test)"
        dp.Ctx.device, dp.Ctx.free_bytes = "cpu", 1 << 40
        with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(buf):
            rc = dp.main(["--out", out] + list(argv))
            with open(os.path.join(out, "decode.json")) as f:
                js = json.load(f)
            with open(os.path.join(out, "decode.md")) as f:
                md = f.read()
    finally:
        dp.DecodeTimer, peers.Fa4, torch.cuda.get_device_name, dp.Ctx.device, dp.Ctx.free_bytes = saved
    assert rc == 0
    return js, md, buf.getvalue()


class HeadDim(unittest.TestCase):
    setUp, tearDown, ctx = EndToEnd.setUp, EndToEnd.tearDown, EndToEnd.ctx

    def test_arguments(self):
        self.assertEqual(dp.build_args([])[1].head_dim, 128)
        self.assertEqual(dp.build_args(["--head-dim", "64", "--ab", "x=y.so"])[1].head_dim, 64)
        self.assertEqual(dp.build_args(["--head-dim", "256", "--fp8-kv"])[1].head_dim, 256)
        for bad_args in (["--head-dim", "0"], ["--head-dim", "100"], ["--head-dim", "-64"]):
            with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
                dp.build_args(bad_args)

    def test_bytes_and_flops_follow_d(self):
        for d in (64, 128, 256):
            self.assertEqual(dp.kv_bytes(32, 8192, 8, d), 2 * 32 * 8192 * 8 * d * 2)
            self.assertEqual(dp.fp8_kv_bytes(32, 4096, 8, False, d), 2 * 32 * 4096 * 8 * d + 2 * 4 * 32 * 8)
            self.assertEqual(dp.fp8_kv_bytes(32, 4096, 8, True, d), 2 * 32 * 4096 * 8 * d + 2 * 4 * 32 * 4096 * 8)
            self.assertEqual(dp.attn_flops(2, 4, 1, 100, False, d), 4 * 2 * 4 * d * 100)
            self.assertEqual(dp.attn_flops(1, 4, 16, 64, True, d), 4 * 4 * d * dp.visible_pairs(16, 64, True))
        self.assertEqual(dp.kv_bytes(32, 8192, 8), dp.kv_bytes(32, 8192, 8, 128))  # the default stays D 128

    def test_sweep_skips_at_d(self):
        for d, n_dec, n_skip in ((64, 252, 4), (128, 232, 24), (256, 232, 24)):
            _, args = dp.build_args(["--head-dim", str(d)])
            dec, chunk, skipped = dp.sweep(args)
            self.assertEqual((len(dec), len(chunk), len(skipped)), (n_dec, 6, n_skip), d)
            for p in dec + chunk:
                self.assertLessEqual(dp.kv_bytes(p["b"], p["kv_len"], p["hkv"], d), 60e9)
            for s in skipped:
                self.assertGreater(dp.kv_bytes(s["b"], s["kv_len"], s["hkv"], d), 60e9)
                self.assertAlmostEqual(s["kv_gb"], dp.kv_bytes(s["b"], s["kv_len"], s["hkv"], d) / 1e9)
        _, args = dp.build_args(["--head-dim", "256", "--b", "128", "--heads", "32/8", "--sq", "1", "--kv", "64k",
                                 "--skip-chunked"])
        self.assertEqual(len(dp.sweep(args)[2]), 1)  # 68.7 GB at D 256; 34.4 GB at D 128 runs
        _, args = dp.build_args(["--head-dim", "256", "--fp8-kv", "--kv", "128k", "--b", "128", "--max-gb", "100"])
        dec, _, skipped = dp.sweep(args)
        self.assertEqual((len(dec), skipped[0]["kv_gb"]), (0, dp.kv_bytes(128, 131072, 8, 256) / 1e9))
        _, args = dp.build_args(["--head-dim", "256"])
        s256, _ = dp.estimate_seconds(sum(dp.sweep(args)[:2], []), args.reps, args.target_ms, args.idle_ms / 1e3,
                                      args.l2_mb * 1e6, d=256)
        s128, _ = dp.estimate_seconds(sum(dp.sweep(dp.build_args([])[1])[:2], []), args.reps, args.target_ms,
                                      args.idle_ms / 1e3, args.l2_mb * 1e6)
        self.assertGreater(s256, s128)

    def test_fa3_paged_estimate(self):
        chunk = dict(kind="chunked", b=4, sq=128, hq=32, hkv=8, kv_len=8192, pages=[0, 64, 256])
        dec = dict(kind="decode", b=1, sq=1, hq=32, hkv=8, kv_len=8192, pages=[0, 16, 64, 256])
        # D 128 as before; D 64: kBlockN 128 causal, kBlockM 192 (Sq 128 x 4 = 512 > 192); D 256: kBlockN 80
        self.assertEqual([dp.fa3_paged_expected(chunk, p) for p in (64, 256)], [False, True])
        self.assertEqual([dp.fa3_paged_expected(chunk, p, 64) for p in (64, 256)], [False, True])
        self.assertEqual([dp.fa3_paged_expected(chunk, p, 256) for p in (64, 256)], [False, False])
        self.assertTrue(dp.fa3_paged_expected(chunk, 160, 256))  # a multiple of 80
        self.assertTrue(dp.fa3_paged_expected(dict(chunk, sq=33), 256, 128))  # 33 x 4 = 132 > kBlockM 128
        self.assertFalse(dp.fa3_paged_expected(dict(chunk, sq=33), 256, 64))  # but not > kBlockM 192
        for d in (64, 128, 256):
            self.assertFalse(any(dp.fa3_paged_expected(dec, p, d) for p in dec["pages"]))
        for d in (96, 192, 200):  # not in the table: no paged layout expected (conservative)
            self.assertIsNone(dp.fa3_tile_sm90(d, True))
            self.assertFalse(dp.fa3_paged_expected(chunk, 256, d))
        self.assertIn(("fa3", 256), dp.impl_names(chunk, d=64))
        self.assertNotIn(("fa3", 256), dp.impl_names(chunk, d=256))
        self.assertIn(("fa3", 0), dp.impl_names(chunk, d=256))

    def test_points_use_d_with_ab(self):
        for d in (64, 256):
            fa4, x = ShapeLib(), ShapeLib()
            c = self.ctx(fa4, {"x": x}, argv=["--head-dim", str(d), "--ab", "x=y.so"])
            pt = dict(kind="decode", b=2, sq=1, hq=4, hkv=2, kv_len=64, pages=[0, 16])
            rows = dp.run_point(c, pt, 0)
            want_c = ((2, 1, 4, d), (2, 64, 2, d), (2, 64, 2, d), (2, 1, 4, d))
            want_p = ((2, 1, 4, d), (8, 16, 2, d), (8, 16, 2, d), (2, 1, 4, d))  # 2 x 4 pages of 16
            for lib in (fa4, x):
                self.assertEqual(sorted(set(lib.shapes)), sorted({want_c, want_p}), d)
            nb = dp.kv_bytes(2, 64, 2, d)
            for page, r in rows.items():
                self.assertAlmostEqual(r["kv_gb"], nb / 1e9)
                self.assertAlmostEqual(r["fa4"], nb / (1.0 if page == 0 else 1.1) / 1e6)
                self.assertAlmostEqual(r["ab_x"], nb / (0.9 if page == 0 else 0.99) / 1e6)
                self.assertEqual(r["ab_x_maxdiff_vs_fa4"], 0.0)
                self.assertLess(r["maxdiff"], 1e-2)  # against FA3's (stand-in's) output at D d
                self.assertLess(r["maxdiff_fp32"], 1e-2)
            self.assertEqual(peers.FA3.metadata_calls, [(2, 1, 64, 4, 2, d, None, False)])
            peers.FA3.metadata_calls.clear()
            c = self.ctx(ShapeLib(), argv=["--head-dim", str(d)])
            rows = dp.run_point(c, dict(kind="chunked", b=1, sq=16, hq=4, hkv=2, kv_len=64, pages=[0]), 0)
            self.assertEqual(peers.FA3.metadata_calls, [(1, 16, 64, 4, 2, d, None, True)])
            peers.FA3.metadata_calls.clear()
            self.assertAlmostEqual(rows[0]["tflops_fa4"], dp.attn_flops(1, 4, 16, 64, True, d) / 1.0 / 1e9)
            self.assertEqual(c.fa4.shapes[0][0], (1, 16, 4, d))
            self.assertLess(rows[0]["maxdiff"], 1e-2)

    def test_fp8_point_uses_d(self):
        for d in (64, 256):
            c = self.ctx(ShapeLib(), argv=["--fp8-kv", "--head-dim", str(d)])
            rows = dp.run_fp8_point(c, dict(kind="fp8kv", b=2, sq=1, hq=4, hkv=2, kv_len=64, pages=[0, 16]), 0)
            self.assertTrue(all(s[1][-1] == d and s[0] == (2, 1, 4, d) for s in c.fa4.shapes))
            nb8 = dp.fp8_kv_bytes(2, 64, 2, False, d)
            for r in rows.values():
                self.assertAlmostEqual(r["kv_gb"], nb8 / 1e9)
                self.assertAlmostEqual(r["bf16_gb"], dp.kv_bytes(2, 64, 2, d) / 1e9)
                self.assertEqual(dp.fp8_fails(r), [], r)

    def test_dry_run(self):
        def dry(argv):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                self.assertEqual(dp.main(["--dry-run"] + argv), 0)
            return buf.getvalue().splitlines()
        base = dry([])
        self.assertEqual(dry(["--head-dim", "128"]), base)
        self.assertNotIn("head dim", "\n".join(base))
        for d in (64, 256):
            out = dry(["--head-dim", str(d), "--ab", "x=y.so"])
            self.assertIn(f"at head dim {d}", out[0])
            line = next(x for x in out if x.startswith("  decode B32 Sq1 32/8 kv8k "))
            self.assertTrue(line.endswith(f"K+V {dp.kv_bytes(32, 8192, 8, d) / 1e9:.3g} GB"), line)
            out = dry(["--head-dim", str(d), "--fp8-kv"])
            self.assertIn(f"at head dim {d}", out[0])
            self.assertIn(f"{dp.fp8_kv_bytes(32, 65536, 8, False, d) / 1e9:.3g} GB e4m3", out[-1])

    def test_main_meta_and_markdown(self):
        argv = ["--b", "1", "--heads", "4/2", "--sq", "1", "--kv", "64", "--pages", "0,16", "--chunk-sq", "16",
                "--chunk-kv", "64", "--chunk-pages", "0"]
        js, md, _ = _main_with_fakes(argv)
        self.assertEqual(js["meta"]["head_dim"], 128)
        self.assertIn("- D = 128, bf16;", md)
        for d in (64, 256):
            js, md, out = _main_with_fakes(argv + ["--head-dim", str(d), "--ab", "x=nowhere.so"])
            self.assertEqual(js["meta"]["head_dim"], d)
            self.assertIn(f"- D = {d}, bf16;", md)
            self.assertIn("## A/B", md)
            self.assertIn(f"at head dim {d}", out)
            self.assertEqual([r["kv_gb"] for r in js["decode"]], [dp.kv_bytes(1, 64, 2, d) / 1e9] * 2)
            self.assertTrue(all(r["ab_x"] is not None and r["maxdiff"] < 1e-2 for r in js["decode"] + js["chunked_prefill"]))
            js, md, _ = _main_with_fakes(["--fp8-kv", "--head-dim", str(d), "--b", "2", "--heads", "4/2", "--kv", "64",
                                          "--pages", "0,16"])
            self.assertEqual(js["meta"]["head_dim"], d)
            self.assertIn(f"D = {d}, bf16 q;", md)
            self.assertEqual([r["kv_gb"] for r in js["fp8_kv"]], [dp.fp8_kv_bytes(2, 64, 2, False, d) / 1e9] * 2)


if __name__ == "__main__":
    res = unittest.main(exit=False, verbosity=1).result
    n = res.testsRun
    bad = len(res.failures) + len(res.errors)
    print(f"{n - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)
