/* lpattn C API: exact, K-interval and thresholded attention, forward and backward, over
 * strided float tensors.
 *
 * A thin, stable C surface over the C++ API in kernels/attention.h; the semantics (math,
 * layouts, causal alignment, sinks, validation) are identical, and the C++ header is the
 * authority where this one is brief. The math is docs/math.md (§1, §1.1).
 *
 *   #include <lpattn/kernels/lpattn.h>      link with -llpattn (pkg-config: lpattn)
 *
 * Conventions
 * - Every tensor is a view: a base pointer plus element (not byte) strides for batch, head
 *   and token; the head dimension is contiguous (stride 1). Dense [B, H, T, D] has
 *   strides {H*T*D, T*D, D}; dense [B, T, H, D] has {T*H*D, D, H*D}.
 * - Q, O, dO, dQ have `heads` heads of q_len tokens; K, V, dK, dV have `kv_heads` heads of
 *   kv_len tokens (grouped-query attention: query head h reads kv head h / (heads / kv_heads)).
 * - lse is a dense float array [batch, heads, q_len] (row-major, no strides).
 * - Functions return LPATTN_OK or an error status. On an error nothing has been written to any
 *   output, and lpattn_last_error() describes the problem.
 * - The functions are thread-safe for distinct outputs; each call parallelises internally
 *   with oneTBB (see lpattn_options.threads).
 */
#ifndef LPATTN_KERNELS_LPATTN_H_
#define LPATTN_KERNELS_LPATTN_H_

#include <stdint.h>

#if defined(_WIN32)
#define LPATTN_C_API
#else
#define LPATTN_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Sizes; all must be positive. heads must be a multiple of kv_heads, and head_dim at most 256. */
typedef struct lpattn_shape {
  int64_t batch;
  int64_t heads;
  int64_t kv_heads;
  int64_t q_len;
  int64_t kv_len;
  int64_t head_dim;
} lpattn_shape;

/* A read-only tensor view: element (b, h, t, d) is at
 * data[b * batch_stride + h * head_stride + t * token_stride + d]. Strides must be
 * non-negative and must not make distinct elements overlap. */
typedef struct lpattn_const_tensor {
  const float* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t token_stride;
} lpattn_const_tensor;

/* A writable tensor view, laid out as lpattn_const_tensor. */
typedef struct lpattn_tensor {
  float* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t token_stride;
} lpattn_tensor;

/* §1.1: how the softmax treats an attention sink. */
typedef enum lpattn_sink_mode {
  LPATTN_SINK_NONE = 0,       /* plain softmax */
  LPATTN_SINK_LEARNED = 1,    /* a per-head learnable sink logit (options.sink_logits) */
  LPATTN_SINK_OFF_BY_ONE = 2  /* the off-by-one softmax: a sink with logit fixed at 0 */
} lpattn_sink_mode;

typedef struct lpattn_options {
  /* Non-zero: causal, bottom-right aligned; key j is visible to query i iff
   * j <= i + (kv_len - q_len). */
  int causal;
  /* Score scale. <= 0 means the kernel's default: 1 / sqrt(head_dim) for softmax and
   * K-interval attention, 1 for thresholded attention (§3: scores are cosines); NaN and +inf
   * are invalid arguments. */
  float scale;
  lpattn_sink_mode sink;
  /* [heads] sink logits; required with LPATTN_SINK_LEARNED, ignored otherwise. */
  const float* sink_logits;
  /* 0: run in the caller's oneTBB arena (all its threads); n > 0: a private arena of n
   * threads. */
  int threads;
  /* §4 low-precision operands as option text, e.g. "qk=int8,pv=bf16,gran=token" (keys qk, pv,
   * p, pfold (§4.3, cached forwards), gran, vgran, block, smooth_k, path, and the backward's
   * bwd, bwd_dp of §4.2; see
   * kernels/precision.h). NULL or "" means fp32. */
  const char* precision;
  /* §1.3 logit softcap (exact attention): scores become c tanh(s / c); 0 is off. */
  float softcap;
  /* §1.4 ALiBi (exact attention): [heads] slopes, s_ij - slope_h |i + kv_len - q_len - j|;
   * NULL is off. */
  const float* alibi_slopes;
  /* §1.5 sliding window (exact attention): query i sees key j only if
   * j > i + kv_len - q_len - window; 0 is none. */
  int64_t window;
} lpattn_options;

typedef enum lpattn_status {
  LPATTN_OK = 0,
  /* A null pointer, bad size, stride or option; nothing was written. */
  LPATTN_ERROR_INVALID_ARGUMENT = 1,
  /* Any other failure (e.g. out of memory); nothing is guaranteed about the outputs. */
  LPATTN_ERROR_INTERNAL = 2
} lpattn_status;

/* Fills *options with the defaults: not causal, scale 0 (meaning 1 / sqrt(head_dim)), no
 * sink, no sink logits, threads 0, fp32 operands, no softcap. Does nothing if options is
 * null. */
LPATTN_C_API void lpattn_default_options(lpattn_options* options);

/* §1 forward (with §1.1 sinks): O = softmax(scale * Q K^T [+ sink]) V.
 * Reads q, k, v (and options->sink_logits with LPATTN_SINK_LEARNED). Writes every element of
 * o (Q's shape) and of lse ([batch, heads, q_len], lse = m + log Z per row, the sink
 * included). A row with no visible key and no sink gets O = 0 and lse = -inf.
 * shape and options must not be null; o.data and lse must not be null. */
LPATTN_C_API lpattn_status lpattn_exact_forward(const lpattn_shape* shape,
                                                const lpattn_options* options,
                                                lpattn_const_tensor q, lpattn_const_tensor k,
                                                lpattn_const_tensor v, lpattn_tensor o,
                                                float* lse);

/* §1 backward (with §1.1 sinks). Inputs: the forward's inputs q, k, v, its outputs o and lse
 * (with the same shape and options), and d_o, the gradient of the loss with respect to O.
 * Writes dq (Q's shape), dk and dv (K's shape), and with LPATTN_SINK_LEARNED d_sink
 * ([heads], summed over batch and query rows); d_sink may be null otherwise and is not
 * written then. Every output is overwritten, not accumulated into. */
LPATTN_C_API lpattn_status lpattn_exact_backward(
    const lpattn_shape* shape, const lpattn_options* options, lpattn_const_tensor q,
    lpattn_const_tensor k, lpattn_const_tensor v, lpattn_const_tensor o,
    lpattn_const_tensor d_o, const float* lse, lpattn_tensor dq, lpattn_tensor dk,
    lpattn_tensor dv, float* d_sink);

/* Where the K-interval forward saves its per-row statistics, each [batch, heads, q_len]: the
 * row max m, the window width R, the normaliser Z, the exact softmax's lse, and the argmax
 * and argmin key indices. None may be null. */
typedef struct lpattn_kint_saved {
  float* m;
  float* R;
  float* Z;
  float* lse_exact;
  int32_t* argmax;
  int32_t* argmin;
} lpattn_kint_saved;

/* §2 K-interval forward: every row's scores on a grid of K + 1 exp values, O = P V.
 * kint_options is the option text of the harness arm without "kint:", e.g.
 * "K=4,cal=window,W=8,round=nearest,ste=prob" ("" for the defaults); the surrogate options
 * matter only to the backward. Sinks are rejected (§2 defines none). Writes o and the saved
 * statistics. */
LPATTN_C_API lpattn_status lpattn_kint_forward(const lpattn_shape* shape,
                                               const lpattn_options* options,
                                               const char* kint_options, lpattn_const_tensor q,
                                               lpattn_const_tensor k, lpattn_const_tensor v,
                                               lpattn_tensor o, lpattn_kint_saved saved);

/* §2 K-interval backward under the surrogate of kint_options (the same text as the forward's).
 * Inputs: the forward's inputs, its o and saved statistics, and d_o. Overwrites dq, dk, dv. */
LPATTN_C_API lpattn_status lpattn_kint_backward(
    const lpattn_shape* shape, const lpattn_options* options, const char* kint_options,
    lpattn_const_tensor q, lpattn_const_tensor k, lpattn_const_tensor v, lpattn_const_tensor o,
    lpattn_const_tensor d_o, lpattn_kint_saved saved, lpattn_tensor dq, lpattn_tensor dk,
    lpattn_tensor dv);

/* §3 thresholded (differential) attention forward: y_i = sum_j (a1_ij - lambda a2_ij) v_j with
 * a = max(s - tau_i, 0)^p, no normalisation. tda_options is the option text of the harness arm
 * without "tda:", e.g. "views=2,p=2,beta=1,kappa=1,l2=1" ("" for the defaults). q1, k1 are
 * view 1's queries and keys; q2, k2 and lambda_param ([heads], clamped to [0, 1]) are read only
 * with views = 2 (their data may be null otherwise). survivors, when not null, receives the
 * nonzero weights of each row and view, [views][batch, heads, q_len]. Sinks are rejected. */
LPATTN_C_API lpattn_status lpattn_tda_forward(
    const lpattn_shape* shape, const lpattn_options* options, const char* tda_options,
    lpattn_const_tensor q1, lpattn_const_tensor k1, lpattn_const_tensor q2,
    lpattn_const_tensor k2, lpattn_const_tensor v, const float* lambda_param, lpattn_tensor o,
    int32_t* survivors);

/* §3 backward: the forward's inputs and d_o in; overwrites dq1, dk1, dv (and dq2, dk2 and
 * d_lambda, [heads], with views = 2); writes dL/dbeta to *d_beta when d_beta is not null. */
LPATTN_C_API lpattn_status lpattn_tda_backward(
    const lpattn_shape* shape, const lpattn_options* options, const char* tda_options,
    lpattn_const_tensor q1, lpattn_const_tensor k1, lpattn_const_tensor q2,
    lpattn_const_tensor k2, lpattn_const_tensor v, lpattn_const_tensor d_o,
    const float* lambda_param, lpattn_tensor dq1, lpattn_tensor dk1, lpattn_tensor dq2,
    lpattn_tensor dk2, lpattn_tensor dv, float* d_lambda, float* d_beta);

/* ---- The KV cache (kernels/kv_cache.h, docs/design.md §9) ------------------------------
 * An engine's K and V between decode steps: `sequences` slots of up to `capacity` tokens each,
 * K and V each in one format, the 8-bit formats one byte an element with a scale per token.
 * Contiguous by default; paged (a pool of `blocks` blocks of block_size tokens that slots use
 * through block tables) when block_size > 0. Calls on distinct slots may run concurrently;
 * calls that modify a slot must not overlap other calls on that slot. */
typedef struct lpattn_kv_cache lpattn_kv_cache;

typedef enum lpattn_paged_layout {
  LPATTN_PAGED_HEAD_MAJOR = 0, /* [block][kv_head][block_size][head_dim] (the default) */
  LPATTN_PAGED_TOKEN_MAJOR = 1 /* [block][block_size][kv_head][head_dim] (vLLM's flash) */
} lpattn_paged_layout;

typedef struct lpattn_kv_cache_config {
  int64_t sequences;
  int64_t kv_heads;
  int64_t head_dim;
  int64_t capacity;  /* tokens per slot */
  /* "fp32", "bf16", "fp16", "int8", "fp8e4m3" or "fp8e5m2"; NULL means fp32. */
  const char* k_format;
  const char* v_format;
  int64_t block_size; /* 0: contiguous; else a power of two in [1, 1024] */
  int64_t blocks;     /* the pool's blocks, with block_size > 0 */
  lpattn_paged_layout layout;
  /* Non-zero: keys alone, no V side (thresholded attention's second view; v is not read on
   * append and must have null data on read). */
  int keys_only;
} lpattn_kv_cache_config;

/* Fills *config with the defaults: one slot of one head of dimension 1 and capacity 1, fp32,
 * contiguous, keys and values. Does nothing if config is null. */
LPATTN_C_API void lpattn_kv_cache_default_config(lpattn_kv_cache_config* config);
/* Allocates a cache (every slot's capacity, or the pool, zeroed) into *cache. */
LPATTN_C_API lpattn_status lpattn_kv_cache_create(const lpattn_kv_cache_config* config,
                                                  lpattn_kv_cache** cache);
/* Frees a cache; NULL is a no-op. */
LPATTN_C_API void lpattn_kv_cache_free(lpattn_kv_cache* cache);
/* Appends `tokens` tokens to slot `sequence` from k and v, [kv_heads, tokens, head_dim] views
 * (head_stride and token_stride; batch_stride is not read). Nothing changes on an error: a
 * full slot, a bad view, or a value an 8-bit format's scale cannot take. */
LPATTN_C_API lpattn_status lpattn_kv_cache_append(lpattn_kv_cache* cache, int64_t sequence,
                                                  int64_t tokens, lpattn_const_tensor k,
                                                  lpattn_const_tensor v);
/* Drops slot `sequence`'s tokens from `length` on. */
LPATTN_C_API lpattn_status lpattn_kv_cache_truncate(lpattn_kv_cache* cache, int64_t sequence,
                                                    int64_t length);
/* Writes slot `sequence`'s length into *length. */
LPATTN_C_API lpattn_status lpattn_kv_cache_length(const lpattn_kv_cache* cache,
                                                  int64_t sequence, int64_t* length);
/* Decodes tokens [first, first + tokens) of a slot to fp32 into [kv_heads, tokens, head_dim]
 * views k and v (a view with null data is skipped). */
LPATTN_C_API lpattn_status lpattn_kv_cache_read(const lpattn_kv_cache* cache, int64_t sequence,
                                                int64_t first, int64_t tokens, lpattn_tensor k,
                                                lpattn_tensor v);
/* Paged caches: slot `sequence` uses pool blocks blocks[0 .. count) and holds `length` tokens
 * (-1 keeps its length). A table may not repeat a block; slots may share blocks. */
LPATTN_C_API lpattn_status lpattn_kv_cache_set_block_table(lpattn_kv_cache* cache,
                                                           int64_t sequence,
                                                           const int32_t* blocks, int64_t count,
                                                           int64_t length);

/* §1 forward of q against cached K and V: sequence b of the call reads slot sequences[b]
 * (sequences NULL: slot b) and attends to its Length() keys (shape->kv_len is not read), each
 * with bottom-right causal alignment; a ragged batch when lengths differ. shape's kv_heads and
 * head_dim must be the cache's; options->precision NULL or "" means the cache's formats (with
 * qk or pv it must name them). q and o: [batch, heads, q_len, head_dim]; lse as
 * lpattn_exact_forward. With q_offsets ([batch + 1], 0 first, increasing; NULL: none) the
 * queries are ragged: sequence b's are tokens q_offsets[b] .. q_offsets[b + 1] - 1 of q and o
 * as [total, heads, head_dim] views (batch_stride and shape->q_len are not read), its lse the
 * dense [heads, q_len_b] block at lse + heads * q_offsets[b]. */
LPATTN_C_API lpattn_status lpattn_exact_forward_cached(const lpattn_shape* shape,
                                                       const lpattn_options* options,
                                                       lpattn_const_tensor q,
                                                       const lpattn_kv_cache* cache,
                                                       const int64_t* sequences,
                                                       const int64_t* q_offsets, lpattn_tensor o,
                                                       float* lse);

/* §2 K-interval forward of q against cached K and V: shape, q, cache, sequences, q_offsets
 * and o as lpattn_exact_forward_cached, kint_options and the checks as lpattn_kint_forward.
 * saved's arrays are laid out as lse is there (argmax and argmin: key indices within each
 * sequence). */
LPATTN_C_API lpattn_status lpattn_kint_forward_cached(
    const lpattn_shape* shape, const lpattn_options* options, const char* kint_options,
    lpattn_const_tensor q, const lpattn_kv_cache* cache, const int64_t* sequences,
    const int64_t* q_offsets, lpattn_tensor o, lpattn_kint_saved saved);

/* §3 thresholded forward against a cache: view 1's keys and V from cache, view 2's keys (with
 * views = 2) from second_keys' K side, a cache with the same kv heads and head dimension whose
 * slots hold the same lengths (create it with keys_only; NULL with one view). q1 and q2 are
 * the views' queries as lpattn_exact_forward_cached takes q; survivors, when not null,
 * receives [views][rows] counts in lse's row order. The keys are L2-normalised per call (an
 * fp32 copy), Q rounded to each cache's K format per token: the in-call forward with the
 * caches' formats and gran=token. */
LPATTN_C_API lpattn_status lpattn_tda_forward_cached(
    const lpattn_shape* shape, const lpattn_options* options, const char* tda_options,
    lpattn_const_tensor q1, lpattn_const_tensor q2, const lpattn_kv_cache* cache,
    const lpattn_kv_cache* second_keys, const int64_t* sequences, const int64_t* q_offsets,
    const float* lambda_param, lpattn_tensor o, int32_t* survivors);

/* An engine's 16-bit activations: bf16 or fp16 codes ("bf16", "fp16"; NULL means bf16) in the
 * layout of lpattn_const_tensor. */
typedef struct lpattn_const_tensor16 {
  const uint16_t* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t token_stride;
  const char* format;
} lpattn_const_tensor16;
typedef struct lpattn_tensor16 {
  uint16_t* data;
  int64_t batch_stride;
  int64_t head_stride;
  int64_t token_stride;
  const char* format;
} lpattn_tensor16;

/* lpattn_exact_forward_cached with Q and O in bf16 or fp16: Q read exactly, O rounded to its
 * format once at the end; nothing is written on an error. */
LPATTN_C_API lpattn_status lpattn_exact_forward_cached16(
    const lpattn_shape* shape, const lpattn_options* options, lpattn_const_tensor16 q,
    const lpattn_kv_cache* cache, const int64_t* sequences, const int64_t* q_offsets,
    lpattn_tensor16 o, float* lse);

/* The message of the last call that failed on this thread, or "" if none has. Successful
 * calls do not clear it. The pointer stays valid until the next failing call on this
 * thread. */
LPATTN_C_API const char* lpattn_last_error(void);

/* The library version, "MAJOR.MINOR.PATCH". */
LPATTN_C_API const char* lpattn_version(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* LPATTN_KERNELS_LPATTN_H_ */
