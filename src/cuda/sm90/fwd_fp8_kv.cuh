// Device side of the sm90 kernel's fp8-KV tile (Tile::fp8_kv, fwd_fp8_kv.h): the ring barriers'
// counts and the converter role of producer warps 1-3. The TMA loads of the byte rings are
// fwd_producer.cuh's (warp 0); the consumers and the epilogue are the 16-bit tile's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/e4m3_widen.cuh"
#include "cuda/common/pipeline.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fwd_fp8_kv.h"
#include "cuda/sm90/fwd_params.h"
#include "cuda/sm90/fwd_work.cuh"

namespace fa4::cuda::sm90 {

// The rings' barriers (one thread, before the CTA barrier that publishes them): a byte slot's
// full barrier takes the producer's one arrival + the TMA's bytes, its empty barrier one arrival
// per converter thread; a 16-bit slot's full barrier one arrival per converter thread (each after
// its own stores and proxy fence), its empty barrier one release per consumer warpgroup as before.
// Every converter thread (kConvertThreads) arrives once on both barriers of every slot of the
// walk, whatever its share of the slot's units (KvConverter::slot).
template <class T>
__device__ __forceinline__ void init_fp8_kv_rings(typename T::Smem& sh, uint32_t consumers) {
  sh.k_ring.init(consumers, kConvertThreads);
  sh.v_ring.init(consumers, kConvertThreads);
  sh.kvb_bars.k.init(kConvertThreads);
  sh.kvb_bars.v.init(kConvertThreads);
}

// (FA4_SM90_FP8_KV_F16_COMPUTE) The fp8_kv instance serving bf16 q in fp16: Base is the fp16
// instance, FwdTraits<__half, D, D, Tile::fp8_kv> -- fp16 K / V rings (the converters widen to
// fp16, 3 instructions per 4 bytes instead of bf16's 9), fp16 wgmma and fp16 P -- with
//   QElem = bf16    the q tensor's element: Q lands by TMA as bf16 bits (the copy does not look at
//                   the type), and each consumer converts its Q tile in place to fp16 with a
//                   power-of-two scale per row before its first GEMM (Consumer::convert_q), the
//                   scores multiplied back at the softmax's start (fp8_kv_q_shift: the numerics)
//   OutElem = bf16  the output's element (the epilogue packs O, and stages it in Q, as bf16)
// A derived traits struct, as GatherTraits is, rather than a new Tile: the planner, the shared
// memory, the tensor maps and every fp8_kv test of the tile stay as they are; only the instance
// the launch picks for bf16 q changes (fwd_launch.cpp).
template <class Base>
struct F16ComputeTraits : Base {
  static_assert(Base::kFp8Kv && std::is_same_v<typename Base::Elem, __half>, "the fp16 fp8_kv instance underneath");
  using QElem = __nv_bfloat16;
  using OutElem = __nv_bfloat16;
  static constexpr bool kQToF16 = true;
  static_assert(!Base::kSeparateO && !Base::kOInV, "O staged in Q: Smem's OutElem (fp16) sizes nothing");
};

template <class T>
struct KvConverter {
  using Elem = typename T::Elem;
  using Map = ConvertMap<T::kBlockN, T::kDqk, kConvertThreads>;
  static_assert(T::kDqk == T::kDv, "one map for K and V slots");
  static constexpr int kByteStages = T::Smem::kTmaStages;

  // Byte slot `sb` widened into 16-bit slot `s16` of one ring pair (K or V): wait for the bytes
  // and for the 16-bit slot to be free, widen this thread's units, publish, release the bytes.
  // Rows at or past `rows` (the sequence's end in this key tile) are stored as zeros: in a cache
  // the TMA brought whatever follows the sequence there (another sequence's rows, unused slots),
  // and 0 x NaN garbage in V would reach O; zeroed here, the consumers need not zero them again
  // (fwd_consumer.cuh kZeroFilled). (K rows there are masked by the consumers.) Converter thread
  // ct takes its units of Map through offsets derived once per thread (units_lean).
  static __device__ __forceinline__ void slot(MbarRing<kByteStages>& bring, const PipelineState<kByteStages>& sb,
                                              const uint8_t* bytes, MbarRing<T::kStages>& ring,
                                              const PipelineState<T::kStages>& s16, uint8_t* out, int ct,
                                              int rows = T::kBlockN) {
    bring.wait(sb);
    ptx::mbarrier_wait_parity(&ring.empty[s16.index], s16.phase ^ 1u);
    units_lean<Map>(bytes, out, ct, rows);
    // The stores are read by wgmma (async proxy) once the consumers see the phase; the fence also
    // orders this thread's reads of the byte slot before the TMA's next write into it.
    ptx::fence_proxy_async_shared_cta();
    ptx::mbarrier_arrive(&ring.full[s16.index]);
    ptx::mbarrier_arrive(&bring.empty[sb.index]);
  }

  // One unit: 16 e4m3 bytes widened into the two 16-byte pieces (lo: bytes 0-7, hi: 8-15) of the
  // 16-bit slot.
  static __device__ __forceinline__ void widen16(uint4 x, uint4& lo, uint4& hi) {
    widen_e4m3x4<Elem>(x.x, lo.x, lo.y);
    widen_e4m3x4<Elem>(x.y, lo.z, lo.w);
    widen_e4m3x4<Elem>(x.z, hi.x, hi.y);
    widen_e4m3x4<Elem>(x.w, hi.z, hi.w);
  }

  // The map's units (ConvertMap::src / dst / row_of) with the offsets derived once per thread: no
  // per-unit address or row arithmetic (it had been ~26 of the ~62 instructions of a bf16 unit,
  // and held the tile at 1.7 TB/s on an H100). Why it holds (the D 128 map: 8 pieces per row,
  // kGroupStep = kConvertThreads / 8 = 12, 4 mod 8): thread ct = 8 (8 a + p0) + rl takes at step
  // i the group g = 8 a + p0 + i S, S = kGroupStep, so
  //   piece  p_i = p0 ^ 4 (i odd)            (adding S flips bit 2 of g % 8, nothing else),
  //   row    r_i = r_0 + 8 RG(i),  RG(i) = (4 hi + i S) / 8, hi = p0 >= 4,
  // and p0 % 4 never changes. So the byte offset is one of two per-thread values (even / odd
  // steps: the swizzled piece ^ 4 is the offset ^ 64) plus 1024 RG(i); the 16-bit offset's
  // 64-column chunk (p_i / 4 = hi ^ odd) is the other chunk on odd steps, its piece fixed
  // (ConvertMap::lean_*). hi is warp-uniform (a warp's g0 = ct / 8 are 4 aligned consecutive
  // values), so it is a template parameter: RG(i) and the chunk step are immediates. Only the last
  // step can fall past the slot's units; rows at or past `rows` are zeroed on the one partial key
  // tile of a sequence, a separate (uniform-branch) copy of the loop.
  template <class M>
  static __device__ __forceinline__ void units_lean(const uint8_t* bytes, uint8_t* out, int ct, int rows) {
    static_assert(M::kLeanMap, "the D 128 map, a group step of 4 mod 8");
    const uint32_t uct = static_cast<uint32_t>(ct);
    const uint32_t bs = ptx::smem_u32(bytes), os = ptx::smem_u32(out);
    const uint32_t se = bs + M::lean_src(uct, 0), so = bs + M::lean_src(uct, 1);
    const uint32_t d0 = os + M::lean_dst(uct, 0), d1 = os + M::lean_dst(uct, 1);
    // the last step's unit exists for the threads whose group is still inside the slot
    const bool last_ok = uct / 8u + (M::kSteps - 1) * M::kGroupStep < M::kGroups;
    const int d = rows - static_cast<int>(M::lean_row(uct));  // a unit is zeroed where 8 RG(i) >= d
    const bool hi = M::lean_hi(uct);
    if (rows >= T::kBlockN) {
      if (hi) lean_batches<M, true, false>(se, so, d0, d1, last_ok, d);
      else lean_batches<M, false, false>(se, so, d0, d1, last_ok, d);
    } else {
      if (hi) lean_batches<M, true, true>(se, so, d0, d1, last_ok, d);
      else lean_batches<M, false, true>(se, so, d0, d1, last_ok, d);
    }
  }

  // units_lean's steps: batches of four (two even / odd pairs; loads first: the compiler cannot
  // move a load of the byte slot above a store into the 16-bit slot, both shared memory, so each
  // unit's load would wait for the previous unit's stores), the shared addresses advanced by a
  // batch's 2 S / 2 row groups each time, then the 1-4 steps left
  // with the last step's check. se / so: the byte slot at the even / odd steps' offsets of RG = 0;
  // d0 / d1: the 16-bit slot's two pieces at the even steps' offsets. kPartial: zero the units of
  // rows >= rows (8 RG(i) >= d).
  template <class M, bool kHi, bool kPartial>
  static __device__ __forceinline__ void lean_batches(uint32_t se, uint32_t so, uint32_t d0, uint32_t d1,
                                                      bool last_ok, int d) {
    constexpr int kBatchRg = M::lean_rg(kHi, 4);  // row groups of a batch of four steps
    static_assert(M::lean_rg(kHi, 5) == kBatchRg + M::lean_rg(kHi, 1), "batches repeat");
    constexpr int kBatches = (M::kSteps - 1) / 4;  // whole batches, all before the last step
    constexpr int kTail = M::kSteps - 4 * kBatches;
    int row_off = 0;  // RG of the batch's first step
#pragma unroll 1
    for (int b = 0; b < kBatches; ++b) {
      uint4 x[4];
      lean_load<M, kHi, 4>(x, se, so, true);
      lean_store<M, kHi, kPartial, 4>(x, d0, d1, true, row_off, d);
      se += 1024 * kBatchRg;
      so += 1024 * kBatchRg;
      d0 += 1024 * kBatchRg;
      d1 += 1024 * kBatchRg;
      row_off += kBatchRg;
    }
    uint4 x[4];
    lean_load<M, kHi, kTail>(x, se, so, last_ok);
    lean_store<M, kHi, kPartial, kTail>(x, d0, d1, last_ok, row_off, d);
  }
  // Steps 0 .. kN - 1 of a batch (step kN - 1 only where `last` holds); unrolled through J so each
  // step's offset (M::lean_rg(kHi, J) row groups past the batch's first step) is an immediate.
  template <class M, bool kHi, int kN, int J = 0>
  static __device__ __forceinline__ void lean_load(uint4 (&x)[4], uint32_t se, uint32_t so, bool last) {
    if constexpr (J < kN) {
      if (J < kN - 1 || last) x[J] = ptx::lds128<1024 * M::lean_rg(kHi, J)>(J % 2 ? so : se);
      lean_load<M, kHi, kN, J + 1>(x, se, so, last);
    }
  }
  template <class M, bool kHi, bool kPartial, int kN, int J = 0>
  static __device__ __forceinline__ void lean_store(uint4 (&x)[4], uint32_t d0, uint32_t d1, bool last, int row_off,
                                                    int d) {
    if constexpr (J < kN) {
      constexpr int kRg = M::lean_rg(kHi, J);
      constexpr int kOff = 1024 * kRg + (J % 2 ? M::lean_odd_chunk(kHi) : 0);
      if (J < kN - 1 || last) {
        uint4 v = x[J], lo, hi;
        if (kPartial && 8 * (row_off + kRg) >= d) v = make_uint4(0u, 0u, 0u, 0u);  // (e4m3 0 -> +0)
        widen16(v, lo, hi);
        ptx::sts128<kOff>(d0, lo);
        ptx::sts128<kOff>(d1, hi);
      }
      lean_store<M, kHi, kPartial, kN, J + 1>(x, d0, d1, last, row_off, d);
    }
  }

  // The converters' walk: the producer warp's static walk (fwd_producer.cuh; T::kDynamicWalk is
  // false), K then V of every key tile of every tile, both ring pairs advancing together -- the
  // same in every converter thread. ct: the converter thread, 0 .. kConvertThreads - 1 (producer
  // warps 1-3).
  static __device__ __forceinline__ void run(const Sm90Params& P, typename T::Smem& sh, int ct) {
    PipelineState<kByteStages> sb;
    PipelineState<T::kStages> s16;
    int64_t r = 0, t = P.sched.tile_for(0, blockIdx.x, gridDim.x);
    for (;;) {
      TileWork w;
      if (t >= 0 && w.template init<false>(P.a, P.sched, t, T::kBlockM, T::kBlockN)) {
        const int n = w.n_tiles();
#pragma unroll 1
        for (int it = 0; it < n; ++it) {
          slot(sh.kvb_bars.k, sb, sh.kb(sb.index), sh.k_ring, s16, reinterpret_cast<uint8_t*>(sh.k[s16.index][0]), ct);
          slot(sh.kvb_bars.v, sb, sh.vb(sb.index), sh.v_ring, s16, reinterpret_cast<uint8_t*>(sh.v[s16.index][0]), ct,
               w.sk - w.tile_at(it) * T::kBlockN);
          sb.advance();
          s16.advance();
        }
      }
      if (++r >= P.sched.rounds(gridDim.x)) break;
      t = P.sched.tile_for(r, blockIdx.x, gridDim.x);
    }
  }
};

}  // namespace fa4::cuda::sm90
