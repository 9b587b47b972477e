// Thin wrappers, one PTX instruction (or one cuda::ptx call) each, for the Hopper (sm_90a) fast
// path (DESIGN §2/§3): mbarrier, fences, TMA tensor copies, wgmma + shared-memory matrix
// descriptors, setmaxnreg, elect.sync, named barriers.
//
// Compilation passes. Every .cu of the library is compiled for sm_90a and sm_80 (and a host
// pass). Two feature levels are told apart:
//   FA4_PTX_SM90   __CUDA_ARCH__ >= 900: mbarrier tx-count, TMA (cp.async.bulk.tensor),
//                  fence.proxy.async, elect.sync exist on every sm_90+ target.
//   FA4_PTX_SM90A  __CUDA_ARCH_FEAT_SM90_ALL (nvcc defines it only for compute_90a/sm_90a;
//                  plain sm_90 does not, and neither defines it on sm_100): wgmma and
//                  setmaxnreg are "arch-specific" features that ptxas rejects elsewhere.
// Under any other pass (sm_80, host) the wrappers compile to __trap(): kernels that use them
// must be launched only after a runtime check for compute capability 9.0 (and should guard
// their own bodies with the same macros so the sm_80 image carries no dead code). cuda::ptx
// calls cannot simply be left in: CCCL turns an unsupported-architecture call into an
// unresolved extern (a link error), hence the guards around them too.
//
// Hardware facts used throughout (H100/H200, PTX ISA 8.x):
//  * An mbarrier is a 64-bit shared-memory object holding a phase bit, a pending-arrival count
//    and a transaction (tx) count. A phase completes when pending arrivals reach 0 AND the tx
//    count is 0; the barrier then flips its phase parity and reloads the arrival count given at
//    init. Waiters wait on a parity: "the phase with parity P has completed".
//  * TMA (cp.async.bulk.tensor) writes shared memory through the async proxy and signals an
//    mbarrier with complete_tx::bytes = the full box size in bytes, including out-of-bound
//    elements (those are zero-filled), so expect_tx is always the box size.
//  * wgmma reads shared-memory operands through the async proxy too: data written with plain
//    st.shared must be published with fence.proxy.async before a wgmma may read it; data
//    delivered by TMA and observed through an mbarrier wait needs no extra fence.
#pragma once

#include <cuda.h>  // CUtensorMap (a 128-byte aligned opaque struct; types only, no libcuda link)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda/ptx>

#include <cstdint>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define FA4_PTX_SM90 1
#else
#define FA4_PTX_SM90 0
#endif
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA4_PTX_SM90A 1
#else
#define FA4_PTX_SM90A 0
#endif
#define FA4_PTX_UNSUPPORTED() __trap()

namespace fa4::cuda::ptx {

// ---------------------------------------------------------------------------------------------
// mbarrier
// ---------------------------------------------------------------------------------------------

// Sets the expected arrival count of every phase (1 for a TMA "full" barrier whose producer
// arrives once with expect_tx; number of releasing warps/warpgroups for an "empty" barrier).
// The object must be 8-byte aligned in shared memory. Follow with fence_mbarrier_init() and a
// CTA barrier before any other thread (or the TMA unit) touches it.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrival_count) {
#if FA4_PTX_SM90
  ::cuda::ptx::mbarrier_init(bar, arrival_count);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// fence.mbarrier_init.release.cluster: makes preceding mbarrier.init visible to the async proxy
// (TMA complete_tx) and to other CTAs of the cluster; a plain __syncthreads does not order the
// init against async-proxy operations.
// Programmatic dependent launch (PTX griddepcontrol, sm_90): a grid launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the grid before it in the
// stream still runs; griddep_wait blocks until that grid has completed and its memory is visible
// (a no-op for a grid launched without the attribute), griddep_launch_dependents lets the next
// such grid be scheduled once every CTA of this one has called it or exited.
__device__ __forceinline__ void griddep_wait() {
#if FA4_PTX_SM90
  asm volatile("griddepcontrol.wait;" ::: "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
__device__ __forceinline__ void griddep_launch_dependents() {
#if FA4_PTX_SM90
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
__device__ __forceinline__ void fence_mbarrier_init() {
#if FA4_PTX_SM90
  ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// One arrival (release semantics at CTA scope: this thread's earlier shared-memory writes are
// visible to threads that complete a wait on the phase).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if FA4_PTX_SM90
  (void)::cuda::ptx::mbarrier_arrive(bar);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// One arrival plus tx_bytes added to the phase's transaction count, in one instruction. The
// phase cannot complete until the TMA copies issued against this barrier have delivered exactly
// tx_bytes (their complete_tx decrements the count), so a consumer waiting on the phase sees
// the data. Issue it before the copies (one phase tracks at most 2^20 - 1 pending bytes).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t tx_bytes) {
#if FA4_PTX_SM90
  (void)::cuda::ptx::mbarrier_arrive_expect_tx(::cuda::ptx::sem_release, ::cuda::ptx::scope_cta,
                                               ::cuda::ptx::space_shared, bar, tx_bytes);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// Adds tx_bytes to the current phase's transaction count without arriving.
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, uint32_t tx_bytes) {
#if FA4_PTX_SM90
  ::cuda::ptx::mbarrier_expect_tx(::cuda::ptx::sem_relaxed, ::cuda::ptx::scope_cta, ::cuda::ptx::space_shared, bar,
                                  tx_bytes);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// True once the phase with parity `parity` has completed, i.e. the barrier's current phase
// parity differs from `parity`. A fresh barrier is in phase 0: waiting on parity 0 blocks until
// the first phase completes, waiting on parity 1 succeeds at once (that is how a producer's
// first wait on an "empty" barrier passes). try_wait may suspend the thread for a
// hardware-chosen time before returning false; test_wait never suspends. Acquire semantics.
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
#if FA4_PTX_SM90
  return ::cuda::ptx::mbarrier_try_wait_parity(bar, parity);
#else
  FA4_PTX_UNSUPPORTED();
  return false;
#endif
}
__device__ __forceinline__ bool mbarrier_test_wait_parity(uint64_t* bar, uint32_t parity) {
#if FA4_PTX_SM90
  return ::cuda::ptx::mbarrier_test_wait_parity(bar, parity);
#else
  FA4_PTX_UNSUPPORTED();
  return false;
#endif
}
// Spin until the phase with parity `parity` has completed (try_wait already backs off in
// hardware, so no nanosleep). Callers track the parity themselves: it flips each time they
// have consumed one phase of this barrier (stage index wraps -> parity ^= 1).
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  // (A 10 ms suspend hint, CUTLASS's, measured +-0.5 % on the H200: 18c9442, sm90-notes.md.)
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

// ---------------------------------------------------------------------------------------------
// warp-collective shared-memory matrix moves (the fp8 tile's in-kernel V^T transpose,
// sm90/fp8_vt_transpose.h)
// ---------------------------------------------------------------------------------------------

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: four 8 x 8 matrices of 16-bit elements, lane
// 8m + r supplying the shared address of row r of matrix m (16 bytes); register m of lane l
// receives column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1 (low half first) of matrix m.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
#if FA4_PTX_SM90
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
// stmatrix.sync.aligned.m8n8.x4.shared.b16 (sm_90): lane 8m + r supplies the address of row r of
// matrix m (plus the compile-time kOff: the instruction's immediate); row r of matrix m takes
// register m of lanes 4r .. 4r + 3 (lane 4r + t at bytes 4t).
template <int kOff = 0>
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
#if FA4_PTX_SM90
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0+%1], {%2, %3, %4, %5};\n" ::"r"(addr), "n"(kOff), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// ---------------------------------------------------------------------------------------------
// fences
// ---------------------------------------------------------------------------------------------

// fence.proxy.async.shared::cta: orders this thread's generic-proxy shared-memory accesses
// (st.shared, ld.shared) with later async-proxy accesses (wgmma operand reads, TMA stores from
// shared memory) and vice versa. Needed after writing a wgmma operand / TMA-store source with
// ordinary stores (followed by a CTA or named barrier so the other threads' writes are covered).
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
#if FA4_PTX_SM90
  ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// wgmma.fence.sync.aligned: required before the first wgmma of a group and whenever the
// accumulator registers (or the A-fragment registers of the RS form) were written by other
// instructions since the last wgmma: wgmma reads them asynchronously and the hardware does not
// track the dependence. Warpgroup-wide (.aligned: all 128 threads execute it convergently).
__device__ __forceinline__ void wgmma_fence() {
#if FA4_PTX_SM90A
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
// Closes the wgmma operations issued since the last commit into one wgmma-group.
__device__ __forceinline__ void wgmma_commit_group() {
#if FA4_PTX_SM90A
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
// Blocks until at most N wgmma-groups of this warpgroup are pending. Only then may the
// accumulators of the completed groups be read, or their shared-memory operands overwritten.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes an immediate 0..7");
#if FA4_PTX_SM90A
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
// Compiler-only fence on a register: wgmma's inline asm states its "+f" outputs as if they were
// written at issue, so the compiler may move reads of the accumulators above wgmma_wait_group
// or writes of them below the wgmma. An empty volatile asm that "modifies" the register pins it
// in program order between the two volatile asm statements around it. No instruction emitted.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) fence_operand(r[i]);
}

// ---------------------------------------------------------------------------------------------
// TMA (cp.async.bulk.tensor, tile mode, global -> shared, mbarrier completion)
// ---------------------------------------------------------------------------------------------
// `map` must be the address of a CUtensorMap in param/const/global space (a kernel parameter
// declared `const __grid_constant__ CUtensorMap`), never a local copy: the TMA unit reads the
// descriptor from memory. Coordinates are in elements, innermost dimension first, signed 32-bit;
// boxes may hang over any edge (out-of-bound elements become zeros and still count toward the
// barrier's tx bytes). The destination must be 128-byte aligned, and 1024-byte aligned for 128B
// swizzle so that the swizzle pattern (address bits [4:6] ^= bits [7:9]) starts at the tile's
// first row. The shared::cluster destination form is used with this CTA's own shared address,
// which is valid without a cluster launch (a lone CTA is a cluster of one).

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1) {
#if FA4_PTX_SM90
  const int32_t coords[2] = {c0, c1};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global, dst, map, coords, bar);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2) {
#if FA4_PTX_SM90
  const int32_t coords[3] = {c0, c1, c2};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global, dst, map, coords, bar);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2, int32_t c3) {
#if FA4_PTX_SM90
  const int32_t coords[4] = {c0, c1, c2, c3};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global, dst, map, coords, bar);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// TMA store (shared::cta -> global, bulk-group completion): the box at `coords` of `map` from
// `src` (laid out as the map's box, swizzle included). Rows / columns past the map's extent are
// not written. The shared memory must not be overwritten before bulk_wait_group_read<0>() in
// the issuing thread; generic-proxy writes of `src` need fence_proxy_async_shared_cta() (by the
// writing threads, before the barrier that hands the tile to the issuing thread).
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, const void* src, int32_t c0, int32_t c1, int32_t c2,
                                             int32_t c3) {
#if FA4_PTX_SM90
  const int32_t coords[4] = {c0, c1, c2, c3};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_global, ::cuda::ptx::space_shared, map, coords, src);
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
__device__ __forceinline__ void bulk_commit_group() {
#if FA4_PTX_SM90
  ::cuda::ptx::cp_async_bulk_commit_group();
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
// The issuing thread's bulk groups but the newest N have finished reading shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
#if FA4_PTX_SM90
  ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<N>{});
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
// ... and have completed (their global writes performed).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
#if FA4_PTX_SM90
  ::cuda::ptx::cp_async_bulk_wait_group(::cuda::ptx::n32_t<N>{});
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// Pulls the 128-byte descriptor into the TMA unit's descriptor cache ahead of the first copy
// (one thread, at kernel start). A hint: no effect on correctness.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
#if FA4_PTX_SM90
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// 128-byte swizzle, the layout TMA writes with CU_TENSOR_MAP_SWIZZLE_128B and wgmma reads with
// swizzle mode 1: a tile is stored as rows of 128 bytes (64 16-bit elements); within each
// 1024-byte group of 8 rows, the 16-byte chunk j of row r is stored at chunk j ^ (r % 8). The
// result: the 8 rows of an 8x8 core matrix land in 8 different bank groups, so both TMA writes
// and wgmma/ldmatrix reads are conflict-free. Byte offset of logical (row, byte-in-row).
__host__ __device__ constexpr uint32_t swizzle128_offset(uint32_t row, uint32_t byte_in_row) {
  return row * 128u + ((((byte_in_row >> 4) ^ (row & 7u)) & 7u) << 4) + (byte_in_row & 15u);
}

// ---------------------------------------------------------------------------------------------
// wgmma shared-memory matrix descriptors
// ---------------------------------------------------------------------------------------------
// 64-bit descriptor (PTX ISA "Matrix Descriptor Format" for wgmma):
//   bits  0-13  start address  (shared-window byte address >> 4; 16-byte granularity, 256 KiB)
//   bits 16-29  leading-dimension byte offset >> 4  (LBO)
//   bits 32-45  stride-dimension byte offset >> 4   (SBO)
//   bits 49-51  matrix base offset (non-zero only when a swizzled tile does not start at a
//               pattern boundary; we keep tiles 1024-byte aligned, so 0)
//   bits 62-63  swizzle mode: 0 none (interleaved), 1 = 128B, 2 = 64B, 3 = 32B
// Operands are built from "core matrices" of 8 rows x 16 bytes. For a K-major operand (rows =
// M or N, contiguous K; the layout TMA produces for a [rows, 64] 16-bit box with 128B swizzle):
//   SBO = distance between consecutive 8-row groups along M/N = 8 rows * 128 B = 1024 B;
//   LBO = distance between core matrices along K; with 128B swizzle, a k16 step (32 bytes) stays
//         inside the 128-byte swizzle row, so the hardware ignores LBO (by convention 1).
// A k-step k (16 elements = 32 bytes) inside the 64-element swizzle atom is addressed by
// advancing the start address by 32*k bytes (+2 in the >>4 field): the hardware applies the XOR
// to the final address bits, which is why the tile base must be 1024-byte aligned.
enum class SmemSwizzle : uint32_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };

__host__ __device__ constexpr uint64_t make_smem_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                      SmemSwizzle swizzle) {
  return (uint64_t((smem_addr & 0x3FFFFu) >> 4) & 0x3FFFull) | ((uint64_t(lbo_bytes >> 4) & 0x3FFFull) << 16) |
         ((uint64_t(sbo_bytes >> 4) & 0x3FFFull) << 32) | (uint64_t(static_cast<uint32_t>(swizzle)) << 62);
}
// K-major operand tile of `row_bytes`-byte rows (128, 64 or 32) in the swizzle of that width (what
// a TMA box of row_bytes-byte rows writes with CU_TENSOR_MAP_SWIZZLE_<row_bytes>B): SBO = 8 rows,
// LBO unused (16 by convention), starting at `smem_addr` (tile base aligned to the swizzle atom,
// 8 x row_bytes, + 32 * k-step within a row).
__host__ __device__ constexpr uint64_t make_smem_desc_kmajor(uint32_t smem_addr, uint32_t row_bytes) {
  return make_smem_desc(smem_addr, 16, 8 * row_bytes,
                        row_bytes == 128 ? SmemSwizzle::b128 : row_bytes == 64 ? SmemSwizzle::b64 : SmemSwizzle::b32);
}
// K-major operand tile, 16-bit elements, 128B swizzle, rows of 64 elements (128 bytes),
// starting at `smem_addr` (a shared-window address; 1024-aligned tile base + 32 * k-step).
__host__ __device__ constexpr uint64_t make_smem_desc_kmajor_sw128(uint32_t smem_addr) {
  return make_smem_desc_kmajor(smem_addr, 128);
}
// Moves a descriptor's start address by `bytes` (multiple of 16) without re-encoding the rest.
__host__ __device__ constexpr uint64_t smem_desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + uint64_t(bytes >> 4);
}

// ---------------------------------------------------------------------------------------------
// wgmma.mma_async m64nNk16, fp32 accumulate, 16-bit inputs
// ---------------------------------------------------------------------------------------------
// Issued by a whole warpgroup (4 consecutive warps, first warp index a multiple of 4), all 128
// threads convergent. D is 64 x N fp32, N/2 registers per thread: thread t = 32*w + l holds
//   d[i] = D[16*w + l/4 + 8*((i/2)%2)][8*(i/4) + 2*(l%4) + i%2]
// (the mma.sync m16n8 C layout, repeated over N/8 column blocks, warp w owning rows 16w..16w+15).
// scale_d == 0: D = A*B (the old accumulator contents are ignored, not multiplied by 0, so NaN
// garbage is fine); scale_d != 0: D += A*B. It is a runtime predicate, so the first k-step of a
// tile needs no separate zero-fill.
// SS: A (64 x 16) and B (N x 16, "N rows of K") both from shared memory via descriptors.
//     TransA/TransB = 0: K-major (K contiguous), 1: M/N-major (e.g. V in O = P*V).
// RS: A from registers (4 x b32 per thread = 8 16-bit values, the mma.sync m16n8k16 A layout
//     per warp: a0 = (r, c..c+1), a1 = (r+8, c..c+1), a2 = (r, c+8..c+9), a3 = (r+8, c+8..c+9)
//     with r = 16*w + l/4, c = 2*(l%4)), B from shared memory.
// The instruction is asynchronous: bracket with wgmma_fence() before, wgmma_commit_group() +
// wgmma_wait_group<n>() after, and keep the compiler off the accumulators with
// fence_operands() (see above). The inline asm spells out all N/2 accumulator registers.
template <int N, typename Elem>
struct Wgmma;

// The asm statements, written once per N and expanded for each input type (TY: "bf16" / "f16").
// One statement: the scale-d predicate from operand P, the N/2 accumulators REGS (outputs DOUT,
// a parenthesized list so its commas survive the macro layers), then ARGS (descriptors / A
// registers, predicate, scales, transposes) from the inputs that follow.
#if FA4_PTX_SM90A
#define FA4_WGMMA_ASM(SHAPE, TY, P, REGS, ARGS, DOUT, ...)                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                   \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" REGS "}, " ARGS ";\n}\n" \
               : FA4_WGMMA_LIST DOUT                                                             \
               : __VA_ARGS__)
#else
#define FA4_WGMMA_ASM(SHAPE, TY, P, REGS, ARGS, DOUT, ...) FA4_PTX_UNSUPPORTED()
#endif
#define FA4_WGMMA_LIST(...) __VA_ARGS__
#define FA4_WGMMA_D8(i)                                                                            \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define FA4_WGMMA_D16(i) FA4_WGMMA_D8(i), FA4_WGMMA_D8(i + 8)
#define FA4_WGMMA_D32(i) FA4_WGMMA_D16(i), FA4_WGMMA_D16(i + 16)
#define FA4_WGMMA_D64(i) FA4_WGMMA_D32(i), FA4_WGMMA_D32(i + 32)
#define FA4_WGMMA_D128(i) FA4_WGMMA_D64(i), FA4_WGMMA_D64(i + 64)
#define FA4_WGMMA_R32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FA4_WGMMA_R64 \
  FA4_WGMMA_R32 ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FA4_WGMMA_R128 \
  FA4_WGMMA_R64 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// Wgmma<N, ELEM> for inputs TY: ss and rs, with their operand numbering (accumulators first).
#define FA4_WGMMA_SPECIALIZE(N, ELEM, TY, SHAPE, NREG, REGS, DOUT, SS_P, SS_ARGS, RS_P, RS_ARGS)          \
  template <>                                                                                          \
  struct Wgmma<N, ELEM> {                                                                              \
    template <int TransA, int TransB>                                                                  \
    __device__ __forceinline__ static void ss(float(&d)[NREG], uint64_t desc_a, uint64_t desc_b, int scale_d) { \
      FA4_WGMMA_ASM(SHAPE, TY, SS_P, REGS, SS_ARGS, DOUT, "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransA), \
                    "n"(TransB));                                                                      \
    }                                                                                                  \
    template <int TransB>                                                                              \
    __device__ __forceinline__ static void rs(float(&d)[NREG], const uint32_t(&a)[4], uint64_t desc_b,  \
                                              int scale_d) {                                           \
      FA4_WGMMA_ASM(SHAPE, TY, RS_P, REGS, RS_ARGS, DOUT, "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),      \
                    "l"(desc_b), "r"(scale_d), "n"(TransB));                                           \
    }                                                                                                  \
  };
#define FA4_WGMMA_N64(ELEM, TY)                                                                    \
  FA4_WGMMA_SPECIALIZE(64, ELEM, TY, "m64n64k16", 32, FA4_WGMMA_R32, (FA4_WGMMA_D32(0)), "%34",           \
                       "%32, %33, p, 1, 1, %35, %36", "%37", "{%32, %33, %34, %35}, %36, p, 1, 1, %38")
#define FA4_WGMMA_N128(ELEM, TY)                                                                   \
  FA4_WGMMA_SPECIALIZE(128, ELEM, TY, "m64n128k16", 64, FA4_WGMMA_R64, (FA4_WGMMA_D64(0)), "%66",         \
                       "%64, %65, p, 1, 1, %67, %68", "%69", "{%64, %65, %66, %67}, %68, p, 1, 1, %70")
#define FA4_WGMMA_N256(ELEM, TY)                                                                   \
  FA4_WGMMA_SPECIALIZE(256, ELEM, TY, "m64n256k16", 128, FA4_WGMMA_R128, (FA4_WGMMA_D128(0)), "%130",     \
                       "%128, %129, p, 1, 1, %131, %132", "%133",                                    \
                       "{%128, %129, %130, %131}, %132, p, 1, 1, %134")
// N = 80 / 176 / 192: key tiles of FA3's size class (DESIGN §3).
#define FA4_WGMMA_R40 FA4_WGMMA_R32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define FA4_WGMMA_N80(ELEM, TY) \
  FA4_WGMMA_SPECIALIZE(80, ELEM, TY, "m64n80k16", 40, FA4_WGMMA_R40, (FA4_WGMMA_D32(0), FA4_WGMMA_D8(32)), "%42", \
                       "%40, %41, p, 1, 1, %43, %44", "%45", \
                       "{%40, %41, %42, %43}, %44, p, 1, 1, %46")
#define FA4_WGMMA_R88 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87"
#define FA4_WGMMA_R96 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FA4_WGMMA_N176(ELEM, TY) \
  FA4_WGMMA_SPECIALIZE(176, ELEM, TY, "m64n176k16", 88, FA4_WGMMA_R88, (FA4_WGMMA_D64(0), FA4_WGMMA_D16(64), FA4_WGMMA_D8(80)), "%90", \
                       "%88, %89, p, 1, 1, %91, %92", "%93", \
                       "{%88, %89, %90, %91}, %92, p, 1, 1, %94")
#define FA4_WGMMA_N192(ELEM, TY) \
  FA4_WGMMA_SPECIALIZE(192, ELEM, TY, "m64n192k16", 96, FA4_WGMMA_R96, (FA4_WGMMA_D64(0), FA4_WGMMA_D32(64)), "%98", \
                       "%96, %97, p, 1, 1, %99, %100", "%101", \
                       "{%96, %97, %98, %99}, %100, p, 1, 1, %102")
// N = 144 / 160: D = 128 key tiles between 128 and FA3's 176 (their S, 72 / 80 registers, leaves
// room for O's own staging tile, which 176 does not).
#define FA4_WGMMA_R72 FA4_WGMMA_R64 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define FA4_WGMMA_R80 FA4_WGMMA_R72 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define FA4_WGMMA_N144(ELEM, TY) \
  FA4_WGMMA_SPECIALIZE(144, ELEM, TY, "m64n144k16", 72, FA4_WGMMA_R72, (FA4_WGMMA_D64(0), FA4_WGMMA_D8(64)), "%74", \
                       "%72, %73, p, 1, 1, %75, %76", "%77", \
                       "{%72, %73, %74, %75}, %76, p, 1, 1, %78")
#define FA4_WGMMA_N160(ELEM, TY) \
  FA4_WGMMA_SPECIALIZE(160, ELEM, TY, "m64n160k16", 80, FA4_WGMMA_R80, (FA4_WGMMA_D64(0), FA4_WGMMA_D16(64)), "%82", \
                       "%80, %81, p, 1, 1, %83, %84", "%85", \
                       "{%80, %81, %82, %83}, %84, p, 1, 1, %86")
FA4_WGMMA_N144(__nv_bfloat16, "bf16")
FA4_WGMMA_N144(__half, "f16")
FA4_WGMMA_N160(__nv_bfloat16, "bf16")
FA4_WGMMA_N160(__half, "f16")
FA4_WGMMA_N64(__nv_bfloat16, "bf16")
FA4_WGMMA_N64(__half, "f16")
FA4_WGMMA_N128(__nv_bfloat16, "bf16")
FA4_WGMMA_N128(__half, "f16")
FA4_WGMMA_N256(__nv_bfloat16, "bf16")
FA4_WGMMA_N256(__half, "f16")
FA4_WGMMA_N80(__nv_bfloat16, "bf16")
FA4_WGMMA_N80(__half, "f16")
FA4_WGMMA_N176(__nv_bfloat16, "bf16")
FA4_WGMMA_N176(__half, "f16")
FA4_WGMMA_N192(__nv_bfloat16, "bf16")
FA4_WGMMA_N192(__half, "f16")
// fp8 (e4m3 x e4m3, fp32 accumulate): m64nNk32, both operands K-major only (the PTX ISA takes
// no transpose immediates for 8-bit inputs: O = P V needs V^T in shared memory, keys contiguous).
// A k32 step is 32 bytes, as a bf16 k16 step is, so the 128B-swizzled K-major tiles and their
// descriptors are the same as for 16-bit inputs with 128 fp8 elements per 128-byte row (a
// 64 x 128 fp8 tile = 4 k-steps). RS: a[4] x 4 e4m3 per thread, the mma.sync m16n8k32 A layout
// per warp: a0 = (r, c..c+3), a1 = (r+8, c..c+3), a2 = (r, c+16..c+19), a3 = (r+8, c+16..c+19)
// with r = 16*w + l/4, c = 4*(l%4), lowest byte first (device test Sm90Wgmma.Fp8).
#define FA4_WGMMA_SPECIALIZE_F8(N, ELEM, TY, SHAPE, NREG, REGS, DOUT, SS_P, SS_ARGS, RS_P, RS_ARGS)       \
  template <>                                                                                          \
  struct Wgmma<N, ELEM> {                                                                              \
    template <int TransA, int TransB>                                                                  \
    __device__ __forceinline__ static void ss(float(&d)[NREG], uint64_t desc_a, uint64_t desc_b, int scale_d) { \
      static_assert(TransA == 0 && TransB == 0, "fp8 wgmma: K-major operands only");                   \
      FA4_WGMMA_ASM(SHAPE, TY, SS_P, REGS, SS_ARGS, DOUT, "l"(desc_a), "l"(desc_b), "r"(scale_d));    \
    }                                                                                                  \
    template <int TransB>                                                                              \
    __device__ __forceinline__ static void rs(float(&d)[NREG], const uint32_t(&a)[4], uint64_t desc_b,  \
                                              int scale_d) {                                           \
      static_assert(TransB == 0, "fp8 wgmma: K-major operands only");                                  \
      FA4_WGMMA_ASM(SHAPE, TY, RS_P, REGS, RS_ARGS, DOUT, "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),      \
                    "l"(desc_b), "r"(scale_d));                                                        \
    }                                                                                                  \
  };
FA4_WGMMA_SPECIALIZE_F8(64, __nv_fp8_e4m3, "e4m3", "m64n64k32", 32, FA4_WGMMA_R32, (FA4_WGMMA_D32(0)), "%34",
                        "%32, %33, p, 1, 1", "%37", "{%32, %33, %34, %35}, %36, p, 1, 1")
FA4_WGMMA_SPECIALIZE_F8(128, __nv_fp8_e4m3, "e4m3", "m64n128k32", 64, FA4_WGMMA_R64, (FA4_WGMMA_D64(0)), "%66",
                        "%64, %65, p, 1, 1", "%69", "{%64, %65, %66, %67}, %68, p, 1, 1")
FA4_WGMMA_SPECIALIZE_F8(256, __nv_fp8_e4m3, "e4m3", "m64n256k32", 128, FA4_WGMMA_R128, (FA4_WGMMA_D128(0)), "%130",
                        "%128, %129, p, 1, 1", "%133", "{%128, %129, %130, %131}, %132, p, 1, 1")
// (the 160-key e4m3 D 64 tile, FA3's 192 x 160: Tile::fp8_long_keys at D 64)
FA4_WGMMA_SPECIALIZE_F8(160, __nv_fp8_e4m3, "e4m3", "m64n160k32", 80, FA4_WGMMA_R80, (FA4_WGMMA_D64(0), FA4_WGMMA_D16(64)),
                        "%82", "%80, %81, p, 1, 1", "%85", "{%80, %81, %82, %83}, %84, p, 1, 1")
// (224 keys, FA3's fp8 D 128 tile: FA4_SM90_FP8_LONG_KEYS_BLOCK_N_D128, measured, not the default)
#define FA4_WGMMA_R112 FA4_WGMMA_R96 ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
FA4_WGMMA_SPECIALIZE_F8(224, __nv_fp8_e4m3, "e4m3", "m64n224k32", 112, FA4_WGMMA_R112,
                        (FA4_WGMMA_D64(0), FA4_WGMMA_D32(64), FA4_WGMMA_D16(96)), "%114", "%112, %113, p, 1, 1", "%117",
                        "{%112, %113, %114, %115}, %116, p, 1, 1")
#undef FA4_WGMMA_R112
// (the 192-key e4m3 D 128 tile, Tile::fp8_long_keys)
FA4_WGMMA_SPECIALIZE_F8(192, __nv_fp8_e4m3, "e4m3", "m64n192k32", 96, FA4_WGMMA_R96, (FA4_WGMMA_D64(0), FA4_WGMMA_D32(64)),
                        "%98", "%96, %97, p, 1, 1", "%101", "{%96, %97, %98, %99}, %100, p, 1, 1")
#undef FA4_WGMMA_SPECIALIZE_F8
#undef FA4_WGMMA_N64
#undef FA4_WGMMA_N128
#undef FA4_WGMMA_N256
#undef FA4_WGMMA_N80
#undef FA4_WGMMA_N176
#undef FA4_WGMMA_N192
#undef FA4_WGMMA_N144
#undef FA4_WGMMA_N160
#undef FA4_WGMMA_R72
#undef FA4_WGMMA_R80
#undef FA4_WGMMA_R40
#undef FA4_WGMMA_R88
#undef FA4_WGMMA_R96
#undef FA4_WGMMA_SPECIALIZE
#undef FA4_WGMMA_R32
#undef FA4_WGMMA_R64
#undef FA4_WGMMA_R128
#undef FA4_WGMMA_D32
#undef FA4_WGMMA_D64
#undef FA4_WGMMA_D128
#undef FA4_WGMMA_D16
#undef FA4_WGMMA_D8
#undef FA4_WGMMA_LIST
#undef FA4_WGMMA_ASM

template <int N, typename Elem, int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  Wgmma<N, Elem>::template ss<TransA, TransB>(d, desc_a, desc_b, scale_d);
}
template <int N, typename Elem, int TransB = 0>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  Wgmma<N, Elem>::template rs<TransB>(d, a, desc_b, scale_d);
}

// Four fp32 values rounded to e4m3 (nearest even, saturating to +-448; NaN stays NaN), packed
// a, b, c, d from the lowest byte up: an 8-bit wgmma A register (cvt ... .e4m3x2.f32 puts its
// first source in the upper byte, hence the swapped operands). sm_89+.
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
  uint32_t r;
#if FA4_PTX_SM90
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(a), "f"(b), "f"(c), "f"(d));
#else
  (void)a, (void)b, (void)c, (void)d;
  r = 0;
  FA4_PTX_UNSUPPORTED();
#endif
  return r;
}

// Two e4m3 values (the low byte first) widened to fp16, packed the same way (the low byte's value
// in the low half): cvt.rn.f16x2.e4m3x2, one F2FP.F16.E4M3.UNPACK_B. Exact for every code: every
// e4m3 value (2^-9 .. 448) is a normal fp16; NaN (S.1111.111) gives a NaN. sm_89+.
__device__ __forceinline__ uint32_t cvt_f16x2_e4m3x2(uint16_t x) {
  uint32_t r;
#if FA4_PTX_SM90
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(x));
#else
  (void)x;
  r = 0;
  FA4_PTX_UNSUPPORTED();
#endif
  return r;
}

// ---------------------------------------------------------------------------------------------
// register reallocation, election, named barriers
// ---------------------------------------------------------------------------------------------

// setmaxnreg: moves registers between the warpgroups of a CTA (producer gives up, consumers
// take). Every thread of the warpgroup must execute it (.sync.aligned). The count is an
// immediate in [24, 256], a multiple of 8. .dec releases registers to the CTA's pool; .inc
// blocks until the pool can satisfy the request, so the decreasing warpgroups must run their
// .dec (and the launch must reserve enough registers in total, e.g. __launch_bounds__ with
// 1 CTA/SM) or the .inc deadlocks. Register contents above the new count are lost on .dec.
// ptxas must know the kernel's register count at entry, i.e. the kernel needs
// __launch_bounds__(threads, 1) (or maxrregcount); otherwise it drops the instruction with
// "C7508: 'setmaxnreg' ignored; unable to determine register count at entry".
template <int Regs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(Regs >= 24 && Regs <= 256 && Regs % 8 == 0, "setmaxnreg: 24..256, multiple of 8");
#if FA4_PTX_SM90A
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
#else
  FA4_PTX_UNSUPPORTED();
#endif
}
template <int Regs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(Regs >= 24 && Regs <= 256 && Regs % 8 == 0, "setmaxnreg: 24..256, multiple of 8");
#if FA4_PTX_SM90A
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
#else
  FA4_PTX_UNSUPPORTED();
#endif
}

// elect.sync: among the lanes of `member_mask` (all of them must execute it, convergently),
// exactly one gets true. Unlike `lane == 0` it needs no knowledge of which lanes are active,
// and it tells the compiler the branch is taken by one lane of a converged warp (e.g. the lane
// that issues TMA or arrives on an mbarrier for its warp).
__device__ __forceinline__ bool elect_one_sync(uint32_t member_mask = 0xFFFFFFFFu) {
#if FA4_PTX_SM90
  uint32_t pred = 0;
  asm volatile(
      "{\n.reg .b32 lane;\n.reg .pred p;\n"
      "elect.sync lane|p, %1;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(pred)
      : "r"(member_mask));
  return pred != 0;
#else
  FA4_PTX_UNSUPPORTED();
  return false;
#endif
}

// Named barriers (sm_70+, also used on sm_80): 16 per CTA, id 0 is __syncthreads'. `threads`
// counts participating threads (a multiple of 32; whole warps participate). bar.sync waits for
// `threads` arrivals including its own; bar.arrive adds this warp's arrival and continues, which
// makes producer -> consumer hand-offs and the warpgroup ping-pong schedule possible.
// Memory ordering: in the PTX memory model a bar.arrive/bar.sync synchronizes with the bar.sync
// that completes the same barrier instance, so shared-memory writes made before bar.arrive are
// visible after the waiting side's bar.sync (relied on by producer -> consumer hand-offs; the
// device test checks it in both directions).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// bar.sync that also returns the OR of every participating thread's `pred` (bar.red.or.pred):
// one thread's decision reaches the others without a shared-memory slot. (Every thread gets the
// same value, but ptxas does not know that: a branch on it can make the code after it divergent
// for ptxas -- uniform_from_lane0 below.)
__device__ __forceinline__ bool named_barrier_sync_or(uint32_t id, uint32_t threads, bool pred) {
  uint32_t r;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(threads)
      : "memory");
  return r != 0;
}
// A flag every lane of the (whole, converged) warp already holds, returned from lane 0
// (__shfl_sync), which ptxas treats as warp-uniform (as CUTLASS's canonical_warp_group_idx).
// Branching on named_barrier_sync_or's result directly made ptxas compile the consumer's whole
// key loop as divergent: every K descriptor went through vector registers and R2UR before its
// wgmma, and BRA.DIV guarded the rescale votes (the balanced D 128 instance: 46 R2UR and 3 BRA.DIV
// in the loop, 0 and 0 with this; it had run 5-6 % slower than the standard instance on the same
// walk, H100 2026-12-07).
__device__ __forceinline__ bool uniform_from_lane0(bool v) { return __shfl_sync(0xffffffffu, v ? 1u : 0u, 0) != 0; }

}  // namespace fa4::cuda::ptx
