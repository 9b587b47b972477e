#!/usr/bin/env python3
"""Scaling of fa4.distributed.ring_attention: one process per GPU over NCCL (torchrun).

    torchrun --nproc_per_node=8 bench/ring_scaling.py                       # the issue-17 sweep
    torchrun --nproc_per_node=8 bench/ring_scaling.py --seqlens 32k,128k,512k --comms ring,allgather \
        --layouts zigzag,contiguous --heads 32 --kv-heads 8 --dim 128 --dtype bf16 --causal --check
    python bench/ring_scaling.py --device cpu --seqlens 256 --check         # world size 1, CPU / gloo

For each global sequence length S: T1 = fa4.attention on the whole sequence on one device (rank 0,
the others waiting), TW = ring_attention with the sequence sharded over the W ranks (the slowest
rank, wall time from a barrier to the end of the call on every rank, median of --reps). Reported:
speed-up T1 / TW and the fraction of ideal speed-up T1 / (W * TW) (ring-flash-attention's zigzag
forward reaches 0.85 on 8 GPUs), and TFLOP/s per device (FLOPs = 4·B·Hq·S²·D, halved for causal).
--check compares the unsharded ring output of the smallest S with fa4.attention on the whole
sequence (DESIGN.md §4 tolerances) before timing.

Without torchrun (no RANK / WORLD_SIZE in the environment) it runs as a world of one process.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import fa4
import fa4.distributed as fd

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOL = {torch.float32: (1e-5, 1e-4), torch.float16: (2e-3, 1e-2), torch.bfloat16: (1e-2, 5e-2)}


def _len(s):
    s = s.strip().lower()
    mult = 1
    if s.endswith("k"):
        s, mult = s[:-1], 1024
    elif s.endswith("m"):
        s, mult = s[:-1], 1024 * 1024
    return int(s) * mult


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqlens", default="32k,64k,128k,256k,512k", help="global sequence lengths (k = 1024)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--dtype", choices=list(DT), default="bf16")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--window", type=int, nargs=2, default=(-1, -1), metavar=("LEFT", "RIGHT"))
    p.add_argument("--layouts", default="zigzag", help="comma list of zigzag, contiguous")
    p.add_argument("--comms", default="ring", help="comma list of ring, allgather")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", default="auto", help="fa4 backend for each call (auto, cuda, cpu, reference)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--single-reps", type=int, default=0, help="reps of the one-device baseline (0: as --reps, "
                   "at most 3 above 128k)")
    p.add_argument("--single-max", default="1m", help="skip the one-device baseline above this length")
    p.add_argument("--check", action="store_true", help="check the smallest S against fa4.attention first")
    p.add_argument("--json", default="", help="write the results here (rank 0)")
    return p.parse_args()


def init(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        if args.device == "cuda":  # (more ranks than GPUs share them: NCCL may refuse that)
            local %= torch.cuda.device_count()
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo",
                                timeout=datetime.timedelta(minutes=10))
        dev = torch.device("cuda", local) if args.device == "cuda" else torch.device("cpu")
        return rank, world, dev, None
    tmp = tempfile.mkdtemp(prefix="ring-scaling-")
    if args.device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", init_method=f"file://{tmp}/pg",
                            rank=0, world_size=1, timeout=datetime.timedelta(minutes=10))
    dev = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    return 0, 1, dev, tmp


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev, reps, warmup, collective=True):
    """Median over reps of the slowest rank's wall time (barrier -> done), in seconds."""
    for _ in range(warmup):
        fn()
    sync(dev)
    ts = []
    for _ in range(reps):
        if collective:
            dist.barrier()
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=dev if dev.type == "cuda" else "cpu")
        if collective:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        ts.append(t.item())
    return statistics.median(ts)


def rand(shape, dt, dev, g):
    return torch.randn(shape, generator=g, device=dev, dtype=torch.float32).to(dt)


def main():
    args = parse()
    rank, world, dev, tmp = init(args)
    dt = DT[args.dtype]
    B, Hq, Hkv, D = args.batch, args.heads, args.kv_heads, args.dim
    seqlens = [_len(s) for s in args.seqlens.split(",") if s.strip()]
    layouts = [s.strip() for s in args.layouts.split(",") if s.strip()]
    comms = [s.strip() for s in args.comms.split(",") if s.strip()]
    kw = dict(causal=args.causal, window=tuple(args.window), backend=args.backend)
    say = print if rank == 0 else (lambda *a, **k: None)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    say(f"# ring_scaling: world={world} device={gpu} dist={dist.get_backend()} fa4 {fa4.__version__} torch "
        f"{torch.__version__}; B={B} Hq={Hq} Hkv={Hkv} D={D} {args.dtype} causal={args.causal} "
        f"window={tuple(args.window)}")

    with torch.inference_mode():
        if args.check:
            S = min(seqlens)
            g = torch.Generator(device=dev).manual_seed(1234)  # the same global tensors on every rank
            q, k, v = rand((B, S, Hq, D), dt, dev, g), rand((B, S, Hkv, D), dt, dev, g), rand((B, S, Hkv, D), dt, dev, g)
            ref = fa4.attention(q, k, v, **kw)
            for layout in layouts:
                for comm in comms:
                    out = fd.ring_attention(*(fd.shard(x, layout=layout) for x in (q, k, v)), layout=layout,
                                            comm=comm, **kw)
                    whole = fd.unshard(out, layout=layout)
                    d = (whole.double() - ref.double())
                    rel, mx = d.norm().item() / max(ref.double().norm().item(), 1e-30), d.abs().max().item()
                    ok = rel <= TOL[dt][0] and mx <= TOL[dt][1]
                    say(f"check S={S} {layout}/{comm}: rel L2 {rel:.2e}, max abs {mx:.2e}: {'ok' if ok else 'FAIL'}")
                    if not ok:
                        raise SystemExit(f"ring_scaling: the check failed ({layout}/{comm})")
            del q, k, v, ref

        rows = []
        single_max = _len(args.single_max)
        for S in seqlens:
            g = torch.Generator(device=dev).manual_seed(1000 + rank)
            flops = 4.0 * B * Hq * S * S * D * (0.5 if args.causal else 1.0)
            t1 = None
            if S <= single_max:
                if rank == 0:
                    gq = torch.Generator(device=dev).manual_seed(7)
                    q, k, v = rand((B, S, Hq, D), dt, dev, gq), rand((B, S, Hkv, D), dt, dev, gq), rand(
                        (B, S, Hkv, D), dt, dev, gq)
                    reps = args.single_reps or (min(args.reps, 3) if S > 128 * 1024 else args.reps)
                    try:
                        t1 = timed(lambda q=q, k=k, v=v: fa4.attention(q, k, v, **kw), dev, reps, 1, collective=False)
                    except (fa4.Fa4Error, RuntimeError, MemoryError) as e:
                        say(f"S={S}: one-device baseline failed ({type(e).__name__}: {e})")
                        t1 = None
                    del q, k, v
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
                t = torch.tensor([t1 if t1 is not None else -1.0], dtype=torch.float64,
                                 device=dev if dev.type == "cuda" else "cpu")
                dist.broadcast(t, 0)
                t1 = t.item() if t.item() > 0 else None
            for layout in layouts:
                n = S // world
                if S % (2 * world if layout == "zigzag" else world):
                    say(f"S={S}: not divisible for {layout} over {world} ranks: skipped")
                    continue
                q = rand((B, n, Hq, D), dt, dev, g)
                k = rand((B, n, Hkv, D), dt, dev, g)
                v = rand((B, n, Hkv, D), dt, dev, g)
                for comm in comms:
                    def ring(q=q, k=k, v=v, layout=layout, comm=comm):
                        return fd.ring_attention(q, k, v, layout=layout, comm=comm, **kw)

                    tw = timed(ring, dev, args.reps, args.warmup)
                    row = dict(S=S, world=world, layout=layout, comm=comm, t1_ms=None if t1 is None else t1 * 1e3,
                               tw_ms=tw * 1e3, tflops_per_device=flops / tw / world / 1e12,
                               speedup=None if t1 is None else t1 / tw,
                               efficiency=None if t1 is None else t1 / (world * tw))
                    rows.append(row)
                    say(f"S={S} {layout}/{comm}: TW {tw * 1e3:.2f} ms" +
                        ("" if t1 is None else f", T1 {t1 * 1e3:.2f} ms, speed-up {t1 / tw:.2f}, "
                                               f"efficiency {t1 / (world * tw):.3f}"), flush=True)
                del q, k, v

    say("\n| S | W | layout | comm | T1 (ms) | TW (ms) | speed-up | efficiency | TFLOP/s per device |")
    say("|---|---|---|---|---|---|---|---|---|")
    f = lambda x, p: "—" if x is None else f"{x:.{p}f}"  # noqa: E731
    for r in rows:
        say(f"| {r['S']} | {r['world']} | {r['layout']} | {r['comm']} | {f(r['t1_ms'], 2)} | {r['tw_ms']:.2f} | "
            f"{f(r['speedup'], 2)} | {f(r['efficiency'], 3)} | {r['tflops_per_device']:.3g} |")
    if rank == 0 and args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(world=world, device=gpu, dtype=args.dtype, B=B, Hq=Hq, Hkv=Hkv, D=D, causal=args.causal,
                           window=list(args.window), commit=os.environ.get("FA4_COMMIT", ""), rows=rows), fh,
                      indent=1)
    dist.destroy_process_group()
    if tmp:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
