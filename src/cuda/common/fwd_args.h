// The arguments of one forward launch, as plain data shared by the host launcher and the
// kernels. Built from a validated core::Problem by src/cuda/backend.cpp.
//
// Device-resident index tensors (cu_seqlens, cache_seqlens, page_table, ...) are never read on
// the host (that would need a synchronization); the kernels read and clamp them (seq_info.cuh).
#pragma once

#include <cstdint>

#include "core/mask.h"

namespace fa4::cuda {

enum KvMode : int32_t { kKvDense = 0, kKvVarlen = 1, kKvCache = 2, kKvPaged = 3 };

struct FwdArgs {
  // ---- tensors; a row's element offset is a * s0 + b * s1 + head * sh (last dim contiguous) ----
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // optional
  int64_t q_s0 = 0, q_s1 = 0, q_sh = 0;
  int64_t k_s0 = 0, k_s1 = 0, k_sh = 0;
  int64_t v_s0 = 0, v_s1 = 0, v_sh = 0;
  int64_t o_s0 = 0, o_s1 = 0, o_sh = 0;
  int64_t lse_sb = 0, lse_sh = 0, lse_si = 0;

  // ---- sizes ----
  int32_t batch = 0, hq = 0, hkv = 0, group = 1;
  int32_t dqk = 0, dv = 0;     // actual head dims (the kernel's tile dims may be larger)
  int32_t varlen_q = 0;
  int32_t kv_mode = kKvDense;
  int64_t sq_dense = 0;        // q's Sq when not varlen
  int64_t total_q = 0;         // rows of q's first dim when varlen (clamp bound for cu_seqlens_q)
  int64_t kv_slot = 0;         // dense: Sk; cache: Sk_max; paged: max_pages * page_size
  int64_t kv_rows0 = 0;        // k.shape[0]: batch / tokens / cache sequences / pages (clamp bound)
  int64_t page_size = 1;
  int64_t max_pages = 0;
  int32_t snew = 0;            // rows appended per sequence (0 = none)

  // ---- index tensors (int32, device), with their element strides ----
  const int32_t* cu_q = nullptr;
  const int32_t* cu_k = nullptr;
  const int32_t* seqused_k = nullptr;
  const int32_t* cache_seqlens = nullptr;
  const int32_t* cache_batch_idx = nullptr;
  const int32_t* page_table = nullptr;
  int64_t cu_q_st = 1, cu_k_st = 1, seqused_st = 1, cache_seqlens_st = 1, cbi_st = 1;
  int64_t pt_s0 = 0, pt_s1 = 1;

  // ---- scores (log2 domain: the kernels work with x = score * log2(e)) ----
  float scale_log2 = 0.f;       // no softcap: scale * log2(e)
  float softcap_in = 0.f;       // softcap: scale / softcap (argument of tanh)
  float softcap_log2 = 0.f;     // softcap: softcap * log2(e); 0 = off
  core::Mask mask;
  const float* sinks = nullptr;  // [Hq] natural-log logits
  int64_t sinks_st = 1;

  // ---- work decomposition ----
  int32_t pack_gqa = 0;    // tile rows are (query row, head in group) pairs of one kv head
  // Varlen q: blockIdx.x enumerates the query tiles of all sequences back to back (find_varlen_tile)
  // and blockIdx.z is the split alone; otherwise blockIdx.x = tile, blockIdx.z = batch x split.
  int32_t varlen_tiles = 0;
  int32_t num_splits = 1;  // > 1: write fp32 partials, src/cuda/combine merges them
  float* o_part = nullptr; // [splits, rows_total, hq, dv_pad]
  float* lse_part = nullptr;  // [splits, rows_total, hq]
  int64_t rows_total = 0;     // token rows of q: B * Sq (dense) or Tq (varlen)
  int32_t dv_pad = 0;         // the kernel's Dv tile (row stride of o_part)
};

// The sm80 kernel's fp8 instances (sm80/fwd_fp8.cuh) take these: FwdArgs (whose layout, and so
// the other kernels' parameter offsets, stays as it was) plus the e4m3 factors.
//   All-fp8 (q, k, v e4m3): q/k/v_descale, each [B, Hkv] (nullptr = 1).
//   fp8 KV cache (16-bit q, e4m3 k / v): k/v_descale per (batch, kv head) (*_tok = 0: element
//   b * s0 + hk * sh) or per (token, kv head) (*_tok = 1: addressed as k's rows are,
//   a * s0 + b * s1 + hk * sh: seq_info.cuh KvAddr with these strides); any strides, 0 broadcasts.
struct FwdArgsFp8 : FwdArgs {
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int64_t qd_s0 = 0, qd_sh = 0;
  int64_t kd_s0 = 0, kd_s1 = 0, kd_sh = 0;
  int64_t vd_s0 = 0, vd_s1 = 0, vd_sh = 0;
  int32_t k_tok = 0, v_tok = 0;
};

// Arguments of the combine kernel; generic strides so the same kernel serves the internal
// split-KV merge and the public combine_partials. A "row" r in [0, rows) is split into
// (b, i) = (r / rows_per_b, r % rows_per_b).
struct CombineArgs {
  const float* o_part = nullptr;
  const float* lse_part = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  int32_t out_dtype = 0;  // fa4::DType
  int32_t splits = 0, heads = 0, dv = 0;
  int64_t rows = 0, rows_per_b = 1;
  int64_t op_s = 0, op_b = 0, op_i = 0, op_h = 0;  // o_part offsets (dim stride 1)
  int64_t lp_s = 0, lp_b = 0, lp_i = 0, lp_h = 0;  // lse_part offsets
  int64_t o_b = 0, o_i = 0, o_h = 0;               // out offsets (dim stride 1)
  int64_t l_b = 0, l_i = 0, l_h = 0;               // lse offsets
  // Varlen q: rows >= cu_seqlens_q[B] belong to no sequence and are not written.
  const int32_t* row_limit = nullptr;
};

}  // namespace fa4::cuda
