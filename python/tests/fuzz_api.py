"""Seeded random fuzzing of fa4's public Python API (issue 12, "must exist" item 5).

    python fuzz_api.py --seed S [--cases N] [--seconds T]

Each case is a small valid problem (dense, varlen, KV cache with or without append, paged, combine,
or the flash_attn_compat wrapper) with zero or more mutations near and across the validation
boundaries: views (non-contiguous, negative, stride-0, transposed, misaligned), zero-size
dimensions, wrong dtypes and ranks, tuples / lists / None / numbers where tensors go, wrong-shape
or read-only out, bad cu_seqlens / cache_seqlens / indices, and every scalar given wrong types,
bools, huge ints, NaN, numpy scalars. Every mutation says what must happen:

    valid  -> a result equal to tests/reference.py within DESIGN.md §4 tolerances;
    error  -> an fa4.Fa4Error whose .argument is named in its message, with `out` (and, for
              append, the caches) untouched;
    maybe  -> either of the two (e.g. misaligned pointers: accepted on x86 today, to be refused).

Anything else -- another exception type, a wrong result, a write on error, a crash -- fails. The
line "case N: ..." is printed (flushed) before each call, so a crash (run in a child by
test_fuzz.py) still shows the seed and the case that killed it.
"""
import argparse
import sys
import time

import numpy as np

import fa4
from fa4.flash_attn_compat import flash_attn_func
from reference import (append_ref, attention_ref, combine_ref, kvcache_ref, tol_check, varlen_ref)
from util import BF16

DTYPES = ["float32", "float16"] + (["bfloat16"] if BF16 is not None else [])
NPDT = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16}

# Wrong values for scalars: (value, what must happen). Near and across the boundaries.
BAD_INT = [None, True, False, 1.5, 2.0, "3", 1j, [1], (1,), 2 ** 63, -2 ** 63 - 1, 2 ** 64, 2 ** 70, np.float64(1.0)]
BAD_REAL = [None, True, "0.1", 1j, [0.5], float("nan"), float("inf"), -float("inf"), 1e39, 10 ** 400, -1.0]
BAD_BOOL = [None, 1, 0, "no", "", 1.0, [True], np.int64(1)]
BAD_TENSOR = [(16, 0, (4,), (1,), 0, 0), (4096, 0, (2, 4, 4, 8), (128, 32, 8, 1), 0, 0), [1.0, 2.0], [[1.0]], 3, 2.5,
              "q", {}, b"\x00" * 16, object()]


class Case:
    def __init__(self, kind):
        self.kind = kind
        self.kw = {}
        self.expect = "valid"
        self.notes = []
        self.touched = set()  # arguments already mutated (one mutation per argument)
        self.out_wrong_shape = False

    def set(self, expect, note, name=None):
        # the strongest expectation wins: error > maybe > valid; `name` is then left alone by the
        # later mutations (which could otherwise undo this one)
        if name:
            self.touched.add(name)
        order = {"valid": 0, "maybe": 1, "error": 2}
        if order[expect] > order[self.expect]:
            self.expect = expect
        self.notes.append(note)


def rand(rng, shape, dt):
    x = rng.standard_normal(shape)
    return x.astype(NPDT[dt]) if dt != "bfloat16" else x.astype(np.float32).astype(BF16)


def view_of(rng, x, allow_broadcast):
    """The same values as x through another layout: (view, note, expectation)."""
    kinds = ["strided", "negative", "transposed", "fortran", "misaligned"] + (["broadcast"] if allow_broadcast else [])
    kind = kinds[rng.integers(len(kinds))]
    if x.ndim == 0 or x.size == 0:
        return x, "empty", "valid"
    if kind == "strided":  # every other element of a bigger array along one axis
        ax = int(rng.integers(x.ndim))
        shape = list(x.shape)
        shape[ax] *= 2
        big = np.zeros(shape, x.dtype)
        idx = [slice(None)] * x.ndim
        idx[ax] = slice(None, None, 2)
        big[tuple(idx)] = x
        return big[tuple(idx)], f"strided(axis {ax})", "valid"
    if kind == "negative":
        ax = int(rng.integers(x.ndim))
        idx = [slice(None)] * x.ndim
        idx[ax] = slice(None, None, -1)
        flipped = np.ascontiguousarray(x[tuple(idx)])
        # the core refuses negative strides today, naming the tensor (DESIGN.md says "any strides")
        return flipped[tuple(idx)], f"negative stride(axis {ax})", "maybe"
    if kind == "transposed":
        if x.ndim < 3:
            return np.asfortranarray(x), "fortran", "valid"
        store = np.ascontiguousarray(np.swapaxes(x, 1, 2))  # BHSD storage, BSHD view
        return np.swapaxes(store, 1, 2), "transposed storage", "valid"
    if kind == "fortran":
        return np.asfortranarray(x), "fortran", "valid"
    if kind == "misaligned":
        buf = np.zeros(x.nbytes + 1, np.uint8)
        y = buf[1:].view(x.dtype).reshape(x.shape)  # data pointer at an odd address
        y[...] = x
        return y, "misaligned", "maybe"  # UB today on the cpu backends (issue 12 item 8): core work
    # broadcast: stride 0 along the leading axis (inputs only)
    # (the values change when the axis is > 1; the reference reads the same view)
    return np.broadcast_to(x[:1], x.shape), "broadcast(axis 0)", "valid"


def scalar_mutation(rng, c, names):
    """Replace one scalar argument by a wrong value (or a fine numpy scalar)."""
    names = [n for n in names if n not in c.touched]
    if not names:
        return
    name = names[rng.integers(len(names))]
    c.touched.add(name)
    cur = c.kw.get(name)
    if name in ("causal", "return_lse", "return_attn_probs"):
        if rng.random() < 0.25:
            c.kw[name] = np.bool_(bool(cur))
            c.notes.append(f"{name}=np.bool_")
            return
        c.kw[name] = BAD_BOOL[rng.integers(len(BAD_BOOL))]
    elif name in ("scale", "softcap", "softmax_scale"):
        if rng.random() < 0.25 and cur is not None:
            c.kw[name] = np.float32(cur) if name != "softcap" else np.float64(cur)
            c.notes.append(f"{name}=numpy {c.kw[name]!r}")
            return
        c.kw[name] = BAD_REAL[rng.integers(len(BAD_REAL))]
        if c.kw[name] is None and name != "softcap":  # None is the default scale
            c.notes.append(f"{name}=None")
            return
    elif name in ("window", "window_size"):
        w = list(cur if cur is not None else (-1, -1))
        if name == "window_size":  # flash-attn's rules: None and any negative edge are unbounded (valid)
            bad = [x for x in BAD_INT if x is not None]
            w[rng.integers(2)] = bad[rng.integers(len(bad))]
        else:
            w[rng.integers(2)] = BAD_INT[rng.integers(len(BAD_INT))] if rng.random() < 0.8 else -2
        c.kw[name] = tuple(w) if rng.random() < 0.8 else "ab"
    else:  # ints: chunk, num_splits, num_threads, max_seqlen_*, cache_seqlens
        if rng.random() < 0.25 and isinstance(cur, int):
            c.kw[name] = np.int64(cur)
            c.notes.append(f"{name}=np.int64")
            return
        c.kw[name] = BAD_INT[rng.integers(len(BAD_INT))] if rng.random() < 0.85 else -7
    c.set("error", f"{name}={c.kw[name]!r:.40}")


def tensor_mutation(rng, c, name, required):
    """Replace a tensor argument by a non-tensor, a wrong dtype / rank / shape, or drop it."""
    src = c.kw if name in c.kw else c.args
    x = src[name]
    r = rng.random()
    expect = "error"
    if r < 0.35:
        pool = [t for t in BAD_TENSOR if not (name == "cache_seqlens" and isinstance(t, (int, float)))]
        new = pool[rng.integers(len(pool))]
        note = f"{name}={type(new).__name__} {new!r:.30}"
    elif r < 0.55 and isinstance(x, np.ndarray):
        new = x.astype([np.float64, np.int64, np.int32, np.float16, np.float32][rng.integers(5)])
        if new.dtype == x.dtype:
            new = x.astype(np.float64)
        note = f"{name} dtype {new.dtype}"
    elif r < 0.75 and isinstance(x, np.ndarray) and x.ndim:
        new = np.zeros(x.shape[:-1], x.dtype) if rng.random() < 0.5 else x[None]
        note = f"{name} rank {new.ndim}"
    elif r < 0.9 and isinstance(x, np.ndarray) and x.ndim:
        # one dimension one larger (zeros): an error where that dimension is constrained, a valid
        # problem otherwise (Sq, heads under MQA, ...): then the result is checked as usual
        ax = int(rng.integers(x.ndim))
        shape = list(x.shape)
        shape[ax] += 1
        new = np.zeros(shape, x.dtype)
        note = f"{name} shape {tuple(shape)}"
        expect = "maybe"
    elif required:
        new, note = None, f"{name}=None"
    else:  # an optional tensor dropped: sinks, cache_seqlens, seqused_k, page_table, ...
        new, note, expect = None, f"{name} dropped", "maybe"
    src[name] = new
    c.set(expect, note)


def gen_dense(rng, c, varlen=False):
    dt = DTYPES[rng.integers(len(DTYPES))]
    B = int(rng.choice([0, 1, 1, 2, 3])) if not varlen else int(rng.integers(1, 4))
    hkv = int(rng.integers(1, 3))
    hq = hkv * int(rng.integers(1, 3))
    D, Dv = int(rng.integers(1, 17)), int(rng.integers(1, 17))
    c.dt = dt
    if varlen:
        lq, lk = rng.integers(0, 5, B), rng.integers(0, 6, B)
        c.cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
        c.cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
        c.args = dict(q=rand(rng, (int(lq.sum()), hq, D), dt), k=rand(rng, (int(lk.sum()), hkv, D), dt),
                      v=rand(rng, (int(lk.sum()), hkv, Dv), dt), cu_seqlens_q=c.cu_q, cu_seqlens_k=c.cu_k)
    else:
        Sq, Sk = int(rng.integers(0, 6)), int(rng.integers(0, 7))
        c.args = dict(q=rand(rng, (B, Sq, hq, D), dt), k=rand(rng, (B, Sk, hkv, D), dt), v=rand(rng, (B, Sk, hkv, Dv), dt))
    mask_options(rng, c)
    c.hq, c.D, c.Dv = hq, D, Dv


def mask_options(rng, c):
    mode = rng.integers(4)
    if mode == 1:
        c.kw["causal"] = True
    elif mode == 2:
        c.kw["window"] = (int(rng.integers(-1, 4)), int(rng.integers(-1, 4)))
    elif mode == 3:
        c.kw["chunk"] = int(rng.integers(1, 4))
    if rng.random() < 0.3:
        c.kw["softcap"] = float(rng.choice([0.0, 0.5, 5.0]))
    if rng.random() < 0.3:
        c.kw["scale"] = float(rng.choice([0.1, 0.5, 2.0]))
    if rng.random() < 0.3:
        c.kw["num_splits"] = int(rng.integers(0, 4))
    if rng.random() < 0.3:
        c.kw["num_threads"] = int(rng.choice([0, 1, 2, 100000]))
    if rng.random() < 0.3:
        c.kw["backend"] = str(rng.choice(["auto", "cpu", "reference"]))
    c.kw["return_lse"] = bool(rng.random() < 0.4)


def ref_kw(c):
    k = {n: c.kw[n] for n in ("causal", "window", "chunk", "softcap", "scale") if n in c.kw}
    if c.kw.get("sinks") is not None:
        k["sinks"] = c.kw["sinks"]
    return k


def gen(rng):
    kind = ["dense", "dense", "varlen", "kvcache", "append", "combine", "compat"][rng.integers(7)]
    c = Case(kind)
    if kind in ("dense", "compat"):
        gen_dense(rng, c)
        if rng.random() < 0.3:
            c.kw["sinks"] = rng.standard_normal(c.hq).astype(np.float32)
        tensors = ["q", "k", "v"] + (["sinks"] if "sinks" in c.kw else [])
        scalars = ["causal", "window", "chunk", "softcap", "scale", "num_splits", "num_threads", "return_lse"]
    elif kind == "varlen":
        gen_dense(rng, c, varlen=True)
        tensors = ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k"]
        scalars = ["causal", "window", "chunk", "softcap", "scale", "max_seqlen_q", "max_seqlen_k", "return_lse"]
        c.kw["max_seqlen_q"] = int(rng.integers(0, 6))
        if rng.random() < 0.3:
            c.kw["seqused_k"] = np.array([rng.integers(0, n + 1) for n in np.diff(c.cu_k)], np.int32)
            tensors.append("seqused_k")
        r = rng.random()
        if r < 0.1:
            c.args["cu_seqlens_q"] = np.concatenate([[1], c.cu_q[1:]]).astype(np.int32)
            c.set("error", "cu_seqlens_q[0] = 1", "cu_seqlens_q")
        elif r < 0.2 and len(c.cu_k) > 2 and c.cu_k[-1] > 0:
            bad = c.cu_k.copy()
            bad[1] = bad[-1] + 1
            c.args["cu_seqlens_k"] = bad
            c.set("error", "cu_seqlens_k decreasing / beyond Tk", "cu_seqlens_k")
        elif r < 0.25 and "seqused_k" in c.kw:
            c.kw["seqused_k"] = c.kw["seqused_k"] + np.diff(c.cu_k).max() + 1
            c.set("error", "seqused_k beyond its slot", "seqused_k")
    elif kind in ("kvcache", "append"):
        gen_cache(rng, c, append=kind == "append")
        tensors = ["q", "k_cache", "v_cache"] + [n for n in ("cache_seqlens", "page_table", "cache_batch_idx", "k", "v")
                                                  if isinstance(c.kw.get(n), np.ndarray)]
        scalars = ["causal", "window", "softcap", "scale", "num_splits", "return_lse"]
    else:
        gen_combine(rng, c)
        tensors = ["out_partials", "lse_partials"]
        scalars = ["return_lse", "num_threads"]
    if kind == "compat":
        # flash_attn_func's names
        c.kw = {"softmax_scale": c.kw.get("scale"), "causal": c.kw.get("causal", False) or "chunk" in c.kw,
                "window_size": c.kw.get("window", (-1, -1)), "softcap": c.kw.get("softcap", 0.0),
                "return_attn_probs": c.kw.get("return_lse", False)}
        tensors = ["q", "k", "v"]
        scalars = ["softmax_scale", "causal", "window_size", "softcap", "return_attn_probs"]
    # the out buffer (poisoned, maybe strided), watched on error
    if kind not in ("compat",) and rng.random() < 0.4:
        shape, dtype = expected_out(c)
        out = np.full(shape, np.nan, dtype)
        if rng.random() < 0.3:
            out, note, exp = view_of(rng, out, allow_broadcast=False)
            c.set(exp, "out " + note)
        r = rng.random()
        if r < 0.15:
            out = np.full(shape[:-1] + (shape[-1] + 1,), np.nan, dtype)
            c.out_wrong_shape = True  # decided after the mutations (which may change Dv)
            c.notes.append("out wrong shape")
        elif r < 0.25:
            out = np.full(shape, np.nan, np.float64)
            c.set("error", "out float64")
        elif r < 0.3 and out.size > 1:
            out = np.broadcast_to(np.full(shape[-1:], np.nan, dtype), shape)
            c.set("error", "out broadcast (read-only / aliasing)")
        elif r < 0.35 and out.size:
            out.setflags(write=False)
            c.set("error", "out read-only")
        c.kw["out"] = out
    # mutations
    for _ in range(int(rng.choice([0, 0, 1, 1, 2]))):
        r = rng.random()
        if r < 0.4:
            scalar_mutation(rng, c, scalars)
        elif r < 0.75:
            names = [t for t in tensors if t not in c.touched]
            if not names:
                continue
            name = names[rng.integers(len(names))]
            c.touched.add(name)
            tensor_mutation(rng, c, name, required=name in c.args)
        else:  # a valid view of an input
            name = [t for t in tensors if isinstance((c.args | c.kw).get(t), np.ndarray) and t not in c.touched]
            if not name:
                continue
            name = name[rng.integers(len(name))]
            c.touched.add(name)
            src = c.args if name in c.args else c.kw
            if src[name].dtype == np.int32 and rng.random() < 0.5:
                continue
            y, note, exp = view_of(rng, src[name], allow_broadcast=name in ("q", "k", "v", "out_partials", "lse_partials"))
            if name in ("k_cache", "v_cache") and c.kind == "append" and not y.flags.writeable:
                exp = "error"
            src[name] = y
            c.set(exp, f"{name} {note}")
    if c.out_wrong_shape and final_out_shape(c) != tuple(c.kw["out"].shape):
        # (seed 3 case 155: v's head dim one larger made the "wrong" out the right shape)
        c.set("error", "(out shape wrong for the final arguments)")
    return c


def final_out_shape(c):
    """out's shape for the arguments as mutated (None when q / v are no longer arrays)."""
    a = c.args
    if c.kind == "combine":
        op = a["out_partials"]
        return (op.shape[1], op.shape[2], op.shape[3], op.shape[4]) if isinstance(op, np.ndarray) and op.ndim == 5 else None
    q, v = a["q"], a["v_cache" if c.kind in ("kvcache", "append") else "v"]
    if not (isinstance(q, np.ndarray) and isinstance(v, np.ndarray) and q.ndim and v.ndim):
        return None
    return tuple(q.shape[:-1]) + (v.shape[-1],)


def gen_cache(rng, c, append):
    dt = DTYPES[rng.integers(len(DTYPES))]
    c.dt = dt
    B, hkv = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    hq, D, Dv = hkv * int(rng.integers(1, 3)), int(rng.integers(1, 17)), int(rng.integers(1, 17))
    Sq = int(rng.integers(1, 4))
    snew = int(rng.integers(1, 3)) if append else 0
    paged = rng.random() < 0.4
    if paged:
        page, npages = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        cap = page * npages
        kc, vc = rand(rng, (B * npages, page, hkv, D), dt), rand(rng, (B * npages, page, hkv, Dv), dt)
        c.kw["page_table"] = rng.permutation(B * npages).astype(np.int32).reshape(B, npages)
    else:
        cap = int(rng.integers(1, 7))
        kc, vc = rand(rng, (B, cap, hkv, D), dt), rand(rng, (B, cap, hkv, Dv), dt)
        if rng.random() < 0.3:
            c.kw["cache_batch_idx"] = rng.permutation(B).astype(np.int32)
    snew = min(snew, cap)
    lens = rng.integers(0, cap - snew + 1, B).astype(np.int32)
    c.kw["cache_seqlens"] = lens if rng.random() < 0.8 or append else int(lens[0])
    if not isinstance(c.kw["cache_seqlens"], np.ndarray):
        lens[:] = c.kw["cache_seqlens"]
    c.lens = lens
    c.args = dict(q=rand(rng, (B, Sq, hq, D), dt), k_cache=kc, v_cache=vc)
    if append:
        c.kw["k"], c.kw["v"] = rand(rng, (B, snew, hkv, D), dt), rand(rng, (B, snew, hkv, Dv), dt)
    c.snew = snew
    mask_options(rng, c)
    c.kw.pop("chunk", None)  # (not part of the cache reference's cases here)
    c.hq, c.D, c.Dv = hq, D, Dv
    r = rng.random()
    if r < 0.1 and isinstance(c.kw["cache_seqlens"], np.ndarray):
        c.kw["cache_seqlens"] = lens + cap + 1
        c.set("error", "cache_seqlens beyond capacity", "cache_seqlens")
    elif r < 0.15:
        c.kw["cache_seqlens"] = -1 if rng.random() < 0.5 else 2 ** 40
        c.touched.add("cache_seqlens")
        c.set("error", f"cache_seqlens={c.kw['cache_seqlens']}")
    elif r < 0.2 and "cache_batch_idx" in c.kw:
        c.kw["cache_batch_idx"] = c.kw["cache_batch_idx"] + B
        c.set("error", "cache_batch_idx out of range", "cache_batch_idx")
    elif r < 0.25 and "page_table" in c.kw:
        c.kw["page_table"] = c.kw["page_table"] - 1 - c.kw["page_table"].max()
        # only the pages that hold keys are read (and checked): none when every length is 0
        c.set("error" if (lens + snew).max() > 0 else "maybe", "page_table negative", "page_table")


def gen_combine(rng, c):
    S, B, Sq, H, Dv = (int(rng.integers(1, 4)), int(rng.integers(0, 3)), int(rng.integers(0, 4)),
                       int(rng.integers(1, 3)), int(rng.integers(1, 9)))
    lp = rng.standard_normal((S, B, H, Sq)).astype(np.float32)
    lp[rng.random(lp.shape) < 0.2] = -np.inf
    c.args = dict(out_partials=rng.standard_normal((S, B, Sq, H, Dv)).astype(np.float32), lse_partials=lp)
    c.kw["return_lse"] = bool(rng.random() < 0.5)
    if rng.random() < 0.3:
        c.kw["out_dtype"] = np.float16
        c.dt = "float16"
    else:
        c.dt = "float32"
    if rng.random() < 0.3:
        c.kw["num_threads"] = int(rng.choice([1, 2, 100000]))
    if rng.random() < 0.1:
        c.kw["out_dtype"] = ["nope", 3, np.float64][rng.integers(3)]
        c.set("error", f"out_dtype={c.kw['out_dtype']!r}")


def expected_out(c):
    if c.kind == "combine":
        S, B, Sq, H, Dv = c.args["out_partials"].shape
        return (B, Sq, H, Dv), NPDT[c.dt] if c.kw.get("out_dtype") is None else np.dtype(np.float16)
    q = c.args["q"]
    return q.shape[:-1] + (c.Dv,), NPDT[c.dt]


def call(c):
    a, kw = c.args, dict(c.kw)
    if c.kind == "dense":
        return fa4.attention(a["q"], a["k"], a["v"], **kw)
    if c.kind == "compat":
        return flash_attn_func(a["q"], a["k"], a["v"], **kw)
    if c.kind == "varlen":
        return fa4.attention_varlen(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], **kw)
    if c.kind in ("kvcache", "append"):
        return fa4.attention_with_kvcache(a["q"], a["k_cache"], a["v_cache"], **kw)
    return fa4.combine(a["out_partials"], a["lse_partials"], **kw)


def reference(c, before):
    """(out, lse) of the reference for the case as given (raises if the arguments make no sense)."""
    a, kw = c.args, c.kw
    if c.kind == "compat":
        rk = dict(scale=kw["softmax_scale"], causal=kw["causal"], window=kw["window_size"], softcap=kw["softcap"])
        return attention_ref(a["q"], a["k"], a["v"], **rk)
    if c.kind == "dense":
        return attention_ref(a["q"], a["k"], a["v"], **ref_kw(c))
    if c.kind == "varlen":
        return varlen_ref(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["cu_seqlens_k"], seqused_k=kw.get("seqused_k"),
                          **ref_kw(c))
    if c.kind in ("kvcache", "append"):
        kc, vc = before if before is not None else (a["k_cache"], a["v_cache"])
        lens = None if kw.get("cache_seqlens") is None else \
            np.broadcast_to(np.asarray(kw["cache_seqlens"]), (a["q"].shape[0],)).astype(np.int64)  # None: all
        if c.kind == "append":
            kc = append_ref(kc, kw["k"], lens, kw.get("cache_batch_idx"), kw.get("page_table"))
            vc = append_ref(vc, kw["v"], lens, kw.get("cache_batch_idx"), kw.get("page_table"))
            np.testing.assert_array_equal(np.asarray(a["k_cache"], np.float64), np.asarray(kc, np.float64))
            np.testing.assert_array_equal(np.asarray(a["v_cache"], np.float64), np.asarray(vc, np.float64))
            lens = lens + c.snew
        return kvcache_ref(a["q"], kc, vc, cache_seqlens=lens, cache_batch_idx=kw.get("cache_batch_idx"),
                           page_table=kw.get("page_table"), **ref_kw(c))
    return combine_ref(a["out_partials"], a["lse_partials"])


def check(c, i):
    # what must be untouched on error: out, and the caches that an append writes into
    watch = [w for w in [c.kw.get("out")] + ([c.args["k_cache"], c.args["v_cache"]] if c.kind == "append" else [])
             if isinstance(w, np.ndarray)]
    before = [np.array(w, copy=True).tobytes() for w in watch]
    caches = None
    if c.kind == "append" and all(isinstance(c.args[n], np.ndarray) for n in ("k_cache", "v_cache")):
        caches = [np.array(c.args[n], copy=True) for n in ("k_cache", "v_cache")]
    try:
        res = call(c)
    except fa4.Fa4Error as e:
        arg = e.argument
        assert isinstance(arg, str) and arg and arg in str(e), f"error names no argument: {type(e).__name__}: {e}"
        assert c.expect != "valid", f"a valid case was refused: {type(e).__name__}: {e}"
        for w, b in zip(watch, before):
            assert np.array(w, copy=True).tobytes() == b, f"written on error ({type(e).__name__}: {e})"
        return "error"
    assert c.expect != "error", f"accepted, expected an fa4 error ({'; '.join(c.notes)})"
    if isinstance(res, tuple) and c.kind == "compat":
        res = res[:2]
    with_lse = isinstance(res, tuple)
    out, lse = res if with_lse else (res, None)
    try:
        ref_out, ref_lse = reference(c, caches)
    except AssertionError:
        raise
    except Exception as e:  # fa4 accepted what the reference cannot make sense of
        raise AssertionError(f"accepted, but the reference fails on it: {type(e).__name__}: {e}") from None
    if "out" in c.kw:
        assert out is c.kw["out"], "out= given but another array returned"
    dt = "float16" if c.kind == "combine" and c.kw.get("out_dtype") is not None else c.dt
    out = np.asarray(out).astype(np.float64)
    if c.kind == "varlen":
        # Packed tokens past cu_seqlens_q[-1] belong to no sequence (padding, allowed: last <=
        # Tq) and are not written -- as in flash-attn; compare the rows that are.
        t = int(c.args["cu_seqlens_q"][-1])
        out, ref_out = out[:t], ref_out[:t]
        if lse is not None:
            lse, ref_lse = np.asarray(lse)[:, :t], ref_lse[:, :t]
    tol_check(out, ref_out, dt)
    if lse is not None:
        lf = np.asarray(lse, np.float64)
        assert lf.shape == ref_lse.shape and np.all(np.isinf(lf) == np.isinf(ref_lse))
        fin = np.isfinite(ref_lse)
        assert np.allclose(lf[fin], ref_lse[fin], atol=2e-2 if dt != "float32" else 1e-3), "lse"
    return "ok"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--seconds", type=float, default=0.0, help="run until this long (overrides --cases)")
    o = ap.parse_args(argv)
    np.seterr(all="ignore")  # casts of random data to int / float16 (mutations) may overflow
    rng = np.random.default_rng(o.seed)
    t0 = time.time()
    stats = {"ok": 0, "error": 0}
    i = 0
    while (time.time() - t0 < o.seconds) if o.seconds > 0 else (i < o.cases):
        c = gen(rng)
        print(f"case {i}: {c.kind} expect={c.expect} {'; '.join(c.notes)}", flush=True)
        try:
            stats[check(c, i)] += 1
        except AssertionError as e:
            print(f"FAIL seed={o.seed} case {i}: {c.kind} expect={c.expect} {'; '.join(c.notes)}\n  {e}\n"
                  f"  args: { {k: (getattr(v, 'shape', v), getattr(v, 'dtype', type(v).__name__)) for k, v in c.args.items()} }\n"
                  f"  kw: { {k: (getattr(v, 'shape', None), v if not hasattr(v, 'shape') else v.dtype) for k, v in c.kw.items()} }",
                  flush=True)
            return 1
        i += 1
    print(f"fuzz: seed={o.seed} {i} cases ({stats['ok']} results checked against the reference, "
          f"{stats['error']} fa4 errors) in {time.time() - t0:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
