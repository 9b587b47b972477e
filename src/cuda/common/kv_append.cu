// KV append kernels: one thread per element; rows are short (Snew new tokens x
// Hkv x D), so this is launch-latency bound and kept element-wise: any head dim, any stride.
// Positions that would land outside the cache (a bad device-side cache_seqlens) are skipped.
#include "cuda/common/kv_append.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/e4m3.h"
#include "cuda/common/seq_info.cuh"

namespace fa4::cuda {
namespace {

// Element x of an append's walk: every (batch, new row, kv head, dim) of k_new, then of v_new.
// Where it lands in the cache: `lead` (cache row of the sequence, or page) and `slot` (row
// within it); false where the row falls outside the cache's capacity (the element is skipped).
struct AppendElem {
  bool is_k;
  int32_t b, row, h, d;
  int64_t lead, slot;
};
__device__ __forceinline__ bool append_elem(const FwdArgs& p, const AppendArgs& ka, const AppendArgs& va, int64_t x,
                                            AppendElem* e) {
  const int64_t per_b_k = static_cast<int64_t>(p.snew) * p.hkv * ka.d;
  const int64_t per_b_v = static_cast<int64_t>(p.snew) * p.hkv * va.d;
  e->is_k = x < p.batch * per_b_k;
  const AppendArgs& a = e->is_k ? ka : va;
  const int64_t y = e->is_k ? x : x - p.batch * per_b_k;
  const int64_t per_b = e->is_k ? per_b_k : per_b_v;
  e->b = static_cast<int32_t>(y / per_b);
  int64_t rem = y % per_b;
  e->d = static_cast<int32_t>(rem % a.d);
  rem /= a.d;
  e->h = static_cast<int32_t>(rem % p.hkv);
  e->row = static_cast<int32_t>(rem / p.hkv);
  const int64_t pos = static_cast<int64_t>(p.cache_seqlens[e->b * p.cache_seqlens_st]) + e->row;
  if (pos < 0 || pos >= p.kv_slot) return false;
  if (p.kv_mode == kKvPaged) {
    const int64_t pi = pos / p.page_size;
    e->lead = clamp64(p.page_table[e->b * p.pt_s0 + pi * p.pt_s1], 0, p.kv_rows0 - 1);
    e->slot = pos - pi * p.page_size;
  } else {
    e->lead = p.cache_batch_idx ? clamp64(p.cache_batch_idx[e->b * p.cbi_st], 0, p.kv_rows0 - 1) : e->b;
    e->slot = pos;
  }
  return true;
}
__device__ __forceinline__ int64_t append_dst(const AppendArgs& a, const AppendElem& e) {
  return e.lead * a.dst_s0 + e.slot * a.dst_s1 + static_cast<int64_t>(e.h) * a.dst_sh + e.d;
}
__device__ __forceinline__ int64_t append_src(const AppendArgs& a, const AppendElem& e) {
  return e.b * a.src_s0 + static_cast<int64_t>(e.row) * a.src_s1 + static_cast<int64_t>(e.h) * a.src_sh + e.d;
}

// The grid-stride walk over every element of k_new and v_new: fn(e) for each one inside the cache.
template <class Fn>
__device__ __forceinline__ void for_each_append_elem(const FwdArgs& p, const AppendArgs& ka, const AppendArgs& va, Fn fn) {
  const int64_t total = static_cast<int64_t>(p.batch) * p.snew * p.hkv * (ka.d + va.d);
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    AppendElem e;
    if (append_elem(p, ka, va, x, &e)) fn(e);
  }
}

template <typename Word>
__global__ void kv_append_kernel(const __grid_constant__ FwdArgs p, const __grid_constant__ AppendArgs ka,
                                 const __grid_constant__ AppendArgs va) {
  for_each_append_elem(p, ka, va, [&](const AppendElem& e) {
    const AppendArgs& a = e.is_k ? ka : va;
    static_cast<Word*>(a.dst)[append_dst(a, e)] = static_cast<const Word*>(a.src)[append_src(a, e)];
  });
}

// The fp8 KV cache append: as kv_append_kernel (same element walk and bounds), reading 16-bit
// Src and writing the e4m3 byte of x / factor, the factor of the row's slot (per head or per
// token). The quotient must be the host backends' correctly rounded one: a quotient off by an ulp
// can round to another e4m3 code (--use_fast_math makes `/` approximate).
template <typename Src>
__global__ void kv_append_fp8_kernel(const __grid_constant__ FwdArgs p, const __grid_constant__ AppendArgs ka,
                                     const __grid_constant__ AppendArgs va, const __grid_constant__ AppendScale ks,
                                     const __grid_constant__ AppendScale vs) {
  for_each_append_elem(p, ka, va, [&](const AppendElem& e) {
    const AppendArgs& a = e.is_k ? ka : va;
    const AppendScale& sc = e.is_k ? ks : vs;
    float f = 1.f;
    if (sc.data != nullptr)
      f = sc.data[(sc.tok ? e.lead * sc.s0 + e.slot * sc.s1 : e.b * sc.s0) + static_cast<int64_t>(e.h) * sc.sh];
    const float v = static_cast<float>(static_cast<const Src*>(a.src)[append_src(a, e)]);
    // The correctly rounded fp32 quotient, as the host backends compute it: through double
    // (53 >= 2 x 24 + 2 bits), which --use_fast_math does not flush (its fp32 division does:
    // 0 / a subnormal factor gave NaN here, 0 on the host).
    static_cast<uint8_t*>(a.dst)[append_dst(a, e)] =
        f32_to_e4m3_sat(__double2float_rn(__ddiv_rn(static_cast<double>(v), static_cast<double>(f))));
  });
}

}  // namespace

cudaError_t launch_kv_append_fp8(const FwdArgs& p, const AppendArgs& k, const AppendArgs& v, const AppendScale& ks,
                                 const AppendScale& vs, bool bf16, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(p.batch) * p.snew * p.hkv * (k.d + v.d);
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t want = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 4096 ? want : 4096);
  if (bf16)
    kv_append_fp8_kernel<__nv_bfloat16><<<blocks, threads, 0, stream>>>(p, k, v, ks, vs);
  else
    kv_append_fp8_kernel<__half><<<blocks, threads, 0, stream>>>(p, k, v, ks, vs);
  return cudaGetLastError();
}

cudaError_t launch_kv_append(const FwdArgs& p, const AppendArgs& k, const AppendArgs& v, int elem_bytes,
                             cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(p.batch) * p.snew * p.hkv * (k.d + v.d);
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t want = (total + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 4096 ? want : 4096);
  if (elem_bytes == 1)  // all-fp8: e4m3 rows into an e4m3 cache, copied as bytes
    kv_append_kernel<uint8_t><<<blocks, threads, 0, stream>>>(p, k, v);
  else if (elem_bytes == 2)
    kv_append_kernel<uint16_t><<<blocks, threads, 0, stream>>>(p, k, v);
  else
    kv_append_kernel<uint32_t><<<blocks, threads, 0, stream>>>(p, k, v);
  return cudaGetLastError();
}

}  // namespace fa4::cuda
