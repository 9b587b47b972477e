"""flash-attn drop-in: ``from fa4.flash_attn_compat import flash_attn_func`` (and
flash_attn_varlen_func, flash_attn_with_kvcache) with flash-attn 2's names, argument order and
return values. Forward only: dropout, ALiBi, rotary embedding and cache_leftpad are not
supported and raise UnsupportedError naming the argument.
"""

from . import _args
from ._api import attention, attention_varlen, attention_with_kvcache
from ._errors import UnsupportedError, _error


def _unsupported(name, why):
    raise _error(UnsupportedError, name, f"{name}: {why} is not supported by fa4 (forward-only attention)")


def _check(dropout_p=0.0, alibi_slopes=None):
    dropout_p = _args.as_real(dropout_p, "dropout_p")
    if dropout_p:
        _unsupported("dropout_p", "dropout")
    if alibi_slopes is not None:
        _unsupported("alibi_slopes", "ALiBi")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_func: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> out [B, Sq, Hq, Dv];
    with return_attn_probs: (out, softmax_lse [B, Hq, Sq], None)."""
    _check(dropout_p, alibi_slopes)
    softmax_scale, causal, window_size, softcap = _flash_scalars(
        softmax_scale, causal, window_size, softcap, deterministic=deterministic, return_attn_probs=return_attn_probs)
    if return_attn_probs:
        out, lse = attention(q, k, v, causal=causal, window=window_size, softcap=softcap, scale=softmax_scale,
                             return_lse=True)
        return out, lse, None
    return attention(q, k, v, causal=causal, window=window_size, softcap=softcap, scale=softmax_scale)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash_attn.flash_attn_varlen_func: packed q [Tq, Hq, D], k/v [Tk, Hkv, D] with int32
    cu_seqlens -> out [Tq, Hq, Dv]; with return_attn_probs: (out, softmax_lse [Hq, Tq], None).
    With block_table, k/v are paged caches [num_blocks, block_size, Hkv, D] and the key lengths
    are the differences of cu_seqlens_k."""
    _check(dropout_p, alibi_slopes)
    softmax_scale, causal, window_size, softcap = _flash_scalars(
        softmax_scale, causal, window_size, softcap, deterministic=deterministic, return_attn_probs=return_attn_probs)
    max_sq = _seqlen_hint(max_seqlen_q, "max_seqlen_q")
    max_sk = _seqlen_hint(max_seqlen_k, "max_seqlen_k")
    if block_table is not None:
        lens = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
        res = attention_with_kvcache(q, k, v, cache_seqlens=lens, page_table=block_table, cu_seqlens_q=cu_seqlens_q,
                                     max_seqlen_q=max_sq, causal=causal, window=window_size, softcap=softcap,
                                     scale=softmax_scale, return_lse=return_attn_probs)
    else:
        res = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=max_sq, max_seqlen_k=max_sk,
                               causal=causal, window=window_size, softcap=softcap, scale=softmax_scale,
                               return_lse=return_attn_probs)
    if return_attn_probs:
        return res[0], res[1], None
    return res


def _flash_scalars(softmax_scale, causal, window_size, softcap, **flags):
    """flash-attn's scalar arguments through fa4's one checker, under flash-attn's names (so an
    error names softmax_scale / window_size, as the caller wrote them). Returns (scale, causal,
    window, softcap); `flags` (bools such as deterministic) are only checked."""
    for name, value in flags.items():
        _args.as_bool(value, name)
    return (_args.as_scale(softmax_scale, "softmax_scale"), _args.as_bool(causal, "causal"),
            _args.as_window(window_size, "window_size"), _args.as_real(softcap, "softcap"))


def _seqlen_hint(x, name):
    """max_seqlen_q / max_seqlen_k: flash-attn callers pass ints or (1-element) tensors; they are
    hints only, so a tensor counts as 'unknown' (0) rather than forcing a device sync."""
    if _is_tensor_like(x):
        return 0
    return _args.as_seqlen_hint(0 if x is None else x, name)


def _is_tensor_like(x):
    return hasattr(x, "shape") and len(getattr(x, "shape", ())) > 0


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """flash_attn.flash_attn_with_kvcache: q [B, Sq, Hq, D]; k_cache/v_cache [B_cache, Sk_max,
    Hkv, D] (or paged [num_blocks, block_size, Hkv, D] with block_table [B, max_blocks]); k/v
    [B, Snew, Hkv, D] appended in place at cache_seqlens (int32 [B] or an int). Returns out, or
    (out, softmax_lse [B, Hq, Sq]) with return_softmax_lse."""
    _check(0.0, alibi_slopes)
    if rotary_cos is not None or rotary_sin is not None:
        _unsupported("rotary_cos", "rotary embedding")
    if cache_leftpad is not None:
        _unsupported("cache_leftpad", "cache_leftpad")
    softmax_scale, causal, window_size, softcap = _flash_scalars(
        softmax_scale, causal, window_size, softcap, rotary_interleaved=rotary_interleaved,
        return_softmax_lse=return_softmax_lse)
    num_splits = _args.as_num_splits(num_splits)
    return attention_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens,
                                  cache_batch_idx=cache_batch_idx, page_table=block_table, num_splits=num_splits,
                                  causal=causal, window=window_size, softcap=softcap, scale=softmax_scale,
                                  return_lse=return_softmax_lse)
