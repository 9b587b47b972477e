// GPU tensors with unaligned rows (odd head dims, packed-qkv slices, a non-unit last stride):
// normalize() marks them for staging instead of refusing them, and cuda::StagedCall lays out the
// aligned copies the cuda backend runs on. Host code only (fake device pointers, nothing is
// dereferenced); the device run of the same path is CudaBackend.UnalignedRowsStaged.
#include "cuda/stage_rows.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "core/problem.h"

namespace {

using fa4::AttentionParams;
using fa4::DType;
using fa4::TensorView;
namespace core = fa4::core;

uint8_t* fake(uintptr_t at) { return reinterpret_cast<uint8_t*>(at); }  // 256-aligned stand-ins

TensorView dev4(uintptr_t at, int64_t b, int64_t s, int64_t h, int64_t d, DType t = DType::bfloat16) {
  return TensorView::contiguous(fake(at), t, {b, s, h, d}, fa4::DeviceType::cuda, 0);
}

AttentionParams params(int64_t d, int64_t dv) {
  AttentionParams p;
  p.backend = fa4::Backend::cuda;
  p.q = dev4(1 << 20, 2, 5, 3, d);
  p.k = dev4(2 << 20, 2, 7, 3, d);
  p.v = dev4(3 << 20, 2, 7, 3, dv);
  p.out = dev4(4 << 20, 2, 5, 3, dv);
  return p;
}

TEST(StageRows, AlignedRowsAreNotStaged) {
  const AttentionParams p = params(64, 64);
  core::Problem pb;
  ASSERT_TRUE(core::normalize(p, &pb));
  EXPECT_EQ(pb.gpu_stage, 0u);
}

TEST(StageRows, OddHeadDimStagesEveryTensorWithItsRows) {
  const AttentionParams p = params(59, 111);
  core::Problem pb;
  ASSERT_TRUE(core::normalize(p, &pb));
  EXPECT_EQ(pb.gpu_stage, core::kStageQ | core::kStageK | core::kStageV | core::kStageOut);
  EXPECT_EQ(pb.dqk, 59);

  fa4::cuda::StagedCall sc;
  ASSERT_TRUE(sc.build(pb, fake(8 << 20)));
  const core::Problem& in = sc.problem();
  EXPECT_EQ(in.gpu_stage, 0u);
  EXPECT_EQ(in.dqk, 59);  // the head dim (and so the default scale) stays the caller's
  EXPECT_EQ(in.dv, 111);
  // q copy: rows of 59 bf16 padded to 64 (128 bytes), packed [2, 5, 3, 64]
  const TensorView& q = in.p->q;
  EXPECT_EQ(q.data, fake(8 << 20));
  EXPECT_EQ(q.stride[3], 1);
  EXPECT_EQ(q.stride[2], 64);
  EXPECT_EQ(q.stride[1], 3 * 64);
  EXPECT_EQ(q.stride[0], 5 * 3 * 64);
  // copies 256-byte aligned one after the other: q 30 rows x 128 B = 3840; k 42 x 128 = 5376;
  // v 42 rows of 111 -> 112 elements (224 B) = 9408 -> 9472; out 30 x 224 = 6720 -> 6912
  EXPECT_EQ(in.p->k.data, fake((8 << 20) + 3840));
  EXPECT_EQ(in.p->v.data, fake((8 << 20) + 3840 + 5376));
  EXPECT_EQ(in.p->out.data, fake((8 << 20) + 3840 + 5376 + 9472));
  EXPECT_EQ(sc.copy_bytes(), size_t{3840 + 5376 + 9472 + 6912});
  // out is gathered as well as scattered back: rows no kernel writes (varlen_q tokens past
  // cu_seqlens_q[batch]) must come back as the caller's bytes
  ASSERT_EQ(sc.gathers().size(), 4u);
  ASSERT_EQ(sc.scatters().size(), 1u);
  const fa4::cuda::RowCopy& og = sc.gathers()[3];
  EXPECT_TRUE(og.gather);
  EXPECT_EQ(og.src, p.out.data);
  EXPECT_EQ(og.dst, in.p->out.data);
  const fa4::cuda::RowCopy& g = sc.gathers()[0];  // q
  EXPECT_TRUE(g.gather);
  EXPECT_EQ(g.src, p.q.data);
  EXPECT_EQ(g.dst, q.data);
  EXPECT_EQ(g.lead, 3);
  EXPECT_EQ(g.rows, 30);
  EXPECT_EQ(g.d, 59);
  EXPECT_EQ(g.pitch, 64);
  EXPECT_EQ(g.elem, 2);
  EXPECT_EQ(g.stride[0], 5 * 3 * 59);
  EXPECT_EQ(g.stride[2], 59);
  const fa4::cuda::RowCopy& o = sc.scatters()[0];  // out back to the caller's rows
  EXPECT_FALSE(o.gather);
  EXPECT_EQ(o.src, in.p->out.data);
  EXPECT_EQ(o.dst, p.out.data);
  EXPECT_EQ(o.pitch, 112);
  EXPECT_EQ(o.d, 111);
}

// e4m3 tensors are staged by their own 1-byte rows: 16-byte rows are 16 elements, so an fp8 KV
// cache with 59-element rows is copied to 64-byte rows next to bf16 q's 128-byte ones; 64-element
// e4m3 rows are aligned as they are. All-fp8: q too, out stays bf16.
TEST(StageRows, Fp8RowsAreStagedByTheirOwnBytes) {
  AttentionParams p = params(59, 111);
  p.k.dtype = p.v.dtype = DType::float8_e4m3;  // an fp8 KV cache under bf16 q
  core::Problem pb;
  ASSERT_TRUE(core::normalize(p, &pb));
  EXPECT_TRUE(pb.kv_fp8);
  EXPECT_EQ(pb.gpu_stage, core::kStageQ | core::kStageK | core::kStageV | core::kStageOut);
  fa4::cuda::StagedCall sc;
  ASSERT_TRUE(sc.build(pb, fake(8 << 20)));
  const core::Problem& in = sc.problem();
  EXPECT_TRUE(in.kv_fp8);
  EXPECT_EQ(in.gpu_stage, 0u);
  // q: 30 rows x 128 B = 3840; k: 42 rows of 59 -> 64 B = 2688 -> 2816; v: 42 x 112 B = 4704 ->
  // 4864; out: 30 x 224 B = 6720 -> 6912
  EXPECT_EQ(in.p->k.dtype, DType::float8_e4m3);
  EXPECT_EQ(in.p->k.stride[2], 64);
  EXPECT_EQ(in.p->k.stride[1], 3 * 64);
  EXPECT_EQ(in.p->v.stride[2], 112);
  EXPECT_EQ(in.p->k.data, fake((8 << 20) + 3840));
  EXPECT_EQ(in.p->v.data, fake((8 << 20) + 3840 + 2816));
  EXPECT_EQ(in.p->out.data, fake((8 << 20) + 3840 + 2816 + 4864));
  EXPECT_EQ(sc.copy_bytes(), size_t{3840 + 2816 + 4864 + 6912});
  ASSERT_EQ(sc.gathers().size(), 4u);
  EXPECT_EQ(sc.gathers()[1].elem, 1);
  EXPECT_EQ(sc.gathers()[1].pitch, 64);
  EXPECT_EQ(sc.gathers()[2].pitch, 112);
  EXPECT_EQ(sc.gathers()[0].elem, 2);

  // 64-element e4m3 rows: aligned, q (bf16, 128 B) too.
  AttentionParams a = params(64, 64);
  a.k.dtype = a.v.dtype = DType::float8_e4m3;
  ASSERT_TRUE(core::normalize(a, &pb));
  EXPECT_EQ(pb.gpu_stage, 0u);
  // 40-element e4m3 rows (40 B): k and v staged; bf16 q / out (80 B rows) are not.
  AttentionParams b = params(40, 40);
  b.k.dtype = b.v.dtype = DType::float8_e4m3;
  ASSERT_TRUE(core::normalize(b, &pb));
  EXPECT_EQ(pb.gpu_stage, core::kStageK | core::kStageV);

  // All-fp8, 59-element rows: q, k, v 64-byte copies; out bf16 (128-byte copy).
  AttentionParams f = params(59, 59);
  f.q.dtype = f.k.dtype = f.v.dtype = DType::float8_e4m3;
  ASSERT_TRUE(core::normalize(f, &pb));
  ASSERT_TRUE(sc.build(pb, fake(8 << 20)));
  EXPECT_EQ(sc.problem().p->q.stride[2], 64);
  EXPECT_EQ(sc.problem().p->out.stride[2], 64);
  EXPECT_EQ(sc.problem().p->k.data, fake((8 << 20) + 2048));  // q: 30 x 64 B = 1920 -> 2048
}

TEST(StageRows, PackedQkvSlicesAndStridedRows) {
  // q, k, v as slices of one [B, S, 3, H, D] tensor with D = 64: strides are 16-byte multiples
  // and the k / v pointers 3 * 64 * 2 bytes in: aligned, nothing staged.
  AttentionParams p = params(64, 64);
  const int64_t H = 3, D = 64, S = 5;
  for (TensorView* t : {&p.q, &p.k, &p.v}) {
    t->shape[1] = S;
    t->stride[3] = 1, t->stride[2] = D, t->stride[1] = 3 * H * D, t->stride[0] = S * 3 * H * D;
  }
  p.q.data = fake(1 << 20), p.k.data = fake((1 << 20) + H * D * 2), p.v.data = fake((1 << 20) + 2 * H * D * 2);
  core::Problem pb;
  ASSERT_TRUE(core::normalize(p, &pb));
  EXPECT_EQ(pb.gpu_stage, 0u);
  // D = 60 in the same layout: 120-byte rows, k 360 bytes in: k and v staged, q too (its row
  // strides 3 * 3 * 60 * 2 = 1080 bytes are not 16-byte multiples), and the contiguous out.
  AttentionParams p2 = params(60, 60);
  for (TensorView* t : {&p2.q, &p2.k, &p2.v}) {
    t->stride[2] = 60, t->stride[1] = 3 * H * 60;
    t->stride[0] = t->shape[1] * 3 * H * 60;
  }
  p2.k.data = fake((1 << 20) + H * 60 * 2);
  ASSERT_TRUE(core::normalize(p2, &pb));
  EXPECT_EQ(pb.gpu_stage, core::kStageQ | core::kStageK | core::kStageV | core::kStageOut);
  // a non-unit last stride alone
  AttentionParams p3 = params(64, 64);
  p3.q.stride[3] = 2, p3.q.stride[2] = 128, p3.q.stride[1] = 3 * 128, p3.q.stride[0] = 5 * 3 * 128;
  ASSERT_TRUE(core::normalize(p3, &pb));
  EXPECT_EQ(pb.gpu_stage, core::kStageQ);
  fa4::cuda::StagedCall sc;
  ASSERT_TRUE(sc.build(pb, nullptr));
  EXPECT_EQ(sc.gathers()[0].last_stride, 2);
  EXPECT_EQ(sc.problem().p->q.stride[3], 1);
}

TEST(StageRows, AnAppendedCacheMustBeAlignedItself) {
  // The append writes into the cache in place: its rows cannot be staged (a clear error naming
  // k); unaligned k_new / v_new are staged.
  AttentionParams p = params(59, 59);
  // device index tensors: normalize() checks their shape, not their contents
  p.cache_seqlens = TensorView::contiguous(fake(7 << 20), DType::int32, {2}, fa4::DeviceType::cuda, 0);
  p.q = dev4(1 << 20, 2, 1, 3, 59);
  p.out = dev4(4 << 20, 2, 1, 3, 59);
  p.k_new = dev4(5 << 20, 2, 1, 3, 59);
  p.v_new = dev4(6 << 20, 2, 1, 3, 59);
  core::Problem pb;
  fa4::Status st = core::normalize(p, &pb);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message.find("k: stride of dim"), std::string::npos) << st.message;
  // an aligned cache (rows padded to 64), unaligned new rows
  for (TensorView* t : {&p.k, &p.v}) {
    t->stride[2] = 64, t->stride[1] = 3 * 64, t->stride[0] = 7 * 3 * 64;
  }
  st = core::normalize(p, &pb);
  ASSERT_TRUE(st) << st.message;
  EXPECT_EQ(pb.gpu_stage, core::kStageQ | core::kStageOut | core::kStageKNew | core::kStageVNew);
}

// Broadcast views (stride 0: no memory behind them) may claim any shape whose strided extent fits,
// and a misaligned pointer stages them: the aligned copy of q [2^20, 2^20, 2^20, 59] would take
// 2^67 bytes. The copy sizes are overflow-checked (rows x pitch x bytes was formed unchecked, a
// signed overflow) and beyond kMaxStagedBytes the call is refused, naming the tensor.
TEST(StageRows, CopiesBeyondAnyMemoryAreRefusedWithoutOverflow) {
  constexpr int64_t kBig = int64_t{1} << 20;
  AttentionParams p = params(59, 1);
  for (TensorView* t : {&p.q, &p.k, &p.v}) {
    t->shape[0] = t->shape[1] = t->shape[2] = kBig;
    t->stride[0] = t->stride[1] = t->stride[2] = 0;
  }
  p.q.data = fake((1 << 20) + 2);  // bf16-aligned, not 16-byte aligned: staged
  // out [2^20, 2^20, 2^20, 1] bf16, contiguous: 2^61 bytes, an extent that fits int64
  p.out = dev4(4 << 20, kBig, kBig, kBig, 1);
  core::Problem pb;
  ASSERT_TRUE(core::normalize(p, &pb));
  ASSERT_NE(pb.gpu_stage & core::kStageQ, 0u);
  fa4::cuda::StagedCall sc;
  const fa4::Status st = sc.build(pb, nullptr);
  EXPECT_EQ(st.code, fa4::StatusCode::unsupported) << st.message;
  EXPECT_EQ(st.argument, "q") << st.message;
  // q aligned: out's copy (2^60 rows of 1 element, padded to 8: 2^64 bytes) is the one refused.
  p.q.data = fake(1 << 20);
  ASSERT_TRUE(core::normalize(p, &pb));
  ASSERT_EQ(pb.gpu_stage & core::kStageQ, 0u);
  const fa4::Status so = sc.build(pb, nullptr);
  EXPECT_EQ(so.code, fa4::StatusCode::unsupported) << so.message;
  EXPECT_EQ(so.argument, "out") << so.message;
}

}  // namespace

TEST(StageRows, RowWalkMatchesTheDivisions) {
  // The device copy's row offsets (RowWalk: digits by division once, then carried) against the
  // offset of every row computed by division, for ranks 1-4, extents of 1 (wraps every row),
  // negative-free odd strides, and walks that start mid-shape (a run's first row).
  const int64_t shapes[][4] = {{7, 1, 1, 1}, {3, 5, 1, 1}, {2, 1, 4, 3}, {1, 1, 1, 1}, {4, 3, 2, 5}};
  const int32_t leads[] = {1, 2, 4, 3, 4};
  for (int t = 0; t < 5; ++t) {
    fa4::cuda::RowCopy c;
    c.lead = leads[t];
    c.rows = 1;
    for (int i = 0; i < c.lead; ++i) {
      c.shape[i] = shapes[t][i];
      c.rows *= c.shape[i];
    }
    int64_t s = 59;
    for (int i = c.lead - 1; i >= 0; --i) c.stride[i] = s, s = s * c.shape[i] + 3 * (i + 1);  // padded, odd
    auto by_division = [&](int64_t r) {
      int64_t off = 0;
      for (int i = c.lead - 1; i >= 0; --i) off += (r % c.shape[i]) * c.stride[i], r /= c.shape[i];
      return off;
    };
    for (int64_t r0 = 0; r0 < c.rows; ++r0) {
      fa4::cuda::RowWalk w(c, r0);
      for (int64_t r = r0; r < c.rows; ++r, w.next(c)) ASSERT_EQ(w.offset, by_division(r)) << "case " << t << " row " << r;
    }
  }
}
