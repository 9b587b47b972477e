// fa4._fa4: the thin native layer of the Python package.
//
// Tensors cross as any object nanobind's ndarray accepts (DLPack: __dlpack__ / capsules, or the
// buffer protocol), or -- the torch fast path, built by fa4/_torch.py -- as a raw descriptor
// tuple (data_ptr, dtype_code, shape, strides, device_type, device_index). Nothing here links
// against or imports a framework; outputs are allocated by the Python layer in the caller's
// framework and passed in. The GIL is released while the library computes.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <chrono>
#include <ctime>
#include <cstdint>
#include <string>

#include "fa4/fa4.h"

namespace nb = nanobind;
using fa4::DeviceType;
using fa4::DType;
using fa4::Status;
using fa4::StatusCode;
using fa4::TensorView;

namespace {

// Exception classes, installed by fa4/_errors.py at import (index: see kErr*).
enum { kErrInvalid = 0, kErrDType, kErrUnsupported, kErrUnavailable, kErrDevice, kErrMemory, kErrInternal, kErrCount };
PyObject* g_err[kErrCount] = {};

[[noreturn]] void raise_error(int kind, const char* argument, const std::string& message) {
  PyObject* type = g_err[kind];
  if (!type) type = kind == kErrDType ? PyExc_TypeError : kind == kErrInvalid ? PyExc_ValueError : PyExc_RuntimeError;
  nb::object exc = nb::borrow(type)(nb::str(message.c_str()));
  if (argument && *argument) exc.attr("argument") = nb::str(argument);
  else exc.attr("argument") = nb::none();
  PyErr_SetObject(type, exc.ptr());
  throw nb::python_error();
}

[[noreturn]] void raise_status(const Status& st) {
  int kind = kErrInternal;
  switch (st.code) {
    case StatusCode::invalid_argument:
      kind = st.message.find("dtype") != std::string::npos ? kErrDType : kErrInvalid;
      break;
    case StatusCode::unsupported: kind = kErrUnsupported; break;
    case StatusCode::backend_unavailable: kind = kErrUnavailable; break;
    case StatusCode::device_error: kind = kErrDevice; break;
    case StatusCode::out_of_memory: kind = kErrMemory; break;
    default: kind = kErrInternal; break;
  }
#ifndef FA4_HAVE_CUDA
  if (st.code == StatusCode::backend_unavailable)
    raise_error(kind, st.argument.c_str(), st.message + "; this fa4 Python package was built without the cuda backend: "
                                                        "reinstall where nvcc is found (FA4_CUDA=ON pip install ./python)");
#endif
  raise_error(kind, st.argument.c_str(), st.message);
}

// Raw descriptor dtype codes (fa4/_torch.py uses the same numbers): the fa4_dtype values.
bool dtype_from_code(long c, DType* out) {
  if (c < 0 || c > static_cast<long>(DType::int32)) return false;
  *out = static_cast<DType>(c);
  return true;
}

bool dtype_from_dlpack(nb::dlpack::dtype d, bool allow_raw, DType* out) {
  using nb::dlpack::dtype_code;
  if (d.lanes != 1) return false;
  const auto code = static_cast<dtype_code>(d.code);
  if (code == dtype_code::Float && d.bits == 32) { *out = DType::float32; return true; }
  if (code == dtype_code::Float && d.bits == 16) { *out = DType::float16; return true; }
  if (code == dtype_code::Bfloat && d.bits == 16) { *out = DType::bfloat16; return true; }
  if (d.code == 10 /* DLPack kDLFloat8_e4m3fn */ && d.bits == 8) { *out = DType::float8_e4m3; return true; }
  if (code == dtype_code::Int && d.bits == 32) { *out = DType::int32; return true; }
  // NumPy has no bfloat16 / float8: fa4/_api.py passes ml_dtypes arrays as uint16 / uint8 views
  // and sets allow_raw (only for the float tensors of the call, never for index tensors).
  if (allow_raw && code == dtype_code::UInt && d.bits == 16) { *out = DType::bfloat16; return true; }
  if (allow_raw && code == dtype_code::UInt && d.bits == 8) { *out = DType::float8_e4m3; return true; }
  return false;
}

std::string dlpack_dtype_str(nb::dlpack::dtype d) {
  using nb::dlpack::dtype_code;
  const char* k = "code" ;
  switch (static_cast<dtype_code>(d.code)) {
    case dtype_code::Int: k = "int"; break;
    case dtype_code::UInt: k = "uint"; break;
    case dtype_code::Float: k = "float"; break;
    case dtype_code::Bfloat: k = "bfloat"; break;
    case dtype_code::Complex: k = "complex"; break;
    case dtype_code::Bool: k = "bool"; break;
    default: return "dlpack dtype code " + std::to_string(d.code) + " with " + std::to_string(d.bits) + " bits";
  }
  return std::string(k) + std::to_string(d.bits);
}

constexpr const char* kDTypeHelp = " (fa4 takes float32, float16, bfloat16, float8_e4m3fn tensors and int32 index tensors)";

// One tensor argument: the imported ndarray is kept alive here until the call returns.
struct Arg {
  nb::ndarray<nb::ro> in;
  nb::ndarray<> out;
};

[[noreturn]] void not_an_array(nb::handle h, const char* name, bool writable) {
  if (PyErr_Occurred()) PyErr_Clear();
  std::string what = nb::type_name(h.type()).c_str();
  if (PyObject_HasAttrString(h.ptr(), "dtype")) {
    PyObject* d = PyObject_GetAttrString(h.ptr(), "dtype");
    PyObject* s = d ? PyObject_Str(d) : nullptr;
    if (s && PyUnicode_Check(s)) what += std::string(" of dtype ") + PyUnicode_AsUTF8(s);
    Py_XDECREF(s);
    Py_XDECREF(d);
    if (PyErr_Occurred()) PyErr_Clear();
  }
  raise_error(kErrDType, name, std::string(name) + ": expected an array/tensor readable through DLPack or the buffer protocol" +
                                   (writable ? " (and writable)" : "") + ", got " + what + kDTypeHelp);
}

bool as_bool(nb::handle h) {
  const int r = PyObject_IsTrue(h.ptr());
  if (r < 0) throw nb::python_error();
  return r != 0;
}

template <typename A>
void fill_view(const A& a, const char* name, bool allow_raw, TensorView* t) {
  if (a.ndim() > static_cast<size_t>(fa4::kMaxDims))
    raise_error(kErrInvalid, name, std::string(name) + ": " + std::to_string(a.ndim()) + "-d tensors are not supported (at most 6 dims)");
  if (a.ndim() == 0)
    raise_error(kErrInvalid, name, std::string(name) + ": expected a tensor with at least one dimension, got a 0-d tensor");
  if (!dtype_from_dlpack(a.dtype(), allow_raw, &t->dtype))
    raise_error(kErrDType, name, std::string(name) + ": unsupported dtype " + dlpack_dtype_str(a.dtype()) + kDTypeHelp);
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value: t->device = DeviceType::cpu; t->device_index = 0; break;
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value: t->device = DeviceType::cuda; t->device_index = a.device_id(); break;
    default:
      raise_error(kErrInvalid, name, std::string(name) + ": unsupported device (DLPack device type " +
                                         std::to_string(a.device_type()) + "); fa4 takes CPU and CUDA tensors");
  }
  t->data = const_cast<void*>(static_cast<const void*>(a.data()));
  t->ndim = static_cast<int32_t>(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    t->shape[i] = static_cast<int64_t>(a.shape(i));
    t->stride[i] = a.stride(i);
  }
}

// Converts `h` (None, a raw descriptor tuple, or a DLPack / buffer-protocol object) into `t`.
void to_view(nb::handle h, const char* name, bool writable, bool allow_raw, TensorView* t, Arg* keep) {
  if (h.is_none()) return;  // "not given" (ndim 0)
  PyObject* o = h.ptr();
  if (PyTuple_CheckExact(o)) {
    // (data_ptr, dtype_code, shape, strides, device_type, device_index)
    if (PyTuple_GET_SIZE(o) != 6) raise_error(kErrDType, name, std::string(name) + ": expected an array/tensor, got a tuple");
    void* ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(o, 0));
    const long code = PyLong_AsLong(PyTuple_GET_ITEM(o, 1));
    PyObject* shape = PyTuple_GET_ITEM(o, 2);
    PyObject* stride = PyTuple_GET_ITEM(o, 3);
    const long dev = PyLong_AsLong(PyTuple_GET_ITEM(o, 4));
    const long dev_idx = PyLong_AsLong(PyTuple_GET_ITEM(o, 5));
    if (PyErr_Occurred()) throw nb::python_error();
    if (!PyTuple_Check(shape) || !PyTuple_Check(stride) || PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(stride))
      raise_error(kErrInvalid, name, std::string(name) + ": malformed tensor descriptor");
    const Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (nd > fa4::kMaxDims)
      raise_error(kErrInvalid, name, std::string(name) + ": " + std::to_string(nd) + "-d tensors are not supported (at most 6 dims)");
    if (!dtype_from_code(code, &t->dtype))
      raise_error(kErrDType, name, std::string(name) + ": unsupported dtype" + kDTypeHelp);
    for (Py_ssize_t i = 0; i < nd; ++i) {
      t->shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
      t->stride[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, i));
    }
    if (PyErr_Occurred()) throw nb::python_error();
    t->data = ptr;
    t->ndim = static_cast<int32_t>(nd);
    if (dev == 0) t->device = DeviceType::cpu;
    else if (dev == 1) t->device = DeviceType::cuda;
    else raise_error(kErrInvalid, name, std::string(name) + ": unsupported device (fa4 takes CPU and CUDA tensors)");
    t->device_index = static_cast<int32_t>(dev_idx);
    if (nd == 0) raise_error(kErrInvalid, name, std::string(name) + ": expected a tensor with at least one dimension, got a 0-d tensor");
    return;
  }
  if (writable) {
    nb::detail::make_caster<nb::ndarray<>> c;
    if (!c.from_python(h, 0, nullptr)) not_an_array(h, name, true);
    keep->out = std::move(c.value);
    fill_view(keep->out, name, allow_raw, t);
  } else {
    // Inputs are imported read-only, so read-only NumPy arrays and broadcast views work.
    nb::detail::make_caster<nb::ndarray<nb::ro>> c;
    if (!c.from_python(h, 0, nullptr)) not_an_array(h, name, false);
    keep->in = std::move(c.value);
    fill_view(keep->in, name, allow_raw, t);
  }
}

fa4::Backend backend_from_int(int b) {
  if (b < 0 || b > 3) raise_error(kErrInvalid, "backend", "backend: must be 'auto', 'cpu', 'cuda' or 'reference'");
  return static_cast<fa4::Backend>(b);
}

// The forward pass. Positional arguments only (the Python layer builds the call).
//   tensors: q k v out lse sinks q_descale k_descale v_descale cu_seqlens_q cu_seqlens_k seqused_k
//            cache_seqlens cache_batch_idx page_table k_new v_new
//   scalars: scale softcap causal window_left window_right chunk max_seqlen_q max_seqlen_k
//            num_splits backend num_threads stream allow_raw workspace_alloc
void fwd(const nb::args& args) {
  constexpr int kTensors = 17;
  if (args.size() != kTensors + 14) throw nb::type_error("fa4._fa4.fwd: wrong number of arguments");
  static const char* names[kTensors] = {"q", "k", "v", "out", "lse", "sinks", "q_descale", "k_descale", "v_descale",
                                        "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "cache_seqlens",
                                        "cache_batch_idx", "page_table", "k_new", "v_new"};
  fa4::AttentionParams p;
  TensorView* views[kTensors] = {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.sinks, &p.q_descale, &p.k_descale,
                                 &p.v_descale, &p.cu_seqlens_q, &p.cu_seqlens_k, &p.seqused_k, &p.cache_seqlens,
                                 &p.cache_batch_idx, &p.page_table, &p.k_new, &p.v_new};
  const bool allow_raw = as_bool(args[kTensors + 12]);
  const bool appending = !args[15].is_none();
  Arg keep[kTensors];
  for (int i = 0; i < kTensors; ++i) {
    // raw (bf16/fp8-as-uint) views only for q k v out k_new v_new
    const bool data_tensor = i <= 3 || i >= 15;
    // outputs: out, lse; and the caches when k_new/v_new are appended into them
    const bool writable = i == 3 || i == 4 || (appending && (i == 1 || i == 2));
    to_view(args[i], names[i], writable, allow_raw && data_tensor, views[i], &keep[i]);
  }
  p.scale = nb::cast<float>(args[17]);
  p.softcap = nb::cast<float>(args[18]);
  p.causal = as_bool(args[19]);
  p.window_left = nb::cast<int64_t>(args[20]);
  p.window_right = nb::cast<int64_t>(args[21]);
  p.chunk_size = nb::cast<int64_t>(args[22]);
  p.max_seqlen_q = nb::cast<int64_t>(args[23]);
  p.max_seqlen_k = nb::cast<int64_t>(args[24]);
  p.num_splits = nb::cast<int32_t>(args[25]);
  p.backend = backend_from_int(nb::cast<int>(args[26]));
  p.num_threads = nb::cast<int32_t>(args[27]);
  p.stream = reinterpret_cast<void*>(nb::cast<uintptr_t>(args[28]));
  nb::handle ws_alloc = args[30];
  nb::object ws_keep;
  if (!ws_alloc.is_none() && p.q.device == DeviceType::cuda) {
    // Split-KV scratch from the caller's allocator (e.g. torch's caching allocator: safe inside
    // CUDA graph capture), instead of a cudaMalloc inside the library.
    const size_t n = fa4::attention_workspace_size(p);
    if (n > 0) {
      nb::object r = ws_alloc(n);  // -> (keepalive, data_ptr)
      ws_keep = r[0];
      p.workspace = reinterpret_cast<void*>(nb::cast<uintptr_t>(r[1]));
      p.workspace_bytes = n;
    }
  }
  Status st;
  {
    nb::gil_scoped_release release;
    st = fa4::attention_forward(p);
  }
  if (!st) raise_status(st);
}

// combine_partials: out_partials lse_partials out lse backend num_threads stream
void combine(nb::handle out_partials, nb::handle lse_partials, nb::handle out, nb::handle lse, int backend,
             int num_threads, uintptr_t stream, bool allow_raw) {
  fa4::CombineParams c;
  Arg keep[4];
  to_view(out_partials, "out_partials", false, false, &c.out_partials, &keep[0]);
  to_view(lse_partials, "lse_partials", false, false, &c.lse_partials, &keep[1]);
  to_view(out, "out", true, allow_raw, &c.out, &keep[2]);
  to_view(lse, "lse", true, false, &c.lse, &keep[3]);
  c.backend = backend_from_int(backend);
  c.num_threads = num_threads;
  c.stream = reinterpret_cast<void*>(stream);
  Status st;
  {
    nb::gil_scoped_release release;
    st = fa4::combine_partials(c);
  }
  if (!st) raise_status(st);
}

// For bench_overhead.py: the library's own cost for a dense call, measured in C++ over `iters`
// calls: (wall seconds, calling thread's CPU seconds) per call, so the Python-side overhead can be
// separated from the compute.
nb::tuple native_time(nb::handle q, nb::handle k, nb::handle v, nb::handle out, int backend, int iters,
                      bool allow_raw) {
  fa4::AttentionParams p;
  Arg keep[4];
  to_view(q, "q", false, allow_raw, &p.q, &keep[0]);
  to_view(k, "k", false, allow_raw, &p.k, &keep[1]);
  to_view(v, "v", false, allow_raw, &p.v, &keep[2]);
  to_view(out, "out", true, allow_raw, &p.out, &keep[3]);
  p.backend = backend_from_int(backend);
  Status st;
  double wall = 0, cpu = 0;
  {
    nb::gil_scoped_release release;
    timespec c0{}, c1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters && st.ok(); ++i) st = fa4::attention_forward(p);
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    cpu = (c1.tv_sec - c0.tv_sec) + 1e-9 * (c1.tv_nsec - c0.tv_nsec);
  }
  if (!st) raise_status(st);
  const double n = iters > 0 ? iters : 1;
  return nb::make_tuple(wall / n, cpu / n);
}

void set_errors(nb::tuple classes) {
  if (classes.size() != kErrCount) throw nb::value_error("expected 7 exception classes");
  for (int i = 0; i < kErrCount; ++i) {
    Py_XDECREF(g_err[i]);
    g_err[i] = classes[i].ptr();
    Py_INCREF(g_err[i]);
  }
}

nb::list backend_info() {
  nb::list l;
  for (const auto& b : fa4::backend_info())
    l.append(nb::make_tuple(fa4::backend_name(b.backend), b.available, b.detail));
  return l;
}

}  // namespace

NB_MODULE(_fa4, m) {
  m.doc() = "fa4 native extension (internal: use the fa4 package)";
  m.def("fwd", &fwd);
  m.def("combine", &combine, nb::arg("out_partials").none(), nb::arg("lse_partials").none(), nb::arg("out").none(),
        nb::arg("lse").none(), nb::arg("backend"), nb::arg("num_threads"), nb::arg("stream"), nb::arg("allow_raw"));
  m.def("native_time", &native_time, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("backend"),
        nb::arg("iters"), nb::arg("allow_raw"));
  m.def("set_errors", &set_errors);
  m.def("backend_info", &backend_info);
  m.def("backend_available", [](int b) { return fa4::backend_available(backend_from_int(b)); });
  m.def("version", []() { return std::string(fa4::version()); });
#ifdef FA4_HAVE_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
}
