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
    mx = s.max(-1, keepdims=True, initial=-np.inf)  # (initial: Sk = 0 with no sink)
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
    if q.shape[0] == 0:
        return np.zeros(q.shape[:3] + v.shape[3:]), np.zeros((0, q.shape[2], q.shape[1]))
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


def varlen_ref(q, k, v, cu_q, cu_k, seqused_k=None, **kw):
    """Packed: q [Tq, Hq, D], k/v [Tk, Hkv, D] -> out [Tq, Hq, Dv], lse [Hq, Tq]."""
    Tq, Hq, _ = q.shape
    out = np.zeros((Tq, Hq, v.shape[-1]))
    lse = np.full((Hq, Tq), -np.inf)
    for b in range(len(cu_q) - 1):
        q0, q1 = cu_q[b], cu_q[b + 1]
        k0, k1 = cu_k[b], cu_k[b + 1]
        if seqused_k is not None:
            k1 = k0 + seqused_k[b]
        o, l = attention_one(q[q0:q1], k[k0:k1], v[k0:k1], **kw)
        out[q0:q1] = o
        lse[:, q0:q1] = l
    return out, lse


def gather_cache(k_cache, b, length, cache_batch_idx=None, page_table=None):
    """The first `length` keys of sequence b in a contiguous or paged cache."""
    if page_table is None:
        c = b if cache_batch_idx is None else cache_batch_idx[b]
        return k_cache[c, :length]
    page = k_cache.shape[1]
    npages = -(-length // page)
    rows = np.concatenate([k_cache[page_table[b, i]] for i in range(npages)], axis=0) if npages else k_cache[:0, 0]
    return rows[:length]


def append_ref(k_cache, k_new, cache_seqlens, cache_batch_idx=None, page_table=None):
    """The cache after writing k_new[b] at positions cache_seqlens[b]... (a copy)."""
    kc = np.array(k_cache, copy=True)
    B, snew = k_new.shape[:2]
    for b in range(B):
        for j in range(snew):
            pos = cache_seqlens[b] + j
            if page_table is None:
                c = b if cache_batch_idx is None else cache_batch_idx[b]
                kc[c, pos] = k_new[b, j]
            else:
                page = kc.shape[1]
                kc[page_table[b, pos // page], pos % page] = k_new[b, j]
    return kc


def kvcache_ref(q, k_cache, v_cache, cache_seqlens=None, cache_batch_idx=None, page_table=None, **kw):
    """Dense q [B, Sq, Hq, D] over a (paged) cache: out [B, Sq, Hq, Dv], lse [B, Hq, Sq]."""
    B = q.shape[0]
    if page_table is None:
        cap = k_cache.shape[1]
    else:
        cap = k_cache.shape[1] * page_table.shape[1]
    outs, lses = [], []
    for b in range(B):
        n = cap if cache_seqlens is None else int(cache_seqlens[b])
        kb = gather_cache(k_cache, b, n, cache_batch_idx, page_table)
        vb = gather_cache(v_cache, b, n, cache_batch_idx, page_table)
        o, l = attention_one(q[b], kb, vb, **kw)
        outs.append(o)
        lses.append(l)
    return np.stack(outs), np.stack(lses)


def combine_ref(out_partials, lse_partials):
    """out_partials [S, B, Sq, H, D], lse_partials [S, B, H, Sq] -> out [B, Sq, H, D], lse [B, H, Sq]."""
    op = f64(out_partials)
    lp = f64(lse_partials)
    mx = lp.max(0)
    mxs = np.where(np.isfinite(mx), mx, 0.0)
    w = np.exp(lp - mxs)  # [S, B, H, Sq]
    den = w.sum(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.where(den > 0, np.log(den) + mxs, -np.inf)
        wn = np.where(den > 0, w / np.where(den > 0, den, 1), 0.0)
    out = np.einsum("sbhq,sbqhd->bqhd", wn, op)
    return out, lse
