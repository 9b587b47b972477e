#!/usr/bin/env python3
"""Interleaved A/B of several libfa4 builds in one process, without torch's attention in the rounds.

  python3 bench/cpu_ab.py --libs base=/tmp/main/libfa4.so,new=build-cpu/libfa4.so \
      --shapes "f32:2048:256:no;dec:4:16384" [--threads 2] [--rounds 5] [--reps 5]

Shapes: DTYPE:S:D:CAUSAL (prefill, B 1, H 16, GFLOP/s) or dec:B:KV (decode, bf16, Hq 32, Hkv 8,
D 128, one query token, GB/s of K + V). A build given as name=path@VAR=value@VAR2=value2 runs its
first call (a small bf16 one, right after loading it) with those environment variables set, so
switches a library reads once per process (FA4_CPU_ISA, experiment knobs) can differ between
builds of one run. Each round runs every build --reps times in a shuffled
order (bench/cpu_peers.py's interleaved()); printed: the median over rounds of each round's
median, the ratio to the first build, the per-round values and the load average. Unlike
cpu_peers.py nothing evicts K / V between calls: decode shapes that fit in L3 (B 1 / 4 at kv 4k)
are partly cache-resident here.
"""
import sys, os, shutil, tempfile, statistics, argparse
ap = argparse.ArgumentParser()
ap.add_argument("--libs", required=True)  # name=path,...
ap.add_argument("--shapes", required=True)  # dt:S:D:causal;...  or  dec:B:KV
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()
sys.argv = ["x", "--lib", "none"]  # cpu_peers parses its arguments on import
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_peers as cp  # noqa: E402
import torch  # noqa: E402
torch.set_num_threads(a.threads)
libs = {}
for item in a.libs.split(","):
    n, spec = item.split("=", 1)
    p, *envs = spec.split("@")
    tmp = os.path.join(tempfile.mkdtemp(), "libfa4_%s.so" % n)
    shutil.copy(p, tmp)
    libs[n] = cp.Fa4(tmp, a.threads)
    if envs:
        saved = dict(os.environ)
        os.environ.update(dict(e.split("=", 1) for e in envs))
        x = torch.randn(1, 2, 64, 64, dtype=torch.bfloat16)
        o = torch.empty(1, 64, 2, 64, dtype=torch.bfloat16).transpose(1, 2)
        libs[n].call(libs[n].params(x, x, x, o, False))
        os.environ.clear()
        os.environ.update(saved)
print("load", os.getloadavg()[0])
for sh in a.shapes.split(";"):
    f = sh.split(":")
    if f[0] == "dec":
        B, KV = int(f[1]), int(f[2])
        dt = torch.bfloat16
        q = torch.randn(B, 32, 1, 128, dtype=dt)
        k, v = (torch.randn(B, KV, 8, 128, dtype=dt).transpose(1, 2) for _ in range(2))
        causal = False
        work = 2 * B * 8 * KV * 128 * 2 / 1e9  # GB
        unit = "GB/s"
        mk = lambda: torch.empty(B, 1, 32, 128, dtype=dt).transpose(1, 2)
    else:
        dt = cp.DT[f[0]]; S = int(f[1]); D = int(f[2]); causal = f[3] == "yes"
        q, k, v = (torch.randn(1, 16, S, D, dtype=dt) for _ in range(3))
        work = 4 * 16 * S * S * D / (2 if causal else 1) / 1e9
        unit = "GFLOP/s"
        mk = lambda: torch.empty(1, S, 16, D, dtype=dt).transpose(1, 2)
    fns = {}
    keep = []
    for n, L in libs.items():
        o = mk()
        keep.append(o)
        p = L.params(q, k, v, o, causal)
        fns[n] = (lambda L=L, p=p: L.call(p))
    for fn in fns.values(): fn()
    meds = {n: [] for n in fns}
    for r in range(a.rounds):
        t = cp.interleaved(fns, a.reps)
        for n in fns: meds[n].append(statistics.median(t[n]))
    names = list(fns)
    res = {n: work / statistics.median(meds[n]) for n in names}
    print(sh, " ".join(f"{n} {res[n]:.1f}" for n in names), unit, "| ratio vs first:",
          " ".join(f"{n} {res[n]/res[names[0]]:.3f}" for n in names[1:]),
          "| per-round:", " ".join(n + " " + "/".join(f"{work/x:.0f}" for x in meds[n]) for n in names), "| load %.1f" % os.getloadavg()[0], flush=True)
