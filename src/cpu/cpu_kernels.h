// The inner kernels of the cpu backend, behind a table of function pointers so one driver
// (cpu_backend.cpp) runs on any CPU. Tables, best first (cpu_isa.cpp picks one per process from
// CPUID, the OS's saved register state and FA4_CPU_ISA=amx|avx512|avx2|generic):
//   amx     AMX-BF16 tiles for the 16-bit products (cpu_kernels_amx.cpp), AVX-512 for the rest
//   avx512  AVX-512 F/BW/VL (+BF16 vdpbf16ps for the 16-bit products) (cpu_kernels_avx512.cpp)
//   avx2    AVX2 + FMA + F16C, fp32 products (cpu_kernels_avx2.cpp)
//   generic portable C++ (cpu_kernels_generic.cpp)
//
// Tile layout: everything the kernels touch is "transposed", queries along the fast axis.
// One tile holds mp packed query rows (mp a multiple of 8 = one AVX2 vector of fp32):
//   qt [Dqk][mp]   Q^T, prescaled (scale, descales)
//   st [nk][mp]    S^T = K Q^T, then P^T in place after the softmax step
//   ot [Dv][mp]    O^T, unnormalized accumulator
//   m, l, alpha    [mp] running max (natural units), running sum, last rescale factor
// K and V keep their natural row-major form ([key][dim]; converted to contiguous fp32 per tile
// for these kernels, read in place by the row-major ones) and are addressed through one pointer
// per key row, so paged and strided layouts need no special case. With queries on the vector
// axis, K and V elements are broadcast (one load-op each) and the softmax reduces over keys
// with plain vertical vector ops — no horizontal sums, no transposes of K or V.
#pragma once

#include <cstdint>

#include "fa4/tensor.h"

namespace fa4::core::cpu {

// Scores at or beyond this magnitude (and NaN, +-inf) send their row to the fp64 path (the top
// of cpu_backend.cpp says why 2^16): every kernel that flags extreme rows uses this bound, and
// the softmax steps may rely on |score| < kExtremeScore for the rows they compute in fp32.
constexpr float kExtremeScore = 0x1p16f;

// Every kernel works on m query rows (a multiple of 8) starting at the pointers it is given,
// inside tiles whose row stride is mp: partial tiles pass only the rows that can see any key of
// the tile (the others would be fully masked, an exact no-op).

// One online-softmax step over a tile of S^T.
struct SoftmaxStep {
  float* st;       // [nk][mp] in: scores (natural units, before softcap), out: P^T
  int64_t nk, mp, m;
  // Partial tiles: key n (0-based in the tile) is visible to row m iff lo[m] <= n < hi[m].
  // nullptr = every element visible (full tile).
  const int32_t* lo;
  const int32_t* hi;
  float softcap_in;   // 1 / softcap (at most FLT_MAX); 0 = no softcap
  float softcap_out;  // softcap
  float* m_run;       // [mp] running max, natural units (-inf before the first key)
  float* l_run;       // [mp] running sum of exp(s - m) = 2^((s - m) log2 e)
  float* alpha;       // [mp] out: exp(m_old - m_new), the factor O must be rescaled by
  // 16-bit kernels (softmax_avx512 only): when set, P^T goes straight to the pv panel
  // pp [terms][nk_p/2][m][2] (LowpKernels layout, rows nk..nk_p zero) instead of back into st,
  // saving a pass over the tile; pv is then called with st = nullptr.
  uint16_t* pp = nullptr;
  int terms = 1;
  // Raw scores (softmax_avx512 only; LowpKernels::raw_scores): st holds the products before
  // the fp32 factor `scale` (> 0), applied here, and redo (rows of this step, non-null) gets 1
  // for every row with a visible score (scaled, before softcap) that is NaN or of magnitude
  // >= kExtremeScore: the driver's extreme-row check, fused into the softmax passes.
  float scale = 1.0f;
  uint8_t* redo = nullptr;
  // When set (every table): *zero_p = 1 if some P of the step's rows is 0 (an exp that
  // underflowed, or a masked key), else left as it is. The driver's row-major path then tests V
  // for +-inf (p * inf = NaN where the exact product is inf), a test that costs as much as the
  // tile's P V where it runs on every tile.
  uint8_t* zero_p = nullptr;
  // softmax_avx512 only, full tiles without softcap (lo == nullptr, softcap_in == 0): the max
  // and min over the nk keys of each row's raw products ([m], LowpKernels::qk_max), so the step
  // skips its first pass over st.
  const float* raw_max = nullptr;
  const float* raw_min = nullptr;
  // softmax_avx512 only: the scores (and m_run, and the softcap factors) are in log2 units, s
  // log2(e) (Q^T prescaled by it): p = 2^(s - m) without a log2(e) multiply after the max.
  bool log2_units = false;
};

// 16-bit products on packed panels, fp32 accumulation: bf16 inputs (and fp8 e4m3, exact in
// bf16) as they are; fp16 as two bf16 terms x = hi + lo (exact: 11 significant bits = 8 + the
// rest), the products summed as hi*hi + hi*lo + lo*hi (relative error ~2^-16, below fp16's).
// P is rounded to bf16 for the second product (hi + lo for fp16), as the GPU kernels do.
// Packed layouts, bf16 bit patterns, T = terms (1 or 2), planes of one term after the other:
//   qv [T][dqk_p/2][mp][2]  Q^T in pairs of dims ("VNNI"), dqk_p = round_up(dqk, 32)
//   kb [T][nk_p][dqk_p]      K rows                       nk_p = round_up(n, 32)
//   vt [T][dv_p][nk_p]       V^T                          dv_p = round_up(dv, 16)
//   pp [T][nk_p/2][m][2]     P^T in pairs of keys (pv's own scratch)
// These are what the AMX tiles read: S^T = K Q^T has A = K (16 keys x 32 dims), B = Q^T pairs
// (16 dim pairs x 16 queries), C = 16 keys x 16 queries of st; O^T = V^T P^T has A = V^T (16
// dims x 32 keys), B = P^T pairs, C = 16 dims x 16 queries of ot. vdpbf16ps reads the same
// panels (a broadcast dword of K or V^T times one row of pairs), so both tables share the packers.
// The matrix units (and vdpbf16ps) treat bf16 subnormals as zero: the packers report a nonzero
// |x| < 2^-126 (kTiny) and the driver then runs that tile (or unit, for Q) in fp32.
struct LowpKernels {
  static constexpr int kTiny = 1, kNonFinite = 2;  // pack_* result bits
  int64_t key_tile;  // keys per tile the driver should use with these kernels (multiple of 32)
  // qv from qt [dqk][mp] (fp32, already in the scale the product should see), all mp rows.
  int (*pack_q)(const float* qt, int64_t mp, int64_t dqk, int terms, uint16_t* qv);
  // qv straight from n storage rows (unit dim stride) of dtype t times pow2 (a power of two, so
  // exact unless it leaves the normal range: reported as kTiny, or inf); rows n..mp are zero.
  int (*pack_q_rows)(const void* const* qrows, DType t, int64_t n, int64_t mp, int64_t dqk, float pow2, int terms,
                     uint16_t* qv);
  // kb / vt from n storage rows (unit dim stride) of dtype t; rows n..nk_p are zero.
  int (*pack_k)(const void* const* krows, DType t, int64_t n, int64_t dqk, int terms, uint16_t* kb);
  int (*pack_v)(const void* const* vrows, DType t, int64_t n, int64_t dv, int terms, uint16_t* vt);
  // st[n'][i] = scale * sum_d kb[n'][d] qv[d][i]  for i < m (m, qv and st offset by whole 16-row
  // blocks; row stride mp), n' < n; rows n..round_up(n, 16) of st may be overwritten. Returns
  // whether any of those scores is NaN or of magnitude >= kExtremeScore (the extreme-row check).
  // ld: the keys the panels were packed for (their nk_p, >= round_up(n, 32)): the first n keys
  // of a panel can be used alone (the diagonal tiles of causal masks).
  bool (*qk)(const uint16_t* qv, int64_t mp, int64_t m, int64_t dqk, const uint16_t* kb, int64_t ld, int64_t n,
             int terms, float scale, float* st);
  // ot[e][i] = alpha[i] ot[e][i] + sum_n vt[e][n] p[n][i],  p = bf16(st) (P^T, row stride mp), i < m,
  // e < dv_p (rows dv..dv_p of ot hold zeros); pp: scratch of nk_p * m * T uint32 (st == nullptr:
  // pp already holds P^T, written by the softmax step); vt packed for ld keys, as in qk.
  void (*pv)(const float* st, int64_t mp, int64_t m, int64_t n, const uint16_t* vt, int64_t ld, int64_t dv,
             int terms, const float* alpha, uint16_t* pp, float* ot);
  // Per-thread setup around a run of qk / pv calls (AMX: load and release the tile
  // configuration); nullptr = nothing to do.
  void (*begin)();
  void (*end)();
  // qk stores the unscaled products, checks nothing and returns false: the softmax step scales
  // them and flags extreme rows (SoftmaxStep::scale / redo), saving a pass over S^T.
  bool raw_scores = false;
  // Packed rows per query tile the driver should use with these kernels (0: its own default).
  int64_t tile_rows = 0;
  // qk of a raw_scores table that also returns, per row i < m, the max and min over the n keys
  // of its raw products (raw_max / raw_min [m]; n a multiple of 16): the softmax step's first
  // pass (SoftmaxStep::raw_max) folded into the product, on blocks still in L1. nullptr = none.
  void (*qk_max)(const uint16_t* qv, int64_t mp, int64_t m, int64_t dqk, const uint16_t* kb, int64_t ld, int64_t n,
                 int terms, float* st, float* raw_max, float* raw_min) = nullptr;
  // Lines the next qk / pv call of this thread pulls into L2 (prefetcht1), spread evenly over
  // its tile products: the driver names the panel the following product will read (V of this
  // key tile before qk, K of the next one before pv), which otherwise streams from L3 on the
  // first pass of its 32-row blocks (K / V panels of a head outgrow L2 at D 256). nullptr: none.
  void (*prefetch_next)(const void* p, int64_t bytes) = nullptr;
  // Kv heads whose K / V panels (both, all keys) exceed big_panel_bytes do not keep them in L2
  // from one query tile to the next: the driver then uses key tiles of big_key_tile keys and has
  // the next panel prefetched (prefetch_next). 0: never.
  int64_t big_panel_bytes = 0, big_key_tile = 0;
};

// fp32 products on packed fp32 panels (AVX-512; fp32 inputs, and 16-bit / fp8 inputs where the
// table has no 16-bit products for them). The K and V of a key tile are converted to fp32 once
// (per (batch, kv head, key tile) when several query tiles read them, like the 16-bit panels)
// into the layouts the micro-kernels stream: blocks of 8 keys (K) or 8 value dims (V), so the 8
// broadcasts of an inner step come from one 32-byte run of a contiguous panel:
//   kp [n8 / 8][dqk][8]   K, n8 = round_up(n, 8) keys (keys n .. n8 zero)
//   vp [dv8 / 8][ld][8]   V, dv8 = round_up(dv, 8) dims (dims dv .. dv8 zero), ld >= n keys per block
// The products are those of Kernels::qk / pv (Q^T and S^T / P^T / O^T as there, m a multiple of
// 16): S^T rows n .. round_up(n, 8) may be written, O^T rows dv .. dv8 get alpha * 0 + 0.
struct F32Panels {
  int64_t key_tile;   // keys per tile the driver should use (a multiple of 32)
  int64_t tile_rows;  // packed rows per query tile (0: the driver's default)
  // Rows (a multiple of 16) the driver runs through qk, softmax and pv before the next ones: S^T
  // of a strip stays in L1 from its product to its P V, and each strip computes only the keys
  // its own rows can see (causal diagonal tiles).
  int64_t strip_rows;
  static int64_t kp_elems(int64_t n, int64_t dqk) { return (n + 7) / 8 * 8 * dqk; }
  static int64_t vp_elems(int64_t ld, int64_t dv) { return (dv + 7) / 8 * 8 * ld; }
  // kp / vp from n storage rows (unit dim stride) of dtype t. pack_v returns
  // LowpKernels::kNonFinite when some V element is +-inf or NaN (the driver's exact P V), else 0.
  void (*pack_k)(const void* const* krows, DType t, int64_t n, int64_t dqk, float* kp);
  int (*pack_v)(const void* const* vrows, DType t, int64_t n, int64_t ld, int64_t dv, float* vp);
  //   st[n'][i] = sum_d kp[n'][d] qt[d][i]   for n' < n, i < m
  void (*qk)(const float* qt, int64_t mp, int64_t m, int64_t dqk, const float* kp, int64_t n, float* st);
  //   ot[e][i] = alpha[i] ot[e][i] + sum_{j < n} vp[e][j] pt[j][i]   for e < dv8, i < m
  void (*pv)(const float* pt, int64_t mp, int64_t m, int64_t n, const float* vp, int64_t ld, int64_t dv,
             const float* alpha, float* ot);
};

struct Kernels {
  const char* name;
  int64_t row_align;  // mp (rows of a transposed tile) is a multiple of this: 8 or 16 (one vector)
  // st[n][i] = sum_d krows[n][d] * qt[d][i]   for n < nk, i < m.
  void (*qk)(const float* qt, int64_t mp, int64_t m, int64_t d, const float* const* krows, int64_t nk, float* st);
  // ot[e][i] = alpha[i] * ot[e][i] + sum_n vrows[n][e] * pt[n][i]   for e < dv, i < m.
  void (*pv)(const float* pt, int64_t mp, int64_t m, int64_t nk, const float* const* vrows, int64_t dv,
             const float* alpha, float* ot);
  void (*softmax)(const SoftmaxStep& s);
  // Row-major variants for tiles of at most 8 query rows (decode, small GQA groups), reading K
  // and V straight from their storage (any floating dtype, rows with unit stride, dims multiple
  // of 8): each K/V element is loaded once and feeds all `rows` queries from registers, where
  // the transposed kernels above would spend one broadcast per element on 8 mostly padded rows.
  // nullptr in tables that do not have them.
  //   q [rows][d] prescaled queries;  st [nk][8] as above (rows >= `rows` get 0)
  void (*qk_rows)(const float* q, int64_t rows, int64_t d, const void* const* krows, DType t, int64_t nk,
                  float* st);
  //   o [rows][dv]:  o[r][e] = alpha[r] * o[r][e] + sum_n pt[n][r] * vrows[n][e]   (pt as st)
  void (*pv_rows)(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, DType t, int64_t dv,
                  const float* alpha, float* o);
  // dst[i] = (float) src[i * stride], i < n, for a floating storage dtype.
  void (*convert)(const void* src, DType t, int64_t stride, int64_t n, float* dst);
  // The 16-bit product kernels for bf16 / fp8 and for fp16 inputs; nullptr = the fp32 kernels
  // above (on converted rows) serve that dtype.
  const LowpKernels* lowp_bf16;
  const LowpKernels* lowp_f16;
  // Tile edges, vectorized (nullptr: the driver's scalar loops). Filling Q^T and emptying O^T
  // element by element (strided scalar stores, a dtype switch per output element) was ~20% of
  // a bf16 prefill on AMX at S = 2048 (perf, 2 threads).
  //   dst[j * ld_dst + i] = src[i * ld_src + j] * scale * (col_scale ? col_scale[j] : 1),
  //   i < nr, j < nc (a transpose; Q rows -> Q^T, O^T -> O rows times 1 / l per row).
  void (*transpose)(const float* src, int64_t ld_src, int64_t nr, int64_t nc, const float* col_scale, float scale,
                    float* dst, int64_t ld_dst) = nullptr;
  //   dst[e] = x[e] in dtype t (float32, float16, bfloat16: the rounding of store_f32), e < n.
  void (*store_row)(const float* x, int64_t n, DType t, void* dst) = nullptr;
  // The fp32 panel products (nullptr: qk / pv above on converted rows); they serve every dtype
  // that the 16-bit tables above do not.
  const F32Panels* f32p = nullptr;
  // softmax honours SoftmaxStep::redo on every step (scale 1 included), so the driver's
  // separate extreme-score pass can be left out (softmax_avx512; the other tables' softmax
  // ignores redo).
  bool softmax_flags_extreme = false;
  // O^T [dv][mp] (fp32) straight into 16-bit output rows (t: bfloat16 or float16; rows `step`
  // elements apart): dst[r * step + e] = t(ot[e * mp + r] * col_scale[r]) with store_f32's
  // rounding, r < rows, e < dv. transpose + store_row in one pass (nullptr: those two). Returns
  // whether any ot[e * mp + r] it read (e < dv, r < rows) is +-inf or NaN.
  bool (*transpose_store16)(const float* ot, int64_t mp, int64_t dv, int64_t rows, const float* col_scale, DType t,
                            void* dst, int64_t step) = nullptr;
};

const Kernels& generic_kernels();
#if defined(__x86_64__) || defined(_M_X64)
const Kernels& avx2_kernels();  // only call when the CPU has AVX2 and FMA (and F16C)
// Only call when the CPU has AVX-512 F/BW/VL/DQ (and AVX2 + FMA + F16C); bf16: it has
// AVX512_BF16 too (the 16-bit products then use vdpbf16ps).
const Kernels& avx512_kernels(bool bf16);
const LowpKernels& avx512_lowp();  // the packers (and vdpbf16ps products) the AMX table reuses
const Kernels& amx_kernels();     // only call after amx_usable() (cpu_isa.cpp)
// Pieces of the AVX-512 16-bit pv shared with the AMX one (AVX-512 BF16 only):
//   pp = P^T pairs from st [n][mp] (layout above; m a multiple of 16)
void pack_p_avx512(const float* st, int64_t mp, int64_t m, int64_t n, int terms, uint16_t* pp);
//   ot[e][i] *= alpha[i], e < rows, i < m (16-query blocks whose alpha are all 1 untouched)
void rescale_ot_avx512(float* ot, int64_t mp, int64_t m, int64_t rows, const float* alpha);
// Kernels::qk_rows / pv_rows on AVX-512 (cpu_rows_avx512.cpp): bf16 K / V with dims a multiple
// of 32 there, the AVX2 kernels for everything else.
void qk_rows_avx512(const float* q, int64_t rows, int64_t d, const void* const* krows, DType t, int64_t nk,
                    float* st);
void pv_rows_avx512(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, DType t, int64_t dv,
                    const float* alpha, float* o);
// The same on AVX512_BF16 with vdpbf16ps products for e4m3 and bf16 rows (cpu_rows_avx512.cpp
// says when they fall back to the fp32 ones): q.k uses them only where q is exactly bf16 (the
// driver then passes q x 2^e and scales the scores by the rest), P V rounds P to bf16.
void qk_rows_avx512bf16(const float* q, int64_t rows, int64_t d, const void* const* krows, DType t, int64_t nk,
                        float* st);
void pv_rows_avx512bf16(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, DType t, int64_t dv,
                        const float* alpha, float* o);
// Row-major units over several kv heads (decode, run_unit's touch pass): q rows [rows][d] (fp32,
// rows <= 8) as bf16 bits into qb, true where every element is exactly a normal bf16 or 0 and
// |q| <= 2^40 (the vdpbf16ps kernels' condition; d a multiple of 32, <= 512) -- then
// qk_rows_avx512bf16_q computes what qk_rows_avx512bf16 would from q (K rows of bf16 or e4m3),
// without converting q on every call.
bool rows_q_bf16_avx512(const float* q, int64_t rows, int64_t d, uint16_t* qb);
void qk_rows_avx512bf16_q(const uint16_t* qb, int64_t rows, int64_t d, const void* const* krows, DType t, int64_t nk,
                          float* st);
// pv_rows_avx512bf16 for V rows known to hold no bf16 subnormal (touch_rows_avx512 said so): no
// test per load, no O copy for the fp32 redo.
void pv_rows_avx512bf16_checked(const float* pt, int64_t rows, int64_t nk, const void* const* vrows, DType t,
                                int64_t dv, const float* alpha, float* o);
// The touch pass of a key tile over bf16 V rows: one demand load per line of the K rows k[h][t]
// (k_bytes each), h < nh, t < n, key-major (t outer) or head-major, and the V rows v[h][t] (v_bytes,
// a multiple of 64) read as vectors beside them and tested for bf16 subnormals: true when none.
// (Other rows take run_unit's touch_spans loop, cpu_backend.cpp.)
bool touch_rows_avx512(const void* const* const* k, const void* const* const* v, int nh, int64_t n, bool key_major,
                       int64_t k_bytes, int64_t v_bytes);
// Steady software prefetch for the row-major decode: the next qk_rows_avx512 call on this thread
// prefetches krows[0 .. n) (k_bytes each), a row per key it processes, and the next
// pv_rows_avx512 call vrows[0 .. n) the same way (each call then forgets its list). The arrays
// must live until those calls return. Decode reads each K / V byte once: without this the
// kernels' loads waited on memory (qk_rows / pv_rows stalled on their K / V loads).
void rows_prefetch_avx512(const void* const* krows, const void* const* vrows, int64_t n, int64_t k_bytes,
                          int64_t v_bytes);
#endif

// e4m3 byte -> fp32 for all 256 codes (NaN codes included).
const float* e4m3_lut();
// e4m3 magnitude (the byte's low 7 bits) -> the bf16 bits of its value (exact: 3 mantissa bits,
// exponents inside bf16's normal range, subnormals included; 0x7f -> a quiet NaN), 128 entries,
// 64-byte aligned: the table the AVX-512 row loader permutes from (cpu_rows_avx512.cpp). Both
// tables come from e4m3_to_f32 (core/numeric.h), the one definition of the format.
const uint16_t* e4m3_bf16_lut();

// The best table for this CPU (decided once per process; FA4_CPU_ISA=amx|avx512|avx2|generic
// caps it: a request for an ISA the CPU or OS lacks gets the best one below it).
const Kernels& best_kernels();

// AMX usable: CPUID has AMX-TILE + AMX-BF16, the OS saves the tile state (XCR0 bits 17, 18) and,
// on Linux, granted this process the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM,
// asked once per process, the first time this is called).
bool amx_usable();

}  // namespace fa4::core::cpu
