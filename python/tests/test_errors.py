"""Errors surface as ValueError / TypeError subclasses naming the argument; nothing is written."""
import numpy as np
import pytest

import fa4
from util import BF16, poison, rand


@pytest.fixture
def qkv(rng):
    return rand(rng, (2, 4, 4, 8)), rand(rng, (2, 5, 2, 8)), rand(rng, (2, 5, 2, 8))


def check(exc_type, argument, fn, *args, **kw):
    with pytest.raises(exc_type) as ei:
        fn(*args, **kw)
    e = ei.value
    assert isinstance(e, fa4.Fa4Error)
    assert e.argument == argument, (e.argument, str(e))
    assert argument in str(e)
    return e


def test_hierarchy():
    assert issubclass(fa4.InvalidArgumentError, ValueError)
    assert issubclass(fa4.DTypeError, TypeError)
    assert issubclass(fa4.UnsupportedError, ValueError)
    assert issubclass(fa4.BackendUnavailableError, RuntimeError)


def test_shape_errors(qkv):
    q, k, v = qkv
    check(fa4.InvalidArgumentError, "k", fa4.attention, q, k[..., :4], v)  # head dim
    check(fa4.InvalidArgumentError, "v", fa4.attention, q, k, v[:, :3])  # Sk mismatch
    check(fa4.InvalidArgumentError, "k", fa4.attention, q, np.concatenate([k, k[:, :, :1]], 2),
          np.concatenate([v, v[:, :, :1]], 2))  # Hq % Hkv
    check(fa4.InvalidArgumentError, "k", fa4.attention, q, k[:1], v[:1])  # batch
    check(fa4.InvalidArgumentError, "q", fa4.attention, q[0], k, v)  # rank
    check(fa4.InvalidArgumentError, "q", fa4.attention, np.zeros((1, 2, 2, 300), np.float32),
          np.zeros((1, 2, 2, 300), np.float32), np.zeros((1, 2, 2, 8), np.float32))  # head dim > 256


def test_dtype_errors(qkv):
    q, k, v = qkv
    check(fa4.DTypeError, "k", fa4.attention, q, k.astype(np.float16), v)
    check(fa4.DTypeError, "q", fa4.attention, q.astype(np.float64), k, v)
    check(fa4.DTypeError, "q", fa4.attention, q.astype(np.int64), k, v)
    check(fa4.DTypeError, "v", fa4.attention, q, k, [[1.0]])  # not an array
    check(fa4.DTypeError, "q", fa4.attention, "q", k, v)
    check(fa4.DTypeError, "sinks", fa4.attention, q, k, v, sinks=np.zeros(4, np.float64))
    check(fa4.DTypeError, "out", fa4.attention, q, k, v, out=np.empty((2, 4, 4, 8), np.float16))


@pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed")
def test_bf16_mixed_with_other_dtypes(qkv):
    q, k, v = qkv
    check(fa4.DTypeError, "k", fa4.attention, q.astype(BF16), k, v.astype(BF16))
    check(fa4.DTypeError, "k", fa4.attention, q.astype(BF16), k.view(np.uint16)[..., :8], v.astype(BF16))


def test_value_errors(qkv):
    q, k, v = qkv
    check(fa4.InvalidArgumentError, "window_right", fa4.attention, q, k, v, causal=True, window=(-1, 2))
    check(fa4.InvalidArgumentError, "window_left", fa4.attention, q, k, v, window=(-5, -1))
    check(fa4.InvalidArgumentError, "window", fa4.attention, q, k, v, window=3)
    check(fa4.InvalidArgumentError, "softcap", fa4.attention, q, k, v, softcap=-1.0)
    check(fa4.InvalidArgumentError, "scale", fa4.attention, q, k, v, scale=float("nan"))
    check(fa4.InvalidArgumentError, "chunk_size", fa4.attention, q, k, v, chunk=-2)
    check(fa4.InvalidArgumentError, "num_splits", fa4.attention, q, k, v, num_splits=-1)
    check(fa4.InvalidArgumentError, "backend", fa4.attention, q, k, v, backend="tpu")
    check(fa4.InvalidArgumentError, "sinks", fa4.attention, q, k, v, sinks=np.zeros(3, np.float32))
    check(fa4.InvalidArgumentError, "out", fa4.attention, q, k, v, out=np.empty((2, 4, 4, 7), np.float32))


def test_output_aliasing_rejected(qkv):
    q, k, v = qkv
    out = np.broadcast_to(np.zeros((1, 1, 1, 8), np.float32), (2, 4, 4, 8))
    with pytest.raises(fa4.Fa4Error) as ei:  # read-only (broadcast) output
        fa4.attention(q, k, v, out=out)
    assert ei.value.argument == "out"


def test_varlen_errors(rng):
    q = rand(rng, (5, 2, 8))
    k = rand(rng, (6, 2, 8))
    v = rand(rng, (6, 2, 8))
    good = np.array([0, 2, 5], np.int32)
    goodk = np.array([0, 3, 6], np.int32)
    check(fa4.DTypeError, "cu_seqlens_q", fa4.attention_varlen, q, k, v, good.astype(np.int64), goodk)
    check(fa4.InvalidArgumentError, "cu_seqlens_q", fa4.attention_varlen, q, k, v,
          np.array([1, 2, 5], np.int32), goodk)
    check(fa4.InvalidArgumentError, "cu_seqlens_q", fa4.attention_varlen, q, k, v,
          np.array([0, 3, 2], np.int32), goodk)
    check(fa4.InvalidArgumentError, "cu_seqlens_k", fa4.attention_varlen, q, k, v, good,
          np.array([0, 3, 9], np.int32))
    check(fa4.InvalidArgumentError, "cu_seqlens_k", fa4.attention_varlen, q, k, v, good,
          np.array([0, 6], np.int32))
    check(fa4.InvalidArgumentError, "seqused_k", fa4.attention_varlen, q, k, v, good, goodk,
          seqused_k=np.array([4, 1], np.int32))


def test_kvcache_errors(rng):
    q = rand(rng, (2, 1, 2, 8))
    kc = rand(rng, (2, 4, 2, 8))
    vc = rand(rng, (2, 4, 2, 8))
    check(fa4.InvalidArgumentError, "cache_seqlens", fa4.attention_with_kvcache, q, kc, vc,
          cache_seqlens=np.array([5, 1], np.int32))
    check(fa4.InvalidArgumentError, "cache_batch_idx", fa4.attention_with_kvcache, q, kc, vc,
          cache_batch_idx=np.array([0, 2], np.int32))
    check(fa4.InvalidArgumentError, "page_table", fa4.attention_with_kvcache, q, kc, vc,
          page_table=np.array([[0], [7]], np.int32))
    check(fa4.InvalidArgumentError, "cache_seqlens", fa4.attention_with_kvcache, q, kc, vc,
          k=rand(rng, (2, 1, 2, 8)), v=rand(rng, (2, 1, 2, 8)))  # append needs cache_seqlens
    check(fa4.InvalidArgumentError, "cache_seqlens", fa4.attention_with_kvcache, q, kc, vc,
          k=rand(rng, (2, 2, 2, 8)), v=rand(rng, (2, 2, 2, 8)), cache_seqlens=np.array([3, 0], np.int32))


def test_nothing_written_on_error(qkv):
    q, k, v = qkv
    out = poison((2, 4, 4, 8), np.float32)
    with pytest.raises(fa4.InvalidArgumentError):
        fa4.attention(q, k, v, out=out, softcap=-1.0)
    assert np.all(np.isnan(out))
    kc = rand(np.random.default_rng(0), (2, 4, 2, 8))
    before = kc.copy()
    with pytest.raises(fa4.InvalidArgumentError):
        fa4.attention_with_kvcache(q, kc, kc.copy(), k=k[:, :2], v=v[:, :2], cache_seqlens=np.array([3, 0], np.int32))
    np.testing.assert_array_equal(kc, before)


def test_cuda_backend_on_host_tensors(qkv):
    q, k, v = qkv
    check(fa4.InvalidArgumentError, "backend", fa4.attention, q, k, v, backend="cuda")


def test_combine_errors(rng):
    op = rand(rng, (2, 1, 3, 2, 8))
    lp = rand(rng, (2, 1, 2, 3))
    check(fa4.InvalidArgumentError, "lse_partials", fa4.combine, op, lp[:, :, :1])
    check(fa4.DTypeError, "out_partials", fa4.combine, op.astype(np.float16), lp)
    check(fa4.InvalidArgumentError, "out_partials", fa4.combine, op[0], lp)
