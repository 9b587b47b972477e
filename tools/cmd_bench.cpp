// fa4 bench: a sweep of prefill shapes (CPU-scale DESIGN.md section 5 by default), a table on
// stdout, progress on stderr, and JSON / CSV records.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "args.h"
#include "commands.h"
#include "device.h"
#include "problem_builder.h"
#include "runner.h"
#include "sysinfo.h"

namespace fa4cli {
namespace {

const std::vector<OptSpec>& bench_options() {
  static const std::vector<OptSpec> t = {
      {"--backend", 0, ArgKind::choice, "B", "auto, reference, cpu, cuda (default cpu)", 0, 0, 0, 0, "auto|reference|cpu|cuda"},
      {"--dtypes", 0, ArgKind::choice_list, "T,...", "input dtypes from f32, f16, bf16, e4m3 (default bf16)", 0, 0, 0, 0, "f32|f16|bf16|e4m3"},
      {"--seqlens", 0, ArgKind::int_list, "S,...", "sequence lengths, Sq = Sk (default 512,1024,2048)", 1, 1 << 24},
      {"--head-dims", 0, ArgKind::int_list, "D,...", "head dims, Dqk = Dv (default 64,128)", 1, 256},
      {"--causal", 0, ArgKind::choice_list, "no,yes", "mask variants: no, yes or both (default no,yes)", 0, 0, 0, 0, "no|yes"},
      {"--batch", 'b', ArgKind::integer, "B", "batch size (default 1)", 1, 1 << 20},
      {"--heads", 0, ArgKind::integer, "H", "query heads (default 2048/D: 32, 16, 8 for D = 64, 128, 256)", 1, 4096},
      {"--kv-heads", 0, ArgKind::integer, "HKV", "key/value heads, must divide the heads (default = heads)", 1, 4096},
      {"--reps", 'n', ArgKind::integer, "N", "timed repetitions per case (default 5)", 1, 1000000},
      {"--warmup", 0, ArgKind::integer, "N", "untimed calls per case (default 1)", 0, 1000000},
      {"--threads", 0, ArgKind::integer, "N", "cpu backend threads, 0 = all cores (default 0)", 0, 4096},
      {"--splits", 0, ArgKind::integer, "N", "split-KV: 0 = heuristic, 1 = off, N = force (default 0)", 0, 1024},
      {"--seed", 0, ArgKind::integer, "S", "random seed of the inputs (default 0)", 0, std::numeric_limits<int64_t>::max()},
      {"--dist", 0, ArgKind::choice, "DIST", "input distribution: normal, uniform, outliers (default normal)", 0, 0, 0, 0, "normal|uniform|outliers"},
      {"--check", 0, ArgKind::flag, "", "also compare every case with the reference backend (slow); exit 1 on failure"},
      {"--quick", 0, ArgKind::flag, "", "a small sweep: seqlens 128,256, head dim 64, 4 heads, 2 reps, no warmup"},
      {"--json", 0, ArgKind::text, "FILE", "write the results as JSON (written only when the sweep completes)"},
      {"--csv", 0, ArgKind::text, "FILE", "write the results as CSV (written only when the sweep completes)"},
      {"--help", 'h', ArgKind::flag, "", "this help"},
  };
  return t;
}

struct Case {
  ProblemSpec spec;
  double flops = 0;
  Timing t;
  bool checked = false;
  ErrorStats err;
};

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o;
}

// A finite double as JSON (NaN / inf are not JSON: null).
std::string jnum(double v, int digits = 6) {
  if (!(v == v) || v == std::numeric_limits<double>::infinity() || v == -std::numeric_limits<double>::infinity())
    return "null";
  char b[40];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

// The directory of `path` must exist and be writable; checked before the sweep so that a bad
// path is a usage error and nothing is written.
void check_output_path(const std::string& flag, const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (access(dir.c_str(), W_OK) != 0) usage_error(flag, "cannot write '" + path + "': directory '" + dir + "' is missing or not writable");
  if (access(path.c_str(), F_OK) == 0 && access(path.c_str(), W_OK) != 0) usage_error(flag, "cannot write '" + path + "': file is not writable");
}

std::string case_label(const ProblemSpec& s) {
  char b[160];
  std::snprintf(b, sizeof b, "%s B=%" PRId64 " H=%" PRId64 " Hkv=%" PRId64 " S=%" PRId64 " D=%" PRId64 " causal=%s",
                dtype_short(s.dtype), s.batch, s.heads, s.kv_heads, s.seqlen_q, s.head_dim, s.causal ? "yes" : "no");
  return b;
}

}  // namespace

std::string bench_help() {
  return "usage: fa4 bench [options]\n"
         "\n"
         "Times a sweep of prefill shapes: every combination of --dtypes x --head-dims x --seqlens x\n"
         "--causal, each on fresh random inputs. The default is the CPU-scale version of the prefill\n"
         "sweep of DESIGN.md section 5: B=1, H=2048/D, S in {512, 1024, 2048}, D in {64, 128},\n"
         "causal no/yes, bf16, on the cpu backend. FLOPs are exact: 2*(Dqk+Dv)*visible score elements\n"
         "(= 4*B*H*S*S*D non-causal, about half of that causal). Rates are for the median time.\n"
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
         "  fa4 bench --seqlens 1024 --head-dims 128 --causal yes --dtypes bf16,f16 --reps 10\n";
}

int cmd_bench(int argc, char** argv, int first) {
  if (wants_help(argc, argv, first)) {
    std::fputs(bench_help().c_str(), stdout);
    return kExitOk;
  }
  const ParsedArgs a = parse_args(bench_options(), argc, argv, first);
  const bool quick = a.flag("--quick");
  const fa4::Backend requested = backend_from_name(a.get_str("--backend", "cpu"));
  const std::vector<std::string> dtypes = a.get_str_list("--dtypes", {"bf16"});
  const std::vector<int64_t> seqlens = a.get_int_list("--seqlens", quick ? std::vector<int64_t>{128, 256} : std::vector<int64_t>{512, 1024, 2048});
  const std::vector<int64_t> dims = a.get_int_list("--head-dims", quick ? std::vector<int64_t>{64} : std::vector<int64_t>{64, 128});
  const std::vector<std::string> causals = a.get_str_list("--causal", {"no", "yes"});
  const int reps = static_cast<int>(a.get_int("--reps", quick ? 2 : 5));
  const int warmup = static_cast<int>(a.get_int("--warmup", quick ? 0 : 1));
  const bool check = a.flag("--check");
  const std::string json_path = a.get_str("--json", ""), csv_path = a.get_str("--csv", "");
  if (!json_path.empty()) check_output_path("--json", json_path);
  if (!csv_path.empty()) check_output_path("--csv", csv_path);

  std::vector<Case> cases;
  for (const std::string& dt : dtypes)
    for (int64_t d : dims)
      for (int64_t s : seqlens)
        for (const std::string& c : causals) {
          Case k;
          ProblemSpec& p = k.spec;
          p.dtype = dtype_from_name(dt);
          p.batch = a.get_int("--batch", 1);
          p.seqlen_q = p.seqlen_k = s;
          p.head_dim = p.head_dim_v = d;
          p.heads = a.get_int("--heads", quick ? 4 : std::max<int64_t>(1, 2048 / d));
          p.kv_heads = a.get_int("--kv-heads", p.heads);
          p.causal = c == "yes";
          p.backend = requested;
          p.threads = static_cast<int32_t>(a.get_int("--threads", 0));
          p.splits = static_cast<int32_t>(a.get_int("--splits", 0));
          p.seed = static_cast<uint64_t>(a.get_int("--seed", 0)) + cases.size();
          p.dist = dist_from_name(a.get_str("--dist", "normal"));
          check_spec(p);
          cases.push_back(k);
        }

  std::unique_ptr<Device> dev;
  fa4::Status st = open_device(requested, &dev);
  if (!st) return report_status(st);
  const fa4::Backend backend = resolve_backend(requested);
  std::string backend_detail;
  for (const fa4::BackendInfo& i : fa4::backend_info())
    if (i.backend == backend) backend_detail = i.detail;

  const bool tty = isatty(fileno(stderr));
  std::printf("fa4 bench: backend %s (%s), %d reps + %d warmup, %zu cases\n", fa4::backend_name(backend),
              backend_detail.c_str(), reps, warmup, cases.size());
  std::printf("%-5s %5s %5s %4s %7s %4s %-6s %12s %12s %10s%s\n", "dtype", "B", "H", "Hkv", "S", "D", "causal",
              "median ms", "min ms", "GFLOP/s", check ? "     rel-L2  check" : "");
  std::fflush(stdout);
  bool all_pass = true;
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& k = cases[i];
    const std::string label = case_label(k.spec);
    if (tty) {
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s ...", i + 1, cases.size(), label.c_str());
      std::fflush(stderr);
    }
    std::unique_ptr<HostProblem> hp = build_problem(k.spec);
    k.flops = hp->flops();
    st = time_problem(*hp, *dev, reps, warmup, &k.t);
    if (st && check) {
      st = check_against_reference(*hp, *dev, &k.err);
      k.checked = st.ok();
      all_pass = all_pass && k.err.pass;
    }
    if (!st) {
      if (tty) std::fprintf(stderr, "\r\033[K");
      return report_status(st);
    }
    const double gf = k.t.median > 0 ? k.flops / k.t.median * 1e-9 : 0;
    if (tty) std::fprintf(stderr, "\r\033[K");
    else std::fprintf(stderr, "fa4 bench: [%zu/%zu] %s: %s, %.2f GFLOP/s\n", i + 1, cases.size(), label.c_str(), format_time(k.t.median).c_str(), gf);
    std::printf("%-5s %5" PRId64 " %5" PRId64 " %4" PRId64 " %7" PRId64 " %4" PRId64 " %-6s %12.3f %12.3f %10.2f", dtype_short(k.spec.dtype),
                k.spec.batch, k.spec.heads, k.spec.kv_heads, k.spec.seqlen_q, k.spec.head_dim, k.spec.causal ? "yes" : "no",
                k.t.median * 1e3, k.t.min * 1e3, gf);
    if (check) std::printf(" %10.2e  %s", k.err.out_rel_l2, k.err.pass ? "PASS" : "FAIL");
    std::printf("\n");
    std::fflush(stdout);
  }
  if (tty) std::fflush(stderr);

  const int threads = static_cast<int>(a.get_int("--threads", 0));
  if (!json_path.empty()) {
    std::ostringstream j;
    std::string cmdline;
    for (int i = 0; i < argc; ++i) {
      if (i) cmdline += ' ';
      cmdline += argv[i];
    }
    j << "{\n";
    j << "  \"tool\": \"fa4 bench\",\n";
    j << "  \"version\": \"" << json_escape(fa4::version()) << "\",\n";
    j << "  \"date\": \"" << utc_now_iso() << "\",\n";
    j << "  \"host\": \"" << json_escape(host_name()) << "\",\n";
    j << "  \"cpu\": \"" << json_escape(cpu_model()) << "\",\n";
    j << "  \"cpu_features\": \"" << json_escape(cpu_features()) << "\",\n";
    j << "  \"threads\": " << (threads > 0 ? threads : openmp_threads()) << ",\n";
    j << "  \"backend\": \"" << fa4::backend_name(backend) << "\",\n";
    j << "  \"backend_detail\": \"" << json_escape(backend_detail) << "\",\n";
    j << "  \"command\": \"" << json_escape(cmdline) << "\",\n";
    j << "  \"flops_formula\": \"2*(Dqk+Dv)*visible score elements\",\n";
    j << "  \"cases\": [";
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& k = cases[i];
      const ProblemSpec& s = k.spec;
      j << (i ? ",\n" : "\n") << "    {\"dtype\": \"" << dtype_short(s.dtype) << "\", \"batch\": " << s.batch
        << ", \"heads\": " << s.heads << ", \"kv_heads\": " << s.kv_heads << ", \"seqlen_q\": " << s.seqlen_q
        << ", \"seqlen_k\": " << s.seqlen_k << ", \"head_dim\": " << s.head_dim << ", \"head_dim_v\": " << s.head_dim_v
        << ", \"causal\": " << (s.causal ? "true" : "false") << ", \"reps\": " << reps << ", \"warmup\": " << warmup
        << ", \"flops\": " << jnum(k.flops, 17) << ", \"median_s\": " << jnum(k.t.median) << ", \"min_s\": " << jnum(k.t.min)
        << ", \"gflops\": " << jnum(k.t.median > 0 ? k.flops / k.t.median * 1e-9 : 0)
        << ", \"gflops_best\": " << jnum(k.t.min > 0 ? k.flops / k.t.min * 1e-9 : 0);
      if (k.checked)
        j << ", \"rel_l2\": " << jnum(k.err.out_rel_l2) << ", \"max_abs\": " << jnum(k.err.out_max_abs)
          << ", \"pass\": " << (k.err.pass ? "true" : "false");
      j << "}";
    }
    j << "\n  ]\n}\n";
    std::ofstream f(json_path);
    f << j.str();
    if (!f.good()) {
      std::fprintf(stderr, "fa4: --json: could not write '%s'\n", json_path.c_str());
      return kExitFailure;
    }
  }
  if (!csv_path.empty()) {
    std::ostringstream c;
    c << "backend,dtype,batch,heads,kv_heads,seqlen_q,seqlen_k,head_dim,head_dim_v,causal,reps,warmup,flops,"
         "median_ms,min_ms,gflops,gflops_best"
      << (check ? ",rel_l2,max_abs,check" : "") << "\n";
    for (const Case& k : cases) {
      const ProblemSpec& s = k.spec;
      char b[512];
      std::snprintf(b, sizeof b, "%s,%s,%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%s,%d,%d,%.17g,%.6g,%.6g,%.6g,%.6g",
                    fa4::backend_name(backend), dtype_short(s.dtype), s.batch, s.heads, s.kv_heads, s.seqlen_q,
                    s.seqlen_k, s.head_dim, s.head_dim_v, s.causal ? "yes" : "no", reps, warmup, k.flops,
                    k.t.median * 1e3, k.t.min * 1e3, k.t.median > 0 ? k.flops / k.t.median * 1e-9 : 0,
                    k.t.min > 0 ? k.flops / k.t.min * 1e-9 : 0);
      c << b;
      if (k.checked) {
        std::snprintf(b, sizeof b, ",%.6g,%.6g,%s", k.err.out_rel_l2, k.err.out_max_abs, k.err.pass ? "pass" : "fail");
        c << b;
      }
      c << "\n";
    }
    std::ofstream f(csv_path);
    f << c.str();
    if (!f.good()) {
      std::fprintf(stderr, "fa4: --csv: could not write '%s'\n", csv_path.c_str());
      return kExitFailure;
    }
  }
  return all_pass ? kExitOk : kExitCheckFailed;
}

}  // namespace fa4cli
