"""NumPy float64 reference for the tests (independent of the library)."""
import numpy as np

TOL = {  # DESIGN.md §4: (relative L2, max abs)
    "float32": (1e-5, 1e-4),
    "float16": (2e-3, 1e-2),
    "bfloat16": (1e-2, 5e-2),
}


def f64(x):
    return np.asarray(x).astype(np.float64)


def visible(sq, sk, causal=False, window=(-1, -1), chunk=0):
    """[sq, sk] bool: key j visible to query i (bottom-right aligned)."""
    i = np.arange(sq)[:, None] + (sk - sq)
    j = np.arange(sk)[None, :]
    left, right = window
    if causal or chunk > 0:
        right = 0
    m = np.ones((sq, sk), bool)
    if left >= 0:
        m &= j >= i - left
    if right >= 0:
        m &= j <= i + right
    if chunk > 0:
        m &= (j // chunk) == (i // chunk)
    return m


def attention_one(q, k, v, scale=None, causal=False, window=(-1, -1), chunk=0, softcap=0.0, sinks=None):
    """One sequence: q [Sq, Hq, D], k [Sk, Hkv, D], v [Sk, Hkv, Dv] -> out [Sq, Hq, Dv], lse [Hq, Sq]."""
    q, k, v = f64(q), f64(k), f64(v)
    sq, hq, d = q.shape
    sk, hkv, dv = v.shape
    g = hq // hkv
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    k = np.repeat(k, g, axis=1)
    v = np.repeat(v, g, axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    m = visible(sq, sk, causal, window, chunk)
    s = np.where(m[None], s, -np.inf)
    if sinks is not None:
        s = np.concatenate([s, np.broadcast_to(f64(sinks)[:, None, None], (hq, sq, 1))], axis=2)
    mx = s.max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    p = np.exp(s - mx)
    den = p.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(den[..., 0] > 0, np.log(den[..., 0]) + mx[..., 0], -np.inf)
        p = np.where(den > 0, p / np.where(den > 0, den, 1), 0.0)
    if sinks is not None:
        p = p[..., :-1]
    out = np.einsum("hqk,khd->qhd", p, v)
    return out, lse


def attention_ref(q, k, v, **kw):
    """Dense BSHD: out [B, Sq, Hq, Dv], lse [B, Hq, Sq]."""
    outs, lses = zip(*[attention_one(q[b], k[b], v[b], **kw) for b in range(q.shape[0])])
    return np.stack(outs), np.stack(lses)


def tol_check(out, ref, dtype):
    rel_tol, abs_tol = TOL[dtype]
    o = f64(out)
    r = f64(ref)
    assert o.shape == r.shape, (o.shape, r.shape)
    assert np.all(np.isfinite(o) == np.isfinite(r))
    err = np.abs(o - r)
    nref = np.linalg.norm(r)
    rel = np.linalg.norm(o - r) / nref if nref > 0 else np.linalg.norm(o - r)
    assert rel <= rel_tol, f"relative L2 error {rel:.3g} > {rel_tol}"
    assert err.max(initial=0) <= abs_tol, f"max abs error {err.max():.3g} > {abs_tol}"
