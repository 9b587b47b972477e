// The sm80 portable forward kernel: FlashAttention-2 structure on mma.sync m16n8k16.
//
// One CTA computes a tile of kBlockM query rows of one (batch, head) -- or, with PackGQA, of the
// (query row, head) pairs of one kv head -- against the key range its mask can see (or one split
// of it). K/V tiles of kBlockN keys stream through a kStages-deep cp.async ring; each warp
// computes S = Q K^T for its rows x keys, applies softcap / mask, updates a running max and sum
// in registers (online softmax, log2 domain, exp2 on the MUFU unit) and accumulates O += P V with
// P taken straight from the S accumulators (the m16n8 C fragment of two n-tiles is the A fragment
// of one k16 step). With pair_dv (D = 256) warps 2i and 2i + 1 still run their softmax alone but
// swap P through shared memory and each accumulate O for both warps' rows over one half of Dv,
// so every V fragment read from shared memory feeds 32 rows. The epilogue merges the warps'
// partial states through shared memory, adds the sink, normalizes, and writes out (+ lse) or the
// fp32 partials of a split. The fp8 instances (Inst::fp8_kv, Inst::fp8) copy e4m3 K / V (and Q)
// tiles as bytes and widen them to 16 bits in shared memory before the same MMAs (fwd_fp8.cuh).
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
#include <type_traits>

#include "cuda/common/fwd_args.h"
#include "cuda/common/mask.cuh"
#include "cuda/common/softcap.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/common/seq_info.cuh"
#include "cuda/ptx/sm80_ptx.cuh"
#include "cuda/sm80/fwd_configs.h"
#include "cuda/sm80/fwd_fp8.cuh"

namespace fa4::cuda::sm80 {

template <typename Elem_, int kDqk_, int kDv_, int kBlockM_, int kBlockN_, int kWarpsM_, int kWarpsN_, int kStages_,
          int kPairDv_ = 0>
struct FwdTraits {
  using Elem = Elem_;
  static constexpr int kDqk = kDqk_, kDv = kDv_, kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kStages = kStages_;
  static constexpr bool kPairDv = kPairDv_ != 0;  // TileCfg::pair_dv
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
  static constexpr int kSmemBytes = smem_bytes(TileCfg{kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, kPairDv_}, kDqk, kDv);
  // fp8 instances (fwd_configs.h smem_bytes_fp8): their extra buffers start at kFp8Base bytes.
  static constexpr TileCfg kCfg{kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, kPairDv_};
  static constexpr int kSmemBytesFp8 = smem_bytes_fp8(kCfg, kDqk, kDv);
  static constexpr int kFp8Base = fp8_base_bytes(kCfg, kDqk, kDv);
  static_assert(!kPairDv || (kWarpsN == 1 && kWarpRows == 16 && kWarpsM % 2 == 0 && kStages == 1 && kDv % 32 == 0),
                "pair_dv: 16-row warps in pairs, keys unsplit, the single-buffer schedule (its mid-iteration barrier)");
  static_assert(kWarpRows % 16 == 0 && kWarpKeys % 16 == 0, "warp tile must be whole m16 x k16 steps");
  static_assert(kDqk % 64 == 0 && kDv % 64 == 0, "swizzle needs rows of a multiple of 8 chunks");
  static_assert(kStages >= 1, "at least one K/V buffer");
};

// The swizzled position of a fixed chunk in rows r0, r0 + step, r0 + 2 step, ... repeats with
// period 8 / gcd(step, 8): a copy loop over such rows needs that many base addresses, the rest
// are compile-time offsets from them.
constexpr int swz_period(int row_step) {
  return row_step % 8 == 0 ? 1 : row_step % 4 == 0 ? 2 : row_step % 2 == 0 ? 4 : 8;
}

// Element offset of (row, 16-byte chunk) in a swizzled [rows][D] tile.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + (((chunk & ~7) | ((chunk ^ row) & 7)) << 3);
}

// Issues the cp.async copies of one [kRows x kD] K or V tile (keys n0 ..) into shared memory.
// The per-thread work is fixed at compile time: kIters 16-byte chunks, and when kThreads is a
// multiple of the chunks per row each thread keeps one column chunk for every row it copies (so
// the column bound and the swizzled column are computed once). Rows >= len and columns >= d are
// zero-filled (no branch on the data path; masked keys then hold exact zeros, never stale NaN).
template <typename Elem, int kRows, int kD, int kThreads>
struct TileLoader {
  static constexpr int kChunks = kD / 8;
  static constexpr int kIters = kRows * kChunks / kThreads;
  static constexpr bool kFixedCol = kThreads % kChunks == 0;
  static constexpr int kRowStep = kFixedCol ? kThreads / kChunks : 0;
  static_assert(kRows * kChunks % kThreads == 0, "tile must split evenly over the threads");
  int tid = 0, d = 0;

  __device__ __forceinline__ void init(int tid_, int d_) { tid = tid_, d = d_; }
  __device__ __forceinline__ int row_of(int k) const {
    return kFixedCol ? tid / kChunks + k * kRowStep : (tid + k * kThreads) / kChunks;
  }
  __device__ __forceinline__ int col_of(int k) const {
    return kFixedCol ? tid % kChunks : (tid + k * kThreads) % kChunks;
  }
  __device__ __forceinline__ uint32_t col_bytes(int ch) const {
    const int valid = d - ch * 8;
    return valid >= 8 ? 16u : (valid > 0 ? 2u * valid : 0u);
  }

  // Contiguous rows (dense / varlen / cache): element offset of key j = base + j * step.
  // With a fixed column, every copy of this thread is one pointer add and a compile-time
  // shared-memory offset away from one of kPeriod bases (swz_period); whole tiles (the common
  // case) skip the row bound.
  static constexpr int kPeriod = swz_period(kRowStep);
  __device__ __forceinline__ void load_strided(Elem* s, const Elem* g, int64_t base, int64_t step, int n0,
                                               int len) const {
    if constexpr (kFixedCol) {
      const int r0 = row_of(0), ch = col_of(0);
      const uint32_t cb = col_bytes(ch);
      const Elem* src0 = g + base + static_cast<int64_t>(n0 + r0) * step + ch * 8;
      const int64_t rs = static_cast<int64_t>(kRowStep) * step;
      uint32_t dst[kPeriod];  // dst[k % kPeriod] + k * kRowStep rows = address of copy k
#pragma unroll
      for (int q = 0; q < kPeriod; ++q)
        dst[q] = ptx::smem_u32(s + swz<kD>(r0 + q * kRowStep, ch)) - q * kRowStep * kD * 2;
      if (n0 + kRows <= len && cb == 16u) {
#pragma unroll
        for (int k = 0; k < kIters; ++k) ptx::cp_async_16(dst[k % kPeriod] + k * kRowStep * kD * 2, src0 + k * rs, 16u);
      } else {
#pragma unroll
        for (int k = 0; k < kIters; ++k) {
          const uint32_t bytes = n0 + r0 + k * kRowStep < len ? cb : 0u;
          ptx::cp_async_16(dst[k % kPeriod] + k * kRowStep * kD * 2, bytes ? src0 + k * rs : g, bytes);
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < kIters; ++k) {
        const int r = row_of(k), ch = col_of(k);
        const int j = n0 + r;
        const uint32_t bytes = j < len ? col_bytes(ch) : 0u;
        const Elem* src = bytes ? g + base + static_cast<int64_t>(j) * step + ch * 8 : g;
        ptx::cp_async_16(ptx::smem_u32(s + swz<kD>(r, ch)), src, bytes);
      }
    }
  }
  // Paged rows: key r of the tile starts at element offset row_off[r] (page * s0 + row * s1,
  // computed once per key by stage_pages one iteration ahead, so no copy waits on a page-table
  // load and each copy costs one shared-memory read and an add).
  __device__ __forceinline__ void load_paged(Elem* s, const Elem* g, int64_t base, const int64_t* row_off, int n0,
                                             int len) const {
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int r = row_of(k), ch = col_of(k);
      const uint32_t bytes = n0 + r < len ? col_bytes(ch) : 0u;
      const Elem* src = bytes ? g + base + row_off[r] + ch * 8 : g;
      ptx::cp_async_16(ptx::smem_u32(s + swz<kD>(r, ch)), src, bytes);
    }
  }
};

// Instances by feature set. The runtime-feature code of the general instance (softcap, paged KV,
// varlen-q tile scheduling) makes the unrolled main loop large enough to miss in the instruction
// cache (ncu on H200, D = 128, S = 512: 35% of issue stalls were "no instruction"), so the common
// case (dense q; no softcap; contiguous / varlen / cache KV) gets its own smaller instance, and
// so does varlen q without softcap / paging (prefill tiles): in the general instance it ran at
// 0.84-0.94x of the same problem dense, 0.93-1.0x in a softcap- and paging-free one (H200).
// The fp8 instances have the general instance's features with e4m3 K / V (fp8_kv: 16-bit q, an
// fp8 KV cache) or e4m3 Q / K / V (fp8: bf16 compute and output), and take FwdArgsFp8 (the
// factors); fwd_fp8.cuh says how the bytes flow.
enum class Inst : int { common, varlen, general, fp8_kv, fp8 };

constexpr bool is_fp8(Inst i) { return i == Inst::fp8_kv || i == Inst::fp8; }

// Args: FwdArgs, or FwdArgsFp8 (the factors) for the fp8 instances; the fp8 code is compiled out
// of the others. (One kernel template: a __forceinline__ body shared by two entries perturbed
// the register allocation of the 16-bit instances' code.)
template <class T, Inst kInst, class Args = FwdArgs>
__global__ void __launch_bounds__(T::kThreads) fwd_kernel(const __grid_constant__ Args p) {
  static_assert(is_fp8(kInst) == std::is_same_v<Args, FwdArgsFp8>, "fp8 instances take FwdArgsFp8, the others FwdArgs");
  constexpr bool kFp8Kv = is_fp8(kInst);     // K / V arrive as e4m3 bytes
  constexpr bool kFp8Q = kInst == Inst::fp8;  // Q too
  constexpr bool kGeneral = kInst == Inst::general || kFp8Kv;
  using Elem = typename T::Elem;
  constexpr int kDqk = T::kDqk, kDv = T::kDv, kBlockM = T::kBlockM, kBlockN = T::kBlockN;
  constexpr int kMT = T::kMT, kNT = T::kNT, kOT = T::kOT, kStages = T::kStages, kThreads = T::kThreads;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // fp8: one 16-bit K and V tile (the current tile, widened from the byte ring below).
  constexpr int kKVBufs = kFp8Kv ? 1 : kStages;
  Elem* sQ = reinterpret_cast<Elem*>(smem_raw);
  Elem* sK = sQ + T::kQElems;
  Elem* sV = sK + kKVBufs * T::kKElems;
  // Paged KV: element offsets of the tile's key rows in k and v, a 2-deep ring [2][kBlockN].
  int64_t* sOffK = reinterpret_cast<int64_t*>(sV + kKVBufs * T::kVElems);
  int64_t* sOffV = sOffK + 2 * kBlockN;
  // pair_dv: the O tile of a warp pair is [32 rows] x [Dv], split by columns: warp `ph` of the pair
  // accumulates columns [ph * Dv / 2, (ph + 1) * Dv / 2) for its own 16 rows (o[0]) and its
  // partner's (o[1]). The partner's P reaches it as mma A fragments in shared memory.
  constexpr bool kPair = T::kPairDv;
  constexpr int kOM = kPair ? 2 : kMT;        // m16 tiles of O per warp
  constexpr int kOW = kPair ? kOT / 2 : kOT;  // n8 tiles of O per warp
  constexpr int kPSteps = kBlockN / 16;       // k16 steps of P V
  uint4* sPfrag = reinterpret_cast<uint4*>(sOffV + 2 * kBlockN);            // [warp][kPSteps][lane]
  float2* sAlpha = reinterpret_cast<float2*>(sPfrag + (kThreads / 32) * kPSteps * 32);  // [warp][lane]
  float2* sRowScale = sAlpha + kThreads;                                                 // [warp][lane]
  // fp8 (fwd_configs.h smem_bytes_fp8): the e4m3 ring, [kStages][kBlockN][kDqk] and [kDv] bytes;
  // per-token factors [kStages][kBlockN] fp32 for K and for V; the paged ring of the factors'
  // offsets [2][kBlockN] each. All-fp8 Q bytes [kBlockM][kDqk] wait in the 16-bit K / V tiles
  // (free until the first tile is widened, which widens Q first).
  static_assert(!kFp8Kv || (T::kFp8Base % 16 == 0 && T::kFp8Base + kStages * kBlockN * (kDqk + kDv) +
                                                           2 * kStages * kBlockN * 4 + 4 * kBlockN * 8 ==
                                                       fp8_pipe_bytes(T::kCfg, kDqk, kDv)),
                "fp8 carve-up must match smem_bytes_fp8");
  static_assert(!kFp8Q || kBlockM * kDqk <= (T::kKElems + T::kVElems) * 2, "all-fp8 Q bytes fit the 16-bit K / V tiles");
  static_assert(!kFp8Kv || kThreads >= kBlockN, "one thread per key row copies the per-token factors");
  [[maybe_unused]] uint8_t* rK = smem_raw + T::kFp8Base;
  [[maybe_unused]] uint8_t* rV = rK + kStages * kBlockN * kDqk;
  [[maybe_unused]] float* sFk = reinterpret_cast<float*>(rV + kStages * kBlockN * kDv);
  [[maybe_unused]] float* sFv = sFk + kStages * kBlockN;
  [[maybe_unused]] int64_t* sOffFk = reinterpret_cast<int64_t*>(sFv + kStages * kBlockN);
  [[maybe_unused]] int64_t* sOffFv = sOffFk + 2 * kBlockN;
  [[maybe_unused]] uint8_t* rQ = reinterpret_cast<uint8_t*>(sK);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % T::kWarpsM, wn = warp / T::kWarpsM;
  const int g = lane >> 2, t4 = lane & 3;  // mma fragment coordinates: row group, column pair

  const int head_idx = blockIdx.y;  // kv head (PackGQA) or query head
  int m_block, batch, split;
  // Varlen tile scheduling is compiled out of the common instance: there the tile, batch and
  // split stay functions of blockIdx (uniform registers); merging them with the scanned values
  // cost D = 256 prefill ~10% (H200, 2026-11-29).
  if (!cta_tile<kInst != Inst::common, kInst == Inst::varlen>(p, kBlockM, &m_block, &batch, &split)) return;
  SeqInfo si;
  si.init(p, batch);
  // Tile rows of this (batch, head): < 2^31 (cuda_check), so row arithmetic is 32-bit.
  const int rows_seq = static_cast<int>(p.pack_gqa ? si.sq * p.group : si.sq);
  const int m0 = m_block * kBlockM;
  if (m0 >= rows_seq) return;
  const int hk = p.pack_gqa ? head_idx : head_idx / p.group;
  const int sk = static_cast<int>(si.sk < INT_MAX ? si.sk : INT_MAX);

  // Tile row r -> (query row, query head).
  auto row_i = [&](int m) -> int { return p.pack_gqa ? m / p.group : m; };
  auto row_h = [&](int m) -> int { return p.pack_gqa ? hk * p.group + m % p.group : head_idx; };

  const Elem* gq = static_cast<const Elem*>(p.q);
  // Swizzled element offsets of the 16-bit tiles (the fp8 widening writes them).
  [[maybe_unused]] auto swz_qk = [](int r, int c) { return swz<kDqk>(r, c); };
  [[maybe_unused]] auto swz_v = [](int r, int c) { return swz<kDv>(r, c); };
  // ---- prologue: Q tile first, then the first kStages - 1 K/V tiles ----
  // The copies are issued as early as the addresses allow (ncu, D = 256, S = 512: ~290
  // instructions ran before the Q copy; the key range and the mask bounds below are not needed
  // for it). Measured neutral on H200 (same run, 2 x 2 interleaved sweeps), kept as the natural
  // order.
  if constexpr (kFp8Q) {
    // e4m3 Q rows as bytes into rQ; the first key tile widens them into sQ (main loop).
    const uint8_t* gq8 = static_cast<const uint8_t*>(p.q);
    ByteTileLoader<kBlockM, kDqk, kThreads> lq;
    lq.init(tid, p.dqk);
    if (!p.pack_gqa) {
      lq.load_strided(rQ, gq8, si.q_base + static_cast<int64_t>(head_idx) * p.q_sh, si.q_step, m0, rows_seq);
    } else {
      lq.load(rQ, gq8, m0, rows_seq, [&](int r) {
        const int m = m0 + r;
        return si.q_base + static_cast<int64_t>(row_i(m)) * si.q_step + static_cast<int64_t>(row_h(m)) * p.q_sh;
      });
    }
  } else if (!p.pack_gqa) {
    // Rows of one head are evenly strided: the same unrolled copy as a K tile (a per-chunk
    // division loop here was ~10% of all executed instructions at S = 512, ncu 2026-11-29).
    TileLoader<Elem, kBlockM, kDqk, kThreads> lq;
    lq.init(tid, p.dqk);
    lq.load_strided(sQ, gq, si.q_base + static_cast<int64_t>(head_idx) * p.q_sh, si.q_step, m0, rows_seq);
  } else {
    constexpr int kChunks = kDqk / 8;
    // PackGQA (decode-sized tiles): row m is (query m / group, head m % group). Not unrolled: it
    // runs once per CTA and unrolled per-CTA code competes with the main loop for the i-cache.
#pragma unroll 1
    for (int k = 0; k < (kBlockM * kChunks + kThreads - 1) / kThreads; ++k) {
      const int c = tid + k * kThreads;
      if (c >= kBlockM * kChunks) break;
      const int r = c / kChunks, ch = c % kChunks;
      const int m = m0 + r;
      const Elem* src = gq;
      uint32_t bytes = 0;
      if (m < rows_seq) {
        const int valid = p.dqk - ch * 8;
        bytes = valid >= 8 ? 16u : (valid > 0 ? 2u * valid : 0u);
        if (bytes) src = gq + si.q_base + static_cast<int64_t>(row_i(m)) * si.q_step + static_cast<int64_t>(row_h(m)) * p.q_sh + ch * 8;
      }
      ptx::cp_async_16(ptx::smem_u32(sQ + swz<kDqk>(r, ch)), src, bytes);
    }
  }

  // Key range of the whole tile (mask), then this split's share of its kBlockN tiles.
  const int m_last = (m0 + kBlockM < rows_seq ? m0 + kBlockM : rows_seq) - 1;
  const int64_t i_first = row_i(m0), i_last = row_i(m_last);
  int n_lo, n_hi;
  key_tiles(p, si, i_first, i_last, sk, kBlockN, split, &n_lo, &n_hi);
  const int n_tiles = n_hi - n_lo;

  const Elem* gk = static_cast<const Elem*>(p.k);
  const Elem* gv = static_cast<const Elem*>(p.v);
  KvAddr kaddr, vaddr;
  kaddr.init(p, si, p.k_s0, p.k_s1, p.k_sh, hk);
  vaddr.init(p, si, p.v_s0, p.v_s1, p.v_sh, hk);
  const bool paged = kGeneral && kaddr.paged;
  [[maybe_unused]] const uint8_t* gk8 = static_cast<const uint8_t*>(p.k);
  [[maybe_unused]] const uint8_t* gv8 = static_cast<const uint8_t*>(p.v);

  // fp8 factors. Per (batch, kv head): q_descale x k_descale fold into the score scale, v_descale
  // into the output normalization (epilogue). Per token (fp8 KV cache): copied with each key
  // tile (issue_factors) and applied to the columns of S (k) and of P (v).
  float fp8_qk = 1.f, fp8_v = 1.f;
  bool tok_k = false, tok_v = false;
  KvAddr fkaddr, fvaddr;  // per-token factors: addressed as k's / v's rows, with their strides
  if constexpr (kFp8Kv) {
    tok_k = p.k_descale != nullptr && p.k_tok != 0;
    tok_v = p.v_descale != nullptr && p.v_tok != 0;
    if (p.q_descale != nullptr) fp8_qk = p.q_descale[si.b * p.qd_s0 + hk * p.qd_sh];
    if (p.k_descale != nullptr && !tok_k) fp8_qk *= p.k_descale[si.b * p.kd_s0 + hk * p.kd_sh];
    if (p.v_descale != nullptr && !tok_v) fp8_v = p.v_descale[si.b * p.vd_s0 + hk * p.vd_sh];
    fkaddr.init(p, si, p.kd_s0, p.kd_s1, p.kd_sh, hk);
    fvaddr.init(p, si, p.vd_s0, p.vd_s1, p.vd_sh, hk);
  }
  ByteTileLoader<kBlockN, kDqk, kThreads> bk;
  ByteTileLoader<kBlockN, kDv, kThreads> bv;
  if constexpr (kFp8Kv) {
    bk.init(tid, p.dqk);
    bv.init(tid, p.dv);
  }

  using LoadK = TileLoader<Elem, kBlockN, kDqk, kThreads>;
  using LoadV = TileLoader<Elem, kBlockN, kDv, kThreads>;
  LoadK lk;
  LoadV lv;
  lk.init(tid, p.dqk);
  lv.init(tid, p.dv);
  // Paged KV: one thread per key row reads its page-table entry once per tile (instead of every
  // thread copying a chunk of that row) into a 2-deep ring in shared memory; the entries of tile
  // i + 1 are read while tile i is issued, and the barrier at the top of each iteration orders the
  // write before the use.
  // Split in two so the page-table load's latency hides behind a tile of math: fetch_page reads
  // the entry of key row tid of a tile into a register right after a tile is issued, store_page
  // writes it to the ring after that tile's math.
  int32_t pf_page = 0, pf_row = 0, pf_tile = -1;
  auto fetch_page = [&](int tile) {
    pf_tile = tile;
    if (tid < kBlockN) {
      const int j = (n_lo + tile) * kBlockN + tid;
      pf_page = 0, pf_row = 0;
      if (j < sk) {
        const int pi = j / kaddr.page_size;
        pf_page = kaddr.pt_row[pi * kaddr.pt_s1];
        pf_row = j - pi * kaddr.page_size;
      }
    }
  };
  auto store_page = [&]() {
    if (tid < kBlockN && pf_tile >= 0) {
      const int64_t page = clamp64(pf_page, 0, kaddr.num_pages - 1);
      sOffK[(pf_tile & 1) * kBlockN + tid] = page * kaddr.s0 + static_cast<int64_t>(pf_row) * kaddr.s1;
      sOffV[(pf_tile & 1) * kBlockN + tid] = page * vaddr.s0 + static_cast<int64_t>(pf_row) * vaddr.s1;
      if constexpr (kFp8Kv) {
        sOffFk[(pf_tile & 1) * kBlockN + tid] = page * fkaddr.s0 + static_cast<int64_t>(pf_row) * fkaddr.s1;
        sOffFv[(pf_tile & 1) * kBlockN + tid] = page * fvaddr.s0 + static_cast<int64_t>(pf_row) * fvaddr.s1;
      }
    }
    pf_tile = -1;
  };
  auto stage_pages = [&](int tile) {
    fetch_page(tile);
    store_page();
  };
  // fp8 per-token factors of the keys n0 .. of tile `tile` into ring stage `stage`, K's and V's
  // both with K's copies (the single-buffer schedule applies V's to P before V lands); zeros past
  // the sequence (those keys are masked).
  [[maybe_unused]] auto issue_factors = [&](int stage, int tile, int n0) {
    if constexpr (kFp8Kv) {
      if (tid < kBlockN && (tok_k || tok_v)) {
        const int j = n0 + tid;
        const bool in = j < sk;
        const uint32_t bytes = in ? 4u : 0u;
        const int slot = (tile & 1) * kBlockN + tid;
        if (tok_k) {
          const int64_t o = !in ? 0 : fkaddr.base + (paged ? sOffFk[slot] : static_cast<int64_t>(j) * fkaddr.step);
          ptx::cp_async_4(ptx::smem_u32(sFk + stage * kBlockN + tid), p.k_descale + o, bytes);
        }
        if (tok_v) {
          const int64_t o = !in ? 0 : fvaddr.base + (paged ? sOffFv[slot] : static_cast<int64_t>(j) * fvaddr.step);
          ptx::cp_async_4(ptx::smem_u32(sFv + stage * kBlockN + tid), p.v_descale + o, bytes);
        }
      }
    }
  };
  auto issue_k = [&](int stage, int tile) {
    const int n0 = (n_lo + tile) * kBlockN;
    if constexpr (kFp8Kv) {
      uint8_t* dk = rK + stage * kBlockN * kDqk;
      if (!paged) bk.load_strided(dk, gk8, kaddr.base, kaddr.step, n0, sk);
      else bk.load_paged(dk, gk8, kaddr.base, sOffK + (tile & 1) * kBlockN, n0, sk);
      issue_factors(stage, tile, n0);
    } else {
      Elem* dk = sK + stage * T::kKElems;
      if (!paged) lk.load_strided(dk, gk, kaddr.base, kaddr.step, n0, sk);
      else lk.load_paged(dk, gk, kaddr.base, sOffK + (tile & 1) * kBlockN, n0, sk);
    }
  };
  auto issue_v = [&](int stage, int tile) {
    const int n0 = (n_lo + tile) * kBlockN;
    if constexpr (kFp8Kv) {
      uint8_t* dv = rV + stage * kBlockN * kDv;
      if (!paged) bv.load_strided(dv, gv8, vaddr.base, vaddr.step, n0, sk);
      else bv.load_paged(dv, gv8, vaddr.base, sOffV + (tile & 1) * kBlockN, n0, sk);
    } else {
      Elem* dv = sV + stage * T::kVElems;
      if (!paged) lv.load_strided(dv, gv, vaddr.base, vaddr.step, n0, sk);
      else lv.load_paged(dv, gv, vaddr.base, sOffV + (tile & 1) * kBlockN, n0, sk);
    }
  };
  if constexpr (kStages == 1) {
    // Single K and V buffers (FlashAttention-2's loads, for tiles whose smem must stay small
    // enough for two CTAs per SM): V_t loads during Q K_t and the softmax, K_{t+1} during P V_t;
    // the first wait covers Q + K0 only. Groups: [Q + K0], then per iteration [V_t], [K_{t+1}].
    if (n_tiles > 0) {
      if (paged) {
        stage_pages(0);
        __syncthreads();
      }
      issue_k(0, 0);
    }
    ptx::cp_async_commit();
  } else {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_tiles) {
        if (paged) {
          stage_pages(s);
          __syncthreads();
        }
        issue_k(s, s);
        issue_v(s, s);
      }
      ptx::cp_async_commit();
    }
    if (paged && kStages - 1 < n_tiles) stage_pages(kStages - 1);
  }

  RowMask32 rmask;
  rmask.init(p.mask, si.sq, sk);
  // A key tile [n0, n0 + kBlockN) needs no mask iff every row of the tile sees all of it. Row
  // bounds lo(i), hi(i) never decrease with i (causal, window, chunk), so that is
  // n0 >= lo(i_last) and n0 + kBlockN <= hi(i_first): two compares per tile.
  int full_lo, full_hi;
  {
    int lo, hi;
    rmask.bounds(i_last, lo, hi);
    full_lo = lo;
    rmask.bounds(i_first, lo, hi);
    full_hi = hi;
  }

  // ---- per-thread row state ----
  // This thread's accumulator rows: rr = 2 * mt + half -> tile row wm*kWarpRows + mt*16 + g + 8*half.
  // m_run is in the kept score units: raw scores when the scale is folded into the exponent
  // (sc = scale * log2(e)), tanh values with softcap (sc = softcap * log2(e)), log2 units with a
  // non-positive scale (sc = 1).
  float m_run[2 * kMT], l_run[2 * kMT];
  int row_lo[2 * kMT], row_hi[2 * kMT];  // visible keys of the row: [lo, hi) (mask, 32-bit)
#pragma unroll
  for (int rr = 0; rr < 2 * kMT; ++rr) {
    m_run[rr] = -INFINITY, l_run[rr] = 0.f;
    rmask.bounds(row_i(m0 + wm * T::kWarpRows + (rr >> 1) * 16 + g + (rr & 1) * 8), row_lo[rr], row_hi[rr]);
  }
  float o[kOM][kOW][4];
#pragma unroll
  for (int mt = 0; mt < kOM; ++mt)
#pragma unroll
    for (int ot = 0; ot < kOW; ++ot)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][ot][e] = 0.f;
  const int ph = warp & 1;  // pair_dv: this warp's Dv half

  const bool softcap = kGeneral && p.softcap_log2 != 0.f;
  // Softcap keeps tanh values, softcap * log2(e) (> 0) folded into the exponentials as the
  // scale is without softcap; a non-positive scale keeps log2 units (the max would flip).
  // fp8: q_descale x k_descale of this (batch, kv head) scale every score, as the scale does.
  const float scale_log2 = kFp8Kv ? p.scale_log2 * fp8_qk : p.scale_log2;
  const float softcap_in = kFp8Kv ? p.softcap_in * fp8_qk : p.softcap_in;
  const bool fold = softcap || scale_log2 > 0.f;
  const float sc = softcap ? p.softcap_log2 : fold ? scale_log2 : 1.f;
  const float softcap_in2 = softcap_in * 2.f * 1.4426950408889634f;  // exp2 argument of e^{2y}
  // Conditional rescaling (common/softmax.cuh): warp-uniform, so a skipped rescale skips the
  // whole warp's O multiplies.
  const int q_row0 = wm * T::kWarpRows;
  const int key0 = wn * T::kWarpKeys;

  // ldmatrix lane addresses, precomputed. A lane's row has (row % 8) == lane % 8 in all three
  // operands, so the swizzled chunk of logical chunk c = 2*kk + b (b: the lane's half) is
  // 8*(kk/4) + ((2*(kk%4)) ^ (b ^ lane%8)): four bases per operand (one per kk % 4) plus
  // compile-time offsets, instead of swizzle arithmetic per ldmatrix in the unrolled loop.
  // Q: one base, XOR'd per k step (the Q tile starts 128-byte aligned and the swizzle only moves
  // bits 4..6, so base + ((2j ^ x) << 4) == (base + (x << 4)) ^ (j << 5)).
  uint32_t q_addr0, k_addr[4], v_addr[4];  // bytes; k / v relative to the stage base
  {
    const int r7 = lane & 7;
    const int xq = (lane >> 4) ^ r7, xk = ((lane >> 3) & 1) ^ r7, xv = (lane >> 4) ^ r7;
    const uint32_t q_row = ptx::smem_u32(sQ) + (q_row0 + (lane & 15)) * kDqk * 2;
    const uint32_t k_row = (key0 + (lane & 7) + ((lane >> 4) << 3)) * kDqk * 2;
    const uint32_t v_row = (key0 + (lane & 7) + ((lane >> 3) & 1) * 8) * kDv * 2;
    q_addr0 = q_row + (xq << 4);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      k_addr[j] = k_row + (((2 * j) ^ xk) << 4);
      v_addr[j] = v_row + (((2 * j) ^ xv) << 4);
    }
  }

  // ---- main loop over key tiles ----
  for (int t = 0; t < n_tiles; ++t) {
    if constexpr (kStages == 1) {
      ptx::cp_async_wait<0>();
      __syncthreads();  // K_t landed; every warp is done with P V_{t-1} (the V buffer is free)
      // Page offsets of tile t + 1 (ring slot (t + 1) & 1, last read before this barrier); its K
      // is issued after the next barrier, which orders these writes before those reads.
      if (paged && t + 1 < n_tiles) stage_pages(t + 1);
      issue_v(0, t);
      ptx::cp_async_commit();
    } else {
      ptx::cp_async_wait<kStages - 2>();
      __syncthreads();  // tile t landed for every thread; every warp is done with tile t - 1's stage
      const int tn = t + kStages - 1;
      if (tn < n_tiles) {
        issue_k(tn % kStages, tn);
        issue_v(tn % kStages, tn);
        if (paged && tn + 1 < n_tiles) fetch_page(tn + 1);
      }
      ptx::cp_async_commit();
    }
    const int stage = t % kStages;
    if constexpr (kFp8Kv) {
      // Widen the tile's e4m3 bytes into the 16-bit tiles: the barrier above saw them land and
      // every warp finish the previous tile's MMAs. All-fp8 Q first, once: its bytes sit in the
      // 16-bit K / V tiles, so a barrier separates the two. (Single buffer: V lands mid-iteration
      // and is widened there.)
      if (kFp8Q && t == 0) {
        widen_tile<Elem, kBlockM, kDqk, kThreads>(sQ, rQ, tid, swz_qk);
        __syncthreads();
      }
      widen_tile<Elem, kBlockN, kDqk, kThreads>(sK, rK + stage * kBlockN * kDqk, tid, swz_qk);
      if constexpr (kStages > 1) widen_tile<Elem, kBlockN, kDv, kThreads>(sV, rV + stage * kBlockN * kDv, tid, swz_v);
      __syncthreads();  // the 16-bit tiles are complete before any warp's ldmatrix
    }
    const uint32_t tK = ptx::smem_u32(sK) + (kFp8Kv ? 0 : stage * T::kKElems * 2);
    const uint32_t tV = ptx::smem_u32(sV) + (kFp8Kv ? 0 : stage * T::kVElems * 2);
    const int n0 = (n_lo + t) * kBlockN;

    // S = Q K^T   [kMT*16 rows x kNT*8 keys] per warp
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
    // Fragments of step kk + 1 are loaded before the MMAs of step kk (register double buffer):
    // with two warps per scheduler the ldmatrix latency is otherwise exposed at every k step
    // (ncu, D = 256: short-scoreboard stalls on the first MMA of each step were the largest
    // stall of the Q K^T loop).
    constexpr int kKSteps = kDqk / 16;
    uint32_t fa[2][kMT][4], fb[2][kNT / 2][4];
    auto load_qk_frags = [&](int buf, int kk) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        ptx::ldmatrix_x4((q_addr0 ^ ((kk & 3) << 5)) + mt * 16 * kDqk * 2 + (kk >> 2) * 128, fa[buf][mt][0], fa[buf][mt][1],
                         fa[buf][mt][2], fa[buf][mt][3]);
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np)
        ptx::ldmatrix_x4(tK + k_addr[kk & 3] + np * 16 * kDqk * 2 + (kk >> 2) * 128, fb[buf][np][0], fb[buf][np][1],
                         fb[buf][np][2], fb[buf][np][3]);
    };
    load_qk_frags(0, 0);
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      if (kk + 1 < kKSteps) load_qk_frags((kk + 1) & 1, kk + 1);
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np)
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          ptx::mma_16816<Elem>(s[mt][2 * np], fa[kk & 1][mt], fb[kk & 1][np][0], fb[kk & 1][np][1]);
          ptx::mma_16816<Elem>(s[mt][2 * np + 1], fa[kk & 1][mt], fb[kk & 1][np][2], fb[kk & 1][np][3]);
        }
    }

    // fp8 KV cache, per-token k factors: key j's score is (q . e4m3 row) x its factor, before
    // softcap, scale and mask (C fragment: elements 0 / 2 are key 2 t4, 1 / 3 key 2 t4 + 1).
    if constexpr (kFp8Kv) {
      if (tok_k) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const float2 f = *reinterpret_cast<const float2*>(sFk + stage * kBlockN + key0 + nt * 8 + 2 * t4);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            s[mt][nt][0] *= f.x, s[mt][nt][1] *= f.y;
            s[mt][nt][2] *= f.x, s[mt][nt][3] *= f.y;
          }
        }
      }
    }
    // Softcap / unfolded scale (uniform branches, outside the element loops), then the mask on
    // partial tiles only.
    if (softcap) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[mt][nt][e] = softcap_tanh(s[mt][nt][e], softcap_in, softcap_in2);
    } else if (!fold) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] *= scale_log2;
    }
    if (n0 < full_lo || n0 + kBlockN > full_hi) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int lo = row_lo[2 * mt + half], hi = row_hi[2 * mt + half];
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int j = n0 + key0 + nt * 8 + 2 * t4 + e;
              if (j < lo || j >= hi) s[mt][nt][2 * half + e] = -INFINITY;
            }
        }
    }

    // Online softmax: per-row max over the quad's 4 lanes; rescale only when some row of the warp
    // moved its max by more than the threshold (warp-uniform decision).
    float mx[2 * kMT];
    float alpha_row[2 * kMT];  // pair_dv: this tile's O rescale of the warp's rows, for the partner
#pragma unroll
    for (int rr = 0; rr < 2 * kMT; ++rr) alpha_row[rr] = 1.f;
    bool grow = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int rr = 2 * mt + half;
        float x = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) x = fmaxf(x, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
        x = quad_max(x);
        mx[rr] = x;
        grow |= rescale_needed(x, m_run[rr], sc);
      }
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int rr = 2 * mt + half;
          const float m_new = fmaxf(m_run[rr], mx[rr]);
          const float m_use = m_new == -INFINITY ? 0.f : m_new;  // nothing visible yet: keep args finite
          const float alpha = ptx::exp2_approx((m_run[rr] - m_use) * sc);
          m_run[rr] = m_new;
          l_run[rr] *= alpha;
          if constexpr (kPair) alpha_row[rr] = alpha;
          // O is all zeros before the first P V: the first tile (every CTA takes this branch
          // there) skips kOT * 4 multiplies. Single-buffer tiles only: in the other instances
          // the branch made ptxas add ~20-40 register moves to the main loop.
          if (kStages != 1 || t != 0) {
#pragma unroll
            for (int ot = 0; ot < kOW; ++ot) {
              o[mt][ot][2 * half] *= alpha;
              o[mt][ot][2 * half + 1] *= alpha;
            }
          }
        }
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int rr = 2 * mt + half;
        const float neg_m = -(m_run[rr] == -INFINITY ? 0.f : m_run[rr]) * sc;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const float p0 = ptx::exp2_approx(fmaf(s[mt][nt][2 * half], sc, neg_m));
          const float p1 = ptx::exp2_approx(fmaf(s[mt][nt][2 * half + 1], sc, neg_m));
          s[mt][nt][2 * half] = p0;
          s[mt][nt][2 * half + 1] = p1;
          sum += p0 + p1;
        }
        l_run[rr] += sum;
      }
    // fp8 KV cache, per-token v factors: P's column j times key j's factor (the value row is
    // e4m3 x factor), after the row sums (l keeps the softmax weights), before P is rounded to
    // 16 bits for P V. A weight of exactly 0 (a masked key inside the sequence) stays 0: the
    // reference never reads that key's factor, which may be inf or NaN.
    if constexpr (kFp8Kv) {
      if (tok_v) {
        auto times = [](float p, float f) { return p == 0.f ? 0.f : p * f; };
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const float2 f = *reinterpret_cast<const float2*>(sFv + stage * kBlockN + key0 + nt * 8 + 2 * t4);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            s[mt][nt][0] = times(s[mt][nt][0], f.x), s[mt][nt][1] = times(s[mt][nt][1], f.y);
            s[mt][nt][2] = times(s[mt][nt][2], f.x), s[mt][nt][3] = times(s[mt][nt][3], f.y);
          }
        }
      }
    }

    // pair_dv: P as mma A fragments, kept for this warp's rows and published (with this tile's
    // O rescale of those rows) for the partner; the barrier below orders the stores before the
    // partner's loads, and the next iteration's top barrier orders its loads before the next stores.
    uint32_t pa[kPair ? kPSteps : 1][4];
    if constexpr (kPair) {
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
        pa[kk][0] = ptx::pack2<Elem>(s[0][2 * kk][0], s[0][2 * kk][1]);
        pa[kk][1] = ptx::pack2<Elem>(s[0][2 * kk][2], s[0][2 * kk][3]);
        pa[kk][2] = ptx::pack2<Elem>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
        pa[kk][3] = ptx::pack2<Elem>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
        sPfrag[(warp * kPSteps + kk) * 32 + lane] = make_uint4(pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]);
      }
      sAlpha[warp * 32 + lane] = make_float2(alpha_row[0], alpha_row[1]);
    }

    if constexpr (kStages == 1) {
      ptx::cp_async_wait<0>();
      __syncthreads();  // V_t landed; every warp is done with Q K_t (the K buffer is free)
      if (t + 1 < n_tiles) issue_k(0, t + 1);
      ptx::cp_async_commit();
      if constexpr (kFp8Kv) {
        // V_t's bytes landed (the wait above); every warp is done with P V_{t-1} since the top
        // barrier, so the 16-bit V tile is free.
        widen_tile<Elem, kBlockN, kDv, kThreads>(sV, rV, tid, swz_v);
        __syncthreads();
      }
    }

    if constexpr (kPair) {
      // The partner's rows in o[1] take the partner's rescale (warp-uniform skip, as for o[0]).
      const float2 pal = sAlpha[(warp ^ 1) * 32 + lane];
      if (t != 0 && __any_sync(0xffffffffu, pal.x != 1.f || pal.y != 1.f)) {
#pragma unroll
        for (int ot = 0; ot < kOW; ++ot) {
          o[1][ot][0] *= pal.x, o[1][ot][1] *= pal.x;
          o[1][ot][2] *= pal.y, o[1][ot][3] *= pal.y;
        }
      }
      // O[32 rows][this Dv half] += P[32 rows][keys] V[keys][this Dv half]
      const uint32_t tVh = tV + ph * kDv;  // + Dv / 2 columns (bytes): whole swizzle groups
#pragma unroll
      for (int kk = 0; kk < kPSteps; ++kk) {
        const uint4 pp = sPfrag[((warp ^ 1) * kPSteps + kk) * 32 + lane];
        const uint32_t ap[4] = {pp.x, pp.y, pp.z, pp.w};
#pragma unroll
        for (int dp = 0; dp < kDv / 32; ++dp) {
          uint32_t b0, b1, b2, b3;
          ptx::ldmatrix_x4_trans(tVh + v_addr[dp & 3] + kk * 16 * kDv * 2 + (dp >> 2) * 128, b0, b1, b2, b3);
          ptx::mma_16816<Elem>(o[0][2 * dp], pa[kk], b0, b1);
          ptx::mma_16816<Elem>(o[0][2 * dp + 1], pa[kk], b2, b3);
          ptx::mma_16816<Elem>(o[1][2 * dp], ap, b0, b1);
          ptx::mma_16816<Elem>(o[1][2 * dp + 1], ap, b2, b3);
        }
      }
    } else {
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
        ptx::ldmatrix_x4_trans(tV + v_addr[dp & 3] + kk * 16 * kDv * 2 + (dp >> 2) * 128, b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          ptx::mma_16816<Elem>(o[mt][2 * dp], a[mt], b0, b1);
          ptx::mma_16816<Elem>(o[mt][2 * dp + 1], a[mt], b2, b3);
        }
      }
    }
    }  // !kPair
    if (kStages > 1 && paged) store_page();  // ordered before its use by the next iteration's barrier
  }

  // ---- epilogue ----
  ptx::cp_async_wait<0>();
  __syncthreads();  // all warps done reading K/V; the pipeline buffers become the staging area
  const bool add_sink = p.sinks != nullptr && split == 0;

  if constexpr (T::kWarpsN == 1) {
    if (p.num_splits == 1) {
      // One warp owns each row: add the sink, normalize in registers, write 16-bit O into a
      // swizzled [kBlockM][kDv] tile (conflict-free 4-byte stores), then copy rows out with
      // 16-byte stores.
      Elem* sOut = reinterpret_cast<Elem*>(smem_raw);
      float row_scale[2 * kMT];  // 1 / l (times the sink's rescale) of this thread's rows
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int rr = 2 * mt + half;
          const int row = q_row0 + mt * 16 + g + 8 * half;
          float l = quad_sum(l_run[rr]);
          float mrow = m_run[rr] == -INFINITY ? -INFINITY : m_run[rr] * sc;  // log2 units
          const int m = m0 + row;
          const bool valid_row = m < rows_seq;
          float f = 1.f;  // rescale of O for the sink
          if (add_sink && valid_row) {
            const float sink = p.sinks[row_h(m) * p.sinks_st] * 1.4426950408889634f;
            const float mx = fmaxf(mrow, sink);
            f = ptx::exp2_approx(mrow - mx);
            l = l * f + ptx::exp2_approx(sink - mx);
            mrow = mx;
          }
          // Empty row (no visible key, no sink): l == 0 -> O = 0, lse = -inf; NaN l (a NaN score):
          // lse NaN, O NaN already (common/softmax.cuh finalize_row).
          // (fp8: times v_descale of this (batch, kv head).)
          row_scale[rr] = l > 0.f ? (kFp8Kv ? f / l * fp8_v : f / l) : 0.f;
          if (t4 == 0 && valid_row && p.lse != nullptr) {
            const int64_t i = row_i(m);
            const float lse = l > 0.f ? (mrow + __log2f(l)) * 0.6931471805599453f : l == 0.f ? -INFINITY : l;
            p.lse[si.lse_row(p, i) + row_h(m) * p.lse_sh] = lse;
          }
        }
      // Swizzled store addresses are precomputed, so the unrolled stores are one instruction each
      // with the tile offsets in the immediate: the per-store swizzle arithmetic was ~150 of the
      // ~700 once-per-CTA epilogue instructions (ncu source counters, D = 256, S = 512, where
      // per-CTA code is ~14% of warp samples). stmatrix (sm_90) would need 4x fewer stores, but
      // its 4-register sources made ptxas add ~20-40 register moves to the main loop.
      // Rows g and g + 8 of every m16 tile share row % 8 == g: eight bases (chunk % 8) + offsets.
      uint32_t st_addr[8];
      {
        const uint32_t row_base = ptx::smem_u32(sOut) + (q_row0 + g) * kDv * 2 + 4 * t4;
#pragma unroll
        for (int c = 0; c < 8; ++c) st_addr[c] = row_base + ((c ^ g) << 4);
      }
      if constexpr (kPair) {
        // o[0]: this warp's rows, o[1]: the partner's, both in this warp's Dv half; the partner
        // computed its rows' 1 / l.
        sRowScale[warp * 32 + lane] = make_float2(row_scale[0], row_scale[1]);
        __syncthreads();
        const float2 prs = sRowScale[(warp ^ 1) * 32 + lane];
        const float scale_of[2][2] = {{row_scale[0], row_scale[1]}, {prs.x, prs.y}};
        const int par_off = ((q_row0 ^ 16) - q_row0) * kDv * 2;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const float sc_row = scale_of[mt][half];
#pragma unroll
            for (int ot = 0; ot < kOW; ++ot)
              ptx::st_shared_b32(st_addr[ot & 7] + ph * kDv + (ot >> 3) * 128 + (mt ? par_off : 0) + 8 * half * kDv * 2,
                                 ptx::pack2<Elem>(o[mt][ot][2 * half] * sc_row, o[mt][ot][2 * half + 1] * sc_row));
          }
      } else {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const float sc_row = row_scale[2 * mt + half];
#pragma unroll
            for (int ot = 0; ot < kOT; ++ot)
              ptx::st_shared_b32(st_addr[ot & 7] + (ot >> 3) * 128 + (mt * 16 + 8 * half) * kDv * 2,
                                 ptx::pack2<Elem>(o[mt][ot][2 * half] * sc_row, o[mt][ot][2 * half + 1] * sc_row));
          }
      }
      __syncthreads();
      // One 16-byte chunk of a row out (a partial chunk at the end of an unpadded head dim).
      auto store_chunk = [&](Elem* dst, const uint4& v, int valid) {
        if (valid >= 8) {
          *reinterpret_cast<uint4*>(dst) = v;
        } else {
          const Elem* e = reinterpret_cast<const Elem*>(&v);
#pragma unroll
          for (int x = 0; x < 8; ++x)
            if (x < valid) dst[x] = e[x];
        }
      };
      constexpr int kChunks = kDv / 8;
      if constexpr (kThreads % kChunks == 0) {
        if (!p.pack_gqa) {
          // Rows of one head are evenly strided: each thread keeps one column chunk, one pointer
          // add per row (the generic loop below costs a division per chunk).
          constexpr int kRowStep = kThreads / kChunks;
          const int r0 = tid / kChunks, ch = tid % kChunks;
          const int valid = p.dv - ch * 8;
          Elem* dst0 = static_cast<Elem*>(p.out) + si.o_base + static_cast<int64_t>(m0 + r0) * si.o_step +
                       static_cast<int64_t>(head_idx) * p.o_sh + ch * 8;
          const int64_t rs = static_cast<int64_t>(kRowStep) * si.o_step;
          constexpr int kRowsPer = kBlockM / kRowStep;
          if (valid >= 8 && m0 + kBlockM <= rows_seq) {
            // Whole tile: every shared-memory read first, then every store. Interleaved with a row
            // bound per row, each store waited on its own read (short-scoreboard) and the guards
            // could not be hoisted: ~1150 of 27400 warp samples at D = 256, S = 512 (ncu source
            // counters, H200) for 16 stores per thread. The O registers are dead here, so the
            // kRowsPer 16-byte chunks fit.
            // kPeriod bases, then compile-time offsets (as TileLoader::load_strided).
            constexpr int kPeriod = swz_period(kRowStep);
            const Elem* src[kPeriod];
#pragma unroll
            for (int q = 0; q < kPeriod; ++q) src[q] = sOut + swz<kDv>(r0 + q * kRowStep, ch) - q * kRowStep * kDv;
            uint4 v[kRowsPer];
#pragma unroll
            for (int k = 0; k < kRowsPer; ++k) v[k] = *reinterpret_cast<const uint4*>(src[k % kPeriod] + k * kRowStep * kDv);
#pragma unroll
            for (int k = 0; k < kRowsPer; ++k) *reinterpret_cast<uint4*>(dst0 + k * rs) = v[k];
          } else {
            // Last tile of a sequence or a partial chunk of an unpadded head dim: rare, so the
            // loop stays rolled (unrolled once-per-CTA code competes with the main loop for the
            // instruction cache).
#pragma unroll 1
            for (int k = 0; k < kRowsPer; ++k) {
              const int r = r0 + k * kRowStep;
              if (m0 + r >= rows_seq) break;  // rows ascend with k
              store_chunk(dst0 + k * rs, *reinterpret_cast<const uint4*>(sOut + swz<kDv>(r, ch)), valid);
            }
          }
          return;
        }
      }
#pragma unroll 1
      for (int k = 0; k < kBlockM * kChunks / kThreads; ++k) {
        const int c = tid + k * kThreads;
        const int r = c / kChunks, ch = c % kChunks;
        const int m = m0 + r;
        if (m >= rows_seq) continue;
        Elem* dst = static_cast<Elem*>(p.out) + si.o_base + static_cast<int64_t>(row_i(m)) * si.o_step +
                    static_cast<int64_t>(row_h(m)) * p.o_sh + ch * 8;
        store_chunk(dst, *reinterpret_cast<const uint4*>(sOut + swz<kDv>(r, ch)), p.dv - ch * 8);
      }
      return;
    }
  }

  // General path (warps split the keys, or split-KV partials): stage each warp's (O, m, l) in
  // fp32 shared memory, merge, normalize, store.
  float* sO = reinterpret_cast<float*>(smem_raw);       // [kWarpsN][kBlockM][kOStride]
  float* sM = sO + T::kWarpsN * kBlockM * T::kOStride;  // [kWarpsN][kBlockM], log2 units
  float* sL = sM + T::kWarpsN * kBlockM;                // [kWarpsN][kBlockM]
  // (pair_dv: o[1] holds the partner's rows; each warp publishes m / l of its own rows only.)
#pragma unroll
  for (int mt = 0; mt < kOM; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int rr = kPair ? half : 2 * mt + half;
      const int row = (kPair ? (mt ? q_row0 ^ 16 : q_row0) : q_row0 + mt * 16) + g + 8 * half;
      const float l = quad_sum(l_run[rr]);
      float* dst = sO + (wn * kBlockM + row) * T::kOStride + 2 * t4 + (kPair ? ph * (kDv / 2) : 0);
#pragma unroll
      for (int ot = 0; ot < kOW; ++ot)
        *reinterpret_cast<float2*>(dst + ot * 8) = make_float2(o[mt][ot][2 * half], o[mt][ot][2 * half + 1]);
      if (t4 == 0 && (!kPair || mt == 0)) {
        sM[wn * kBlockM + row] = m_run[rr] == -INFINITY ? -INFINITY : m_run[rr] * sc;
        sL[wn * kBlockM + row] = l;
      }
    }
  __syncthreads();

  constexpr int kChunks = kDv / 8;
#pragma unroll 1
  for (int c = tid; c < kBlockM * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const int m = m0 + r;
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
    // Empty row (no visible key, no sink): l == 0 -> O = 0, lse = -inf; NaN l (a NaN score):
    // lse NaN (a split partial's NaN lse makes the merged row NaN, combine_row.cuh).
    const float inv = l > 0.f ? (kFp8Kv ? fp8_v / l : 1.f / l) : 0.f;  // (fp8: times v_descale)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] *= inv;
    const float lse = l > 0.f ? (m_use + __log2f(l)) * 0.6931471805599453f : l == 0.f ? -INFINITY : l;

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
        p.lse[si.lse_row(p, i) + h * p.lse_sh] = lse;
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
