// The C ABI (fa4/fa4_c.h) end to end.
#include "fa4/fa4_c.h"

#include <cstring>
#include <string>
#include <thread>

#include "test_util.h"

namespace fa4test {
namespace {

fa4_tensor to_c(const TensorView& t) {
  fa4_tensor c;
  std::memset(&c, 0, sizeof(c));
  c.data = t.data;
  c.dtype = static_cast<int32_t>(t.dtype);
  c.ndim = t.ndim;
  for (int i = 0; i < t.ndim; ++i) {
    c.shape[i] = t.shape[i];
    c.stride[i] = t.stride[i];
  }
  c.device = static_cast<int32_t>(t.device);
  c.device_index = t.device_index;
  return c;
}

fa4_params to_c(const AttentionParams& p) {
  fa4_params c;
  fa4_params_init(&c);
  c.q = to_c(p.q);
  c.k = to_c(p.k);
  c.v = to_c(p.v);
  c.out = to_c(p.out);
  c.lse = to_c(p.lse);
  c.sinks = to_c(p.sinks);
  c.q_descale = to_c(p.q_descale);
  c.k_descale = to_c(p.k_descale);
  c.v_descale = to_c(p.v_descale);
  c.cu_seqlens_q = to_c(p.cu_seqlens_q);
  c.cu_seqlens_k = to_c(p.cu_seqlens_k);
  c.seqused_k = to_c(p.seqused_k);
  c.cache_seqlens = to_c(p.cache_seqlens);
  c.cache_batch_idx = to_c(p.cache_batch_idx);
  c.page_table = to_c(p.page_table);
  c.k_new = to_c(p.k_new);
  c.v_new = to_c(p.v_new);
  c.scale = p.scale;
  c.softcap = p.softcap;
  c.causal = p.causal ? 1 : 0;
  c.window_left = p.window_left;
  c.window_right = p.window_right;
  c.chunk_size = p.chunk_size;
  c.max_seqlen_q = p.max_seqlen_q;
  c.max_seqlen_k = p.max_seqlen_k;
  c.num_splits = p.num_splits;
  c.backend = static_cast<int32_t>(p.backend);
  c.num_threads = p.num_threads;
  return c;
}

CaseConfig small() {
  CaseConfig c;
  c.batch = 2;
  c.sq = 5;
  c.sk = 11;
  c.hq = 4;
  c.hkv = 2;
  c.dqk = 16;
  c.dv = 8;
  return c;
}

TEST(CApi, ParamsInitSetsTheDocumentedDefaults) {
  fa4_params p;
  std::memset(&p, 0xAB, sizeof(p));
  fa4_params_init(&p);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, -1);
  EXPECT_EQ(p.scale, 0.0f);
  EXPECT_EQ(p.softcap, 0.0f);
  EXPECT_EQ(p.causal, 0);
  EXPECT_EQ(p.chunk_size, 0);
  EXPECT_EQ(p.num_splits, 0);
  EXPECT_EQ(p.backend, FA4_BACKEND_AUTO);
  EXPECT_EQ(p.num_threads, 0);
  EXPECT_EQ(p.max_seqlen_q, 0);
  EXPECT_EQ(p.max_seqlen_k, 0);
  EXPECT_EQ(p.stream, nullptr);
  EXPECT_EQ(p.workspace, nullptr);
  EXPECT_EQ(p.workspace_bytes, 0u);
  EXPECT_EQ(p.workspace_alloc, nullptr);
  EXPECT_EQ(p.workspace_free, nullptr);
  EXPECT_EQ(p.workspace_ctx, nullptr);
  for (const fa4_tensor* t : {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.sinks, &p.q_descale, &p.k_descale, &p.v_descale,
                              &p.cu_seqlens_q, &p.cu_seqlens_k, &p.seqused_k, &p.cache_seqlens, &p.cache_batch_idx,
                              &p.page_table, &p.k_new, &p.v_new}) {
    EXPECT_EQ(t->ndim, 0);
    EXPECT_EQ(t->data, nullptr);
  }
  // The C defaults are the C++ defaults.
  const AttentionParams cpp;
  EXPECT_EQ(p.window_left, cpp.window_left);
  EXPECT_EQ(p.window_right, cpp.window_right);
  EXPECT_EQ(p.num_splits, cpp.num_splits);
  fa4_params_init(nullptr);  // must not crash
}

TEST(CApi, CombineParamsInitZeroes) {
  fa4_combine_params c;
  std::memset(&c, 0x5A, sizeof(c));
  fa4_combine_params_init(&c);
  EXPECT_EQ(c.out_partials.ndim, 0);
  EXPECT_EQ(c.lse.ndim, 0);
  EXPECT_EQ(c.backend, FA4_BACKEND_AUTO);
  EXPECT_EQ(c.num_threads, 0);
  EXPECT_EQ(c.stream, nullptr);
  fa4_combine_params_init(nullptr);
}

TEST(CApi, ForwardEqualsTheCppApiForEveryLayout) {
  int n = 0;
  for (KvMode kv : {KvMode::dense, KvMode::varlen, KvMode::cache, KvMode::paged})
    for (Backend be : {Backend::reference, Backend::cpu}) {
      CaseConfig cfg = small();
      cfg.kv = kv;
      cfg.varlen_q = kv == KvMode::varlen;
      cfg.snew = kv == KvMode::cache || kv == KvMode::paged ? 2 : 0;
      cfg.page_size = 4;
      cfg.causal = true;
      cfg.sinks = n % 2;
      cfg.softcap = n % 3 ? 0.0f : 7.0f;
      cfg.window_left = 6;
      cfg.dtype = n % 2 ? DType::bfloat16 : DType::float32;
      const uint64_t seed = derive_seed(80000 + n++);
      FA4_SEED_TRACE(seed);
      SCOPED_TRACE(cfg.describe());
      const Case orig = make_case(cfg, seed);
      Case a = orig, b = orig;
      ASSERT_TRUE(a.run(be).ok());
      const fa4_params cp = to_c(b.params(be));
      ASSERT_EQ(fa4_attention_forward(&cp), FA4_OK) << fa4_last_error();
      EXPECT_STREQ(fa4_last_error(), "");
      EXPECT_TRUE(bitwise_equal(a, b));
    }
}

TEST(CApi, CombineEqualsTheCppApi) {
  std::mt19937_64 rng(derive_seed(81000));
  Tensor op = Tensor::make(DType::float32, {3, 2, 4, 2, 8});
  Tensor lp = Tensor::make(DType::float32, {3, 2, 2, 4});
  fill(op, Dist::normal, rng);
  fill(lp, Dist::normal, rng);
  Tensor out1 = Tensor::make(DType::float16, {2, 4, 2, 8}), out2 = out1;
  Tensor lse1 = Tensor::make(DType::float32, {2, 2, 4}), lse2 = lse1;
  fa4::CombineParams c;
  c.out_partials = op.view();
  c.lse_partials = lp.view();
  c.out = out1.view();
  c.lse = lse1.view();
  c.backend = Backend::cpu;
  ASSERT_TRUE(fa4::combine_partials(c).ok());
  fa4_combine_params cc;
  fa4_combine_params_init(&cc);
  cc.out_partials = to_c(op.view());
  cc.lse_partials = to_c(lp.view());
  cc.out = to_c(out2.view());
  cc.lse = to_c(lse2.view());
  cc.backend = FA4_BACKEND_CPU;
  ASSERT_EQ(fa4_combine_partials(&cc), FA4_OK) << fa4_last_error();
  EXPECT_TRUE(out1.mem == out2.mem);
  EXPECT_TRUE(lse1.mem == lse2.mem);
}

TEST(CApi, ErrorsReportCodeMessageAndArgumentAndClearOnSuccess) {
  Case c = make_case(small(), 1);
  fa4_params p = to_c(c.params(Backend::cpu));
  p.softcap = -1.0f;
  const auto out_before = c.out.mem;
  EXPECT_EQ(fa4_attention_forward(&p), FA4_INVALID_ARGUMENT);
  EXPECT_STREQ(fa4_last_error_argument(), "softcap");
  EXPECT_NE(std::string(fa4_last_error()).find("softcap"), std::string::npos) << fa4_last_error();
  EXPECT_TRUE(c.out.mem == out_before);
  p.softcap = 0.0f;
  EXPECT_EQ(fa4_attention_forward(&p), FA4_OK);
  EXPECT_STREQ(fa4_last_error(), "");
  EXPECT_STREQ(fa4_last_error_argument(), "");
}

void* c_never_alloc(size_t, void*, void*) { return nullptr; }
void c_never_free(void*, size_t, void*, void*) {}

// The workspace hook fields reach the C++ parameters: half a pair is rejected by name.
TEST(CApi, WorkspaceHookFieldsPassThrough) {
  Case c = make_case(small(), 1);
  fa4_params p = to_c(c.params(Backend::cpu));
  p.workspace_alloc = c_never_alloc;
  const auto out_before = c.out.mem;
  EXPECT_EQ(fa4_attention_forward(&p), FA4_INVALID_ARGUMENT);
  EXPECT_STREQ(fa4_last_error_argument(), "workspace_free");
  EXPECT_TRUE(c.out.mem == out_before);
  p.workspace_alloc = nullptr;
  p.workspace_free = c_never_free;
  EXPECT_EQ(fa4_attention_forward(&p), FA4_INVALID_ARGUMENT);
  EXPECT_STREQ(fa4_last_error_argument(), "workspace_alloc");
  p.workspace_alloc = c_never_alloc;
  EXPECT_EQ(fa4_attention_forward(&p), FA4_OK) << fa4_last_error();
}

TEST(CApi, NullParamsAreRejected) {
  EXPECT_EQ(fa4_attention_forward(nullptr), FA4_INVALID_ARGUMENT);
  EXPECT_STREQ(fa4_last_error_argument(), "params");
  EXPECT_EQ(fa4_combine_partials(nullptr), FA4_INVALID_ARGUMENT);
  EXPECT_STREQ(fa4_last_error_argument(), "params");
  EXPECT_EQ(fa4_attention_workspace_size(nullptr), 0u);
}

TEST(CApi, UnknownEnumCodesAreRejectedByName) {
  Case c = make_case(small(), 2);
  const fa4_params base = to_c(c.params(Backend::cpu));
  const auto out_before = c.out.mem;
  struct Bad {
    const char* arg;
    void (*mutate)(fa4_params*);
  };
  const Bad bad[] = {
      {"k", [](fa4_params* p) { p->k.dtype = 99; }},
      {"q", [](fa4_params* p) { p->q.dtype = -1; }},
      {"v", [](fa4_params* p) { p->v.device = 5; }},
      {"out", [](fa4_params* p) { p->out.ndim = 7; }},
      {"lse", [](fa4_params* p) { p->lse.ndim = -1; }},
      {"sinks", [](fa4_params* p) { p->sinks.ndim = 1; p->sinks.dtype = 17; }},
      {"page_table", [](fa4_params* p) { p->page_table.ndim = 2; p->page_table.device = -3; }},
      {"backend", [](fa4_params* p) { p->backend = 9; }},
      {"backend", [](fa4_params* p) { p->backend = -1; }},
  };
  for (const Bad& b : bad) {
    fa4_params p = base;
    b.mutate(&p);
    SCOPED_TRACE(b.arg);
    EXPECT_EQ(fa4_attention_forward(&p), FA4_INVALID_ARGUMENT);
    EXPECT_STREQ(fa4_last_error_argument(), b.arg) << fa4_last_error();
    EXPECT_NE(std::string(fa4_last_error()).find(b.arg), std::string::npos) << fa4_last_error();
    EXPECT_TRUE(c.out.mem == out_before);
    EXPECT_EQ(fa4_attention_workspace_size(&p), 0u);
  }
  // A tensor that is "not given" (ndim 0) may carry any garbage in its other fields.
  fa4_params p = base;
  p.sinks.ndim = 0;
  p.sinks.dtype = 1234;
  p.sinks.device = 77;
  EXPECT_EQ(fa4_attention_forward(&p), FA4_OK) << fa4_last_error();

  fa4_combine_params cc;
  fa4_combine_params_init(&cc);
  Tensor op = Tensor::make(DType::float32, {1, 1, 1, 1, 2}), lp = Tensor::make(DType::float32, {1, 1, 1, 1});
  Tensor out = Tensor::make(DType::float32, {1, 1, 1, 2});
  cc.out_partials = to_c(op.view());
  cc.lse_partials = to_c(lp.view());
  cc.out = to_c(out.view());
  cc.out.dtype = 42;
  EXPECT_EQ(fa4_combine_partials(&cc), FA4_INVALID_ARGUMENT);
  EXPECT_STREQ(fa4_last_error_argument(), "out");
  cc.out = to_c(out.view());
  cc.backend = 4;
  EXPECT_EQ(fa4_combine_partials(&cc), FA4_INVALID_ARGUMENT);
  EXPECT_STREQ(fa4_last_error_argument(), "backend");
  cc.backend = 0;
  cc.lse_partials.device = 2;
  EXPECT_EQ(fa4_combine_partials(&cc), FA4_INVALID_ARGUMENT);
  EXPECT_STREQ(fa4_last_error_argument(), "lse_partials");
}

TEST(CApi, LastErrorIsThreadLocal) {
  Case c = make_case(small(), 3);
  const fa4_params base = to_c(c.params(Backend::cpu));
  fa4_params p1 = base;
  p1.num_splits = -4;
  ASSERT_EQ(fa4_attention_forward(&p1), FA4_INVALID_ARGUMENT);
  std::string other_arg, other_msg_after_success;
  std::thread t([&] {
    fa4_params p2 = base;
    p2.window_left = -9;
    EXPECT_EQ(fa4_attention_forward(&p2), FA4_INVALID_ARGUMENT);
    other_arg = fa4_last_error_argument();
  });
  t.join();
  EXPECT_EQ(other_arg, "window_left");
  EXPECT_STREQ(fa4_last_error_argument(), "num_splits") << "another thread's error replaced this thread's";
  EXPECT_NE(std::string(fa4_last_error()).find("num_splits"), std::string::npos);
  std::thread t2([&] {
    // A fresh thread has no error.
    other_msg_after_success = fa4_last_error();
  });
  t2.join();
  EXPECT_EQ(other_msg_after_success, "");
}

TEST(CApi, BackendAvailability) {
  EXPECT_EQ(fa4_backend_available(FA4_BACKEND_AUTO), 1);
  EXPECT_EQ(fa4_backend_available(FA4_BACKEND_REFERENCE), 1);
  EXPECT_EQ(fa4_backend_available(FA4_BACKEND_CPU), 1);
  EXPECT_EQ(fa4_backend_available(FA4_BACKEND_CUDA), fa4::backend_available(Backend::cuda) ? 1 : 0);
  EXPECT_EQ(fa4_backend_available(-1), 0);
  EXPECT_EQ(fa4_backend_available(4), 0);
#if !defined(FA4_HAVE_CUDA)
  EXPECT_EQ(fa4_backend_available(FA4_BACKEND_CUDA), 0);
#endif
}

TEST(CApi, BackendInfoReportsEveryBackendAndTruncatesSafely) {
  const size_t n = fa4_backend_info(nullptr, 0);
  ASSERT_GT(n, 0u);
  std::string full(n + 1, '\x7f');
  EXPECT_EQ(fa4_backend_info(full.data(), full.size()), n);
  EXPECT_EQ(full[n], '\0');
  full.resize(n);
  EXPECT_EQ(std::strlen(full.c_str()), n);
  EXPECT_NE(full.find("reference: available"), std::string::npos) << full;
  EXPECT_NE(full.find("cpu: available"), std::string::npos) << full;
  EXPECT_NE(full.find(fa4_backend_available(FA4_BACKEND_CUDA) ? "cuda: available" : "cuda: unavailable"),
            std::string::npos)
      << full;
  // Same information as the C++ API.
  for (const auto& b : fa4::backend_info())
    EXPECT_NE(full.find(std::string(fa4::backend_name(b.backend)) + ": " + (b.available ? "available" : "unavailable") +
                        " (" + b.detail + ")"),
              std::string::npos);
  // Truncation: cap bytes including the NUL, never more.
  char small_buf[8];
  std::memset(small_buf, 'x', sizeof(small_buf));
  EXPECT_EQ(fa4_backend_info(small_buf, 5), n);
  EXPECT_EQ(std::string(small_buf), full.substr(0, 4));
  EXPECT_EQ(small_buf[5], 'x');
  char one = 'x';
  EXPECT_EQ(fa4_backend_info(&one, 1), n);
  EXPECT_EQ(one, '\0');
}

TEST(CApi, VersionMatchesTheProject) {
  EXPECT_STREQ(fa4_version(), FA4_TEST_EXPECTED_VERSION);
  EXPECT_STREQ(fa4_version(), fa4::version());
}

TEST(CApi, WorkspaceSizeIsZeroForHostBackends) {
  Case c = make_case(small(), 4);
  fa4_params p = to_c(c.params(Backend::cpu));
  p.num_splits = 4;
  EXPECT_EQ(fa4_attention_workspace_size(&p), 0u);
  EXPECT_EQ(fa4::attention_workspace_size(c.params(Backend::cpu)), 0u);
}

TEST(CApi, StructsKeepTheirDocumentedShape) {
  // Fixed-width fields that other languages mirror: a change here breaks every binding.
  EXPECT_EQ(FA4_MAX_DIMS, fa4::kMaxDims);
  EXPECT_EQ(sizeof(fa4_tensor), 8u + 4u + 4u + 6u * 8u * 2u + 4u + 4u);
  EXPECT_EQ(static_cast<int>(FA4_FLOAT8_E4M3), static_cast<int>(DType::float8_e4m3));
  EXPECT_EQ(static_cast<int>(FA4_INT32), static_cast<int>(DType::int32));
  EXPECT_EQ(static_cast<int>(FA4_BACKEND_CUDA), static_cast<int>(Backend::cuda));
  EXPECT_EQ(static_cast<int>(FA4_DEVICE_CUDA), static_cast<int>(DeviceType::cuda));
  EXPECT_EQ(static_cast<int>(FA4_INTERNAL), static_cast<int>(StatusCode::internal));
  EXPECT_EQ(static_cast<int>(FA4_OUT_OF_MEMORY), static_cast<int>(StatusCode::out_of_memory));
}


// ---------------------------------------------------------------- C++ API odds and ends
TEST(Api, AutomaticBackendOnHostTensorsIsTheCpuBackend) {
  CaseConfig cfg = small();
  cfg.causal = true;
  const uint64_t seed = derive_seed(82000);
  FA4_SEED_TRACE(seed);
  const Case orig = make_case(cfg, seed);
  Case a = orig, b = orig;
  ASSERT_TRUE(a.run(Backend::automatic).ok());
  ASSERT_TRUE(b.run(Backend::cpu).ok());
  EXPECT_TRUE(bitwise_equal(a, b));
}

#if !defined(FA4_HAVE_CUDA)
TEST(Api, CudaBackendInACpuOnlyBuildIsUnavailableAndTouchesNothing) {
  // Device tensors (fake, never dereferenced) that pass validation.
  const uintptr_t base = 0x7f0000000000;
  AttentionParams p;
  p.q = TensorView::contiguous(reinterpret_cast<void*>(base), DType::float16, {1, 8, 2, 64}, DeviceType::cuda);
  p.k = TensorView::contiguous(reinterpret_cast<void*>(base + 0x100000), DType::float16, {1, 8, 2, 64}, DeviceType::cuda);
  p.v = TensorView::contiguous(reinterpret_cast<void*>(base + 0x200000), DType::float16, {1, 8, 2, 64}, DeviceType::cuda);
  p.out = TensorView::contiguous(reinterpret_cast<void*>(base + 0x300000), DType::float16, {1, 8, 2, 64}, DeviceType::cuda);
  for (Backend be : {Backend::automatic, Backend::cuda}) {
    p.backend = be;
    const Status st = fa4::attention_forward(p);
    EXPECT_EQ(st.code, StatusCode::backend_unavailable) << st.message;
    EXPECT_EQ(st.argument, "backend");
    EXPECT_FALSE(st.message.empty());
  }
  EXPECT_FALSE(fa4::backend_available(Backend::cuda));
  EXPECT_EQ(fa4::attention_workspace_size(p), 0u);
  fa4::CombineParams c;
  c.out_partials = TensorView::contiguous(reinterpret_cast<void*>(base), DType::float32, {2, 1, 8, 2, 64}, DeviceType::cuda);
  c.lse_partials = TensorView::contiguous(reinterpret_cast<void*>(base + 0x100000), DType::float32, {2, 1, 2, 8}, DeviceType::cuda);
  c.out = TensorView::contiguous(reinterpret_cast<void*>(base + 0x200000), DType::float32, {1, 8, 2, 64}, DeviceType::cuda);
  const Status st = fa4::combine_partials(c);
  EXPECT_EQ(st.code, StatusCode::backend_unavailable) << st.message;
}
#endif

TEST(Api, NamesOfEnums) {
  EXPECT_STREQ(fa4::dtype_name(DType::float32), "float32");
  EXPECT_STREQ(fa4::dtype_name(DType::float16), "float16");
  EXPECT_STREQ(fa4::dtype_name(DType::bfloat16), "bfloat16");
  EXPECT_STREQ(fa4::dtype_name(DType::float8_e4m3), "float8_e4m3");
  EXPECT_STREQ(fa4::dtype_name(DType::int32), "int32");
  EXPECT_STREQ(fa4::backend_name(Backend::automatic), "auto");
  EXPECT_STREQ(fa4::backend_name(Backend::reference), "reference");
  EXPECT_STREQ(fa4::backend_name(Backend::cpu), "cpu");
  EXPECT_STREQ(fa4::backend_name(Backend::cuda), "cuda");
  EXPECT_STREQ(fa4::status_code_name(StatusCode::ok), "ok");
  EXPECT_STREQ(fa4::status_code_name(StatusCode::invalid_argument), "invalid_argument");
  EXPECT_STREQ(fa4::status_code_name(StatusCode::backend_unavailable), "backend_unavailable");
  EXPECT_EQ(fa4::dtype_size(DType::float8_e4m3), 1u);
  EXPECT_EQ(fa4::dtype_size(DType::bfloat16), 2u);
  EXPECT_EQ(fa4::dtype_size(DType::int32), 4u);
  const Status ok = Status::Ok();
  EXPECT_TRUE(ok.ok());
  EXPECT_TRUE(static_cast<bool>(ok));
  EXPECT_FALSE(Status::Invalid("x", "x: bad").ok());
}

TEST(Api, ContiguousViewsAreRowMajor) {
  float buf[1];
  const TensorView t = TensorView::contiguous(buf, DType::float32, {2, 3, 4, 5});
  EXPECT_EQ(t.ndim, 4);
  EXPECT_EQ(t.stride[3], 1);
  EXPECT_EQ(t.stride[2], 5);
  EXPECT_EQ(t.stride[1], 20);
  EXPECT_EQ(t.stride[0], 60);
  EXPECT_EQ(t.numel(), 120);
  EXPECT_TRUE(t.present());
  EXPECT_FALSE(TensorView{}.present());
}

}  // namespace
}  // namespace fa4test
