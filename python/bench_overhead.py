"""Host overhead of one fa4 call on tiny inputs (python/bench_overhead.py).

    python python/bench_overhead.py [--iters N] [--repeat R] [--backend reference|cpu|auto] [--json]

q = k = v [1, 1, 1, 64] (one token, one head). For each framework present (NumPy always; torch
CPU, and torch CUDA when a GPU and the cuda backend are there) it times, per call:
  call      fa4.attention(q, k, v): end to end, output allocated by fa4
  call_out  fa4.attention(q, k, v, out=o): no allocation
  op        torch.ops.fa4.fwd(...) (what a torch.compile'd graph calls; torch only)
  native    the same attention_forward in a C++ loop inside the extension: the library's own
            cost (validation + the backend on a 1-token problem); CPU only
  overhead  call - native, call_out - native: what the Python package adds (argument handling,
            DLPack / descriptor conversion, output allocation, the extension call)
Each is measured twice: wall time, and the calling thread's CPU time (thread_time), which does
not count time the thread is descheduled, so it is the stable number on a busy machine. The
default backend is 'reference' (single-threaded, no OpenMP fork/join whose cost depends on
machine load); --backend cpu measures the same with the cpu backend. The goal is overhead <= 10 us.
Numbers are the best of --repeat runs of --iters calls. On CUDA the call is asynchronous: call is
then the CPU-side dispatch time (launch included).
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

import fa4  # noqa: E402
from fa4 import _fa4  # noqa: E402

BACKENDS = {"auto": 0, "reference": 1, "cpu": 2, "cuda": 3}


def best_per_call(fn, iters, repeat):
    """(wall, thread cpu) seconds per call, each the best of `repeat` runs."""
    fn()
    wall = cpu = float("inf")
    for _ in range(repeat):
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(iters):
            fn()
        t1, c1 = time.perf_counter(), time.thread_time()
        wall = min(wall, (t1 - t0) / iters)
        cpu = min(cpu, (c1 - c0) / iters)
    return wall, cpu


def native(q, k, v, o, backend, iters, repeat):
    res = [_fa4.native_time(q, k, v, o, BACKENDS[backend], iters, False) for _ in range(repeat)]
    return min(r[0] for r in res), min(r[1] for r in res)


def row(framework, device, call, call_out, nat=None, op=None):
    r = dict(framework=framework, device=device)
    for name, val in (("call", call), ("call_out", call_out), ("op", op), ("native", nat)):
        if val is not None:
            r[name + "_wall_us"], r[name + "_cpu_us"] = val[0] * 1e6, val[1] * 1e6
    if nat is not None:
        for name, val in (("overhead", call), ("overhead_out", call_out)):
            r[name + "_wall_us"] = (val[0] - nat[0]) * 1e6
            r[name + "_cpu_us"] = (val[1] - nat[1]) * 1e6
    return r


def bench_numpy(a, shape):
    q = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    k, v = q.copy(), q.copy()
    o = np.empty_like(q)
    b = a.backend
    call = best_per_call(lambda: fa4.attention(q, k, v, backend=b), a.iters, a.repeat)
    call_out = best_per_call(lambda: fa4.attention(q, k, v, out=o, backend=b), a.iters, a.repeat)
    return row("numpy", "cpu", call, call_out, native(q, k, v, o, b, a.iters, a.repeat))


def bench_torch(a, shape, device):
    import torch

    dt = torch.float32 if device == "cpu" else torch.bfloat16
    q = torch.randn(shape, device=device, dtype=dt)
    k, v = q.clone(), q.clone()
    o = torch.empty_like(q)
    b = a.backend if device == "cpu" else "auto"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    call = best_per_call(lambda: fa4.attention(q, k, v, backend=b), a.iters, a.repeat)
    sync()
    call_out = best_per_call(lambda: fa4.attention(q, k, v, out=o, backend=b), a.iters, a.repeat)
    sync()
    op = None
    if hasattr(torch.ops, "fa4") and hasattr(torch.ops.fa4, "fwd"):
        args = (q, k, v) + (None,) * 10 + (0.0, 0.0, False, -1, -1, 0, 0, 0, 0, BACKENDS[b], 0, False)
        op = best_per_call(lambda: torch.ops.fa4.fwd(*args), max(a.iters // 4, 100), a.repeat)
        sync()
    nat = native(q.numpy(), k.numpy(), v.numpy(), o.numpy(), b, a.iters, a.repeat) if device == "cpu" else None
    return row("torch", device, call, call_out, nat, op)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--backend", default="reference", choices=["reference", "cpu", "auto"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    shape = (1, 1, 1, 64)
    rows = [bench_numpy(a, shape)]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        rows.append(bench_torch(a, shape, "cpu"))
        if torch.cuda.is_available() and fa4.backend_available("cuda"):
            rows.append(bench_torch(a, shape, "cuda"))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=_here).stdout.strip() or "?"
    except OSError:
        commit = "?"
    meta = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit,
                python=sys.version.split()[0], numpy=np.__version__,
                torch=(torch.__version__ if torch is not None else "-"), machine=platform.machine(),
                cores=os.cpu_count(), load=" ".join(f"{x:.1f}" for x in os.getloadavg()), backend=a.backend,
                shape="q=k=v [1, 1, 1, 64] float32 (cuda: bfloat16)", iters=a.iters, repeat=a.repeat)
    if a.json:
        print(json.dumps(dict(meta=meta, rows=rows), indent=1))
        return
    print(" ".join(f"{k}={v}" for k, v in meta.items()))
    cols = ["call", "call_out", "op", "native", "overhead", "overhead_out"]
    print("| framework | device | " + " | ".join(f"{c} wall / cpu (us)" for c in cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for r in rows:
        cells = []
        for c in cols:
            w, u = r.get(c + "_wall_us"), r.get(c + "_cpu_us")
            cells.append("-" if w is None else f"{w:.2f} / {u:.2f}")
        print(f"| {r['framework']} | {r['device']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
