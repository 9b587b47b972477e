// Overflow-checked int64 arithmetic for every size, offset and extent computed from caller
// input (shapes, strides, index-tensor contents). A hostile or mistaken caller can pass any
// int64, so no such product or sum may be formed with plain operators: signed overflow is
// undefined behaviour, and a wrapped result has let out-of-bounds accesses pass validation.
// Each helper returns false (and leaves *r unspecified) when the exact result does not fit.
#pragma once

#include <cstdint>

#include "fa4/tensor.h"

namespace fa4::core {

[[nodiscard]] inline bool checked_add(int64_t a, int64_t b, int64_t* r) { return !__builtin_add_overflow(a, b, r); }
[[nodiscard]] inline bool checked_mul(int64_t a, int64_t b, int64_t* r) { return !__builtin_mul_overflow(a, b, r); }

// Number of elements of t (the product of its shape), or false if it does not fit.
[[nodiscard]] inline bool checked_numel(const TensorView& t, int64_t* n) {
  int64_t acc = 1;
  for (int i = 0; i < t.ndim; ++i)
    if (!checked_mul(acc, t.shape[i], &acc)) return false;
  *n = acc;
  return true;
}

// Largest element offset of a non-empty t with non-negative shapes and strides:
// sum_i (shape[i] - 1) * stride[i], or false if it does not fit.
[[nodiscard]] inline bool checked_last_offset(const TensorView& t, int64_t* last) {
  int64_t acc = 0, term = 0;
  for (int i = 0; i < t.ndim; ++i)
    if (!checked_mul(t.shape[i] - 1, t.stride[i], &term) || !checked_add(acc, term, &acc)) return false;
  *last = acc;
  return true;
}

}  // namespace fa4::core
