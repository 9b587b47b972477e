// The fp32 forward kernel: plain SIMT code (CUDA cores, fp32 FMA), simple rather than fast.
//
// One CTA = kF32Rows warps = kF32Rows consecutive tile rows of one (batch, head) -- or, with
// PackGQA, of the (query row, head in group) pairs of one kv head -- exactly the row mapping of
// the sm80 kernel, so the split-KV partial layout and the combine kernel are shared. Each warp
// owns one row. Key tiles of kF32Keys keys stream through shared memory (loaded by the whole
// CTA, used by every warp whose row sees them):
//   * scores: lane l computes the dot product of the row's q (shared memory, broadcast) with key
//     n0 + l (shared memory, odd row stride = conflict-free), then softcap / scale into the log2
//     domain and the row's mask (keys outside its visible interval get -inf);
//   * online softmax in fp32: warp max, rescale factor, p = 2^(x - m); every lane keeps a
//     partial row sum, reduced once at the end;
//   * O += P V: lanes own output dims d = lane + 32 c; p_j is broadcast with __shfl_sync. Only
//     the row's visible keys are visited (a warp-uniform interval), so a masked key's V (even a
//     NaN) never reaches the accumulator.
// The epilogue adds the sink (split 0 only), normalizes and writes out (+ lse) or the fp32
// partials of a split, like the sm80 kernel's epilogue.
//
// Accuracy (DESIGN §4, fp32: rel L2 1e-5, max abs 1e-4) under --use_fast_math: exp2f is
// ex2.approx (~2 ulp), the dot products and sums are plain fp32; the softcap's tanh is computed
// here from Taylor series / exp2 with IEEE-rounded division and reciprocal (__fdiv_rn,
// __frcp_rn), never from tanh.approx or __fdividef.
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>

#include "core/mask.h"
#include "cuda/common/fwd_args.h"
#include "cuda/common/seq_info.cuh"
#include "cuda/simt/fwd_f32.h"

namespace fa4::cuda::simt {
namespace {

constexpr int kRows = kF32Rows, kKeys = kF32Keys, kThreads = kF32Threads;
constexpr int kMaxOC = kF32MaxDim / 32;      // output column groups per lane
constexpr int kKeysPerWarp = kKeys / kRows;  // K/V rows each warp copies per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
static_assert(kKeys == 32, "one key per lane in the score phase");
static_assert(kKeys % kRows == 0, "the tile's rows split evenly over the warps");

// tanh(y) to a few fp32 ulp without tanh.approx / __fdividef (which --use_fast_math would
// otherwise pick): odd Taylor series of sinh / cosh for |y| < 0.55 (truncation < 1e-9
// relative), 1 - 2 / (e^{2|y|} + 1) above (tanh >= 0.5 there, so no cancellation). NaN
// propagates (the comparison fails, exp2f(NaN) = NaN).
__device__ __forceinline__ float tanh_f32(float y) {
  const float a = fabsf(y);
  float t;
  if (a < 0.55f) {
    const float a2 = a * a;
    const float sh = fmaf(a2, fmaf(a2, fmaf(a2, fmaf(a2, 1.f / 362880.f, 1.f / 5040.f), 1.f / 120.f), 1.f / 6.f), 1.f);
    const float ch = fmaf(a2, fmaf(a2, fmaf(a2, fmaf(a2, 1.f / 40320.f, 1.f / 720.f), 1.f / 24.f), 0.5f), 1.f);
    t = __fdiv_rn(a * sh, ch);
  } else {
    const float e = exp2f(a * (2.f * kLog2e));  // e^{2|y|}; +inf for large |y| -> t = 1
    t = fmaf(-2.f, __frcp_rn(e + 1.f), 1.f);
  }
  return copysignf(t, y);
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One K or V tile -> shared memory: warp w copies the tile rows w, w + kRows, ... (element
// offsets `off` in `g`, -1 = no key), lanes walk the columns [0, cols) (coalesced); keys past the
// sequence and columns d >= dim are zeros. A plain function rather than a lambda: a lambda
// version of this dedupe changed the kernel's code generation; this one gives the PTX of the two
// loops it replaced (up to register names and the operand order of one `or`) and no spills.
__device__ __forceinline__ void copy_rows(float* s, int stride, int cols, const float* g,
                                          const int64_t (&off)[kKeysPerWarp], int dim, int warp, int lane) {
#pragma unroll 1
  for (int d = lane; d < cols; d += 32) {
    float x[kKeysPerWarp];
#pragma unroll
    for (int u = 0; u < kKeysPerWarp; ++u) x[u] = (off[u] >= 0 && d < dim) ? __ldg(g + off[u] + d) : 0.f;
#pragma unroll
    for (int u = 0; u < kKeysPerWarp; ++u) s[(warp + u * kRows) * stride + d] = x[u];
  }
}

__global__ void __launch_bounds__(kThreads, 4) fwd_f32_kernel(const __grid_constant__ FwdArgs p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const F32Smem L(p.dqk, p.dv);
  int64_t* sOffK = reinterpret_cast<int64_t*>(smem_raw);
  int64_t* sOffV = sOffK + kKeys;
  float* sQ = reinterpret_cast<float*>(smem_raw + L.q_off);
  float* sK = reinterpret_cast<float*>(smem_raw + L.k_off);
  float* sV = reinterpret_cast<float*>(smem_raw + L.v_off);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int head_idx = blockIdx.y;  // kv head (PackGQA) or query head
  int m_block, batch, split;
  // Varlen q: the grid holds sum_b ceil(rows_b / kRows) + batch CTAs in x instead of
  // batch x ceil(total rows / kRows), nearly all of which would exit at once.
  if (!cta_tile<true>(p, kRows, &m_block, &batch, &split)) return;
  SeqInfo si;
  si.init(p, batch);
  // Tile rows of this (batch, head): < 2^31 (cuda_check), so row arithmetic is 32-bit.
  const int rows_seq = static_cast<int>(p.pack_gqa ? si.sq * p.group : si.sq);
  const int m0 = m_block * kRows;
  if (m0 >= rows_seq) return;  // uniform over the CTA, before any barrier
  const int hk = p.pack_gqa ? head_idx : head_idx / p.group;
  const int sk = static_cast<int>(si.sk < INT_MAX ? si.sk : INT_MAX);

  // Tile row m -> (query row, query head).
  auto row_i = [&](int m) -> int { return p.pack_gqa ? m / p.group : m; };
  auto row_h = [&](int m) -> int { return p.pack_gqa ? hk * p.group + m % p.group : head_idx; };

  // Keys of the whole CTA (mask), then this split's share of its kKeys tiles.
  const core::SeqMask sm{p.mask, si.sq, si.sk};
  const int m_last = (m0 + kRows < rows_seq ? m0 + kRows : rows_seq) - 1;
  int n_lo, n_hi;
  key_tiles(p, si, row_i(m0), row_i(m_last), sk, kKeys, split, &n_lo, &n_hi);

  // This warp's row and its visible keys [row_lo, row_hi) (empty when row_lo >= row_hi).
  const int m = m0 + warp;
  const bool row_valid = m < rows_seq;
  int64_t qi = 0;
  int h = 0, row_lo = 0, row_hi = 0;
  if (row_valid) {
    qi = row_i(m);
    h = row_h(m);
    row_lo = static_cast<int>(clamp64(sm.row_lo(qi), 0, sk));
    row_hi = static_cast<int>(clamp64(sm.row_hi(qi), 0, sk));
  }

  // q row -> shared memory (zeros past dqk and for rows beyond the sequence).
  {
    const float* gq = static_cast<const float*>(p.q) + si.q_base + qi * si.q_step + static_cast<int64_t>(h) * p.q_sh;
    for (int d = lane; d < L.dqk4; d += 32) sQ[warp * L.dqk4 + d] = (row_valid && d < p.dqk) ? __ldg(gq + d) : 0.f;
  }

  const float* gk = static_cast<const float*>(p.k);
  const float* gv = static_cast<const float*>(p.v);
  KvAddr kaddr, vaddr;
  kaddr.init(p, si, p.k_s0, p.k_s1, p.k_sh, hk);
  vaddr.init(p, si, p.v_s0, p.v_s1, p.v_sh, hk);

  const bool softcap = p.softcap_log2 != 0.f;
  const int noc = L.dv32 / 32;  // output column groups in use
  float m_run = -INFINITY;      // running max, log2 units (warp-uniform)
  float l_part = 0.f;           // this lane's share of the running sum
  float o[kMaxOC];
#pragma unroll
  for (int c = 0; c < kMaxOC; ++c) o[c] = 0.f;

  for (int t = n_lo; t < n_hi; ++t) {
    const int n0 = t * kKeys;
    __syncthreads();  // every warp is done with the previous tile (and its offsets)
    if (tid < kKeys) {
      const int j = n0 + tid;
      int64_t ok = -1, ov = -1;
      if (j < sk) {
        ok = kaddr.row(j);
        ov = vaddr.row(j);
      }
      sOffK[tid] = ok;
      sOffV[tid] = ov;
    }
    __syncthreads();
    // K and V tiles: warp w copies key rows w, w + kRows, ...; lanes walk the columns
    // (coalesced). Keys past the sequence and padding columns are zeros.
    {
      int64_t okr[kKeysPerWarp], ovr[kKeysPerWarp];
#pragma unroll
      for (int u = 0; u < kKeysPerWarp; ++u) {
        okr[u] = sOffK[warp + u * kRows];
        ovr[u] = sOffV[warp + u * kRows];
      }
      copy_rows(sK, L.kst, L.dqk4, gk, okr, p.dqk, warp, lane);
      copy_rows(sV, L.dv32, L.dv32, gv, ovr, p.dv, warp, lane);
    }
    __syncthreads();

    // This row's visible keys in the tile: [jlo, jhi), warp-uniform.
    const int jlo = row_lo > n0 ? row_lo : n0;
    const int jhi = row_hi < n0 + kKeys ? row_hi : n0 + kKeys;
    if (jlo >= jhi) continue;

    // Scores: lane l takes key n0 + l.
    const int j = n0 + lane;
    float x;
    {
      const float* kr = sK + lane * L.kst;
      const float* qr = sQ + warp * L.dqk4;
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll 4
      for (int d = 0; d < L.dqk4; d += 4) {
        const float4 qv = *reinterpret_cast<const float4*>(qr + d);
        a0 = fmaf(qv.x, kr[d], a0);
        a1 = fmaf(qv.y, kr[d + 1], a1);
        a2 = fmaf(qv.z, kr[d + 2], a2);
        a3 = fmaf(qv.w, kr[d + 3], a3);
      }
      const float dot = (a0 + a1) + (a2 + a3);
      x = softcap ? p.softcap_log2 * tanh_f32(dot * p.softcap_in) : dot * p.scale_log2;
      if (j < jlo || j >= jhi) x = -INFINITY;
    }

    // Online softmax (log2 domain).
    const float m_new = fmaxf(m_run, warp_max(x));
    const float m_use = m_new == -INFINITY ? 0.f : m_new;  // nothing finite yet: keep args finite
    const float alpha = exp2f(m_run - m_use);              // 0 on the first visible tile
    const float pr = exp2f(x - m_use);                     // 0 for masked lanes
    m_run = m_new;
    l_part = fmaf(l_part, alpha, pr);
#pragma unroll
    for (int c = 0; c < kMaxOC; ++c) o[c] *= alpha;

    // O += P V over the visible keys only.
#pragma unroll 2
    for (int jj = jlo - n0; jj < jhi - n0; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, pr, jj);
      const float* vr = sV + jj * L.dv32 + lane;
#pragma unroll
      for (int c = 0; c < kMaxOC; ++c)
        if (c < noc) o[c] = fmaf(pj, vr[32 * c], o[c]);
    }
  }
  if (!row_valid) return;  // no barrier below

  // ---- epilogue: sink, normalize, write out (+ lse) or this split's partials ----
  float l = warp_sum(l_part);
  float mrow = m_run;  // log2 units, -inf when nothing was visible
  float f = 1.f;       // rescale of O for the sink
  if (p.sinks != nullptr && split == 0) {
    const float sink = p.sinks[static_cast<int64_t>(h) * p.sinks_st] * kLog2e;
    const float mx = fmaxf(mrow, sink);
    const float mu = mx == -INFINITY ? 0.f : mx;
    f = exp2f(mrow - mu);
    l = fmaf(l, f, exp2f(sink - mu));
    mrow = mx;
  }
  // Empty row (no visible key, no sink): l == 0 -> O = 0, lse = -inf. (A NaN l propagates.)
  const bool empty = l == 0.f;
  const float inv = empty ? 0.f : f * __frcp_rn(l);
  const float lse = empty ? -INFINITY : (mrow + log2f(l)) * kLn2;

  float* dst;
  if (p.num_splits == 1) {
    dst = static_cast<float*>(p.out) + si.o_base + qi * si.o_step + static_cast<int64_t>(h) * p.o_sh;
    if (lane == 0 && p.lse != nullptr) {
      p.lse[si.lse_row(p, qi) + static_cast<int64_t>(h) * p.lse_sh] = lse;
    }
  } else {
    const int64_t prow = (static_cast<int64_t>(split) * p.rows_total + si.token0 + qi) * p.hq + h;
    dst = p.o_part + prow * p.dv_pad;
    if (lane == 0) p.lse_part[prow] = lse;
  }
#pragma unroll
  for (int c = 0; c < kMaxOC; ++c) {
    const int d = lane + 32 * c;
    if (c < noc && d < p.dv) dst[d] = empty ? 0.f : o[c] * inv;
  }
}

}  // namespace

cudaError_t launch_fwd_f32(const FwdArgs& p, dim3 grid, cudaStream_t stream) {
  if (p.dqk > kF32MaxDim || p.dv > kF32MaxDim || p.num_splits < 1) return cudaErrorInvalidValue;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
  // blockIdx.x is read as an int (find_varlen_tile takes it as one).
  if (grid.x > static_cast<unsigned>(INT_MAX) || grid.y > 65535 || grid.z > 65535) return cudaErrorInvalidConfiguration;

  const int smem = fwd_f32_smem_bytes(p.dqk, p.dv);
  if (smem > 48 * 1024) {
    // The dynamic shared-memory opt-in is per device: set it once per device, to the largest
    // tile (cudaFuncSetAttribute is not a stream operation, so this stays CUDA-graph safe).
    static std::atomic<int> configured[64] = {};
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    const int have = dev >= 0 && dev < 64 ? configured[dev].load() : 0;
    if (have < smem) {
      int optin = 0;
      err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
      if (err != cudaSuccess) return err;
      if (optin < smem) return cudaErrorInvalidConfiguration;
      const int want = fwd_f32_smem_bytes(kF32MaxDim, kF32MaxDim) < optin ? fwd_f32_smem_bytes(kF32MaxDim, kF32MaxDim)
                                                                            : optin;
      err = cudaFuncSetAttribute(fwd_f32_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, want);
      if (err != cudaSuccess) return err;
      if (dev >= 0 && dev < 64) configured[dev].store(want);
    }
  }
  fwd_f32_kernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fa4::cuda::simt
