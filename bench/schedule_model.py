#!/usr/bin/env python3
"""Makespan model of the sm90 kernel's persistent tile schedules (common/tile_schedule.h) under a
causal mask: the prediction behind FA4_SM90_MASKED_LPT (cuda/plan.cpp), to be checked on the GPU.

A query tile's cost is its key tiles + 1 (prologue / epilogue); causal tile x of a sequence with
gx tiles (taken heaviest first) costs gx - x + 1. Each schedule is reported as makespan / even
split over 132 SMs:
  rr      static: round r gives CTA b tile r * ctas + b, in the schedule's order
  snake   static, odd rounds backwards
  greedy  each tile to the CTA that frees first, in the schedule's order (what the hardware's
          dispatch of one CTA per tile does)
for `section` = 1 (one head's tiles back to back), the L2-sized sections, and all pairs (global
heaviest-first).   python3 bench/schedule_model.py
"""
import heapq

SMS = 132


def costs(gx, pairs, section):
    out, full = [], section * gx
    for t in range(gx * pairs):
        sec = t // full
        here = min(section, pairs - sec * section)
        x = (t - sec * full) // here
        out.append(gx - x + 1)
    return out


def static(cs, snake):
    load = [0] * SMS
    for t, c in enumerate(cs):
        r, b = divmod(t, SMS)
        load[SMS - 1 - b if snake and r % 2 else b] += c
    return max(load)


def greedy(cs):
    h = [(0, i) for i in range(SMS)]
    for c in cs:
        l, i = heapq.heappop(h)
        heapq.heappush(h, (l + c, i))
    return max(l for l, _ in h)


def main():
    # (label, query tiles per sequence, (head, batch) pairs, L2 section of cuda/plan.cpp)
    shapes = [("D64 S1k", 6, 512, 50), ("D64 S8k", 43, 64, 12), ("D128 S1k", 8, 256, 50),
              ("D128 S4k", 32, 64, 12), ("D128 S8k", 64, 32, 6), ("D128 S16k", 128, 16, 3),
              ("D256 S1k", 8, 128, 25), ("D256 S8k", 64, 16, 3)]
    print("| shape | section | rr | snake | greedy |\n|---|---|---|---|---|")
    for name, gx, pairs, l2sec in shapes:
        for sec in sorted({1, l2sec, pairs}):
            cs = costs(gx, pairs, sec)
            even = sum(cs) / SMS
            print(f"| {name} | {sec} | {static(cs, False) / even:.3f} | {static(cs, True) / even:.3f} | "
                  f"{greedy(cs) / even:.3f} |")


if __name__ == "__main__":
    main()
