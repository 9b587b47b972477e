// fa4's XLA FFI handlers (fa4.jax): the forward pass as an XLA custom call, so that fa4 runs
// inside jax.jit on XLA's own buffers -- no copy through NumPy, on the stream XLA gives.
//
// Built into the extension (fa4._fa4) only when jaxlib's XLA FFI headers were found at build
// time (python/CMakeLists.txt: FA4_JAX, FA4_JAX_INCLUDE_DIR); the headers are jaxlib's
// (jax.ffi.include_dir()), not vendored. fa4/jax.py registers the handlers with
// jax.ffi.register_ffi_target and builds the calls with jax.ffi.ffi_call.
//
// One target, "fa4_fwd", per platform ("cpu": host buffers; "CUDA": device buffers, XLA's
// stream and device ordinal). Its operands, all row-major (ffi_call's default layout):
//   q, k, v, then the optional tensors that `present` (a bit mask, bit i = kOptional[i]) says
//   were given, in kOptional's order;
// its results: out, then lse if `has_lse`, then the updated k / v caches if `append` (aliased by
// ffi_call's input_output_aliases to the k / v operands: the append writes into them in place).
// Scalar options are FFI attributes with fa4's field names. A bad argument is an FFI error
// (INVALID_ARGUMENT, ...) whose message is the library's own line naming the argument; no C++
// exception leaves a handler.
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <tuple>

#include <Python.h>

#include "fa4/fa4.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// The optional operands, in the order of the `present` bits (fa4/jax.py: _OPTIONAL).
constexpr const char* kOptional[] = {"sinks",        "q_descale",     "k_descale",       "v_descale",
                                     "cu_seqlens_q", "cu_seqlens_k",  "seqused_k",       "cache_seqlens",
                                     "cache_batch_idx", "page_table", "k_new",           "v_new"};
constexpr int kNumOptional = sizeof(kOptional) / sizeof(kOptional[0]);

ffi::Error bad(const char* name, const std::string& what) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, std::string("fa4: ") + name + ": " + what);
}

// An XLA buffer as an fa4 tensor view (row-major strides).
ffi::Error view(const ffi::AnyBuffer& b, const char* name, fa4::DeviceType dev, int32_t dev_idx,
                fa4::TensorView* t) {
  switch (b.element_type()) {
    case ffi::DataType::F32: t->dtype = fa4::DType::float32; break;
    case ffi::DataType::F16: t->dtype = fa4::DType::float16; break;
    case ffi::DataType::BF16: t->dtype = fa4::DType::bfloat16; break;
    case ffi::DataType::F8E4M3FN: t->dtype = fa4::DType::float8_e4m3; break;
    case ffi::DataType::S32: t->dtype = fa4::DType::int32; break;
    default:
      return bad(name, "unsupported dtype (fa4 takes float32, float16, bfloat16, float8_e4m3fn tensors and int32 "
                       "index tensors)");
  }
  const auto dims = b.dimensions();
  if (dims.size() == 0) return bad(name, "expected a tensor with at least one dimension, got a 0-d tensor");
  if (dims.size() > static_cast<size_t>(fa4::kMaxDims))
    return bad(name, std::to_string(dims.size()) + "-d tensors are not supported (at most 6 dims)");
  t->ndim = static_cast<int32_t>(dims.size());
  int64_t st = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    t->shape[d] = dims[d];
    t->stride[d] = st;
    st *= dims[d] > 0 ? dims[d] : 1;
  }
  t->data = b.untyped_data();
  t->device = dev;
  t->device_index = dev_idx;
  // XLA gives zero-size buffers no storage; fa4 wants a pointer (it reads nothing from it).
  if (t->data == nullptr && b.element_count() == 0) {
    alignas(16) static unsigned char empty[16];
    t->data = empty;
  }
  return ffi::Error::Success();
}

ffi::ErrorCode code_of(fa4::StatusCode c) {
  switch (c) {
    case fa4::StatusCode::invalid_argument: return ffi::ErrorCode::kInvalidArgument;
    case fa4::StatusCode::unsupported: return ffi::ErrorCode::kUnimplemented;
    case fa4::StatusCode::backend_unavailable: return ffi::ErrorCode::kUnavailable;
    case fa4::StatusCode::out_of_memory: return ffi::ErrorCode::kResourceExhausted;
    case fa4::StatusCode::device_error:
    case fa4::StatusCode::internal:
    default: return ffi::ErrorCode::kInternal;
  }
}

struct Options {
  int64_t present;
  bool has_lse, append, causal;
  int64_t window_left, window_right, chunk_size, max_seqlen_q, max_seqlen_k;
  float softcap, scale;
  int32_t num_splits, backend, num_threads;
};

ffi::Error forward(fa4::DeviceType dev, int32_t dev_idx, void* stream, const ffi::RemainingArgs& args,
                   const ffi::RemainingRets& rets, const Options& o) {
  fa4::AttentionParams p;
  auto arg = [&](size_t i, const char* name, fa4::TensorView* t) -> ffi::Error {
    auto b = args.get<ffi::AnyBuffer>(i);
    if (b.has_error()) return bad(name, "missing operand (" + b.error().message() + ")");
    return view(b.value(), name, dev, dev_idx, t);
  };
  auto ret = [&](size_t i, const char* name, fa4::TensorView* t) -> ffi::Error {
    auto b = rets.get<ffi::AnyBuffer>(i);
    if (b.has_error()) return bad(name, "missing result (" + b.error().message() + ")");
    return view(*b.value(), name, dev, dev_idx, t);
  };
  if (o.present < 0 || o.present >= (int64_t{1} << kNumOptional)) return bad("present", "bad operand mask");
  size_t want = 3;
  for (int i = 0; i < kNumOptional; ++i) want += (o.present >> i) & 1;
  if (args.size() != want)
    return bad("present", "expected " + std::to_string(want) + " operands, got " + std::to_string(args.size()));
  const size_t want_rets = 1 + (o.has_lse ? 1 : 0) + (o.append ? 2 : 0);
  if (rets.size() != want_rets)
    return bad("out", "expected " + std::to_string(want_rets) + " results, got " + std::to_string(rets.size()));

  if (auto e = arg(0, "q", &p.q); e.failure()) return e;
  if (auto e = arg(1, o.append ? "k_cache" : "k", &p.k); e.failure()) return e;
  if (auto e = arg(2, o.append ? "v_cache" : "v", &p.v); e.failure()) return e;
  fa4::TensorView* slot[kNumOptional] = {&p.sinks,        &p.q_descale,    &p.k_descale,       &p.v_descale,
                                         &p.cu_seqlens_q, &p.cu_seqlens_k, &p.seqused_k,       &p.cache_seqlens,
                                         &p.cache_batch_idx, &p.page_table, &p.k_new,          &p.v_new};
  size_t next = 3;
  for (int i = 0; i < kNumOptional; ++i) {
    if (!((o.present >> i) & 1)) continue;
    if (auto e = arg(next++, kOptional[i], slot[i]); e.failure()) return e;
  }
  size_t r = 0;
  if (auto e = ret(r++, "out", &p.out); e.failure()) return e;
  if (o.has_lse)
    if (auto e = ret(r++, "lse", &p.lse); e.failure()) return e;
  if (o.append) {
    // The caches are results aliased to the k / v operands (input_output_aliases): the append
    // writes into the result buffers, which XLA gives the operands' contents.
    fa4::TensorView kc, vc;
    if (auto e = ret(r++, "k_cache", &kc); e.failure()) return e;
    if (auto e = ret(r++, "v_cache", &vc); e.failure()) return e;
    for (auto [res, in, name] : {std::tuple{&kc, &p.k, "k_cache"}, std::tuple{&vc, &p.v, "v_cache"}}) {
      if (res->data != in->data) {
        if (dev != fa4::DeviceType::cpu)
          return ffi::Error(ffi::ErrorCode::kInternal, std::string("fa4: ") + name + ": the cache result is not aliased to its operand");
        const size_t bytes = static_cast<size_t>(in->numel()) * fa4::dtype_size(in->dtype);
        if (bytes) std::memcpy(res->data, in->data, bytes);
      }
      *in = *res;
    }
  }
  p.scale = o.scale;
  p.softcap = o.softcap;
  p.causal = o.causal;
  p.window_left = o.window_left;
  p.window_right = o.window_right;
  p.chunk_size = o.chunk_size;
  p.max_seqlen_q = o.max_seqlen_q;
  p.max_seqlen_k = o.max_seqlen_k;
  p.num_splits = o.num_splits;
  if (o.backend < 0 || o.backend > 3) return bad("backend", "must be 'auto', 'cpu', 'cuda' or 'reference'");
  p.backend = static_cast<fa4::Backend>(o.backend);
  if (o.num_threads < 0) return bad("num_threads", "must be >= 0");
  unsigned hw = std::thread::hardware_concurrency();
  if (hw == 0) hw = 256;
  p.num_threads = o.num_threads > static_cast<int32_t>(hw) ? static_cast<int32_t>(hw) : o.num_threads;
  p.stream = stream;
  const fa4::Status st = fa4::attention_forward(p);
  if (!st) {
    // "fa4: <argument>: <what>" (fa4/jax.py reads the argument back from it).
    std::string msg = st.message;
    if (!st.argument.empty() && msg.rfind(st.argument + ":", 0) != 0) msg = st.argument + ": " + msg;
    return ffi::Error(code_of(st.code), "fa4: " + msg);
  }
  return ffi::Error::Success();
}

template <typename F>
ffi::Error guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return ffi::Error(ffi::ErrorCode::kResourceExhausted, "fa4: out of memory (std::bad_alloc inside fa4)");
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string("fa4: internal error: ") + e.what());
  } catch (...) {
    return ffi::Error::Internal("fa4: internal error: unknown C++ exception");
  }
}

ffi::Error fwd_host(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t present, bool has_lse, bool append,
                    bool causal, int64_t window_left, int64_t window_right, int64_t chunk_size, float softcap,
                    float scale, int64_t max_seqlen_q, int64_t max_seqlen_k, int32_t num_splits, int32_t backend,
                    int32_t num_threads) {
  return guarded([&] {
    const Options o{present,    has_lse,      append,       causal,       window_left, window_right,
                    chunk_size, max_seqlen_q, max_seqlen_k, softcap,      scale,       num_splits,
                    backend,    num_threads};
    return forward(fa4::DeviceType::cpu, 0, nullptr, args, rets, o);
  });
}

template <typename B>
auto bind_common(B&& b) {
  return std::forward<B>(b)
      .RemainingArgs()
      .RemainingRets()
      .template Attr<int64_t>("present")
      .template Attr<bool>("has_lse")
      .template Attr<bool>("append")
      .template Attr<bool>("causal")
      .template Attr<int64_t>("window_left")
      .template Attr<int64_t>("window_right")
      .template Attr<int64_t>("chunk_size")
      .template Attr<float>("softcap")
      .template Attr<float>("scale")
      .template Attr<int64_t>("max_seqlen_q")
      .template Attr<int64_t>("max_seqlen_k")
      .template Attr<int32_t>("num_splits")
      .template Attr<int32_t>("backend")
      .template Attr<int32_t>("num_threads");
}

XLA_FFI_DEFINE_HANDLER(kFwdHost, fwd_host, bind_common(ffi::Ffi::Bind()));

#ifdef FA4_HAVE_CUDA
ffi::Error fwd_cuda(void* stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t present,
                    bool has_lse, bool append, bool causal, int64_t window_left, int64_t window_right,
                    int64_t chunk_size, float softcap, float scale, int64_t max_seqlen_q, int64_t max_seqlen_k,
                    int32_t num_splits, int32_t backend, int32_t num_threads) {
  return guarded([&] {
    const Options o{present,    has_lse,      append,       causal,       window_left, window_right,
                    chunk_size, max_seqlen_q, max_seqlen_k, softcap,      scale,       num_splits,
                    backend,    num_threads};
    return forward(fa4::DeviceType::cuda, device, stream, args, rets, o);
  });
}

XLA_FFI_DEFINE_HANDLER(kFwdCuda, fwd_cuda,
                       bind_common(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>()));
#endif

}  // namespace

// {platform: PyCapsule of the XLA_FFI_Handler*} for jax.ffi.register_ffi_target (new reference).
PyObject* fa4_jax_handlers() {
  PyObject* d = PyDict_New();
  if (!d) return nullptr;
  auto put = [&](const char* platform, XLA_FFI_Handler* h) {
    PyObject* c = PyCapsule_New(reinterpret_cast<void*>(h), nullptr, nullptr);
    if (!c) return false;
    const int rc = PyDict_SetItemString(d, platform, c);
    Py_DECREF(c);
    return rc == 0;
  };
  bool ok = put("cpu", kFwdHost);
#ifdef FA4_HAVE_CUDA
  ok = ok && put("CUDA", kFwdCuda);
#endif
  if (!ok) {
    Py_DECREF(d);
    return nullptr;
  }
  return d;
}
