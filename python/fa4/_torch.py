"""torch support: tensors in -> tensors out, and torch.library custom ops for torch.compile.

Eager calls on plain CPU / CUDA tensors take a fast path: the tensors themselves cross to the
extension, which reads data_ptr, dtype, shape, strides and device from every object whose exact
type is torch.Tensor / torch.nn.Parameter (registered with _fa4.set_torch) -- no DLPack capsule,
no stream handshake, no host synchronization, and no descriptor that a caller could forge -- and
the outputs come from torch.empty (the caching allocator). Under
torch.compile / torch.export, and for tensor subclasses (FakeTensor, ...) or other devices
(meta), the calls go through the registered ops

    torch.ops.fa4.fwd          (out, lse) = attention, no mutation
    torch.ops.fa4.fwd_append   (out, lse) = attention with k_new/v_new appended into k/v (mutates k, v)
    torch.ops.fa4.combine      (out, lse) = merge of partial results

whose fake implementations give shapes and dtypes without touching data, so
torch.compile(fullgraph=True) traces them without a graph break. The CUDA path passes torch's
current stream and allocates split-KV scratch from torch, so it is safe inside CUDA graph capture.
"""

from typing import Optional, Tuple

import numpy as np

import torch

from . import _api
from . import _fa4 as _ext
from ._errors import DTypeError, InvalidArgumentError, UnsupportedError, _error

Tensor = torch.Tensor
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not subclasses such as FakeTensor / FunctionalTensor

_DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.int32: 4}
_FP8 = getattr(torch, "float8_e4m3fn", None)
if _FP8 is not None:
    _DT[_FP8] = 3

try:
    _is_compiling = torch.compiler.is_compiling
except AttributeError:  # torch < 2.3
    try:
        from torch._dynamo import is_compiling as _is_compiling
    except ImportError:  # torch < 2.0 (or a build without dynamo): nothing compiles
        def _is_compiling():
            return False

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

# Set False (fa4._torch.EAGER_FAST_PATH = False) to send every call through torch.ops.fa4.*
# (e.g. to see fa4 in TorchDispatchMode / profiler traces).
EAGER_FAST_PATH = True

_registered = False


def _out_dtype(dt):
    return torch.bfloat16 if dt == _FP8 else dt


def _fast(q):
    # Plain CPU / CUDA tensors in eager mode.
    return (EAGER_FAST_PATH and type(q) in _PLAIN and not _is_compiling()
            and (q.is_cuda or not q.is_meta))


def _stream(q):
    if q.is_cuda:
        if _raw_stream is not None:
            return _raw_stream(q.get_device())
        return torch.cuda.current_stream(q.device).cuda_stream
    return 0


def _ws_alloc(q):
    if not q.is_cuda:
        return None
    dev = q.device

    def alloc(n):
        t = torch.empty(n, dtype=torch.uint8, device=dev)
        return t, t.data_ptr()

    return alloc


def _no_grad_check(tensors):
    """fa4 is forward only: with grad mode on, an input that requires grad would get an output
    without a grad_fn and training code would lose its gradients without a word. That is an error
    (naming the tensor); under torch.no_grad() / torch.inference_mode() the call runs. `tensors`
    is a sequence of (name, tensor or None)."""
    if not torch.is_grad_enabled():
        return
    for name, x in tensors:
        if x is not None and getattr(x, "requires_grad", False):
            raise _error(UnsupportedError, name,
                         f"{name}: requires grad while grad mode is on, but fa4 is forward only (no backward "
                         f"pass: the output would carry no gradient); call it under torch.no_grad() / "
                         f"torch.inference_mode(), or pass {name}.detach()")


def _empty(name, shape, dtype, device):
    return _api._alloc(name, lambda: torch.empty(*shape, dtype=dtype, device=device))


def _run(q, k, v, out, out_shape, lse_shape, sinks, q_descale, k_descale, v_descale, cu_seqlens_q, cu_seqlens_k,
         seqused_k, cache_seqlens, cache_batch_idx, page_table, k_new, v_new, scale, softcap, causal, wl, wr,
         chunk, max_seqlen_q, max_seqlen_k, num_splits, backend, num_threads):
    """Runs the extension on real tensors; allocates out (unless given) and lse (if lse_shape)."""
    # torch.empty(*shape) parses faster than torch.empty(shape)
    if out is None:
        out = _empty("out", out_shape, _out_dtype(q.dtype), q.device)
    lse = None if lse_shape is None else _empty("lse", lse_shape, torch.float32, q.device)
    if isinstance(cache_seqlens, (int, np.integer)):
        n = out_shape[0] if cu_seqlens_q is None else cu_seqlens_q.shape[0] - 1
        cache_seqlens = _api._alloc("cache_seqlens", lambda: torch.full((max(n, 0),), int(cache_seqlens),
                                                                         dtype=torch.int32, device=q.device))
    cuda = q.is_cuda
    # Tensors go as they are: the extension reads plain torch tensors directly and anything else
    # (a NumPy array passed for sinks, ...) through DLPack / the buffer protocol.
    _ext.fwd(q, k, v, out, lse, sinks, q_descale, k_descale, v_descale, cu_seqlens_q, cu_seqlens_k, seqused_k,
             cache_seqlens, cache_batch_idx, page_table, k_new, v_new,
             scale, softcap, causal, wl, wr, chunk, max_seqlen_q, max_seqlen_k, num_splits, backend, num_threads,
             _stream(q) if cuda else 0, False, _ws_alloc(q) if cuda else None)
    return out, lse


def _shapes(q, v, varlen_q):
    Dv = v.shape[-1]
    if varlen_q:
        Tq, Hq = q.shape[0], q.shape[1]
        return (Tq, Hq, Dv), (Hq, Tq)
    B, Sq, Hq = q.shape[0], q.shape[1], q.shape[2]
    return (B, Sq, Hq, Dv), (B, Hq, Sq)


def _scalars(scale, window, backend):
    wl, wr = _api._window(window)
    return (0.0 if scale is None else float(scale)), wl, wr, _api._backend(backend)


def _finish(o, lse, out, return_lse):
    if out is not None:
        out.copy_(o)
        o = out
    return (o, lse) if return_lse else o


# ---- the public API's torch branch (called from fa4._api) ----

def attention(q, k, v, causal, window, chunk, softcap, sinks, scale, return_lse, out, backend, q_descale,
              k_descale, v_descale, num_splits, num_threads):
    _no_grad_check((("q", q), ("k", k), ("v", v), ("sinks", sinks)))
    sc, wl, wr, b = _scalars(scale, window, backend)
    if _fast(q):
        B, Sq, Hq, _ = _api._rank(q, "q", 4, "[B, Sq, Hq, Dqk]")
        Dv = _api._last_dim(v, "v")
        o, lse = _run(q, k, v, out, (B, Sq, Hq, Dv), (B, Hq, Sq) if return_lse else None, sinks, q_descale,
                      k_descale, v_descale, None, None, None, None, None, None, None, None, sc, softcap, causal,
                      wl, wr, chunk, 0, 0, num_splits, b, num_threads)
        return (o, lse) if return_lse else o
    _api._rank(q, "q", 4, "[B, Sq, Hq, Dqk]")
    o, lse = torch.ops.fa4.fwd(q, k, v, sinks, q_descale, k_descale, v_descale, None, None, None, None, None, None,
                               sc, float(softcap), bool(causal), wl, wr, int(chunk), 0, 0, int(num_splits), b,
                               int(num_threads), bool(return_lse))
    return _finish(o, lse, out, return_lse)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, causal, window,
                     chunk, softcap, sinks, scale, return_lse, out, backend, q_descale, k_descale, v_descale,
                     num_splits, num_threads):
    _no_grad_check((("q", q), ("k", k), ("v", v), ("sinks", sinks)))
    sc, wl, wr, b = _scalars(scale, window, backend)
    if _fast(q):
        Tq, Hq, _ = _api._rank(q, "q", 3, "[Tq, Hq, Dqk]")
        Dv = _api._last_dim(v, "v")
        o, lse = _run(q, k, v, out, (Tq, Hq, Dv), (Hq, Tq) if return_lse else None, sinks, q_descale, k_descale,
                      v_descale, cu_seqlens_q, cu_seqlens_k, seqused_k, None, None, None, None, None, sc, softcap,
                      causal, wl, wr, chunk, max_seqlen_q, max_seqlen_k, num_splits, b, num_threads)
        return (o, lse) if return_lse else o
    _api._rank(q, "q", 3, "[Tq, Hq, Dqk]")
    o, lse = torch.ops.fa4.fwd(q, k, v, sinks, q_descale, k_descale, v_descale, cu_seqlens_q, cu_seqlens_k,
                               seqused_k, None, None, None, sc, float(softcap), bool(causal), wl, wr, int(chunk),
                               int(max_seqlen_q), int(max_seqlen_k), int(num_splits), b, int(num_threads),
                               bool(return_lse))
    return _finish(o, lse, out, return_lse)


def attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, page_table, cu_seqlens_q,
                           max_seqlen_q, num_splits, causal, window, chunk, softcap, sinks, scale, return_lse, out,
                           backend, q_descale, k_descale, v_descale, num_threads):
    _no_grad_check((("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v), ("sinks", sinks)))
    sc, wl, wr, b = _scalars(scale, window, backend)
    varlen_q = cu_seqlens_q is not None
    if varlen_q:
        _api._rank(q, "q", 3, "[Tq, Hq, Dqk] (with cu_seqlens_q)")
    else:
        _api._rank(q, "q", 4, "[B, Sq, Hq, Dqk]")
    _api._last_dim(v_cache, "v_cache")
    if _fast(q):
        out_shape, lse_shape = _shapes(q, v_cache, varlen_q)
        o, lse = _run(q, k_cache, v_cache, out, out_shape, lse_shape if return_lse else None, sinks, q_descale,
                      k_descale, v_descale, cu_seqlens_q, None, None, cache_seqlens, cache_batch_idx, page_table,
                      k, v, sc, softcap, causal, wl, wr, chunk, max_seqlen_q, 0, num_splits, b, num_threads)
        return (o, lse) if return_lse else o
    if isinstance(cache_seqlens, (int, np.integer)):
        n = q.shape[0] if not varlen_q else cu_seqlens_q.shape[0] - 1
        cache_seqlens = torch.full((n,), cache_seqlens, dtype=torch.int32, device=q.device)
    common = (sinks, q_descale, k_descale, v_descale, cu_seqlens_q, None, None, cache_seqlens, cache_batch_idx,
              page_table)
    scalars = (sc, float(softcap), bool(causal), wl, wr, int(chunk), int(max_seqlen_q), 0, int(num_splits), b,
               int(num_threads), bool(return_lse))
    if k is not None or v is not None:
        o, lse = torch.ops.fa4.fwd_append(q, k_cache, v_cache, k, v, *common, *scalars)
    else:
        o, lse = torch.ops.fa4.fwd(q, k_cache, v_cache, *common, *scalars)
    return _finish(o, lse, out, return_lse)


def combine(out_partials, lse_partials, out, out_dtype, return_lse, backend, num_threads):
    _no_grad_check((("out_partials", out_partials), ("lse_partials", lse_partials)))
    b = _api._backend(backend)
    S, B, Sq, H, Dv = _api._rank(out_partials, "out_partials", 5, "[S, B, Sq, H, Dv]")
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise _error(DTypeError, "out_dtype", f"out_dtype: expected a torch.dtype, got {out_dtype!r}")
    if out_dtype is not None and out is not None and getattr(out, "dtype", out_dtype) != out_dtype:
        raise _error(InvalidArgumentError, "out_dtype",
                     f"out_dtype: {out_dtype} does not match out's dtype {out.dtype} (give one of the two)")
    dt = out_dtype if out_dtype is not None else (out.dtype if out is not None else torch.float32)
    if _fast(out_partials):
        return _combine_run(out_partials, lse_partials, out, dt, return_lse, b, num_threads, (B, Sq, H, Dv))
    o, lse = torch.ops.fa4.combine(out_partials, lse_partials, dt, b, int(num_threads), bool(return_lse))
    return _finish(o, lse, out, return_lse)


def _combine_run(out_partials, lse_partials, out, dt, return_lse, b, num_threads, out_shape):
    dev = out_partials.device
    o = out if out is not None else _empty("out", out_shape, dt, dev)
    lse = _empty("lse", (out_shape[0], out_shape[2], out_shape[1]), torch.float32, dev) if return_lse else None
    _ext.combine(out_partials, lse_partials, o, lse, b, num_threads, _stream(out_partials), False)
    return (o, lse) if return_lse else o


# ---- torch.library ops ----

def _empty_lse(q):
    return torch.empty((0,), dtype=torch.float32, device=q.device)


def _op_fwd(q: Tensor, k: Tensor, v: Tensor, sinks: Optional[Tensor], q_descale: Optional[Tensor],
            k_descale: Optional[Tensor], v_descale: Optional[Tensor], cu_seqlens_q: Optional[Tensor],
            cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor], cache_seqlens: Optional[Tensor],
            cache_batch_idx: Optional[Tensor], page_table: Optional[Tensor], scale: float, softcap: float,
            causal: bool, window_left: int, window_right: int, chunk: int, max_seqlen_q: int, max_seqlen_k: int,
            num_splits: int, backend: int, num_threads: int, return_lse: bool) -> Tuple[Tensor, Tensor]:
    out_shape, lse_shape = _shapes(q, v, cu_seqlens_q is not None)
    o, lse = _run(q, k, v, None, out_shape, lse_shape if return_lse else None, sinks, q_descale, k_descale,
                  v_descale, cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens, cache_batch_idx, page_table, None,
                  None, scale, softcap, causal, window_left, window_right, chunk, max_seqlen_q, max_seqlen_k,
                  num_splits, backend, num_threads)
    return o, (lse if lse is not None else _empty_lse(q))


def _fake_fwd(q, k, v, sinks, q_descale, k_descale, v_descale, cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens,
              cache_batch_idx, page_table, scale, softcap, causal, window_left, window_right, chunk, max_seqlen_q,
              max_seqlen_k, num_splits, backend, num_threads, return_lse):
    out_shape, lse_shape = _shapes(q, v, cu_seqlens_q is not None)
    o = q.new_empty(out_shape, dtype=_out_dtype(q.dtype))
    lse = q.new_empty(lse_shape if return_lse else (0,), dtype=torch.float32)
    return o, lse


def _op_fwd_append(q: Tensor, k: Tensor, v: Tensor, k_new: Tensor, v_new: Tensor, sinks: Optional[Tensor],
                   q_descale: Optional[Tensor], k_descale: Optional[Tensor], v_descale: Optional[Tensor],
                   cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor],
                   cache_seqlens: Optional[Tensor], cache_batch_idx: Optional[Tensor], page_table: Optional[Tensor],
                   scale: float, softcap: float, causal: bool, window_left: int, window_right: int, chunk: int,
                   max_seqlen_q: int, max_seqlen_k: int, num_splits: int, backend: int, num_threads: int,
                   return_lse: bool) -> Tuple[Tensor, Tensor]:
    out_shape, lse_shape = _shapes(q, v, cu_seqlens_q is not None)
    o, lse = _run(q, k, v, None, out_shape, lse_shape if return_lse else None, sinks, q_descale, k_descale,
                  v_descale, cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens, cache_batch_idx, page_table, k_new,
                  v_new, scale, softcap, causal, window_left, window_right, chunk, max_seqlen_q, max_seqlen_k,
                  num_splits, backend, num_threads)
    return o, (lse if lse is not None else _empty_lse(q))


def _fake_fwd_append(q, k, v, k_new, v_new, *rest):
    return _fake_fwd(q, k, v, *rest)


def _op_combine(out_partials: Tensor, lse_partials: Tensor, out_dtype: torch.dtype, backend: int, num_threads: int,
                return_lse: bool) -> Tuple[Tensor, Tensor]:
    S, B, Sq, H, Dv = out_partials.shape
    o, lse = _combine_run(out_partials, lse_partials, None, out_dtype, True, backend, num_threads, (B, Sq, H, Dv))
    if not return_lse:
        lse = _empty_lse(out_partials)
    return o, lse


def _fake_combine(out_partials, lse_partials, out_dtype, backend, num_threads, return_lse):
    S, B, Sq, H, Dv = out_partials.shape
    o = out_partials.new_empty((B, Sq, H, Dv), dtype=out_dtype)
    lse = out_partials.new_empty((B, H, Sq) if return_lse else (0,), dtype=torch.float32)
    return o, lse


_OPT = "Tensor? sinks, Tensor? q_descale, Tensor? k_descale, Tensor? v_descale, Tensor? cu_seqlens_q, " \
       "Tensor? cu_seqlens_k, Tensor? seqused_k, Tensor? cache_seqlens, Tensor? cache_batch_idx, Tensor? page_table, " \
       "float scale, float softcap, bool causal, int window_left, int window_right, int chunk, int max_seqlen_q, " \
       "int max_seqlen_k, int num_splits, int backend, int num_threads, bool return_lse"
_SCHEMAS = {
    "fwd": f"fwd(Tensor q, Tensor k, Tensor v, {_OPT}) -> (Tensor, Tensor)",
    # k, v are the caches that k_new / v_new are appended into: mutated in place
    "fwd_append": f"fwd_append(Tensor q, Tensor(a!) k, Tensor(b!) v, Tensor k_new, Tensor v_new, {_OPT}) "
                  f"-> (Tensor, Tensor)",
    "combine": "combine(Tensor out_partials, Tensor lse_partials, ScalarType out_dtype, int backend, "
               "int num_threads, bool return_lse) -> (Tensor, Tensor)",
}
_lib = None


def register():
    """Registers the torch.library ops (idempotent) and routes fa4's API for torch tensors here.

    The ops are defined with torch.library.Library (schema + one CompositeExplicitAutograd
    kernel for CPU and CUDA) rather than torch.library.custom_op: same tracing behaviour (fake
    implementations, auto-functionalization of the cache mutation), about half the per-call
    dispatch cost."""
    global _registered, _lib
    if not _registered:
        register_fake = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract", None)
        if register_fake is not None:  # torch >= 2.2; older torch: eager fast path only
            _lib = torch.library.Library("fa4", "DEF")
            for name, schema in _SCHEMAS.items():
                _lib.define(schema)
            for name, impl, fake in (("fwd", _op_fwd, _fake_fwd), ("fwd_append", _op_fwd_append, _fake_fwd_append),
                                     ("combine", _op_combine, _fake_combine)):
                _lib.impl(name, impl, "CompositeExplicitAutograd")
                register_fake("fa4::" + name, fake, lib=_lib)
        _registered = True
    _ext.set_torch(torch.Tensor, torch.nn.Parameter, dict(_DT))
    _api._torch_impl = _this
    _api._torch_tensor = torch.Tensor


import sys as _sys  # noqa: E402

_this = _sys.modules[__name__]
