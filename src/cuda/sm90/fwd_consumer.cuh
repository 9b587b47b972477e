// The MMA + softmax role of the sm90 forward kernel: one consumer warpgroup, 64 query rows.
//
// Per key tile t (walked last to first, fwd_work.cuh), with the two consumers ping-ponging on
// named barriers so one's GEMMs run on the tensor cores while the other does softmax (DESIGN §3):
//
//     turn: S_t = Q K_t^T (SS wgmma) ; O += P_{t-1} V_{t-1} (RS wgmma, P from registers) ; pass
//     wait S_t -> release K_t ; mask / softcap ; online softmax -> P_t, alpha_t   (PV_{t-1} runs)
//     wait PV_{t-1} -> release V_{t-1} ; O *= alpha_t (only when some row's max moved) ; pack P_t
//
// so inside a warpgroup the softmax of tile t overlaps the P V GEMM of tile t - 1, and across
// warpgroups it overlaps the other consumer's GEMMs.
//
// Fragment layouts (sm90_ptx.cuh, Wgmma): thread (warp w, lane l = 4g + t) holds, of a
// 64 x N accumulator, rows 16w + g (h = 0) and 16w + g + 8 (h = 1), and of column block cb the
// columns 8cb + 2t, 8cb + 2t + 1: element i = 4cb + 2h + e. Two column blocks of the S
// accumulator are exactly the 16-bit A fragment of one k16 step of P V.
// e4m3 (T::kFp8): both GEMMs take k32 steps (32 bytes, as a 16-bit k16 step); four column blocks
// of S, converted to e4m3 and packed as fp8_layout.h says, are the 8-bit A fragment of one k32
// step of P V against V^T tiles whose key columns the pre-pass permuted to match (no shuffle).
#pragma once

#include <cmath>

#include "cuda/common/exp2.cuh"
#include "cuda/common/mask.cuh"
#include "cuda/common/pipeline.cuh"
#include "cuda/common/softcap.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/ptx/sm80_ptx.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fp8_layout.h"
#include "cuda/sm90/fwd_params.h"
#include "cuda/sm90/fwd_schedule.h"
#include "cuda/sm90/fwd_work.cuh"

namespace fa4::cuda::sm90 {

template <class T>
struct Consumer {
  using Elem = typename T::Elem;
  static constexpr bool kFp8 = T::kFp8;
  static constexpr int kDqk = T::kDqk, kDv = T::kDv, kBlockN = T::kBlockN, kStages = T::kStages;
  static constexpr int kConsumers = T::kConsumers;
  static constexpr int kSRegs = kBlockN / 2;  // S accumulator, 64 x kBlockN
  static constexpr int kORegs = kDv / 2;      // O accumulator, 64 x Dv
  static constexpr int kKStep = kFp8 ? 32 : 16;         // wgmma K per instruction: 32 bytes of either type
  static constexpr int kPSteps = kBlockN / kKStep;      // k-steps of P V (4 A registers each)
  static constexpr int kStepsPerChunk = T::kChunk / kKStep;  // k-steps of S = Q K^T per Q / K chunk
  // (e4m3) P is stored as 2^kFp8PShift P: with the exact running max (FA4_RESCALE_THRESHOLD 0) P is
  // in [0, 1], where e4m3's normal range ends at 2^-6 and P below 2^-10 rounds to 0; times 2^8 the
  // normal range reaches down to 2^-14 and the largest P, 256, stays below e4m3's 448. The same
  // factor is in l (the sum of the unrounded P), so O / l is unchanged; the finalize takes it out
  // of the lse (fwd_epilogue.cuh). A larger threshold leaves room for 2^(8 - threshold).
  static constexpr float kFp8PShift = 8.f - kRescaleThreshold;
  static_assert(!kFp8 || kRescaleThreshold <= 8.f, "e4m3 P saturates at 448 = 2^8.8");
  static constexpr bool kRescaleInTurn = kDv <= 128;  // where O *= alpha runs (mainloop)
  // Where the wait for the P V group in flight goes (mainloop): behind a spin-loop wait on the
  // next V at Dv = 256, where ptxas otherwise hoists it above the softmax's ex2s.
  static constexpr bool kPvWaitBehindV = kDv > 128;
  // P double-buffered (FA4_SM90_P_DOUBLE, fwd_config.h): P_t packs into one register set while
  // the P V of t - 1 still reads the other, so the packing needs no wait and the P V wait moves
  // to the next key tile's top. Two-consumer tiles with the rescale in the turn and Dqk <= 128
  // (the (192, 128) tile spilled 116 bytes): D 128's 32 extra registers fit the 240-register
  // budget (36 bytes spilled outside the key loop); three consumers have 160.
  // FA4_SM90_P_DOUBLE=2 also takes the standard D 256 tile (64 keys), with the O rescale after
  // the P V wait, before the turn (128 multiplies inside the turn delayed the other consumer's
  // GEMMs); local ops 14 -> 43 there, and 8 -> 120 on the 80-key long_keys tile (left out).
  // The D 128 long_keys tile is this double buffer (fwd_config.h FA4_SM90_LONG_KEYS_MIN_SK_D128), and
  // so is the e4m3 D 128 fp8_long_keys tile (P is 24 registers there; H100 2026-12-07, same-run A/B
  // twice: +0.3-1.3 % at S 8k / 16k, causal and not; spill-free key loop). The 128-key e4m3 tile
  // measured -1 to -3 % at S 1k / 4k with it (FA4_SM90_FP8_P_DOUBLE=1 builds it so).
  static constexpr bool kPDoubleTile = kFp8 ? FA4_SM90_FP8_P_DOUBLE || T::kTile == Tile::fp8_long_keys
                                             : FA4_SM90_P_DOUBLE >= 1 || T::kTile == Tile::long_keys;
  static constexpr bool kPDouble = FA4_SM90_OVERLAP && kConsumers == 2 &&
                                   ((kPDoubleTile && kRescaleInTurn && kDqk <= 128) ||
                                    (!kFp8 && FA4_SM90_P_DOUBLE >= 2 && kDqk == 256 && kBlockN <= 64));
  static constexpr int kPBufs = kPDouble ? 2 : 1;
  using Ring = PipelineState<kStages>;

  typename T::Smem& sh;
  const FwdArgs& p;
  const TileWork& w;
  int c;         // consumer index 0 .. kConsumers - 1
  bool solo;     // (solo_capable) consumer 0 runs alone: no turns, one consumer's barrier counts
  bool one_q_;   // (one_q_capable) the 1Q tile: both consumers on Q tile 0, consumer c on key tiles
                 // c, c + 2, ...; no turns; merge_pair at the end
  int tid;       // thread in the warpgroup
  int g, t4;     // fragment row group, column pair
  float sc;      // multiplier from kept score units to log2 units (see softmax)
  bool softcap, fold;
  float softcap_in2;
  float f8_scale_log2, f8_softcap_in;  // (T::kDescale) the scale and tanh argument with q x k descale folded in
  FullKeyRange full;
  // (FA4_SM90_SKIP_EMPTY_WARPS) The warp's 16 rows are all past the tile's rows (decode: PackGQA
  // fills a few rows of warp 0): it skips the softmax, its P of the zero-filled Q rows stays what
  // the GEMM gave. Warp-uniform; the wgmmas stay warpgroup-wide.
  bool idle_warp;
  int lo[2], hi[2];  // visible keys of this thread's rows [lo, hi)

  // Low 32 bits of the wgmma shared-memory descriptors (start address >> 4, LBO) of consumer c's
  // Q tile and of K / V ring slot 0; the high halves (SBO, swizzle) are constants. A k-step or a
  // ring slot moves only the start address, so each GEMM adds compile-time offsets to these
  // instead of re-encoding a descriptor per wgmma (7 -> 2 instructions in the GEMM turn).
  uint32_t q_lo, k_lo, v_lo;
  // Q / K: K-major, rows of one chunk (128 bytes; e4m3 D 64: 64) in the swizzle of their width.
  // V: N-major (16-bit); V^T (e4m3): K-major like K, rows = value dims, one V^T chunk of kVtKeys
  // bytes each (fp8_layout.h fp8_vt_chunk_keys: 128, 64 or 32).
  static constexpr uint64_t kQKDesc0 = ptx::make_smem_desc_kmajor(0, T::kChunk * sizeof(Elem));
  static constexpr int kVtKeys = T::Smem::kVtKeys;
  static constexpr uint64_t kVDesc0 = !kFp8 ? ptx::make_smem_desc(0, kBlockN * 128, 1024, ptx::SmemSwizzle::b128)
                                            : ptx::make_smem_desc_kmajor(0, kVtKeys);
  // 16-byte units: a Q / K chunk (T::kChunk columns), a K / V ring slot (fwd_smem.cuh: dense
  // arrays of 1024-byte multiples), a V^T chunk (kVtKeys keys)
  static constexpr uint32_t kQChunk16 = T::Smem::kQChunk * sizeof(Elem) / 16;
  static constexpr uint32_t kKChunk16 = T::Smem::kKVChunk * sizeof(Elem) / 16;
  static constexpr uint32_t kVChunk16 = T::Smem::kVChunk * sizeof(Elem) / 16;
  static constexpr uint32_t kKSlot16 = kDqk / T::kChunk * kKChunk16, kVSlot16 = T::Smem::kVChunks * kVChunk16;
  static_assert(sizeof(T::Smem::q) == kConsumers * kDqk / T::kChunk * kQChunk16 * 16 &&
                    sizeof(T::Smem::k) == kStages * kKSlot16 * 16 && sizeof(T::Smem::v) == kStages * kVSlot16 * 16,
                "descriptor offsets assume dense tile arrays");

  float o[kORegs];
  float s[kSRegs];
  uint32_t pf[kPBufs][kPSteps][4];  // P of the previous tile(s) as wgmma A fragments
  float m_run[2], l_run[2];
  float q_inv[2];  // (T::kQToF16) 2^-s of this thread's row halves (convert_q)

  // qk_descale: (T::kDescale) q_descale x k_descale of the tile's (batch, kv head); unused otherwise.
  __device__ __forceinline__ Consumer(typename T::Smem& sh_, const FwdArgs& p_, const TileWork& w_, int c_, bool solo_,
                                      float qk_descale = 1.f, bool one_q = false)
      : sh(sh_), p(p_), w(w_), c(c_), solo(solo_capable(T::kTile) && solo_),
        one_q_(one_q_capable(T::kTile, T::kDqk, T::kDv) && one_q) {
    tid = threadIdx.x % 128;
    q_lo = static_cast<uint32_t>(ptx::make_smem_desc_kmajor_sw128(ptx::smem_u32(sh.q[q_slot()][0])));
    k_lo = static_cast<uint32_t>(ptx::make_smem_desc_kmajor_sw128(ptx::smem_u32(sh.k[0][0])));
    v_lo = static_cast<uint32_t>(kVDesc0) + (ptx::smem_u32(sh.v[0][0]) >> 4);
    const int lane = tid % 32;
    g = lane / 4, t4 = lane % 4;
    softcap = p.softcap_log2 != 0.f;
    // Softcap keeps tanh values (softcap * log2(e) > 0 goes into the exponentials' FFMA, as the
    // scale does without softcap); a non-positive scale keeps log2 units (the max would flip).
    float scale_log2 = p.scale_log2, softcap_in = p.softcap_in;
    if constexpr (T::kDescale) {
      // The e4m3 products are (q / q_descale) . (k / k_descale): the factors scale every score
      // of the tile as the softmax scale does (as the sm80 fp8 instances fold them). (fp8_kv:
      // q . (k / k_descale), the widened cache values exact in the 16-bit ring.)
      scale_log2 *= qk_descale, softcap_in *= qk_descale;
      f8_scale_log2 = scale_log2, f8_softcap_in = softcap_in;
    } else {
      (void)qk_descale;
    }
    fold = softcap || scale_log2 > 0.f;
    sc = softcap ? p.softcap_log2 : fold ? scale_log2 : 1.f;
    softcap_in2 = softcap_in * 2.f * kLog2e;
    RowMask32 rm;
    rm.init(p.mask, w.si.sq, w.sk);
    // Tile rows -> query rows (PackGQA: m / group, fwd_work.cuh); the mask is the query row's.
    int i0 = w.m0 + q_slot() * kRowsPerConsumer;
    int i_last = i0 + kRowsPerConsumer - 1 < w.rows_seq - 1 ? i0 + kRowsPerConsumer - 1 : w.rows_seq - 1;
    if (i_last < i0) i_last = i0;
    int i_row[2] = {i0 + row_of(0), i0 + row_of(1)};
    if (p.pack_gqa) {
      i0 /= p.group, i_last /= p.group;
      i_row[0] /= p.group, i_row[1] /= p.group;
    }
    full.init(rm, i0, i_last);
    idle_warp = FA4_SM90_SKIP_EMPTY_WARPS && w.m0 + q_slot() * kRowsPerConsumer + 16 * (tid / 32) >= w.rows_seq;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rm.bounds(i_row[h], lo[h], hi[h]);
      m_run[h] = -INFINITY, l_run[h] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < kORegs; ++i) o[i] = 0.f;
  }
  // Row (within the consumer's 64) of this thread's row half h.
  __device__ __forceinline__ int row_of(int h) const { return 16 * (tid / 32) + g + 8 * h; }
  // (The switch spelled out: a member read alone is not folded to a constant -- as solo above.)
  static constexpr bool kOneQ = one_q_capable(T::kTile, T::kDqk, T::kDv);
  __device__ __forceinline__ bool one_q() const {
    if constexpr (kOneQ) return one_q_;
    else return false;
  }
  // The Q tile (and 64 tile rows) this consumer computes: its own, or (1Q) consumer 0's.
  __device__ __forceinline__ int q_slot() const { return one_q() ? 0 : c; }

  // ---- (T::kQToF16, F16ComputeTraits) the tile's bf16 Q -> fp16 in place ----
  // After q_full (the TMA's bf16 bits landed), before the first S = Q K^T. Row r is scaled by
  // 2^s_r, s_r = fp8_kv_q_shift(its largest magnitude): exact for every value >= 2^-28 of the row
  // max (fwd_fp8_kv.h has the numerics); the softmax multiplies the row's scores by q_inv = 2^-s_r
  // first. Who converts what: the quad of lanes 4g .. 4g + 3 that holds rows row_of(0 / 1) in the
  // accumulator fragments converts those two rows -- lane t4 their 16-byte pieces t4, t4 + 4, ...
  // (piece j of row r: chunk j / 8, 16 ((j % 8) ^ (r % 8)) into the row's 128-byte line,
  // fwd_smem.cuh; a row stays within its lines, so no other layout knowledge is needed). The row
  // max is then a quad reduction and every thread ends with the factors of exactly its own rows:
  // no shared array, no second barrier. Then the generic-proxy stores are fenced for the wgmma's
  // async-proxy reads and the warpgroup meets on its own named barrier (every warp's wgmma reads
  // all 64 rows). Once per tile: 16 KB per consumer, ~100 instructions per thread.
  // (Under --use_fast_math bf16 subnormals, < 2^-126, flush to 0 in the fp32 multiply: scores
  // below 2^-126 x |k| x Dqk, nothing next to the exponentials' 1.)
  // (1Q: consumer 0 converts the shared tile and leaves its row factors in pair_ml for consumer 1;
  // both meet on one barrier instruction -- synccheck requires an aligned bar.sync's threads to
  // execute the same one.)
  __device__ __forceinline__ void convert_q() {
    if (!(one_q() && c == 1)) convert_q_rows();
    if (one_q()) {
      ptx::named_barrier_sync(bar_id(Bar::pair), 256);  // consumer 1's wgmmas read the tile too
      if (c == 1) q_inv[0] = sh.pair_ml[row_of(0)][0], q_inv[1] = sh.pair_ml[row_of(1)][0];
    } else {
      ptx::named_barrier_sync(bar_id(Bar::q_convert0) + c, 128);
    }
  }
  __device__ __forceinline__ void convert_q_rows() {
    static_assert(T::kQToF16 && sizeof(Elem) == 2 && T::kChunk == 64 && kDqk % 32 == 0, "16-bit Q in 64-column chunks");
    constexpr int kPieces = kDqk / 8 / 4;  // 16-byte pieces of a row per lane of its quad
    constexpr uint32_t kChunkBytes = T::Smem::kQChunk * 2;
    const uint32_t base = ptx::smem_u32(sh.q[q_slot()][0]);
    uint32_t addr[2][kPieces];
    uint4 x[2][kPieces];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t r = static_cast<uint32_t>(row_of(h));
#pragma unroll
      for (int k = 0; k < kPieces; ++k) {
        const uint32_t j = 4u * k + static_cast<uint32_t>(t4);
        addr[h][k] = base + (j / 8) * kChunkBytes + r * 128u + (((j % 8) ^ (r % 8)) << 4);
        x[h][k] = ptx::lds128(addr[h][k]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // The largest |q| of the row as bf16 bits (magnitudes compare as integers): per 16-bit
      // lane of each word, then the word's halves, then the quad.
      uint32_t m = 0;
#pragma unroll
      for (int k = 0; k < kPieces; ++k) {
        m = __vmaxu2(m, x[h][k].x & 0x7fff7fffu), m = __vmaxu2(m, x[h][k].y & 0x7fff7fffu);
        m = __vmaxu2(m, x[h][k].z & 0x7fff7fffu), m = __vmaxu2(m, x[h][k].w & 0x7fff7fffu);
      }
      m = max(m & 0xffffu, m >> 16);
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
      const int sft = fp8_kv_q_shift(m);
      const float up = __uint_as_float(fp8_kv_pow2_bits(sft));
      q_inv[h] = __uint_as_float(fp8_kv_pow2_bits(-sft));
      if (one_q() && t4 == 0) sh.pair_ml[row_of(h)][0] = q_inv[h];
      // bf16 -> fp32 is the bits shifted up (word = lo | hi << 16); x 2^s exact; -> fp16 rn.
      auto cvt = [up](uint32_t wd) {
        return ptx::pack2<__half>(__uint_as_float(wd << 16) * up, __uint_as_float(wd & 0xffff0000u) * up);
      };
#pragma unroll
      for (int k = 0; k < kPieces; ++k)
        ptx::sts128(addr[h][k], make_uint4(cvt(x[h][k].x), cvt(x[h][k].y), cvt(x[h][k].z), cvt(x[h][k].w)));
    }
    ptx::fence_proxy_async_shared_cta();  // generic stores -> the wgmma (async proxy) reads
  }

  // ---- ping-pong turns (fwd_schedule.h): wait for mine, pass it to the next consumer ----
  // (Solo and 1Q launches take no turns: in a 1Q tile each consumer's GEMMs are its own key tiles'.)
  __device__ __forceinline__ bool takes_turns() const {
    return FA4_SM90_PINGPONG && !(solo_capable(T::kTile) && solo) && !one_q();
  }
  __device__ __forceinline__ void turn_wait() {
    if (takes_turns()) ptx::named_barrier_sync(bar_id(Bar::turn0) + c, 256);
  }
  __device__ __forceinline__ void turn_pass() {
    if (takes_turns()) ptx::named_barrier_arrive(bar_id(Bar::turn0) + (c + 1) % kConsumers, 256);
  }
  // Threads of the consumers that run (Bar::consumers). (The switch spelled out in each test keeps
  // them compile-time constants in default builds: a member read left the V-tail loop rolled.)
  // (1Q: consumer 0 alone zeroes, the V tail being in its first key tile.)
  __device__ __forceinline__ int consumer_threads() const {
    return (solo_capable(T::kTile) && solo) || one_q() ? 128 : 128 * kConsumers;
  }

  // ---- GEMMs ----
  // A descriptor from its low half (start address, LBO) and the constant high half of `desc0`.
  // Start addresses stay below 2^18 (shared memory), so the 14-bit field never carries.
  static __device__ __forceinline__ uint64_t with_hi(uint32_t lo, uint64_t desc0) {
    return (desc0 & 0xFFFFFFFF00000000ull) | lo;
  }
  __device__ __forceinline__ void issue_s(const Ring& st) {
    ptx::fence_operands(s);
    ptx::wgmma_fence();
    const uint32_t kb = k_lo + st.index * kKSlot16;
#pragma unroll
    for (int k = 0; k < kDqk / kKStep; ++k) {  // step k: chunk k / kStepsPerChunk, 32 bytes per step within it
      const uint64_t da = with_hi(q_lo + (k / kStepsPerChunk) * kQChunk16 + 2 * (k % kStepsPerChunk), kQKDesc0);
      const uint64_t db = with_hi(kb + (k / kStepsPerChunk) * kKChunk16 + 2 * (k % kStepsPerChunk), kQKDesc0);
      ptx::wgmma_ss<kBlockN, Elem>(s, da, db, k > 0);
    }
    ptx::wgmma_commit_group();
    ptx::fence_operands(s);
  }
  // V slot as the N-major B operand of O += P V (N = Dv, K = keys): 8-key core-matrix groups
  // 1024 bytes apart (SBO), 64-column chunks kBlockN * 128 bytes apart (LBO); a k16 step is
  // 16 rows = 2048 bytes. (e4m3) V^T slot as the K-major B operand, as a K tile: a k32 step is
  // 32 bytes along each row, kVtKeys / 32 per chunk.
  template <int kB = 0>
  __device__ __forceinline__ void issue_pv(const Ring& st) {
    ptx::fence_operands(o);
    ptx::wgmma_fence();
    const uint32_t vb = v_lo + st.index * kVSlot16;
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk) {
      if constexpr (kFp8) {
        constexpr int kStepsPerVt = kVtKeys / 32;
        const uint64_t db = with_hi(vb + (kk / kStepsPerVt) * kVChunk16 + 2 * (kk % kStepsPerVt), kVDesc0);
        ptx::wgmma_rs<kDv, Elem, 0>(o, pf[kB][kk], db, 1);
      } else {
        const uint64_t db = with_hi(vb + kk * (2048 / 16), kVDesc0);
        ptx::wgmma_rs<kDv, Elem, 1>(o, pf[kB][kk], db, 1);
      }
    }
    ptx::wgmma_commit_group();
    ptx::fence_operands(o);
  }
  // The P fragments are read by the tensor cores until the P V group completes: keep the
  // compiler from reusing their registers before then.
  template <int kB = 0>
  __device__ __forceinline__ void hold_p() {
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) ptx::fence_operand(pf[kB][kk][e]);
  }

  // The O rescale one softmax leaves for the mainloop: alpha per row half, and the warp-uniform
  // decisions (the softmax's votes) that some row of the half grew its max.
  struct Rescale {
    float alpha[2];
    bool grow[2];
    __device__ __forceinline__ void none() { alpha[0] = alpha[1] = 1.f, grow[0] = grow[1] = false; }
  };

  // ---- softmax of the S tile of keys [n0, n0 + kBlockN); r = O rescale of each row ----
  __device__ __forceinline__ void softmax(int n0, Rescale& r) {
    if (FA4_SM90_SKIP_EMPTY_WARPS && idle_warp) {  // (rows never stored: their m, l, O are unused)
      r.none();
      return;
    }
    // (T::kQToF16) S was computed from 2^s_r q: back to q . k first (exact: a power of two), so
    // the softcap, the masks' -inf, the running max and the epilogue's lse see the true scores.
    if constexpr (T::kQToF16) {
#pragma unroll
      for (int i = 0; i < kSRegs; ++i) s[i] *= q_inv[(i >> 1) & 1];
    }
    if (softcap) {
#pragma unroll
      for (int i = 0; i < kSRegs; ++i) s[i] = softcap_tanh(s[i], T::kDescale ? f8_softcap_in : p.softcap_in, softcap_in2);
    } else if (!fold) {
#pragma unroll
      for (int i = 0; i < kSRegs; ++i) s[i] *= T::kDescale ? f8_scale_log2 : p.scale_log2;
    }
    if (full.needs_mask(n0, kBlockN)) {
#pragma unroll
      for (int i = 0; i < kSRegs; ++i) {
        const int h = (i >> 1) & 1;
        const int j = n0 + 8 * (i >> 2) + 2 * t4 + (i & 1);
        if (j < lo[h] || j >= hi[h]) s[i] = -INFINITY;
      }
    }
    // Row max in 4 independent chains per row half (element i: half (i / 2) % 2, chain
    // i % 2 + 2 ((i / 4) % 2)): a 32-long dependent FMNMX chain per half was the longest
    // latency of the consumer between its S = Q K^T completing and its first ex2.
    float mp[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int q = 0; q < 4; ++q) mp[h][q] = -INFINITY;
#pragma unroll
    for (int i = 0; i < kSRegs; ++i) {
      float& m = mp[(i >> 1) & 1][(i & 1) | ((i >> 1) & 2)];
      m = fmaxf(m, s[i]);
    }
    float mx[2];
    bool need[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = quad_max(fmaxf(fmaxf(mp[h][0], mp[h][1]), fmaxf(mp[h][2], mp[h][3])));
      need[h] = rescale_needed(mx[h], m_run[h], sc);
    }
    // Warp-uniform decisions, so a skipped rescale skips for all lanes: one for the warp's 16 rows,
    // or (FA4_SM90_HALF_VOTE) one per row half (8 rows: h = 0 / 1 of every lane), which skips more.
    bool grow[2];
    if (FA4_SM90_HALF_VOTE) {
      grow[0] = __any_sync(0xffffffffu, need[0]), grow[1] = __any_sync(0xffffffffu, need[1]);
    } else {
      grow[0] = grow[1] = __any_sync(0xffffffffu, need[0] || need[1]);
    }
    float m_old[2], neg_m[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_old[h] = m_run[h];
      if (grow[h]) m_run[h] = fmaxf(m_run[h], mx[h]);
      neg_m[h] = -(m_run[h] == -INFINITY ? 0.f : m_run[h]) * sc;  // nothing visible yet: keep args finite
    }
    r.alpha[0] = r.alpha[1] = 1.f;
    r.grow[0] = grow[0], r.grow[1] = grow[1];
    float neg_mp[2] = {neg_m[0], neg_m[1]};  // (e4m3: P x 2^kFp8PShift)
    if constexpr (kFp8) neg_mp[0] += kFp8PShift, neg_mp[1] += kFp8PShift;
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // two partial sums per row half
#pragma unroll
    for (int i = 0; i < kSRegs; ++i) {
      const int h = (i >> 1) & 1;
      s[i] = exp2_mixed<T::kExp2EmuEvery>(fmaf(s[i], sc, neg_mp[h]), i);
      sum[h][i & 1] += s[i];
    }
    // The factors come last, after the exponentials. (Meant to end the softmax's basic block in
    // a branch so ptxas could not hoist the caller's P V wait above the ex2s; ptxas predicates
    // that small branch, and at 2ff92ce the wait sat above the row max again at every Dv: the
    // mainloop's kPvWaitBehindV is what keeps it below at Dv = 256, see there.)
    rescale_factors(grow, m_old, neg_m, r.alpha);
    l_run[0] += sum[0][0] + sum[0][1], l_run[1] += sum[1][0] + sum[1][1];
  }
  // O / l rescale factors of a grown max (m_old: the max before; neg_m: -new max in log2 units).
  __device__ __forceinline__ void rescale_factors(const bool (&grow)[2], const float (&m_old)[2],
                                                  const float (&neg_m)[2], float (&alpha)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (grow[h]) {
        alpha[h] = ptx::exp2_approx(m_old[h] * sc + neg_m[h]);  // m_old = -inf (first keys): 0
        l_run[h] *= alpha[h];
      }
    }
  }
  // O *= alpha (element i belongs to row half (i / 2) % 2).
  __device__ __forceinline__ void scale_o(const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < kORegs; ++i) o[i] *= alpha[(i >> 1) & 1];
  }
  // O *= a for row half h only.
  __device__ __forceinline__ void scale_o_half(int h, float a) {
#pragma unroll
    for (int i = 2 * h; i < kORegs; i += 4) o[i] *= a, o[i + 1] *= a;
  }
  // O *= alpha, skipped where the warp's factors are all 1; FA4_SM90_HALF_VOTE decides per row
  // half (8 rows: half the multiplies where only one half's max grew).
  __device__ __forceinline__ void scale_o_voted(const float (&alpha)[2]) {
    if (FA4_SM90_HALF_VOTE) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (__any_sync(0xffffffffu, alpha[h] != 1.f)) scale_o_half(h, alpha[h]);
    } else {
      scale_o(alpha);
    }
  }
  __device__ __forceinline__ void rescale_o(const Rescale& r) {
    if (FA4_SM90_GROW_FLAGS) {
      // The softmax's grow flags are warp-uniform already: no vote here. A grown half whose
      // alpha is exactly 1 multiplies by 1, the same bits as the voted path's skip.
      if (FA4_SM90_HALF_VOTE) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (r.grow[h]) scale_o_half(h, r.alpha[h]);
      } else if (r.grow[0] || r.grow[1]) {
        scale_o(r.alpha);
      }
      return;
    }
    if (__any_sync(0xffffffffu, r.alpha[0] != 1.f || r.alpha[1] != 1.f)) scale_o_voted(r.alpha);
  }
  // (e4m3) k32 step kk takes S registers 16 kk .. 16 kk + 15; A register r, byte b is register
  // 16 kk + fp8_pack_src(r, b) (fp8_layout.h: the V^T columns are permuted to match).
  template <int kB = 0>
  __device__ __forceinline__ void pack_p() {
#pragma unroll
    for (int kk = 0; kk < kPSteps; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kFp8) {
          const float* sk = s + 16 * kk;
          pf[kB][kk][e] = ptx::pack_e4m3x4(sk[fp8_pack_src(e, 0)], sk[fp8_pack_src(e, 1)], sk[fp8_pack_src(e, 2)],
                                           sk[fp8_pack_src(e, 3)]);
        } else {
          pf[kB][kk][e] = ptx::pack2<Elem>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
        }
      }
  }

  // Q may be overwritten by the next tile's load: one arrival per thread, after its own wait on
  // the last S = Q K^T group (separate O staging) or on the epilogue's staging reads. The same
  // phase lets the producer rewrite the work slot this thread read (fwd_kernel.cuh): every reader
  // releases it itself, so the order needs no warp barrier in between (with one arrival per warp
  // after __syncwarp, racecheck reported the slot's reads against the producer's next write).
  __device__ __forceinline__ void release_q() { ptx::mbarrier_arrive(&sh.q_empty); }

  // V rows past the sequence's last key in the first-consumed (last) key tile: TMA filled them
  // from memory beyond the sequence (the next sequence, unused cache slots) unless the tensor
  // map itself ends there. P is 0 for them, but 0 * NaN / Inf garbage would still reach O, so
  // the consumers zero them once (disjoint rows) before the first P V.
  __device__ __forceinline__ void zero_v_tail(const Ring& st) {
    const int n0 = w.tile_at(0) * kBlockN;
    const int r0 = w.sk - n0;
    ptx::mbarrier_wait_parity(&sh.v_ring.full[st.index], st.phase);
    constexpr int kPieces = 8 * (kDv / 64);  // 16-byte pieces of one key row (all chunks)
    const int ctid = c * 128 + tid;
    for (int idx = ctid; idx < (kBlockN - r0) * kPieces; idx += consumer_threads()) {
      const int r = r0 + idx / kPieces, pc = idx % kPieces;
      *reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(sh.v[st.index][pc / 8]) + r * 128 + (pc % 8) * 16) =
          make_uint4(0u, 0u, 0u, 0u);
    }
    ptx::fence_proxy_async_shared_cta();  // generic stores -> the wgmma (async proxy) reads
    ptx::named_barrier_sync(bar_id(Bar::consumers), consumer_threads());
  }

  // O += P V of the tile in ring slot `stv` (its V landed) with nothing else in flight: a turn of
  // its own, waited for, V's slot released.
  template <int kB = 0>
  __device__ __forceinline__ void pv_alone(const Ring& stv) {
    turn_wait();
    issue_pv<kB>(stv);
    turn_pass();
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(o);
    hold_p<kB>();
    sh.v_ring.release(stv, tid == 0);
  }

  // S of key tile `it` (of n) has completed (its wgmma group waited for): release K's slot (and
  // Q after this consumer's last key tile), then the softmax.
  __device__ __forceinline__ void s_done(const Ring& st, int it, int n, Rescale& rs) {
    ptx::fence_operands(s);
    sh.k_ring.release(st, tid == 0);
    if (T::kQFreeEarly && last_tile(it, n)) release_q();
    softmax(w.tile_at(it) * kBlockN, rs);
  }
  // (1Q) This consumer's key tiles are first_tile(), + key_stride(), ... of the tile's n; its ring
  // position moves by the stride (the other consumer's slots lie between).
  // (Spelled with if constexpr: in instances without the 1Q tile even a folded `one_q() ? c : 0`
  // moved ptxas' register allocation, 13450 SASS lines of the D 64 instance.)
  __device__ __forceinline__ int first_tile() const {
    if constexpr (kOneQ) return one_q_ ? c : 0;
    else return 0;
  }
  __device__ __forceinline__ int key_stride() const {
    if constexpr (kOneQ) return one_q_ ? 2 : 1;
    else return 1;
  }
  __device__ __forceinline__ bool last_tile(int it, int n) const {
    if constexpr (kOneQ) return one_q_ ? it + 2 >= n : it == n - 1;
    else return it == n - 1;
  }
  __device__ __forceinline__ void next_slot(Ring& r) const {
    if (one_q()) r.advance_by(2);
    else r.advance();
  }

  // The tile's key tiles; `st` is the ring position, which runs on across tiles. Q has landed
  // (q_full waited by the caller).
  __device__ __forceinline__ void mainloop(Ring& st) {
    const int n = w.n_tiles();
    const int it0 = kOneQ ? first_tile() : 0;  // (a call left in the other instances moved their SASS)
    if (n <= it0) {  // (1Q: consumer 1 of a one-key-tile tile has none either)
      if (T::kQFreeEarly) release_q();
      if constexpr (kOneQ) {
        if (one_q_ && n > 0) st.advance_by(n);
      }
      return;
    }
    // (1Q) Where both consumers' ring positions meet after the tile.
    [[maybe_unused]] Ring st_end = st;
    if constexpr (kOneQ) {
      if (one_q_) st_end.advance_by(n), st.advance_by(it0);
    }
    // (e4m3: the V^T pre-pass wrote zeros past the sequence's last key, fp8_layout.h; gather
    // instances: their cp.async copies zero-filled those rows, fwd_gather.cuh; fp8_kv: the
    // converter warps stored zeros there, fwd_fp8_kv.cuh -- zeroing them again raced, for
    // racecheck, with writes it cannot see completed through the mbarriers)
    constexpr bool kZeroFilled = kFp8 || T::kTile == Tile::fp8_kv || requires { typename T::Gather; };
    [[maybe_unused]] const bool v_tail =
        !kZeroFilled && w.n_hi * kBlockN > w.sk && !(p.kv_mode == kKvDense && p.seqused_k == nullptr);

    sh.k_ring.wait(st);
    turn_wait();
    issue_s(st);
    turn_pass();
    if constexpr (!kZeroFilled) {
      if (v_tail && it0 == 0) zero_v_tail(st);  // (the V tail is in key tile 0: 1Q consumer 0's)
    }
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(s);
    sh.k_ring.release(st, tid == 0);
    if (T::kQFreeEarly && last_tile(it0, n)) release_q();
    Rescale rs;
    softmax(w.tile_at(it0) * kBlockN, rs);
    rs.none();  // O is still 0: nothing to rescale
    if constexpr (kPvWaitBehindV) sh.v_ring.wait(st);  // as in the loop
    pack_p();

    Ring stv = st;  // slot of the tile whose P is in pf
    if constexpr (kPDouble) {
      mainloop_double(st, stv, rs, n);
    } else {
#pragma unroll 1
      for (int it = it0 + key_stride(); it < n; it += key_stride()) {
        // (1Q: each consumer's K / V slots are every other one of the rings; with P V of tile t
        // held over S of tile t + 2, the producer's V of t + 2 waited for that P V and the other
        // consumer's next K behind it: H200 2026-12-06, 0.70-0.80x of the solo consumer)
        if (!FA4_SM90_OVERLAP || (FA4_SM90_ONE_Q_SERIAL && one_q())) {  // ablation: P V of tile t - 1 completes before S of tile t issues
          sh.v_ring.wait(stv);
          pv_alone(stv);
          next_slot(st);
          sh.k_ring.wait(st);
          turn_wait();
          issue_s(st);
          turn_pass();
          ptx::wgmma_wait_group<0>();
          s_done(st, it, n, rs);
          rescale_o(rs);
          rs.none();  // applied: the rescale before the last P V must not repeat it
          pack_p();
          stv = st;
          continue;
        }
        next_slot(st);
        sh.k_ring.wait(st);
        turn_wait();
        issue_s(st);
        // The previous softmax's O rescale, while S runs on the tensor cores: O is idle here (its
        // last P V group was waited for), and the turn window is where the consumer would otherwise
        // only wait (FA3 places it there too). Not at Dv = 256: 128 multiplies there hold the turn
        // long enough to delay the other consumer's GEMMs (measured -5 to -10 %, sm90-notes.md).
        if constexpr (kRescaleInTurn) rescale_o(rs);
        if constexpr (!kPvWaitBehindV) sh.v_ring.wait(stv);  // else waited after the softmax
        issue_pv(stv);
        turn_pass();
        ptx::wgmma_wait_group<1>();
        s_done(st, it, n, rs);
        // The wait for the P V group in flight has no register dependence on S, so ptxas hoists
        // it (a WARPGROUP.DEPBAR) to the top of its basic block: in the softmax's block, above the
        // row max and the ex2s, and the consumer idles until P V completes (D = 256: 13 % of all
        // stall samples at that DEPBAR, ncu, 2ff92ce). At Dv = 256 the spin loop of the wait for
        // this tile's V (needed by the next turn's P V anyway) ends the block first: same-run A/B
        // +1-3.6 % at D = 256, but -3-6 % at D = 64 (and +-0.5 % at D = 128), where the early wait
        // stays (docs/perf/sm90-notes.md). One wait instruction for the whole warpgroup:
        // wgmma.wait_group is .aligned, every warp must execute the same one (a wait in each arm of
        // a per-warp branch was UB: synccheck's "mismatching warpgroup instruction pc").
        if constexpr (kPvWaitBehindV) sh.v_ring.wait(st);
        ptx::wgmma_wait_group<0>();
        ptx::fence_operands(o);
        if constexpr (!kRescaleInTurn) {
          rescale_o(rs);
          rs.none();
        }
        hold_p();
        sh.v_ring.release(stv, tid == 0);
        pack_p();
        stv = st;
      }
      sh.v_ring.wait(stv);
      rescale_o(rs);
      pv_alone(stv);
      st = stv;
      st.advance();  // the next tile's first slot
      if constexpr (kOneQ) {
        if (one_q_) st = st_end;
      }
    }
  }

  // ---- (1Q tiles) the end-of-tile merge of the two consumers' (O, m, l) ----
  // Consumer 1 ran the odd key tiles, consumer 0 the even ones, on the same 64 rows: thread tid
  // of either holds the same rows and columns. Consumer 1 hands over its (m, l) per row
  // (Smem::pair_ml) and its O in fp32, half the columns per pass, through its O staging space
  // (o_stage(1), 64 x Dv 16-bit = half of O in fp32; a 1Q launch runs no epilogue of consumer 1
  // and loads no Q it reads); consumer 0 merges, m = max(m0, m1), a_c = 2^((m_c - m) sc),
  // O = a0 O0 + a1 O1, l = a0 l0 + a1 l1, and runs the epilogue alone. Both consumers call it
  // for every tile of >= 2 key tiles. The hand-offs are mbarriers (Smem::pair_full / pair_empty,
  // every thread arrives for its own accesses), two phases per merge, so pass ps waits on parity
  // ps: consumer 1 writes pass ps once consumer 0 read the pass before it (a fresh barrier's
  // parity-1 wait passes), consumer 0 reads it once written. (With 256-thread named barriers
  // racecheck reported consumer 0's first-pass reads against consumer 1's second-pass writes on
  // the split_kv tile, H100 2026-12-06.)
  __device__ __forceinline__ void merge_pair() {
    static_assert(kConsumers == 2 && !kFp8, "1Q: two 16-bit consumers");
    constexpr int kHalf = kDv / 2;      // fp32 columns per pass
    constexpr int kBlocks = kHalf / 8;  // 8-column blocks per pass: a quad's 32 bytes of a row
    static_assert(kRowsPerConsumer * kHalf * 4 <= kRowsPerConsumer * kDv * sizeof(typename T::OutElem) &&
                      (kBlocks & (kBlocks - 1)) == 0,
                  "a pass fits the staging tile; whole swizzle groups");
    float* const x = reinterpret_cast<float*>(sh.o_stage(1));
    // [64 rows][kHalf] fp32, row r's blocks XOR-swizzled by r % kBlocks: a warp's eight rows of a
    // block land in eight different 32-byte bank groups.
    auto at = [&](int r, int cb) { return reinterpret_cast<float2*>(x + r * kHalf + ((cb ^ (r % kBlocks)) * 8) + 2 * t4); };
    float a0[2] = {1.f, 1.f}, a1[2] = {0.f, 0.f};
#pragma unroll
    for (int ps = 0; ps < 2; ++ps) {
      if (c == 1) {
        ptx::mbarrier_wait_parity(&sh.pair_empty, static_cast<uint32_t>(ps) ^ 1u);
        if (ps == 0) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float l = quad_sum(l_run[h]);
            if (t4 == 0) sh.pair_ml[row_of(h)][0] = m_run[h], sh.pair_ml[row_of(h)][1] = l;
          }
        }
#pragma unroll
        for (int cb = 0; cb < kBlocks; ++cb)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = 4 * (ps * kBlocks + cb) + 2 * h;
            *at(row_of(h), cb) = make_float2(o[i], o[i + 1]);
          }
        ptx::mbarrier_arrive(&sh.pair_full);
      } else {
        ptx::mbarrier_wait_parity(&sh.pair_full, static_cast<uint32_t>(ps));
        if (ps == 0) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float m1 = sh.pair_ml[row_of(h)][0], l1 = sh.pair_ml[row_of(h)][1];
            const float m = fmaxf(m_run[h], m1);  // (-inf: neither consumer saw a key of the row)
            a0[h] = m_run[h] == -INFINITY ? 0.f : ptx::exp2_approx((m_run[h] - m) * sc);
            a1[h] = m1 == -INFINITY ? 0.f : ptx::exp2_approx((m1 - m) * sc);
            const float l0 = quad_sum(l_run[h]);
            l_run[h] = t4 == 0 ? a0[h] * l0 + a1[h] * l1 : 0.f;  // (the epilogue sums the quad)
            m_run[h] = m;
          }
        }
#pragma unroll
        for (int cb = 0; cb < kBlocks; ++cb)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int i = 4 * (ps * kBlocks + cb) + 2 * h;
            const float2 y = *at(row_of(h), cb);
            o[i] = a0[h] * o[i] + a1[h] * y.x, o[i + 1] = a0[h] * o[i + 1] + a1[h] * y.y;
          }
        ptx::mbarrier_arrive(&sh.pair_empty);
      }
    }
  }

  // The key tiles after the first with P double-buffered (kPDouble): tile it packs its P into
  // buffer it % 2 while the P V of tile it - 1 reads the other. Per tile:
  //     K_t landed ; wait P V_{t-2} -> release V_{t-2}         (behind the K spin loop: ptxas
  //                                                             keeps the wait in that block)
  //     turn: S_t ; O *= alpha_{t-1} ; O += P_{t-1} V_{t-1} ; pass
  //     wait S_t -> release K_t ; softmax -> P_t, alpha_t ; pack P_t (buffer t % 2: no wait)
  // Registers can only be indexed statically, hence the loop unrolled by two.
  __device__ __forceinline__ void mainloop_double(Ring& st, Ring& stv, Rescale& rs, int n) {
    Ring stv2 = stv;  // slot of the tile whose P V may still run (valid from the second step)
#pragma unroll 1
    for (int it = 1; it < n; it += 2) {
      double_step<1>(st, stv, stv2, rs, it, n);
      if (it + 1 < n) double_step<0>(st, stv, stv2, rs, it + 1, n);
    }
    ptx::wgmma_wait_group<0>();  // P V of tile n - 2 (unconditional: see double_step)
    ptx::fence_operands(o);
    if (n >= 2) sh.v_ring.release(stv2, tid == 0);
    sh.v_ring.wait(stv);
    rescale_o(rs);
    if ((n - 1) % 2) pv_alone<1>(stv);
    else pv_alone<0>(stv);
    st = stv;
    st.advance();  // the next tile's first slot
  }
  // Key tile `it` (kB = it % 2); stv: the previous tile's slot (its P in buffer 1 - kB), stv2: the
  // one before (its P V in flight from it >= 2).
  template <int kB>
  __device__ __forceinline__ void double_step(Ring& st, Ring& stv, Ring& stv2, Rescale& rs, int it, int n) {
    st.advance();
    sh.k_ring.wait(st);
    // P V of tile it - 2 (buffer kB) completes: its V slot and P registers free. Unconditional
    // (nothing is in flight at it = 1): a wait on one path only made ptxas serialize every wgmma
    // (C7514, O read by the rescale below with a group possibly in flight).
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(o);
    hold_p<kB>();
    if (it >= 2) sh.v_ring.release(stv2, tid == 0);
    if constexpr (!kRescaleInTurn) rescale_o(rs);  // O is idle: its last P V group completed above
    turn_wait();
    issue_s(st);
    if constexpr (kRescaleInTurn) rescale_o(rs);
    sh.v_ring.wait(stv);
    issue_pv<1 - kB>(stv);
    turn_pass();
    ptx::wgmma_wait_group<1>();
    s_done(st, it, n, rs);
    pack_p<kB>();
    stv2 = stv;
    stv = st;
  }
};

}  // namespace fa4::cuda::sm90
