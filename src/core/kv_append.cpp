// Host-side KV-cache append for the reference and cpu backends.
#include <cstring>

#include "core/backends.h"
#include "core/element.h"

namespace fa4::core {
namespace {

// Copies one [Snew, Hkv, D] block of sequence b from `src` into the cache `dst`, element by
// element so any strides work (these are small: Snew new tokens). Into an fp8 KV cache
// (kv_fp8) each element is quantized instead, quantize_e4m3(x, factor of its row): the one
// routine both host backends run, so they write the same bytes.
void append_one(const Problem& pb, const TensorView& src, const RowStrides& ss, const TensorView& dst,
                const RowStrides& ds, int64_t d, int64_t b, const KvScale& sc) {
  const size_t es = dtype_size(src.dtype);
  const auto* s = static_cast<const unsigned char*>(src.data);
  auto* t = static_cast<unsigned char*>(dst.data);
  const int64_t start = pb.seqlen_k[b] - pb.snew;
  for (int64_t i = 0; i < pb.snew; ++i) {
    const RowAddr r = pb.kv_row(b, start + i);
    for (int64_t h = 0; h < pb.hkv; ++h) {
      const float f = pb.kv_fp8 ? pb.kv_scale(sc, b, start + i, h) : 1.0f;
      for (int64_t x = 0; x < d; ++x) {
        const int64_t so = b * ss.s0 + i * ss.s1 + h * ss.head + x * ss.dim;
        const int64_t to = r.a * ds.s0 + r.b * ds.s1 + h * ds.head + x * ds.dim;
        if (pb.kv_fp8)
          t[to] = quantize_e4m3(load_f32(s, so, src.dtype), f);
        else
          std::memcpy(t + to * es, s + so * es, es);
      }
    }
  }
}

}  // namespace

void append_kv_host(const Problem& pb) {
  // Nothing to write (Snew, Hkv or B is 0): normalize() may then have returned before filling
  // seqlen_k, so this must be the same test it uses, not a weaker one (Hkv = 0 with Snew > 0
  // once read seqlen_k[0] of an empty vector).
  if (!pb.appends()) return;
  for (int64_t b = 0; b < pb.batch; ++b) {
    append_one(pb, pb.p->k_new, pb.knew_s, pb.p->k, pb.ks, pb.dqk, b, pb.k_sc);
    append_one(pb, pb.p->v_new, pb.vnew_s, pb.p->v, pb.vs, pb.dv, b, pb.v_sc);
  }
}

}  // namespace fa4::core
