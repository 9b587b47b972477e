// Strided <-> packed row copies on the device: the staging of tensors whose rows break the
// attention kernels' 16-byte rules (cuda/stage_rows.h). A tensor is seen as `rows` rows of `d`
// elements; the strided side addresses row r through its leading-dim strides, the packed side
// at r * pitch (pitch >= d, its pad columns written as zeros by a gather).
#pragma once

#include <cstdint>

namespace fa4::cuda {

struct RowCopy {
  const void* src = nullptr;
  void* dst = nullptr;
  int32_t lead = 0;                  // leading dims (the tensor's rank - 1), 1 .. 4
  int64_t shape[4] = {1, 1, 1, 1};   // leading-dim extents
  int64_t stride[4] = {0, 0, 0, 0};  // strided side, elements
  int64_t last_stride = 1;           // strided side, elements between a row's elements
  int64_t d = 0;                     // elements per row
  int64_t pitch = 0;                 // packed side, elements between rows
  int64_t rows = 0;                  // product of shape
  int32_t elem = 2;                  // element bytes: 1, 2 or 4
  bool gather = true;                // strided -> packed (pads zeroed); false: packed -> strided
};

#if defined(__CUDACC__)
#define FA4_ROW_WALK_FN __host__ __device__ __forceinline__
#else
#define FA4_ROW_WALK_FN inline
#endif

// The strided side's offset of consecutive rows: the digits of row r0 in the leading shape
// (innermost last) by int64 division once, then each next() advances them by carry -- adds and
// compares. (A ~70-instruction int64 division six times per row cost the device copy more than
// the row's bytes.) Host and device: the CPU tests check it against the divisions.
struct RowWalk {
  int64_t digit[4] = {0, 0, 0, 0};
  int64_t offset = 0;  // strided side, elements, of the current row's first element
  FA4_ROW_WALK_FN RowWalk(const RowCopy& c, int64_t r0) {
    int64_t rest = r0;
    for (int i = c.lead - 1; i >= 0; --i) {
      digit[i] = rest % c.shape[i];
      offset += digit[i] * c.stride[i];
      rest /= c.shape[i];
    }
  }
  FA4_ROW_WALK_FN void next(const RowCopy& c) {
    for (int i = c.lead - 1; i >= 0; --i) {
      offset += c.stride[i];
      if (++digit[i] < c.shape[i]) return;
      offset -= digit[i] * c.stride[i];  // wrapped: this digit back to 0, carry outwards
      digit[i] = 0;
    }
  }
};

// Enqueues the copy on `stream` (a cudaStream_t); returns the launch's cudaError_t as an int
// (0: success), so this header needs no CUDA headers (the planner's CPU tests include it).
int launch_row_copy(const RowCopy& c, void* stream);

}  // namespace fa4::cuda
