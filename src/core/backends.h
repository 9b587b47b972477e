// The backend entry points dispatch calls. Each backend gets a validated Problem; `check`
// functions run before anything is written (an unsupported combination must be reported
// without touching the outputs), `forward` functions then compute.
#pragma once

#include <string>

#include "core/problem.h"

namespace fa4::core {

// reference: fp64, every feature (src/reference).
Status reference_forward(const Problem& pb);
Status reference_combine(const CombineParams& c);
void reference_describe(const Problem& pb, PlanInfo* info);
// One query row (b, i, h) as reference_forward computes it (fp64): o[0..Dv) and *lse, nothing
// stored. Allocation-free and thread-safe; the cpu backend recomputes rows with it whose fp32
// scores are not finite or too large for fp32's softmax (see src/cpu/cpu_backend.cpp).
void reference_row(const Problem& pb, int64_t b, int64_t i, int64_t h, float* o, float* lse);

// cpu: tiled FlashAttention on all cores (src/cpu).
Status cpu_forward(const Problem& pb);
Status cpu_combine(const CombineParams& c);
std::string cpu_info();  // e.g. "AVX2+FMA, 2 threads"
void cpu_describe(const Problem& pb, PlanInfo* info);

// Host-side KV append (reference and cpu): copies k_new/v_new into the cache at
// cache_seqlens[b]. Called after all checks passed.
void append_kv_host(const Problem& pb);

// cuda (src/cuda); in builds without CUDA these report backend_unavailable.
bool cuda_available();
std::string cuda_info();
Status cuda_check(const Problem& pb);
Status cuda_forward(const Problem& pb);
Status cuda_combine(const CombineParams& c);
size_t cuda_workspace_size(const Problem& pb);
void cuda_describe(const Problem& pb, PlanInfo* info);  // after cuda_check passed

}  // namespace fa4::core
