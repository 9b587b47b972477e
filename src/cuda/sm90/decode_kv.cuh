// The keys-on-M decode tile (FA4_SM90_DECODE_KEYS_M, decode_kv.h: the planner's switch, off until
// it has run on a GPU): 16-bit q against an e4m3 K / V cache, D 128, <= 16 packed query
// rows (decode: the GQA group x a few query tokens) per (batch, kv head, split). The lane
// fragments are decode_frag.h's (CPU-emulated in tests/test_sm90_decode_frag.cpp).
//
// Roles (one CTA = 5 warps):
//   warp 0     producer: walks the CTA's key tiles and TMAs each tile's 128 e4m3 K and V rows
//              (one box, or one per page of pages smaller than the tile) into a ring slot (the
//              fp8_kv tile's tensor maps: 128-byte rows, 128-byte swizzle); with per-token factors
//              its lanes copy the slot's k / v factors beside it.
//   warps 1-4  consumers: consumer w owns keys 32w .. 32w + 31 of every slot and keeps its own
//              (O^T, m, l) over them -- S^T = K Q^T and O^T += V^T P^T with mma.sync m16n8k16 in
//              fp16 from registers, softmax along M with three xor-shuffles per row; no consumer
//              waits for another until the merge at the end (through shared memory, LSE-scaled).
// bf16 q is computed in fp16 with a power of two per row (fwd_fp8_kv.h fp8_kv_q_shift), as the
// fp8_kv tile does: every e4m3 value is an fp16 normal, so K and V widen exactly.
//
// What it takes (decode_kv.h decode_keys_m_fits): dense / varlen / cache K / V, the fp8_kv tile's
// pages, any GQA group, any mask (per-row key ranges of core::SeqMask), sinks, softcap, factors per
// (batch, kv head) or per (token, kv head).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "cuda/common/pipeline.cuh"
#include "cuda/common/seq_info.cuh"
#include "cuda/common/softcap.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/ptx/sm80_ptx.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/decode_frag.h"
#include "cuda/sm90/decode_kv.h"
#include "cuda/sm90/fwd_fp8_kv.h"
#include "cuda/sm90/fwd_params.h"

namespace fa4::cuda::sm90::decode {

constexpr int kBlockN = 128;        // keys per ring slot
constexpr int kD = 128;             // head dim (one 128-byte e4m3 row)
constexpr int kTileRows = 8;                     // packed query rows of one mma N tile
constexpr int kMaxRows = kDecodeKeysMRows;       // 16: two N tiles
static_assert(kMaxRows == 2 * kTileRows, "the instances take one or two N tiles");
constexpr int kStages = 3;
constexpr int kConsumers = 4;       // warps
constexpr int kKeysPerWarp = kBlockN / kConsumers;  // 32: two 16-key M tiles
constexpr int kThreads = 32 * (1 + kConsumers);
constexpr uint32_t kSlotBytes = kBlockN * kSlotRowBytes;  // 16 KB each of K and V

// The merge: each consumer's O^T rows (unnormalized, at its own max), m and l per packed row --
// in the K ring's space, free once every consumer is past its last slot.
struct MergeSpace {
  // (rows padded by 4 floats: 2c-strided row writes and 8-float-strided reads spread over the banks)
  float o[kConsumers][kMaxRows][kD + 4];
  float m[kConsumers][kMaxRows];
  float l[kConsumers][kMaxRows];
};
struct alignas(1024) DecodeSmem {
  union {
    uint8_t k[kStages][kSlotBytes];  // [key][128 bytes], 128-byte swizzle (1024-byte aligned slots)
    MergeSpace merge;
  };
  uint8_t v[kStages][kSlotBytes];
  // Per-token factors of each slot's keys (P.k_tok / v_tok), copied by the producer warp's lanes.
  float fk[kStages][kBlockN];
  float fv[kStages][kBlockN];
  // full: 1 arrival + TMA bytes (+ one per producer lane with per-token factors: their cp.asyncs);
  // empty: one arrival per consumer warp
  MbarRing<kStages> ring;
};
static_assert(sizeof(MergeSpace) <= sizeof(DecodeSmem::k), "the merge fits the K ring");
// Two CTAs per SM: 2 x (the struct + 1 KB of alignment slack + the 1 KB the SM reserves per CTA)
// within the SM's 228 KB.
static_assert(kDecodeKeysMCtasPerSm * (sizeof(DecodeSmem) + 2048) <= 233472, "two CTAs per SM");
constexpr int kConsumerBarrier = 1;  // named barrier of the 128 consumer threads (0: __syncthreads)

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
}

// The packed row n -> (query row i, q head): n = i * group + (head - hk * group).
struct PackedRow {
  int i, head;
};
__device__ __forceinline__ PackedRow packed_row(const FwdArgs& a, int hk, int n) {
  return {n / a.group, hk * a.group + n % a.group};
}

// Producer warp: the CTA's key tiles [n_lo, n_hi), K then V of each into the ring. TMA coordinates
// (row, batch-like): dense (key, batch), varlen (cu_seqlens_k[b] + key, 0), cache (key, the cache
// sequence), paged (key % page, the page-table entry). Pages smaller than the slot (8 .. 64 rows
// dividing it: fwd_fp8_kv.h fp8_kv_pages_fit; the fp8_kv tile's maps then have boxes of one page)
// go one box per page: every box starts on a 1024-byte swizzle atom of the slot, so the slot's
// layout is that of one whole-slot box. Lane l reads sub-tile l's page-table entry (one parallel
// load); sub-tiles past the sequence's last key read no entry -- the table may end there -- and
// load page 0, whose rows the consumers mask (K) and zero (V) as any row past sk. Lane 0 issues.
__device__ __forceinline__ void load_kv(const Sm90Params& P, DecodeSmem& sh, const SeqInfo& si, int hk, int sk, int n_lo,
                                        int n_hi) {
  const FwdArgs& a = P.a;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const bool leader = lane == 0;
  const bool paged = a.kv_mode == kKvPaged;
  const int box_rows = paged && a.page_size < kBlockN ? static_cast<int>(a.page_size) : kBlockN;
  const bool tok = (P.k_tok | P.v_tok) != 0;
  KvAddr fk, fv;  // per-token factors: addressed as k's / v's rows, with their strides
  if (tok) {
    fk.init(a, si, P.kd_s0, P.kd_s1, P.kd_sh, hk);
    fv.init(a, si, P.vd_s0, P.vd_s1, P.vd_sh, hk);
  }
  PipelineState<kStages> st;
  for (int t = n_lo; t < n_hi; ++t) {
    const int j0 = t * kBlockN;
    int row = j0, bl = static_cast<int>(si.kv_a);
    if (a.kv_mode == kKvVarlen) {
      row = static_cast<int>(si.kv_a) + j0, bl = 0;
    } else if (paged) {
      row = 0, bl = 0;
      const int j = j0 + lane * box_rows;
      if (lane * box_rows < kBlockN && j < sk) paged_tile_coords(a, si.b, j, &row, &bl);
    }
    uint64_t* full = sh.ring.acquire(st, 2 * kSlotBytes, leader);
    for (int sub = 0; sub * box_rows < kBlockN; ++sub) {
      const int r = __shfl_sync(0xffffffffu, row, sub), b = __shfl_sync(0xffffffffu, bl, sub);
      if (leader) {
        const uint32_t off = static_cast<uint32_t>(sub * box_rows) * kSlotRowBytes;
        ptx::tma_load_4d(sh.k[st.index] + off, &P.tm_k, full, 0, hk, r, b);
        ptx::tma_load_4d(sh.v[st.index] + off, &P.tm_v, full, 0, hk, r, b);
      }
    }
    if (tok) {
      // Lane l copies the factors of keys j0 + l + 32 r (4 bytes each, zero past the sequence:
      // those keys are masked), then its arrival once they land (cp.async.mbarrier.arrive.noinc:
      // the full barrier counts the 32 lanes).
#pragma unroll
      for (int r = 0; r < kBlockN / 32; ++r) {
        const int kk = lane + 32 * r, j = j0 + kk;
        const bool in = j < sk;
        if (P.k_tok)
          ptx::cp_async_4(ptx::smem_u32(&sh.fk[st.index][kk]), P.k_descale + (in ? fk.row(j) : 0), in ? 4u : 0u);
        if (P.v_tok)
          ptx::cp_async_4(ptx::smem_u32(&sh.fv[st.index][kk]), P.v_descale + (in ? fv.row(j) : 0), in ? 4u : 0u);
      }
      ptx::cp_async_mbarrier_arrive_noinc(full);
    }
    __syncwarp();
    st.advance();
  }
  // (The lanes' last factor copies land before they exit: cp.async is per-thread, not bulk.)
  if (tok) {
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
  }
}

// One consumer warp over the CTA's key tiles; leaves its (O^T, m, l) in the merge space. kNT N
// tiles of 8 packed rows (1: <= 8 rows, 2: <= 16): the K and V fragments are loaded and widened
// once per M tile and feed kNT mmas each.
template <class QT, int kNT>
__device__ __forceinline__ void consume(const Sm90Params& P, DecodeSmem& sh, const SeqInfo& si, int hk, int rows, int sk,
                                        int n_lo, int n_hi, int cw) {
  const FwdArgs& a = P.a;
  const int lane = static_cast<int>(threadIdx.x) & 31, g = lane >> 2, c = lane & 3;
  // Q's B registers (16-bit q of packed row 8 nt + g, the reduction dims permuted as qk_dim), in
  // fp16: fp16 q as it is; bf16 q times 2^s, the row's largest |q| put in [2^14, 2^15).
  uint32_t qb[kNT][kD / 16][2];
  float row_unscale[kNT];  // 2^-s: multiplies row 8 nt + g's scores (S^T column g of N tile nt)
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int n = 8 * nt + g;
    const bool valid = n < rows;
    const PackedRow pr = packed_row(a, hk, valid ? n : 0);
    const QT* q = static_cast<const QT*>(a.q) + si.q_base + static_cast<int64_t>(pr.i) * si.q_step +
                  static_cast<int64_t>(pr.head) * a.q_sh;
    float x[kD / 16][4];
    uint32_t amax = 0;  // (bf16) the row's largest |q| as 16-bit bits, as fp8_kv_q_shift takes it
#pragma unroll
    for (int s = 0; s < kD / 16; ++s)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int d = q_b_dim(c, s) + j;
        const QT v = valid && d < a.dqk ? q[d] : QT(0.f);
        x[s][j] = static_cast<float>(v);
        if constexpr (!std::is_same_v<QT, __half>) amax = max(amax, static_cast<uint32_t>(__bfloat16_as_ushort(v) & 0x7fffu));
      }
    int shift = 0;
    if constexpr (!std::is_same_v<QT, __half>) {
      // (integer max over the quad's bits, as fwd_consumer.cuh convert_q: a NaN row -- bits above
      // Inf's -- gets shift 0, a subnormal row is not flushed to 0 by an fp32 max)
      amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
      shift = fp8_kv_q_shift(amax);
    }
    const float up = __uint_as_float(fp8_kv_pow2_bits(shift));
    row_unscale[nt] = __uint_as_float(fp8_kv_pow2_bits(-shift));
#pragma unroll
    for (int s = 0; s < kD / 16; ++s) {
      qb[nt][s][0] = ptx::pack2<__half>(x[s][0] * up, x[s][1] * up);
      qb[nt][s][1] = ptx::pack2<__half>(x[s][2] * up, x[s][3] * up);
    }
  }
  // This lane's S^T columns of N tile nt are rows 8 nt + 2c, 8 nt + 2c + 1: their score factors
  // (k_descale x the softmax scale, or softcap's tanh argument scale / softcap, x the row's 2^-s)
  // come from the lanes holding those rows' q (lane 4 (2c + h)). Scores are log2-domain:
  // scale_log2 x q.k, or softcap x log2(e) x tanh(q.k x scale / softcap).
  const bool softcap = a.softcap_log2 != 0.f;
  float kscale = softcap ? a.softcap_in : a.scale_log2;
  if (P.k_descale && !P.k_tok) kscale *= P.k_descale[si.b * P.kd_s0 + hk * P.kd_sh];
  const bool tok_k = P.k_tok != 0, tok_v = P.v_tok != 0;
  // (tok_v) P x key j's v factor / vref, rounded to fp16 for P V: vref, a power of two >= the
  // largest factor the warp has met (O^T rescaled exactly when it grows), keeps P's products in
  // fp16's normal range whatever the factors' magnitude; the merge multiplies O^T back.
  uint32_t vref_e = 0;  // vref's exponent field, 1 .. 253 (0: no finite visible factor met yet)
  float vref = 0.f, vref_inv = 1.f;
  float col_scale[kNT][2];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) col_scale[nt][h] = kscale * __shfl_sync(0xffffffffu, row_unscale[nt], 8 * c + 4 * h);
  // The keys [key_lo, key_end) packed row 8 nt + 2c + h sees under the mask (causal, window,
  // chunk), within the sequence's sk; none for rows past the tile's.
  int key_lo[kNT][2], key_end[kNT][2];
  {
    const core::SeqMask sm{a.mask, si.sq, si.sk};
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int n = 8 * nt + 2 * c + h;
        const int64_t i = n < rows ? n / a.group : 0;
        const int64_t lo = sm.row_lo(i), hi = sm.row_hi(i) < sk ? sm.row_hi(i) : sk;
        key_lo[nt][h] = static_cast<int>(lo < hi ? lo : hi);
        key_end[nt][h] = n < rows ? static_cast<int>(hi) : 0;
      }
  }

  float o[kNT][kD / 16][4] = {};  // O^T: N tile, dim block t, (dim pv_dim(g / g+8), row 2c / 2c+1)
  float m[kNT][2], l[kNT][2];     // running max (log2 domain) / this lane's share of the sum
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) m[nt][0] = m[nt][1] = -INFINITY, l[nt][0] = l[nt][1] = 0.f;
  const uint32_t k_base = ptx::smem_u32(sh.k[0]), v_base = ptx::smem_u32(sh.v[0]);
  PipelineState<kStages> st;
  for (int t = n_lo; t < n_hi; ++t) {
    sh.ring.wait(st);
    const uint32_t kslot = k_base + st.index * kSlotBytes, vslot = v_base + st.index * kSlotBytes;
    const int key0 = t * kBlockN + cw * kKeysPerWarp;  // this warp's first key
    // S^T of the warp's two 16-key M tiles
    float s[2][kNT][4] = {};
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int p0 = 0; p0 < kD / 16; p0 += 2) {
        uint32_t r[4], ar[2][4];
        ptx::ldmatrix_x4(kslot + ldsm_row_offset(lane, cw * kKeysPerWarp + 16 * mt, p0), r[0], r[1], r[2], r[3]);
        k_a_regs(r, ar, [](uint16_t x) { return ptx::cvt_f16x2_e4m3x2(x); });
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          ptx::mma_16816<__half>(s[mt][nt], ar[0], qb[nt][p0][0], qb[nt][p0][1]);
          ptx::mma_16816<__half>(s[mt][nt], ar[1], qb[nt][p0 + 1][0], qb[nt][p0 + 1][1]);
        }
      }
    // Per-token factors of this lane's keys 16 mt + g + 8 r of the warp's 32 (1 where none).
    float kf[2][2], vf[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int kk = cw * kKeysPerWarp + 16 * mt + g + 8 * r;
        kf[mt][r] = tok_k ? sh.fk[st.index][kk] : 1.f;
        vf[mt][r] = tok_v ? sh.fv[st.index][kk] : 1.f;
      }
    // Scores in the log2 domain, masked: element (mt, nt, i) is key key0 + 16 mt + g + 8 (i >> 1),
    // row 8 nt + 2c + (i & 1). (A per-token k factor multiplies the key's q . k first; a masked
    // key's factor -- inf or NaN for all the reference knows -- is never used.)
    float mx[kNT][2];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      mx[nt][0] = m[nt][0], mx[nt][1] = m[nt][1];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = key0 + 16 * mt + g + 8 * (i >> 1), h = i & 1;
          const float cs = col_scale[nt][h] * kf[mt][i >> 1];  // (before the 2^s-scaled product: no fp32 overflow)
          const float x =
              softcap ? a.softcap_log2 * softcap_tanh(s[mt][nt][i], cs, cs * 2.f * kLog2e) : s[mt][nt][i] * cs;
          s[mt][nt][i] = key >= key_lo[nt][h] && key < key_end[nt][h] ? x : -INFINITY;
          mx[nt][h] = fmaxf(mx[nt][h], s[mt][nt][i]);
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) mx[nt][h] = fmaxf(mx[nt][h], __shfl_xor_sync(0xffffffffu, mx[nt][h], x));
      }
      // Rescale where the max moved (a row without keys yet keeps -inf and factor 1).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (mx[nt][h] > m[nt][h]) {
          const float f = m[nt][h] == -INFINITY ? 0.f : ptx::exp2_approx(m[nt][h] - mx[nt][h]);
          l[nt][h] *= f;
#pragma unroll
          for (int blk = 0; blk < kD / 16; ++blk) o[nt][blk][h] *= f, o[nt][blk][2 + h] *= f;
          m[nt][h] = mx[nt][h];
        }
      }
    }
    // (tok_v) The warp's largest finite factor of the slot's visible keys (a key some row sees: the
    // reference reads no other key's factor), as a power of two >= it; O^T rescaled exactly where it
    // grows. Built from exponent bits (fast math flushes subnormal reciprocals): vref 2^-126 ..
    // 2^126, so 1 / vref is normal and P x factor / vref <= 4.
    if (tok_v) {
      float vmax = 0.f;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          bool vis = false;  // (a NaN score counts as seen)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) vis |= s[mt][nt][2 * r] != -INFINITY || s[mt][nt][2 * r + 1] != -INFINITY;
          const float av = fabsf(vf[mt][r]);
          if (vis && av <= FLT_MAX) vmax = fmaxf(vmax, av);  // (an Inf / NaN factor reaches O through P as it is)
        }
#pragma unroll
      for (int x = 1; x < 32; x <<= 1) vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, x));
      if (vmax > vref) {
        uint32_t e = __float_as_uint(vmax) >> 23;
        if ((__float_as_uint(vmax) & 0x7fffffu) != 0u) ++e;
        e = e < 1u ? 1u : e > 253u ? 253u : e;
        if (e > vref_e) {
          const int d = static_cast<int>(vref_e) - static_cast<int>(e);  // (< 0)
          const float f = vref_e == 0u || d < -126 ? 0.f : __uint_as_float(static_cast<uint32_t>(127 + d) << 23);
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int blk = 0; blk < kD / 16; ++blk)
#pragma unroll
              for (int i = 0; i < 4; ++i) o[nt][blk][i] *= f;
          vref_e = e, vref = __uint_as_float(e << 23), vref_inv = __uint_as_float((254u - e) << 23);
        }
      }
    }
    // P, its B registers, and O^T += V^T P^T per M tile
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      uint32_t pb[kNT][2];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        float p[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int h = i & 1;
          // (a row without a visible key yet: masked scores are -inf -> 0, a NaN score stays NaN)
          p[i] = ptx::exp2_approx(s[mt][nt][i] - (m[nt][h] == -INFINITY ? 0.f : m[nt][h]));
          l[nt][h] += p[i];
          // (a weight of exactly 0 -- a masked key inside the sequence -- stays 0, as sm80's)
          if (tok_v) p[i] = p[i] == 0.f ? 0.f : p[i] * (vf[mt][i >> 1] * vref_inv);
        }
        p_b_regs(p, pb[nt], [](float x, float y) { return ptx::pack2<__half>(x, y); },
                 [](uint32_t x) { return movmatrix_trans(x); });
      }
      // V rows past the sequence's end: zeroed in the last tile (0 x NaN garbage would reach O).
      const int kk = key0 + 16 * mt;  // the M tile's first key
      const bool tail = kk + 16 > sk;
#pragma unroll
      for (int p0 = 0; p0 < kD / 16; p0 += 2) {
        uint32_t r[4], ar[2][4];
        ptx::ldmatrix_x4_trans(vslot + ldsm_row_offset(lane, cw * kKeysPerWarp + 16 * mt, p0), r[0], r[1], r[2], r[3]);
        if (tail) {  // (decode_frag.h v_keep_mask: CPU-emulated with NaN rows past the end)
#pragma unroll
          for (int q = 0; q < 4; ++q) r[q] &= v_keep_mask(c, q, kk, sk);
        }
        v_a_regs(r, ar, [](uint16_t x) { return ptx::cvt_f16x2_e4m3x2(x); }, [](uint32_t x, uint32_t sel) { return __byte_perm(x, 0, sel); });
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          ptx::mma_16816<__half>(o[nt][p0], ar[0], pb[nt][0], pb[nt][1]);
          ptx::mma_16816<__half>(o[nt][p0 + 1], ar[1], pb[nt][0], pb[nt][1]);
        }
      }
    }
    __syncwarp();
    sh.ring.release(st, lane == 0);
    st.advance();
  }
  // The warp's state into the merge space (over the K ring: every consumer past its last slot
  // first -- the producer's last TMA landed before that slot's full barrier let it read):
  // l summed over the g lanes; O^T element (nt, blk, i) is row 8 nt + 2c + (i & 1), dim 16 blk +
  // pv_dim(g + 8 (i >> 1)).
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int x = 4; x < 32; x <<= 1) l[nt][h] += __shfl_xor_sync(0xffffffffu, l[nt][h], x);
    }
  ptx::named_barrier_sync(kConsumerBarrier, 32 * kConsumers);
  MergeSpace& ms = sh.merge;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    if (g == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) ms.m[cw][8 * nt + 2 * c + h] = m[nt][h], ms.l[cw][8 * nt + 2 * c + h] = l[nt][h];
    }
#pragma unroll
    for (int blk = 0; blk < kD / 16; ++blk)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        ms.o[cw][8 * nt + 2 * c + (i & 1)][16 * blk + pv_dim(g + 8 * (i >> 1))] = tok_v ? o[nt][blk][i] * vref : o[nt][blk][i];
  }
  ptx::named_barrier_sync(kConsumerBarrier, 32 * kConsumers);
}

// The consumers' merge and the output: 128 threads, packed rows r = tid / 16 (+ 8), dims 8 (tid %
// 16) .. + 7. splits > 1: fp32 partials and their lse (the combine kernel merges them).
template <class QT>
__device__ __forceinline__ void merge_store(const Sm90Params& P, const MergeSpace& sh, const SeqInfo& si, int hk, int rows,
                                            int split, int tid) {
  const FwdArgs& a = P.a;
  const int d0 = 8 * (tid % 16);
  float vscale = 1.f;
  if (P.v_descale && !P.v_tok) vscale = P.v_descale[si.b * P.vd_s0 + hk * P.vd_sh];
  for (int r = tid / 16; r < rows; r += 8) {
    // The consumers' (m, l) at one max, then common/softmax.cuh's finalize: the sink (split 0
    // only, as the other kernels: the combine adds each split once), 1 / l, lse; an empty row O =
    // 0 and lse = -inf, a row that met a NaN score NaN.
    float mx = -INFINITY;
    for (int w = 0; w < kConsumers; ++w) mx = fmaxf(mx, sh.m[w][r]);
    float f[kConsumers], lsum = 0.f;
    for (int w = 0; w < kConsumers; ++w) {
      f[w] = sh.m[w][r] == -INFINITY ? 0.f : ptx::exp2_approx(sh.m[w][r] - mx);
      lsum += f[w] * sh.l[w][r];
    }
    const PackedRow pr = packed_row(a, hk, r);
    const float sink2 = a.sinks != nullptr && split == 0 ? a.sinks[pr.head * a.sinks_st] * kLog2e : -INFINITY;
    const RowFinal fin = finalize_row(mx, lsum, sink2);
    const float inv = fin.scale * vscale;
    const float lse = fin.lse;
    float out[8];
    for (int j = 0; j < 8; ++j) {
      float acc = 0.f;
      for (int w = 0; w < kConsumers; ++w) acc += f[w] * sh.o[w][r][d0 + j];
      out[j] = acc * inv;
    }
    if (a.num_splits > 1) {
      const int64_t row = (si.token0 + pr.i) * a.hq + pr.head;
      float* op = a.o_part + (static_cast<int64_t>(split) * a.rows_total * a.hq + row) * a.dv_pad + d0;
      for (int j = 0; j < 8; ++j) op[j] = out[j];
      if (tid % 16 == 0) a.lse_part[static_cast<int64_t>(split) * a.rows_total * a.hq + row] = lse;
      continue;
    }
    QT* o = static_cast<QT*>(a.out) + si.o_base + static_cast<int64_t>(pr.i) * si.o_step + static_cast<int64_t>(pr.head) * a.o_sh;
    for (int j = 0; j < 8; ++j)
      if (d0 + j < a.dv) o[d0 + j] = static_cast<QT>(out[j]);
    if (a.lse && tid % 16 == 0) a.lse[si.lse_row(a, pr.i) + static_cast<int64_t>(pr.head) * a.lse_sh] = lse;
  }
}

// grid (batch, hkv, splits); block kThreads; dynamic shared memory sizeof(DecodeSmem) + 1024.
// kNT: N tiles of 8 packed rows (the launch: 1 for <= 8 rows, 2 for <= 16).
template <class QT, int kNT>
__global__ void __launch_bounds__(kThreads, kDecodeKeysMCtasPerSm) decode_kv_kernel(const __grid_constant__ Sm90Params P) {
#if FA4_PTX_SM90A  // (the sm_80 pass of the build compiles an empty body: launched on sm_90a only)
  extern __shared__ uint8_t smem_raw[];
  DecodeSmem& sh = *reinterpret_cast<DecodeSmem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int b = blockIdx.x, hk = blockIdx.y, split = blockIdx.z;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  SeqInfo si;
  si.init(P.a, b);
  const int rows = static_cast<int>(si.sq) * P.a.group;
  const int sk = static_cast<int>(si.sk < INT_MAX ? si.sk : INT_MAX);
  int n_lo, n_hi;
  key_tiles(P.a, si, 0, si.sq > 0 ? si.sq - 1 : 0, sk, kBlockN, split, &n_lo, &n_hi);
  if (rows == 0 || rows > kTileRows * kNT) return;  // (the launch chose kNT for the call's rows)
  if (threadIdx.x == 0) {
    sh.ring.init(kConsumers, (P.k_tok | P.v_tok) != 0 ? 1 + 32 : 1);  // (load_kv: the lanes' factor copies)
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (warp == 0) {
    if (threadIdx.x == 0) {
      ptx::tma_prefetch_descriptor(&P.tm_k);
      ptx::tma_prefetch_descriptor(&P.tm_v);
    }
    load_kv(P, sh, si, hk, sk, n_lo, n_hi);
  } else {
    consume<QT, kNT>(P, sh, si, hk, rows, sk, n_lo, n_hi, warp - 1);
    merge_store<QT>(P, sh.merge, si, hk, rows, split, static_cast<int>(threadIdx.x) - 32);
  }
#endif
}

}  // namespace fa4::cuda::sm90::decode
