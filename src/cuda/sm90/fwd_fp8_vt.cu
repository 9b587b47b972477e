// The V^T pre-pass of the sm90 fp8 path: once per call, before the attention kernel, every
// sequence's e4m3 V [keys, Dv] (per kv head) is written transposed into the call's workspace,
// [Dv][keys] per (batch-like index, kv head), key columns permuted within each 32-key block
// (fp8_layout.h: fp8_pv_key), so the kernel TMA-loads V^T tiles as it loads K tiles.
//
// Why a pre-pass: the 8-bit wgmma takes only K-major operands, and in O += P V the reduction runs
// over keys, which V has strided (its rows are keys). FA3 transposes each V tile in shared memory
// in its producer warpgroup (LDSM.T / STSM per tile and CTA: every query tile's CTA transposes the
// same V again); here each V byte is transposed once per call, ~2 x V bytes of traffic (~1 % of a
// B S = 16k, H D = 2048 prefill at 900 TFLOP/s), and the kernel's producer stays one TMA issuer.
// Measured since: the pass is 10-15 % of an S 1k call, and the 128-key e4m3 D 128 tile now
// transposes in the kernel as FA3 does (FA4_SM90_FP8_VT_IN_KERNEL, fp8_vt_transpose.h: 1.06-1.20x
// the call at S 1k-2k, H100); this pass serves the D 64 / D 256 tiles and the wider-key tiles.
//
// One CTA step: kFp8VtStep = 128 keys of one (sequence, kv head), in three phases:
//   1. the rows land in shared memory (every 16-byte load of the step issued before any store:
//      one load in flight per thread left the pass latency-bound; keys past the sequence's last
//      key read as 0);
//   2. each thread transposes one 32-key block of one value dim (byte reads along a row of
//      `rows`, columns in permuted order) into the step's V^T tile `cols`, also in shared memory;
//   3. the tile goes out in 16-byte stores, 8 consecutive lanes per 128-byte V^T row piece.
// Phase 3 is what the staging is for: written straight from phase 2 (one lane per value dim,
// 32 bytes each), a warp's 16-byte store touched 32 V^T rows, half a sector each, and the pass
// ran at 1.0-1.3 TB/s with L2 throughput at 80 % and DRAM at 30-38 % (ncu, H100, 2026-12-06).
// A sequence's last steps write zeros up to a multiple of the layout's pad (fp8_layout.h).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/common/fwd_args.h"
#include "cuda/common/seq_info.cuh"
#include "cuda/common/smem_optin.h"
#include "cuda/ptx/sm90_ptx.cuh"
#include "cuda/sm90/fp8_layout.h"
#include "cuda/sm90/fwd_launch.h"

namespace fa4::cuda::sm90 {
namespace {

constexpr int kVtThreads = 256;
constexpr int kVtMaxDv = 256;  // the largest fp8 head dim (fwd_config.h Tile::fp8)
// One step's staging in dynamic shared memory, per value-dim bound kMaxDv (64 / 128 / 256: the
// fp8 head dims, fwd_config.h Tile::fp8): 34 KB at 128, 68 KB at 256.
template <int kMaxDv>
struct VtStage {
  static constexpr int kColPitch = kFp8VtStep + 16;  // a V^T row's bytes in `cols`: 144, so the
  // 16-byte phase-2 stores of 8 consecutive value dims start 36 words apart -- banks 4 k, no conflict
  uint8_t rows[kFp8VtStep][kMaxDv];  // [key in the step][value dim]
  uint8_t cols[kMaxDv][kColPitch];   // [value dim][column in the step], keys permuted per 32
  static constexpr int kPieces = kFp8VtStep * kMaxDv / 16 / kVtThreads;  // 16-byte loads per thread
};

// grid (steps, kv heads, batch): CTA (x, hk, b) takes key blocks x, x + gridDim.x, ... of
// sequence b's kv head hk. dv <= kMaxDv.
template <int kMaxDv>
__global__ void __launch_bounds__(kVtThreads, kMaxDv > 128 ? 2 : 4) fp8_vt_kernel(const FwdArgs a, uint8_t* vt, int64_t cols, int pad) {
  using Stage = VtStage<kMaxDv>;
  // (FA4_SM90_PDL) The attention kernel, this grid's programmatic dependent, may be scheduled once
  // every CTA of this grid has started: its CTAs init their barriers on the SMs this grid leaves
  // and wait (griddepcontrol.wait) for all of this grid's writes before any global access.
  if (FA4_SM90_PDL) ptx::griddep_launch_dependents();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  Stage& st = *reinterpret_cast<Stage*>(smem_raw);
  const int b = static_cast<int>(blockIdx.z), hk = static_cast<int>(blockIdx.y);
  SeqInfo si;
  si.init(a, b);  // sk, kv_a: as the attention kernel reads them (clamped)
  KvAddr va;
  va.init(a, si, a.v_s0, a.v_s1, a.v_sh, hk);
  const uint8_t* v = static_cast<const uint8_t*>(a.v);
  const int dv = a.dv;
  const int64_t sk = si.sk;
  const bool varlen = a.kv_mode == kKvVarlen;
  // Row (d = 0) of this (batch-like index, kv head) and the sequence's first column.
  const int64_t bl = varlen ? 0 : b;
  uint8_t* base = vt + ((bl * a.hkv + hk) * dv) * cols + (varlen ? fp8_vt_col0(si.kv_a, b, pad) : 0);
  const int chunks = (dv + 15) / 16;  // 16-byte pieces of a V row
  const int dv32 = (dv + 31) / 32 * 32;
  // Columns written, zeros past sk: up to the pad (a multiple of the step).
  const int64_t padded = (sk + pad - 1) / pad * pad;
  for (int64_t kb = blockIdx.x; kb * kFp8VtStep < padded; kb += gridDim.x) {
    const int64_t j0 = kb * kFp8VtStep;
    __syncthreads();  // the previous step's reads of `rows` and `cols` are done
    // Phase 1: rows.
    uint4 x[Stage::kPieces];
#pragma unroll
    for (int p = 0; p < Stage::kPieces; ++p) {
      const int idx = threadIdx.x + p * kVtThreads;
      const int r = idx / chunks, ch = idx % chunks;
      const int64_t j = j0 + r;
      x[p] = make_uint4(0u, 0u, 0u, 0u);
      if (idx < kFp8VtStep * chunks && j < sk) {
        const uint8_t* src = v + va.row(static_cast<int32_t>(j)) + ch * 16;
        if (ch * 16 + 16 <= dv) {
          x[p] = *reinterpret_cast<const uint4*>(src);  // (GPU rows are 16-byte aligned: DESIGN §1)
        } else {  // the last piece of a row whose dv is no multiple of 16: byte by byte
          uint32_t t[4] = {0u, 0u, 0u, 0u};
#pragma unroll
          for (int e = 0; e < 16; ++e)
            if (ch * 16 + e < dv) t[e / 4] |= static_cast<uint32_t>(src[e]) << (8 * (e % 4));
          x[p] = make_uint4(t[0], t[1], t[2], t[3]);
        }
      }
    }
#pragma unroll
    for (int p = 0; p < Stage::kPieces; ++p) {
      const int idx = threadIdx.x + p * kVtThreads;
      if (idx < kFp8VtStep * chunks) *reinterpret_cast<uint4*>(&st.rows[idx / chunks][(idx % chunks) * 16]) = x[p];
    }
    __syncthreads();
    // Phase 2: task (block q, dim d) = V^T row d, columns 32 q .. 32 q + 31 of the step; the 32
    // lanes of a warp take 32 consecutive dims of one block (reads: consecutive bytes of a row).
    for (int task = threadIdx.x; task < 4 * dv32; task += kVtThreads) {
      const int q = task / dv32, d = task % dv32;
      if (d >= dv) continue;
      uint32_t w[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint32_t y = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) y |= static_cast<uint32_t>(st.rows[32 * q + fp8_pv_key(4 * i + e)][d]) << (8 * e);
        w[i] = y;
      }
      uint4* dst = reinterpret_cast<uint4*>(&st.cols[d][32 * q]);
      dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
      dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
    __syncthreads();
    // Phase 3: 16-byte piece c of V^T row d per task, 8 tasks per row.
    for (int task = threadIdx.x; task < dv * (kFp8VtStep / 16); task += kVtThreads) {
      const int d = task / (kFp8VtStep / 16), c = task % (kFp8VtStep / 16);
      *reinterpret_cast<uint4*>(base + d * cols + j0 + 16 * c) = *reinterpret_cast<const uint4*>(&st.cols[d][16 * c]);
    }
  }
}

template <int kMaxDv>
cudaError_t launch_vt(const FwdArgs& a, uint8_t* vt, int64_t cols, int pad, dim3 grid, cudaStream_t stream) {
  static std::atomic<bool> configured[64];
  constexpr int kBytes = static_cast<int>(sizeof(VtStage<kMaxDv>));
  const void* fn = reinterpret_cast<const void*>(fp8_vt_kernel<kMaxDv>);
  if (const cudaError_t err = ensure_smem_optin(fn, kBytes, configured); err != cudaSuccess) return err;
  fp8_vt_kernel<kMaxDv><<<grid, kVtThreads, kBytes, stream>>>(a, vt, cols, pad);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fp8_vt(const FwdArgs& a, void* vt, const Fp8VtLayout& vl, cudaStream_t stream) {
  if (a.batch <= 0 || a.hkv <= 0 || a.dv <= 0) return cudaSuccess;
  if (a.dv > kVtMaxDv || a.kv_mode == kKvPaged) return cudaErrorInvalidValue;  // (the planner's rules)
  if (vl.pad <= 0 || vl.pad % kFp8VtStep != 0) return cudaErrorInvalidValue;    // (fp8_vt_layout's)
  // Steps per CTA: the longest sequence's key blocks are unknown on the host for device-resident
  // lengths, so the CTAs loop; x covers the average sequence's blocks (+1), and every sequence's
  // at most ceil(slot / pad) x pad / 128 blocks.
  const bool varlen = a.kv_mode == kKvVarlen;
  const int64_t slot = varlen ? a.kv_rows0 : a.kv_slot;  // keys a sequence can have
  const int64_t total = varlen ? a.kv_rows0 : slot * a.batch;
  const int64_t most = (slot + vl.pad - 1) / vl.pad * (vl.pad / kFp8VtStep);
  int64_t gx = (total + kFp8VtStep * int64_t{a.batch} - 1) / (kFp8VtStep * int64_t{a.batch}) + (varlen ? 1 : 0);
  gx = gx < 1 ? 1 : gx > most ? most : gx;
  if (gx < 1) return cudaSuccess;  // no keys
  if (gx > 65535) gx = 65535;  // (grid.x allows 2^31 - 1; the loop takes the rest)
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(a.hkv), static_cast<unsigned>(a.batch));
  uint8_t* out = static_cast<uint8_t*>(vt);
  if (a.dv <= 64) return launch_vt<64>(a, out, vl.cols, vl.pad, grid, stream);
  if (a.dv <= 128) return launch_vt<128>(a, out, vl.cols, vl.pad, grid, stream);
  return launch_vt<kVtMaxDv>(a, out, vl.cols, vl.pad, grid, stream);
}

}  // namespace fa4::cuda::sm90
