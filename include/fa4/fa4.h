// fa4: exact attention, forward pass.  O = softmax(scale * Q K^T + mask) V
//
//   #include <fa4/fa4.h>
//   fa4::AttentionParams p;
//   p.q = fa4::TensorView::contiguous(q, fa4::DType::bfloat16, {B, S, H, D});
//   ...                                    // k, v, out likewise; features are fields of p
//   fa4::Status st = fa4::attention_forward(p);
//   if (!st) fprintf(stderr, "%s\n", st.message.c_str());
//
// Every call validates all arguments before any backend runs; on failure no output byte has
// been written and the Status names the offending argument.
#pragma once

#include <string>
#include <vector>

#include "fa4/params.h"
#include "fa4/status.h"
#include "fa4/tensor.h"

namespace fa4 {

// The forward pass. Writes `out` (and `lse` if given; and appends k_new/v_new to the cache).
Status attention_forward(const AttentionParams& params);

// Merges split-KV (or ring / context-parallel / cascade) partial results:
//   lse = log sum_s exp(lse_s),   O = sum_s exp(lse_s - lse) * O_s
//   out_partials fp32 [S, B, Sq, H, Dv]   lse_partials fp32 [S, B, H, Sq]
//   out          [B, Sq, H, Dv] (fp32/fp16/bf16)   lse fp32 [B, H, Sq] (optional)
// A row whose partial lse are all -inf yields O = 0, lse = -inf.
struct CombineParams {
  TensorView out_partials, lse_partials;
  TensorView out, lse;
  Backend backend = Backend::automatic;
  int32_t num_threads = 0;
  void* stream = nullptr;
};
Status combine_partials(const CombineParams& params);

// What attention_forward would run for these params: the backend and, within it, the kernel, tile
// and split count its planner picks (for logs, benchmark records and tests that must know which
// code path ran). Validates and checks exactly like attention_forward -- the same Status for bad
// params or an unavailable / unsupported backend -- and writes nothing.
struct PlanInfo {
  Backend backend = Backend::automatic;  // resolved: reference, cpu or cuda
  std::string kernel;  // cuda: "sm90", "sm80", "simt"; cpu: its ISA ("avx2", "generic"); reference: "fp64"
  int64_t tile_m = 0;  // query rows per tile ((row, head) pairs with PackGQA); 0 = untiled (reference)
  int64_t tile_n = 0;  // keys per tile
  bool pack_gqa = false;  // the query heads of one kv head share tiles
  int32_t splits = 1;     // KV splits (1 = none)
  bool staged = false;    // cuda: rows that break the kernels' 16-byte rules ran on aligned copies
};
Status describe_plan(const AttentionParams& params, PlanInfo* info);

// Bytes of scratch the cuda backend needs with these params (0 if none): split-KV partials, the
// transposed v of an all-fp8 call on the sm90 kernel, and aligned copies of tensors whose rows
// break the GPU kernels' 16-byte rules (PlanInfo::staged).
size_t attention_workspace_size(const AttentionParams& params);

// What this build and machine can run.
struct BackendInfo {
  Backend backend;
  bool available;
  std::string detail;  // e.g. "AVX2+FMA, 2 threads" or "NVIDIA H200, sm_90, kernels: sm90 sm80"
};
std::vector<BackendInfo> backend_info();
bool backend_available(Backend b);

const char* version();

}  // namespace fa4
