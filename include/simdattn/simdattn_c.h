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

/* A zeroed struct means the defaults: C = A * op(B). */
typedef struct simdattn_matmul_options {
  /* 0: op(B) = B (K x N); 1: op(B) = B^T (B is N x K). Nothing else. */
  int32_t transpose_b;
  /* 0: alpha is 1 and `alpha` must be 0 or 1 (a value set without this
   * flag is an error, not ignored); 1: alpha as given. */
  int32_t use_alpha;
  float alpha;
  /* 0: C is write-only (its old contents, even NaN, are never read). */
  float beta;
  /* Optional N floats added to every row of C; NULL for none. */
  const float* bias;
} simdattn_matmul_options;

/* The arithmetic of the *_compute functions (kernels.h's ComputeType). */
enum {
  SIMDATTN_COMPUTE_FP32 = 0, /* float32, PyTorch's (the plain functions') */
  /* Operands rounded to bf16 (nearest even), products summed in float32;
   * native bf16 instructions where the CPU has them. */
  SIMDATTN_COMPUTE_BF16 = 1
};

/* The kernel bf16 arithmetic uses here: "AMX", "AVX512_BF16" or
 * "float32 fallback" (static storage). */
SIMDATTN_API const char* simdattn_bf16_dot_kernel(void);

/* The defaults, as a zeroed struct: transpose_b = 0, use_alpha = 0 (alpha 1),
 * beta = 0, bias = NULL. */
SIMDATTN_API simdattn_matmul_options simdattn_matmul_default_options(void);

/* C = alpha * A * op(B) + beta * C + bias; A is M x K, op(B) K x N, C M x N,
 * C overlapping neither A, B nor bias. options NULL: the defaults. */
SIMDATTN_API simdattn_status
simdattn_matmul(simdattn_const_matrix a, simdattn_const_matrix b,
                simdattn_matrix c, const simdattn_matmul_options* options);
/* The same in the arithmetic `compute` (SIMDATTN_COMPUTE_*). */
SIMDATTN_API simdattn_status simdattn_matmul_compute(
    simdattn_const_matrix a, simdattn_const_matrix b, simdattn_matrix c,
    const simdattn_matmul_options* options, int32_t compute);

/* MatMul on every (i0, i1) matrix: C[i0, i1] = A[i0, i1] * op(B[i0', j1]),
 * j1 = i1 / (A.dims[1] / B.dims[1]) (grouped-query heads), i0' = 0 when
 * B.dims[0] == 1 (broadcast). */
SIMDATTN_API simdattn_status simdattn_batched_matmul(
    simdattn_const_tensor4 a, simdattn_const_tensor4 b, simdattn_tensor4 c,
    const simdattn_matmul_options* options);

/* What a softmax row may attend to, and what joins its scores (kernels.h's
 * AttentionMask); a column is masked if any field masks it. A zeroed struct
 * masks nothing: every field is off when zero or NULL. Row i of batch item b
 * sits at position p = i + offset among the keys, offset = causal_offsets[b]
 * if given, else causal_offset. Its score for column j is
 *   s = scale * x                      (x = q . k in attention)
 *   s = softcap * tanh(s / softcap)    if softcap > 0
 *   s = s + additive[b, h, i, j] - alibi_slopes[h] * |p - j| */
typedef struct simdattn_mask {
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
   * needs causal or window. */
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
} simdattn_mask;

/* Row-wise y = softmax(scale * x + mask), in place (y.data == x.data with the
 * same strides) or into a y that does not overlap x. A fully masked row gives
 * zeros. mask NULL: no mask. */
SIMDATTN_API simdattn_status simdattn_softmax(simdattn_const_tensor4 x,
                                              simdattn_tensor4 y, float scale,
                                              const simdattn_mask* mask);

/* Rotary position embedding in place on queries or keys x (batch, heads,
 * tokens, head_dim) (kernels.h's ApplyRope): interleaved 0 pairs dims i and
 * i + rotary_dim / 2 (GPT-NeoX, Llama), 1 pairs 2i and 2i + 1 (GPT-J); pair
 * i turns by position * theta^(-2i / rotary_dim); rotary_dim 0: head_dim;
 * positions NULL or dims[0] entries: token t of item b is at
 * positions[b] + t. */
SIMDATTN_API simdattn_status simdattn_apply_rope(simdattn_tensor4 x,
                                                 int32_t interleaved,
                                                 float theta, size_t rotary_dim,
                                                 const size_t* positions);

/* In place: keeps each element with probability 1 - p (p rounded to a
 * multiple of 2^-16), scaled by 1 / (1 - p). The mask is a pure function of
 * (seed, offset, element index); advance offset every training step. p
 * outside [0, 1] or NaN is an error. */
SIMDATTN_API simdattn_status simdattn_dropout(simdattn_tensor4 x, float p,
                                              uint64_t seed, uint64_t offset);

typedef struct simdattn_attention_options {
  /* 0: scale = 1 / sqrt(head_dim) (PyTorch's default); 1: use `scale`. */
  int32_t has_scale;
  float scale;
  /* Over the scores (batch, q_heads, q_tokens, k_tokens); with a KV cache of
   * n keys and m new queries, causal_offset = n - m. */
  simdattn_mask mask;
  /* Dropout on the attention weights with the bits simdattn_dropout would
   * draw for the (batch, q_heads, q_tokens, k_tokens) weights. */
  float dropout;
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

/* Everything zero: PyTorch's scale, no mask, no dropout, no log-sum-exp. */
SIMDATTN_API simdattn_attention_options
simdattn_attention_default_options(void);

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
/* The same in the arithmetic `compute`: SIMDATTN_COMPUTE_BF16 rounds Q, K,
 * V and the weights P to bf16 (kernels.h's AttentionOptions::compute). */
SIMDATTN_API simdattn_status simdattn_scaled_dot_product_attention_compute(
    simdattn_const_tensor4 q, simdattn_const_tensor4 k,
    simdattn_const_tensor4 v, simdattn_tensor4 out,
    const simdattn_attention_options* options, int32_t compute);

/* ------------------------------------------------------------------------ */
/* KV cache (attention.h)                                                    */

/* The keys and values seen so far by one attention layer, (batch, kv_heads,
 * capacity, head_dim) each. */
typedef struct simdattn_kv_cache simdattn_kv_cache;

/* A cache owning zeroed memory for `capacity` tokens; *cache is set on
 * success and left alone on failure. */
SIMDATTN_API simdattn_status
simdattn_kv_cache_create(size_t batch, size_t kv_heads, size_t capacity,
                         size_t head_dim, simdattn_kv_cache** cache);

/* A cache over the caller's (batch, kv_heads, capacity, head_dim) buffers,
 * which must have equal dims, not overlap, and outlive the cache. */
SIMDATTN_API simdattn_status simdattn_kv_cache_create_in(
    simdattn_tensor4 keys, simdattn_tensor4 values, simdattn_kv_cache** cache);

/* Releases a cache (never the caller's buffers); NULL does nothing. */
SIMDATTN_API void simdattn_kv_cache_destroy(simdattn_kv_cache* cache);

/* Copies n more tokens, (batch, kv_heads, n, head_dim) each; an error if
 * they do not fit. */
SIMDATTN_API simdattn_status
simdattn_kv_cache_append(simdattn_kv_cache* cache, simdattn_const_tensor4 keys,
                         simdattn_const_tensor4 values);

/* Forgets every token (a new sequence); the memory stays. */
SIMDATTN_API simdattn_status simdattn_kv_cache_clear(simdattn_kv_cache* cache);

/* The tokens held and the room; either pointer may be NULL. */
SIMDATTN_API simdattn_status simdattn_kv_cache_size(
    const simdattn_kv_cache* cache, size_t* size, size_t* capacity);

/* Views (batch, kv_heads, size, head_dim) of what was appended, valid until
 * the cache is destroyed; either pointer may be NULL. Float contiguous
 * caches only. */
SIMDATTN_API simdattn_status simdattn_kv_cache_view(
    const simdattn_kv_cache* cache, simdattn_const_tensor4* keys,
    simdattn_const_tensor4* values);

/* How a cache stores tokens (attention.h's KVCacheConfig; kernels.h's
 * KVType states each type's error). All zero: float, contiguous. */
typedef enum simdattn_kv_type {
  SIMDATTN_KV_F32 = 0,
  SIMDATTN_KV_BF16 = 1,
  SIMDATTN_KV_F16 = 2,
  SIMDATTN_KV_INT8 = 3 /* one scale per token and head */
} simdattn_kv_type;
typedef struct simdattn_kv_cache_config {
  int type;          /* a simdattn_kv_type */
  size_t block_size; /* 0: contiguous; else paged, a power of two 16..256 */
  size_t num_blocks; /* paged: the pool; 0: enough for every sequence */
  /* Nonzero: keys rotated on append, each at its position (RoPE). */
  int rope;
  int rope_interleaved; /* 0: half-split pairs (NeoX); 1: GPT-J's */
  float rope_theta;     /* 0: 10000 */
  size_t rope_dim;      /* 0: head_dim */
} simdattn_kv_cache_config;

/* A cache of `capacity` tokens per sequence as config says (NULL: float,
 * contiguous). */
SIMDATTN_API simdattn_status simdattn_kv_cache_create_with(
    size_t batch, size_t kv_heads, size_t capacity, size_t head_dim,
    const simdattn_kv_cache_config* config, simdattn_kv_cache** cache);

/* Appends keys[s], values[s] (s < keys.dims[0]) to the distinct
 * sequences[s]. */
SIMDATTN_API simdattn_status simdattn_kv_cache_append_to(
    simdattn_kv_cache* cache, simdattn_const_tensor4 keys,
    simdattn_const_tensor4 values, const size_t* sequences);

/* Keeps a sequence's first `length` tokens (length <= its length). */
SIMDATTN_API simdattn_status simdattn_kv_cache_truncate(
    simdattn_kv_cache* cache, size_t sequence, size_t length);

/* Sequence dst becomes a copy of src (paged: blocks shared until written). */
SIMDATTN_API simdattn_status simdattn_kv_cache_copy(simdattn_kv_cache* cache,
                                                    size_t src, size_t dst);

/* Sequence b becomes what sequence order[b] was; order has batch entries. */
SIMDATTN_API simdattn_status simdattn_kv_cache_reorder(simdattn_kv_cache* cache,
                                                       const size_t* order);

/* One sequence's length. */
SIMDATTN_API simdattn_status simdattn_kv_cache_length(
    const simdattn_kv_cache* cache, size_t sequence, size_t* length);

/* Attention of q (batch, q_heads, q_tokens, head_dim), each sequence's last
 * q_tokens tokens, over the cache where it lies (kernels.h's
 * ScaledDotProductAttention over a KVCacheView): options' causal offsets
 * and key lengths must be unset (the cache gives them). */
SIMDATTN_API simdattn_status simdattn_kv_cache_attention(
    simdattn_const_tensor4 q, const simdattn_kv_cache* cache,
    simdattn_tensor4 out, const simdattn_attention_options* options);

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

/* The seeds' constructor arguments; a module reads those its kind lists. */
typedef struct simdattn_module_config {
  int32_t kind; /* A simdattn_module_kind. */
  size_t d_in;
  size_t d_out;
  size_t context_length;
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
} simdattn_module_config;

typedef struct simdattn_module simdattn_module;

/* Creates a module; *module is set on success and left alone on failure.
 * Release it with simdattn_module_destroy. */
SIMDATTN_API simdattn_status simdattn_module_create(
    const simdattn_module_config* config, simdattn_module** module);

/* Releases a module; NULL does nothing. */
SIMDATTN_API void simdattn_module_destroy(simdattn_module* module);

/* The shape of the module: x has d_in features, y has d_out features, the
 * attention weights are (batch, num_heads, tokens, tokens). Any output
 * pointer may be NULL. */
SIMDATTN_API simdattn_status
simdattn_module_shape(const simdattn_module* module, size_t* d_in,
                      size_t* d_out, size_t* num_heads);

/* Element types of state_dict tensors. */
typedef enum simdattn_dtype {
  SIMDATTN_DTYPE_F32 = 0,
  SIMDATTN_DTYPE_BF16 = 1,
  SIMDATTN_DTYPE_F16 = 2
} simdattn_dtype;

/* One tensor of a PyTorch state_dict in caller memory: row-major,
 * contiguous, `rank` dimensions (the count of elements is their product). */
typedef struct simdattn_named_tensor {
  const char* name; /* PyTorch's name: "W_query.weight", "heads.0.mask". */
  const float* data;
  const size_t* shape;
  size_t rank;
} simdattn_named_tensor;

/* The same with its element type: float, or bf16/f16 bits. */
typedef struct simdattn_typed_tensor {
  const char* name;
  const void* data;
  const size_t* shape;
  size_t rank;
  int32_t dtype; /* a simdattn_dtype */
} simdattn_typed_tensor;

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
 * be left out. */
SIMDATTN_API simdattn_status simdattn_module_load_weights(
    simdattn_module* module, const simdattn_named_tensor* tensors,
    size_t count);

/* The same from tensors of any simdattn_dtype; keep_dtype 1 keeps bf16 or
 * f16 projection matrices in their type (half the bytes, the results of the
 * widened weights), 0 widens them to float. */
SIMDATTN_API simdattn_status simdattn_module_load_typed_weights(
    simdattn_module* module, const simdattn_typed_tensor* tensors, size_t count,
    int32_t keep_dtype);

typedef struct simdattn_forward_options {
  /* 0: eval. 1: training, dropout on the attention weights with the key
   * (dropout_seed, dropout_offset); advance the offset every step. */
  int32_t training;
  uint64_t dropout_seed;
  uint64_t dropout_offset;
  /* Optional output (batch, num_heads, tokens, tokens): the attention
   * weights after softmax (and dropout). data NULL: not wanted. */
  simdattn_tensor4 attention_weights;
} simdattn_forward_options;

/* x (batch, tokens, d_in) -> y (batch, tokens, d_out), y not overlapping x.
 * tokens may not exceed context_length. options NULL: eval, no weights.
 * Allocates only the first time it sees a shape. */
SIMDATTN_API simdattn_status simdattn_module_forward(
    const simdattn_module* module, simdattn_const_tensor3 x, simdattn_tensor3 y,
    const simdattn_forward_options* options);
/* The same in the arithmetic `compute` (projections and attention);
 * SIMDATTN_COMPUTE_BF16 returns no attention weights. */
SIMDATTN_API simdattn_status simdattn_module_forward_compute(
    const simdattn_module* module, simdattn_const_tensor3 x, simdattn_tensor3 y,
    const simdattn_forward_options* options, int32_t compute);

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
/* The same in the arithmetic `compute`; SIMDATTN_COMPUTE_BF16 needs a cache
 * of type SIMDATTN_KV_BF16. */
SIMDATTN_API simdattn_status simdattn_module_forward_step_compute(
    const simdattn_module* module, simdattn_const_tensor3 x,
    simdattn_kv_cache* cache, simdattn_tensor3 y,
    const simdattn_forward_options* options, int32_t compute);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SIMDATTN_SIMDATTN_C_H_ */
