"""Host overhead of one fa4 call on tiny inputs (python/bench_overhead.py).

    python python/bench_overhead.py [--iters N] [--repeat R] [--json]

For each framework present (NumPy always; torch CPU and torch CUDA when available) it times:
  call        fa4.attention(q, k, v) end to end (output allocated by fa4), per call
  call+out    fa4.attention(q, k, v, out=o) (no allocation)
  native      the same attention_forward in a C++ loop (the library's own cost: validation +
              the backend on a 1-token problem), measured inside the extension (CPU only)
  overhead    call - native: what the Python package adds (argument handling, DLPack /
              descriptor conversion, output allocation, the extension call)
The goal is overhead <= 10 us. Timings are the best of --repeat runs of --iters calls each.
On CUDA the call is asynchronous: 'call' is then the CPU-side dispatch time (launch included).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

# Use the installed package, not the source folder beside this script (it has no extension).
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import fa4
from fa4 import _fa4


def best_per_call(fn, iters, repeat):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


def bench_numpy(args, shape):
    q = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    k, v = q.copy(), q.copy()
    o = np.empty_like(q)
    call = best_per_call(lambda: fa4.attention(q, k, v), args.iters, args.repeat)
    call_out = best_per_call(lambda: fa4.attention(q, k, v, out=o), args.iters, args.repeat)
    native = min(_fa4.native_time(q, k, v, o, 0, args.iters, False) for _ in range(args.repeat))
    return dict(framework="numpy", device="cpu", call_us=call * 1e6, call_out_us=call_out * 1e6,
                native_us=native * 1e6, overhead_us=(call - native) * 1e6, overhead_out_us=(call_out - native) * 1e6)


def bench_torch(args, shape, device):
    import torch

    q = torch.randn(shape, device=device)
    k, v = q.clone(), q.clone()
    o = torch.empty_like(q)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        q, k, v, o = (x.to(torch.bfloat16) for x in (q, k, v, o))
        shape = tuple(shape[:-1]) + (64,) if shape[-1] < 64 else shape
    call = best_per_call(lambda: fa4.attention(q, k, v), args.iters, args.repeat)
    sync()
    call_out = best_per_call(lambda: fa4.attention(q, k, v, out=o), args.iters, args.repeat)
    sync()
    r = dict(framework="torch", device=device, call_us=call * 1e6, call_out_us=call_out * 1e6)
    if device == "cpu":
        native = min(_fa4.native_time(q.numpy(), k.numpy(), v.numpy(), o.numpy(), 0, args.iters, False)
                     for _ in range(args.repeat))
        r.update(native_us=native * 1e6, overhead_us=(call - native) * 1e6, overhead_out_us=(call_out - native) * 1e6)
    # the registered op, as torch.compile'd graphs call it (eager dispatch through torch.library)
    if hasattr(torch.ops, "fa4") and hasattr(torch.ops.fa4, "fwd"):
        a = (q, k, v) + (None,) * 10 + (0.0, 0.0, False, -1, -1, 0, 0, 0, 0, 0, 0, False)
        r["op_call_us"] = best_per_call(lambda: torch.ops.fa4.fwd(*a), max(args.iters // 4, 100), args.repeat) * 1e6
        sync()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    shape = (1, 1, 1, 64)  # B, S, H, D: one token, one head
    rows = [bench_numpy(args, shape)]
    try:
        import torch  # noqa: F401

        rows.append(bench_torch(args, shape, "cpu"))
        if torch.cuda.is_available() and fa4.backend_available("cuda"):
            rows.append(bench_torch(args, shape, "cuda"))
    except ImportError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=__file__.rsplit("/", 1)[0] or ".").stdout.strip()
    except OSError:
        commit = "?"
    meta = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit, python=sys.version.split()[0],
                machine=platform.machine(), cpu=platform.processor() or "?", fa4=fa4.__version__,
                shape="q=k=v [1, 1, 1, 64] float32 (cuda: bfloat16)", iters=args.iters, repeat=args.repeat)
    if args.json:
        print(json.dumps(dict(meta=meta, rows=rows), indent=1))
        return
    print(" ".join(f"{k}={v}" for k, v in meta.items()))
    cols = ["framework", "device", "call_us", "call_out_us", "native_us", "overhead_us", "overhead_out_us", "op_call_us"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.2f}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in cols) + " |")


if __name__ == "__main__":
    main()
