// The shapes every simdattn benchmark measures, as the kernel issues list
// them, with the work one call does (FLOPs or bytes). Shared by the Google
// Benchmark binaries in bench/ and by `simdattn bench`, so that both measure
// and name the same things.
//
// A shape is written the way the tables print it: extents joined by 'x',
// then optional '_'-separated flags, e.g. "1024x64x1024_Bt" (a matmul with
// op(B) = B^T) or "1x12x1024x1024_causal" (a causal softmax).
#ifndef SIMDATTN_TOOLS_MEASURE_SHAPES_H_
#define SIMDATTN_TOOLS_MEASURE_SHAPES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "simdattn/kernels.h"

namespace simdattn {
namespace measure {

// C = A op(B): A is m x k, op(B) is k x n.
struct MatMulShape {
  size_t m = 0, k = 0, n = 0;
  // op(B) = B^T with B stored n x k (one head's Q K^T).
  bool transpose_b = false;
  ElementType b_storage = ElementType::kF32;  // Flags "_bf16", "_f16".
  // Flag "_cold": each call reads its own copy of B, the copies together
  // past any L3 (kColdBytes), as a model's decode step reads each layer's
  // weights from memory.
  bool cold = false;
  static constexpr size_t kColdBytes = size_t{256} << 20;
  // Flag "_bf16dot": bf16 arithmetic (MatMulOptions::compute).
  bool bf16dot = false;
  // Flag "_packed": B packed beforehand (PackedMatrix), outside the timing,
  // as an engine holds its weights; simdattn only.
  bool packed = false;
  // Flag "_abf16" (with "_packed"): A in bf16, converted outside the timing,
  // as an engine's bf16 activations (oneDNN's A is bf16 with "_bf16dot").
  bool a_bf16 = false;

  // "MxKxN", then "_Bt", "_bf16" or "_f16", "_cold", "_bf16dot", "_packed",
  // "_abf16".
  std::string Name() const;
  double Flops() const;  // 2 m n k.
};

// The attention variants a softmax or attention shape may add to its mask
// (kernels.h's AttentionMask), as flags in any order: "_windowW" (a query
// sees the last W keys up to its own position, so a window is causal),
// "_softcapC" (C a decimal, e.g. 50 or 30.5), "_sinks" (SinkLogits) and
// "_alibi" (kernels.h's AlibiSlopes). All off by default.
struct MaskVariants {
  size_t window = 0;
  float softcap = 0.0f;
  bool sinks = false;
  bool alibi = false;

  // "_windowW_softcapC_sinks_alibi", those that are on; "" when none is.
  std::string Name() const;
  bool Any() const { return window != 0 || softcap != 0.0f || sinks || alibi; }
  // Takes `flag` (without its '_') if it names a variant not yet on.
  bool Parse(const std::string& flag);
};

// The sink logits of "_sinks": 1, 0.5, 0, -0.5, -1, then again from 1.
std::vector<float> SinkLogits(size_t heads);

// The (query, key) pairs a mask keeps of `queries` rows against `keys`:
// query i sits at position p = i + offset and, when causal or windowed,
// sees keys j <= p, and with a window only j > p - window.
double VisiblePairs(size_t queries, size_t keys, size_t offset, bool causal,
                    size_t window);

// A (batch, heads, rows, cols) score tensor, softmax-ed or dropped out row
// by row over its last dimension.
struct ScoresShape {
  size_t batch = 0, heads = 0, rows = 0, cols = 0;
  bool causal = false;         // Softmax only: row i keeps columns j <= i.
  MaskVariants variants = {};  // Softmax only.

  // "BxHxRxC", then "_causal" and the variants.
  std::string Name() const;
  size_t Elements() const;
  // Bytes read + written by one softmax: a row reads only the columns it
  // sees (VisiblePairs; the rest need no exp) but writes every column.
  double SoftmaxBytes() const;
  // Bytes read + written by one in-place dropout.
  double DropoutBytes() const;
};

// The useful FLOPs of attention's two products, Q K^T and P V, for `heads`
// heads of `queries` queries against `keys` keys, head_dim wide: 4 head_dim
// per (query, key) pair a query sees. Causal: query i sees keys
// j <= i + keys - queries (the library's causal_offset), diagonal included,
// so causal prefill counts T (T + 1) / 2 pairs, about half of T x T, and a
// decode query all its keys. A window W > 0 (causal too) keeps the last W
// of those: about T W pairs. Every FLOP rate of attention (the attention
// op, MultiHeadAttention, `simdattn demo`) counts with it, so that none can
// exceed the FMA peak by counting masked work.
double AttentionFlops(size_t batch, size_t heads, size_t queries, size_t keys,
                      size_t head_dim, bool causal, size_t window = 0);

// MultiHeadAttention forward: causal, eval, no qkv bias, out_proj.
struct MhaShape {
  size_t batch = 0, tokens = 0, d_in = 0, d_out = 0, heads = 0;
  // ForwardStep of token T with T - 1 in a KV cache (_step), instead of
  // Forward over T; projection weights kept in bf16 (_bf16).
  bool step = false;
  bool bf16 = false;
  bool bf16dot = false;  // bf16 arithmetic (ForwardOptions::compute).

  // "BxTxDxH" when d_in == d_out, else "BxTxDINxDOUTxH"; then the flags.
  std::string Name() const;
  // Useful FLOPs: Q, K, V and output projections (2 per multiply-add), then
  // causal attention's AttentionFlops (a step: one query's).
  double Flops() const;
};

// Fused attention, ScaledDotProductAttention: `heads` query heads sharing
// kv_heads key/value heads, head_dim for Q, K and V. Prefill: `tokens`
// queries against as many keys. Decode: `queries` new queries per sequence
// (1; chunked prefill or verification with _qN), the last of a cache of
// `tokens` keys (causal, or with a window the last W).
struct AttentionShape {
  size_t batch = 0, heads = 0, kv_heads = 0, tokens = 0, head_dim = 0;
  bool causal = false;   // Prefill: query i sees keys j <= i.
  bool dropout = false;  // Prefill: dropout 0.1 on the weights.
  bool decode = false;
  MaskVariants variants = {};
  // Decode: keys and values in a KVCache of this type, paged in blocks of
  // `page` tokens when nonzero (_kv<type>, _pagedN).
  KVType cache = KVType::kF32;
  size_t page = 0;
  bool rope = false;  // Append: keys rotated on the way in (_rope).
  // Decode: each call reads its own copy of the cache, the copies together
  // past any L3 (MatMulShape::kColdBytes), as a model's step reads each
  // layer's cache from memory (_cold).
  bool cold = false;
  // Decode: a latent (MLA) cache whose values are the first `mla` dims of
  // each key row (_mlaN, N < head_dim; 0: values of their own).
  size_t mla = 0;
  // bf16 arithmetic (AttentionOptions::compute, _bf16dot); over a cache,
  // a bf16 or fp8 one.
  bool bf16dot = false;
  // Decode over a cache of integer codes (ElementTraits::int8_scores) with
  // at most 4 query rows per
  // key/value head and sequence: kInt8 scores (_int8dot).
  bool int8dot = false;
  size_t queries = 1;  // Decode: queries per sequence (_qN, N <= tokens).

  size_t QueryTokens() const { return decode ? queries : tokens; }
  bool InCache() const {
    return cache != KVType::kF32 || page != 0 || cold || mla != 0;
  }
  size_t ValueDim() const { return mla != 0 ? mla : head_dim; }
  // "BxHxTxD", then "_kvN" when kv_heads != heads, "_causal", "_dropout",
  // the variants and the cache.
  std::string Name() const;
  // AttentionFlops: causal prefill counts about half of non-causal, a
  // window W about T W pairs.
  double Flops() const;
  // Decode is memory-bound: bytes of K and V read (the window's keys only,
  // in the cache's type, int8 with its scales; a latent cache's one row per
  // token) plus Q read and out written.
  double Bytes() const;
  // Appending every token to a cache: float K and V read, then written in
  // the cache's type (int8 with its scales).
  double AppendBytes() const;
};

// The issues' shapes: square matmuls 64..2048, GPT-2-small projections,
// one head of attention at T = 1024 and the seeds' 6x3x2 toy.
const std::vector<MatMulShape>& StandardMatMulShapes();
// 12 heads of one 1024-token sequence and a batch of 8 of 256 tokens,
// unmasked then causal.
const std::vector<ScoresShape>& StandardSoftmaxShapes();
// The softmax tensors, unmasked (dropout has no mask).
const std::vector<ScoresShape>& StandardDropoutShapes();
// GPT-2 small at 1024 tokens and at a batch of 8 x 256, a 1024-wide 16-head
// model at 4 x 1024, and the seeds' toy (2 x 6 tokens, 3 -> 2, 2 heads).
const std::vector<MhaShape>& StandardMhaShapes();

// Prefill (B, H, T, D) causal and not at (1,12,1024,64), (8,12,256,64),
// (1,12,4096,64), (1,25,1024,64), with dropout 0.1 at the first, and
// Llama-style grouped-query (1, 32 q / 8 kv, 2048, 128).
const std::vector<AttentionShape>& StandardAttentionShapes();
// Decode with 12 heads of 64 against caches of 1024 and 4096, at b = 1, 8,
// and Llama-3-8B's grouped layout (32 query heads, 8 of K/V, 128) at 4096.
const std::vector<AttentionShape>& StandardDecodeShapes();

// Parse the Name() syntax; throw std::invalid_argument naming the text and
// the expected form for anything else (zero extents included).
MatMulShape ParseMatMulShape(const std::string& text);
// allow_mask: softmax, whose shapes take _causal and the variants.
ScoresShape ParseScoresShape(const std::string& text, bool allow_mask);
MhaShape ParseMhaShape(const std::string& text);
// One serving step (the serve op): groups of sequences, each of `context`
// cached tokens plus its new ones, that decode one token ('d'), prefill a
// chunk ('p') or verify draft tokens ('v'), heads query heads over kv_heads
// of head_dim, all in one paged cache of the `cache` type; one
// VarlenAttention call, or with `separate` one call per group, or with
// `planned` a layer's call of a VarlenPlan made once (the step's metadata
// checked outside the timed calls, as an engine's layers share it).
struct ServeShape {
  struct Group {
    char kind;  // 'd', 'p' or 'v'.
    size_t sequences, tokens;
  };
  size_t heads = 0, kv_heads = 0, head_dim = 0, context = 0;
  std::vector<Group> groups;
  MaskVariants variants = {};
  KVType cache = KVType::kF32;
  size_t page = 16;
  bool separate = false;
  bool planned = false;
  // Verifying sequences attend to their drafts as a binary tree (draft i's
  // parent is (i - 1) / 2) through the mask's tree bits, not causally.
  bool tree = false;

  size_t Sequences() const;
  size_t QueryTokens() const;  // In all.
  size_t Capacity() const;     // context + the longest group's tokens.
  // "HxGxD_ctxN", the groups ("_d28_p2x512_v2x5"), variants, cache, page.
  std::string Name() const;
  // AttentionFlops of every sequence, causal.
  double Flops() const;
};

// Decode shapes take the _kvN flag and the variants.
AttentionShape ParseAttentionShape(const std::string& text, bool decode);
// HxGxD_ctxN with groups _dS (S sequences decoding), _pSxT (S prefilling T
// tokens), _vSxT (S verifying T), the variants, _tree, _kv<type>, _pagedN
// and _separate or _planned.
ServeShape ParseServeShape(const std::string& text);
// BxHxNxD (H key/value heads, N tokens per sequence) with the cache's flags
// and _rope.
AttentionShape ParseAppendShape(const std::string& text);

}  // namespace measure
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_MEASURE_SHAPES_H_
