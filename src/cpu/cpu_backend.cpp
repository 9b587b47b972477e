// The cpu backend: tiled FlashAttention (online softmax, never the whole score matrix) on all
// cores with OpenMP, every feature of the Problem.
//
// Work decomposition. For each (batch b, kv head hk) the group = Hq/Hkv query heads that read
// that kv head are packed together (PackGQA): packed row r <-> (query position r / group,
// head hk * group + r % group), so one converted K/V tile feeds all of them and the mask bounds
// stay monotone in r. The packed rows are cut into query tiles of up to kTileRows rows; a work
// unit is (b, hk, query tile, split) and units run under dynamic scheduling, largest first
// (grouped per (b, hk), for the K/V panels' reuse in L2).
// Inside a unit the key range the tile can see (SeqMask::key_range, intersected with the
// split's share) is walked in aligned tiles of plan.tile_keys keys (32 for the fp32 kernels, the
// 16-bit kernels' own key_tile otherwise): empty tiles are skipped, full tiles are not masked,
// partial tiles mask per element. The 16-bit kernels read K / V as packed bf16 panels, packed
// once per (batch, kv head, key tile) before the units run when several query tiles share them.
// Kernels by ISA: cpu_kernels.h; which one runs: cpu_isa.cpp.
//
// Numerics: scores in natural units (Q prescaled by scale and descales only); the softmax
// multiplies by log2(e) after subtracting the row max, 2^((s - m) log2 e), so it needs exp2 only
// and no score that fits in fp32 overflows on the way (a log2(e) fold before the max turned
// finite scores near FLT_MAX into inf, and the row into NaN). fp32 accumulation; the final
// division by the row sum happens once per row. Split-KV units write normalized fp32 partials + lse to scratch
// and are merged by the combine code (cpu_merge.h). The sink enters split 0 only.
//
// fp8 KV cache (Problem::kv_fp8: 16-bit q, e4m3 K / V with per-head or per-token factors). The
// kernels read the e4m3 rows in place, as they read an all-fp8 problem's (every e4m3 value is
// exact in bf16 and fp32: the 16-bit panels, the fp32 panels and the row-major decode kernels
// convert them vectorized), and the factors are applied where the reference applies them, to
// the products (reference_row: scale * q.k * factor_k, e4m3 v * factor_v):
//   per (batch, kv head)  k factor folded into Q's prescale (qscale), v factor into the final
//                         1 / l of each row (finish), as the all-fp8 descales are;
//   per token             k factor j multiplies score column j (scale_keys) before the softmax
//                         and its extreme-score check, v factor j multiplies P column j after the
//                         softmax (the row sums l keep the unscaled weights) and before P V.
// So the exact e4m3 values meet fp32 factors once, in fp32, instead of e4m3 x factor being
// rounded to fp32 per element first (and that product, not exact in bf16, kept the 16-bit
// products away). The earlier build dequantized each tile's rows element by element into fp32
// rows: B = 4, Hq 32, Hkv 8, D 128, kv 16k decode ran 2x slower than the bf16 cache it halves
// (docs/perf/cpu.md). Non-finite factors: a per-token one turns its scores / weights into
// +-inf / NaN, which the extreme-score check or the non-finite O check sends to the fp64 row
// (reference_row); a per-head one sends all of the unit's rows there (finish).
//
// Scores beyond fp32's comfort. A visible fp32 score that is NaN, +-inf or of magnitude >=
// kExtremeScore (2^16, cpu_kernels.h) marks its row (flag_extreme_rows, or the softmax step's
// passes): the fp32 dot product or the prescaled query overflowed (|k| = 3e38, scale = 1e37 with
// D = 128: inf - inf = NaN), or an input is NaN / inf, or the logits are so large that fp32
// keeps only a few bits below the point (at 2^20 an fp32 logit is off by up to 2^-4: weights off
// by ~10 %, where a common offset of the row's logits should change nothing). Such a row is
// recomputed in fp64 by reference_row (src/reference) and gets exactly the reference's result:
// finite wherever the reference is, softcap / sinks / lse included, with lse = +-inf only where
// the true value is beyond fp32. Below 2^16 every fp32 score, max subtraction and sink fold is
// finite and within 2^-8 of exact (and the 16-bit softmax's fused exponent is exact enough:
// cpu_kernels_avx512.cpp); the check is one compare per score, and logits of 65536 do not occur
// in real models.
//
// V near FLT_MAX. The P V accumulator sum_j p_j v_j (p_j <= 1) is divided by l = sum_j p_j only
// in finish, so it reaches l * max |v|: with |v| near FLT_MAX it overflows to +-inf where the exact
// output (in the hull of V) is finite (fuzz finding new13). finish tests each unit's O tile once
// (flag_nonfinite_o_rows, outside the key loop) and sends rows whose fp32 O is not finite to the
// same fp64 path (reference_row), directly or through the split partials' redo flag; a split
// merge whose fp32 result is not finite (partials within rounding of FLT_MAX) does the same.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "core/backends.h"
#include "core/checked.h"
#include "core/element.h"
#include "core/splits.h"
#include "cpu/cpu_kernels.h"
#include "cpu/cpu_merge.h"

// In-call timing of the pieces (panels, unit setup, qk / softmax / pv, finish): rdtsc
// accumulators over all threads, printed to stderr at exit (cycles of the TSC). Only in builds
// with -DFA4_CPU_PROFILE=1 (e.g. cmake -DCMAKE_CXX_FLAGS=-DFA4_CPU_PROFILE=1); no code otherwise.
#if defined(FA4_CPU_PROFILE) && FA4_CPU_PROFILE && (defined(__x86_64__) || defined(_M_X64))
#include <x86intrin.h>

#include <cstdio>
namespace fa4::core::cpu {
namespace {
// kPrLoop (a unit's whole key loop) overlaps the tile pieces and is left out of the total, as
// are kPrPackK / kPrPackV (inside panels). kPrQk0 / kPrPv0: qk / pv of the units at row 0 of a
// kv head (the first to read its panels), the other units' in kPrQk / kPrPv.
enum ProfPiece { kPrPanels, kPrUnitSetup, kPrQpack, kPrQk, kPrSoftmax, kPrPv, kPrTileOther, kPrFinishT, kPrFinishStore, kPrQk0, kPrPv0, kPrFinishPre, kPrPackK, kPrPackV, kPrLoop, kPrN };
struct Prof {
  std::atomic<uint64_t> c[kPrN]{}, n[kPrN]{};
  ~Prof() {
    static const char* names[kPrN] = {"panels", "unit_setup", "q_pack", "qk", "softmax", "pv", "tile_other", "finish_T",
                                      "finish_store", "qk(r0=0)", "pv(r0=0)", "finish_pre", "(pack_k)", "(pack_v)", "(loop)"};
    uint64_t tot = 0;
    for (int i = 0; i < kPrPackK; ++i) tot += c[i];
    for (int i = 0; i < kPrN; ++i)
      std::fprintf(stderr, "fa4prof %-12s %14llu cyc %5.1f%%  n %10llu  %9.0f cyc/each\n", names[i],
                   static_cast<unsigned long long>(c[i].load()), tot ? 100.0 * c[i] / tot : 0.0,
                   static_cast<unsigned long long>(n[i].load()), n[i] ? double(c[i]) / n[i] : 0.0);
  }
};
Prof g_prof;
// Times the piece i from construction to lap(j) (which starts piece j) or destruction (kPrN: none).
struct ProfScope {
  int i;
  uint64_t t;
  explicit ProfScope(int i) : i(i), t(__rdtsc()) {}
  void lap(int j) {
    const uint64_t u = __rdtsc();
    if (i < kPrN) {
      g_prof.c[i].fetch_add(u - t, std::memory_order_relaxed);
      g_prof.n[i].fetch_add(1, std::memory_order_relaxed);
    }
    i = j;
    t = u;
  }
  ~ProfScope() { lap(kPrN); }
};
}  // namespace
}  // namespace fa4::core::cpu
#define FA4_PROF(name, i) ::fa4::core::cpu::ProfScope name(i)
#define FA4_PROF_LAP(name, j) name.lap(j)
#else
#define FA4_PROF(name, i) ((void)0)
#define FA4_PROF_LAP(name, j) ((void)0)
#endif

namespace fa4::core {
namespace cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr double kLn2d = 0.6931471805599453;

// Tile sizes, measured on Zen3 (D = 128, bf16, 2048 keys): every query tile re-reads its kv
// head's K and V (strided rows, usually from L3 or DRAM), so tall tiles matter most: at 96 rows
// the K/V conversion stalled ~15% of the run, at 192 rows ~8%. Q^T (96 KB) + O^T (96 KB) + S^T
// (24 KB) + converted K/V (2 x 16 KB) stay well inside the 512 KB L2; 32-key tiles keep the
// P^T strip of the P·V kernel in L1. The 16-bit product kernels (LowpKernels) name their own key
// tile (512 keys x 96 rows on AMX: cpu_kernels_amx.cpp).
constexpr int64_t kTileRows = 192;
// Row-major (decode) plans keep 32-key tiles as well: 64 / 128 keys per (head, tile) step halve
// the per-step work outside the kernels and ran an L3-resident decode 1.06-1.12x faster, but
// DRAM-bound ones 0.92-0.97x (B 4, kv 16k / 64k, 1 and 2 threads, also with the prefetch one
// step ahead instead of two; docs/perf/cpu.md, branch cpu16-gaps): a step's K / V plus the
// steps prefetched ahead then exceed the 48 KB L1 that the prefetches fill.
constexpr int64_t kTileKeys = 32;
// Kv heads per unit of the row-major decode plans (Unit::nh). Measured (B = 4, Hq = 32, Hkv = 8,
// D = 128, kv 16k bf16, 1 thread, loaded machine): one head per unit streamed K / V at ~3.4 GB/s,
// the same bytes with contiguous rows (Hkv = 1) at ~6.2 GB/s: a head's 256-byte rows 2 KB apart
// defeat the L2 streamer and take a TLB entry per two rows.
constexpr int64_t kUnitHeads = 8;
// (head, key tile) steps of a row-major unit's lockstep walk between a row's software prefetch and
// its use (see steady_pf in run_unit).
constexpr int64_t kRowsPrefetchSteps = 2;
// Largest pre-packed fp32 K / V (Panels) per call; beyond it units pack their own key tiles.
constexpr int64_t kMaxF32PanelBytes = int64_t{1} << 30;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

double nan_max(double a, double b) { return (std::isnan(a) || std::isnan(b)) ? std::nan("") : (a > b ? a : b); }

// 64-byte aligned fp32/int32/pointer scratch, owned per thread; from 2 MB on (the pre-packed
// panels) 2 MB aligned and, on Linux, on transparent huge pages where the system allows them
// (the kernels stream the panels: one TLB entry per 2 MB instead of 512).
struct AlignedBuffer {
  static constexpr size_t kHuge = size_t{2} << 20;
  void* p = nullptr;
  size_t size = 0;
  explicit AlignedBuffer(size_t bytes) {
    const size_t align = bytes >= kHuge ? kHuge : 64;
    size = static_cast<size_t>(round_up(static_cast<int64_t>(bytes) + 64, static_cast<int64_t>(align)));
    p = std::aligned_alloc(align, size);
#ifdef __linux__
    if (p && align == kHuge) madvise(p, size, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  }
  ~AlignedBuffer() { std::free(p); }
  bool ok() const { return p != nullptr; }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
};

// The pre-packed panels' buffer outlives a call: a fresh multi-MB allocation is mapped anew each
// time, and its first-touch page faults (the kernel zeroing pages) were ~4% of an fp32 prefill
// at S = 2048 (perf, 1 thread), more at S = 512. One cached buffer per process, taken by one call
// at a time (a concurrent call allocates its own), kept while it is at most kKeepPanelBytes.
constexpr size_t kKeepPanelBytes = size_t{128} << 20;
struct PanelBufferCache {
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::unique_ptr<AlignedBuffer>& slot() {
    static std::unique_ptr<AlignedBuffer> b;
    return b;
  }
  static std::unique_ptr<AlignedBuffer> take(size_t bytes) {
    {
      std::lock_guard<std::mutex> g(mu());
      std::unique_ptr<AlignedBuffer>& c = slot();
      if (c && c->size >= bytes) return std::move(c);
    }
    return std::make_unique<AlignedBuffer>(bytes);
  }
  static void give(std::unique_ptr<AlignedBuffer> b) {
    if (!b || !b->ok() || b->size > kKeepPanelBytes) return;
    std::lock_guard<std::mutex> g(mu());
    std::unique_ptr<AlignedBuffer>& c = slot();
    if (!c || c->size < b->size) c = std::move(b);
  }
};

struct Unit {
  int64_t b, hk, r0, rows;  // packed rows [r0, r0 + rows) of (b, hk)
  int32_t split;
  int64_t cost;             // rows x keys, for largest-first scheduling
  // Kv heads hk .. hk + nh (row-major decode plans only; see kUnitHeads): their key tiles are
  // walked in lockstep, each tile for every head, so the K / V reads of a unit are the
  // contiguous [key][head][dim] rows of the tile instead of one head's 256 bytes every
  // Hkv x 256 bytes.
  int32_t nh = 1;
};

// K / V packed once per (batch, kv head, key tile) for the 16-bit kernels and the fp32 panel
// kernels, when several query tiles read them (packing in every work unit cost ~25% of a bf16
// prefill on AMX at S = 2048): tile t of (b, hk) holds keys [t nk, t nk + n), n = min(nk,
// seqlen_k - t nk), as kb then vt (or kp then vp, cpu_kernels.h layouts) in a fixed-size slot;
// flags = the packers' kTiny / kNonFinite bits.
struct Panels {
  int64_t nk = 0, slot = 0, k_bytes = 0;  // slot: bytes per tile (a multiple of 64)
  std::vector<int64_t> first;  // [b * hkv + hk]: index of its tile 0
  std::unique_ptr<AlignedBuffer> data;
  std::unique_ptr<uint8_t[]> flags;
  const char* at(int64_t tile) const { return static_cast<const char*>(data->p) + tile * slot; }
  const uint16_t* kb(int64_t tile) const { return reinterpret_cast<const uint16_t*>(at(tile)); }
  const uint16_t* vt(int64_t tile) const { return reinterpret_cast<const uint16_t*>(at(tile) + k_bytes); }
  const float* kp(int64_t tile) const { return reinterpret_cast<const float*>(at(tile)); }
  const float* vp(int64_t tile) const { return reinterpret_cast<const float*>(at(tile) + k_bytes); }
  // Filled lazily (the fp32 panels): the first unit to reach a tile packs it, so packing
  // overlaps the other threads' products and no barrier separates it from them (a pass over
  // every tile before the units was ~8% of S = 512 and one more barrier for a preempted
  // thread to hold up on a shared machine). state[tile]: 0 empty, 1 being packed, 2 ready.
  static constexpr int kReady = 2, kMine = 1, kBusy = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> state;  // nullptr: packed before the units (all ready)
  // kReady: use the tile; kMine: the caller packs it now, then publish(); kBusy: another unit
  // is packing it, the caller packs its own copy of the tile.
  int want(int64_t tile) const {
    if (!state) return kReady;
    uint8_t st = state[tile].load(std::memory_order_acquire);
    if (st == 2) return kReady;
    if (st == 0 && state[tile].compare_exchange_strong(st, 1, std::memory_order_acq_rel)) return kMine;
    return state[tile].load(std::memory_order_acquire) == 2 ? kReady : kBusy;
  }
  void publish(int64_t tile) const { state[tile].store(2, std::memory_order_release); }
  Panels() = default;
  Panels(const Panels&) = delete;
  Panels& operator=(const Panels&) = delete;
  ~Panels() { PanelBufferCache::give(std::move(data)); }
};

// Everything a worker needs, shared read-only.
struct Plan {
  const Problem* pb;
  const Kernels* kern;
  const LowpKernels* lowp = nullptr;  // 16-bit products for this dtype (nullptr: fp32 kernels)
  const F32Panels* f32p = nullptr;    // fp32 panel products (only without lowp)
  int terms = 1;                      // bf16 terms per element in the packed panels (fp16: 2)
  int64_t tile_keys = kTileKeys;      // keys per tile (a multiple of 32)
  int64_t tile_rows;        // packed rows per query tile (<= kTileRows)
  int64_t nsplit;
  bool rows_kernels;        // the row-major kernels apply (tiles of <= 8 rows use them)
  std::vector<int64_t> row_base;  // [b * hkv + hk]: first global packed row of (b, hk)
  int64_t total_rows = 0;
  float* part_o = nullptr;  // [nsplit][total_rows][dv] normalized partials (nsplit > 1)
  float* part_lse = nullptr;  // [nsplit][total_rows]
  uint8_t* part_redo = nullptr;  // [nsplit][total_rows]: 1 = that split saw an extreme score (the merge recomputes the row)
  const Panels* panels = nullptr;  // pre-packed K / V (lowp or f32p), or nullptr: units pack their own
  bool prefetch_panels = false;    // LowpKernels::prefetch_next on the panels (big_panels)
};

// The key range [lo, hi) of split s of a tile whose rows see [klo, khi): equal shares of whole
// key tiles counted from klo rounded down to a tile boundary, so every key tile of the walk is an
// aligned tile [t * tile_keys, (t + 1) * tile_keys) (the pre-packed K/V panels are cut so) and
// splits never share one. Keys of the first tile below klo are seen by no row of the query tile:
// the mask classifies that tile as partial and masks them.
void split_range(int64_t klo, int64_t khi, int64_t nsplit, int64_t s, int64_t tile_keys, int64_t* lo, int64_t* hi) {
  const int64_t base = khi > klo ? klo / tile_keys * tile_keys : klo;
  const int64_t len = std::max<int64_t>(0, khi - base);
  const int64_t chunk = round_up((len + nsplit - 1) / nsplit, tile_keys);
  *lo = std::min(khi, base + s * chunk);
  *hi = std::min(khi, *lo + chunk);
}


// Per-thread tile storage (layouts in cpu_kernels.h). O^T has dv_p = round_up(dv, 16) rows (the
// AMX tiles write whole 16-dim blocks); the packed 16-bit panels exist only with lowp kernels.
struct Workspace {
  int64_t mp_max, nk, dqk, dv, dv_p;
  int terms;  // packed 16-bit panel terms (0: none)
  AlignedBuffer buf;
  float *qt = nullptr, *qt2 = nullptr, *st = nullptr, *ot = nullptr, *kc = nullptr, *vc = nullptr, *m_run = nullptr,
        *l_run = nullptr, *alpha = nullptr, *row = nullptr, *qrow = nullptr, *orow = nullptr;
  uint16_t *qv = nullptr, *kb = nullptr, *vt = nullptr, *pp = nullptr;  // packed bf16 panels
  int32_t *row_lo_rel = nullptr, *row_hi_rel = nullptr;
  int64_t *row_lo = nullptr, *row_hi = nullptr;
  uint8_t* redo = nullptr;  // [mp] rows with an extreme score (recomputed in fp64)
  float *fk = nullptr, *fv = nullptr;  // [nk] per-token K / V factors of the tile (fp8 KV)
  float *raw_max = nullptr, *raw_min = nullptr;  // [mp] LowpKernels::qk_max's row max / min
  // Transposed tiles: this unit has run a tile with non-finite V, so O may hold +-inf and a
  // rescale that underflows must go through exact_scale (see pv_visible_only).
  bool o_nonfinite = false;
  // Row-major units over several kv heads: kraw / vraw already hold the rows of the key tile
  // starting at rows_at (rows_n keys) of this workspace's head, filled by an earlier step's
  // software-prefetch list (run_unit's steady_pf); -1: not filled.
  int64_t rows_at = -1, rows_n = 0;
  // Row-major tiles: the factor the scores still need after K.qk_rows (rows_q_scale).
  float rows_post = 1.0f;
  const float **krows = nullptr, **vrows = nullptr;
  const void **kraw = nullptr, **vraw = nullptr;  // storage addresses of the tile's K / V rows
  const void** qraw = nullptr;                     // [mp] storage addresses of the Q rows
  // Row-major units on the vdpbf16ps rows kernels: qt's rows as bf16 (rows_q_bf16_avx512), made
  // once per unit where they are exactly bf16 (q_bf16); the kernels then skip converting them.
  uint16_t* qb = nullptr;
  bool q_bf16 = false;
  const void **pfk = nullptr, **pfv = nullptr;     // K / V rows the row-major kernels prefetch

  // Carves the buffer (p == nullptr: only counts the bytes).
  size_t carve(char* p) {
    const int64_t dqk_p = round_up(dqk, 32), mp = mp_max;
    size_t off = 0;
    auto take = [&](int64_t n, int64_t elem) -> void* {
      void* r = p ? p + off : nullptr;
      off += static_cast<size_t>(round_up(std::max<int64_t>(n, 1) * elem, 64));
      return r;
    };
    qt = static_cast<float*>(take(dqk * mp, 4));
    st = static_cast<float*>(take(nk * mp, 4));
    ot = static_cast<float*>(take(dv_p * mp, 4));
    kc = static_cast<float*>(take(nk * dqk, 4));
    vc = static_cast<float*>(take(nk * round_up(dv, 8), 4));  // also the fp32 V panel vp
    m_run = static_cast<float*>(take(mp, 4));
    l_run = static_cast<float*>(take(mp, 4));
    alpha = static_cast<float*>(take(mp, 4));
    row = static_cast<float*>(take(std::max(dqk, dv), 4));
    qrow = static_cast<float*>(take(mp * dqk, 4));  // [mp][dqk] Q rows in fp32 (Kernels::transpose)
    orow = static_cast<float*>(take(mp * dv, 4));   // [mp][dv] normalized O rows
    row_lo_rel = static_cast<int32_t*>(take(mp, 4));
    row_hi_rel = static_cast<int32_t*>(take(mp, 4));
    row_lo = static_cast<int64_t*>(take(mp, 8));
    row_hi = static_cast<int64_t*>(take(mp, 8));
    krows = static_cast<const float**>(take(nk, 8));
    vrows = static_cast<const float**>(take(nk, 8));
    kraw = static_cast<const void**>(take(nk, 8));
    vraw = static_cast<const void**>(take(nk, 8));
    qraw = static_cast<const void**>(take(mp, 8));
    qb = static_cast<uint16_t*>(take(mp * dqk, 2));
    pfk = static_cast<const void**>(take(nk, 8));
    pfv = static_cast<const void**>(take(nk, 8));
    redo = static_cast<uint8_t*>(take(mp, 1));
    fk = static_cast<float*>(take(nk, 4));
    fv = static_cast<float*>(take(nk, 4));
    if (terms > 0) {
      raw_max = static_cast<float*>(take(mp, 4));
      raw_min = static_cast<float*>(take(mp, 4));
      qt2 = static_cast<float*>(take(dqk * mp, 4));
      qv = static_cast<uint16_t*>(take(terms * dqk_p * mp, 2));
      kb = static_cast<uint16_t*>(take(terms * nk * dqk_p, 2));
      vt = static_cast<uint16_t*>(take(terms * dv_p * nk, 2));
      pp = static_cast<uint16_t*>(take(terms * nk * mp, 2));
    }
    return off;
  }
  bool ok() const { return buf.p != nullptr; }
  // terms = 0: no packed panels (fp32 kernels only).
  Workspace(int64_t mp, int64_t nk_, int64_t dqk_, int64_t dv_, int terms_)
      : mp_max(mp), nk(nk_), dqk(dqk_), dv(dv_), dv_p(round_up(dv_, 16)), terms(terms_),
        buf(carve(nullptr)) {
    if (!buf.p) return;  // out of memory: ok() says so
    carve(static_cast<char*>(buf.p));
  }
};

// The factor of an fp8 KV cache's (batch, kv head) that folds into the whole unit: the
// per-(batch, kv head) one, or 1 (absent, per token, or no fp8 KV cache).
float kv_head_factor(const Problem& pb, const KvScale& sc, int64_t b, int64_t hk) {
  return pb.kv_fp8 && sc.data && !sc.per_token ? pb.kv_scale(sc, b, 0, hk) : 1.0f;
}

// Element offsets of the K and V rows of one (batch, kv head), hoisted out of the key loops:
// dense, varlen and contiguous caches are one base + j * step; paged KV looks up the page.
struct KvRowOffsets {
  int64_t k0, v0, k_step, v_step;        // key j (unpaged): k0 + j * k_step
  int64_t page_size = 0, k_page, v_page;  // paged: page(j / ps) * k_page + (j % ps) * k_step + k0
  const int32_t* table = nullptr;
  int64_t table_step = 0;

  KvRowOffsets(const Problem& pb, int64_t b, int64_t hk) {
    if (pb.kv == KvLayout::paged) {
      page_size = pb.page_size;
      k0 = hk * pb.ks.head;
      v0 = hk * pb.vs.head;
      k_step = pb.ks.s1;
      v_step = pb.vs.s1;
      k_page = pb.ks.s0;
      v_page = pb.vs.s0;
      const TensorView& t = pb.p->page_table;
      table = static_cast<const int32_t*>(t.data) + b * t.stride[0];
      table_step = t.stride[1];
    } else {
      k0 = pb.k_offset(b, 0, hk);
      v0 = pb.v_offset(b, 0, hk);
      k_step = pb.kv == KvLayout::varlen ? pb.ks.s0 : pb.ks.s1;
      v_step = pb.kv == KvLayout::varlen ? pb.vs.s0 : pb.vs.s1;
    }
  }
  void at(int64_t j, int64_t* k, int64_t* v) const {
    if (page_size == 0) {
      *k = k0 + j * k_step;
      *v = v0 + j * v_step;
    } else {
      const int64_t pg = table[(j / page_size) * table_step], r = j % page_size;
      *k = pg * k_page + r * k_step + k0;
      *v = pg * v_page + r * v_step + v0;
    }
  }
};

// Element stride between the consecutive packed rows (position r / g, head hk g + r % g) of one
// (batch, kv head), given the tensor's position and head strides; 0 when it is not constant.
int64_t packed_row_step(int64_t g, int64_t pos_step, int64_t head_step) {
  if (g == 1) return pos_step;
  return pos_step == g * head_step ? head_step : 0;
}

// One demand load per 64-byte line of [a, a + a_bytes) and of [b, b + b_bytes) (both > 0), each
// inside its span (its start, then the line starts after it), the two spans' lines alternating:
// unlike a software prefetch, demand loads train the hardware stream prefetchers (run_unit's
// touch pass, which reads a key's K row and V row together). Measured on
// Zen 4 (2026-12-07 09:40, docs/perf/cpu.md; a C walk of 32-key tiles of [keys][8 heads][256 B] K and V, one demand load
// per line): K tile then V tile 16.5 / 25.4 GB/s (1 / 2 threads), K and V alternating every
// 4 KB 18.7 / 27.2, every line 22.8 / 32.2 (the plain sum 22-25 / 26-30).
inline void touch_spans(const char* a, int64_t a_bytes, const char* b, int64_t b_bytes) {
  if (a_bytes <= 0 || b_bytes <= 0) return;
  const char* ae = a + a_bytes;
  const char* be = b + b_bytes;
  (void)*reinterpret_cast<const volatile char*>(a);
  (void)*reinterpret_cast<const volatile char*>(b);
  const char* ca = reinterpret_cast<const char*>((reinterpret_cast<uintptr_t>(a) | uintptr_t{63}) + 1);
  const char* cb = reinterpret_cast<const char*>((reinterpret_cast<uintptr_t>(b) | uintptr_t{63}) + 1);
  for (; ca < ae && cb < be; ca += 64, cb += 64) {
    (void)*reinterpret_cast<const volatile char*>(ca);
    (void)*reinterpret_cast<const volatile char*>(cb);
  }
  for (; ca < ae; ca += 64) (void)*reinterpret_cast<const volatile char*>(ca);
  for (; cb < be; cb += 64) (void)*reinterpret_cast<const volatile char*>(cb);
}
// Prefetch hint for the cache lines of [p, p + bytes) (at most 1 KB: one K, V or Q row), to the
// cache level of kLocality (__builtin_prefetch's: 3 = L1, 2 = L2).
template <int kLocality = 3>
inline void prefetch_span(const char* p, int64_t bytes) {
  bytes = std::min<int64_t>(bytes, 1024);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, kLocality);
  __builtin_prefetch(p + bytes - 1, 0, kLocality);
}

// Non-finite V: the exact-semantics P V. A tile whose V holds Inf/NaN takes it, full tiles too
// (the vector kernels below compute p * v and o * alpha as they are):
//  - a partial tile's masked keys must not reach a row that cannot see them (0 * NaN);
//  - a visible key's weight p = exp(s - m) and a rescale factor alpha = exp(m_old - m_new) are > 0
//    in exact arithmetic (the rows with non-finite scores go to the fp64 path), so where fp32
//    underflowed them to 0 an infinite V (or O) still counts: inf, not 0 * inf = NaN
//    (exact_product / exact_scale, cpu_merge.h; fuzz findings new09 (a partial tile) and its
//    causal-0 mutation new10 (a full tile): an fp16 -inf in V behind a score ~300 below the row
//    max gave NaN where the reference gives -inf).
// Tiles of finite V keep the vector kernels. After a tile with an infinite V, O may hold +-inf:
// a later rescale that underflows (alpha = 0: the row max grew by > ~104) goes through
// exact_scale first (rescale_underflowed), and so does the final factor where a sink far above
// the scores underflows it. The transposed paths know which tiles had non-finite V (the 16-bit
// packers' kNonFinite flag; a test of the fp32 path's converted rows, in L1) and rescale so only
// after one (Workspace::o_nonfinite): every row's first tile has alpha = 0 too, and the strided
// pass over its O^T column cost ~3% of an fp32 prefill.
// The row-major decode path reads V in place, where a test of every tile's V measured ~14% of a
// decode call (f32, L = 1k: the first touch of V from memory moved out of the P V kernel into a
// loop that overlaps nothing), and a pass over the tile's P for a zero weight still ~4% (bf16,
// L = 1k): its full tiles test V only when the softmax step saw a weight of 0 (a min the
// kernels keep on the side, SoftmaxStep::zero_p), the one case where the vector P V can differ
// (p * v = NaN for an infinite v; any p > 0 gives the exact product); its rescale is always
// checked (at most 8 contiguous O rows).

// Any +-inf / NaN (exponent bits all ones: exp) in n rows of d contiguous elements of a bit
// width U: a branch-free test the compiler vectorizes (pand, pcmpeq, por).
template <typename U>
bool any_exp_all_ones(const void* const* rows, int64_t n, int64_t d, U exp) {
  U any = 0;
  for (int64_t j = 0; j < n; ++j) {
    const U* r = static_cast<const U*>(rows[j]);
    for (int64_t e = 0; e < d; ++e) any |= static_cast<U>((r[e] & exp) == exp);
  }
  return any != 0;
}
// Any +-inf / NaN among x[0..n) (fp32).
bool any_nonfinite_f32(const float* x, int64_t n) {
  const void* row = x;
  return any_exp_all_ones<uint32_t>(&row, 1, n, 0x7f800000u);
}
// Any +-inf / NaN in n storage rows of d contiguous elements of dtype t (the row-major kernels'
// V rows: unit dim stride).
bool any_nonfinite_rows(const void* const* rows, DType t, int64_t n, int64_t d) {
  switch (t) {
    case DType::float32: return any_exp_all_ones<uint32_t>(rows, n, d, 0x7f800000u);
    case DType::float16: return any_exp_all_ones<uint16_t>(rows, n, d, 0x7c00);
    case DType::bfloat16: return any_exp_all_ones<uint16_t>(rows, n, d, 0x7f80);
    case DType::float8_e4m3: return any_exp_all_ones<uint8_t>(rows, n, d, 0x7f);  // NaN only (S.1111.111)
    default: break;
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t e = 0; e < d; ++e)
      if (!std::isfinite(load_f32(rows[j], e, t))) return true;
  return false;
}

// Rows r < m whose rescale factor underflowed (alpha[r] = 0; also a row's first keys, O = 0):
// O row = exact_scale(O row, 0) (+-inf and NaN kept, finite values 0, as o * 0 gives them) and
// alpha[r] = 1, so the kernel's o * alpha leaves them. O element (r, e) at o[r * rs + e * es].
void rescale_underflowed(float* o, int64_t rs, int64_t es, int64_t dv, int64_t m, float* alpha) {
  for (int64_t r = 0; r < m; ++r) {
    if (alpha[r] != 0.0f) continue;
    for (int64_t e = 0; e < dv; ++e) o[r * rs + e * es] = exact_scale(o[r * rs + e * es], 0.0f);
    alpha[r] = 1.0f;
  }
}
// The same for row-major O [rows][dv] (the decode path, where it runs on every row's first tile
// too): branch-free over the contiguous row, so the compiler vectorizes it.
void rescale_underflowed_rows(float* o, int64_t dv, int64_t rows, float* alpha) {
  for (int64_t r = 0; r < rows; ++r) {
    if (alpha[r] != 0.0f) continue;
    float* x = o + r * dv;
    for (int64_t e = 0; e < dv; ++e) {  // exact_scale(x, 0): +-inf and NaN kept, finite values +-0
      uint32_t b;
      std::memcpy(&b, x + e, 4);
      b &= (b & 0x7fffffffu) >= 0x7f800000u ? 0xffffffffu : 0x80000000u;
      std::memcpy(x + e, &b, 4);
    }
    alpha[r] = 1.0f;
  }
}

// O^T += P^T V restricted to visible elements (lo[m] <= n < hi[m]; a full tile: 0 and n), with
// exact_product / exact_scale.
void pv_visible_only(const float* pt, int64_t mp, int64_t mc, const float* const* vrows, int64_t dv,
                     const float* alpha, const int32_t* lo, const int32_t* hi, float* ot) {
  for (int64_t e = 0; e < dv; ++e) {
    float* o = ot + e * mp;
    for (int64_t m = 0; m < mc; ++m) {
      float acc = exact_scale(o[m], alpha[m]);
      for (int64_t n = lo[m]; n < hi[m]; ++n) acc += exact_product(pt[n * mp + m], vrows[n][e]);
      o[m] = acc;
    }
  }
}

// Scalar O += P V over visible elements only, row-major O [rows][dv] and storage-typed V rows:
// the exact-semantics P V of the row-major path (see pv_visible_only).
void pv_rows_visible_only(const float* pt, int64_t rows, const void* const* vrows, DType t, int64_t dv,
                          const float* alpha, const int32_t* lo, const int32_t* hi, float* o) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < dv; ++e) {
      float acc = exact_scale(o[r * dv + e], alpha[r]);
      for (int64_t n = lo[r]; n < hi[r]; ++n) acc += exact_product(pt[n * 8 + r], load_f32(vrows[n], e, t));
      o[r * dv + e] = acc;
    }
}

// Marks rows r < rows of the unnormalized O tile (element (r, e) at o[r * rs + e * es]; the
// n_all floats from o, padding rows included, are initialized) that hold a +-inf / NaN. The
// accumulator is sum_j p_j v_j with p_j <= 1, i.e. up to l = sum_j p_j (<= the keys seen) times
// max |v|, and only the division by l (finish) brings it back into the hull of V: with |v| near
// FLT_MAX two keys of weight ~1 already overflow it to +-inf where the exact output is finite
// (fuzz finding new13: bf16 V = 3e38 on 6 keys of equal weight, out = inf, reference 3.004e38).
// Such rows (and those with a non-finite V, whose exact result the fp64 path gives as well) are
// recomputed by reference_row. One branch-free pass over the tile per unit, outside the key loop:
// only a hit looks at rows.
void flag_nonfinite_o_rows(const float* o, int64_t n_all, int64_t rs, int64_t es, int64_t rows, int64_t dv,
                           uint8_t* redo) {
  if (!any_nonfinite_f32(o, n_all)) return;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < dv; ++e)
      if (!std::isfinite(o[r * rs + e * es])) {
        redo[r] = 1;
        break;
      }
}

// The factor of the row-major Q rows for the prescale qscale, and in *post what the scores of
// K.qk_rows still need. The vdpbf16ps rows kernels (AVX512_BF16, e4m3 / bf16 K) multiply q as bf16
// and use them only where q is exactly bf16: there q carries the power of two 2^e of qscale (an
// exact multiply, bf16 queries stay bf16) and the rest (in [1, 2)) scales the fp32 scores.
float rows_q_scale(const Kernels& K, const Problem& pb, float qscale, float* post) {
  *post = 1.0f;
#if defined(__x86_64__) || defined(_M_X64)
  if (K.qk_rows == qk_rows_avx512bf16 && pb.dtype == DType::bfloat16 &&
      (pb.kv_dtype == DType::float8_e4m3 || pb.kv_dtype == DType::bfloat16) &&
      std::isnormal(qscale)) {
    const float p2 = std::ldexp(1.0f, std::ilogb(qscale));
    *post = qscale / p2;
    return p2;
  }
#endif
  return qscale;
}

// Marks rows [r0, r1) of the tile S^T (st[n * mp + r], nk keys) that have a visible score that
// is NaN, +-inf or >= kExtremeScore in magnitude (lo / hi: per-row visible key range of a
// partial tile, nullptr = all visible). One vectorizable pass decides first whether any score of
// the block is extreme (almost never): only then are rows and visibility looked at.
void flag_extreme_rows(const float* st, int64_t mp, int64_t nk, int64_t r0, int64_t r1, const int32_t* lo,
                       const int32_t* hi, uint8_t* redo) {
  int any = 0;
  for (int64_t n = 0; n < nk; ++n)
    for (int64_t r = r0; r < r1; ++r) any |= !(std::fabs(st[n * mp + r]) < kExtremeScore);
  if (!any) return;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t n = lo ? lo[r] : 0; n < (hi ? hi[r] : nk); ++n)
      if (!(std::fabs(st[n * mp + r]) < kExtremeScore)) redo[r] = 1;
}

// The per-head setup of a row-major unit for one more kv head hk (Unit::nh > 1): what run_unit
// does for its first head on that path (Q rows prescaled, row-major [8][dqk]; mask bounds;
// empty accumulators).
void init_rows_head(const Plan& plan, const Unit& u, int64_t hk, Workspace& ws) {
  const Problem& pb = *plan.pb;
  const int64_t g = pb.group, dqk = pb.dqk, rows = u.rows, b = u.b;
  const SeqMask sm = pb.seq_mask(b);
  const float qscale = pb.scale * pb.descale_q(b, hk) * pb.descale_k(b, hk) * kv_head_factor(pb, pb.k_sc, b, hk);
  const int64_t qesz = static_cast<int64_t>(dtype_size(pb.dtype));
  const Kernels& K = *plan.kern;
  const float qs = rows_q_scale(K, pb, qscale, &ws.rows_post);
  for (int64_t r = 0; r < 8; ++r) {
    float* q = ws.qt + r * dqk;
    if (r >= rows) {
      std::fill(q, q + dqk, 0.0f);
      continue;
    }
    const int64_t pr = u.r0 + r, i = pr / g, h = hk * g + pr % g;
    K.convert(static_cast<const char*>(pb.p->q.data) + pb.q_offset(b, i, h) * qesz, pb.dtype, pb.qs.dim, dqk, ws.row);
    for (int64_t d = 0; d < dqk; ++d) q[d] = ws.row[d] * qs;
  }
  for (int64_t r = 0; r < 8; ++r) {
    const int64_t i = (u.r0 + std::min(r, rows - 1)) / g;
    ws.row_lo[r] = sm.row_lo(i);
    ws.row_hi[r] = sm.row_hi(i);
    ws.m_run[r] = kNegInf;
    ws.l_run[r] = 0.0f;
    ws.redo[r] = 0;
  }
  std::fill(ws.ot, ws.ot + ws.dv_p * 8, 0.0f);
}

// Packs panel tile `tile` (its n keys, from the storage rows kr / vr of dtype kvt) and records
// the packers' flags.
void pack_panel_tile(const Plan& plan, const Panels& pn, int64_t tile, int64_t n, const void* const* kr,
                     const void* const* vr, DType kvt) {
  const Problem& pb = *plan.pb;
  char* slot = static_cast<char*>(pn.data->p) + tile * pn.slot;
  if (plan.lowp) {
    const LowpKernels& L = *plan.lowp;
    FA4_PROF(pk, kPrPackK);
    const int kf = L.pack_k(kr, kvt, n, pb.dqk, plan.terms, reinterpret_cast<uint16_t*>(slot));
    FA4_PROF_LAP(pk, kPrPackV);
    const int vf = L.pack_v(vr, kvt, n, pb.dv, plan.terms, reinterpret_cast<uint16_t*>(slot + pn.k_bytes));
    pn.flags[tile] = static_cast<uint8_t>(kf | vf);
  } else {
    const F32Panels& F = *plan.f32p;
    FA4_PROF(pk, kPrPackK);
    F.pack_k(kr, kvt, n, pb.dqk, reinterpret_cast<float*>(slot));
    FA4_PROF_LAP(pk, kPrPackV);
    pn.flags[tile] = static_cast<uint8_t>(F.pack_v(vr, kvt, n, pn.nk, pb.dv, reinterpret_cast<float*>(slot + pn.k_bytes)));
  }
}

// Per-token factors of an fp8 KV cache, one (batch, kv head): element offsets into k_sc / v_sc,
// addressed as the K / V rows are (KvRowOffsets): base + j * step, or by page.
struct KvTokenFactors {
  const float *k = nullptr, *v = nullptr;  // nullptr: not per token
  int64_t k0 = 0, v0 = 0, k_step = 0, v_step = 0, k_page = 0, v_page = 0, page_size = 0;
  const int32_t* table = nullptr;
  int64_t table_step = 0;
  KvTokenFactors(const Problem& pb, int64_t b, int64_t hk) {
    if (!pb.kv_fp8) return;
    auto one = [&](const KvScale& sc, const float** f, int64_t* f0, int64_t* step, int64_t* page) {
      if (!sc.data || !sc.per_token) return;
      *f = sc.data;
      if (pb.kv == KvLayout::paged) {
        *f0 = hk * sc.head, *step = sc.s1, *page = sc.s0;
      } else {
        const RowAddr r = pb.kv_row(b, 0);
        *f0 = r.a * sc.s0 + r.b * sc.s1 + hk * sc.head;
        *step = pb.kv == KvLayout::varlen ? sc.s0 : sc.s1;
      }
    };
    one(pb.k_sc, &k, &k0, &k_step, &k_page);
    one(pb.v_sc, &v, &v0, &v_step, &v_page);
    if (pb.kv == KvLayout::paged && (k || v)) {
      page_size = pb.page_size;
      const TensorView& t = pb.p->page_table;
      table = static_cast<const int32_t*>(t.data) + b * t.stride[0];
      table_step = t.stride[1];
    }
  }
  // fk[t] / fv[t] = the factors of keys j0 + t, t < n (only those that are per token).
  void gather(int64_t j0, int64_t n, float* fk, float* fv) const {
    for (int64_t t = 0; t < n; ++t) {
      const int64_t j = j0 + t;
      int64_t ok = k0 + j * k_step, ov = v0 + j * v_step;
      if (page_size) {
        const int64_t pg = table[(j / page_size) * table_step], r = j % page_size;
        ok = pg * k_page + r * k_step + k0;
        ov = pg * v_page + r * v_step + v0;
      }
      if (k) fk[t] = k[ok];
      if (v) fv[t] = v[ov];
    }
  }
};

// st[t * mp + r] *= f[t] for keys t < n, rows r0 <= r < r1: a per-token factor on the columns
// of S (before the softmax) or of P (after it, before P V). One multiply per score, next to the
// products' dqk (or dv) multiply-adds.
void scale_keys(float* st, int64_t mp, int64_t r0, int64_t r1, int64_t n, const float* f) {
  for (int64_t t = 0; t < n; ++t) {
    float* x = st + t * mp;
    const float c = f[t];
    for (int64_t r = r0; r < r1; ++r) x[r] *= c;
  }
}

void run_unit(const Plan& plan, const Unit& u, Workspace* const* wss) {
  FA4_PROF(pu, kPrUnitSetup);
  Workspace& ws = *wss[0];
  const int nh = u.nh;
  const Problem& pb = *plan.pb;
  const AttentionParams& p = *pb.p;
  const Kernels& K = *plan.kern;
  const int64_t g = pb.group, dqk = pb.dqk, dv = pb.dv, b = u.b, hk = u.hk;
  const SeqMask sm = pb.seq_mask(b);
  const int64_t rows = u.rows, align = K.row_align;
  const int64_t i0 = u.r0 / g, i1 = (u.r0 + rows - 1) / g + 1;  // query positions of the tile
  // Row-major path (Q [8][dqk], O [8][dv], K/V read in place) for tiles of <= 8 rows.
  const bool rowwise = rows <= 8 && plan.rows_kernels;
  const int64_t mp = rowwise ? 8 : round_up(rows, align);
  // O element (row r, dim e) lives at ot[r * o_rs + e * o_es].
  const int64_t o_rs = rowwise ? dv : 1, o_es = rowwise ? 1 : mp;

  // ---- Q tile, prescaled; per-row mask bounds ----
  // (fp8 KV: the per-head k factor rides along with the descales, see the top of this file.)
  const float dq = pb.descale_q(b, hk), dk = pb.descale_k(b, hk) * kv_head_factor(pb, pb.k_sc, b, hk);
  const bool cap = pb.softcap > 0.0f;
  const float qscale = pb.scale * dq * dk;
  // The 16-bit products: the packed Q carries only the power of two 2^e of qscale (an exact
  // multiply, so bf16 / fp8 / fp16-split queries stay exact), the rest (qpost in [1, 2)) scales
  // the fp32 product. A tile whose K / V holds bf16 subnormals (flushed by the matrix units) runs
  // on the fp32 kernels instead, from qt (Q x qscale, as in the fp32 path).
  const LowpKernels* L = rowwise ? nullptr : plan.lowp;
  // The fp32 panel products (plans without 16-bit products): K / V packed per key tile.
  const F32Panels* F = rowwise ? nullptr : plan.f32p;
  // Those run in log2 units: Q^T carries scale x log2(e), so the scores, the running max and
  // the softcap are s log2(e) and the softmax takes 2^(s - m) with no rounding of (s - m) log2 e
  // (half the fp32 output error); finish converts back in double.
  const bool log2u = F != nullptr;
  ws.rows_post = 1.0f;
  const float qt_scale = log2u ? qscale * kLog2e : rowwise ? rows_q_scale(K, pb, qscale, &ws.rows_post) : qscale;
  float qpow2 = 1.0f, qpost = 1.0f;
  if (L && std::isnormal(qscale)) {
    qpow2 = std::ldexp(1.0f, std::ilogb(qscale));
    qpost = qscale / qpow2;
  } else {
    L = nullptr;
  }
  const int64_t q_rs = rowwise ? dqk : 1, q_ds = rowwise ? 1 : mp;
  const int64_t qesz = static_cast<int64_t>(dtype_size(pb.dtype));
  // Transposed tiles with unit-stride Q rows: the rows are converted to fp32 row-major (qrow)
  // and transposed by the table's kernel; Q^T in the fp32 kernels' scale (qt) is then made only
  // when a tile needs those kernels (qt_ready).
  // With LowpKernels::pack_q_rows the packed Q is built from the storage rows directly (no fp32
  // copies), and qrow too only when needed (qrow_ready).
  const bool fast_q = K.transpose && !rowwise && pb.qs.dim == 1;
  const bool direct_q = fast_q && L && L->pack_q_rows;
  bool qt_ready = !fast_q, qrow_ready = false;
  auto fill_qrow = [&] {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pr = u.r0 + r, i = pr / g, h = hk * g + pr % g;
      K.convert(static_cast<const char*>(p.q.data) + pb.q_offset(b, i, h) * qesz, pb.dtype, 1, dqk, ws.qrow + r * dqk);
    }
    std::fill(ws.qrow + rows * dqk, ws.qrow + mp * dqk, 0.0f);  // padding rows: zero queries
    qrow_ready = true;
  };
  int qflags = 0;
  if (direct_q) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pr = u.r0 + r, i = pr / g, h = hk * g + pr % g;
      ws.qraw[r] = static_cast<const char*>(p.q.data) + pb.q_offset(b, i, h) * qesz;
    }
    FA4_PROF_LAP(pu, kPrQpack);
    qflags = L->pack_q_rows(ws.qraw, pb.dtype, rows, mp, dqk, qpow2, plan.terms, ws.qv);
    FA4_PROF_LAP(pu, kPrUnitSetup);
  } else if (fast_q) {
    if (L) {
      fill_qrow();
      K.transpose(ws.qrow, dqk, mp, dqk, nullptr, qpow2, ws.qt2, mp);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pr = u.r0 + r, i = pr / g, h = hk * g + pr % g;
      K.convert(static_cast<const char*>(p.q.data) + pb.q_offset(b, i, h) * qesz, pb.dtype, pb.qs.dim, dqk, ws.row);
      for (int64_t d = 0; d < dqk; ++d) ws.qt[r * q_rs + d * q_ds] = ws.row[d] * qt_scale;
      if (L)
        for (int64_t d = 0; d < dqk; ++d) ws.qt2[r + d * mp] = ws.row[d] * qpow2;
    }
    for (int64_t r = rows; r < mp; ++r) {  // padding rows: zero queries
      for (int64_t d = 0; d < dqk; ++d) ws.qt[r * q_rs + d * q_ds] = 0.0f;
      if (L)
        for (int64_t d = 0; d < dqk; ++d) ws.qt2[r + d * mp] = 0.0f;
    }
  }
  // fp32 Q rows a constant stride apart: Q^T straight from them (no fp32 row copies first).
  const int64_t q_step = packed_row_step(g, pb.varlen_q ? pb.qs.s0 : pb.qs.s1, pb.qs.head);
  auto need_qt = [&] {
    if (qt_ready) return;
    if (!qrow_ready && pb.dtype == DType::float32 && q_step != 0) {
      const float* q0 = static_cast<const float*>(p.q.data) + pb.q_offset(b, u.r0 / g, hk * g + u.r0 % g);
      K.transpose(q0, q_step, rows, dqk, nullptr, qt_scale, ws.qt, mp);
      for (int64_t d = 0; d < dqk; ++d) std::fill(ws.qt + d * mp + rows, ws.qt + d * mp + mp, 0.0f);  // padding rows
    } else {
      if (!qrow_ready) fill_qrow();
      K.transpose(ws.qrow, dqk, mp, dqk, nullptr, qt_scale, ws.qt, mp);
    }
    qt_ready = true;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = (u.r0 + r) / g;
    ws.row_lo[r] = sm.row_lo(i);
    ws.row_hi[r] = sm.row_hi(i);
  }
  for (int64_t r = rows; r < mp; ++r) {  // padding rows: bounds of the last row
    ws.row_lo[r] = ws.row_lo[rows - 1];
    ws.row_hi[r] = ws.row_hi[rows - 1];
  }
  // A subnormal in the packed Q (flushed by the products): this unit runs on the fp32 kernels.
  if (L && !direct_q) qflags = L->pack_q(ws.qt2, mp, dqk, plan.terms, ws.qv);
  if (L && (qflags & LowpKernels::kTiny)) L = nullptr;
  // fp32 panel units on fp32 Q rows a constant stride apart: Q^T strip by strip, each just
  // before its first product, with the next strip's rows prefetched meanwhile (lazy_q_rows), so
  // the Q reads overlap the first key tile's products instead of running alone before them.
  const bool lazy_q = F && !qt_ready && !qrow_ready && pb.dtype == DType::float32 && q_step != 0;
  const float* const q0 =
      lazy_q ? static_cast<const float*>(p.q.data) + pb.q_offset(b, u.r0 / g, hk * g + u.r0 % g) : nullptr;
  int64_t qt_done = 0;  // lazy_q: Q^T rows [0, qt_done) are in ws.qt
  auto lazy_q_rows = [&](int64_t r1, int64_t next) {
    if (r1 <= qt_done) return;
    const int64_t a = qt_done, e = std::min(r1, rows);
    if (e > a) K.transpose(q0 + a * q_step, q_step, e - a, dqk, nullptr, qt_scale, ws.qt + a, mp);
    if (r1 > rows)
      for (int64_t d = 0; d < dqk; ++d) std::fill(ws.qt + d * mp + std::max(a, rows), ws.qt + d * mp + r1, 0.0f);
    qt_done = r1;
    for (int64_t r = r1; r < std::min(r1 + next, rows); ++r)
      prefetch_span<2>(reinterpret_cast<const char*>(q0 + r * q_step), dqk * 4);  // (dqk <= 256: a row <= 1 KB)
  };
  if (lazy_q) qt_ready = true;
  else if (!L) need_qt();
  for (int64_t r = 0; r < mp; ++r) {
    ws.m_run[r] = kNegInf;
    ws.l_run[r] = 0.0f;
    ws.redo[r] = 0;
  }
  std::fill(ws.ot, ws.ot + ws.dv_p * mp, 0.0f);
  ws.o_nonfinite = false;
  for (int h = 1; h < nh; ++h) init_rows_head(plan, u, hk + h, *wss[h]);
  for (int h = 0; h < nh; ++h) wss[h]->rows_at = -1;  // nothing carried over from another unit

  // ---- key range of this tile and split ----
  int64_t klo, khi, lo, hi;
  sm.key_range(i0, i1, &klo, &khi);
  split_range(klo, khi, plan.nsplit, u.split, plan.tile_keys, &lo, &hi);

  // K / V: storage element size esz; the kernels read the storage rows (dtype kvt, dim strides
  // kds / vds), e4m3 ones included (fp8 KV cache: factors applied as the top of this file says).
  const int64_t esz = static_cast<int64_t>(dtype_size(pb.kv_dtype));
  const DType kvt = pb.kv_dtype;
  const int64_t kds = pb.ks.dim, vds = pb.vs.dim;
  const char* kbase = static_cast<const char*>(p.k.data);
  const char* vbase = static_cast<const char*>(p.v.data);
  // Bytes of one key / value row: within k's / v's checked extents, or 0-strided when k / v are
  // empty (dispatch.cpp hands the backends 0 strides on empty tensors; a dim stride of INT64_MAX
  // on a zero-row v overflowed here before, found by the fuzzer).
  const int64_t k_span = ((dqk - 1) * pb.ks.dim + 1) * esz;
  const int64_t v_span = ((dv - 1) * pb.vs.dim + 1) * esz;
  std::vector<KvRowOffsets> kv_rows;
  std::vector<KvTokenFactors> kv_tok;  // fp8 KV per-token factors (empty without them)
  const bool tok_k = pb.kv_fp8 && pb.k_sc.data && pb.k_sc.per_token;
  const bool tok_v = pb.kv_fp8 && pb.v_sc.data && pb.v_sc.per_token;
  for (int h = 0; h < nh; ++h) {
    kv_rows.emplace_back(pb, b, hk + h);
    if (tok_k || tok_v) kv_tok.emplace_back(pb, b, hk + h);
  }
  // 1 / softcap overflows for softcap < 2.9e-39: FLT_MAX then stands in for it, so a zero score
  // stays 0 (0 * inf would be NaN) and any other saturates tanh to +-1, as s / softcap does.
  const float cap_in = cap ? std::min(1.0f / pb.softcap, std::numeric_limits<float>::max()) : 0.0f;
  SoftmaxStep step{ws.st, 0, mp, mp, nullptr, nullptr, log2u ? cap_in * kLn2 : cap_in,
                   log2u ? pb.softcap * kLog2e : pb.softcap, ws.m_run, ws.l_run, ws.alpha};
  step.log2_units = log2u;
  if (L && L->begin) L->begin();
  // Pre-packed panels cover whole aligned tiles up to seqlen_k: a tile that ends past hi (only
  // when hi = khi, so the keys beyond are masked for every row here) is used whole, as partial.
  const Panels* pan = L || F ? plan.panels : nullptr;
  // Row-major tiles on the AVX-512 kernels: the kernels of each (head, tile) prefetch, a row per
  // key processed, the rows of the (head, tile) kRowsPrefetchSteps later in the lockstep order
  // (rows_prefetch_avx512) instead of a burst of the next tile's rows before q.k. Measured (B = 4,
  // Hq = 32, Hkv = 8, D = 128, kv 16k bf16, 1 thread, Zen 5): 23 -> 13.5 ms; 1 step ahead
  // 13.4-14.0, 4 steps 13.5-14.4, 8 (the same head's next tile, the burst's distance) 15-17.6;
  // prefetcht1 / t2 no better than t0 (nor a second, t1 / t2 list further ahead). With the
  // later spreading inside the kernels (docs/perf/cpu.md, 2026-12-03): 12.2-12.8 ms, and 1-3
  // steps equal. The next tile's rows in address order (key-major over the heads) instead: 1
  // thread ~5% faster, 2 threads ~10% slower (B = 4 kv 16k), not taken.
  // Row-major units over several kv heads (decode) take the touch pass instead (touch_tile
  // below): before a key tile's steps, one demand load per line of its K and V rows of every head
  // in address order, a key's K row and V row together (touch_spans: K then V was 0.90x). The steps read a head's rows a whole key apart (2 KB at
  // Hkv 8, D 128 bf16), an order the hardware stream prefetchers do not follow: measured on
  // Zen 4 (2026-12-07, docs/perf/cpu.md), one core walks K / V in the steps' order at ~11.6 GB/s
  // against a plain sum's 27-30, and at ~22 with the touch pass first (bench/cpu_stream-style
  // walks); fa4 itself (B 4, Hq 32, Hkv 8, kv 16k, bf16), with the vdpbf16ps rows kernels:
  // 1 thread 8.6 -> 13.6 GB/s, 2 threads 16.9 -> 24.2 (software prefetch on top of it cost 10%,
  // an address-ordered prefetch list spread over the steps ran as the steady one, and demand
  // loads spread over the steps stalled them: 6.5 GB/s). Not for pages of fewer than 32 keys:
  // there a tile's rows lie on scattered pages, the touch pass waits on each page's first miss
  // in turn, and the steady prefetch's overlap wins (2 threads, kv 16k: page 1 16.3 GB/s with
  // it, 12.3 with the touch pass; e4m3 page 16 9.3 / 8.6; page 64 15.7 / 18.0).
  const bool touch = rowwise && nh > 1 && (pb.kv != KvLayout::paged || pb.page_size >= 32);
#if defined(__x86_64__) || defined(_M_X64)
  const bool steady_pf = rowwise && !touch && (K.qk_rows == qk_rows_avx512 || K.qk_rows == qk_rows_avx512bf16);
#else
  const bool steady_pf = false;
#endif
  constexpr int64_t pf_dist = kRowsPrefetchSteps;
  // The vdpbf16ps rows kernels round P to bf16: within the bf16 tolerances of DESIGN.md section
  // 4, not fp16's (fp16 queries on an e4m3 cache reached 1.6e-2 max abs error against fp16's
  // 1e-2 in CpuVsReference.Fp8KvCache*), so they serve bf16 queries only; the others take the
  // fp32 AVX-512 ones.
  auto rows_qk = K.qk_rows;
  auto rows_pv = K.pv_rows;
#if defined(__x86_64__) || defined(_M_X64)
  if (rows_qk == qk_rows_avx512bf16 && pb.dtype != DType::bfloat16) rows_qk = qk_rows_avx512, rows_pv = pv_rows_avx512;
#endif
  // The vdpbf16ps rows kernels with bf16 / e4m3 K: each head's q converted to bf16 once here
  // (Workspace::qb) rather than on every call of qk_rows_avx512bf16; a head whose q is not exactly
  // bf16 keeps that kernel (its per-call check sends it to the fp32 one).
#if defined(__x86_64__) || defined(_M_X64)
  const bool dp_rows = rowwise && rows_qk == qk_rows_avx512bf16 && (kvt == DType::bfloat16 || kvt == DType::float8_e4m3) &&
            kds == 1;
  for (int h = 0; h < nh; ++h)
    wss[h]->q_bf16 = dp_rows && rows_q_bf16_avx512(wss[h]->qt, rows, dqk, wss[h]->qb);
  // Before the vdpbf16ps P V of bf16 V rows, the touch pass (touch_rows_avx512) also tests them for
  // subnormals, where the loads wait on memory anyway: a clean tile's P V then runs without the
  // test (pv_rows_avx512bf16_checked), which was ~35% of pv_rows_avx512bf16's samples.
  const bool check_v = touch && rows_pv == pv_rows_avx512bf16 && kvt == DType::bfloat16 && vds == 1 && v_span % 64 == 0;
#endif
  bool v_clean = false;  // this key tile's V holds no bf16 subnormal (touch_rows_avx512)
  // Storage addresses of the K / V rows of keys [j0, j0 + n) of one kv head.
  auto row_addresses = [&](const KvRowOffsets& kv, int64_t j0, int64_t n, const void** k, const void** v) {
    for (int64_t t = 0; t < n; ++t) {
      int64_t ko, vo;
      kv.at(j0 + t, &ko, &vo);
      k[t] = kbase + ko * esz;
      v[t] = vbase + vo * esz;
    }
  };
  // One key tile of one head (several heads: row-major units over kv heads, see Unit::nh).
  auto tile = [&](Workspace& ws, const KvRowOffsets& kv_rows, const KvTokenFactors* tok, int64_t j0, int64_t n,
                  TileKind kind) {
    // Storage addresses of this tile's K / V rows. Keys >= j0 + n (and so >= seqlen_k) are
    // never touched.
    // (Not needed with pre-packed panels, unless the tile falls back to fp32 or has non-finite V.)
    // tp: this tile's panel, or nullptr where the unit packs the tile itself (no panels, or a
    // lazily filled one that another unit is packing right now).
    const int64_t pan_tile = pan ? pan->first[b * pb.hkv + hk] + j0 / ws.nk : -1;
    const int want = pan ? pan->want(pan_tile) : Panels::kBusy;
    const Panels* tp = want == Panels::kBusy ? nullptr : pan;
    if (rowwise && ws.rows_at == j0 && ws.rows_n == n) {
      // filled by the prefetch list of an earlier step (steady_pf below)
    } else if (!tp || want == Panels::kMine || tp->flags[pan_tile] != 0) {
      row_addresses(kv_rows, j0, n, ws.kraw, ws.vraw);
    }
    if (tok) tok->gather(j0, n, ws.fk, ws.fv);
    if (want == Panels::kMine) {  // n is the panel tile's key count here
      pack_panel_tile(plan, *pan, pan_tile, n, ws.kraw, ws.vraw, kvt);
      pan->publish(pan_tile);
    }
    // Start pulling the next tile's K/V rows toward the core while this tile computes: the rows
    // are strided (one kv head of many, or scattered pages). Measured on Zen3: without this,
    // prefill stalled on L3/DRAM for ~20% of the run and decode ran 1.6x slower. The transposed
    // path issues them one row at a time between the conversions of this tile's rows rather
    // than in one burst of ~256 lines, which can fill the miss buffers the conversion waits on.
    const int64_t jn = j0 + n, nn = std::min(ws.nk, hi - jn);
    auto prefetch_row = [&](int64_t t) {
      int64_t ko, vo;
      kv_rows.at(jn + t, &ko, &vo);
      prefetch_span(kbase + ko * esz, k_span);
      prefetch_span(vbase + vo * esz, v_span);
    };
    // Mask bounds relative to the tile, and the rows [ra, rb) that can see any of its keys. Both
    // bounds are non-decreasing in the row, so those rows are one contiguous range; the others
    // would be fully masked (p = 0, alpha = 1: an exact no-op) and the transposed kernels skip
    // them (rounded out to whole vectors of 8 rows). This is most of the diagonal band of causal
    // masks: ~10% of the causal work at 192-row tiles.
    int64_t ra = 0, rb = mp;
    if (kind == TileKind::partial) {
      for (int64_t r = 0; r < mp; ++r) {
        ws.row_lo_rel[r] = static_cast<int32_t>(std::clamp<int64_t>(ws.row_lo[r] - j0, 0, n));
        ws.row_hi_rel[r] = static_cast<int32_t>(std::clamp<int64_t>(ws.row_hi[r] - j0, 0, n));
      }
      if (!rowwise) {
        while (ra < mp && ws.row_hi_rel[ra] == 0) ++ra;
        while (rb > ra && ws.row_lo_rel[rb - 1] == n) --rb;
        ra = ra / align * align;
        rb = std::min(mp, round_up(rb, align));
        if (ra >= rb) return;
      }
    }
    // A full tile's bounds (every key visible to every row), for the exact P V.
    auto full_bounds = [&] {
      std::fill(ws.row_lo_rel, ws.row_lo_rel + mp, 0);
      std::fill(ws.row_hi_rel, ws.row_hi_rel + mp, static_cast<int32_t>(n));
    };
    // The softmax step over rows [r0, r0 + mr) and nk keys of this tile.
    auto aim = [&](int64_t r0, int64_t mr, int64_t nk) {
      step.st = ws.st + r0;
      step.nk = nk;
      step.m = mr;
      step.lo = kind == TileKind::partial ? ws.row_lo_rel + r0 : nullptr;
      step.hi = kind == TileKind::partial ? ws.row_hi_rel + r0 : nullptr;
      step.m_run = ws.m_run + r0;
      step.l_run = ws.l_run + r0;
      step.alpha = ws.alpha + r0;
    };
    const int64_t m = rb - ra;
    aim(ra, m, n);

    if (rowwise) {
      if (!steady_pf)
        for (int64_t t = 0; t < nn; ++t) prefetch_row(t);
#if defined(__x86_64__) || defined(_M_X64)
      if (ws.q_bf16)
        qk_rows_avx512bf16_q(ws.qb, rows, dqk, ws.kraw, kvt, n, ws.st);
      else
#endif
        rows_qk(ws.qt, rows, dqk, ws.kraw, kvt, n, ws.st);
      if (ws.rows_post != 1.0f)
        for (int64_t t = 0; t < n * 8; ++t) ws.st[t] *= ws.rows_post;
      if (tok_k) scale_keys(ws.st, 8, 0, rows, n, ws.fk);
      // The extreme-score check: inside the softmax's max pass where the table's softmax does it
      // (padding rows, zero queries, may get flagged too: finish never reads them).
      if (K.softmax_flags_extreme)
        step.redo = ws.redo;
      else
        flag_extreme_rows(ws.st, mp, n, 0, rows, step.lo ? ws.row_lo_rel : nullptr, step.hi ? ws.row_hi_rel : nullptr,
                          ws.redo);
      // A full tile's V is tested only where the softmax saw a weight of 0 (SoftmaxStep::zero_p);
      // a partial tile's masked keys have p = 0 anyway.
      uint8_t zero_p = 0;
      step.zero_p = kind == TileKind::partial ? nullptr : &zero_p;
      K.softmax(step);
      step.zero_p = nullptr;
      step.redo = nullptr;
      if (tok_v) scale_keys(ws.st, 8, 0, rows, n, ws.fv);
      rescale_underflowed_rows(ws.ot, dv, rows, ws.alpha);
      if ((kind == TileKind::partial || zero_p) && any_nonfinite_rows(ws.vraw, kvt, n, dv)) {
        if (kind != TileKind::partial) full_bounds();
        pv_rows_visible_only(ws.st, rows, ws.vraw, kvt, dv, ws.alpha, ws.row_lo_rel, ws.row_hi_rel, ws.ot);
      } else {
#if defined(__x86_64__) || defined(_M_X64)
        if (v_clean)
          pv_rows_avx512bf16_checked(ws.st, rows, n, ws.vraw, kvt, dv, ws.alpha, ws.ot);
        else
#endif
          rows_pv(ws.st, rows, n, ws.vraw, kvt, dv, ws.alpha, ws.ot);
      }
      return;
    }
    if (L) {
      const uint16_t *kb = ws.kb, *vt = ws.vt;
      int kf = 0, vf = 0;
      if (tp) {
        kb = tp->kb(pan_tile);
        vt = tp->vt(pan_tile);
        kf = vf = tp->flags[pan_tile];
      } else {
        for (int64_t t = 0; t < nn; ++t) prefetch_row(t);
        kf = L->pack_k(ws.kraw, kvt, n, dqk, plan.terms, ws.kb);
        vf = L->pack_v(ws.vraw, kvt, n, dv, plan.terms, ws.vt);
      }
      if (!((kf | vf) & LowpKernels::kTiny)) {
        FA4_PROF(pt, u.r0 == 0 ? kPrQk0 : kPrQk);
        // Keys past the last one any row of [ra, rb) can see (hi is non-decreasing in the row)
        // are left out, in whole 32-key steps of the panel: on the diagonal tiles of a causal
        // mask that is up to half the tile.
        const int64_t ld = round_up(n, 32);
        const int64_t ne = kind == TileKind::partial ? std::min<int64_t>(n, round_up(ws.row_hi_rel[rb - 1], 32)) : n;
        step.nk = ne;
        // Full tiles without softcap: the softmax step's max pass rides on the product
        // (LowpKernels::qk_max; per-token K factors would change the max, a key count off the
        // 16-key blocks would count padding keys).
        const bool fold_max = L->qk_max && kind != TileKind::partial && !cap && !tok_k && ne % 16 == 0;
        // The panel the next product reads, into L2 while this one runs (LowpKernels::
        // prefetch_next): this tile's V during qk, and during pv the next key tile's K (see there).
        const bool pf_next = tp && plan.prefetch_panels;
        if (pf_next) L->prefetch_next(vt, tp->slot - tp->k_bytes);
        bool extreme = false;
        if (fold_max) L->qk_max(ws.qv + ra * 2, mp, m, dqk, kb, ld, ne, plan.terms, ws.st + ra, ws.raw_max + ra, ws.raw_min + ra);
        else extreme = L->qk(ws.qv + ra * 2, mp, m, dqk, kb, ld, ne, plan.terms, qpost, ws.st + ra);
        if (tok_k) scale_keys(ws.st, mp, ra, rb, ne, ws.fk);  // raw or scaled products alike
        if (extreme || (tok_k && !L->raw_scores))
          flag_extreme_rows(ws.st, mp, ne, ra, std::min(rb, rows), step.lo ? ws.row_lo_rel : nullptr,
                            step.hi ? ws.row_hi_rel : nullptr, ws.redo);
        // P^T straight into the pv panel, unless the exact P V (non-finite V) needs it in fp32,
        // or per-token V factors scale it first.
        const bool exact_pv = vf & LowpKernels::kNonFinite;
        step.pp = exact_pv || tok_v ? nullptr : ws.pp;
        step.terms = plan.terms;
        if (L->raw_scores) {  // the softmax scales the products and flags extreme rows
          step.scale = qpost;
          step.redo = ws.redo + ra;
        }
        if (fold_max) {
          step.raw_max = ws.raw_max + ra;
          step.raw_min = ws.raw_min + ra;
        }
        FA4_PROF_LAP(pt, kPrSoftmax);
        K.softmax(step);
        FA4_PROF_LAP(pt, kPrTileOther);
        step.raw_max = step.raw_min = nullptr;
        step.pp = nullptr;
        step.scale = 1.0f;
        step.redo = nullptr;
        if (tok_v) scale_keys(ws.st, mp, ra, rb, ne, ws.fv);
        if (ws.o_nonfinite) rescale_underflowed(ws.ot + ra, 1, mp, dv, m, ws.alpha + ra);
        if (exact_pv) {
          for (int64_t t = 0; t < n; ++t) {
            K.convert(ws.vraw[t], kvt, vds, dv, ws.vc + t * dv);
            ws.vrows[t] = ws.vc + t * dv;
          }
          if (kind != TileKind::partial) full_bounds();
          pv_visible_only(ws.st + ra, mp, m, ws.vrows, dv, ws.alpha + ra, ws.row_lo_rel + ra, ws.row_hi_rel + ra,
                          ws.ot + ra);
          ws.o_nonfinite = true;
        } else {
          // The next key tile's K: this unit's next tile or, after its last one, the first of its
          // range, where the unit this thread runs next (usually the same (batch, kv head)'s next
          // query tile) starts.
          if (pf_next) {
            const int64_t next = j0 + ws.nk < hi ? pan_tile + 1 : pan->first[b * pb.hkv + hk] + lo / ws.nk;
            L->prefetch_next(tp->kb(next), tp->k_bytes);
          }
          FA4_PROF_LAP(pt, u.r0 == 0 ? kPrPv0 : kPrPv);
          L->pv(tok_v ? ws.st + ra : nullptr, mp, m, ne, vt, ld, dv, plan.terms, ws.alpha + ra, ws.pp, ws.ot + ra);
        }
        return;
      }
      // bf16 subnormals in this tile's K / V: the fp32 kernels below.
    }
    if (F) {
      // Keys past the last one any row of [ra, rb) can see are left out (as for L above).
      const int64_t ne = kind == TileKind::partial ? std::min<int64_t>(n, ws.row_hi_rel[rb - 1]) : n;
      const float *kp = ws.kc, *vp = ws.vc;
      int64_t ld = ne;
      int vf = 0;
      if (tp) {
        kp = tp->kp(pan_tile);
        vp = tp->vp(pan_tile);
        ld = ws.nk;
        vf = tp->flags[pan_tile];
      } else {
        FA4_PROF(pk, kPrPackK);
        for (int64_t t = 0; t < nn; ++t) prefetch_row(t);
        F->pack_k(ws.kraw, kvt, ne, dqk, ws.kc);
        FA4_PROF_LAP(pk, kPrPackV);
        vf = F->pack_v(ws.vraw, kvt, ne, ld, dv, ws.vc);
      }
      const bool exact_pv = vf & LowpKernels::kNonFinite;
      if (exact_pv) {
        for (int64_t t = 0; t < ne; ++t) {
          K.convert(ws.vraw[t], kvt, vds, dv, ws.vc + t * dv);
          ws.vrows[t] = ws.vc + t * dv;
        }
        if (kind != TileKind::partial) full_bounds();
      }
      // Strip by strip: the product, the softmax (which flags extreme rows; its scale is 1, Q^T
      // carries the scale) and P V, over the keys the strip's rows see (hi is non-decreasing).
      for (int64_t s0 = ra; s0 < rb; s0 += F->strip_rows) {
        const int64_t sm = std::min(F->strip_rows, rb - s0);
        const int64_t sn = kind == TileKind::partial ? std::min<int64_t>(ne, ws.row_hi_rel[s0 + sm - 1]) : ne;
        if (lazy_q) lazy_q_rows(s0 + sm, F->strip_rows);
        FA4_PROF(pt, u.r0 == 0 ? kPrQk0 : kPrQk);
        F->qk(ws.qt + s0, mp, sm, dqk, kp, sn, ws.st + s0);
        FA4_PROF_LAP(pt, kPrSoftmax);
        if (tok_k) scale_keys(ws.st, mp, s0, s0 + sm, sn, ws.fk);
        aim(s0, sm, sn);
        step.redo = ws.redo + s0;
        K.softmax(step);
        FA4_PROF_LAP(pt, u.r0 == 0 ? kPrPv0 : kPrPv);
        step.redo = nullptr;
        if (tok_v) scale_keys(ws.st, mp, s0, s0 + sm, sn, ws.fv);
        if (ws.o_nonfinite) rescale_underflowed(ws.ot + s0, 1, mp, dv, sm, ws.alpha + s0);
        if (exact_pv)
          pv_visible_only(ws.st + s0, mp, sm, ws.vrows, dv, ws.alpha + s0, ws.row_lo_rel + s0, ws.row_hi_rel + s0,
                          ws.ot + s0);
        else
          F->pv(ws.st + s0, mp, sm, sn, vp, ld, dv, ws.alpha + s0, ws.ot + s0);
      }
      if (exact_pv) ws.o_nonfinite = true;
      return;
    }
    need_qt();
    // Converted to contiguous fp32 rows even when K/V are fp32 already: measured on Zen3, the
    // kernels ran ~10% slower broadcasting from rows 8 KB apart (one head of 16) than the copy
    // costs.
    for (int64_t t = 0; t < n; ++t) {
      if (t < nn) prefetch_row(t);
      K.convert(ws.kraw[t], kvt, kds, dqk, ws.kc + t * dqk);
      K.convert(ws.vraw[t], kvt, vds, dv, ws.vc + t * dv);
      ws.krows[t] = ws.kc + t * dqk;
      ws.vrows[t] = ws.vc + t * dv;
    }
    K.qk(ws.qt + ra, mp, m, dqk, ws.krows, n, ws.st + ra);
    if (tok_k) scale_keys(ws.st, mp, ra, rb, n, ws.fk);
    // Padding rows (>= rows) have zero queries and are never written: not flagged.
    flag_extreme_rows(ws.st, mp, n, ra, std::min(rb, rows), step.lo ? ws.row_lo_rel : nullptr,
                      step.hi ? ws.row_hi_rel : nullptr, ws.redo);
    K.softmax(step);
    if (tok_v) scale_keys(ws.st, mp, ra, rb, n, ws.fv);
    if (ws.o_nonfinite) rescale_underflowed(ws.ot + ra, 1, mp, dv, m, ws.alpha + ra);
    if (any_nonfinite_f32(ws.vc, n * dv)) {  // the converted rows are contiguous (and in L1)
      if (kind != TileKind::partial) full_bounds();
      pv_visible_only(ws.st + ra, mp, m, ws.vrows, dv, ws.alpha + ra, ws.row_lo_rel + ra, ws.row_hi_rel + ra, ws.ot + ra);
      ws.o_nonfinite = true;
    } else {
      K.pv(ws.st + ra, mp, m, n, ws.vrows, dv, ws.alpha + ra, ws.ot + ra);
    }
  };
  // The touch pass of key tile [j0, j0 + n): every head's row addresses (which its step then
  // uses: rows_at), and one read of each line, key-major over the heads where a key's heads are
  // closer together than a head's keys (BSHD, paged: address order), head-major otherwise.
  const bool key_major = std::abs(pb.ks.head) <= std::abs(kv_rows[0].k_step);
  auto touch_tile = [&](int64_t j0, int64_t n) {
    for (int h = 0; h < nh; ++h) {
      Workspace& w = *wss[h];
      row_addresses(kv_rows[h], j0, n, w.kraw, w.vraw);
      w.rows_at = j0;
      w.rows_n = n;
    }
#if defined(__x86_64__) || defined(_M_X64)
    if (check_v) {
      const void* const* kk[kUnitHeads];
      const void* const* vv[kUnitHeads];
      for (int h = 0; h < nh; ++h) kk[h] = wss[h]->kraw, vv[h] = wss[h]->vraw;
      v_clean = touch_rows_avx512(kk, vv, nh, n, key_major, k_span, v_span);
      return;
    }
#endif
    const int64_t outer = key_major ? n : nh, inner = key_major ? nh : n;
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t c = 0; c < inner; ++c) {
        const Workspace& w = *wss[key_major ? c : a];
        const int64_t t = key_major ? a : c;
        touch_spans(static_cast<const char*>(w.kraw[t]), k_span, static_cast<const char*>(w.vraw[t]), v_span);
      }
  };
  FA4_PROF_LAP(pu, kPrLoop);
  for (int64_t j0 = lo; j0 < hi; j0 += ws.nk) {
    const int64_t n = pan ? std::min(ws.nk, sm.sk - j0) : std::min(ws.nk, hi - j0);
    const TileKind kind = sm.classify(i0, i1, j0, j0 + n);
    if (kind == TileKind::empty) continue;
    if (touch) touch_tile(j0, n);
    for (int h = 0; h < nh; ++h) {
#if defined(__x86_64__) || defined(_M_X64)
      if (steady_pf) {
        const int64_t at = h + pf_dist, jj = j0 + at / nh * ws.nk;
        const int hh = static_cast<int>(at % nh);
        const int64_t np = jj < hi ? std::min(ws.nk, hi - jj) : 0;
        // The list is the rows of (head hh, tile jj), which that step reads: with hh != h they go
        // straight into head hh's own row arrays (its tile() then skips computing them again:
        // the per-key address computations were ~11% of an L3-resident decode's samples, half of
        // them this list); hh == h (units of 1 or 2 heads) keeps a separate list, as the arrays
        // of this step are still to be read.
        Workspace& w = *wss[h];
        Workspace& o = *wss[hh];
        const bool own = hh != h;
        const void** lk = own ? o.kraw : w.pfk;
        const void** lv = own ? o.vraw : w.pfv;
        row_addresses(kv_rows[hh], jj, np, lk, lv);
        if (own) {
          o.rows_at = np > 0 ? jj : -1;
          o.rows_n = np;
        }
        rows_prefetch_avx512(lk, lv, np, k_span, v_span);
      }
#endif
      tile(*wss[h], kv_rows[h], kv_tok.empty() ? nullptr : &kv_tok[h], j0, n, kind);
    }
  }
#if defined(__x86_64__) || defined(_M_X64)
  if (steady_pf) rows_prefetch_avx512(nullptr, nullptr, 0, 0, 0);
#endif
  if (L && L->end) L->end();

  // ---- finalize: sink (split 0 only), normalization, empty rows, lse ----
  // Row r's output is ot row r times f[r] (in alpha, free now); lse[r] in l_run.
  FA4_PROF_LAP(pu, kPrN);
  auto finish = [&](Workspace& ws, int64_t hk) {
    FA4_PROF(pf, kPrFinishPre);
    const float fv_head = kv_head_factor(pb, pb.v_sc, b, hk);
    const float dvs = pb.descale_v(b, hk) * fv_head;
    const bool sink = pb.has_sinks && u.split == 0;
    float* const fr = ws.alpha;
    const bool want_lse = pb.has_lse || plan.nsplit > 1;  // the lse (l_run) is stored
    // fp32 / 16-bit output rows a constant stride apart: O^T transposed straight into them (the
    // rows with an extreme score are overwritten below).
    const int64_t o_step = packed_row_step(g, pb.varlen_q ? pb.os.s0 : pb.os.s1, pb.os.head);
    const bool direct_o = !rowwise && K.transpose && plan.nsplit == 1 && pb.out_dtype == DType::float32 &&
                          pb.os.dim == 1 && o_step != 0;
    const bool direct_o16 = !rowwise && K.transpose_store16 && plan.nsplit == 1 &&
                            (pb.out_dtype == DType::bfloat16 || pb.out_dtype == DType::float16) && pb.os.dim == 1 &&
                            o_step != 0;
    // O overflowed (|V| near FLT_MAX) or V was not finite: those rows go to the fp64 path
    // (direct_o16: flagged after the transpose, which scans O^T as it reads it; the rows whose
    // factor underflows below keep +-inf and NaN as they are, so the flags are the same).
    if (!direct_o16) flag_nonfinite_o_rows(ws.ot, rowwise ? rows * dv : dv * mp, o_rs, o_es, rows, dv, ws.redo);
    // A non-finite per-head fp8 KV factor (inf x an e4m3 0 is NaN in the reference, where the
    // folded factor would give inf or 0): every row in fp64.
    if (!std::isfinite(fv_head) || !std::isfinite(kv_head_factor(pb, pb.k_sc, b, hk))) std::fill(ws.redo, ws.redo + rows, 1);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = hk * g + (u.r0 + r) % g;
      // In double: natural units (m_run may be in log2 units), the sink's weight not rounded.
      const double m = log2u ? ws.m_run[r] * kLn2d : ws.m_run[r];
      double l = ws.l_run[r], m_f = m, c = 1.0;  // O_final = ot * c / l
      if (sink) {
        const double s = pb.sink(h);
        m_f = nan_max(m, s);
        c = m == -kInfD ? 0.0 : std::exp(m - m_f);
        l = l * c + (m_f == -kInfD ? 0.0 : std::exp(s - m_f));
      }
      const bool empty = m_f == -kInfD && !std::isnan(l);
      fr[r] = empty ? 0.0f : static_cast<float>(c / l * dvs);
      // The factor is > 0 in exact arithmetic unless dvs = 0, but underflows to 0 where the sink
      // is > ~104 above the row's scores (c): an infinite O then stays inf (exact_scale).
      if (fr[r] == 0.0f && !empty && dvs != 0.0f) {
        for (int64_t e = 0; e < dv; ++e) ws.ot[r * o_rs + e * o_es] = exact_scale(ws.ot[r * o_rs + e * o_es], 0.0f);
        fr[r] = 1.0f;
      }
      // In double, rounded once: m_f may be large (|logit| ~ 1e4 with outliers). Only where
      // someone reads it (a double log per row was ~1/4 of this loop).
      if (want_lse) ws.l_run[r] = empty ? kNegInf : static_cast<float>(m_f + std::log(l));
    }
    // Normalized rows, row-major: transposed by the table's kernel when O^T is transposed.
    const float* orow = ws.orow;
    int64_t or_s = dv, oe_s = 1;
    FA4_PROF_LAP(pf, kPrFinishT);
    if (direct_o) {
      float* o0 = static_cast<float*>(p.out.data) + pb.out_offset(b, u.r0 / g, hk * g + u.r0 % g);
      K.transpose(ws.ot, mp, dv, rows, fr, 1.0f, o0, o_step);
    } else if (direct_o16) {
      char* o0 = static_cast<char*>(p.out.data) + pb.out_offset(b, u.r0 / g, hk * g + u.r0 % g) * 2;
      if (K.transpose_store16(ws.ot, mp, dv, rows, fr, pb.out_dtype, o0, o_step))
        flag_nonfinite_o_rows(ws.ot, dv * mp, o_rs, o_es, rows, dv, ws.redo);
    } else if (rowwise || !K.transpose) {
      orow = ws.ot;
      or_s = o_rs;
      oe_s = o_es;
    } else {
      K.transpose(ws.ot, mp, dv, rows, fr, 1.0f, ws.orow, dv);
    }
    const bool scaled = orow == ws.orow;  // fr already applied
    const bool fast_store = scaled && K.store_row && pb.os.dim == 1 &&
                            (pb.out_dtype == DType::float32 || pb.out_dtype == DType::float16 ||
                             pb.out_dtype == DType::bfloat16);
    const int64_t oesz = static_cast<int64_t>(dtype_size(pb.out_dtype));
    FA4_PROF_LAP(pf, kPrFinishStore);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pr = u.r0 + r, i = pr / g, h = hk * g + pr % g;
      const float* o = orow + r * or_s;
      const float f = scaled ? 1.0f : fr[r], lse = ws.l_run[r];
      if (plan.nsplit == 1 && ws.redo[r]) {  // an extreme score: the whole row in fp64
        float lse_ref = 0.0f;
        reference_row(pb, b, i, h, ws.row, &lse_ref);
        const int64_t oo = pb.out_offset(b, i, h);
        for (int64_t e = 0; e < dv; ++e) store_f32(p.out.data, oo + e * pb.os.dim, pb.out_dtype, ws.row[e]);
        if (pb.has_lse) static_cast<float*>(p.lse.data)[pb.lse_offset(b, i, h)] = lse_ref;
      } else if (plan.nsplit == 1) {
        const int64_t oo = pb.out_offset(b, i, h);
        if (direct_o || direct_o16) {
          // written by the transpose above
        } else if (fast_store)
          K.store_row(o, dv, pb.out_dtype, static_cast<char*>(p.out.data) + oo * oesz);
        else
          for (int64_t e = 0; e < dv; ++e) store_f32(p.out.data, oo + e * pb.os.dim, pb.out_dtype, o[e * oe_s] * f);
        if (pb.has_lse) static_cast<float*>(p.lse.data)[pb.lse_offset(b, i, h)] = lse;
      } else {
        const int64_t grow = plan.row_base[b * pb.hkv + hk] + pr;
        float* po = plan.part_o + (u.split * plan.total_rows + grow) * dv;
        for (int64_t e = 0; e < dv; ++e) po[e] = o[e * oe_s] * f;
        plan.part_lse[u.split * plan.total_rows + grow] = lse;
        plan.part_redo[u.split * plan.total_rows + grow] = ws.redo[r];
      }
    }
  };
  for (int h = 0; h < nh; ++h) finish(*wss[h], hk + h);
}

// Bytes of one key tile's K panel and V panel (16-bit or fp32 layouts, cpu_kernels.h).
void panel_tile_bytes(const Plan& plan, int64_t* k_bytes, int64_t* v_bytes) {
  const Problem& pb = *plan.pb;
  const int64_t nk = plan.tile_keys, T = plan.terms;
  *k_bytes = plan.lowp ? 2 * T * nk * round_up(pb.dqk, 32) : 4 * F32Panels::kp_elems(nk, pb.dqk);
  *v_bytes = plan.lowp ? 2 * T * round_up(pb.dv, 16) * nk : 4 * F32Panels::vp_elems(nk, pb.dv);
}

// Lays out the panels of every key tile of every (batch, kv head) and packs them, in parallel
// over tiles (16-bit panels), or leaves them to the units (fp32 panels: Panels::state). False
// (no panels) when they do not fit in memory: the units then pack their own tiles.
bool build_panels(const Plan& plan, int64_t pairs, int nt, Panels* pn) {
  const Problem& pb = *plan.pb;
  const F32Panels* F = plan.f32p;
  const int64_t nk = plan.tile_keys;
  pn->nk = nk;
  int64_t v_bytes = 0;
  panel_tile_bytes(plan, &pn->k_bytes, &v_bytes);
  pn->slot = round_up(pn->k_bytes + v_bytes, 64);  // 64-byte aligned slots
  pn->first.resize(static_cast<size_t>(pairs));
  int64_t tiles = 0;
  for (int64_t bh = 0; bh < pairs; ++bh) {
    pn->first[bh] = tiles;
    tiles += (pb.seqlen_k[bh / pb.hkv] + nk - 1) / nk;
  }
  int64_t bytes = 0;
  if (tiles == 0 || !checked_mul(tiles, pn->slot, &bytes)) return false;
  // The fp32 panels are fp32 copies of K and V (twice a 16-bit input's bytes): beyond this the
  // units pack their own tiles instead (a re-read of K / V per query tile, no allocation).
  if (F && bytes > kMaxF32PanelBytes) return false;
  pn->data = PanelBufferCache::take(static_cast<size_t>(bytes));
  pn->flags.reset(new (std::nothrow) uint8_t[static_cast<size_t>(tiles)]);
  if (!pn->data->ok() || !pn->flags) {
    pn->data.reset();
    return false;
  }
  if (F) {  // filled by the units (Panels::state)
    pn->state.reset(new (std::nothrow) std::atomic<uint8_t>[static_cast<size_t>(tiles)]());
    if (!pn->state) {
      pn->data.reset();
      return false;
    }
    return true;
  }
  const int64_t esz = static_cast<int64_t>(dtype_size(pb.kv_dtype));
  const char* kbase = static_cast<const char*>(pb.p->k.data);
  const char* vbase = static_cast<const char*>(pb.p->v.data);
#pragma omp parallel num_threads(nt)
  {
    std::vector<const void*> kr(static_cast<size_t>(nk)), vr(static_cast<size_t>(nk));
#pragma omp for schedule(dynamic, 4)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t bh = std::upper_bound(pn->first.begin(), pn->first.end(), tile) - pn->first.begin() - 1;
      const int64_t b = bh / pb.hkv, hk = bh % pb.hkv, j0 = (tile - pn->first[bh]) * nk;
      const int64_t n = std::min(nk, pb.seqlen_k[b] - j0);
      const KvRowOffsets rows(pb, b, hk);
      for (int64_t t = 0; t < n; ++t) {
        int64_t ko, vo;
        rows.at(j0 + t, &ko, &vo);
        kr[t] = kbase + ko * esz;
        vr[t] = vbase + vo * esz;
      }
      pack_panel_tile(plan, *pn, tile, n, kr.data(), vr.data(), pb.kv_dtype);
    }
  }
  return true;
}

// Each thread's workspaces, kept (the OpenMP workers persist) from one call to the next while
// they total at most kKeepWorkspaceBytes: allocated per call, glibc gave their pages back on free
// and the next call faulted them in again -- the row-major decode plans' (kUnitHeads of ~52 KB
// at D = 128): ~5% of a B = 1 kv 4k decode at 2 threads (perf: do_madvise, vms_clear_ptes, page
// faults); the transposed tiles' one (~2.4 MB at 96 x 512 tiles, D = 256, huge pages zeroed on
// first touch): 7% of a bf16 prefill at S = 512 on AMX (perf: clear_page_erms). A thread's
// entries are replaced when a call needs other sizes.
constexpr size_t kKeepWorkspaceBytes = size_t{64} << 20;
std::vector<std::unique_ptr<Workspace>>& kept_workspaces() {
  thread_local std::vector<std::unique_ptr<Workspace>> v;
  return v;
}

// The K / V panels of a kv head (all keys) up to which a thread packs its own (run_plan's
// local_panels): about what stays in L2 beside a 96 x 512 tile's S^T / P^T / O^T.
constexpr int64_t kLocalPanelBytes = int64_t{1} << 20;

// A thread's own K / V panels (run_plan's local_panels), kept from one call to the next while
// at most kKeepPanelBytes (allocated per call, their pages were faulted in again every call).
std::unique_ptr<AlignedBuffer>& kept_local_panels() {
  thread_local std::unique_ptr<AlignedBuffer> b;
  return b;
}

// The split partials' buffer, kept by the calling thread from one call to the next while it is
// at most kKeepPartialBytes (per-call allocation: the same page faults as the workspaces).
constexpr size_t kKeepPartialBytes = size_t{16} << 20;
std::unique_ptr<AlignedBuffer>& kept_partials() {
  thread_local std::unique_ptr<AlignedBuffer> b;
  return b;
}

// Split-KV count (core/splits.h). A work unit is (batch, kv head, tile of group x Sq packed
// rows), one thread each: decode with one kv head is 1 unit and gets split over the cores
// instead of leaving all but one idle. Each split keeps >= 4 key tiles (the partial row write
// and the merge then cost little next to the split's share of the scores).
int num_splits(const Problem& pb, int workers, int64_t tile_rows, int64_t tile_keys, int64_t unit_heads) {
  const int64_t q_tiles = (pb.group * pb.max_sq + tile_rows - 1) / tile_rows;
  // Row-major plans ask for 4 units per thread: their units (all kv heads of a batch) are few
  // and long, and on a shared machine one preempted thread holding the last of 2 units doubled
  // the wall time (B = 1, kv 4k: 0.67x the one-head-per-unit build); splits keep every unit's
  // reads contiguous and cost one partial row write and merge per split.
  const int64_t units = pb.batch * ((pb.hkv + unit_heads - 1) / unit_heads) * q_tiles;
  const int64_t max_splits = pb.max_sk / (4 * tile_keys);
  int s = choose_num_splits({.units = units,
                             .slots = unit_heads > 1 ? 4 * workers : workers,
                             .max_splits = max_splits,
                             .requested = pb.p->num_splits});
  // Row-major units are long and of equal cost: a unit count that is not a multiple of the
  // threads leaves one thread reading alone at the end, at one core's ~half of the streaming
  // read (B = 1: 7 splits on 2 threads ran 4 units against 3). Rounded up to whole rounds.
  if (unit_heads > 1 && pb.p->num_splits <= 0 && s > 1 && workers > 1)
    while ((units * s) % workers != 0 && s < 128 && s < max_splits) ++s;
  return s;
}

// Packed rows per query tile: the group x Sq rows of a (batch, kv head), up to kTileRows, whole
// 8-row groups.
// The row-major decode kernels serve every tile when no tile has more than 8 packed rows (and
// their layout conditions hold): then the plan is theirs (8-row tiles, 32-key tiles, no packed
// 16-bit panels), whatever the table's own tiles are.
bool rows_kernels_ok(const Problem& pb, const Kernels& k) {
  return k.qk_rows && pb.ks.dim == 1 && pb.vs.dim == 1 && pb.dqk % 8 == 0 && pb.dv % 8 == 0 &&
         pb.dtype != DType::int32;
}
bool all_rows_tiles(const Problem& pb, const Kernels& k) { return rows_kernels_ok(pb, k) && pb.group * pb.max_sq <= 8; }

int64_t unit_heads_for(const Problem& pb, const Kernels& k) {
  return all_rows_tiles(pb, k) ? std::min(kUnitHeads, pb.hkv) : 1;
}

int64_t tile_rows_for(const Problem& pb, const Kernels& k, const LowpKernels* lowp, const F32Panels* f32p) {
  if (all_rows_tiles(pb, k)) return 8;
  const int64_t tr = lowp && lowp->tile_rows > 0   ? lowp->tile_rows
                     : f32p && f32p->tile_rows > 0 ? f32p->tile_rows
                                                   : kTileRows;
  return std::min(tr, round_up(pb.group * pb.max_sq, k.row_align));
}

// The 16-bit product kernels serve 16-bit and fp8 inputs whose K / V rows have unit dim stride
// (the packers read whole vectors); nullptr: the fp32 kernels.
const LowpKernels* lowp_for(const Problem& pb, const Kernels& k, int* terms) {
  *terms = pb.dtype == DType::float16 ? 2 : 1;
  // (fp8 KV: the e4m3 K / V rows are exact in bf16; their factors act on S and P, not on K / V.)
  if (pb.ks.dim != 1 || pb.vs.dim != 1 || all_rows_tiles(pb, k)) return nullptr;
  if (pb.dtype == DType::bfloat16 || pb.dtype == DType::float8_e4m3) return k.lowp_bf16;
  if (pb.dtype == DType::float16) return k.lowp_f16;
  return nullptr;
}

// The fp32 panel products serve every floating dtype the 16-bit ones do not, under the same
// layout conditions (unit dim stride K / V rows, not the row-major plans).
const F32Panels* f32p_for(const Problem& pb, const Kernels& k, const LowpKernels* lowp) {
  if (lowp || !k.f32p || pb.ks.dim != 1 || pb.vs.dim != 1 || all_rows_tiles(pb, k)) return nullptr;
  if (pb.softcap > std::numeric_limits<float>::max() / 2) return nullptr;  // softcap x log2(e) must be finite
  const DType t = pb.dtype;
  return t == DType::float32 || t == DType::float16 || t == DType::bfloat16 || t == DType::float8_e4m3 ? k.f32p
                                                                                                        : nullptr;
}

// A kv head's K / V panels beyond LowpKernels::big_panel_bytes (terms: bf16 planes per value).
bool big_panels(const Problem& pb, const LowpKernels* l, int terms) {
  return l && l->big_panel_bytes > 0 &&
         2 * terms * pb.max_sk * (round_up(pb.dqk, 32) + round_up(pb.dv, 16)) > l->big_panel_bytes;
}

int64_t tile_keys_for(const Problem& pb, const LowpKernels* l, const F32Panels* f, int terms) {
  if (big_panels(pb, l, terms) && l->big_key_tile > 0) return l->big_key_tile;
  return l ? l->key_tile : f ? f->key_tile : kTileKeys;
}

// 0 = the OpenMP default (all cores, or OMP_NUM_THREADS). More threads than processors only
// oversubscribe the cores, and a huge request made libgomp abort the process ("Thread creation
// failed"), so a request is clamped to omp_get_num_procs() (documented in params.h / fa4.h).
int resolve_threads(int32_t requested) {
  return requested > 0 ? std::min<int>(requested, omp_get_num_procs()) : omp_get_max_threads();
}

}  // namespace
}  // namespace cpu

namespace {
Status forward(const Problem& pb);
}  // namespace

Status cpu_forward(const Problem& pb) {
  try {
    return forward(pb);
  } catch (const std::bad_alloc&) {  // the unit list (host memory only)
    return Status::Error(StatusCode::out_of_memory, "cpu backend: out of host memory for the work plan");
  }
}

namespace {
Status forward(const Problem& pb) {
  using namespace cpu;
  if (pb.batch == 0 || pb.hq == 0 || pb.max_sq == 0) return Status::Ok();
  const int nt = resolve_threads(pb.p->num_threads);

  Plan plan;
  plan.pb = &pb;
  plan.kern = &best_kernels();
  const int64_t g = pb.group;
  plan.lowp = lowp_for(pb, *plan.kern, &plan.terms);
  plan.f32p = f32p_for(pb, *plan.kern, plan.lowp);
  plan.tile_keys = tile_keys_for(pb, plan.lowp, plan.f32p, plan.terms);
  plan.prefetch_panels = big_panels(pb, plan.lowp, plan.terms) && plan.lowp->prefetch_next;
  plan.tile_rows = tile_rows_for(pb, *plan.kern, plan.lowp, plan.f32p);
  plan.rows_kernels = rows_kernels_ok(pb, *plan.kern);
  const int64_t unit_heads = unit_heads_for(pb, *plan.kern);
  plan.nsplit = num_splits(pb, nt, plan.tile_rows, plan.tile_keys, unit_heads);

  // Units, and the global packed-row numbering used by the split partials.
  // Sizes of host scratch, checked: varlen q does not bound B x Hkv by out's size, and the
  // partials scale with num_splits. A product that does not fit cannot be allocated either.
  int64_t pairs = 0, part_lse_n = 0, part_o_n = 0;
  std::vector<Unit> units;
  if (!checked_mul(pb.batch, pb.hkv, &pairs))
    return Status::Error(StatusCode::out_of_memory, "cpu backend: batch x kv heads exceeds host memory");
  plan.row_base.resize(static_cast<size_t>(pairs));
  for (int64_t b = 0; b < pb.batch; ++b) {
    const SeqMask sm = pb.seq_mask(b);
    const int64_t rows = g * sm.sq;
    for (int64_t hk = 0; hk < pb.hkv; ++hk) {
      plan.row_base[b * pb.hkv + hk] = plan.total_rows;
      plan.total_rows += rows;
      if (hk % unit_heads != 0) continue;  // in the unit of hk - hk % unit_heads
      const int32_t nh = static_cast<int32_t>(std::min(unit_heads, pb.hkv - hk));
      for (int64_t r0 = 0; r0 < rows; r0 += plan.tile_rows) {
        const int64_t n = std::min(plan.tile_rows, rows - r0);
        int64_t klo, khi;
        sm.key_range(r0 / g, (r0 + n - 1) / g + 1, &klo, &khi);
        for (int64_t s = 0; s < plan.nsplit; ++s) {
          int64_t lo, hi;
          split_range(klo, khi, plan.nsplit, s, plan.tile_keys, &lo, &hi);
          units.push_back({b, hk, r0, n, static_cast<int32_t>(s), n * (hi - lo) * nh, nh});
        }
      }
    }
  }
  // Largest first, but kept together per (batch, kv head): pairs by their total cost, the units
  // of a pair by theirs. Consecutive units then read the same K / V panels (in L2 for S <= ~4k
  // at D = 128) where a global cost order interleaves the heads of causal masks (equal costs at
  // equal positions) and every unit streamed its panels from L3; the small units of the last
  // pairs still come last for the balance.
  std::vector<int64_t> pair_cost(static_cast<size_t>(pairs), 0);
  for (const Unit& x : units) pair_cost[x.b * pb.hkv + x.hk] += x.cost;
  std::stable_sort(units.begin(), units.end(), [&](const Unit& a, const Unit& b) {
    const int64_t pa = a.b * pb.hkv + a.hk, pbb = b.b * pb.hkv + b.hk;
    if (pa != pbb) return pair_cost[pa] != pair_cost[pbb] ? pair_cost[pa] > pair_cost[pbb] : pa < pbb;
    return a.cost > b.cost;
  });

  // Split partials: every (tile, split) unit writes all of its rows, so no initialization.
  // One buffer, [part_o | part_lse | part_redo], kept by the calling thread for its next call
  // (up to kKeepPartialBytes; see kept_partials).
  std::unique_ptr<AlignedBuffer> parts;
  if (plan.nsplit > 1) {
    int64_t o_bytes = 0, bytes = 0;
    if (checked_mul(plan.nsplit, plan.total_rows, &part_lse_n) && checked_mul(part_lse_n, pb.dv, &part_o_n) &&
        checked_mul(part_o_n + part_lse_n, 4, &o_bytes) && checked_add(o_bytes, part_lse_n, &bytes) &&
        bytes < (int64_t{1} << 56)) {
      std::unique_ptr<AlignedBuffer>& kept = kept_partials();
      if (kept && kept->size >= static_cast<size_t>(bytes) + 64)
        parts = std::move(kept);
      else
        parts.reset(new (std::nothrow) AlignedBuffer(static_cast<size_t>(bytes)));
    }
    if (!parts || !parts->ok())
      return Status::Error(StatusCode::out_of_memory, "cpu backend: out of host memory for split-KV partials (num_splits " +
                                                          std::to_string(plan.nsplit) + ")");
    plan.part_o = static_cast<float*>(parts->p);
    plan.part_lse = plan.part_o + part_o_n;
    plan.part_redo = reinterpret_cast<uint8_t*>(plan.part_lse + part_lse_n);
  }
  struct KeepParts {  // on every return from here on
    std::unique_ptr<AlignedBuffer>& b;
    ~KeepParts() {
      if (b && b->ok() && b->size <= kKeepPartialBytes) kept_partials() = std::move(b);
    }
  } keep_parts{parts};

  const int64_t nunits = static_cast<int64_t>(units.size());
  const int workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nt, nunits)));
  // Per-thread panels (16-bit or fp32 panel products, one split, several query tiles per kv head, a kv head's
  // K / V panels within kLocalPanelBytes): a thread takes every unit of a (batch, kv head) in
  // turn and first packs that head's panels into its own buffer, which stays in its L2 for those
  // units -- where the pass over every head's panels before the units wrote them all out to L3
  // (8 MB at B 1 H 16 S 512 D 256) and each head's first unit read them back from there, and at
  // 2 threads both cores ran units of the same head at once. Measured (2026-12-07, bench/cpu_ab.py, 2
  // threads, GFLOP/s ratio): bf16 H 16 S 512 D 256 1.43-1.59x, D 128 1.23-1.41x, causal
  // 1.39-1.59x, S 2048 D 128 1.08-1.17x. The fp32 panels too (2026-12-07, Zen 4, 2 threads, fp32
  // H 16 S 512: D 128 1.01-1.03x, D 256 1.01-1.03x; a head's panels are 512 KB / 1 MB there, packed
  // once instead of ~10% twice by units of the same head racing for a tile). Whole heads per thread: the pairs' costs must share out
  // evenly (the largest-first greedy assignment's busiest thread at most 1/16 above an even
  // share; 3 equal heads on 2 threads gained nothing).
  int64_t tile_k_bytes = 0, tile_v_bytes = 0;
  panel_tile_bytes(plan, &tile_k_bytes, &tile_v_bytes);
  const int64_t tile_slot = round_up(tile_k_bytes + tile_v_bytes, 64);
  const int64_t head_panel_bytes = (pb.max_sk + plan.tile_keys - 1) / plan.tile_keys * tile_slot;
  bool local_panels = (plan.lowp || plan.f32p) && plan.nsplit == 1 && unit_heads == 1 && !plan.prefetch_panels &&
                      head_panel_bytes <= kLocalPanelBytes && g * pb.max_sq > plan.tile_rows;
  // Unit ranges of one (batch, kv head) each (the sort keeps a pair's units together, pairs by
  // falling total cost).
  std::vector<int64_t> group_at;
  if (local_panels) {
    std::vector<int64_t> load(static_cast<size_t>(workers), 0);
    int64_t total = 0, cost = 0;
    for (int64_t u = 0; u <= nunits; ++u) {
      if (u == nunits || u == 0 || units[u].b != units[u - 1].b || units[u].hk != units[u - 1].hk) {
        if (u > 0) *std::min_element(load.begin(), load.end()) += cost;
        group_at.push_back(u);
        cost = 0;
      }
      if (u < nunits) {
        cost += units[u].cost;
        total += units[u].cost;
      }
    }
    const double busiest = static_cast<double>(*std::max_element(load.begin(), load.end()));
    local_panels = busiest * workers <= 1.0625 * static_cast<double>(total);
  }
  Panels panels;
  if (!local_panels) {
    FA4_PROF(pp, kPrPanels);
    if ((plan.lowp || plan.f32p) && g * pb.max_sq > plan.tile_rows && build_panels(plan, pairs, nt, &panels))
      plan.panels = &panels;
  }
  const int64_t ngroups = local_panels ? static_cast<int64_t>(group_at.size()) - 1 : 0;
  bool oom = false;
#pragma omp parallel num_threads(workers)
  {
    std::vector<std::unique_ptr<Workspace>> ws;
    std::vector<Workspace*> wsp;
    bool ok = true;
    const int64_t mp = round_up(plan.tile_rows, plan.kern->row_align);
    const int terms = plan.lowp ? plan.terms : 0;
    ws.swap(kept_workspaces());  // the last call's, used where their sizes match
    for (size_t h = 0; h < static_cast<size_t>(unit_heads); ++h) {
      if (h < ws.size() && ws[h] && ws[h]->ok() && ws[h]->mp_max == mp && ws[h]->nk == plan.tile_keys &&
          ws[h]->dqk == pb.dqk && ws[h]->dv == pb.dv && ws[h]->terms == terms) {
        wsp.push_back(ws[h].get());
        continue;
      }
      auto w = std::make_unique<Workspace>(mp, plan.tile_keys, pb.dqk, pb.dv, terms);
      ok = ok && w->ok();
      wsp.push_back(w.get());
      if (h < ws.size())
        ws[h] = std::move(w);
      else
        ws.push_back(std::move(w));
    }
    if (!ok) {
#pragma omp atomic write
      oom = true;
    }
    if (local_panels) {
      Panels loc;
      Plan lp = plan;
      const int64_t nk = plan.tile_keys, max_tiles = (pb.max_sk + nk - 1) / nk;
      loc.nk = nk;
      loc.k_bytes = tile_k_bytes;
      loc.slot = tile_slot;
      loc.first.assign(static_cast<size_t>(pairs), 0);  // every pair's tiles start at 0 here
      std::unique_ptr<AlignedBuffer>& kept = kept_local_panels();
      if (!kept || kept->size < static_cast<size_t>(max_tiles * loc.slot))
        kept.reset(new (std::nothrow) AlignedBuffer(static_cast<size_t>(max_tiles * loc.slot)));
      loc.data = std::move(kept);
      loc.flags.reset(new (std::nothrow) uint8_t[static_cast<size_t>(max_tiles)]);
      if (!loc.data || !loc.data->ok() || !loc.flags) {
        ok = false;
#pragma omp atomic write
        oom = true;
      }
      lp.panels = &loc;
      std::vector<const void*> kr(static_cast<size_t>(nk)), vr(static_cast<size_t>(nk));
      const int64_t esz = static_cast<int64_t>(dtype_size(pb.kv_dtype));
      const char* kbase = static_cast<const char*>(pb.p->k.data);
      const char* vbase = static_cast<const char*>(pb.p->v.data);
#pragma omp for schedule(dynamic, 1)
      for (int64_t gi = 0; gi < ngroups; ++gi) {
        if (!ok) continue;
        const int64_t b = units[group_at[gi]].b, hk = units[group_at[gi]].hk;
        {
          FA4_PROF(pp, kPrPanels);
          const KvRowOffsets rows(pb, b, hk);
          for (int64_t tile = 0, j0 = 0; j0 < pb.seqlen_k[b]; ++tile, j0 += nk) {
            const int64_t n = std::min(nk, pb.seqlen_k[b] - j0);
            for (int64_t t = 0; t < n; ++t) {
              int64_t ko, vo;
              rows.at(j0 + t, &ko, &vo);
              kr[t] = kbase + ko * esz;
              vr[t] = vbase + vo * esz;
            }
            pack_panel_tile(lp, loc, tile, n, kr.data(), vr.data(), pb.kv_dtype);
          }
        }
        for (int64_t u = group_at[gi]; u < group_at[gi + 1]; ++u) run_unit(lp, units[u], wsp.data());
      }
      if (loc.data && loc.data->ok() && loc.data->size <= kKeepPanelBytes) kept = std::move(loc.data);
    } else {
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < nunits; ++u)
        if (ok) run_unit(plan, units[u], wsp.data());
    }
    size_t bytes = 0;
    for (const auto& w : ws) bytes += w ? w->buf.size : 0;
    if (ok && bytes <= kKeepWorkspaceBytes) kept_workspaces().swap(ws);
  }
  if (oom) return Status::Error(StatusCode::out_of_memory, "cpu backend: out of host memory for per-thread tiles");

  if (plan.nsplit > 1) {
    const AttentionParams& p = *pb.p;
#pragma omp parallel num_threads(nt)
    {
      std::vector<float> acc(static_cast<size_t>(std::max<int64_t>(pb.dv, 1)));
#pragma omp for schedule(dynamic, 1)
      for (int64_t bh = 0; bh < pairs; ++bh) {
        const int64_t b = bh / pb.hkv, hk = bh % pb.hkv;
        const int64_t rows = g * pb.seqlen_q[b];
        for (int64_t pr = 0; pr < rows; ++pr) {
          const int64_t grow = plan.row_base[bh] + pr, i = pr / g, h = hk * g + pr % g;
          bool redo = false;  // some split saw an extreme score: its partial is not usable
          for (int64_t sp = 0; sp < plan.nsplit; ++sp) redo = redo || plan.part_redo[sp * plan.total_rows + grow];
          float lse = 0.0f;
          if (!redo) {
            // exact: a split's weight is > 0 even where it underflows (its +-inf / NaN count).
            lse = merge_partial_row(plan.nsplit, plan.part_lse + grow, plan.total_rows, plan.part_o + grow * pb.dv,
                                    plan.total_rows * pb.dv, 1, pb.dv, acc.data(), /*exact=*/true);
            // Finite partials (non-finite ones were redone) merged to +-inf: partials within the
            // weights' rounding of FLT_MAX (see cpu_merge.h); the fp64 row gives the exact value.
            redo = any_nonfinite_f32(acc.data(), pb.dv);
          }
          if (redo) {
            float lse_ref = 0.0f;
            reference_row(pb, b, i, h, acc.data(), &lse_ref);
            const int64_t oo = pb.out_offset(b, i, h);
            for (int64_t e = 0; e < pb.dv; ++e) store_f32(p.out.data, oo + e * pb.os.dim, pb.out_dtype, acc[e]);
            if (pb.has_lse) static_cast<float*>(p.lse.data)[pb.lse_offset(b, i, h)] = lse_ref;
            continue;
          }
          const int64_t oo = pb.out_offset(b, i, h);
          for (int64_t e = 0; e < pb.dv; ++e) store_f32(p.out.data, oo + e * pb.os.dim, pb.out_dtype, acc[e]);
          if (pb.has_lse) static_cast<float*>(p.lse.data)[pb.lse_offset(b, i, h)] = lse;
        }
      }
    }
  }
  return Status::Ok();
}
}  // namespace

Status cpu_combine(const CombineParams& c) {
  using namespace cpu;
  const TensorView &op = c.out_partials, &lp = c.lse_partials;
  const int64_t S = op.shape[0], B = op.shape[1], Sq = op.shape[2], H = op.shape[3], D = op.shape[4];
  const int64_t rows = B * Sq * H;
  if (rows == 0) return Status::Ok();
  const auto* o = static_cast<const float*>(op.data);
  const auto* l = static_cast<const float*>(lp.data);
  const int nt = resolve_threads(c.num_threads);
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> acc(static_cast<size_t>(std::max<int64_t>(D, 1)));
    std::vector<double> acc64;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t h = row % H, i = (row / H) % Sq, b = row / (H * Sq);
      // An empty partials view (no splits, or Dv = 0 for out_partials) arrives with 0 strides
      // (dispatch.cpp), so these offsets are 0 there. No splits: nothing seen, O = 0.
      const float* lrow = l + (b * lp.stride[1] + h * lp.stride[2] + i * lp.stride[3]);
      const float* orow = o + (b * op.stride[1] + i * op.stride[2] + h * op.stride[3]);
      const float lse = merge_partial_row(S, lrow, lp.stride[0], orow, op.stride[0], op.stride[4], D, acc.data());
      if (any_nonfinite_f32(acc.data(), D)) {
        // +-inf / NaN partials, or finite ones within the weights' rounding of FLT_MAX that
        // merged to +-inf in fp32 (cpu_merge.h): the row again in fp64, as the reference merges.
        acc64.resize(static_cast<size_t>(D));
        merge_partial_row_t<double>(S, lrow, lp.stride[0], orow, op.stride[0], op.stride[4], D, acc64.data());
        for (int64_t e = 0; e < D; ++e) acc[e] = static_cast<float>(acc64[e]);
      }
      const int64_t oo = b * c.out.stride[0] + i * c.out.stride[1] + h * c.out.stride[2];
      for (int64_t e = 0; e < D; ++e) store_f32(c.out.data, oo + e * c.out.stride[3], c.out.dtype, acc[e]);
      if (c.lse.present())
        static_cast<float*>(c.lse.data)[b * c.lse.stride[0] + h * c.lse.stride[1] + i * c.lse.stride[2]] = lse;
    }
  }
  return Status::Ok();
}

void cpu_describe(const Problem& pb, PlanInfo* info) {
  using namespace cpu;
  const Kernels& k = best_kernels();
  int terms = 1;
  const LowpKernels* lowp = lowp_for(pb, k, &terms);
  const F32Panels* f32p = f32p_for(pb, k, lowp);
  info->kernel = k.name;
  info->tile_m = tile_rows_for(pb, k, lowp, f32p);
  info->tile_n = tile_keys_for(pb, lowp, f32p, terms);
  info->pack_gqa = pb.group > 1;  // the cpu tiles always pack the group's heads
  info->splits = num_splits(pb, resolve_threads(pb.p->num_threads), info->tile_m, info->tile_n, unit_heads_for(pb, k));
}

std::string cpu_info() {
  const cpu::Kernels& k = cpu::best_kernels();
  const std::string name = k.name;
  const std::string isa = name == "amx"      ? "AMX-BF16 + AVX-512"
                          : name == "avx512" ? (k.lowp_bf16 ? "AVX-512 + BF16" : "AVX-512")
                          : name == "avx2"   ? "AVX2+FMA"
                                             : "portable";
  return isa + ", " + std::to_string(omp_get_max_threads()) + " threads";
}

}  // namespace fa4::core
