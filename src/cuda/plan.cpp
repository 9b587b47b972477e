#include "cuda/plan.h"

#include <algorithm>
#include <climits>

#include "core/checked.h"
#include "core/splits.h"
#include "cuda/simt/fwd_f32_config.h"
#include "cuda/sm90/fp8_layout.h"
#include "cuda/sm90/fwd_config.h"
#include "cuda/sm90/decode_kv.h"
#include "cuda/sm90/fwd_fp8_kv.h"
#include "cuda/sm90/fwd_gather.h"

namespace fa4::cuda {

using core::Problem;

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::sm90: return "sm90";
    case Kernel::sm80: return "sm80";
    case Kernel::simt: return "simt";
  }
  return "?";
}

bool parse_kernel_preference(std::string_view v, std::optional<Kernel>* out) {
  if (v.empty() || v == "auto") *out = std::nullopt;
  else if (v == "sm90") *out = Kernel::sm90;
  else if (v == "sm80") *out = Kernel::sm80;
  else if (v == "simt") *out = Kernel::simt;
  else return false;
  return true;
}

namespace {

bool is_16bit(DType t) { return t == DType::float16 || t == DType::bfloat16; }

// e4m3 inputs (all-fp8, or an fp8 KV cache under 16-bit q) on the sm80 kernel: its fp8 instances.
// (All-fp8 prefill may run on the sm90 kernel's fp8 tile instead: sm90_supports, plan_fp8_all.)
sm80::Fp8 fp8_mode(const Problem& pb) {
  return pb.dtype == DType::float8_e4m3 ? sm80::Fp8::all : pb.kv_fp8 ? sm80::Fp8::kv : sm80::Fp8::none;
}

// TMA's rules for one tensor map of the sm90 kernel (fwd_params.h: (cols, heads, rows,
// batch-like)): every stride of a dimension with more than one element a multiple of 16 bytes
// below 2^40, every extent below 2^31 (the kernel's coordinates are signed 32-bit). eb: bytes per
// element (strides are in elements).
bool tma_fits(int64_t cols, int64_t heads, int64_t rows, int64_t bl, int64_t s_head, int64_t s_row, int64_t s_bl,
              int64_t eb = 2) {
  const int64_t ext[3] = {heads, rows, bl}, st[3] = {s_head, s_row, s_bl};
  if (cols < 1 || cols > INT32_MAX) return false;
  for (int i = 0; i < 3; ++i) {
    if (ext[i] < 1 || ext[i] > INT32_MAX) return false;  // a tensor map has no empty dimension (sk = 0: sm80)
    // (The bound first: a stride near 2^62 -- a broadcast-sized view -- overflowed st * eb.)
    if (ext[i] > 1 && (st[i] <= 0 || st[i] >= (int64_t(1) << 40) / eb || (st[i] * eb) % 16 != 0)) return false;
  }
  return true;
}

// All-fp8 (e4m3 q / k / v): the fp8 tiles of the sm90 kernel (sm90/fwd_config.h Tile::fp8, fp8_long_keys).
bool is_fp8_all(const Problem& pb) { return pb.dtype == DType::float8_e4m3 && !pb.kv_fp8; }

// The V^T workspace of an fp8 call on the sm90 kernel's tile `t` (sm90/fp8_layout.h); false where
// a size overflows (the planner then keeps the call on sm80).
bool sm90_fp8_vt(const Problem& pb, sm90::DimPair d, sm90::Tile t, sm90::Fp8VtLayout* vl) {
  const bool vk = pb.kv == core::KvLayout::varlen;
  return sm90::fp8_vt_layout(vk, sm90::tile_cfg(d.dqk, d.dv, t).block_n, pb.batch, pb.hkv, pb.dv, pb.kv_slot,
                             vk ? pb.p->k.shape[0] : pb.kv_slot, vl);
}

// A causal, windowed or chunked mask: query tiles see different key counts.
bool masked_problem(const Problem& pb) { return pb.p->causal || pb.p->window_right >= 0 || pb.p->chunk_size > 0; }

// The longest key sequence from which an all-fp8 call takes the wider key tiles
// (Tile::fp8_long_keys, whose V^T comes from the pre-pass); negative: never.
int fp8_long_keys_min_sk(const Problem& pb) {
  return masked_problem(pb) ? FA4_SM90_FP8_LONG_KEYS_MIN_SK : FA4_SM90_FP8_LONG_KEYS_MIN_SK_UNMASKED;
}

// The longest query / key sequence as far as speed choices go. Exact where the lengths were read
// on the host; for device-resident varlen lengths pb.max_sq / max_sk are the tensor bounds (every
// packed token one sequence), so the caller's max_seqlen_q / k hints stand in where they are
// smaller: a tile choice only (a wrong hint costs speed, never a result). Without them a batch of
// 64 sequences of 256 tokens planned as one of 16384 (D 64 causal: the 192-row tile, one CTA
// per tile, 0.45 of the same problem dense; H200 2026-12-03).
int64_t speed_max_sq(const Problem& pb) {
  const int64_t h = pb.p->max_seqlen_q;
  return pb.varlen_q && pb.seqlen_q.empty() && h > 0 && h < pb.max_sq ? h : pb.max_sq;
}
int64_t speed_max_sk(const Problem& pb) {
  const int64_t h = pb.p->max_seqlen_k;
  return pb.seqlen_k.empty() && h > 0 && h < pb.max_sk ? h : pb.max_sk;
}

// PackGQA on the sm90 kernel (FA4_SM90_DECODE): a group's query heads share the tile rows of
// their kv head where that fills the block_m-row tiles better (FA3's rule: packed tiles more than
// 1 / 0.9 as full), for groups dividing 64 (fwd_work.cuh: one TMA box per consumer) and packed
// sequences of < 2^24 rows.
bool sm90_packs(const Problem& pb, int64_t block_m) {
  if (!FA4_SM90_DECODE || pb.group <= 1 || sm90::kRowsPerConsumer % pb.group != 0) return false;
  const int64_t sq = speed_max_sq(pb);
  if (sq < 1 || sq * pb.group >= (int64_t{1} << 24)) return false;
  auto fill = [&](int64_t rows) { return static_cast<double>(rows) / static_cast<double>((rows + block_m - 1) / block_m * block_m); };
  return fill(sq) < 0.9 * fill(sq * pb.group);
}

// Page sizes the sm90 kernel's TMA loads take for a key block: whole key tiles inside a page,
// or (FA4_SM90_PAGED_SUB) one box per page where a page divides the key block and holds a multiple
// of 8 rows (each box then starts on a 128-byte-swizzle atom: fwd_producer.cuh load_pages), at
// least FA4_SM90_SUB_PAGE_MIN of them (16-row pages lost 11 % to sm80 at B 1, kv 128k).
bool sm90_pages_fit(int64_t page_size, int block_n) {
  if (page_size % block_n == 0) return true;
  return FA4_SM90_PAGED_SUB && page_size < block_n && block_n % page_size == 0 && page_size % 8 == 0 &&
         page_size >= FA4_SM90_SUB_PAGE_MIN;
}

// FA4_SM90_PAGED_GATHER: a paged cache the sm90 kernel's TMA loads do not take on the tile `t`
// (sm90_pages_fit: pages of 1, 3, 16, 32 rows, sizes not dividing or dividing the key block),
// or with FA4_SM90_PAGED_GATHER=2 any paged cache, runs on its gather instances (sm90/fwd_gather.h:
// the producer warpgroup copies the rows by cp.async, each one's address from the page table) --
// head dims 64 / 128 / 256 unpadded. The gather tile's key block is the one sm90_tile falls back
// to for such pages (128 at D 64 / 128, 64 at D 256), so `t` may be either.
bool sm90_gathers(const Problem& pb, sm90::DimPair d, sm90::Tile t) {
  if (!FA4_SM90_PAGED_GATHER || pb.kv_fp8 || pb.kv != core::KvLayout::paged || !sm90::gather_dims(d.dqk, d.dv) || pb.dqk != d.dqk ||
      pb.dv != d.dv)
    return false;
  return FA4_SM90_PAGED_GATHER >= 2 || !FA4_SM90_PAGED || !sm90_pages_fit(pb.page_size, sm90::tile_cfg(d.dqk, d.dv, t).block_n);
}

// The sm90 tile of a problem (sm90/fwd_config.h Tile, with the A/B behind each rule there):
// two consumers at D = 64 for masked query sequences of <= 1024 rows and for decode-sized ones
// (<= 128 rows per kv head packed: a third consumer would have nothing to do), 80-key tiles at
// D = 256 from 1024 keys (masked: 2048), P double-buffered at D = 128 for unmasked prefill from
// 4096 keys, the standard tile everywhere else -- and in a paged cache a tile whose key block
// divides the page size (a key tile must not straddle two pages), the standard one if that does.
sm90::Tile sm90_tile(const Problem& pb, sm90::DimPair d) {
  if (is_fp8_all(pb)) {  // 160 / 192-key tiles at D 64 / 128 over long keys (FA4_SM90_FP8_LONG_KEYS_MIN_SK[_UNMASKED])
    const int min_sk = fp8_long_keys_min_sk(pb);
    const bool long_keys = min_sk >= 0 && speed_max_sk(pb) >= min_sk;
    return long_keys && sm90::has_tile(sm90::Tile::fp8_long_keys, d.dqk, d.dv) ? sm90::Tile::fp8_long_keys
                                                                                 : sm90::Tile::fp8;
  }
  if (pb.kv_fp8) return sm90::Tile::fp8_kv;    // (its only tile)
  const bool masked = masked_problem(pb);
  // Tile rows per (sequence, grid head) of a tile of block_m rows: query rows, x group with PackGQA.
  auto tile_rows = [&](int block_m) { return speed_max_sq(pb) * (sm90_packs(pb, block_m) ? pb.group : 1); };
  sm90::Tile t = sm90::Tile::standard;
  if (d.dqk == 64 && masked && speed_max_sq(pb) <= FA4_SM90_SHORT_MASKED_MAX_SQ) t = sm90::Tile::short_masked;
  if (d.dqk == 64 && !masked && speed_max_sq(pb) <= FA4_SM90_SHORT_UNMASKED_MAX_SQ) t = sm90::Tile::short_masked;
  if (d.dqk == 64 && FA4_SM90_DECODE && tile_rows(sm90::tile_cfg(64, 64).block_m()) <= 2 * sm90::kRowsPerConsumer)
    t = sm90::Tile::short_masked;
  if (d.dqk == 256 && speed_max_sk(pb) >= (masked ? FA4_SM90_LONG_KEYS_MIN_SK : FA4_SM90_LONG_KEYS_MIN_SK_UNMASKED))
    t = sm90::Tile::long_keys;
  // (D 128: unmasked, prefill-shaped query sides only -- causal and decode-sized tiles keep the
  // standard tile, as measured; not in builds of the balanced walk, an A/B of the standard tile)
  if (d.dqk == 128 && !masked && !FA4_SM90_BALANCED && FA4_SM90_LONG_KEYS_MIN_SK_D128 >= 0 &&
      speed_max_sk(pb) >= FA4_SM90_LONG_KEYS_MIN_SK_D128 && tile_rows(sm90::tile_cfg(128, 128).block_m()) > 2 * sm90::kRowsPerConsumer)
    t = sm90::Tile::long_keys;
  if (!sm90::has_tile(t, d.dqk, d.dv)) t = sm90::Tile::standard;
  if (pb.kv == core::KvLayout::paged && !sm90_pages_fit(pb.page_size, sm90::tile_cfg(d.dqk, d.dv, t).block_n))
    t = sm90::Tile::standard;
  if (sm90_gathers(pb, d, t)) t = sm90::gather_tile(d.dqk);  // (FA4_SM90_PAGED_GATHER)
  return t;
}

// Whether the keys-on-M decode kernel takes an fp8_kv call (FA4_SM90_DECODE_KEYS_M; sm90/decode_kv.h)
// of `splits` splits.
bool keys_m_takes(const Problem& pb, sm90::DimPair d, int64_t splits) {
  return FA4_SM90_DECODE_KEYS_M && pb.kv_fp8 &&
         sm90::decode_keys_m_fits(pb.varlen_q, pb.max_sq, pb.group, pb.kv == core::KvLayout::paged, pb.page_size, d.dqk,
                                  d.dv, sm90::tile_cfg(d.dqk, d.dv, sm90::Tile::fp8_kv).block_n, pb.hkv, splits);
}

}  // namespace

// The sm90 kernel's feature set: a compute capability 9.0 device (its sm_90a image runs there
// only), fp16 / bf16 q, k and v (an e4m3 KV cache under 16-bit q: below), head dims with an instance (sm90/fwd_config.h), a shared-memory fit, paged
// KV only with page sizes that are multiples of the key block (FA4_SM90_PAGED), split-KV and
// PackGQA with FA4_SM90_DECODE (else prefill-shaped tiles only: decode-sized query tiles of a GQA
// group take sm80's PackGQA tiles), and strides TMA can address.
// All-fp8 q / k / v: the fp8 tile (D 64 / 128 / 256 after padding, equal dims), prefill only --
// no paged cache (its V^T pre-pass reads contiguous rows), no requested split count (a split
// launch runs sm80's fp8 instances), a V^T workspace whose sizes fit (sm90_fp8_vt).
// An fp8 KV cache (16-bit q, e4m3 k / v; FA4_SM90_FP8_KV): the fp8_kv tile (D 128, equal dims,
// unpadded: its TMA boxes are whole 128-byte e4m3 rows), factors per (batch, kv head) or none,
// paged caches whose pages fit its boxes (sm90::fp8_kv_pages_fit); per-token factors only where
// the keys-on-M decode kernel takes the call (FA4_SM90_DECODE_KEYS_M), else they stay on sm80.
bool sm90_supports(const Problem& pb, const DeviceLimits& dl) {
  sm90::DimPair d{};
  const bool fp8 = is_fp8_all(pb);
  if (!dl.known || dl.cc_major != 9 || dl.cc_minor != 0 || !(is_16bit(pb.dtype) || fp8)) return false;
  if (!sm90::padded_dims(static_cast<int>(pb.dqk), static_cast<int>(pb.dv), &d)) return false;
  const bool per_token = (pb.k_sc.data != nullptr && pb.k_sc.per_token) || (pb.v_sc.data != nullptr && pb.v_sc.per_token);
  if (pb.kv_fp8 && (!FA4_SM90_FP8_KV || !sm90::has_tile(sm90::Tile::fp8_kv, d.dqk, d.dv) || pb.dqk != d.dqk ||
                    pb.dv != d.dv || (per_token && !keys_m_takes(pb, d, 1))))
    return false;
  const sm90::Tile tile = sm90_tile(pb, d);
  sm90::Fp8VtLayout vl;
  if (fp8 && (!sm90::has_tile(tile, d.dqk, d.dv) || pb.kv == core::KvLayout::paged || pb.p->num_splits > 1 ||
              (!sm90::fp8_vt_in_kernel(d.dqk, d.dv, tile) && !sm90_fp8_vt(pb, d, tile, &vl))))
    return false;
  if (sm90::smem_bytes(d.dqk, d.dv, tile) > dl.smem_optin) return false;
  const bool paged = pb.kv == core::KvLayout::paged;
  // Paged (FA4_SM90_PAGED): page sizes that are multiples of the key block, or (FA4_SM90_PAGED_SUB)
  // that divide it (sm90_pages_fit; the fp8_kv tile: sm90::fp8_kv_pages_fit).
  const int block_n = sm90::tile_cfg(d.dqk, d.dv, tile).block_n;
  if (paged && pb.kv_fp8 && (!FA4_SM90_PAGED || !sm90::fp8_kv_pages_fit(pb.page_size, block_n))) return false;
  if (paged && !pb.kv_fp8 && !sm90_gathers(pb, d, tile) && (!FA4_SM90_PAGED || !sm90_pages_fit(pb.page_size, block_n)))
    return false;
  if (pb.p->num_splits > 1 && !FA4_SM90_DECODE) return false;
  // (The keys-on-M decode kernel packs any group itself: GQA 5, 6, 7, 12, ...)
  if (pb.group > 1 && pb.max_sq < sm90::kRowsPerConsumer &&
      !sm90_packs(pb, sm90::tile_cfg(d.dqk, d.dv, tile).block_m()) && !keys_m_takes(pb, d, 1))
    return false;
  const bool vq = pb.varlen_q, vk = pb.kv == core::KvLayout::varlen;
  const AttentionParams& p = *pb.p;
  // k / v rows per batch-like index: tokens (varlen), a page's rows (paged), the slot (dense, cache).
  const int64_t k_rows = vk ? p.k.shape[0] : paged ? pb.page_size : pb.kv_slot;
  const int64_t v_rows = vk ? p.v.shape[0] : paged ? pb.page_size : pb.kv_slot;
  // (fp8: v is read by the V^T pre-pass, not by TMA; its map is the workspace's -- unless the tile
  // transposes V itself (FA4_SM90_FP8_VT_IN_KERNEL), whose TMA reads v's rows as k's. fp8 KV cache:
  // 16-bit q, e4m3 k / v.)
  const int64_t eb = fp8 ? 1 : 2, kv_eb = fp8 || pb.kv_fp8 ? 1 : 2;
  const bool v_by_tma = !fp8 || sm90::fp8_vt_in_kernel(d.dqk, d.dv, tile);
  return tma_fits(pb.dqk, pb.hq, vq ? p.q.shape[0] : pb.sq_dense, vq ? 1 : pb.batch, pb.qs.head, vq ? pb.qs.s0 : pb.qs.s1,
                  pb.qs.s0, eb) &&
         tma_fits(pb.dqk, pb.hkv, k_rows, vk ? 1 : p.k.shape[0], pb.ks.head, vk ? pb.ks.s0 : pb.ks.s1, pb.ks.s0, kv_eb) &&
         (!v_by_tma ||
          tma_fits(pb.dv, pb.hkv, v_rows, vk ? 1 : p.v.shape[0], pb.vs.head, vk ? pb.vs.s0 : pb.vs.s1, pb.vs.s0, kv_eb));
}

namespace {

// Automatic choice: sm90 where its unsplit grid fills the device at least once; below that
// (few query tiles, long keys) sm80's split-KV spreads the keys over the idle SMs instead --
// unless the sm90 kernel splits too (FA4_SM90_DECODE).
bool sm90_fills_device(const Problem& pb, const DeviceLimits& dl) {
  sm90::DimPair d{};
  sm90::padded_dims(static_cast<int>(pb.dqk), static_cast<int>(pb.dv), &d);
  const int64_t m = sm90::tile_cfg(d.dqk, d.dv, sm90_tile(pb, d)).block_m();
  const int64_t tiles = pb.varlen_q ? (pb.p->q.shape[0] + m - 1) / m : pb.batch * ((pb.max_sq + m - 1) / m);
  return tiles * pb.hq >= dl.sms;
}

// Decode-shaped (FA4_SM90_DECODE): at most one consumer's 64 rows per (sequence, kv head) when
// packed, and enough such tiles to fill every SM without a split. There sm80's PackGQA decode
// tiles (several CTAs per SM) read K / V level with cuDNN and the sm90 kernel (one CTA per SM, a
// 128-row tile for <= 64 rows) 0.7-2 % behind (H200 2026-12-04, B 32, 32 / 8, Sq 1 / 4,
// kv 8k / 128k: docs/perf/h200-2026-12-04-session.md); below that the sm90 split-KV won 2-17 %.
bool sm80_takes_decode(const Problem& pb, const DeviceLimits& dl) {
  sm90::DimPair d{};
  sm90::padded_dims(static_cast<int>(pb.dqk), static_cast<int>(pb.dv), &d);
  const int64_t m = sm90::tile_cfg(d.dqk, d.dv, sm90_tile(pb, d)).block_m();
  const bool pack = sm90_packs(pb, m);
  const int64_t rows = speed_max_sq(pb) * (pack ? pb.group : 1);
  if (rows > sm90::kRowsPerConsumer) return false;
  return pb.batch * (pack ? pb.hkv : pb.hq) >= dl.sms;
}

Plan plan_sm80(const Problem& pb, const DeviceLimits& dl);
Plan plan_sm90(const Problem& pb, const DeviceLimits& dl);

// All-fp8 calls the sm90 fp8 tile supports run there, except where sm80's fp8 instances would
// split them over SMs the unsplit sm90 grid leaves idle, more than the tile's speed makes up for.
// Per SM the tile ran 2.0-13x sm80's fp8 path (H100 2026-12-05, full grids, S 1k-16k, causal or
// not: docs/perf/h100-2026-12-05b-session.md), at least 2.0x at D 64 (causal S 1k: 242 / 118
// TFLOP/s), 2.8x at D 128 (370 / 130), 5.9x at D 256 (442 / 74). With W the call's work, the
// sm90 grid takes ~W / (min(tiles, SMs) x that speed), sm80's split grid ~W / min(CTAs, SMs)
// (sm80 speed units; its combine kernel left out, in sm80's favour): a small grid stays on sm90
// unless sm80's split keeps that many more SMs busy -- decode-shaped calls (few tiles, tens of
// splits), where the V^T pre-pass would also triple V's memory traffic. (The tile's partial-grid
// speed is not measured yet; a full grid or an unsplit sm80 plan always takes sm90.)
// The plan of such a call (no kernel preference that applies), each candidate planned once:
// sm80's, and where FA4_SM90_FP8 and sm90_supports allow it the sm90 one.
double sm90_fp8_speed_over_sm80(int dqk) { return dqk <= 64 ? 2.0 : dqk <= 128 ? 2.8 : 5.9; }
Plan plan_fp8_all(const Problem& pb, const DeviceLimits& dl) {
  Plan s80 = plan_sm80(pb, dl);
  if (!FA4_SM90_FP8 || !sm90_supports(pb, dl)) return s80;
  Plan s90 = plan_sm90(pb, dl);
  if (s80.splits <= 1) return s90;
  const auto busy = [&](const Plan& pl) {
    return static_cast<double>(std::min<int64_t>(pl.grid.x * pl.grid.y * pl.grid.z, dl.sms));
  };
  return busy(s90) * sm90_fp8_speed_over_sm80(s90.dqk) >= busy(s80) ? s90 : s80;
}

bool supports(Kernel k, const Problem& pb, const DeviceLimits& dl) {
  switch (k) {
    case Kernel::sm90: return sm90_supports(pb, dl);
    case Kernel::sm80: return is_16bit(pb.dtype) || pb.dtype == DType::float8_e4m3;
    case Kernel::simt: return pb.dtype == DType::float32;
  }
  return false;
}

// The preference where it applies (FA4_CUDA_KERNEL=sm90 takes the fp8 tile wherever it supports
// the call).
bool preference_applies(const Problem& pb, const DeviceLimits& dl) { return dl.prefer && supports(*dl.prefer, pb, dl); }

// The preference where it applies, else sm90 where it applies, else the kernel of the dtype:
// simt for float32, sm80 for 16-bit and e4m3 inputs. (All-fp8 calls without a preference that
// applies: plan_fp8_all.)
Kernel choose_kernel(const Problem& pb, const DeviceLimits& dl) {
  if (preference_applies(pb, dl)) return *dl.prefer;
  if (sm90_supports(pb, dl)) {
    // An fp8 KV cache: the fp8_kv tile wherever it applies (sm80's byte tiles read the cache at
    // 1.0-1.1 TB/s, H100 B 32 decode; sm80_takes_decode's measurements are the 16-bit tiles').
    if (pb.kv_fp8) return Kernel::sm90;
    if (!FA4_SM90_DECODE && sm90_fills_device(pb, dl)) return Kernel::sm90;
    if (FA4_SM90_DECODE && !sm80_takes_decode(pb, dl)) return Kernel::sm90;
  }
  return pb.dtype == DType::float32 ? Kernel::simt : Kernel::sm80;
}

// The head-dim pair of the sm80 instance that runs (dqk, dv): each dim padded up to 64 / 128 /
// 192 / 256 (zero-filled loads, guarded stores), then to the instances that exist: (192, <= 128)
// has its own, everything else runs on the square instance of the larger dim.
void sm80_dims(const Problem& pb, Plan& pl) {
  auto pad = [](int64_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : d <= 192 ? 192 : 256; };
  const int pq = pad(pb.dqk), pv = pad(pb.dv);
  if (pq == 192 && pv <= 128) {
    pl.dqk = 192, pl.dv = 128;
  } else {
    pl.dqk = pl.dv = std::max(pq, pv);
  }
}

// The tile decomposition, from pl.m and pl.pack_gqa: rows per (batch, grid head), grid x / y.
// Varlen q: the kernels walk the tiles of all sequences back to back (find_varlen_tile), so
// grid.x needs sum_b ceil(rows_b / m) <= ceil(total rows / m) + batch CTAs -- not
// batch x ceil(max rows / m), which for 64 sequences was 64x the CTAs, nearly all exiting at once.
void decompose(const Problem& pb, Plan& pl) {
  pl.rows = pl.pack_gqa ? pb.max_sq * pb.group : pb.max_sq;
  pl.rows_total = pb.varlen_q ? pb.p->q.shape[0] : pb.batch * pb.sq_dense;
  pl.varlen_tiles = pb.varlen_q;
  pl.grid.y = pl.pack_gqa ? pb.hkv : pb.hq;
  if (pl.varlen_tiles) {
    const int64_t rows_all = pl.pack_gqa ? pl.rows_total * pb.group : pl.rows_total;
    pl.grid.x = rows_all > 0 ? (rows_all + pl.m - 1) / pl.m + pb.batch : 0;
  } else {
    pl.grid.x = (pl.rows + pl.m - 1) / pl.m;
  }
}

// grid.z per split: batch, or 1 with varlen tiles (the batch is walked in grid.x).
int64_t z_per_split(const Problem& pb, const Plan& pl) { return pl.varlen_tiles ? 1 : pb.batch; }

// The split count (forced, or the heuristic over the unsplit grid's CTAs and `slots` resident
// CTAs), clamped so grid.z stays within 65535, and the fp32 partials it needs.
// (tiles > 0: the splits take whole key tiles of the longest sequence's `tiles`, core/splits.h.)
void plan_splits(const Problem& pb, const DeviceLimits& dl, int64_t slots_per_sm, int64_t max_splits, Plan& pl,
                 int64_t tiles = 0) {
  const int64_t zs = z_per_split(pb, pl);
  // An unknown device has no slots to fill: no heuristic split.
  const int64_t slots = dl.known ? dl.sms * slots_per_sm : 0;
  pl.splits = core::choose_num_splits({.units = zs * pl.grid.y * pl.grid.x,
                                       .slots = slots,
                                       .max_splits = max_splits,
                                       .requested = pb.p->num_splits,
                                       .tiles = tiles});
  if (zs > 0) pl.splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(pl.splits, 65535 / zs)));
  pl.grid.z = zs * pl.splits;
  // The partials: splits x rows x Hq x (Dv + 1) fp32. A forced split count on a problem claimed
  // beyond any memory (broadcast q, an output of ~2^60 bytes) made this product wrap size_t to
  // a small buffer the kernels would overrun; such a call runs unsplit (the same result).
  if (pl.splits > 1) {
    int64_t bytes = 0;
    if (core::checked_mul(pl.splits, pl.rows_total, &bytes) && core::checked_mul(bytes, pb.hq, &bytes) &&
        core::checked_mul(bytes, pl.dv + 1, &bytes) && core::checked_mul(bytes, int64_t{sizeof(float)}, &bytes)) {
      pl.workspace = static_cast<size_t>(bytes);
    } else {
      pl.splits = 1;
      pl.grid.z = zs;
    }
  }
}

// Resident sm80 CTAs per SM: by registers (255 per thread for prefill / compact tiles, 128 for
// the decode tile, from the ptxas reports of the instances) and by shared memory (+ 1 KB the
// runtime reserves per block).
int sm80_ctas_per_sm(const DeviceLimits& dl, const sm80::TileCfg& c, int smem, bool decode) {
  const int threads = 32 * c.warps_m * c.warps_n;
  const int regs = decode ? 128 : 255;
  const int by_regs = 65536 / (threads * ((regs + 7) / 8 * 8));
  const int by_smem = dl.smem_per_sm / (smem + 1024);
  return std::max(1, std::min(by_regs, by_smem));
}

Plan plan_sm80(const Problem& pb, const DeviceLimits& dl) {
  Plan pl;
  pl.kernel = Kernel::sm80;
  sm80_dims(pb, pl);
  const int dqk = pl.dqk, dv = pl.dv;
  const sm80::Fp8 fp8 = fp8_mode(pb);
  const sm80::TileCfg pre = sm80::prefill_cfg(dqk, dv), dec = sm80::decode_cfg(dqk, dv);
  auto fits = [&](const sm80::TileCfg& c) { return !dl.known || sm80::smem_bytes(c, dqk, dv, fp8) <= dl.smem_optin; };
  // Decode tile for short query tiles (PackGQA rows), prefill tile otherwise; each falls back to
  // the other where its shared memory does not fit the device's opt-in, and both to the compact
  // tile where the dims have one (GPUs with 99 KB per block, sm_86 / sm_89, at D = 192 / 256;
  // without it the decode tile stays, and cuda_check refuses what does not fit). The fp8
  // instances have no compact tile (their byte ring exceeds 99 KB at D = 192 / 256 anyway).
  const bool short_rows = (pb.group > 1 && pb.max_sq < pre.m ? pb.max_sq * pb.group : pb.max_sq) <= dec.m;
  const sm80::Tile last =
      sm80::has_compact(dqk, dv) && fp8 == sm80::Fp8::none ? sm80::Tile::compact : sm80::Tile::decode;
  if (short_rows)
    pl.sm80_tile = fits(dec) ? sm80::Tile::decode : fits(pre) ? sm80::Tile::prefill : last;
  else
    pl.sm80_tile = fits(pre) ? sm80::Tile::prefill : fits(dec) ? sm80::Tile::decode : last;
  const sm80::TileCfg c = sm80::tile_cfg(pl.sm80_tile, dqk, dv);
  pl.sm80_fp8 = fp8;
  pl.smem = sm80::smem_bytes(c, dqk, dv, fp8);
  pl.m = c.m;
  pl.n = c.n;
  // PackGQA when a query tile would be mostly empty otherwise (decode, short chunks).
  pl.pack_gqa = pb.group > 1 && pb.max_sq < c.m;
  decompose(pb, pl);
  const int64_t n_blocks = (pb.max_sk + c.n - 1) / c.n;
  // >= 2 key tiles per split.
  plan_splits(pb, dl, sm80_ctas_per_sm(dl, c, pl.smem, pl.sm80_tile == sm80::Tile::decode), n_blocks / 2, pl);
  return pl;
}

// float32: the SIMT kernel. One warp per tile row, kF32Rows rows per CTA, kF32Keys-key tiles;
// partials use the actual Dv as their row stride.
Plan plan_simt(const Problem& pb, const DeviceLimits& dl) {
  Plan pl;
  pl.kernel = Kernel::simt;
  pl.dqk = static_cast<int>(pb.dqk);
  pl.dv = static_cast<int>(pb.dv);
  pl.m = simt::kF32Rows;
  pl.n = simt::kF32Keys;
  pl.smem = simt::fwd_f32_smem_bytes(pl.dqk, pl.dv);
  pl.pack_gqa = pb.group > 1 && pb.max_sq < pl.m;
  decompose(pb, pl);
  // Resident CTAs per SM: 2048 threads, registers (<= 64 per thread at 256 threads), shared
  // memory. The heuristic shares out 128-key blocks, >= 2 per split (so a split keeps >= 256
  // keys); the kernel then divides its 32-key tiles among the chosen splits.
  const int by_smem = dl.smem_per_sm / (pl.smem + 1024);
  const int per_sm = std::max(1, std::min({2048 / simt::kF32Threads, 65536 / (simt::kF32Threads * 64), by_smem}));
  plan_splits(pb, dl, per_sm, (pb.max_sk + 127) / 128 / 2, pl);
  return pl;
}

}  // namespace

int64_t static_makespan(const TileSchedule& s, int64_t ctas, const std::vector<int64_t>& cost_x) {
  if (ctas <= 0 || s.total() <= 0 || static_cast<int64_t>(cost_x.size()) != s.gx) return 0;
  std::vector<int64_t> load(static_cast<size_t>(ctas), 0);
  // Tiles in the order of TileSchedule::coords (sections of (y, z) pairs, x slowest inside),
  // dealt as tile_for deals them: tile t to position t % ctas of round t / ctas.
  const int64_t pairs = s.gy * s.gz;
  int64_t r = 0, b = 0;
  for (int64_t first = 0; first < pairs; first += s.section) {
    const int64_t here = std::min(s.section, pairs - first);
    for (int64_t x = 0; x < s.gx; ++x) {
      for (int64_t k = 0; k < here; ++k) {
        load[static_cast<size_t>(s.snake != 0 && (r & 1) != 0 ? ctas - 1 - b : b)] += cost_x[static_cast<size_t>(x)];
        if (++b == ctas) b = 0, ++r;
      }
    }
  }
  return *std::max_element(load.begin(), load.end());
}

namespace {

// The order of a persistent launch on short masked dense sequences (<= kMaxPersistentMaskedTiles
// query tiles each), where a CTA runs only ~8-25 tiles and the static round robin's imbalance is
// what the last CTAs run alone: measured on the H200 (bench/sm90_trace.py, 2026-12-02) the
// per-CTA key tiles of the L2-sized sections spread 9-21 % above their mean (D 64 / 128 / 256,
// S 1k-2k causal) and 6-15 % of the consumers' time idled at the end -- spreads this model
// reproduces exactly. Among the sections no larger than the L2-sized one (it, and the divisors
// of the CTA count: a round then deals whole x-values of a section's pairs, so the heavy and the
// light tiles of a section meet the same CTAs in turn), straight or snaking, it takes the order
// with the smallest predicted makespan (ties: the L2-sized round robin, then larger sections).
// A tile costs its key tiles + 2: ~3 us of prologue, epilogue and hand-off per tile, ~2 key tiles
// at D 128 (the same trace). Predicted: 1.05-1.18x of an even split -> 1.01-1.03x.
// The model costs O(tiles) per candidate, so it runs up to kMaxBalancedTiles tiles (32 rounds of
// a 132-SM GPU are past where a round's imbalance matters), and its choice is remembered per
// shape (a small per-thread memo: the same shapes recur call after call).
constexpr int64_t kMaxBalancedTiles = int64_t{1} << 13;
constexpr int64_t kTileFixedCost = 2;

// lpt_l2_section > 0 (FA4_SM90_LPT_SECTIONS): the schedule is the global snake of long masked
// sequences, and an L2-sized (<= lpt_l2_section) divisor section replaces it where the model puts
// it within 2 % of an even split: the global order balances, but every pair's K / V is in flight
// at once (H200 A/B, 2026-12-02: causal S 4k +8.4 % at D 128 (section 11), +3.8 % at D 64; at
// 8k-16k no section balances within 2 % and the order stays global).
void balance_static_order(const Problem& pb, Plan& pl, int64_t lpt_l2_section = 0) {
  TileSchedule& s = pl.sched;
  const int64_t total = s.total(), ctas = pl.ctas, pairs = s.gy * s.gz;
  if (total > kMaxBalancedTiles || total <= ctas || pairs <= 0) return;
  // Cost of query tile x: its key tiles under the mask (the sequences are dense: one length).
  const core::SeqMask sm{pb.mask, pb.max_sq, pb.max_sk};
  std::vector<int64_t> cost(static_cast<size_t>(s.gx));
  for (int64_t x = 0; x < s.gx; ++x) {
    const int64_t m_block = pb.mask.right >= 0 ? s.gx - 1 - x : x;  // as query_tile (seq_info.cuh) takes it
    const int64_t i0 = m_block * pl.m, i1 = std::min(i0 + pl.m, pb.max_sq);
    int64_t lo = 0, hi = 0;
    if (i1 > i0) sm.key_range(i0, i1, &lo, &hi);
    lo = std::min(lo, pb.max_sk), hi = std::min(hi, pb.max_sk);
    const int64_t keys = hi > lo ? (hi + pl.n - 1) / pl.n - lo / pl.n : 0;
    cost[static_cast<size_t>(x)] = keys + kTileFixedCost;
  }
  struct Memo {  // (cost.size() is the schedule's gx; an unused entry's cost is empty)
    int64_t pairs = 0, ctas = 0, section = 0, lpt = 0;
    std::vector<int64_t> cost;
    int64_t best_section = 0;
    int32_t best_snake = 0;
  };
  thread_local Memo memo[8];
  thread_local unsigned next = 0;
  for (const Memo& m : memo) {
    if (m.pairs == pairs && m.ctas == ctas && m.section == s.section && m.lpt == lpt_l2_section && m.cost == cost) {
      s.section = m.best_section, s.snake = m.best_snake;
      return;
    }
  }
  Memo& m = memo[next++ % 8];
  m.pairs = pairs, m.ctas = ctas, m.section = s.section, m.lpt = lpt_l2_section, m.cost = cost;
  TileSchedule best = s;
  int64_t best_span = static_makespan(s, ctas, cost);
  if (lpt_l2_section > 0) {
    int64_t work = 0;
    for (int64_t c : cost) work += c * pairs;
    best_span = static_cast<int64_t>(1.02 * static_cast<double>(work) / static_cast<double>(ctas)) + 1;
  }
  for (int64_t d = std::min(lpt_l2_section > 0 ? lpt_l2_section : s.section, ctas); d >= 1; --d) {
    if (ctas % d != 0) continue;
    for (int32_t snake = 0; snake < 2; ++snake) {
      TileSchedule c = s;
      c.section = d, c.snake = snake;
      const int64_t span = static_makespan(c, ctas, cost);
      if (span < best_span) best = c, best_span = span;
    }
  }
  s = best;
  m.best_section = s.section, m.best_snake = s.snake;
}

// The persistent schedule of the sm90 kernel (common/tile_schedule.h): one CTA per SM at most.
//   - No causal / windowed mask: every tile costs the same; one head's tiles run side by side
//     (section 1), sharing its K / V in L2.
//   - Masked, dense, more than kMaxPersistentMaskedTiles query tiles per sequence
//     (FA4_SM90_MASKED_LPT): all tiles in one heaviest-first order, CTAs snaking.
//     bench/schedule_model.py (tile cost = its key tiles + 1) puts that within 0.3 % of an even
//     split at S = 8k; measured (H200, 545e84f, against L2 sections / one CTA per tile): +2-11 %
//     at D = 64 / 256 S = 8k-16k, -2 % at D = 128 S = 8k.
//   - Masked, dense, short (<= kMaxPersistentMaskedTiles tiles per sequence): L2-sized sections
//     of (head, batch) pairs, heaviest first within each: with every pair in flight at once
//     (global order) K / V spill the L2 and the kernel ran 11-14 % slower at S = 1k.
//   - Masked varlen: tiles are not sorted by cost across sequences, so more than
//     kMaxPersistentMaskedTiles of them launch one CTA per tile (the hardware balances), in
//     L2-sized sections of the (head, batch) pairs whose K / V fit half the L2.
//   - FA4_SM90_DYNAMIC, instances with the dynamic walk (D > 64): both kinds of long masked
//     problems above run persistent instead, each CTA claiming its next tile from a counter (the
//     balance of one CTA per tile without its per-tile launch and prologue); long dense ones in
//     two phases (heavy halves in L2-sized sections, then the light halves globally).
constexpr int64_t kMaxPersistentMaskedTiles = 16;
// The balanced walk (FA4_SM90_BALANCED, common/tile_schedule.h balanced_n): the launch runs the
// balanced instance (Tile::balanced), which deals the whole rounds as before and the last round's
// R tiles in equal shares of their key tiles -- unmasked dense D 128 problems without splits,
// whose tiles all have the same key tiles, where the last round is partial (0 < R < ctas). Each
// share is at least kMinShareKeyTiles key tiles (a piece costs a tile's prologue and epilogue)
// and a tile has at most kMaxPieces pieces; every share is non-empty. The pieces' register
// states go to the workspace, after what is there.
constexpr int64_t kMinShareKeyTiles = 4, kMaxPieces = 4;
#ifndef FA4_SM90_BALANCED_WHOLE_TILES
#define FA4_SM90_BALANCED_WHOLE_TILES 0
#endif
void plan_balanced(const Problem& pb, const DeviceLimits& dl, Plan& pl) {
  const AttentionParams& p = *pb.p;
  const int64_t total = pl.sched.total(), ctas = pl.ctas;
  const int64_t n = pl.n > 0 ? (pb.max_sk + pl.n - 1) / pl.n : 0;
  const int64_t rem = ctas > 0 ? total % ctas : 0;
  if (!sm90::balanced_walk(pl.dqk, pl.dv, sm90::Tile::balanced) || pl.sm90_tile != sm90::Tile::standard ||
      pl.sched.dynamic != 0 || pl.splits != 1 || pl.pack_gqa || pl.sm90_gather || pl.sm90_solo || pl.sm90_one_q ||
      pb.varlen_q || pb.kv != core::KvLayout::dense || p.seqused_k.present() || p.causal || p.window_left >= 0 ||
      p.window_right >= 0 || p.chunk_size > 0 || n < 1 || ctas <= 1 || ctas != std::min<int64_t>(total, dl.sms) ||
      rem == 0 || rem * n < kMinShareKeyTiles * ctas || rem * kMaxPieces < ctas ||
      total * n >= (int64_t{1} << 31) || ctas * ctas * n >= (int64_t{1} << 31))
    return;  // (the walk's arithmetic is 32-bit: TileSchedule::share_begin, share_of)
  const int consumers = sm90::tile_cfg(pl.dqk, pl.dv, sm90::Tile::balanced).consumers;
  // [2 slots per CTA][consumer][Dv / 2 O registers + m, l of 2 row halves][128 threads]
  const size_t state = static_cast<size_t>(ctas) * 2 * consumers * (pl.dv / 2 + 4) * 128 * sizeof(float);
  pl.sm90_tile = sm90::Tile::balanced;
  pl.smem = sm90::smem_bytes(pl.dqk, pl.dv, sm90::Tile::balanced);
  // (FA4_SM90_BALANCED_WHOLE_TILES, an A/B build: the balanced instance on the whole-tile walk,
  // which measures what the instance itself costs)
  if (FA4_SM90_BALANCED_WHOLE_TILES) return;
  pl.sched.balanced_n = n;
  pl.piece_state_offset = (pl.workspace + 255) / 256 * 256;
  pl.workspace = pl.piece_state_offset + state;
}
void schedule_sm90(const Problem& pb, const DeviceLimits& dl, Plan& pl) {
  pl.sched.gx = pl.grid.x, pl.sched.gy = pl.grid.y, pl.sched.gz = pl.grid.z;
  pl.sched.section = 1;
  const bool masked = masked_problem(pb);
  // Global heaviest-first (all (head, batch) pairs one section, CTAs snaking) balances long
  // masked sequences best; up to kMaxPersistentMaskedTiles query tiles per sequence the L2-sized
  // sections win instead: K / V of every pair in flight at once spill the L2 (H200, 545e84f,
  // causal S = 1k: global 331 / 347 TFLOP/s vs sections 371 / 403 at D = 128 / 256; at S = 8k-16k
  // global wins at D = 64 / 256 by 2-11 %: docs/perf/sm90-notes.md).
  const bool lpt = FA4_SM90_MASKED_LPT && masked && !pb.varlen_q && pl.grid.x > kMaxPersistentMaskedTiles;
  const int64_t l2 = dl.l2_bytes > 0 ? dl.l2_bytes : (int64_t{40} << 20);
  const int64_t kv_bytes = std::max<int64_t>(1, pb.max_sk * (pl.dqk + pl.dv) * sm90::kv_cache_bytes(pl.sm90_tile));  // one KV head, one sequence
  const int64_t pairs = pl.grid.y * pl.grid.z;
  // (a pair is one query head, or with PackGQA one kv head: group pairs share K / V)
  const int64_t l2_section =
      std::clamp<int64_t>(l2 / 2 / kv_bytes * (pl.pack_gqa ? 1 : pb.group), 1, std::max<int64_t>(pairs, 1));
  if (lpt) {
    pl.sched.section = std::max<int64_t>(pairs, 1);
    pl.sched.snake = 1;
  } else if (masked) {
    pl.sched.section = l2_section;
  }
  const int64_t total = pl.sched.total();
  const bool persistent =
      FA4_SM90_PERSISTENT && dl.sms > 0 && (!masked || lpt || pl.grid.x <= kMaxPersistentMaskedTiles);
  pl.ctas = persistent ? std::min<int64_t>(total, dl.sms) : total;
  if (FA4_SM90_BALANCED_SECTIONS && masked && !lpt && persistent && !pb.varlen_q) balance_static_order(pb, pl);
  if (FA4_SM90_LPT_SECTIONS && lpt && persistent) balance_static_order(pb, pl, l2_section);
  // The dynamic walk (sm90 fwd_producer.cuh), on the instances that have it, for the masked
  // problems no static order balances: varlen ones past kMaxPersistentMaskedTiles tiles (their
  // costs are not known on the host) and long dense ones left on the global snake (no L2-sized
  // section balances them; where one does, it beat the dynamic walk by 1.7 % at D 128 causal 4k).
  // Its counters are 32-bit.
  // (FA4_SM90_DYNAMIC_ALL_MASKED, an A/B switch, default 0: every masked problem of such an
  // instance walks dynamically, short dense ones too, the static orders above left unused.)
  // (Not the gather instances: their four producer warps walk statically, sm90/fwd_gather.cuh.)
  const bool dynamic = FA4_SM90_PERSISTENT && sm90::dynamic_walk(static_cast<int>(pl.dqk), pl.sm90_tile) &&
                       !pl.sm90_gather && masked && dl.sms > 0 &&
                       total + dl.sms < (int64_t{1} << 31) &&
                       (FA4_SM90_DYNAMIC_ALL_MASKED ||
                        (pl.grid.x > kMaxPersistentMaskedTiles && (pb.varlen_q || pl.sched.section == pairs)));
  if (dynamic) {
    // Long dense: the heavy 65 % (FA4_SM90_HEAVY_PCT) of every sequence's query tiles in L2-sized
    // sections, then the light rest of every pair (common/tile_schedule.h). Varlen: L2-sized sections of heads (each
    // sequence's tiles heaviest first, query_tile), the counter balancing what the order cannot.
    // Same-run A/B against the static walk (H200, docs/perf/h200-2026-12-03b-session.md): causal
    // D 128 8k / 16k +4.5 / +2.4 %, D 256 4k / 8k / 16k +2.6 / +1.7 / +0.4 %; varlen causal
    // D 128 (one CTA per tile before) S 256 / 1k / 4k +62 / +22 / +6 %.
    pl.sched.section = l2_section, pl.sched.snake = 0;
    pl.sched.heavy_x = pb.varlen_q ? 0 : pl.grid.x * FA4_SM90_HEAVY_PCT / 100;
    pl.sched.dynamic = 1;
    pl.ctas = std::min<int64_t>(total, dl.sms);
  }
  plan_balanced(pb, dl, pl);
}

// sm90 (src/cuda/sm90): tiles of 64 x consumers query rows x the config's keys, persistent CTAs;
// with FA4_SM90_DECODE PackGQA (sm90_packs) and split-KV: one CTA per SM, >= 2 key tiles per
// split, the split count from the shared heuristic (core/splits.h) over the unsplit tiles.
Plan plan_sm90(const Problem& pb, const DeviceLimits& dl) {
  Plan pl;
  pl.kernel = Kernel::sm90;
  sm90::DimPair d{};
  sm90::padded_dims(static_cast<int>(pb.dqk), static_cast<int>(pb.dv), &d);
  pl.dqk = d.dqk, pl.dv = d.dv;
  // The tile's rows and keys, then the decomposition and the split count that follow from them.
  auto plan_tile = [&](sm90::Tile t) {
    pl.sm90_tile = t;
    pl.m = sm90::tile_cfg(d.dqk, d.dv, t).block_m();
    pl.n = sm90::tile_cfg(d.dqk, d.dv, t).block_n;
    pl.smem = sm90::smem_bytes(d.dqk, d.dv, t);
    pl.pack_gqa = sm90_packs(pb, pl.m);
    decompose(pb, pl);
    if (sm90::is_fp8_tile(t)) {
      plan_splits(pb, dl, 1, 1, pl);  // (prefill: never split; sm90_supports refused a forced count)
    } else if (FA4_SM90_DECODE) {
      const int64_t tiles = (pb.max_sk + pl.n - 1) / pl.n;
      plan_splits(pb, dl, 1, tiles / 2, pl, FA4_SM90_TILE_SPLITS ? tiles : 0);
    } else {
      pl.grid.z = z_per_split(pb, pl);
    }
  };
  plan_tile(sm90_tile(pb, d));
  // A split-KV launch runs the split_kv instance of its dims, which merges the splits
  // (sm90::fused_merge; cuda/backend.cpp then launches no combine kernel) where it measured
  // faster (sm90::split_kv_pays: D 64 / 128, D 256 at <= 8 rows). Its tile may differ from the one chosen (D 64's standard
  // tile has three consumers, D 256's long_keys tile 80 keys), so the problem is planned again
  // on it, kept only if it still splits; in a paged cache only where its key block fits the pages,
  // or (FA4_SM90_PAGED_GATHER) where a gather instance of it exists (sm90::has_gather_instance).
  const sm90::Tile chosen = pl.sm90_tile;
  const bool gather = sm90_gathers(pb, d, chosen);
  // (Not the fp8 tiles: the split_kv tile is a 16-bit one; an fp8_kv split launch takes the
  // combine kernel.)
  if (FA4_SM90_FUSED_COMBINE && pl.splits > 1 && chosen != sm90::Tile::fp8_kv && !sm90::is_fp8_tile(chosen) &&
      sm90::has_tile(sm90::Tile::split_kv, d.dqk, d.dv) &&
      sm90::split_kv_pays(d.dqk, pl.rows) &&
      (gather ? sm90::has_gather_instance(d.dqk, d.dv, sm90::Tile::split_kv)
              : pb.kv != core::KvLayout::paged ||
                    sm90_pages_fit(pb.page_size, sm90::tile_cfg(d.dqk, d.dv, sm90::Tile::split_kv).block_n))) {
    plan_tile(sm90::Tile::split_kv);
    if (pl.splits <= 1) plan_tile(chosen);
  }
  // The fp8 tile's V^T workspace, after the split partials (none: it does not split); none where
  // the tile transposes V itself (FA4_SM90_FP8_VT_IN_KERNEL).
  if (sm90::is_fp8_tile(pl.sm90_tile) && !sm90::fp8_vt_in_kernel(d.dqk, d.dv, pl.sm90_tile)) {
    sm90_fp8_vt(pb, d, pl.sm90_tile, &pl.fp8_vt);  // (sm90_supports checked that it fits)
    pl.fp8_vt_offset = (pl.workspace + 255) / 256 * 256;
    pl.workspace = pl.fp8_vt_offset + static_cast<size_t>(pl.fp8_vt.bytes);
  }
  // Dense q of <= 64 tile rows per (sequence, grid head): only consumer 0 has rows -- it runs
  // alone, or both consumers split the key tiles of its Q tile (the 1Q tile, FA4_SM90_ONE_Q).
  const bool one_q_tile = !pl.varlen_tiles && pl.rows <= sm90::kRowsPerConsumer;
  pl.sm90_one_q = one_q_tile && sm90::one_q_capable(pl.sm90_tile, d.dqk, d.dv);
  pl.sm90_solo = one_q_tile && sm90::solo_capable(pl.sm90_tile) && !pl.sm90_one_q;
  // (FA4_SM90_DECODE_KEYS_M) Decode-sized fp8_kv calls on the keys-on-M kernel (sm90/decode_kv.h).
  pl.sm90_decode_keys_m = pl.sm90_tile == sm90::Tile::fp8_kv && keys_m_takes(pb, d, pl.splits);
  // Its grid is (batch, hkv, splits) whatever the fp8_kv tile's decomposition (which packs only
  // groups dividing 64; this kernel takes the others too), and its
  // CTAs (5 warps, 99 KB of shared memory) run two per SM: the split heuristic fills twice the
  // slots (B 4 decode 32 / 8: 7 splits, not the fp8_kv tile's 4; B 32 fills them unsplit).
  if (pl.sm90_decode_keys_m && FA4_SM90_DECODE) {
    const int64_t tiles = (pb.max_sk + pl.n - 1) / pl.n;
    pl.grid.y = pb.hkv, pl.grid.x = 1;
    pl.workspace = 0;  // (the fp8_kv tile's partials, sized again; it has no other workspace)
    plan_splits(pb, dl, sm90::kDecodeKeysMCtasPerSm, tiles / 2, pl, FA4_SM90_TILE_SPLITS ? tiles : 0);
  }
  pl.sm90_gather = gather;
  schedule_sm90(pb, dl, pl);
  return pl;
}

}  // namespace

Plan make_plan(const Problem& pb, const DeviceLimits& dl) {
  if (is_fp8_all(pb) && !preference_applies(pb, dl)) return plan_fp8_all(pb, dl);
  switch (choose_kernel(pb, dl)) {
    case Kernel::sm90: return plan_sm90(pb, dl);
    case Kernel::simt: return plan_simt(pb, dl);
    case Kernel::sm80: break;
  }
  return plan_sm80(pb, dl);
}

}  // namespace fa4::cuda
