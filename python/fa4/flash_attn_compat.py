"""flash-attn 2 drop-in: ``from fa4.flash_attn_compat import flash_attn_func`` (also
``from fa4 import flash_attn_func``) with flash-attn 2's names, positional argument order,
defaults and return values:

    flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
    flash_attn_varlen_func, flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache

flash_attn_varlen_func also takes the call vLLM's flash-attn backend makes (vLLM's fork of
flash-attn: ``out=``, ``seqused_k``, ``block_table`` without ``cu_seqlens_k``, ``num_splits``,
``q/k/v_descale``, ``s_aux`` sinks, ``scheduler_metadata`` / ``fa_version`` accepted,
``return_softmax_lse``). flash-attn 3's argument order is in fa4.flash_attn_interface.

flash-attn's rules: causal=True with a window keeps the window's left edge and sets its right
edge to 0; negative window edges are unbounded; descale factors only apply to float8 inputs.
Forward only: dropout, ALiBi, rotary embedding and cache_leftpad raise UnsupportedError naming
the argument; with torch, an input that requires grad under grad mode is an error (run under
torch.no_grad() / torch.inference_mode()).
"""

from . import _args
from . import _flash_common as _fc
from ._api import attention, attention_with_kvcache

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache"]


def _scalars(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, **flags):
    """flash-attn 2's scalar arguments through fa4's checker, under flash-attn's names. Returns
    (scale, causal, (wl, wr), softcap)."""
    _fc.check_dropout(dropout_p)
    _fc.require_none(alibi_slopes=alibi_slopes)
    _fc.check_flags(**flags)
    scale = _args.as_scale(softmax_scale, "softmax_scale")
    causal = _args.as_bool(causal, "causal")
    wl, wr = _fc.window(window_size, causal)
    softcap = _args.as_real(softcap, "softcap")
    return scale, causal, (wl, wr), softcap


def _ret(res, return_attn_probs):
    # flash-attn 2 with return_attn_probs: (out, softmax_lse, S_dmask); fa4 has no S_dmask (None)
    return (res[0], res[1], None) if return_attn_probs else res


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_func: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> out [B, Sq, Hq, Dv];
    with return_attn_probs: (out, softmax_lse [B, Hq, Sq], None)."""
    scale, causal, w, softcap = _scalars(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                         deterministic=deterministic, return_attn_probs=return_attn_probs)
    res = attention(q, k, v, causal=causal, window=w, softcap=softcap, scale=scale, return_lse=return_attn_probs)
    return _ret(res, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_kvpacked_func: q [B, Sq, Hq, D], kv [B, Sk, 2, Hkv, D] (views, no copy)."""
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_qkvpacked_func: qkv [B, S, 3, H, D] (views, no copy)."""
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
                           softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None, *,
                           seqused_k=None, out=None, return_softmax_lse=False, q_descale=None, k_descale=None,
                           v_descale=None, num_splits=0, s_aux=None, scheduler_metadata=None, fa_version=None,
                           q_v=None, cp_world_size=1, cp_rank=0, cp_tot_seqused_k=None):
    """flash_attn.flash_attn_varlen_func: packed q [Tq, Hq, D] with int32 cu_seqlens_q [B+1].
    Keys: packed k/v [Tk, Hkv, D] with cu_seqlens_k (optionally cut to seqused_k); or paged
    caches [num_blocks, block_size, Hkv, D] with block_table [B, max_blocks] and the key lengths
    in seqused_k (vLLM) or cu_seqlens_k's differences (flash-attn 2); or dense [B, Sk, Hkv, D]
    with seqused_k. Returns out [Tq, Hq, Dv] (into ``out`` when given); (out, softmax_lse
    [Hq, Tq], None) with return_attn_probs; (out, softmax_lse) with return_softmax_lse.
    vLLM's keywords: s_aux = sinks (one logit per query head); scheduler_metadata and fa_version
    are accepted and ignored (fa4 plans its own schedule); q_v and cp_world_size > 1 are not
    supported."""
    scale, causal, (wl, wr), softcap = _scalars(
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic=deterministic,
        return_attn_probs=return_attn_probs, return_softmax_lse=return_softmax_lse)
    _fc.require_none(q_v=q_v, cp_tot_seqused_k=cp_tot_seqused_k)
    _fc.check_ints(fa_version=fa_version, cp_rank=cp_rank)
    if _args.as_int(cp_world_size, "cp_world_size") != 1:
        _fc.unsupported("cp_world_size", "context parallelism inside the call (cp_world_size > 1)")
    num_splits = _args.as_num_splits(num_splits)
    lse = return_attn_probs or return_softmax_lse
    qd, kd, vd = _fc.descales(q, k, q_descale, k_descale, v_descale)
    res = _fc.varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table,
                          _fc.seqlen_hint(max_seqlen_q, "max_seqlen_q"), _fc.seqlen_hint(max_seqlen_k, "max_seqlen_k"),
                          causal, wl, wr, 0, softcap, scale, _fc.sinks_f32(s_aux), lse, out, qd, kd, vd, num_splits,
                          lens_from_cu_k=True)
    if return_attn_probs:
        return res[0], res[1], None
    return res


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_varlen_kvpacked_func: q [Tq, Hq, D], kv [Tk, 2, Hkv, D]."""
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn.flash_attn_varlen_qkvpacked_func: qkv [T, 3, H, D], one cu_seqlens for q and k."""
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """flash_attn.flash_attn_with_kvcache: q [B, Sq, Hq, D]; k_cache/v_cache [B_cache, Sk_max,
    Hkv, D] (or paged [num_blocks, block_size, Hkv, D] with block_table [B, max_blocks]); k/v
    [B, Snew, Hkv, D] appended in place at cache_seqlens (int32 [B] or an int). Returns out, or
    (out, softmax_lse [B, Hq, Sq]) with return_softmax_lse."""
    _fc.require_none(rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_leftpad=cache_leftpad)
    scale, causal, w, softcap = _scalars(0.0, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                         rotary_interleaved=rotary_interleaved,
                                         return_softmax_lse=return_softmax_lse)
    num_splits = _args.as_num_splits(num_splits)
    return attention_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens,
                                  cache_batch_idx=cache_batch_idx, page_table=block_table, num_splits=num_splits,
                                  causal=causal, window=w, softcap=softcap, scale=scale,
                                  return_lse=return_softmax_lse)
