"""Arrays that are not NumPy arrays: DLPack-only objects, array-API objects, ndarray subclasses."""
import numpy as np
import pytest

import fa4
from reference import attention_ref, tol_check, varlen_ref
from util import rand


class DLPackOnly:
    """Exposes nothing but the DLPack protocol (like an unknown framework's tensor)."""

    def __init__(self, a):
        self._a = a
        self.shape = a.shape
        self.dtype = a.dtype

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class ArrayAPI(DLPackOnly):
    """An array-API object: outputs are allocated through its namespace (here: wrapped NumPy)."""

    class _NS:
        float32 = np.float32
        int32 = np.int32

        @staticmethod
        def empty(shape, dtype=None, device=None):
            return ArrayAPI(np.empty(shape, dtype))

    def __array_namespace__(self, api_version=None):
        return self._NS

    def __setitem__(self, k, val):
        self._a[k] = val

    @property
    def device(self):
        return "cpu"


class Sub(np.ndarray):
    pass


def test_dlpack_only_objects(rng):
    q, k, v = (rand(rng, (1, 4, 2, 8)) for _ in range(3))
    out, lse = fa4.attention(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), causal=True, return_lse=True)
    assert type(out) is np.ndarray  # no namespace to allocate in: NumPy
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3, rtol=0)


def test_dlpack_only_varlen(rng):
    cu_q = np.array([0, 2, 5], np.int32)
    q, k, v = rand(rng, (5, 2, 8)), rand(rng, (5, 2, 8)), rand(rng, (5, 2, 8))
    out = fa4.attention_varlen(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), DLPackOnly(cu_q), DLPackOnly(cu_q))
    tol_check(out, varlen_ref(q, k, v, cu_q, cu_q)[0], "float32")


def test_array_api_namespace_allocation(rng):
    q, k, v = (rand(rng, (1, 3, 2, 8)) for _ in range(3))
    out = fa4.attention(ArrayAPI(q), ArrayAPI(k), ArrayAPI(v))
    assert isinstance(out, ArrayAPI)
    tol_check(out._a, attention_ref(q, k, v)[0], "float32")


def test_mixed_dlpack_inputs_with_numpy_q(rng):
    q, k, v = (rand(rng, (1, 3, 2, 8)) for _ in range(3))
    out = fa4.attention(q, DLPackOnly(k), memoryview(v))  # DLPack and the buffer protocol
    tol_check(out, attention_ref(q, k, v)[0], "float32")


def test_ndarray_subclass(rng):
    q, k, v = (rand(rng, (1, 3, 2, 8)).view(Sub) for _ in range(3))
    out = fa4.attention(q, k, v)
    tol_check(out, attention_ref(np.asarray(q), np.asarray(k), np.asarray(v))[0], "float32")


def _jax_cpu():
    jax = pytest.importorskip("jax", reason="jax is not installed")
    cpu = jax.devices("cpu")[0]
    return jax, jax.numpy, (lambda x: jax.device_put(x, cpu))


def test_jax_cpu_if_installed(rng):
    jax, jnp, put = _jax_cpu()
    q, k, v = (rand(rng, (1, 3, 2, 8)) for _ in range(3))
    out = fa4.attention(put(q), put(k), put(v), causal=True)
    assert "jax" in type(out).__module__
    tol_check(np.asarray(out), attention_ref(q, k, v, causal=True)[0], "float32")


def test_jax_bf16_and_lse_if_installed(rng):
    jax, jnp, put = _jax_cpu()
    q, k, v = (rand(rng, (1, 4, 2, 16)) for _ in range(3))
    jq, jk, jv = (put(x).astype(jnp.bfloat16) for x in (q, k, v))
    out, lse = fa4.attention(jq, jk, jv, return_lse=True)
    assert out.dtype == jnp.bfloat16 and lse.dtype == jnp.float32
    ref, ref_lse = attention_ref(np.asarray(jq.astype(jnp.float32)), np.asarray(jk.astype(jnp.float32)),
                                 np.asarray(jv.astype(jnp.float32)))
    tol_check(np.asarray(out.astype(jnp.float32)), ref, "bfloat16")
    np.testing.assert_allclose(np.asarray(lse), ref_lse, atol=1e-3, rtol=0)


def test_jax_accelerator_arrays_rejected_if_present(rng):
    jax = pytest.importorskip("jax", reason="jax is not installed")
    gpus = [d for d in jax.devices() if d.platform != "cpu"]
    if not gpus:
        pytest.skip("jax sees no accelerator")
    q = jax.device_put(rand(rng, (1, 3, 2, 8)), gpus[0])
    with pytest.raises(fa4.UnsupportedError) as ei:
        fa4.attention(q, q, q)
    assert ei.value.argument == "q"


def _cupy_or_skip():
    cp = pytest.importorskip("cupy", reason="cupy is not installed")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as e:  # no driver
        pytest.skip(f"no CUDA device ({e})")
    return cp


def test_cupy_if_available(rng):
    cp = _cupy_or_skip()
    q, k, v = (rand(rng, (2, 33, 4, 64)).astype(np.float16) for _ in range(3))
    cq, ck, cv = (cp.asarray(x) for x in (q, k, v))
    if not fa4.backend_available("cuda"):
        with pytest.raises(fa4.BackendUnavailableError):
            fa4.attention(cq, ck, cv)
        return
    out, lse = fa4.attention(cq, ck, cv, causal=True, return_lse=True)
    assert isinstance(out, cp.ndarray) and out.dtype == cp.float16 and isinstance(lse, cp.ndarray)
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    tol_check(cp.asnumpy(out), ref, "float16")
    np.testing.assert_allclose(cp.asnumpy(lse), ref_lse, atol=1e-3, rtol=0)
