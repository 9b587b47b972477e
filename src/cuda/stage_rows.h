// Any row layout on the GPU: a problem whose q / k / v / out / k_new / v_new rows break the
// attention kernels' 16-byte rules (Problem::gpu_stage: odd head dims such as 59 or 111, slices of
// a packed qkv tensor, a non-unit last stride) runs on aligned copies. Each staged tensor is
// copied into a packed buffer whose rows are padded to 16 bytes (pad columns zero: they add
// nothing to Q K^T, and P V's pad columns land in out's pad), the same call runs on those views,
// and out is copied back (out is copied in first as well: rows no kernel writes stay the caller's). One buffer holds the copies and then the inner call's split-KV
// workspace: [copies | split-KV].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/problem.h"
#include "cuda/common/row_copy.h"

namespace fa4::cuda {

class StagedCall {
 public:
  StagedCall() = default;
  StagedCall(const StagedCall&) = delete;  // problem.p points into params
  StagedCall& operator=(const StagedCall&) = delete;

  // Lays the copies out from `base` (256-byte aligned; nullptr: a stand-in address, for sizes
  // and plans only) and normalizes the call on them. The inner call gets no workspace source of
  // its own (set_workspace gives it the buffer's tail).
  Status build(const core::Problem& pb, uint8_t* base);
  void set_workspace(void* ws, size_t bytes) { params_.workspace = ws, params_.workspace_bytes = bytes; }
  Status renormalize() { return core::normalize(params_, &problem_); }

  const core::Problem& problem() const { return problem_; }
  size_t copy_bytes() const { return copy_bytes_; }       // the copies, 256-byte multiple
  const std::vector<RowCopy>& gathers() const { return gathers_; }  // before the call (out too)
  const std::vector<RowCopy>& scatters() const { return scatters_; }  // after it (out)

 private:
  AttentionParams params_;
  core::Problem problem_;
  size_t copy_bytes_ = 0;
  std::vector<RowCopy> gathers_, scatters_;
};

}  // namespace fa4::cuda
