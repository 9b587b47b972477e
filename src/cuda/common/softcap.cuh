// tanh for softcap (DESIGN §1: s -> softcap * tanh(scale * s / softcap)), shared by the GPU
// kernels. The kernels keep tanh(y) as the score and fold softcap * log2(e) into the
// exponentials' FFMA (their `sc`), so this is the only per-score work softcap adds.
//
// Why two ways (the MUFU budget): an SM's MUFU issues 16 ops per clock; at D 128 the tensor cores
// finish 8 scores per clock (2 GEMMs x 2 x 128 FLOP per score at 4096 FLOP / clock), and the
// softmax already spends one MUFU op (ex2) per score. tanh in one more MUFU op keeps the kernel
// at two per score; tanh from ex2 + rcp made it three, MUFU-bound (0.72-0.76 of FA3 at D 128,
// H200, docs/perf/h200-2026-12-03d-session.md).
//   tanh.approx.f32, one MUFU op. The PTX ISA bounds its relative error by 2^-10.99
//     (times a cap of 30 on saturated outlier rows, modelled in fp64, that bound would put fp16
//     outputs past DESIGN §4's 2e-3 / 1e-2); measured on the H200 (Sm90Mufu.TanhApprox, |y| from
//     2^-30 to 16) it is 2^-16.6, 5.8e-6 absolute where |tanh| > 0.9: below fp16's rounding, so
//     both 16-bit types take it. FA3's choice too. bf16 A/B: rel-L2 / max-abs against fp32 math
//     equal to the ex2 path's and FA3's at every measured row.
//   the ex2 path: 1 - 2 / (e^{2y} + 1) from ex2 + rcp (absolute error ~2^-22), the ablation. Below
//     |y| = 2^-6 it takes y - y^3 / 3 (error < 2^-30 |y|) instead: there e^{2y} - 1 keeps few bits
//     (all of them lost below 2^-25, where a cap of 1e9 zeroed every score).
//
// Switch (A/B builds, bench/stage_sm90_variant.sh): FA4_SOFTCAP_TANH_APPROX 1 = tanh.approx, 0 = the
// ex2 path. Same-run A/B on the H200 (sm90, bf16, peers.py --features, 2026-12-03): tanh.approx
// 1.22x the ex2 path at D 128, 1.40x at D 64, 1.08-1.14x at D 256; the ex2 path with 2^x on the FMA
// pipes (common/exp2.cuh) instead 0.71-0.88x (FMA-bound).
#pragma once

#include <cmath>

#include "cuda/ptx/sm80_ptx.cuh"

#ifndef FA4_SOFTCAP_TANH_APPROX
#define FA4_SOFTCAP_TANH_APPROX 1
#endif

namespace fa4::cuda {

// tanh(y) for y = s * softcap_in; y2_log2e = softcap_in * 2 * log2(e) (precomputed per kernel).
__device__ __forceinline__ float softcap_tanh(float s, float softcap_in, float y2_log2e) {
  if constexpr (FA4_SOFTCAP_TANH_APPROX) {
    return ptx::tanh_approx(s * softcap_in);
  } else {
    const float y = s * softcap_in;
    const float big = 1.f - __fdividef(2.f, ptx::exp2_approx(s * y2_log2e) + 1.f);
    const float small = fmaf(y * y, y * (-1.f / 3.f), y);
    return fabsf(y) < 0.015625f ? small : big;  // NaN: big (NaN) is kept
  }
}

}  // namespace fa4::cuda
