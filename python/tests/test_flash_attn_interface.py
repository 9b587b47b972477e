"""fa4.flash_attn_interface: flash-attn 3's names, positional order, defaults and returns (NumPy
inputs; the torch forms and vLLM's call are in test_torch_dropin.py)."""
import inspect

import numpy as np
import pytest

import fa4
from fa4 import flash_attn_interface as fi
from reference import attention_ref, combine_ref, kvcache_ref, tol_check, varlen_ref
from util import rand

# flash-attn 3's signatures (hopper/flash_attn_interface.py): name -> [(parameter, default)], in
# order; fa4's extras come after them, keyword-only.
NO = inspect.Parameter.empty
FA3 = {
    "flash_attn_func": [("q", NO), ("k", NO), ("v", NO), ("softmax_scale", None), ("causal", False), ("qv", None),
                        ("q_descale", None), ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)),
                        ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1), ("pack_gqa", None),
                        ("deterministic", False), ("sm_margin", 0), ("return_attn_probs", False)],
    "flash_attn_qkvpacked_func": [("qkv", NO), ("softmax_scale", None), ("causal", False), ("q_descale", None),
                                  ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)),
                                  ("attention_chunk", 0), ("softcap", 0.0), ("deterministic", False),
                                  ("num_heads_q", None), ("sm_margin", 0), ("return_attn_probs", False)],
    "flash_attn_varlen_func": [("q", NO), ("k", NO), ("v", NO), ("cu_seqlens_q", NO), ("cu_seqlens_k", NO),
                               ("max_seqlen_q", NO), ("max_seqlen_k", NO), ("seqused_q", None), ("seqused_k", None),
                               ("softmax_scale", None), ("causal", False), ("qv", None), ("q_descale", None),
                               ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)),
                               ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1), ("pack_gqa", None),
                               ("deterministic", False), ("sm_margin", 0), ("return_attn_probs", False)],
    "flash_attn_with_kvcache": [("q", NO), ("k_cache", NO), ("v_cache", NO), ("k", None), ("v", None), ("qv", None),
                                ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None),
                                ("cache_batch_idx", None), ("cache_leftpad", None), ("page_table", None),
                                ("cu_seqlens_q", None), ("cu_seqlens_k_new", None), ("max_seqlen_q", None),
                                ("rotary_seqlens", None), ("q_descale", None), ("k_descale", None),
                                ("v_descale", None), ("softmax_scale", None), ("causal", False),
                                ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0),
                                ("rotary_interleaved", True), ("scheduler_metadata", None), ("num_splits", 0),
                                ("pack_gqa", None), ("sm_margin", 0), ("return_softmax_lse", False)],
    "flash_attn_combine": [("out_partial", NO), ("lse_partial", NO), ("out", None), ("out_dtype", None)],
}


@pytest.mark.parametrize("name", sorted(FA3))
def test_signature_matches_flash_attn_3(name):
    params = list(inspect.signature(getattr(fi, name)).parameters.values())
    positional = [(p.name, p.default) for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == FA3[name]
    extras = [p.name for p in params if p.kind != p.POSITIONAL_OR_KEYWORD]
    assert all(p.kind == p.KEYWORD_ONLY for p in params if p.name in extras)
    if name != "flash_attn_combine":
        assert {"out", "learnable_sink"} <= set(extras)


def test_positional_order_softmax_scale_then_causal(rng):
    # the call in issue 14: flash-attn 3's order (q, k, v, softmax_scale, causal)
    q, k, v = rand(rng, (2, 5, 4, 16)), rand(rng, (2, 7, 2, 16)), rand(rng, (2, 7, 2, 16))
    out = fi.flash_attn_func(q, k, v, None, True)
    tol_check(out, attention_ref(q, k, v, causal=True)[0], "float32")
    out = fi.flash_attn_func(q, k, v, 0.3, False)
    tol_check(out, attention_ref(q, k, v, scale=0.3)[0], "float32")
    out, lse = fi.flash_attn_func(q, k, v, 0.3, True, return_attn_probs=True)  # FA3: a pair, no S_dmask
    ref, ref_lse = attention_ref(q, k, v, scale=0.3, causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)


def test_flash_attn_2_layer_rejects_flash_attn_3_order(rng):
    q = rand(rng, (1, 3, 2, 8))
    with pytest.raises(TypeError) as ei:
        fa4.flash_attn_func(q, q, q, None, True)
    assert ei.value.argument == "dropout_p" and "flash_attn_interface" in str(ei.value)


@pytest.mark.parametrize("window", [(3, 2), (2, -1), (-1, 5), (4, 0)])
def test_causal_with_window_sets_right_edge_to_0(rng, window):
    q, k, v = rand(rng, (1, 6, 2, 8)), rand(rng, (1, 9, 2, 8)), rand(rng, (1, 9, 2, 8))
    out = fi.flash_attn_func(q, k, v, causal=True, window_size=window)
    tol_check(out, attention_ref(q, k, v, window=(window[0], 0))[0], "float32")
    # and without causal the window is taken as it is
    out = fi.flash_attn_func(q, k, v, window_size=window)
    tol_check(out, attention_ref(q, k, v, window=window)[0], "float32")


def test_window_none_and_negative_edges_are_unbounded(rng):
    q, k, v = (rand(rng, (1, 5, 2, 8)) for _ in range(3))
    ref = attention_ref(q, k, v, window=(2, -1))[0]
    for w in ((2, None), (2, -7), [2, -1]):
        tol_check(fi.flash_attn_func(q, k, v, window_size=w), ref, "float32")
    tol_check(fi.flash_attn_func(q, k, v, window_size=None), attention_ref(q, k, v)[0], "float32")


@pytest.mark.parametrize("kw,arg", [
    (dict(softmax_scale=True), "softmax_scale"), (dict(causal=1), "causal"), (dict(window_size=(True, 0)), "window_size"),
    (dict(window_size=(2, False)), "window_size"), (dict(softcap=True), "softcap"), (dict(num_splits=True), "num_splits"),
    (dict(attention_chunk=True), "attention_chunk"), (dict(attention_chunk=2.0), "attention_chunk"),
    (dict(pack_gqa=1), "pack_gqa"), (dict(deterministic="no"), "deterministic"), (dict(sm_margin=False), "sm_margin"),
    (dict(return_attn_probs=0), "return_attn_probs"),
])
def test_bools_are_never_numbers(rng, kw, arg):
    q = rand(rng, (1, 3, 2, 8))
    with pytest.raises(TypeError) as ei:
        fi.flash_attn_func(q, q, q, **kw)
    assert ei.value.argument == arg and arg in str(ei.value)


@pytest.mark.parametrize("fn", ["varlen", "kvcache"])
def test_bools_are_never_numbers_varlen_kvcache(rng, fn):
    q = rand(rng, (4, 2, 8))
    cu = np.array([0, 4], np.int32)
    with pytest.raises(TypeError) as ei:
        if fn == "varlen":
            fi.flash_attn_varlen_func(q, q, q, cu, cu, True, 4)
        else:
            fi.flash_attn_with_kvcache(q[None], q[None], q[None], cache_seqlens=4, num_splits=False)
    assert ei.value.argument == ("max_seqlen_q" if fn == "varlen" else "num_splits")


def test_attention_chunk(rng):
    q, k, v = rand(rng, (1, 10, 2, 8)), rand(rng, (1, 13, 2, 8)), rand(rng, (1, 13, 2, 8))
    out = fi.flash_attn_func(q, k, v, causal=True, attention_chunk=4)
    tol_check(out, attention_ref(q, k, v, causal=True, chunk=4)[0], "float32")
    # a left window inside the chunk; a right edge of 0 without causal= is the same mask
    out = fi.flash_attn_func(q, k, v, window_size=(2, 0), attention_chunk=4)
    tol_check(out, attention_ref(q, k, v, window=(2, 0), chunk=4)[0], "float32")
    # bidirectional inside each chunk: refused, naming attention_chunk
    for kw in (dict(), dict(window_size=(2, 3))):
        with pytest.raises(fa4.UnsupportedError) as ei:
            fi.flash_attn_func(q, k, v, attention_chunk=4, **kw)
        assert ei.value.argument == "attention_chunk" and "causal" in str(ei.value)


def test_learnable_sink_and_out(rng):
    q, k, v = rand(rng, (2, 4, 4, 8)), rand(rng, (2, 6, 2, 8)), rand(rng, (2, 6, 2, 8))
    sink = rand(rng, (4,))
    out = np.full((2, 4, 4, 8), np.nan, np.float32)
    res = fi.flash_attn_func(q, k, v, causal=True, learnable_sink=sink, out=out)
    assert res is out
    tol_check(out, attention_ref(q, k, v, causal=True, sinks=sink)[0], "float32")
    # vLLM's name for the same, and a float16 sink is taken as float32
    res = fi.flash_attn_func(q, k, v, causal=True, s_aux=sink.astype(np.float16))
    tol_check(res, attention_ref(q, k, v, causal=True, sinks=sink.astype(np.float16))[0], "float32")
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fi.flash_attn_func(q, k, v, learnable_sink=sink, s_aux=sink)
    assert ei.value.argument == "s_aux"


def test_descales_ignored_for_16_bit_inputs(rng):
    q, k, v = (rand(rng, (2, 4, 2, 8)) for _ in range(3))
    d = np.full((2, 2), 0.5, np.float32)  # would change the result if applied
    out = fi.flash_attn_func(q, k, v, q_descale=d, k_descale=d, v_descale=d)
    tol_check(out, attention_ref(q, k, v)[0], "float32")


def test_num_splits_and_pack_gqa_accepted(rng):
    q, k, v = rand(rng, (1, 2, 8, 16)), rand(rng, (1, 40, 2, 16)), rand(rng, (1, 40, 2, 16))
    ref = attention_ref(q, k, v)[0]
    for ns, pg in ((1, None), (3, True), (0, False)):
        tol_check(fi.flash_attn_func(q, k, v, num_splits=ns, pack_gqa=pg), ref, "float32")


def test_unsupported_arguments_named(rng):
    q = rand(rng, (1, 3, 2, 8))
    for fn, kw, arg in ((fi.flash_attn_func, dict(qv=q), "qv"),
                        (fi.flash_attn_with_kvcache, dict(rotary_cos=q), "rotary_cos"),
                        (fi.flash_attn_with_kvcache, dict(cache_leftpad=q), "cache_leftpad"),
                        (fi.flash_attn_with_kvcache, dict(cu_seqlens_k_new=q), "cu_seqlens_k_new")):
        with pytest.raises(fa4.UnsupportedError) as ei:
            fn(q, q, q, **kw)
        assert ei.value.argument == arg


def test_qkvpacked(rng):
    qkv = rand(rng, (2, 5, 3, 2, 8))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    out = fi.flash_attn_qkvpacked_func(qkv, None, True)
    tol_check(out, attention_ref(q, k, v, causal=True)[0], "float32")
    # 4-d with num_heads_q: [B, S, Hq + 2 Hkv, D]
    packed = rand(rng, (2, 5, 4 + 2 * 2, 8))
    out = fi.flash_attn_qkvpacked_func(packed, causal=True, num_heads_q=4)
    tol_check(out, attention_ref(packed[:, :, :4], packed[:, :, 4:6], packed[:, :, 6:], causal=True)[0], "float32")
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fi.flash_attn_qkvpacked_func(packed, num_heads_q=5)
    assert ei.value.argument == "num_heads_q"


def test_varlen_positional_and_seqused_k(rng):
    cu_q = np.array([0, 3, 7], np.int32)
    cu_k = np.array([0, 5, 11], np.int32)
    q, k, v = rand(rng, (7, 4, 8)), rand(rng, (11, 2, 8)), rand(rng, (11, 2, 8))
    out = fi.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 6, None, None, 0.4, True)
    tol_check(out, varlen_ref(q, k, v, cu_q, cu_k, scale=0.4, causal=True)[0], "float32")
    used_k = np.array([4, 2], np.int32)
    out, lse = fi.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 6, seqused_k=used_k, causal=True,
                                         return_attn_probs=True)
    ref, ref_lse = varlen_ref(q, k, v, cu_q, cu_k, seqused_k=used_k, causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)
    assert lse.shape == (4, 7)


def test_varlen_seqused_q(rng):
    cu_q = np.array([0, 3, 7, 9], np.int32)
    cu_k = np.array([0, 5, 11, 14], np.int32)
    used_q = np.array([2, 4, 0], np.int32)
    q, k, v = rand(rng, (9, 4, 8)), rand(rng, (14, 2, 8)), rand(rng, (14, 2, 8))
    out, lse = fi.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 6, seqused_q=used_q, causal=True,
                                         return_attn_probs=True)
    for b in range(3):
        r0, n = cu_q[b], used_q[b]
        qb = q[r0:r0 + n][None]
        kb, vb = k[cu_k[b]:cu_k[b + 1]][None], v[cu_k[b]:cu_k[b + 1]][None]
        ref, ref_lse = attention_ref(qb, kb, vb, causal=True)  # the sequence has n queries: causal offset Sk - n
        tol_check(out[r0:r0 + n], ref[0], "float32")
        np.testing.assert_allclose(lse[:, r0:r0 + n], ref_lse[0], atol=1e-3, rtol=0)
        assert np.all(out[r0 + n:cu_q[b + 1]] == 0) and np.all(lse[:, r0 + n:cu_q[b + 1]] == -np.inf)
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fi.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 6, seqused_q=np.array([4, 4, 0], np.int32))
    assert ei.value.argument == "seqused_q"


def test_varlen_dense_and_paged_keys_without_cu_seqlens_k(rng):
    cu_q = np.array([0, 2, 3], np.int32)
    used_k = np.array([5, 3], np.int32)
    q = rand(rng, (3, 2, 8))
    kd, vd = rand(rng, (2, 6, 1, 8)), rand(rng, (2, 6, 1, 8))
    out = fi.flash_attn_varlen_func(q, kd, vd, cu_q, None, 2, 6, seqused_k=used_k, causal=True)
    for b in range(2):
        qb = q[cu_q[b]:cu_q[b + 1]][None]
        ref = kvcache_ref(qb, kd[b:b + 1], vd[b:b + 1], cache_seqlens=[used_k[b]], causal=True)[0]
        tol_check(out[cu_q[b]:cu_q[b + 1]], ref[0], "float32")
    kp, vp = rand(rng, (6, 2, 1, 8)), rand(rng, (6, 2, 1, 8))
    pt = np.array([[4, 0, 5], [2, 1, 3]], np.int32)
    out = fi.flash_attn_varlen_func(q, kp, vp, cu_q, None, 2, 6, seqused_k=used_k, causal=True, page_table=pt)
    for b in range(2):
        qb = q[cu_q[b]:cu_q[b + 1]][None]
        ref = kvcache_ref(qb, kp, vp, cache_seqlens=[used_k[b]], page_table=pt[b:b + 1], causal=True)[0]
        tol_check(out[cu_q[b]:cu_q[b + 1]], ref[0], "float32")
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fi.flash_attn_varlen_func(q, kd, vd, cu_q, None, 2, 6)
    assert ei.value.argument == "cu_seqlens_k"


def test_with_kvcache_positional_append_and_returns(rng):
    B, D = 2, 8
    q = rand(rng, (B, 1, 4, D))
    kc, vc = rand(rng, (B, 6, 2, D)), rand(rng, (B, 6, 2, D))
    kn, vn = rand(rng, (B, 1, 2, D)), rand(rng, (B, 1, 2, D))
    lens = np.array([2, 4], np.int32)
    # flash-attn 3 order: q, k_cache, v_cache, k, v, qv, rotary_cos, rotary_sin, cache_seqlens
    res = fi.flash_attn_with_kvcache(q, kc, vc, kn, vn, None, None, None, lens, causal=True, return_softmax_lse=True)
    assert len(res) == 4  # out, softmax_lse, out_accum, softmax_lse_accum
    out, lse, oa, la = res
    assert oa.size == 0 and la.size == 0 and oa.dtype == np.float32
    np.testing.assert_array_equal(kc[0, 2], kn[0, 0])
    ref, ref_lse = kvcache_ref(q, kc, vc, cache_seqlens=lens + 1, causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)
    # paged through page_table, an int cache_seqlens, window + causal, sinks
    kp, vp = rand(rng, (4, 3, 2, D)), rand(rng, (4, 3, 2, D))
    pt = np.array([[1, 0], [3, 2]], np.int32)
    sink = rand(rng, (4,))
    out = fi.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=5, page_table=pt, causal=True, window_size=(2, 9),
                                     learnable_sink=sink)
    tol_check(out, kvcache_ref(q, kp, vp, cache_seqlens=[5, 5], page_table=pt, window=(2, 0), sinks=sink)[0],
              "float32")


def test_with_kvcache_varlen_q(rng):
    cu_q = np.array([0, 2, 5], np.int32)
    q = rand(rng, (5, 2, 8))
    kc, vc = rand(rng, (2, 7, 1, 8)), rand(rng, (2, 7, 1, 8))
    lens = np.array([4, 7], np.int32)
    out = fi.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, cu_seqlens_q=cu_q, max_seqlen_q=3, causal=True)
    for b in range(2):
        qb = q[cu_q[b]:cu_q[b + 1]][None]
        ref = kvcache_ref(qb, kc[b:b + 1], vc[b:b + 1], cache_seqlens=[lens[b]], causal=True)[0]
        tol_check(out[cu_q[b]:cu_q[b + 1]], ref[0], "float32")


def test_combine_takes_flash_attn_3_lse_layout(rng):
    S, B, Sq, H, D = 3, 2, 4, 2, 8
    op = rand(rng, (S, B, Sq, H, D))
    lse_fa3 = rand(rng, (S, B, Sq, H))          # [S, B, Sq, H]
    out, lse = fi.flash_attn_combine(op, lse_fa3)
    ref, ref_lse = combine_ref(op, lse_fa3.transpose(0, 1, 3, 2))
    tol_check(out, ref, "float32")
    assert lse.shape == (B, Sq, H)
    np.testing.assert_allclose(lse, ref_lse.transpose(0, 2, 1), atol=1e-5, rtol=0)
    dst = np.empty((B, Sq, H, D), np.float32)
    o2, _ = fi.flash_attn_combine(op, lse_fa3, out=dst)
    assert o2 is dst
    tol_check(dst, ref, "float32")
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fi.flash_attn_combine(op, lse_fa3[0])
    assert ei.value.argument == "lse_partial"
