// fa4._fa4: the thin native layer of the Python package.
//
// Tensors cross as any object nanobind's ndarray accepts (DLPack: __dlpack__ / capsules, or the
// buffer protocol), or -- the torch fast path -- as the torch.Tensor itself: for an object whose
// exact type is torch.Tensor / torch.nn.Parameter (the classes fa4/_torch.py registers with
// set_torch), data_ptr, dtype, shape, strides and device are read from the tensor here, so there
// is no descriptor a caller could forge: nothing that is not a real tensor is ever taken as a
// pointer (a tuple is "not an array", a DTypeError naming the argument). Nothing here links
// against or imports a framework; outputs are allocated by the Python layer in the caller's
// framework and passed in. The GIL is released while the library computes.
//
// Every entry point runs inside guarded(): no C++ exception leaves the extension except as an
// fa4 error (bad_alloc -> OutOfMemoryError, anything else -> InternalError), and the scalar
// arguments are read by the arg_* readers, which name the argument instead of throwing
// std::bad_cast (the Python layer, fa4/_args.py, has already checked them; this is the boundary).
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <limits>
#include <new>
#include <string>
#include <thread>

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

constexpr const char* kDTypeHelp = " (fa4 takes float32, float16, bfloat16, float8_e4m3fn tensors and int32 index tensors)";

// Runs an entry point's body: the one place where C++ exceptions become Python ones. Python
// errors (already set, fa4's or nanobind's) pass through; an allocation failure anywhere below
// (the library's scratch, a std::vector in validation) is fa4.OutOfMemoryError; anything else is
// fa4.InternalError -- never a bare RuntimeError, never an abort.
template <typename F>
auto guarded(F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (nb::python_error&) {
    throw;
  } catch (nb::builtin_exception&) {
    throw;
  } catch (const std::bad_alloc&) {
    raise_error(kErrMemory, nullptr, "out of memory (std::bad_alloc inside fa4)");
  } catch (const std::exception& e) {
    raise_error(kErrInternal, nullptr, std::string("internal error: ") + e.what());
  } catch (...) {
    raise_error(kErrInternal, nullptr, "internal error: unknown C++ exception");
  }
}

std::string type_of(nb::handle h) { return nb::type_name(h.type()).c_str(); }

// ---- scalar readers: exact Python types only (bool is not an int, a float is not an int) ----

int64_t arg_int(nb::handle h, const char* name, int64_t lo, int64_t hi) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o) || !PyLong_Check(o))
    raise_error(kErrDType, name, std::string(name) + ": expected an int, got " + type_of(h));
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow || v < lo || v > hi)
    raise_error(kErrInvalid, name, std::string(name) + ": out of range [" + std::to_string(lo) + ", " +
                                       std::to_string(hi) + "]");
  return v;
}

float arg_float(nb::handle h, const char* name) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o) || !(PyFloat_Check(o) || PyLong_Check(o)))
    raise_error(kErrDType, name, std::string(name) + ": expected a real number, got " + type_of(h));
  const double d = PyFloat_AsDouble(o);  // an int beyond the double range: OverflowError
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    raise_error(kErrInvalid, name, std::string(name) + ": out of range");
  }
  // NaN / inf pass through: the library's validation names them (scale, softcap).
  if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max())
    raise_error(kErrInvalid, name, std::string(name) + ": out of the float32 range");
  return static_cast<float>(d);
}

bool arg_bool(nb::handle h, const char* name) {
  if (!PyBool_Check(h.ptr())) raise_error(kErrDType, name, std::string(name) + ": expected a bool, got " + type_of(h));
  return h.ptr() == Py_True;
}

// num_threads: 0 = all cores; n > 0 is capped at the hardware concurrency, so a huge n cannot
// make OpenMP try to create 100000 threads (which kills the process inside libgomp).
int32_t arg_num_threads(nb::handle h) {
  const int64_t n = arg_int(h, "num_threads", 0, std::numeric_limits<int32_t>::max());
  unsigned hw = std::thread::hardware_concurrency();
  if (hw == 0) hw = 256;  // unknown: a bound that any machine can create threads for
  return static_cast<int32_t>(n > static_cast<int64_t>(hw) ? hw : n);
}

void* arg_pointer(nb::handle h, const char* name) {
  const int64_t v = arg_int(h, name, 0, std::numeric_limits<int64_t>::max());
  return reinterpret_cast<void*>(static_cast<uintptr_t>(v));
}

// ---- torch tensors (registered by fa4/_torch.py) ----
PyObject* g_torch_types[2] = {};     // torch.Tensor, torch.nn.Parameter: exact types only
PyObject* g_torch_dtypes = nullptr;  // dict torch.dtype -> fa4 DType value

bool is_plain_torch(nb::handle h) {
  PyObject* t = reinterpret_cast<PyObject*>(Py_TYPE(h.ptr()));
  return g_torch_dtypes && (t == g_torch_types[0] || t == g_torch_types[1]);
}

// Reads a torch tensor's own data pointer, dtype, shape, strides and device. Only exact
// torch.Tensor / Parameter objects get here: a subclass (which could override data_ptr or shape)
// goes through DLPack like any other array.
void torch_view(nb::handle h, const char* name, TensorView* t) {
  nb::object dt = h.attr("dtype");
  PyObject* code = PyDict_GetItemWithError(g_torch_dtypes, dt.ptr());  // borrowed
  if (!code) {
    if (PyErr_Occurred()) throw nb::python_error();
    raise_error(kErrDType, name, std::string(name) + ": unsupported dtype " + nb::str(dt).c_str() + kDTypeHelp);
  }
  t->dtype = static_cast<DType>(arg_int(code, name, 0, static_cast<int64_t>(DType::int32)));
  nb::object dev = h.attr("device");
  const std::string kind = nb::str(dev.attr("type")).c_str();
  if (kind == "cpu") {
    t->device = DeviceType::cpu;
    t->device_index = 0;
  } else if (kind == "cuda") {
    nb::object idx = dev.attr("index");
    t->device = DeviceType::cuda;
    t->device_index = idx.is_none() ? 0 : static_cast<int32_t>(arg_int(idx, name, 0, 1 << 20));
  } else if (kind == "meta") {
    raise_error(kErrUnsupported, name, std::string(name) + ": meta tensors have no data (use torch.ops.fa4.* for shapes)");
  } else {
    raise_error(kErrUnsupported, name, std::string(name) + ": tensors on " + kind +
                                           " are not supported (fa4 takes CPU and CUDA tensors)");
  }
  nb::object shape = h.attr("shape");
  nb::object stride = h.attr("stride")();
  if (!PyTuple_Check(shape.ptr()) || !PyTuple_Check(stride.ptr()) ||
      PyTuple_GET_SIZE(shape.ptr()) != PyTuple_GET_SIZE(stride.ptr()))
    raise_error(kErrInternal, name, std::string(name) + ": unexpected torch shape / stride types");
  const Py_ssize_t nd = PyTuple_GET_SIZE(shape.ptr());
  if (nd > fa4::kMaxDims)
    raise_error(kErrInvalid, name, std::string(name) + ": " + std::to_string(nd) + "-d tensors are not supported (at most 6 dims)");
  if (nd == 0)
    raise_error(kErrInvalid, name, std::string(name) + ": expected a tensor with at least one dimension, got a 0-d tensor");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  for (Py_ssize_t i = 0; i < nd; ++i) {
    t->shape[i] = arg_int(PyTuple_GET_ITEM(shape.ptr(), i), name, 0, kMax);
    t->stride[i] = arg_int(PyTuple_GET_ITEM(stride.ptr(), i), name, kMin, kMax);
  }
  t->ndim = static_cast<int32_t>(nd);
  t->data = arg_pointer(h.attr("data_ptr")(), name);
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

// Converts `h` (None, a torch tensor, or a DLPack / buffer-protocol object) into `t`. Anything
// else -- a tuple, a list, a number -- is "not an array" (DTypeError naming the argument).
void to_view(nb::handle h, const char* name, bool writable, bool allow_raw, TensorView* t, Arg* keep) {
  if (h.is_none()) return;  // "not given" (ndim 0)
  if (is_plain_torch(h)) {
    torch_view(h, name, t);
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

fa4::Backend backend_from_int(int64_t b) {
  if (b < 0 || b > 3) raise_error(kErrInvalid, "backend", "backend: must be 'auto', 'cpu', 'cuda' or 'reference'");
  return static_cast<fa4::Backend>(b);
}

fa4::Backend arg_backend(nb::handle h) { return backend_from_int(arg_int(h, "backend", 0, 3)); }

// The forward pass. Positional arguments only (the Python layer builds the call).
//   tensors: q k v out lse sinks q_descale k_descale v_descale cu_seqlens_q cu_seqlens_k seqused_k
//            cache_seqlens cache_batch_idx page_table k_new v_new
//   scalars: scale softcap causal window_left window_right chunk max_seqlen_q max_seqlen_k
//            num_splits backend num_threads stream allow_raw workspace_alloc
void fwd(const nb::args& args) {
  guarded([&] {
    constexpr int kTensors = 17;
    if (args.size() != kTensors + 14) throw nb::type_error("fa4._fa4.fwd: wrong number of arguments");
    static const char* names[kTensors] = {"q", "k", "v", "out", "lse", "sinks", "q_descale", "k_descale", "v_descale",
                                          "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "cache_seqlens",
                                          "cache_batch_idx", "page_table", "k_new", "v_new"};
    fa4::AttentionParams p;
    TensorView* views[kTensors] = {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.sinks, &p.q_descale, &p.k_descale,
                                   &p.v_descale, &p.cu_seqlens_q, &p.cu_seqlens_k, &p.seqused_k, &p.cache_seqlens,
                                   &p.cache_batch_idx, &p.page_table, &p.k_new, &p.v_new};
    const bool allow_raw = arg_bool(args[kTensors + 12], "allow_raw");
    const bool appending = !args[15].is_none();
    Arg keep[kTensors];
    for (int i = 0; i < kTensors; ++i) {
      // raw (bf16/fp8-as-uint) views only for q k v out k_new v_new
      const bool data_tensor = i <= 3 || i >= 15;
      // outputs: out, lse; and the caches when k_new/v_new are appended into them
      const bool writable = i == 3 || i == 4 || (appending && (i == 1 || i == 2));
      to_view(args[i], names[i], writable, allow_raw && data_tensor, views[i], &keep[i]);
    }
    constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min(), kMax64 = std::numeric_limits<int64_t>::max();
    constexpr int64_t kMin32 = std::numeric_limits<int32_t>::min(), kMax32 = std::numeric_limits<int32_t>::max();
    p.scale = arg_float(args[17], "scale");
    p.softcap = arg_float(args[18], "softcap");
    p.causal = arg_bool(args[19], "causal");
    p.window_left = arg_int(args[20], "window_left", kMin64, kMax64);
    p.window_right = arg_int(args[21], "window_right", kMin64, kMax64);
    p.chunk_size = arg_int(args[22], "chunk_size", kMin64, kMax64);
    p.max_seqlen_q = arg_int(args[23], "max_seqlen_q", kMin64, kMax64);
    p.max_seqlen_k = arg_int(args[24], "max_seqlen_k", kMin64, kMax64);
    p.num_splits = static_cast<int32_t>(arg_int(args[25], "num_splits", kMin32, kMax32));
    p.backend = arg_backend(args[26]);
    p.num_threads = arg_num_threads(args[27]);
    p.stream = arg_pointer(args[28], "stream");
    nb::handle ws_alloc = args[30];
    nb::object ws_keep;
    if (!ws_alloc.is_none() && p.q.device == DeviceType::cuda) {
      // Split-KV scratch from the caller's allocator (e.g. torch's caching allocator: safe inside
      // CUDA graph capture), instead of a cudaMalloc inside the library.
      const size_t n = fa4::attention_workspace_size(p);
      if (n > 0) {
        nb::object r = ws_alloc(n);  // -> (keepalive, data_ptr)
        ws_keep = r[0];
        p.workspace = arg_pointer(r[1], "workspace");
        p.workspace_bytes = n;
      }
    }
    Status st;
    {
      nb::gil_scoped_release release;
      st = fa4::attention_forward(p);
    }
    if (!st) raise_status(st);
  });
}

// combine_partials: out_partials lse_partials out lse backend num_threads stream allow_raw
void combine(nb::handle out_partials, nb::handle lse_partials, nb::handle out, nb::handle lse, nb::handle backend,
             nb::handle num_threads, nb::handle stream, nb::handle allow_raw) {
  guarded([&] {
    fa4::CombineParams c;
    Arg keep[4];
    to_view(out_partials, "out_partials", false, false, &c.out_partials, &keep[0]);
    to_view(lse_partials, "lse_partials", false, false, &c.lse_partials, &keep[1]);
    to_view(out, "out", true, arg_bool(allow_raw, "allow_raw"), &c.out, &keep[2]);
    to_view(lse, "lse", true, false, &c.lse, &keep[3]);
    c.backend = arg_backend(backend);
    c.num_threads = arg_num_threads(num_threads);
    c.stream = arg_pointer(stream, "stream");
    Status st;
    {
      nb::gil_scoped_release release;
      st = fa4::combine_partials(c);
    }
    if (!st) raise_status(st);
  });
}

// For bench_overhead.py: the library's own cost for a dense call, measured in C++ over `iters`
// calls: (wall seconds, calling thread's CPU seconds) per call, so the Python-side overhead can be
// separated from the compute.
nb::tuple native_time(nb::handle q, nb::handle k, nb::handle v, nb::handle out, int backend, int iters,
                      bool allow_raw) {
  return guarded([&] {
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
  });
}

void set_errors(nb::tuple classes) {
  if (classes.size() != kErrCount) throw nb::value_error("expected 7 exception classes");
  for (int i = 0; i < kErrCount; ++i) {
    Py_XDECREF(g_err[i]);
    g_err[i] = classes[i].ptr();
    Py_INCREF(g_err[i]);
  }
}

// Registers torch's plain tensor classes and the dtype table (fa4/_torch.py, once): tensors of
// exactly these types are then read directly (torch_view) instead of through DLPack.
void set_torch(nb::handle tensor_type, nb::handle parameter_type, nb::dict dtypes) {
  for (PyObject*& slot : g_torch_types) Py_XDECREF(slot);
  Py_XDECREF(g_torch_dtypes);
  g_torch_types[0] = tensor_type.inc_ref().ptr();
  g_torch_types[1] = parameter_type.inc_ref().ptr();
  g_torch_dtypes = dtypes.inc_ref().ptr();
}

nb::list backend_info() {
  nb::list l;
  for (const auto& b : fa4::backend_info())
    l.append(nb::make_tuple(fa4::backend_name(b.backend), b.available, b.detail));
  return l;
}

}  // namespace

#ifdef FA4_WITH_JAX
PyObject* fa4_jax_handlers();  // fa4_jax.cpp: {platform: capsule} of the XLA FFI handlers
#endif

NB_MODULE(_fa4, m) {
  m.doc() = "fa4 native extension (internal: use the fa4 package)";
  m.def("fwd", &fwd);
  m.def("combine", &combine, nb::arg("out_partials").none(), nb::arg("lse_partials").none(), nb::arg("out").none(),
        nb::arg("lse").none(), nb::arg("backend").none(), nb::arg("num_threads").none(), nb::arg("stream").none(),
        nb::arg("allow_raw").none());
  m.def("set_torch", &set_torch);
  m.def("native_time", &native_time, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"), nb::arg("backend"),
        nb::arg("iters"), nb::arg("allow_raw"));
  m.def("set_errors", &set_errors);
  m.def("backend_info", &backend_info);
  m.def("backend_available", [](int b) { return fa4::backend_available(backend_from_int(b)); });
  m.def("version", []() { return std::string(fa4::version()); });
#ifdef FA4_WITH_JAX
  // fa4.jax: the XLA FFI handlers, built when jaxlib's headers were there at build time.
  m.def("jax_handlers", []() {
    PyObject* d = fa4_jax_handlers();
    if (!d) throw nb::python_error();
    return nb::steal(d);
  });
#endif
#ifdef FA4_HAVE_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
}
