"""fa4's Python API: argument handling and output allocation in the caller's framework.

Every call validates in the library (src/core), which names the offending argument; this layer
only works out output shapes, allocates the outputs where the inputs live (NumPy in -> NumPy out,
torch in -> torch out, CuPy in -> CuPy out, ...) and hands all tensors to the extension through
DLPack / the buffer protocol (torch tensors through a cheaper raw descriptor, see _torch.py).
"""

import numpy as _np

from . import _args
from . import _fa4 as _ext
from ._errors import _ALL, _error, DTypeError, InvalidArgumentError, OutOfMemoryError, UnsupportedError

_ext.set_errors(_ALL)

_BACKENDS = {"auto": 0, "reference": 1, "cpu": 2, "cuda": 3, None: 0}

# ---- NumPy's missing dtypes, through ml_dtypes (optional) ----
try:
    import ml_dtypes as _mld

    _BF16 = _np.dtype(_mld.bfloat16)
    _FP8 = _np.dtype(_mld.float8_e4m3fn)
    # numpy array dtype -> the unsigned integer view that crosses to the extension
    _RAW = {_BF16: _np.uint16, _FP8: _np.uint8}
except ImportError:  # pragma: no cover - ml_dtypes is optional
    _mld = None
    _BF16 = _FP8 = None
    _RAW = {}

_F32 = _np.dtype(_np.float32)
_I32 = _np.dtype(_np.int32)
# NumPy's own float dtypes, which cross as they are even among raw views
_PLAIN = (_F32, _np.dtype(_np.float16))

# Set by fa4._torch when torch is loaded: the torch.Tensor class and the torch implementation.
_torch_tensor = None
_torch_impl = None


def _is_torch(x):
    """True for torch tensors; registers fa4's torch support on the first one if torch was
    imported after fa4 (or FA4_IMPORT_TORCH=0)."""
    if _torch_tensor is not None:
        return isinstance(x, _torch_tensor)
    if type(x).__module__.startswith("torch"):
        from . import _torch  # noqa: F401  (imports torch, which is loaded already)

        _torch.register()
        return isinstance(x, _torch_tensor)
    return False


def _backend(b):
    try:
        return _BACKENDS[b]
    except (KeyError, TypeError):
        raise _error(InvalidArgumentError, "backend",
                     f"backend: must be 'auto', 'cpu', 'cuda' or 'reference', got {b!r}") from None


_window = _args.as_window


def _options(causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads):
    """The scalar options shared by the attention calls, each through the one checker (_args):
    (causal, (wl, wr), chunk, softcap, scale (None = default), return_lse, num_splits, num_threads)."""
    return (_args.as_bool(causal, "causal"), _args.as_window(window), _args.as_int(chunk, "chunk"),
            _args.as_real(softcap, "softcap"), _args.as_scale(scale), _args.as_bool(return_lse, "return_lse"),
            _args.as_num_splits(num_splits), _args.as_num_threads(num_threads))


def _is_scalar(x):
    """A scalar where a tensor may also be given (cache_seqlens=int): Python and NumPy scalars,
    and str / bool so that they reach the scalar checker's error rather than the tensor path."""
    return isinstance(x, (int, float, complex, str, _np.generic))


def _alloc(name, fn, *args):
    """An output allocation (out, lse, an int cache_seqlens filled in): a failure is fa4's
    OutOfMemoryError naming what was being allocated, not a bare MemoryError / ValueError
    ('array is too big') from NumPy or a RuntimeError from torch's allocator."""
    try:
        return fn(*args)
    except (MemoryError, ValueError, RuntimeError) as e:
        raise _error(OutOfMemoryError, name, f"{name}: cannot allocate the output ({type(e).__name__}: {e})") from None


def _rank(x, name, want, pattern):
    """The shape of x, which must have rank `want` (checked here only because the output shape
    depends on it; everything else is validated by the library)."""
    try:
        s = x.shape
    except AttributeError:
        raise _error(DTypeError, name, f"{name}: expected an array/tensor, got {type(x).__name__}") from None
    if len(s) != want:
        raise _error(InvalidArgumentError, name, f"{name}: expected a {want}-d tensor {pattern}, got {len(s)}-d")
    return s


def _last_dim(x, name):
    try:
        s = x.shape
    except AttributeError:
        raise _error(DTypeError, name, f"{name}: expected an array/tensor, got {type(x).__name__}") from None
    if not len(s):
        raise _error(InvalidArgumentError, name, f"{name}: expected a tensor with at least one dimension, got a 0-d tensor")
    return s[-1]


# ---------------------------------------------------------------------------------------------
# Frameworks. Each adapter: empty(like, shape, dtype) -> new array; out_dtype(q) (q's dtype, bf16
# for fp8); conv(x, name) -> what crosses to the extension; stream(q); int32_full(q, n, value);
# finish(x) -> what the caller gets back; raw: whether float tensors cross as uint views.
# ---------------------------------------------------------------------------------------------


class _NumPy:
    raw = False
    ws_alloc = None

    @staticmethod
    def empty(like, shape, dtype):
        return _np.empty(shape, dtype)

    @staticmethod
    def out_dtype(q):
        d = q.dtype
        return _BF16 if (d == _FP8 and _FP8 is not None) else d

    @staticmethod
    def f32(like):
        return _F32

    @staticmethod
    def conv(x, name):
        return x

    @staticmethod
    def stream(q):
        return 0

    @staticmethod
    def int32_full(q, n, value):
        return _np.full((n,), value, _I32)

    @staticmethod
    def finish(x):
        return x

    @staticmethod
    def dtype(d, like):
        return _np.dtype(d) if d is not None else _F32


class _NumPyRaw(_NumPy):
    """bfloat16 / float8_e4m3fn NumPy arrays (ml_dtypes): they cross as uint16 / uint8 views."""

    raw = True

    @staticmethod
    def conv(x, name):
        if x is None:
            return None
        d = getattr(x, "dtype", None)
        if d in _PLAIN:  # a float16 / float32 q with a float8 KV cache (or the reverse): as it is
            return x
        try:
            u = _RAW[d]
        except (KeyError, TypeError):
            d = getattr(x, "dtype", type(x).__name__)
            raise _error(DTypeError, name,
                         f"{name}: expected dtype float32, float16, bfloat16 or float8_e4m3fn, got {d}") from None
        return x.view(u)


_numpy = _NumPy()
_numpy_raw = _NumPyRaw()


class _Generic(_NumPy):
    """Any other array type: its array-API namespace if it has one (CuPy and others), else the
    inputs are read through DLPack and the outputs are NumPy arrays."""

    def __init__(self, xp, device):
        self.xp = xp
        self.device = device

    def empty(self, like, shape, dtype):
        if self.device is None:
            return self.xp.empty(shape, dtype=dtype)
        return self.xp.empty(shape, dtype=dtype, device=self.device)

    def out_dtype(self, q):
        d = q.dtype
        if "float8" in str(d):
            return getattr(self.xp, "bfloat16")
        return d

    def f32(self, like):
        return self.xp.float32

    def int32_full(self, q, n, value):
        a = self.empty(q, (n,), self.xp.int32)
        a[...] = value
        return a

    def dtype(self, d, like):
        return d if d is not None else self.xp.float32


class _CuPy(_Generic):
    def __init__(self, cupy):
        super().__init__(cupy, None)

    def stream(self, q):
        return self.xp.cuda.get_current_stream().ptr

    def empty(self, like, shape, dtype):
        with like.device:
            return self.xp.empty(shape, dtype=dtype)


class _Jax(_Generic):
    """JAX arrays are immutable: inputs are read through DLPack, outputs are computed into NumPy
    arrays and returned as JAX arrays (CPU only)."""

    raw = True  # the NumPy outputs may be bfloat16 (ml_dtypes): they cross as uint16 views

    def __init__(self, jnp):
        super().__init__(jnp, None)

    def empty(self, like, shape, dtype):
        return _np.empty(shape, _np.dtype(dtype))

    @staticmethod
    def conv(x, name):
        if type(x) is _np.ndarray and x.dtype in _RAW:
            return x.view(_RAW[x.dtype])
        return x

    def out_dtype(self, q):
        d = _np.dtype(q.dtype)
        return _BF16 if (_FP8 is not None and d == _FP8) else d

    def f32(self, like):
        return _F32

    def int32_full(self, q, n, value):
        return _np.full((n,), value, _I32)

    def finish(self, x):
        return self.xp.asarray(x)

    def dtype(self, d, like):
        return _np.dtype(d) if d is not None else _F32


def _framework(q, *kv):
    """The adapter for q's framework (not torch: that has its own path). NumPy arrays cross as
    raw views when q, or k / v (a float8 KV cache under float16 queries), is an ml_dtypes type."""
    t = type(q)
    if t is _np.ndarray:
        raw = q.dtype in _RAW or any(isinstance(x, _np.ndarray) and x.dtype in _RAW for x in kv)
        return _numpy_raw if raw else _numpy
    mod = t.__module__ or ""
    if mod.startswith("cupy"):
        import cupy

        return _CuPy(cupy)
    if mod.startswith("jax"):
        import jax.numpy as jnp

        try:
            platform = next(iter(q.devices())).platform
        except Exception:  # pragma: no cover
            platform = "cpu"
        if platform != "cpu":
            raise _error(UnsupportedError, "q",
                         "q: JAX arrays on an accelerator are not supported (JAX arrays are immutable and fa4 "
                         "writes its outputs in place); use fa4.jax.attention (an XLA custom call, jit-able)")
        return _Jax(jnp)
    if isinstance(q, _np.ndarray):  # ndarray subclasses
        raw = q.dtype in _RAW or any(isinstance(x, _np.ndarray) and x.dtype in _RAW for x in kv)
        return _numpy_raw if raw else _numpy
    ns = getattr(q, "__array_namespace__", None)
    if ns is not None:
        return _Generic(ns(), getattr(q, "device", None))
    if hasattr(q, "__dlpack__") or hasattr(q, "__array_interface__") or hasattr(q, "__array__"):
        return None  # read through NumPy (see _as_numpy)
    raise _error(DTypeError, "q", f"q: expected an array/tensor (DLPack, buffer protocol or array interface), "
                                  f"got {t.__name__}")


def _as_numpy(x, name):
    """A zero-copy NumPy view of a DLPack / array-interface object (for frameworks fa4 has no
    adapter for); None stays None."""
    if x is None or type(x) is _np.ndarray or isinstance(x, (int, float)):
        return x
    try:
        if hasattr(x, "__dlpack__"):
            return _np.from_dlpack(x)
        return _np.asarray(x)
    except Exception as e:
        raise _error(DTypeError, name, f"{name}: cannot read this {type(x).__name__} as an array: {e}") from None


# ---------------------------------------------------------------------------------------------
# The calls.
# ---------------------------------------------------------------------------------------------


def _forward(fw, q, k, v, out, out_shape, lse_shape, sinks, q_descale, k_descale, v_descale,
             cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens, cache_batch_idx, page_table, k_new,
             v_new, scale, softcap, causal, wl, wr, chunk, max_seqlen_q, max_seqlen_k, num_splits,
             backend, num_threads):
    user_out = out is not None
    if not user_out:
        out = _alloc("out", fw.empty, q, out_shape, fw.out_dtype(q))
    lse = None if lse_shape is None else _alloc("lse", fw.empty, q, lse_shape, fw.f32(q))
    if type(cache_seqlens) is int:  # an int (checked by the caller): every sequence has this length
        n = out_shape[0] if cu_seqlens_q is None else _last_dim(cu_seqlens_q, "cu_seqlens_q") - 1
        cache_seqlens = _alloc("cache_seqlens", fw.int32_full, q, max(n, 0), cache_seqlens)
    if fw.raw:
        c = fw.conv
        args = (c(q, "q"), c(k, "k"), c(v, "v"), c(out, "out"))
        kn = c(k_new, "k_new")
        vn = c(v_new, "v_new")
    else:
        args = (q, k, v, out)
        kn, vn = k_new, v_new
    _ext.fwd(*args, lse, sinks, q_descale, k_descale, v_descale, cu_seqlens_q, cu_seqlens_k, seqused_k,
             cache_seqlens, cache_batch_idx, page_table, kn, vn,
             0.0 if scale is None else scale, softcap, causal, wl, wr, chunk, max_seqlen_q, max_seqlen_k,
             num_splits, _backend(backend), num_threads, fw.stream(q), fw.raw, fw.ws_alloc)
    if lse is None:
        return out if user_out else fw.finish(out)
    return (out if user_out else fw.finish(out)), fw.finish(lse)


def _fallback(fn, tensors, kwargs):
    """Re-runs `fn` with every array argument read as a NumPy array (unknown frameworks)."""
    conv = [_as_numpy(x, n) for n, x in tensors]
    return fn(*conv, **kwargs)


def attention(q, k, v, *, causal=False, window=(-1, -1), chunk=0, softcap=0.0, sinks=None, scale=None,
              return_lse=False, out=None, backend="auto", q_descale=None, k_descale=None, v_descale=None,
              num_splits=0, num_threads=0):
    """Exact attention on BSHD tensors: ``softmax(scale * q @ k^T + mask) @ v``.

    q [B, Sq, Hq, Dqk], k [B, Sk, Hkv, Dqk], v [B, Sk, Hkv, Dv] (any strides; Hq % Hkv == 0).
    Returns out [B, Sq, Hq, Dv] (q's dtype; bfloat16 for float8 inputs), allocated in q's
    framework, or (out, lse) with lse float32 [B, Hq, Sq] when ``return_lse``.

    causal: bottom-right aligned causal mask. window: (left, right) sliding window, -1 =
    unbounded. chunk: chunked causal attention (Llama 4). softcap: Gemma-2 logit soft-capping.
    sinks: float32 [Hq] attention-sink logits. scale: default 1/sqrt(Dqk). out: write here.
    backend: 'auto' | 'cpu' | 'cuda' | 'reference'. q/k/v_descale: float32 [B, Hkv] for float8.
    num_splits: 0 = heuristic, 1 = off, n = force n. num_threads: 0 = all cores (capped at the
    machine's hardware concurrency). Scalars are type-checked (bool is not an int, a float is not
    an int, a str is not a bool): a TypeError / ValueError naming the argument otherwise.
    """
    causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads = _options(
        causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads)
    if _is_torch(q):
        return _torch_impl.attention(q, k, v, causal, window, chunk, softcap, sinks, scale, return_lse, out,
                                     backend, q_descale, k_descale, v_descale, num_splits, num_threads)
    fw = _framework(q, k, v)
    if fw is None:
        return _fallback(attention, (("q", q), ("k", k), ("v", v)),
                         dict(causal=causal, window=window, chunk=chunk, softcap=softcap,
                              sinks=_as_numpy(sinks, "sinks"), scale=scale, return_lse=return_lse,
                              out=_as_numpy(out, "out"), backend=backend,
                              q_descale=_as_numpy(q_descale, "q_descale"),
                              k_descale=_as_numpy(k_descale, "k_descale"),
                              v_descale=_as_numpy(v_descale, "v_descale"), num_splits=num_splits,
                              num_threads=num_threads))
    B, Sq, Hq, _ = _rank(q, "q", 4, "[B, Sq, Hq, Dqk]")
    Dv = _last_dim(v, "v")
    wl, wr = window
    return _forward(fw, q, k, v, out, (B, Sq, Hq, Dv), (B, Hq, Sq) if return_lse else None, sinks, q_descale,
                    k_descale, v_descale, None, None, None, None, None, None, None, None, scale, softcap,
                    causal, wl, wr, chunk, 0, 0, num_splits, backend, num_threads)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, seqused_k=None, max_seqlen_q=0, max_seqlen_k=0,
                     causal=False, window=(-1, -1), chunk=0, softcap=0.0, sinks=None, scale=None,
                     return_lse=False, out=None, backend="auto", q_descale=None, k_descale=None,
                     v_descale=None, num_splits=0, num_threads=0):
    """Exact attention on packed variable-length sequences.

    q [Tq, Hq, Dqk], k [Tk, Hkv, Dqk], v [Tk, Hkv, Dv]; cu_seqlens_q / cu_seqlens_k int32 [B+1]
    (0, then running totals); seqused_k int32 [B] optional (valid keys per sequence).
    max_seqlen_q / max_seqlen_k are hints (0 = unknown). Returns out [Tq, Hq, Dv], or (out, lse)
    with lse float32 [Hq, Tq]. The other options are those of attention().
    """
    causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads = _options(
        causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads)
    max_seqlen_q = _args.as_seqlen_hint(max_seqlen_q, "max_seqlen_q")
    max_seqlen_k = _args.as_seqlen_hint(max_seqlen_k, "max_seqlen_k")
    if _is_torch(q):
        return _torch_impl.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
                                            max_seqlen_k, causal, window, chunk, softcap, sinks, scale,
                                            return_lse, out, backend, q_descale, k_descale, v_descale,
                                            num_splits, num_threads)
    fw = _framework(q, k, v)
    if fw is None:
        return _fallback(attention_varlen, (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q),
                                            ("cu_seqlens_k", cu_seqlens_k)),
                         dict(seqused_k=_as_numpy(seqused_k, "seqused_k"), max_seqlen_q=max_seqlen_q,
                              max_seqlen_k=max_seqlen_k, causal=causal, window=window, chunk=chunk,
                              softcap=softcap, sinks=_as_numpy(sinks, "sinks"), scale=scale,
                              return_lse=return_lse, out=_as_numpy(out, "out"), backend=backend,
                              q_descale=_as_numpy(q_descale, "q_descale"),
                              k_descale=_as_numpy(k_descale, "k_descale"),
                              v_descale=_as_numpy(v_descale, "v_descale"), num_splits=num_splits,
                              num_threads=num_threads))
    Tq, Hq, _ = _rank(q, "q", 3, "[Tq, Hq, Dqk]")
    Dv = _last_dim(v, "v")
    wl, wr = window
    return _forward(fw, q, k, v, out, (Tq, Hq, Dv), (Hq, Tq) if return_lse else None, sinks, q_descale,
                    k_descale, v_descale, cu_seqlens_q, cu_seqlens_k, seqused_k, None, None, None, None, None,
                    0.0 if scale is None else scale, softcap, causal, wl, wr, chunk, max_seqlen_q, max_seqlen_k, num_splits, backend,
                    num_threads)


def attention_with_kvcache(q, k_cache, v_cache, *, k=None, v=None, cache_seqlens=None, cache_batch_idx=None,
                           page_table=None, cu_seqlens_q=None, max_seqlen_q=0, num_splits=0, causal=False,
                           window=(-1, -1), chunk=0, softcap=0.0, sinks=None, scale=None, return_lse=False,
                           out=None, backend="auto", q_descale=None, k_descale=None, v_descale=None,
                           num_threads=0):
    """Attention over a KV cache, contiguous or paged, with optional append.

    q [B, Sq, Hq, Dqk] (or packed [Tq, Hq, Dqk] with cu_seqlens_q). Contiguous cache:
    k_cache/v_cache [Bc, Sk_max, Hkv, D] with cache_seqlens int32 [B] (or an int; default Sk_max)
    and optional cache_batch_idx int32 [B]. Paged cache: k_cache/v_cache [num_pages, page_size,
    Hkv, D] with page_table int32 [B, max_pages]. k/v [B, Snew, Hkv, D]: new rows written into
    the cache at cache_seqlens before attention (the caches are modified in place).
    Returns out (q's layout, q's dtype) or (out, lse).
    """
    causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads = _options(
        causal, window, chunk, softcap, scale, return_lse, num_splits, num_threads)
    max_seqlen_q = _args.as_seqlen_hint(max_seqlen_q, "max_seqlen_q")
    if cache_seqlens is not None and _is_scalar(cache_seqlens):
        cache_seqlens = _args.as_cache_seqlens_int(cache_seqlens)
    if _is_torch(q):
        return _torch_impl.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx,
                                                  page_table, cu_seqlens_q, max_seqlen_q, num_splits, causal,
                                                  window, chunk, softcap, sinks, scale, return_lse, out, backend,
                                                  q_descale, k_descale, v_descale, num_threads)
    fw = _framework(q, k_cache, v_cache)
    if fw is None:
        if k is not None:
            raise _error(UnsupportedError, "k", "k: appending into a cache needs NumPy, torch, CuPy or "
                                                "array-API arrays (this framework's arrays are read-only here)")
        return _fallback(attention_with_kvcache, (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)),
                         dict(cache_seqlens=_as_numpy(cache_seqlens, "cache_seqlens"),
                              cache_batch_idx=_as_numpy(cache_batch_idx, "cache_batch_idx"),
                              page_table=_as_numpy(page_table, "page_table"),
                              cu_seqlens_q=_as_numpy(cu_seqlens_q, "cu_seqlens_q"), max_seqlen_q=max_seqlen_q,
                              num_splits=num_splits, causal=causal, window=window, chunk=chunk, softcap=softcap,
                              sinks=_as_numpy(sinks, "sinks"), scale=scale, return_lse=return_lse,
                              out=_as_numpy(out, "out"), backend=backend,
                              q_descale=_as_numpy(q_descale, "q_descale"),
                              k_descale=_as_numpy(k_descale, "k_descale"),
                              v_descale=_as_numpy(v_descale, "v_descale"), num_threads=num_threads))
    if cu_seqlens_q is None:
        B, Sq, Hq, _ = _rank(q, "q", 4, "[B, Sq, Hq, Dqk]")
        Dv = _last_dim(v_cache, "v_cache")
        out_shape, lse_shape = (B, Sq, Hq, Dv), (B, Hq, Sq)
    else:
        Tq, Hq, _ = _rank(q, "q", 3, "[Tq, Hq, Dqk] (with cu_seqlens_q)")
        Dv = _last_dim(v_cache, "v_cache")
        out_shape, lse_shape = (Tq, Hq, Dv), (Hq, Tq)
    wl, wr = window
    return _forward(fw, q, k_cache, v_cache, out, out_shape, lse_shape if return_lse else None, sinks, q_descale,
                    k_descale, v_descale, cu_seqlens_q, None, None, cache_seqlens, cache_batch_idx, page_table, k,
                    v, scale, softcap, causal, wl, wr, chunk, max_seqlen_q, 0, num_splits, backend, num_threads)


def combine(out_partials, lse_partials, *, out=None, out_dtype=None, return_lse=False, backend="auto",
            num_threads=0):
    """Merges split-KV / ring / cascade partial results.

    out_partials float32 [S, B, Sq, H, Dv], lse_partials float32 [S, B, H, Sq]:
    lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) * out_s.
    Returns out [B, Sq, H, Dv] (out_dtype: default float32; or into ``out``), or (out, lse) with
    lse float32 [B, H, Sq] when ``return_lse``. Rows whose partial lse are all -inf give 0, -inf.
    """
    return_lse = _args.as_bool(return_lse, "return_lse")
    num_threads = _args.as_num_threads(num_threads)
    if _is_torch(out_partials):
        return _torch_impl.combine(out_partials, lse_partials, out, out_dtype, return_lse, backend, num_threads)
    fw = _framework(out_partials)
    if fw is None:
        return combine(_as_numpy(out_partials, "out_partials"), _as_numpy(lse_partials, "lse_partials"),
                       out=_as_numpy(out, "out"), out_dtype=out_dtype, return_lse=return_lse, backend=backend,
                       num_threads=num_threads)
    S, B, Sq, H, Dv = _rank(out_partials, "out_partials", 5, "[S, B, Sq, H, Dv]")
    user_out = out is not None
    if out_dtype is not None or not user_out:
        try:
            dt = fw.dtype(out_dtype, out_partials)
        except (TypeError, ValueError, AttributeError):
            raise _error(DTypeError, "out_dtype", f"out_dtype: not a dtype: {out_dtype!r}") from None
        if user_out and getattr(out, "dtype", dt) != dt:
            raise _error(InvalidArgumentError, "out_dtype",
                         f"out_dtype: {out_dtype!r} does not match out's dtype {out.dtype} (give one of the two)")
    if not user_out:
        out = _alloc("out", fw.empty, out_partials, (B, Sq, H, Dv), dt)
    lse = _alloc("lse", fw.empty, out_partials, (B, H, Sq), fw.f32(out_partials)) if return_lse else None
    raw = False
    o = out
    if _RAW and type(out) is _np.ndarray and out.dtype in _RAW:
        raw = True
        o = out.view(_RAW[out.dtype])
    _ext.combine(out_partials, lse_partials, o, lse, _backend(backend), num_threads, fw.stream(out_partials), raw)
    res = out if user_out else fw.finish(out)
    return (res, fw.finish(lse)) if return_lse else res


def backend_info():
    """[(name, available, detail)] for the backends of this build on this machine."""
    return [tuple(x) for x in _ext.backend_info()]


def backend_available(name):
    """True if `name` ('cpu', 'cuda', 'reference', 'auto') can run here."""
    return bool(_ext.backend_available(_backend(name)))
