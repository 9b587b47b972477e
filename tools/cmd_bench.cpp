// fa4 bench: sweeps of DESIGN.md section 5 at CPU scale (prefill by default, --decode for the
// decode sweep): a table on stdout, progress on stderr, and JSON / CSV records.
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
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
#include "sysinfo.h"

namespace fa4cli {
namespace {

const std::vector<OptSpec>& bench_options() {
  static const std::vector<OptSpec> t = {
      {"--backend", 0, ArgKind::choice, "B", "auto, reference, cpu, cuda (default cpu)", 0, 0, 0, 0, "auto|reference|cpu|cuda"},
      {"--dtypes", 0, ArgKind::choice_list, "T,...", "input dtypes from f32, f16, bf16, e4m3 (also fp32, float32, fp16, float16, bfloat16, fp8) (default bf16)", 0, 0, 0, 0, FA4_CLI_DTYPES},
      {"--kv-dtype", 0, ArgKind::choice, "T", "k / v dtype: e4m3 (fp8) with --dtype f16 / bf16 is an fp8 KV cache (k_new / v_new in --dtype, quantized into it; out in --dtype) (default: each --dtypes entry)", 0, 0, 0, 0, FA4_CLI_DTYPES},
      {"--kv-scale", 0, ArgKind::choice, "MODE", "fp8 KV cache factors (k_descale / v_descale): per-head [B, Hkv] or per-token (k's shape without its last dim) (default per-head)", 0, 0, 0, 0, "per-head|per-token"},
      {"--seqlens", 0, ArgKind::int_list, "S,...", "prefill: sequence lengths, Sq = Sk (default 512,1024,2048)", 1, 1 << 24},
      {"--head-dims", 0, ArgKind::int_list, "D,...", "head dims, Dqk = Dv (default 64,128; decode 128)", 1, 256},
      {"--causal", 0, ArgKind::choice_list, "no,yes", "prefill: mask variants, no, yes or both (default no,yes)", 0, 0, 0, 0, "no|yes"},
      {"--decode", 0, ArgKind::flag, "", "the decode sweep instead: 1 query token per sequence, reports GB/s of K+V read"},
      {"--kv-lens", 0, ArgKind::int_list, "L,...", "decode: kv lengths (default 1024,4096,16384)", 1, 1 << 24},
      {"--pages", 0, ArgKind::int_list, "P,...", "decode: page sizes, 0 = contiguous cache (default 0,16,64,256)", 0, 1 << 20},
      {"--batch", 'b', ArgKind::integer, "B", "batch size (default 1; decode 4)", 1, 1 << 20},
      {"--heads", 0, ArgKind::integer, "H", "query heads (default 2048/D: 32, 16, 8 for D = 64, 128, 256; decode 32)", 1, 4096},
      {"--kv-heads", 0, ArgKind::integer, "HKV", "key/value heads, must divide the heads (default = heads; decode 8)", 1, 4096},
      {"--reps", 'n', ArgKind::integer, "N", "timed repetitions per case (default 5)", 1, 1000000},
      {"--warmup", 0, ArgKind::integer, "N", "untimed calls per case (default 1)", 0, 1000000},
      {"--threads", 0, ArgKind::integer, "N", "cpu backend threads, 0 = all cores (default 0)", 0, 4096},
      {"--splits", 0, ArgKind::integer, "N", "split-KV: 0 = heuristic, 1 = off, N = force (default 0)", 0, 1024},
      {"--seed", 0, ArgKind::integer, "S", "random seed of the inputs (default 0; case i uses seed + i)", 0, std::numeric_limits<int64_t>::max()},
      {"--dist", 0, ArgKind::choice, "DIST", "input distribution: normal, uniform, outliers (default normal)", 0, 0, 0, 0, "normal|uniform|outliers"},
      {"--check", 0, ArgKind::flag, "", "also compare every case with the reference backend (slow); exit 1 on failure"},
      {"--quick", 0, ArgKind::flag, "", "a small sweep: 4 heads, D 64, seqlens 128,256 (decode: B 2, kv-lens 256,1024, pages 0,16), 2 reps, no warmup"},
      {"--json", 0, ArgKind::text, "FILE", "write the results as JSON (written only when the sweep completes)"},
      {"--csv", 0, ArgKind::text, "FILE", "write the results as CSV (written only when the sweep completes)"},
      {"--help", 'h', ArgKind::flag, "", "this help"},
  };
  return t;
}

struct Case {
  ProblemSpec spec;
  double flops = 0, kv_bytes = 0;
  Timing t;
  bool checked = false;
  ErrorStats err;
  double gflops() const { return t.median > 0 ? flops / t.median * 1e-9 : 0; }
  double gflops_best() const { return t.min > 0 ? flops / t.min * 1e-9 : 0; }
  double gbps() const { return t.median > 0 ? kv_bytes / t.median * 1e-9 : 0; }
};

std::string case_label(const ProblemSpec& s, bool decode) {
  char b[200];
  if (decode)
    std::snprintf(b, sizeof b, "%s B=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " L=%" PRId64 " D=%" PRId64 " page=%" PRId64,
                  dtype_label(s).c_str(), s.batch, s.heads, s.kv_heads, s.seqlen_k, s.head_dim, s.page_size);
  else
    std::snprintf(b, sizeof b, "%s B=%" PRId64 " H=%" PRId64 " Hkv=%" PRId64 " S=%" PRId64 " D=%" PRId64 " causal=%s",
                  dtype_label(s).c_str(), s.batch, s.heads, s.kv_heads, s.seqlen_q, s.head_dim, s.causal ? "yes" : "no");
  return b;
}

std::string json_record(const std::vector<Case>& cases, bool decode, fa4::Backend backend, const std::string& detail,
                        int threads, int reps, int warmup, int argc, char** argv) {
  std::ostringstream j;
  j << "{\n";
  j << "  \"tool\": \"fa4 bench\",\n";
  j << "  \"mode\": \"" << (decode ? "decode" : "prefill") << "\",\n";
  j << "  \"version\": \"" << json_escape(fa4::version()) << "\",\n";
  j << "  \"date\": \"" << utc_now_iso() << "\",\n";
  j << "  \"host\": \"" << json_escape(host_name()) << "\",\n";
  j << "  \"cpu\": \"" << json_escape(cpu_model()) << "\",\n";
  j << "  \"cpu_features\": \"" << json_escape(cpu_features()) << "\",\n";
  j << "  \"threads\": " << threads << ",\n";
  j << "  \"backend\": \"" << fa4::backend_name(backend) << "\",\n";
  j << "  \"backend_detail\": \"" << json_escape(detail) << "\",\n";
  j << "  \"command\": \"" << json_escape(command_line(argc, argv)) << "\",\n";
  j << "  \"reps\": " << reps << ",\n";
  j << "  \"warmup\": " << warmup << ",\n";
  j << "  \"flops_formula\": \"2*(Dqk+Dv)*visible score elements\",\n";
  j << "  \"cases\": [";
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    const ProblemSpec& s = k.spec;
    j << (i ? ",\n" : "\n") << "    {\"dtype\": \"" << dtype_short(s.dtype) << "\", \"kv_dtype\": \""
      << dtype_short(kv_dtype(s)) << "\", \"batch\": " << s.batch
      << ", \"heads\": " << s.heads << ", \"kv_heads\": " << s.kv_heads << ", \"seqlen_q\": " << s.seqlen_q
      << ", \"seqlen_k\": " << s.seqlen_k << ", \"head_dim\": " << s.head_dim << ", \"head_dim_v\": " << s.head_dim_v
      << ", \"causal\": " << (s.causal ? "true" : "false") << ", \"page_size\": " << s.page_size
      << ", \"flops\": " << jnum(k.flops, 17) << ", \"kv_bytes\": " << jnum(k.kv_bytes, 17)
      << ", \"median_s\": " << jnum(k.t.median) << ", \"min_s\": " << jnum(k.t.min) << ", \"gflops\": " << jnum(k.gflops())
      << ", \"gflops_best\": " << jnum(k.gflops_best()) << ", \"kv_gbps\": " << jnum(k.gbps());
    if (k.checked)
      j << ", \"rel_l2\": " << jnum(k.err.out_rel_l2) << ", \"max_abs\": " << jnum(k.err.out_max_abs)
        << ", \"pass\": " << (k.err.pass ? "true" : "false");
    j << "}";
  }
  j << "\n  ]\n}\n";
  return j.str();
}

std::string csv_record(const std::vector<Case>& cases, fa4::Backend backend, bool check, int reps, int warmup) {
  std::ostringstream c;
  c << "backend,dtype,batch,heads,kv_heads,seqlen_q,seqlen_k,head_dim,head_dim_v,causal,page_size,reps,warmup,"
       "flops,kv_bytes,median_ms,min_ms,gflops,gflops_best,kv_gbps"
    << (check ? ",rel_l2,max_abs,check" : "") << "\n";
  for (const Case& k : cases) {
    const ProblemSpec& s = k.spec;
    char b[600];
    std::snprintf(b, sizeof b,
                  "%s,%s,%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
                  ",%s,%" PRId64 ",%d,%d,%.17g,%.17g,%.6g,%.6g,%.6g,%.6g,%.6g",
                  fa4::backend_name(backend), dtype_label(s).c_str(), s.batch, s.heads, s.kv_heads, s.seqlen_q, s.seqlen_k,
                  s.head_dim, s.head_dim_v, s.causal ? "yes" : "no", s.page_size, reps, warmup, k.flops, k.kv_bytes,
                  k.t.median * 1e3, k.t.min * 1e3, k.gflops(), k.gflops_best(), k.gbps());
    c << b;
    if (check) {
      std::snprintf(b, sizeof b, ",%.6g,%.6g,%s", k.err.out_rel_l2, k.err.out_max_abs, k.err.pass ? "pass" : "fail");
      c << b;
    }
    c << "\n";
  }
  return c.str();
}

}  // namespace

std::string bench_help() {
  return "usage: fa4 bench [options]\n"
         "\n"
         "Times a sweep of shapes, each case on fresh random inputs (DESIGN.md section 5 at CPU scale).\n"
         "  prefill (default): every combination of --dtypes x --head-dims x --seqlens x --causal;\n"
         "    default B=1, H=2048/D, S in {512, 1024, 2048}, D in {64, 128}, causal no/yes, bf16.\n"
         "  --decode: 1 query token per sequence, every combination of --dtypes x --head-dims x\n"
         "    --kv-lens x --pages; default B=4, Hq=32, Hkv=8, D=128, kv 1k/4k/16k, contiguous and\n"
         "    paged (16, 64, 256); also reports GB/s of K+V bytes read.\n"
         "The backend is cpu unless --backend says otherwise. FLOPs are exact: 2*(Dqk+Dv)*visible\n"
         "score elements (= 4*B*H*S*S*D non-causal, about half of that causal); rates use the\n"
         "median time.\n"
         "\n"
         "A table goes to stdout; progress to stderr (a live line on a terminal, a line per case\n"
         "otherwise). --json / --csv files are written once the whole sweep has run.\n"
         "\n"
         "options:\n" +
         format_options(bench_options()) +
         "\n"
         "exit status: 0 ok, 1 --check failed, 2 bad arguments, 3 library error\n"
         "\n"
         "examples:\n"
         "  fa4 bench --json bench.json\n"
         "  fa4 bench --seqlens 1024 --head-dims 128 --causal yes --dtypes bf16,f16 --reps 10\n"
         "  fa4 bench --decode --kv-lens 4096 --pages 0,64 --csv decode.csv\n";
}

int cmd_bench(int argc, char** argv, int first) {
  if (wants_help(argc, argv, first)) {
    std::fputs(bench_help().c_str(), stdout);
    return kExitOk;
  }
  const ParsedArgs a = parse_args(bench_options(), argc, argv, first);
  const bool quick = a.flag("--quick"), decode = a.flag("--decode"), check = a.flag("--check");
  if (decode) {
    for (const char* f : {"--seqlens", "--causal"})
      if (a.has(f)) usage_error(f, "not used with --decode (the sweep is over --kv-lens and --pages)");
  } else {
    for (const char* f : {"--kv-lens", "--pages"})
      if (a.has(f)) usage_error(f, "only used with --decode");
  }
  using I = std::vector<int64_t>;
  const fa4::Backend requested = backend_from_name(a.get_str("--backend", "cpu"));
  const std::vector<std::string> dtypes = a.get_str_list("--dtypes", {"bf16"});
  const I dims = a.get_int_list("--head-dims", quick ? I{64} : decode ? I{128} : I{64, 128});
  const I seqlens = a.get_int_list("--seqlens", quick ? I{128, 256} : I{512, 1024, 2048});
  const std::vector<std::string> causals = a.get_str_list("--causal", {"no", "yes"});
  const I kv_lens = a.get_int_list("--kv-lens", quick ? I{256, 1024} : I{1024, 4096, 16384});
  const I pages = a.get_int_list("--pages", quick ? I{0, 16} : I{0, 16, 64, 256});
  const int reps = static_cast<int>(a.get_int("--reps", quick ? 2 : 5));
  const int warmup = static_cast<int>(a.get_int("--warmup", quick ? 0 : 1));
  const std::vector<std::string> outputs = output_paths(a, {"--json", "--csv"});
  const std::string& json_path = outputs[0];
  const std::string& csv_path = outputs[1];

  // ---- the cases (all checked before anything runs) ----
  std::vector<Case> cases;
  auto base = [&](const std::string& dt, int64_t d) {
    ProblemSpec p;
    p.dtype = dtype_from_name(dt);
    set_kv_dtype(a, &p);
    p.head_dim = p.head_dim_v = d;
    p.batch = a.get_int("--batch", decode ? (quick ? 2 : 4) : 1);
    p.heads = a.get_int("--heads", quick ? 4 : decode ? 32 : std::max<int64_t>(1, 2048 / d));
    p.kv_heads = a.get_int("--kv-heads", decode ? std::min<int64_t>(p.heads, quick ? 2 : 8) : p.heads);
    if (!a.has("--kv-heads") && p.heads % p.kv_heads != 0) p.kv_heads = p.heads;
    p.backend = requested;
    p.threads = static_cast<int32_t>(a.get_int("--threads", 0));
    p.splits = static_cast<int32_t>(a.get_int("--splits", 0));
    p.seed = static_cast<uint64_t>(a.get_int("--seed", 0)) + cases.size();
    p.dist = dist_from_name(a.get_str("--dist", "normal"));
    return p;
  };
  for (const std::string& dt : dtypes)
    for (int64_t d : dims) {
      if (decode) {
        for (int64_t l : kv_lens)
          for (int64_t pg : pages) {
            Case k;
            k.spec = base(dt, d);
            k.spec.seqlen_q = 1;
            k.spec.seqlen_k = l;
            k.spec.page_size = pg;  // full caches: every sequence reads all L keys
            check_spec(k.spec);
            cases.push_back(k);
          }
      } else {
        for (int64_t s : seqlens)
          for (const std::string& c : causals) {
            Case k;
            k.spec = base(dt, d);
            k.spec.seqlen_q = k.spec.seqlen_k = s;
            k.spec.causal = c == "yes";
            check_spec(k.spec);
            cases.push_back(k);
          }
      }
    }

  std::unique_ptr<Device> dev;
  fa4::Status st = open_device(requested, &dev);
  if (!st) return report_status(st);
  const fa4::Backend backend = resolve_backend(requested);
  std::string detail;
  for (const fa4::BackendInfo& i : fa4::backend_info())
    if (i.backend == backend) detail = i.detail;

  // ---- run ----
  const bool tty = isatty(fileno(stderr));
  bool header_done = false, all_pass = true;
  int dw = 5;  // the dtype column: as wide as the widest label ("bf16/kv-e4m3")
  for (const Case& k : cases) dw = std::max(dw, static_cast<int>(dtype_label(k.spec).size()));
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& k = cases[i];
    const std::string label = case_label(k.spec, decode);
    if (tty) {
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s ...", i + 1, cases.size(), label.c_str());
      std::fflush(stderr);
    }
    std::unique_ptr<HostProblem> hp = build_problem(k.spec);
    k.flops = hp->flops();
    k.kv_bytes = hp->kv_bytes();
    st = time_problem(*hp, *dev, reps, warmup, &k.t);
    if (st && check) {
      st = check_against_reference(*hp, *dev, &k.err);
      k.checked = st.ok();
      all_pass = all_pass && k.err.pass;
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (!st) return report_status(st);
    if (!tty) {
      char bw[48] = "";
      if (decode) std::snprintf(bw, sizeof bw, ", %.2f GB/s", k.gbps());
      std::fprintf(stderr, "fa4 bench: [%zu/%zu] %s: %s, %.2f GFLOP/s%s\n", i + 1, cases.size(), label.c_str(),
                   format_time(k.t.median).c_str(), k.gflops(), bw);
    }
    if (!header_done) {  // after the first case ran, so a rejected call prints nothing on stdout
      header_done = true;
      std::printf("fa4 bench: %s sweep, backend %s (%s), %d reps + %d warmup, %zu cases\n", decode ? "decode" : "prefill",
                  fa4::backend_name(backend), detail.c_str(), reps, warmup, cases.size());
      if (decode)
        std::printf("%-*s %5s %5s %4s %7s %4s %5s %12s %12s %9s %9s", dw, "dtype", "B", "Hq", "Hkv", "L", "D", "page",
                    "median ms", "min ms", "GB/s", "GFLOP/s");
      else
        std::printf("%-*s %5s %5s %4s %7s %4s %-6s %12s %12s %9s", dw, "dtype", "B", "H", "Hkv", "S", "D", "causal",
                    "median ms", "min ms", "GFLOP/s");
      std::printf("%s\n", check ? "     rel-L2  check" : "");
    }
    const ProblemSpec& s = k.spec;
    if (decode)
      std::printf("%-*s %5" PRId64 " %5" PRId64 " %4" PRId64 " %7" PRId64 " %4" PRId64 " %5" PRId64 " %12.3f %12.3f %9.2f %9.2f",
                  dw, dtype_label(s).c_str(), s.batch, s.heads, s.kv_heads, s.seqlen_k, s.head_dim, s.page_size,
                  k.t.median * 1e3, k.t.min * 1e3, k.gbps(), k.gflops());
    else
      std::printf("%-*s %5" PRId64 " %5" PRId64 " %4" PRId64 " %7" PRId64 " %4" PRId64 " %-6s %12.3f %12.3f %9.2f",
                  dw, dtype_label(s).c_str(), s.batch, s.heads, s.kv_heads, s.seqlen_q, s.head_dim, s.causal ? "yes" : "no",
                  k.t.median * 1e3, k.t.min * 1e3, k.gflops());
    if (check) std::printf(" %10.2e  %s", k.err.out_rel_l2, k.err.pass ? "PASS" : "FAIL");
    std::printf("\n");
    std::fflush(stdout);
  }

  // ---- records ----
  const int threads = static_cast<int>(a.get_int("--threads", 0));
  if (!json_path.empty() &&
      !write_file("--json", json_path,
                  json_record(cases, decode, backend, detail, threads > 0 ? threads : openmp_threads(), reps, warmup, argc, argv)))
    return kExitFailure;
  if (!csv_path.empty() && !write_file("--csv", csv_path, csv_record(cases, backend, check, reps, warmup)))
    return kExitFailure;
  return all_pass ? kExitOk : kExitCheckFailed;
}

}  // namespace fa4cli
