// Random attention problems for the fa4 tool: one ProblemSpec (shape, dtype, mask, layout and
// features, as the command line says) becomes host buffers filled from a seed plus the
// fa4::AttentionParams that describe them, for every layout of params.h: dense, varlen,
// KV cache (optionally with cache_batch_idx), paged, and append (k_new/v_new).
//
// The buffers always live in host memory. A backend that needs device memory gets its copies
// through a Device (device.h); the reference check always reads the host buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fa4/fa4.h"

namespace fa4cli {

enum class Dist { normal, uniform, outliers };
const char* dist_name(Dist d);

struct ProblemSpec {
  int64_t batch = 2;
  int64_t seqlen_q = 128, seqlen_k = 128;  // varlen: maxima; cache/paged: seqlen_k = capacity
  int64_t heads = 4, kv_heads = 4;
  int64_t head_dim = 64, head_dim_v = 64;
  fa4::DType dtype = fa4::DType::bfloat16;
  // An fp8 KV cache (--kv-dtype e4m3 with f16 / bf16 q): k / v (and the cache appended to) in
  // float8_e4m3 with fp32 k / v factors per (batch, kv head) or, kv_scale_per_token, per token;
  // k_new / v_new stay in dtype.
  bool kv_fp8 = false;
  bool kv_scale_per_token = false;

  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  int64_t chunk = 0;
  float softcap = 0.0f;
  float scale = 0.0f;  // 0 = 1/sqrt(Dqk)
  bool sinks = false;

  int64_t page_size = 0;         // > 0: paged KV with a random page permutation
  bool kv_cache = false;         // contiguous cache with random cache_seqlens
  bool cache_batch_idx = false;  // with kv_cache: a random cache_batch_idx (cache has extra rows)
  int64_t append = 0;            // rows of k_new/v_new appended per sequence
  bool varlen = false;           // ragged q (and ragged k when the KV is not a cache)

  int32_t splits = 0;
  bool lse = false;
  fa4::Backend backend = fa4::Backend::automatic;
  int32_t threads = 0;
  uint64_t seed = 0;
  Dist dist = Dist::normal;
};

// Checks combinations the library would reject or that the tool cannot build, naming the flag
// (throws UsageError). Value ranges were already checked by the parser.
void check_spec(const ProblemSpec& s);

// "dense", "varlen", "kv-cache", "paged(16)", plus "+append(N)", ...
std::string layout_name(const ProblemSpec& s);
// "none", "causal", "window(L,R)", "chunk(C)", ...
std::string mask_name(const ProblemSpec& s);
const char* dtype_short(fa4::DType t);  // f32 f16 bf16 e4m3
// dtype_short of q, plus "/kv-e4m3" for an fp8 KV cache ("bf16/kv-e4m3").
std::string dtype_label(const ProblemSpec& s);
// k / v storage dtype: e4m3 for an fp8 KV cache, else dtype.
fa4::DType kv_dtype(const ProblemSpec& s);

// A host allocation (64-byte aligned) with a view over it.
struct HostTensor {
  std::shared_ptr<unsigned char> mem;
  size_t bytes = 0;
  fa4::TensorView view;
  bool present() const { return view.present(); }
};

struct HostProblem {
  ProblemSpec spec;
  HostTensor q, k, v, out, lse, sinks, q_descale, k_descale, v_descale;
  HostTensor cu_seqlens_q, cu_seqlens_k, cache_seqlens, cache_batch_idx, page_table, k_new, v_new;
  std::vector<int64_t> seqlen_q, seqlen_k;  // per sequence; seqlen_k counts appended rows
  fa4::AttentionParams params;               // views of the host buffers, backend etc. from spec

  // Snapshots of k and v taken at build time (only with append): restore_cache() puts them
  // back so that a second backend sees the cache as it was before the first one appended.
  std::vector<unsigned char> k_orig, v_orig;
  void restore_cache();

  // Fills out (and lse) with NaN so that unwritten elements are visible.
  void poison_outputs();

  // Exact number of visible (query, key) score elements, summed over sequences and q heads.
  double visible_scores() const;
  // FLOPs = 2 * (Dqk + Dv) * visible_scores()  (QK^T and PV, a multiply-add = 2 FLOPs).
  double flops() const;
  // Bytes of K and V a kernel must read once: sum over sequences of seqlen_k * Hkv * (Dqk + Dv)
  // * element size (the decode bandwidth measure of DESIGN.md section 5).
  double kv_bytes() const;
};

// Builds the problem (throws UsageError if it cannot, e.g. too large for this machine).
std::unique_ptr<HostProblem> build_problem(const ProblemSpec& spec);

}  // namespace fa4cli
