"""fa4.jax: attention as an XLA custom call (JAX FFI), eager and under jax.jit, against the NumPy
reference (and fa4's reference backend). Skipped only when jax is not installed; an fa4 built
without its FFI handlers while jax is installed fails here (fa4.jax raises ImportError)."""
import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
import jax.numpy as jnp  # noqa: E402

import fa4  # noqa: E402
import fa4.jax as fj  # noqa: E402
from reference import attention_ref, append_ref, kvcache_ref, tol_check, varlen_ref  # noqa: E402
from util import rand  # noqa: E402

CPU = jax.devices("cpu")[0]
DTYPES = {"float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}


def put(x, dtype=None):
    a = jax.device_put(x, CPU)
    return a if dtype is None else a.astype(dtype)


def f32(x):
    return np.asarray(jnp.asarray(x).astype(jnp.float32))


def maybe_jit(fn, jit, **kw):
    return jax.jit(fn, **kw) if jit else fn


def check_lse(lse, ref_lse):
    lse = np.asarray(lse)
    assert lse.dtype == np.float32
    fin = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), fin)
    np.testing.assert_allclose(lse[fin], ref_lse[fin], atol=1e-3, rtol=0)


FEATURES = [
    dict(),
    dict(causal=True),
    dict(window=(3, 1)),
    dict(softcap=5.0),
    dict(sinks=True),
    dict(gqa=True, causal=True),
    dict(scale=0.3, window=(2, -1)),
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("feat", FEATURES, ids=lambda f: "-".join(f) or "plain")
def test_dense(rng, dtype, feat, jit):
    feat = dict(feat)
    hkv = 1 if feat.pop("gqa", False) else 3
    B, Sq, Sk, Hq, D, Dv = 2, 5, 9, 3, 16, 8
    jd = DTYPES[dtype]
    q, k, v = put(rand(rng, (B, Sq, Hq, D)), jd), put(rand(rng, (B, Sk, hkv, D)), jd), put(rand(rng, (B, Sk, hkv, Dv)), jd)
    kw = dict(feat)
    if kw.pop("sinks", False):
        kw["sinks"] = put(rand(rng, (Hq,)))
    fn = maybe_jit(lambda q, k, v: fj.attention(q, k, v, return_lse=True, **kw), jit)
    out, lse = fn(q, k, v)
    assert isinstance(out, jax.Array) and out.dtype == jd and out.shape == (B, Sq, Hq, Dv)
    assert lse.shape == (B, Hq, Sq)
    ref, ref_lse = attention_ref(f32(q), f32(k), f32(v),
                                 **{n: (np.asarray(x) if n == "sinks" else x) for n, x in kw.items()})
    tol_check(f32(out), ref, dtype)
    check_lse(lse, ref_lse)
    # without lse: one result, the same values
    out2 = maybe_jit(lambda q, k, v: fj.attention(q, k, v, **kw), jit)(q, k, v)
    assert isinstance(out2, jax.Array)
    np.testing.assert_array_equal(f32(out2), f32(out))


def test_matches_reference_backend(rng):
    q, k, v = (put(rand(rng, (1, 7, 4, 32)), jnp.bfloat16) for _ in range(3))
    kw = dict(causal=True, softcap=3.0)
    got = jax.jit(lambda q, k, v: fj.attention(q, k, v, **kw))(q, k, v)
    ref = jax.jit(lambda q, k, v: fj.attention(q, k, v, backend="reference", **kw))(q, k, v)
    ref_np = fa4.attention(*(np.asarray(x) for x in (q, k, v)), backend="reference", **kw)
    np.testing.assert_array_equal(f32(ref), f32(ref_np))
    tol_check(f32(got), f32(ref), "bfloat16")


def test_chunk_and_empty_rows(rng):
    q, k, v = (put(rand(rng, (1, 6, 2, 8))) for _ in range(3))
    out, lse = fj.attention(q, k, v, chunk=4, return_lse=True)
    ref, ref_lse = attention_ref(*(np.asarray(x) for x in (q, k, v)), chunk=4)
    tol_check(np.asarray(out), ref, "float32")
    check_lse(lse, ref_lse)
    # window (0, -1) over Sk < Sq: the first rows see nothing -> 0, -inf
    k2, v2 = put(rand(rng, (1, 2, 2, 8))), put(rand(rng, (1, 2, 2, 8)))
    out, lse = jax.jit(lambda q, k, v: fj.attention(q, k, v, causal=True, return_lse=True))(q, k2, v2)
    assert np.all(np.asarray(out)[0, :4] == 0) and np.all(np.isneginf(np.asarray(lse)[0, :, :4]))


def test_lowered_is_one_custom_call(rng):
    """Under jit the call is XLA's custom call of fa4's target: no host callback, no NumPy copy."""
    q = put(rand(rng, (1, 4, 2, 8)))
    text = jax.jit(lambda q: fj.attention(q, q, q, causal=True)).lower(q).as_text()
    assert fj.TARGET in text and "custom_call" in text
    assert "callback" not in text


def test_vmap(rng):
    q, k, v = (put(rand(rng, (3, 1, 4, 2, 8))) for _ in range(3))
    out = jax.jit(jax.vmap(lambda q, k, v: fj.attention(q, k, v, causal=True)))(q, k, v)
    for i in range(3):
        tol_check(np.asarray(out[i]), attention_ref(*(np.asarray(x[i]) for x in (q, k, v)), causal=True)[0],
                  "float32")


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_varlen(rng, dtype, jit):
    lq, lk = [3, 0, 5], [4, 2, 7]
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    used = np.array([4, 1, 6], np.int32)
    jd = DTYPES[dtype]
    q, k, v = put(rand(rng, (cu_q[-1], 4, 16)), jd), put(rand(rng, (cu_k[-1], 2, 16)), jd), put(rand(rng, (cu_k[-1], 2, 16)), jd)
    sinks = put(rand(rng, (4,)))
    fn = maybe_jit(lambda q, k, v, cq, ck, su, s: fj.attention_varlen(
        q, k, v, cq, ck, seqused_k=su, sinks=s, causal=True, return_lse=True, max_seqlen_q=5, max_seqlen_k=7), jit)
    out, lse = fn(q, k, v, put(cu_q), put(cu_k), put(used), sinks)
    assert out.shape == (cu_q[-1], 4, 16) and lse.shape == (4, cu_q[-1])
    ref, ref_lse = varlen_ref(f32(q), f32(k), f32(v), cu_q, cu_k, used, causal=True, sinks=np.asarray(sinks))
    tol_check(f32(out), ref, dtype)
    check_lse(lse, ref_lse)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_kvcache_contiguous_and_batch_idx(rng, jit):
    B, Sq, Hq, Hkv, D, Smax = 2, 2, 4, 2, 16, 10
    q = put(rand(rng, (B, Sq, Hq, D)), jnp.float16)
    kc, vc = put(rand(rng, (3, Smax, Hkv, D)), jnp.float16), put(rand(rng, (3, Smax, Hkv, D)), jnp.float16)
    lens, idx = np.array([7, 3], np.int32), np.array([2, 0], np.int32)
    fn = maybe_jit(lambda q, kc, vc, l, i: fj.attention_with_kvcache(q, kc, vc, cache_seqlens=l, cache_batch_idx=i,
                                                                     causal=True, return_lse=True), jit)
    out, lse = fn(q, kc, vc, put(lens), put(idx))
    ref, ref_lse = kvcache_ref(f32(q), f32(kc), f32(vc), lens, idx, causal=True)
    tol_check(f32(out), ref, "float16")
    check_lse(lse, ref_lse)
    # an int cache_seqlens, and the default (the whole cache)
    out = fj.attention_with_kvcache(q, kc[:2], vc[:2], cache_seqlens=5)
    tol_check(f32(out), kvcache_ref(f32(q), f32(kc[:2]), f32(vc[:2]), np.array([5, 5]))[0], "float16")
    out = jax.jit(lambda q, kc, vc: fj.attention_with_kvcache(q, kc, vc))(q, kc[:2], vc[:2])
    tol_check(f32(out), kvcache_ref(f32(q), f32(kc[:2]), f32(vc[:2]))[0], "float16")


@pytest.mark.parametrize("page", [1, 4])
def test_kvcache_paged(rng, page):
    B, Hq, Hkv, D, pages = 2, 2, 1, 8, 12
    q = put(rand(rng, (B, 1, Hq, D)))
    kc, vc = put(rand(rng, (pages, page, Hkv, D))), put(rand(rng, (pages, page, Hkv, D)))
    maxp = pages // B
    pt = rng.permutation(pages).astype(np.int32).reshape(B, maxp)
    lens = np.array([maxp * page, max(maxp * page - 3, 1)], np.int32)
    out = jax.jit(lambda q, kc, vc, pt, l: fj.attention_with_kvcache(q, kc, vc, page_table=pt, cache_seqlens=l))(
        q, kc, vc, put(pt), put(lens))
    ref = kvcache_ref(*(np.asarray(x) for x in (q, kc, vc)), lens, page_table=pt)[0]
    tol_check(np.asarray(out), ref, "float32")


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_kvcache_append(rng, paged, jit):
    B, Snew, Hq, Hkv, D = 2, 2, 2, 2, 8
    if paged:
        page, pages = 4, 8
        kc, vc = rand(rng, (pages, page, Hkv, D)), rand(rng, (pages, page, Hkv, D))
        pt = rng.permutation(pages).astype(np.int32).reshape(B, pages // B)
        extra = dict(page_table=put(pt))
    else:
        kc, vc = rand(rng, (B, 9, Hkv, D)), rand(rng, (B, 9, Hkv, D))
        pt = None
        extra = {}
    lens = np.array([3, 6], np.int32)
    q, kn, vn = put(rand(rng, (B, Snew, Hq, D))), put(rand(rng, (B, Snew, Hkv, D))), put(rand(rng, (B, Snew, Hkv, D)))

    def f(q, kc, vc, kn, vn, lens):
        return fj.attention_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, causal=True, return_lse=True,
                                         **extra)

    jkc, jvc = put(kc), put(vc)
    fn = maybe_jit(f, jit, donate_argnums=(1, 2)) if jit else f
    out, lse, kc2, vc2 = fn(q, jkc, jvc, kn, vn, put(lens))
    want_k = append_ref(kc, np.asarray(kn), lens, page_table=pt)
    want_v = append_ref(vc, np.asarray(vn), lens, page_table=pt)
    np.testing.assert_array_equal(np.asarray(kc2), want_k)
    np.testing.assert_array_equal(np.asarray(vc2), want_v)
    ref, ref_lse = kvcache_ref(np.asarray(q), want_k, want_v, lens + Snew, page_table=pt, causal=True)
    tol_check(np.asarray(out), ref, "float32")
    check_lse(lse, ref_lse)
    if not jit:  # eager: the inputs are not donated, so they are unchanged (JAX arrays are immutable)
        np.testing.assert_array_equal(np.asarray(jkc), kc)


# ---- errors: fa4's exceptions naming the argument, never a crash ----


def test_bad_scalars_and_ranks_at_trace_time():
    q = put(np.ones((1, 2, 2, 8), np.float32))
    for kw, arg, cls in [(dict(causal=1), "causal", fa4.DTypeError), (dict(window=(1,)), "window", fa4.InvalidArgumentError),
                         (dict(softcap=-1.0), "softcap", fa4.InvalidArgumentError),
                         (dict(scale=0.0), "scale", fa4.InvalidArgumentError),
                         (dict(num_splits=True), "num_splits", fa4.DTypeError),
                         (dict(backend="gpu"), "backend", fa4.InvalidArgumentError)]:
        with pytest.raises(cls) as ei:
            jax.jit(lambda q: fj.attention(q, q, q, **kw))(q)
        assert ei.value.argument == arg, kw
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fj.attention(q[0], q, q)
    assert ei.value.argument == "q"
    with pytest.raises(fa4.DTypeError) as ei:
        fj.attention(q, q.astype(jnp.int32), q)
    assert ei.value.argument == "k"
    with pytest.raises(fa4.DTypeError) as ei:
        fj.attention_varlen(q[0], q[0], q[0], put(np.array([0, 2], np.float32)), put(np.array([0, 2], np.int32)))
    assert ei.value.argument == "cu_seqlens_q"
    with pytest.raises(fa4.DTypeError) as ei:
        fj.attention(q, q, q, sinks=[0.0, 0.0])
    assert ei.value.argument == "sinks"
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fj.attention_with_kvcache(q, q, q, k=q)
    assert ei.value.argument == "v"


def test_library_errors_eager_are_fa4_exceptions(rng):
    q = put(rand(rng, (1, 4, 2, 8)))
    k3 = put(rand(rng, (1, 4, 3, 8)))
    with pytest.raises(fa4.InvalidArgumentError, match="kv heads") as ei:
        fj.attention(q, k3, k3)
    assert ei.value.argument == "k"
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fj.attention(q, q, put(rand(rng, (1, 5, 2, 8))))
    assert ei.value.argument == "v"
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fj.attention(q, q, q, sinks=put(rand(rng, (3,))))  # [Hq] = [2]
    assert ei.value.argument == "sinks"
    with pytest.raises(fa4.DTypeError) as ei:  # float16 k with float32 q
        fj.attention(q, q.astype(jnp.float16), q)
    assert ei.value.argument == "k"
    t = put(rand(rng, (5, 2, 8)))
    bad_cu = put(np.array([0, 4, 3], np.int32))  # decreasing
    with pytest.raises(fa4.InvalidArgumentError) as ei:
        fj.attention_varlen(t, t, t, bad_cu, put(np.array([0, 2, 5], np.int32)))
    assert ei.value.argument == "cu_seqlens_q"
    with pytest.raises(fa4.InvalidArgumentError) as ei:  # page index out of range
        fj.attention_with_kvcache(q, put(rand(rng, (2, 4, 2, 8))), put(rand(rng, (2, 4, 2, 8))),
                                  page_table=put(np.array([[0, 7]], np.int32)))
    assert ei.value.argument == "page_table"


def test_library_errors_under_jit_name_the_argument(rng):
    q = put(rand(rng, (1, 4, 2, 8)))
    k3 = put(rand(rng, (1, 4, 3, 8)))
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"INVALID_ARGUMENT: fa4: k: .*kv heads"):
        jax.block_until_ready(jax.jit(lambda q, k: fj.attention(q, k, k))(q, k3))
    t = put(rand(rng, (5, 2, 8)))
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"fa4: cu_seqlens_k: "):
        jax.block_until_ready(jax.jit(lambda t, cq, ck: fj.attention_varlen(t, t, t, cq, ck))(
            t, put(np.array([0, 2, 5], np.int32)), put(np.array([0, 2, 9], np.int32))))
    # the process survives and the next call works
    out = jax.jit(lambda q: fj.attention(q, q, q))(q)
    tol_check(np.asarray(out), attention_ref(*(np.asarray(q),) * 3)[0], "float32")


def test_jit_traced_scalars_are_rejected(rng):
    q = put(rand(rng, (1, 2, 2, 8)))
    with pytest.raises(fa4.DTypeError) as ei:
        jax.jit(lambda q, c: fj.attention(q, q, q, causal=c))(q, True)
    assert ei.value.argument == "causal"
    with pytest.raises(fa4.DTypeError) as ei:
        jax.jit(lambda q, s: fj.attention(q, q, q, scale=s))(q, 0.5)
    assert ei.value.argument == "scale"


def test_stub_matches_runtime():
    """fa4/jax.pyi has every public function with the runtime's parameters (test_typing's rule)."""
    from test_typing import _runtime_params, _stub_functions, _stub_params

    funcs, _ = _stub_functions("jax.pyi")
    for name in ("attention", "attention_varlen", "attention_with_kvcache"):
        runtime = _runtime_params(getattr(fj, name))
        for d in funcs[name]:
            assert [p[:2] for p in _stub_params(d)] == [p[:2] for p in runtime], name
        assert runtime in [_stub_params(d) for d in funcs[name]], name


def test_jit_over_closed_over_constants(rng):
    """A jitted function whose fa4 inputs are constants (not arguments) still traces: the call's
    results are tracers there, never waited for."""
    q = put(rand(rng, (1, 3, 2, 8)))
    out = jax.jit(lambda: fj.attention(q, q, q, causal=True))()
    tol_check(np.asarray(out), attention_ref(*(np.asarray(q),) * 3, causal=True)[0], "float32")


def test_unavailable_backend_is_an_fa4_error(rng):
    if fa4.backend_available("cuda"):
        pytest.skip("the cuda backend is available here")
    q = put(rand(rng, (1, 2, 2, 8)))
    with pytest.raises(fa4.Fa4Error):
        fj.attention(q, q, q, backend="cuda")


def test_float8_inputs_give_bfloat16(rng):
    x = [rand(rng, (1, 5, 2, 16)) for _ in range(3)]
    q, k, v = (put(a, jnp.float8_e4m3fn) for a in x)
    out = jax.jit(lambda q, k, v: fj.attention(q, k, v, causal=True))(q, k, v)
    assert out.dtype == jnp.bfloat16
    ref = attention_ref(f32(q), f32(k), f32(v), causal=True)[0]
    o = f32(out)
    assert np.linalg.norm(o - ref) / np.linalg.norm(ref) <= 5e-2


def test_attribute_access_and_lazy_import():
    """fa4.jax is reachable as an attribute of fa4, and `import fa4` alone does not import jax."""
    assert fa4.jax is fj
    from util import isolated

    r = isolated("import sys, fa4; print('jax' in sys.modules); fa4.jax.attention; print('jax' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]


# --- on the GPU: the "CUDA" FFI target (XLA's device buffers and stream), when jax sees a GPU and
# fa4 was built with the cuda backend. Compared with the fp64 reference of the same inputs.
def _gpu():
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:  # no GPU platform in this jax
        return None
    return gpus[0] if gpus and fa4.backend_available("cuda") else None


GPU = _gpu()
needs_gpu = pytest.mark.skipif(GPU is None, reason="no JAX GPU device, or fa4 built without the cuda backend")


def gput(x, dtype=None):
    a = jax.device_put(x, GPU)
    return a if dtype is None else a.astype(dtype)


@needs_gpu
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("feat", [dict(), dict(causal=True), dict(window=(32, 0), softcap=20.0),
                                  dict(gqa=True, causal=True)], ids=lambda f: "-".join(f) or "plain")
def test_gpu_dense(rng, dtype, feat, jit):
    feat = dict(feat)
    hkv = 2 if feat.pop("gqa", False) else 4
    B, Sq, Sk, Hq, D = 2, 130, 257, 4, 128
    jd = DTYPES[dtype]
    q = gput(rand(rng, (B, Sq, Hq, D)), jd)
    k, v = gput(rand(rng, (B, Sk, hkv, D)), jd), gput(rand(rng, (B, Sk, hkv, D)), jd)
    out, lse = maybe_jit(lambda q, k, v: fj.attention(q, k, v, return_lse=True, backend="cuda", **feat), jit)(q, k, v)
    assert out.dtype == jd and out.shape == (B, Sq, Hq, D) and GPU in out.devices()
    ref, ref_lse = attention_ref(f32(q), f32(k), f32(v), **feat)
    tol_check(f32(out), ref, dtype)
    check_lse(lse, ref_lse)


@needs_gpu
def test_gpu_auto_backend_and_lowering(rng):
    """backend='auto' on device buffers runs the cuda backend; under jit it stays one custom call."""
    q = gput(rand(rng, (1, 64, 2, 64)), jnp.bfloat16)
    fn = jax.jit(lambda q: fj.attention(q, q, q, causal=True))
    assert "fa4_fwd" in fn.lower(q).as_text()
    out = fn(q)
    assert GPU in out.devices()
    tol_check(f32(out), attention_ref(*(f32(q),) * 3, causal=True)[0], "bfloat16")


@needs_gpu
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_gpu_varlen_and_paged_append(rng, jit):
    lens_q, lens_k = [3, 70], [5, 90]
    cq, ck = np.cumsum([0] + lens_q).astype(np.int32), np.cumsum([0] + lens_k).astype(np.int32)
    q = gput(rand(rng, (int(cq[-1]), 4, 64)), jnp.bfloat16)
    k, v = (gput(rand(rng, (int(ck[-1]), 2, 64)), jnp.bfloat16) for _ in range(2))
    out = maybe_jit(lambda q, k, v, a, b: fj.attention_varlen(q, k, v, a, b, max_seqlen_q=70, max_seqlen_k=90,
                                                             causal=True), jit)(q, k, v, gput(cq), gput(ck))
    tol_check(f32(out), varlen_ref(f32(q), f32(k), f32(v), cq, ck, causal=True)[0], "bfloat16")
    # paged cache (page 16) with two new tokens appended per sequence
    B, P, page, H, D = 2, 6, 16, 2, 64
    kc, vc, qn, kn, vn = (f32(gput(rand(rng, s), jnp.bfloat16)) for s in [(P, page, H, D)] * 2 + [(B, 2, H, D)] * 3)
    pt = np.array([[4, 0, 2], [1, 5, 3]], np.int32)
    lens = np.array([7, 30], np.int32)
    fn = maybe_jit(lambda q, kc, vc, kn, vn, l, t: fj.attention_with_kvcache(
        q, kc, vc, k=kn, v=vn, cache_seqlens=l, page_table=t, causal=True), jit)
    out, kc2, vc2 = fn(*(gput(x, jnp.bfloat16) for x in (qn, kc, vc, kn, vn)), gput(lens), gput(pt))
    assert GPU in out.devices() and GPU in kc2.devices()
    want_k, want_v = append_ref(kc, kn, lens, page_table=pt), append_ref(vc, vn, lens, page_table=pt)
    np.testing.assert_array_equal(f32(kc2), want_k)
    np.testing.assert_array_equal(f32(vc2), want_v)
    ref = kvcache_ref(qn, want_k, want_v, lens + 2, page_table=pt, causal=True)[0]
    tol_check(f32(out), ref, "bfloat16")
