// Device tests of the sm_90a PTX wrappers (src/cuda/ptx/sm90_ptx.cuh) and the host tensor-map
// encoder (src/cuda/common/tensor_map.h), each primitive checked on its own before any kernel
// is built from them:
//   TmaLoad     TMA 2D/3D/4D tile loads with 128B swizzle into shared memory, completion via an
//               mbarrier; every element read back through the swizzle formula, out-of-bound
//               elements must be zeros.
//   WgmmaSS     one warpgroup computes C[64 x N] = A[64 x 64] * B[N x 64]^T (4 k16 steps) with
//               both operands in shared memory (filled by TMA or by plain stores + proxy fence),
//               N = 64/128/256, bf16 and fp16, vs. a CPU fp64 GEMM.
//   WgmmaRS     the same with A taken from registers.
//   Mbarrier    phase parity across two rounds (tx-count barrier fed by TMA, arrival-count
//               barrier fed by 128 threads), test_wait before/after each phase.
//   Sm90Cvt     e4m3 packing (f32 -> e4m3x4) and widening (e4m3x4 -> fp16 / bf16, every byte pair).
//   Sm90Misc    elect.sync, named barriers (bar.arrive / bar.sync hand-off between warpgroups),
//               setmaxnreg dec/inc.
// Every test skips on devices other than compute capability 9.0 (the sm_90a image only runs
// there). Inputs are random; seeds are printed on failure and FA4_TEST_SEED=S replays them.
// Run: build/tests/cuda/test_sm90_ptx
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/common/e4m3.h"
#include "cuda/common/e4m3_widen.cuh"
#include "cuda/common/tensor_map.h"
#include "cuda/ptx/sm80_ptx.cuh"
#include "cuda/ptx/sm90_ptx.cuh"
#include "test_util.h"
#include "cuda_ok.h"

namespace {

using namespace fa4::cuda::ptx;
using fa4test::derive_seed;  // FA4_TEST_SEED replays a run, as in the other suites
using fa4::cuda::TmaElem;


// ------------------------------------------------------------------------------ host helpers

// The sm_90a image (wgmma, setmaxnreg) runs on compute capability 9.0 only: arch-specific
// ("a") code is not forward compatible, so e.g. an sm_100 device would run the sm_80 fallback,
// whose wrappers trap.
bool sm90_device(std::string* why) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    *why = "no CUDA device";
    return false;
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    *why = "cudaGetDeviceProperties failed";
    return false;
  }
  if (p.major != 9 || p.minor != 0) {
    *why = "needs compute capability 9.0 (sm_90a: TMA, wgmma, setmaxnreg); device 0 (" + std::string(p.name) +
           ") is " + std::to_string(p.major) + "." + std::to_string(p.minor);
    return false;
  }
  return true;
}

#define SKIP_UNLESS_SM90()                         \
  do {                                             \
    std::string why_;                              \
    if (!sm90_device(&why_)) GTEST_SKIP() << why_; \
  } while (0)

template <typename T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) {
    if (cudaMalloc(&p, count * sizeof(T)) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

uint16_t to_bits(float x, TmaElem e) {
  if (e == TmaElem::bf16) {
    __nv_bfloat16 v = __float2bfloat16_rn(x);
    uint16_t b;
    std::memcpy(&b, &v, 2);
    return b;
  }
  __half v = __float2half_rn(x);
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return b;
}
double from_bits(uint16_t b, TmaElem e) {
  if (e == TmaElem::bf16) return static_cast<double>(__bfloat162float(__ushort_as_bfloat16(b)));
  return static_cast<double>(__half2float(__ushort_as_half(b)));
}
const char* elem_name(TmaElem e) { return e == TmaElem::bf16 ? "bf16" : "fp16"; }

// Random finite 16-bit values in [-1, 1].
std::vector<uint16_t> random_matrix(size_t count, TmaElem e, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = to_bits(u(rng), e);
  return v;
}

// ------------------------------------------------------------------------------ device helpers

// (Defined for the sm_90 device pass only: elsewhere the kernel bodies below are empty.)
#if FA4_PTX_SM90
// Shared-memory base rounded up to 1024 bytes (the 128B swizzle pattern repeats every 8 rows of
// 128 bytes; TMA and wgmma apply it to absolute address bits, so tiles start on that boundary).
// The dynamic allocation carries 1024 bytes of slack for this.
__device__ __forceinline__ uint8_t* align1024(uint8_t* p) {
  const uint32_t a = smem_u32(p);
  return p + ((1024u - (a & 1023u)) & 1023u);
}

// try_wait in a loop with a time limit, so a wrong tx count shows up as a failed check instead
// of a hung test process. Returns false on timeout (~2^31 cycles, about a second).
__device__ bool wait_bounded(uint64_t* bar, uint32_t parity) {
  const long long start = clock64();
  while (!mbarrier_try_wait_parity(bar, parity)) {
    if (clock64() - start > (1ll << 31)) return false;
  }
  return true;
}

// Plain (generic-proxy) stores of a dense [rows, 64] 16-bit matrix into the 128B-swizzled
// layout, one 16-byte chunk per thread-iteration.
__device__ void store_swizzled(uint8_t* dst, const uint16_t* __restrict__ src, int rows) {
  for (int idx = threadIdx.x; idx < rows * 8; idx += blockDim.x) {
    const int r = idx >> 3, j = idx & 7;
    const uint4 v = *reinterpret_cast<const uint4*>(src + r * 64 + j * 8);
    *reinterpret_cast<uint4*>(dst + swizzle128_offset(r, j * 16)) = v;
  }
}

#endif  // FA4_PTX_SM90

// Accumulator fragment -> row-major C[64][N] (layout documented at Wgmma in sm90_ptx.cuh).
template <int N>
__device__ void store_accum(const float (&d)[N / 2], float* __restrict__ c) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int row = 16 * w + l / 4 + 8 * ((i / 2) % 2);
    const int col = 8 * (i / 4) + 2 * (l % 4) + (i % 2);
    c[row * N + col] = d[i];
  }
}

// ------------------------------------------------------------------------------ kernels

// One TMA box of 64 x 64 16-bit elements (8 KiB) at the given coordinates, then the raw shared
// bytes (swizzled, as TMA wrote them) copied out. status[0] = 1 if the barrier timed out.
template <int Rank>
__global__ void __launch_bounds__(128, 1)
    tma_tile_kernel(const __grid_constant__ CUtensorMap map, int4 coord, uint16_t* __restrict__ out, int* status) {
#if FA4_PTX_SM90
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* tile = align1024(smem_raw);
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&map);
    mbarrier_init(&bar, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // The full box, also when part of it lies outside the tensor.
    mbarrier_arrive_expect_tx(&bar, 64 * 64 * 2);
    if constexpr (Rank == 2) tma_load_2d(tile, &map, &bar, coord.x, coord.y);
    if constexpr (Rank == 3) tma_load_3d(tile, &map, &bar, coord.x, coord.y, coord.z);
    if constexpr (Rank == 4) tma_load_4d(tile, &map, &bar, coord.x, coord.y, coord.z, coord.w);
  }
  if (!wait_bounded(&bar, 0)) atomicExch(status, 1);
  for (int i = threadIdx.x; i < 64 * 64 * 2 / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(tile)[i];
#endif
}

// C[64 x N] = A[64 x 64] * B[N x 64]^T, one warpgroup, SS wgmma. kTma: operands by TMA
// (mbarrier); otherwise by plain swizzled stores + fence.proxy.async.
template <typename Elem, int N, bool kTma>
__global__ void __launch_bounds__(128, 1)
    wgmma_ss_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const uint16_t* __restrict__ a, const uint16_t* __restrict__ b, float* __restrict__ c, int* status) {
#if FA4_PTX_SM90A
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* sa = align1024(smem_raw);
  uint8_t* sb = sa + 64 * 128;  // 8 KiB: stays 1024-aligned
  if constexpr (kTma) {
    if (threadIdx.x == 0) {
      mbarrier_init(&bar, 1);
      fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(&bar, 64 * 128 + N * 128);  // both boxes on one barrier
      tma_load_2d(sa, &map_a, &bar, 0, 0);
      tma_load_2d(sb, &map_b, &bar, 0, 0);
    }
    if (!wait_bounded(&bar, 0)) atomicExch(status, 1);
  } else {
    store_swizzled(sa, a, 64);
    store_swizzled(sb, b, N);
    fence_proxy_async_shared_cta();  // generic-proxy writes -> visible to wgmma's async reads
    __syncthreads();
  }
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = __int_as_float(0x7fc00000);  // NaN: scale_d = 0 must ignore it
  fence_operands(d);
  wgmma_fence();
  const uint32_t a0 = smem_u32(sa), b0 = smem_u32(sb);
#pragma unroll
  for (int k = 0; k < 4; ++k)
    wgmma_ss<N, Elem>(d, make_smem_desc_kmajor_sw128(a0 + 32 * k), make_smem_desc_kmajor_sw128(b0 + 32 * k),
                      k > 0 ? 1 : 0);
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(d);
  store_accum<N>(d, c);
#endif
}

// Same GEMM with A from registers (RS); B by TMA.
template <typename Elem, int N>
__global__ void __launch_bounds__(128, 1)
    wgmma_rs_kernel(const __grid_constant__ CUtensorMap map_b, const uint16_t* __restrict__ a, float* __restrict__ c,
                    int* status) {
#if FA4_PTX_SM90A
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* sb = align1024(smem_raw);
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, N * 128);
    tma_load_2d(sb, &map_b, &bar, 0, 0);
  }
  // A fragments (mbarrier wait not needed for them: they come from global memory).
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  const int r = 16 * w + l / 4, cc = 2 * (l % 4);
  const uint32_t* a32 = reinterpret_cast<const uint32_t*>(a);  // pairs of 16-bit, low half first
  uint32_t af[4][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    af[k][0] = a32[(r * 64 + 16 * k + cc) / 2];
    af[k][1] = a32[((r + 8) * 64 + 16 * k + cc) / 2];
    af[k][2] = a32[(r * 64 + 16 * k + cc + 8) / 2];
    af[k][3] = a32[((r + 8) * 64 + 16 * k + cc + 8) / 2];
  }
  if (!wait_bounded(&bar, 0)) atomicExch(status, 1);
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = __int_as_float(0x7fc00000);
  fence_operands(d);
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) fence_operand(af[k][j]);
  wgmma_fence();  // orders the register writes of d and af before the asynchronous reads
  const uint32_t b0 = smem_u32(sb);
#pragma unroll
  for (int k = 0; k < 4; ++k) wgmma_rs<N, Elem>(d, af[k], make_smem_desc_kmajor_sw128(b0 + 32 * k), k > 0 ? 1 : 0);
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(d);
  store_accum<N>(d, c);
#endif
}

// fp8 e4m3: C[64 x N] = A[64 x 128] * B[N x 128]^T (K = 128: four k32 steps), both operands
// stored row by row into the 128B-swizzled K-major layout (128 e4m3 per row: the same bytes as a
// row of 64 16-bit elements, hence store_swizzled on a 16-bit view). kRs: A from registers in
// the m16n8k32 8-bit A layout (sm90_ptx.cuh), B from shared memory.
template <int N, bool kRs>
__global__ void __launch_bounds__(128, 1)
    wgmma_fp8_kernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ b, float* __restrict__ c) {
#if FA4_PTX_SM90A
  extern __shared__ uint8_t smem_raw[];
  uint8_t* sa = align1024(smem_raw);
  uint8_t* sb = sa + 64 * 128;
  store_swizzled(sa, reinterpret_cast<const uint16_t*>(a), 64);
  store_swizzled(sb, reinterpret_cast<const uint16_t*>(b), N);
  fence_proxy_async_shared_cta();
  __syncthreads();
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  const int r = 16 * w + l / 4, cc = 4 * (l % 4);
  uint32_t af[4][4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // 4 e4m3 per register, lowest column in the lowest byte
    auto word = [&](int row, int col) { return *reinterpret_cast<const uint32_t*>(a + row * 128 + 32 * k + col); };
    af[k][0] = word(r, cc);
    af[k][1] = word(r + 8, cc);
    af[k][2] = word(r, cc + 16);
    af[k][3] = word(r + 8, cc + 16);
  }
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = __int_as_float(0x7fc00000);  // NaN: scale_d = 0 must ignore it
  fence_operands(d);
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) fence_operand(af[k][j]);
  wgmma_fence();
  const uint32_t a0 = smem_u32(sa), b0 = smem_u32(sb);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (kRs)
      wgmma_rs<N, __nv_fp8_e4m3>(d, af[k], make_smem_desc_kmajor_sw128(b0 + 32 * k), k > 0 ? 1 : 0);
    else
      wgmma_ss<N, __nv_fp8_e4m3>(d, make_smem_desc_kmajor_sw128(a0 + 32 * k), make_smem_desc_kmajor_sw128(b0 + 32 * k),
                                 k > 0 ? 1 : 0);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(d);
  store_accum<N>(d, c);
#endif
}

// Two rounds on two barriers. tx barrier (count 1): thread 0 arrives with expect_tx and issues a
// TMA of tile `round` (rows 64*round..); arrival barrier (count 128): every thread writes its
// slot, then arrives. Results per round r (index r):
//   res[0 + r]: test_wait(tx, parity r&1) before the round's arrive (must be 0: phase pending)
//   res[2 + r]: test_wait(tx, parity (r&1)^1) before it (must be 1: previous-parity phase done)
//   res[4 + r]: test_wait(tx, parity r&1) after the wait (must be 1)
//   res[6 + r]: test_wait(arrive bar, parity r&1) by thread 0 before its own arrival (must be 0)
//   res[8 + r]: tile mismatches vs global (atomic count, must be 0)
//   res[10 + r]: slot mismatches after the arrival barrier (must be 0)
//   res[12]: 1 if any wait timed out
__global__ void __launch_bounds__(128, 1)
    mbarrier_phase_kernel(const __grid_constant__ CUtensorMap map, const uint16_t* __restrict__ g, int* res) {
#if FA4_PTX_SM90
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t tx_bar, arrive_bar;
  __shared__ int slots[128];
  uint8_t* tile = align1024(smem_raw);
  const int t = threadIdx.x;
  if (t == 0) {
    mbarrier_init(&tx_bar, 1);
    mbarrier_init(&arrive_bar, blockDim.x);
    fence_mbarrier_init();
  }
  __syncthreads();
  for (int round = 0; round < 2; ++round) {
    const uint32_t parity = round & 1;
    if (t == 0) {
      res[0 + round] = mbarrier_test_wait_parity(&tx_bar, parity);
      res[2 + round] = mbarrier_test_wait_parity(&tx_bar, parity ^ 1);
      res[6 + round] = mbarrier_test_wait_parity(&arrive_bar, parity);
    }
    __syncthreads();  // nobody arrives before thread 0 has sampled the pending state
    if (t == 0) {
      mbarrier_arrive_expect_tx(&tx_bar, 64 * 64 * 2);
      tma_load_2d(tile, &map, &tx_bar, 0, 64 * round);
    }
    slots[t] = 1000 * (round + 1) + t;
    mbarrier_arrive(&arrive_bar);  // release: the slot write is visible to whoever completes the wait
    if (!wait_bounded(&arrive_bar, parity)) atomicExch(&res[12], 1);
    const int other = (t + 37) % blockDim.x;
    if (slots[other] != 1000 * (round + 1) + other) atomicAdd(&res[10 + round], 1);
    if (!wait_bounded(&tx_bar, parity)) atomicExch(&res[12], 1);
    if (t == 0) res[4 + round] = mbarrier_test_wait_parity(&tx_bar, parity);
    int bad = 0;
    for (int e = t; e < 64 * 64; e += blockDim.x) {
      const int row = e / 64, col = e % 64;
      const uint16_t got = *reinterpret_cast<const uint16_t*>(tile + swizzle128_offset(row, col * 2));
      if (got != g[(64 * round + row) * 64 + col]) ++bad;
    }
    if (bad) atomicAdd(&res[8 + round], bad);
    __syncthreads();  // tile and slots fully read before the next round overwrites them
  }
#endif
}

// 256 threads = 2 warpgroups.
//   out[0..7]: number of lanes elected per warp with the full mask (must be 1 each)
//   out[8..15]: number of lanes elected per warp among the odd lanes (mask 0xAAAAAAAA, must be 1)
//   out[24]: mismatches seen by warpgroup 1 after bar.sync(1) on data written by warpgroup 0
//   out[25]: mismatches seen by warpgroup 0 after bar.sync(2) on data written by warpgroup 1
//   out[26]: per-thread register-heavy result check failures after setmaxnreg.inc
__global__ void __launch_bounds__(256, 1) sm90_misc_kernel(uint32_t salt, int* out) {
#if FA4_PTX_SM90A
  __shared__ uint32_t buf0[256], buf1[256];
  const int t = threadIdx.x, warp = t / 32, lane = t % 32, wg = t / 128;
  if (elect_one_sync()) atomicAdd(&out[warp], 1);
  __syncwarp();
  if (lane & 1) {  // only the odd lanes are active, and the member mask says exactly that
    if (elect_one_sync(0xAAAAAAAAu)) atomicAdd(&out[8 + warp], 1);
  }
  __syncwarp();
  if (wg == 0) {
    setmaxnreg_dec<40>();  // producer-like warpgroup gives registers back
    for (int i = t; i < 256; i += 128) buf0[i] = salt * 2654435761u + i;
    named_barrier_arrive(1, 256);  // hand-off: do not wait for the consumer
    named_barrier_sync(2, 256);    // wait for the consumer's data
    int bad = 0;
    for (int i = t; i < 256; i += 128) bad += buf1[i] != (salt ^ 0x9e3779b9u) + 7u * i;
    if (bad) atomicAdd(&out[25], bad);
  } else {
    setmaxnreg_inc<232>();  // consumer-like warpgroup takes them
    // Keep many values live to use the larger register budget.
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = static_cast<float>((salt + i * (t + 1)) & 1023);
#pragma unroll
    for (int rep = 0; rep < 4; ++rep)
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = acc[i] * 0.5f + acc[(i + 1) & 63] * 0.25f;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) s += acc[i];
    if (!(s >= 0.f && s < 64.f * 1024.f)) atomicAdd(&out[26], 1);
    for (int i = t - 128; i < 256; i += 128) buf1[i] = (salt ^ 0x9e3779b9u) + 7u * i;
    named_barrier_sync(1, 256);  // producer's data ready
    int bad = 0;
    for (int i = t - 128; i < 256; i += 128) bad += buf0[i] != salt * 2654435761u + i;
    if (bad) atomicAdd(&out[24], bad);
    named_barrier_arrive(2, 256);
  }
#endif
}

// ------------------------------------------------------------------------------ TMA test

struct TmaCase {
  const char* name;
  int rank;
  int4 coord;
};

// Global tensor used by all TMA cases: [B = 2][H = 3][rows = 120][cols = 96], row stride 104
// elements (16 padding elements, filled with a marker that must never appear in a tile).
constexpr int kB = 2, kH = 3, kRows = 120, kCols = 96, kRowStride = 104;

TEST(Sm90Tma, LoadTileSwizzle128) {
  SKIP_UNLESS_SM90();
  const uint64_t seed = derive_seed(1);
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const size_t count = size_t(kB) * kH * kRows * kRowStride;
  std::vector<uint16_t> host(count);
  std::uniform_int_distribution<uint32_t> bits(1, 0xFFFE);  // raw 16-bit patterns (TMA copies bits)
  for (size_t i = 0; i < count; ++i) host[i] = (i % kRowStride >= kCols) ? 0xFFFF : static_cast<uint16_t>(bits(rng));
  DevBuf<uint16_t> g(count), out(64 * 64);
  DevBuf<int> status(1);
  ASSERT_TRUE(g.p && out.p && status.p);
  CUDA_OK(cudaMemcpy(g.p, host.data(), count * 2, cudaMemcpyHostToDevice));

  const uint64_t rs = kRowStride * 2;
  const TmaCase cases[] = {
      {"2d origin", 2, {0, 0, 0, 0}},
      {"2d interior", 2, {16, 70, 0, 0}},
      {"2d rows past the end", 2, {32, 700, 0, 0}},  // [720, 96] view: box rows 20..63 out of bounds
      {"2d negative row, cols past the end", 2, {40, -8, 0, 0}},
      {"3d head 4", 3, {8, 30, 4, 0}},
      {"4d (b=1, h=2), rows past the end", 4, {24, 90, 2, 1}},
  };
  for (const TmaCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    fa4::cuda::TmaTiledDesc d;
    d.base = g.p;
    d.elem = TmaElem::bf16;
    d.rank = tc.rank;
    d.swizzle = fa4::cuda::TmaSwizzle::b128;
    d.dims[0] = kCols;
    d.box[0] = 64;
    d.box[1] = 64;
    if (tc.rank == 2) {  // [B*H*rows, cols]
      d.dims[1] = uint64_t(kB) * kH * kRows;
      d.strides_bytes[0] = rs;
    } else if (tc.rank == 3) {  // [B*H][rows][cols]
      d.dims[1] = kRows, d.dims[2] = kB * kH;
      d.strides_bytes[0] = rs, d.strides_bytes[1] = rs * kRows;
      d.box[2] = 1;
    } else {  // [B][H][rows][cols]
      d.dims[1] = kRows, d.dims[2] = kH, d.dims[3] = kB;
      d.strides_bytes[0] = rs, d.strides_bytes[1] = rs * kRows, d.strides_bytes[2] = rs * kRows * kH;
      d.box[2] = 1, d.box[3] = 1;
    }
    CUtensorMap map;
    std::string err;
    ASSERT_TRUE(fa4::cuda::encode_tma_tiled(&map, d, &err)) << err;
    CUDA_OK(cudaMemset(out.p, 0xAB, 64 * 64 * 2));
    CUDA_OK(cudaMemset(status.p, 0, sizeof(int)));
    const size_t smem = 64 * 64 * 2 + 1024;
    if (tc.rank == 2) tma_tile_kernel<2><<<1, 128, smem>>>(map, tc.coord, out.p, status.p);
    if (tc.rank == 3) tma_tile_kernel<3><<<1, 128, smem>>>(map, tc.coord, out.p, status.p);
    if (tc.rank == 4) tma_tile_kernel<4><<<1, 128, smem>>>(map, tc.coord, out.p, status.p);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    int st = 0;
    std::vector<uint16_t> raw(64 * 64);
    CUDA_OK(cudaMemcpy(&st, status.p, sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(raw.data(), out.p, raw.size() * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(st, 0) << "mbarrier wait timed out: the TMA did not deliver the expected 8192 tx bytes";
    int bad = 0;
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < 64; ++c) {
        // Logical element (r, c) of the box -> global element (or zero if outside the tensor).
        const long long gc = tc.coord.x + c;
        const long long gr = tc.coord.y + r;
        long long flat_row = -1;  // row index in the [B*H*rows] flattening
        if (tc.rank == 2) {
          if (gr >= 0 && gr < kB * kH * kRows) flat_row = gr;
        } else if (tc.rank == 3) {
          if (gr >= 0 && gr < kRows) flat_row = (long long)tc.coord.z * kRows + gr;
        } else {
          if (gr >= 0 && gr < kRows) flat_row = ((long long)tc.coord.w * kH + tc.coord.z) * kRows + gr;
        }
        const bool in = flat_row >= 0 && gc >= 0 && gc < kCols;
        const uint16_t want = in ? host[size_t(flat_row) * kRowStride + gc] : 0;
        const uint16_t got = raw[swizzle128_offset(r, c * 2) / 2];
        if (got != want && ++bad <= 8)
          ADD_FAILURE() << "tile element (row " << r << ", col " << c << ") at swizzled byte "
                        << swizzle128_offset(r, c * 2) << ": got 0x" << std::hex << got << ", want 0x" << want
                        << std::dec << (in ? "" : " (out of bounds: zero fill)");
      }
    }
    EXPECT_EQ(bad, 0) << bad << " of 4096 elements differ";
  }
}

// ------------------------------------------------------------------------------ wgmma tests

// fp64 C = A * B^T on the 16-bit inputs; tolerance per element from sum |a*b|: the products are
// exact in fp32 and the tensor cores accumulate 64 of them in fp32 (possibly truncating), so
// the error stays well below 2^-14 * sum|a*b|; a layout or descriptor error is O(|C|).
void check_gemm(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const std::vector<float>& c, int n,
                TmaElem e, const std::string& what) {
  int bad = 0;
  double worst = 0;
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0, sa = 0;
      for (int k = 0; k < 64; ++k) {
        const double p = from_bits(a[i * 64 + k], e) * from_bits(b[j * 64 + k], e);
        s += p, sa += std::fabs(p);
      }
      const double tol = sa * std::ldexp(1.0, -14) + 1e-6;
      const double got = c[size_t(i) * n + j];
      const double err = std::fabs(got - s);
      if (!(err <= tol)) {
        if (++bad <= 8)
          ADD_FAILURE() << what << ": C[" << i << "][" << j << "] = " << got << ", fp64 reference " << s
                        << " (|err| " << err << " > tol " << tol << ")";
      } else {
        worst = std::max(worst, err / tol);
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << 64 * n << " elements outside tolerance";
  if (bad == 0) std::printf("  %s: max |err|/tol = %.3g\n", what.c_str(), worst);
}

// Operands and outputs of one 64 x N x 64 wgmma check: random A [64 x 64] and B [N x 64]
// (K contiguous) on the host and the device, C poisoned with NaN (every element must be written),
// and the kernel's mbarrier-timeout status word.
struct GemmRig {
  int n;
  TmaElem e;
  std::vector<uint16_t> a, b;
  DevBuf<uint16_t> da, db;
  DevBuf<float> dc;
  DevBuf<int> status;
  GemmRig(int n_, TmaElem e_, std::mt19937_64& rng)
      : n(n_), e(e_), a(random_matrix(64 * 64, e, rng)), b(random_matrix(size_t(n) * 64, e, rng)), da(a.size()),
        db(b.size()), dc(size_t(64) * n), status(1) {}
};

void upload(GemmRig& r) {
  ASSERT_TRUE(r.da.p && r.db.p && r.dc.p && r.status.p);
  CUDA_OK(cudaMemcpy(r.da.p, r.a.data(), r.a.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(r.db.p, r.b.data(), r.b.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(r.dc.p, 0xFF, size_t(64) * r.n * 4));  // NaN: every element must be written
  CUDA_OK(cudaMemset(r.status.p, 0, sizeof(int)));
}

// After the launch: C and the status word back, C against the fp64 product.
void download_and_check(const GemmRig& r, const std::string& what) {
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> c(size_t(64) * r.n);
  int st = 0;
  CUDA_OK(cudaMemcpy(c.data(), r.dc.p, c.size() * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&st, r.status.p, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(st, 0) << "mbarrier wait timed out";
  check_gemm(r.a, r.b, c, r.n, r.e, what);
}

template <typename Elem, int N, bool kTma>
void run_wgmma_ss(TmaElem e) {
  const std::string what = std::string("wgmma SS m64n") + std::to_string(N) + "k16 " + elem_name(e) +
                           (kTma ? " (TMA operands)" : " (st.shared + fence.proxy.async operands)");
  SCOPED_TRACE(what);
  const uint64_t seed = derive_seed(100 + N * 4 + (e == TmaElem::f16 ? 2 : 0) + (kTma ? 1 : 0));
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  GemmRig r(N, e, rng);
  upload(r);
  if (::testing::Test::HasFatalFailure()) return;
  CUtensorMap ma, mb;
  std::string err;
  ASSERT_TRUE(fa4::cuda::encode_tma_2d_sw128(&ma, r.da.p, e, 64, 64, 64, 64, &err)) << err;
  ASSERT_TRUE(fa4::cuda::encode_tma_2d_sw128(&mb, r.db.p, e, N, 64, 64, N, &err)) << err;
  const size_t smem = 64 * 128 + size_t(N) * 128 + 1024;
  wgmma_ss_kernel<Elem, N, kTma><<<1, 128, smem>>>(ma, mb, r.da.p, r.db.p, r.dc.p, r.status.p);
  download_and_check(r, what);
}

template <typename Elem, int N>
void run_wgmma_rs(TmaElem e) {
  const std::string what = std::string("wgmma RS m64n") + std::to_string(N) + "k16 " + elem_name(e);
  SCOPED_TRACE(what);
  const uint64_t seed = derive_seed(300 + N * 4 + (e == TmaElem::f16 ? 2 : 0));
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  GemmRig r(N, e, rng);
  upload(r);
  if (::testing::Test::HasFatalFailure()) return;
  CUtensorMap mb;
  std::string err;
  ASSERT_TRUE(fa4::cuda::encode_tma_2d_sw128(&mb, r.db.p, e, N, 64, 64, N, &err)) << err;
  const size_t smem = size_t(N) * 128 + 1024;
  wgmma_rs_kernel<Elem, N><<<1, 128, smem>>>(mb, r.da.p, r.dc.p, r.status.p);
  download_and_check(r, what);
}

TEST(Sm90Wgmma, SS_N64) {
  SKIP_UNLESS_SM90();
  run_wgmma_ss<__nv_bfloat16, 64, true>(TmaElem::bf16);
  run_wgmma_ss<__nv_bfloat16, 64, false>(TmaElem::bf16);
  run_wgmma_ss<__half, 64, true>(TmaElem::f16);
  run_wgmma_ss<__half, 64, false>(TmaElem::f16);
}
TEST(Sm90Wgmma, SS_N128) {
  SKIP_UNLESS_SM90();
  run_wgmma_ss<__nv_bfloat16, 128, true>(TmaElem::bf16);
  run_wgmma_ss<__nv_bfloat16, 128, false>(TmaElem::bf16);
  run_wgmma_ss<__half, 128, true>(TmaElem::f16);
  run_wgmma_ss<__half, 128, false>(TmaElem::f16);
}
TEST(Sm90Wgmma, SS_N256) {
  SKIP_UNLESS_SM90();
  run_wgmma_ss<__nv_bfloat16, 256, true>(TmaElem::bf16);
  run_wgmma_ss<__nv_bfloat16, 256, false>(TmaElem::bf16);
  run_wgmma_ss<__half, 256, true>(TmaElem::f16);
  run_wgmma_ss<__half, 256, false>(TmaElem::f16);
}
TEST(Sm90Wgmma, RS) {
  SKIP_UNLESS_SM90();
  run_wgmma_rs<__nv_bfloat16, 64>(TmaElem::bf16);
  run_wgmma_rs<__half, 64>(TmaElem::f16);
  run_wgmma_rs<__nv_bfloat16, 128>(TmaElem::bf16);
  run_wgmma_rs<__half, 128>(TmaElem::f16);
  run_wgmma_rs<__nv_bfloat16, 256>(TmaElem::bf16);
  run_wgmma_rs<__half, 256>(TmaElem::f16);
}

// e4m3 bytes -> value (OCP "fn": no infinities; the test never draws the NaN codes).
double e4m3_value(uint8_t byte) {
  const int sign = byte >> 7, e = (byte >> 3) & 15, m = byte & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -mag : mag;
}

template <int N, bool kRs>
void run_wgmma_fp8() {
  const std::string what = std::string("wgmma ") + (kRs ? "RS" : "SS") + " m64n" + std::to_string(N) + "k32 e4m3";
  SCOPED_TRACE(what);
  const uint64_t seed = derive_seed(500 + N * 2 + (kRs ? 1 : 0));
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  auto draw = [&](size_t n) {  // every finite code, both signs, subnormals included
    std::vector<uint8_t> v(n);
    for (auto& x : v) {
      x = static_cast<uint8_t>(rng());
      if ((x & 0x7f) == 0x7f) x ^= 1;  // 0x7f / 0xff are NaN
    }
    return v;
  };
  const std::vector<uint8_t> a = draw(64 * 128), b = draw(size_t(N) * 128);
  DevBuf<uint8_t> da(a.size()), db(b.size());
  DevBuf<float> dc(size_t(64) * N);
  ASSERT_TRUE(da.p && db.p && dc.p);
  CUDA_OK(cudaMemcpy(da.p, a.data(), a.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.p, b.data(), b.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dc.p, 0xFF, size_t(64) * N * 4));
  wgmma_fp8_kernel<N, kRs><<<1, 128, 64 * 128 + size_t(N) * 128 + 1024>>>(da.p, db.p, dc.p);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> c(size_t(64) * N);
  CUDA_OK(cudaMemcpy(c.data(), dc.p, c.size() * 4, cudaMemcpyDeviceToHost));
  // Products of two e4m3 values are exact in fp32; the tensor cores' fp8 accumulation is not
  // full fp32 (FA3 reports it), so the bound is loose: 2^-9 of sum |a b|. A layout or descriptor
  // error moves C by O(|C|).
  int bad = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0, sa = 0;
      for (int k = 0; k < 128; ++k) {
        const double p = e4m3_value(a[i * 128 + k]) * e4m3_value(b[j * 128 + k]);
        s += p, sa += std::fabs(p);
      }
      const double got = c[size_t(i) * N + j], tol = sa * std::ldexp(1.0, -9) + 1e-6;
      if (!(std::fabs(got - s) <= tol) && ++bad <= 8)
        ADD_FAILURE() << what << ": C[" << i << "][" << j << "] = " << got << ", fp64 reference " << s;
    }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << 64 * N << " elements outside tolerance";
}

// The fp8 wrappers (issue 15's prefill will use them): SS and RS at the key-tile widths.
TEST(Sm90Wgmma, Fp8) {
  SKIP_UNLESS_SM90();
  run_wgmma_fp8<64, false>();
  run_wgmma_fp8<128, false>();
  run_wgmma_fp8<160, false>();  // (Tile::fp8_long_keys at D 64: FA3's 192 x 160)
  run_wgmma_fp8<192, false>();  // (the 192-key e4m3 D 128 tile, Tile::fp8_long_keys)
  run_wgmma_fp8<224, false>();  // (FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D128=224)
  run_wgmma_fp8<256, false>();
  run_wgmma_fp8<64, true>();
  run_wgmma_fp8<128, true>();
  run_wgmma_fp8<160, true>();
  run_wgmma_fp8<192, true>();
  run_wgmma_fp8<224, true>();
  run_wgmma_fp8<256, true>();
}

// pack_e4m3x4 (the sm90 fp8 tile's P conversion, fwd_consumer.cuh pack_p): four floats to e4m3
// with cvt.rn.satfinite, packed a, b, c, d from the lowest byte up -- the byte order the 8-bit
// A fragment needs (fp8_layout.h). Each byte against the host's round-to-nearest-even,
// saturating conversion (cuda/common/e4m3.h f32_to_e4m3_sat, itself checked against core in
// tests/test_e4m3.cpp): ties, the subnormal range, values past 448 and infinities (-> +-448),
// NaN (-> a NaN code, either sign).
__global__ void pack_e4m3_kernel(const float* __restrict__ in, uint32_t* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = fa4::cuda::ptx::pack_e4m3x4(in[4 * i], in[4 * i + 1], in[4 * i + 2], in[4 * i + 3]);
}

TEST(Sm90Cvt, PackE4m3x4) {
  SKIP_UNLESS_SM90();
  const uint64_t seed = derive_seed(600);
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::vector<float> x;
  // every e4m3 value, and the midpoints between neighbours (ties: to even), both signs
  for (int b = 0; b < 0x7f; ++b) {
    const float v = fa4::cuda::e4m3_to_f32(static_cast<uint32_t>(b));
    const float next = b + 1 < 0x7f ? fa4::cuda::e4m3_to_f32(static_cast<uint32_t>(b + 1)) : 480.f;
    for (float y : {v, 0.5f * (v + next), std::nextafter(0.5f * (v + next), 0.f), std::nextafter(0.5f * (v + next), 1e9f)})
      x.push_back(y), x.push_back(-y);
  }
  for (float y : {448.f, 464.f, 465.f, 1e6f, INFINITY, -INFINITY, std::nanf(""), 0x1p-10f, 0x1.8p-10f, 0x1p-11f, 1e-30f})
    x.push_back(y);
  std::uniform_real_distribution<float> e(-24.f, 10.f);
  while (x.size() % 4 != 0 || x.size() < 8192) x.push_back((rng() & 1 ? 1.f : -1.f) * std::exp2(e(rng)));
  const int n = static_cast<int>(x.size() / 4);
  DevBuf<float> din(x.size());
  DevBuf<uint32_t> dout(static_cast<size_t>(n));
  ASSERT_TRUE(din.p && dout.p);
  CUDA_OK(cudaMemcpy(din.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  pack_e4m3_kernel<<<(n + 127) / 128, 128>>>(din.p, dout.p, n);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint32_t> got(static_cast<size_t>(n));
  CUDA_OK(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t byte = (got[i / 4] >> (8 * (i % 4))) & 0xffu;
    const uint32_t want = fa4::cuda::f32_to_e4m3_sat(x[i]);
    const bool ok = std::isnan(x[i]) ? (byte & 0x7fu) == 0x7fu : byte == want;
    if (!ok && ++bad <= 8) ADD_FAILURE() << "pack_e4m3x4(" << x[i] << ") byte " << i % 4 << " = " << byte << ", want " << want;
  }
  EXPECT_EQ(bad, 0);
}

// The fp8-KV tile's widening (cuda/common/e4m3_widen.cuh widen_e4m3x4, sm90/fwd_fp8_kv.cuh): every
// one of the 65,536 byte pairs, in both halves of a 4-byte word, to fp16 and bf16 bits against the
// host decoding (cuda/common/e4m3.h e4m3_to_f32, exact in both types): +-0 keep their sign,
// subnormals and +-448 exact, NaN (0x7f / 0xff) a NaN.
template <typename Elem>
__global__ void widen_e4m3_kernel(const uint32_t* __restrict__ in, uint2* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    uint2 r;
    fa4::cuda::widen_e4m3x4<Elem>(in[i], r.x, r.y);
    out[i] = r;
  }
}

template <typename Elem>
void check_widen_e4m3() {
  const int n = 65536;
  std::vector<uint32_t> x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<uint32_t>(i) | (static_cast<uint32_t>(65535 - i) << 16);
  DevBuf<uint32_t> din(n);
  DevBuf<uint2> dout(n);
  ASSERT_TRUE(din.p && dout.p);
  CUDA_OK(cudaMemcpy(din.p, x.data(), n * 4, cudaMemcpyHostToDevice));
  widen_e4m3_kernel<Elem><<<n / 256, 256>>>(din.p, dout.p, n);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint2> got(n);
  CUDA_OK(cudaMemcpy(got.data(), dout.p, n * sizeof(uint2), cudaMemcpyDeviceToHost));
  constexpr bool kBf16 = std::is_same_v<Elem, __nv_bfloat16>;
  // The 16-bit pattern of the value of byte b (exact), or -1 for NaN.
  auto want = [](uint32_t b) -> int {
    if ((b & 0x7fu) == 0x7fu) return -1;
    const float v = fa4::cuda::e4m3_to_f32(b);
    if (kBf16) {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      return static_cast<int>(u >> 16);  // exact: the low 16 bits are 0
    }
    const __half h = __float2half_rn(v);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
  };
  auto is_nan = [](uint32_t h) {
    return kBf16 ? (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0 : (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
  };
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t words[2] = {got[i].x, got[i].y};
    for (int e = 0; e < 4; ++e) {
      const uint32_t b = (x[i] >> (8 * e)) & 0xffu;
      const uint32_t h = (words[e / 2] >> (16 * (e % 2))) & 0xffffu;
      const int w = want(b);
      const bool ok = w < 0 ? is_nan(h) : h == static_cast<uint32_t>(w);
      if (!ok && ++bad <= 8)
        ADD_FAILURE() << (kBf16 ? "bf16" : "fp16") << " widen of byte 0x" << std::hex << b << " (word 0x" << x[i]
                      << ", element " << std::dec << e << ") = 0x" << std::hex << h << ", want 0x" << w;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(Sm90Cvt, WidenE4m3x4EveryPair) {
  SKIP_UNLESS_SM90();
  check_widen_e4m3<__half>();
  check_widen_e4m3<__nv_bfloat16>();
}

// Host-side check of the e4m3 decoding the fp8 test's reference uses, against CUDA's own
// conversion (no GPU needed): every one of the 254 finite codes.
TEST(Sm90Host, E4m3Decoding) {
  for (int x = 0; x < 256; ++x) {
    if ((x & 0x7f) == 0x7f) continue;
    __nv_fp8_e4m3 v;
    v.__x = static_cast<__nv_fp8_storage_t>(x);
    EXPECT_EQ(e4m3_value(static_cast<uint8_t>(x)), static_cast<double>(static_cast<float>(v))) << "code " << x;
  }
}

// ------------------------------------------------------------------------------ mbarrier test

TEST(Sm90Mbarrier, PhaseParityTwoRounds) {
  SKIP_UNLESS_SM90();
  const uint64_t seed = derive_seed(500);
  FA4_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFF);
  std::vector<uint16_t> host(128 * 64);  // two 64 x 64 tiles, dense rows of 64
  for (auto& x : host) x = static_cast<uint16_t>(bits(rng));
  DevBuf<uint16_t> g(host.size());
  DevBuf<int> res(16);
  ASSERT_TRUE(g.p && res.p);
  CUDA_OK(cudaMemcpy(g.p, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(res.p, 0, 16 * sizeof(int)));
  CUtensorMap map;
  std::string err;
  ASSERT_TRUE(fa4::cuda::encode_tma_2d_sw128(&map, g.p, TmaElem::bf16, 128, 64, 64, 64, &err)) << err;
  mbarrier_phase_kernel<<<1, 128, 64 * 64 * 2 + 1024>>>(map, g.p, res.p);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  int r[16];
  CUDA_OK(cudaMemcpy(r, res.p, sizeof(r), cudaMemcpyDeviceToHost));
  EXPECT_EQ(r[12], 0) << "an mbarrier wait timed out (phase never completed)";
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round) + " (waits on parity " + std::to_string(round & 1) + ")");
    EXPECT_EQ(r[0 + round], 0) << "tx barrier: phase reported complete before its arrive + TMA";
    EXPECT_EQ(r[2 + round], 1) << "tx barrier: the previous-parity phase should read as complete";
    EXPECT_EQ(r[4 + round], 1) << "tx barrier: phase not complete after a successful wait";
    EXPECT_EQ(r[6 + round], 0) << "arrival barrier: phase complete before all 128 arrivals";
    EXPECT_EQ(r[8 + round], 0) << "TMA tile of this round differs from global memory in " << r[8 + round]
                               << " elements (stale data from the previous phase?)";
    EXPECT_EQ(r[10 + round], 0) << r[10 + round] << " threads saw a stale slot after the arrival barrier";
  }
}

// ------------------------------------------------------------------------------ misc

TEST(Sm90Misc, ElectNamedBarriersSetmaxnreg) {
  SKIP_UNLESS_SM90();
  const uint64_t seed = derive_seed(600);
  FA4_SEED_TRACE(seed);
  DevBuf<int> out(32);
  ASSERT_TRUE(out.p);
  CUDA_OK(cudaMemset(out.p, 0, 32 * sizeof(int)));
  sm90_misc_kernel<<<1, 256>>>(static_cast<uint32_t>(seed), out.p);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  int r[32];
  CUDA_OK(cudaMemcpy(r, out.p, sizeof(r), cudaMemcpyDeviceToHost));
  for (int w = 0; w < 8; ++w) {
    EXPECT_EQ(r[w], 1) << "warp " << w << ": elect.sync (full mask) elected " << r[w] << " lanes";
    EXPECT_EQ(r[8 + w], 1) << "warp " << w << ": elect.sync (odd lanes) elected " << r[8 + w] << " lanes";
  }
  EXPECT_EQ(r[24], 0) << "warpgroup 1 saw " << r[24] << " stale values after bar.sync(1) / bar.arrive(1)";
  EXPECT_EQ(r[25], 0) << "warpgroup 0 saw " << r[25] << " stale values after bar.sync(2) / bar.arrive(2)";
  EXPECT_EQ(r[26], 0) << "register-heavy computation after setmaxnreg.inc gave wrong results";
}

// ------------------------------------------------------------------------------ MUFU tanh

__global__ void tanh_approx_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fa4::cuda::ptx::tanh_approx(x[i]);
}

// tanh.approx.f32 (the GPU kernels' softcap, common/softcap.cuh) against tanh in fp64, over |y|
// from 2^-30 to 16 (every exponent, 4096 mantissas each, both signs). The PTX ISA promises a
// relative error of 2^-10.987; fp16 softcap relies on what the H200 measured, 2^-16.6 (5.8e-6
// absolute where |tanh| > 0.9, the saturated scores a cap multiplies): asserted at 2^-15, so a
// device with a coarser tanh.approx fails here rather than in fp16 outputs. Also odd, and a
// normal tiny argument keeps its value (a softcap of 1e9 must not zero the scores).
TEST(Sm90Mufu, TanhApprox) {
  SKIP_UNLESS_SM90();
  std::vector<float> x;
  for (int e = -30; e <= 3; ++e)
    for (int m = 0; m < 4096; ++m) {
      const float v = std::ldexp(1.f + m / 4096.f, e);
      x.push_back(v), x.push_back(-v);
    }
  const int n = static_cast<int>(x.size());
  DevBuf<float> dx(n), dy(n);
  ASSERT_TRUE(dx.p && dy.p);
  CUDA_OK(cudaMemcpy(dx.p, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  tanh_approx_kernel<<<(n + 255) / 256, 256>>>(dx.p, dy.p, n);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> y(n);
  CUDA_OK(cudaMemcpy(y.data(), dy.p, n * sizeof(float), cudaMemcpyDeviceToHost));
  double max_rel = 0, max_rel_sat = 0, sum_rel_sat = 0, max_abs_sat = 0;
  int n_sat = 0;
  for (int i = 0; i < n; ++i) {
    const double t = std::tanh(static_cast<double>(x[i]));
    const double rel = std::fabs(y[i] - t) / std::fabs(t);
    max_rel = std::max(max_rel, rel);
    if (std::fabs(t) > 0.9) {
      max_rel_sat = std::max(max_rel_sat, rel), sum_rel_sat += rel, ++n_sat;
      max_abs_sat = std::max(max_abs_sat, std::fabs(y[i] - t));
    }
    if (i % 2 == 1) ASSERT_EQ(y[i], -y[i - 1]) << "tanh.approx(" << x[i] << ") is not odd";
  }
  std::printf("[ tanh.approx ] max relative error %.3g (2^%.2f); |tanh| > 0.9: max %.3g (2^%.2f), mean %.3g, "
              "max abs %.3g over %d points\n",
              max_rel, std::log2(max_rel), max_rel_sat, std::log2(max_rel_sat), sum_rel_sat / n_sat, max_abs_sat, n_sat);
  EXPECT_LE(max_rel, std::exp2(-15.0)) << "tanh.approx coarser than fp16 softcap assumes (common/softcap.cuh)";
  EXPECT_NEAR(y[0], x[0], std::fabs(x[0]) * std::exp2(-10.987)) << "tiny arguments must keep their value";
}

// Host-only: the descriptor encoder against the PTX ISA bit layout, and the tensor-map argument
// checks (these run everywhere, no device needed beyond the CUDA runtime being linked).
TEST(Sm90Host, SmemDescriptorBits) {
  const uint64_t d = make_smem_desc(0x12340u, 16, 1024, SmemSwizzle::b128);
  EXPECT_EQ(d & 0x3FFF, 0x1234u) << "start address >> 4 in bits 0-13";
  EXPECT_EQ((d >> 16) & 0x3FFF, 1u) << "LBO >> 4 in bits 16-29";
  EXPECT_EQ((d >> 32) & 0x3FFF, 64u) << "SBO >> 4 in bits 32-45";
  EXPECT_EQ((d >> 49) & 0x7, 0u) << "base offset in bits 49-51";
  EXPECT_EQ(d >> 62, 1u) << "swizzle mode 1 (128B) in bits 62-63";
  EXPECT_EQ(smem_desc_advance(d, 32), make_smem_desc(0x12340u + 32, 16, 1024, SmemSwizzle::b128));
  for (uint32_t r = 0; r < 16; ++r)
    for (uint32_t j = 0; j < 8; ++j)
      EXPECT_EQ(swizzle128_offset(r, j * 16), r * 128 + ((j ^ (r % 8)) * 16)) << "row " << r << " chunk " << j;
}

TEST(Sm90Host, TensorMapArgumentChecks) {
  alignas(16) static uint16_t dummy[64];
  CUtensorMap map;
  std::string err;
  fa4::cuda::TmaTiledDesc d;
  d.base = dummy;
  d.rank = 2;
  d.dims[0] = 128, d.dims[1] = 64;
  d.strides_bytes[0] = 256;
  d.box[0] = 128, d.box[1] = 64;  // 256 bytes > the 128-byte swizzle span
  EXPECT_FALSE(fa4::cuda::encode_tma_tiled(&map, d, &err));
  EXPECT_NE(err.find("swizzle span"), std::string::npos) << err;
  d.box[0] = 64;
  d.strides_bytes[0] = 200;  // not a multiple of 16
  EXPECT_FALSE(fa4::cuda::encode_tma_tiled(&map, d, &err));
  EXPECT_NE(err.find("multiple of 16"), std::string::npos) << err;
  d.strides_bytes[0] = 256;
  d.box[1] = 300;
  EXPECT_FALSE(fa4::cuda::encode_tma_tiled(&map, d, &err));
  EXPECT_NE(err.find("1..256"), std::string::npos) << err;
}

}  // namespace
