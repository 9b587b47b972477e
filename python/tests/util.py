"""Input generation for the tests."""
import numpy as np

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
    FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
except ImportError:  # pragma: no cover
    ml_dtypes = None
    BF16 = FP8 = None

DISTS = ("normal", "uniform", "outliers")


def rand(rng, shape, dtype=np.float32, dist="normal"):
    """Random data (never zeros): normal, uniform, or normal with large outliers in some rows
    (which force many softmax rescales)."""
    if dist == "uniform":
        x = rng.uniform(-1.0, 1.0, shape)
    else:
        x = rng.standard_normal(shape)
        if dist == "outliers" and x.size:
            flat = x.reshape(-1, shape[-1])
            rows = rng.random(flat.shape[0]) < 0.2
            flat[rows] *= 8.0
            x = flat.reshape(shape)
    return x.astype(dtype)


def dtype_of(name):
    return {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16}[name]


def poison(shape, dtype):
    """An output buffer full of NaN, so an element that is not written shows up."""
    a = np.empty(shape, dtype)
    a[...] = np.nan
    return a


def isolated(src, timeout=120):
    """Runs `src` in a fresh interpreter (tests/ on sys.path) and returns the CompletedProcess: for
    calls that used to crash the process, so that a regression fails the test instead of killing
    the whole pytest run. A negative returncode is the signal that killed the child."""
    import subprocess
    import sys
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {here!r})\n" + src],
                          capture_output=True, text=True, timeout=timeout)
