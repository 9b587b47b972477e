// fa4 public API: one parameter struct that expresses every feature of the forward pass.
//
// Shapes (BSHD; any strides unless a GPU path says otherwise):
//   dense      q[B, Sq, Hq, Dqk]  k[B, Sk, Hkv, Dqk]  v[B, Sk, Hkv, Dv]  out[B, Sq, Hq, Dv]
//              lse[B, Hq, Sq] (fp32, optional)
//   varlen q   q[Tq, Hq, Dqk] out[Tq, Hq, Dv] lse[Hq, Tq] with cu_seqlens_q[B+1]
//   varlen k   k[Tk, Hkv, Dqk] v[Tk, Hkv, Dv] with cu_seqlens_k[B+1], optional seqused_k[B]
//   KV cache   k[Bc, Sk_max, Hkv, Dqk] v[Bc, Sk_max, Hkv, Dv] with cache_seqlens[B] (optional:
//              default Sk_max) and optional cache_batch_idx[B] (default b -> b, Bc >= B)
//   paged KV   k[num_pages, page_size, Hkv, Dqk] v[num_pages, page_size, Hkv, Dv] with
//              page_table[B, max_pages]; capacity = max_pages * page_size; cache_seqlens[B]
//              optional (default: capacity)
//   append     k_new[B, Snew, Hkv, Dqk] v_new[B, Snew, Hkv, Dv] (k's dtype; q's for an fp8 KV
//              cache, quantized into it): rows written into the cache at
//              positions cache_seqlens[b] .. cache_seqlens[b] + Snew - 1 before attention, which
//              then sees cache_seqlens[b] + Snew keys. Needs a (contiguous or paged) cache and
//              cache_seqlens; not combined with varlen q.
// Varlen q combines with varlen k, with a KV cache or with paged KV (serving with ragged
// prefill chunks); B is then len(cu_seqlens_q) - 1.
// Counts are int32-indexed: B, Hq, every sequence length and the token counts Tq / Tk are below
// 2^31 (a larger one is refused naming its tensor, even where a broadcast view costs no memory).
//
// Dtypes: q, k, v all float32, float16 or bfloat16 (out: q's dtype); all float8_e4m3 (out
// bfloat16; q/k/v_descale [B, Hkv]); or an fp8 KV cache: q float16 / bfloat16 with k and v both
// float8_e4m3, in any KV layout above (every backend; cuda: its sm80 kernel). Then
// out and lse are as for 16-bit q (out in q's dtype), q_descale must be absent, and K / V
// are dequantized as e4m3 value x factor, the factors from k_descale / v_descale (fp32, each
// optional = 1, any strides, 0 broadcasts) given either
//   per (batch, kv head)   [B, Hkv]  (FlashAttention-3's convention), or
//   per (token, kv head)   k's shape without its last dim: dense [B, Sk, Hkv], varlen
//                          [Tk, Hkv], cache [Bc, Sk_max, Hkv], paged [num_pages, page_size, Hkv].
// (Varlen k with B == Tk: both are [B, Hkv]-shaped, and such a call is refused unless
// cu_seqlens_k = 0, 1, ..., B, where both readings agree.) Appends into an fp8 cache: k_new /
// v_new in q's dtype, each element stored as e4m3(x / factor of its row) (fp32 quotient,
// saturating to +-448, NaN kept); per-token factors are read at the new rows' slots, which the
// caller fills before the call. The attention then reads the quantized rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fa4/tensor.h"

namespace fa4 {

enum class Backend : int32_t { automatic = 0, reference = 1, cpu = 2, cuda = 3 };

const char* backend_name(Backend b);

struct AttentionParams {
  // ---- tensors (q, k, v, out required) ----
  TensorView q, k, v;
  TensorView out;  // dtype: q's dtype for fp32/fp16/bf16 q (fp8 KV caches too), bf16 for fp8 q
  TensorView lse;  // optional fp32 output, natural log units, includes the sink

  // ---- scores ----
  float scale = 0.0f;    // 0 = default 1/sqrt(Dqk); must be finite
  float softcap = 0.0f;  // s <- softcap * tanh(s / softcap) before masking; 0 = off

  // ---- mask (bottom-right aligned: off = Sk - Sq per sequence) ----
  // Key j is visible to query i iff
  //   (window_left  < 0 or j >= i + off - window_left) and
  //   (window_right < 0 or j <= i + off + window_right) and
  //   (chunk_size  == 0 or floor(j / C) == floor((i + off) / C)).
  // causal = true is window_right = 0 (window_right must then be -1 or 0).
  // chunk_size > 0 is chunked causal attention (Llama 4): it implies causal.
  bool causal = false;
  int64_t window_left = -1;
  int64_t window_right = -1;
  int64_t chunk_size = 0;

  // ---- attention sinks: fp32 [Hq], one logit per query head, denominator only ----
  TensorView sinks;

  // ---- fp8 e4m3 inputs: fp32 dequantization factors (optional, default 1) ----
  // All-fp8 q/k/v: each [B, Hkv]. fp8 KV cache (16-bit q): k_descale / v_descale only, each
  // [B, Hkv] or per token (see the top of this file).
  TensorView q_descale, k_descale, v_descale;

  // ---- variable length (int32) ----
  TensorView cu_seqlens_q;  // [B+1]
  TensorView cu_seqlens_k;  // [B+1]
  TensorView seqused_k;     // [B]
  int64_t max_seqlen_q = 0;  // hints only (0 = unknown); never needed for correctness
  int64_t max_seqlen_k = 0;

  // ---- KV cache (int32) ----
  TensorView cache_seqlens;    // [B]
  TensorView cache_batch_idx;  // [B]
  TensorView page_table;       // [B, max_pages]
  TensorView k_new, v_new;     // [B, Snew, Hkv, D]: append before attention

  // ---- execution ----
  int32_t num_splits = 0;  // split-KV: 0 = heuristic, 1 = off, n = force n splits
  Backend backend = Backend::automatic;
  int32_t num_threads = 0;  // cpu backend: 0 = all cores
  void* stream = nullptr;   // cuda backend: the caller's cudaStream_t (nullptr = default)
  // cuda backend scratch (split-KV fp32 partials; aligned copies of unaligned rows; the V^T of
  // all-fp8 calls on the sm90 kernel, ~the bytes of v). nullptr =
  // fa4 allocates it and caches it, one buffer per (device, stream) (at most 16 streams' per
  // device, least recently used reused; inside a stream capture a graph-owned
  // cudaMallocAsync / cudaFreeAsync pair); see attention_workspace_size().
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // cuda backend: an allocator hook for that scratch when `workspace` is null (e.g. a framework's
  // caching allocator, so no cudaMalloc happens inside fa4). fa4 calls
  // workspace_alloc(bytes, stream, ctx) before it enqueues anything (the result must be
  // 16-byte aligned; nullptr = out of memory, nothing is written) and
  // workspace_free(ptr, bytes, stream, ctx) once the kernels using it are enqueued on `stream`,
  // so the allocator must be stream-ordered (cudaMallocAsync / cudaFreeAsync, PyTorch's caching
  // allocator). Called only when the launch splits the keys. Set both or neither.
  void* (*workspace_alloc)(size_t bytes, void* stream, void* ctx) = nullptr;
  void (*workspace_free)(void* ptr, size_t bytes, void* stream, void* ctx) = nullptr;
  void* workspace_ctx = nullptr;
};

}  // namespace fa4
