// Validation + normalization of AttentionParams (see problem.h). Every rule here names the
// argument it is about; tests/test_validation.cpp has one test per rule.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <type_traits>
#include <string>
#include <tuple>

#include "core/checked.h"
#include "core/problem.h"

namespace fa4::core {
namespace {

// Error-message builder. Deliberately not std::ostringstream: formatting an integer through
// iostreams crashed (SIGSEGV in basic_ostream::_M_insert<long>, under normalize) inside the
// Python extension on the GPU machine, where the host process (torch 2.11, Python 3.12) had
// loaded its own C++ runtime state first. Plain string appends touch no locale.
struct Msg {
  std::string s;
  Msg& operator<<(const char* x) { s += x; return *this; }
  Msg& operator<<(const std::string& x) { s += x; return *this; }
  template <typename I>
    requires std::is_integral_v<I>
  Msg& operator<<(I x) {
    s += std::to_string(x);
    return *this;
  }
  const std::string& str() const { return s; }
};

constexpr int64_t kMaxHeadDim = 256;
// Sequences, heads, lengths and token counts are int32-indexed (cu_seqlens, cache_seqlens,
// cache_batch_idx, the kernels' grids): each below 2^31.
constexpr int64_t kMaxCount = std::numeric_limits<int32_t>::max();
constexpr int32_t kMaxSplits = 1024;

std::string shape_str(const TensorView& t) {
  Msg s;
  s << "[";
  for (int i = 0; i < t.ndim; ++i) s << (i ? ", " : "") << t.shape[i];
  s << "]";
  return s.str();
}

// Expected dims; dims past the given ones are not constrained and print as "*".
std::string dims_str(std::initializer_list<int64_t> d, int ndim) {
  Msg s;
  s << "[";
  int i = 0;
  for (int64_t x : d) s << (i++ ? ", " : "") << x;
  for (; i < ndim; ++i) s << ", *";
  s << "]";
  return s.str();
}

const char* device_str(DeviceType d) { return d == DeviceType::cuda ? "cuda" : "cpu"; }

// Every element offset of a non-empty t, times its byte size, fits int64 (checked: a wrapped
// product once let a [2^63-1, ...] tensor with huge strides pass, and the kernels read outside it).
bool extent_fits(const TensorView& t) {
  int64_t last = 0, bytes = 0;
  return checked_last_offset(t, &last) && checked_add(last, 1, &last) &&
         checked_mul(last, static_cast<int64_t>(dtype_size(t.dtype)), &bytes);
}

// Whether two distinct indices of a non-empty output reach the same element. extent_fits() has
// bounded every offset (so every sum below fits int64).
//  1. Nested layouts — every permutation, slice or padding of a contiguous tensor: sort the dims
//     of extent > 1 by stride; when each stride exceeds the largest offset the smaller-strided
//     dims reach, the offsets form a mixed-radix number: no overlap, in O(ndim^2). A zero or
//     repeated stride over extent > 1 fails this and does overlap.
//  2. Otherwise the strides interleave (shape [3, 2] strides [2, 3]: offsets 0 3 2 5 4 7, no
//     overlap; strides [2, 2]: overlap). With all strides divided by their gcd (which maps
//     offsets one-to-one) and span = the largest offset: more elements than span + 1 overlap by
//     pigeonhole; else the offsets are enumerated into a bitset of span + 1 bits, O(elements) —
//     the writes the call does anyway. Exact, with memory bounded by kMaxOverlapBits and by one
//     byte per element: an interleaved layout sparser than that (never produced by a framework)
//     is reported as `too_sparse` and rejected.
enum class Overlap { none, overlap, too_sparse };
constexpr int64_t kMaxOverlapBits = int64_t{1} << 27;  // a 16 MiB bitset at most

Overlap elements_overlap(const TensorView& t) {
  int dims[kMaxDims];
  int n = 0;
  for (int i = 0; i < t.ndim; ++i) {  // insertion sort by stride (at most 6 dims)
    if (t.shape[i] <= 1) continue;
    int k = n++;
    for (; k > 0 && t.stride[dims[k - 1]] > t.stride[i]; --k) dims[k] = dims[k - 1];
    dims[k] = i;
  }
  int64_t reach = 0;  // largest offset of the dims taken so far
  bool nested = true;
  for (int k = 0; k < n && nested; ++k) {
    const int d = dims[k];
    if (t.stride[d] == 0) return Overlap::overlap;  // extent > 1 over one element
    if (t.stride[d] <= reach) nested = false;
    reach += (t.shape[d] - 1) * t.stride[d];
  }
  if (nested) return Overlap::none;
  int64_t g = 0;
  for (int k = 0; k < n; ++k) g = std::gcd(g, t.stride[dims[k]]);
  int64_t span = 0, elems = 1;
  bool many = false;  // more elements than fit int64: certainly more than span + 1
  for (int k = 0; k < n; ++k) {
    const int d = dims[k];
    span += (t.shape[d] - 1) * (t.stride[d] / g);
    many = many || !checked_mul(elems, t.shape[d], &elems);
  }
  if (many || elems > span + 1) return Overlap::overlap;  // pigeonhole: span + 1 offsets
  if (span + 1 > kMaxOverlapBits || (span + 1) / 8 > elems) return Overlap::too_sparse;
  std::vector<uint64_t> seen(static_cast<size_t>(span / 64 + 1), 0);
  int64_t idx[kMaxDims] = {}, off = 0;
  for (int64_t e = 0; e < elems; ++e) {
    uint64_t& w = seen[static_cast<size_t>(off / 64)];
    const uint64_t bit = uint64_t{1} << (off % 64);
    if (w & bit) return Overlap::overlap;
    w |= bit;
    for (int k = 0; k < n; ++k) {  // odometer over the dims of extent > 1
      const int d = dims[k];
      const int64_t st = t.stride[d] / g;
      if (++idx[k] < t.shape[d]) {
        off += st;
        break;
      }
      off -= (t.shape[d] - 1) * st;
      idx[k] = 0;
    }
  }
  return Overlap::none;
}

}  // namespace

bool gpu_rows_aligned(const TensorView& t, int64_t elem_bytes) {
  const int ndim = t.ndim;
  if (ndim < 1) return true;
  if (t.stride[ndim - 1] != 1 && t.shape[ndim - 1] > 1) return false;
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int i = 0; i < ndim - 1; ++i)
    if (t.shape[i] > 1 && (t.stride[i] * elem_bytes) % 16 != 0) return false;
  return true;
}

namespace {

// Generic per-tensor checks: rank, dtype, device, strides, size overflow, pointer (non-null and
// aligned to the element size: the backends load whole elements through typed pointers).
// `output` tensors may not reach one element through two indices (the result would depend on
// write order). `gpu_rows` tensors (q, k, v, out, k_new, v_new) are moved in 16-byte vectors by
// the GPU kernels, so on a GPU their rows must be contiguous and 16-byte aligned; the small
// fp32/int32 tensors (lse, sinks, descales, indices) are accessed element by element and take
// any strides. Where `staged` is given, a GPU tensor that breaks those row rules is not an error:
// *staged is set, and the cuda backend copies it through an aligned buffer (cuda/stage_rows.h).
Status check_tensor(const TensorView& t, const char* name, int ndim, DeviceType dev, int dev_idx,
                    bool output, bool gpu_rows = false, bool* staged = nullptr) {
  if (t.ndim != ndim) {
    Msg s;
    s << name << ": expected a " << ndim << "-d tensor, got " << t.ndim << "-d";
    return Status::Invalid(name, s.str());
  }
  if (t.device != dev || (dev == DeviceType::cuda && t.device_index != dev_idx)) {
    Msg s;
    s << name << ": is on " << device_str(t.device) << ":" << t.device_index << " but q is on "
      << device_str(dev) << ":" << dev_idx << " (all tensors must be on one device)";
    return Status::Invalid(name, s.str());
  }
  // An empty tensor has no elements that could alias or be misaligned: row-major strides of a
  // shape with a zero dimension are 0 in the outer dims, and such outputs are valid (zero-size
  // problems).
  bool empty = false;
  for (int i = 0; i < t.ndim; ++i) empty = empty || t.shape[i] == 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) {
      Msg s;
      s << name << ": negative size in dim " << i << " (shape " << shape_str(t) << ")";
      return Status::Invalid(name, s.str());
    }
    if (t.stride[i] < 0) {
      Msg s;
      s << name << ": negative stride in dim " << i << " (" << t.stride[i] << ")";
      return Status::Invalid(name, s.str());
    }
  }
  if (empty) return Status::Ok();
  if (!extent_fits(t)) {
    Msg s;
    s << name << ": shape " << shape_str(t) << " with its strides overflows 64-bit byte offsets";
    return Status::Invalid(name, s.str());
  }
  if (output) {
    const Overlap ov = elements_overlap(t);
    if (ov != Overlap::none) {
      Msg s;
      s << name << ": strides [";
      for (int i = 0; i < t.ndim; ++i) s << (i ? ", " : "") << t.stride[i];
      s << "] of an output with shape " << shape_str(t);
      if (ov == Overlap::overlap) s << " overlap (two elements share memory)";
      else
        s << " interleave (no stride exceeds the span of the smaller-strided dims) over a span too sparse to check for"
             " overlap exactly; use nested strides (any permutation or padding of a contiguous layout)";
      return Status::Invalid(name, s.str());
    }
  }
  if (t.data == nullptr) return Status::Invalid(name, std::string(name) + ": data pointer is null");
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(es) != 0) {
    Msg s;
    s << name << ": data pointer is not aligned to its " << es << "-byte " << dtype_name(t.dtype) << " elements";
    return Status::Invalid(name, s.str());
  }
  if (gpu_rows && dev == DeviceType::cuda) {
    if (staged != nullptr) {
      *staged = !gpu_rows_aligned(t, es);
      return Status::Ok();
    }
    if (t.stride[ndim - 1] != 1 && t.shape[ndim - 1] > 1)
      return Status::Invalid(name, std::string(name) + ": the last dimension must be contiguous (stride 1) on the GPU");
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
      return Status::Invalid(name, std::string(name) + ": data pointer must be 16-byte aligned on the GPU");
    for (int i = 0; i < ndim - 1; ++i)
      if (t.shape[i] > 1 && (t.stride[i] * es) % 16 != 0) {  // shape > 1: extent_fits bounds the product
        Msg s;
        s << name << ": stride of dim " << i << " (" << t.stride[i] << " elements) must be a multiple of 16 bytes on the GPU";
        return Status::Invalid(name, s.str());
      }
  }
  return Status::Ok();
}

Status expect_dtype(const TensorView& t, const char* name, DType want, const char* why) {
  if (t.dtype == want) return Status::Ok();
  Msg s;
  s << name << ": expected dtype " << dtype_name(want) << " (" << why << "), got " << dtype_name(t.dtype);
  return Status::Invalid(name, s.str());
}

Status expect_shape(const TensorView& t, const char* name, const char* pattern,
                    std::initializer_list<int64_t> want) {
  int i = 0;
  for (int64_t w : want) {
    if (t.shape[i] != w) {
      Msg s;
      s << name << ": expected shape " << pattern << " = " << dims_str(want, t.ndim) << ", got " << shape_str(t);
      return Status::Invalid(name, s.str());
    }
    ++i;
  }
  return Status::Ok();
}

#define FA4_TRY(expr)               \
  do {                              \
    Status st_ = (expr);            \
    if (!st_.ok()) return st_;      \
  } while (0)

// Checks a cu_seqlens tensor's contents: first 0, non-decreasing, last <= total.
Status check_cu_seqlens(const TensorView& t, const char* name, int64_t total, const char* total_what) {
  // A zero stride repeats one entry (which must be 0): checking it once is exact, and keeps the
  // cost bounded by memory the caller has (a stride-0 tensor of 2^33 entries is 4 bytes).
  // Sequences are int32-indexed everywhere (the kernels' sequence ids, cache_batch_idx), which
  // also bounds this walk: 2^31 or more entries are refused before any is read.
  if (t.shape[0] > kMaxCount)
    return Status::Invalid(name, std::string(name) + ": " + std::to_string(t.shape[0]) +
                                     " entries (2^31 or more sequences) exceed the int32 range of sequence indices");
  const int64_t n = t.stride[0] == 0 ? 1 : t.shape[0];
  if (Problem::idx1(t, 0) != 0) return Status::Invalid(name, std::string(name) + ": first entry must be 0, got " + std::to_string(Problem::idx1(t, 0)));
  for (int64_t i = 1; i < n; ++i) {
    if (Problem::idx1(t, i) < Problem::idx1(t, i - 1)) {
      Msg s;
      s << name << ": must be non-decreasing, but entry " << i << " (" << Problem::idx1(t, i)
        << ") < entry " << i - 1 << " (" << Problem::idx1(t, i - 1) << ")";
      return Status::Invalid(name, s.str());
    }
  }
  if (Problem::idx1(t, n - 1) > total) {
    Msg s;
    s << name << ": last entry " << Problem::idx1(t, n - 1) << " exceeds " << total_what << " (" << total << ")";
    return Status::Invalid(name, s.str());
  }
  return Status::Ok();
}

// Row strides of a [X, Y, H, D] (rank 4) or [T, H, D] (rank 3) tensor.
RowStrides row_strides(const TensorView& t) {
  if (t.ndim == 4) return {t.stride[0], t.stride[1], t.stride[2], t.stride[3]};
  return {t.stride[0], 0, t.stride[1], t.stride[2]};
}

// Varlen k with B == Tk and a [B, Hkv]-shaped k_descale / v_descale that would read other
// factors per token than per sequence: refused rather than guessed.
Status ambiguous_scale(const AttentionParams& p, int64_t B) {
  const char* name = p.k_descale.present() && p.k_descale.ndim == 2 ? "k_descale" : "v_descale";
  Msg s;
  s << name << ": with varlen k and B = Tk = " << B
    << " a 2-d scale could be per sequence [B, Hkv] or per token [Tk, Hkv], and the two differ unless every"
       " sequence holds exactly one key (cu_seqlens_k = 0, 1, ..., B; checked on host memory only)";
  return Status::Invalid(name, s.str());
}

// q_descale / k_descale / v_descale: fp32 factors per (batch, kv head) [B, Hkv]; with an fp8 KV
// cache (kv_fp8) k_descale / v_descale may instead be per (token, kv head), k's shape without its
// last dim. Any strides (0 broadcasts). Their values are data, as for all-fp8 inputs: not checked
// (0, inf, NaN propagate as IEEE arithmetic does). Varlen k with B == Tk cannot tell [B, Hkv]
// from [Tk, Hkv] by shape: *ambiguous is set and normalize() resolves it from cu_seqlens_k.
Status check_kv_scale(const TensorView& t, const char* name, const TensorView& k, const Problem& pb, DeviceType dev,
                      int dev_idx, KvScale* sc, bool* ambiguous) {
  const bool varlen = pb.kv == KvLayout::varlen;
  const int trank = k.ndim - 1;  // rank of a per-token scale
  const char* token_pattern = varlen                      ? "[Tk, Hkv]"
                              : pb.kv == KvLayout::dense  ? "[B, Sk, Hkv]"
                              : pb.kv == KvLayout::cache  ? "[Bc, Sk_max, Hkv]"
                                                          : "[num_pages, page_size, Hkv]";
  const bool tokens_allowed = pb.kv_fp8 && sc != nullptr;
  if (tokens_allowed && t.ndim != 2 && t.ndim != trank) {
    Msg s;
    s << name << ": expected a 2-d [B, Hkv] tensor (per sequence and kv head) or a " << trank << "-d "
      << token_pattern << " one (per token and kv head), got " << t.ndim << "-d";
    return Status::Invalid(name, s.str());
  }
  const bool per_token = tokens_allowed && (varlen ? t.shape[0] == k.shape[0] : t.ndim == trank);
  FA4_TRY(check_tensor(t, name, per_token ? trank : 2, dev, dev_idx, false));
  FA4_TRY(expect_dtype(t, name, DType::float32, per_token ? "fp32 factor per (token, kv head)" : "fp32 factor per (batch, kv head)"));
  if (per_token && varlen) {
    FA4_TRY(expect_shape(t, name, "[Tk, Hkv]", {k.shape[0], pb.hkv}));
    *ambiguous = *ambiguous || k.shape[0] == pb.batch;
  } else if (per_token) {
    FA4_TRY(expect_shape(t, name, token_pattern, {k.shape[0], k.shape[1], pb.hkv}));
  } else {
    FA4_TRY(expect_shape(t, name, tokens_allowed ? (varlen ? "[B, Hkv] (per token: [Tk, Hkv])" : "[B, Hkv]") : "[B, Hkv]",
                         {pb.batch, pb.hkv}));
  }
  if (sc != nullptr) {
    sc->data = static_cast<const float*>(t.data);
    sc->per_token = per_token;
    sc->s0 = t.stride[0];
    sc->s1 = per_token && !varlen ? t.stride[1] : 0;
    sc->head = t.stride[t.ndim - 1];
  }
  return Status::Ok();
}

}  // namespace

Status normalize(const AttentionParams& p, Problem* out) {
  Problem pb;
  pb.p = &p;

  // ---- required tensors, dtypes, device, backend ----
  for (auto [t, name] : {std::pair{&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}, {&p.out, "out"}})
    if (!t->present()) return Status::Invalid(name, std::string(name) + ": required tensor is missing");
  const DeviceType dev = p.q.device;
  const int dev_idx = p.q.device_index;
  if (p.q.dtype != DType::float32 && p.q.dtype != DType::float16 && p.q.dtype != DType::bfloat16 &&
      p.q.dtype != DType::float8_e4m3)
    return Status::Invalid("q", std::string("q: dtype must be float32, float16, bfloat16 or float8_e4m3, got ") + dtype_name(p.q.dtype));
  pb.dtype = p.q.dtype;
  // An fp8 KV cache: 16-bit q with k and v both float8_e4m3 (never one of them).
  const bool q16 = pb.dtype == DType::float16 || pb.dtype == DType::bfloat16;
  pb.kv_fp8 = q16 && (p.k.dtype == DType::float8_e4m3 || p.v.dtype == DType::float8_e4m3);
  pb.kv_dtype = pb.kv_fp8 ? DType::float8_e4m3 : pb.dtype;
  if (pb.kv_fp8) {
    FA4_TRY(expect_dtype(p.k, "k", DType::float8_e4m3, "an fp8 KV cache: k and v both float8_e4m3"));
    FA4_TRY(expect_dtype(p.v, "v", DType::float8_e4m3, "an fp8 KV cache: k and v both float8_e4m3"));
  } else {
    const char* why = q16 ? "same as q, or float8_e4m3 for an fp8 KV cache" : "same as q";
    FA4_TRY(expect_dtype(p.k, "k", pb.dtype, why));
    FA4_TRY(expect_dtype(p.v, "v", pb.dtype, why));
  }
  pb.out_dtype = pb.dtype == DType::float8_e4m3 ? DType::bfloat16 : pb.dtype;
  FA4_TRY(expect_dtype(p.out, "out", pb.out_dtype, pb.dtype == DType::float8_e4m3 ? "bfloat16 for float8 inputs" : "same as q"));

  switch (p.backend) {
    case Backend::automatic: pb.backend = dev == DeviceType::cuda ? Backend::cuda : Backend::cpu; break;
    case Backend::reference:
    case Backend::cpu:
      if (dev != DeviceType::cpu)
        return Status::Invalid("backend", std::string("backend: ") + backend_name(p.backend) + " needs host tensors, but q is on cuda");
      pb.backend = p.backend;
      break;
    case Backend::cuda:
      if (dev != DeviceType::cuda)
        return Status::Invalid("backend", "backend: cuda needs device tensors, but q is host memory");
      pb.backend = p.backend;
      break;
    default: return Status::Invalid("backend", "backend: unknown value " + std::to_string(static_cast<int>(p.backend)));
  }
  pb.host_indices = dev == DeviceType::cpu;

  // ---- layout variant ----
  pb.varlen_q = p.cu_seqlens_q.present();
  const bool paged = p.page_table.present();
  const bool append = p.k_new.present() || p.v_new.present();
  const bool cache = !paged && (p.cache_seqlens.present() || p.cache_batch_idx.present() || append);
  const bool varlen_k = p.cu_seqlens_k.present();
  if (varlen_k && (paged || cache))
    return Status::Invalid("cu_seqlens_k", "cu_seqlens_k: cannot be combined with a KV cache (cache_seqlens / cache_batch_idx / page_table / k_new)");
  if (paged && p.cache_batch_idx.present())
    return Status::Invalid("cache_batch_idx", "cache_batch_idx: not used with paged KV (the page table already maps sequences to pages)");
  if (p.seqused_k.present() && (paged || cache))
    return Status::Invalid("seqused_k", "seqused_k: not used with a KV cache (cache_seqlens gives the valid lengths)");
  pb.kv = paged ? KvLayout::paged : cache ? KvLayout::cache : varlen_k ? KvLayout::varlen : KvLayout::dense;

  // ---- q / out ----
  const int qrank = pb.varlen_q ? 3 : 4;
  // On a GPU q / out / k / v / k_new / v_new with unaligned rows (odd head dims such as 59,
  // slices of a packed qkv) are staged; only a KV cache that receives k_new / v_new must be
  // aligned itself (the append writes into it in place).
  bool st_q = false, st_out = false, st_k = false, st_v = false, st_kn = false, st_vn = false;
  FA4_TRY(check_tensor(p.q, "q", qrank, dev, dev_idx, false, true, &st_q));
  FA4_TRY(check_tensor(p.out, "out", qrank, dev, dev_idx, true, true, &st_out));
  pb.gpu_stage |= (st_q ? kStageQ : 0u) | (st_out ? kStageOut : 0u);
  if (pb.varlen_q) {
    FA4_TRY(check_tensor(p.cu_seqlens_q, "cu_seqlens_q", 1, dev, dev_idx, false));
    FA4_TRY(expect_dtype(p.cu_seqlens_q, "cu_seqlens_q", DType::int32, "index tensor"));
    if (p.cu_seqlens_q.shape[0] < 1) return Status::Invalid("cu_seqlens_q", "cu_seqlens_q: needs at least one entry (batch + 1)");
    pb.batch = p.cu_seqlens_q.shape[0] - 1;
    pb.hq = p.q.shape[1];
    pb.dqk = p.q.shape[2];
  } else {
    pb.batch = p.q.shape[0];
    pb.sq_dense = p.q.shape[1];
    pb.hq = p.q.shape[2];
    pb.dqk = p.q.shape[3];
  }

  // ---- k / v ----
  const int krank = pb.kv == KvLayout::varlen ? 3 : 4;
  FA4_TRY(check_tensor(p.k, "k", krank, dev, dev_idx, append, true, append ? nullptr : &st_k));
  FA4_TRY(check_tensor(p.v, "v", krank, dev, dev_idx, append, true, append ? nullptr : &st_v));
  pb.gpu_stage |= (st_k ? kStageK : 0u) | (st_v ? kStageV : 0u);
  pb.hkv = p.k.shape[krank - 2];
  if (p.k.shape[krank - 1] != pb.dqk) {
    Msg s;
    s << "k: head dim " << p.k.shape[krank - 1] << " differs from q's " << pb.dqk;
    return Status::Invalid("k", s.str());
  }
  pb.dv = p.v.shape[krank - 1];
  for (int d = 0; d < krank - 1; ++d)
    if (p.v.shape[d] != p.k.shape[d]) {
      Msg s;
      s << "v: shape " << shape_str(p.v) << " must match k " << shape_str(p.k) << " in every dim but the last";
      return Status::Invalid("v", s.str());
    }
  if (pb.dqk < 1 || pb.dqk > kMaxHeadDim)
    return Status::Invalid("q", "q: head dim must be in [1, 256], got " + std::to_string(pb.dqk));
  if (pb.dv < 1 || pb.dv > kMaxHeadDim)
    return Status::Invalid("v", "v: head dim must be in [1, 256], got " + std::to_string(pb.dv));
  if (pb.hkv == 0 ? pb.hq != 0 : pb.hq % pb.hkv != 0) {
    Msg s;
    s << "k: number of kv heads (" << pb.hkv << ") must divide the number of q heads (" << pb.hq << ")";
    return Status::Invalid("k", s.str());
  }
  pb.group = pb.hkv > 0 ? pb.hq / pb.hkv : 1;
  // With batch and heads below 2^31 (kMaxCount) every product of two counts the backends form
  // (rows x group, batch x length) fits int64. Broadcast views could claim more at no memory cost
  // (the cuda planner's batch x Sq overflowed for an empty [2^62, 64, 0, 8] q).
  if (pb.batch > kMaxCount) {
    const char* name = pb.varlen_q ? "cu_seqlens_q" : "q";
    return Status::Invalid(name, std::string(name) + ": batch " + std::to_string(pb.batch) +
                                     " exceeds the int32 range of sequence indices");
  }
  if (pb.hq > kMaxCount)
    return Status::Invalid("q", "q: " + std::to_string(pb.hq) + " heads exceed the int32 range of head indices");
  if (pb.varlen_q) FA4_TRY(expect_shape(p.out, "out", "[Tq, Hq, Dv]", {p.q.shape[0], pb.hq, pb.dv}));
  else FA4_TRY(expect_shape(p.out, "out", "[B, Sq, Hq, Dv]", {pb.batch, pb.sq_dense, pb.hq, pb.dv}));

  const int64_t B = pb.batch;
  switch (pb.kv) {
    case KvLayout::dense:
      FA4_TRY(expect_shape(p.k, "k", "[B, Sk, Hkv, Dqk]", {B}));
      pb.kv_slot = p.k.shape[1];
      break;
    case KvLayout::varlen:
      FA4_TRY(check_tensor(p.cu_seqlens_k, "cu_seqlens_k", 1, dev, dev_idx, false));
      FA4_TRY(expect_dtype(p.cu_seqlens_k, "cu_seqlens_k", DType::int32, "index tensor"));
      {
        int64_t b1 = 0;  // B = q.shape[0] may be any int64 when q is empty
        if (!checked_add(B, 1, &b1))
          return Status::Invalid("cu_seqlens_k", "cu_seqlens_k: needs B + 1 entries, and B = " + std::to_string(B) + " has no successor");
        FA4_TRY(expect_shape(p.cu_seqlens_k, "cu_seqlens_k", "[B + 1]", {b1}));
      }
      break;
    case KvLayout::cache:
      pb.kv_slot = p.k.shape[1];
      if (p.cache_batch_idx.present()) {
        FA4_TRY(check_tensor(p.cache_batch_idx, "cache_batch_idx", 1, dev, dev_idx, false));
        FA4_TRY(expect_dtype(p.cache_batch_idx, "cache_batch_idx", DType::int32, "index tensor"));
        FA4_TRY(expect_shape(p.cache_batch_idx, "cache_batch_idx", "[B]", {B}));
      } else if (p.k.shape[0] < B) {
        Msg s;
        s << "k: cache has " << p.k.shape[0] << " sequences but the batch is " << B << " (pass cache_batch_idx to map them)";
        return Status::Invalid("k", s.str());
      }
      break;
    case KvLayout::paged:
      FA4_TRY(check_tensor(p.page_table, "page_table", 2, dev, dev_idx, false));
      FA4_TRY(expect_dtype(p.page_table, "page_table", DType::int32, "index tensor"));
      FA4_TRY(expect_shape(p.page_table, "page_table", "[B, max_pages]", {B}));
      pb.page_size = p.k.shape[1];
      pb.max_pages = p.page_table.shape[1];
      if (pb.page_size < 1) return Status::Invalid("k", "k: page size (dim 1 of a paged cache) must be >= 1");
      if (!checked_mul(pb.page_size, pb.max_pages, &pb.kv_slot))
        return Status::Invalid("page_table", "page_table: max_pages * page_size overflows");
      break;
  }
  // Sequence lengths are int32 everywhere else (cu_seqlens, cache_seqlens, seqused_k), so the
  // lengths implied by tensor shapes must fit too; this also bounds validation's page walk.
  if (pb.sq_dense > kMaxCount) return Status::Invalid("q", "q: sequence length " + std::to_string(pb.sq_dense) + " exceeds the int32 range");
  // Varlen token tensors: cu_seqlens entries (int32) address at most 2^31 - 1 tokens, and the
  // token count is the length bound of device-resident lengths (a broadcast q of 2^62 tokens
  // overflowed the cuda planner's rows x group).
  if (pb.varlen_q && p.q.shape[0] > kMaxCount)
    return Status::Invalid("q", "q: " + std::to_string(p.q.shape[0]) + " tokens exceed the int32 range of cu_seqlens_q");
  if (pb.kv == KvLayout::varlen && p.k.shape[0] > kMaxCount)
    return Status::Invalid("k", "k: " + std::to_string(p.k.shape[0]) + " tokens exceed the int32 range of cu_seqlens_k");
  if (pb.kv_slot > kMaxCount)
    return Status::Invalid(pb.kv == KvLayout::paged ? "page_table" : "k",
                           std::string(pb.kv == KvLayout::paged ? "page_table: max_pages * page_size" : "k: sequence length") + " (" +
                               std::to_string(pb.kv_slot) + ") exceeds the int32 range");
  if (p.cache_seqlens.present()) {
    FA4_TRY(check_tensor(p.cache_seqlens, "cache_seqlens", 1, dev, dev_idx, false));
    FA4_TRY(expect_dtype(p.cache_seqlens, "cache_seqlens", DType::int32, "index tensor"));
    FA4_TRY(expect_shape(p.cache_seqlens, "cache_seqlens", "[B]", {B}));
  }
  if (p.seqused_k.present()) {
    FA4_TRY(check_tensor(p.seqused_k, "seqused_k", 1, dev, dev_idx, false));
    FA4_TRY(expect_dtype(p.seqused_k, "seqused_k", DType::int32, "index tensor"));
    FA4_TRY(expect_shape(p.seqused_k, "seqused_k", "[B]", {B}));
  }

  // ---- append ----
  if (append) {
    if (!p.k_new.present() || !p.v_new.present())
      return Status::Invalid(p.k_new.present() ? "v_new" : "k_new", std::string(p.k_new.present() ? "v_new" : "k_new") + ": k_new and v_new must be given together");
    if (!p.cache_seqlens.present())
      return Status::Invalid("cache_seqlens", "cache_seqlens: required with k_new/v_new (it says where to append)");
    if (pb.varlen_q)
      return Status::Invalid("k_new", "k_new: appending is not supported together with varlen q (cu_seqlens_q)");
    FA4_TRY(check_tensor(p.k_new, "k_new", 4, dev, dev_idx, false, true, &st_kn));
    FA4_TRY(check_tensor(p.v_new, "v_new", 4, dev, dev_idx, false, true, &st_vn));
    pb.gpu_stage |= (st_kn ? kStageKNew : 0u) | (st_vn ? kStageVNew : 0u);
    // Into an fp8 cache the new rows come in q's dtype and are quantized (append_kv_host).
    const char* why = pb.kv_fp8 ? "same as q; quantized into the float8_e4m3 cache" : "same as k";
    FA4_TRY(expect_dtype(p.k_new, "k_new", pb.dtype, why));
    FA4_TRY(expect_dtype(p.v_new, "v_new", pb.dtype, pb.kv_fp8 ? why : "same as v"));
    pb.snew = p.k_new.shape[1];
    FA4_TRY(expect_shape(p.k_new, "k_new", "[B, Snew, Hkv, Dqk]", {B, pb.snew, pb.hkv, pb.dqk}));
    FA4_TRY(expect_shape(p.v_new, "v_new", "[B, Snew, Hkv, Dv]", {B, pb.snew, pb.hkv, pb.dv}));
  }

  // ---- scalars ----
  // The GPU kernels score in log2 units (scale * log2(e), softcap * log2(e) in fp32), so those
  // products must be finite floats: scale and softcap are at most FLT_MAX / log2(e) ~ 2.35e38.
  constexpr float kLog2e = 1.4426950408889634f;
  if (!std::isfinite(p.scale * kLog2e) || p.scale < 0.0f)
    return Status::Invalid("scale", "scale: must be finite, > 0 and at most 2.35e38 (0 = 1/sqrt(Dqk))");
  pb.scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(pb.dqk));
  if (!std::isfinite(p.softcap * kLog2e) || p.softcap < 0.0f)
    return Status::Invalid("softcap", "softcap: must be finite, >= 0 and at most 2.35e38 (0 = off)");
  pb.softcap = p.softcap;
  if (p.window_left < -1) return Status::Invalid("window_left", "window_left: must be >= -1 (-1 = unbounded), got " + std::to_string(p.window_left));
  if (p.window_right < -1) return Status::Invalid("window_right", "window_right: must be >= -1 (-1 = unbounded), got " + std::to_string(p.window_right));
  if (p.chunk_size < 0) return Status::Invalid("chunk_size", "chunk_size: must be >= 0 (0 = off), got " + std::to_string(p.chunk_size));
  if ((p.causal || p.chunk_size > 0) && p.window_right > 0)
    return Status::Invalid("window_right", "window_right: must be -1 or 0 with causal / chunked attention, got " + std::to_string(p.window_right));
  // Positions and lengths are below 2^31, so every |query position - key| is below 2^32: a window
  // or chunk of at least kMaxWindow is the same as one of exactly kMaxWindow (the window reaches
  // every key; the whole sequence is one chunk). Clamped, mask arithmetic stays far from int64
  // overflow on every backend, whatever int64 the caller passed (INT64_MAX = "unbounded" is common).
  constexpr int64_t kMaxWindow = int64_t{1} << 32;
  pb.mask.left = std::min(p.window_left, kMaxWindow);
  pb.mask.right = (p.causal || p.chunk_size > 0) ? 0 : std::min(p.window_right, kMaxWindow);
  pb.mask.chunk = std::min(p.chunk_size, kMaxWindow);
  if (p.num_splits < 0 || p.num_splits > kMaxSplits)
    return Status::Invalid("num_splits", "num_splits: must be in [0, 1024] (0 = heuristic), got " + std::to_string(p.num_splits));
  if (p.num_threads < 0) return Status::Invalid("num_threads", "num_threads: must be >= 0 (0 = all cores)");
  if ((p.workspace_alloc == nullptr) != (p.workspace_free == nullptr)) {
    const char* missing = p.workspace_alloc == nullptr ? "workspace_alloc" : "workspace_free";
    return Status::Invalid(missing, std::string(missing) + ": workspace_alloc and workspace_free must be set together");
  }

  // ---- optional extras ----
  if (p.sinks.present()) {
    FA4_TRY(check_tensor(p.sinks, "sinks", 1, dev, dev_idx, false));
    FA4_TRY(expect_dtype(p.sinks, "sinks", DType::float32, "one fp32 logit per query head"));
    FA4_TRY(expect_shape(p.sinks, "sinks", "[Hq]", {pb.hq}));
    pb.has_sinks = true;
  }
  bool scale_ambiguous = false;  // varlen k with B == Tk: [B, Hkv] and [Tk, Hkv] look alike
  for (auto [t, name, sc] : {std::tuple{&p.q_descale, "q_descale", static_cast<KvScale*>(nullptr)},
                             {&p.k_descale, "k_descale", &pb.k_sc}, {&p.v_descale, "v_descale", &pb.v_sc}}) {
    if (!t->present()) continue;
    if (pb.kv_fp8 && sc == nullptr)
      return Status::Invalid(name, std::string(name) + ": q is " + dtype_name(pb.dtype) +
                                       ", not float8: only k_descale / v_descale apply to an fp8 KV cache");
    if (pb.dtype != DType::float8_e4m3 && !pb.kv_fp8)
      return Status::Invalid(name, std::string(name) + ": descale factors apply to float8_e4m3 inputs only");
    FA4_TRY(check_kv_scale(*t, name, p.k, pb, dev, dev_idx, sc, &scale_ambiguous));
    pb.has_descale = true;
  }
  if (p.lse.present()) {
    FA4_TRY(check_tensor(p.lse, "lse", pb.varlen_q ? 2 : 3, dev, dev_idx, true));
    FA4_TRY(expect_dtype(p.lse, "lse", DType::float32, "log-sum-exp is fp32"));
    if (pb.varlen_q) {
      FA4_TRY(expect_shape(p.lse, "lse", "[Hq, Tq]", {pb.hq, p.q.shape[0]}));
      pb.lse_sh = p.lse.stride[0];
      pb.lse_si = p.lse.stride[1];
    } else {
      FA4_TRY(expect_shape(p.lse, "lse", "[B, Hq, Sq]", {B, pb.hq, pb.sq_dense}));
      pb.lse_sb = p.lse.stride[0];
      pb.lse_sh = p.lse.stride[1];
      pb.lse_si = p.lse.stride[2];
    }
    pb.has_lse = true;
  }
  if (p.max_seqlen_q < 0) return Status::Invalid("max_seqlen_q", "max_seqlen_q: must be >= 0 (0 = unknown)");
  if (p.max_seqlen_k < 0) return Status::Invalid("max_seqlen_k", "max_seqlen_k: must be >= 0 (0 = unknown)");

  pb.qs = row_strides(p.q);
  pb.os = row_strides(p.out);
  pb.ks = row_strides(p.k);
  pb.vs = row_strides(p.v);
  if (append) {
    pb.knew_s = row_strides(p.k_new);
    pb.vnew_s = row_strides(p.v_new);
  }

  // ---- index tensor contents (host memory only) ----
  if (pb.host_indices) {
    if (pb.varlen_q) FA4_TRY(check_cu_seqlens(p.cu_seqlens_q, "cu_seqlens_q", p.q.shape[0], "the number of q tokens"));
    if (pb.kv == KvLayout::varlen) FA4_TRY(check_cu_seqlens(p.cu_seqlens_k, "cu_seqlens_k", p.k.shape[0], "the number of k tokens"));
    // [B, Hkv] and [Tk, Hkv] scales read the same factors when token b is sequence b's only key.
    if (scale_ambiguous)
      for (int64_t b = 0; b < B; ++b)
        if (Problem::idx1(p.cu_seqlens_k, b + 1) != b + 1) return ambiguous_scale(p, B);
    // The checks of one sequence b: its key length (after seqused_k / cache_seqlens / the append)
    // into *len, and the index entries it uses (cache_batch_idx, the page table pages it reads).
    auto check_sequence = [&](int64_t b, int64_t* len_out) -> Status {
      int64_t slot = pb.kv == KvLayout::varlen ? Problem::idx1(p.cu_seqlens_k, b + 1) - Problem::idx1(p.cu_seqlens_k, b) : pb.kv_slot;
      int64_t len = slot;
      if (p.seqused_k.present()) {
        len = Problem::idx1(p.seqused_k, b);
        if (len < 0 || len > slot) {
          Msg s;
          s << "seqused_k: entry " << b << " is " << len << ", outside [0, " << slot << "] (keys of that sequence)";
          return Status::Invalid("seqused_k", s.str());
        }
      }
      if (p.cache_seqlens.present()) {
        len = Problem::idx1(p.cache_seqlens, b);
        int64_t end = 0;  // snew is any int64 from k_new's shape
        if (len < 0 || !checked_add(len, pb.snew, &end) || end > slot) {
          Msg s;
          s << "cache_seqlens: entry " << b << " is " << len;
          if (pb.snew) s << " and " << pb.snew << " rows are appended";
          s << ", but the cache holds " << slot << " keys per sequence";
          return Status::Invalid("cache_seqlens", s.str());
        }
        len = end;
      }
      if (pb.kv == KvLayout::cache && p.cache_batch_idx.present()) {
        const int32_t c = Problem::idx1(p.cache_batch_idx, b);
        if (c < 0 || c >= p.k.shape[0]) {
          Msg s;
          s << "cache_batch_idx: entry " << b << " is " << c << ", outside [0, " << p.k.shape[0] << ")";
          return Status::Invalid("cache_batch_idx", s.str());
        }
      }
      if (pb.kv == KvLayout::paged) {
        const int64_t used = (len + pb.page_size - 1) / pb.page_size;  // pages this sequence reads
        for (int64_t i = 0; i < used; ++i) {
          const int32_t pg = pb.page(b, i);
          if (pg < 0 || pg >= p.k.shape[0]) {
            Msg s;
            s << "page_table: entry [" << b << ", " << i << "] is " << pg << ", outside [0, " << p.k.shape[0] << ") pages";
            return Status::Invalid("page_table", s.str());
          }
        }
      }
      *len_out = len;
      return Status::Ok();
    };
    // The full walk costs O(B) time and 16 bytes per sequence, so it runs only when there is
    // work, and then B is bounded by memory the caller really has: by out's (non-overlapping)
    // rows for dense q, by cu_seqlens_q's entries for varlen q (a zero-stride one has a single
    // entry, 0: no rows), and for appends by the cache rows written (checked below).
    bool out_empty = false;
    for (int i = 0; i < p.out.ndim; ++i) out_empty = out_empty || p.out.shape[i] == 0;
    const bool q_rows = !out_empty && (!pb.varlen_q || Problem::idx1(p.cu_seqlens_q, B) > 0);
    const bool append_rows = pb.appends();  // snew stays 0 without k_new
    if (!q_rows && !append_rows) {
      // An empty problem (no query rows, nothing appended) computes nothing, but its index
      // tensors are checked all the same: an argument is not accepted or refused depending on
      // whether q happens to be empty (seqused_k beyond its slot with Tq = 0 was accepted). The
      // walk reads only what the caller really has: all B sequences when a per-sequence index
      // tensor holds B distinct entries (non-empty, stride[0] != 0); when every one is absent or
      // a broadcast (stride 0), all sequences are alike and sequence 0 stands for them (B may be
      // 2^40 sequences of nothing). The lengths are not kept: the vectors stay empty, max_sq =
      // max_sk = 0 (Problem's contract for a call with no work).
      bool backed = false;
      for (const TensorView* t : {&p.cu_seqlens_q, &p.cu_seqlens_k, &p.seqused_k, &p.cache_seqlens,
                                  &p.cache_batch_idx, &p.page_table}) {
        if (!t->present() || t->stride[0] == 0) continue;
        bool empty = false;
        for (int i = 0; i < t->ndim; ++i) empty = empty || t->shape[i] == 0;
        backed = backed || !empty;
      }
      const int64_t n = backed ? B : std::min<int64_t>(B, 1);
      for (int64_t b = 0; b < n; ++b) {
        int64_t len = 0;
        FA4_TRY(check_sequence(b, &len));
      }
      *out = std::move(pb);
      out->p = &p;
      return Status::Ok();
    }
    // Each appended cache row is written once (checked exactly below); by pigeonhole the batch
    // cannot write more rows than the cache has, which also bounds B before the walk.
    if (append_rows && pb.kv == KvLayout::cache && p.cache_batch_idx.present() && B > p.k.shape[0]) {
      Msg s;
      s << "cache_batch_idx: " << B << " sequences append into " << p.k.shape[0]
        << " cache rows (each cache row may be appended to by one sequence)";
      return Status::Invalid("cache_batch_idx", s.str());
    }
    int64_t appended = 0, page_rows = 0;
    if (append_rows && pb.kv == KvLayout::paged &&
        (!checked_mul(B, pb.snew, &appended) || !checked_mul(p.k.shape[0], pb.page_size, &page_rows) || appended > page_rows)) {
      Msg s;
      s << "page_table: " << B << " sequences append " << pb.snew << " rows each, more than the " << p.k.shape[0]
        << " pages x " << pb.page_size << " rows of the cache (each page row may be written once)";
      return Status::Invalid("page_table", s.str());
    }
    pb.seqlen_q.resize(B);
    pb.seqlen_k.resize(B);
    for (int64_t b = 0; b < B; ++b) {
      pb.seqlen_q[b] = pb.varlen_q ? Problem::idx1(p.cu_seqlens_q, b + 1) - Problem::idx1(p.cu_seqlens_q, b) : pb.sq_dense;
      int64_t len = 0;
      FA4_TRY(check_sequence(b, &len));
      pb.seqlen_k[b] = len;
      pb.max_sq = std::max(pb.max_sq, pb.seqlen_q[b]);
      pb.max_sk = std::max(pb.max_sk, len);
    }
    // Appends must not write the same cache row twice (the result would depend on order).
    if (pb.appends()) {
      if (pb.kv == KvLayout::cache && p.cache_batch_idx.present()) {
        std::set<int32_t> seen;
        for (int64_t b = 0; b < B; ++b)
          if (!seen.insert(Problem::idx1(p.cache_batch_idx, b)).second)
            return Status::Invalid("cache_batch_idx", "cache_batch_idx: entry " + std::to_string(b) + " repeats a cache row that is appended to twice");
      } else if (pb.kv == KvLayout::paged) {
        std::set<std::pair<int32_t, int64_t>> seen;  // (page, row in page) written
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = pb.seqlen_k[b] - pb.snew; j < pb.seqlen_k[b]; ++j)
            if (!seen.insert({pb.page(b, j / pb.page_size), j % pb.page_size}).second)
              return Status::Invalid("page_table", "page_table: sequence " + std::to_string(b) + " appends into a page row another sequence also writes");
      }
    }
  } else {
    if (scale_ambiguous) return ambiguous_scale(p, B);
    // Device-resident lengths cannot be read here. The bounds must hold whatever the contents
    // are, so they come from the tensor sizes, not from max_seqlen_q/k: a hint that is too small
    // would otherwise leave rows uncomputed (DESIGN §1: hints are never needed for correctness).
    pb.max_sq = pb.varlen_q ? p.q.shape[0] : pb.sq_dense;
    pb.max_sk = pb.kv == KvLayout::varlen ? p.k.shape[0] : pb.kv_slot;
  }
  *out = std::move(pb);
  out->p = &p;
  return Status::Ok();
}

Status validate_combine(const CombineParams& c, Backend* resolved, int64_t* rows) {
  for (auto [t, name] : {std::pair{&c.out_partials, "out_partials"}, {&c.lse_partials, "lse_partials"}, {&c.out, "out"}})
    if (!t->present()) return Status::Invalid(name, std::string(name) + ": required tensor is missing");
  const DeviceType dev = c.out_partials.device;
  const int di = c.out_partials.device_index;
  FA4_TRY(check_tensor(c.out_partials, "out_partials", 5, dev, di, false));
  FA4_TRY(check_tensor(c.lse_partials, "lse_partials", 4, dev, di, false));
  FA4_TRY(check_tensor(c.out, "out", 4, dev, di, true));
  FA4_TRY(expect_dtype(c.out_partials, "out_partials", DType::float32, "partials are fp32"));
  FA4_TRY(expect_dtype(c.lse_partials, "lse_partials", DType::float32, "partials are fp32"));
  if (c.out.dtype != DType::float32 && c.out.dtype != DType::float16 && c.out.dtype != DType::bfloat16)
    return Status::Invalid("out", std::string("out: dtype must be float32, float16 or bfloat16, got ") + dtype_name(c.out.dtype));
  const int64_t S = c.out_partials.shape[0], B = c.out_partials.shape[1], Sq = c.out_partials.shape[2],
                H = c.out_partials.shape[3], D = c.out_partials.shape[4];
  FA4_TRY(expect_shape(c.lse_partials, "lse_partials", "[S, B, H, Sq]", {S, B, H, Sq}));
  FA4_TRY(expect_shape(c.out, "out", "[B, Sq, H, Dv]", {B, Sq, H, D}));
  if (c.lse.present()) {
    FA4_TRY(check_tensor(c.lse, "lse", 3, dev, di, true));
    FA4_TRY(expect_dtype(c.lse, "lse", DType::float32, "log-sum-exp is fp32"));
    FA4_TRY(expect_shape(c.lse, "lse", "[B, H, Sq]", {B, H, Sq}));
  }
  if (c.num_threads < 0) return Status::Invalid("num_threads", "num_threads: must be >= 0 (0 = all cores)");
  // Rows to merge: every (b, i, h) when anything is written for it (Dv > 0, or an lse). Then the
  // written tensor is non-empty and non-overlapping, so B * Sq * H fits (checked all the same);
  // with nothing to write, B * Sq * H may be any overflowing product (B = 3, Sq = 2^62) and the
  // call does nothing.
  *rows = 0;
  if (D > 0 || c.lse.present()) {
    int64_t r = 0;
    if (!checked_mul(B, Sq, &r) || !checked_mul(r, H, &r))
      return Status::Invalid("out", "out: B * Sq * H overflows int64");
    *rows = r;
  }
  switch (c.backend) {
    case Backend::automatic: *resolved = dev == DeviceType::cuda ? Backend::cuda : Backend::cpu; break;
    case Backend::reference:
    case Backend::cpu:
      if (dev != DeviceType::cpu) return Status::Invalid("backend", std::string("backend: ") + backend_name(c.backend) + " needs host tensors");
      *resolved = c.backend;
      break;
    case Backend::cuda:
      if (dev != DeviceType::cuda) return Status::Invalid("backend", "backend: cuda needs device tensors");
      *resolved = c.backend;
      break;
    default: return Status::Invalid("backend", "backend: unknown value " + std::to_string(static_cast<int>(c.backend)));
  }
  return Status::Ok();
}

}  // namespace fa4::core
