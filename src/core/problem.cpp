// Host-side addressing of a normalized Problem and the split-KV heuristic.
#include "core/problem.h"

#include <algorithm>

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
float Problem::descale_k(int64_t b, int64_t hk) const { return descale(p->k_descale, b, hk); }
float Problem::descale_v(int64_t b, int64_t hk) const { return descale(p->v_descale, b, hk); }

int choose_num_splits(const Problem& pb, int64_t workers, int64_t q_tile_rows, int64_t k_tile) {
  if (pb.p->num_splits > 0) return pb.p->num_splits;
  if (pb.max_sk <= 0 || workers <= 1) return 1;
  const int64_t q_tiles = (pb.max_sq + q_tile_rows - 1) / q_tile_rows;
  const int64_t units = std::max<int64_t>(1, pb.batch * pb.hq * q_tiles);
  if (units >= workers) return 1;
  // Enough splits to give every worker a unit, but keep >= 4 key tiles per split so the
  // per-split overhead (partials + combine) stays small.
  const int64_t want = (workers + units - 1) / units;
  const int64_t max_by_len = std::max<int64_t>(1, pb.max_sk / (4 * k_tile));
  return static_cast<int>(std::clamp<int64_t>(std::min(want, max_by_len), 1, 128));
}

}  // namespace fa4::core
