import numpy as np

import fa4
from reference import attention_ref, tol_check


def test_import_and_backends():
    names = [b[0] for b in fa4.backend_info()]
    assert names == ["reference", "cpu", "cuda"]
    assert fa4.backend_available("cpu")
    assert isinstance(fa4.__version__, str)


def test_dense_fp32_matches_reference(rng):
    q = rng.standard_normal((2, 5, 4, 16)).astype(np.float32)
    k = rng.standard_normal((2, 7, 2, 16)).astype(np.float32)
    v = rng.standard_normal((2, 7, 2, 8)).astype(np.float32)
    out, lse = fa4.attention(q, k, v, causal=True, return_lse=True)
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    assert out.shape == (2, 5, 4, 8) and out.dtype == np.float32
    tol_check(out, ref, "float32")
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3)


def test_import_without_torch_import():
    import os
    import subprocess
    import sys

    code = "import fa4, sys; assert 'torch' not in sys.modules, 'torch imported'; print(fa4.__version__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                       env=dict(os.environ, FA4_IMPORT_TORCH="0"))
    assert r.returncode == 0, r.stderr
