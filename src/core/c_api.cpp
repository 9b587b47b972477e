// The C ABI (include/fa4/fa4_c.h): converts the plain C structs to the C++ ones, runs, and
// keeps the last error message per thread. No C++ exception crosses it: a C caller cannot catch
// one (it would abort the process), so every entry point that can allocate runs under guarded().
#include <cstring>
#include <new>
#include <string>

#include "fa4/fa4.h"
#include "fa4/fa4_c.h"

namespace {

thread_local std::string g_error;
thread_local std::string g_error_arg;

int record(const fa4::Status& st) {
  g_error = st.message;
  g_error_arg = st.argument;
  return static_cast<int>(st.code);
}

// record() for the exception paths, where even copying a message may fail.
int record_failure(fa4_status_code code, const char* msg) noexcept {
  g_error_arg.clear();
  try {
    g_error = msg;
  } catch (...) {
    g_error.clear();
  }
  return code;
}

// Runs an entry point; an exception becomes a status (bad_alloc: FA4_OUT_OF_MEMORY).
template <typename F>
int guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return record_failure(FA4_OUT_OF_MEMORY, "out of host memory");
  } catch (...) {
    return record_failure(FA4_INTERNAL, "internal error: unexpected C++ exception");
  }
}

// Enum values arrive as raw integers from other languages: reject unknown ones by name.
bool convert(const fa4_tensor& c, const char* name, fa4::TensorView* t, fa4::Status* err) {
  if (c.ndim < 0 || c.ndim > FA4_MAX_DIMS) {
    *err = fa4::Status::Invalid(name, std::string(name) + ": ndim must be in [0, 6], got " + std::to_string(c.ndim));
    return false;
  }
  if (c.ndim > 0 && (c.dtype < FA4_FLOAT32 || c.dtype > FA4_INT32)) {
    *err = fa4::Status::Invalid(name, std::string(name) + ": unknown dtype code " + std::to_string(c.dtype));
    return false;
  }
  if (c.ndim > 0 && c.device != FA4_DEVICE_CPU && c.device != FA4_DEVICE_CUDA) {
    *err = fa4::Status::Invalid(name, std::string(name) + ": unknown device code " + std::to_string(c.device));
    return false;
  }
  t->data = c.data;
  t->dtype = static_cast<fa4::DType>(c.dtype);
  t->ndim = c.ndim;
  for (int i = 0; i < FA4_MAX_DIMS; ++i) {
    t->shape[i] = i < c.ndim ? c.shape[i] : 0;
    t->stride[i] = i < c.ndim ? c.stride[i] : 0;
  }
  t->device = static_cast<fa4::DeviceType>(c.device);
  t->device_index = c.device_index;
  return true;
}

bool convert_backend(int32_t b, fa4::Backend* out, fa4::Status* err) {
  if (b < FA4_BACKEND_AUTO || b > FA4_BACKEND_CUDA) {
    *err = fa4::Status::Invalid("backend", "backend: unknown backend code " + std::to_string(b));
    return false;
  }
  *out = static_cast<fa4::Backend>(b);
  return true;
}

bool convert_params(const fa4_params* c, fa4::AttentionParams* p, fa4::Status* err) {
  if (!c) {
    *err = fa4::Status::Invalid("params", "params: null pointer");
    return false;
  }
  const std::pair<const fa4_tensor*, fa4::TensorView*> ts[] = {
      {&c->q, &p->q}, {&c->k, &p->k}, {&c->v, &p->v}, {&c->out, &p->out}, {&c->lse, &p->lse},
      {&c->sinks, &p->sinks}, {&c->q_descale, &p->q_descale}, {&c->k_descale, &p->k_descale},
      {&c->v_descale, &p->v_descale}, {&c->cu_seqlens_q, &p->cu_seqlens_q},
      {&c->cu_seqlens_k, &p->cu_seqlens_k}, {&c->seqused_k, &p->seqused_k},
      {&c->cache_seqlens, &p->cache_seqlens}, {&c->cache_batch_idx, &p->cache_batch_idx},
      {&c->page_table, &p->page_table}, {&c->k_new, &p->k_new}, {&c->v_new, &p->v_new}};
  const char* names[] = {"q", "k", "v", "out", "lse", "sinks", "q_descale", "k_descale", "v_descale",
                         "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "cache_seqlens", "cache_batch_idx",
                         "page_table", "k_new", "v_new"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i)
    if (!convert(*ts[i].first, names[i], ts[i].second, err)) return false;
  p->scale = c->scale;
  p->softcap = c->softcap;
  p->causal = c->causal != 0;
  p->window_left = c->window_left;
  p->window_right = c->window_right;
  p->chunk_size = c->chunk_size;
  p->max_seqlen_q = c->max_seqlen_q;
  p->max_seqlen_k = c->max_seqlen_k;
  p->num_splits = c->num_splits;
  p->num_threads = c->num_threads;
  p->stream = c->stream;
  p->workspace = c->workspace;
  p->workspace_bytes = c->workspace_bytes;
  p->workspace_alloc = c->workspace_alloc;
  p->workspace_free = c->workspace_free;
  p->workspace_ctx = c->workspace_ctx;
  return convert_backend(c->backend, &p->backend, err);
}

}  // namespace

extern "C" {

void fa4_params_init(fa4_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof(*p));
  p->window_left = -1;
  p->window_right = -1;
}

void fa4_combine_params_init(fa4_combine_params* p) {
  if (p) std::memset(p, 0, sizeof(*p));
}

int fa4_attention_forward(const fa4_params* c) {
  return guarded([&] {
    fa4::AttentionParams p;
    fa4::Status err;
    if (!convert_params(c, &p, &err)) return record(err);
    return record(fa4::attention_forward(p));
  });
}

int fa4_combine_partials(const fa4_combine_params* c) {
  return guarded([&] {
    fa4::Status err;
    if (!c) return record(fa4::Status::Invalid("params", "params: null pointer"));
    fa4::CombineParams p;
    if (!convert(c->out_partials, "out_partials", &p.out_partials, &err) ||
        !convert(c->lse_partials, "lse_partials", &p.lse_partials, &err) ||
        !convert(c->out, "out", &p.out, &err) || !convert(c->lse, "lse", &p.lse, &err) ||
        !convert_backend(c->backend, &p.backend, &err))
      return record(err);
    p.num_threads = c->num_threads;
    p.stream = c->stream;
    return record(fa4::combine_partials(p));
  });
}

size_t fa4_attention_workspace_size(const fa4_params* c) {
  try {
    fa4::AttentionParams p;
    fa4::Status err;
    if (!convert_params(c, &p, &err)) return 0;
    return fa4::attention_workspace_size(p);
  } catch (...) {  // no status to return: 0 = "no scratch", and the forward call reports the error
    return 0;
  }
}

int fa4_backend_available(int backend) {
  if (backend < FA4_BACKEND_AUTO || backend > FA4_BACKEND_CUDA) return 0;
  try {
    return fa4::backend_available(static_cast<fa4::Backend>(backend)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

size_t fa4_backend_info(char* buf, size_t cap) {
  std::string s;
  try {
    for (const auto& b : fa4::backend_info())
      s += std::string(fa4::backend_name(b.backend)) + ": " + (b.available ? "available" : "unavailable") + " (" + b.detail + ")\n";
  } catch (...) {  // out of memory: report nothing rather than abort the caller
    s.clear();
  }
  if (buf && cap > 0) {
    const size_t n = s.size() < cap - 1 ? s.size() : cap - 1;
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return s.size();
}

const char* fa4_last_error(void) { return g_error.c_str(); }
const char* fa4_last_error_argument(void) { return g_error_arg.c_str(); }
const char* fa4_version(void) { return fa4::version(); }

}  // extern "C"
