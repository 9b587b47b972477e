// Typed element access for the host backends: load any storage dtype as float/double, store
// float into any output dtype.
#pragma once

#include <cstdint>

#include "core/numeric.h"
#include "fa4/tensor.h"

namespace fa4::core {

inline float load_f32(const void* base, int64_t off, DType t) {
  switch (t) {
    case DType::float32: return static_cast<const float*>(base)[off];
    case DType::float16: return f16_to_f32(static_cast<const uint16_t*>(base)[off]);
    case DType::bfloat16: return bf16_to_f32(static_cast<const uint16_t*>(base)[off]);
    case DType::float8_e4m3: return e4m3_to_f32(static_cast<const uint8_t*>(base)[off]);
    case DType::int32: return static_cast<float>(static_cast<const int32_t*>(base)[off]);
  }
  return 0.0f;
}

inline void store_f32(void* base, int64_t off, DType t, float x) {
  switch (t) {
    case DType::float32: static_cast<float*>(base)[off] = x; break;
    case DType::float16: static_cast<uint16_t*>(base)[off] = f32_to_f16(x); break;
    case DType::bfloat16: static_cast<uint16_t*>(base)[off] = f32_to_bf16(x); break;
    case DType::float8_e4m3: static_cast<uint8_t*>(base)[off] = f32_to_e4m3(x); break;
    case DType::int32: static_cast<int32_t*>(base)[off] = static_cast<int32_t>(x); break;
  }
}

}  // namespace fa4::core
