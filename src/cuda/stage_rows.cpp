#include "cuda/stage_rows.h"

#include <string>

#include "core/checked.h"

namespace fa4::cuda {
namespace {

constexpr size_t kAlign = 256;
// Largest copy staged for one tensor (256 TiB, beyond any GPU's memory). Broadcast views (stride
// 0) may claim shapes whose copies no memory holds, or whose byte counts overflow int64; such a
// call is refused before any size is formed.
constexpr int64_t kMaxStagedBytes = int64_t{1} << 48;
size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Elements of one row of `t`'s packed copy: its last dim padded to 16 bytes.
int64_t packed_pitch(const TensorView& t, int64_t elem) {
  return static_cast<int64_t>(round_up(static_cast<size_t>(t.shape[t.ndim - 1]), static_cast<size_t>(16 / elem)));
}

// The packed copy of `t` at `dst`: same shape, rows of `pitch` elements.
TensorView packed_view(const TensorView& t, uint8_t* dst, int64_t pitch) {
  TensorView v = t;
  v.data = dst;
  const int last = t.ndim - 1;
  v.stride[last] = 1;
  int64_t s = pitch;
  for (int i = last - 1; i >= 0; --i) {
    v.stride[i] = s;
    s *= t.shape[i];
  }
  return v;
}

RowCopy row_copy(const TensorView& strided, const TensorView& packed, int64_t elem, int64_t pitch, bool gather) {
  RowCopy c;
  c.src = gather ? strided.data : packed.data;
  c.dst = gather ? packed.data : strided.data;
  c.lead = strided.ndim - 1;
  c.rows = 1;
  for (int i = 0; i < c.lead; ++i) {
    c.shape[i] = strided.shape[i];
    c.stride[i] = strided.stride[i];
    c.rows *= strided.shape[i];
  }
  c.last_stride = strided.stride[strided.ndim - 1];
  c.d = strided.shape[strided.ndim - 1];
  c.pitch = pitch;
  c.elem = static_cast<int32_t>(elem);
  c.gather = gather;
  return c;
}

}  // namespace

Status StagedCall::build(const core::Problem& pb, uint8_t* base) {
  params_ = *pb.p;
  params_.workspace = nullptr, params_.workspace_bytes = 0;
  params_.workspace_alloc = nullptr, params_.workspace_free = nullptr;
  gathers_.clear(), scatters_.clear();
  // A stand-in for sizing: aligned, never dereferenced (no copy is launched from it).
  uint8_t* at = base != nullptr ? base : reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
  size_t off = 0;
  struct Item {
    uint32_t bit;
    const char* name;
    TensorView* view;
    bool output;
  };
  const Item items[] = {{core::kStageQ, "q", &params_.q, false},
                        {core::kStageK, "k", &params_.k, false},
                        {core::kStageV, "v", &params_.v, false},
                        {core::kStageKNew, "k_new", &params_.k_new, false},
                        {core::kStageVNew, "v_new", &params_.v_new, false},
                        {core::kStageOut, "out", &params_.out, true}};
  // out is gathered too, not only scattered back: the copy-back writes every row of the copy, and
  // rows the kernels leave alone (varlen_q tokens past cu_seqlens_q[batch]: the caller's bytes
  // must survive) must then carry the caller's own values (the device tests' unwritten-bytes
  // check caught the scatter of an unwritten copy). One extra read and write of out.
  for (const Item& it : items) {
    if ((pb.gpu_stage & it.bit) == 0) continue;
    const TensorView orig = *it.view;
    const int64_t elem = static_cast<int64_t>(dtype_size(orig.dtype));
    // The copy's bytes, rows x padded row (a row is <= 256 elements: the head dim bound):
    // normalize() bounded the strided extent, not this (a stride-0 view has no extent). Staged
    // tensors are never empty (validation stages only tensors with elements), so once the whole
    // fits, so do the partial products packed_view and row_copy form.
    const int64_t pitch = packed_pitch(orig, elem);
    int64_t bytes = pitch * elem;
    bool fits = true;
    for (int i = 0; i + 1 < orig.ndim && fits; ++i) fits = core::checked_mul(bytes, orig.shape[i], &bytes);
    if (!fits || bytes > kMaxStagedBytes)
      return Status::Unsupported(it.name, std::string(it.name) +
                                              ": its rows break the 16-byte rules and their aligned copy would take "
                                              "more than 2^48 bytes (a broadcast view of that shape?)");
    const TensorView packed = packed_view(orig, at + off, pitch);
    off += round_up(static_cast<size_t>(bytes), kAlign);
    *it.view = packed;
    gathers_.push_back(row_copy(orig, packed, elem, pitch, /*gather=*/true));
    if (it.output) scatters_.push_back(row_copy(orig, packed, elem, pitch, /*gather=*/false));
  }
  copy_bytes_ = off;
  if (Status st = core::normalize(params_, &problem_); !st) return st;
  if (problem_.gpu_stage != 0)  // every row rule holds on the copies by construction
    return Status::Error(StatusCode::internal, "cuda: a staged tensor is still unaligned");
  return Status::Ok();
}

}  // namespace fa4::cuda
