"""flash-attn 3 drop-in: ``from fa4.flash_attn_interface import flash_attn_func`` where code has
``from flash_attn_interface import flash_attn_func`` (flash-attn 3's hopper/ package), with
flash-attn 3's names, positional argument order, defaults and return values:

    flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None,
                    k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0,
                    softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                    return_attn_probs=False)                 -> out | (out, softmax_lse)
    flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, ...)   -> the same
    flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    seqused_q=None, seqused_k=None, softmax_scale=None, causal=False, ...)
    flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None,
                    rotary_sin=None, cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                    page_table=None, cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None,
                    rotary_seqlens=None, q_descale=None, k_descale=None, v_descale=None,
                    softmax_scale=None, causal=False, window_size=(-1, -1), attention_chunk=0,
                    softcap=0.0, rotary_interleaved=True, scheduler_metadata=None, num_splits=0,
                    pack_gqa=None, sm_margin=0, return_softmax_lse=False)
                                        -> out | (out, softmax_lse, out_accum, softmax_lse_accum)
    flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None) -> (out, softmax_lse)

Beyond flash-attn 3's own arguments, keyword-only: ``out=`` (write the result there, as
flash-attn 3's op and vLLM's fork do) and ``learnable_sink=`` (one logit per query head, in the
softmax denominator only: gpt-oss sinks; flash-attn 4's name; vLLM's fork calls it s_aux, also
accepted). ``pack_gqa`` and ``num_splits`` are accepted (fa4 decides pack-GQA itself; num_splits
is honoured), ``scheduler_metadata``, ``sm_margin`` and ``deterministic`` are accepted and have
no effect (fa4's forward pass is always deterministic).

flash-attn's rules: causal=True with a window keeps its left edge and sets the right edge to 0;
negative (or None) window edges are unbounded; descale factors apply to float8 inputs only
(ignored otherwise). attention_chunk (Llama 4) needs causal attention: attention_chunk without
causal -- bidirectional attention inside each chunk -- raises UnsupportedError naming
attention_chunk. qv (MLA), rotary embedding, cache_leftpad and cu_seqlens_k_new raise
UnsupportedError naming the argument. Forward only: with torch, an input that requires grad under
grad mode is an error (run under torch.no_grad() / torch.inference_mode()).

LSE layouts are flash-attn 3's: softmax_lse [B, Hq, Sq] (varlen: [Hq, Tq]); flash_attn_combine
takes lse_partial [num_splits, B, Sq, H] and returns softmax_lse [B, Sq, H] (a transposed view
of a [B, H, Sq] tensor, as flash-attn 3).
"""

from . import _args
from . import _flash_common as _fc
from ._api import attention, attention_with_kvcache, combine
from ._errors import InvalidArgumentError, _error

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "flash_attn_combine"]


def _scalars(softmax_scale, causal, window_size, attention_chunk, softcap, num_splits, pack_gqa, deterministic,
             sm_margin, **flags):
    """flash-attn 3's scalar arguments through fa4's checker, under flash-attn's names.
    Returns (scale, causal, (wl, wr), chunk, softcap, num_splits)."""
    scale = _args.as_scale(softmax_scale, "softmax_scale")
    causal = _args.as_bool(causal, "causal")
    wl, wr = _fc.window(window_size, causal)
    chunk = _fc.chunk(attention_chunk, wr)
    softcap = _args.as_real(softcap, "softcap")
    num_splits = _args.as_num_splits(num_splits)
    _fc.check_opt_bool(pack_gqa, "pack_gqa")
    _fc.check_flags(deterministic=deterministic, **flags)
    _args.as_int(sm_margin, "sm_margin", 0, _args.INT32[1])
    return scale, causal, (wl, wr), chunk, softcap, num_splits


def _sink(learnable_sink, s_aux):
    if learnable_sink is not None and s_aux is not None:
        raise _error(InvalidArgumentError, "s_aux", "s_aux: the same as learnable_sink (vLLM's name); give one of the two")
    return _fc.sinks_f32(learnable_sink if learnable_sink is not None else s_aux)


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1, pack_gqa=None,
                    deterministic=False, sm_margin=0, return_attn_probs=False, *, out=None, learnable_sink=None,
                    s_aux=None):
    """flash_attn_interface.flash_attn_func: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> out
    [B, Sq, Hq, Dv]; with return_attn_probs: (out, softmax_lse [B, Hq, Sq])."""
    _fc.require_none(qv=qv)
    scale, causal, w, chunk, softcap, num_splits = _scalars(softmax_scale, causal, window_size, attention_chunk,
                                                            softcap, num_splits, pack_gqa, deterministic, sm_margin,
                                                            return_attn_probs=return_attn_probs)
    qd, kd, vd = _fc.descales(q, k, q_descale, k_descale, v_descale)
    return attention(q, k, v, causal=causal, window=w, chunk=chunk, softcap=softcap, scale=scale,
                     sinks=_sink(learnable_sink, s_aux), return_lse=return_attn_probs, out=out, q_descale=qd,
                     k_descale=kd, v_descale=vd, num_splits=num_splits)


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None, k_descale=None, v_descale=None,
                              window_size=(-1, -1), attention_chunk=0, softcap=0.0, deterministic=False,
                              num_heads_q=None, sm_margin=0, return_attn_probs=False, *, out=None,
                              learnable_sink=None, s_aux=None):
    """flash_attn_interface.flash_attn_qkvpacked_func: qkv [B, S, 3, H, D], or [B, S, Hq + 2*Hkv, D]
    with num_heads_q (views, no copy)."""
    ndim = len(getattr(qkv, "shape", ()))
    if ndim == 5:
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    elif ndim == 4:
        if num_heads_q is None:
            raise _error(InvalidArgumentError, "num_heads_q", "num_heads_q: required with a 4-d qkv [B, S, Hq + 2*Hkv, D]")
        hq = _args.as_int(num_heads_q, "num_heads_q", 1, _args.INT32[1])
        hkv = (qkv.shape[2] - hq) // 2
        if hkv < 1 or hq + 2 * hkv != qkv.shape[2]:
            raise _error(InvalidArgumentError, "num_heads_q",
                         f"num_heads_q: {hq} does not split qkv's {qkv.shape[2]} heads into Hq + 2*Hkv")
        q, k, v = qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:]
    else:
        raise _error(InvalidArgumentError, "qkv", f"qkv: expected [B, S, 3, H, D] or [B, S, Hq + 2*Hkv, D], got {ndim}-d")
    return flash_attn_func(q, k, v, softmax_scale, causal, None, q_descale, k_descale, v_descale, window_size,
                           attention_chunk, softcap, 1, None, deterministic, sm_margin, return_attn_probs, out=out,
                           learnable_sink=learnable_sink, s_aux=s_aux)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                           v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                           pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False, *, out=None,
                           learnable_sink=None, s_aux=None, page_table=None):
    """flash_attn_interface.flash_attn_varlen_func: packed q [Tq, Hq, D] with int32 cu_seqlens_q
    [B+1]; packed k/v [Tk, Hkv, D] with cu_seqlens_k (or, with cu_seqlens_k=None, dense k/v
    [B, Sk, Hkv, D] or paged ones with page_table, the key lengths in seqused_k). seqused_q /
    seqused_k [B]: only the first seqused_q[b] queries / seqused_k[b] keys of each sequence are
    used (seqused_q costs a host read and a copy of the used rows; the other rows are 0 in out,
    -inf in lse). Returns out [Tq, Hq, Dv] or (out, softmax_lse [Hq, Tq])."""
    _fc.require_none(qv=qv)
    scale, causal, (wl, wr), chunk, softcap, num_splits = _scalars(
        softmax_scale, causal, window_size, attention_chunk, softcap, num_splits, pack_gqa, deterministic, sm_margin,
        return_attn_probs=return_attn_probs)
    qd, kd, vd = _fc.descales(q, k, q_descale, k_descale, v_descale)
    sinks = _sink(learnable_sink, s_aux)
    max_sq = _fc.seqlen_hint(max_seqlen_q, "max_seqlen_q")
    max_sk = _fc.seqlen_hint(max_seqlen_k, "max_seqlen_k")

    def run(q_, cu_q, max_q, out_=None):
        return _fc.varlen_call(q_, k, v, cu_q, cu_seqlens_k, seqused_k, page_table, max_q, max_sk, causal, wl, wr,
                               chunk, softcap, scale, sinks, return_attn_probs, out_, qd, kd, vd, num_splits)

    if seqused_q is not None:
        return _fc.with_seqused_q(q, cu_seqlens_q, seqused_q, out, return_attn_probs, run)
    return run(q, cu_seqlens_q, max_sq, out)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False, *, out=None, learnable_sink=None, s_aux=None):
    """flash_attn_interface.flash_attn_with_kvcache: q [B, Sq, Hq, D] (or packed [Tq, Hq, D] with
    cu_seqlens_q); k_cache/v_cache [B_cache, Sk_max, Hkv, D] (or paged [num_blocks, page_size,
    Hkv, D] with page_table [B, max_pages]); k/v [B, Snew, Hkv, D] appended in place at
    cache_seqlens (int32 [B] or an int). Returns out, or with return_softmax_lse flash-attn 3's
    4-tuple (out, softmax_lse [B, Hq, Sq], out_accum, softmax_lse_accum) whose last two are empty
    float32 tensors (fa4 merges its splits itself)."""
    _fc.require_none(qv=qv, rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_leftpad=cache_leftpad,
                     cu_seqlens_k_new=cu_seqlens_k_new, rotary_seqlens=rotary_seqlens)
    scale, causal, w, chunk, softcap, num_splits = _scalars(
        softmax_scale, causal, window_size, attention_chunk, softcap, num_splits, pack_gqa, False, sm_margin,
        rotary_interleaved=rotary_interleaved, return_softmax_lse=return_softmax_lse)
    qd, kd, vd = _fc.descales(q, k_cache, q_descale, k_descale, v_descale)
    res = attention_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens,
                                 cache_batch_idx=cache_batch_idx, page_table=page_table, cu_seqlens_q=cu_seqlens_q,
                                 max_seqlen_q=_fc.seqlen_hint(max_seqlen_q, "max_seqlen_q"), num_splits=num_splits,
                                 causal=causal, window=w, chunk=chunk, softcap=softcap, scale=scale,
                                 sinks=_sink(learnable_sink, s_aux), return_lse=return_softmax_lse, out=out,
                                 q_descale=qd, k_descale=kd, v_descale=vd)
    if return_softmax_lse:
        o, lse = res
        return o, lse, _fc.empty_like_f32(lse), _fc.empty_like_f32(lse)
    return res


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """flash_attn_interface.flash_attn_combine: out_partial float32 [num_splits, B, Sq, H, D],
    lse_partial float32 [num_splits, B, Sq, H] (flash-attn 3's layout) -> (out [B, Sq, H, D]
    in out_dtype (default out_partial's, float32) or into ``out``, softmax_lse [B, Sq, H])."""
    if len(getattr(lse_partial, "shape", ())) != 4:
        raise _error(InvalidArgumentError, "lse_partial",
                     f"lse_partial: expected a 4-d tensor [num_splits, B, Sq, H], got "
                     f"{len(getattr(lse_partial, 'shape', ()))}-d")
    o, lse = combine(out_partial, _fc.swap_last2(lse_partial), out=out, out_dtype=out_dtype, return_lse=True)
    return o, _fc.swap_last2(lse)
