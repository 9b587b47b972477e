"""Context-parallel (ring) attention across processes and GPUs, on torch.distributed.

    import torch.distributed as dist, fa4.distributed as fd
    dist.init_process_group("nccl")                 # or "gloo" for CPU tensors
    q, k, v = (fd.shard(x) for x in (q_full, k_full, v_full))   # [B, S / world, H, D] each
    out = fd.ring_attention(q, k, v, causal=True)                 # this rank's rows of the output
    out_full = fd.unshard(out)                                    # every rank: [B, S, Hq, Dv]

Each rank holds a shard of the sequence (BSHD, sequence dimension 1) of q, k and v. With
``comm="ring"`` the K/V shards travel around the ring of ranks (one batched isend / irecv per
step, K and V packed in one message, double-buffered) while the attention of the shard in hand
runs; the per-step results (out, lse) are merged in fp32 with the LSE (DESIGN.md §1,
"Split-KV"). With ``comm="allgather"`` (Llama-3 style, for GQA where K/V are small) every rank
gathers the whole K/V once and computes its rows in one call per chunk.

Layouts (of the global sequence, the same for q and k/v): ``"contiguous"`` -- rank r holds
positions [r·S/W, (r+1)·S/W); ``"zigzag"`` -- the sequence is cut into 2W chunks and rank r holds
chunks r and 2W-1-r (the head-tail scheme of TransformerEngine / PyTorch context parallel), so a
causal mask gives every rank the same work. ``shard`` / ``unshard`` convert.

Masks are fa4's, on the *global* sequence: bottom-right aligned (the last query aligns with the
last key), causal, sliding window (left, right). Per step, each (query chunk, key chunk) pair is
classified: fully masked pairs are skipped, fully visible ones run without a mask, and partly
visible ones run with the window that reproduces the global mask on the pair (rows and keys that
see nothing cropped away). Sinks enter once, in the final merge.

Forward only: inputs that require grad (with grad mode on) are an error. Every check that could
make ranks disagree (shapes, dtypes, options, local errors) is agreed on through one small
all_gather before any point-to-point traffic, so a bad input raises the same fa4 error on every
rank instead of hanging.
"""

import math
import struct
import zlib

import torch
import torch.distributed as dist

from . import _args
from ._api import attention as _attention
from ._errors import _ALL, _error, DTypeError, Fa4Error, InvalidArgumentError, UnsupportedError

__all__ = ["ring_attention", "shard", "unshard"]

_LAYOUTS = ("zigzag", "contiguous")
_COMMS = ("ring", "allgather")
_DTYPES = {torch.float32: 1, torch.float16: 2, torch.bfloat16: 3}
_MSG = 384  # bytes of an error message carried to the other ranks
_ONE_CALL_AT_WORLD_1 = True  # (tests set False to run the ring's step machinery on one process)


# ---------------------------------------------------------------------------------------------
# Groups, layouts
# ---------------------------------------------------------------------------------------------


def _group_info(group):
    if not dist.is_available() or not dist.is_initialized():
        raise _error(InvalidArgumentError, "group",
                     "group: torch.distributed is not initialized (call torch.distributed.init_process_group first)")
    return dist.get_rank(group), dist.get_world_size(group)


def _global_rank(group, r):
    if group is None or group is dist.group.WORLD:
        return r
    return dist.get_global_rank(group, r)


def _check_layout(layout):
    if layout not in _LAYOUTS:
        raise _error(InvalidArgumentError, "layout", f"layout: must be 'zigzag' or 'contiguous', got {layout!r}")
    return layout


def _segments(layout, rank, world, n):
    """The global positions of a rank's shard of local length n: [(global start, length, local start)]."""
    if layout == "contiguous":
        return [(rank * n, n, 0)]
    h = n // 2
    return [(rank * h, h, 0), ((2 * world - 1 - rank) * h, h, h)]


def _dim(x, dim, name):
    if not isinstance(x, torch.Tensor):
        raise _error(DTypeError, name, f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    d = _args.as_int(dim, "dim")
    if not -x.dim() <= d < x.dim():
        raise _error(InvalidArgumentError, "dim", f"dim: {dim} is out of range for a {x.dim()}-d tensor")
    return d % x.dim()


def shard(x, group=None, layout="zigzag", *, dim=1, rank=None, world_size=None):
    """This rank's shard of ``x`` (the whole sequence, on every rank) along ``dim`` (1: BSHD).

    contiguous: the rank-th of W equal pieces (a view); zigzag: pieces r and 2W-1-r of 2W,
    concatenated (a new tensor). The length must divide by W (contiguous) or 2W (zigzag).
    ``rank`` / ``world_size`` override the group's (no process group needed then).
    """
    _check_layout(layout)
    if rank is None or world_size is None:
        r, w = _group_info(group)
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    rank = _args.as_int(rank, "rank")
    world_size = _args.as_int(world_size, "world_size")
    if world_size < 1 or not 0 <= rank < world_size:
        raise _error(InvalidArgumentError, "rank", f"rank: must be in [0, world_size={world_size}), got {rank}")
    d = _dim(x, dim, "x")
    S = x.shape[d]
    parts = world_size if layout == "contiguous" else 2 * world_size
    if S % parts:
        raise _error(InvalidArgumentError, "x",
                     f"x: sequence length {S} (dim {d}) is not divisible by {parts} "
                     f"({'world size' if layout == 'contiguous' else '2 x world size'} {world_size}) "
                     f"as layout={layout!r} needs")
    n = S // parts
    if layout == "contiguous":
        return x.narrow(d, rank * n, n)
    return torch.cat([x.narrow(d, rank * n, n), x.narrow(d, (parts - 1 - rank) * n, n)], dim=d)


def unshard(x, group=None, layout="zigzag", *, dim=1):
    """The whole sequence from every rank's shard ``x`` (along ``dim``; 1: BSHD, 2: an lse
    [B, H, S]), on every rank: the inverse of ``shard``. A collective: every rank calls it with
    shards of one shape and dtype (checked: a mismatch is an error on every rank)."""
    rank, world = _group_info(group)
    err = None
    fields = []
    try:
        _check_layout(layout)
        d = _dim(x, dim, "x")
        if layout == "zigzag" and x.shape[d] % 2:
            raise _error(InvalidArgumentError, "x",
                         f"x: local length {x.shape[d]} (dim {d}) is odd; layout='zigzag' shards hold two equal chunks")
        fields = [("x.dim()", x.dim()), ("dim", d)] + [(f"x.shape[{i}]", s) for i, s in enumerate(x.shape)]
        fields.append(("x.dtype", _dtype_code(x.dtype)))
        fields.append(("layout", _LAYOUTS.index(layout)))
    except Fa4Error as e:
        err = e
    _agree("unshard", group, rank, world, _meta_device(group, x), err, fields)
    parts = [p.view(x.shape) for p in _all_gather(x.contiguous().view(-1), group, world)]
    if layout == "contiguous":
        return torch.cat(parts, dim=d)
    h = x.shape[d] // 2
    chunks = [None] * (2 * world)
    for r, p in enumerate(parts):
        chunks[r] = p.narrow(d, 0, h)
        chunks[2 * world - 1 - r] = p.narrow(d, h, h)
    return torch.cat(chunks, dim=d)


# ---------------------------------------------------------------------------------------------
# Agreement: one all_gather of every rank's call description and local error, before any P2P.
# ---------------------------------------------------------------------------------------------


def _all_gather(flat, group, world):
    """Every rank's copy of the 1-d tensor ``flat``: [world tensors]. One buffer with NCCL."""
    if world == 1:
        return [flat]
    if dist.get_backend(group) == "nccl" and hasattr(dist, "all_gather_into_tensor"):
        out = flat.new_empty(world * flat.numel())
        dist.all_gather_into_tensor(out, flat, group=group)
        return list(out.chunk(world)) if flat.numel() else [flat.new_empty(0) for _ in range(world)]
    parts = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(parts, flat, group=group)
    return parts


def _dtype_code(dt):
    return _DTYPES.get(dt, 100 + zlib.crc32(str(dt).encode()))  # stable across processes


def _meta_device(group, x):
    try:
        backend = dist.get_backend(group)
    except Exception:  # pragma: no cover
        backend = ""
    if backend == "nccl":
        if isinstance(x, torch.Tensor) and x.is_cuda:
            return x.device
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _f2i(x):
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


def _agree(what, group, rank, world, device, err, fields):
    """Every rank learns every rank's local error and call description; on any error or any
    difference all ranks raise the same fa4 error (so none is left waiting in a send / recv)."""
    names = [n for n, _ in fields]
    vals = [int(v) for _, v in fields]
    nf = 64
    if len(vals) > nf:  # pragma: no cover - internal
        raise AssertionError("too many fields")
    msg = b""
    arg = b""
    cls = 0
    if err is not None:
        msg = str(err).encode("utf-8", "replace")[:_MSG]
        arg = (getattr(err, "argument", None) or "").encode("utf-8", "replace")[:32]
        cls = _ALL.index(type(err)) + 1 if type(err) in _ALL else len(_ALL) + 1
    head = [cls, len(vals), len(msg), len(arg)] + vals + [0] * (nf - len(vals))
    body = list(msg) + [0] * (_MSG - len(msg)) + list(arg) + [0] * (32 - len(arg))
    t = torch.tensor(head + body, dtype=torch.int64, device=device)
    if world > 1:
        got = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(got, t, group=group)
        rows = [g.cpu().tolist() for g in got]
    else:
        rows = [t.cpu().tolist()]
    for r, row in enumerate(rows):
        c, n, lm, la = row[:4]
        if c:
            if r == rank and err is not None:
                raise err
            m = bytes(row[4 + nf:4 + nf + lm]).decode("utf-8", "replace")
            a = bytes(row[4 + nf + _MSG:4 + nf + _MSG + la]).decode("utf-8", "replace") or None
            klass = _ALL[c - 1] if c <= len(_ALL) else InvalidArgumentError
            raise _error(klass, a, f"{what}: rank {r} of {world} failed: {m}")
    ref = rows[0][4:4 + len(vals)]
    for r, row in enumerate(rows[1:], 1):
        if row[1] != len(vals):
            raise _error(InvalidArgumentError, None, f"{what}: ranks 0 and {r} describe different calls")
        mine = row[4:4 + len(vals)]
        for i, (a0, ar) in enumerate(zip(ref, mine)):
            if a0 != ar:
                name = names[i]
                arg = name.split(".")[0].split("[")[0]
                raise _error(InvalidArgumentError, arg,
                             f"{what}: {name} differs between ranks: rank 0 has {_show(name, a0)}, rank {r} has "
                             f"{_show(name, ar)} (every rank must hold an equal shard and pass the same options)")


def _show(name, v):
    if name in ("softcap", "scale"):
        return repr(struct.unpack("<d", struct.pack("<q", v))[0]) if v != -1 else "None"
    if name.endswith("dtype"):
        for dt, c in _DTYPES.items():
            if c == v:
                return str(dt)
        return next((str(d) for d in (torch.int32, torch.int64, torch.uint8, torch.int8, torch.bool, torch.float64)
                     if _dtype_code(d) == v), "another dtype")
    if name == "layout":
        return repr(_LAYOUTS[v]) if 0 <= v < len(_LAYOUTS) else str(v)
    if name == "comm":
        return repr(_COMMS[v]) if 0 <= v < len(_COMMS) else str(v)
    return str(v)


# ---------------------------------------------------------------------------------------------
# Masks per (query chunk, key chunk) pair
# ---------------------------------------------------------------------------------------------


def _block(qpos, qlen, kpos, klen, off, left, right):
    """The part of the global mask that falls on one pair of chunks: query rows [qpos, qpos+qlen)
    against keys [kpos, kpos+klen) of sequences whose key/query offset is ``off`` (= Sk - Sq,
    bottom-right), window (left, right) (-1 = unbounded). Returns None (nothing visible) or
    (r0, r1, c0, c1, wl, wr): rows [r0, r1) and keys [c0, c1) of the pair (each of those rows sees
    at least one key, every visible key is inside) and the fa4 window (bottom-right aligned on
    the cropped pair) that gives exactly the global mask there; (-1, -1) = no mask."""
    if qlen <= 0 or klen <= 0:
        return None
    d = qpos + off - kpos  # query i (local) sees key j (local) iff lo <= j - i <= hi
    lo = None if left < 0 else d - left
    hi = None if right < 0 else d + right
    r0 = 0 if hi is None else max(0, -hi)
    r1 = qlen if lo is None else min(qlen, klen - lo)
    if r1 <= r0:
        return None
    c0 = 0 if lo is None else max(0, r0 + lo)
    c1 = klen if hi is None else min(klen, r1 - 1 + hi + 1)
    if c1 <= c0:  # pragma: no cover - cannot happen when r0 < r1
        return None
    sq, sk = r1 - r0, c1 - c0
    offl = sk - sq  # fa4's own (bottom-right) offset on the cropped pair
    wl = wr = -1
    if lo is not None and lo - c0 + r0 > 1 - sq:  # the lower bound cuts some row
        wl = offl - (lo - c0 + r0)  # >= 0: the last row sees a key
    if hi is not None and hi - c0 + r0 < sk - 1:  # the upper bound cuts some row
        wr = hi - c0 + r0 - offl  # >= 0: the last row sees the last key
    return r0, r1, c0, c1, wl, wr


# ---------------------------------------------------------------------------------------------
# The per-step work: a plan of fa4 calls over the pairs of (query chunk, key chunk)
# ---------------------------------------------------------------------------------------------


def _plan(qsegs, ksegs, off, left, right, Sq_local, Sk_local):
    """fa4 calls for one step: [(q_lo, q_hi, k_lo, k_hi, wl, wr)] in local rows / keys.
    Fully visible pairs that share a query chunk (or a key chunk) are fused into one call."""
    blocks = {}
    for qi, (qp, ql, qo) in enumerate(qsegs):
        for ki, (kp, kl, ko) in enumerate(ksegs):
            b = _block(qp, ql, kp, kl, off, left, right)
            if b is not None:
                blocks[qi, ki] = b

    def full(qi, ki):
        b = blocks.get((qi, ki))
        return b is not None and b == (0, qsegs[qi][1], 0, ksegs[ki][1], -1, -1)

    nq, nk = len(qsegs), len(ksegs)
    calls = []
    if all(full(qi, ki) for qi in range(nq) for ki in range(nk)):
        return [(0, Sq_local, 0, Sk_local, -1, -1)]
    done = set()
    for qi in range(nq):  # a query chunk that sees every key chunk whole
        if nk > 1 and all(full(qi, ki) for ki in range(nk)):
            qp, ql, qo = qsegs[qi]
            calls.append((qo, qo + ql, 0, Sk_local, -1, -1))
            done.update((qi, ki) for ki in range(nk))
    for ki in range(nk):  # a key chunk seen whole by every remaining query chunk (adjacent in storage)
        rest = [qi for qi in range(nq) if (qi, ki) not in done]
        if len(rest) > 1 and all(full(qi, ki) for qi in rest) and rest == list(range(rest[0], rest[-1] + 1)):
            kp, kl, ko = ksegs[ki]
            calls.append((qsegs[rest[0]][2], qsegs[rest[-1]][2] + qsegs[rest[-1]][1], ko, ko + kl, -1, -1))
            done.update((qi, ki) for qi in rest)
    for (qi, ki), (r0, r1, c0, c1, wl, wr) in sorted(blocks.items()):
        if (qi, ki) in done:
            continue
        qo, ko = qsegs[qi][2], ksegs[ki][2]
        calls.append((qo + r0, qo + r1, ko + c0, ko + c1, wl, wr))
    return calls


def _merge(acc_o, acc_l, o, lse):
    """acc (fp32 out [B, n, H, D], lse [B, H, n]) <- the LSE merge of acc and (o, lse), in place."""
    new = torch.logaddexp(acc_l, lse)
    safe = torch.where(torch.isneginf(new), torch.zeros_like(new), new)
    w_old = torch.exp(acc_l - safe).transpose(1, 2).unsqueeze(-1)
    w_new = torch.exp(lse - safe).transpose(1, 2).unsqueeze(-1)
    acc_o.mul_(w_old).add_(o.to(torch.float32) * w_new)
    acc_l.copy_(new)


# ---------------------------------------------------------------------------------------------
# ring_attention
# ---------------------------------------------------------------------------------------------


def _local_checks(q, k, v, sinks, layout, comm, causal, window, softcap, scale, return_lse, backend,
                  num_threads):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise _error(DTypeError, name, f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4:
            raise _error(InvalidArgumentError, name, f"{name}: expected a 4-d tensor [B, S_local, H, D], got {x.dim()}-d")
        if x.dtype not in _DTYPES:
            raise _error(DTypeError, name, f"{name}: expected float16, bfloat16 or float32, got {x.dtype}")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        name = next(n for n, x in (("q", q), ("k", k), ("v", v)) if x.requires_grad)
        raise _error(UnsupportedError, name,
                     f"{name}: requires grad: fa4.distributed.ring_attention is forward only (no backward); "
                     f"call it under torch.no_grad() / torch.inference_mode() or pass detached tensors")
    if layout not in _LAYOUTS:
        raise _error(InvalidArgumentError, "layout", f"layout: must be 'zigzag' or 'contiguous', got {layout!r}")
    if comm not in _COMMS:
        raise _error(InvalidArgumentError, "comm", f"comm: must be 'ring' or 'allgather', got {comm!r}")
    causal = _args.as_bool(causal, "causal")
    wl, wr = _args.as_window(window)
    softcap = _args.as_real(softcap, "softcap")
    scale = _args.as_scale(scale)
    _args.as_bool(return_lse, "return_lse")
    _args.as_num_threads(num_threads)
    if causal:
        if wr > 0:
            raise _error(InvalidArgumentError, "window",
                         f"window: the right side must be -1 or 0 with causal attention, got {wr}")
        wr = 0
    if layout == "zigzag":
        for name, x in (("q", q), ("k", k)):
            if x.shape[1] % 2:
                raise _error(InvalidArgumentError, name,
                             f"{name}: local sequence length {x.shape[1]} is odd; layout='zigzag' shards hold two "
                             f"equal chunks (the global length must divide by 2 x world size: use fa4.distributed.shard)")
    if k.shape[1] != v.shape[1]:
        raise _error(InvalidArgumentError, "v", f"v: local sequence length {v.shape[1]} differs from k's {k.shape[1]}")
    return causal, wl, wr, softcap, scale


def ring_attention(q, k, v, *, group=None, causal=False, window=(-1, -1), softcap=0.0, sinks=None, scale=None,
                   return_lse=False, layout="zigzag", backend="auto", comm="ring", num_threads=0):
    """Exact attention over a sequence sharded across the ranks of ``group``.

    q [B, Sq/W, Hq, Dqk], k [B, Sk/W, Hkv, Dqk], v [B, Sk/W, Hkv, Dv]: this rank's shards in
    ``layout`` ("zigzag" or "contiguous", as ``shard`` makes them); every rank holds shards of one
    shape. Masks (causal, window), softcap, sinks (fp32 [Hq]) and scale are those of
    fa4.attention applied to the whole sequence. Returns this rank's rows of the output
    (q's dtype, [B, Sq/W, Hq, Dv]) or (out, lse) with lse fp32 [B, Hq, Sq/W].

    comm="ring": K/V travel around the ring, overlapped with the attention of the shard in hand;
    comm="allgather": K/V are gathered once (cheaper for GQA / short K/V). backend and
    num_threads go to each fa4.attention call. Forward only. A collective: every rank of the
    group must call it.
    """
    rank, world = _group_info(group)
    err = None
    fields = []
    try:
        causal, wl, wr, softcap, scale_v = _local_checks(q, k, v, sinks, layout, comm, causal, window, softcap,
                                                          scale, return_lse, backend, num_threads)
        B, Sq, Hq, Dqk = q.shape
        _, Sk, Hkv, _ = k.shape
        Dv = v.shape[3]
        fields = [("q.shape[0] (batch)", B), ("q.shape[1] (local sequence length)", Sq), ("q.shape[2] (heads)", Hq),
                  ("q.shape[3] (head dim)", Dqk), ("k.shape[1] (local sequence length)", Sk),
                  ("k.shape[2] (kv heads)", Hkv), ("v.shape[3] (head dim)", Dv), ("q.dtype", _dtype_code(q.dtype)),
                  ("causal", int(causal)), ("window[0]", wl), ("window[1]", wr), ("softcap", _f2i(softcap)),
                  ("scale", -1 if scale_v is None else _f2i(scale_v)), ("sinks (given)", int(sinks is not None)),
                  ("layout", _LAYOUTS.index(layout)), ("comm", _COMMS.index(comm))]
        if world > 1:
            # Everything else fa4 checks (head dims, GQA ratio, dtypes, devices, sinks, backend) on
            # a one-row probe of this rank's shard: it fails here, before any rank starts sending.
            _attention(q[:, :1], k[:, :1], v[:, :1], sinks=sinks, softcap=softcap, scale=scale_v, backend=backend,
                       num_threads=num_threads)
    except Fa4Error as e:
        err = e
    _agree("ring_attention", group, rank, world, _meta_device(group, q), err, fields)
    return_lse = bool(return_lse)
    if world == 1 and _ONE_CALL_AT_WORLD_1:  # the shard is the whole sequence, in order: one fa4 call
        return _attention(q, k, v, window=(wl, wr), softcap=softcap, scale=scale_v, sinks=sinks,
                          return_lse=return_lse, backend=backend, num_threads=num_threads)
    with torch.no_grad():
        if comm == "allgather":
            out, lse = _allgather(q, k, v, group, rank, world, layout, wl, wr, softcap, scale_v, sinks, backend,
                                  num_threads, return_lse)
        else:
            out, lse = _ring(q, k, v, group, rank, world, layout, wl, wr, softcap, scale_v, sinks, backend,
                             num_threads)
    return (out, lse) if return_lse else out


def _call(q, k, v, c, softcap, scale, backend, num_threads, sinks=None):
    q0, q1, k0, k1, wl, wr = c
    return _attention(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], window=(wl, wr), softcap=softcap, scale=scale,
                      sinks=sinks, return_lse=True, backend=backend, num_threads=num_threads)


def _ring(q, k, v, group, rank, world, layout, wl, wr, softcap, scale, sinks, backend, num_threads):
    B, Sq, Hq, _ = q.shape
    Sk, Hkv, Dqk, Dv = k.shape[1], k.shape[2], k.shape[3], v.shape[3]
    off = world * (Sk - Sq)  # global Sk - Sq
    qsegs = _segments(layout, rank, world, Sq)
    acc_o = torch.zeros(B, Sq, Hq, Dv, dtype=torch.float32, device=q.device)
    acc_l = torch.full((B, Hq, Sq), -math.inf, dtype=torch.float32, device=q.device)

    nk, nv = B * Sk * Hkv * Dqk, B * Sk * Hkv * Dv
    bufs = []
    ring = world > 1 and nk + nv > 0  # (with no keys, or an empty batch, nothing needs to travel)
    if ring:
        # K and V travel packed in one contiguous buffer: one message per step each way.
        bufs = [torch.empty(nk + nv, dtype=k.dtype, device=k.device) for _ in range(2)]
        bufs[0][:nk].view(B, Sk, Hkv, Dqk).copy_(k)
        bufs[0][nk:].view(B, Sk, Hkv, Dv).copy_(v)
    nxt = _global_rank(group, (rank + 1) % world)
    prv = _global_rank(group, (rank - 1) % world)
    kk, vv = k, v  # step 0 computes on the caller's tensors (any strides) while the copy travels
    for step in range(world):
        reqs = []
        if ring and step + 1 < world:
            send, recv = bufs[step % 2], bufs[(step + 1) % 2]
            ops = [dist.P2POp(dist.isend, send, nxt, group), dist.P2POp(dist.irecv, recv, prv, group)]
            reqs = dist.batch_isend_irecv(ops)
        src = (rank - step) % world
        ksegs = _segments(layout, src, world, Sk)
        try:
            for c in _plan(qsegs, ksegs, off, wl, wr, Sq, Sk):
                o, l = _call(q, kk, vv, c, softcap, scale, backend, num_threads)
                _merge(acc_o[:, c[0]:c[1]], acc_l[:, :, c[0]:c[1]], o, l)
        finally:
            for r in reqs:
                r.wait()
        if ring and step + 1 < world:
            buf = bufs[(step + 1) % 2]
            kk = buf[:nk].view(B, Sk, Hkv, Dqk)
            vv = buf[nk:].view(B, Sk, Hkv, Dv)
    if sinks is not None:
        s = torch.as_tensor(sinks, device=q.device).to(torch.float32).view(1, Hq, 1)
        new = torch.logaddexp(acc_l, s)
        safe = torch.where(torch.isneginf(new), torch.zeros_like(new), new)
        acc_o.mul_(torch.exp(acc_l - safe).transpose(1, 2).unsqueeze(-1))
        acc_l = new
    out = acc_o if q.dtype == torch.float32 else acc_o.to(q.dtype)
    return out, acc_l


def _allgather(q, k, v, group, rank, world, layout, wl, wr, softcap, scale, sinks, backend, num_threads,
               return_lse):
    B, Sq, Hq, _ = q.shape
    Sk, Hkv, Dqk, Dv = k.shape[1], k.shape[2], k.shape[3], v.shape[3]
    off = world * (Sk - Sq)
    nk, nv = B * Sk * Hkv * Dqk, B * Sk * Hkv * Dv
    if world > 1 and nk + nv > 0:
        buf = torch.empty(nk + nv, dtype=k.dtype, device=k.device)
        buf[:nk].view(B, Sk, Hkv, Dqk).copy_(k)
        buf[nk:].view(B, Sk, Hkv, Dv).copy_(v)
        parts = _all_gather(buf, group, world)
        # The whole K / V in sequence order: chunk i of the global sequence is at index i.
        nseg = len(_segments(layout, 0, world, Sk))
        kc, vc = [None] * (world * nseg), [None] * (world * nseg)
        for r, p in enumerate(parts):
            kr = p[:nk].view(B, Sk, Hkv, Dqk)
            vr = p[nk:].view(B, Sk, Hkv, Dv)
            for gpos, n, lo in _segments(layout, r, world, Sk):
                kc[gpos // n], vc[gpos // n] = kr[:, lo:lo + n], vr[:, lo:lo + n]
        kg = torch.cat(kc, dim=1)
        vg = torch.cat(vc, dim=1)
    elif world > 1:  # nothing to gather (no keys, or an empty batch): every rank has the same empty K / V
        kg = k.new_empty(B, world * Sk, Hkv, Dqk)
        vg = v.new_empty(B, world * Sk, Hkv, Dv)
    else:
        kg, vg = k, v
    Skg = kg.shape[1]
    out = torch.zeros(B, Sq, Hq, Dv, dtype=q.dtype, device=q.device)
    lse = None
    if return_lse:
        lse = torch.full((B, Hq, Sq), -math.inf, dtype=torch.float32, device=q.device)
        if sinks is not None:  # rows that see no key: lse = the sink
            lse.copy_(torch.as_tensor(sinks, device=q.device).to(torch.float32).view(1, Hq, 1).expand(B, Hq, Sq))
    for qp, ql, qo in _segments(layout, rank, world, Sq):
        b = _block(qp, ql, 0, Skg, off, wl, wr)
        if b is None:
            continue
        r0, r1, c0, c1, bwl, bwr = b
        o, l = _call(q, kg, vg, (qo + r0, qo + r1, c0, c1, bwl, bwr), softcap, scale, backend, num_threads, sinks)
        out[:, qo + r0:qo + r1] = o
        if lse is not None:
            lse[:, :, qo + r0:qo + r1] = l
    return out, lse
