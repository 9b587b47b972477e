// The fp8 (e4m3) pieces of the sm80 kernel (fwd_kernel.cuh, instances Inst::fp8_kv / fp8).
//
// mma.sync has no e4m3 operand before sm_89 and ldmatrix moves 16-bit elements, so e4m3 tiles
// travel as bytes and are widened in shared memory: cp.async copies a K / V tile's rows (half the
// bytes of a 16-bit tile) into a kStages ring of row-major byte tiles; when the tile's turn comes
// every thread widens whole 16-byte chunks (16 values) into the swizzled 16-bit tile that the
// existing ldmatrix + mma path reads. Every e4m3 value is exact in bf16 and in fp16 (e4m3.h), so
// the products are those of the e4m3 values, accumulated in fp32. Only one 16-bit K and V tile
// is needed (the widening runs right before the tile's MMAs); the ring holds the bytes in flight.
#pragma once

#include <cstdint>

#include "cuda/common/e4m3.h"
#include "cuda/ptx/sm80_ptx.cuh"

namespace fa4::cuda::sm80 {

// Issues the cp.async copies of one [kRows][kD] tile of e4m3 rows into shared memory, row-major
// bytes (kD per row, unswizzled: the widening reads each 16-byte chunk once, consecutive threads
// consecutive chunks). Rows >= len and columns >= d are zero-filled (src-size < 16), so padded
// head-dim columns and keys past the sequence widen to exact zeros.
template <int kRows, int kD, int kThreads>
struct ByteTileLoader {
  static constexpr int kChunks = kD / 16;  // 16 e4m3 values per chunk
  static constexpr int kTotal = kRows * kChunks;
  static constexpr int kIters = (kTotal + kThreads - 1) / kThreads;
  static_assert(kD % 16 == 0, "rows of whole 16-byte chunks");
  int tid = 0, d = 0;

  __device__ __forceinline__ void init(int tid_, int d_) { tid = tid_, d = d_; }
  __device__ __forceinline__ uint32_t col_bytes(int ch) const {
    const int valid = d - ch * 16;
    return valid >= 16 ? 16u : (valid > 0 ? static_cast<uint32_t>(valid) : 0u);
  }
  // Row r of the tile (r < kRows) starts at g + row_off(r) when n0 + r < len.
  template <class RowOff>
  __device__ __forceinline__ void load(uint8_t* s, const uint8_t* g, int n0, int len, RowOff row_off) const {
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int c = tid + k * kThreads;
      if (kTotal % kThreads != 0 && c >= kTotal) break;
      const int r = c / kChunks, ch = c % kChunks;
      const uint32_t bytes = n0 + r < len ? col_bytes(ch) : 0u;
      const uint8_t* src = bytes ? g + row_off(r) + ch * 16 : g;
      ptx::cp_async_16(ptx::smem_u32(s + r * kD + ch * 16), src, bytes);
    }
  }
  // Contiguous rows (dense / varlen / cache): row j = base + j * step.
  __device__ __forceinline__ void load_strided(uint8_t* s, const uint8_t* g, int64_t base, int64_t step, int n0,
                                               int len) const {
    load(s, g, n0, len, [&](int r) { return base + static_cast<int64_t>(n0 + r) * step; });
  }
  // Paged rows: row r at base + row_off[r] (the paged-KV offset ring, as TileLoader::load_paged).
  __device__ __forceinline__ void load_paged(uint8_t* s, const uint8_t* g, int64_t base, const int64_t* row_off, int n0,
                                             int len) const {
    load(s, g, n0, len, [&](int r) { return base + row_off[r]; });
  }
};

// 16 e4m3 values (one 16-byte chunk, value k in byte k) -> 16 values of Elem in two 16-byte
// chunks (values 0-7, 8-15), exactly.
template <typename Elem>
__device__ __forceinline__ void widen16(const uint4& w, uint4& lo, uint4& hi) {
  const uint32_t in[4] = {w.x, w.y, w.z, w.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = ptx::pack2<Elem>(e4m3_to_f32(in[i]), e4m3_to_f32(in[i] >> 8));
    out[2 * i + 1] = ptx::pack2<Elem>(e4m3_to_f32(in[i] >> 16), e4m3_to_f32(in[i] >> 24));
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// Widens the [kRows][kD] byte tile `src` into the swizzled 16-bit tile `dst` (element offset of
// 8-element chunk c of row r: swz(r, c)); every thread of the CTA takes part, and the caller's
// barriers order it after the copies landed and before the ldmatrix reads. Rolled loop: the
// fp8 instances' main loop is long already (the instruction cache, see Inst).
template <typename Elem, int kRows, int kD, int kThreads, class Swz>
__device__ __forceinline__ void widen_tile(Elem* dst, const uint8_t* src, int tid, Swz swz) {
  constexpr int kChunks = kD / 16, kTotal = kRows * kChunks;
#pragma unroll 1
  for (int c = tid; c < kTotal; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    uint4 lo, hi;
    widen16<Elem>(*reinterpret_cast<const uint4*>(src + r * kD + ch * 16), lo, hi);
    *reinterpret_cast<uint4*>(dst + swz(r, 2 * ch)) = lo;
    *reinterpret_cast<uint4*>(dst + swz(r, 2 * ch + 1)) = hi;
  }
}

}  // namespace fa4::cuda::sm80
