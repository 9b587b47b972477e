// attention_forward / combine_partials: validate once, pick the backend, run it.
#include <cmath>
#include <exception>
#include <new>
#include <string>

#include "core/backends.h"
#include "fa4/fa4.h"

// The version is defined once, by project(fa4 VERSION ...) in CMakeLists.txt.
#ifndef FA4_VERSION_STRING
#error "FA4_VERSION_STRING is set by CMakeLists.txt (project(fa4 VERSION ...))"
#endif

namespace fa4 {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::float32: return "float32";
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
    case DType::float8_e4m3: return "float8_e4m3";
    case DType::int32: return "int32";
  }
  return "unknown";
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::automatic: return "auto";
    case Backend::reference: return "reference";
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
  }
  return "unknown";
}

const char* status_code_name(StatusCode c) {
  switch (c) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::backend_unavailable: return "backend_unavailable";
    case StatusCode::device_error: return "device_error";
    case StatusCode::out_of_memory: return "out_of_memory";
    case StatusCode::internal: return "internal";
  }
  return "unknown";
}

const char* version() { return FA4_VERSION_STRING; }

namespace {
Status cuda_unavailable() {
  return Status{StatusCode::backend_unavailable, "backend", "backend: cuda is not available (" + core::cuda_info() + ")"};
}
}  // namespace

namespace {
// The public entry points never throw (DESIGN §1): the only exceptions fa4 code can meet are
// std::bad_alloc from its host containers and whatever a standard-library call throws; both
// become a Status here, once, for every backend.
template <typename F>
Status guarded(const char* what, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Status::Error(StatusCode::out_of_memory, std::string(what) + ": out of host memory");
  } catch (const std::exception& e) {
    return Status::Error(StatusCode::internal, std::string(what) + ": " + e.what());
  } catch (...) {
    return Status::Error(StatusCode::internal, std::string(what) + ": unknown exception");
  }
}

// An empty tensor (a 0 in its shape) addresses no element, so validation leaves its strides
// unbounded, yet a backend may form a base offset before it finds no rows to visit: the fuzzer
// reached b * 2^62 in the cpu backend's V row offset of a [B, 0, Hkv, D] v. The backends
// therefore only ever see 0 strides on empty tensors; the copy lives for the whole call (the
// Problem points into it).
TensorView zero_empty_strides(TensorView t) {
  if (!t.present()) return t;
  bool empty = false;
  for (int i = 0; i < t.ndim && i < kMaxDims; ++i) empty = empty || t.shape[i] == 0;
  if (empty)
    for (int i = 0; i < kMaxDims; ++i) t.stride[i] = 0;
  return t;
}

AttentionParams canonical(const AttentionParams& p) {
  AttentionParams c = p;
  for (TensorView* t : {&c.q, &c.k, &c.v, &c.out, &c.lse, &c.sinks, &c.q_descale, &c.k_descale, &c.v_descale,
                        &c.cu_seqlens_q, &c.cu_seqlens_k, &c.seqused_k, &c.cache_seqlens, &c.cache_batch_idx,
                        &c.page_table, &c.k_new, &c.v_new})
    *t = zero_empty_strides(*t);
  return c;
}

CombineParams canonical(const CombineParams& p) {
  CombineParams c = p;
  for (TensorView* t : {&c.out_partials, &c.lse_partials, &c.out, &c.lse}) *t = zero_empty_strides(*t);
  return c;
}

Status forward(const AttentionParams& raw) {
  const AttentionParams params = canonical(raw);
  core::Problem pb;
  Status st = core::normalize(params, &pb);
  if (!st) return st;
  switch (pb.backend) {
    case Backend::reference:
    case Backend::cpu:
      core::append_kv_host(pb);
      // No query rows: nothing to compute (normalize did not even fill per-sequence lengths).
      if (pb.max_sq == 0) return Status::Ok();
      return pb.backend == Backend::reference ? core::reference_forward(pb) : core::cpu_forward(pb);
    case Backend::cuda:
      if (!core::cuda_available()) return cuda_unavailable();
      st = core::cuda_check(pb);
      if (!st) return st;
      return core::cuda_forward(pb);
    default: break;
  }
  return Status::Error(StatusCode::internal, "unresolved backend");
}

Status combine(const CombineParams& raw) {
  const CombineParams params = canonical(raw);
  Backend b = Backend::cpu;
  int64_t rows = 0;
  Status st = core::validate_combine(params, &b, &rows);
  if (!st) return st;
  if (rows == 0) return Status::Ok();  // e.g. Dv = 0 without lse: nothing to write
  switch (b) {
    case Backend::reference: return core::reference_combine(params);
    case Backend::cpu: return core::cpu_combine(params);
    case Backend::cuda:
      if (!core::cuda_available()) return cuda_unavailable();
      return core::cuda_combine(params);
    default: break;
  }
  return Status::Error(StatusCode::internal, "unresolved backend");
}
}  // namespace

Status attention_forward(const AttentionParams& params) {
  return guarded("attention_forward", [&] { return forward(params); });
}

Status combine_partials(const CombineParams& params) {
  return guarded("combine_partials", [&] { return combine(params); });
}

Status describe_plan(const AttentionParams& raw, PlanInfo* info) {
  const AttentionParams params = canonical(raw);
  core::Problem pb;
  Status st = core::normalize(params, &pb);
  if (!st) return st;
  PlanInfo d;
  d.backend = pb.backend;
  switch (pb.backend) {
    case Backend::reference: core::reference_describe(pb, &d); break;
    case Backend::cpu: core::cpu_describe(pb, &d); break;
    case Backend::cuda:
      if (!core::cuda_available()) return cuda_unavailable();
      st = core::cuda_check(pb);
      if (!st) return st;
      core::cuda_describe(pb, &d);
      break;
    default: return Status::Error(StatusCode::internal, "unresolved backend");
  }
  *info = d;
  return Status::Ok();
}

size_t attention_workspace_size(const AttentionParams& raw) {
  try {
    const AttentionParams params = canonical(raw);
    core::Problem pb;
    if (!core::normalize(params, &pb).ok() || pb.backend != Backend::cuda || !core::cuda_available()) return 0;
    return core::cuda_workspace_size(pb);
  } catch (...) {  // out of memory while validating: no launch will happen either
    return 0;
  }
}

bool backend_available(Backend b) {
  switch (b) {
    case Backend::automatic:
    case Backend::reference:
    case Backend::cpu: return true;
    case Backend::cuda: return core::cuda_available();
  }
  return false;
}

std::vector<BackendInfo> backend_info() {
  return {
      {Backend::reference, true, "fp64 accumulation, every feature"},
      {Backend::cpu, true, core::cpu_info()},
      {Backend::cuda, core::cuda_available(), core::cuda_info()},
  };
}

}  // namespace fa4
