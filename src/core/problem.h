// The validated, normalized form of AttentionParams that every backend consumes.
//
// normalize() checks every rule of the contract (DESIGN.md §1) once, before any backend runs,
// and resolves the layout variants (dense / varlen / KV cache / paged, varlen q or not) into
// one addressing scheme: a row of q, k, v or out is found by two indices (a, b) and the
// tensor's strides, so backends never branch on the layout in their inner loops.
//
// The index tensors' contents (cu_seqlens, page tables, ...) are checked when they are host
// memory. Device-resident index tensors (cuda backend) cannot be read without a host
// synchronization; the cuda kernels clamp them instead (see src/cuda).
#pragma once

#include <cstdint>
#include <vector>

#include "core/mask.h"
#include "fa4/fa4.h"

namespace fa4::core {

enum class KvLayout : int { dense = 0, varlen = 1, cache = 2, paged = 3 };
const char* kv_layout_name(KvLayout l);

// Where a row lives: element offset = a * s0 + b * s1 (+ head * sh + d).
struct RowAddr {
  int64_t a, b;
};

// Strides of one 3- or 4-d row-major-ish tensor, normalized to (s0, s1, head, dim).
struct RowStrides {
  int64_t s0 = 0, s1 = 0, head = 0, dim = 0;
};

// Where the fp32 factor of k_descale / v_descale for a key row lives: per (batch, kv head)
// [B, Hkv] (per_token false: element b * s0 + hk * head), or per (token, kv head) with the shape
// of k without its last dim (element a * s0 + b * s1 + hk * head for the row's RowAddr {a, b}).
struct KvScale {
  const float* data = nullptr;  // nullptr: absent (factor 1)
  bool per_token = false;
  int64_t s0 = 0, s1 = 0, head = 0;
};

// Problem::gpu_stage bits
constexpr uint32_t kStageQ = 1, kStageK = 2, kStageV = 4, kStageOut = 8, kStageKNew = 16, kStageVNew = 32;

// Whether a GPU tensor's rows meet the kernels' rules: last dim contiguous, data pointer and
// every other stride a multiple of 16 bytes.
bool gpu_rows_aligned(const TensorView& t, int64_t elem_bytes);

struct Problem {
  const AttentionParams* p = nullptr;
  Backend backend = Backend::cpu;  // resolved (never automatic)

  DType dtype = DType::float32;      // q (and k, v, unless kv_fp8)
  DType kv_dtype = DType::float32;   // k, v (and the cache that k_new / v_new are appended to)
  DType out_dtype = DType::float32;  // out
  // An fp8 KV cache: q float16 / bfloat16, k and v float8_e4m3 (kv_dtype), out in q's dtype.
  // K / V are dequantized row by row (e4m3 x k_scale / v_scale of that row); k_new / v_new (q's
  // dtype) are quantized into the cache (quantize_e4m3, numeric.h).
  bool kv_fp8 = false;
  int64_t batch = 0, hq = 0, hkv = 0, group = 1, dqk = 0, dv = 0;
  float scale = 1.0f, softcap = 0.0f;
  Mask mask;
  bool varlen_q = false, has_lse = false, has_sinks = false, has_descale = false;
  KvLayout kv = KvLayout::dense;
  int64_t sq_dense = 0;     // q's Sq (dense q)
  int64_t kv_slot = 0;      // dense: Sk; cache: Sk_max; paged: max_pages * page_size
  int64_t page_size = 0, max_pages = 0;
  int64_t snew = 0;         // rows appended per sequence (0 = no append)
  bool host_indices = true; // index tensors are host memory (contents validated and readable)
  // GPU tensors whose rows break the kernels' 16-byte rules (odd head dims, packed-qkv slices,
  // a non-unit last stride): the cuda backend runs the problem on aligned copies (bits kStage*;
  // cuda/stage_rows.h). Always 0 off the GPU.
  uint32_t gpu_stage = 0;

  // Per-sequence lengths (after append) and maxima. Filled when host_indices and there is work:
  // query rows (max_sq > 0) or rows to append (appends()). Otherwise normalize() checks the index
  // tensors without keeping lengths (walking B only when an index tensor really has B entries: B
  // may be 2^40 for an empty problem): the vectors are empty, max_sq = max_sk = 0, and no
  // consumer may index them. The host paths test exactly these two conditions.
  std::vector<int64_t> seqlen_q, seqlen_k;
  int64_t max_sq = 0, max_sk = 0;

  // Whether the call writes new rows into the KV cache. The one test that normalize() (which
  // fills seqlen_k for it), append_kv_host and the cuda append launch share: with Snew = 0,
  // Hkv = 0 or B = 0 there is nothing to write, and seqlen_k may be unfilled.
  bool appends() const { return snew > 0 && hkv > 0 && batch > 0; }

  RowStrides qs, ks, vs, os, knew_s, vnew_s;
  int64_t lse_sb = 0, lse_sh = 0, lse_si = 0;  // lse element offset = b*sb + h*sh + i*si (dense)

  // ---- host-side addressing (valid when host_indices) ----
  int64_t q_start(int64_t b) const;  // first token of sequence b in packed q (varlen), else 0
  RowAddr q_row(int64_t b, int64_t i) const {
    return varlen_q ? RowAddr{q_start(b) + i, 0} : RowAddr{b, i};
  }
  RowAddr kv_row(int64_t b, int64_t j) const;  // key position j of sequence b
  int64_t q_offset(int64_t b, int64_t i, int64_t h) const {
    const RowAddr r = q_row(b, i);
    return r.a * qs.s0 + r.b * qs.s1 + h * qs.head;
  }
  int64_t out_offset(int64_t b, int64_t i, int64_t h) const {
    const RowAddr r = q_row(b, i);
    return r.a * os.s0 + r.b * os.s1 + h * os.head;
  }
  int64_t lse_offset(int64_t b, int64_t i, int64_t h) const {
    return varlen_q ? h * lse_sh + (q_start(b) + i) * lse_si : b * lse_sb + h * lse_sh + i * lse_si;
  }
  int64_t k_offset(int64_t b, int64_t j, int64_t hk) const {
    const RowAddr r = kv_row(b, j);
    return r.a * ks.s0 + r.b * ks.s1 + hk * ks.head;
  }
  int64_t v_offset(int64_t b, int64_t j, int64_t hk) const {
    const RowAddr r = kv_row(b, j);
    return r.a * vs.s0 + r.b * vs.s1 + hk * vs.head;
  }
  SeqMask seq_mask(int64_t b) const { return SeqMask{mask, seqlen_q[b], seqlen_k[b]}; }
  float sink(int64_t h) const;                         // fp32 logit of query head h
  // Per-(batch, kv head) factors that the cpu backend folds into its scores / outputs: 1 unless
  // q, k, v are all fp8 with descales. With kv_fp8 the K / V factors are applied when the rows
  // are dequantized instead (k_scale / v_scale), so descale_k / descale_v are 1 then.
  float descale_q(int64_t b, int64_t hk) const;
  float descale_k(int64_t b, int64_t hk) const;
  float descale_v(int64_t b, int64_t hk) const;
  // The factor of key j of sequence b, kv head hk (any mode: 1 when absent; per head; per token).
  KvScale k_sc, v_sc;
  float k_scale(int64_t b, int64_t j, int64_t hk) const { return kv_scale(k_sc, b, j, hk); }
  float v_scale(int64_t b, int64_t j, int64_t hk) const { return kv_scale(v_sc, b, j, hk); }
  float kv_scale(const KvScale& s, int64_t b, int64_t j, int64_t hk) const {
    if (s.data == nullptr) return 1.0f;
    if (!s.per_token) return s.data[b * s.s0 + hk * s.head];
    const RowAddr r = kv_row(b, j);
    return s.data[r.a * s.s0 + r.b * s.s1 + hk * s.head];
  }

  // Reads element i of a 1-d int32 index tensor / (r, c) of the page table.
  static int32_t idx1(const TensorView& t, int64_t i) {
    return static_cast<const int32_t*>(t.data)[i * t.stride[0]];
  }
  int32_t page(int64_t b, int64_t pi) const {
    const TensorView& t = p->page_table;
    return static_cast<const int32_t*>(t.data)[b * t.stride[0] + pi * t.stride[1]];
  }
};

// Validates `params` and fills `*out`. On failure nothing has been written anywhere.
Status normalize(const AttentionParams& params, Problem* out);

// Validates combine_partials arguments (shape rules of fa4.h); *rows = the number of (b, i, h)
// rows there is anything to write for (0: the call has no work).
Status validate_combine(const CombineParams& params, Backend* resolved, int64_t* rows);

}  // namespace fa4::core
