#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

#include "core/element.h"
#include "core/numeric.h"

namespace fa4test {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
constexpr double kInf = std::numeric_limits<double>::infinity();
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
}  // namespace

// ---------------------------------------------------------------- seeds
uint64_t base_seed() {
  static const uint64_t s = [] {
    uint64_t v;
    const char* e = std::getenv("FA4_TEST_SEED");
    if (e && *e) {
      v = std::strtoull(e, nullptr, 0);
    } else {
      std::random_device rd;
      v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    std::fprintf(stderr, "[fa4 tests] base seed: FA4_TEST_SEED=%llu\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

uint64_t derive_seed(uint64_t tag) { return splitmix64(base_seed() ^ splitmix64(tag + 0x1234567ull)); }

std::string seed_note(uint64_t seed) {
  std::ostringstream s;
  s << "case seed " << seed << "; reproduce with FA4_TEST_SEED=" << base_seed();
  return s.str();
}

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::normal: return "normal";
    case Dist::uniform: return "uniform";
    case Dist::outliers: return "outliers";
  }
  return "?";
}
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::padded: return "padded";
    case Layout::bhsd: return "bhsd";
    case Layout::strided_last: return "strided_last";
  }
  return "?";
}
const char* dtype_str(DType d) { return fa4::dtype_name(d); }
const char* kv_mode_name(KvMode m) {
  switch (m) {
    case KvMode::dense: return "dense";
    case KvMode::varlen: return "varlen";
    case KvMode::cache: return "cache";
    case KvMode::paged: return "paged";
  }
  return "?";
}

const char* kv_scale_name(KvScaleMode m) {
  switch (m) {
    case KvScaleMode::none: return "none";
    case KvScaleMode::per_head: return "per_head";
    case KvScaleMode::per_token: return "per_token";
  }
  return "?";
}

// ---------------------------------------------------------------- Tensor
int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

Tensor Tensor::make(DType dt, const std::vector<int64_t>& shp, Layout layout, std::mt19937_64* rng) {
  Tensor t;
  t.dtype = dt;
  t.ndim = static_cast<int>(shp.size());
  const int n = t.ndim;
  for (int i = 0; i < n; ++i) t.shape[i] = shp[i];
  std::vector<int> order(n);  // memory order, outermost first
  std::iota(order.begin(), order.end(), 0);
  if (layout == Layout::bhsd && n == 4) order = {0, 2, 1, 3};
  if (layout == Layout::bhsd && n == 3) order = {1, 0, 2};
  if (layout == Layout::bhsd && n == 2) order = {1, 0};
  const bool pad = layout == Layout::padded || layout == Layout::strided_last;
  int64_t st = layout == Layout::strided_last ? 2 : 1;
  for (int k = n - 1; k >= 0; --k) {
    const int d = order[k];
    t.stride[d] = st;
    st = st * t.shape[d] + (pad && rng ? static_cast<int64_t>((*rng)() % 3 + 1) : 0);
  }
  int64_t extent = 1;
  for (int i = 0; i < n; ++i) {
    if (t.shape[i] == 0) { extent = 0; break; }
    extent += (t.shape[i] - 1) * t.stride[i];
  }
  t.mem.assign(static_cast<size_t>(std::max<int64_t>(extent, 1)) * t.esize(), 0xFF);
  return t;
}

Tensor Tensor::make_i32(const std::vector<int32_t>& values) {
  Tensor t = make(DType::int32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.seti(static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor Tensor::make_i32_2d(const std::vector<int32_t>& values, int64_t rows, int64_t cols) {
  Tensor t = make(DType::int32, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) t.seti(i, values[static_cast<size_t>(i)]);
  return t;
}

Tensor Tensor::make_f32_1d(const std::vector<float>& values) {
  Tensor t = make(DType::float32, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
  return t;
}

TensorView Tensor::view() {
  TensorView v;
  if (!present()) return v;
  v.data = mem.data();
  v.dtype = dtype;
  v.ndim = ndim;
  for (int i = 0; i < ndim; ++i) {
    v.shape[i] = shape[i];
    v.stride[i] = stride[i];
  }
  return v;
}

int64_t Tensor::off(std::initializer_list<int64_t> idx) const {
  int64_t o = 0;
  int i = 0;
  for (int64_t x : idx) o += x * stride[i++];
  return o;
}

float Tensor::get(int64_t o) const { return fa4::core::load_f32(mem.data(), o, dtype); }
void Tensor::set(int64_t o, float x) { fa4::core::store_f32(mem.data(), o, dtype, x); }
int32_t Tensor::geti(int64_t o) const {
  int32_t x;
  std::memcpy(&x, mem.data() + o * 4, 4);
  return x;
}
void Tensor::seti(int64_t o, int32_t x) { std::memcpy(mem.data() + o * 4, &x, 4); }
bool Tensor::is_poison(int64_t o) const {
  const size_t es = esize();
  for (size_t b = 0; b < es; ++b)
    if (mem[static_cast<size_t>(o) * es + b] != 0xFF) return false;
  return true;
}

void Tensor::fill_input_nan() {
  for (int64_t o = 0; o < mem_elems(); ++o) {
    switch (dtype) {
      case DType::float32: {
        const uint32_t x = 0x7fc0deadu;
        std::memcpy(mem.data() + o * 4, &x, 4);
        break;
      }
      case DType::float16: {
        const uint16_t x = 0x7e5a;
        std::memcpy(mem.data() + o * 2, &x, 2);
        break;
      }
      case DType::bfloat16: {
        const uint16_t x = 0x7fd5;
        std::memcpy(mem.data() + o * 2, &x, 2);
        break;
      }
      case DType::float8_e4m3: mem[static_cast<size_t>(o)] = 0x7f; break;
      case DType::int32: break;
    }
  }
}

std::vector<int64_t> Tensor::offsets() const {
  std::vector<int64_t> r;
  if (ndim == 0 || numel() == 0) return r;
  r.reserve(static_cast<size_t>(numel()));
  std::vector<int64_t> idx(ndim, 0);
  while (true) {
    int64_t o = 0;
    for (int i = 0; i < ndim; ++i) o += idx[i] * stride[i];
    r.push_back(o);
    int d = ndim - 1;
    while (d >= 0 && ++idx[d] == shape[d]) idx[d--] = 0;
    if (d < 0) break;
  }
  return r;
}

float sample(Dist d, std::mt19937_64& rng) {
  switch (d) {
    case Dist::normal: {
      std::normal_distribution<float> n(0.0f, 1.0f);
      return n(rng);
    }
    case Dist::uniform: {
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      return u(rng);
    }
    case Dist::outliers: {
      std::normal_distribution<float> n(0.0f, 1.0f);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      const float x = n(rng);
      return u(rng) < 0.02f ? x * 4.0f : x;  // sparse large elements
    }
  }
  return 0.0f;
}

void fill(Tensor& t, Dist d, std::mt19937_64& rng, float scale) {
  for (int64_t o : t.offsets()) t.set(o, sample(d, rng) * scale);
}

// ---------------------------------------------------------------- CaseConfig
std::string CaseConfig::describe() const {
  std::ostringstream s;
  s << dtype_str(dtype) << " B=" << batch << " Hq=" << hq << " Hkv=" << hkv << " Dqk=" << dqk << " Dv=" << dv
    << " sq=" << sq << " sk=" << sk << " kv=" << kv_mode_name(kv) << (varlen_q ? " varlen_q" : "")
    << (seqused_k ? " seqused_k" : "") << (kv == KvMode::cache || kv == KvMode::paged ? (cache_seqlens ? " cache_seqlens" : " full_cache") : "")
    << (cache_batch_idx ? " cache_batch_idx" : "");
  if (kv == KvMode::paged) s << " page_size=" << page_size;
  if (snew) s << " append=" << snew;
  s << " causal=" << causal << " window=(" << window_left << "," << window_right << ") chunk=" << chunk
    << (sinks ? " sinks" : "") << " softcap=" << softcap << " scale=" << scale << (lse ? " lse" : "")
    << (descale ? " descale" : "");
  if (fp8_kv) s << " fp8_kv scale=" << kv_scale_name(kv_scale) << (scale_broadcast ? " broadcast" : "");
  s << " splits=" << num_splits << " threads=" << num_threads
    << " layout=" << layout_name(layout) << " dist=" << dist_name(dist);
  if (max_seqlen_q || max_seqlen_k) s << " hints=(" << max_seqlen_q << "," << max_seqlen_k << ")";
  if (!lens_q.empty()) {
    s << " lens_q={";
    for (auto x : lens_q) s << x << ",";
    s << "}";
  }
  if (!lens_k.empty()) {
    s << " lens_k={";
    for (auto x : lens_k) s << x << ",";
    s << "}";
  }
  return s.str();
}

// ---------------------------------------------------------------- Case
Case make_case(const CaseConfig& cfg, uint64_t seed) {
  Case c;
  c.cfg = cfg;
  c.seed = seed;
  std::mt19937_64 rng(seed);
  auto rnd = [&](int64_t lo, int64_t hi) {  // inclusive
    return hi <= lo ? lo : lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  const int64_t B = cfg.batch;
  c.B = B;
  const DType idt = cfg.dtype;
  const DType odt = idt == DType::float8_e4m3 ? DType::bfloat16 : idt;
  const DType kdt = cfg.fp8_kv ? DType::float8_e4m3 : idt;  // k / v (the caches)

  // ---- query lengths ----
  c.lq.assign(B, cfg.sq);
  if (cfg.varlen_q)
    for (int64_t b = 0; b < B; ++b) c.lq[b] = cfg.lens_q.empty() ? rnd(0, cfg.sq) : cfg.lens_q[b];
  c.q_start.assign(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) c.q_start[b + 1] = c.q_start[b] + c.lq[b];
  const int64_t Tq = c.q_start[B] + (cfg.varlen_q ? rnd(0, 2) : 0);  // slack tokens nobody owns

  // ---- key lengths and KV layout ----
  c.base_k.assign(B, 0);
  c.k_start.assign(B + 1, 0);
  std::vector<int64_t> slot(B, cfg.sk);
  int64_t Tk = 0;
  switch (cfg.kv) {
    case KvMode::dense:
      c.capacity = cfg.sk;
      for (int64_t b = 0; b < B; ++b)
        c.base_k[b] = cfg.seqused_k ? (cfg.lens_k.empty() ? rnd(0, cfg.sk) : cfg.lens_k[b]) : cfg.sk;
      break;
    case KvMode::varlen:
      for (int64_t b = 0; b < B; ++b) {
        slot[b] = cfg.lens_k.empty() ? rnd(0, cfg.sk) : cfg.lens_k[b];
        c.base_k[b] = cfg.seqused_k ? rnd(0, slot[b]) : slot[b];
        c.k_start[b + 1] = c.k_start[b] + slot[b];
      }
      Tk = c.k_start[B] + rnd(0, 2);
      // [B, Hkv] and [Tk, Hkv] factors must differ in shape (validation refuses B = Tk unless
      // every sequence has one key): a slack token more.
      if (cfg.fp8_kv && cfg.kv_scale != KvScaleMode::none && Tk == B && B > 0) ++Tk;
      break;
    case KvMode::cache:
      c.capacity = cfg.sk;
      c.Bc = B + (cfg.cache_batch_idx ? rnd(0, 2) : 0);
      for (int64_t b = 0; b < B; ++b)
        c.base_k[b] = cfg.cache_seqlens ? (cfg.lens_k.empty() ? rnd(0, cfg.sk - cfg.snew) : cfg.lens_k[b]) : cfg.sk;
      c.cache_row.resize(B);
      {
        std::vector<int64_t> rows(c.Bc);
        std::iota(rows.begin(), rows.end(), 0);
        if (cfg.cache_batch_idx) std::shuffle(rows.begin(), rows.end(), rng);
        for (int64_t b = 0; b < B; ++b) c.cache_row[b] = rows[b];
      }
      break;
    case KvMode::paged: {
      const int64_t ps = cfg.page_size;
      c.max_pages = (cfg.sk + ps - 1) / ps + rnd(0, 1);
      if (c.max_pages == 0) c.max_pages = 1;
      c.capacity = c.max_pages * ps;
      std::vector<int64_t> used(B);
      int64_t total = 0;
      for (int64_t b = 0; b < B; ++b) {
        c.base_k[b] = cfg.cache_seqlens ? (cfg.lens_k.empty() ? rnd(0, std::max<int64_t>(0, cfg.sk - cfg.snew)) : cfg.lens_k[b])
                                        : c.capacity;
        used[b] = (c.base_k[b] + cfg.snew + ps - 1) / ps;
        total += used[b];
      }
      c.num_pages = total + rnd(0, 2);  // spare pages nobody uses (NaN)
      std::vector<int32_t> perm(c.num_pages);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      c.pages.assign(B * c.max_pages, -1);
      int64_t next = 0;
      const int32_t junk[] = {-1, -7, 1 << 30};
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < c.max_pages; ++i)
          c.pages[b * c.max_pages + i] = i < used[b] ? perm[next++] : junk[rng() % 3];  // unused entries: garbage
      break;
    }
  }
  c.lk.resize(B);
  for (int64_t b = 0; b < B; ++b) c.lk[b] = c.base_k[b] + cfg.snew;

  // ---- tensors ----
  const Layout L = cfg.layout;
  if (cfg.varlen_q) {
    c.q = Tensor::make(idt, {Tq, cfg.hq, cfg.dqk}, L, &rng);
    c.out = Tensor::make(odt, {Tq, cfg.hq, cfg.dv}, L, &rng);
    if (cfg.lse) c.lse = Tensor::make(DType::float32, {cfg.hq, Tq}, L == Layout::contiguous ? L : Layout::padded, &rng);
    std::vector<int32_t> cu(c.q_start.begin(), c.q_start.end());
    c.cu_seqlens_q = Tensor::make_i32(cu);
  } else {
    c.q = Tensor::make(idt, {B, cfg.sq, cfg.hq, cfg.dqk}, L, &rng);
    c.out = Tensor::make(odt, {B, cfg.sq, cfg.hq, cfg.dv}, L, &rng);
    if (cfg.lse) c.lse = Tensor::make(DType::float32, {B, cfg.hq, cfg.sq}, L == Layout::contiguous ? L : Layout::padded, &rng);
  }
  switch (cfg.kv) {
    case KvMode::dense:
      c.k = Tensor::make(kdt, {B, cfg.sk, cfg.hkv, cfg.dqk}, L, &rng);
      c.v = Tensor::make(kdt, {B, cfg.sk, cfg.hkv, cfg.dv}, L, &rng);
      break;
    case KvMode::varlen: {
      c.k = Tensor::make(kdt, {Tk, cfg.hkv, cfg.dqk}, L, &rng);
      c.v = Tensor::make(kdt, {Tk, cfg.hkv, cfg.dv}, L, &rng);
      std::vector<int32_t> cu(c.k_start.begin(), c.k_start.end());
      c.cu_seqlens_k = Tensor::make_i32(cu);
      break;
    }
    case KvMode::cache: {
      c.k = Tensor::make(kdt, {c.Bc, cfg.sk, cfg.hkv, cfg.dqk}, L, &rng);
      c.v = Tensor::make(kdt, {c.Bc, cfg.sk, cfg.hkv, cfg.dv}, L, &rng);
      if (cfg.cache_batch_idx) {
        std::vector<int32_t> r(c.cache_row.begin(), c.cache_row.end());
        c.cache_batch_idx = Tensor::make_i32(r);
      }
      break;
    }
    case KvMode::paged:
      c.k = Tensor::make(kdt, {c.num_pages, cfg.page_size, cfg.hkv, cfg.dqk}, L, &rng);
      c.v = Tensor::make(kdt, {c.num_pages, cfg.page_size, cfg.hkv, cfg.dv}, L, &rng);
      c.page_table = Tensor::make_i32_2d(c.pages, B, c.max_pages);
      break;
  }
  if (cfg.seqused_k) {
    std::vector<int32_t> u(c.base_k.begin(), c.base_k.end());
    c.seqused_k = Tensor::make_i32(u);
  }
  if ((cfg.kv == KvMode::cache || cfg.kv == KvMode::paged) && cfg.cache_seqlens) {
    std::vector<int32_t> u(c.base_k.begin(), c.base_k.end());
    c.cache_seqlens = Tensor::make_i32(u);
  }
  if (cfg.snew > 0) {
    c.k_new = Tensor::make(idt, {B, cfg.snew, cfg.hkv, cfg.dqk}, L, &rng);
    c.v_new = Tensor::make(idt, {B, cfg.snew, cfg.hkv, cfg.dv}, L, &rng);
  }
  if (cfg.sinks) {
    std::vector<float> s(cfg.hq);
    std::normal_distribution<float> n(0.0f, 2.0f);
    for (auto& x : s) x = n(rng);
    c.sinks = Tensor::make_f32_1d(s);
  }
  if (cfg.descale) {
    std::uniform_real_distribution<float> u(0.5f, 2.0f);
    for (Tensor* t : {&c.q_descale, &c.k_descale, &c.v_descale}) {
      *t = Tensor::make(DType::float32, {B, cfg.hkv});
      for (int64_t o : t->offsets()) t->set(o, u(rng));
    }
  }
  if (cfg.fp8_kv && cfg.kv_scale != KvScaleMode::none) {
    // Factors as a serving engine's (amax / 448 for values of a few units): e4m3 codes of up to
    // ~16 (the values below) times 1/64 .. 1/8.
    std::vector<int64_t> shape;
    if (cfg.kv_scale == KvScaleMode::per_head) shape = {B, cfg.hkv};
    else
      for (int i = 0; i < c.k.ndim - 1; ++i) shape.push_back(c.k.shape[i]);
    std::uniform_real_distribution<float> u(1.0f / 64, 1.0f / 8);
    for (Tensor* t : {&c.k_descale, &c.v_descale}) {
      *t = Tensor::make(DType::float32, shape, cfg.layout == Layout::bhsd ? Layout::bhsd : Layout::contiguous, &rng);
      if (cfg.scale_broadcast) t->stride[0] = 0;  // one slice for every index of dim 0
      for (int64_t o : t->offsets()) t->set(o, u(rng));
    }
  }

  // ---- values ----
  for (Tensor* t : {&c.q, &c.k, &c.v, &c.k_new, &c.v_new})
    if (t->present()) t->fill_input_nan();
  const Dist D = cfg.dist;
  if (!cfg.nan_unused) {  // every byte a finite value (including padding and unused rows)
    for (Tensor* t : {&c.q, &c.k, &c.v}) {
      for (int64_t o = 0; o < t->mem_elems(); ++o) t->set(o, sample(Dist::uniform, rng));
    }
  }
  const float qmul = idt == DType::float8_e4m3 ? 2.0f : 1.0f;  // use more of e4m3's range
  // fp8 KV: cache codes of up to ~16 (dequantized by factors 1/64 .. 1/8); new rows in q's scale.
  const float cmul = cfg.fp8_kv && cfg.kv_scale != KvScaleMode::none ? 16.0f : 1.0f;
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < c.lq[b]; ++i)
      for (int64_t h = 0; h < cfg.hq; ++h) {
        const float rowmul = D == Dist::outliers && u01(rng) < 0.2f ? 2.0f : 1.0f;
        for (int64_t d = 0; d < cfg.dqk; ++d) c.q.set(c.q_off(b, i, h, d), sample(D, rng) * rowmul * qmul);
      }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < c.lk[b]; ++j) {
      // Outliers: keys grow along the sequence (the running max keeps rising: many rescales)
      // and a few keys are spikes.
      float kmul = 1.0f;
      if (D == Dist::outliers) {
        kmul = 0.5f + 1.5f * static_cast<float>(j) / static_cast<float>(std::max<int64_t>(1, c.lk[b]));
        if (u01(rng) < 0.05f) kmul *= 2.5f;
      }
      for (int64_t hk = 0; hk < cfg.hkv; ++hk) {
        for (int64_t d = 0; d < cfg.dqk; ++d) {
          int64_t o;
          Tensor& t = const_cast<Tensor&>(c.key_src(b, j, hk, d, false, &o));
          t.set(o, sample(D, rng) * kmul * qmul * (j < c.base_k[b] ? cmul : 1.0f));
        }
        for (int64_t d = 0; d < cfg.dv; ++d) {
          int64_t o;
          Tensor& t = const_cast<Tensor&>(c.key_src(b, j, hk, d, true, &o));
          t.set(o, sample(D, rng) * qmul * (j < c.base_k[b] ? cmul : 1.0f));
        }
      }
    }
  // Per-token factors of slots no sequence attends (past the lengths, unused pages, cache rows
  // of no sequence): NaN, so a backend that reads one shows it (through its scores, or 0 x NaN in
  // P V). (Not with broadcast factors: every index of dim 0 is the same slice there.)
  if (cfg.nan_unused && cfg.fp8_kv && cfg.kv_scale == KvScaleMode::per_token && !cfg.scale_broadcast) {
    auto slot = [&](const Tensor& t, int64_t b, int64_t j, int64_t hk) -> int64_t {
      switch (cfg.kv) {
        case KvMode::dense: return t.off({b, j, hk});
        case KvMode::varlen: return t.off({c.k_start[b] + j, hk});
        case KvMode::cache: return t.off({c.cache_row[b], j, hk});
        case KvMode::paged: return t.off({c.pages[b * c.max_pages + j / cfg.page_size], j % cfg.page_size, hk});
      }
      return 0;
    };
    for (Tensor* t : {&c.k_descale, &c.v_descale}) {
      if (!t->present()) continue;
      std::vector<std::pair<int64_t, float>> used;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < c.lk[b]; ++j)
          for (int64_t hk = 0; hk < cfg.hkv; ++hk) {
            const int64_t o = slot(*t, b, j, hk);
            used.emplace_back(o, t->get(o));
          }
      for (int64_t o : t->offsets()) t->set(o, std::numeric_limits<float>::quiet_NaN());
      for (const auto& [o, x] : used) t->set(o, x);
    }
  }
  return c;
}

AttentionParams Case::params(Backend backend) {
  AttentionParams p;
  p.q = q.view();
  p.k = k.view();
  p.v = v.view();
  p.out = out.view();
  p.lse = lse.view();
  p.sinks = sinks.view();
  p.q_descale = q_descale.view();
  p.k_descale = k_descale.view();
  p.v_descale = v_descale.view();
  p.cu_seqlens_q = cu_seqlens_q.view();
  p.cu_seqlens_k = cu_seqlens_k.view();
  p.seqused_k = seqused_k.view();
  p.cache_seqlens = cache_seqlens.view();
  p.cache_batch_idx = cache_batch_idx.view();
  p.page_table = page_table.view();
  p.k_new = k_new.view();
  p.v_new = v_new.view();
  p.scale = cfg.scale;
  p.softcap = cfg.softcap;
  p.causal = cfg.causal;
  p.window_left = cfg.window_left;
  p.window_right = cfg.window_right;
  p.chunk_size = cfg.chunk;
  p.num_splits = cfg.num_splits;
  p.num_threads = cfg.num_threads;
  p.max_seqlen_q = cfg.max_seqlen_q;
  p.max_seqlen_k = cfg.max_seqlen_k;
  p.backend = backend;
  return p;
}

Status Case::run(Backend backend, int32_t num_threads) {
  AttentionParams p = params(backend);
  if (num_threads >= 0) p.num_threads = num_threads;
  return fa4::attention_forward(p);
}

void Case::poison_outputs() {
  out.poison();
  if (lse.present()) lse.poison();
}

int64_t Case::q_off(int64_t b, int64_t i, int64_t h, int64_t d) const {
  return cfg.varlen_q ? q.off({q_start[b] + i, h, d}) : q.off({b, i, h, d});
}
int64_t Case::out_off(int64_t b, int64_t i, int64_t h, int64_t d) const {
  return cfg.varlen_q ? out.off({q_start[b] + i, h, d}) : out.off({b, i, h, d});
}
int64_t Case::lse_off(int64_t b, int64_t h, int64_t i) const {
  return cfg.varlen_q ? lse.off({h, q_start[b] + i}) : lse.off({b, h, i});
}

int64_t Case::cache_off(const Tensor& t, int64_t b, int64_t j, int64_t hk, int64_t d) const {
  switch (cfg.kv) {
    case KvMode::dense: return t.off({b, j, hk, d});
    case KvMode::varlen: return t.off({k_start[b] + j, hk, d});
    case KvMode::cache: return t.off({cache_row[b], j, hk, d});
    case KvMode::paged:
      return t.off({pages[b * max_pages + j / cfg.page_size], j % cfg.page_size, hk, d});
  }
  return 0;
}

const Tensor& Case::key_src(int64_t b, int64_t j, int64_t hk, int64_t d, bool value, int64_t* o) const {
  if (j < base_k[b]) {
    const Tensor& t = value ? v : k;
    *o = cache_off(t, b, j, hk, d);
    return t;
  }
  const Tensor& t = value ? v_new : k_new;
  *o = t.off({b, j - base_k[b], hk, d});
  return t;
}

float Case::descale(const Tensor& t, int64_t b, int64_t hk) const {
  return t.present() ? t.get(t.off({b, hk})) : 1.0f;
}

float Case::kv_factor(const Tensor& t, int64_t b, int64_t j, int64_t hk) const {
  if (!t.present()) return 1.0f;
  if (!cfg.fp8_kv || cfg.kv_scale != KvScaleMode::per_token) return t.get(t.off({b, hk}));
  switch (cfg.kv) {
    case KvMode::dense: return t.get(t.off({b, j, hk}));
    case KvMode::varlen: return t.get(t.off({k_start[b] + j, hk}));
    case KvMode::cache: return t.get(t.off({cache_row[b], j, hk}));
    case KvMode::paged: return t.get(t.off({pages[b * max_pages + j / cfg.page_size], j % cfg.page_size, hk}));
  }
  return 1.0f;
}

uint8_t Case::expected_fp8(float x, int64_t b, int64_t j, int64_t hk, bool value) const {
  return fa4::core::f32_to_e4m3(x / kv_factor(value ? v_descale : k_descale, b, j, hk));
}

namespace {
// Key / value element x (k_new / v_new when j was appended) as the attention sees it: into an
// fp8 cache an appended x is stored quantized; then dequantized by the factor of its slot.
double kv_value(const Case& c, const Tensor& t, float x, int64_t b, int64_t j, int64_t hk, bool value) {
  const Tensor& f = value ? c.v_descale : c.k_descale;
  if (!c.cfg.fp8_kv) return static_cast<double>(x) * c.descale(f, b, hk);
  if (t.dtype != DType::float8_e4m3) x = fa4::core::e4m3_to_f32(c.expected_fp8(x, b, j, hk, value));
  return static_cast<double>(x) * c.kv_factor(f, b, j, hk);
}
}  // namespace

double Case::qval(int64_t b, int64_t i, int64_t h, int64_t d) const {
  return static_cast<double>(q.get(q_off(b, i, h, d))) * descale(q_descale, b, h / (cfg.hq / cfg.hkv));
}
double Case::kval(int64_t b, int64_t j, int64_t hk, int64_t d) const {
  int64_t o;
  const Tensor& t = key_src(b, j, hk, d, false, &o);
  return kv_value(*this, t, t.get(o), b, j, hk, false);
}
double Case::vval(int64_t b, int64_t j, int64_t hk, int64_t d) const {
  int64_t o;
  const Tensor& t = key_src(b, j, hk, d, true, &o);
  return kv_value(*this, t, t.get(o), b, j, hk, true);
}
double Case::sink(int64_t h) const { return cfg.sinks ? sinks.get(h) : -kInf; }
double Case::scale() const {
  return cfg.scale != 0.0f ? static_cast<double>(cfg.scale) : static_cast<double>(1.0f / std::sqrt(static_cast<float>(cfg.dqk)));
}

bool Case::visible(int64_t b, int64_t i, int64_t j) const {
  const int64_t p = i + lk[b] - lq[b];  // bottom-right aligned position of query i
  if (j < 0 || j >= lk[b]) return false;
  const int64_t right = (cfg.causal || cfg.chunk > 0) ? 0 : cfg.window_right;
  if (cfg.window_left >= 0 && j < p - cfg.window_left) return false;
  if (right >= 0 && j > p + right) return false;
  if (cfg.chunk > 0 && floor_div(j, cfg.chunk) != floor_div(p, cfg.chunk)) return false;
  return true;
}

// ---------------------------------------------------------------- naive oracle
Expected naive_attention(const Case& c) {
  Expected e;
  const auto& cfg = c.cfg;
  const int64_t group = cfg.hkv ? cfg.hq / cfg.hkv : 1;
  const double scale = c.scale();
  std::vector<double> s;
  std::vector<int64_t> js;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.lq[b]; ++i) {
      e.row_b.push_back(b);
      e.row_i.push_back(i);
      for (int64_t h = 0; h < cfg.hq; ++h) {
        const int64_t hk = h / group;
        s.clear();
        js.clear();
        bool nan = false;
        for (int64_t j = 0; j < c.lk[b]; ++j) {
          if (!c.visible(b, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < cfg.dqk; ++d) dot += c.qval(b, i, h, d) * c.kval(b, j, hk, d);
          double x = scale * dot;
          if (cfg.softcap > 0) x = cfg.softcap * std::tanh(x / cfg.softcap);
          nan = nan || std::isnan(x);
          s.push_back(x);
          js.push_back(j);
        }
        double m = c.sink(h);
        for (double x : s) m = std::max(m, x);
        std::vector<double> o(cfg.dv, 0.0);
        double lse;
        if (nan) {
          std::fill(o.begin(), o.end(), std::nan(""));
          lse = std::nan("");
        } else if (m == -kInf) {
          lse = -kInf;
        } else {
          double den = cfg.sinks ? std::exp(c.sink(h) - m) : 0.0;
          for (size_t t = 0; t < s.size(); ++t) {
            const double w = std::exp(s[t] - m);
            den += w;
            for (int64_t d = 0; d < cfg.dv; ++d) o[d] += w * c.vval(b, js[t], hk, d);
          }
          for (auto& x : o) x /= den;
          lse = m + std::log(den);
        }
        e.out.insert(e.out.end(), o.begin(), o.end());
        e.lse.push_back(lse);
      }
    }
  return e;
}

Tol tol_for(DType d) {
  switch (d) {
    case DType::float32: return {1e-5, 1e-4, 0.0, 1e-3};
    case DType::float16: return {2e-3, 1e-2, 0.0, 1e-3};
    case DType::bfloat16: return {1e-2, 5e-2, 0.0, 1e-3};
    case DType::float8_e4m3: return {5e-2, kInf, 0.999, 1e-3};
    default: break;
  }
  return {0, 0, 0, 0};
}

QkNorms::QkNorms(const Case& c) : c_(c), kmax_(static_cast<size_t>(c.B * c.cfg.hkv), 0.0) {
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t hk = 0; hk < c.cfg.hkv; ++hk) {
      double& m = kmax_[static_cast<size_t>(b * c.cfg.hkv + hk)];
      for (int64_t j = 0; j < c.lk[b]; ++j) {
        double n2 = 0.0;
        for (int64_t d = 0; d < c.cfg.dqk; ++d) {
          const double x = c.kval(b, j, hk, d);
          if (std::isfinite(x)) n2 += x * x;
        }
        m = std::max(m, std::sqrt(n2));
      }
    }
}

double QkNorms::operator()(int64_t b, int64_t i, int64_t h) const {
  double n2 = 0.0;
  for (int64_t d = 0; d < c_.cfg.dqk; ++d) {
    const double x = c_.qval(b, i, h, d);
    if (std::isfinite(x)) n2 += x * x;
  }
  const int64_t hk = h / (c_.cfg.hq / c_.cfg.hkv);
  return c_.scale() * std::sqrt(n2) * kmax_[static_cast<size_t>(b * c_.cfg.hkv + hk)];
}

LseQkSeen& lse_qk_seen() {
  static LseQkSeen s;
  return s;
}

namespace {

struct Acc {
  double se = 0, sr = 0, st = 0, dot = 0, max_abs = 0;
  double se_beyond = 0;  // sum of squared errors in excess of the output-rounding quantum
  int64_t n = 0, nonfinite_mismatch = 0, unwritten = 0, empty_bad = 0, lse_bad = 0, lse_unwritten = 0;
  double lse_max = 0;
  double lse_qk_ratio = -1;  // (Tol::lse_qk > 0) the largest (|lse error| - lse_abs) / qk norm bound
  std::ostringstream first;
  int nfirst = 0;
  void note(const std::string& s) {
    if (nfirst++ < 6) first << "\n    " << s;
  }
};

bool row_empty(const Case& c, int64_t b, int64_t i) {
  if (c.cfg.sinks) return false;
  for (int64_t j = 0; j < c.lk[b]; ++j)
    if (c.visible(b, i, j)) return false;
  return true;
}

std::string loc(int64_t b, int64_t i, int64_t h, int64_t d) {
  std::ostringstream s;
  s << "(b=" << b << ", i=" << i << ", h=" << h << ", d=" << d << ")";
  return s.str();
}

// One output element: test value t vs expected r. `quantum` is the part of |t - r| that output
// rounding alone can cause: two correct results rounded to bf16 can differ by one ulp, which is
// 0.0625 at |O| in [8, 16) and 0.125 in [16, 32) -- above the 5e-2 max-abs limit of DESIGN.md
// section 4 (the `outliers` inputs reach such outputs). max_abs therefore counts the error in
// excess of that quantum; rel_l2 and cosine still see the whole difference.
void accumulate(Acc& a, double t, double r, bool poisoned, bool empty, const std::string& where, double quantum) {
  if (poisoned) {
    ++a.unwritten;
    a.note("out" + where + " never written");
    return;
  }
  if (empty) {
    if (t != 0.0) {
      ++a.empty_bad;
      a.note("out" + where + " in an empty row is " + std::to_string(t) + ", expected exactly 0");
    }
    return;
  }
  if (!std::isfinite(r) || !std::isfinite(t)) {
    const bool same = (std::isnan(r) && std::isnan(t)) || r == t;
    if (!same) {
      ++a.nonfinite_mismatch;
      a.note("out" + where + " = " + std::to_string(t) + ", expected " + std::to_string(r));
    }
    return;
  }
  const double e = t - r;
  a.se += e * e;
  a.sr += r * r;
  a.st += t * t;
  a.dot += t * r;
  ++a.n;
  const double excess = std::fabs(e) - quantum;
  if (excess > a.max_abs) {
    a.max_abs = excess;
  }
  if (excess > 0) a.se_beyond += excess * excess;
}

// tol: the row's bound beyond 2 ulp (Tol::lse_abs, plus Tol::lse_qk x qk_norm where qk_norm >= 0).
void accumulate_lse(Acc& a, const Tensor& lse, int64_t off, double r, bool empty, double tol, const std::string& where,
                    double lse_abs = 0.0, double qk_norm = -1.0) {
  if (lse.is_poison(off)) {
    ++a.lse_unwritten;
    a.note("lse" + where + " never written");
    return;
  }
  const double t = lse.get(off);
  if (empty) r = -kInf;
  bool ok;
  if (std::isnan(r)) ok = std::isnan(t);
  else if (!std::isfinite(r)) ok = t == r;
  else {
    // DESIGN: abs <= 1e-3; plus 2 ulp of the fp32 value itself (only matters for |lse| > 2048,
    // where fp32 cannot hold the lse to 1e-3).
    const double ulp = std::nextafter(static_cast<float>(std::fabs(r)), INFINITY) - static_cast<float>(std::fabs(r));
    ok = std::isfinite(t) && std::fabs(t - r) <= tol + 2.0 * ulp;
    if (std::isfinite(t)) a.lse_max = std::max(a.lse_max, std::fabs(t - r));
    if (std::isfinite(t) && qk_norm > 0) a.lse_qk_ratio = std::max(a.lse_qk_ratio, (std::fabs(t - r) - lse_abs) / qk_norm);
  }
  if (!ok) {
    ++a.lse_bad;
    a.note("lse" + where + " = " + std::to_string(t) + ", expected " + std::to_string(r));
  }
}

// Every byte of `t` outside the logical elements `logical` must still be poison.
int64_t untouched_violations(const Tensor& t, const std::vector<int64_t>& logical) {
  std::vector<char> mark(static_cast<size_t>(t.mem_elems()), 0);
  for (int64_t o : logical) mark[static_cast<size_t>(o)] = 1;
  int64_t bad = 0;
  for (int64_t o = 0; o < t.mem_elems(); ++o)
    if (!mark[static_cast<size_t>(o)] && !t.is_poison(o)) ++bad;
  return bad;
}

// The cancellation fallback of compare_runs (see cancellation_norm): terms > 0 replaces the
// rel-L2 check by ||error beyond output rounding|| <= rel_tol * terms.
struct Cancelled {
  double terms = -1.0, rel_tol = 0.0;
};

::testing::AssertionResult finish(const Case& test, Acc& a, const Tol& tol, int64_t out_outside, int64_t lse_outside,
                                  bool caches_differ, Cancelled cancelled = {}) {
  const bool cn = cancelled.terms > 0;
  const double rel = cn ? std::sqrt(a.se_beyond) / cancelled.terms : a.sr > 0 ? std::sqrt(a.se / a.sr) : std::sqrt(a.se);
  const double rel_tol = cn ? cancelled.rel_tol : tol.rel_l2;
  const double cosine = (a.sr > 0 && a.st > 0) ? a.dot / std::sqrt(a.sr * a.st) : 1.0;
  const bool ok = a.unwritten == 0 && a.empty_bad == 0 && a.nonfinite_mismatch == 0 && a.lse_bad == 0 &&
                  a.lse_unwritten == 0 && rel <= rel_tol && a.max_abs <= tol.max_abs &&
                  (tol.cos_min <= 0 || cosine >= tol.cos_min) && out_outside == 0 && lse_outside == 0 && !caches_differ;
  std::ostringstream s;
  s << "[" << test.cfg.describe() << "] rel_l2=" << rel
    << (cn ? " (beyond output rounding, vs the cancelled terms' norm)" : "") << " (tol " << rel_tol
    << ") max_abs_beyond_rounding=" << a.max_abs
    << " (tol " << tol.max_abs << ") cosine=" << cosine << " lse_max_err=" << a.lse_max;
  if (a.lse_qk_ratio > 0)
    s << " (beyond " << tol.lse_abs << ": 2^" << std::log2(a.lse_qk_ratio) << " of scale |q| max|k|, tol 2^"
      << std::log2(tol.lse_qk) << ")";
  s << " compared=" << a.n
    << " unwritten=" << a.unwritten << " empty_row_nonzero=" << a.empty_bad << " nonfinite_mismatch=" << a.nonfinite_mismatch
    << " lse_bad=" << a.lse_bad << " lse_unwritten=" << a.lse_unwritten << " out_bytes_outside_written=" << out_outside
    << " lse_bytes_outside_written=" << lse_outside << (caches_differ ? " KV-CACHE-BYTES-DIFFER" : "") << a.first.str();
  if (ok) return ::testing::AssertionSuccess() << s.str();
  return ::testing::AssertionFailure() << s.str();
}

std::vector<int64_t> logical_out(const Case& c) {
  std::vector<int64_t> r;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.lq[b]; ++i)
      for (int64_t h = 0; h < c.cfg.hq; ++h)
        for (int64_t d = 0; d < c.cfg.dv; ++d) r.push_back(c.out_off(b, i, h, d));
  return r;
}
std::vector<int64_t> logical_lse(const Case& c) {
  std::vector<int64_t> r;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.lq[b]; ++i)
      for (int64_t h = 0; h < c.cfg.hq; ++h) r.push_back(c.lse_off(b, h, i));
  return r;
}

// An output that is the result of heavy cancellation (sum_j p_j v_j much smaller than
// sum_j p_j |v_j|, e.g. Dv = 1 with signed values) has a rounding error set by the terms, not by
// the result: fp32 accumulation of terms of size ~1 cannot give 1e-5 of a result of 1e-3. So
// where rel-L2 fails, the reference runs again with |v| (and |v_new|): `ref_abs` = sum p |v|,
// and the error must then be within cancellation_tol of ||ref_abs|| (tol / 10: ten times
// tighter, on the norm the arithmetic is bounded by). Returns ||ref_abs|| over the compared
// elements, or -1.
double cancellation_norm(const Case& test, const Case& ref) {
  Case abs_case = ref;
  for (Tensor Case::*t : {&Case::v, &Case::v_new})
    if ((abs_case.*t).present())
      for (int64_t o = 0; o < (abs_case.*t).mem_elems(); ++o) (abs_case.*t).set(o, std::fabs((abs_case.*t).get(o)));
  abs_case.out.poison();
  if (!abs_case.run(Backend::reference).ok()) return -1.0;
  double sum = 0.0;
  for (int64_t b = 0; b < test.B; ++b)
    for (int64_t i = 0; i < test.lq[b]; ++i) {
      if (row_empty(test, b, i)) continue;
      for (int64_t h = 0; h < test.cfg.hq; ++h)
        for (int64_t d = 0; d < test.cfg.dv; ++d) {
          const double r = abs_case.out.get(test.out_off(b, i, h, d));
          if (std::isfinite(r)) sum += r * r;
        }
    }
  return sum > 0 ? std::sqrt(sum) : -1.0;
}

// The bound of the cancellation fallback, relative to ||ref_abs||: tol / 10, but never below what
// the documented numerics can reach there. The 16-bit product kernels round P to bf16 for
// P V with bf16 and fp8 inputs (cpu_kernels.h; the GPU kernels do too): each weight then has a
// relative error of up to 2^-8, so the error of sum_j p_j v_j / l is bounded by 2^-8 ||ref_abs||
// alone, not by bf16's tol / 10 = 1e-3. (CpuVsReference.RandomConfigurationsOfTheWholeFeatureSpace
// .amx failed once in 4e4 random cases so: bf16, Dv = 1, 67 keys, exact O = 0.07459 against
// sum p |v| / l = 0.93; the AMX output was exactly the bf16-P model's, 7.1e-4 of ||ref_abs||
// from the exact value before its output rounding, and 1.05e-3 from the bf16-rounded reference.)
// fp16 (P as two bf16 terms, 2^-16) and fp32 stay at tol / 10. The error is counted beyond each
// element's output-rounding quantum, as max_abs is: two correct results rounded to the output
// type can differ by one ulp of |O| whatever ||ref_abs|| is.
double cancellation_tol(DType input, const Tol& tol) {
  const double p_rounding = input == DType::bfloat16 || input == DType::float8_e4m3 ? 0x1p-8 : 0.0;
  return std::max(tol.rel_l2 / 10, p_rounding);
}

}  // namespace

::testing::AssertionResult compare_runs(const Case& test, const Case& ref, const Tol& tol) {
  Acc a;
  std::optional<QkNorms> qk_norms;
  if (tol.lse_qk > 0 && test.lse.present()) qk_norms.emplace(test);
  for (int64_t b = 0; b < test.B; ++b)
    for (int64_t i = 0; i < test.lq[b]; ++i) {
      const bool empty = row_empty(test, b, i);
      for (int64_t h = 0; h < test.cfg.hq; ++h) {
        for (int64_t d = 0; d < test.cfg.dv; ++d) {
          const int64_t o = test.out_off(b, i, h, d);
          // Both sides rounded to the output type: up to half an ulp each.
          const double r = ref.out.get(o);
          accumulate(a, test.out.get(o), r, test.out.is_poison(o), empty, loc(b, i, h, d), ulp_of(test.out.dtype, r));
        }
        if (test.lse.present()) {
          const int64_t o = test.lse_off(b, h, i);
          const double qk = qk_norms ? (*qk_norms)(b, i, h) : -1.0;
          accumulate_lse(a, test.lse, o, ref.lse.get(o), empty, tol.lse_abs + (qk > 0 ? tol.lse_qk * qk : 0.0),
                         loc(b, i, h, -1), tol.lse_abs, qk);
          if (qk > 0 && !empty) ++lse_qk_seen().rows;
        }
      }
    }
  if (a.lse_qk_ratio > 0) lse_qk_seen().ratio = std::max(lse_qk_seen().ratio, a.lse_qk_ratio);
  const int64_t oo = untouched_violations(test.out, logical_out(test));
  const int64_t lo = test.lse.present() ? untouched_violations(test.lse, logical_lse(test)) : 0;
  // Caches (written only by appends) must be bytewise equal; pure inputs too (neither backend
  // may write them: both started from the same bytes).
  bool caches_differ = test.k.mem != ref.k.mem || test.v.mem != ref.v.mem;
  for (const Tensor Case::*t : {&Case::q, &Case::k_new, &Case::v_new, &Case::sinks, &Case::q_descale, &Case::k_descale,
                                &Case::v_descale, &Case::cu_seqlens_q, &Case::cu_seqlens_k, &Case::seqused_k,
                                &Case::cache_seqlens, &Case::cache_batch_idx, &Case::page_table})
    if ((test.*t).mem != (ref.*t).mem) {
      caches_differ = true;
      a.note("an input tensor was modified");
    }
  const double rel = a.sr > 0 ? std::sqrt(a.se / a.sr) : std::sqrt(a.se);
  if (rel > tol.rel_l2) {
    const double terms = cancellation_norm(test, ref);
    const double ctol = cancellation_tol(test.cfg.dtype, tol);
    if (terms > 0 && std::sqrt(a.se_beyond) <= ctol * terms)
      return finish(test, a, tol, oo, lo, caches_differ, {terms, ctol});
  }
  return finish(test, a, tol, oo, lo, caches_differ);
}

::testing::AssertionResult compare_expected(const Case& test, const Expected& e, const Tol& tol) {
  Acc a;
  const int64_t hq = test.cfg.hq, dv = test.cfg.dv;
  for (size_t t = 0; t < e.row_b.size(); ++t) {
    const int64_t b = e.row_b[t], i = e.row_i[t];
    const bool empty = row_empty(test, b, i);
    for (int64_t h = 0; h < hq; ++h) {
      for (int64_t d = 0; d < dv; ++d) {
        const int64_t o = test.out_off(b, i, h, d);
        // Exact expectation vs a result rounded to the output type: up to half an ulp.
        const double r = e.out[(t * hq + h) * dv + d];
        accumulate(a, test.out.get(o), r, test.out.is_poison(o), empty, loc(b, i, h, d), 0.5 * ulp_of(test.out.dtype, r));
      }
      if (test.lse.present())
        accumulate_lse(a, test.lse, test.lse_off(b, h, i), e.lse[t * hq + h], empty, tol.lse_abs, loc(b, i, h, -1));
    }
  }
  const int64_t oo = untouched_violations(test.out, logical_out(test));
  const int64_t lo = test.lse.present() ? untouched_violations(test.lse, logical_lse(test)) : 0;
  return finish(test, a, tol, oo, lo, false);
}

::testing::AssertionResult bitwise_equal(const Case& a, const Case& b) {
  if (a.out.mem != b.out.mem) return ::testing::AssertionFailure() << "out differs bitwise [" << a.cfg.describe() << "]";
  if (a.lse.mem != b.lse.mem) return ::testing::AssertionFailure() << "lse differs bitwise [" << a.cfg.describe() << "]";
  if (a.k.mem != b.k.mem || a.v.mem != b.v.mem)
    return ::testing::AssertionFailure() << "k/v cache differs bitwise [" << a.cfg.describe() << "]";
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------- random configurations
CaseConfig random_config(std::mt19937_64& rng) {
  auto pick = [&](auto... xs) {
    const int64_t v[] = {static_cast<int64_t>(xs)...};
    return v[rng() % sizeof...(xs)];
  };
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  CaseConfig c;
  const float dr = u(rng);
  c.dtype = dr < 0.35f ? DType::float32 : dr < 0.6f ? DType::float16 : dr < 0.85f ? DType::bfloat16 : DType::float8_e4m3;
  c.hkv = pick(1, 1, 2, 3);
  c.hq = c.hkv * pick(1, 2, 4, 8);
  if (u(rng) < 0.07f) {
    c.dqk = 192;
    c.dv = 128;
  } else {
    c.dqk = pick(1, 7, 16, 32, 33, 64, 64, 80, 100, 128, 256);
    c.dv = u(rng) < 0.7f ? c.dqk : pick(1, 8, 33, 64, 100, 128, 256);
  }
  const float kr = u(rng);
  c.kv = kr < 0.3f ? KvMode::dense : kr < 0.5f ? KvMode::varlen : kr < 0.75f ? KvMode::cache : KvMode::paged;
  c.batch = pick(1, 1, 2, 3, 4);
  c.sq = pick(0, 1, 1, 2, 5, 16, 33, 64);
  c.sk = pick(0, 1, 3, 17, 64, 64, 130, 200);
  c.varlen_q = u(rng) < 0.3f;
  if (c.kv == KvMode::dense || c.kv == KvMode::varlen) {
    c.seqused_k = u(rng) < 0.3f;
  } else {
    if (!c.varlen_q && u(rng) < 0.4f) c.snew = pick(1, 2, 5);
    c.cache_seqlens = c.snew > 0 || u(rng) < 0.85f;
    if (c.sk < c.snew) c.sk = c.snew + pick(0, 3, 20);
    if (c.kv == KvMode::cache) c.cache_batch_idx = u(rng) < 0.5f;
    if (c.kv == KvMode::paged) c.page_size = pick(1, 3, 16, 16, 256);
  }
  const float mr = u(rng);
  if (mr < 0.35f) {
  } else if (mr < 0.6f) {
    c.causal = true;
  } else if (mr < 0.85f) {
    c.window_left = pick(-1, 0, 1, 3, 7, 20);
    c.window_right = pick(-1, 0, 1, 4, 9);
    if (c.window_right <= 0 && u(rng) < 0.5f) c.causal = true;
  } else {
    c.chunk = pick(1, 2, 4, 7, 16);
    if (u(rng) < 0.3f) c.window_left = pick(0, 2, 5);
    if (u(rng) < 0.3f) c.causal = true;
  }
  c.sinks = u(rng) < 0.25f;
  if (u(rng) < 0.2f) c.softcap = 2.0f + 28.0f * u(rng);
  if (u(rng) < 0.2f) c.scale = (0.3f + 1.7f * u(rng)) / std::sqrt(static_cast<float>(c.dqk));  // near the default
  c.lse = u(rng) < 0.85f;
  c.descale = c.dtype == DType::float8_e4m3 && u(rng) < 0.6f;
  c.num_splits = static_cast<int32_t>(pick(1, 1, 2, 3, 0, 0, 7));
  c.num_threads = static_cast<int32_t>(pick(0, 0, 1, 2, 3));
  const float lr = u(rng);
  c.layout = lr < 0.5f ? Layout::contiguous : lr < 0.7f ? Layout::padded : lr < 0.9f ? Layout::bhsd : Layout::strided_last;
  const float r = u(rng);
  c.dist = r < 0.4f ? Dist::normal : r < 0.6f ? Dist::uniform : Dist::outliers;
  // Keep the work small: B * Hq * Sq * Sk * (Dqk + Dv) <= ~3e6 multiply-adds.
  while (c.batch * c.hq * std::max<int64_t>(c.sq, 1) * std::max<int64_t>(c.sk, 1) * (c.dqk + c.dv) > 3000000) {
    if (c.sk > 2 * c.snew + 8) c.sk /= 2;
    else if (c.sq > 1) c.sq /= 2;
    else if (c.hq > c.hkv) c.hq /= 2;
    else break;
  }
  if (c.hq % c.hkv != 0) c.hq = c.hkv;
  // Drawn last, so the draws above (and the configurations of a seed) stay as they were.
  if ((c.dtype == DType::float16 || c.dtype == DType::bfloat16) && u(rng) < 0.3f) random_fp8_kv(c, rng);
  return c;
}

void random_fp8_kv(CaseConfig& c, std::mt19937_64& rng) {
  c.fp8_kv = true;
  const uint64_t r = rng() % 8;
  c.kv_scale = r < 1 ? KvScaleMode::none : r < 4 ? KvScaleMode::per_head : KvScaleMode::per_token;
  c.scale_broadcast = c.kv_scale != KvScaleMode::none && rng() % 5 == 0;
}

}  // namespace fa4test
