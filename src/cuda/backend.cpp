// The cuda backend's entry points (core/backends.h): availability, device queries, the
// pre-flight check, and the launch path (append -> attention -> split combine). What to launch
// is decided by the planner (cuda/plan.h) from the device facts queried here.
//
// Launch-path rules: everything runs on the caller's stream; nothing here synchronizes with the
// device or reads device memory, so a call can be captured into a CUDA graph; the only device
// allocation is scratch (split-KV partials, staged row copies) when the caller passes neither a
// buffer nor an allocator hook: one cached buffer per (device, stream) that only grows, so
// steady-state calls allocate nothing (cuda/scratch_cache.h), and inside a stream capture a
// graph-owned allocation node freed at the call's end.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>

#include "core/backends.h"
#include "cuda/combine/combine.h"
#include "cuda/common/fwd_args.h"
#include "cuda/common/kv_append.h"
#include "cuda/plan.h"
#include "cuda/scratch_cache.h"
#include "cuda/tile_counters.h"
#include "cuda/simt/fwd_f32.h"
#include "cuda/sm80/fwd_launch.h"
#include "cuda/sm90/decode_kv.h"
#include "cuda/sm90/fwd_launch.h"
#include "cuda/stage_rows.h"

namespace fa4::core {
namespace {

using cuda::DeviceLimits;
using cuda::FwdArgs;
using cuda::Kernel;
using cuda::Plan;
namespace sm80 = cuda::sm80;

constexpr int kMaxDevices = 64;

struct DeviceProps {
  DeviceLimits limits;  // the planner's view (limits.known: the query succeeded)
  std::string name;
};

// FA4_CUDA_KERNEL=sm90|sm80|simt: the kernel to prefer wherever it supports the problem (how the
// device tests run the same suite on each kernel). Read once; an unknown value fails every cuda
// call (kernel_preference_status) rather than being silently ignored.
struct KernelPreference {
  bool valid = true;
  std::string value;
  std::optional<Kernel> kernel;
};

const KernelPreference& kernel_preference() {
  static const KernelPreference pref = [] {
    KernelPreference k;
    if (const char* v = std::getenv("FA4_CUDA_KERNEL")) {
      k.value = v;
      k.valid = cuda::parse_kernel_preference(k.value, &k.kernel);
    }
    return k;
  }();
  return pref;
}

Status kernel_preference_status() {
  const KernelPreference& k = kernel_preference();
  if (k.valid) return Status::Ok();
  return Status::Invalid("FA4_CUDA_KERNEL", "FA4_CUDA_KERNEL: unknown kernel '" + k.value +
                                                "' (expected sm90, sm80, simt or auto)");
}

const DeviceProps& device_props(int dev) {
  static DeviceProps props[kMaxDevices];
  static std::once_flag once[kMaxDevices];
  static DeviceProps none;
  if (dev < 0 || dev >= kMaxDevices) return none;
  std::call_once(once[dev], [dev] {
    DeviceProps& p = props[dev];
    DeviceLimits& l = p.limits;
    l.prefer = kernel_preference().kernel;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return;
    l.sms = prop.multiProcessorCount;
    l.l2_bytes = prop.l2CacheSize;
    l.cc_major = prop.major;
    l.cc_minor = prop.minor;
    l.smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
    l.smem_per_sm = static_cast<int>(prop.sharedMemPerMultiprocessor);
    // FA4_CUDA_SMEM_OPTIN=N: plan as if a block could opt in to at most N bytes of shared memory
    // (how the device tests run the compact tile of 99 KB GPUs, sm_86 / sm_89, on an H100 / H200).
    if (const char* cap = std::getenv("FA4_CUDA_SMEM_OPTIN")) {
      char* end = nullptr;
      const long v = std::strtol(cap, &end, 10);
      if (end != cap && *end == '\0' && v > 0 && v < l.smem_optin) {
        l.smem_optin = static_cast<int>(v);
        l.smem_per_sm = std::min(l.smem_per_sm, l.smem_optin + 1024);
      }
    }
    p.name = prop.name;
    l.known = true;
  });
  return props[dev];
}

Plan plan_for(const Problem& pb) { return cuda::make_plan(pb, device_props(pb.p->q.device_index).limits); }

int device_count() {
  static int count = [] {
    int n = 0;
    // With no driver (CI, CPU machines) this returns an error instead of crashing: the static
    // cudart loads libcuda lazily.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

// Makes `dev` current for the scope and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int dev) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != dev) {
      if (cudaSetDevice(dev) == cudaSuccess) switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = 0;
  bool switched_ = false;
};

Status device_error(const char* what, cudaError_t e) {
  return Status::Error(StatusCode::device_error, std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

FwdArgs make_args(const Problem& pb, const Plan& pl) {
  const AttentionParams& p = *pb.p;
  FwdArgs a;
  a.q = p.q.data, a.k = p.k.data, a.v = p.v.data, a.out = p.out.data;
  a.lse = pb.has_lse ? static_cast<float*>(p.lse.data) : nullptr;
  a.q_s0 = pb.qs.s0, a.q_s1 = pb.qs.s1, a.q_sh = pb.qs.head;
  a.k_s0 = pb.ks.s0, a.k_s1 = pb.ks.s1, a.k_sh = pb.ks.head;
  a.v_s0 = pb.vs.s0, a.v_s1 = pb.vs.s1, a.v_sh = pb.vs.head;
  a.o_s0 = pb.os.s0, a.o_s1 = pb.os.s1, a.o_sh = pb.os.head;
  a.lse_sb = pb.lse_sb, a.lse_sh = pb.lse_sh, a.lse_si = pb.lse_si;
  a.batch = static_cast<int32_t>(pb.batch);
  a.hq = static_cast<int32_t>(pb.hq), a.hkv = static_cast<int32_t>(pb.hkv), a.group = static_cast<int32_t>(pb.group);
  a.dqk = static_cast<int32_t>(pb.dqk), a.dv = static_cast<int32_t>(pb.dv);
  a.varlen_q = pb.varlen_q;
  a.kv_mode = static_cast<int32_t>(pb.kv);  // KvLayout and KvMode share their numbering
  a.sq_dense = pb.sq_dense;
  a.total_q = pb.varlen_q ? p.q.shape[0] : 0;
  a.kv_slot = pb.kv_slot;
  a.kv_rows0 = p.k.shape[0];
  a.page_size = pb.kv == KvLayout::paged ? pb.page_size : 1;
  a.max_pages = pb.max_pages;
  a.snew = static_cast<int32_t>(pb.snew);
  auto idx = [](const TensorView& t, int64_t* st) -> const int32_t* {
    if (!t.present()) return nullptr;
    *st = t.stride[0];
    return static_cast<const int32_t*>(t.data);
  };
  a.cu_q = idx(p.cu_seqlens_q, &a.cu_q_st);
  a.cu_k = pb.kv == KvLayout::varlen ? idx(p.cu_seqlens_k, &a.cu_k_st) : nullptr;
  a.seqused_k = idx(p.seqused_k, &a.seqused_st);  // dense or varlen k (validation forbids it with a cache)
  a.cache_seqlens = idx(p.cache_seqlens, &a.cache_seqlens_st);
  a.cache_batch_idx = idx(p.cache_batch_idx, &a.cbi_st);
  if (pb.kv == KvLayout::paged) {
    a.page_table = static_cast<const int32_t*>(p.page_table.data);
    a.pt_s0 = p.page_table.stride[0], a.pt_s1 = p.page_table.stride[1];
  }
  constexpr float kLog2e = 1.4426950408889634f;
  a.scale_log2 = pb.scale * kLog2e;
  if (pb.softcap > 0.f) {
    a.softcap_in = pb.scale / pb.softcap;
    a.softcap_log2 = pb.softcap * kLog2e;
  }
  a.mask = pb.mask;
  if (pb.has_sinks) {
    a.sinks = static_cast<const float*>(p.sinks.data);
    a.sinks_st = p.sinks.stride[0];
  }
  a.pack_gqa = pl.pack_gqa;
  a.varlen_tiles = pl.varlen_tiles;
  a.num_splits = pl.splits;
  a.rows_total = pl.rows_total;
  a.dv_pad = pl.dv;
  return a;
}

// The fp8 instances' arguments: FwdArgs plus the factors (cuda/common/fwd_args.h FwdArgsFp8).
// k_sc / v_sc (core) hold k_descale / v_descale for all-fp8 and fp8-KV calls alike.
cuda::FwdArgsFp8 make_fp8_args(const Problem& pb, const FwdArgs& a) {
  const AttentionParams& p = *pb.p;
  cuda::FwdArgsFp8 f;
  static_cast<FwdArgs&>(f) = a;
  if (p.q_descale.present()) {
    f.q_descale = static_cast<const float*>(p.q_descale.data);
    f.qd_s0 = p.q_descale.stride[0], f.qd_sh = p.q_descale.stride[1];
  }
  f.k_descale = pb.k_sc.data, f.kd_s0 = pb.k_sc.s0, f.kd_s1 = pb.k_sc.s1, f.kd_sh = pb.k_sc.head;
  f.k_tok = pb.k_sc.data != nullptr && pb.k_sc.per_token ? 1 : 0;
  f.v_descale = pb.v_sc.data, f.vd_s0 = pb.v_sc.s0, f.vd_s1 = pb.v_sc.s1, f.vd_sh = pb.v_sc.head;
  f.v_tok = pb.v_sc.data != nullptr && pb.v_sc.per_token ? 1 : 0;
  return f;
}

// fa4's own scratch, when the caller gives no workspace and no allocator hook: one buffer per
// (device, stream) (cuda/scratch_cache.h: calls on different streams never share one; a buffer
// outgrown while another call still enqueues with it is freed after that call's lease ends).
// cudaFree waits for the device, so kernels enqueued earlier with a freed buffer have finished.
// Never destroyed (a static's destructor could run after the CUDA runtime has unloaded).
void* device_alloc(int dev, size_t bytes) {
  int cur = -1;
  cudaGetDevice(&cur);
  if (cur != dev) cudaSetDevice(dev);
  void* ptr = nullptr;
  const cudaError_t e = cudaMalloc(&ptr, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave no error behind for the next call
    ptr = nullptr;
  }
  if (cur != dev && cur >= 0) cudaSetDevice(cur);
  return ptr;
}
void device_free(int dev, void* ptr) {
  int cur = -1;
  cudaGetDevice(&cur);
  if (cur != dev) cudaSetDevice(dev);
  cudaFree(ptr);
  if (cur != dev && cur >= 0) cudaSetDevice(cur);
}
cuda::ScratchCache& scratch_cache() {
  static cuda::ScratchCache* const c = new cuda::ScratchCache(device_alloc, device_free);
  return *c;
}
// Scratch inside a stream capture: a graph-owned allocation node (cudaMallocAsync) freed by a
// free node at the end of the call (cudaFreeAsync), so capture never calls cudaMalloc / cudaFree
// (illegal there) and needs no warm-up on the capturing stream.
struct CapturedScratch {
  void* ptr = nullptr;
  cudaStream_t stream = nullptr;
  ~CapturedScratch() {
    if (ptr != nullptr) cudaFreeAsync(ptr, stream);
  }
};
struct Scratch {
  cuda::ScratchCache::Lease lease;
  CapturedScratch captured;
};
// What fa4's per-stream caches (scratch, tile counters) key a call's stream by. cudaStreamPerThread
// is one handle for a different stream in every host thread, whose calls may run at once: it is
// keyed per host thread (a thread-local address), so two threads never share scratch or counters.
const void* stream_key(const void* stream) {
  thread_local const char per_thread_tag = 0;
  return stream == static_cast<const void*>(cudaStreamPerThread) ? &per_thread_tag : stream;
}
// Whether `stream` is being captured into a graph (a failed query leaves no error behind).
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess) cudaGetLastError();
  return cs == cudaStreamCaptureStatusActive;
}
// fa4's own scratch of `bytes` for the call's stream: *ptr, held by *held until it is destroyed
// (after every launch using it is enqueued).
Status scratch_for(const AttentionParams& p, size_t bytes, const char* what, Scratch* held, void** ptr) {
  if (p.q.device_index < 0 || p.q.device_index >= kMaxDevices)
    return Status::Error(StatusCode::internal, "cuda: device index out of range");
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if (capturing(stream)) {
    const cudaError_t e = cudaMallocAsync(&held->captured.ptr, bytes, stream);
    if (e != cudaSuccess) {
      cudaGetLastError();
      held->captured.ptr = nullptr;
      return Status::Error(StatusCode::out_of_memory, std::string("cuda: fa4's scratch of ") + std::to_string(bytes) +
                                                          " bytes (" + what + ") in a stream capture: " +
                                                          cudaGetErrorString(e));
    }
    held->captured.stream = stream;
    *ptr = held->captured.ptr;
    return Status::Ok();
  }
  held->lease = scratch_cache().get(p.q.device_index, stream_key(p.stream), bytes);
  if (held->lease.get() == nullptr)
    return Status::Error(StatusCode::out_of_memory,
                         std::string("cuda: fa4's scratch of ") + std::to_string(bytes) + " bytes (" + what +
                             "): cudaMalloc failed; pass a workspace or a workspace_alloc hook, or free device memory");
  *ptr = held->lease.get();
  return Status::Ok();
}

// The sm90 dynamic walk's counter pair of the call's stream (cuda/tile_counters.h): zero before the
// launch, zero after it. Inside a stream capture a graph-owned pair zeroed by a captured memset (a
// graph can be replayed on any stream, alongside eager calls on the capturing one). nullptr: walk
// statically (the pool's bound, or no memory; the order is the same, the balance static).
void* counter_alloc_zeroed(int dev, const void* stream, size_t bytes) {
  void* ptr = device_alloc(dev, bytes);
  if (ptr != nullptr && cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(const_cast<void*>(stream))) != cudaSuccess) {
    cudaGetLastError();
    device_free(dev, ptr);
    ptr = nullptr;
  }
  return ptr;
}
// (split = true: the sm90 split-KV counters of FA4_SM90_FUSED_COMBINE, a pool of larger blocks.)
uint32_t* tile_counter_for(const AttentionParams& p, Scratch* held, bool split = false) {
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const size_t bytes = split ? cuda::TileCounterPool::kSplitBytes : cuda::TileCounterPool::kBytes;
  if (capturing(stream)) {
    void* ptr = nullptr;
    if (!scratch_for(p, bytes, split ? "split counters" : "tile counters", held, &ptr)) return nullptr;
    if (cudaMemsetAsync(ptr, 0, bytes, stream) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return static_cast<uint32_t*>(ptr);
  }
  static cuda::TileCounterPool* const pool = new cuda::TileCounterPool(counter_alloc_zeroed);  // never destroyed
  static cuda::TileCounterPool* const split_pool =
      new cuda::TileCounterPool(counter_alloc_zeroed, 64, cuda::TileCounterPool::kSplitBytes);
  return (split ? split_pool : pool)->get(p.q.device_index, stream_key(p.stream), p.stream);
}

// The scratch of a staged call comes from the same three sources as the split-KV workspace, in
// the same order: the caller's buffer, the allocator hook (released when the scope ends, after
// every launch that uses it is enqueued), fa4's own scratch per (device, stream).
struct HookRelease {
  const AttentionParams* p = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
  ~HookRelease() {
    if (ptr != nullptr) p->workspace_free(ptr, bytes, p->stream, p->workspace_ctx);
  }
};

bool is_16bit(DType t) { return t == DType::float16 || t == DType::bfloat16; }
// q's dtype (an fp8 KV cache has 16-bit q: it is supported with it).
bool is_supported(DType t) { return is_16bit(t) || t == DType::float32 || t == DType::float8_e4m3; }

}  // namespace

bool cuda_available() { return device_count() > 0; }

std::string cuda_info() {
  if (device_count() == 0) return "no CUDA device or driver";
  const DeviceProps& dp = device_props(0);
  const DeviceLimits& l = dp.limits;
  return dp.name + ", sm_" + std::to_string(l.cc_major) + std::to_string(l.cc_minor) + ", " + std::to_string(l.sms) +
         " SMs, kernels: " +
         (l.cc_major == 9 && l.cc_minor == 0 ? "sm90 (TMA + wgmma, prefill), " : "") + "sm80 (mma.sync), simt (fp32)";
}

Status cuda_check(const Problem& pb) {
  const AttentionParams& p = *pb.p;
  if (pb.gpu_stage != 0) {  // the call that really runs: on the aligned copies (cuda/stage_rows.h)
    cuda::StagedCall sc;
    if (Status st = sc.build(pb, nullptr); !st) return st;
    if (Status st = cuda_check(sc.problem()); !st) return st;
    const size_t need = sc.copy_bytes() + cuda_workspace_size(sc.problem());
    if (p.workspace != nullptr && p.workspace_bytes < need)
      return Status::Invalid("workspace", "workspace: " + std::to_string(p.workspace_bytes) + " bytes given, " +
                                              std::to_string(need) +
                                              " needed (attention_workspace_size: aligned copies of the unaligned "
                                              "tensors, then the split-KV scratch)");
    if (p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % 16 != 0)
      return Status::Invalid("workspace", "workspace: must be 16-byte aligned");
    return Status::Ok();
  }
  if (Status st = kernel_preference_status(); !st) return st;
  if (!is_supported(pb.dtype))
    return Status::Unsupported("q", std::string("q: the cuda backend supports float16, bfloat16, float32 and float8_e4m3 "
                                                "inputs, got ") + dtype_name(pb.dtype));
  const int dev = p.q.device_index;
  if (dev < 0 || dev >= device_count())
    return Status::Invalid("q", "q: device index " + std::to_string(dev) + " is not a visible CUDA device");
  const DeviceLimits& dl = device_props(dev).limits;
  if (!dl.known) return Status::Error(StatusCode::device_error, "cuda: cannot query device " + std::to_string(dev));
  if (dl.cc_major < 8)
    return Status::Unsupported("q", "q: the cuda backend needs compute capability >= 8.0, device " + std::to_string(dev) +
                                        " is sm_" + std::to_string(dl.cc_major) + std::to_string(dl.cc_minor));
  if (pb.batch > 65535) return Status::Unsupported("q", "q: batch > 65535 is not supported by the cuda backend");
  if (pb.hq > 65535) return Status::Unsupported("q", "q: more than 65535 heads is not supported by the cuda backend");
  if (pb.kv_slot > INT_MAX || (pb.kv == KvLayout::varlen && p.k.shape[0] > INT_MAX) || pb.max_sk > INT_MAX)
    return Status::Unsupported("k", "k: sequences longer than 2^31 - 1 keys are not supported by the cuda backend");
  const Plan pl = cuda::make_plan(pb, dl);
  if (pl.smem > dl.smem_optin)
    return Status::Unsupported("q", "q: head dims (" + std::to_string(pb.dqk) + ", " + std::to_string(pb.dv) +
                                        ") need " + std::to_string(pl.smem) + " bytes of shared memory; device has " +
                                        std::to_string(dl.smem_optin));
  if (pl.rows >= INT_MAX) return Status::Unsupported("q", "q: 2^31 or more query rows (x GQA group) per sequence are not supported by the cuda backend");
  // grid.x (and find_varlen_tile's tile index) is an int; only reachable with varlen tiles.
  if (pl.grid.x > INT_MAX) return Status::Unsupported("q", "q: 2^31 or more query tiles are not supported by the cuda backend");
  if (pl.workspace > 0 && p.workspace != nullptr && p.workspace_bytes < pl.workspace)
    return Status::Invalid("workspace", "workspace: " + std::to_string(p.workspace_bytes) + " bytes given, " +
                                            std::to_string(pl.workspace) + " needed (attention_workspace_size)");
  if (p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % 16 != 0)
    return Status::Invalid("workspace", "workspace: must be 16-byte aligned");
  return Status::Ok();
}

size_t cuda_workspace_size(const Problem& pb) {
  if (!is_supported(pb.dtype)) return 0;  // cuda_check refuses these
  if (pb.gpu_stage != 0) {
    cuda::StagedCall sc;
    if (!sc.build(pb, nullptr)) return 0;  // cuda_check reports why
    return sc.copy_bytes() + cuda_workspace_size(sc.problem());
  }
  return plan_for(pb).workspace;
}

void cuda_describe(const Problem& pb, PlanInfo* info) {
  if (pb.gpu_stage != 0) {
    cuda::StagedCall sc;
    if (sc.build(pb, nullptr)) cuda_describe(sc.problem(), info);
    info->staged = true;
    return;
  }
  const Plan pl = plan_for(pb);
  info->kernel = cuda::kernel_name(pl.kernel);
  info->tile_m = pl.sm90_decode_keys_m ? 8 * cuda::sm90::decode_keys_m_tiles(pb.max_sq * pb.group) : pl.m;
  info->tile_n = pl.n;
  info->pack_gqa = pl.pack_gqa || pl.sm90_decode_keys_m;
  info->splits = pl.splits;
}

// A problem with unaligned rows: gather the copies, run the call on them, scatter out back.
static Status staged_forward(const Problem& pb) {
  const AttentionParams& p = *pb.p;
  DeviceGuard guard(p.q.device_index);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  cuda::StagedCall sc;
  if (Status st = sc.build(pb, nullptr); !st) return st;  // sizes
  const size_t inner_ws = cuda_workspace_size(sc.problem());
  const size_t total = sc.copy_bytes() + inner_ws;
  if (total == 0) return cuda_forward(sc.problem());  // nothing to copy (empty tensors)
  uint8_t* buf = static_cast<uint8_t*>(p.workspace);  // cuda_check verified its size
  HookRelease hook;
  Scratch scratch;  // fa4's own, when needed: held until every launch using it is enqueued
  if (buf == nullptr && p.workspace_alloc != nullptr) {
    buf = static_cast<uint8_t*>(p.workspace_alloc(total, p.stream, p.workspace_ctx));
    if (buf == nullptr)
      return Status::Error(StatusCode::out_of_memory, "workspace_alloc: returned null for " + std::to_string(total) +
                                                          " bytes (aligned copies of the unaligned tensors + split-KV)");
    hook = {&p, buf, total};
    if (reinterpret_cast<uintptr_t>(buf) % 16 != 0)
      return Status::Invalid("workspace_alloc", "workspace_alloc: returned a pointer that is not 16-byte aligned");
  } else if (buf == nullptr) {
    void* ptr = nullptr;
    if (Status st = scratch_for(p, total, "aligned copies of the unaligned tensors + split-KV", &scratch, &ptr); !st)
      return st;
    buf = static_cast<uint8_t*>(ptr);
  }
  if (Status st = sc.build(pb, buf); !st) return st;  // the same layout on the real buffer
  if (inner_ws > 0) sc.set_workspace(buf + sc.copy_bytes(), inner_ws);
  for (const cuda::RowCopy& c : sc.gathers())
    if (const auto e = static_cast<cudaError_t>(cuda::launch_row_copy(c, stream)); e != cudaSuccess)
      return device_error("row staging launch", e);
  if (Status st = cuda_forward(sc.problem()); !st) return st;
  for (const cuda::RowCopy& c : sc.scatters())
    if (const auto e = static_cast<cudaError_t>(cuda::launch_row_copy(c, stream)); e != cudaSuccess)
      return device_error("row staging launch", e);
  return Status::Ok();
}

Status cuda_forward(const Problem& pb) {
  if (pb.gpu_stage != 0) return staged_forward(pb);
  const AttentionParams& p = *pb.p;
  DeviceGuard guard(p.q.device_index);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  const Plan pl = plan_for(pb);
  FwdArgs a = make_args(pb, pl);
  const bool attend = !(pb.batch == 0 || pb.hq == 0 || pl.grid.x == 0 || pl.rows_total == 0);

  // Split-KV scratch (and the sm90 fp8 tile's V^T) first: if it cannot be had, fail before
  // anything is enqueued (the KV append would otherwise already have modified the cache).
  // Sources, in order: the caller's buffer, the caller's allocator hook (released when this scope
  // ends, after every launch that uses it is enqueued), fa4's own scratch per (device, stream).
  HookRelease hook_ws;
  Scratch scratch;  // fa4's own, when needed: held until the launches are enqueued
  uint8_t* work = nullptr;  // the plan's workspace (cuda/plan.h Plan::workspace)
  if (attend && pl.workspace > 0) {
    void* ws = p.workspace;
    if (ws == nullptr && p.workspace_alloc != nullptr) {
      ws = p.workspace_alloc(pl.workspace, p.stream, p.workspace_ctx);
      if (ws == nullptr)
        return Status::Error(StatusCode::out_of_memory, "workspace_alloc: returned null for " +
                                                            std::to_string(pl.workspace) + " bytes of workspace (split-KV partials / the fp8 V^T)");
      hook_ws = {&p, ws, pl.workspace};
      if (reinterpret_cast<uintptr_t>(ws) % 16 != 0)
        return Status::Invalid("workspace_alloc", "workspace_alloc: returned a pointer that is not 16-byte aligned");
    } else if (ws == nullptr) {
      const char* what = pl.splits > 1 ? "split-KV workspace" : "fp8 V^T workspace";
      if (Status st = scratch_for(p, pl.workspace, what, &scratch, &ws); !st) return st;
    }
    work = static_cast<uint8_t*>(ws);
    if (pl.splits > 1) {
      a.o_part = static_cast<float*>(ws);
      a.lse_part = a.o_part + static_cast<size_t>(pl.splits) * pl.rows_total * pb.hq * pl.dv;
    }
  }

  if (pb.appends()) {
    cuda::AppendArgs ka, va;
    ka.src = p.k_new.data, ka.src_s0 = pb.knew_s.s0, ka.src_s1 = pb.knew_s.s1, ka.src_sh = pb.knew_s.head;
    ka.dst = p.k.data, ka.dst_s0 = pb.ks.s0, ka.dst_s1 = pb.ks.s1, ka.dst_sh = pb.ks.head, ka.d = a.dqk;
    va.src = p.v_new.data, va.src_s0 = pb.vnew_s.s0, va.src_s1 = pb.vnew_s.s1, va.src_sh = pb.vnew_s.head;
    va.dst = p.v.data, va.dst_s0 = pb.vs.s0, va.dst_s1 = pb.vs.s1, va.dst_sh = pb.vs.head, va.d = a.dv;
    cudaError_t e;
    if (pb.kv_fp8) {  // 16-bit rows quantized into the e4m3 cache by their rows' factors
      auto scale = [](const KvScale& k) {
        cuda::AppendScale sc;
        sc.data = k.data, sc.s0 = k.s0, sc.s1 = k.s1, sc.sh = k.head, sc.tok = k.data != nullptr && k.per_token;
        return sc;
      };
      e = cuda::launch_kv_append_fp8(a, ka, va, scale(pb.k_sc), scale(pb.v_sc), pb.dtype == DType::bfloat16, stream);
    } else {
      e = cuda::launch_kv_append(a, ka, va, static_cast<int>(dtype_size(pb.dtype)), stream);
    }
    if (e != cudaSuccess) return device_error("kv append launch", e);
  }
  if (!attend) return Status::Ok();

  const dim3 grid(static_cast<unsigned>(pl.grid.x), static_cast<unsigned>(pl.grid.y), static_cast<unsigned>(pl.grid.z));
  bool fused_combine = false;  // the sm90 kernel merged its own splits (FA4_SM90_FUSED_COMBINE)
  cudaError_t e = cudaSuccess;
  switch (pl.kernel) {
    case Kernel::sm90: {
      cuda::sm90::Sm90Params P;
      std::string why;
      if (cuda::sm90::is_fp8_tile(pl.sm90_tile)) {
        // All-fp8: the maps first (nothing launched if they fail), then V^T into the workspace
        // (after the append above, on the same stream), which the kernel reads through its v map
        // (cuda/sm90/fp8_layout.h) -- unless the tile transposes V itself (FA4_SM90_FP8_VT_IN_KERNEL:
        // no workspace, V's own map).
        const bool vt_in_kernel = cuda::sm90::fp8_vt_in_kernel(pl.dqk, pl.dv, pl.sm90_tile);
        void* vt = vt_in_kernel ? nullptr : work + pl.fp8_vt_offset;
        if (!cuda::sm90::make_params_fp8(make_fp8_args(pb, a), {pl.dqk, pl.dv}, pl.sm90_tile, vt, pl.fp8_vt, &P, &why))
          return Status::Error(StatusCode::internal, "cuda: sm90 fp8 tensor maps: " + why);
        if (!vt_in_kernel)
          if (const cudaError_t ev = cuda::sm90::launch_fp8_vt(a, vt, pl.fp8_vt, stream); ev != cudaSuccess)
            return device_error("fp8 V^T pre-pass launch", ev);
      } else if (pl.sm90_tile == cuda::sm90::Tile::fp8_kv) {
        // An e4m3 KV cache under 16-bit q: byte maps of k / v, the factors per (batch, kv head) --
        // or per token too, on the keys-on-M decode kernel.
        const bool ok = (pl.sm90_decode_keys_m ? cuda::sm90::make_params_decode_kv : cuda::sm90::make_params_fp8_kv)(
            make_fp8_args(pb, a), {pl.dqk, pl.dv}, pb.dtype == DType::bfloat16, &P, &why);
        if (!ok) return Status::Error(StatusCode::internal, "cuda: sm90 fp8-KV tensor maps: " + why);
      } else if (!cuda::sm90::make_params(a, {pl.dqk, pl.dv}, pl.sm90_tile, pb.dtype == DType::bfloat16, &P, &why)) {
        return Status::Error(StatusCode::internal, "cuda: sm90 tensor maps: " + why);  // sm90_supports checked TMA's rules
      }
      P.sched = pl.sched;
      P.solo = pl.sm90_one_q ? 2 : pl.sm90_solo ? 1 : 0;  // (fwd_params.h)
      Scratch counters, split_counters;  // (in a stream capture) held until the launch is enqueued
      if (P.sched.dynamic != 0) {
        P.tile_counter = tile_counter_for(p, &counters);
        if (P.tile_counter == nullptr) P.sched.dynamic = 0;
      }
      // FA4_SM90_FUSED_COMBINE: the instance merges its splits (sm90::fused_merge) where a counter
      // per (tile, consumer) fits the block (fwd_epilogue.cuh numbers the tiles); else the combine
      // kernel below does.
      if (cuda::sm90::fused_merge(pl.dqk, pl.dv, pl.sm90_tile) && pl.splits > 1) {
        const int64_t consumers = cuda::sm90::tile_cfg(pl.dqk, pl.dv, pl.sm90_tile).consumers;
        const int64_t slots = (pl.rows_total * (pl.pack_gqa ? pb.group : 1) / pl.m + pb.batch + 1) * pl.grid.y * consumers;
        if (slots <= static_cast<int64_t>(cuda::TileCounterPool::kSplitBytes / sizeof(uint32_t))) {
          P.split_counter = tile_counter_for(p, &split_counters, true);
          P.split_slots = P.split_counter != nullptr ? slots : 0;
          fused_combine = P.split_counter != nullptr;
        }
      }
      // The balanced walk's arrival counters (one per remainder tile and consumer), from the
      // split counters' pool; without them the CTAs walk whole tiles (the same static schedule).
      if (P.sched.balanced_n > 0) {
        P.piece_counter = tile_counter_for(p, &split_counters, true);
        if (P.piece_counter == nullptr) P.sched.balanced_n = 0;
        else P.piece_state = reinterpret_cast<float*>(work + pl.piece_state_offset);
      }
      // (FA4_SM90_PAGED_GATHER: the tile's gather instance, sm90/fwd_gather.h)
      if (pl.sm90_decode_keys_m)  // (FA4_SM90_DECODE_KEYS_M: the keys-on-M decode kernel, sm90/decode_kv.h)
        e = cuda::sm90::launch_decode_kv(P, pb.dtype == DType::bfloat16, stream);
      else
        e = (pl.sm90_gather ? cuda::sm90::launch_fwd_gather : cuda::sm90::launch_fwd)(
            P, {pl.dqk, pl.dv}, pl.sm90_tile, pb.dtype == DType::bfloat16, dim3(static_cast<unsigned>(pl.ctas)), stream);
      break;
    }
    case Kernel::sm80:
      if (pl.sm80_fp8 != sm80::Fp8::none)
        e = sm80::launch_fwd_fp8(make_fp8_args(pb, a), {pl.dqk, pl.dv}, pl.sm80_fp8, pb.dtype == DType::bfloat16,
                                 pl.sm80_tile, grid, stream);
      else
        e = sm80::launch_fwd(a, {pl.dqk, pl.dv}, pb.dtype == DType::bfloat16, pl.sm80_tile, grid, stream);
      break;
    case Kernel::simt: e = cuda::simt::launch_fwd_f32(a, grid, stream); break;
  }
  if (e != cudaSuccess) return device_error("attention kernel launch", e);

  if (pl.splits > 1 && !fused_combine) {
    cuda::CombineArgs c;
    const int64_t row_elems = pb.hq * static_cast<int64_t>(pl.dv);
    c.o_part = a.o_part;
    c.lse_part = a.lse_part;
    c.out = p.out.data;
    c.lse = a.lse;
    c.out_dtype = static_cast<int32_t>(pb.out_dtype);
    c.splits = pl.splits, c.heads = static_cast<int32_t>(pb.hq), c.dv = a.dv;
    c.rows = pl.rows_total;
    c.op_s = pl.rows_total * row_elems, c.op_i = row_elems, c.op_h = pl.dv;
    c.lp_s = pl.rows_total * pb.hq, c.lp_i = pb.hq, c.lp_h = 1;
    c.o_h = pb.os.head, c.l_h = pb.lse_sh;
    if (pb.varlen_q) {
      c.rows_per_b = pl.rows_total;  // b = 0, i = token
      c.o_i = pb.os.s0, c.l_i = pb.lse_si;
      c.row_limit = a.cu_q + pb.batch * a.cu_q_st;
    } else {
      c.rows_per_b = pb.sq_dense;
      c.op_b = pb.sq_dense * row_elems, c.lp_b = pb.sq_dense * pb.hq;
      c.o_b = pb.os.s0, c.o_i = pb.os.s1;
      c.l_b = pb.lse_sb, c.l_i = pb.lse_si;
    }
    e = cuda::launch_combine(c, stream);
    if (e != cudaSuccess) return device_error("combine launch", e);
  }
  return Status::Ok();
}

Status cuda_combine(const CombineParams& c) {
  if (Status st = kernel_preference_status(); !st) return st;
  if (c.out_partials.device_index < 0 || c.out_partials.device_index >= device_count())
    return Status::Invalid("out_partials", "out_partials: not on a visible CUDA device");
  DeviceGuard guard(c.out_partials.device_index);
  const TensorView &op = c.out_partials, &lp = c.lse_partials;
  cuda::CombineArgs a;
  a.o_part = static_cast<const float*>(op.data);
  a.lse_part = static_cast<const float*>(lp.data);
  a.out = c.out.data;
  a.lse = c.lse.present() ? static_cast<float*>(c.lse.data) : nullptr;
  a.out_dtype = static_cast<int32_t>(c.out.dtype);
  a.splits = static_cast<int32_t>(op.shape[0]);
  a.heads = static_cast<int32_t>(op.shape[3]);
  a.dv = static_cast<int32_t>(op.shape[4]);
  a.rows = op.shape[1] * op.shape[2];
  a.rows_per_b = op.shape[2] > 0 ? op.shape[2] : 1;
  a.op_s = op.stride[0], a.op_b = op.stride[1], a.op_i = op.stride[2], a.op_h = op.stride[3];
  a.lp_s = lp.stride[0], a.lp_b = lp.stride[1], a.lp_h = lp.stride[2], a.lp_i = lp.stride[3];
  a.o_b = c.out.stride[0], a.o_i = c.out.stride[1], a.o_h = c.out.stride[2];
  if (a.lse) a.l_b = c.lse.stride[0], a.l_h = c.lse.stride[1], a.l_i = c.lse.stride[2];
  cudaError_t e = cuda::launch_combine(a, static_cast<cudaStream_t>(c.stream));
  if (e != cudaSuccess) return device_error("combine launch", e);
  return Status::Ok();
}

}  // namespace fa4::core
