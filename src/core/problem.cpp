// Host-side addressing of a normalized Problem.
#include "core/problem.h"

namespace fa4::core {

const char* kv_layout_name(KvLayout l) {
  switch (l) {
    case KvLayout::dense: return "dense";
    case KvLayout::varlen: return "varlen";
    case KvLayout::cache: return "cache";
    case KvLayout::paged: return "paged";
  }
  return "?";
}

int64_t Problem::q_start(int64_t b) const { return varlen_q ? idx1(p->cu_seqlens_q, b) : 0; }

RowAddr Problem::kv_row(int64_t b, int64_t j) const {
  switch (kv) {
    case KvLayout::dense: return {b, j};
    case KvLayout::varlen: return {idx1(p->cu_seqlens_k, b) + j, 0};
    case KvLayout::cache: return {p->cache_batch_idx.present() ? idx1(p->cache_batch_idx, b) : b, j};
    case KvLayout::paged: return {page(b, j / page_size), j % page_size};
  }
  return {0, 0};
}

float Problem::sink(int64_t h) const {
  return static_cast<const float*>(p->sinks.data)[h * p->sinks.stride[0]];
}

namespace {
float descale(const TensorView& t, int64_t b, int64_t hk) {
  if (!t.present()) return 1.0f;
  return static_cast<const float*>(t.data)[b * t.stride[0] + hk * t.stride[1]];
}
}  // namespace

float Problem::descale_q(int64_t b, int64_t hk) const { return descale(p->q_descale, b, hk); }
float Problem::descale_k(int64_t b, int64_t hk) const { return kv_fp8 ? 1.0f : descale(p->k_descale, b, hk); }
float Problem::descale_v(int64_t b, int64_t hk) const { return kv_fp8 ? 1.0f : descale(p->v_descale, b, hk); }

}  // namespace fa4::core
