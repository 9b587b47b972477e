// Host side of the sm90 forward kernel: head-dim padding, tensor-map encoding, dispatch.
#include "cuda/sm90/fwd_launch.h"

#include <string>

#include "cuda/common/tensor_map.h"
#include "cuda/sm90/fp8_layout.h"
#include "cuda/sm90/fwd_config.h"
#include "cuda/sm90/fwd_fp8_kv.h"
#include "cuda/sm90/fwd_gather.h"

namespace fa4::cuda::sm90 {

namespace {

// The element type and swizzle chunk of a map: 16-bit elements in boxes of 64 columns (128-byte
// swizzle), or e4m3 bytes in boxes of `cols` columns (128 or 64, with that swizzle span).
struct MapElem {
  TmaElem elem;
  uint32_t box_cols;
  TmaSwizzle swizzle;
};
MapElem elem16(bool bf16) { return {bf16 ? TmaElem::bf16 : TmaElem::f16, 64, TmaSwizzle::b128}; }
MapElem elem8(uint32_t box_cols) {
  return {TmaElem::u8, box_cols, box_cols == 32 ? TmaSwizzle::b32 : box_cols == 64 ? TmaSwizzle::b64 : TmaSwizzle::b128};
}

// One 4-d map (fwd_params.h): (cols, heads, rows, batch-like) with element strides (head, row,
// batch-like); boxes of me.box_cols columns x box_heads heads x box_rows rows. Extent-1 dimensions get a placeholder stride
// (never stepped, but TMA still wants a 16-byte multiple).
bool encode(CUtensorMap* m, const void* base, MapElem me, int64_t cols, int64_t heads, int64_t rows, int64_t bl,
            int64_t s_head, int64_t s_row, int64_t s_bl, uint32_t box_heads, uint32_t box_rows, const char* name,
            std::string* why) {
  TmaTiledDesc d;
  d.base = base;
  d.elem = me.elem;
  d.rank = 4;
  const int64_t ext[4] = {cols, heads, rows, bl};
  const int64_t st[3] = {s_head, s_row, s_bl};
  for (int i = 0; i < 4; ++i) {
    if (ext[i] < 1) {
      if (why) *why = std::string(name) + ": empty dimension";
      return false;
    }
    d.dims[i] = static_cast<uint64_t>(ext[i]);
  }
  for (int i = 0; i < 3; ++i) {
    const int64_t bytes = st[i] * cuda::elem_bytes(me.elem);
    d.strides_bytes[i] = ext[i + 1] == 1 ? 16 : (bytes > 0 ? static_cast<uint64_t>(bytes) : 1);  // 1: rejected below
  }
  d.box[0] = me.box_cols, d.box[1] = box_heads, d.box[2] = box_rows, d.box[3] = 1;
  d.swizzle = me.swizzle;
  std::string e;
  if (!encode_tma_tiled(m, d, &e)) {
    if (why) *why = std::string(name) + ": " + e;
    return false;
  }
  return true;
}

// q, k, v (or V^T) and out maps of `a`; in: q / k elements (16-bit, or e4m3 for Tile::fp8, whose
// v map make_params_fp8 then replaces); kv: k / v elements (`in`, or e4m3 for Tile::fp8_kv).
bool make_maps(const FwdArgs& a, DimPair dims, Tile tile, MapElem in, MapElem kv, bool bf16_out, Sm90Params* P,
               std::string* why) {
  const uint32_t block_n = static_cast<uint32_t>(tile_cfg(dims.dqk, dims.dv, tile).block_n);
  P->a = a;
  // q: dense rows along dim 1 per batch; varlen tokens along dim 0. A consumer's 64 tile rows:
  // 64 query rows of one head, or with PackGQA 64 / group query rows x the group's heads
  // (fwd_work.cuh; the planner packs only groups dividing 64).
  const bool vq = a.varlen_q != 0;
  const uint32_t gq = a.pack_gqa ? static_cast<uint32_t>(a.group) : 1u;
  if (gq == 0 || kRowsPerConsumer % gq != 0) {
    if (why) *why = "q: PackGQA group " + std::to_string(gq) + " does not divide 64";
    return false;
  }
  if (!encode(&P->tm_q, a.q, in, a.dqk, a.hq, vq ? a.total_q : a.sq_dense, vq ? 1 : a.batch, a.q_sh, vq ? a.q_s0 : a.q_s1,
              a.q_s0, gq, kRowsPerConsumer / gq, "q", why))
    return false;
  // k / v: dense (B, Sk), varlen (tokens), cache (cache sequences, slot rows), paged (pages,
  // rows of a page).
  const bool vk = a.kv_mode == kKvVarlen;
  const int64_t rows = vk ? a.kv_rows0 : a.kv_mode == kKvPaged ? a.page_size : a.kv_slot;
  const int64_t bl = vk ? 1 : a.kv_rows0;
  // Boxes of a key tile's rows, or (FA4_SM90_PAGED_SUB) of one page where pages are smaller: the
  // producer then issues one box per page (fwd_producer.cuh load_pages).
  const uint32_t box = FA4_SM90_PAGED_SUB && a.kv_mode == kKvPaged && a.page_size < block_n
                           ? static_cast<uint32_t>(a.page_size) : block_n;
  if (!encode(&P->tm_k, a.k, kv, a.dqk, a.hkv, rows, bl, a.k_sh, vk ? a.k_s0 : a.k_s1, a.k_s0, 1, box, "k", why))
    return false;
  // (The e4m3 tiles read V^T from the pre-pass's workspace -- make_params_fp8's map -- unless the
  // tile transposes V itself, FA4_SM90_FP8_VT_IN_KERNEL: then V's rows as K's.)
  if ((!is_fp8_tile(tile) || fp8_vt_in_kernel(dims.dqk, dims.dv, tile)) &&
      !encode(&P->tm_v, a.v, kv, a.dv, a.hkv, rows, bl, a.v_sh, vk ? a.v_s0 : a.v_s1, a.v_s0, 1, box, "v", why))
    return false;
  // out: like q; where TMA cannot address it (strides), the epilogue's 16-byte stores do.
  // (Only the instances that store through TMA: fwd_kernel.cuh kTmaStore; not PackGQA rows, which
  // are several heads', nor split partials, which are fp32 rows of the workspace.)
  P->tma_store = FA4_SM90_TMA_STORE && o_staging(dims.dqk, dims.dv, tile) == OStaging::own && !a.pack_gqa &&
                 a.num_splits <= 1 &&
                 encode(&P->tm_o, a.out, elem16(bf16_out), a.dv, a.hq, vq ? a.total_q : a.sq_dense, vq ? 1 : a.batch, a.o_sh,
                        vq ? a.o_s0 : a.o_s1, a.o_s0, 1, kRowsPerConsumer, "out", nullptr);
  return true;
}

}  // namespace

bool make_params(const FwdArgs& a, DimPair dims, Tile tile, bool bf16, Sm90Params* P, std::string* why) {
  if (is_fp8_tile(tile) || tile == Tile::fp8_kv) {
    if (why) *why = is_fp8_tile(tile) ? "the fp8 tiles take make_params_fp8" : "the fp8_kv tile takes make_params_fp8_kv";
    return false;
  }
  return make_maps(a, dims, tile, elem16(bf16), elem16(bf16), bf16, P, why);
}

bool make_params_fp8_kv(const FwdArgsFp8& a, DimPair dims, bool bf16, Sm90Params* P, std::string* why) {
  if (a.k_tok != 0 || a.v_tok != 0) {
    if (why) *why = "the fp8_kv tile takes factors per (batch, kv head) only";
    return false;
  }
  if (!make_maps(a, dims, Tile::fp8_kv, elem16(bf16), elem8(kFp8KvByteCols), bf16, P, why)) return false;
  P->k_descale = a.k_descale, P->kd_s0 = a.kd_s0, P->kd_sh = a.kd_sh;
  P->v_descale = a.v_descale, P->vd_s0 = a.vd_s0, P->vd_sh = a.vd_sh;
  return true;
}

bool make_params_decode_kv(const FwdArgsFp8& a, DimPair dims, bool bf16, Sm90Params* P, std::string* why) {
  if (!make_maps(a, dims, Tile::fp8_kv, elem16(bf16), elem8(kFp8KvByteCols), bf16, P, why)) return false;
  P->k_descale = a.k_descale, P->kd_s0 = a.kd_s0, P->kd_s1 = a.kd_s1, P->kd_sh = a.kd_sh, P->k_tok = a.k_tok;
  P->v_descale = a.v_descale, P->vd_s0 = a.vd_s0, P->vd_s1 = a.vd_s1, P->vd_sh = a.vd_sh, P->v_tok = a.v_tok;
  return true;
}

bool make_params_fp8(const FwdArgsFp8& a, DimPair dims, Tile tile, const void* vt, const Fp8VtLayout& vl, Sm90Params* P,
                     std::string* why) {
  if (!is_fp8_tile(tile) || !has_tile(tile, dims.dqk, dims.dv)) {
    if (why) *why = "not an fp8 tile of these head dims";
    return false;
  }
  // The pre-pass wrote zeros up to a multiple of vl.pad keys: whole key tiles of this one. (A
  // tile that transposes V itself reads no workspace: vt and vl are not used.)
  const bool vt_in_kernel = fp8_vt_in_kernel(dims.dqk, dims.dv, tile);
  const int block_n = tile_cfg(dims.dqk, dims.dv, tile).block_n;
  if (!vt_in_kernel && (vl.pad <= 0 || vl.pad % block_n != 0)) {
    if (why) *why = "the V^T workspace's padding is not a multiple of the tile's key block";
    return false;
  }
  const MapElem e8 = elem8(static_cast<uint32_t>(qk_chunk_cols(dims.dqk, tile)));
  if (!make_maps(a, dims, tile, e8, e8, true, P, why))
    return false;
  // V^T (fp8_layout.h): (key columns, value dims, kv heads, batch-like), byte strides cols,
  // dv x cols, hkv x dv x cols; boxes of a V^T chunk's key columns (fp8_vt_chunk_keys: 128, or 64
  // with 64-byte swizzle) x the tile's Dv dims (dims past a.dv are outside the map: TMA fills them
  // with zeros, as it does the padded q / k columns).
  const int64_t row = vl.cols, head = row * a.dv, bl = head * a.hkv;
  const uint32_t vt_keys = static_cast<uint32_t>(fp8_vt_chunk_keys(block_n));
  if (!vt_in_kernel && !encode(&P->tm_v, vt, elem8(vt_keys), vl.cols, a.dv, a.hkv, vl.bl, row, head, bl,
                               static_cast<uint32_t>(dims.dv), 1, "v (the fp8 V^T workspace)", why))
    return false;
  P->q_descale = a.q_descale, P->qd_s0 = a.qd_s0, P->qd_sh = a.qd_sh;
  P->k_descale = a.k_descale, P->kd_s0 = a.kd_s0, P->kd_sh = a.kd_sh;
  P->v_descale = a.v_descale, P->vd_s0 = a.vd_s0, P->vd_sh = a.vd_sh;
  return true;
}

cudaError_t launch_fwd(const Sm90Params& P, DimPair dims, Tile tile, bool bf16, dim3 grid, cudaStream_t stream) {
  if (!has_tile(tile, dims.dqk, dims.dv)) return cudaErrorInvalidValue;
  switch (dims.dqk) {
    case 64:
      if (tile == Tile::fp8) return launch_fwd_d64_fp8(P, grid, stream);
      if (tile == Tile::fp8_long_keys) return launch_fwd_d64_fp8_long_keys(P, grid, stream);
      if (tile == Tile::split_kv) return launch_fwd_d64_split_kv(P, bf16, grid, stream);
      return tile == Tile::short_masked ? launch_fwd_d64_short_masked(P, bf16, grid, stream)
                                        : launch_fwd_d64(P, bf16, grid, stream);
    case 128:
      if (tile == Tile::fp8) return launch_fwd_d128_fp8(P, grid, stream);
      if (tile == Tile::fp8_long_keys) return launch_fwd_d128_fp8_long_keys(P, grid, stream);
      if (tile == Tile::fp8_kv) {
        // (FA4_SM90_FP8_KV_F16_COMPUTE) bf16 q computed in fp16: the same tile, plan and tensor
        // maps (q's is bf16 -- TMA copies the bits; the kernel converts them), another instance.
#if FA4_SM90_FP8_KV_F16_COMPUTE
        if (bf16) return launch_fwd_d128_fp8_kv_f16(P, grid, stream);
#endif
        return launch_fwd_d128_fp8_kv(P, bf16, grid, stream);
      }
      if (tile == Tile::balanced) return launch_fwd_d128_balanced(P, bf16, grid, stream);
      if (tile == Tile::long_keys) return launch_fwd_d128_long_keys(P, bf16, grid, stream);
      return tile == Tile::split_kv ? launch_fwd_d128_split_kv(P, bf16, grid, stream) : launch_fwd_d128(P, bf16, grid, stream);
    case 192: return launch_fwd_d192_128(P, bf16, grid, stream);
    case 256:
      if (tile == Tile::fp8) return launch_fwd_d256_fp8(P, grid, stream);
      if (tile == Tile::split_kv) return launch_fwd_d256_split_kv(P, bf16, grid, stream);
      return tile == Tile::long_keys ? launch_fwd_d256_long_keys(P, bf16, grid, stream)
                                     : launch_fwd_d256(P, bf16, grid, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_fwd_gather(const Sm90Params& P, DimPair dims, Tile tile, bool bf16, dim3 grid, cudaStream_t stream) {
  if (!has_gather_instance(dims.dqk, dims.dv, tile)) return cudaErrorInvalidValue;
  const bool split = tile == Tile::split_kv;
  switch (dims.dqk) {
    case 64: return split ? launch_fwd_d64_split_kv_gather(P, bf16, grid, stream) : launch_fwd_d64_gather(P, bf16, grid, stream);
    case 128:
      return split ? launch_fwd_d128_split_kv_gather(P, bf16, grid, stream) : launch_fwd_d128_gather(P, bf16, grid, stream);
    case 256:
      return split ? launch_fwd_d256_split_kv_gather(P, bf16, grid, stream) : launch_fwd_d256_gather(P, bf16, grid, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fa4::cuda::sm90
