"""fa4.attention (dense BSHD) on NumPy arrays against the float64 reference."""
import numpy as np
import pytest

import fa4
from reference import attention_ref, f64, tol_check
from util import BF16, DISTS, FP8, dtype_of, poison, rand

needs_ml_dtypes = pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed (bfloat16/float8 for NumPy)")

CASES = [
    # B, Sq, Sk, Hq, Hkv, Dqk, Dv
    (1, 1, 1, 1, 1, 8, 8),
    (2, 5, 7, 4, 2, 16, 8),
    (1, 9, 9, 3, 1, 32, 32),
    (2, 13, 6, 2, 2, 24, 40),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dist", DISTS)
def test_dense_dtypes(rng, dtype, case, dist):
    if dtype == "bfloat16" and BF16 is None:
        pytest.skip("ml_dtypes is not installed")
    B, Sq, Sk, Hq, Hkv, D, Dv = case
    dt = dtype_of(dtype)
    q = rand(rng, (B, Sq, Hq, D), dt, dist)
    k = rand(rng, (B, Sk, Hkv, D), dt, dist)
    # outliers in the scores (q, k) force rescales; v stays unit-scale so the output's own
    # rounding stays within the absolute tolerance
    v = rand(rng, (B, Sk, Hkv, Dv), dt, "normal" if dist == "outliers" else dist)
    out, lse = fa4.attention(q, k, v, return_lse=True)
    assert type(out) is np.ndarray and out.dtype == dt and out.shape == (B, Sq, Hq, Dv)
    assert lse.dtype == np.float32 and lse.shape == (B, Hq, Sq)
    ref, ref_lse = attention_ref(q, k, v)
    tol_check(out, ref, dtype)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)


MASKS = [
    dict(causal=True),
    dict(window=(2, 1)),
    dict(window=(3, -1)),
    dict(window=(-1, 0)),
    dict(window=(1, 0), causal=True),
    dict(chunk=3),
    dict(softcap=5.0),
    dict(scale=0.3),
    dict(causal=True, softcap=2.0, scale=0.5),
]


@pytest.mark.parametrize("opts", MASKS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("sq_sk", [(6, 6), (4, 9), (9, 4)])
def test_masks_softcap_scale(rng, opts, sq_sk):
    Sq, Sk = sq_sk
    q = rand(rng, (2, Sq, 4, 16))
    k = rand(rng, (2, Sk, 2, 16))
    v = rand(rng, (2, Sk, 2, 16))
    out, lse = fa4.attention(q, k, v, return_lse=True, **opts)
    ref, ref_lse = attention_ref(q, k, v, **opts)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)


def test_sinks(rng):
    q = rand(rng, (2, 5, 4, 16))
    k = rand(rng, (2, 6, 2, 16))
    v = rand(rng, (2, 6, 2, 16))
    sinks = rand(rng, (4,))
    out, lse = fa4.attention(q, k, v, sinks=sinks, causal=True, return_lse=True)
    ref, ref_lse = attention_ref(q, k, v, sinks=sinks, causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)


def test_empty_rows_are_zero_and_minus_inf(rng):
    # Sq > Sk with causal: the first Sq - Sk query rows see no key.
    q = rand(rng, (1, 5, 2, 8))
    k = rand(rng, (1, 2, 2, 8))
    v = rand(rng, (1, 2, 2, 8))
    out, lse = fa4.attention(q, k, v, causal=True, return_lse=True)
    assert np.all(out[0, :3] == 0)
    assert np.all(np.isneginf(lse[0, :, :3]))
    assert np.all(np.isfinite(out))
    ref, _ = attention_ref(q, k, v, causal=True)
    tol_check(out, ref, "float32")


@pytest.mark.parametrize("backend", ["auto", "cpu", "reference"])
def test_backends_agree(rng, backend):
    q = rand(rng, (1, 7, 2, 16))
    k = rand(rng, (1, 7, 2, 16))
    v = rand(rng, (1, 7, 2, 16))
    out = fa4.attention(q, k, v, causal=True, backend=backend)
    ref, _ = attention_ref(q, k, v, causal=True)
    tol_check(out, ref, "float32")


def test_deterministic(rng):
    q, k, v = (rand(rng, (2, 9, 4, 32)) for _ in range(3))
    a = fa4.attention(q, k, v, causal=True)
    b = fa4.attention(q, k, v, causal=True)
    assert a.tobytes() == b.tobytes()


# ---- layouts ----

def test_transposed_views_bhsd(rng):
    # BHSD storage, passed as BSHD views (strides, no copy); output is BSHD.
    qh = rand(rng, (2, 4, 6, 16))  # [B, H, S, D]
    kh = rand(rng, (2, 2, 8, 16))
    vh = rand(rng, (2, 2, 8, 16))
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (qh, kh, vh))
    assert not q.flags.c_contiguous
    out = fa4.attention(q, k, v, causal=True)
    ref, _ = attention_ref(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v), causal=True)
    assert out.shape == (2, 6, 4, 16)
    tol_check(out, ref, "float32")


def test_sliced_and_strided_views(rng):
    big = rand(rng, (3, 10, 6, 40))
    q = big[::2, 1:8, :4, :16]  # every stride non-trivial, last dim contiguous
    k = big[:2, ::3, 4:6, 16:32]
    v = big[1:, 2:6, 1:3, ::2][:, :, :, :12]  # last-dim stride 2
    assert v.strides[-1] != v.itemsize
    out = fa4.attention(q, k, v)
    ref, _ = attention_ref(q, k, v)
    tol_check(out, ref, "float32")


def test_fortran_order_and_broadcast_inputs(rng):
    q = np.asfortranarray(rand(rng, (2, 5, 2, 8)))
    k1 = rand(rng, (1, 6, 1, 8))
    k = np.broadcast_to(k1, (2, 6, 1, 8))  # zero strides, read-only
    v = np.broadcast_to(rand(rng, (1, 6, 1, 8)), (2, 6, 1, 8))
    assert not k.flags.writeable
    out = fa4.attention(q, k, v)
    ref, _ = attention_ref(q, np.ascontiguousarray(k), np.ascontiguousarray(v))
    tol_check(out, ref, "float32")


def test_read_only_inputs(rng):
    q, k, v = (rand(rng, (1, 4, 2, 8)) for _ in range(3))
    for x in (q, k, v):
        x.flags.writeable = False
    out = fa4.attention(q, k, v)
    tol_check(out, attention_ref(q, k, v)[0], "float32")


def test_out_argument_written_in_place(rng):
    q, k, v = (rand(rng, (2, 4, 2, 8)) for _ in range(3))
    out = poison((2, 4, 2, 8), np.float32)
    res = fa4.attention(q, k, v, out=out)
    assert res is out
    tol_check(out, attention_ref(q, k, v)[0], "float32")
    # a strided view as out (BHSD storage)
    store = poison((2, 2, 4, 8), np.float32)
    view = store.transpose(0, 2, 1, 3)
    res, lse = fa4.attention(q, k, v, out=view, return_lse=True)
    assert res is view
    tol_check(store.transpose(0, 2, 1, 3), attention_ref(q, k, v)[0], "float32")


def test_every_output_element_written(rng):
    q, k, v = (rand(rng, (2, 6, 3, 8)) for _ in range(3))
    out = poison((2, 6, 3, 8), np.float32)
    fa4.attention(q, k, v, causal=True, out=out)
    assert np.all(np.isfinite(out))


def test_zero_size(rng):
    q = rand(rng, (0, 4, 2, 8))
    k = rand(rng, (0, 5, 2, 8))
    v = rand(rng, (0, 5, 2, 8))
    out = fa4.attention(q, k, v)
    assert out.shape == (0, 4, 2, 8)
    q = rand(rng, (1, 0, 2, 8))
    k = rand(rng, (1, 5, 2, 8))
    v = rand(rng, (1, 5, 2, 8))
    out, lse = fa4.attention(q, k, v, return_lse=True)
    assert out.shape == (1, 0, 2, 8) and lse.shape == (1, 2, 0)


def test_zero_keys_gives_zero_rows(rng):
    q = rand(rng, (1, 3, 2, 8))
    k = rand(rng, (1, 0, 2, 8))
    v = rand(rng, (1, 0, 2, 8))
    out, lse = fa4.attention(q, k, v, return_lse=True)
    assert np.all(out == 0) and np.all(np.isneginf(lse))


# ---- bfloat16 / float8 through ml_dtypes ----

@needs_ml_dtypes
def test_bf16_strided_view_and_out(rng):
    qh = rand(rng, (1, 2, 5, 16), BF16)
    q = qh.transpose(0, 2, 1, 3)
    k = rand(rng, (1, 5, 2, 16), BF16)
    v = rand(rng, (1, 5, 2, 16), BF16)
    out = np.empty((1, 5, 2, 16), BF16)
    res = fa4.attention(q, k, v, out=out, causal=True)
    assert res is out and out.dtype == BF16
    tol_check(out, attention_ref(q, k, v, causal=True)[0], "bfloat16")


@needs_ml_dtypes
def test_fp8_with_descale(rng):
    B, S, Hq, Hkv, D = 2, 6, 4, 2, 32
    q = rand(rng, (B, S, Hq, D), FP8)
    k = rand(rng, (B, S, Hkv, D), FP8)
    v = rand(rng, (B, S, Hkv, D), FP8)
    qd = rng.uniform(0.5, 2.0, (B, Hkv)).astype(np.float32)
    kd = rng.uniform(0.5, 2.0, (B, Hkv)).astype(np.float32)
    vd = rng.uniform(0.5, 2.0, (B, Hkv)).astype(np.float32)
    try:
        out = fa4.attention(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=True)
    except fa4.UnsupportedError as e:
        pytest.skip(f"float8 not supported by this build's cpu backend: {e}")
    assert out.dtype == BF16 and out.shape == (B, S, Hq, D)
    g = Hq // Hkv
    qf = f64(q) * np.repeat(qd, g, axis=1)[:, None, :, None]
    kf = f64(k) * kd[:, None, :, None]
    vf = f64(v) * vd[:, None, :, None]
    ref, _ = attention_ref(qf, kf, vf, causal=True)
    o = f64(out)
    rel = np.linalg.norm(o - ref) / np.linalg.norm(ref)
    cos = np.sum(o * ref) / (np.linalg.norm(o) * np.linalg.norm(ref))
    assert rel <= 5e-2 and cos >= 0.999, (rel, cos)


# ---- a float8 KV cache under 16-bit queries (k / v float8_e4m3fn, factors per head or token) ----

def _fp8_scales(rng, shape):
    return rng.uniform(1 / 64, 1 / 8, shape).astype(np.float32)


@needs_ml_dtypes
@pytest.mark.parametrize("qdt", ["float16", "bfloat16"])
@pytest.mark.parametrize("per_token", [False, True])
def test_fp8_kv_cache_dense(rng, qdt, per_token):
    B, Sq, Sk, Hq, Hkv, D = 2, 5, 11, 4, 2, 32
    q = rand(rng, (B, Sq, Hq, D), dtype_of(qdt))
    k = (rng.standard_normal((B, Sk, Hkv, D)) * 16).astype(FP8)
    v = (rng.standard_normal((B, Sk, Hkv, D)) * 16).astype(FP8)
    shape = (B, Sk, Hkv) if per_token else (B, Hkv)
    kd, vd = _fp8_scales(rng, shape), _fp8_scales(rng, shape)
    out, lse = fa4.attention(q, k, v, k_descale=kd, v_descale=vd, causal=True, return_lse=True)
    assert out.dtype == dtype_of(qdt) and out.shape == (B, Sq, Hq, D)
    f = (lambda s: s[:, :, :, None]) if per_token else (lambda s: s[:, None, :, None])
    ref, ref_lse = attention_ref(f64(q), f64(k) * f(kd), f64(v) * f(vd), causal=True)
    tol_check(out, ref, qdt)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)
    with pytest.raises(ValueError) as ei:  # q is not float8: no q_descale
        fa4.attention(q, k, v, q_descale=kd if not per_token else _fp8_scales(rng, (B, Hkv)))
    assert ei.value.argument == "q_descale"


@needs_ml_dtypes
@pytest.mark.parametrize("per_token", [False, True])
def test_fp8_kv_cache_paged_append_quantizes(rng, per_token):
    B, Hq, Hkv, D, ps, pages, Snew = 2, 4, 2, 16, 3, 8, 2
    q = rand(rng, (B, Snew, Hq, D), np.float16)
    kc = (rng.standard_normal((pages, ps, Hkv, D)) * 16).astype(FP8)
    vc = (rng.standard_normal((pages, ps, Hkv, D)) * 16).astype(FP8)
    table = np.array([[5, 1, 7], [0, 3, 2]], np.int32)
    lens = np.array([4, 2], np.int32)
    kn = rand(rng, (B, Snew, Hkv, D), np.float16)
    vn = rand(rng, (B, Snew, Hkv, D), np.float16)
    kn[1, 0, 1, 3] = np.nan  # NaN stays NaN in the cache
    shape = (pages, ps, Hkv) if per_token else (B, Hkv)
    kd, vd = _fp8_scales(rng, shape), _fp8_scales(rng, shape)
    k0, v0 = kc.copy(), vc.copy()
    out = fa4.attention_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, page_table=table, k_descale=kd,
                                     v_descale=vd, causal=True)
    assert out.dtype == np.float16
    for b in range(B):
        for i in range(Snew):
            j = lens[b] + i
            pg, r = table[b, j // ps], j % ps
            for new, cache, sc in ((kn, kc, kd), (vn, vc, vd)):
                s = sc[pg, r] if per_token else sc[b]  # [Hkv]
                x = new[b, i].astype(np.float32) / s[:, None]
                want = np.clip(x, -448, 448).astype(FP8)  # e4m3(x / factor), saturating
                got = cache[pg, r]
                nan = np.isnan(x)
                assert np.array_equal(np.isnan(f64(got)), nan)
                assert np.array_equal(got.view(np.uint8)[~nan], want.view(np.uint8)[~nan])
    written = np.zeros(pages * ps, bool)
    for b in range(B):
        for i in range(Snew):
            j = lens[b] + i
            written[table[b, j // ps] * ps + j % ps] = True
    untouched = ~written.reshape(pages, ps)
    assert np.array_equal(kc[untouched].view(np.uint8), k0[untouched].view(np.uint8))
    assert np.array_equal(vc[untouched].view(np.uint8), v0[untouched].view(np.uint8))
    assert np.isnan(out[1]).any() and not np.isnan(out[0]).any()  # sequence 1 attends to the NaN key
