#include "cuda/common/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#include <mutex>

namespace fa4::cuda {
namespace {

bool fail(std::string* error, std::string msg) {
  if (error) *error = std::move(msg);
  return false;
}

// cuTensorMapEncodeTiled has had one ABI since CUDA 12.0; asking for that version keeps the
// lookup valid on any driver >= 12.0 whatever the toolkit used to build.
PFN_cuTensorMapEncodeTiled_v12000 encode_fn(std::string* error) {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::string why;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess) {
      why = std::string("cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled): ") + cudaGetErrorString(e);
    } else if (q != cudaDriverEntryPointSuccess || !p) {
      why = q == cudaDriverEntryPointVersionNotSufficent
                ? "cuTensorMapEncodeTiled: the installed driver is older than CUDA 12.0"
                : "cuTensorMapEncodeTiled: symbol not found in the driver";
    } else {
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
  });
  if (!fn && error) *error = why;
  return fn;
}

CUtensorMapDataType data_type(TmaElem e) {
  switch (e) {
    case TmaElem::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case TmaElem::f16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case TmaElem::f32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case TmaElem::u8: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  }
  return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

uint32_t swizzle_span(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::none: return 0;
    case TmaSwizzle::b32: return 32;
    case TmaSwizzle::b64: return 64;
    case TmaSwizzle::b128: return 128;
  }
  return 0;
}

CUtensorMapSwizzle swizzle_enum(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::none: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case TmaSwizzle::b32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case TmaSwizzle::b64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case TmaSwizzle::b128: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

}  // namespace

bool encode_tma_tiled(CUtensorMap* out, const TmaTiledDesc& d, std::string* error) {
  if (!out) return fail(error, "tensor map: out is null");
  if (d.rank < 1 || d.rank > 5) return fail(error, "tensor map: rank " + std::to_string(d.rank) + " not in 1..5");
  if (!d.base || reinterpret_cast<uintptr_t>(d.base) % 16 != 0)
    return fail(error, "tensor map: global address must be non-null and 16-byte aligned");
  const uint32_t eb = elem_bytes(d.elem);
  for (int i = 0; i < d.rank; ++i) {
    const std::string dim = "dimension " + std::to_string(i);
    if (d.dims[i] < 1 || d.dims[i] > (uint64_t(1) << 32))
      return fail(error, "tensor map: " + dim + " size " + std::to_string(d.dims[i]) + " not in 1..2^32");
    if (d.box[i] < 1 || d.box[i] > 256)
      return fail(error, "tensor map: " + dim + " box " + std::to_string(d.box[i]) + " not in 1..256");
    if (i > 0) {
      const uint64_t s = d.strides_bytes[i - 1];
      if (s % 16 != 0 || s >= (uint64_t(1) << 40))
        return fail(error, "tensor map: " + dim + " stride " + std::to_string(s) +
                               " bytes must be a multiple of 16 and < 2^40");
    }
  }
  const uint32_t inner = d.box[0] * eb;
  if (inner % 16 != 0)
    return fail(error, "tensor map: inner box " + std::to_string(inner) + " bytes must be a multiple of 16");
  const uint32_t span = swizzle_span(d.swizzle);
  if (span && inner > span)
    return fail(error, "tensor map: inner box " + std::to_string(inner) + " bytes exceeds the " +
                           std::to_string(span) + "-byte swizzle span");

  auto fn = encode_fn(error);
  if (!fn) return false;
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], estrides[5];
  for (int i = 0; i < d.rank; ++i) {
    dims[i] = d.dims[i];
    box[i] = d.box[i];
    estrides[i] = 1;  // dense boxes (element stride > 1 is for strided sub-sampling)
    if (i > 0) strides[i - 1] = d.strides_bytes[i - 1];
  }
  // L2 promotion 128B: TMA fetches whole 128-byte lines, matching the 128-byte box rows.
  // OOB fill NONE: out-of-bound elements are written as zeros (the NaN fill is for fp32 only
  // and would poison masked rows).
  const CUresult r = fn(out, data_type(d.elem), static_cast<cuuint32_t>(d.rank), const_cast<void*>(d.base), dims,
                        strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_enum(d.swizzle),
                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return fail(error, "cuTensorMapEncodeTiled returned CUresult " + std::to_string(int(r)));
  return true;
}

bool encode_tma_2d_sw128(CUtensorMap* out, const void* base, TmaElem elem, uint64_t rows, uint64_t cols,
                         uint64_t row_stride_elems, uint32_t box_rows, std::string* error) {
  if (elem == TmaElem::f32 || elem == TmaElem::u8)
    return fail(error, "encode_tma_2d_sw128: 16-bit elements only (bf16/f16)");
  if (row_stride_elems < cols) return fail(error, "encode_tma_2d_sw128: row stride smaller than the row");
  TmaTiledDesc d;
  d.base = base;
  d.elem = elem;
  d.rank = 2;
  d.dims[0] = cols;
  d.dims[1] = rows;
  d.strides_bytes[0] = row_stride_elems * 2;
  d.box[0] = 64;  // 64 x 2 bytes = the 128-byte swizzle span
  d.box[1] = box_rows;
  d.swizzle = TmaSwizzle::b128;
  return encode_tma_tiled(out, d, error);
}

}  // namespace fa4::cuda
