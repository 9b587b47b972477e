#include "problem_builder.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

#include "args.h"
#include "core/mask.h"
#include "core/numeric.h"

namespace fa4cli {

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::normal: return "normal";
    case Dist::uniform: return "uniform";
    case Dist::outliers: return "outliers";
  }
  return "?";
}

const char* dtype_short(fa4::DType t) {
  switch (t) {
    case fa4::DType::float32: return "f32";
    case fa4::DType::float16: return "f16";
    case fa4::DType::bfloat16: return "bf16";
    case fa4::DType::float8_e4m3: return "e4m3";
    case fa4::DType::int32: return "i32";
  }
  return "?";
}

std::string dtype_label(const ProblemSpec& s) {
  return std::string(dtype_short(s.dtype)) + (s.kv_fp8 ? "/kv-e4m3" : "");
}

fa4::DType kv_dtype(const ProblemSpec& s) { return s.kv_fp8 ? fa4::DType::float8_e4m3 : s.dtype; }

void check_spec(const ProblemSpec& s) {
  if (s.kv_fp8 && s.dtype != fa4::DType::float16 && s.dtype != fa4::DType::bfloat16)
    usage_error("--kv-dtype", std::string("e4m3 (an fp8 KV cache) needs --dtype f16 or bf16, got ") + dtype_short(s.dtype));
  if (s.kv_scale_per_token && !s.kv_fp8) usage_error("--kv-scale", "only with --kv-dtype e4m3");
  if (s.heads % s.kv_heads != 0) {
    usage_error("--kv-heads", "must divide --heads (" + std::to_string(s.heads) + "), got " + std::to_string(s.kv_heads));
  }
  // --window R > 0 with --causal / --chunk is left to the library's validation (reported as
  // "--window: window_right: ..."), which the CLI tests use to check that path.
  if (s.cache_batch_idx && s.page_size > 0)
    usage_error("--cache-batch-idx", "cannot be combined with --paged (the page table maps sequences to pages)");
  if (s.cache_batch_idx && !s.kv_cache) usage_error("--cache-batch-idx", "needs --kv-cache (or --append)");
  if (s.append > 0 && s.varlen)
    usage_error("--append", "cannot be combined with --varlen (k_new/v_new need dense q)");
  if (s.append > s.seqlen_k)
    usage_error("--append", std::to_string(s.append) + " new rows do not fit a cache of --seqlen-k " +
                                std::to_string(s.seqlen_k) + " keys");
}

std::string layout_name(const ProblemSpec& s) {
  std::string l;
  if (s.page_size > 0) l = "paged(" + std::to_string(s.page_size) + ")";
  else if (s.kv_cache) l = s.cache_batch_idx ? "kv-cache+batch-idx" : "kv-cache";
  else l = s.varlen ? "varlen" : "dense";
  if (s.varlen && (s.page_size > 0 || s.kv_cache)) l = "varlen-q+" + l;
  if (s.append > 0) l += "+append(" + std::to_string(s.append) + ")";
  return l;
}

std::string mask_name(const ProblemSpec& s) {
  std::string m;
  if (s.chunk > 0) m = "chunk(" + std::to_string(s.chunk) + ")";
  else if (s.causal) m = "causal";
  if (s.window_left >= 0 || s.window_right >= 0) {
    if (!m.empty()) m += "+";
    m += "window(" + std::to_string(s.window_left) + "," + std::to_string(s.window_right) + ")";
  }
  return m.empty() ? "none" : m;
}

namespace {

// splitmix64: small, fast and the same on every platform (std distributions are not).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int64_t range(int64_t lo, int64_t hi) {                                        // [lo, hi]
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool have_spare = false;
  double spare = 0.0;
  double normal() {
    if (have_spare) {
      have_spare = false;
      return spare;
    }
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
    spare = r * std::sin(t);
    have_spare = true;
    return r * std::cos(t);
  }
};

HostTensor make_tensor(fa4::DType dt, std::initializer_list<int64_t> shape) {
  HostTensor t;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  t.bytes = static_cast<size_t>(n) * fa4::dtype_size(dt);
  const size_t alloc = std::max<size_t>(64, (t.bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, alloc);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, alloc);
  t.mem = std::shared_ptr<unsigned char>(static_cast<unsigned char*>(p), [](unsigned char* q) { std::free(q); });
  t.view = fa4::TensorView::contiguous(p, dt, shape);
  return t;
}

void store(const HostTensor& t, int64_t i, float x) {
  void* d = t.view.data;
  switch (t.view.dtype) {
    case fa4::DType::float32: static_cast<float*>(d)[i] = x; break;
    case fa4::DType::float16: static_cast<uint16_t*>(d)[i] = fa4::core::f32_to_f16(x); break;
    case fa4::DType::bfloat16: static_cast<uint16_t*>(d)[i] = fa4::core::f32_to_bf16(x); break;
    case fa4::DType::float8_e4m3: static_cast<uint8_t*>(d)[i] = fa4::core::f32_to_e4m3(x); break;
    case fa4::DType::int32: static_cast<int32_t*>(d)[i] = static_cast<int32_t>(x); break;
  }
}

// Fills a tensor whose last dim is a head row. e4m3 values use the range of a quantized
// tensor (|x| up to ~ 4 * 8 = 32 for normal inputs) so the format's resolution matters.
void fill_random(const HostTensor& t, Rng& rng, Dist dist) {
  if (!t.present()) return;
  const int64_t n = t.view.numel();
  const int64_t row = t.view.shape[t.view.ndim - 1];
  const float amp = t.view.dtype == fa4::DType::float8_e4m3 ? 8.0f : 1.0f;
  float row_scale = 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (row > 0 && i % row == 0)
      row_scale = (dist == Dist::outliers && rng.uniform() < 1.0 / 32) ? static_cast<float>(4.0 + 12.0 * rng.uniform()) : 1.0f;
    double x;
    switch (dist) {
      case Dist::uniform: x = (2.0 * rng.uniform() - 1.0) * 1.7320508075688772; break;  // unit variance
      default: x = rng.normal(); break;
    }
    store(t, i, amp * row_scale * static_cast<float>(x));
  }
}

void fill_nan(const HostTensor& t) {
  if (!t.present()) return;
  const int64_t n = t.view.numel();
  for (int64_t i = 0; i < n; ++i) store(t, i, std::numeric_limits<float>::quiet_NaN());
}

int32_t* i32(const HostTensor& t) { return static_cast<int32_t*>(t.view.data); }

}  // namespace

void HostProblem::restore_cache() {
  if (!k_orig.empty()) std::memcpy(k.view.data, k_orig.data(), k_orig.size());
  if (!v_orig.empty()) std::memcpy(v.view.data, v_orig.data(), v_orig.size());
}

void HostProblem::poison_outputs() {
  fill_nan(out);
  fill_nan(lse);
}

double HostProblem::visible_scores() const {
  fa4::core::Mask m;
  m.left = spec.window_left;
  m.right = (spec.causal || spec.chunk > 0) ? 0 : spec.window_right;
  m.chunk = spec.chunk;
  double total = 0.0;
  for (size_t b = 0; b < seqlen_q.size(); ++b) {
    const fa4::core::SeqMask sm{m, seqlen_q[b], seqlen_k[b]};
    for (int64_t i = 0; i < sm.sq; ++i) {
      const int64_t lo = sm.row_lo(i), hi = sm.row_hi(i);
      if (hi > lo) total += static_cast<double>(hi - lo);
    }
  }
  return total * static_cast<double>(spec.heads);
}

double HostProblem::flops() const {
  return 2.0 * static_cast<double>(spec.head_dim + spec.head_dim_v) * visible_scores();
}

double HostProblem::kv_bytes() const {
  double keys = 0.0;
  for (int64_t l : seqlen_k) keys += static_cast<double>(l);
  return keys * static_cast<double>(spec.kv_heads) * static_cast<double>(spec.head_dim + spec.head_dim_v) *
         static_cast<double>(fa4::dtype_size(kv_dtype(spec)));
}

std::unique_ptr<HostProblem> build_problem(const ProblemSpec& s) {
  check_spec(s);
  auto hp = std::make_unique<HostProblem>();
  HostProblem& P = *hp;
  P.spec = s;
  Rng rng(s.seed);
  const int64_t B = s.batch, Hq = s.heads, Hkv = s.kv_heads, Dqk = s.head_dim, Dv = s.head_dim_v;
  const int64_t N = s.append;
  const bool paged = s.page_size > 0;
  const bool cache = paged || s.kv_cache;
  const bool varlen_k = s.varlen && !cache;

  // ---- per-sequence lengths ----
  P.seqlen_q.assign(B, s.seqlen_q);
  P.seqlen_k.assign(B, s.seqlen_k);
  std::vector<int64_t> cache_len;
  if (s.varlen)
    for (int64_t b = 0; b < B; ++b) P.seqlen_q[b] = rng.range(1, s.seqlen_q);
  if (varlen_k)
    for (int64_t b = 0; b < B; ++b) P.seqlen_k[b] = rng.range(1, s.seqlen_k);
  const int64_t max_pages = paged ? (s.seqlen_k + s.page_size - 1) / s.page_size : 0;
  const bool random_cache_len = s.kv_cache || N > 0;
  const bool pass_cache_seqlens = random_cache_len || (paged && max_pages * s.page_size != s.seqlen_k);
  if (cache) {
    cache_len.assign(B, s.seqlen_k - N);
    if (random_cache_len) {
      const int64_t hi = s.seqlen_k - N, lo = std::min<int64_t>(1, hi);
      for (int64_t b = 0; b < B; ++b) cache_len[b] = rng.range(lo, hi);
    }
    for (int64_t b = 0; b < B; ++b) P.seqlen_k[b] = cache_len[b] + N;
  }
  const int64_t Tq = std::accumulate(P.seqlen_q.begin(), P.seqlen_q.end(), int64_t{0});
  const int64_t Tk = std::accumulate(P.seqlen_k.begin(), P.seqlen_k.end(), int64_t{0});
  const int64_t Bc = s.cache_batch_idx ? B + std::max<int64_t>(1, B / 2) : B;
  const int64_t num_pages = paged ? B * max_pages + 1 : 0;  // one spare page no sequence uses

  // ---- size check before allocating anything ----
  {
    const double es = static_cast<double>(fa4::dtype_size(s.dtype));
    const double kv_es = static_cast<double>(fa4::dtype_size(kv_dtype(s)));
    const double q_rows = s.varlen ? Tq : static_cast<double>(B) * s.seqlen_q;
    const double kv_rows = paged ? static_cast<double>(num_pages) * s.page_size
                           : varlen_k ? static_cast<double>(Tk)
                                      : static_cast<double>(Bc) * s.seqlen_k;
    const double out_es = s.dtype == fa4::DType::float8_e4m3 ? 2.0 : es;
    double bytes = q_rows * Hq * (Dqk * es + Dv * out_es * 2.0 /* out + reference copy */ + 8.0 /* lse */) +
                   kv_rows * Hkv * (Dqk + Dv) * kv_es * (N > 0 ? 2.0 : 1.0) +
                   static_cast<double>(B) * N * Hkv * (Dqk + Dv) * es;
    const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    if (phys > 0 && bytes > 0.8 * phys) {
      std::ostringstream m;
      m.precision(3);
      m << "the problem needs " << bytes / (1 << 30) << " GiB of host memory, more than 80% of this machine's "
        << phys / (1 << 30) << " GiB (reduce --batch, --seqlen, --heads or --head-dim)";
      usage_error("", m.str());
    }
    const double i32max = static_cast<double>(std::numeric_limits<int32_t>::max());
    if (Tq > i32max || Tk > i32max || num_pages > i32max)
      usage_error(s.varlen ? "--varlen" : "--paged", "token or page counts exceed the int32 index range");
  }

  // ---- tensors ----
  const fa4::DType dt = s.dtype;
  const fa4::DType odt = dt == fa4::DType::float8_e4m3 ? fa4::DType::bfloat16 : dt;
  const fa4::DType kdt = kv_dtype(s);  // k / v (the caches)
  fa4::AttentionParams& p = P.params;
  if (s.varlen) {
    P.q = make_tensor(dt, {Tq, Hq, Dqk});
    P.out = make_tensor(odt, {Tq, Hq, Dv});
    if (s.lse) P.lse = make_tensor(fa4::DType::float32, {Hq, Tq});
    P.cu_seqlens_q = make_tensor(fa4::DType::int32, {B + 1});
    for (int64_t b = 0; b < B; ++b) i32(P.cu_seqlens_q)[b + 1] = i32(P.cu_seqlens_q)[b] + static_cast<int32_t>(P.seqlen_q[b]);
    p.max_seqlen_q = *std::max_element(P.seqlen_q.begin(), P.seqlen_q.end());
  } else {
    P.q = make_tensor(dt, {B, s.seqlen_q, Hq, Dqk});
    P.out = make_tensor(odt, {B, s.seqlen_q, Hq, Dv});
    if (s.lse) P.lse = make_tensor(fa4::DType::float32, {B, Hq, s.seqlen_q});
  }
  if (paged) {
    P.k = make_tensor(kdt, {num_pages, s.page_size, Hkv, Dqk});
    P.v = make_tensor(kdt, {num_pages, s.page_size, Hkv, Dv});
    P.page_table = make_tensor(fa4::DType::int32, {B, max_pages});
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = num_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng.range(0, i)]);
    for (int64_t i = 0; i < B * max_pages; ++i) i32(P.page_table)[i] = perm[i];
  } else if (s.kv_cache) {
    P.k = make_tensor(kdt, {Bc, s.seqlen_k, Hkv, Dqk});
    P.v = make_tensor(kdt, {Bc, s.seqlen_k, Hkv, Dv});
    if (s.cache_batch_idx) {
      P.cache_batch_idx = make_tensor(fa4::DType::int32, {B});
      std::vector<int32_t> perm(Bc);
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t i = Bc - 1; i > 0; --i) std::swap(perm[i], perm[rng.range(0, i)]);
      for (int64_t b = 0; b < B; ++b) i32(P.cache_batch_idx)[b] = perm[b];
    }
  } else if (varlen_k) {
    P.k = make_tensor(kdt, {Tk, Hkv, Dqk});
    P.v = make_tensor(kdt, {Tk, Hkv, Dv});
    P.cu_seqlens_k = make_tensor(fa4::DType::int32, {B + 1});
    for (int64_t b = 0; b < B; ++b) i32(P.cu_seqlens_k)[b + 1] = i32(P.cu_seqlens_k)[b] + static_cast<int32_t>(P.seqlen_k[b]);
    p.max_seqlen_k = *std::max_element(P.seqlen_k.begin(), P.seqlen_k.end());
  } else {
    P.k = make_tensor(kdt, {B, s.seqlen_k, Hkv, Dqk});
    P.v = make_tensor(kdt, {B, s.seqlen_k, Hkv, Dv});
  }
  if (cache && pass_cache_seqlens) {
    P.cache_seqlens = make_tensor(fa4::DType::int32, {B});
    for (int64_t b = 0; b < B; ++b) i32(P.cache_seqlens)[b] = static_cast<int32_t>(cache_len[b]);
  }
  if (N > 0) {
    P.k_new = make_tensor(dt, {B, N, Hkv, Dqk});
    P.v_new = make_tensor(dt, {B, N, Hkv, Dv});
  }
  if (s.sinks) {
    P.sinks = make_tensor(fa4::DType::float32, {Hq});
    for (int64_t h = 0; h < Hq; ++h) static_cast<float*>(P.sinks.view.data)[h] = static_cast<float>(rng.normal() + 1.0);
  }
  if (dt == fa4::DType::float8_e4m3 || s.kv_fp8) {
    for (HostTensor* t : {&P.q_descale, &P.k_descale, &P.v_descale}) {
      if (s.kv_fp8 && t == &P.q_descale) continue;  // q is 16-bit
      const fa4::TensorView& kv = P.k.view;  // per token: k's shape without its last dim
      if (s.kv_scale_per_token && kv.ndim == 4) *t = make_tensor(fa4::DType::float32, {kv.shape[0], kv.shape[1], Hkv});
      else if (s.kv_scale_per_token) *t = make_tensor(fa4::DType::float32, {kv.shape[0], Hkv});
      else *t = make_tensor(fa4::DType::float32, {B, Hkv});
      // Inputs are ~8x a unit normal (see fill_random); descales bring them back near 1/8.
      for (int64_t i = 0; i < t->view.numel(); ++i)
        static_cast<float*>(t->view.data)[i] = static_cast<float>((0.5 + rng.uniform()) / 8.0);
    }
  }
  // Outlier rows (DESIGN.md section 4: rows with large outliers that force many rescales) are
  // key rows (K, k_new): 1 in 32 scaled by 4-16, so the running max of every query row jumps
  // when one arrives. Q and V keep the base distribution: outliers in Q and K both made scores
  // of ~1000, whose fp32 rounding (6e-5) alone exceeds the fp32 max-abs tolerance (1e-4) in any
  // fp32 implementation, and scaled V rows only scaled the outputs (to ~50, where one bf16 ulp
  // is 0.25).
  const Dist base = s.dist == Dist::outliers ? Dist::normal : s.dist;
  fill_random(P.q, rng, base);
  fill_random(P.k, rng, s.dist);
  fill_random(P.v, rng, base);
  fill_random(P.k_new, rng, s.dist);
  fill_random(P.v_new, rng, base);
  P.poison_outputs();
  if (N > 0) {
    P.k_orig.assign(static_cast<unsigned char*>(P.k.view.data), static_cast<unsigned char*>(P.k.view.data) + P.k.bytes);
    P.v_orig.assign(static_cast<unsigned char*>(P.v.view.data), static_cast<unsigned char*>(P.v.view.data) + P.v.bytes);
  }

  // ---- params ----
  p.q = P.q.view;
  p.k = P.k.view;
  p.v = P.v.view;
  p.out = P.out.view;
  p.lse = P.lse.view;
  p.scale = s.scale;
  p.softcap = s.softcap;
  p.causal = s.causal;
  p.window_left = s.window_left;
  p.window_right = s.window_right;
  p.chunk_size = s.chunk;
  p.sinks = P.sinks.view;
  p.q_descale = P.q_descale.view;
  p.k_descale = P.k_descale.view;
  p.v_descale = P.v_descale.view;
  p.cu_seqlens_q = P.cu_seqlens_q.view;
  p.cu_seqlens_k = P.cu_seqlens_k.view;
  p.cache_seqlens = P.cache_seqlens.view;
  p.cache_batch_idx = P.cache_batch_idx.view;
  p.page_table = P.page_table.view;
  p.k_new = P.k_new.view;
  p.v_new = P.v_new.view;
  p.num_splits = s.splits;
  p.backend = s.backend;
  p.num_threads = s.threads;
  return hp;
}

}  // namespace fa4cli
