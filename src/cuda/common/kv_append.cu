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

template <typename Word>
__global__ void kv_append_kernel(const __grid_constant__ FwdArgs p, const __grid_constant__ AppendArgs ka,
                                 const __grid_constant__ AppendArgs va) {
  const int64_t per_b_k = static_cast<int64_t>(p.snew) * p.hkv * ka.d;
  const int64_t per_b_v = static_cast<int64_t>(p.snew) * p.hkv * va.d;
  const int64_t total = static_cast<int64_t>(p.batch) * (per_b_k + per_b_v);
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool is_k = x < p.batch * per_b_k;
    const AppendArgs& a = is_k ? ka : va;
    const int64_t y = is_k ? x : x - p.batch * per_b_k;
    const int64_t per_b = is_k ? per_b_k : per_b_v;
    const int32_t b = static_cast<int32_t>(y / per_b);
    int64_t rem = y % per_b;
    const int32_t d = static_cast<int32_t>(rem % a.d);
    rem /= a.d;
    const int32_t h = static_cast<int32_t>(rem % p.hkv);
    const int32_t row = static_cast<int32_t>(rem / p.hkv);
    const int64_t pos = static_cast<int64_t>(p.cache_seqlens[b * p.cache_seqlens_st]) + row;
    if (pos < 0 || pos >= p.kv_slot) continue;
    int64_t off;
    if (p.kv_mode == kKvPaged) {
      const int64_t pi = pos / p.page_size;
      const int64_t page = clamp64(p.page_table[b * p.pt_s0 + pi * p.pt_s1], 0, p.kv_rows0 - 1);
      off = page * a.dst_s0 + (pos - pi * p.page_size) * a.dst_s1;
    } else {
      const int64_t cb = p.cache_batch_idx ? clamp64(p.cache_batch_idx[b * p.cbi_st], 0, p.kv_rows0 - 1) : b;
      off = cb * a.dst_s0 + pos * a.dst_s1;
    }
    off += static_cast<int64_t>(h) * a.dst_sh + d;
    const int64_t so = b * a.src_s0 + row * a.src_s1 + h * a.src_sh + d;
    static_cast<Word*>(a.dst)[off] = static_cast<const Word*>(a.src)[so];
  }
}

// The fp8 KV cache append: as kv_append_kernel (same element walk and bounds), reading 16-bit
// Src and writing the e4m3 byte of x / factor. The quotient is __fdiv_rn (IEEE division:
// --use_fast_math would make `/` approximate, and a quotient off by an ulp can round to another
// code than the host backends write); its flush of fp32 subnormals changes nothing, every
// quotient below 2^-10 being stored as a (signed) zero anyway.
template <typename Src>
__global__ void kv_append_fp8_kernel(const __grid_constant__ FwdArgs p, const __grid_constant__ AppendArgs ka,
                                     const __grid_constant__ AppendArgs va, const __grid_constant__ AppendScale ks,
                                     const __grid_constant__ AppendScale vs) {
  const int64_t per_b_k = static_cast<int64_t>(p.snew) * p.hkv * ka.d;
  const int64_t per_b_v = static_cast<int64_t>(p.snew) * p.hkv * va.d;
  const int64_t total = static_cast<int64_t>(p.batch) * (per_b_k + per_b_v);
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool is_k = x < p.batch * per_b_k;
    const AppendArgs& a = is_k ? ka : va;
    const AppendScale& sc = is_k ? ks : vs;
    const int64_t y = is_k ? x : x - p.batch * per_b_k;
    const int64_t per_b = is_k ? per_b_k : per_b_v;
    const int32_t b = static_cast<int32_t>(y / per_b);
    int64_t rem = y % per_b;
    const int32_t d = static_cast<int32_t>(rem % a.d);
    rem /= a.d;
    const int32_t h = static_cast<int32_t>(rem % p.hkv);
    const int32_t row = static_cast<int32_t>(rem / p.hkv);
    const int64_t pos = static_cast<int64_t>(p.cache_seqlens[b * p.cache_seqlens_st]) + row;
    if (pos < 0 || pos >= p.kv_slot) continue;
    int64_t lead, slot;  // the row's (cache row or page, row within it)
    if (p.kv_mode == kKvPaged) {
      const int64_t pi = pos / p.page_size;
      lead = clamp64(p.page_table[b * p.pt_s0 + pi * p.pt_s1], 0, p.kv_rows0 - 1);
      slot = pos - pi * p.page_size;
    } else {
      lead = p.cache_batch_idx ? clamp64(p.cache_batch_idx[b * p.cbi_st], 0, p.kv_rows0 - 1) : b;
      slot = pos;
    }
    float f = 1.f;
    if (sc.data != nullptr)
      f = sc.data[(sc.tok ? lead * sc.s0 + slot * sc.s1 : b * sc.s0) + static_cast<int64_t>(h) * sc.sh];
    const int64_t off = lead * a.dst_s0 + slot * a.dst_s1 + static_cast<int64_t>(h) * a.dst_sh + d;
    const int64_t so = b * a.src_s0 + row * a.src_s1 + h * a.src_sh + d;
    const float v = static_cast<float>(static_cast<const Src*>(a.src)[so]);
    // The correctly rounded fp32 quotient, as the host backends compute it: through double
    // (53 >= 2 x 24 + 2 bits), which --use_fast_math does not flush (its fp32 division does:
    // 0 / a subnormal factor gave NaN here, 0 on the host).
    static_cast<uint8_t*>(a.dst)[off] = f32_to_e4m3_sat(__double2float_rn(__ddiv_rn(static_cast<double>(v), static_cast<double>(f))));
  }
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
