// The attention modules of the seed notebooks (chapter 3 of "Build a Large
// Language Model (From Scratch)"), with PyTorch's semantics and state_dict
// names, built from the primitives in kernels.h:
//
//   SimplifiedSelfAttention   softmax(X X^T) X, no weights
//   SelfAttentionV1           W_query/W_key/W_value as (d_in, d_out) parameters
//   SelfAttentionV2           nn.Linear projections (d_out, d_in), qkv_bias
//   CausalAttention           batched, causal mask, dropout on the weights
//   MultiHeadAttentionWrapper num_heads CausalAttention heads, concatenated
//   MultiHeadAttention        d_out split into heads, out_proj; grouped-query
//   MlaAttention              DeepSeek's latent attention (not of the seeds)
//
// Inputs and outputs are (batch, tokens, features) views of caller memory.
// Forward is const and may run concurrently on one module; it allocates only
// the first time it sees a shape (scratch is pooled).
#ifndef SIMDATTN_ATTENTION_H_
#define SIMDATTN_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "simdattn/element.h"
#include "simdattn/export.h"
#include "simdattn/kernels.h"
#include "simdattn/tensor.h"

namespace simdattn {

// A tensor of a PyTorch state_dict in caller memory: row-major, contiguous,
// elements of `dtype` (float, BFloat16 or Float16) at data.
struct TensorRef {
  const void* data = nullptr;
  std::vector<size_t> shape;
  DType dtype = DType::kF32;  // kF32, kBF16 or kF16.
};
// Keyed by PyTorch's names ("W_query.weight", "heads.0.mask", ...).
using StateDict = std::map<std::string, TensorRef>;

struct ForwardOptions {
  // nn.Module.train(): dropout on the attention weights. Eval leaves them.
  bool training = false;
  // Which dropout draw (see Dropout); advance the offset every step.
  DropoutKey dropout_key;
  // Optional output: the attention weights (batch, heads, tokens, tokens)
  // after the softmax (and dropout, in training), as the seeds print them.
  // float32 arithmetic only.
  Tensor4 attention_weights;
  // kBFloat16: the projections and attention in bf16 arithmetic (MatMul's
  // and ScaledDotProductAttention's kBFloat16); ForwardStep then needs a
  // bf16 or fp8 cache. The first such call on a target packs the projections
  // for it (a PackedMatrix per matrix, 2 bytes per weight, kept until the
  // weights change). kInt8 (ForwardStep over a q8_0, q4_0 or int8 cache):
  // float32 projections, attention's kInt8 scores.
  ComputeType compute = ComputeType::kFloat32;
};

// The attention of current models in a causal module (MultiHeadAttention);
// kernels.h's AttentionMask defines each. Zero or false: off.
struct AttentionVariants {
  size_t window = 0;     // Sliding window: each token sees the last `window`.
  float softcap = 0.0f;  // Logit softcap (Gemma 2), finite, >= 0.
  bool alibi = false;    // ALiBi biases with AlibiSlopes(num_heads).
  // A learned sink logit per head (gpt-oss): the state_dict's "sinks",
  // (num_heads,), initially 0.
  bool sinks = false;
};

// Everything that distinguishes the seed modules; the named classes below
// fill it in. Most users never touch it.
struct AttentionConfig {
  size_t d_in = 0;
  size_t num_heads = 1;
  size_t num_kv_heads = 1;  // Divides num_heads: grouped-query attention.
  size_t head_dim = 0;
  size_t context_length = 0;  // Longest sequence accepted; 0: unbounded.
  float dropout = 0.0f;
  bool qkv_bias = false;
  bool causal = false;
  // A final nn.Linear from d_out to out_features (0: d_out), with a bias
  // if out_bias.
  bool out_proj = false;
  bool projections = true;  // false: queries = keys = values = input.
  bool scaled = true;       // Scores scaled by 1/sqrt(head_dim).
  AttentionVariants variants;
  // Rotary embeddings of queries and keys, each token at its position
  // (rope->positions must be null).
  std::optional<RopeOptions> rope;
  size_t out_features = 0;
  bool out_bias = true;
  size_t d_out() const { return num_heads * head_dim; }
  // The features of the module's output.
  size_t y_features() const {
    return out_proj && out_features != 0 ? out_features : d_out();
  }
};

struct LoadOptions {
  // Keeps bf16 or fp16 projection matrices in their type (half the bytes;
  // the products widen them exactly in registers, so results are those of
  // the widened weights). All of them must then share one type.
  bool keep_dtype = false;
};

class AttentionEngine;
namespace internal {
enum class StateDictLayout : int;  // Each seed module's state_dict naming.
}  // namespace internal

// How a KVCache stores its tokens.
struct KVCacheConfig {
  KVType type = KVType::kF32;  // kernels.h states each type's error.
  // 0: contiguous, `capacity` tokens reserved per sequence. Otherwise paged:
  // blocks of block_size tokens (a power of two, 16 to 256) taken from one
  // pool as sequences grow, and given back when they shrink. The pool keeps
  // each kv head's rows of all blocks together (View()'s head_stride spans
  // the pool): decode reads a head's blocks taken in order as one stream.
  size_t block_size = 0;
  // Paged: blocks in the pool; 0: enough for every sequence's capacity.
  size_t num_blocks = 0;
  // Rotates keys as they are appended, each token at its position in its
  // sequence (rope->positions must be null).
  std::optional<RopeOptions> rope;
  // Elements per value row; 0: head_dim (MLA's prefill form: keys of 192,
  // values of 128). Values are stored with the keys' row length, the longer.
  size_t value_dim = 0;
  // Values are the first value_dim elements of each key row (MLA's latent
  // cache: rows [c_kv | k_rope], c_kv serving as the value; value_dim <
  // head_dim): one row per token, written by Append's keys, whose values
  // must then be empty (ConstTensor4{}). int8 rows keep one scale for both.
  bool latent = false;
  // fp8 caches: keys are stored as key / key_scale, values as value /
  // value_scale (finite, > 0; a latent cache's rows use key_scale).
  float key_scale = 1.0f, value_scale = 1.0f;
  // Paged caches of a layer with a sliding window (mask.window <= window):
  // an append returns to the pool the blocks that none of its tokens, nor
  // any later one, can see, so a sequence holds at most window +
  // block_size + n - 1 tokens after an append of n, however long it grows
  // (positions keep counting). Attention then reads the queries of the last
  // append with mask.window <= window; Read, Export and Truncate reach the
  // held tokens only. Size num_blocks for window + block_size + the longest
  // append per sequence. 0: keep every token.
  size_t window = 0;
};

// The keys and values of the tokens seen so far, for one attention layer:
// `batch` sequences of kv_heads x head_dim keys and values per token, each
// sequence its own length (up to `capacity`). Attention reads them where
// they lie (View(), ScaledDotProductAttention). The cache owns its memory,
// or uses the caller's float (batch, kv_heads, capacity, head_dim) tensors.
// batch <= 2^24.
class SIMDATTN_API KVCache {
 public:
  KVCache(size_t batch, size_t kv_heads, size_t capacity, size_t head_dim,
          const KVCacheConfig& config = {});
  // Uses the caller's (batch, kv_heads, capacity, head_dim) float tensors,
  // contiguous layout, which must have the same dims, not overlap, and
  // outlive the cache.
  KVCache(Tensor4 keys, Tensor4 values);
  KVCache(KVCache&&) noexcept;
  KVCache& operator=(KVCache&&) noexcept;
  ~KVCache();
  KVCache(const KVCache&) = delete;  // Would alias or copy caller memory.
  KVCache& operator=(const KVCache&) = delete;

  // Appends n tokens' keys and values, (batch, kv_heads, n, head_dim) and
  // (batch, kv_heads, n, value_dim) views (e.g. a projection's output, in
  // place), to every sequence. Throws,
  // changing nothing, if they do not fit.
  void Append(ConstTensor4 keys, ConstTensor4 values);
  // Appends keys[s] and values[s] (s < keys.dims[0]) to the distinct
  // sequences[s].
  void Append(ConstTensor4 keys, ConstTensor4 values,
              const std::vector<size_t>& sequences);
  // Keeps a sequence's first `length` tokens (rolling back rejected
  // speculative tokens); length <= its length.
  void Truncate(size_t sequence, size_t length);
  // Empties one sequence, or all (the memory stays).
  void Reset(size_t sequence) { Truncate(sequence, 0); }
  void Clear();
  // Sequence dst becomes a copy of sequence src (a shared prefix). Paged,
  // dst shares src's blocks until one of them appends to a shared block.
  void Copy(size_t src, size_t dst);
  // Sequence b becomes what sequence order[b] was, for every b (beam search:
  // order may repeat or drop sequences). order.size() == batch().
  void Reorder(const std::vector<size_t>& order);

  // Moving a sequence (prefill on one worker and decode on another, offload
  // to host memory, a prefix cache, caller-owned pages): its tokens [first,
  // first + count) as the cache stores them, in kernels.h's transfer format
  // (a self-describing header with a checksum, then the rows; ImportKVSlots
  // reads it into pages, ExportKVSlots writes it from them), into
  // ExportBytes(count) bytes at `buffer`.
  size_t ExportBytes(size_t count) const;
  void Export(size_t sequence, size_t first, size_t count, void* buffer) const;
  // Appends the `count` tokens of a transfer at `buffer` (ExportBytes(count)
  // bytes readable) exported by a cache or pages of the same type, kv_heads,
  // head_dim, value_dim, latent and fp8 scales (any layout) to `sequence`:
  // attention over them then gives the bits it gave over the source. Keys
  // keep the rotation they were stored with. Throws, changing nothing, if
  // the header differs (naming both sides), the checksum fails or they do
  // not fit.
  void Import(size_t sequence, const void* buffer, size_t count);

  // Where the tokens lie, for ScaledDotProductAttention; valid until the
  // next change to the cache.
  KVCacheView View() const;
  // A sequence's keys and values as attention sees them (widened or
  // dequantized to float): (kv_heads, length(sequence), head_dim) and
  // (kv_heads, length(sequence), value_dim).
  void Read(size_t sequence, Tensor3 keys, Tensor3 values) const;

  size_t length(size_t sequence) const;
  // The longest sequence's length.
  size_t size() const;
  size_t capacity() const { return capacity_; }
  size_t batch() const { return batch_; }
  size_t kv_heads() const { return kv_heads_; }
  size_t head_dim() const { return head_dim_; }
  size_t value_dim() const { return value_dim_; }
  const KVCacheConfig& config() const { return config_; }
  // Float contiguous caches only: (batch, kv_heads, size(), head_dim or
  // value_dim) views; tokens past a shorter sequence's length are stale.
  ConstTensor4 keys() const;
  ConstTensor4 values() const;

 private:
  struct Storage;
  // Throws (naming `function`) unless the keys are (count, kv_heads, n,
  // head_dim) views and the values (count, kv_heads, n, value_dim) ones, or
  // empty in a latent cache.
  void CheckTokens(const char* function, ConstTensor4 keys, ConstTensor4 values,
                   size_t count) const;
  // Both Appends: keys[i] to sequences[i], or to sequence i when sequences
  // is null (count = batch).
  void AppendTo(ConstTensor4 keys, ConstTensor4 values, const size_t* sequences,
                size_t count);
  // Checks that n more tokens fit in each listed sequence (as AppendTo
  // lists them), then takes their blocks; lengths stay. Returns the longest
  // length after them.
  size_t Reserve(const char* function, const size_t* sequences, size_t count,
                 size_t n);

  size_t batch_ = 0, kv_heads_ = 0, capacity_ = 0, head_dim_ = 0;
  size_t value_dim_ = 0;
  KVCacheConfig config_;
  std::unique_ptr<Storage> storage_;
};

// The common implementation of the modules: projections, scores, masked
// softmax, dropout, weights @ values, output projection.
class SIMDATTN_API AttentionModule {
 public:
  AttentionModule(AttentionModule&&) noexcept;
  AttentionModule& operator=(AttentionModule&&) noexcept;
  ~AttentionModule();

  // x: (batch, tokens, d_in); y: (batch, tokens, y features), not
  // overlapping x: d_out, or d_in for a kLlama MultiHeadAttention.
  void Forward(ConstTensor3 x, Tensor3 y,
               const ForwardOptions& options = {}) const;
  // A single sequence (tokens, d_in) -> (tokens, y features).
  void Forward(ConstMatrix x, Matrix y,
               const ForwardOptions& options = {}) const;
  // Generation: x holds the next n tokens (batch, n, d_in) of sequences
  // whose earlier tokens are in `cache` (batch, num_kv_heads, capacity,
  // head_dim). Appends their keys and values to the cache and writes their
  // outputs to y (batch, n, y features): the same rows a causal Forward over
  // the whole sequence gives. Causal modules with projections, eval mode.
  void ForwardStep(ConstTensor3 x, KVCache& cache, Tensor3 y,
                   const ForwardOptions& options = {}) const;
  // A continuous-batching step: x (num_tokens, d_in) packs the new tokens of
  // step.num_seqs sequences, any number each (prefill chunks, decodes,
  // verifications; 0 skips a sequence). Stores their keys and values in
  // `pages` (rotated at their positions where the module has rope), then
  // attends each sequence's new tokens over its tokens as VarlenAttention
  // does (causal from their positions, the module's variants), and writes y
  // (num_tokens, y features): the rows ForwardStep over a KVCache holding
  // the same tokens gives, up to the order of summation. Causal modules with
  // projections, eval mode; the pages are not latent and hold the module's
  // kv heads and head_dim (bf16 or fp8 for options.compute kBFloat16).
  // On error nothing is written.
  void ForwardStep(ConstMatrix x, const VarlenStep& step, const KVPages& pages,
                   Matrix y, const ForwardOptions& options = {}) const;

  // Copies the weights from a state_dict with PyTorch's names and shapes,
  // strictly: a missing, unexpected or misshapen tensor is an error naming it.
  // A causal mask buffer, if given, must be the usual triu(ones, 1). 16-bit
  // tensors are widened to float exactly, unless options.keep_dtype.
  void LoadStateDict(const StateDict& state_dict,
                     const LoadOptions& options = {});
  // The type the projection matrices are held in, and the bytes of every
  // weight (biases and sinks are always float; packed forms not counted).
  DType weight_dtype() const;
  size_t weight_bytes() const;
  // The names and shapes LoadStateDict expects (buffers included).
  std::map<std::string, std::vector<size_t>> StateDictShapes() const;
  // The names among StateDictShapes() that are buffers (the causal masks,
  // derived from the config): LoadStateDict accepts their absence.
  std::vector<std::string> StateDictBuffers() const;
  // Initialises the weights as PyTorch does (nn.Linear: U(-1/sqrt(in),
  // 1/sqrt(in)); nn.Parameter(torch.rand): U(0, 1)) from a seed. The values
  // differ from PyTorch's (another generator); the distribution does not.
  void InitializeWeights(uint64_t seed);

  const AttentionConfig& config() const;

 protected:
  // `name` (a string literal) starts every error message.
  AttentionModule(const char* name, const AttentionConfig& config,
                  internal::StateDictLayout layout, uint64_t seed);

 private:
  std::unique_ptr<AttentionEngine> engine_;
};

// softmax(X X^T) X: the seeds' first step, without trainable weights.
class SIMDATTN_API SimplifiedSelfAttention : public AttentionModule {
 public:
  explicit SimplifiedSelfAttention(size_t d_in);
};

// SelfAttention_v1: nn.Parameter(torch.rand(d_in, d_out)) projections.
class SIMDATTN_API SelfAttentionV1 : public AttentionModule {
 public:
  SelfAttentionV1(size_t d_in, size_t d_out, uint64_t seed = 0);
};

// SelfAttention_v2: nn.Linear(d_in, d_out, bias=qkv_bias) projections.
class SIMDATTN_API SelfAttentionV2 : public AttentionModule {
 public:
  SelfAttentionV2(size_t d_in, size_t d_out, bool qkv_bias = false,
                  uint64_t seed = 0);
};

// CausalAttention: batched, causal, dropout on the attention weights. Here
// and in the modules below, context_length 0 accepts any number of tokens
// and has no causal "mask" buffer in the state_dict.
class SIMDATTN_API CausalAttention : public AttentionModule {
 public:
  CausalAttention(size_t d_in, size_t d_out, size_t context_length,
                  float dropout, bool qkv_bias = false, uint64_t seed = 0);
};

// MultiHeadAttentionWrapper: num_heads CausalAttention modules of d_out each,
// outputs concatenated: (batch, tokens, num_heads * d_out).
class SIMDATTN_API MultiHeadAttentionWrapper : public AttentionModule {
 public:
  MultiHeadAttentionWrapper(size_t d_in, size_t d_out, size_t context_length,
                            float dropout, size_t num_heads,
                            bool qkv_bias = false, uint64_t seed = 0);
};

// The names of a MultiHeadAttention's state_dict.
enum class WeightNames : int {
  // The seed's: W_query, W_key, W_value (.weight, .bias with qkv_bias),
  // out_proj.weight (d_out, d_out) and out_proj.bias, the causal "mask"
  // buffer with a context_length; y has d_out features.
  kSeed = 0,
  // Hugging Face's llama-style attention layers (LlamaAttention,
  // MistralAttention, Qwen2Attention, ...): q_proj, k_proj, v_proj (.weight,
  // .bias with qkv_bias: Qwen2), o_proj.weight (d_in, d_out) and o_proj.bias
  // with out_bias; no buffers. o_proj maps back to d_in (hidden_size): y has
  // d_in features. d_out is num_heads * head_dim (HF's head_dim need not be
  // hidden_size / num_heads).
  kLlama = 1,
};

// What a MultiHeadAttention is: the seed's constructor arguments, then what
// current models add. Fields are only ever appended.
struct MultiHeadAttentionConfig {
  size_t d_in = 0;
  size_t d_out = 0;  // num_heads heads of d_out / num_heads.
  // Longest sequence accepted; 0: unbounded (and no causal "mask" buffer in
  // the state_dict).
  size_t context_length = 0;
  float dropout = 0.0f;  // On the attention weights, in training.
  size_t num_heads = 1;
  bool qkv_bias = false;
  // < num_heads shares each key/value head among num_heads / num_kv_heads
  // query heads (GQA/MQA); W_key and W_value are then (num_kv_heads *
  // head_dim, d_in). 0: num_heads.
  size_t num_kv_heads = 0;
  // Sliding windows, softcapping, ALiBi and sinks, in Forward and
  // ForwardStep.
  AttentionVariants variants;
  // Initial weights drawn from PyTorch's distributions with this seed.
  uint64_t seed = 0;
  // Rotary embeddings (Llama, Mistral, Qwen, ...): queries and keys rotated
  // after the projections, token t of a sequence at position t; in
  // ForwardStep at its position in the cache. rope->positions must be null.
  // The cache may rotate the keys itself on append (KVCacheConfig::rope,
  // then the same options) or not (the module rotates them).
  std::optional<RopeOptions> rope;
  WeightNames weight_names = WeightNames::kSeed;
  // kLlama: o_proj has a bias (HF's attention_bias, which gives q, k and v
  // theirs too: set qkv_bias). The seed's out_proj always has one.
  bool out_bias = false;
};

// MultiHeadAttention: d_out split into num_heads heads of d_out / num_heads,
// then out_proj (MultiHeadAttentionConfig says the rest).
class SIMDATTN_API MultiHeadAttention : public AttentionModule {
 public:
  explicit MultiHeadAttention(const MultiHeadAttentionConfig& config);
  // The seed's constructor: MultiHeadAttention(d_in, d_out, context_length,
  // dropout, num_heads, qkv_bias).
  MultiHeadAttention(size_t d_in, size_t d_out, size_t context_length,
                     float dropout, size_t num_heads, bool qkv_bias = false);
};

// DeepSeek-V2/V3's Multi-head Latent Attention, as Hugging Face's
// DeepseekV2Attention defines it (no yarn scaling): queries q_proj(x), or
// q_b_proj(RMSNorm(q_a_proj(x))); a latent row per token, [RMSNorm(c_kv) |
// rotated k_pe] from kv_a_proj_with_mqa(x); per head a key [W_UK c | k_pe]
// and a value W_UV c through kv_b_proj; scores scaled by 1 / sqrt(nope +
// rope), causal; o_proj back to hidden_size. RoPE rotates the rope dims as
// interleaved pairs (HF's permute-then-rotate_half). It runs in the absorbed
// form: each head's query becomes [W_UK^T q_nope | q_pe] over the latent
// rows, whose first kv_lora_rank elements serve as values, and W_UV applies
// after: one latent row of kv_lora_rank + qk_rope_head_dim elements per
// token is cached (LatentCacheConfig). Forward is const and may run
// concurrently; steps allocate nothing once warm.
struct MlaConfig {
  size_t hidden_size = 0;
  size_t num_heads = 0;
  // 0: q_proj (DeepSeek-V2-Lite); else q_a_proj, q_a_layernorm, q_b_proj.
  size_t q_lora_rank = 0;
  size_t kv_lora_rank = 512;
  size_t qk_nope_head_dim = 128;
  size_t qk_rope_head_dim = 64;
  size_t v_head_dim = 128;
  float rope_theta = 10000.0f;
  // q_a_layernorm's and kv_a_layernorm's epsilon (HF builds both with the
  // default 1e-6, whatever the model's config says).
  float rms_norm_eps = 1e-6f;
  // Initial weights drawn from PyTorch's distributions with this seed.
  uint64_t seed = 0;
};

class SIMDATTN_API MlaAttention {
 public:
  explicit MlaAttention(const MlaConfig& config);
  MlaAttention(MlaAttention&&) noexcept;
  MlaAttention& operator=(MlaAttention&&) noexcept;
  ~MlaAttention();

  // Hugging Face's names and shapes (nn.Linear's (out, in)): q_proj.weight
  // or q_a_proj.weight, q_a_layernorm.weight, q_b_proj.weight;
  // kv_a_proj_with_mqa.weight, kv_a_layernorm.weight, kv_b_proj.weight,
  // o_proj.weight; f32, bf16 or f16 (widened). Strict, as the other
  // modules' loads: on error no weight changes.
  void LoadStateDict(const StateDict& state_dict);
  std::map<std::string, std::vector<size_t>> StateDictShapes() const;

  // The latent cache a KVCache or a caller's pages hold for it: head_dim
  // kv_lora_rank + qk_rope_head_dim, value_dim kv_lora_rank, latent, keys
  // rotated on append (interleaved, the last qk_rope_head_dim dims).
  KVCacheConfig LatentCacheConfig(KVType type = KVType::kF32) const;
  size_t latent_dim() const;

  // x (batch, tokens, hidden_size) -> y likewise, not overlapping x: each
  // sequence causal from position 0. Eval only (options.compute applies).
  void Forward(ConstTensor3 x, Tensor3 y,
               const ForwardOptions& options = {}) const;
  // Generation over a cache of LatentCacheConfig (any type; without its
  // rope, the module rotates the keys): the next n tokens (batch, n,
  // hidden_size) appended and attended, the rows Forward over the whole
  // sequences gives.
  void ForwardStep(ConstTensor3 x, KVCache& cache, Tensor3 y,
                   const ForwardOptions& options = {}) const;
  // A continuous-batching step over latent pages (values == keys, head_dim
  // latent_dim(), value_dim kv_lora_rank): x (num_tokens, hidden_size)
  // packs the step's new tokens (kernels.h's VarlenStep: positions, draft
  // trees); their latent rows are written rotated (one pass) and attended.
  // On a bad argument nothing is written.
  void ForwardStep(ConstMatrix x, const VarlenStep& step, const KVPages& pages,
                   Matrix y, const ForwardOptions& options = {}) const;

  const MlaConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace simdattn

#endif  // SIMDATTN_ATTENTION_H_
