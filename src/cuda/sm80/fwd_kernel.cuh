// The sm80 portable forward kernel: FlashAttention-2 structure on mma.sync m16n8k16.
//
// One CTA computes a tile of kBlockM query rows of one (batch, head) -- or, with PackGQA, of the
// (query row, head) pairs of one kv head -- against the key range its mask can see (or one split
// of it). K/V tiles of kBlockN keys stream through a kStages-deep cp.async ring; each warp
// computes S = Q K^T for its rows x keys, applies softcap / mask, updates a running max and sum
// in registers (online softmax, log2 domain, exp2 on the MUFU unit) and accumulates O += P V with
// P taken straight from the S accumulators (the m16n8 C fragment of two n-tiles is the A fragment
// of one k16 step). The epilogue merges the warps' partial states through shared memory, adds the
// sink, normalizes, and writes out (+ lse) or the fp32 partials of a split.
//
// Shared memory tiles are row-major [rows][D] with the 16-byte chunks of each row XOR-swizzled by
// (row % 8), so both the cp.async writes and the ldmatrix reads (8 rows x 16 bytes) hit 8
// distinct bank groups; needs D % 64 == 0, which the instantiated dims are.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <climits>
#include <cstdint>

#include "cuda/common/fwd_args.h"
#include "cuda/common/seq_info.cuh"
#include "cuda/ptx/sm80_ptx.cuh"
#include "cuda/sm80/fwd_configs.h"

namespace fa4::cuda::sm80 {

template <typename Elem_, int kDqk_, int kDv_, int kBlockM_, int kBlockN_, int kWarpsM_, int kWarpsN_, int kStages_>
struct FwdTraits {
  using Elem = Elem_;
  static constexpr int kDqk = kDqk_, kDv = kDv_, kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kStages = kStages_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWarpRows = kBlockM / kWarpsM;  // query rows of one warp
  static constexpr int kMT = kWarpRows / 16;           // m16 tiles per warp
  static constexpr int kWarpKeys = kBlockN / kWarpsN;  // keys of one warp per tile
  static constexpr int kNT = kWarpKeys / 8;            // n8 tiles of S per warp
  static constexpr int kOT = kDv / 8;                  // n8 tiles of O per warp
  static constexpr int kQElems = kBlockM * kDqk;
  static constexpr int kKElems = kBlockN * kDqk;
  static constexpr int kVElems = kBlockN * kDv;
  static constexpr int kOStride = kDv + 8;  // fp32 staging row: +8 floats = 2-way (minimal) conflicts
  static constexpr int kSmemBytes = smem_bytes(TileCfg{kBlockM, kBlockN, kWarpsM, kWarpsN, kStages}, kDqk, kDv);
  static_assert(kWarpRows % 16 == 0 && kWarpKeys % 16 == 0, "warp tile must be whole m16 x k16 steps");
  static_assert(kDqk % 64 == 0 && kDv % 64 == 0, "swizzle needs rows of a multiple of 8 chunks");
  static_assert(kStages >= 2, "the pipeline issues the next tile before computing the current one");
};

// Element offset of (row, 16-byte chunk) in a swizzled [rows][D] tile.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + (((chunk & ~7) | ((chunk ^ row) & 7)) << 3);
}

// Loads rows [n0, n0 + kRows) of a K or V tile; rows >= len and columns >= d are zero-filled.
template <typename Elem, int kRows, int kD, int kThreads>
__device__ __forceinline__ void load_kv_tile(Elem* s, const Elem* g, const KvAddr& addr, int n0, int len, int d,
                                             int tid) {
  constexpr int kChunks = kD / 8;
#pragma unroll
  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const int j = n0 + r;
    const Elem* src = g;
    uint32_t bytes = 0;
    if (j < len) {
      const int valid = d - ch * 8;
      bytes = valid >= 8 ? 16u : (valid > 0 ? 2u * valid : 0u);
      if (bytes) src = g + addr.row(j) + ch * 8;
    }
    ptx::cp_async_16(ptx::smem_u32(s + swz<kD>(r, ch)), src, bytes);
  }
}

template <class T>
__global__ void __launch_bounds__(T::kThreads) fwd_kernel(const __grid_constant__ FwdArgs p) {
  using Elem = typename T::Elem;
  constexpr int kDqk = T::kDqk, kDv = T::kDv, kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  constexpr int kMT = T::kMT, kNT = T::kNT, kOT = T::kOT, kStages = T::kStages, kThreads = T::kThreads;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Elem* sQ = reinterpret_cast<Elem*>(smem_raw);
  Elem* sK = sQ + T::kQElems;
  Elem* sV = sK + kStages * T::kKElems;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % T::kWarpsM, wn = warp / T::kWarpsM;
  const int g = lane >> 2, t4 = lane & 3;  // mma fragment coordinates: row group, column pair

  const int m_block = blockIdx.x;
  const int head_idx = blockIdx.y;  // kv head (PackGQA) or query head
  const int batch = blockIdx.z / p.num_splits, split = blockIdx.z % p.num_splits;
  SeqInfo si;
  si.init(p, batch);
  const int64_t rows_seq = p.pack_gqa ? si.sq * p.group : si.sq;
  const int64_t m0 = static_cast<int64_t>(m_block) * kBlockM;
  if (m0 >= rows_seq) return;
  const int hk = p.pack_gqa ? head_idx : head_idx / p.group;
  const int sk = static_cast<int>(si.sk < INT_MAX ? si.sk : INT_MAX);

  // Tile row r -> (query row, query head).
  auto row_i = [&](int64_t m) -> int64_t { return p.pack_gqa ? m / p.group : m; };
  auto row_h = [&](int64_t m) -> int { return p.pack_gqa ? hk * p.group + static_cast<int>(m % p.group) : head_idx; };

  // Key range of the whole tile (mask), then this split's share of its kBlockN tiles.
  const core::SeqMask sm{p.mask, si.sq, si.sk};
  const int64_t m_last = (m0 + kBlockM < rows_seq ? m0 + kBlockM : rows_seq) - 1;
  const int64_t i_first = row_i(m0), i_last = row_i(m_last);
  int64_t klo, khi;
  sm.key_range(i_first, i_last + 1, &klo, &khi);
  if (klo > sk) klo = sk;
  if (khi > sk) khi = sk;
  int n_lo = static_cast<int>(klo / kBlockN);
  int n_hi = khi > klo ? static_cast<int>((khi + kBlockN - 1) / kBlockN) : n_lo;
  if (p.num_splits > 1) {
    const int per = (n_hi - n_lo + p.num_splits - 1) / p.num_splits;
    const int lo = n_lo + split * per;
    n_lo = lo < n_hi ? lo : n_hi;
    n_hi = lo + per < n_hi ? lo + per : n_hi;
  }
  const int n_tiles = n_hi - n_lo;

  const Elem* gq = static_cast<const Elem*>(p.q);
  const Elem* gk = static_cast<const Elem*>(p.k);
  const Elem* gv = static_cast<const Elem*>(p.v);
  KvAddr kaddr, vaddr;
  kaddr.init(p, si, p.k_s0, p.k_s1, p.k_sh, hk);
  vaddr.init(p, si, p.v_s0, p.v_s1, p.v_sh, hk);

  // ---- prologue: Q tile + the first kStages - 1 K/V tiles ----
  {
    constexpr int kChunks = kDqk / 8;
#pragma unroll
    for (int c = tid; c < kBlockM * kChunks; c += kThreads) {
      const int r = c / kChunks, ch = c % kChunks;
      const int64_t m = m0 + r;
      const Elem* src = gq;
      uint32_t bytes = 0;
      if (m < rows_seq) {
        const int valid = p.dqk - ch * 8;
        bytes = valid >= 8 ? 16u : (valid > 0 ? 2u * valid : 0u);
        if (bytes) src = gq + si.q_base + row_i(m) * si.q_step + static_cast<int64_t>(row_h(m)) * p.q_sh + ch * 8;
      }
      ptx::cp_async_16(ptx::smem_u32(sQ + swz<kDqk>(r, ch)), src, bytes);
    }
  }
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) {
      const int n0 = (n_lo + s) * kBlockN;
      load_kv_tile<Elem, kBlockN, kDqk, kThreads>(sK + s * T::kKElems, gk, kaddr, n0, sk, p.dqk, tid);
      load_kv_tile<Elem, kBlockN, kDv, kThreads>(sV + s * T::kVElems, gv, vaddr, n0, sk, p.dv, tid);
    }
    ptx::cp_async_commit();
  }

  // ---- per-thread row state ----
  // This thread's accumulator rows: rr = 2 * mt + half -> tile row wm*kWarpRows + mt*16 + g + 8*half.
  float m_run[2 * kMT], l_run[2 * kMT];
  int row_lo[2 * kMT], row_hi[2 * kMT];
#pragma unroll
  for (int rr = 0; rr < 2 * kMT; ++rr) {
    m_run[rr] = -INFINITY;
    l_run[rr] = 0.f;
    const int64_t i = row_i(m0 + wm * T::kWarpRows + (rr >> 1) * 16 + g + (rr & 1) * 8);
    const int64_t lo = sm.row_lo(i), hi = sm.row_hi(i);
    row_lo[rr] = static_cast<int>(lo < sk ? lo : sk);
    row_hi[rr] = static_cast<int>(hi < sk ? hi : sk);
  }
  float o[kMT][kOT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int ot = 0; ot < kOT; ++ot)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][ot][e] = 0.f;

  const bool softcap = p.softcap_log2 != 0.f;
  const int q_row0 = wm * T::kWarpRows;
  const int key0 = wn * T::kWarpKeys;

  // ---- main loop over key tiles ----
  for (int t = 0; t < n_tiles; ++t) {
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t landed for every thread; every warp is done with tile t - 1's stage
    {
      const int tn = t + kStages - 1;
      if (tn < n_tiles) {
        const int st = tn % kStages, n0 = (n_lo + tn) * kBlockN;
        load_kv_tile<Elem, kBlockN, kDqk, kThreads>(sK + st * T::kKElems, gk, kaddr, n0, sk, p.dqk, tid);
        load_kv_tile<Elem, kBlockN, kDv, kThreads>(sV + st * T::kVElems, gv, vaddr, n0, sk, p.dv, tid);
      }
      ptx::cp_async_commit();
    }
    const int stage = t % kStages;
    const Elem* tK = sK + stage * T::kKElems;
    const Elem* tV = sV + stage * T::kVElems;
    const int n0 = (n_lo + t) * kBlockN;

    // S = Q K^T   [kMT*16 rows x kNT*8 keys] per warp
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kDqk / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        ptx::ldmatrix_x4(ptx::smem_u32(sQ + swz<kDqk>(q_row0 + mt * 16 + (lane & 15), kk * 2 + (lane >> 4))), a[mt][0],
                         a[mt][1], a[mt][2], a[mt][3]);
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b0, b1, b2, b3;
        ptx::ldmatrix_x4(
            ptx::smem_u32(tK + swz<kDqk>(key0 + np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1))),
            b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          ptx::mma_16816<Elem>(s[mt][2 * np], a[mt], b0, b1);
          ptx::mma_16816<Elem>(s[mt][2 * np + 1], a[mt], b2, b3);
        }
      }
    }

    // Scores -> log2 units (softcap first), mask partial tiles.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[mt][nt][e];
          if (softcap) {
            // tanh(y) = 1 - 2 / (e^{2y} + 1): exact to a few ulp with ex2.approx (tanh.approx's
            // 2^-11 relative error, times a softcap of ~30, would be visible in fp16 outputs).
            const float e2 = ptx::exp2_approx(x * p.softcap_in * 2.f * 1.4426950408889634f);
            x = p.softcap_log2 * (1.f - __fdividef(2.f, e2 + 1.f));
          } else {
            x *= p.scale_log2;
          }
          s[mt][nt][e] = x;
        }
    const core::TileKind kind =
        sm.classify(i_first, i_last + 1, n0, static_cast<int64_t>(n0) + kBlockN);
    if (kind != core::TileKind::full || n0 + kBlockN > sk) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int rr = 2 * mt + (e >> 1);
            const int j = n0 + key0 + nt * 8 + 2 * t4 + (e & 1);
            if (j < row_lo[rr] || j >= row_hi[rr]) s[mt][nt][e] = -INFINITY;
          }
    }

    // Online softmax (per row: max over the quad's 4 lanes, rescale O and the running sum).
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int rr = 2 * mt + half;
        float mx = m_run[rr];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_use = mx == -INFINITY ? 0.f : mx;  // all-masked so far: keep exp2 args finite
        const float alpha = ptx::exp2_approx(m_run[rr] - m_use);
        m_run[rr] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const float p0 = ptx::exp2_approx(s[mt][nt][2 * half] - m_use);
          const float p1 = ptx::exp2_approx(s[mt][nt][2 * half + 1] - m_use);
          s[mt][nt][2 * half] = p0;
          s[mt][nt][2 * half + 1] = p1;
          sum += p0 + p1;
        }
        l_run[rr] = l_run[rr] * alpha + sum;
#pragma unroll
        for (int ot = 0; ot < kOT; ++ot) {
          o[mt][ot][2 * half] *= alpha;
          o[mt][ot][2 * half + 1] *= alpha;
        }
      }

    // O += P V   (P: the S accumulators, repacked as 16-bit A fragments)
#pragma unroll
    for (int kk = 0; kk < T::kWarpKeys / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = ptx::pack2<Elem>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = ptx::pack2<Elem>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = ptx::pack2<Elem>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = ptx::pack2<Elem>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDv / 16; ++dp) {
        uint32_t b0, b1, b2, b3;
        ptx::ldmatrix_x4_trans(
            ptx::smem_u32(tV + swz<kDv>(key0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 2 + (lane >> 4))),
            b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          ptx::mma_16816<Elem>(o[mt][2 * dp], a[mt], b0, b1);
          ptx::mma_16816<Elem>(o[mt][2 * dp + 1], a[mt], b2, b3);
        }
      }
    }
  }

  // ---- epilogue: stage each warp's (O, m, l) in fp32 shared memory, merge, normalize, store ----
  ptx::cp_async_wait<0>();
  __syncthreads();  // all warps done reading K/V; the pipeline buffers become the staging area
  float* sO = reinterpret_cast<float*>(smem_raw);                    // [kWarpsN][kBlockM][kOStride]
  float* sM = sO + T::kWarpsN * kBlockM * T::kOStride;               // [kWarpsN][kBlockM]
  float* sL = sM + T::kWarpsN * kBlockM;                             // [kWarpsN][kBlockM]
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int rr = 2 * mt + half;
      const int row = q_row0 + mt * 16 + g + 8 * half;
      float l = l_run[rr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      float* dst = sO + (wn * kBlockM + row) * T::kOStride + 2 * t4;
#pragma unroll
      for (int ot = 0; ot < kOT; ++ot)
        *reinterpret_cast<float2*>(dst + ot * 8) = make_float2(o[mt][ot][2 * half], o[mt][ot][2 * half + 1]);
      if (t4 == 0) {
        sM[wn * kBlockM + row] = m_run[rr];
        sL[wn * kBlockM + row] = l;
      }
    }
  __syncthreads();

  const bool add_sink = p.sinks != nullptr && split == 0;
  constexpr int kChunks = kDv / 8;
  for (int c = tid; c < kBlockM * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const int64_t m = m0 + r;
    if (m >= rows_seq) continue;
    const int64_t i = row_i(m);
    const int h = row_h(m);
    const float sink = add_sink ? p.sinks[h * p.sinks_st] * 1.4426950408889634f : -INFINITY;
    float mx = sink;
#pragma unroll
    for (int w = 0; w < T::kWarpsN; ++w) mx = fmaxf(mx, sM[w * kBlockM + r]);
    const float m_use = mx == -INFINITY ? 0.f : mx;
    float l = add_sink ? ptx::exp2_approx(sink - m_use) : 0.f;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
#pragma unroll
    for (int w = 0; w < T::kWarpsN; ++w) {
      const float f = ptx::exp2_approx(sM[w * kBlockM + r] - m_use);
      l += sL[w * kBlockM + r] * f;
      const float4* src = reinterpret_cast<const float4*>(sO + (w * kBlockM + r) * T::kOStride + ch * 8);
      const float4 x0 = src[0], x1 = src[1];
      acc[0] += f * x0.x, acc[1] += f * x0.y, acc[2] += f * x0.z, acc[3] += f * x0.w;
      acc[4] += f * x1.x, acc[5] += f * x1.y, acc[6] += f * x1.z, acc[7] += f * x1.w;
    }
    // Empty row (no visible key, no sink): l == 0 -> O = 0, lse = -inf.
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] *= inv;
    const float lse = l > 0.f ? (m_use + __log2f(l)) * 0.6931471805599453f : -INFINITY;

    if (p.num_splits == 1) {
      Elem* dst = static_cast<Elem*>(p.out) + si.o_base + i * si.o_step + static_cast<int64_t>(h) * p.o_sh + ch * 8;
      const int valid = p.dv - ch * 8;
      if (valid >= 8) {
        uint4 v;
        v.x = ptx::pack2<Elem>(acc[0], acc[1]);
        v.y = ptx::pack2<Elem>(acc[2], acc[3]);
        v.z = ptx::pack2<Elem>(acc[4], acc[5]);
        v.w = ptx::pack2<Elem>(acc[6], acc[7]);
        *reinterpret_cast<uint4*>(dst) = v;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (e < valid) {
            const uint32_t pr = ptx::pack2<Elem>(acc[e], 0.f);
            dst[e] = *reinterpret_cast<const Elem*>(&pr);
          }
      }
      if (ch == 0 && p.lse != nullptr) {
        const int64_t lo = p.varlen_q ? (si.token0 + i) * p.lse_si : batch * p.lse_sb + i * p.lse_si;
        p.lse[lo + h * p.lse_sh] = lse;
      }
    } else {
      const int64_t prow = (static_cast<int64_t>(split) * p.rows_total + si.token0 + i) * p.hq + h;
      float4* dst = reinterpret_cast<float4*>(p.o_part + prow * p.dv_pad + ch * 8);
      dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
      if (ch == 0) p.lse_part[prow] = lse;
    }
  }
}

}  // namespace fa4::cuda::sm80
