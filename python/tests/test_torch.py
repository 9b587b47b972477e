"""torch: tensors in -> tensors out (dtype, device), torch.library ops with fake implementations,
torch.compile(fullgraph=True) without graph breaks, and (on a GPU machine) the CUDA path inside
CUDA graph capture. Skipped when torch is not installed (CI installs torch from PyPI: python/ci.sh;
the CUDA tests run on a GPU machine, see docs/python.md)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (run on a machine with torch)")

import fa4  # noqa: E402
from fa4 import _torch as fa4_torch  # noqa: E402
from reference import (append_ref, attention_ref, combine_ref, kvcache_ref, tol_check,  # noqa: E402
                       varlen_ref)

HAS_OPS = hasattr(torch.library, "register_fake")
needs_ops = pytest.mark.skipif(not HAS_OPS, reason="torch < 2.4: no torch.library.register_fake")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
TDT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def t(rng, shape, dtype=torch.float32, device="cpu"):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype=dtype, device=device)


def n(x):
    return x.detach().float().cpu().numpy()


def cu(lens, device="cpu"):
    return torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=device)


@pytest.fixture(params=[True, False], ids=["fastpath", "ops"])
def path(request, monkeypatch):
    """Runs a test both through the eager fast path and through torch.ops.fa4.*."""
    if not request.param and not HAS_OPS:
        pytest.skip("torch < 2.4: no torch.library.register_fake")
    monkeypatch.setattr(fa4_torch, "EAGER_FAST_PATH", request.param)
    return request.param


# ---- eager, CPU ----

@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_dense_dtype_preserved(rng, dtype, path):
    q, k, v = t(rng, (2, 5, 4, 16), TDT[dtype]), t(rng, (2, 7, 2, 16), TDT[dtype]), t(rng, (2, 7, 2, 8), TDT[dtype])
    out, lse = fa4.attention(q, k, v, causal=True, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == TDT[dtype] and out.device == q.device
    assert out.shape == (2, 5, 4, 8) and lse.shape == (2, 4, 5) and lse.dtype == torch.float32
    ref, ref_lse = attention_ref(n(q), n(k), n(v), causal=True)
    tol_check(n(out), ref, dtype)
    np.testing.assert_allclose(n(lse), ref_lse, atol=1e-3, rtol=0)


def test_transposed_bhsd_views(rng, path):
    qh, kh, vh = t(rng, (2, 4, 6, 16)), t(rng, (2, 2, 8, 16)), t(rng, (2, 2, 8, 16))
    q, k, v = (x.transpose(1, 2) for x in (qh, kh, vh))
    assert not q.is_contiguous()
    out = fa4.attention(q, k, v, window=(3, 0), softcap=4.0)
    tol_check(n(out), attention_ref(n(q), n(k), n(v), window=(3, 0), softcap=4.0)[0], "float32")


def test_out_argument(rng, path):
    q, k, v = (t(rng, (1, 4, 2, 8)) for _ in range(3))
    out = torch.full((1, 2, 4, 8), float("nan")).transpose(1, 2)
    res = fa4.attention(q, k, v, out=out)
    assert res is out
    tol_check(n(out), attention_ref(n(q), n(k), n(v))[0], "float32")


def test_sinks_and_requires_grad_inputs_under_no_grad(rng, path):
    # inputs that require grad run under no_grad (with grad mode on they are an error: test_torch_dropin.py)
    q, k, v = (t(rng, (1, 3, 2, 8)).requires_grad_() for _ in range(3))
    sinks = t(rng, (2,))
    with torch.no_grad():
        out = fa4.attention(q, k, v, sinks=sinks)
    tol_check(n(out), attention_ref(n(q), n(k), n(v), sinks=n(sinks))[0], "float32")


def test_varlen(rng, path):
    lq, lk = [3, 1, 4], [2, 5, 4]
    q, k, v = t(rng, (8, 4, 16)), t(rng, (11, 2, 16)), t(rng, (11, 2, 16))
    out, lse = fa4.attention_varlen(q, k, v, cu(lq), cu(lk), max_seqlen_q=4, max_seqlen_k=5, causal=True,
                                    return_lse=True)
    ref, ref_lse = varlen_ref(n(q), n(k), n(v), n(cu(lq)).astype(int), n(cu(lk)).astype(int), causal=True)
    tol_check(n(out), ref, "float32")
    np.testing.assert_allclose(n(lse), ref_lse, atol=1e-3, rtol=0)


def test_kvcache_append_mutates_torch_cache(rng, path):
    B, D = 2, 8
    q = t(rng, (B, 2, 4, D))
    kc, vc = t(rng, (B, 7, 2, D)), t(rng, (B, 7, 2, D))
    kn, vn = t(rng, (B, 2, 2, D)), t(rng, (B, 2, 2, D))
    lens = torch.tensor([1, 4], dtype=torch.int32)
    kc_want = append_ref(n(kc), n(kn), n(lens).astype(int))
    vc_want = append_ref(n(vc), n(vn), n(lens).astype(int))
    out = fa4.attention_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, causal=True)
    np.testing.assert_array_equal(n(kc), kc_want)
    np.testing.assert_array_equal(n(vc), vc_want)
    tol_check(n(out), kvcache_ref(n(q), kc_want, vc_want, cache_seqlens=n(lens).astype(int) + 2, causal=True)[0],
              "float32")


def test_kvcache_paged_int_seqlens(rng, path):
    q = t(rng, (2, 1, 2, 8))
    kc, vc = t(rng, (5, 2, 1, 8)), t(rng, (5, 2, 1, 8))
    pt = torch.tensor([[4, 0], [1, 3]], dtype=torch.int32)
    out = fa4.attention_with_kvcache(q, kc, vc, cache_seqlens=3, page_table=pt)
    tol_check(n(out), kvcache_ref(n(q), n(kc), n(vc), cache_seqlens=[3, 3], page_table=n(pt).astype(int))[0],
              "float32")


def test_combine(rng, path):
    op, lp = t(rng, (3, 2, 4, 2, 8)), t(rng, (3, 2, 2, 4))
    out, lse = fa4.combine(op, lp, out_dtype=torch.bfloat16, return_lse=True)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    ref, ref_lse = combine_ref(n(op), n(lp))
    tol_check(n(out), ref, "bfloat16")
    np.testing.assert_allclose(n(lse), ref_lse, atol=1e-3, rtol=0)


def test_flash_attn_compat(rng, path):
    q, k, v = (t(rng, (1, 5, 2, 16), torch.bfloat16) for _ in range(3))
    out = fa4.flash_attn_func(q, k, v, 0.0, None, True)
    assert out.dtype == torch.bfloat16
    tol_check(n(out), attention_ref(n(q), n(k), n(v), causal=True)[0], "bfloat16")


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch has no float8_e4m3fn")
def test_fp8(rng, path):
    q, k, v = (t(rng, (1, 4, 2, 16)).to(torch.float8_e4m3fn) for _ in range(3))
    try:
        out = fa4.attention(q, k, v)
    except fa4.UnsupportedError as e:
        pytest.skip(f"float8 unsupported by this build: {e}")
    assert out.dtype == torch.bfloat16
    ref, _ = attention_ref(n(q), n(k), n(v))
    o = n(out)
    assert np.linalg.norm(o - ref) / np.linalg.norm(ref) <= 5e-2


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="torch has no float8_e4m3fn")
@pytest.mark.parametrize("per_token", [False, True])
def test_fp8_kv_cache_bf16_queries(rng, path, per_token):
    """A float8 KV cache under bfloat16 queries: out in q's dtype; flash-attn 3's interface keeps
    k / v_descale for it (and drops q_descale: q is not float8)."""
    B, Sq, Sk, Hq, Hkv, D = 2, 3, 9, 4, 2, 16
    q = t(rng, (B, Sq, Hq, D), torch.bfloat16)
    k, v = ((t(rng, (B, Sk, Hkv, D)) * 16).to(torch.float8_e4m3fn) for _ in range(2))
    shape = (B, Sk, Hkv) if per_token else (B, Hkv)
    kd, vd = (torch.from_numpy(rng.uniform(1 / 64, 1 / 8, shape).astype(np.float32)) for _ in range(2))
    out = fa4.attention(q, k, v, k_descale=kd, v_descale=vd, causal=True)
    assert out.dtype == torch.bfloat16 and out.shape == (B, Sq, Hq, D)
    f = (lambda s: n(s)[:, :, :, None]) if per_token else (lambda s: n(s)[:, None, :, None])
    ref, _ = attention_ref(n(q), n(k) * f(kd), n(v) * f(vd), causal=True)
    tol_check(n(out), ref, "bfloat16")
    if not per_token:
        from fa4.flash_attn_interface import flash_attn_func

        qd = torch.ones(B, Hkv)
        out2 = flash_attn_func(q, k, v, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
        tol_check(n(out2), ref, "bfloat16")


def test_errors_name_the_argument(rng, path):
    q, k, v = (t(rng, (1, 4, 2, 8)) for _ in range(3))
    with pytest.raises(TypeError) as ei:
        fa4.attention(q, k.double(), v)
    assert isinstance(ei.value, fa4.DTypeError) and ei.value.argument == "k"
    with pytest.raises(ValueError) as ei:
        fa4.attention(q, k[..., :4], v)
    assert ei.value.argument == "k"
    with pytest.raises(TypeError) as ei:
        fa4.attention_varlen(q[0], k[0], v[0], cu([2, 2]).long(), cu([2, 2]))
    assert ei.value.argument == "cu_seqlens_q"


# ---- torch.library ops, fake tensors, torch.compile ----

@needs_ops
def test_opcheck(rng):
    q, k, v = t(rng, (1, 4, 2, 8)), t(rng, (1, 5, 1, 8)), t(rng, (1, 5, 1, 8))
    args = (q, k, v, None, None, None, None, None, None, None, None, None, None, 0.0, 0.0, True, -1, -1, 0, 0, 0, 0,
            0, 0, True)
    torch.library.opcheck(torch.ops.fa4.fwd.default, args)
    op, lp = t(rng, (2, 1, 3, 2, 8)), t(rng, (2, 1, 2, 3))
    torch.library.opcheck(torch.ops.fa4.combine.default, (op, lp, torch.float32, 0, 0, True))
    kc, vc, kn, vn = t(rng, (1, 6, 1, 8)), t(rng, (1, 6, 1, 8)), t(rng, (1, 2, 1, 8)), t(rng, (1, 2, 1, 8))
    lens = torch.tensor([3], dtype=torch.int32)
    args = (q, kc, vc, kn, vn, None, None, None, None, None, None, None, lens, None, None, 0.0, 0.0, True, -1, -1, 0,
            0, 0, 0, 0, 0, False)
    torch.library.opcheck(torch.ops.fa4.fwd_append.default, args)


@needs_ops
def test_fake_tensor_shapes(rng):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 5, 4, 16, dtype=torch.bfloat16)
        k = torch.empty(2, 7, 2, 16, dtype=torch.bfloat16)
        v = torch.empty(2, 7, 2, 8, dtype=torch.bfloat16)
        out, lse = fa4.attention(q, k, v, causal=True, return_lse=True)
        assert out.shape == (2, 5, 4, 8) and out.dtype == torch.bfloat16
        assert lse.shape == (2, 4, 5) and lse.dtype == torch.float32
        qv = torch.empty(9, 4, 16)
        out = fa4.attention_varlen(qv, torch.empty(11, 2, 16), torch.empty(11, 2, 8),
                                   torch.empty(3, dtype=torch.int32), torch.empty(3, dtype=torch.int32))
        assert out.shape == (9, 4, 8)
        out, lse = fa4.combine(torch.empty(3, 2, 4, 2, 8), torch.empty(3, 2, 2, 4), return_lse=True)
        assert out.shape == (2, 4, 2, 8) and lse.shape == (2, 2, 4)


@needs_ops
def test_meta_tensors():
    q = torch.empty(2, 5, 4, 16, device="meta")
    out = fa4.attention(q, torch.empty(2, 3, 4, 16, device="meta"), torch.empty(2, 3, 4, 32, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 5, 4, 32)


def _no_graph_breaks(fn, *args):
    torch._dynamo.reset()
    explain = torch._dynamo.explain(fn)(*args)
    assert explain.graph_break_count == 0, explain.break_reasons
    assert explain.graph_count == 1


@needs_ops
def test_compile_fullgraph_dense(rng):
    q, k, v = t(rng, (2, 5, 4, 16)), t(rng, (2, 7, 2, 16)), t(rng, (2, 7, 2, 16))

    def f(q, k, v):
        o, lse = fa4.attention(q * 2.0, k, v, causal=True, window=(4, 0), return_lse=True)
        return o.sum(-1) + lse.transpose(1, 2), o

    _no_graph_breaks(f, q, k, v)
    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    (a, o) = cf(q, k, v)
    (b, o2) = f(q, k, v)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(o, o2)


@needs_ops
def test_compile_fullgraph_inductor_dynamic(rng):
    def f(q, k, v):
        return fa4.attention(q, k, v, causal=True) + 1.0

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, dynamic=True)
    for S in (5, 9):
        q, k, v = t(rng, (1, S, 2, 16)), t(rng, (1, S, 2, 16)), t(rng, (1, S, 2, 16))
        torch.testing.assert_close(cf(q, k, v), f(q, k, v))


@needs_ops
def test_compile_fullgraph_checks_scalars(rng):
    # The scalar checks (fa4/_args.py) run inside the traced code: dynamo must trace them (torch
    # >= 2.11 did not trace math.isfinite there), and bad values stay refused, naming the argument
    # (eagerly as fa4's TypeError / ValueError; under fullgraph dynamo wraps what the check raised).
    q = t(rng, (1, 5, 2, 16))

    def make(**kw):
        def f(q, k, v):
            return fa4.attention(q, k, v, causal=True, **kw) + 1.0
        return f

    f = make(scale=0.5, softcap=2.0)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")(q, q, q), f(q, q, q))
    for kw, exc, name in ((dict(scale=float("nan")), fa4.InvalidArgumentError, "scale"),
                          (dict(scale=float("inf")), fa4.InvalidArgumentError, "scale"),
                          (dict(softcap=-float("inf")), fa4.InvalidArgumentError, "softcap"),
                          (dict(scale=2.0 ** -150), fa4.InvalidArgumentError, "scale"),
                          (dict(scale=True), fa4.DTypeError, "scale"),
                          (dict(softcap=False), fa4.DTypeError, "softcap")):
        f = make(**kw)
        with pytest.raises(exc, match=name):
            f(q, q, q)
        for dynamic in (False, True):
            torch._dynamo.reset()
            with pytest.raises(Exception, match=name):
                torch.compile(f, fullgraph=True, dynamic=dynamic, backend="aot_eager")(q, q, q)


@needs_ops
def test_compile_fullgraph_varlen_kvcache_combine(rng):
    lq = [3, 2]
    q, k, v = t(rng, (5, 2, 8)), t(rng, (5, 2, 8)), t(rng, (5, 2, 8))
    cq = cu(lq)

    def f_var(q, k, v, cq):
        return fa4.attention_varlen(q, k, v, cq, cq, causal=True)

    _no_graph_breaks(f_var, q, k, v, cq)
    torch.testing.assert_close(torch.compile(f_var, fullgraph=True, backend="aot_eager")(q, k, v, cq),
                               f_var(q, k, v, cq))

    def f_comb(op, lp):
        return fa4.combine(op, lp, return_lse=True)

    op, lp = t(rng, (2, 1, 3, 2, 8)), t(rng, (2, 1, 2, 3))
    _no_graph_breaks(f_comb, op, lp)
    torch.testing.assert_close(torch.compile(f_comb, fullgraph=True, backend="aot_eager")(op, lp), f_comb(op, lp))


@needs_ops
def test_compile_fullgraph_kvcache_append(rng):
    B, D = 2, 8
    q = t(rng, (B, 1, 2, D))
    kn, vn = t(rng, (B, 1, 2, D)), t(rng, (B, 1, 2, D))
    lens = torch.tensor([2, 3], dtype=torch.int32)
    kc0, vc0 = t(rng, (B, 6, 2, D)), t(rng, (B, 6, 2, D))

    def f(q, kc, vc, kn, vn, lens):
        return fa4.attention_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, causal=True)

    _no_graph_breaks(f, q, kc0.clone(), vc0.clone(), kn, vn, lens)
    kc_e, vc_e = kc0.clone(), vc0.clone()
    want = f(q, kc_e, vc_e, kn, vn, lens)
    torch._dynamo.reset()
    kc_c, vc_c = kc0.clone(), vc0.clone()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, kc_c, vc_c, kn, vn, lens)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(kc_c, kc_e)  # the mutation of the cache survives functionalization
    torch.testing.assert_close(vc_c, vc_e)


# ---- CUDA (GPU machine) ----

def _cuda_ready():
    return fa4.built_with_cuda and fa4.backend_available("cuda")


@cuda
def test_cuda_unavailable_is_a_clear_error(rng):
    if _cuda_ready():
        pytest.skip("this build has the cuda backend")
    q = t(rng, (1, 4, 2, 64), torch.bfloat16, "cuda")
    with pytest.raises(fa4.BackendUnavailableError) as ei:
        fa4.attention(q, q, q)
    assert ei.value.argument == "backend" and "cuda" in str(ei.value)


@cuda
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cuda_dense(rng, dtype):
    if not _cuda_ready():
        pytest.skip("fa4 built without the cuda backend")
    q, k, v = (t(rng, (2, 33, 4, 64), TDT[dtype], "cuda") for _ in range(3))
    out, lse = fa4.attention(q, k, v, causal=True, return_lse=True)
    assert out.device == q.device and out.dtype == q.dtype
    ref, ref_lse = attention_ref(n(q), n(k), n(v), causal=True)
    tol_check(n(out), ref, dtype)
    np.testing.assert_allclose(n(lse), ref_lse, atol=1e-3, rtol=0)


@cuda
def test_cuda_side_stream_and_graph_capture(rng):
    if not _cuda_ready():
        pytest.skip("fa4 built without the cuda backend")
    q, k, v = (t(rng, (1, 64, 2, 64), torch.bfloat16, "cuda") for _ in range(3))
    ref = fa4.attention(q, k, v, causal=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out_s = fa4.attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(out_s, ref, atol=0, rtol=0)
    # CUDA graph capture: no host synchronization, allocations from torch's graph pool
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out_g = fa4.attention(q, k, v, causal=True)
    q.copy_(t(rng, (1, 64, 2, 64), torch.bfloat16, "cuda"))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out_g, fa4.attention(q, k, v, causal=True), atol=0, rtol=0)


@cuda
@needs_ops
def test_cuda_compile_reduce_overhead(rng):
    if not _cuda_ready():
        pytest.skip("fa4 built without the cuda backend")
    q, k, v = (t(rng, (1, 32, 2, 64), torch.bfloat16, "cuda") for _ in range(3))
    lens = torch.tensor([32], dtype=torch.int32, device="cuda")

    def f(q, k, v):
        return fa4.attention_with_kvcache(q[:, -1:], k, v, cache_seqlens=lens, num_splits=2)

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        got = cf(q, k, v)
    torch.testing.assert_close(got, f(q, k, v))
