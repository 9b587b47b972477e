/* fa4 C ABI: the same reach as the C++ API (fa4/fa4.h), for FFI users (Python, Rust, Julia...).
 *
 * Plain structs, fixed-width fields, no C++ types. Zero-initialize a struct, then call
 * fa4_params_init() to get the defaults (scale 0 = 1/sqrt(D), windows -1 = unbounded), fill in
 * what you use. A tensor with ndim == 0 is "not given". Every function returns an
 * fa4_status_code; on failure fa4_last_error() (thread-local, valid until the next fa4 call on
 * the same thread) gives one line naming the argument, fa4_last_error_argument() the argument.
 */
#ifndef FA4_C_H_
#define FA4_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FA4_MAX_DIMS 6

typedef enum {
  FA4_FLOAT32 = 0,
  FA4_FLOAT16 = 1,
  FA4_BFLOAT16 = 2,
  FA4_FLOAT8_E4M3 = 3,
  FA4_INT32 = 4
} fa4_dtype;

typedef enum { FA4_DEVICE_CPU = 0, FA4_DEVICE_CUDA = 1 } fa4_device;

typedef enum {
  FA4_BACKEND_AUTO = 0,
  FA4_BACKEND_REFERENCE = 1,
  FA4_BACKEND_CPU = 2,
  FA4_BACKEND_CUDA = 3
} fa4_backend;

typedef enum {
  FA4_OK = 0,
  FA4_INVALID_ARGUMENT = 1,
  FA4_UNSUPPORTED = 2,
  FA4_BACKEND_UNAVAILABLE = 3,
  FA4_DEVICE_ERROR = 4,
  FA4_OUT_OF_MEMORY = 5,
  FA4_INTERNAL = 6
} fa4_status_code;

typedef struct {
  void* data;
  int32_t dtype;  /* fa4_dtype */
  int32_t ndim;   /* 0 = not given */
  int64_t shape[FA4_MAX_DIMS];
  int64_t stride[FA4_MAX_DIMS]; /* in elements */
  int32_t device; /* fa4_device */
  int32_t device_index;
} fa4_tensor;

/* Field meanings: see fa4/params.h (fa4::AttentionParams), same names. */
typedef struct {
  fa4_tensor q, k, v, out, lse;
  float scale, softcap;
  int32_t causal;
  int64_t window_left, window_right, chunk_size;
  fa4_tensor sinks;
  fa4_tensor q_descale, k_descale, v_descale;
  fa4_tensor cu_seqlens_q, cu_seqlens_k, seqused_k;
  int64_t max_seqlen_q, max_seqlen_k;
  fa4_tensor cache_seqlens, cache_batch_idx, page_table;
  fa4_tensor k_new, v_new;
  int32_t num_splits;
  int32_t backend; /* fa4_backend */
  int32_t num_threads;
  void* stream;
  void* workspace;
  size_t workspace_bytes;
  void* (*workspace_alloc)(size_t bytes, void* stream, void* ctx);
  void (*workspace_free)(void* ptr, size_t bytes, void* stream, void* ctx);
  void* workspace_ctx;
} fa4_params;

typedef struct {
  fa4_tensor out_partials, lse_partials, out, lse;
  int32_t backend;
  int32_t num_threads;
  void* stream;
} fa4_combine_params;

void fa4_params_init(fa4_params* p);
void fa4_combine_params_init(fa4_combine_params* p);

int fa4_attention_forward(const fa4_params* p);
int fa4_combine_partials(const fa4_combine_params* p);
size_t fa4_attention_workspace_size(const fa4_params* p);

/* 1 if the backend can run in this build on this machine. */
int fa4_backend_available(int backend);
/* One line per backend, "name: available|unavailable (detail)"; returns the length it needed
 * (excluding the NUL); writes at most cap bytes (NUL-terminated when cap > 0). */
size_t fa4_backend_info(char* buf, size_t cap);

const char* fa4_last_error(void);
const char* fa4_last_error_argument(void);
const char* fa4_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FA4_C_H_ */
