#!/usr/bin/env python3
"""Summarizes the per-instruction profiles bench/ncu_source.sh writes (ncu SourceCounters, CSV):
executed instructions and stall samples per instruction class, and the lines with the most stall
samples with their top stall reasons -- the side-by-side of fa4's and a peer's kernel
(docs/perf/sm90-notes.md). No GPU needed.

    python3 bench/ncu_source_summary.py OUT/src_d128_s8192_c0.csv.gz OUT/src_d128_s8192_c0_fa3.csv.gz [--top 25]
"""
import argparse
import collections
import csv
import gzip

CLASSES = [  # (class, SASS opcode bases)
    ("HGMMA", {"HGMMA"}),
    ("MUFU", {"MUFU"}),
    ("fp32", {"FMUL", "FFMA", "FADD", "FMNMX", "FMNMX3", "FSEL", "FSETP"}),
    ("cvt", {"F2FP", "F2F"}),
    ("sync", {"BAR", "WARPGROUP", "SYNCS", "WARPSYNC", "BSYNC", "BSSY", "NANOSLEEP", "DEPBAR"}),
    ("shfl/vote", {"SHFL", "VOTE", "VOTEU", "REDUX"}),
    ("mem", {"LDS", "STS", "LDSM", "STSM", "LD", "ST", "STG", "LDG", "UBLKCP", "UTMALDG", "UTMASTG", "LDC", "ULDC"}),
    ("branch", {"BRA", "EXIT", "RET", "CALL", "JMP", "BRX"}),
]


def opclass(src):
    words = src.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    base = words[0].split(".")[0] if words else ""
    for name, ops in CLASSES:
        if base in ops:
            return name
    return "uniform" if base.startswith("U") else "int/other"


def load(path):
    rows = list(csv.reader(gzip.open(path, "rt") if path.endswith(".gz") else open(path)))
    return rows[0][1] if len(rows[0]) > 1 else "", rows[1], rows[2:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    for path in a.csv:
        kernel, hdr, data = load(path)
        i_s, i_i, i_src = (hdr.index(h) for h in ("Warp Stall Sampling (All Samples)", "Instructions Executed", "Source"))
        stalls = [(i, h[len("stall_"):]) for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
        num = lambda r, i: int(r[i] or 0)
        tot_s = sum(num(r, i_s) for r in data) or 1
        tot_i = sum(num(r, i_i) for r in data) or 1
        print(f"== {path}\n   {kernel[:110]}\n   stall samples {tot_s}, instructions executed {tot_i}")
        by = collections.defaultdict(lambda: [0, 0])
        for r in data:
            c = by[opclass(r[i_src].strip())]
            c[0] += num(r, i_s)
            c[1] += num(r, i_i)
        for name, (s, i) in sorted(by.items(), key=lambda kv: -kv[1][0]):
            print(f"   {name:10s} samples {100 * s / tot_s:5.1f} %   instructions {i:11d} ({100 * i / tot_i:5.1f} %)")
        print(f"   top {a.top} lines by stall samples (index, share, executions, SASS, top reasons):")
        for k in sorted(range(len(data)), key=lambda k: -num(data[k], i_s))[: a.top]:
            r = data[k]
            why = sorted(((num(r, i), h) for i, h in stalls), reverse=True)[:3]
            print(f"   {k:5d} {100 * num(r, i_s) / tot_s:4.1f} % x{num(r, i_i):9d}  {r[i_src].strip()[:56]:56s} "
                  + " ".join(f"{h}:{v}" for v, h in why if v))


if __name__ == "__main__":
    main()
