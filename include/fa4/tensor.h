// fa4 public API: non-owning tensor views.
//
// A TensorView describes memory the caller owns: pointer, element type, int64 shape and
// strides counted in elements (not bytes), and the device the pointer lives on. Any strides are
// accepted by the CPU backends; GPU paths additionally need the last dimension contiguous and
// 16-byte aligned rows (validation names the tensor that is not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace fa4 {

inline constexpr int kMaxDims = 6;

enum class DType : int32_t {
  float32 = 0,
  float16 = 1,
  bfloat16 = 2,
  float8_e4m3 = 3,  // OCP e4m3fn: no infinities, 0x7f/0xff are NaN, max finite 448
  int32 = 4,        // index tensors: cu_seqlens, cache_seqlens, page_table, ...
};

enum class DeviceType : int32_t { cpu = 0, cuda = 1 };

// Size of one element in bytes.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::float32: return 4;
    case DType::float16: return 2;
    case DType::bfloat16: return 2;
    case DType::float8_e4m3: return 1;
    case DType::int32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::float32;
  int32_t ndim = 0;  // 0 = "not given" (every optional argument starts that way)
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};  // in elements
  DeviceType device = DeviceType::cpu;
  int32_t device_index = 0;

  bool present() const { return ndim > 0; }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }

  // A row-major (C-contiguous) view over `data`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               DeviceType device = DeviceType::cpu, int32_t device_index = 0) {
    TensorView t;
    t.data = data;
    t.dtype = dtype;
    t.ndim = static_cast<int32_t>(shape.size());
    int i = 0;
    for (int64_t s : shape) t.shape[i++] = s;
    int64_t st = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      t.stride[d] = st;
      st *= t.shape[d];
    }
    t.device = device;
    t.device_index = device_index;
    return t;
  }
};

}  // namespace fa4
