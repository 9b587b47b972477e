// fa4 fuzz target: hostile-caller inputs through the C ABI (include/fa4/fa4_c.h).
//
// One input is decoded into a Spec: every fa4_params / fa4_combine_params field, each tensor's
// dtype, shape, strides, device, pointer misalignment, index-tensor contents, and a data seed.
// Two front ends produce a Spec:
//   * text ("#fa4 ..." first line, see README.md): the regression seeds in corpus/, readable
//     and independent of how the binary decoder evolves;
//   * binary (anything else): a structured decoder that builds a consistent, mostly valid
//     problem (dense / varlen q / varlen k / KV cache / paged / append, masks, sinks, lse, fp8
//     descales, splits) from a few bytes and then applies a few mutations that push single fields
//     onto and across validation boundaries (0, 1, +-1, int32 and int64 limits, negative and
//     overlapping strides, misaligned / null pointers, NaN / inf / extreme scalars, huge
//     dimensions applied consistently to every tensor, ...). Most mutated inputs stay close to
//     valid, so they reach the deep checks instead of failing on the first shape rule.
//
// Memory: each tensor gets exactly the bytes its view addresses (malloc, so ASan sees a 1-byte
// overrun), or -- for sparse huge views (large strides, few elements) -- a MAP_NORESERVE mapping
// whose last addressed byte sits right before a PROT_NONE guard. Views whose extent overflows
// int64 get a tiny buffer: the contract says they are rejected, so any access is a bug.
//
// Checks per input (any failure prints the Spec as text and aborts, which libFuzzer records):
//   * no sanitizer report, no crash, no exit, bounded time (libFuzzer -timeout / -rss_limit);
//   * a failing status names an argument that exists in the API, and its message mentions it;
//   * on failure every byte of every buffer is unchanged (outputs were poison-filled first);
//   * inputs the contract says must be rejected (extent overflow, negative size, misaligned or
//     null data, overlapping output elements, non-finite / negative scale or softcap, unknown
//     enum codes, device tensors in a CPU-only build) are rejected;
//   * on success: inputs unchanged, every output element written and nothing outside the output
//     elements written, the same call twice is bitwise identical, and the result equals the
//     `reference` backend within DESIGN.md §4 (or, when the logits are too large for fp32 to be
//     compared at those tolerances, the weaker invariants that still hold: finite where the
//     reference is finite, inside the hull of V, exact zeros / -inf on empty rows);
//   * metamorphic: a window or chunk larger than every sequence equals no window / plain causal
//     on `reference` (catches an overflow that both backends share).
// Deterministic: everything derives from the input bytes.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fa4/fa4_c.h"

namespace {

// ------------------------------------------------------------------------------------------
// The Spec
enum TIdx {
  Q, K, V, OUT, LSE, SINKS, QD, KD, VD, CUQ, CUK, SEQK, CSEQ, CBI, PT, KNEW, VNEW,  // forward
  OP, LP, COUT, CLSE,                                                                // combine
  NT
};
const char* const kTName[NT] = {"q", "k", "v", "out", "lse", "sinks", "q_descale", "k_descale", "v_descale",
                                "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "cache_seqlens", "cache_batch_idx",
                                "page_table", "k_new", "v_new", "out_partials", "lse_partials", "out", "lse"};
// Every argument name a status may carry (fa4_params / fa4_combine_params fields, plus the
// whole-struct "params").
const char* const kArgNames[] = {"q", "k", "v", "out", "lse", "scale", "softcap", "causal", "window_left",
                                 "window_right", "chunk_size", "sinks", "q_descale", "k_descale", "v_descale",
                                 "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "max_seqlen_q", "max_seqlen_k",
                                 "cache_seqlens", "cache_batch_idx", "page_table", "k_new", "v_new", "num_splits",
                                 "backend", "num_threads", "stream", "workspace", "workspace_bytes",
                                 "workspace_alloc", "workspace_free", "workspace_ctx", "params", "out_partials",
                                 "lse_partials"};

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();

struct TSpec {
  int32_t dtype = 0, ndim = 0, device = 0, device_index = 0;
  int64_t shape[FA4_MAX_DIMS] = {}, stride[FA4_MAX_DIMS] = {};
  int misalign = 0;       // bytes added to the data pointer
  bool null_data = false;
  int alias = -1;         // share this tensor's buffer (inputs only)
  std::vector<int64_t> vals;  // int32 tensors: values in logical (row-major) order
  int64_t fill = 0;           // int32 tensors: every element vals does not cover
  bool present() const { return ndim != 0; }
};

struct Special {  // one float input element set to a chosen value
  int t;
  int64_t idx;  // logical element index
  double v;
};

struct Spec {
  bool combine = false;
  TSpec t[NT];
  float scale = 0, softcap = 0;
  int32_t causal = 0;
  int64_t wl = -1, wr = -1, chunk = 0, maxq = 0, maxk = 0;
  int32_t splits = 0, backend = FA4_BACKEND_CPU, threads = 1;
  uint64_t seed = 1;
  double amp = 1;
  bool force = false;  // run even when the harness would skip it as too large (regression seeds)
  std::vector<Special> specials;
};

// ------------------------------------------------------------------------------------------
// Numbers
int dsize(int32_t dt) {
  switch (dt) {
    case FA4_FLOAT32: return 4;
    case FA4_FLOAT16: return 2;
    case FA4_BFLOAT16: return 2;
    case FA4_FLOAT8_E4M3: return 1;
    case FA4_INT32: return 4;
  }
  return 1;
}
bool is_float(int32_t dt) { return dt >= FA4_FLOAT32 && dt <= FA4_FLOAT8_E4M3; }

float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

float half_to_float(uint16_t h) {
  const uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) return (s ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) return bits_f32(s | 0x7f800000u | (m << 13));
  return bits_f32(s | ((e + 112) << 23) | (m << 13));
}
uint16_t float_to_half(float f) {  // round to nearest even, overflow to inf, NaN kept NaN
  const uint32_t u = f32_bits(f), s = (u >> 16) & 0x8000u;
  if (std::isnan(f)) return static_cast<uint16_t>(s | 0x7e00u);
  const float a = std::fabs(f);
  if (a >= 65520.0f) return static_cast<uint16_t>(s | 0x7c00u);
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: quantum 2^-24
    const float q = std::nearbyint(a * 16777216.0f);
    return static_cast<uint16_t>(s | static_cast<uint32_t>(q));
  }
  uint32_t x = f32_bits(a);
  x += 0xfffu + ((x >> 13) & 1u);
  return static_cast<uint16_t>(s | (((x >> 23) - 112) << 10) | ((x >> 13) & 0x3ffu));
}
float bf16_to_float(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }
uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return static_cast<uint16_t>((f32_bits(f) >> 16) | 0x40u);
  uint32_t u = f32_bits(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float e4m3_to_float(uint8_t b) {
  const float s = (b & 0x80) ? -1.0f : 1.0f;
  const int e = (b >> 3) & 0xf, m = b & 7;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) return s * std::ldexp(static_cast<float>(m), -9);
  return s * std::ldexp(1.0f + m / 8.0f, e - 7);
}
uint8_t float_to_e4m3(float f) {  // nearest code (codes 0x00..0x7e are increasing), saturating
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  int lo = 0, hi = 0x7e;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (e4m3_to_float(static_cast<uint8_t>(mid)) < a) lo = mid + 1; else hi = mid;
  }
  int best = lo;
  if (lo > 0) {
    const float dl = a - e4m3_to_float(static_cast<uint8_t>(lo - 1)), dh = e4m3_to_float(static_cast<uint8_t>(lo)) - a;
    if (dl < dh || (dl == dh && ((lo - 1) & 1) == 0)) best = lo - 1;
  }
  return static_cast<uint8_t>(sign | best);
}
double load_elem(const unsigned char* p, int32_t dt) {
  switch (dt) {
    case FA4_FLOAT32: { float f; std::memcpy(&f, p, 4); return f; }
    case FA4_FLOAT16: { uint16_t h; std::memcpy(&h, p, 2); return half_to_float(h); }
    case FA4_BFLOAT16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_float(h); }
    case FA4_FLOAT8_E4M3: return e4m3_to_float(*p);
    case FA4_INT32: { int32_t i; std::memcpy(&i, p, 4); return i; }
  }
  return 0;
}
void store_elem(unsigned char* p, int32_t dt, double x) {
  switch (dt) {
    case FA4_FLOAT32: { const float f = static_cast<float>(x); std::memcpy(p, &f, 4); return; }
    case FA4_FLOAT16: { const uint16_t h = float_to_half(static_cast<float>(x)); std::memcpy(p, &h, 2); return; }
    case FA4_BFLOAT16: { const uint16_t h = float_to_bf16(static_cast<float>(x)); std::memcpy(p, &h, 2); return; }
    case FA4_FLOAT8_E4M3: *p = float_to_e4m3(static_cast<float>(x)); return;
    case FA4_INT32: { const int32_t i = static_cast<int32_t>(x); std::memcpy(p, &i, 4); return; }
  }
  *p = static_cast<unsigned char>(std::isfinite(x) ? static_cast<int64_t>(std::clamp(x, -128.0, 255.0)) : 0);
}
// Output poison: a NaN with a payload no computation produces (inputs never carry it), so
// "not written" is distinguishable from any written value, NaN included.
void store_poison(unsigned char* p, int32_t dt) {
  switch (dt) {
    case FA4_FLOAT32: { const uint32_t u = 0x7fa1b2c3u; std::memcpy(p, &u, 4); return; }
    case FA4_FLOAT16: { const uint16_t u = 0x7d5bu; std::memcpy(p, &u, 2); return; }
    case FA4_BFLOAT16: { const uint16_t u = 0x7fa5u; std::memcpy(p, &u, 2); return; }
    default: std::memset(p, 0xa5, static_cast<size_t>(dsize(dt))); return;
  }
}
bool is_poison(const unsigned char* p, int32_t dt) {
  unsigned char q[4];
  store_poison(q, dt);
  return std::memcmp(p, q, static_cast<size_t>(dsize(dt))) == 0;
}
// One unit in the last place of |x| in dtype dt (the rounding the output store alone causes).
double out_ulp(double x, int32_t dt) {
  int mant = 23, min_exp = -126;
  if (dt == FA4_FLOAT16) mant = 10, min_exp = -14;
  if (dt == FA4_BFLOAT16) mant = 7, min_exp = -126;
  const double ax = std::fabs(x);
  int e = ax > 0 ? std::ilogb(ax) : min_exp;
  if (e < min_exp) e = min_exp;
  return std::ldexp(1.0, e - mant);
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ------------------------------------------------------------------------------------------
// Text form (seeds, reproducers)
const char* dtype_tok(int32_t d) {
  switch (d) {
    case FA4_FLOAT32: return "f32";
    case FA4_FLOAT16: return "f16";
    case FA4_BFLOAT16: return "bf16";
    case FA4_FLOAT8_E4M3: return "e4m3";
    case FA4_INT32: return "i32";
  }
  return nullptr;
}

std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string to_text(const Spec& s) {
  std::string o = s.combine ? "#fa4 combine\n" : "#fa4 forward\n";
  const int lo = s.combine ? OP : Q, hi = s.combine ? NT : OP;
  for (int i = lo; i < hi; ++i) {
    const TSpec& t = s.t[i];
    if (!t.present()) continue;
    o += kTName[i];
    o += ' ';
    o += dtype_tok(t.dtype) ? dtype_tok(t.dtype) : std::to_string(t.dtype);
    const int n = std::clamp(t.ndim, 0, FA4_MAX_DIMS);
    o += " [";
    for (int d = 0; d < n; ++d) { if (d) o += ','; o += std::to_string(t.shape[d]); }
    o += "] [";
    for (int d = 0; d < n; ++d) { if (d) o += ','; o += std::to_string(t.stride[d]); }
    o += "]";
    if (t.ndim < 0 || t.ndim > FA4_MAX_DIMS) o += " ndim=" + std::to_string(t.ndim);
    if (t.device || t.device_index) o += fmt(" dev=%d:%d", t.device, t.device_index);
    if (t.misalign) o += " misalign=" + std::to_string(t.misalign);
    if (t.null_data) o += " null=1";
    if (t.alias >= 0) o += std::string(" alias=") + kTName[t.alias];
    if (!t.vals.empty()) {
      o += " vals=";
      for (size_t k = 0; k < t.vals.size(); ++k) { if (k) o += ','; o += std::to_string(t.vals[k]); }
    }
    if (t.fill) o += " fill=" + std::to_string(t.fill);
    o += '\n';
  }
  if (!s.combine) {
    o += fmt("scale %.9g\nsoftcap %.9g\ncausal %d\n", s.scale, s.softcap, s.causal);
    o += fmt("window %lld %lld\nchunk %lld\n", (long long)s.wl, (long long)s.wr, (long long)s.chunk);
    o += fmt("max_seqlen %lld %lld\nsplits %d\n", (long long)s.maxq, (long long)s.maxk, s.splits);
  }
  o += fmt("backend %d\nthreads %d\nseed %llu\namp %.9g\n", s.backend, s.threads, (unsigned long long)s.seed, s.amp);
  for (const Special& sp : s.specials) o += fmt("special %s %lld %.9g\n", kTName[sp.t], (long long)sp.idx, sp.v);
  if (s.force) o += "force 1\n";
  return o;
}

int tensor_by_name(const std::string& n, bool combine) {
  if (combine && n == "out") return COUT;
  if (combine && n == "lse") return CLSE;
  for (int i = 0; i < NT; ++i)
    if (n == kTName[i]) return i;
  return -1;
}

int64_t parse_i64(const std::string& s) { return std::strtoll(s.c_str(), nullptr, 0); }

std::vector<int64_t> parse_list(const std::string& s) {  // "[1,2,3]" or "1,2,3"
  std::vector<int64_t> v;
  std::string cur;
  for (char c : s) {
    if (c == '[' || c == ']') continue;
    if (c == ',') { if (!cur.empty()) v.push_back(parse_i64(cur)); cur.clear(); }
    else cur += c;
  }
  if (!cur.empty()) v.push_back(parse_i64(cur));
  return v;
}

std::vector<std::string> split_ws(const std::string& line) {
  std::vector<std::string> w;
  std::string cur;
  for (char c : line) {
    if (c == ' ' || c == '\t' || c == '\r') { if (!cur.empty()) w.push_back(cur); cur.clear(); }
    else cur += c;
  }
  if (!cur.empty()) w.push_back(cur);
  return w;
}

// Lenient: unknown lines are ignored, so a mutated text seed still decodes to something.
Spec from_text(const uint8_t* d, size_t n) {
  Spec s;
  std::string all(reinterpret_cast<const char*>(d), n);
  s.combine = all.compare(0, 12, "#fa4 combine") == 0;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t e = all.find('\n', pos);
    if (e == std::string::npos) e = all.size();
    const std::vector<std::string> w = split_ws(all.substr(pos, e - pos));
    pos = e + 1;
    if (w.empty() || w[0][0] == '#') continue;
    const std::string& k = w[0];
    auto arg = [&](size_t i) { return i < w.size() ? w[i] : std::string("0"); };
    const int ti = tensor_by_name(k, s.combine);
    if (ti >= 0 && w.size() >= 4) {
      TSpec& t = s.t[ti];
      const char* const toks[] = {"f32", "f16", "bf16", "e4m3", "i32"};
      t.dtype = static_cast<int32_t>(parse_i64(w[1]));
      for (int c = 0; c < 5; ++c)
        if (w[1] == toks[c]) t.dtype = c;
      const std::vector<int64_t> sh = parse_list(w[2]), st = parse_list(w[3]);
      t.ndim = static_cast<int32_t>(std::min<size_t>(sh.size(), FA4_MAX_DIMS));
      for (int q = 0; q < t.ndim; ++q) {
        t.shape[q] = sh[q];
        t.stride[q] = q < static_cast<int>(st.size()) ? st[q] : 1;
      }
      for (size_t i = 4; i < w.size(); ++i) {
        const size_t eq = w[i].find('=');
        if (eq == std::string::npos) continue;
        const std::string key = w[i].substr(0, eq), val = w[i].substr(eq + 1);
        if (key == "ndim") t.ndim = static_cast<int32_t>(parse_i64(val));
        else if (key == "dev") {
          const size_t c = val.find(':');
          t.device = static_cast<int32_t>(parse_i64(val.substr(0, c)));
          if (c != std::string::npos) t.device_index = static_cast<int32_t>(parse_i64(val.substr(c + 1)));
        } else if (key == "misalign") t.misalign = static_cast<int>(std::clamp<int64_t>(parse_i64(val), 0, 15));
        else if (key == "null") t.null_data = parse_i64(val) != 0;
        else if (key == "alias") t.alias = tensor_by_name(val, s.combine);
        else if (key == "vals") { t.vals = parse_list(val); if (t.vals.size() > 4096) t.vals.resize(4096); }
        else if (key == "fill") t.fill = parse_i64(val);
      }
    } else if (k == "scale") s.scale = std::strtof(arg(1).c_str(), nullptr);
    else if (k == "softcap") s.softcap = std::strtof(arg(1).c_str(), nullptr);
    else if (k == "causal") s.causal = static_cast<int32_t>(parse_i64(arg(1)));
    else if (k == "window") { s.wl = parse_i64(arg(1)); s.wr = parse_i64(arg(2)); }
    else if (k == "chunk") s.chunk = parse_i64(arg(1));
    else if (k == "max_seqlen") { s.maxq = parse_i64(arg(1)); s.maxk = parse_i64(arg(2)); }
    else if (k == "splits") s.splits = static_cast<int32_t>(parse_i64(arg(1)));
    else if (k == "backend") {
      s.backend = static_cast<int32_t>(parse_i64(arg(1)));
      if (arg(1) == "auto") s.backend = FA4_BACKEND_AUTO;
      if (arg(1) == "reference") s.backend = FA4_BACKEND_REFERENCE;
      if (arg(1) == "cpu") s.backend = FA4_BACKEND_CPU;
      if (arg(1) == "cuda") s.backend = FA4_BACKEND_CUDA;
    } else if (k == "threads") s.threads = static_cast<int32_t>(parse_i64(arg(1)));
    else if (k == "seed") s.seed = std::strtoull(arg(1).c_str(), nullptr, 0);
    else if (k == "amp") s.amp = std::strtod(arg(1).c_str(), nullptr);
    else if (k == "force") s.force = parse_i64(arg(1)) != 0;
    else if (k == "special" && w.size() >= 4 && s.specials.size() < 64) {
      const int st = tensor_by_name(w[1], s.combine);
      if (st >= 0) s.specials.push_back({st, parse_i64(w[2]), std::strtod(w[3].c_str(), nullptr)});
    }
  }
  return s;
}

// ------------------------------------------------------------------------------------------
// Binary decoder
struct Reader {
  const uint8_t* d;
  size_t n, i = 0;
  uint8_t u8() { return i < n ? d[i++] : 0; }
  uint32_t u32() { uint32_t v = 0; for (int k = 0; k < 4; ++k) v |= static_cast<uint32_t>(u8()) << (8 * k); return v; }
  uint64_t u64() { return static_cast<uint64_t>(u32()) | (static_cast<uint64_t>(u32()) << 32); }
  int pick(int m) { return m > 0 ? u8() % m : 0; }
  template <typename T, size_t N> T from(const T (&a)[N]) { return a[pick(static_cast<int>(N))]; }
};

enum Style { CONTIG, PADDED, BHSD, STRIDED_LAST, BROADCAST };

struct Builder {
  Spec s;
  int style[NT] = {};
  int pad[NT] = {};
};

void set_shape(Builder& b, int t, std::initializer_list<int64_t> sh, int style = CONTIG) {
  TSpec& x = b.s.t[t];
  x.ndim = static_cast<int32_t>(sh.size());
  int i = 0;
  for (int64_t v : sh) x.shape[i++] = v;
  b.style[t] = style;
}

// Strides from the style, with wrapping arithmetic: a huge shape yields the overflowing strides
// a careless (or hostile) caller would compute.
void make_strides(Builder& b, int t, Reader& r) {
  TSpec& x = b.s.t[t];
  const int n = x.ndim;
  if (n <= 0 || n > FA4_MAX_DIMS) return;
  uint64_t st = 1;
  const uint64_t pad = static_cast<uint64_t>(b.pad[t]);
  auto sh = [&](int d) { return static_cast<uint64_t>(x.shape[d]); };
  switch (b.style[t]) {
    case BHSD:
      if (n == 4) {
        x.stride[3] = 1;
        x.stride[1] = static_cast<int64_t>(sh(3));
        x.stride[2] = static_cast<int64_t>(sh(1) * sh(3));
        x.stride[0] = static_cast<int64_t>(sh(2) * sh(1) * sh(3));
        return;
      }
      [[fallthrough]];
    case CONTIG:
    case PADDED:
    case STRIDED_LAST:
    case BROADCAST:
      st = b.style[t] == STRIDED_LAST ? 2 : 1;
      for (int d = n - 1; d >= 0; --d) {
        x.stride[d] = static_cast<int64_t>(st);
        st = st * sh(d) + (b.style[t] == PADDED && d > 0 ? pad : 0);
      }
      if (b.style[t] == BROADCAST) x.stride[r.pick(n)] = 0;
      return;
  }
}

// Wrapping arithmetic for mutations: the harness itself must be free of UB whatever it derives.
int64_t wadd(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wmul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

int64_t mut_shape(Reader& r, int64_t cur) {
  const int64_t tab[] = {0, 1, 2, wadd(cur, -1), wadd(cur, 1), wmul(cur, 2), 255, 256, 257, kI32Max, kI32Max + 1, int64_t(1) << 32,
                         int64_t(1) << 33, int64_t(1) << 40, int64_t(1) << 62, kI64Max, kI64Max - 1, -1, kI64Min,
                         static_cast<int64_t>(r.u64())};
  return r.from(tab);
}
int64_t mut_stride(Reader& r, int64_t cur) {
  const int64_t tab[] = {0, 1, -1, wmul(cur, -1), wadd(cur, -1), wadd(cur, 1), cur / 2, wmul(cur, 2), kI32Max, int64_t(1) << 31,
                         int64_t(1) << 32, int64_t(1) << 40, int64_t(1) << 62, kI64Max, kI64Min,
                         static_cast<int64_t>(r.u64())};
  return r.from(tab);
}
float mut_float(Reader& r) {
  const float inf = std::numeric_limits<float>::infinity();
  const float tab[] = {std::nanf(""), inf, -inf, -1.0f, 0.0f, -0.0f, 1e-45f, 1.17549435e-38f, 1e-30f, 1e-3f,
                       0.5f, 1.0f, 2.0f, 30.0f, 1e4f, 1e37f, 3e38f, std::numeric_limits<float>::max()};
  return r.from(tab);
}
int64_t mut_window(Reader& r, int64_t cur) {
  const int64_t tab[] = {-2, -1, 0, 1, 2, wadd(cur, 1), 1000, kI32Max, kI32Max + 1, int64_t(1) << 32, int64_t(1) << 62,
                         kI64Max, kI64Max - 1, kI64Min};
  return r.from(tab);
}

// The optional tensors and their row / head / dim positions for consistent overrides.
struct DimRef { int t, d; };

Spec decode_forward(Reader& r) {
  Builder b;
  Spec& s = b.s;
  const int dt = r.from({0, 0, 0, 0, 1, 1, 2, 3});
  const int odt = dt == FA4_FLOAT8_E4M3 ? FA4_BFLOAT16 : dt;
  // An fp8 KV cache under 16-bit q: k / v e4m3 (k_new / v_new in q's dtype), factors per
  // (batch, kv head) or per token (k's shape without its last dim).
  const bool kv8 = (dt == FA4_FLOAT16 || dt == FA4_BFLOAT16) && r.pick(3) == 0;
  const int kdt = kv8 ? FA4_FLOAT8_E4M3 : dt;
  const bool tok_scale = kv8 && r.pick(2);
  int64_t B = r.from({1, 1, 2, 2, 3, 4, 0, 1});
  const bool varq = r.pick(4) == 0;
  const int kvl = r.from({0, 0, 1, 2, 3});  // dense, varlen, cache, paged
  const bool app = kvl >= 2 && !varq && r.pick(2);
  const int64_t hkv = r.pick(16) == 0 ? 0 : 1 + r.pick(3);
  const int64_t hq = hkv * (1 + r.pick(3));
  const int64_t dtab[] = {1, 2, 3, 4, 8, 8, 16, 16, 32, 64, 128, 256};
  const int64_t dqk = r.from(dtab), dv = r.pick(2) ? dqk : r.from(dtab);
  const int64_t sq = r.from({1, 1, 2, 3, 4, 5, 7, 0, 1, 9, 16, 2});
  const int64_t sk = r.from({1, 2, 3, 5, 8, 13, 17, 0, 4, 32, 64, 1});
  const int big = r.from({CONTIG, CONTIG, CONTIG, PADDED, BHSD, STRIDED_LAST, BROADCAST, PADDED});
  const int64_t snew = app ? 1 + r.pick(3) : 0;
  uint64_t rs = r.u32();
  auto rnd = [&](int64_t m) { return m > 0 ? static_cast<int64_t>(splitmix(rs) % static_cast<uint64_t>(m)) : 0; };

  // ---- q / out / lse ----
  std::vector<int64_t> qlen(static_cast<size_t>(B)), cuq(1, 0);
  if (varq) {
    for (auto& l : qlen) { l = rnd(6); cuq.push_back(cuq.back() + l); }
    set_shape(b, Q, {cuq.back(), hq, dqk}, big == BHSD ? CONTIG : big);
    set_shape(b, OUT, {cuq.back(), hq, dv}, r.pick(3) == 0 ? PADDED : CONTIG);
    set_shape(b, CUQ, {B + 1});
    s.t[CUQ].vals = cuq;
  } else {
    set_shape(b, Q, {B, sq, hq, dqk}, big);
    set_shape(b, OUT, {B, sq, hq, dv}, r.from({CONTIG, CONTIG, PADDED, BHSD}));
  }
  if (r.pick(2)) {
    if (varq) set_shape(b, LSE, {hq, cuq.back()}, r.pick(3) == 0 ? PADDED : CONTIG);
    else set_shape(b, LSE, {B, hq, sq}, r.pick(3) == 0 ? PADDED : CONTIG);
  }
  if (r.pick(4) == 0) set_shape(b, SINKS, {hq});
  if (dt == FA4_FLOAT8_E4M3 || (kv8 && !tok_scale))
    for (int t : {QD, KD, VD})
      if (r.pick(2) && !(kv8 && t == QD)) set_shape(b, t, {B, hkv});

  // ---- k / v by layout ----
  const int kst = r.pick(3) == 0 ? big : CONTIG;
  switch (kvl) {
    case 0:
      set_shape(b, K, {B, sk, hkv, dqk}, kst);
      set_shape(b, V, {B, sk, hkv, dv}, kst);
      break;
    case 1: {
      std::vector<int64_t> cu(1, 0);
      for (int64_t i = 0; i < B; ++i) cu.push_back(cu.back() + rnd(9));
      const int64_t tk = cu.back() + rnd(2);
      set_shape(b, K, {tk, hkv, dqk}, kst == BHSD ? CONTIG : kst);
      set_shape(b, V, {tk, hkv, dv}, kst == BHSD ? CONTIG : kst);
      set_shape(b, CUK, {B + 1});
      s.t[CUK].vals = cu;
      if (r.pick(3) == 0) {
        set_shape(b, SEQK, {B});
        for (int64_t i = 0; i < B; ++i) s.t[SEQK].vals.push_back(rnd(cu[i + 1] - cu[i] + 1));
      }
      break;
    }
    case 2: {
      const int64_t smax = sk + snew, bc = B + rnd(3);
      set_shape(b, K, {bc, smax, hkv, dqk}, kst);
      set_shape(b, V, {bc, smax, hkv, dv}, kst);
      if (app || r.pick(4)) {
        set_shape(b, CSEQ, {B});
        for (int64_t i = 0; i < B; ++i) s.t[CSEQ].vals.push_back(rnd(smax - snew + 1));
      }
      if (r.pick(3) == 0 || bc > B + 1) {
        std::vector<int64_t> perm(static_cast<size_t>(bc));
        for (int64_t i = 0; i < bc; ++i) perm[i] = i;
        for (int64_t i = bc - 1; i > 0; --i) std::swap(perm[i], perm[rnd(i + 1)]);
        set_shape(b, CBI, {B});
        s.t[CBI].vals.assign(perm.begin(), perm.begin() + B);
      }
      break;
    }
    case 3: {
      const int64_t ps = r.from({1, 2, 3, 4, 5, 16}), mp = 1 + rnd(4), np = B * mp + rnd(3);
      set_shape(b, K, {np, ps, hkv, dqk}, kst);
      set_shape(b, V, {np, ps, hkv, dv}, kst);
      set_shape(b, PT, {B, mp}, r.pick(4) == 0 ? PADDED : CONTIG);
      std::vector<int64_t> perm(static_cast<size_t>(np));
      for (int64_t i = 0; i < np; ++i) perm[i] = i;
      for (int64_t i = np - 1; i > 0; --i) std::swap(perm[i], perm[rnd(i + 1)]);
      const bool dup = !app && r.pick(4) == 0;  // shared pages are fine when nothing is written
      for (int64_t i = 0; i < B * mp; ++i) s.t[PT].vals.push_back(dup ? rnd(np) : perm[i]);
      const int64_t cap = ps * mp;
      if (app || r.pick(3)) {
        set_shape(b, CSEQ, {B});
        for (int64_t i = 0; i < B; ++i) s.t[CSEQ].vals.push_back(snew > cap ? 0 : rnd(cap - snew + 1));
      }
      break;
    }
  }
  if (tok_scale)  // per token: k's shape without its last dim, sometimes broadcast
    for (int t : {KD, VD}) {
      if (!r.pick(3)) continue;
      const TSpec& k = s.t[K];
      if (k.ndim == 4) set_shape(b, t, {k.shape[0], k.shape[1], hkv}, r.pick(4) == 0 ? BROADCAST : CONTIG);
      else set_shape(b, t, {k.shape[0], hkv}, r.pick(4) == 0 ? BROADCAST : CONTIG);
    }
  if (app) {
    set_shape(b, KNEW, {B, snew, hkv, dqk}, r.pick(3) == 0 ? big : CONTIG);
    set_shape(b, VNEW, {B, snew, hkv, dv}, r.pick(3) == 0 ? big : CONTIG);
  }
  for (int t = 0; t < OP; ++t) b.pad[t] = 1 + r.pick(3);

  // ---- consistent override of one logical dimension (huge / zero), then maybe a zero ----
  const bool dense_k = kvl == 0;
  const int kb = dense_k || kvl == 2 ? 0 : -1;  // k's dim that is the batch (-1: none)
  const int sb = tok_scale ? kb : 0;            // k_descale / v_descale's (per token: k's)
  auto refs = [&](int which) -> std::vector<DimRef> {
    switch (which) {
      case 0:  // batch
        if (varq)
          return {{CUQ, 0}, {CUK, 0}, {SEQK, 0}, {CSEQ, 0}, {CBI, 0}, {PT, 0}, {QD, 0}, {KD, sb}, {VD, sb},
                  {K, kb}, {V, kb}};
        return {{Q, 0}, {OUT, 0}, {LSE, 0}, {CUK, 0}, {SEQK, 0}, {CSEQ, 0}, {CBI, 0}, {PT, 0}, {QD, 0}, {KD, sb},
                {VD, sb}, {KNEW, 0}, {VNEW, 0}, {K, kb}, {V, kb}};
      case 1:  // query rows
        if (varq) return {{Q, 0}, {OUT, 0}, {LSE, 1}};
        return {{Q, 1}, {OUT, 1}, {LSE, 2}};
      case 2: {  // key rows (page size for paged)
        const int kr = kvl == 1 ? 0 : 1, sr = tok_scale ? kr : -1;
        return {{K, kr}, {V, kr}, {KD, sr}, {VD, sr}};
      }
      case 3: {  // heads
        const int h = varq ? 1 : 2, hk = kvl == 1 ? 1 : 2, sh = tok_scale ? hk : 1;
        return {{Q, h}, {OUT, h}, {LSE, varq ? 0 : 1}, {SINKS, 0}, {K, hk}, {V, hk}, {KNEW, 2}, {VNEW, 2},
                {QD, 1}, {KD, sh}, {VD, sh}};
      }
      case 4: return {{Q, varq ? 2 : 3}, {K, kvl == 1 ? 2 : 3}, {KNEW, 3}};
      case 5: return {{V, kvl == 1 ? 2 : 3}, {OUT, varq ? 2 : 3}, {VNEW, 3}};
      case 6: return {{KNEW, 1}, {VNEW, 1}};
      default: return {{PT, 1}};  // pages per sequence
    }
  };
  auto apply = [&](int which, int64_t v) {
    for (DimRef x : refs(which)) {
      TSpec& t = s.t[x.t];
      if (!t.present() || x.d < 0 || x.d >= t.ndim) continue;
      t.shape[x.d] = (x.t == CUQ || x.t == CUK) ? static_cast<int64_t>(static_cast<uint64_t>(v) + 1) : v;
    }
  };
  if (r.pick(6) == 0) {
    const int64_t huge[] = {0, 1, kI32Max, int64_t(1) << 31, int64_t(1) << 32, int64_t(1) << 40, int64_t(1) << 62, kI64Max};
    apply(r.pick(8), r.from(huge));
    if (r.pick(2)) apply(r.pick(8), 0);
  }
  // Index tensors too large to spell out become stride-0 views of one value (all zero: empty
  // sequences, page 0), as a caller broadcasting a scalar would pass.
  for (int t = 0; t < OP; ++t) make_strides(b, t, r);
  for (int t : {CUQ, CUK, SEQK, CSEQ, CBI, PT}) {
    TSpec& x = s.t[t];
    if (!x.present()) continue;
    x.dtype = FA4_INT32;
    double n = 1;
    for (int d = 0; d < x.ndim; ++d) n *= static_cast<double>(x.shape[d]);
    if (n > 4096 || n < 0) {
      x.vals.clear();
      for (int d = 0; d < x.ndim; ++d) x.stride[d] = 0;
    } else if (r.pick(8) == 0 && x.ndim == 1) {
      x.stride[0] = 2;
    }
  }
  for (int t : {Q, K, V, KNEW, VNEW}) if (s.t[t].present()) s.t[t].dtype = t == K || t == V ? kdt : dt;
  if (s.t[OUT].present()) s.t[OUT].dtype = odt;
  for (int t : {LSE, SINKS, QD, KD, VD}) if (s.t[t].present()) s.t[t].dtype = FA4_FLOAT32;

  // ---- scalars ----
  if (r.pick(4) == 0) s.scale = r.from({0.5f, 0.125f, 1.0f, 2.0f, 0.01f, 0.25f});
  if (r.pick(5) == 0) s.softcap = r.from({1.0f, 5.0f, 30.0f, 0.5f});
  switch (r.pick(6)) {
    case 2: s.causal = 1; break;
    case 3: s.wl = r.pick(5) - 1; s.wr = r.pick(5) - 1; break;
    case 4: s.causal = 1; s.wl = r.pick(5); break;
    case 5: s.chunk = 1 + r.pick(4); if (r.pick(2)) s.wl = r.pick(6); break;
    default: break;
  }
  s.splits = r.from({0, 1, 2, 3, 0, 1, 5, 64});
  s.threads = r.from({1, 1, 2, 0});
  s.backend = r.from({FA4_BACKEND_CPU, FA4_BACKEND_CPU, FA4_BACKEND_CPU, FA4_BACKEND_AUTO, FA4_BACKEND_REFERENCE});
  if (r.pick(4) == 0) { s.maxq = r.pick(4); s.maxk = r.pick(8); }
  s.seed = r.u32();
  s.amp = r.from({1.0, 1.0, 1.0, 0.125, 4.0, 16.0});
  return s;
}

Spec decode_combine(Reader& r) {
  Builder b;
  Spec& s = b.s;
  s.combine = true;
  int64_t S = r.from({1, 2, 3, 4, 0, 2}), B = r.from({1, 2, 3, 0}), Sq = r.from({1, 2, 3, 5, 0}),
          H = r.from({1, 2, 3, 0}), D = r.from({1, 2, 3, 4, 8, 16, 64, 0});
  const int odt = r.from({0, 0, 1, 2});
  if (r.pick(6) == 0) {
    const int64_t huge[] = {0, kI32Max, int64_t(1) << 32, int64_t(1) << 40, int64_t(1) << 62, kI64Max};
    int64_t* dims[] = {&S, &B, &Sq, &H, &D};
    *dims[r.pick(5)] = r.from(huge);
    if (r.pick(2)) *dims[r.pick(5)] = 0;
  }
  const int st = r.from({CONTIG, CONTIG, PADDED, STRIDED_LAST});
  set_shape(b, OP, {S, B, Sq, H, D}, st);
  set_shape(b, LP, {S, B, H, Sq}, r.pick(3) == 0 ? PADDED : CONTIG);
  set_shape(b, COUT, {B, Sq, H, D}, r.from({CONTIG, CONTIG, PADDED, BHSD}));
  if (r.pick(2)) set_shape(b, CLSE, {B, H, Sq}, r.pick(3) == 0 ? PADDED : CONTIG);
  for (int t = OP; t < NT; ++t) {
    b.pad[t] = 1 + r.pick(3);
    make_strides(b, t, r);
    s.t[t].dtype = FA4_FLOAT32;
  }
  s.t[COUT].dtype = odt;
  s.threads = r.from({1, 1, 2, 0});
  s.backend = r.from({FA4_BACKEND_CPU, FA4_BACKEND_CPU, FA4_BACKEND_AUTO, FA4_BACKEND_REFERENCE});
  s.seed = r.u32();
  s.amp = r.from({1.0, 1.0, 4.0, 0.125});
  return s;
}

void mutate(Spec& s, Reader& r) {
  std::vector<int> present;
  const int lo = s.combine ? OP : Q, hi = s.combine ? NT : OP;
  for (int i = lo; i < hi; ++i)
    if (s.t[i].present()) present.push_back(i);
  if (present.empty()) return;
  const int ti = present[r.pick(static_cast<int>(present.size()))];
  TSpec& t = s.t[ti];
  const int nd = std::clamp(t.ndim, 1, FA4_MAX_DIMS);
  switch (r.pick(16)) {
    case 0: case 1: { const int d = r.pick(nd); t.shape[d] = mut_shape(r, t.shape[d]); break; }
    case 2: case 3: { const int d = r.pick(nd); t.stride[d] = mut_stride(r, t.stride[d]); break; }
    case 4: t.dtype = r.from({0, 1, 2, 3, 4, 5, -1, 0x7fffffff}); break;
    case 5: {
      const int32_t nv = r.from({0, t.ndim - 1, t.ndim + 1, 7, -1, 6});
      for (int d = std::max(t.ndim, 0); d < std::min(nv, FA4_MAX_DIMS); ++d) t.shape[d] = 1, t.stride[d] = 1;
      t.ndim = nv;
      break;
    }
    case 6: t.misalign = 1 + r.pick(3); break;
    case 7: t.null_data = true; break;
    case 8: t.device = r.from({1, 2, -1}); t.device_index = r.from({0, 1, -1}); break;
    case 9: {
      if (t.vals.empty()) { t.fill = r.from({int64_t(-1), int64_t(1), kI32Max, kI32Min}); break; }
      const size_t e = r.pick(static_cast<int>(std::min<size_t>(t.vals.size(), 255)));
      const int64_t c = t.vals[e];
      t.vals[e] = r.from({int64_t(-1), int64_t(0), int64_t(1), wadd(c, -1), wadd(c, 1), kI32Max, kI32Min, wmul(c, 2), wadd(c, 1000)});
      break;
    }
    case 10: s.scale = mut_float(r); break;
    case 11: s.softcap = mut_float(r); break;
    case 12:
      switch (r.pick(4)) {
        case 0: s.wl = mut_window(r, s.wl); break;
        case 1: s.wr = mut_window(r, s.wr); break;
        case 2: s.chunk = mut_window(r, s.chunk); break;
        default: s.causal = r.from({0, 1, 2, -1}); break;
      }
      break;
    case 13:
      switch (r.pick(5)) {
        case 0: s.splits = r.from({-1, 0, 1, 1024, 1025, 0x7fffffff}); break;
        case 1: s.threads = r.from({-1, 0, 1, 2, 64, 100000, 0x7fffffff}); break;
        case 2: s.backend = r.from({0, 1, 2, 3, 4, -1}); break;
        case 3: s.maxq = r.from({int64_t(-1), int64_t(0), int64_t(1), kI64Max}); break;
        default: s.maxk = r.from({int64_t(-1), int64_t(0), int64_t(1), kI64Max}); break;
      }
      break;
    case 14: {
      // Special input values (extreme but finite ones too: item 9's |k| = 3e38).
      const int ft = r.from({Q, K, V, K, V, KNEW, SINKS, QD, KD, OP, LP});
      const int tt = s.combine ? (ft == OP || ft == LP ? ft : LP) : (ft == OP || ft == LP ? K : ft);
      const double inf = std::numeric_limits<double>::infinity();
      const double vals[] = {std::nan(""), inf, -inf, 3e38, -3e38, 65504, 448, 1e-45, 0, 1e4, -1e4};
      s.specials.push_back({tt, static_cast<int64_t>(r.u32() % 4096), r.from(vals)});
      break;
    }
    default: {
      // Drop an optional tensor or add a stray one the layout does not use.
      if (s.combine) { if (s.t[CLSE].present()) s.t[CLSE].ndim = 0; break; }
      const int o = r.from({LSE, SINKS, QD, CUQ, CUK, SEQK, CSEQ, CBI, PT, KNEW, VNEW, V});
      TSpec& x = s.t[o];
      if (o == V) {  // v shares k's buffer (as fa4.attention(q, k, k))
        if (!s.t[KNEW].present()) x.alias = K;
      } else if (x.present() && r.pick(2)) {
        x.ndim = 0;
      } else if (!x.present()) {
        const int64_t B = s.t[Q].ndim == 4 ? s.t[Q].shape[0] : 1;
        x.ndim = o == PT ? 2 : (o == QD || o == KNEW || o == VNEW) ? (o == QD ? 2 : 4) : 1;
        x.dtype = (o == LSE || o == SINKS || o == QD) ? FA4_FLOAT32 : (o == KNEW || o == VNEW) ? s.t[Q].dtype : FA4_INT32;
        for (int d = 0; d < x.ndim; ++d) x.shape[d] = d == 0 ? wadd(B, o == CUQ || o == CUK) : 1, x.stride[d] = 1;
        if (x.dtype == FA4_INT32) x.vals.assign(static_cast<size_t>(std::clamp<int64_t>(x.shape[0], 0, 64)), 0);
      }
      break;
    }
  }
}

Spec decode(const uint8_t* d, size_t n) {
  if (n >= 4 && std::memcmp(d, "#fa4", 4) == 0) return from_text(d, n);
  Reader r{d, n};
  const bool combine = r.pick(8) == 7;
  Spec s = combine ? decode_combine(r) : decode_forward(r);
  const int nm = r.from({0, 1, 1, 2, 3, 0, 1, 2});
  for (int i = 0; i < nm; ++i) mutate(s, r);
  return s;
}

// ------------------------------------------------------------------------------------------
// Analysis: what the contract says about a Spec, without running anything.
constexpr int64_t kMallocCap = int64_t(1) << 20;    // bytes: exact heap buffers up to this
constexpr int64_t kMapCap = int64_t(1) << 40;       // bytes: sparse reserved mappings up to this
constexpr int64_t kElemCap = int64_t(1) << 18;      // elements the harness enumerates per tensor
constexpr double kWorkCap = 2e7;                    // multiply-adds of a run the harness allows

struct Ext {
  bool overflow = false;  // some offset or byte count leaves int64: must be rejected
  bool empty = false;
  bool negshape = false;
  int64_t lo = 0, hi = 0;  // element offsets reached (hi inclusive), valid unless overflow
  double elems = 0;
  int es = 1;
  int64_t span_bytes() const { return (hi - lo + 1) * es; }
  // Whether materialize() gives the view real memory: non-empty views that exist and fit a
  // mapping; the others get a trap block (any access is reported).
  bool backed() const { return !empty && !overflow && span_bytes() <= kMapCap; }
};

Ext extent(const TSpec& t) {
  Ext e;
  e.es = dsize(t.dtype);
  if (t.ndim <= 0 || t.ndim > FA4_MAX_DIMS) { e.empty = true; return e; }
  e.elems = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0) e.negshape = true;
    if (t.shape[d] == 0) e.empty = true;
    e.elems *= static_cast<double>(t.shape[d]);
  }
  if (e.negshape) { e.overflow = true; e.elems = 0; return e; }
  if (e.empty) { e.elems = 0; return e; }
  __int128 lo = 0, hi = 0;
  const __int128 lim = static_cast<__int128>(kI64Max);
  for (int d = 0; d < t.ndim; ++d) {
    const __int128 m = static_cast<__int128>(t.shape[d] - 1) * t.stride[d];
    (m < 0 ? lo : hi) += m;
    if (hi > lim || lo < -lim) { e.overflow = true; return e; }
  }
  if ((hi + 1) * e.es > lim || lo * e.es < -lim || (hi - lo + 1) * e.es > lim) { e.overflow = true; return e; }
  e.lo = static_cast<int64_t>(lo);
  e.hi = static_cast<int64_t>(hi);
  return e;
}

// Calls f(logical index, element offset) for the first `limit` logical elements, row-major.
template <typename F>
void for_each_elem(const TSpec& t, int64_t limit, F f) {
  if (t.ndim <= 0 || t.ndim > FA4_MAX_DIMS) return;
  int64_t idx[FA4_MAX_DIMS] = {};
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] <= 0) return;
  int64_t off = 0;
  for (int64_t n = 0; n < limit; ++n) {
    f(n, off);
    int d = t.ndim - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) { off += t.stride[d]; break; }
      off -= (t.shape[d] - 1) * t.stride[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}
int64_t offset_of(const TSpec& t, int64_t logical) {  // logical < elems, extent not overflowing
  int64_t off = 0;
  for (int d = t.ndim - 1; d >= 0; --d) {
    off += (logical % t.shape[d]) * t.stride[d];
    logical /= t.shape[d];
  }
  return off;
}

struct Model {
  Ext ext[NT];
  std::vector<std::string> must_reject;  // reasons the contract requires a rejection
  bool skip = false;                     // too large to back or to run (and not must_reject)
  bool append = false;
  bool nonfinite_inputs = false;
  bool writable[NT] = {};
};

// Exact overlap test for an output view: 1 overlap, 0 none, -1 unknown (too large to check).
int overlaps(const TSpec& t, const Ext& e) {
  if (e.empty || e.overflow) return 0;
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] > 1 && t.stride[d] == 0) return 1;
  if (e.elems > static_cast<double>(e.hi - e.lo + 1)) return 1;  // pigeonhole
  if (e.elems > kElemCap) return -1;
  std::vector<int64_t> offs;
  offs.reserve(static_cast<size_t>(e.elems));
  for_each_elem(t, kElemCap, [&](int64_t, int64_t o) { offs.push_back(o); });
  std::sort(offs.begin(), offs.end());
  return std::adjacent_find(offs.begin(), offs.end()) != offs.end() ? 1 : 0;
}

Model analyze(const Spec& s, bool cuda_available) {
  Model m;
  const int lo = s.combine ? OP : Q, hi = s.combine ? NT : OP;
  m.append = !s.combine && (s.t[KNEW].present() || s.t[VNEW].present());
  for (int i = lo; i < hi; ++i) {
    const TSpec& t = s.t[i];
    m.ext[i] = extent(t);
    const Ext& e = m.ext[i];
    if (!t.present()) continue;
    const std::string n = kTName[i];
    if (t.ndim < 0 || t.ndim > FA4_MAX_DIMS) m.must_reject.push_back(n + ": ndim out of range");
    if (!dtype_tok(t.dtype)) m.must_reject.push_back(n + ": unknown dtype code");
    if (t.device != FA4_DEVICE_CPU && (t.device != FA4_DEVICE_CUDA || !cuda_available))
      m.must_reject.push_back(n + ": not host memory and no cuda backend");
    if (e.negshape) m.must_reject.push_back(n + ": negative size");
    else if (e.overflow) m.must_reject.push_back(n + ": extent overflows int64 bytes");
    if (!e.empty && !e.overflow && t.null_data) m.must_reject.push_back(n + ": null data");
    if (!e.empty && !e.overflow && t.misalign % dsize(t.dtype) != 0) m.must_reject.push_back(n + ": misaligned data");
  }
  if (!s.combine) {
    if (!std::isfinite(s.scale) || s.scale < 0) m.must_reject.push_back("scale: not finite or negative");
    if (!std::isfinite(s.softcap) || s.softcap < 0) m.must_reject.push_back("softcap: not finite or negative");
    m.writable[OUT] = m.writable[LSE] = true;
    m.writable[K] = m.writable[V] = m.append;
  } else {
    m.writable[COUT] = m.writable[CLSE] = true;
  }
  for (const Special& sp : s.specials)
    if (!std::isfinite(sp.v) && !(s.combine && sp.t == LP && sp.v < 0)) m.nonfinite_inputs = true;
  double work = 0;
  // A valid, non-empty view larger than kMapCap cannot be backed (it gets a trap block): a call
  // the contract accepts may read it, so `force` cannot run such a call unless something in it
  // must be rejected first (a forced seed mutated into a valid call with a page table 3.7e18
  // bytes long read its second entry: a harness finding, not the library's).
  bool unbackable = false;
  for (int i = lo; i < hi; ++i) {
    const TSpec& t = s.t[i];
    const Ext& e = m.ext[i];
    if (!t.present()) continue;
    if (m.writable[i]) {
      const int ov = overlaps(t, e);
      if (ov == 1) m.must_reject.push_back(std::string(kTName[i]) + ": output elements overlap");
      if (ov < 0) m.skip = true;
    }
    if (!e.overflow && !e.empty && !e.backed()) m.skip = true, unbackable = true;
    if (!e.overflow && !e.empty && e.span_bytes() > kMallocCap && e.elems > kElemCap) m.skip = true;
    work += e.elems;
  }
  if (!s.combine && s.t[Q].present() && s.t[K].present()) {
    const TSpec &q = s.t[Q], &k = s.t[K];
    const double dq = std::max<double>(1, static_cast<double>(q.shape[std::clamp(q.ndim - 1, 0, 5)]));
    double krows = 1;
    for (int d = 0; d < std::clamp(k.ndim - 2, 0, 4); ++d) krows *= std::max<double>(0, static_cast<double>(k.shape[d]));
    const double dvv = s.t[V].present() ? std::max<double>(0, static_cast<double>(s.t[V].shape[std::clamp(s.t[V].ndim - 1, 0, 5)])) : 0;
    work += m.ext[Q].elems / dq * krows * (dq + dvv);
  }
  if (work > kWorkCap) m.skip = true;
  if (!m.must_reject.empty() || (s.force && !unbackable)) m.skip = false;
  // With a cuda build a "cuda" tensor would really be launched on: host pointers claimed as
  // device memory are not something the contract can detect.
  if (cuda_available)
    for (int i = lo; i < hi; ++i)
      if (s.t[i].present() && s.t[i].device != FA4_DEVICE_CPU) m.skip = true;
  return m;
}

// ------------------------------------------------------------------------------------------
// Memory
struct Region {
  unsigned char* lo = nullptr;  // first byte we may touch
  size_t len = 0;
  void* block = nullptr;        // malloc'd or mapped
  size_t block_len = 0;
  bool mapped = false;
  std::vector<unsigned char> snap;  // heap regions: bytes after filling
};

struct World {
  std::vector<Region> regions;
  int region_of[NT];
  unsigned char* data[NT] = {};
  std::vector<std::vector<unsigned char>> elem_snap;  // mapped tensors: element bytes in order
  World() { std::fill(region_of, region_of + NT, -1); elem_snap.resize(NT); }
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  ~World() {
    for (Region& g : regions) {
      if (g.mapped) munmap(g.block, g.block_len);
      else std::free(g.block);
    }
  }
};

[[noreturn]] void finding(const Spec& s, const std::string& what);

// Allocates one region covering element offsets [lo, hi] of `es`-byte elements and returns the
// pointer for element 0 (plus misalignment). Overflow / empty views get a tiny heap block whose
// returned pointer sits at its end, so any access at all is reported by ASan.
unsigned char* alloc_region(World& w, const Ext& e, int misalign, bool backed) {
  Region g;
  if (!backed) {
    // malloc is 16-byte aligned, so the pointer one past the block keeps the requested
    // (mis)alignment: an empty view stays valid, and any access lands outside the block.
    g.block_len = static_cast<size_t>(misalign) + 16;
    g.block = std::malloc(g.block_len);
    g.lo = static_cast<unsigned char*>(g.block);
    g.len = g.block_len;
    w.regions.push_back(std::move(g));
    return w.regions.back().lo + w.regions.back().len;
  }
  const int64_t span = e.span_bytes();
  unsigned char* base;
  if (span <= kMallocCap) {
    g.block = std::malloc(static_cast<size_t>(span + misalign));
    g.block_len = static_cast<size_t>(span + misalign);
    base = static_cast<unsigned char*>(g.block);
    g.lo = base;
    g.len = g.block_len;
  } else {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), guard = size_t(1) << 20;
    const size_t need = (static_cast<size_t>(span) + static_cast<size_t>(misalign) + 2 * page) & ~(page - 1);
    g.block_len = need + guard;
    g.block = mmap(nullptr, g.block_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g.block == MAP_FAILED) return nullptr;
    if (mprotect(g.block, need, PROT_READ | PROT_WRITE) != 0) { munmap(g.block, g.block_len); return nullptr; }
    g.mapped = true;
    g.lo = static_cast<unsigned char*>(g.block);
    g.len = need;
    // The last addressed byte ends within 64 bytes of the guard page.
    base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(g.lo) + need - static_cast<size_t>(span) -
                                             static_cast<size_t>(misalign) - 64) & ~uintptr_t(63));
  }
  w.regions.push_back(std::move(g));
  return base + misalign - e.lo * e.es;
}

double gen_value(uint64_t& rs, int t, double amp) {
  // A grid of 2^-7 steps in [-2, 2]: exact in fp16, and close to it elsewhere.
  const double x = (static_cast<double>(splitmix(rs) % 513) - 256.0) / 128.0;
  switch (t) {
    case QD: case KD: case VD: return 0.5 + std::fabs(x) * 0.75;  // positive descale factors
    case LP: return x * 2.0 * amp;
    default: return x * amp;
  }
}

bool materialize(const Spec& s, const Model& m, World& w) {
  const int lo = s.combine ? OP : Q, hi = s.combine ? NT : OP;
  // Aliased inputs share one region covering both views.
  for (int i = lo; i < hi; ++i) {
    const TSpec& t = s.t[i];
    if (!t.present()) continue;
    const Ext& e = m.ext[i];
    const bool backed = e.backed();
    int a = t.alias;
    if (a >= 0 && (a >= i || !s.t[a].present() || m.writable[i] || m.writable[a] || m.ext[a].es != e.es ||
                   !backed || w.region_of[a] < 0 || w.regions[w.region_of[a]].mapped || s.t[a].misalign != t.misalign ||
                   m.ext[a].overflow || m.ext[a].empty))
      a = -1;
    if (a >= 0) {
      // Rebuild a's region to cover the union of both views.
      Ext u = m.ext[a];
      u.lo = std::min(u.lo, e.lo);
      u.hi = std::max(u.hi, e.hi);
      if (u.span_bytes() > kMallocCap) a = -1;
      else {
        Region& old = w.regions[w.region_of[a]];
        std::free(old.block);
        old.block = nullptr;
        old.mapped = false;
        w.regions.erase(w.regions.begin() + w.region_of[a]);
        for (int j = 0; j < NT; ++j)
          if (w.region_of[j] > w.region_of[a]) --w.region_of[j];
        unsigned char* p = alloc_region(w, u, t.misalign, true);
        w.region_of[a] = w.region_of[i] = static_cast<int>(w.regions.size()) - 1;
        w.data[a] = w.data[i] = p;
        continue;
      }
    }
    unsigned char* p = alloc_region(w, e, t.misalign, backed);
    if (!p) return false;
    w.region_of[i] = static_cast<int>(w.regions.size()) - 1;
    w.data[i] = p;
  }
  // Fill: inputs with data, index tensors with their values, outputs with poison.
  for (int i = lo; i < hi; ++i) {
    const TSpec& t = s.t[i];
    if (!t.present() || w.region_of[i] < 0) continue;
    const Ext& e = m.ext[i];
    Region& g = w.regions[w.region_of[i]];
    const bool backed = e.backed();
    const int es = e.es;
    uint64_t rs = s.seed * 0x100000001b3ull + static_cast<uint64_t>(i) * 0x9e3779b9ull;
    const bool out = (i == OUT || i == LSE || i == COUT || i == CLSE);
    auto fill_one = [&](unsigned char* p) {
      if (out) store_poison(p, t.dtype);
      else if (t.dtype == FA4_INT32 || !is_float(t.dtype)) store_elem(p, t.dtype, static_cast<double>(static_cast<int32_t>(t.fill)));
      else store_elem(p, t.dtype, gen_value(rs, i, s.amp));
    };
    if (!backed || !g.mapped) {
      // Heap region: every element slot, gaps included (so a read of padding sees data / poison
      // and a write into padding is caught by the byte comparison). The second view of a shared
      // region leaves it as the first filled it; a tensor "aliasing" itself (a mutation can make
      // one) owns its region and fills it (skipping it left K uninitialized heap memory: a
      // different K in the backend's and the reference's worlds, a false CI finding).
      const bool shared = t.alias >= 0 && t.alias != i && w.region_of[t.alias] == w.region_of[i];
      if (!shared)
        for (size_t o = 0; o + static_cast<size_t>(es) <= g.len; o += static_cast<size_t>(es)) fill_one(g.lo + o);
    } else {
      for_each_elem(t, kElemCap, [&](int64_t, int64_t o) { fill_one(w.data[i] + o * es); });
    }
    if (!backed) continue;
    if (t.dtype == FA4_INT32 || !is_float(t.dtype)) {
      const int64_t n = static_cast<int64_t>(std::min<double>(static_cast<double>(t.vals.size()), e.elems));
      for_each_elem(t, n, [&](int64_t k, int64_t o) {
        store_elem(w.data[i] + o * es, t.dtype, static_cast<double>(static_cast<int32_t>(t.vals[static_cast<size_t>(k)])));
      });
    }
  }
  for (const Special& sp : s.specials) {
    const TSpec& t = s.t[sp.t];
    const Ext& e = m.ext[sp.t];
    // Unbacked views (larger than kMapCap: a trap block, in calls that must be rejected) get
    // no special values: the write would land outside the block (a CI fuzz finding).
    if (!t.present() || !e.backed() || w.region_of[sp.t] < 0 || !is_float(t.dtype) || e.elems < 1) continue;
    const int64_t idx = static_cast<int64_t>(static_cast<uint64_t>(sp.idx) % static_cast<uint64_t>(std::min<double>(e.elems, 1e18)));
    store_elem(w.data[sp.t] + offset_of(t, idx) * e.es, t.dtype, sp.v);
  }
  for (Region& g : w.regions)
    if (!g.mapped) g.snap.assign(g.lo, g.lo + g.len);
  for (int i = lo; i < hi; ++i) {
    const Ext& e = m.ext[i];
    if (w.region_of[i] < 0 || !w.regions[w.region_of[i]].mapped) continue;
    auto& v = w.elem_snap[i];
    for_each_elem(s.t[i], kElemCap, [&](int64_t, int64_t o) {
      const unsigned char* p = w.data[i] + o * e.es;
      v.insert(v.end(), p, p + e.es);
    });
  }
  return true;
}

// ------------------------------------------------------------------------------------------
// Calls
fa4_tensor ctensor(const Spec& s, const World& w, int i) {
  fa4_tensor c;
  std::memset(&c, 0, sizeof c);
  const TSpec& t = s.t[i];
  c.dtype = t.dtype;
  c.ndim = t.ndim;
  for (int d = 0; d < FA4_MAX_DIMS; ++d) c.shape[d] = t.shape[d], c.stride[d] = t.stride[d];
  c.device = t.device;
  c.device_index = t.device_index;
  c.data = t.null_data ? nullptr : w.data[i];
  return c;
}

struct Result {
  int code;
  std::string msg, arg;
};

Result call(const Spec& s, const World& w, int32_t backend, int64_t wl, int64_t wr, int64_t chunk, int32_t causal) {
  int rc;
  if (s.combine) {
    fa4_combine_params c;
    fa4_combine_params_init(&c);
    c.out_partials = ctensor(s, w, OP);
    c.lse_partials = ctensor(s, w, LP);
    c.out = ctensor(s, w, COUT);
    c.lse = ctensor(s, w, CLSE);
    c.backend = backend;
    c.num_threads = s.threads;
    rc = fa4_combine_partials(&c);
  } else {
    fa4_params p;
    fa4_params_init(&p);
    fa4_tensor* ts[] = {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.sinks, &p.q_descale, &p.k_descale, &p.v_descale,
                        &p.cu_seqlens_q, &p.cu_seqlens_k, &p.seqused_k, &p.cache_seqlens, &p.cache_batch_idx,
                        &p.page_table, &p.k_new, &p.v_new};
    for (int i = 0; i < OP; ++i) *ts[i] = ctensor(s, w, i);
    p.scale = s.scale;
    p.softcap = s.softcap;
    p.causal = causal;
    p.window_left = wl;
    p.window_right = wr;
    p.chunk_size = chunk;
    p.max_seqlen_q = s.maxq;
    p.max_seqlen_k = s.maxk;
    p.num_splits = s.splits;
    p.backend = backend;
    p.num_threads = s.threads;
    (void)fa4_attention_workspace_size(&p);  // must not crash either, whatever the params
    rc = fa4_attention_forward(&p);
  }
  return {rc, fa4_last_error(), fa4_last_error_argument()};
}
Result call(const Spec& s, const World& w, int32_t backend) { return call(s, w, backend, s.wl, s.wr, s.chunk, s.causal); }

// ------------------------------------------------------------------------------------------
// Checks
std::string g_file;  // set by the replay driver

[[noreturn]] void finding(const Spec& s, const std::string& what) {
  std::fprintf(stderr, "\n==== fa4-fuzz FINDING%s%s: %s\n---- reproducer (text seed) ----\n%s----\n",
               g_file.empty() ? "" : " in ", g_file.c_str(), what.c_str(), to_text(s).c_str());
  std::fflush(stderr);
  std::abort();
}

void check_status(const Spec& s, const Result& r) {
  if (r.code < FA4_OK || r.code > FA4_INTERNAL) finding(s, "unknown status code " + std::to_string(r.code));
  if (r.code == FA4_OK) return;
  bool known = false;
  for (const char* a : kArgNames) known = known || r.arg == a;
  if (!known) finding(s, "status " + std::to_string(r.code) + " names no API argument (argument='" + r.arg + "', message='" + r.msg + "')");
  if (r.msg.find(r.arg) == std::string::npos)
    finding(s, "message does not mention its argument '" + r.arg + "': " + r.msg);
  // Only tiny or must-reject problems are run: running out of memory or an internal error is a
  // defect (usually an allocation scaled by a claimed size instead of the real work).
  if (r.code == FA4_OUT_OF_MEMORY) finding(s, "out_of_memory status on a small problem: " + r.msg);
  if (r.code == FA4_INTERNAL) finding(s, "internal error status: " + r.msg);
}

// Bytes that the call may write: the elements of the writable views.
void writable_mask(const Spec& s, const Model& m, const World& w, int region, std::vector<char>& mask) {
  const Region& g = w.regions[region];
  mask.assign(g.len, 0);
  for (int i = 0; i < NT; ++i) {
    if (!m.writable[i] || w.region_of[i] != region || m.ext[i].empty || m.ext[i].overflow) continue;
    const int es = m.ext[i].es;
    for_each_elem(s.t[i], kElemCap, [&](int64_t, int64_t o) {
      const ptrdiff_t b = w.data[i] + o * es - g.lo;
      if (b >= 0 && static_cast<size_t>(b) + static_cast<size_t>(es) <= g.len) std::memset(&mask[static_cast<size_t>(b)], 1, static_cast<size_t>(es));
    });
  }
}

// After a failed call nothing may change; after a successful one only writable elements.
void check_buffers(const Spec& s, const Model& m, const World& w, bool ok, const char* which) {
  std::vector<char> mask;
  for (size_t r = 0; r < w.regions.size(); ++r) {
    const Region& g = w.regions[r];
    if (g.mapped) continue;
    if (ok) writable_mask(s, m, w, static_cast<int>(r), mask);
    for (size_t b = 0; b < g.len; ++b)
      if (g.lo[b] != g.snap[b] && !(ok && mask[b])) {
        std::string owner = "?";
        for (int i = 0; i < NT; ++i)
          if (w.region_of[i] == static_cast<int>(r)) owner = kTName[i];
        finding(s, std::string(which) + (ok ? ": a successful call wrote outside the outputs, in " : ": a failed call modified ") +
                       owner + " (byte " + std::to_string(b) + " of its buffer)");
      }
  }
  for (int i = 0; i < NT; ++i) {
    if (w.region_of[i] < 0 || !w.regions[w.region_of[i]].mapped || (ok && m.writable[i])) continue;
    const int es = m.ext[i].es;
    const auto& v = w.elem_snap[i];
    for_each_elem(s.t[i], kElemCap, [&](int64_t k, int64_t o) {
      if (std::memcmp(w.data[i] + o * es, &v[static_cast<size_t>(k * es)], static_cast<size_t>(es)) != 0)
        finding(s, std::string(which) + ": " + kTName[i] + " element " + std::to_string(k) + " changed");
    });
  }
}

std::vector<double> read_all(const Spec& s, const Model& m, const World& w, int i, std::vector<char>* poison = nullptr) {
  std::vector<double> v;
  if (!s.t[i].present() || m.ext[i].empty || m.ext[i].overflow) return v;
  const int es = m.ext[i].es;
  for_each_elem(s.t[i], kElemCap, [&](int64_t, int64_t o) {
    const unsigned char* p = w.data[i] + o * es;
    v.push_back(load_elem(p, s.t[i].dtype));
    if (poison) poison->push_back(is_poison(p, s.t[i].dtype));
  });
  return v;
}
std::vector<unsigned char> read_bytes(const Spec& s, const Model& m, const World& w, int i) {
  std::vector<unsigned char> v;
  if (!s.t[i].present() || m.ext[i].empty || m.ext[i].overflow) return v;
  const int es = m.ext[i].es;
  for_each_elem(s.t[i], kElemCap, [&](int64_t, int64_t o) { v.insert(v.end(), w.data[i] + o * es, w.data[i] + (o + 1) * es); });
  return v;
}

double maxabs(const std::vector<double>& v) {
  double a = 0;
  for (double x : v) a = std::max(a, std::fabs(x));
  return a;
}

struct Tol { double rel, abs, cos; };
Tol tol_for(int32_t in_dtype) {
  switch (in_dtype) {
    case FA4_FLOAT16: return {2e-3, 1e-2, 0};
    case FA4_BFLOAT16: return {1e-2, 5e-2, 0};
    case FA4_FLOAT8_E4M3: return {5e-2, std::numeric_limits<double>::infinity(), 0.999};
    default: return {1e-5, 1e-4, 0};
  }
}

// Compares `got` (run under test) with `ref` (reference backend); `strict` applies DESIGN §4,
// otherwise only the invariants that survive ill-conditioned logits.
void compare(const Spec& s, const std::string& what, int32_t in_dtype, int32_t out_dtype, const std::vector<double>& got,
             const std::vector<double>& ref, bool strict, double vmax, bool is_lse) {
  if (got.size() != ref.size()) finding(s, what + ": element count differs");
  const Tol tol = tol_for(in_dtype);
  const double scale = std::max(1.0, vmax);
  double se = 0, sr = 0, st = 0, dot = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    const double g = got[k], r = ref[k];
    if (!std::isfinite(r) || !std::isfinite(g)) {
      const bool same = (std::isnan(r) && std::isnan(g)) || r == g;
      if (!same) finding(s, fmt("%s[%zu] = %.9g but the reference gives %.9g", what.c_str(), k, g, r));
      continue;
    }
    if (is_lse) {
      if (strict && std::fabs(g - r) > 1e-3 + 2 * out_ulp(r, FA4_FLOAT32))
        finding(s, fmt("%s[%zu] = %.9g, reference %.9g (tolerance 1e-3)", what.c_str(), k, g, r));
      continue;
    }
    if (!strict) {
      if (std::fabs(g) > vmax * (1 + 1e-2) + 1e-30)
        finding(s, fmt("%s[%zu] = %.9g lies outside the hull of V (max |v| %.9g)", what.c_str(), k, g, vmax));
      continue;
    }
    const double e = g - r;
    // One rounding step of the output dtype is not an error (both sides round their own exact
    // value): the L2 sum takes what lies beyond it, as the element check does. Without this an
    // f16 output of fp32 partials (combine: tolerance of the f32 input, 1e-5) failed on a few
    // 1-ulp ties between the cpu's fp32 and the reference's fp64 merge (rel L2 6e-5).
    const double beyond = std::max(0.0, std::fabs(e) - out_ulp(r, out_dtype));
    se += beyond * beyond, sr += r * r, st += g * g, dot += g * r;
    if (std::fabs(e) - out_ulp(r, out_dtype) > tol.abs * scale)
      finding(s, fmt("%s[%zu] = %.9g, reference %.9g: |error| beyond tolerance %g", what.c_str(), k, g, r, tol.abs * scale));
  }
  if (!strict || is_lse) return;
  const double rel = sr > 0 ? std::sqrt(se / sr) : std::sqrt(se);
  const double absl2 = std::sqrt(se / std::max<double>(1, static_cast<double>(got.size())));
  if (rel > tol.rel && absl2 > tol.rel * scale) finding(s, fmt("%s: relative L2 error %.3g > %.3g", what.c_str(), rel, tol.rel));
  if (tol.cos > 0 && sr > 0 && st > 0 && dot / std::sqrt(sr * st) < tol.cos && absl2 > tol.rel * scale)
    finding(s, fmt("%s: cosine %.6f < %.3f", what.c_str(), dot / std::sqrt(sr * st), tol.cos));
}

void check_written(const Spec& s, const Model& m, const World& w, int i) {
  std::vector<char> poison;
  (void)read_all(s, m, w, i, &poison);
  for (size_t k = 0; k < poison.size(); ++k)
    if (poison[k]) finding(s, std::string(kTName[i]) + " element " + std::to_string(k) + " never written by a successful call");
}

bool cuda_present() { return fa4_backend_available(FA4_BACKEND_CUDA) != 0; }

int run_one(const Spec& s) {
  const Model m = analyze(s, cuda_present());
  if (m.skip) return 0;
  World a;
  if (!materialize(s, m, a)) return 0;  // address space exhausted: nothing to check
  const Result ra = call(s, a, s.backend);
  check_status(s, ra);
  check_buffers(s, m, a, ra.code == FA4_OK, "run");
  if (ra.code != FA4_OK) return 0;
  if (!m.must_reject.empty()) {
    std::string why;
    for (const std::string& x : m.must_reject) why += (why.empty() ? "" : "; ") + x;
    finding(s, "accepted although the contract requires a rejection: " + why);
  }
  const int o = s.combine ? COUT : OUT, l = s.combine ? CLSE : LSE;
  // Dense q: every output element belongs to a query row. Varlen q: tokens past
  // cu_seqlens_q[B] belong to no sequence, so there the reference decides (below).
  const bool varq = !s.combine && s.t[CUQ].present();
  if (!varq) {
    check_written(s, m, a, o);
    if (s.t[l].present()) check_written(s, m, a, l);
  }

  // Determinism: the same call again gives the same bits (appends write the same rows again).
  const std::vector<unsigned char> out1 = read_bytes(s, m, a, o), lse1 = read_bytes(s, m, a, l);
  const Result ra2 = call(s, a, s.backend);
  if (ra2.code != FA4_OK) finding(s, "the same call failed the second time: " + ra2.msg);
  if (read_bytes(s, m, a, o) != out1 || read_bytes(s, m, a, l) != lse1) finding(s, "the same call twice gave different output bits");

  // The oracle: reference on fresh, identical buffers.
  World rw;
  if (!materialize(s, m, rw)) return 0;
  const Result rr = call(s, rw, FA4_BACKEND_REFERENCE);
  if (rr.code != FA4_OK) finding(s, "backend " + std::to_string(s.backend) + " accepted what reference rejects: " + rr.msg);
  for (int i : {o, l}) {
    std::vector<char> pa, pr;
    (void)read_all(s, m, a, i, &pa);
    (void)read_all(s, m, rw, i, &pr);
    for (size_t k = 0; k < pa.size() && k < pr.size(); ++k)
      if (pa[k] && !pr[k]) finding(s, std::string(kTName[i]) + " element " + std::to_string(k) + " written by reference but not by the backend");
  }
  if (m.append)
    for (int i : {K, V})
      if (read_bytes(s, m, a, i) != read_bytes(s, m, rw, i)) finding(s, std::string("KV cache ") + kTName[i] + " after append differs from reference");
  if (m.nonfinite_inputs) return 0;  // NaN / inf inputs: no crash and no stray writes is the contract

  const std::vector<double> go = read_all(s, m, a, o), ro = read_all(s, m, rw, o);
  const std::vector<double> gl = read_all(s, m, a, l), rl = read_all(s, m, rw, l);
  double vmax, logit_bound = 0;
  int32_t in_dt;
  if (s.combine) {
    vmax = maxabs(read_all(s, m, rw, OP));
    in_dt = FA4_FLOAT32;
  } else {
    in_dt = s.t[Q].dtype;
    const auto dsc = [&](int i) { return s.t[i].present() ? maxabs(read_all(s, m, rw, i)) : 1.0; };
    const std::vector<double> vv = read_all(s, m, rw, V), vn = read_all(s, m, rw, VNEW);
    vmax = std::max(maxabs(vv), maxabs(vn)) * dsc(VD);
    const int64_t dqk = s.t[Q].shape[s.t[Q].ndim - 1];
    const double sc = s.scale != 0 ? std::fabs(s.scale) : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(dqk, 1)));
    const double kmax = std::max(maxabs(read_all(s, m, rw, K)), maxabs(read_all(s, m, rw, KNEW)));
    logit_bound = sc * static_cast<double>(dqk) * maxabs(read_all(s, m, rw, Q)) * dsc(QD) * kmax * dsc(KD);
    if (s.t[SINKS].present()) logit_bound = std::max(logit_bound, maxabs(read_all(s, m, rw, SINKS)));
  }
  // DESIGN §4's tolerances assume moderate logits; beyond that a one-ulp difference in a fp32
  // dot product can move the softmax arbitrarily far (near-ties at huge scale), so only the
  // invariants are checked.
  const bool strict = s.combine ? vmax < 1e4 : logit_bound <= 32;
  compare(s, std::string(kTName[o]), in_dt, s.t[o].dtype, go, ro, strict, vmax, false);
  if (s.t[l].present()) compare(s, "lse", in_dt, FA4_FLOAT32, gl, rl, strict, vmax, true);

  // Metamorphic: windows / chunks wider than any sequence are the same as none.
  if (!s.combine) {
    double rows = 0;
    for (int i : {Q, K}) {
      const TSpec& t = s.t[i];
      double r = 1;
      for (int d = 0; d < std::clamp(t.ndim - 2, 0, 4); ++d) r *= static_cast<double>(t.shape[d]);
      rows += r;
    }
    if (s.t[PT].present()) rows += static_cast<double>(s.t[PT].shape[1]) * static_cast<double>(s.t[K].shape[1]);
    int64_t wl = s.wl, wr = s.wr, ch = s.chunk;
    int32_t ca = s.causal;
    if (static_cast<double>(wl) >= rows) wl = -1;
    if (static_cast<double>(wr) >= rows && !s.causal && s.chunk == 0) wr = -1;
    if (static_cast<double>(ch) >= rows) ch = 0, ca = 1;
    if (wl != s.wl || wr != s.wr || ch != s.chunk) {
      World mw;
      if (!materialize(s, m, mw)) return 0;
      const Result rm = call(s, mw, FA4_BACKEND_REFERENCE, wl, wr, ch, ca);
      if (rm.code != FA4_OK) finding(s, "reference rejects the same problem with the window / chunk reduced to none: " + rm.msg);
      compare(s, std::string("reference ") + kTName[o] + " with window/chunk beyond every sequence vs without", in_dt,
              s.t[o].dtype, ro, read_all(s, m, mw, o), strict, vmax, false);
    }
  }
  return 0;
}

}  // namespace

// For the replay driver: the text form of any input, and the file being replayed.
std::string fa4fuzz_describe(const uint8_t* data, size_t size) { return to_text(decode(data, size)); }
void fa4fuzz_set_file(const char* f) { g_file = f ? f : ""; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Spec s = decode(data, size);
  // FA4_FUZZ_VERBOSE=1: print each input as text before running it (to see what hangs).
  static const bool verbose = std::getenv("FA4_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s", to_text(s).c_str());
  return run_one(s);
}
