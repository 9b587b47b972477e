"""attention_varlen, attention_with_kvcache (contiguous, paged, append) and combine on NumPy."""
import numpy as np
import pytest

import fa4
from reference import (append_ref, attention_ref, combine_ref, kvcache_ref, tol_check, varlen_ref)
from util import BF16, rand


def cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


# ---- varlen ----

@pytest.mark.parametrize("opts", [{}, dict(causal=True), dict(window=(2, 0)), dict(softcap=3.0, causal=True)])
def test_varlen(rng, opts):
    lq = np.array([3, 0, 5, 1])
    lk = np.array([4, 2, 5, 6])
    q = rand(rng, (lq.sum(), 4, 16))
    k = rand(rng, (lk.sum(), 2, 16))
    v = rand(rng, (lk.sum(), 2, 8))
    out, lse = fa4.attention_varlen(q, k, v, cu(lq), cu(lk), max_seqlen_q=5, max_seqlen_k=6, return_lse=True, **opts)
    assert out.shape == (lq.sum(), 4, 8) and lse.shape == (4, lq.sum())
    ref, ref_lse = varlen_ref(q, k, v, cu(lq), cu(lk), **opts)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)


def test_varlen_seqused_k_and_sinks(rng):
    lq = np.array([2, 4])
    lk = np.array([6, 5])
    used = np.array([3, 5], np.int32)
    q = rand(rng, (lq.sum(), 2, 8))
    k = rand(rng, (lk.sum(), 1, 8))
    v = rand(rng, (lk.sum(), 1, 8))
    sinks = rand(rng, (2,))
    out = fa4.attention_varlen(q, k, v, cu(lq), cu(lk), seqused_k=used, sinks=sinks, causal=True)
    ref, _ = varlen_ref(q, k, v, cu(lq), cu(lk), seqused_k=used, sinks=sinks, causal=True)
    tol_check(out, ref, "float32")


@pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed")
def test_varlen_bf16(rng):
    lq = np.array([3, 4])
    q = rand(rng, (7, 2, 16), BF16)
    k = rand(rng, (7, 2, 16), BF16)
    v = rand(rng, (7, 2, 16), BF16)
    out = fa4.attention_varlen(q, k, v, cu(lq), cu(lq), causal=True)
    assert out.dtype == BF16
    tol_check(out, varlen_ref(q, k, v, cu(lq), cu(lq), causal=True)[0], "bfloat16")


# ---- KV cache ----

def test_kvcache_contiguous(rng):
    B, Sq, Hq, Hkv, D, Smax = 3, 2, 4, 2, 16, 9
    q = rand(rng, (B, Sq, Hq, D))
    kc = rand(rng, (B, Smax, Hkv, D))
    vc = rand(rng, (B, Smax, Hkv, D))
    lens = np.array([2, 9, 5], np.int32)
    out, lse = fa4.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True, return_lse=True)
    ref, ref_lse = kvcache_ref(q, kc, vc, cache_seqlens=lens, causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)


def test_kvcache_int_seqlens_and_default(rng):
    q = rand(rng, (2, 1, 2, 8))
    kc = rand(rng, (2, 6, 2, 8))
    vc = rand(rng, (2, 6, 2, 8))
    out = fa4.attention_with_kvcache(q, kc, vc, cache_seqlens=4)
    tol_check(out, kvcache_ref(q, kc, vc, cache_seqlens=[4, 4])[0], "float32")
    out = fa4.attention_with_kvcache(q, kc, vc)  # default: the whole cache
    tol_check(out, attention_ref(q, kc, vc)[0], "float32")


def test_kvcache_batch_idx(rng):
    q = rand(rng, (2, 3, 2, 8))
    kc = rand(rng, (4, 7, 1, 8))
    vc = rand(rng, (4, 7, 1, 8))
    lens = np.array([5, 7], np.int32)
    idx = np.array([3, 1], np.int32)
    out = fa4.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, cache_batch_idx=idx, causal=True)
    ref, _ = kvcache_ref(q, kc, vc, cache_seqlens=lens, cache_batch_idx=idx, causal=True)
    tol_check(out, ref, "float32")


@pytest.mark.parametrize("page", [1, 3, 4])
def test_kvcache_paged(rng, page):
    B, Hkv, D, max_pages = 2, 2, 16, 4
    num_pages = B * max_pages + 1
    q = rand(rng, (B, 2, 4, D))
    kc = rand(rng, (num_pages, page, Hkv, D))
    vc = rand(rng, (num_pages, page, Hkv, D))
    pt = rng.permutation(num_pages)[: B * max_pages].reshape(B, max_pages).astype(np.int32)
    lens = np.array([page * max_pages, max(1, page * max_pages - 3)], np.int32)
    out, lse = fa4.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, page_table=pt, causal=True, return_lse=True)
    ref, ref_lse = kvcache_ref(q, kc, vc, cache_seqlens=lens, page_table=pt, causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)


def test_kvcache_append_contiguous(rng):
    B, Hkv, D, Smax, Snew = 2, 2, 8, 10, 3
    q = rand(rng, (B, Snew, 4, D))
    kc = rand(rng, (B, Smax, Hkv, D))
    vc = rand(rng, (B, Smax, Hkv, D))
    kn = rand(rng, (B, Snew, Hkv, D))
    vn = rand(rng, (B, Snew, Hkv, D))
    lens = np.array([2, 7], np.int32)
    kc_want = append_ref(kc, kn, lens)
    vc_want = append_ref(vc, vn, lens)
    out = fa4.attention_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, causal=True)
    np.testing.assert_array_equal(kc, kc_want)  # appended in place
    np.testing.assert_array_equal(vc, vc_want)
    ref, _ = kvcache_ref(q, kc_want, vc_want, cache_seqlens=lens + Snew, causal=True)
    tol_check(out, ref, "float32")


def test_kvcache_append_paged(rng):
    B, Hkv, D, page, max_pages, Snew = 2, 1, 8, 2, 3, 2
    q = rand(rng, (B, 1, 2, D))
    kc = rand(rng, (B * max_pages, page, Hkv, D))
    vc = rand(rng, (B * max_pages, page, Hkv, D))
    pt = np.arange(B * max_pages, dtype=np.int32)[::-1].reshape(B, max_pages).copy()
    kn = rand(rng, (B, Snew, Hkv, D))
    vn = rand(rng, (B, Snew, Hkv, D))
    lens = np.array([1, 4], np.int32)
    kc_want = append_ref(kc, kn, lens, page_table=pt)
    vc_want = append_ref(vc, vn, lens, page_table=pt)
    out = fa4.attention_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, page_table=pt)
    np.testing.assert_array_equal(kc, kc_want)
    np.testing.assert_array_equal(vc, vc_want)
    ref, _ = kvcache_ref(q, kc_want, vc_want, cache_seqlens=lens + Snew, page_table=pt)
    tol_check(out, ref, "float32")


def test_varlen_q_over_paged_cache(rng):
    lq = np.array([2, 3])
    page, max_pages, Hkv, D = 2, 3, 2, 8
    q = rand(rng, (lq.sum(), 2, D))
    kc = rand(rng, (6, page, Hkv, D))
    vc = rand(rng, (6, page, Hkv, D))
    pt = np.array([[4, 0, 2], [1, 5, 3]], np.int32)
    lens = np.array([5, 6], np.int32)
    out = fa4.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, page_table=pt, cu_seqlens_q=cu(lq), causal=True)
    assert out.shape == (5, 2, D)
    for b in range(2):
        qb = q[cu(lq)[b]:cu(lq)[b + 1]][None]
        ref, _ = kvcache_ref(qb, kc, vc, cache_seqlens=lens[b:b + 1], page_table=pt[b:b + 1], causal=True)
        tol_check(out[cu(lq)[b]:cu(lq)[b + 1]], ref[0], "float32")


# ---- combine ----

def test_combine(rng):
    S, B, Sq, H, D = 3, 2, 4, 2, 8
    op = rand(rng, (S, B, Sq, H, D))
    lp = rand(rng, (S, B, H, Sq)) * 3
    lp[:, 0, 1, 2] = -np.inf  # a row with no keys in any split
    lp[1, 1, 0, 0] = -np.inf  # one empty split
    out, lse = fa4.combine(op, lp, return_lse=True)
    ref, ref_lse = combine_ref(op, lp)
    assert out.dtype == np.float32 and out.shape == (B, Sq, H, D)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)
    assert np.all(out[0, 2, 1] == 0) and np.isneginf(lse[0, 1, 2])


def test_combine_matches_split_attention(rng):
    # Attention over two halves of the keys, merged, equals attention over all keys.
    q = rand(rng, (1, 3, 2, 8))
    k = rand(rng, (1, 10, 2, 8))
    v = rand(rng, (1, 10, 2, 8))
    parts = [fa4.attention(q, k[:, a:b], v[:, a:b], return_lse=True) for a, b in ((0, 4), (4, 10))]
    op = np.stack([p[0] for p in parts])
    lp = np.stack([p[1] for p in parts])
    out = fa4.combine(op, lp, out_dtype=np.float16)
    assert out.dtype == np.float16
    tol_check(out, attention_ref(q, k, v)[0], "float16")


@pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed")
def test_combine_bf16_out(rng):
    op = rand(rng, (2, 1, 3, 2, 8))
    lp = rand(rng, (2, 1, 2, 3))
    out = np.empty((1, 3, 2, 8), BF16)
    res = fa4.combine(op, lp, out=out)
    assert res is out
    tol_check(out, combine_ref(op, lp)[0], "bfloat16")
