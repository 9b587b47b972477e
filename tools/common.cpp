#include <cstdio>
#include <cstring>
#include <map>

#include "args.h"
#include "commands.h"

namespace fa4cli {

bool wants_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) return true;
  }
  return false;
}

int report_status(const fa4::Status& st) {
  static const std::map<std::string, std::string> flag_of = {
      {"window_left", "--window"},   {"window_right", "--window"},   {"chunk_size", "--chunk"},
      {"scale", "--scale"},          {"softcap", "--softcap"},       {"num_splits", "--splits"},
      {"num_threads", "--threads"},  {"backend", "--backend"},       {"sinks", "--sinks"},
      {"cache_seqlens", "--kv-cache"}, {"page_table", "--paged"},    {"cache_batch_idx", "--cache-batch-idx"},
      {"k_new", "--append"},         {"v_new", "--append"},          {"cu_seqlens_q", "--varlen"},
      {"cu_seqlens_k", "--varlen"},  {"lse", "--lse"},             {"k_descale", "--kv-scale"},
      {"v_descale", "--kv-scale"},
  };
  auto it = flag_of.find(st.argument);
  std::string msg = st.message;
  if (msg.empty()) msg = fa4::status_code_name(st.code);
  if (it != flag_of.end() && msg.rfind(it->second, 0) != 0) msg = it->second + ": " + msg;
  std::fprintf(stderr, "fa4: %s\n", msg.c_str());
  return st.code == fa4::StatusCode::invalid_argument ? kExitUsage : kExitFailure;
}

fa4::DType dtype_from_name(const std::string& s) {
  if (s == "f32" || s == "fp32" || s == "float32") return fa4::DType::float32;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return fa4::DType::float16;
  if (s == "e4m3" || s == "fp8" || s == "float8_e4m3" || s == "float8_e4m3fn") return fa4::DType::float8_e4m3;
  if (s == "bf16" || s == "bfloat16") return fa4::DType::bfloat16;
  usage_error("--dtype", "expected one of f32, f16, bf16, e4m3 (or fp32/float32, fp16/float16, bfloat16, fp8), got '" +
                             s + "'");
}

void set_kv_dtype(const ParsedArgs& a, ProblemSpec* s) {
  if (a.has("--kv-dtype")) {
    const fa4::DType kv = dtype_from_name(a.get_str("--kv-dtype", ""));
    s->kv_fp8 = kv == fa4::DType::float8_e4m3 && s->dtype != fa4::DType::float8_e4m3;
    if (kv != s->dtype && !s->kv_fp8)
      usage_error("--kv-dtype", std::string("must be --dtype's (") + dtype_short(s->dtype) +
                                    ") or e4m3 (an fp8 KV cache), got " + dtype_short(kv));
  }
  s->kv_scale_per_token = a.get_str("--kv-scale", "per-head") == "per-token";
  if (a.has("--kv-scale") && !s->kv_fp8) usage_error("--kv-scale", "only with --kv-dtype e4m3 (and --dtype f16 or bf16)");
}

fa4::Backend backend_from_name(const std::string& s) {
  if (s == "reference") return fa4::Backend::reference;
  if (s == "cpu") return fa4::Backend::cpu;
  if (s == "cuda") return fa4::Backend::cuda;
  return fa4::Backend::automatic;
}

Dist dist_from_name(const std::string& s) {
  if (s == "uniform") return Dist::uniform;
  if (s == "outliers") return Dist::outliers;
  return Dist::normal;
}

}  // namespace fa4cli
