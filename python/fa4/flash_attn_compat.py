"""flash-attn drop-in: ``from fa4.flash_attn_compat import flash_attn_func`` (and
flash_attn_varlen_func, flash_attn_with_kvcache) with flash-attn 2's names, argument order and
return values. Forward only: dropout, ALiBi, rotary embedding and cache_leftpad are not
supported and raise UnsupportedError naming the argument.
"""

from ._api import attention, attention_varlen, attention_with_kvcache
from ._errors import UnsupportedError, _error


def _unsupported(name, why):
    raise _error(UnsupportedError, name, f"{name}: {why} is not supported by fa4 (forward-only attention)")


def _check(dropout_p=0.0, alibi_slopes=None):
    if dropout_p:
        _unsupported("dropout_p", "dropout")
    if alibi_slopes is not None:
        _unsupported("alibi_slopes", "ALiBi")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_func: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> out [B, Sq, Hq, Dv];
    with return_attn_probs: (out, softmax_lse [B, Hq, Sq], None)."""
    _check(dropout_p, alibi_slopes)
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
    max_sq = int(max_seqlen_q or 0) if not _is_tensor_like(max_seqlen_q) else 0
    max_sk = int(max_seqlen_k or 0) if not _is_tensor_like(max_seqlen_k) else 0
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
    return attention_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens,
                                  cache_batch_idx=cache_batch_idx, page_table=block_table, num_splits=num_splits,
                                  causal=causal, window=window_size, softcap=softcap, scale=softmax_scale,
                                  return_lse=return_softmax_lse)
