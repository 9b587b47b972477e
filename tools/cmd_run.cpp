// fa4 run: one attention call on random inputs, timed, optionally checked against reference.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <vector>

#include "args.h"
#include "commands.h"
#include "device.h"
#include "output.h"
#include "problem_builder.h"
#include "runner.h"

namespace fa4cli {
namespace {

constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();

const std::vector<OptSpec>& run_options() {
  static const std::vector<OptSpec> t = {
      {"--batch", 'b', ArgKind::integer, "B", "batch size (sequences) (default 2)", 1, 1 << 20},
      {"--seqlen", 's', ArgKind::integer, "S", "query and key length (default 128)", 1, 1 << 24},
      {"--seqlen-q", 0, ArgKind::integer, "SQ", "query length (varlen: maximum) (default --seqlen)", 1, 1 << 24},
      {"--seqlen-k", 0, ArgKind::integer, "SK", "key length (varlen: maximum; cache/paged: capacity) (default --seqlen)", 1, 1 << 24},
      {"--heads", 0, ArgKind::integer, "H", "query heads (default 4)", 1, 4096},
      {"--kv-heads", 0, ArgKind::integer, "HKV", "key/value heads, must divide --heads: GQA/MQA (default --heads)", 1, 4096},
      {"--head-dim", 'd', ArgKind::integer, "D", "head dim of q and k (default 64)", 1, 256},
      {"--head-dim-v", 0, ArgKind::integer, "DV", "head dim of v and out (default --head-dim)", 1, 256},
      {"--dtype", 0, ArgKind::choice, "T", "input dtype: f32 (fp32, float32), f16 (fp16, float16), bf16 (bfloat16), e4m3 (fp8; out bf16) (default bf16)", 0, 0, 0, 0, FA4_CLI_DTYPES},
      {"--kv-dtype", 0, ArgKind::choice, "T", "k / v dtype: e4m3 (fp8) with --dtype f16 / bf16 is an fp8 KV cache (k_new / v_new in --dtype, quantized into it; out in --dtype) (default --dtype)", 0, 0, 0, 0, FA4_CLI_DTYPES},
      {"--kv-scale", 0, ArgKind::choice, "MODE", "fp8 KV cache factors (k_descale / v_descale): per-head [B, Hkv] or per-token (k's shape without its last dim) (default per-head)", 0, 0, 0, 0, "per-head|per-token"},
      {"--causal", 0, ArgKind::flag, "", "causal mask (bottom-right aligned)"},
      {"--window", 0, ArgKind::int_pair, "L,R", "sliding window, -1 = unbounded side", -1, kI32},
      {"--chunk", 0, ArgKind::integer, "C", "chunked causal attention with chunk size C (0 = off)", 0, kI32},
      {"--softcap", 0, ArgKind::real, "X", "logit softcap X*tanh(s/X) (0 = off)", 0, 0, 0, 1e6},
      {"--sinks", 0, ArgKind::flag, "", "random attention-sink logit per query head"},
      {"--scale", 0, ArgKind::real, "X", "softmax scale (default 1/sqrt(head-dim))", 0, 0, 0, 1e6},
      {"--paged", 0, ArgKind::integer, "P", "paged KV cache with page size P and a random page permutation", 1, 1 << 20},
      {"--kv-cache", 0, ArgKind::flag, "", "KV cache of capacity --seqlen-k with random cache_seqlens"},
      {"--cache-batch-idx", 0, ArgKind::flag, "", "with --kv-cache: random cache_batch_idx into a larger cache"},
      {"--append", 0, ArgKind::integer, "N", "append N new k/v rows per sequence before attention (implies --kv-cache unless --paged)", 1, 1 << 20},
      {"--varlen", 0, ArgKind::flag, "", "random per-sequence lengths (cu_seqlens); ragged k too unless a cache is used"},
      {"--splits", 0, ArgKind::integer, "N", "split-KV: 0 = heuristic, 1 = off, N = force (default 0)", 0, 1024},
      {"--lse", 0, ArgKind::flag, "", "also write (and with --check compare) the log-sum-exp"},
      {"--backend", 0, ArgKind::choice, "B", "auto, reference, cpu, cuda (default auto)", 0, 0, 0, 0, "auto|reference|cpu|cuda"},
      {"--threads", 0, ArgKind::integer, "N", "cpu backend threads, 0 = all cores (default 0)", 0, 4096},
      {"--seed", 0, ArgKind::integer, "S", "random seed of the inputs (default 0)", 0, std::numeric_limits<int64_t>::max()},
      {"--dist", 0, ArgKind::choice, "DIST", "input distribution: normal, uniform, outliers (default normal)", 0, 0, 0, 0, "normal|uniform|outliers"},
      {"--reps", 'n', ArgKind::integer, "N", "timed repetitions: median and min are reported (default 1)", 1, 1000000},
      {"--warmup", 0, ArgKind::integer, "N", "untimed calls first (default 1)", 0, 1000000},
      {"--check", 0, ArgKind::flag, "", "compare with backend=reference on the same inputs; exit 1 beyond tolerance"},
      {"--json", 0, ArgKind::text, "FILE", "also write the result as JSON (after the run; never on bad arguments)"},
      {"--help", 'h', ArgKind::flag, "", "this help"},
  };
  return t;
}

}  // namespace

std::string run_help() {
  return "usage: fa4 run [options]\n"
         "\n"
         "One attention forward call on random inputs (BSHD, from --seed): prints the time (median and\n"
         "min over --reps), the FLOP rate and, with --check, the error against the reference backend.\n"
         "\n"
         "  FLOPs = 2 * (Dqk + Dv) * V,  V = number of visible (query, key) score elements summed over\n"
         "          sequences and query heads (exact, after masks, varlen and cache lengths).\n"
         "          Dense non-causal: V = B*H*Sq*Sk, so FLOPs = 4*B*H*Sq*Sk*D for Dqk = Dv = D.\n"
         "\n"
         "options:\n" +
         format_options(run_options()) +
         "\n"
         "--check tolerances (DESIGN.md section 4), out vs reference:\n"
         "  f32 rel-L2 <= 1e-5, max-abs <= 1e-4;  f16 2e-3, 1e-2;  bf16 1e-2, 5e-2;\n"
         "  e4m3 rel-L2 <= 5e-2 and cosine >= 0.999;  lse max-abs <= 1e-3; every element written.\n"
         "  (out max-abs: beyond the output dtype's rounding -- one ulp at the reference's value, half\n"
         "  for each of the two rounded results -- as the test suite compares.)\n"
         "exit status: 0 ok, 1 --check failed, 2 bad arguments, 3 library error (e.g. backend unavailable)\n"
         "\n"
         "examples:\n"
         "  fa4 run -b 1 -s 1024 --heads 16 -d 128 --causal --reps 10\n"
         "  fa4 run --paged 16 --kv-cache --append 1 --seqlen-q 1 --seqlen-k 4096 --kv-heads 1 --check\n"
         "  fa4 run --paged 16 --append 1 --seqlen-q 1 --seqlen-k 4096 --kv-dtype e4m3 --kv-scale per-token --check\n";
}

int cmd_run(int argc, char** argv, int first) {
  if (wants_help(argc, argv, first)) {
    std::fputs(run_help().c_str(), stdout);
    return kExitOk;
  }
  const ParsedArgs a = parse_args(run_options(), argc, argv, first);

  ProblemSpec s;
  s.batch = a.get_int("--batch", 2);
  const int64_t seqlen = a.get_int("--seqlen", 128);
  s.seqlen_q = a.get_int("--seqlen-q", seqlen);
  s.seqlen_k = a.get_int("--seqlen-k", seqlen);
  s.heads = a.get_int("--heads", 4);
  s.kv_heads = a.get_int("--kv-heads", s.heads);
  s.head_dim = a.get_int("--head-dim", 64);
  s.head_dim_v = a.get_int("--head-dim-v", s.head_dim);
  s.dtype = dtype_from_name(a.get_str("--dtype", "bf16"));
  set_kv_dtype(a, &s);
  s.causal = a.flag("--causal");
  const auto win = a.get_pair("--window", {-1, -1});
  s.window_left = win.first;
  s.window_right = win.second;
  s.chunk = a.get_int("--chunk", 0);
  s.softcap = static_cast<float>(a.get_real("--softcap", 0.0));
  s.sinks = a.flag("--sinks");
  s.scale = static_cast<float>(a.get_real("--scale", 0.0));
  s.page_size = a.get_int("--paged", 0);
  s.append = a.get_int("--append", 0);
  s.kv_cache = a.flag("--kv-cache") || (s.append > 0 && s.page_size == 0);
  s.cache_batch_idx = a.flag("--cache-batch-idx");
  s.varlen = a.flag("--varlen");
  s.splits = static_cast<int32_t>(a.get_int("--splits", 0));
  s.lse = a.flag("--lse");
  s.backend = backend_from_name(a.get_str("--backend", "auto"));
  s.threads = static_cast<int32_t>(a.get_int("--threads", 0));
  s.seed = static_cast<uint64_t>(a.get_int("--seed", 0));
  s.dist = dist_from_name(a.get_str("--dist", "normal"));
  const int reps = static_cast<int>(a.get_int("--reps", 1));
  const int warmup = static_cast<int>(a.get_int("--warmup", 1));
  const bool check = a.flag("--check");
  if (a.has("--scale") && s.scale <= 0.0f) usage_error("--scale", "must be > 0, got '" + a.get_str("--scale", "") + "'");
  check_spec(s);
  const std::string json_path = output_paths(a, {"--json"})[0];

  // The device first: asking for an unavailable backend fails before any allocation.
  std::unique_ptr<Device> dev;
  fa4::Status st = open_device(s.backend, &dev);
  if (!st) return report_status(st);

  std::unique_ptr<HostProblem> hp = build_problem(s);
  const fa4::Backend backend = resolve_backend(s.backend);

  Timing t;
  fa4::PlanInfo plan;
  st = time_problem(*hp, *dev, reps, warmup, &t, &plan);
  if (!st) return report_status(st);  // before any output: a rejected call prints one line only
  std::printf("fa4 run: backend %s, dtype %s, layout %s, mask %s\n", fa4::backend_name(backend),
              dtype_label(s).c_str(), layout_name(s).c_str(), mask_name(s).c_str());
  // The kernel and tile the call ran on (the cuda planner's choice, e.g. sm80 vs sm90).
  std::printf("plan: kernel %s, tile %" PRId64 "x%" PRId64 ", PackGQA %s, splits %d%s\n", plan.kernel.c_str(), plan.tile_m,
              plan.tile_n, plan.pack_gqa ? "yes" : "no", plan.splits,
              plan.staged ? ", rows staged (not 16-byte aligned)" : "");
  std::printf("shape: B=%" PRId64 " Sq=%" PRId64 " Sk=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " Dqk=%" PRId64
              " Dv=%" PRId64 "\n",
              s.batch, s.seqlen_q, s.seqlen_k, s.heads, s.kv_heads, s.head_dim, s.head_dim_v);
  std::printf("features: scale %s, softcap %g, sinks %s, splits %d, lse %s, threads %d, seed %" PRIu64 ", dist %s\n",
              s.scale > 0 ? std::to_string(s.scale).c_str() : "default", s.softcap, s.sinks ? "yes" : "no", s.splits,
              s.lse ? "yes" : "no", s.threads, s.seed, dist_name(s.dist));
  if (s.varlen || s.kv_cache || s.page_size > 0) {
    auto list = [](const std::vector<int64_t>& v) {
      std::string o;
      for (size_t i = 0; i < v.size() && i < 8; ++i) {
        if (i) o += ',';
        o += std::to_string(v[i]);
      }
      return v.size() > 8 ? o + ",..." : o;
    };
    std::printf("seqlens: q [%s], k [%s]%s\n", list(hp->seqlen_q).c_str(), list(hp->seqlen_k).c_str(),
                s.append > 0 ? " (k includes the appended rows)" : "");
  }
  std::fflush(stdout);
  const double flops = hp->flops();
  std::printf("time: median %s, min %s (%d reps, %d warmup)\n", format_time(t.median).c_str(),
              format_time(t.min).c_str(), reps, warmup);
  std::printf("flops: %.6g (2*(Dqk+Dv)*visible scores, %.0f visible)\n", flops, hp->visible_scores());
  std::printf("rate: %s (median), %s (best)\n", format_rate(t.median > 0 ? flops / t.median : 0).c_str(),
              format_rate(t.min > 0 ? flops / t.min : 0).c_str());
  ErrorStats e;
  if (check) {
    st = check_against_reference(*hp, *dev, &e);
    if (!st) return report_status(st);
    std::printf("check: out rel-L2 %.3e (tol %.0e), max-abs %.3e", e.out_rel_l2, e.tol.rel_l2, e.out_max_abs);
    if (e.tol.max_abs >= 0)
      std::printf(" (%.3e beyond the output dtype's rounding, tol %.0e)", std::max(0.0, e.out_max_abs_beyond),
                  e.tol.max_abs);
    std::printf(", cosine %.6f", e.out_cosine);
    if (e.tol.min_cosine > -2) std::printf(" (min %.3f)", e.tol.min_cosine);
    if (e.out_unwritten) std::printf(", %" PRId64 " unwritten", e.out_unwritten);
    if (e.has_lse) {
      std::printf("; lse rel-L2 %.3e, max-abs %.3e (tol %.0e)", e.lse_rel_l2, e.lse_max_abs, e.tol.lse_abs);
      if (e.lse_unwritten) std::printf(", %" PRId64 " unwritten", e.lse_unwritten);
    }
    std::printf(": %s\n", e.pass ? "PASS" : ("FAIL (" + e.failures + ")").c_str());
  }
  std::fflush(stdout);
  if (!json_path.empty()) {
    std::ostringstream j;
    j << "{\n  \"tool\": \"fa4 run\",\n  \"version\": \"" << json_escape(fa4::version()) << "\",\n"
      << "  \"command\": \"" << json_escape(command_line(argc, argv)) << "\",\n"
      << "  \"backend\": \"" << fa4::backend_name(backend) << "\",\n"
      << "  \"plan\": {\"kernel\": \"" << json_escape(plan.kernel) << "\", \"tile_m\": " << plan.tile_m << ", \"tile_n\": "
      << plan.tile_n << ", \"pack_gqa\": " << (plan.pack_gqa ? "true" : "false") << ", \"splits\": " << plan.splits << "},\n"
      << "  \"dtype\": \"" << dtype_short(s.dtype) << "\", \"kv_dtype\": \"" << dtype_short(kv_dtype(s)) << "\""
      << (s.kv_fp8 ? std::string(", \"kv_scale\": \"") + (s.kv_scale_per_token ? "per-token" : "per-head") + "\"" : "")
      << ",\n"
      << "  \"layout\": \"" << json_escape(layout_name(s)) << "\",\n"
      << "  \"mask\": \"" << json_escape(mask_name(s)) << "\",\n"
      << "  \"batch\": " << s.batch << ", \"seqlen_q\": " << s.seqlen_q << ", \"seqlen_k\": " << s.seqlen_k
      << ", \"heads\": " << s.heads << ", \"kv_heads\": " << s.kv_heads << ", \"head_dim\": " << s.head_dim
      << ", \"head_dim_v\": " << s.head_dim_v << ",\n"
      << "  \"softcap\": " << jnum(s.softcap)
      << ", \"scale\": " << jnum(s.scale > 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim))) << ", \"sinks\": " << (s.sinks ? "true" : "false")
      << ", \"splits\": " << s.splits << ", \"lse\": " << (s.lse ? "true" : "false") << ", \"threads\": " << s.threads
      << ", \"seed\": " << s.seed << ", \"dist\": \"" << dist_name(s.dist) << "\",\n"
      << "  \"reps\": " << reps << ", \"warmup\": " << warmup << ", \"median_s\": " << jnum(t.median)
      << ", \"min_s\": " << jnum(t.min) << ",\n"
      << "  \"visible_scores\": " << jnum(hp->visible_scores(), 17) << ", \"flops\": " << jnum(flops, 17)
      << ", \"gflops\": " << jnum(t.median > 0 ? flops / t.median * 1e-9 : 0) << ", \"kv_bytes\": " << jnum(hp->kv_bytes(), 17);
    if (check)
      j << ",\n  \"check\": {\"pass\": " << (e.pass ? "true" : "false") << ", \"out_rel_l2\": " << jnum(e.out_rel_l2)
        << ", \"out_max_abs\": " << jnum(e.out_max_abs)
        << ", \"out_max_abs_beyond_rounding\": " << jnum(std::max(0.0, e.out_max_abs_beyond))
        << ", \"out_cosine\": " << jnum(e.out_cosine, 9)
        << ", \"out_unwritten\": " << e.out_unwritten << ", \"lse_rel_l2\": " << (e.has_lse ? jnum(e.lse_rel_l2) : "null")
        << ", \"lse_max_abs\": " << (e.has_lse ? jnum(e.lse_max_abs) : "null") << "}";
    j << "\n}\n";
    if (!write_file("--json", json_path, j.str())) return kExitFailure;
  }
  if (!check) return kExitOk;
  return e.pass ? kExitOk : kExitCheckFailed;
}

}  // namespace fa4cli
