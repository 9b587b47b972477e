// Host-side TMA descriptor (CUtensorMap) encoding for the sm_90a kernels.
//
// cuTensorMapEncodeTiled is a driver API function. The library does not link libcuda (DESIGN
// §3: the CPU build and the library must load without a GPU driver), so the function is looked
// up at run time through the runtime's cudaGetDriverEntryPointByVersion and cached. Encoding is
// a host-only operation (no device work, no context needed beyond an initialised runtime); the
// 128-byte result is passed to kernels by value as a `const __grid_constant__ CUtensorMap`.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums only (types; nothing here links libcuda)

#include <cstdint>
#include <string>

namespace fa4::cuda {

enum class TmaElem { bf16, f16, f32, u8 };  // (u8: e4m3 bytes, moved as they are)
constexpr uint32_t elem_bytes(TmaElem e) { return e == TmaElem::f32 ? 4u : e == TmaElem::u8 ? 1u : 2u; }
enum class TmaSwizzle { none, b32, b64, b128 };

// One tiled tensor map. dims/box are innermost-first (dims[0] is the contiguous dimension);
// strides_bytes[i] is the byte stride of dimension i + 1 (dimension 0 is contiguous by
// definition). Hardware limits, checked before calling the driver (which would otherwise
// return an anonymous CUDA_ERROR_INVALID_VALUE):
//   rank 1..5; global address 16-byte aligned; every stride a multiple of 16 and < 2^40;
//   every dim in 1..2^32; every box dim in 1..256; box[0] * element size a multiple of
//   16 bytes; with swizzle, box[0] * element size <= the swizzle span (32/64/128 bytes).
struct TmaTiledDesc {
  const void* base = nullptr;
  TmaElem elem = TmaElem::bf16;
  int rank = 2;
  uint64_t dims[5] = {};
  uint64_t strides_bytes[4] = {};
  uint32_t box[5] = {};
  TmaSwizzle swizzle = TmaSwizzle::b128;
};

// Encodes `desc` into *out. On failure returns false and, if `error` is given, says which
// argument broke which rule (or what the driver lookup / driver call returned).
bool encode_tma_tiled(CUtensorMap* out, const TmaTiledDesc& desc, std::string* error = nullptr);

// The common case of the attention kernels: a 16-bit row-major [rows, cols] matrix with a row
// stride of `row_stride_elems` elements, loaded as [box_rows, 64]-element boxes with 128-byte
// swizzle (64 elements * 2 bytes = one 128-byte swizzle row; a head dim of 128 or 256 is loaded
// as 2 or 4 such boxes at column offsets 0, 64, ...). box_rows in 1..256.
bool encode_tma_2d_sw128(CUtensorMap* out, const void* base, TmaElem elem, uint64_t rows, uint64_t cols,
                         uint64_t row_stride_elems, uint32_t box_rows, std::string* error = nullptr);

}  // namespace fa4::cuda
