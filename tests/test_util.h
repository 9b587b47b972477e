// Shared helpers of the fa4 CPU test suite.
//
//  * seeds: one fresh seed per process (std::random_device), overridable with FA4_TEST_SEED;
//    every randomized check derives its own seed from it and prints it (SCOPED_TRACE) so a
//    failure can be replayed with FA4_TEST_SEED=<base seed>.
//  * Tensor: an owning buffer + dtype + shape + strides (any layout: contiguous, padded,
//    BHSD-transposed, non-unit last stride). Memory outside the logical elements is filled with
//    NaN bytes (0xFF) so a backend that reads padding produces NaN and one that writes padding
//    is caught by the byte checks.
//  * Case: a whole attention problem (dense / varlen q / varlen k / KV cache / paged / append)
//    built from a small CaseConfig, with logical accessors that use the test's own addressing
//    (independent of src/core), a naive fp64 oracle on top of them, and comparisons with the
//    DESIGN §4 tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "fa4/fa4.h"

namespace fa4test {

using fa4::AttentionParams;
using fa4::Backend;
using fa4::DType;
using fa4::DeviceType;
using fa4::Status;
using fa4::StatusCode;
using fa4::TensorView;

// ---------------------------------------------------------------- seeds
uint64_t base_seed();                                 // printed once per process
uint64_t derive_seed(uint64_t tag);                   // base_seed mixed with a tag
std::string seed_note(uint64_t seed);                 // "seed=... (rerun with FA4_TEST_SEED=...)"
#define FA4_SEED_TRACE(seed) SCOPED_TRACE(::fa4test::seed_note(seed))

// ---------------------------------------------------------------- tensors
enum class Dist { normal, uniform, outliers };
enum class Layout { contiguous, padded, bhsd, strided_last };
const char* dist_name(Dist d);
const char* layout_name(Layout l);
const char* dtype_str(DType d);

struct Tensor {
  DType dtype = DType::float32;
  int ndim = 0;
  int64_t shape[fa4::kMaxDims] = {};
  int64_t stride[fa4::kMaxDims] = {};
  std::vector<unsigned char> mem;  // at least one element so data is never null

  bool present() const { return ndim > 0; }
  size_t esize() const { return fa4::dtype_size(dtype); }
  int64_t numel() const;
  int64_t mem_elems() const { return static_cast<int64_t>(mem.size() / esize()); }

  // Logical shape in a layout; the rng picks paddings (may be null for layouts without any).
  static Tensor make(DType dt, const std::vector<int64_t>& shape, Layout layout = Layout::contiguous,
                     std::mt19937_64* rng = nullptr);
  static Tensor make_i32(const std::vector<int32_t>& values);  // 1-d int32
  static Tensor make_i32_2d(const std::vector<int32_t>& values, int64_t rows, int64_t cols);
  static Tensor make_f32_1d(const std::vector<float>& values);

  TensorView view();
  void* data() { return mem.data(); }

  int64_t off(std::initializer_list<int64_t> idx) const;
  float get(int64_t off) const;          // element -> float (any float dtype)
  void set(int64_t off, float x);        // float -> element (rounded to the dtype)
  int32_t geti(int64_t off) const;
  void seti(int64_t off, int32_t x);
  bool is_poison(int64_t off) const;     // all bytes 0xFF (never a value we compute)
  void poison() { std::memset(mem.data(), 0xFF, mem.size()); }
  // Inputs: every element (padding too) a NaN whose bits differ from the output poison, so a
  // NaN that propagates from an input into an output never looks like "not written".
  void fill_input_nan();
  // Every logical element offset (in index order).
  std::vector<int64_t> offsets() const;
};

// Fills every logical element of t from the distribution (rounded to t's dtype).
void fill(Tensor& t, Dist d, std::mt19937_64& rng, float scale = 1.0f);
float sample(Dist d, std::mt19937_64& rng);

// ---------------------------------------------------------------- attention cases
enum class KvMode { dense, varlen, cache, paged };
const char* kv_mode_name(KvMode m);
// fp8 KV cache factors (k_descale / v_descale): absent, per (batch, kv head) [B, Hkv], or per
// (token, kv head) with k's shape without its last dim.
enum class KvScaleMode { none, per_head, per_token };
const char* kv_scale_name(KvScaleMode m);

struct CaseConfig {
  DType dtype = DType::float32;
  int64_t batch = 1, hq = 1, hkv = 1, dqk = 16, dv = 16;
  int64_t sq = 8;  // dense Sq, or max per-sequence length for varlen q
  int64_t sk = 8;  // dense Sk / max slot (varlen k) / cache capacity / paged capacity upper bound
  // Explicit per-sequence lengths (optional). lens_q: varlen q lengths. lens_k: key lengths
  // before append (dense/varlen: used keys; cache/paged: cache_seqlens).
  std::vector<int64_t> lens_q, lens_k;
  bool varlen_q = false;
  KvMode kv = KvMode::dense;
  bool seqused_k = false;        // dense/varlen k: pass seqused_k (random <= slot)
  bool cache_seqlens = true;     // cache/paged: pass cache_seqlens (else every sequence is full)
  bool cache_batch_idx = false;  // cache: map sequences to random distinct cache rows
  int64_t page_size = 16;
  int64_t snew = 0;              // append rows (cache/paged only)
  bool causal = false;
  int64_t window_left = -1, window_right = -1, chunk = 0;
  bool sinks = false;
  float softcap = 0.0f, scale = 0.0f;
  bool lse = true;
  bool descale = false;          // fp8 only: random q/k/v descales
  // fp8 KV cache: k / v (and the cache appended to) float8_e4m3, q / k_new / v_new in dtype
  // (float16 / bfloat16), with k / v factors as kv_scale says; scale_broadcast: the factor
  // tensors repeat one slice along their dim 0 (stride 0).
  bool fp8_kv = false;
  KvScaleMode kv_scale = KvScaleMode::none;
  bool scale_broadcast = false;
  int32_t num_splits = 1, num_threads = 0;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // the hints, passed as given (0 = unknown)
  Layout layout = Layout::contiguous;
  Dist dist = Dist::normal;
  bool nan_unused = true;        // fill keys beyond the lengths / unused pages with NaN

  std::string describe() const;
};

struct Case {
  CaseConfig cfg;
  uint64_t seed = 0;
  int64_t B = 0, Bc = 0, max_pages = 0, num_pages = 0, capacity = 0;
  std::vector<int64_t> lq;       // query length per sequence
  std::vector<int64_t> q_start;  // first packed token (varlen q) per sequence
  std::vector<int64_t> k_start;  // first packed key token (varlen k)
  std::vector<int64_t> base_k;   // keys present before append (cache_seqlens / used / slot)
  std::vector<int64_t> lk;       // keys attended = base_k + snew
  std::vector<int64_t> cache_row;      // cache: row of sequence b
  std::vector<int32_t> pages;          // paged: [B, max_pages]
  Tensor q, k, v, out, lse, sinks, q_descale, k_descale, v_descale;
  Tensor cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens, cache_batch_idx, page_table, k_new, v_new;

  AttentionParams params(Backend backend);
  Status run(Backend backend, int32_t num_threads = -1);  // num_threads -1: cfg's
  void poison_outputs();  // out and lse to 0xFF

  // ---- logical access (the test's own addressing, independent of src/core) ----
  int64_t q_off(int64_t b, int64_t i, int64_t h, int64_t d) const;
  int64_t out_off(int64_t b, int64_t i, int64_t h, int64_t d) const;
  int64_t lse_off(int64_t b, int64_t h, int64_t i) const;
  // Key j of sequence b, the tensor that holds it (cache or k_new) and its offset.
  const Tensor& key_src(int64_t b, int64_t j, int64_t hk, int64_t d, bool value, int64_t* off) const;
  // Offset of cache row j of sequence b (cache / paged / dense / varlen k), j < capacity.
  int64_t cache_off(const Tensor& t, int64_t b, int64_t j, int64_t hk, int64_t d) const;
  double qval(int64_t b, int64_t i, int64_t h, int64_t d) const;  // dequantized
  double kval(int64_t b, int64_t j, int64_t hk, int64_t d) const;
  double vval(int64_t b, int64_t j, int64_t hk, int64_t d) const;
  float descale(const Tensor& t, int64_t b, int64_t hk) const;
  // The factor of key j of sequence b (k_descale / v_descale: per head, per token, or 1).
  float kv_factor(const Tensor& t, int64_t b, int64_t j, int64_t hk) const;
  // fp8 KV: the e4m3 byte an appended element x must be stored as at key j (the contract:
  // f32_to_e4m3(x / factor), written here without the library's quantize_e4m3).
  uint8_t expected_fp8(float x, int64_t b, int64_t j, int64_t hk, bool value) const;
  double sink(int64_t h) const;
  double scale() const;
  bool visible(int64_t b, int64_t i, int64_t j) const;  // the DESIGN formula, written anew
};

Case make_case(const CaseConfig& cfg, uint64_t seed);

// ---------------------------------------------------------------- oracle + comparison
struct Expected {
  // Indexed by (q token t over all sequences, head, d) in order b, i.
  std::vector<double> out, lse;
  std::vector<int64_t> row_b, row_i;  // per query token
};
Expected naive_attention(const Case& c);

struct Tol {
  double rel_l2, max_abs, cos_min, lse_abs;
  // Row (b, i, h) of the lse may be off by lse_abs + lse_qk * QkNorms(b, i, h); 0: lse_abs alone.
  // kFp8MmaLseQk for e4m3 q / k on fp8 tensor cores (tests/cuda gpu_tol).
  double lse_qk = 0.0;
};
Tol tol_for(DType input_dtype);

// ---- the lse bound of e4m3 inputs on fp8 tensor cores (DESIGN §4's 1e-3 plus this) ----
// Hopper's fp8 wgmma does not accumulate in fp32: its sum keeps 13 fraction bits (e8m13,
// truncated toward zero; DeepSeek-V3's report: "about 14 bits"; FA3 and DeepGEMM promote to
// fp32 every few k-steps for it). A truncation loses < 2^-13 of the partial sum it cuts, and
// every partial sum of q.k_j is at most sum_d |q_d k_jd| <= ||q|| ||k_j|| (Cauchy-Schwarz), so
// after n truncations |error of q.k_j| < n 2^-13 ||q|| ||k_j||. The lse moves by a softmax-
// weighted mean of the score errors (d lse / d s_j = p_j; a softcap's tanh has slope <= 1; a sink
// logit has no error), hence per row (b, i, h), descales folded into q and k (dequantized):
//   |lse error| <= 1e-3 + n 2^-13 scale ||q_i|| max_j ||k_j||.
// n = 8, 2^-10: one truncation per k32 wgmma at D 256, the largest head dim -- strict for that
// model at every D <= 256. Where the hardware truncates inside a k32 step is undocumented; on the
// tests' data (products of random signs) finer models stay inside too. Emulated on the
// Sm90Fp8Prefill / Fp8PrefillAndDecodeShapes shapes (~120 cases, outlier rows included), the
// largest (|error| - 1e-3) / (scale ||q|| max ||k||) was 2^-12.8 truncating every 32 products,
// 2^-11.9 aligning and truncating every 16, 2^-11.1 every 8 (test_fp8_lse_bound.cpp keeps the
// last model as a test). The H100's errors (2026-12-05: D 64 <= 9.5e-3, D 128 <= 1.6e-2, D 256
// <= 4.7e-2, 0.33 on outlier rows whose norm products reach ~10^3) are of the sizes these models
// give; the device suites print the ratio they saw (test_cuda's closing lines): the margin.
// What it still catches: on normal data scale ||q|| max ||k|| is ~10-300 (scores |s| <= ~40),
// a slack of 0.01-0.3, so an lse off by 0.1 fails at every row below ~100 (each case has some);
// a 2^8 P shift left in (8 ln 2), log2 for ln, a dropped or swapped descale (factors 0.5-2: the
// lse moves by ~|1 - f| x the largest score), keys of the wrong kv head fail by far
// (test_fp8_lse_bound.cpp). The price: lse offsets below a row's slack pass (O's checks are
// unchanged).
constexpr double kFp8MmaLseQk = 0x1p-10;
// scale ||q_(b,i,h)|| max_j ||k_(b,j,hk)||: dequantized values (descales, fp8-cache factors
// applied), the max over every key of sequence b's kv head hk (j < lk[b], appended rows
// included), not only those row i sees (a looser bound, O(keys x D) per (b, hk) once). Non-finite
// elements count 0 (a NaN key's rows have a NaN lse, compared as such).
class QkNorms {
 public:
  explicit QkNorms(const Case& c);
  double operator()(int64_t b, int64_t i, int64_t h) const;

 private:
  const Case& c_;
  std::vector<double> kmax_;  // [b * hkv + hk]
};
// The largest (|lse error| - lse_abs) / QkNorms(b, i, h) over the rows compare_runs checked with
// lse_qk > 0 in this process, and how many (the device suites print it: the margin the bound has).
struct LseQkSeen {
  double ratio = 0.0;
  int64_t rows = 0;
};
LseQkSeen& lse_qk_seen();
using fa4::core::ulp_of;  // core/numeric.h

// Compares `test` (a backend's result) against the reference run `ref` of the same case:
// tolerances, empty rows exact (0 / -inf), non-finite patterns equal, every logical output
// element written, no byte outside the logical outputs written, caches equal bytewise.
::testing::AssertionResult compare_runs(const Case& test, const Case& ref, const Tol& tol);
// Compares a run against the fp64 naive oracle (values only).
::testing::AssertionResult compare_expected(const Case& test, const Expected& e, const Tol& tol);
// Outputs (out, lse, k, v) bitwise equal.
::testing::AssertionResult bitwise_equal(const Case& a, const Case& b);

// Random configuration of the whole feature space, small sizes.
CaseConfig random_config(std::mt19937_64& rng);
// Makes c (float16 / bfloat16) an fp8 KV cache case: a random factor mode, sometimes broadcast.
void random_fp8_kv(CaseConfig& c, std::mt19937_64& rng);

}  // namespace fa4test
