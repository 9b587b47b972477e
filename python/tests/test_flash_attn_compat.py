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


FA2_NAMES = ("flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
             "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache")


def test_all_names_exported():
    import fa4.flash_attn_compat as fc

    for name in FA2_NAMES:
        assert getattr(fa4, name) is getattr(fc, name)


def test_packed_variants(rng):
    from fa4.flash_attn_compat import (flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                                       flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func)

    qkv = rand(rng, (2, 5, 3, 2, 8))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    # flash-attn 2 order: qkv, dropout_p, softmax_scale, causal, window_size
    out = flash_attn_qkvpacked_func(qkv, 0.0, 0.3, True, (2, 0))
    tol_check(out, attention_ref(q, k, v, scale=0.3, causal=True, window=(2, 0))[0], "float32")
    q = rand(rng, (2, 4, 4, 8))
    kv = rand(rng, (2, 6, 2, 2, 8))
    out, lse, s = flash_attn_kvpacked_func(q, kv, 0.0, None, True, return_attn_probs=True)
    ref, ref_lse = attention_ref(q, kv[:, :, 0], kv[:, :, 1], causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)
    assert s is None
    cu = np.array([0, 3, 8], np.int32)
    qkv = rand(rng, (8, 3, 2, 8))
    out = flash_attn_varlen_qkvpacked_func(qkv, cu, 5, 0.0, None, True)
    tol_check(out, varlen_ref(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, causal=True)[0], "float32")
    cu_q, cu_k = np.array([0, 2, 5], np.int32), np.array([0, 4, 6], np.int32)
    q, kv = rand(rng, (5, 4, 8)), rand(rng, (6, 2, 2, 8))
    out = flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, 3, 4, 0.0, None, True)
    tol_check(out, varlen_ref(q, kv[:, 0], kv[:, 1], cu_q, cu_k, causal=True)[0], "float32")


@pytest.mark.parametrize("window", [(3, 2), (-1, 4), (2, 0)])
def test_causal_with_window_is_flash_attn_rule(rng, window):
    # flash-attn: causal=True with a window keeps the left edge, right edge 0 (fa4 alone rejects it)
    q, k, v = rand(rng, (1, 6, 2, 8)), rand(rng, (1, 8, 2, 8)), rand(rng, (1, 8, 2, 8))
    out = flash_attn_func(q, k, v, causal=True, window_size=window)
    tol_check(out, attention_ref(q, k, v, window=(window[0], 0))[0], "float32")
    cu = np.array([0, 6], np.int32)
    cuk = np.array([0, 8], np.int32)
    out = flash_attn_varlen_func(q[0], k[0], v[0], cu, cuk, 6, 8, causal=True, window_size=window)
    tol_check(out, varlen_ref(q[0], k[0], v[0], cu, cuk, window=(window[0], 0))[0], "float32")
    kc, vc = k.copy(), v.copy()
    out = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=8, causal=True, window_size=window)
    tol_check(out, attention_ref(q, k, v, window=(window[0], 0))[0], "float32")


@pytest.mark.parametrize("kw,arg", [
    (dict(softmax_scale=True), "softmax_scale"), (dict(dropout_p=False), "dropout_p"),
    (dict(window_size=(True, 0)), "window_size"), (dict(window_size=(3, np.bool_(True))), "window_size"),
    (dict(softcap=False), "softcap"), (dict(causal=1), "causal"), (dict(deterministic=0), "deterministic"),
])
def test_bools_are_never_numbers(rng, kw, arg):
    q = rand(rng, (1, 3, 2, 8))
    with pytest.raises(TypeError) as ei:
        flash_attn_func(q, q, q, **kw)
    assert ei.value.argument == arg and arg in str(ei.value)
    with pytest.raises(TypeError) as ei:
        flash_attn_with_kvcache(q, q.copy(), q.copy(), num_splits=True)
    assert ei.value.argument == "num_splits"
    cu = np.array([0, 3], np.int32)
    with pytest.raises(TypeError) as ei:
        flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 3, False)
    assert ei.value.argument == "max_seqlen_k"


def test_varlen_vllm_keywords_numpy(rng):
    # vLLM's decoder call shape (keywords only; see test_torch_dropin.py for torch tensors):
    # paged k/v, seqused_k, no cu_seqlens_k, out=, num_splits, descales (ignored for 16-bit), s_aux
    cu_q = np.array([0, 3, 4], np.int32)
    seq_lens = np.array([7, 5], np.int32)
    q = rand(rng, (4, 4, 8))
    kc, vc = rand(rng, (6, 4, 2, 8)), rand(rng, (6, 4, 2, 8))
    bt = np.array([[5, 2], [0, 3]], np.int32)
    out = np.full((4, 4, 8), np.nan, np.float32)
    d = np.ones((2, 2), np.float32)
    sinks = rand(rng, (4,))
    res = flash_attn_varlen_func(q=q, k=kc, v=vc, out=out, cu_seqlens_q=cu_q, max_seqlen_q=3, seqused_k=seq_lens,
                                 max_seqlen_k=7, softmax_scale=0.35, causal=True, alibi_slopes=None,
                                 window_size=(-1, -1), block_table=bt, softcap=0, scheduler_metadata=None,
                                 fa_version=3, q_descale=d, k_descale=d, v_descale=d, num_splits=0, s_aux=sinks)
    assert res is out
    for b in range(2):
        qb = q[cu_q[b]:cu_q[b + 1]][None]
        ref = kvcache_ref(qb, kc, vc, cache_seqlens=[seq_lens[b]], page_table=bt[b:b + 1], scale=0.35, causal=True,
                          sinks=sinks)[0]
        tol_check(out[cu_q[b]:cu_q[b + 1]], ref[0], "float32")
    # return_softmax_lse (vLLM's cascade path): a pair
    o, lse = flash_attn_varlen_func(q=q, k=kc, v=vc, cu_seqlens_q=cu_q, max_seqlen_q=3, seqused_k=seq_lens,
                                    max_seqlen_k=7, causal=True, block_table=bt, return_softmax_lse=True)
    assert lse.shape == (4, 4)
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        flash_attn_varlen_func(q=q, k=kc, v=vc, cu_seqlens_q=cu_q, max_seqlen_q=3, max_seqlen_k=7, block_table=bt)
    assert ei.value.argument == "seqused_k"
    with pytest.raises(fa4.UnsupportedError) as ei:
        flash_attn_varlen_func(q=q, k=kc, v=vc, cu_seqlens_q=cu_q, max_seqlen_q=3, seqused_k=seq_lens,
                               max_seqlen_k=7, block_table=bt, cp_world_size=2)
    assert ei.value.argument == "cp_world_size"
