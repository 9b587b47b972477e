"""What the flash-attn drop-in layers (flash_attn_compat: flash-attn 2 and vLLM's fork of it;
flash_attn_interface: flash-attn 3) share: flash-attn's rules for its arguments, mapped onto
fa4's API. Every scalar goes through fa4's one checker (_args), under flash-attn's argument
names, so a bool is never taken as a number (``softmax_scale=True``, ``window_size=(True, 0)``:
TypeError naming the argument).
"""

import numpy as _np

from . import _args
from . import _api
from ._errors import DTypeError, InvalidArgumentError, UnsupportedError, _error


def unsupported(name, why):
    raise _error(UnsupportedError, name, f"{name}: {why} is not supported by fa4 (forward-only exact attention)")


def require_none(**kw):
    """Arguments fa4 has no counterpart for: each must be None (its name is the error's argument)."""
    for name, value in kw.items():
        if value is not None:
            unsupported(name, WHY.get(name, name))


WHY = {
    "alibi_slopes": "ALiBi", "rotary_cos": "rotary embedding", "rotary_sin": "rotary embedding",
    "rotary_seqlens": "rotary embedding", "cache_leftpad": "cache_leftpad (left-padded caches)",
    "qv": "qv (an extra query-value product, MLA)", "q_v": "q_v (an extra query-value product, MLA)",
    "cu_seqlens_k_new": "cu_seqlens_k_new (ragged appended keys)", "leftpad_k": "leftpad_k",
    "cp_tot_seqused_k": "context parallelism inside the call (cp_tot_seqused_k)",
}


def check_dropout(dropout_p):
    if dropout_p is None or isinstance(dropout_p, (bool, _np.bool_)):
        hint = (" (flash-attn 3's argument order -- q, k, v, softmax_scale, causal -- is "
                "fa4.flash_attn_interface; this is flash-attn 2's: q, k, v, dropout_p, softmax_scale, causal)")
        raise _error(DTypeError, "dropout_p", f"dropout_p: expected a real number, got "
                                              f"{type(dropout_p).__name__} {dropout_p!r}{hint}")
    if _args.as_real(dropout_p, "dropout_p"):
        unsupported("dropout_p", "dropout")


def window(window_size, causal, name="window_size"):
    """flash-attn's (left, right) window: None or a pair whose entries are ints or None; any
    negative entry (or None) is unbounded (-1). flash-attn's causal rule: causal=True with a
    window keeps its left edge and sets the right edge to 0 (keys after the query are masked)."""
    if window_size is None:
        wl = wr = -1
    else:
        if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
            raise _error(InvalidArgumentError, name,
                         f"{name}: expected a pair (left, right) of ints (-1 = unbounded), got "
                         f"{type(window_size).__name__} {window_size!r}")
        wl, wr = (-1 if x is None else _args.as_int(x, name, *_args.INT64) for x in window_size)
        wl, wr = max(wl, -1), max(wr, -1)
    if causal:
        wr = 0
    return wl, wr


def chunk(attention_chunk, wr):
    """flash-attn 3's attention_chunk: keys are visible only inside the query's chunk of
    attention_chunk positions (Llama 4), on top of causal / the window. fa4's chunked mask is
    causal inside the chunk; bidirectional attention inside chunks (attention_chunk without
    causal, i.e. a right window edge other than 0) is refused."""
    c = _args.as_int(attention_chunk, "attention_chunk", 0, _args.INT64[1])
    if c > 0 and wr != 0:
        unsupported("attention_chunk", "attention_chunk without causal=True (bidirectional attention inside "
                    "each chunk; fa4's chunked mask is causal inside the chunk)")
    return c


def seqlen_hint(x, name):
    """max_seqlen_q / max_seqlen_k: ints, None or (1-element) tensors; hints only, so a tensor
    counts as unknown (0) rather than forcing a device sync."""
    if x is None:
        return 0
    if hasattr(x, "shape") and not isinstance(x, (_np.integer, _np.bool_)):
        return 0
    return _args.as_seqlen_hint(x, name)


def check_flags(**flags):
    for name, value in flags.items():
        _args.as_bool(value, name)


def check_opt_bool(value, name):
    if value is not None:
        _args.as_bool(value, name)


def check_ints(**ints):
    for name, value in ints.items():
        if value is not None:
            _args.as_int(value, name)


def _dtype_name(x):
    return str(getattr(x, "dtype", ""))


def is_fp8(x):
    return "float8" in _dtype_name(x)


def descales(q, k, q_descale, k_descale, v_descale):
    """flash-attn applies descale factors to float8 inputs only and ignores them otherwise (vLLM
    passes them for every dtype); fa4 rejects them on 16-bit inputs, so they are dropped here.
    A float8 KV cache under 16-bit queries keeps k / v's factors (q's is dropped: q is not fp8)."""
    if is_fp8(q):
        return q_descale, k_descale, v_descale
    if is_fp8(k):
        return None, k_descale, v_descale
    return None, None, None


def sinks_f32(s):
    """Learnable sinks (one logit per query head) in any float dtype -> float32, fa4's type."""
    if s is None:
        return None
    d = _dtype_name(s)
    if d.endswith("float32"):
        return s
    if _api._is_torch(s):
        return s.float()
    try:
        return s.astype(_np.float32)
    except AttributeError:
        raise _error(DTypeError, "learnable_sink", f"learnable_sink: expected a float tensor, got {type(s).__name__}") \
            from None


def swap_last2(x):
    return x.swapaxes(-1, -2)


def empty_like_f32(lse):
    """An empty float32 tensor in lse's framework and device (flash-attn 3's out_accum /
    softmax_lse_accum when there are no splits)."""
    return lse.reshape(-1)[:0]


def _host_int(x, name):
    if x is None:
        return None
    if _api._is_torch(x):
        return x.detach().cpu().numpy().astype(_np.int64)
    try:
        return _np.asarray(x).astype(_np.int64)
    except Exception:
        return _np.from_dlpack(x).astype(_np.int64)


def with_seqused_q(q, cu_seqlens_q, seqused_q, out, return_lse, run):
    """flash-attn 3's seqused_q (only the first seqused_q[b] rows of each packed query sequence
    are used) through fa4's varlen API: the used rows are gathered into a packed q with new
    cu_seqlens_q, `run(q_used, cu_used, max_seqlen_q)` computes them, and the results are
    scattered back. Rows past seqused_q are 0 in out (unless `out` is given: left as they are)
    and -inf in lse. Costs a host read of cu_seqlens_q / seqused_q (a device sync on the GPU) and
    a copy of the used rows."""
    cu = _host_int(cu_seqlens_q, "cu_seqlens_q")
    used = _host_int(seqused_q, "seqused_q")
    if cu is None or cu.ndim != 1 or used.ndim != 1 or used.shape[0] != cu.shape[0] - 1:
        raise _error(InvalidArgumentError, "seqused_q",
                     f"seqused_q: expected an int32 [B] tensor with cu_seqlens_q [B+1]")
    slots = cu[1:] - cu[:-1]
    bad = _np.nonzero((used < 0) | (used > slots))[0]
    if bad.size:
        b = int(bad[0])
        raise _error(InvalidArgumentError, "seqused_q",
                     f"seqused_q: entry {b} is {int(used[b])}, outside [0, {int(slots[b])}] (rows of that sequence)")
    idx = _np.concatenate([_np.arange(c, c + u, dtype=_np.int64) for c, u in zip(cu[:-1], used)] or
                          [_np.zeros(0, _np.int64)])
    new_cu = _np.concatenate([[0], _np.cumsum(used)]).astype(_np.int32)
    max_q = int(used.max()) if used.size else 0
    torch_in = _api._is_torch(q)
    if torch_in:
        import torch

        idx_t = torch.from_numpy(idx).to(q.device)
        new_cu_t = torch.from_numpy(new_cu).to(q.device)
    elif type(q) is _np.ndarray:
        idx_t, new_cu_t = idx, new_cu
    else:
        raise _error(UnsupportedError, "seqused_q", "seqused_q: supported for NumPy arrays and torch tensors")
    res = run(q[idx_t], new_cu_t, max_q)
    o_used, lse_used = (res if return_lse else (res, None))
    Tq, Hq = q.shape[0], q.shape[1]
    if torch_in:
        full = out if out is not None else torch.zeros((Tq, Hq, o_used.shape[-1]), dtype=o_used.dtype,
                                                       device=q.device)
        full[idx_t] = o_used
        if lse_used is not None:
            lse = torch.full((Hq, Tq), float("-inf"), dtype=torch.float32, device=q.device)
            lse[:, idx_t] = lse_used
    else:
        full = out if out is not None else _np.zeros((Tq, Hq, o_used.shape[-1]), o_used.dtype)
        full[idx_t] = o_used
        if lse_used is not None:
            lse = _np.full((Hq, Tq), -_np.inf, _np.float32)
            lse[:, idx_t] = lse_used
    return (full, lse) if return_lse else full


def varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q, max_seqlen_k,
                causal, wl, wr, chunk, softcap, scale, sinks, return_lse, out, q_descale, k_descale, v_descale,
                num_splits, lens_from_cu_k=False):
    """The varlen forms flash-attn callers use, onto fa4's API (q packed [Tq, Hq, D] with
    cu_seqlens_q):
      - block_table: k/v are paged caches [num_blocks, block_size, Hkv, D]; key lengths from
        seqused_k (vLLM, flash-attn 3) or else from cu_seqlens_k's differences (flash-attn 2);
      - cu_seqlens_k: k/v packed [Tk, Hkv, D], optionally cut to seqused_k per sequence;
      - seqused_k alone: k/v dense [B, Sk_max, Hkv, D] with seqused_k valid keys each.
    """
    if cu_seqlens_q is None:
        raise _error(InvalidArgumentError, "cu_seqlens_q", "cu_seqlens_q: required (int32 [B+1], packed q)")
    common = dict(causal=causal, window=(wl, wr), chunk=chunk, softcap=softcap, scale=scale, sinks=sinks,
                  return_lse=return_lse, out=out, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                  num_splits=num_splits)
    if block_table is not None:
        if seqused_k is not None:
            lens = seqused_k
        elif cu_seqlens_k is not None and lens_from_cu_k:
            lens = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
        else:
            raise _error(InvalidArgumentError, "seqused_k",
                         "seqused_k: required with block_table (the valid keys of each sequence)")
        return _api.attention_with_kvcache(q, k, v, cache_seqlens=lens, page_table=block_table,
                                           cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, **common)
    if cu_seqlens_k is not None:
        return _api.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k=seqused_k,
                                     max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, **common)
    if seqused_k is not None:
        return _api.attention_with_kvcache(q, k, v, cache_seqlens=seqused_k, cu_seqlens_q=cu_seqlens_q,
                                           max_seqlen_q=max_seqlen_q, **common)
    raise _error(InvalidArgumentError, "cu_seqlens_k",
                 "cu_seqlens_k: required (int32 [B+1], packed k/v) unless seqused_k gives the key lengths "
                 "(k/v dense [B, Sk, Hkv, D], or paged with block_table)")
