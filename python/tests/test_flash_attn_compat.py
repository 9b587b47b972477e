"""flash-attn drop-in aliases: names, positional argument order, return values."""
import numpy as np
import pytest

import fa4
from fa4.flash_attn_compat import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
from reference import attention_ref, kvcache_ref, tol_check, varlen_ref
from util import rand


def test_exported_at_top_level():
    assert fa4.flash_attn_func is flash_attn_func
    assert fa4.flash_attn_varlen_func is flash_attn_varlen_func
    assert fa4.flash_attn_with_kvcache is flash_attn_with_kvcache


def test_flash_attn_func_positional(rng):
    q, k, v = rand(rng, (2, 5, 4, 16)), rand(rng, (2, 7, 2, 16)), rand(rng, (2, 7, 2, 16))
    # flash-attn order: q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi, det, probs
    out = flash_attn_func(q, k, v, 0.0, 0.2, True, (3, 0), 0.0, None, False, False)
    tol_check(out, attention_ref(q, k, v, scale=0.2, causal=True, window=(3, 0))[0], "float32")
    out, lse, s = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)
    assert s is None


def test_flash_attn_func_softcap(rng):
    q, k, v = (rand(rng, (1, 4, 2, 8)) for _ in range(3))
    out = flash_attn_func(q, k, v, softcap=2.0)
    tol_check(out, attention_ref(q, k, v, softcap=2.0)[0], "float32")


def test_unsupported_features(rng):
    q, k, v = (rand(rng, (1, 4, 2, 8)) for _ in range(3))
    for kw, arg in ((dict(dropout_p=0.1), "dropout_p"), (dict(alibi_slopes=np.zeros(2, np.float32)), "alibi_slopes")):
        with pytest.raises(fa4.UnsupportedError) as ei:
            flash_attn_func(q, k, v, **kw)
        assert ei.value.argument == arg and isinstance(ei.value, ValueError)
    with pytest.raises(fa4.UnsupportedError) as ei:
        flash_attn_with_kvcache(q, k, v, rotary_cos=np.zeros((4, 4), np.float32))
    assert ei.value.argument == "rotary_cos"


def test_flash_attn_varlen_func(rng):
    cu_q = np.array([0, 3, 7], np.int32)
    cu_k = np.array([0, 5, 9], np.int32)
    q, k, v = rand(rng, (7, 4, 8)), rand(rng, (9, 2, 8)), rand(rng, (9, 2, 8))
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 5, 0.0, None, True)
    tol_check(out, varlen_ref(q, k, v, cu_q, cu_k, causal=True)[0], "float32")
    out, lse, _ = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 5, causal=True, return_attn_probs=True)
    assert lse.shape == (4, 7)


def test_flash_attn_varlen_func_block_table(rng):
    cu_q = np.array([0, 2, 3], np.int32)
    cu_k = np.array([0, 5, 11], np.int32)  # key lengths 5 and 6, read from the paged cache
    page = 2
    q = rand(rng, (3, 2, 8))
    kc, vc = rand(rng, (8, page, 1, 8)), rand(rng, (8, page, 1, 8))
    bt = np.array([[7, 1, 2], [3, 4, 5]], np.int32)
    out = flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, 2, 6, causal=True, block_table=bt)
    for b in range(2):
        qb = q[cu_q[b]:cu_q[b + 1]][None]
        ref, _ = kvcache_ref(qb, kc, vc, cache_seqlens=[cu_k[b + 1] - cu_k[b]], page_table=bt[b:b + 1], causal=True)
        tol_check(out[cu_q[b]:cu_q[b + 1]], ref[0], "float32")


def test_flash_attn_with_kvcache(rng):
    B, D = 2, 8
    q = rand(rng, (B, 1, 4, D))
    kc, vc = rand(rng, (B, 6, 2, D)), rand(rng, (B, 6, 2, D))
    kn, vn = rand(rng, (B, 1, 2, D)), rand(rng, (B, 1, 2, D))
    lens = np.array([2, 4], np.int32)
    # flash-attn order: q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, ...
    out, lse = flash_attn_with_kvcache(q, kc, vc, kn, vn, None, None, lens, causal=True, return_softmax_lse=True)
    np.testing.assert_array_equal(kc[0, 2], kn[0, 0])
    np.testing.assert_array_equal(vc[1, 4], vn[1, 0])
    ref, ref_lse = kvcache_ref(q, kc, vc, cache_seqlens=lens + 1, causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)
    # int cache_seqlens, paged via block_table
    kp, vp = rand(rng, (4, 3, 2, D)), rand(rng, (4, 3, 2, D))
    bt = np.array([[1, 0], [3, 2]], np.int32)
    out = flash_attn_with_kvcache(q, kp, vp, cache_seqlens=5, block_table=bt)
    tol_check(out, kvcache_ref(q, kp, vp, cache_seqlens=[5, 5], page_table=bt)[0], "float32")
