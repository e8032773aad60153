// The primitives every attention module is built from: a tiled matrix
// product, a numerically stable masked softmax and an in-place dropout. Each
// is compiled for every SIMD target and dispatched once per call to the best
// one this CPU supports. Work is spread with oneTBB; callers bound it with a
// tbb::task_arena or tbb::global_control.
//
// Every function validates its arguments and throws std::invalid_argument
// naming the argument and the values; empty shapes are valid and do nothing.
#ifndef SIMDATTN_KERNELS_H_
#define SIMDATTN_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "simdattn/element.h"
#include "simdattn/export.h"
#include "simdattn/tensor.h"

namespace simdattn {

enum class Transpose : uint8_t { kNo, kYes };

// The arithmetic of a product: float32 (PyTorch's default), or A and op(B)
// rounded to bfloat16 (nearest even) with products summed in float32, as
// PyTorch's bf16 autocast and oneDNN compute, on the CPU's bf16 instructions
// where it has them (AMX tiles, AVX512_BF16 on AMD, Arm's BFDOT;
// BFloat16DotKernel) and at about float32's cost elsewhere. Subnormal bf16
// operands and products may be flushed to zero by the native kernels.
// kInt8 is attention's only (AttentionOptions::compute).
enum class ComputeType : uint8_t { kFloat32, kBFloat16, kInt8 };

struct MatMulOptions {
  // op(B) = B (K x N) or B^T (B is N x K, e.g. keys for Q K^T).
  Transpose transpose_b = Transpose::kNo;
  float alpha = 1.0f;
  // 0 means C is write-only: its old contents, even NaN, are never read.
  float beta = 0.0f;
  // Optional N floats added to every row of C (nn.Linear's bias).
  const float* bias = nullptr;
  // kBFloat16: each output is the float32 sum of the products of the
  // rounded operands (exact in float32), within K 2^-24 sum |a b| of it in
  // float64 (plus alpha, beta, bias's roundings). Without native bf16 the
  // rounded operands go through the float32 kernel. MatMul only (not
  // BatchedMatMul).
  ComputeType compute = ComputeType::kFloat32;
};

// Whether kBFloat16 products use the CPU's bf16 instructions (within the
// AVX3 target: AMX tiles where the CPU and OS have them, else AVX512_BF16's
// dot products on AMD CPUs, where they pay) rather than the float32
// fallback; BFloat16DotKernel names the kernel ("AMX", "AVX512_BF16",
// "float32 fallback").
SIMDATTN_API bool NativeBFloat16Dot();
SIMDATTN_API const char* BFloat16DotKernel();

// C = alpha * A * op(B) + beta * C + bias, float32 with float32 accumulation.
// A is M x K, op(B) is K x N, C is M x N. C must not overlap A or B.
// Each output is reduced in a fixed order, so results are bit-identical for
// any number of threads.
SIMDATTN_API void MatMul(ConstMatrix a, ConstMatrix b, Matrix c,
                         const MatMulOptions& options = {});

// MatMul with op(B) stored in bfloat16 or float16 (weights as checkpoints
// ship them): each element of B is widened exactly to float32 as it is
// packed or loaded, and the product is then MatMul's, so the result has the
// bits of MatMul over the widened B. B takes half the memory and the
// bandwidth of float32.
SIMDATTN_API void MatMul(ConstMatrix a, MatrixView<const BFloat16> b, Matrix c,
                         const MatMulOptions& options = {});
SIMDATTN_API void MatMul(ConstMatrix a, MatrixView<const Float16> b, Matrix c,
                         const MatMulOptions& options = {});

class PackedMatrix;

// MatMul with op(B) packed beforehand (PackedMatrix): a product packs only
// A. options.transpose_b and .compute must be those B was packed with, and
// the active target and bf16 kernel those it was packed on
// (PackedMatrix::current()); alpha, beta and bias are the call's. The bits
// are MatMul's over the same B and options, except for kBFloat16 products
// of fewer than 64 rows on a native kernel, which MatMul leaves to the
// float32 fallback and a packed B does not (both within MatMulOptions'
// bound). Deterministic for any thread count.
SIMDATTN_API void MatMul(ConstMatrix a, const PackedMatrix& b, Matrix c,
                         const MatMulOptions& options = {});
// The same with bf16 activations (an engine's bf16 residual stream): A in
// bf16, and/or C in bf16: the float32 result, beta C read from C's bf16,
// rounded to nearest even once. With kBFloat16 on a native kernel, A's bf16
// values are the operands: read where they lie when K and A's stride are
// even and A is 4-byte aligned (on AMX also whole tiles: rows a multiple of
// 16, K of 32), copied otherwise;
// elsewhere A is widened exactly into scratch. The bits are those of the
// float A and C overload over A widened, then rounded.
SIMDATTN_API void MatMul(MatrixView<const BFloat16> a, const PackedMatrix& b,
                         Matrix c, const MatMulOptions& options = {});
SIMDATTN_API void MatMul(ConstMatrix a, const PackedMatrix& b,
                         MatrixView<BFloat16> c,
                         const MatMulOptions& options = {});
SIMDATTN_API void MatMul(MatrixView<const BFloat16> a, const PackedMatrix& b,
                         MatrixView<BFloat16> c,
                         const MatMulOptions& options = {});

// op(B) of MatMul prepared once for many products (weights: an engine's
// linear layers), in the form its kernel on the active target reads:
// - kBFloat16 on a native kernel (NativeBFloat16Dot): packed as that
//   kernel's pairs of bf16, so that products pack only A (half the bytes of
//   float32);
// - kBFloat16 on the float32 fallback: B rounded to bf16 once (2 bytes per
//   element), where MatMul rounds a float B at every call;
// - kFloat32: a copy of B as stored (the float32 kernel packs B as it
//   goes; holding its panels measured no faster, bench/RESULTS.md).
// B is read only while packing. Movable, not copyable; its const methods,
// and products over it, are safe from many threads at once.
class SIMDATTN_API PackedMatrix {
 public:
  PackedMatrix();  // 0 x 0.
  // op(B) prepared for MatMul(a, b, c, options): options.transpose_b and
  // .compute apply (16-bit B widened exactly, then rounded to bf16 for
  // kBFloat16, which leaves bf16 B as it is); the other fields do not.
  PackedMatrix(ConstMatrix b, const MatMulOptions& options);
  PackedMatrix(MatrixView<const BFloat16> b, const MatMulOptions& options);
  PackedMatrix(MatrixView<const Float16> b, const MatMulOptions& options);
  PackedMatrix(PackedMatrix&&) noexcept;
  PackedMatrix& operator=(PackedMatrix&&) noexcept;
  ~PackedMatrix();

  // op(B)'s shape, K x N (0 x 0 when moved from).
  size_t rows() const;
  size_t cols() const;
  Transpose transpose_b() const;
  ComputeType compute() const;
  // The bytes it holds (zero padding included).
  size_t bytes() const;
  // Whether the active target and bf16 kernel are still those it was packed
  // on (UseTarget, or a change of bf16 kernel, makes it stale: pack again).
  bool current() const;

  struct Impl;  // Internal (src/ops/packed_matrix.h).

 private:
  friend void MatMul(ConstMatrix a, const PackedMatrix& b, Matrix c,
                     const MatMulOptions& options);
  friend void MatMul(MatrixView<const BFloat16> a, const PackedMatrix& b,
                     Matrix c, const MatMulOptions& options);
  std::unique_ptr<Impl> impl_;
};

// One value to or from the 16-bit formats: rounded to nearest, ties to even;
// overflow gives infinity, NaN stays NaN.
SIMDATTN_API BFloat16 ToBFloat16(float x);
SIMDATTN_API Float16 ToFloat16(float x);
SIMDATTN_API float ToFloat(BFloat16 x);
SIMDATTN_API float ToFloat(Float16 x);

// MatMul on every (i0, i1) matrix of the 4-D views: C[i0, i1] = A[i0, i1] *
// op(B[i0, j1]) with j1 = i1 / (A.dims[1] / B.dims[1]), so B may hold fewer
// heads than A (grouped-query attention shares one K/V head among several
// query heads). Broadcast a B over dimension 0 with strides[0] = 0.
SIMDATTN_API void BatchedMatMul(ConstTensor4 a, ConstTensor4 b, Tensor4 c,
                                const MatMulOptions& options = {});

// What a softmax row may attend to, and what joins its scores. Every field
// is off when zero or null, and they combine: a key is masked if any field
// masks it. Row i of batch item b sits at position p = i + offset_b among
// the keys, offset_b = causal_offsets[b] if given, else causal_offset (with
// a KV cache of n keys and m new queries, n - m). Its score for key j is
//   s = scale * x                            (x = q . k in attention)
//   s = softcap * tanh(s / softcap)          if softcap > 0 (Gemma 2)
//   s = s + additive[b, h, i, j] - alibi_slopes[h] * |p - j|
// and it enters the softmax unless key j is masked:
//   causal:       j > p
//   window W > 0: j <= p - W, and j > p (a window is always causal: the row
//                 sees the last W keys up to its own position; Mistral)
//   key_lengths:  j >= key_lengths[b]
//   boolean:      boolean[b, h, i, j] != 0
//   additive:     additive[b, h, i, j] == -inf
// A sink (gpt-oss) adds exp(sinks[h]) to the row's denominator and nothing
// to its output: a row that sees no key then gets zeros, all its weight on
// the sink. Masked keys contribute nothing, whatever the inputs hold there.
struct AttentionMask {
  bool causal = false;
  size_t causal_offset = 0;
  // Per batch item (ragged batches: a decode batch of sequences at different
  // positions, chunked prefill); replaces causal_offset. Needs a field that
  // reads positions: causal, window, alibi_slopes or tree_offsets.
  const size_t* causal_offsets = nullptr;
  size_t window = 0;
  // Nonzero = masked (the seeds' convention, torch.triu(...).bool()). Same
  // dims as the scores; a stride of 0 broadcasts over batch or heads.
  Tensor4View<const uint8_t> boolean;
  // Added to the scaled scores before the softmax; -inf masks.
  ConstTensor4 additive;
  // Per item of dimension 0 (batch): rows keep columns j < key_lengths[b].
  const size_t* key_lengths = nullptr;
  // Finite and > 0 to cap the scaled scores; 0: off.
  float softcap = 0.0f;
  // Per head of the scores (dims[1]), finite: ALiBi's slopes (BLOOM, MPT).
  const float* alibi_slopes = nullptr;
  // Per head of the scores (dims[1]), finite: the sink logits.
  const float* sinks = nullptr;
  // Draft trees of speculative decoding (EAGLE, Medusa), over a cache only
  // (VarlenAttention, or ScaledDotProductAttention over a KVCacheView): a
  // sequence b with tree_offsets[b] != kNoTree sees its own n new tokens as
  // its bits say instead of causally: query i sees new token j (i, j < n)
  // iff bit tree_offsets[b] + i * n + j of tree_bits is set (bit k is bit
  // k % 64 of tree_bits[k / 64]). The tokens before them stay visible (as
  // the window allows). Null: no trees.
  static constexpr size_t kNoTree = ~size_t{0};
  const uint64_t* tree_bits = nullptr;
  const size_t* tree_offsets = nullptr;
};

// ALiBi's slopes for num_heads heads, as its paper defines them: 2^(-8k/n),
// k = 1..n, for n a power of two; otherwise those of the power of two below
// n, then every other slope of the one above (BLOOM's and MPT's too).
SIMDATTN_API std::vector<float> AlibiSlopes(size_t num_heads);

// Row-wise y = softmax(scale * x + mask) over the last dimension, in place
// (y aliases x exactly) or out of place. A row with every column masked gives
// zeros, never NaN. NaN in an unmasked input propagates to its row. Scores of
// any magnitude are exact (the max is subtracted exactly); where scale * x
// overflows a float, the result is the exact softmax for positive scales up
// to 2^24, and for others may be NaN, as from an infinite score.
// Error, relative per element against a float64 reference: at most 2e-6, or
// (16 + |v - max|) 2^-24 for outputs below about e^-17 of their row's
// largest, whose exp's argument v - max is a rounded float (tested; the
// worst-case analysis is in src/ops/softmax-inl.h).
SIMDATTN_API void Softmax(ConstTensor4 x, Tensor4 y, float scale = 1.0f,
                          const AttentionMask& mask = {});

// Identifies one dropout draw. The keep decision for element (b, h, i, j) is a
// pure function of (seed, offset, b, h, i, j), independent of threads, tiles,
// SIMD target and fused or unfused attention. Training loops advance offset.
struct DropoutKey {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// In place: keeps each element with probability 1 - p, scaled by 1 / (1 - p),
// else zeroes it. p = 0 leaves x untouched; p = 1 zeroes it. Each decision
// takes 16 random bits, so the drop probability is p rounded to a multiple
// of 2^-16 (DropoutThreshold in simdattn/random.h).
// Throws for p < 0, p > 1 or NaN.
SIMDATTN_API void Dropout(Tensor4 x, float p, DropoutKey key);

// Rotary position embedding (RoPE): which dimensions of a head turn
// together.
enum class RopePairing : uint8_t {
  kHalfSplit,    // Dims i and i + rotary_dim / 2 (GPT-NeoX, Llama).
  kInterleaved,  // Dims 2i and 2i + 1 (GPT-J).
};

struct RopeOptions {
  RopePairing pairing = RopePairing::kHalfSplit;
  // Pair i turns by position * theta^(-2i / rotary_dim); finite, > 0.
  float theta = 10000.0f;
  // The dims rotated, even (partial rotary); 0: all from rotary_offset on.
  size_t rotary_dim = 0;
  // The first rotated dim: dims [rotary_offset, rotary_offset + rotary_dim)
  // turn, within head_dim (DeepSeek's MLA rotates the last 64 of its
  // 576-dim latent keys).
  size_t rotary_offset = 0;
  // Per batch item, the position of its token 0 (token t is at
  // positions[b] + t); null: 0.
  const size_t* positions = nullptr;
};

// In place on queries or keys x (batch, heads, tokens, head_dim): rotates
// each pair (x1, x2) of a token's rotary dims by its angle a to
// (x1 cos a - x2 sin a, x2 cos a + x1 sin a). Angles are computed in double
// and their cos and sin rounded once to float (HF's float32 tables differ
// by up to position * 2^-24 in the angle); each output is within 2 ulp of
// |x1| + |x2| of the exact rotation of the float inputs by those values.
SIMDATTN_API void ApplyRope(Tensor4 x, const RopeOptions& options = {});

struct AttentionOptions {
  // Multiplies Q K^T; absent: 1 / sqrt(head_dim), PyTorch's default.
  std::optional<float> scale;
  // Over the scores (batch, q_heads, q_tokens, k_tokens). A causal offset is
  // the number of keys before the first query: with a KV cache of n keys
  // and m new queries, causal_offset = n - m.
  AttentionMask mask;
  // Dropout on the attention weights, with the bits Dropout() would draw for
  // the weights tensor (b, h, i, j): fused and unfused paths drop the same.
  float dropout = 0.0f;
  DropoutKey dropout_key;
  // Optional output, (batch, q_heads, q_tokens) contiguous floats: each
  // row's log-sum-exp, L = log(sum_j exp(s_j) + exp(sink)) over its visible
  // keys' scores s_j as AttentionMask defines them (dropout aside); -inf for
  // a row that sees nothing and has no sink, NaN where its output is NaN
  // (not written when out is empty).
  // Two calls over disjoint key sets (sinks in one of them) merge exactly:
  // L = logaddexp(L1, L2), out = exp(L1 - L) out1 + exp(L2 - L) out2.
  float* log_sum_exp = nullptr;
  // kBFloat16: Q, K and V rounded to bf16 (nearest even), and the weights P
  // (after softmax and dropout, before P V) too, as flash kernels do; scores,
  // softmax and sums in float32. Each product is then exact in float32, so
  // outputs differ from float32 attention over the rounded Q, K, V and P
  // only by accumulation order. Over a KVCacheView, the cache must hold
  // bf16 or fp8 (whose keys and values bf16 holds exactly).
  // kInt8 (a cache of integer codes only, ElementTraits::int8_scores: int8,
  // q8_0, q4_0, iq4_nl): integer scores. Over ggml's blocks, as llama.cpp
  // computes them: each query row is quantized
  // per block of 32 elements to q^ = d round(x / d), d = max |x| / 127
  // (float32 d; codes rounded to nearest even from x (127 / max)), the
  // products of a block's codes with the key block's (q4_0: its values
  // n - 8; iq4_nl: its table's values) summed exactly in int32 and scaled by
  // scale d d_key in float32.
  // Over int8 keys (one scale per row), the same with the whole row as the
  // query's one block: one exact int32 sum per score, times the key's scale
  // and scale d (the query quantized per row, as the keys are). A score
  // then differs from float32 attention's over the same cache by at most
  // scale sum_blocks (d / 2) sum_block |k| (and float32 roundings); softmax
  // and P V are float32. This applies where the kernel's tasks have at most
  // 4 query rows, always when q_heads / kv_heads times the queries per
  // sequence is at most 4 (decode with up to 4 heads per K/V head, a few
  // drafts); more rows per task (chunked prefill), and a task whose queries
  // hold a non-finite element (NaN and infinity then propagate as in
  // float32) or a block whose d underflows (max |x| below about 2^-143),
  // are computed in float32, within the same bound.
  ComputeType compute = ComputeType::kFloat32;
};

// out = softmax(scale * Q K^T + mask) V, fused: the (q_tokens x k_tokens)
// weights are never stored; tiles of keys wholly masked by causality or key
// lengths are skipped. Extra memory is O(threads x tile), whatever the
// sequence length.
//   q   (batch, q_heads,  q_tokens, head_dim)
//   k   (batch, kv_heads, k_tokens, head_dim)
//   v   (batch, kv_heads, k_tokens, value_dim)
//   out (batch, q_heads,  q_tokens, value_dim), overlapping none of the inputs
// kv_heads divides q_heads: query head h reads key/value head
// h / (q_heads / kv_heads) (grouped-query and multi-query attention). Any
// strides, so (batch, tokens, heads, head_dim) buffers are used in place
// (Tensor4View::FromTokenMajor). A query row whose every key is masked gets
// zeros; NaN in an unmasked score gives a row of NaN. Matches
// Softmax + BatchedMatMul to about 2e-6 relative.
SIMDATTN_API void ScaledDotProductAttention(
    ConstTensor4 q, ConstTensor4 k, ConstTensor4 v, Tensor4 out,
    const AttentionOptions& options = {});

// KV caches store keys and values as any KVType (element.h). Attention
// widens bf16 and f16 exactly. int8 holds q = round(x / scale): the float32
// quotient rounded to nearest, ties to even, with scale = max |x| / 127 in
// float32 over the token's head (one scale per token and head), so
// |x - scale q| <= scale / 2 up to float32 rounding (relative 2^-24). A head
// whose max |x| is below 2^-100 is stored as zeros with scale 0, one holding
// a NaN or an infinity as zeros with scale NaN.
//
// fp8 (kFp8E4M3, kFp8E5M2) holds x / side_scale (the float32 quotient) rounded
// to nearest, ties to even, with one positive scale per cache side
// (KVCacheConfig::key_scale, value_scale: vLLM's k_scale, v_scale), so the
// stored value is within 2^-4 (E4M3) or 2^-3 (E5M2) relative of x / scale,
// or 2^-10 / 2^-17 absolute below the normal range (2^-6, 2^-14). E4M3
// saturates finite values at +-448 and stores an infinity as NaN; E5M2 rounds
// 61440 and above to infinity.
//
// q8_0 and q4_0 are ggml's block_q8_0 and block_q4_0 bit for bit: blocks of
// 32 consecutive elements of a row with an fp16 scale d each (so head_dim,
// value_dim and the strides are multiples of 32), written as ggml's reference
// quantizer writes them. q8_0: d = max |x| / 127, q = round(x * (1 / d)),
// halves away from zero, so |x - d q| <= d / 2 (plus d's fp16 rounding,
// relative 2^-11 of max |x|). q4_0: d = m / -8 for the element m of largest
// magnitude, q = min(15, trunc(x * (1 / d) + 8.5)) - 8 in -8..7, |x - d q|
// <= |d| / 2, or <= |d| for elements beyond 7.5 |d| of the sign opposite to
// m (clamped to q = 7), plus d's rounding (relative 2^-11 of |m|). Blocks
// holding a NaN or an infinity store d NaN and q 0, blocks where 1 / d
// overflows (max |x| below about 2^-121) d 0 and q 0 (ggml leaves both
// undefined); |x| up to 65504 * 127 (q8_0) or 65504 * 8 (q4_0) keeps d
// finite.
//
// q4_1 and iq4_nl are ggml's block_q4_1 and block_iq4_nl bit for bit, also
// written as ggml's reference quantizers write them. q4_1: d = (max - min) /
// 15 and m = min (both fp16), q = min(15, trunc((x - min) (1 / d) + 0.5)) in
// 0..15, element d q + m (the sum rounded once): |x - (d q + m)| <= d / 2
// plus the roundings of d and m (relative 2^-11 of max - min and of |min|).
// iq4_nl: 4-bit indices into ggml's table of 16 values (-127 ... 113); the
// element m of largest magnitude sets 1 / d = -127 / m, each x takes the
// value nearest x / d, then d is the least-squares scale of those values
// with weights x^2 (fp16): within about |d| 12 of x inside the table's
// range (its widest gap is 24), more for elements clamped at 113 |d|.
// Blocks with a NaN or an infinity store d NaN (q4_1: m too) and codes 0;
// iq4_nl blocks below 1e-15 in magnitude d 0 and codes 0.

// Keys and values where a KV cache keeps them (attention.h's KVCache::View
// gives one), read in place by attention: no converted copy is made. Keys and
// values share one layout: element c of token t of sequence b in head h is at
//   keys[block * block_stride + h * head_stride + (t % block_size) *
//        row_stride + c]
// (values alike), elements of `type`, where block is
//   block_table[b * blocks_per_sequence + t / block_size]  when paged,
//   b  when block_table is null (contiguous: block_size = the capacity).
// A block type's element e is element e % 32 of block e / 32 (strides are
// multiples of 32). int8 scales: key_scales[block * scale_block_stride + h *
// scale_head_stride + t % block_size], value_scales alike; fp8 keys are
// key_scale times their elements, values value_scale times theirs. Sequence
// b holds lengths[b] tokens;
// slots past them (unwritten, or left by a truncation) never affect a result.
// With mask.window W, attention reads a sequence's keys from its first
// query's window on (position lengths[b] - q_tokens + 1 - W, rounded down to
// a multiple of 16, or of 128 with dropout): table entries of blocks wholly
// before may be -1 (released by a rolling window).
struct KVCacheView {
  KVType type = KVType::kF32;
  size_t batch = 0, kv_heads = 0, head_dim = 0;
  // Elements per value row, read with the keys' strides; 0: head_dim. With
  // values == keys, each key row's first value_dim elements are its value
  // (MLA's latent rows: [c_kv | k_rope] keys, c_kv values), scaled as the
  // key (key_scale, key_scales; value_scale and value_scales unread).
  size_t value_dim = 0;
  const size_t* lengths = nullptr;
  const void* keys = nullptr;
  const void* values = nullptr;
  size_t block_stride = 0, head_stride = 0, row_stride = 0;  // In elements.
  const float* key_scales = nullptr;
  const float* value_scales = nullptr;
  size_t scale_block_stride = 0, scale_head_stride = 0;
  // Tokens per block: a power of two when paged.
  size_t block_size = 0;
  const int32_t* block_table = nullptr;
  size_t blocks_per_sequence = 0;
  size_t num_blocks = 0;  // Blocks in the pool (paged): table entries < it.
  // Tokens a sequence may hold (<= blocks_per_sequence * block_size when
  // paged, <= block_size when not).
  size_t capacity = 0;
  // fp8 caches: the scale of every key, of every value (finite, > 0).
  float key_scale = 1.0f, value_scale = 1.0f;
};

// Attention of q (batch, q_heads, q_tokens, head_dim) over a cache's keys and
// values, as ScaledDotProductAttention over them widened to float (bf16, f16)
// or dequantized (int8: the scale is applied to each score and each weight,
// so results differ from attention over dequantized values by rounding). The
// queries are each sequence's last q_tokens tokens (lengths[b] >= q_tokens;
// an empty sequence, lengths[b] == 0, gives rows of zeros and a
// log-sum-exp of minus infinity, as a fully masked row does):
// options.mask.causal (and window) count positions from there, and key
// lengths come from the cache, so mask.causal_offset(s) and key_lengths must
// be unset. Masks' and dropout's key dimension is kv.capacity.
SIMDATTN_API void ScaledDotProductAttention(
    ConstTensor4 q, const KVCacheView& kv, Tensor4 out,
    const AttentionOptions& options = {});

struct KVPages;

// One serving step's sequences over caller-owned pages (vLLM's metadata),
// the one description that VarlenAttention, WriteKVSlots and the modules'
// ForwardStep take: sequence b's new tokens are rows [query_starts[b],
// query_starts[b + 1]) of the step's packed tokens, its last ones; it holds
// seq_lens[b] tokens after the step, in the blocks block_table[b *
// blocks_per_sequence + t / block_size]. Token t's key and value are stored
// at slot_mapping[t] (block * block_size + offset; negative: not stored),
// which should be the slot its sequence's table gives its position: that is
// the engine's bookkeeping, not checked. Positions (RoPE's, of the keys
// written and the queries rotated): positions[t] per packed token (a draft
// tree's tokens sit at the prefix's length plus their depth), or, null,
// sequence b's new tokens at seq_lens[b] - q_len, ..., seq_lens[b] - 1. Draft
// trees (speculative verification): tree_bits and tree_offsets as
// AttentionMask's, per sequence over its new tokens; null: none.
struct VarlenStep {
  size_t num_seqs = 0;
  const size_t* query_starts = nullptr;  // num_seqs + 1 (query_start_loc).
  const size_t* seq_lens = nullptr;      // num_seqs.
  const int32_t* block_table = nullptr;
  size_t blocks_per_sequence = 0;
  const int64_t* slot_mapping = nullptr;  // One per packed token.
  const size_t* positions = nullptr;      // One per packed token, or null.
  const uint64_t* tree_bits = nullptr;
  const size_t* tree_offsets = nullptr;  // num_seqs, or null.
};

// One serving step's attention over caller-owned pages (vLLM's and
// FlashInfer's varlen conventions): any mix of prefill chunks, decodes and
// speculative verifications of kv.batch sequences in one call, spread over
// the cores as one piece of work.
//   q    (1, q_heads, num_tokens, head_dim): the packed (num_tokens,
//        q_heads, head_dim) queries as Tensor4View::FromTokenMajor(data, 1,
//        num_tokens, q_heads, head_dim) views them;
//   query_starts  kv.batch + 1 offsets (vLLM's query_start_loc), from 0,
//        non-decreasing, the last num_tokens: sequence b's queries are rows
//        [query_starts[b], query_starts[b + 1]) of q, its last q_len tokens
//        (kv.lengths[b] >= q_len, the lengths after this step's writes:
//        vLLM's seq_lens); q_len 0 skips the sequence;
//   out  (1, q_heads, num_tokens, value_dim), likewise.
// options as ScaledDotProductAttention over a KVCacheView takes them, each
// sequence on its own (causal and window from its position, softcap, ALiBi,
// sinks, scale, compute); log_sum_exp is (q_heads, num_tokens). The mask's
// boolean and additive tensors, causal offsets and key lengths, and dropout
// are refused: the cache gives the positions and lengths. Each sequence's
// rows are those of ScaledDotProductAttention over a view of it alone up to
// the order of summation; a step of single-token decodes gives the bits of
// the (num_seqs, q_heads, 1, head_dim) call.
SIMDATTN_API void VarlenAttention(ConstTensor4 q, const size_t* query_starts,
                                  const KVCacheView& kv, Tensor4 out,
                                  const AttentionOptions& options = {});
// VarlenAttention over `pages` as `step` describes the sequences (its
// trees joining options.mask, which must then have none).
SIMDATTN_API void VarlenAttention(ConstTensor4 q, const VarlenStep& step,
                                  const KVPages& pages, Tensor4 out,
                                  const AttentionOptions& options = {});

// A pool of KV blocks that the caller owns and writes (one per layer, or a
// layer's part of an arena): num_blocks blocks of block_size tokens, laid
// out as KVCacheView says (slot s = block * block_size + offset holds
// element c of head h at keys[block * block_stride + h * head_stride +
// offset * row_stride + c], values, int8 scales and fp8 scales alike). With
// values == keys (value_dim < head_dim), a latent pool: each key row's first
// value_dim elements are its value (MLA), written and read with the keys'
// scales (value_scale and value_scales are ignored).
struct KVPages {
  KVType type = KVType::kF32;
  size_t kv_heads = 0, head_dim = 0;
  size_t value_dim = 0;  // 0: head_dim.
  void* keys = nullptr;
  void* values = nullptr;
  size_t block_stride = 0, head_stride = 0, row_stride = 0;  // In elements.
  float* key_scales = nullptr;  // int8: one per slot and head.
  float* value_scales = nullptr;
  size_t scale_block_stride = 0, scale_head_stride = 0;
  size_t block_size = 0;  // A power of two.
  size_t num_blocks = 0;
  float key_scale = 1.0f, value_scale = 1.0f;  // fp8: finite, > 0.

  // What attention reads: num_seqs sequences, sequence b's tokens in the
  // blocks block_table[b * blocks_per_sequence + t / block_size] (vLLM's
  // block_table), lengths[b] of them.
  KVCacheView View(size_t num_seqs, const size_t* lengths,
                   const int32_t* block_table,
                   size_t blocks_per_sequence) const {
    KVCacheView v;
    v.type = type;
    v.batch = num_seqs;
    v.kv_heads = kv_heads;
    v.head_dim = head_dim;
    v.value_dim = value_dim;
    v.lengths = lengths;
    v.keys = keys;
    v.values = values;
    v.block_stride = block_stride;
    v.head_stride = head_stride;
    v.row_stride = row_stride;
    v.key_scales = key_scales;
    v.value_scales = value_scales;
    v.scale_block_stride = scale_block_stride;
    v.scale_head_stride = scale_head_stride;
    v.block_size = block_size;
    v.block_table = block_table;
    v.blocks_per_sequence = blocks_per_sequence;
    v.num_blocks = num_blocks;
    v.capacity = blocks_per_sequence * block_size;
    v.key_scale = key_scale;
    v.value_scale = value_scale;
    return v;
  }
};

// Stores a step's new keys (1, kv_heads, num_tokens, head_dim) and values
// (1, kv_heads, num_tokens, value_dim), FromTokenMajor views of packed rows
// as VarlenAttention's q, token t at slot slot_mapping[t] (block *
// block_size + offset; vLLM's slot_mapping), converted to the pages' type
// with KVCache::Append's bits (kernels.h's KVType comment). A negative slot
// skips its token; the others must be distinct slots of the pool. A latent
// pool takes empty values. Keys are stored as given: where the model uses
// RoPE, rotate them first, each token at its position, with ApplyRope over
// the (num_tokens, kv_heads, 1, head_dim) view of the packed rows and
// rope.positions[t] token t's position (AttentionModule::ForwardStep with a
// VarlenStep does both). On error nothing is written.
SIMDATTN_API void WriteKVSlots(ConstTensor4 keys, ConstTensor4 values,
                               const int64_t* slot_mapping,
                               const KVPages& pages);
// The same write with each key first rotated, token t at position
// positions[t] (vLLM's rotary embedding and reshape_and_cache, SGLang's
// fused kernel, in one pass): the bits of ApplyRope over the (num_tokens,
// kv_heads, 1, head_dim) view with those positions, then WriteKVSlots.
// rope.positions must be null.
SIMDATTN_API void WriteKVSlots(ConstTensor4 keys, ConstTensor4 values,
                               const int64_t* slot_mapping,
                               const KVPages& pages, const RopeOptions& rope,
                               const size_t* positions);
// The step's writes: token t at step.slot_mapping[t], rotated at its
// position (VarlenStep's) when rope is given.
SIMDATTN_API void WriteKVSlots(ConstTensor4 keys, ConstTensor4 values,
                               const VarlenStep& step, const KVPages& pages,
                               const RopeOptions* rope = nullptr);

// A serving step planned once for all its layers (FlashInfer's plan / run):
// the step's metadata is checked once against the shape every layer's pool
// shares (type, kv_heads, head_dim, value_dim, block_size, num_blocks), and
// its positions and causal offsets are laid out, so that each layer's call
// checks only its own tensors, pages and options, in time that does not
// grow with the step's sequences, blocks or tokens. The same bits as
// VarlenAttention and WriteKVSlots with the step. The plan reads the step's
// arrays at every call and copies none: they must outlive it, unchanged.
// Copies share the plan; its calls are safe from many threads at once.
class SIMDATTN_API VarlenPlan {
 public:
  VarlenPlan();  // A step of no sequence.
  // Throws, naming the field, where VarlenAttention or WriteKVSlots would
  // for this step over pages of `shape`'s shape (its memory is not read):
  // query_starts, seq_lens against the capacity and the queries, the
  // block_table entries of the blocks read, slot_mapping's slots (of the
  // pool, distinct), positions and trees. max_window: the largest
  // mask.window of the layers' calls, 0 where a layer has none (blocks
  // before the first key such windows read may be released, entries -1).
  VarlenPlan(const VarlenStep& step, const KVPages& shape,
             size_t max_window = 0);

  // VarlenAttention(q, step, pages, out, options): pages of the planned
  // shape; options.mask.window in [1, max_window] unless max_window is 0.
  void Attention(ConstTensor4 q, const KVPages& pages, Tensor4 out,
                 const AttentionOptions& options = {}) const;
  // WriteKVSlots(keys, values, step, pages, rope), pages of the planned
  // shape, num_tokens tokens.
  void WriteKVSlots(ConstTensor4 keys, ConstTensor4 values,
                    const KVPages& pages,
                    const RopeOptions* rope = nullptr) const;

  const VarlenStep& step() const;
  size_t num_tokens() const;  // query_starts[num_seqs].

  struct Impl;  // Internal (src/ops/varlen_plan.cc).

 private:
  std::shared_ptr<const Impl> impl_;
};

// Pool sizes and operations, for every element type and any strides.

// A dense pool of num_blocks blocks of block_size tokens: per side
// (num_blocks, kv_heads, block_size, row) elements, row the longer of
// head_dim and value_dim (values are read with the keys' strides), int8
// scales (num_blocks, kv_heads, block_size) floats; every field set but the
// memory, which SizeOf gives. Throws naming the argument if block_size is
// not a power of two, a block type's dims are not multiples of 32, or the
// sizes overflow.
SIMDATTN_API KVPages DenseKVPages(KVType type, size_t kv_heads, size_t head_dim,
                                  size_t value_dim, size_t block_size,
                                  size_t num_blocks);

// The memory pages' dims and strides reach from each pointer: bytes from
// keys and from values (a latent pool needs only the keys'), floats from
// key_scales and from value_scales (int8; 0 for the other types).
struct KVPagesSize {
  size_t key_bytes = 0, value_bytes = 0;
  size_t scales = 0;
};
SIMDATTN_API KVPagesSize SizeOf(const KVPages& pages);

// The first position attention reads of a sequence of `length` tokens whose
// last q_tokens are queried with mask.window `window`: the first query's
// window start, length - q_tokens + 1 - window, rounded down to a multiple
// of 16 (of 128 with dropout: its bits come in groups); 0 without a window;
// `length` when q_tokens or length is 0 (nothing is read). Blocks wholly
// before it may be released (block_table entries -1).
SIMDATTN_API size_t FirstKeyRead(size_t length, size_t q_tokens, size_t window,
                                 bool dropout = false);

// The keys (1, kv_heads, n, head_dim) and values (1, kv_heads, n,
// value_dim) at slot_mapping[0..n), as attention reads them (widened, times
// their scales; a latent pool's values are its key rows' first value_dim,
// or values may be empty), into FromTokenMajor views like WriteKVSlots';
// a negative slot leaves its rows as they are.
SIMDATTN_API void ReadKVSlots(const KVPages& pages, const int64_t* slot_mapping,
                              Tensor4 keys, Tensor4 values);

// Copies the rows (bytes and scales, as stored) of slots from[i] to slots
// to[i], i < count, as if all were read before any is written: prefix
// sharing's copy-on-write, accepted tree drafts compacted into place. The
// targets must be distinct. CopyKVBlocks copies whole blocks (vLLM's
// copy_blocks). On error nothing is written.
SIMDATTN_API void CopyKVSlots(const KVPages& pages, const int64_t* from,
                              const int64_t* to, size_t count);
SIMDATTN_API void CopyKVBlocks(const KVPages& pages, const int32_t* from,
                               const int32_t* to, size_t count);

// Moving tokens between pools, caches and host memory (KVCache::Export and
// Import write and read the same format): `count` tokens' rows as stored,
// self-described. Version 1, little-endian:
//   bytes  0-7   "SIMDAKV" and a zero byte
//          8-11  format version (1)
//         12-15  element type (an ElementType's value)
//         16-19  flags: bit 0, latent (values are the key rows')
//         20-31  kv_heads, head_dim, value_dim (uint32 each)
//         32-39  tokens (uint64)
//         40-47  key_scale, value_scale (float32: fp8's; 1 otherwise)
//         48-55  payload bytes (uint64)
//         56-63  XXH3-64 (xxHash) of bytes 0-55 followed by the payload
// then, head by head and token by token within each, the key rows, the
// value rows (not when latent), int8's key scales and value scales (not
// when latent), as floats. An import checks every field against its target
// and refuses a mismatch naming both sides, a truncated buffer or a wrong
// checksum, changing nothing.
SIMDATTN_API size_t KVTransferBytes(const KVPages& pages, size_t count);
// Slots slots[0..count) (swapping blocks out: their slots) into buffer, of
// buffer_bytes >= KVTransferBytes(pages, count).
SIMDATTN_API void ExportKVSlots(const KVPages& pages, const int64_t* slots,
                                size_t count, void* buffer,
                                size_t buffer_bytes);
// A transfer of `count` tokens into slots[0..count) (distinct).
SIMDATTN_API void ImportKVSlots(const KVPages& pages, const int64_t* slots,
                                size_t count, const void* buffer,
                                size_t buffer_bytes);

}  // namespace simdattn

#endif  // SIMDATTN_KERNELS_H_
