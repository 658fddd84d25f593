/* replayssm public C header: status codes, one params struct per kernel, launcher prototypes.
 *
 * Every launcher takes a pointer to its params struct and the caller's stream last, returns a
 * status, and never allocates or synchronises. The same launch layer is compiled twice: by nvcc
 * (`rssm_*`) and by the host compiler against the SIMT emulator (`rssm_emu_*`, synchronous, the
 * stream is ignored and every pointer is host memory).
 *
 * Layout: params structs hold 8-byte fields first, then 4-byte ones, no implicit padding; sizes
 * and offsets are pinned by static_assert (csrc/include/replayssm/layout.h) and by const asserts
 * in src/ffi.rs. Integers are fixed width; enums travel as int32_t. */
#ifndef REPLAYSSM_H
#define REPLAYSSM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RSSM_ABI_VERSION 1

typedef enum rssm_status {
  RSSM_OK = 0,
  /* A params field is inconsistent (shape, stride, null pointer, range). */
  RSSM_ERR_INVALID_ARGUMENT = 1,
  /* Valid, but not compiled in (head dim outside {32,64,128,256}, dtype, ...). */
  RSSM_ERR_UNSUPPORTED = 2,
  /* The CUDA runtime refused the launch; see rssm_cuda_last_error(). */
  RSSM_ERR_LAUNCH = 3,
  /* The SIMT emulator refused the launch or found a kernel bug (divergent collective,
   * deadlock); see rssm_emu_last_error(). */
  RSSM_ERR_EMULATOR = 4
} rssm_status;

typedef enum rssm_dtype { RSSM_DTYPE_F32 = 0, RSSM_DTYPE_F16 = 1, RSSM_DTYPE_BF16 = 2 } rssm_dtype;

typedef enum rssm_variant {
  RSSM_VARIANT_GDN = 0, /* scalar decay per (token, value head) */
  RSSM_VARIANT_KDA = 1  /* per-channel decay: g is [.., K] */
} rssm_variant;

/* Bits of the device-side error word: set by kernels that met a device-side index they could
 * not trust (the host never saw it, e.g. under CUDA-graph replay); the row is skipped. */
#define RSSM_DEVERR_SLOT_OUT_OF_RANGE 0x1u
#define RSSM_DEVERR_BAD_SEQLENS 0x2u

/* Kernel R: recurrent baseline (SPEC §3, §4 R). Request r owns tokens
 * cu_seqlens[r]..cu_seqlens[r+1] (at most max_seqlen of them) and the checkpoint
 * state[slots[r]] ([HV, V, K], K contiguous); slot -1 = null (zero outputs, nothing else).
 * Gate: either raw (a, b, A_log, dt_bias; g and beta NULL) or precomputed (g, beta). */
typedef struct rssm_recurrent_params {
  const void *q;          /* [num_tokens, H, K] act, token stride q_stride */
  const void *k;          /* [num_tokens, H, K] act, token stride k_stride */
  const void *v;          /* [num_tokens, HV, V] act, token stride v_stride */
  const void *a;          /* raw gate: [num_tokens, HV] (KDA: [num_tokens, HV, K]) act, or NULL */
  const void *b;          /* raw gate: [num_tokens, HV] act, or NULL */
  const float *A_log;     /* raw gate: [HV] */
  const float *dt_bias;   /* raw gate: [HV] (KDA: [HV, K]) */
  const float *g;         /* precomputed: [num_tokens, HV] (KDA: [num_tokens, HV, K]), or NULL */
  const float *beta;      /* precomputed: [num_tokens, HV], or NULL */
  const int32_t *cu_seqlens; /* [batch + 1], device */
  const int32_t *slots;   /* [batch], device; -1 = null */
  float *state;           /* pool [num_slots, HV, V, K] f32 */
  float *snapshots;       /* [batch, max_seqlen, HV, V, K] f32 (state after each token), or NULL */
  void *o;                /* [num_tokens, HV, V] act, token stride o_stride */
  uint32_t *error_word;   /* device u32 OR-ed with RSSM_DEVERR_* bits, or NULL */
  int64_t q_stride, k_stride, v_stride, a_stride, b_stride, o_stride; /* elements per token */
  int32_t num_tokens, batch, max_seqlen, num_slots;
  int32_t H, HV, K, V;
  float scale;            /* applied to q after normalisation (usually K^-0.5) */
  int32_t dtype;          /* rssm_dtype of q, k, v, a, b, o */
  int32_t variant;        /* rssm_variant */
  int32_t qk_l2norm;      /* 1: normalise q and k in-kernel (division form, eps 1e-6 inside) */
  int32_t write_state;    /* 1: store the final state back into state[slot] */
  int32_t reserved;       /* keeps the struct size a multiple of 8 */
} rssm_recurrent_params;

rssm_status rssm_recurrent(const rssm_recurrent_params *params, void *stream);
rssm_status rssm_emu_recurrent(const rssm_recurrent_params *params, void *stream);

/* Static validation shared by both backends (CUTLASS's can_implement): RSSM_OK when a launch
 * with these params is well-formed for the compiled kernels. Checks host-visible fields only. */
rssm_status rssm_recurrent_can_implement(const rssm_recurrent_params *params);

/* Emulator diagnostics: the message of the last RSSM_ERR_EMULATOR on this thread. */
const char *rssm_emu_last_error(void);

/* Thin CUDA runtime helpers (present only when the CUDA backend is compiled in). Each returns
 * the cudaError_t value as int32_t (0 = success). */
int32_t rssm_cuda_device_count(int32_t *count);
int32_t rssm_cuda_versions(int32_t *runtime, int32_t *driver);
int32_t rssm_cuda_device_name(int32_t device, char *buf, int32_t len, int32_t *cc_major, int32_t *cc_minor);
int32_t rssm_cuda_malloc(void **ptr, uint64_t bytes);
int32_t rssm_cuda_free(void *ptr);
int32_t rssm_cuda_memcpy_htod(void *dst, const void *src, uint64_t bytes);
int32_t rssm_cuda_memcpy_dtoh(void *dst, const void *src, uint64_t bytes);
int32_t rssm_cuda_memset(void *dst, int32_t value, uint64_t bytes);
int32_t rssm_cuda_synchronize(void);
int32_t rssm_cuda_last_error(void);
const char *rssm_cuda_error_string(int32_t code);

#ifdef __cplusplus
}
#endif

#endif /* REPLAYSSM_H */
