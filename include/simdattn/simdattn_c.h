/* The C API of simdattn: C99, usable from C and through any FFI (Rust,
 * Python's ctypes/cffi, ...). It wraps the C++ API one to one:
 *
 *   primitives  simdattn_matmul, simdattn_batched_matmul, simdattn_softmax,
 *               simdattn_dropout, simdattn_scaled_dot_product_attention:
 *               plain functions over strided views of caller memory (see
 *               tensor.h and kernels.h for the semantics)
 *   KV cache    simdattn_kv_cache_*: an opaque handle on a layer's keys and
 *               values during generation
 *   modules     simdattn_module_*: an opaque handle per attention module of
 *               attention.h; create, load a state_dict, forward, forward one
 *               generation step through a KV cache, destroy
 *   runtime     version, SIMD target, a bound on the number of threads
 *
 * Errors: every function that can fail returns a simdattn_status. On failure
 * simdattn_last_error() gives a one-line message naming the function, the
 * argument and the values, e.g. "MultiHeadAttention: d_out (10) is not
 * divisible by num_heads (3)". No C++ exception ever leaves this API; a null
 * handle or output pointer is SIMDATTN_STATUS_INVALID_ARGUMENT, never a crash.
 * Outputs are left untouched when validation fails.
 *
 * Growth: every options and config struct starts with `size_t struct_size`,
 * set by its SIMDATTN_*_INIT macro (the rest zero, which means the defaults):
 *
 *   simdattn_attention_options options = SIMDATTN_ATTENTION_OPTIONS_INIT;
 *
 * New fields are only ever appended, so a caller compiled against an older
 * header keeps working (the fields it does not know take their defaults),
 * and one compiled against a newer header works with this library as long
 * as it leaves the fields this version does not know at zero (a set one is
 * an error: this version would ignore it). The structs have no tail
 * padding, so every byte struct_size covers is a field. A struct_size that does
 * not cover the fields of the struct's first version, or above 4096, is an
 * error naming the macro.
 *
 * Threads: every function may be called from any thread.
 * simdattn_module_forward may run concurrently on one module; create, load and
 * destroy need exclusive access to their module, and every simdattn_kv_cache_*
 * call and forward step exclusive access to its cache. Views never own memory:
 * the caller keeps every buffer alive for the duration of the call. */
#ifndef SIMDATTN_SIMDATTN_C_H_
#define SIMDATTN_SIMDATTN_C_H_

#include <stddef.h>
#include <stdint.h>

#include "simdattn/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The value of a growable struct with struct_size set and every other field
 * zero (its defaults), for declarations: `T x = SIMDATTN_T_INIT;`. */
#ifdef __cplusplus
#define SIMDATTN_STRUCT_INIT_(type)   \
  ([] {                               \
    type init_{};                     \
    init_.struct_size = sizeof(type); \
    return init_;                     \
  }())
#else
#define SIMDATTN_STRUCT_INIT_(type) \
  { .struct_size = sizeof(type) }
#endif

/* ------------------------------------------------------------------------ */
/* Status and runtime                                                        */

typedef enum simdattn_status {
  SIMDATTN_STATUS_OK = 0,
  /* A null pointer, a bad shape, stride, flag or probability, overlapping
   * buffers, a size that overflows, a misshapen state_dict tensor. */
  SIMDATTN_STATUS_INVALID_ARGUMENT = 1,
  /* Scratch memory (e.g. the batch x heads x tokens x tokens attention
   * weights) could not be allocated. */
  SIMDATTN_STATUS_OUT_OF_MEMORY = 2,
  /* Anything else: a bug in simdattn; the message says what was thrown. */
  SIMDATTN_STATUS_INTERNAL = 3
} simdattn_status;

/* The message of the last failed call on this thread; "" after a call that
 * succeeded (every call returning a simdattn_status sets or clears it). The
 * pointer stays valid until the next call on this thread; never null. */
SIMDATTN_API const char* simdattn_last_error(void);

/* "major.minor.patch"; a static string. */
SIMDATTN_API const char* simdattn_version(void);

/* Highway's name of the SIMD target the kernels dispatch to ("AVX2", "AVX3",
 * "NEON", "SVE2", ...). The pointer stays valid until the next call of this
 * function on this thread; "" if the name could not be determined. */
SIMDATTN_API const char* simdattn_active_target(void);

/* Restricts dispatch to the target called `name` (one the CPU supports), or
 * restores the default for NULL or "". For benchmarks and tests: not
 * thread-safe, call it while no kernel runs. */
SIMDATTN_API simdattn_status simdattn_use_target(const char* name);

/* Loads a plan file written by `simdattn tune` on this machine (knobs that
 * change speed, never results), or goes back to the policy table for NULL
 * or "" (simdattn::LoadPlans). SIMDATTN_STATUS_INVALID_ARGUMENT for an
 * unreadable or malformed file, or one made on another CPU or library version
 * (the message names both); the policy is unchanged then. Not thread-safe:
 * call it while no kernel runs. */
SIMDATTN_API simdattn_status simdattn_load_plans(const char* path);

/* Bounds the number of threads simdattn's kernels use, process-wide, from
 * now on: the library holds a tbb::global_control(max_allowed_parallelism,
 * max_threads). max_threads = 0 removes the library's bound again.
 *
 * As with any tbb::global_control, the effective bound is the smallest of all
 * those alive in the process, so this can lower but never raise a bound the
 * application set itself, and it also applies to the application's own TBB
 * work. A tbb::task_arena with fewer threads still limits the calls made
 * inside it. Safe to call from several threads; the last call wins. */
SIMDATTN_API simdattn_status simdattn_set_max_threads(size_t max_threads);

/* The number of threads a parallel call made from this thread may use now:
 * the least of every bound alive in the process (not only
 * simdattn_set_max_threads) and the calling tbb::task_arena's concurrency. */
SIMDATTN_API simdattn_status simdattn_get_max_threads(size_t* max_threads);

/* ------------------------------------------------------------------------ */
/* Views of caller memory (tensor.h)                                         */

/* The element types simdattn stores (element.h's ElementType): KV caches
 * hold any, state_dict tensors F32, BF16 or F16. Arithmetic is float32
 * whatever the type: each element is widened exactly as it is read. */
typedef enum simdattn_element_type {
  SIMDATTN_F32 = 0,
  SIMDATTN_BF16 = 1, /* bfloat16 bits */
  SIMDATTN_F16 = 2,  /* IEEE binary16 bits */
  SIMDATTN_INT8 = 3, /* int8, one float scale per row (token and head) */
  /* 0.4, KV caches only: */
  SIMDATTN_FP8_E4M3 = 4, /* OCP fp8 E4M3 bits, one float scale per side */
  SIMDATTN_FP8_E5M2 = 5, /* OCP fp8 E5M2 bits, one float scale per side */
  SIMDATTN_Q8_0 = 6,     /* ggml block_q8_0: 32 int8 and an fp16 scale */
  SIMDATTN_Q4_0 = 7,     /* ggml block_q4_0: 32 nibbles and an fp16 scale */
  /* 0.8, KV caches only: */
  SIMDATTN_Q4_1 = 8,  /* ggml block_q4_1: fp16 d and m, 32 nibbles */
  SIMDATTN_IQ4_NL = 9 /* ggml block_iq4_nl: fp16 d, 32 nibbles indexing a
                         table of 16 int8 values */
} simdattn_element_type;

/* Row-major: element (r, c) is data[r * stride + c]; stride >= cols. */
typedef struct simdattn_matrix {
  float* data;
  size_t rows, cols, stride;
} simdattn_matrix;
typedef struct simdattn_const_matrix {
  const float* data;
  size_t rows, cols, stride;
} simdattn_const_matrix;

/* (batch, tokens, features), features contiguous: element (b, t, f) is
 * data[b * batch_stride + t * token_stride + f]. */
typedef struct simdattn_tensor3 {
  float* data;
  size_t batch, tokens, features;
  size_t batch_stride, token_stride;
} simdattn_tensor3;
typedef struct simdattn_const_tensor3 {
  const float* data;
  size_t batch, tokens, features;
  size_t batch_stride, token_stride;
} simdattn_const_tensor3;

/* (dims[0], dims[1], dims[2], dims[3]), usually (batch, heads, rows, cols),
 * last dimension contiguous: element (i, j, k, l) is data[i * strides[0] +
 * j * strides[1] + k * strides[2] + l]. A stride of 0 broadcasts (inputs
 * only). */
typedef struct simdattn_tensor4 {
  float* data;
  size_t dims[4];
  size_t strides[3];
} simdattn_tensor4;
typedef struct simdattn_const_tensor4 {
  const float* data;
  size_t dims[4];
  size_t strides[3];
} simdattn_const_tensor4;
/* A boolean mask: nonzero = masked. */
typedef struct simdattn_const_u8_tensor4 {
  const uint8_t* data;
  size_t dims[4];
  size_t strides[3];
} simdattn_const_u8_tensor4;

/* ------------------------------------------------------------------------ */
/* Primitives (kernels.h)                                                    */

/* The arithmetic of products (kernels.h's ComputeType). */
enum {
  SIMDATTN_COMPUTE_FP32 = 0, /* float32, PyTorch's (the default) */
  /* Operands rounded to bf16 (nearest even), products summed in float32;
   * native bf16 instructions where the CPU has them. */
  SIMDATTN_COMPUTE_BF16 = 1,
  /* Attention over a q8_0, q4_0 or int8 cache only: decode's scores as
   * integer dot products with the query quantized to int8 (per block of 32
   * as llama.cpp does for q8_0 and q4_0, per row for int8; kernels.h's
   * AttentionOptions::compute states the bound). */
  SIMDATTN_COMPUTE_INT8 = 2
};

/* SIMDATTN_MATMUL_OPTIONS_INIT: C = A * op(B) in float32. */
typedef struct simdattn_matmul_options {
  size_t struct_size;
  /* 0: op(B) = B (K x N); 1: op(B) = B^T (B is N x K). Nothing else. */
  int32_t transpose_b;
  /* 0: alpha is 1 and `alpha` must be 0 or 1 (a value set without this
   * flag is an error, not ignored); 1: alpha as given. */
  int32_t use_alpha;
  float alpha;
  /* 0: C is write-only (its old contents, even NaN, are never read). */
  float beta;
  /* SIMDATTN_COMPUTE_*; simdattn_batched_matmul: SIMDATTN_COMPUTE_FP32. */
  int32_t compute;
  /* Optional N floats added to every row of C; NULL for none. */
  const float* bias;
} simdattn_matmul_options;
#define SIMDATTN_MATMUL_OPTIONS_INIT \
  SIMDATTN_STRUCT_INIT_(simdattn_matmul_options)

/* The kernel bf16 arithmetic uses here: "AMX", "AVX512_BF16" or
 * "float32 fallback" (static storage). */
SIMDATTN_API const char* simdattn_bf16_dot_kernel(void);

/* C = alpha * A * op(B) + beta * C + bias; A is M x K, op(B) K x N, C M x N,
 * C overlapping neither A, B nor bias. options NULL: the defaults. */
SIMDATTN_API simdattn_status
simdattn_matmul(simdattn_const_matrix a, simdattn_const_matrix b,
                simdattn_matrix c, const simdattn_matmul_options* options);

/* 0.6: op(B) packed once for many products (kernels.h's PackedMatrix):
 * weights, in the layout of the kernel that multiplies them on the active
 * target. */
typedef struct simdattn_packed_matrix simdattn_packed_matrix;

/* A row-major matrix of float32, bf16 or fp16 (a simdattn_element_type):
 * element (r, c) is element r * stride + c of data; stride >= cols. */
typedef struct simdattn_const_typed_matrix {
  const void* data;
  size_t rows, cols, stride;
  int32_t type;
  int32_t reserved; /* 0 */
} simdattn_const_typed_matrix;

/* Packs op(B) for simdattn_matmul_packed with these options: transpose_b and
 * compute apply (16-bit B widened exactly, then rounded to bf16 for
 * SIMDATTN_COMPUTE_BF16), the other fields do not. B is read only here.
 * *packed is set on success and left alone on failure. */
SIMDATTN_API simdattn_status simdattn_matmul_pack(
    simdattn_const_typed_matrix b, const simdattn_matmul_options* options,
    simdattn_packed_matrix** packed);

/* Releases a packed matrix; NULL does nothing. */
SIMDATTN_API void simdattn_packed_matrix_destroy(simdattn_packed_matrix* b);

/* The same, writable. */
typedef struct simdattn_typed_matrix {
  void* data;
  size_t rows, cols, stride;
  int32_t type;
  int32_t reserved; /* 0 */
} simdattn_typed_matrix;

/* simdattn_matmul over a packed op(B), A and C each in float32 or bf16
 * (SIMDATTN_F32, the zero value, or SIMDATTN_BF16: bf16 A widened exactly,
 * bf16 C rounded once from the float32 result): options->transpose_b and
 * ->compute must be those B was packed with, and the active target that of
 * packing (else an error: pack again); alpha, beta and bias are this
 * call's. The bits are simdattn_matmul's where it takes the same kernel
 * (kernels.h). */
SIMDATTN_API simdattn_status simdattn_matmul_packed(
    simdattn_const_typed_matrix a, const simdattn_packed_matrix* b,
    simdattn_typed_matrix c, const simdattn_matmul_options* options);

/* MatMul on every (i0, i1) matrix: C[i0, i1] = A[i0, i1] * op(B[i0', j1]),
 * j1 = i1 / (A.dims[1] / B.dims[1]) (grouped-query heads), i0' = 0 when
 * B.dims[0] == 1 (broadcast). */
SIMDATTN_API simdattn_status simdattn_batched_matmul(
    simdattn_const_tensor4 a, simdattn_const_tensor4 b, simdattn_tensor4 c,
    const simdattn_matmul_options* options);

/* What a softmax row may attend to, and what joins its scores (kernels.h's
 * AttentionMask); a column is masked if any field masks it.
 * SIMDATTN_MASK_INIT masks nothing: every field is off when zero or NULL.
 * Row i of batch item b
 * sits at position p = i + offset among the keys, offset = causal_offsets[b]
 * if given, else causal_offset. Its score for column j is
 *   s = scale * x                      (x = q . k in attention)
 *   s = softcap * tanh(s / softcap)    if softcap > 0
 *   s = s + additive[b, h, i, j] - alibi_slopes[h] * |p - j| */
typedef struct simdattn_mask {
  size_t struct_size;
  /* 0 or 1: row i keeps columns j <= p. */
  int32_t causal;
  size_t causal_offset;
  /* data NULL: absent. Same dims as the scores; stride 0 broadcasts. */
  simdattn_const_u8_tensor4 boolean_mask;
  /* Added to the scaled scores; -INFINITY masks. data NULL: absent. */
  simdattn_const_tensor4 additive_mask;
  /* NULL, or dims[0] lengths: item b keeps columns j < key_lengths[b]. */
  const size_t* key_lengths;
  /* NULL, or dims[0] offsets replacing causal_offset per batch item (a
   * decode batch of sequences at different positions, chunked prefill);
   * needs what reads positions: causal, window, alibi_slopes or
   * tree_offsets. */
  const size_t* causal_offsets;
  /* > 0: a sliding window, row i keeps only columns p - window < j <= p
   * (always causal; Mistral). */
  size_t window;
  /* Finite and > 0 to cap the scaled scores (Gemma 2); 0: off. */
  float softcap;
  /* NULL, or dims[1] finite slopes, one per head of the scores: ALiBi's
   * bias (BLOOM, MPT). */
  const float* alibi_slopes;
  /* NULL, or dims[1] finite sink logits, one per head (gpt-oss): exp(sink)
   * joins the row's denominator and nothing its output, so a row that sees
   * no column gets zeros. */
  const float* sinks;
  /* 0.5, attention over a cache only: NULL, or per sequence a draft tree
   * (EAGLE, Medusa) over its n new tokens, SIZE_MAX for none: query i sees
   * new token j iff bit tree_offsets[b] + i * n + j of tree_bits is set
   * (bit k is bit k % 64 of tree_bits[k / 64]); earlier tokens stay
   * visible. */
  const uint64_t* tree_bits;
  const size_t* tree_offsets;
} simdattn_mask;
#define SIMDATTN_MASK_INIT SIMDATTN_STRUCT_INIT_(simdattn_mask)

/* ALiBi's slopes for num_heads heads (kernels.h's AlibiSlopes), into
 * slopes[0 .. num_heads): the paper's geometric sequence, interleaved for a
 * head count that is not a power of two. slopes may be NULL for 0 heads. */
SIMDATTN_API simdattn_status simdattn_alibi_slopes(size_t num_heads,
                                                   float* slopes);

/* Row-wise y = softmax(scale * x + mask), in place (y.data == x.data with the
 * same strides) or into a y that does not overlap x. A fully masked row gives
 * zeros. mask NULL: no mask. */
SIMDATTN_API simdattn_status simdattn_softmax(simdattn_const_tensor4 x,
                                              simdattn_tensor4 y, float scale,
                                              const simdattn_mask* mask);

/* Rotary position embedding (kernels.h's RopeOptions). */
typedef struct simdattn_rope_options {
  size_t struct_size;
  /* 0: pairs dims i and i + rotary_dim / 2 (GPT-NeoX, Llama); 1: pairs 2i
   * and 2i + 1 (GPT-J). */
  int32_t interleaved;
  /* Pair i turns by position * theta^(-2i / rotary_dim); 0: 10000. */
  float theta;
  size_t rotary_dim; /* even; 0: all from rotary_offset on */
  /* NULL, or dims[0] entries: token t of item b is at positions[b] + t
   * (simdattn_apply_rope only; a cache knows its positions). */
  const size_t* positions;
  /* 0.3: the first rotated dim (MLA: the last 64 of 576). */
  size_t rotary_offset;
} simdattn_rope_options;
#define SIMDATTN_ROPE_OPTIONS_INIT SIMDATTN_STRUCT_INIT_(simdattn_rope_options)

/* Rotates queries or keys x (batch, heads, tokens, head_dim) in place;
 * options NULL: the defaults. */
SIMDATTN_API simdattn_status
simdattn_apply_rope(simdattn_tensor4 x, const simdattn_rope_options* options);

/* In place: keeps each element with probability 1 - p (p rounded to a
 * multiple of 2^-16), scaled by 1 / (1 - p). The mask is a pure function of
 * (seed, offset, element index); advance offset every training step. p
 * outside [0, 1] or NaN is an error. */
SIMDATTN_API simdattn_status simdattn_dropout(simdattn_tensor4 x, float p,
                                              uint64_t seed, uint64_t offset);

/* SIMDATTN_ATTENTION_OPTIONS_INIT: PyTorch's scale, no mask, no dropout, no
 * log-sum-exp, float32. */
typedef struct simdattn_attention_options {
  size_t struct_size;
  /* 0: scale = 1 / sqrt(head_dim) (PyTorch's default); 1: use `scale`. */
  int32_t has_scale;
  float scale;
  /* NULL, or the mask over the scores (batch, q_heads, q_tokens, k_tokens);
   * with a KV cache of n keys and m new queries, causal_offset = n - m. */
  const simdattn_mask* mask;
  /* Dropout on the attention weights with the bits simdattn_dropout would
   * draw for the (batch, q_heads, q_tokens, k_tokens) weights. */
  float dropout;
  /* SIMDATTN_COMPUTE_BF16 rounds Q, K, V and the weights P to bf16
   * (kernels.h's AttentionOptions::compute); over a KV cache, a bf16 or
   * fp8 one.
   * SIMDATTN_COMPUTE_INT8: over a q8_0, q4_0 or int8 cache only. */
  int32_t compute;
  uint64_t dropout_seed;
  uint64_t dropout_offset;
  /* NULL, or an output of (batch, q_heads, q_tokens) contiguous floats: each
   * row's log-sum-exp, log(sum_j exp(s_j) + exp(sink)) over its visible
   * scores s_j as simdattn_mask defines them (dropout aside); -INFINITY for a
   * row that sees nothing and has no sink. Two calls over disjoint key sets
   * (sinks in one of them) merge exactly: L = logaddexp(L1, L2),
   * out = exp(L1 - L) out1 + exp(L2 - L) out2. */
  float* log_sum_exp;
} simdattn_attention_options;
#define SIMDATTN_ATTENTION_OPTIONS_INIT \
  SIMDATTN_STRUCT_INIT_(simdattn_attention_options)

/* out = softmax(scale * Q K^T + mask) V, fused (the weights are never
 * stored):
 *   q   (batch, q_heads,  q_tokens, head_dim)
 *   k   (batch, kv_heads, k_tokens, head_dim)
 *   v   (batch, kv_heads, k_tokens, value_dim)
 *   out (batch, q_heads,  q_tokens, value_dim), overlapping no input;
 * kv_heads divides q_heads (grouped-query heads). options NULL: defaults. */
SIMDATTN_API simdattn_status simdattn_scaled_dot_product_attention(
    simdattn_const_tensor4 q, simdattn_const_tensor4 k,
    simdattn_const_tensor4 v, simdattn_tensor4 out,
    const simdattn_attention_options* options);

/* ------------------------------------------------------------------------ */
/* KV cache (attention.h)                                                    */

/* The keys and values seen so far by one attention layer, (batch, kv_heads,
 * capacity, head_dim) each. */
typedef struct simdattn_kv_cache simdattn_kv_cache;

/* How a cache stores tokens (attention.h's KVCacheConfig; kernels.h's
 * KVType states each element type's error). */
/* SIMDATTN_KV_CACHE_CONFIG_INIT: float, contiguous, no RoPE. */
typedef struct simdattn_kv_cache_config {
  size_t struct_size;
  int32_t type;      /* a simdattn_element_type */
  size_t block_size; /* 0: contiguous; else paged, a power of two 16..256 */
  size_t num_blocks; /* paged: the pool; 0: enough for every sequence */
  /* NULL, or keys rotated on append, each at its position in its sequence
   * (rope->positions must be NULL). */
  const simdattn_rope_options* rope;
  /* 0.3: elements per value row; 0: head_dim. */
  size_t value_dim;
  /* 0.3: 1 for a latent cache (MLA): values are the first value_dim
   * (< head_dim) elements of each key row, one row per token; appends then
   * pass an empty (zeroed) values tensor. */
  int32_t latent;
  int32_t reserved; /* 0 */
  /* 0.4: fp8 caches: keys stored as key / key_scale, values as value /
   * value_scale (finite, > 0); 0 means 1. */
  float key_scale;
  float value_scale;
  /* 0.5, paged caches: a rolling window (attention.h's
   * KVCacheConfig::window): blocks no later query's mask.window (<= window)
   * reaches return to the pool as sequences grow. 0: keep every token. */
  size_t window;
} simdattn_kv_cache_config;
#define SIMDATTN_KV_CACHE_CONFIG_INIT \
  SIMDATTN_STRUCT_INIT_(simdattn_kv_cache_config)

/* A cache owning zeroed memory for `capacity` tokens per sequence, stored as
 * config says (NULL: the defaults); *cache is set on success and left alone
 * on failure. */
SIMDATTN_API simdattn_status simdattn_kv_cache_create(
    size_t batch, size_t kv_heads, size_t capacity, size_t head_dim,
    const simdattn_kv_cache_config* config, simdattn_kv_cache** cache);

/* A float, contiguous cache over the caller's (batch, kv_heads, capacity,
 * head_dim) buffers, which must have equal dims, not overlap, and outlive
 * the cache. */
SIMDATTN_API simdattn_status simdattn_kv_cache_create_in(
    simdattn_tensor4 keys, simdattn_tensor4 values, simdattn_kv_cache** cache);

/* Releases a cache (never the caller's buffers); NULL does nothing. */
SIMDATTN_API void simdattn_kv_cache_destroy(simdattn_kv_cache* cache);

/* Appends n more tokens, (count, kv_heads, n, head_dim) each: keys[s] and
 * values[s] to the distinct sequences[s] (s < count), or with sequences
 * NULL to every sequence (count = batch). An error, changing nothing, if
 * they do not fit. */
SIMDATTN_API simdattn_status simdattn_kv_cache_append(
    simdattn_kv_cache* cache, simdattn_const_tensor4 keys,
    simdattn_const_tensor4 values, const size_t* sequences);

/* Forgets every token (a new batch of sequences); the memory stays. */
SIMDATTN_API simdattn_status simdattn_kv_cache_clear(simdattn_kv_cache* cache);

/* The longest sequence's length and the room; either pointer may be NULL. */
SIMDATTN_API simdattn_status simdattn_kv_cache_size(
    const simdattn_kv_cache* cache, size_t* size, size_t* capacity);

/* One sequence's length. */
SIMDATTN_API simdattn_status simdattn_kv_cache_length(
    const simdattn_kv_cache* cache, size_t sequence, size_t* length);

/* Keeps a sequence's first `length` tokens (length <= its length). */
SIMDATTN_API simdattn_status simdattn_kv_cache_truncate(
    simdattn_kv_cache* cache, size_t sequence, size_t length);

/* Sequence dst becomes a copy of src (paged: blocks shared until written). */
SIMDATTN_API simdattn_status simdattn_kv_cache_copy(simdattn_kv_cache* cache,
                                                    size_t src, size_t dst);

/* Sequence b becomes what sequence order[b] was; order has batch entries. */
SIMDATTN_API simdattn_status simdattn_kv_cache_reorder(simdattn_kv_cache* cache,
                                                       const size_t* order);

/* 0.5: moving a sequence (attention.h's KVCache::Export and Import): its
 * tokens [first, first + count) in the cache's own type, in kernels.h's
 * transfer format (0.7: a self-describing header with an XXH3-64 checksum,
 * then the rows), into buffer, which holds buffer_bytes >= *bytes of
 * simdattn_kv_cache_export_bytes(count); import appends the count tokens of
 * such a transfer to a sequence of a cache (or, simdattn_import_kv_slots,
 * to pages) of the same type, heads, dims and fp8 scales, any layout, or
 * fails naming both sides and changing nothing. */
SIMDATTN_API simdattn_status simdattn_kv_cache_export_bytes(
    const simdattn_kv_cache* cache, size_t count, size_t* bytes);
SIMDATTN_API simdattn_status simdattn_kv_cache_export(
    const simdattn_kv_cache* cache, size_t sequence, size_t first, size_t count,
    void* buffer, size_t buffer_bytes);
SIMDATTN_API simdattn_status simdattn_kv_cache_import(simdattn_kv_cache* cache,
                                                      size_t sequence,
                                                      const void* buffer,
                                                      size_t buffer_bytes,
                                                      size_t count);

/* A sequence's keys and values as attention sees them, widened or
 * dequantized to float, whatever the type and layout: into (kv_heads,
 * length, head_dim) and (kv_heads, length, value_dim) views (batch =
 * kv_heads, tokens = the sequence's length), which must not overlap; on
 * error they are left untouched. */
SIMDATTN_API simdattn_status
simdattn_kv_cache_read(const simdattn_kv_cache* cache, size_t sequence,
                       simdattn_tensor3 keys, simdattn_tensor3 values);

/* Views (batch, kv_heads, size, head_dim or value_dim) of what was
 * appended, valid until the cache changes; either pointer may be NULL.
 * Float contiguous caches only (simdattn_kv_cache_read reads any). */
SIMDATTN_API simdattn_status simdattn_kv_cache_view(
    const simdattn_kv_cache* cache, simdattn_const_tensor4* keys,
    simdattn_const_tensor4* values);

/* Attention of q (batch, q_heads, q_tokens, head_dim), each sequence's last
 * q_tokens tokens, over the cache where it lies (kernels.h's
 * ScaledDotProductAttention over a KVCacheView): the mask's causal offsets
 * and key lengths must be unset (the cache gives them). */
SIMDATTN_API simdattn_status simdattn_kv_cache_attention(
    simdattn_const_tensor4 q, const simdattn_kv_cache* cache,
    simdattn_tensor4 out, const simdattn_attention_options* options);

/* ------------------------------------------------------------------------ */
/* A serving step over caller-owned pages (0.5; kernels.h's KVPages,        */
/* WriteKVSlots and VarlenAttention)                                         */

/* A pool of KV blocks the caller owns: num_blocks blocks of block_size
 * tokens (a power of two); slot s = block * block_size + offset holds
 * element c of head h at keys[block * block_stride + h * head_stride +
 * offset * row_stride + c] (strides in elements of `type`), values, int8
 * scales (one float per slot and head) and fp8 scales alike. values == keys
 * (value_dim < head_dim): a latent pool (MLA), whose values are read and
 * written with the keys' scales (key_scale, key_scales; value_scale and
 * value_scales are ignored). SIMDATTN_KV_PAGES_INIT, then the fields. */
typedef struct simdattn_kv_pages {
  size_t struct_size;
  int32_t type;     /* a simdattn_element_type */
  int32_t reserved; /* 0 */
  size_t kv_heads, head_dim;
  size_t value_dim; /* 0: head_dim */
  void* keys;
  void* values;
  size_t block_stride, head_stride, row_stride;
  float* key_scales; /* int8 */
  float* value_scales;
  size_t scale_block_stride, scale_head_stride;
  size_t block_size;
  size_t num_blocks;
  float key_scale, value_scale; /* fp8: finite, > 0; 0 means 1 */
} simdattn_kv_pages;
#define SIMDATTN_KV_PAGES_INIT SIMDATTN_STRUCT_INIT_(simdattn_kv_pages)

/* The sequences of one step (vLLM's names): sequence b's queries are rows
 * [query_starts[b], query_starts[b + 1]) of the packed queries, its last
 * tokens; it holds seq_lens[b] tokens after this step's writes, in the blocks
 * block_table[b * blocks_per_sequence + t / block_size].
 * SIMDATTN_VARLEN_STEP_INIT, then the fields. */
typedef struct simdattn_varlen_step {
  size_t struct_size;
  size_t num_seqs;
  const size_t* query_starts; /* num_seqs + 1, from 0, non-decreasing */
  const size_t* seq_lens;     /* num_seqs */
  const int32_t* block_table;
  size_t blocks_per_sequence;
  /* simdattn_module_forward_varlen only: one slot per packed token, where
   * its key and value are stored (negative: not stored). */
  const int64_t* slot_mapping;
  /* 0.7: each packed token's position (rotary; a draft tree's tokens at
   * the prefix's length plus their depth), NULL: each sequence's new tokens
   * at its last positions; draft trees per sequence over its new tokens, as
   * simdattn_mask's tree_bits and tree_offsets (num_seqs entries), NULL:
   * none. */
  const size_t* positions;
  const uint64_t* tree_bits;
  const size_t* tree_offsets;
} simdattn_varlen_step;
#define SIMDATTN_VARLEN_STEP_INIT SIMDATTN_STRUCT_INIT_(simdattn_varlen_step)

/* Stores keys (1, kv_heads, num_tokens, head_dim) and values (1, kv_heads,
 * num_tokens, value_dim; empty for a latent pool), token t at slot
 * slot_mapping[t] (negative: skipped; the others distinct), converted to the
 * pages' type with simdattn_kv_cache_append's bits. On error nothing is
 * written. */
SIMDATTN_API simdattn_status simdattn_write_kv_slots(
    simdattn_const_tensor4 keys, simdattn_const_tensor4 values,
    const int64_t* slot_mapping, const simdattn_kv_pages* pages);
/* 0.7: the same write with each key first rotated, token t at position
 * positions[t] (vLLM's rotary embedding and reshape_and_cache in one pass):
 * the bits of simdattn_apply_rope over the (num_tokens, kv_heads, 1,
 * head_dim) view with those positions, then simdattn_write_kv_slots.
 * rope->positions must be NULL. */
SIMDATTN_API simdattn_status simdattn_write_kv_slots_rope(
    simdattn_const_tensor4 keys, simdattn_const_tensor4 values,
    const int64_t* slot_mapping, const simdattn_kv_pages* pages,
    const simdattn_rope_options* rope, const size_t* positions);

/* 0.7: pool sizes and operations (kernels.h's "Pool sizes and operations"),
 * every element type, any strides; on error nothing is written. */

/* An element type's bytes per block and values per block (1 and the
 * element's size for types that are not blocks: q8_0 is 34 bytes per 32
 * values, q4_0 18); either pointer may be NULL. */
SIMDATTN_API simdattn_status simdattn_element_size(int32_t type,
                                                   size_t* block_bytes,
                                                   size_t* block_values);
/* *pages becomes a dense pool's layout (kernels.h's DenseKVPages: per side
 * (num_blocks, kv_heads, block_size, max(head_dim, value_dim)), int8 scales
 * (num_blocks, kv_heads, block_size)), every field set but the memory, and
 * the memory it needs: key_bytes and value_bytes from keys and from values
 * (a latent pool needs the keys' only), scales floats from each of
 * key_scales and value_scales (int8; else 0). Any out pointer but pages
 * may be NULL. */
SIMDATTN_API simdattn_status simdattn_kv_pages_dense(
    int32_t type, size_t kv_heads, size_t head_dim, size_t value_dim,
    size_t block_size, size_t num_blocks, simdattn_kv_pages* pages,
    size_t* key_bytes, size_t* value_bytes, size_t* scales);
/* The first position attention reads of a sequence of `length` tokens whose
 * last q_tokens are queried with a window (kernels.h's FirstKeyRead): its
 * blocks wholly before may be released (block_table entries -1). dropout: 0
 * or 1. */
SIMDATTN_API simdattn_status simdattn_first_key_read(size_t length,
                                                     size_t q_tokens,
                                                     size_t window,
                                                     int32_t dropout,
                                                     size_t* first);
/* The keys (1, kv_heads, n, head_dim) and values (1, kv_heads, n,
 * value_dim; empty for a latent pool's) at slot_mapping[0..n) as attention
 * reads them (widened, times their scales); negative slots skipped. */
SIMDATTN_API simdattn_status simdattn_read_kv_slots(
    const simdattn_kv_pages* pages, const int64_t* slot_mapping,
    simdattn_tensor4 keys, simdattn_tensor4 values);
/* Copies slots from[i] to to[i] (blocks, for the second: vLLM's
 * copy_blocks), i < count, byte for byte with their scales, as if all were
 * read first; the targets distinct. */
SIMDATTN_API simdattn_status
simdattn_copy_kv_slots(const simdattn_kv_pages* pages, const int64_t* from,
                       const int64_t* to, size_t count);
SIMDATTN_API simdattn_status
simdattn_copy_kv_blocks(const simdattn_kv_pages* pages, const int32_t* from,
                        const int32_t* to, size_t count);
/* The transfer format of simdattn_kv_cache_export between pages and host
 * memory (swapping blocks: their slots): *bytes for count tokens; export of
 * slots[0..count) into buffer (buffer_bytes >= that); import of a transfer
 * of count tokens into slots[0..count) (distinct). */
SIMDATTN_API simdattn_status simdattn_kv_transfer_bytes(
    const simdattn_kv_pages* pages, size_t count, size_t* bytes);
SIMDATTN_API simdattn_status
simdattn_export_kv_slots(const simdattn_kv_pages* pages, const int64_t* slots,
                         size_t count, void* buffer, size_t buffer_bytes);
SIMDATTN_API simdattn_status
simdattn_import_kv_slots(const simdattn_kv_pages* pages, const int64_t* slots,
                         size_t count, const void* buffer, size_t buffer_bytes);

/* One call for a step's mix of prefill chunks, decodes and verifications:
 * q (1, q_heads, num_tokens, head_dim) and out (1, q_heads, num_tokens,
 * value_dim), packed token-major; options as simdattn_kv_cache_attention
 * takes them, log_sum_exp (q_heads, num_tokens); no boolean or additive
 * mask, causal offsets, key lengths or dropout. */
SIMDATTN_API simdattn_status simdattn_varlen_attention(
    simdattn_const_tensor4 q, const simdattn_varlen_step* step,
    const simdattn_kv_pages* pages, simdattn_tensor4 out,
    const simdattn_attention_options* options);

/* 0.9: a step planned once for every layer (kernels.h's VarlenPlan):
 * create checks the step's metadata against pools of `shape`'s shape (type,
 * kv_heads, head_dim, value_dim, block_size, num_blocks; its memory is not
 * read); each layer's attention and write then check only their own
 * tensors, pages and options, with the bits of simdattn_varlen_attention
 * and simdattn_write_kv_slots(_rope). max_window: the largest mask window
 * of the layers' calls, 0 where a layer has none. The step's arrays are
 * read at every call: they must outlive the plan, unchanged. A plan's calls
 * are safe from many threads at once. */
typedef struct simdattn_varlen_plan simdattn_varlen_plan;
SIMDATTN_API simdattn_status simdattn_varlen_plan_create(
    const simdattn_varlen_step* step, const simdattn_kv_pages* shape,
    size_t max_window, simdattn_varlen_plan** plan);
SIMDATTN_API void simdattn_varlen_plan_destroy(simdattn_varlen_plan* plan);
SIMDATTN_API simdattn_status simdattn_varlen_plan_attention(
    const simdattn_varlen_plan* plan, simdattn_const_tensor4 q,
    const simdattn_kv_pages* pages, simdattn_tensor4 out,
    const simdattn_attention_options* options);
/* rope NULL: keys stored as given; else rotated at the step's positions. */
SIMDATTN_API simdattn_status simdattn_varlen_plan_write_kv_slots(
    const simdattn_varlen_plan* plan, simdattn_const_tensor4 keys,
    simdattn_const_tensor4 values, const simdattn_kv_pages* pages,
    const simdattn_rope_options* rope);

/* ------------------------------------------------------------------------ */
/* Attention modules (attention.h)                                           */

typedef enum simdattn_module_kind {
  SIMDATTN_SIMPLIFIED_SELF_ATTENTION = 0, /* d_in */
  SIMDATTN_SELF_ATTENTION_V1 = 1,         /* d_in, d_out */
  SIMDATTN_SELF_ATTENTION_V2 = 2,         /* d_in, d_out, qkv_bias */
  /* d_in, d_out, context_length, dropout, qkv_bias */
  SIMDATTN_CAUSAL_ATTENTION = 3,
  /* The above plus num_heads heads of d_out each: outputs num_heads * d_out
   * features. */
  SIMDATTN_MULTI_HEAD_ATTENTION_WRAPPER = 4,
  /* d_out split into num_heads heads, num_kv_heads (0: num_heads) key/value
   * heads, out_proj. */
  SIMDATTN_MULTI_HEAD_ATTENTION = 5
} simdattn_module_kind;

/* The seeds' constructor arguments; a module reads those its kind lists.
 * SIMDATTN_MODULE_CONFIG_INIT, then kind and the sizes. */
typedef struct simdattn_module_config {
  size_t struct_size;
  int32_t kind; /* A simdattn_module_kind. */
  size_t d_in;
  size_t d_out;
  size_t context_length; /* 0: unbounded, no causal "mask" buffer */
  float dropout;
  size_t num_heads;
  size_t num_kv_heads;
  int32_t qkv_bias; /* 0 or 1. */
  /* Initial weights are drawn from PyTorch's distributions with this seed
   * (the values differ from PyTorch's); load a state_dict to replace them. */
  uint64_t seed;
  /* SIMDATTN_MULTI_HEAD_ATTENTION only (attention.h's AttentionVariants);
   * zero: off. A sliding window of `window` tokens; softcap > 0 caps the
   * scores; alibi 1: ALiBi with the paper's slopes; sinks 1: a learned sink
   * logit per head, the state_dict's "sinks" (num_heads), initially 0. */
  size_t window;
  float softcap;
  int32_t alibi;
  int32_t sinks;
  /* SIMDATTN_MULTI_HEAD_ATTENTION only: NULL, or rotary embeddings of the
   * queries and keys (Llama), each token at its position in its sequence
   * (rope->positions NULL); a cache may rotate keys itself with the same
   * options (simdattn_kv_cache_config's rope) or not. */
  const simdattn_rope_options* rope;
  /* SIMDATTN_MULTI_HEAD_ATTENTION only: the state_dict's names (attention.h's
   * WeightNames). SIMDATTN_WEIGHTS_LLAMA: Hugging Face's q_proj, k_proj,
   * v_proj (biases with qkv_bias) and o_proj, which maps back to d_in (y has
   * d_in features), with a bias if out_bias is 1. */
  int32_t weight_names;
  int32_t out_bias;
} simdattn_module_config;
#define SIMDATTN_MODULE_CONFIG_INIT \
  SIMDATTN_STRUCT_INIT_(simdattn_module_config)

typedef enum simdattn_weight_names {
  SIMDATTN_WEIGHTS_SEED = 0, /* W_query, ..., out_proj, mask */
  SIMDATTN_WEIGHTS_LLAMA = 1 /* q_proj, k_proj, v_proj, o_proj */
} simdattn_weight_names;

typedef struct simdattn_module simdattn_module;

/* Creates a module; *module is set on success and left alone on failure.
 * Release it with simdattn_module_destroy. */
SIMDATTN_API simdattn_status simdattn_module_create(
    const simdattn_module_config* config, simdattn_module** module);

/* Releases a module; NULL does nothing. */
SIMDATTN_API void simdattn_module_destroy(simdattn_module* module);

/* The shape of the module: x has d_in features, y has d_out features (d_in
 * with SIMDATTN_WEIGHTS_LLAMA), the
 * attention weights are (batch, num_heads, tokens, tokens). Any output
 * pointer may be NULL. */
SIMDATTN_API simdattn_status
simdattn_module_shape(const simdattn_module* module, size_t* d_in,
                      size_t* d_out, size_t* num_heads);

/* One tensor of a PyTorch state_dict in caller memory: row-major,
 * contiguous, `rank` dimensions (the count of elements is their product),
 * elements of `dtype` (float, or bf16/f16 bits). A plain descriptor, not an
 * options struct: it does not grow. */
typedef struct simdattn_named_tensor {
  const char* name; /* PyTorch's name: "W_query.weight", "heads.0.mask". */
  const void* data;
  const size_t* shape;
  size_t rank;
  int32_t dtype; /* SIMDATTN_F32 (0), SIMDATTN_BF16 or SIMDATTN_F16 */
} simdattn_named_tensor;

/* SIMDATTN_LOAD_OPTIONS_INIT: weights widened to float. */
typedef struct simdattn_load_options {
  size_t struct_size;
  /* 1 keeps bf16 or f16 projection matrices in their type (half the bytes,
   * the results of the widened weights); all of them must share one type. */
  int32_t keep_dtype;
  int32_t reserved; /* 0 (so the struct has no tail padding) */
} simdattn_load_options;
#define SIMDATTN_LOAD_OPTIONS_INIT SIMDATTN_STRUCT_INIT_(simdattn_load_options)

/* The state_dict the module expects, one tensor at a time in name order
 * (index < count): its name and shape, owned by the module, and is_buffer 1
 * for a buffer (the causal "mask", derived from the config: PyTorch saves it,
 * simdattn_module_load_weights accepts its absence), 0 for a weight. Any
 * output pointer may be NULL; index past the end is an error. */
SIMDATTN_API simdattn_status
simdattn_module_weight_count(const simdattn_module* module, size_t* count);
SIMDATTN_API simdattn_status simdattn_module_weight_info(
    const simdattn_module* module, size_t index, const char** name,
    const size_t** shape, size_t* rank, int32_t* is_buffer);

/* Copies the weights (PyTorch's names and shapes), strictly: a missing,
 * unexpected, duplicated or misshapen tensor is an error naming it, and a
 * failed load leaves the weights as they were. The causal "mask" buffers may
 * be left out. options NULL: the defaults. */
SIMDATTN_API simdattn_status simdattn_module_load_weights(
    simdattn_module* module, const simdattn_named_tensor* tensors, size_t count,
    const simdattn_load_options* options);

/* SIMDATTN_FORWARD_OPTIONS_INIT: eval, float32, no attention weights. */
typedef struct simdattn_forward_options {
  size_t struct_size;
  /* 0: eval. 1: training, dropout on the attention weights with the key
   * (dropout_seed, dropout_offset); advance the offset every step. */
  int32_t training;
  /* SIMDATTN_COMPUTE_BF16: projections and attention in bf16 arithmetic; no
   * attention weights then, and forward steps need a bf16 cache.
   * SIMDATTN_COMPUTE_INT8: forward steps over a q8_0, q4_0 or int8 cache,
   * float32 projections and int8 scores. */
  int32_t compute;
  uint64_t dropout_seed;
  uint64_t dropout_offset;
  /* Optional output (batch, num_heads, tokens, tokens): the attention
   * weights after softmax (and dropout). data NULL: not wanted. */
  simdattn_tensor4 attention_weights;
} simdattn_forward_options;
#define SIMDATTN_FORWARD_OPTIONS_INIT \
  SIMDATTN_STRUCT_INIT_(simdattn_forward_options)

/* x (batch, tokens, d_in) -> y (batch, tokens, d_out), y not overlapping x.
 * tokens may not exceed context_length. options NULL: eval, no weights.
 * Allocates only the first time it sees a shape. */
SIMDATTN_API simdattn_status simdattn_module_forward(
    const simdattn_module* module, simdattn_const_tensor3 x, simdattn_tensor3 y,
    const simdattn_forward_options* options);

/* Generation with a causal module that has projections (causal attention,
 * the multi-head wrapper, multi-head attention), eval mode: x
 * holds the next n tokens (batch, n, d_in) of sequences whose earlier
 * tokens are in `cache` (batch, num_kv_heads, capacity, head_dim). Appends
 * their keys and values and writes their outputs y (batch, n, d_out): the
 * rows a forward over the whole sequence gives. options NULL or eval with
 * no attention weights. */
SIMDATTN_API simdattn_status simdattn_module_forward_step(
    const simdattn_module* module, simdattn_const_tensor3 x,
    simdattn_kv_cache* cache, simdattn_tensor3 y,
    const simdattn_forward_options* options);

/* A continuous-batching step (AttentionModule::ForwardStep with a
 * VarlenStep): x (1, num_tokens, d_in) packs the new tokens of step->num_seqs
 * sequences, any number each; their keys and values are stored in `pages` at
 * step->slot_mapping (rotated at their positions with the module's rope),
 * then each sequence's new tokens attend over its step->seq_lens tokens, and
 * y (1, num_tokens, d_out) gets their outputs. Causal modules with
 * projections, eval mode. On error nothing is written. */
SIMDATTN_API simdattn_status simdattn_module_forward_varlen(
    const simdattn_module* module, simdattn_const_tensor3 x,
    const simdattn_varlen_step* step, const simdattn_kv_pages* pages,
    simdattn_tensor3 y, const simdattn_forward_options* options);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SIMDATTN_SIMDATTN_C_H_ */
