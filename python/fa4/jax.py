"""fa4.jax: fa4's attention for JAX, as an XLA custom call (the JAX FFI).

    import fa4.jax
    out = fa4.jax.attention(q, k, v, causal=True)                   # jax arrays [B, S, H, D]
    out, lse = jax.jit(lambda q, k, v: fa4.jax.attention(q, k, v, return_lse=True))(q, k, v)
    out = fa4.jax.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    out = fa4.jax.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, page_table=pt)
    out, k_cache, v_cache = fa4.jax.attention_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                                           cache_seqlens=lens)

The calls are ``jax.ffi.ffi_call``s of fa4's handler (registered with
``jax.ffi.register_ffi_target``, target ``"fa4_fwd"``): they trace under ``jax.jit`` and run on
XLA's own buffers -- no copy through NumPy -- on the CPU, and on the GPU (platform "CUDA", on
XLA's stream) when fa4 was built with the cuda backend. Argument names, defaults, shapes and
semantics are those of ``fa4.attention`` / ``attention_varlen`` / ``attention_with_kvcache``,
except that JAX arrays are immutable: there is no ``out=``, and appending ``k`` / ``v`` into a
cache returns the updated caches as well, ``(out[, lse], k_cache, v_cache)`` (aliased to the
inputs: donate them to ``jax.jit``, ``donate_argnums``, to update in place).

Errors: a Python scalar of the wrong type or range, a tensor of the wrong rank or dtype kind,
raise fa4's exceptions (``.argument`` names it) when the call is traced. Everything else is
checked by the library when the call runs: a bad argument is then an FFI error, raised by JAX as
``jax.errors.JaxRuntimeError`` ("INVALID_ARGUMENT: fa4: <argument>: ..."); outside ``jax.jit``
fa4.jax re-raises it as the matching fa4 exception with ``.argument`` set. Never a crash.

This module needs jax, and an fa4 built with jaxlib present (python/CMakeLists.txt: FA4_JAX).
"""

import re as _re

import jax as _jax
import jax.numpy as _jnp
import numpy as _np

from . import _args
from . import _fa4 as _ext
from ._api import _backend
from ._errors import (BackendUnavailableError, DTypeError, InternalError, InvalidArgumentError, OutOfMemoryError,
                      UnsupportedError, _error)

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "TARGET"]

TARGET = "fa4_fwd"

# The optional operands in the handler's order (fa4_jax.cpp: kOptional; bit i of `present`).
_OPTIONAL = ("sinks", "q_descale", "k_descale", "v_descale", "cu_seqlens_q", "cu_seqlens_k", "seqused_k",
             "cache_seqlens", "cache_batch_idx", "page_table", "k_new", "v_new")

if not hasattr(_ext, "jax_handlers"):
    raise ImportError("fa4.jax: this fa4 was built without its XLA FFI handlers (jaxlib was not found at build "
                      "time); rebuild with jaxlib installed, or FA4_JAX=ON FA4_JAX_INCLUDE_DIR=<jax.ffi.include_dir()>")

for _platform, _capsule in _ext.jax_handlers().items():
    _jax.ffi.register_ffi_target(TARGET, _capsule, platform=_platform)
del _platform, _capsule

_FLOATS = ("float32", "float16", "bfloat16", "float8_e4m3fn")


def _shape(x, name, want, pattern):
    try:
        s = tuple(x.shape)
    except AttributeError:
        raise _error(DTypeError, name, f"{name}: expected a jax array, got {type(x).__name__}") from None
    if want is not None and len(s) != want:
        raise _error(InvalidArgumentError, name, f"{name}: expected a {want}-d tensor {pattern}, got {len(s)}-d")
    if not s:
        raise _error(InvalidArgumentError, name, f"{name}: expected a tensor with at least one dimension, got a 0-d tensor")
    return s


def _array(x, name, floating):
    """x as a jax array (NumPy arrays are moved to the default device), its dtype family checked
    here so that a wrong one is a DTypeError at trace time; the rest is the library's."""
    if x is None:
        return None
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise _error(DTypeError, name, f"{name}: expected a jax array, got {type(x).__name__}")
    d = _np.dtype(x.dtype).name
    if floating and d not in _FLOATS:
        raise _error(DTypeError, name, f"{name}: unsupported dtype {d} (fa4 takes float32, float16, bfloat16, "
                                       f"float8_e4m3fn tensors)")
    if not floating and d != "int32":
        raise _error(DTypeError, name, f"{name}: expected dtype int32 (index tensor), got {d}")
    return x if isinstance(x, _jax.Array) else _jnp.asarray(x)


def _out_dtype(q):
    d = _np.dtype(q.dtype)
    return _jnp.bfloat16 if d.name == "float8_e4m3fn" else d


_CODE = _re.compile(r"\b(INVALID_ARGUMENT|UNIMPLEMENTED|UNAVAILABLE|RESOURCE_EXHAUSTED|INTERNAL): fa4: (.*)")
_ARG = _re.compile(r"(\w+): ")
_CLASS = {"INVALID_ARGUMENT": InvalidArgumentError, "UNIMPLEMENTED": UnsupportedError,
          "UNAVAILABLE": BackendUnavailableError, "RESOURCE_EXHAUSTED": OutOfMemoryError, "INTERNAL": InternalError}


def _as_fa4_error(e):
    """The fa4 exception for a JaxRuntimeError raised by fa4's handler, whose message is
    "<CODE>: fa4: <argument>: <what>" (None if it is not one of fa4's)."""
    m = _CODE.search(str(e))
    if m is None:
        return None
    code, message = m.group(1), m.group(2).splitlines()[0]
    cls = _CLASS[code]
    if cls is InvalidArgumentError and "dtype" in message:
        cls = DTypeError  # as the extension does (fa4_ext.cpp: raise_status)
    a = _ARG.match(message)
    return _error(cls, a.group(1) if a else None, message)


def _call(q, k, v, optional, out_shape, lse_shape, append, causal, window, chunk, softcap, scale, max_seqlen_q,
          max_seqlen_k, num_splits, backend, num_threads):
    present = 0
    operands = [q, k, v]
    for i, name in enumerate(_OPTIONAL):
        x = optional.get(name)
        if x is not None:
            present |= 1 << i
            operands.append(x)
    results = [_jax.ShapeDtypeStruct(out_shape, _out_dtype(q))]
    if lse_shape is not None:
        results.append(_jax.ShapeDtypeStruct(lse_shape, _jnp.float32))
    aliases = {}
    if append:
        n = len(results)
        results += [_jax.ShapeDtypeStruct(k.shape, k.dtype), _jax.ShapeDtypeStruct(v.shape, v.dtype)]
        aliases = {1: n, 2: n + 1}
    call = _jax.ffi.ffi_call(TARGET, results, input_output_aliases=aliases, vmap_method="sequential")
    attrs = dict(present=_np.int64(present), has_lse=lse_shape is not None, append=bool(append), causal=causal,
                 window_left=_np.int64(window[0]), window_right=_np.int64(window[1]), chunk_size=_np.int64(chunk),
                 softcap=_np.float32(softcap), scale=_np.float32(0.0 if scale is None else scale),
                 max_seqlen_q=_np.int64(max_seqlen_q), max_seqlen_k=_np.int64(max_seqlen_k),
                 num_splits=_np.int32(num_splits), backend=_np.int32(_backend(backend)),
                 num_threads=_np.int32(num_threads))
    # Outside jit, the handler's error (a JaxRuntimeError) becomes fa4's exception; waiting for
    # the result is what makes the error visible here (the CPU client runs asynchronously).
    # Under jit (the results are tracers) nothing runs yet: the error comes when the jitted
    # function runs, as JaxRuntimeError naming the argument.
    try:
        res = call(*operands, **attrs)
        if not isinstance(res[0], _jax.core.Tracer):
            _jax.block_until_ready(res)
    except _jax.errors.JaxRuntimeError as e:
        err = _as_fa4_error(e)
        if err is None:
            raise
        raise err from None
    return res[0] if len(res) == 1 else tuple(res)


def _options(causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads):
    return (_args.as_bool(causal, "causal"), _args.as_window(window), _args.as_int(chunk, "chunk"),
            _args.as_real(softcap, "softcap"), _args.as_scale(scale), _args.as_bool(return_lse, "return_lse"),
            _args.as_num_splits(num_splits), _args.as_num_threads(num_threads))


def attention(q, k, v, *, causal=False, window=(-1, -1), chunk=0, softcap=0.0, sinks=None, scale=None,
              return_lse=False, backend="auto", q_descale=None, k_descale=None, v_descale=None, num_splits=0,
              num_threads=0):
    """fa4.attention for jax arrays (jit-able): q [B, Sq, Hq, Dqk], k [B, Sk, Hkv, Dqk],
    v [B, Sk, Hkv, Dv] -> out [B, Sq, Hq, Dv], or (out, lse [B, Hq, Sq] float32)."""
    causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads = _options(
        causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads)
    _backend(backend)
    q, k, v = _array(q, "q", True), _array(k, "k", True), _array(v, "v", True)
    B, Sq, Hq, _ = _shape(q, "q", 4, "[B, Sq, Hq, Dqk]")
    Dv = _shape(v, "v", None, "")[-1]
    opt = dict(sinks=_array(sinks, "sinks", True), q_descale=_array(q_descale, "q_descale", True),
               k_descale=_array(k_descale, "k_descale", True), v_descale=_array(v_descale, "v_descale", True))
    return _call(q, k, v, opt, (B, Sq, Hq, Dv), (B, Hq, Sq) if return_lse else None, False, causal, window, chunk,
                 softcap, scale, 0, 0, num_splits, backend, num_threads)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, seqused_k=None, max_seqlen_q=0, max_seqlen_k=0,
                     causal=False, window=(-1, -1), chunk=0, softcap=0.0, sinks=None, scale=None,
                     return_lse=False, backend="auto", q_descale=None, k_descale=None, v_descale=None,
                     num_splits=0, num_threads=0):
    """fa4.attention_varlen for jax arrays (jit-able): packed q [Tq, Hq, Dqk], k [Tk, Hkv, Dqk],
    v [Tk, Hkv, Dv], cu_seqlens_q / cu_seqlens_k int32 [B+1] -> out [Tq, Hq, Dv], or
    (out, lse [Hq, Tq])."""
    causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads = _options(
        causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads)
    max_seqlen_q = _args.as_seqlen_hint(max_seqlen_q, "max_seqlen_q")
    max_seqlen_k = _args.as_seqlen_hint(max_seqlen_k, "max_seqlen_k")
    _backend(backend)
    q, k, v = _array(q, "q", True), _array(k, "k", True), _array(v, "v", True)
    Tq, Hq, _ = _shape(q, "q", 3, "[Tq, Hq, Dqk]")
    Dv = _shape(v, "v", None, "")[-1]
    if cu_seqlens_q is None or cu_seqlens_k is None:
        name = "cu_seqlens_q" if cu_seqlens_q is None else "cu_seqlens_k"
        raise _error(InvalidArgumentError, name, f"{name}: required (int32 [B+1])")
    opt = dict(sinks=_array(sinks, "sinks", True), q_descale=_array(q_descale, "q_descale", True),
               k_descale=_array(k_descale, "k_descale", True), v_descale=_array(v_descale, "v_descale", True),
               cu_seqlens_q=_array(cu_seqlens_q, "cu_seqlens_q", False),
               cu_seqlens_k=_array(cu_seqlens_k, "cu_seqlens_k", False),
               seqused_k=_array(seqused_k, "seqused_k", False))
    return _call(q, k, v, opt, (Tq, Hq, Dv), (Hq, Tq) if return_lse else None, False, causal, window, chunk,
                 softcap, scale, max_seqlen_q, max_seqlen_k, num_splits, backend, num_threads)


def attention_with_kvcache(q, k_cache, v_cache, *, k=None, v=None, cache_seqlens=None, cache_batch_idx=None,
                           page_table=None, cu_seqlens_q=None, max_seqlen_q=0, num_splits=0, causal=False,
                           window=(-1, -1), chunk=0, softcap=0.0, sinks=None, scale=None, return_lse=False,
                           backend="auto", q_descale=None, k_descale=None, v_descale=None, num_threads=0):
    """fa4.attention_with_kvcache for jax arrays (jit-able). Without k / v: out, or (out, lse).
    With k / v [B, Snew, Hkv, D] (appended at cache_seqlens before attention): (out, k_cache,
    v_cache), or (out, lse, k_cache, v_cache), the caches updated (XLA aliases them to the inputs;
    donate them to jax.jit to avoid a copy)."""
    causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads = _options(
        causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads)
    max_seqlen_q = _args.as_seqlen_hint(max_seqlen_q, "max_seqlen_q")
    _backend(backend)
    q = _array(q, "q", True)
    k_cache, v_cache = _array(k_cache, "k_cache", True), _array(v_cache, "v_cache", True)
    if cu_seqlens_q is None:
        B, Sq, Hq, _ = _shape(q, "q", 4, "[B, Sq, Hq, Dqk]")
        out_shape, lse_shape = (B, Sq, Hq), (B, Hq, Sq)
    else:
        Tq, Hq, _ = _shape(q, "q", 3, "[Tq, Hq, Dqk] (with cu_seqlens_q)")
        out_shape, lse_shape = (Tq, Hq), (Hq, Tq)
    out_shape += (_shape(v_cache, "v_cache", None, "")[-1],)
    if cache_seqlens is not None and isinstance(cache_seqlens, (int, _np.integer, bool, float, str)):
        n = _args.as_cache_seqlens_int(cache_seqlens)
        if cu_seqlens_q is None:
            nb = out_shape[0]
        else:
            nb = max(_shape(cu_seqlens_q, "cu_seqlens_q", 1, "[B+1]")[0] - 1, 0)
        cache_seqlens = _jnp.full((nb,), n, _jnp.int32)
    append = k is not None or v is not None
    if append and (k is None or v is None):
        name = "v" if v is None else "k"
        raise _error(InvalidArgumentError, name, f"{name}: k and v are appended together: give both or neither")
    opt = dict(sinks=_array(sinks, "sinks", True), q_descale=_array(q_descale, "q_descale", True),
               k_descale=_array(k_descale, "k_descale", True), v_descale=_array(v_descale, "v_descale", True),
               cu_seqlens_q=_array(cu_seqlens_q, "cu_seqlens_q", False),
               cache_seqlens=_array(cache_seqlens, "cache_seqlens", False),
               cache_batch_idx=_array(cache_batch_idx, "cache_batch_idx", False),
               page_table=_array(page_table, "page_table", False),
               k_new=_array(k, "k", True), v_new=_array(v, "v", True))
    return _call(q, k_cache, v_cache, opt, out_shape, lse_shape if return_lse else None, append, causal, window,
                 chunk, softcap, scale, max_seqlen_q, 0, num_splits, backend, num_threads)
