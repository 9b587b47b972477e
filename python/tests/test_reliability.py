"""Issue 12, the Python side: no argument reaches undefined behaviour or an unnamed error.

- item 4: a tuple is never taken as a tensor descriptor (it used to be a raw pointer);
- item 11: every scalar argument of every public function is type- and range-checked by one
  checker (fa4/_args.py): TypeError / ValueError subclasses naming the argument;
- item 3: a huge num_threads is capped (it used to kill the interpreter inside OpenMP);
- item 5: allocation failures are fa4.OutOfMemoryError naming the output; the extension turns
  every C++ exception into an fa4 error.
"""
import numpy as np
import pytest

import fa4
from fa4 import _fa4 as ext
from fa4.flash_attn_compat import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
from reference import attention_ref, combine_ref, kvcache_ref, tol_check
from util import isolated, poison, rand


def named(exc_type, argument, fn, *args, **kw):
    with pytest.raises(exc_type) as ei:
        fn(*args, **kw)
    e = ei.value
    assert isinstance(e, fa4.Fa4Error), repr(e)
    assert e.argument == argument, (e.argument, str(e))
    assert argument in str(e)
    return e


@pytest.fixture
def qkv(rng):
    return rand(rng, (2, 4, 4, 8)), rand(rng, (2, 5, 2, 8)), rand(rng, (2, 5, 2, 8))


# ---- item 4: raw pointers ----

DESCRIPTOR = "(16, 0, (4,), (1,), 0, 0)"  # (ptr, dtype, shape, strides, device, index): once trusted


def test_tuples_are_not_tensors_in_a_fresh_process():
    # In a child: before the fix these segfaulted (the tuple's first element was dereferenced).
    r = isolated(f"""
import numpy as np, fa4
q = np.zeros((2, 4, 4, 8), np.float32)
calls = [
    ("sinks", lambda: fa4.attention(q, q, q, sinks={DESCRIPTOR})),
    ("out", lambda: fa4.attention(q, q, q, out=(4096, 0, (2, 4, 4, 8), (128, 32, 8, 1), 0, 0))),
    ("k", lambda: fa4.attention(q, (4096, 0, (2, 4, 4, 8), (128, 32, 8, 1), 0, 0), q)),
    ("q_descale", lambda: fa4.attention(q, q, q, q_descale={DESCRIPTOR})),
    ("cache_seqlens", lambda: fa4.attention_with_kvcache(q, q, q, cache_seqlens={DESCRIPTOR})),
    ("page_table", lambda: fa4.attention_with_kvcache(q, q, q, page_table=(16, 4, (2, 1), (1, 1), 0, 0))),
    ("cache_batch_idx", lambda: fa4.attention_with_kvcache(q, q, q, cache_batch_idx={DESCRIPTOR})),
    ("cu_seqlens_q", lambda: fa4.attention_varlen(q[0], q[0], q[0], (16, 4, (3,), (1,), 0, 0), np.array([0, 2, 4], np.int32))),
    ("seqused_k", lambda: fa4.attention_varlen(q[0], q[0], q[0], np.array([0, 4], np.int32), np.array([0, 4], np.int32),
                                               seqused_k=(16, 4, (1,), (1,), 0, 0))),
    ("out", lambda: fa4.combine(np.zeros((2, 1, 3, 2, 8), np.float32), np.zeros((2, 1, 2, 3), np.float32),
                                out=(4096, 0, (1, 3, 2, 8), (48, 16, 8, 1), 0, 0))),
    ("lse_partials", lambda: fa4.combine(np.zeros((2, 1, 3, 2, 8), np.float32), (16, 0, (2, 1, 2, 3), (6, 6, 3, 1), 0, 0))),
]
for name, call in calls:
    try:
        call()
        print("ACCEPTED", name)
    except fa4.DTypeError as e:
        assert e.argument == name and "tuple" in str(e), (name, e.argument, str(e))
print("done")
""")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "ACCEPTED" not in r.stdout and r.stdout.strip().endswith("done"), r.stdout


def test_tuple_out_leaves_real_out_untouched(qkv):
    q, k, v = qkv
    out = poison((2, 4, 4, 8), np.float32)
    named(fa4.DTypeError, "sinks", fa4.attention, q, k, v, out=out, sinks=(16, 0, (4,), (1,), 0, 0))
    assert np.all(np.isnan(out))


def test_extension_has_no_descriptor_path(qkv):
    # The extension itself (not only the Python layer) rejects a tuple where a tensor goes.
    q, k, v = qkv
    out = np.empty((2, 4, 4, 8), np.float32)
    args = [q, k, v, out] + [None] * 13 + [0.0, 0.0, False, -1, -1, 0, 0, 0, 0, 1, 0, 0, False, None]
    args[5] = (16, 0, (4,), (1,), 0, 0)
    named(fa4.DTypeError, "sinks", ext.fwd, *args)


# ---- item 11: scalars ----

BAD_SCALARS = [
    (dict(window=(2 ** 70, 0)), fa4.InvalidArgumentError, "window"),
    (dict(window=(0, -2 ** 63 - 1)), fa4.InvalidArgumentError, "window"),
    (dict(window=(1.0, 0)), fa4.DTypeError, "window"),
    (dict(window=(True, 0)), fa4.DTypeError, "window"),
    (dict(window="ab"), fa4.InvalidArgumentError, "window"),
    (dict(window=(1, 2, 3)), fa4.InvalidArgumentError, "window"),
    (dict(window=None), fa4.InvalidArgumentError, "window"),
    (dict(chunk=2 ** 64), fa4.InvalidArgumentError, "chunk"),
    (dict(chunk="3"), fa4.DTypeError, "chunk"),
    (dict(chunk=2.0), fa4.DTypeError, "chunk"),
    (dict(chunk=True), fa4.DTypeError, "chunk"),
    (dict(scale="0.1"), fa4.DTypeError, "scale"),
    (dict(scale=1j), fa4.DTypeError, "scale"),
    (dict(scale=True), fa4.DTypeError, "scale"),
    (dict(scale=0.0), fa4.InvalidArgumentError, "scale"),  # 0 would silently mean "default"
    (dict(scale=-0.5), fa4.InvalidArgumentError, "scale"),
    (dict(scale=1e-50), fa4.InvalidArgumentError, "scale"),  # underflows float32 to 0
    (dict(scale=1e39), fa4.InvalidArgumentError, "scale"),  # overflows float32 to inf
    (dict(scale=10 ** 400), fa4.InvalidArgumentError, "scale"),  # beyond double
    (dict(scale=float("inf")), fa4.InvalidArgumentError, "scale"),
    (dict(softcap=None), fa4.DTypeError, "softcap"),
    (dict(softcap="1"), fa4.DTypeError, "softcap"),
    (dict(softcap=float("nan")), fa4.InvalidArgumentError, "softcap"),
    (dict(softcap=1e39), fa4.InvalidArgumentError, "softcap"),
    (dict(num_splits=1.5), fa4.DTypeError, "num_splits"),
    (dict(num_splits=2 ** 31), fa4.InvalidArgumentError, "num_splits"),
    (dict(num_splits=False), fa4.DTypeError, "num_splits"),
    (dict(num_threads=None), fa4.DTypeError, "num_threads"),
    (dict(num_threads=-1), fa4.InvalidArgumentError, "num_threads"),
    (dict(num_threads=2 ** 31), fa4.InvalidArgumentError, "num_threads"),
    (dict(num_threads=4.0), fa4.DTypeError, "num_threads"),
    (dict(causal="no"), fa4.DTypeError, "causal"),
    (dict(causal=1), fa4.DTypeError, "causal"),
    (dict(causal=None), fa4.DTypeError, "causal"),
    (dict(return_lse="yes"), fa4.DTypeError, "return_lse"),
    (dict(backend=3), fa4.InvalidArgumentError, "backend"),
    (dict(backend=["cpu"]), fa4.InvalidArgumentError, "backend"),
]


@pytest.mark.parametrize("kw,exc,argument", BAD_SCALARS, ids=[f"{a}={list(k.values())[0]!r}"[:40] for k, _, a in BAD_SCALARS])
def test_bad_scalar_attention(qkv, kw, exc, argument):
    q, k, v = qkv
    out = poison((2, 4, 4, 8), np.float32)
    named(exc, argument, fa4.attention, q, k, v, out=out, **kw)
    assert np.all(np.isnan(out))


@pytest.mark.parametrize("kw,exc,argument", BAD_SCALARS[::3], ids=[a for _, _, a in BAD_SCALARS[::3]])
def test_bad_scalar_varlen_and_kvcache(rng, kw, exc, argument):
    q, k = rand(rng, (5, 2, 8)), rand(rng, (6, 2, 8))
    cu_q, cu_k = np.array([0, 2, 5], np.int32), np.array([0, 3, 6], np.int32)
    named(exc, argument, fa4.attention_varlen, q, k, k, cu_q, cu_k, **kw)
    qc, kc = rand(rng, (2, 1, 2, 8)), rand(rng, (2, 4, 2, 8))
    named(exc, argument, fa4.attention_with_kvcache, qc, kc, kc, cache_seqlens=3, **kw)


@pytest.mark.parametrize("fn,kw,exc,argument", [
    ("varlen", dict(max_seqlen_q=1.5), fa4.DTypeError, "max_seqlen_q"),
    ("varlen", dict(max_seqlen_k=-1), fa4.InvalidArgumentError, "max_seqlen_k"),
    ("varlen", dict(max_seqlen_k=2 ** 63), fa4.InvalidArgumentError, "max_seqlen_k"),
    ("kvcache", dict(cache_seqlens=2 ** 40), fa4.InvalidArgumentError, "cache_seqlens"),
    ("kvcache", dict(cache_seqlens=-1), fa4.InvalidArgumentError, "cache_seqlens"),
    ("kvcache", dict(cache_seqlens=True), fa4.DTypeError, "cache_seqlens"),
    ("kvcache", dict(cache_seqlens=2.0), fa4.DTypeError, "cache_seqlens"),
    ("kvcache", dict(cache_seqlens="3"), fa4.DTypeError, "cache_seqlens"),
    ("kvcache", dict(cache_seqlens=[3, 3]), fa4.DTypeError, "cache_seqlens"),
    ("kvcache", dict(max_seqlen_q="1"), fa4.DTypeError, "max_seqlen_q"),
])
def test_bad_scalar_specific(rng, fn, kw, exc, argument):
    if fn == "varlen":
        q, k = rand(rng, (5, 2, 8)), rand(rng, (6, 2, 8))
        named(exc, argument, fa4.attention_varlen, q, k, k, np.array([0, 2, 5], np.int32),
              np.array([0, 3, 6], np.int32), **kw)
    else:
        q, kc = rand(rng, (2, 1, 2, 8)), rand(rng, (2, 4, 2, 8))
        named(exc, argument, fa4.attention_with_kvcache, q, kc, kc, **kw)


def test_bad_scalar_combine(rng):
    op, lp = rand(rng, (2, 1, 3, 2, 8)), rand(rng, (2, 1, 2, 3))
    named(fa4.DTypeError, "num_threads", fa4.combine, op, lp, num_threads=None)
    named(fa4.InvalidArgumentError, "num_threads", fa4.combine, op, lp, num_threads=2 ** 40)
    named(fa4.DTypeError, "return_lse", fa4.combine, op, lp, return_lse="no")
    named(fa4.DTypeError, "out_dtype", fa4.combine, op, lp, out_dtype="not-a-dtype")
    named(fa4.InvalidArgumentError, "backend", fa4.combine, op, lp, backend=None.__class__)


def test_bad_scalar_flash_attn_compat(rng):
    # The wrappers check under flash-attn's names: the caller sees the name they wrote.
    q, k = rand(rng, (1, 3, 2, 8)), rand(rng, (1, 4, 2, 8))
    named(fa4.DTypeError, "softmax_scale", flash_attn_func, q, k, k, softmax_scale="0.1")
    named(fa4.InvalidArgumentError, "softmax_scale", flash_attn_func, q, k, k, softmax_scale=0.0)
    named(fa4.DTypeError, "window_size", flash_attn_func, q, k, k, window_size=(1.5, 0))
    named(fa4.InvalidArgumentError, "window_size", flash_attn_func, q, k, k, window_size=(2 ** 64, 0))
    named(fa4.DTypeError, "causal", flash_attn_func, q, k, k, causal="False")
    named(fa4.DTypeError, "deterministic", flash_attn_func, q, k, k, deterministic="yes")
    named(fa4.DTypeError, "return_attn_probs", flash_attn_func, q, k, k, return_attn_probs=1)
    named(fa4.DTypeError, "dropout_p", flash_attn_func, q, k, k, dropout_p=None)
    named(fa4.DTypeError, "softcap", flash_attn_func, q, k, k, softcap="2")
    cu = np.array([0, 3], np.int32)
    named(fa4.DTypeError, "max_seqlen_q", flash_attn_varlen_func, q[0], k[0], k[0], cu, np.array([0, 4], np.int32),
          1.5, 4)
    kc = rand(rng, (1, 6, 2, 8))
    named(fa4.DTypeError, "num_splits", flash_attn_with_kvcache, q, kc, kc, cache_seqlens=4, num_splits=None)
    named(fa4.DTypeError, "return_softmax_lse", flash_attn_with_kvcache, q, kc, kc, cache_seqlens=4,
          return_softmax_lse="yes")


def test_numpy_scalars_are_fine(qkv):
    q, k, v = qkv
    out = fa4.attention(q, k, v, causal=np.bool_(True), window=(np.int64(2), np.int32(0)), chunk=np.int16(0),
                        scale=np.float32(0.3), softcap=np.float64(5.0), num_splits=np.int64(1),
                        num_threads=np.uint8(1), return_lse=np.bool_(False))
    ref, _ = attention_ref(q, k, v, causal=True, window=(2, 0), scale=float(np.float32(0.3)), softcap=5.0)
    tol_check(out, ref, "float32")
    qc, kc = q[:, :1], rand(np.random.default_rng(1), (2, 6, 2, 8))
    out = fa4.attention_with_kvcache(qc, kc, kc, cache_seqlens=np.int64(4))
    tol_check(out, kvcache_ref(qc, kc, kc, cache_seqlens=[4, 4])[0], "float32")


def test_extension_scalars_are_named(qkv):
    # Defence in depth: the extension's own readers name the argument (no std::bad_cast) even when
    # called without the Python layer's checks.
    q, k, v = qkv
    base = [q, k, v, np.empty((2, 4, 4, 8), np.float32)] + [None] * 13 + \
           [0.0, 0.0, False, -1, -1, 0, 0, 0, 0, 1, 0, 0, False, None]
    for index, value, exc, argument in ((17, "0.1", fa4.DTypeError, "scale"), (18, None, fa4.DTypeError, "softcap"),
                                        (19, 1, fa4.DTypeError, "causal"),
                                        (20, 2 ** 70, fa4.InvalidArgumentError, "window_left"),
                                        (22, 1.5, fa4.DTypeError, "chunk_size"),
                                        (25, 2 ** 31, fa4.InvalidArgumentError, "num_splits"),
                                        (26, 9, fa4.InvalidArgumentError, "backend"),
                                        (27, None, fa4.DTypeError, "num_threads"),
                                        (18, 1e39, fa4.InvalidArgumentError, "softcap")):
        args = list(base)
        args[index] = value
        named(exc, argument, ext.fwd, *args)
    op, lp = np.zeros((2, 1, 3, 2, 8), np.float32), np.zeros((2, 1, 2, 3), np.float32)
    named(fa4.DTypeError, "num_threads", ext.combine, op, lp, np.empty((1, 3, 2, 8), np.float32), None, 1, "x", 0, False)


# ---- item 3: num_threads ----

def test_huge_num_threads_is_capped():
    # Before the cap: 'libgomp: Thread creation failed' killed the interpreter. In a child so that
    # a regression fails this test rather than the run.
    r = isolated("""
import numpy as np, fa4
from reference import attention_ref, combine_ref, tol_check
rng = np.random.default_rng(0)
q = rng.standard_normal((1, 1, 8, 64)).astype(np.float32)
k = rng.standard_normal((1, 1024, 8, 64)).astype(np.float32)
for backend in ("cpu", "reference", "auto"):
    tol_check(fa4.attention(q, k, k, num_threads=100000, backend=backend), attention_ref(q, k, k)[0], "float32")
op = rng.standard_normal((4, 1, 64, 8, 64)).astype(np.float32)
lp = rng.standard_normal((4, 1, 8, 64)).astype(np.float32)
tol_check(fa4.combine(op, lp, num_threads=100000), combine_ref(op, lp)[0], "float32")
tol_check(fa4.combine(op, lp, num_threads=2 ** 31 - 1, backend="cpu"), combine_ref(op, lp)[0], "float32")
print("ok")
""")
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout, r.stderr[-2000:])


# ---- item 5: allocation failures and C++ exceptions ----

def test_output_allocation_failure_is_named():
    # D = 0 makes q/k/v empty, but lse [B, Hq, Sq] float32 is 4 TiB: the failure names lse.
    z = np.zeros((2 ** 40, 1, 1, 0), np.float32)
    named(fa4.OutOfMemoryError, "lse", fa4.attention, z, z, z, return_lse=True)
    # combine: out [B, Sq, H, 0] is empty, lse [B, H, Sq] is not (lse_partials is a stride-0 view).
    op = np.zeros((1, 2 ** 40, 1, 1, 0), np.float32)
    lp = np.broadcast_to(np.float32(0), (1, 2 ** 40, 1, 1))
    named(fa4.OutOfMemoryError, "lse", fa4.combine, op, lp, return_lse=True)


def test_cache_seqlens_int_with_huge_batch_is_named():
    # An int cache_seqlens becomes an int32 [B] tensor; with B = 2^40 (q empty) that is 4 TiB.
    q = np.zeros((2 ** 40, 1, 1, 0), np.float32)
    kc = np.zeros((1, 4, 1, 0), np.float32)
    named(fa4.OutOfMemoryError, "cache_seqlens", fa4.attention_with_kvcache, q, kc, kc, cache_seqlens=2)


def test_no_bare_cpp_exception_in_a_fresh_process():
    # q/k/v/out [2^40, 1, 0, 8], zero elements. The library refuses the batch (sequences are
    # int32-indexed) or, were it accepted, may run out of memory on it (issue 12 item 5);
    # whatever happens, it is a result or a fa4 error, never a bare MemoryError / RuntimeError
    # and never an abort.
    r = isolated("""
import numpy as np, fa4
z = np.zeros((2 ** 40, 1, 0, 8), np.float32)
for call in (lambda: fa4.attention(z, z, z, out=z), lambda: fa4.attention(z, z, z)):
    try:
        call()
        print("result")
    except fa4.Fa4Error as e:
        print("fa4 error", type(e).__name__)
""")
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert all(l in ("result", "fa4 error OutOfMemoryError", "fa4 error InvalidArgumentError")
               for l in r.stdout.split("\n") if l), r.stdout
