"""torch: no silent loss of gradients, the drop-in layers on torch tensors (vLLM's flash-attn
backend call, unchanged), and lazy torch registration. Skipped without torch (the lead runs
these on the GPU machine, which has torch)."""
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (run on a machine with torch)")

import fa4  # noqa: E402
from fa4 import flash_attn_interface as fi  # noqa: E402
from fa4.flash_attn_compat import flash_attn_func, flash_attn_varlen_func  # noqa: E402
from reference import attention_ref, kvcache_ref, tol_check, varlen_ref  # noqa: E402

HAS_OPS = hasattr(torch.library, "register_fake")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and fa4.backend_available("cuda") else [])


def t(rng, shape, dtype=torch.float32, device="cpu"):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype=dtype, device=device)


def n(x):
    return x.detach().float().cpu().numpy()


# ---- (6) no silent loss of gradients ----

CALLS = {
    "attention": lambda q, k, v: fa4.attention(q, k, v, causal=True),
    "varlen": lambda q, k, v: fa4.attention_varlen(q[0], k[0], v[0], torch.tensor([0, q.shape[1]], dtype=torch.int32),
                                                   torch.tensor([0, k.shape[1]], dtype=torch.int32)),
    "kvcache": lambda q, k, v: fa4.attention_with_kvcache(q, k, v, cache_seqlens=k.shape[1]),
    "flash_attn_2": lambda q, k, v: flash_attn_func(q, k, v, causal=True),
    "flash_attn_3": lambda q, k, v: fi.flash_attn_func(q, k, v, causal=True),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("which", [0, 1, 2])
def test_requires_grad_under_grad_mode_is_an_error(rng, call, which):
    x = [t(rng, (1, 4, 2, 8)) for _ in range(3)]
    x[which].requires_grad_()
    assert torch.is_grad_enabled()
    with pytest.raises(fa4.UnsupportedError) as ei:
        CALLS[call](*x)
    names = {"kvcache": ("q", "k_cache", "v_cache")}.get(call, ("q", "k", "v"))
    assert ei.value.argument == names[which]
    assert "forward only" in str(ei.value) and "torch.no_grad()" in str(ei.value)


def test_requires_grad_sinks_and_combine(rng):
    q = t(rng, (1, 3, 2, 8))
    sinks = t(rng, (2,)).requires_grad_()
    with pytest.raises(fa4.UnsupportedError) as ei:
        fa4.attention(q, q, q, sinks=sinks)
    assert ei.value.argument == "sinks"
    op, lp = t(rng, (2, 1, 3, 2, 8)).requires_grad_(), t(rng, (2, 1, 2, 3))
    with pytest.raises(fa4.UnsupportedError) as ei:
        fa4.combine(op, lp)
    assert ei.value.argument == "out_partials"


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "detached"])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_runs_without_grad(rng, mode, call):
    q, k, v = (t(rng, (1, 4, 2, 8)) for _ in range(3))
    ref = CALLS[call](q, k, v)  # nothing requires grad: runs with grad mode on
    q.requires_grad_()
    if mode == "no_grad":
        with torch.no_grad():
            out = CALLS[call](q, k, v)
    elif mode == "inference_mode":
        with torch.inference_mode():
            out = CALLS[call](q, k, v)
    else:
        out = CALLS[call](q.detach(), k, v)
    assert out.grad_fn is None
    torch.testing.assert_close(out, ref)


# ---- the drop-in layers on torch tensors ----

@pytest.mark.parametrize("device", DEVICES)
def test_flash_attn_3_order_and_window_rule_torch(rng, device):
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v = (t(rng, (2, 6, 4, 64), dt, device) for _ in range(3))
    out = fi.flash_attn_func(q, k, v, None, True, window_size=(3, 5))
    tol_check(n(out), attention_ref(n(q), n(k), n(v), window=(3, 0))[0], str(dt).split(".")[1])
    out, lse = fi.flash_attn_func(q, k, v, 0.2, False, return_attn_probs=True)
    assert lse.shape == (2, 4, 6) and lse.dtype == torch.float32


def _vllm_inputs(rng, device, dtype, num_seqs=3, q_lens=(5, 1, 3), seq_lens=(9, 17, 3), Hq=8, Hkv=2, D=64,
                 block_size=16, num_blocks=12, padded=16):
    """What vLLM's FlashAttentionImpl.forward has at its flash_attn_varlen_func call."""
    kv_cache = t(rng, (2, num_blocks, block_size, Hkv, D), dtype, device)  # get_kv_cache_shape
    key_cache, value_cache = kv_cache.unbind(0)
    query = t(rng, (padded, Hq, D), dtype, device)
    output = torch.full((padded, Hq, D), float("nan"), dtype=dtype, device=device)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    perm = rng.permutation(num_blocks)
    max_blocks = -(-max(seq_lens) // block_size)
    block_table = torch.tensor(perm[:num_seqs * max_blocks].reshape(num_seqs, max_blocks), dtype=torch.int32,
                               device=device)
    return dict(query=query, key_cache=key_cache, value_cache=value_cache, output=output,
                query_start_loc=torch.tensor(cu, dtype=torch.int32, device=device),
                seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device), block_table=block_table,
                num_actual_tokens=int(cu[-1]), max_query_len=max(q_lens), max_seq_len=max(seq_lens), Hkv=Hkv)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sinks", [False, True])
@pytest.mark.parametrize("sliding_window", [None, 4])
def test_vllm_flash_attn_backend_call(rng, device, sinks, sliding_window):
    """vLLM v1's FlashAttentionImpl.forward (vllm/v1/attention/backends/flash_attn.py), decoder
    path, with the arguments it passes -- keywords, paged cache, seqused_k, out=, no
    cu_seqlens_k, num_splits, descales expanded from per-layer scales (ignored for bf16) --
    under torch.inference_mode() as vLLM runs."""
    dtype = torch.bfloat16
    a = _vllm_inputs(rng, device, dtype)
    num_actual_tokens, Hkv = a["num_actual_tokens"], a["Hkv"]
    q_scale = k_scale = v_scale = torch.tensor([1.0], dtype=torch.float32, device=device)
    descale_shape = (a["query_start_loc"].shape[0] - 1, Hkv)
    sink_t = (torch.nn.Parameter(t(rng, (8,), torch.bfloat16, device), requires_grad=False) if sinks else None)
    window = (-1, -1) if sliding_window is None else (sliding_window - 1, 0)
    with torch.inference_mode():
        res = flash_attn_varlen_func(
            q=a["query"][:num_actual_tokens],
            k=a["key_cache"],
            v=a["value_cache"],
            out=a["output"][:num_actual_tokens],
            cu_seqlens_q=a["query_start_loc"],
            max_seqlen_q=a["max_query_len"],
            seqused_k=a["seq_lens"],
            max_seqlen_k=a["max_seq_len"],
            softmax_scale=0.125,
            causal=True,
            alibi_slopes=None,
            window_size=window,
            block_table=a["block_table"],
            softcap=0,
            scheduler_metadata=None,
            fa_version=3,
            q_descale=q_scale.expand(descale_shape),
            k_descale=k_scale.expand(descale_shape),
            v_descale=v_scale.expand(descale_shape),
            num_splits=0,
            s_aux=sink_t,
        )
    out = a["output"]
    assert res.data_ptr() == out.data_ptr()
    assert torch.isnan(out[num_actual_tokens:].float()).all()  # padding rows untouched
    cu = a["query_start_loc"].cpu().numpy()
    for b in range(len(cu) - 1):
        qb = n(a["query"][cu[b]:cu[b + 1]])[None]
        ref = kvcache_ref(qb, n(a["key_cache"]), n(a["value_cache"]), cache_seqlens=[int(a["seq_lens"][b])],
                          page_table=a["block_table"][b:b + 1].cpu().numpy(), scale=0.125, causal=True, window=window,
                          sinks=None if sink_t is None else n(sink_t))[0]
        tol_check(n(out[cu[b]:cu[b + 1]]), ref[0], "bfloat16")


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_encoder_and_cascade_calls(rng, device):
    """vLLM's encoder-attention call (cu_seqlens_k = cu_seqlens_q, causal=False) and the cascade
    prefix call (return_softmax_lse=True with a paged prefix), then fa4.combine of the two."""
    dtype = torch.bfloat16
    lens = [4, 7]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=device)
    T = int(cu[-1])
    q, k, v = (t(rng, (T, 4, 64), dtype, device) for _ in range(3))
    out = torch.empty_like(q)
    d = torch.ones(1, dtype=torch.float32, device=device).expand((2, 4))
    with torch.inference_mode():
        flash_attn_varlen_func(q=q, k=k, v=v, out=out, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=7,
                               max_seqlen_k=7, softmax_scale=0.125, causal=False, alibi_slopes=None,
                               window_size=(-1, -1), softcap=0, fa_version=3, q_descale=d, k_descale=d, v_descale=d)
    cu_n = cu.cpu().numpy()
    tol_check(n(out), varlen_ref(n(q), n(k), n(v), cu_n, cu_n, scale=0.125)[0], "bfloat16")
    with torch.inference_mode():
        o, lse = flash_attn_varlen_func(q=q, k=k, v=v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=7,
                                        max_seqlen_k=7, causal=True, return_softmax_lse=True)
    assert lse.shape == (4, T) and lse.dtype == torch.float32
    _, ref_lse = varlen_ref(n(q), n(k), n(v), cu_n, cu_n, causal=True)
    np.testing.assert_allclose(n(lse), ref_lse, atol=2e-2, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_flash_attn_combine_torch_layout(rng, device):
    S, B, Sq, H, D = 2, 1, 3, 2, 64
    op, lp = t(rng, (S, B, Sq, H, D), device=device), t(rng, (S, B, Sq, H), device=device)
    out, lse = fi.flash_attn_combine(op, lp, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16 and out.shape == (B, Sq, H, D) and lse.shape == (B, Sq, H)
    w = torch.softmax(lp, dim=0)
    torch.testing.assert_close(out.float(), (w[..., None] * op).sum(0), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, torch.logsumexp(lp, dim=0), atol=1e-5, rtol=1e-5)


# ---- lazy registration: `import fa4` does not import torch ----

def _run(code, **env):
    import os

    e = dict(os.environ)
    e.pop("FA4_IMPORT_TORCH", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, cwd="/")


def test_import_fa4_does_not_import_torch():
    r = _run("import fa4, sys; assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    r = _run("import fa4, sys; assert 'torch' in sys.modules; print('ok')", FA4_IMPORT_TORCH="1")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_torch_imported_first_registers_at_import():
    code = ("import torch, fa4; from fa4 import _api; assert _api._torch_impl is not None; "
            + ("assert hasattr(torch.ops.fa4, 'fwd'); " if HAS_OPS else "") + "print('ok')")
    r = _run(code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_torch_imported_after_fa4_registers_on_first_tensor():
    code = ("import fa4, sys; from fa4 import _api; assert _api._torch_impl is None; import torch; "
            "q = torch.randn(1, 3, 2, 8); o = fa4.attention(q, q, q, causal=True); "
            "assert isinstance(o, torch.Tensor) and o.shape == (1, 3, 2, 8); assert _api._torch_impl is not None; "
            + ("assert hasattr(torch.ops.fa4, 'fwd'); " if HAS_OPS else "") + "print('ok')")
    r = _run(code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
