// AttentionModule: the seed modules as one pipeline of primitives.
//
//   qkv     = x W_qkv^T + b_qkv          one MatMul for Q, K and V together
//   scores  = scale * Q K^T              BatchedMatMul over (batch, head)
//   weights = softmax(scores | mask)     Softmax, causal mask fused
//   weights = dropout(weights)           training only
//   context = weights V                  written straight into (b, T, h*hd)
//   y       = context W_out^T + b_out    MultiHeadAttention only
//
// Heads are strided views into the projection buffers: no head is copied.
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hwy/base.h"
#include "simdattn/attention.h"
#include "src/attention/state_dict.h"
#include "src/common/check.h"
#include "src/common/scratch.h"
#include "src/ops/kv_pool.h"
#include "src/ops/kv_rows.h"
#include "src/ops/mask.h"
#include "src/ops/rope.h"

namespace simdattn {

namespace {

using internal::AlignedVector;
using internal::CheckedMul;
using internal::Footprint;
using internal::ModuleWeights;
using internal::ScratchBuffer;
using internal::Slot;
using internal::StateDictLayout;

}  // namespace

class AttentionEngine {
 public:
  AttentionEngine(const char* name, const AttentionConfig& config,
                  StateDictLayout layout)
      : name_(name), config_(config), layout_(layout) {
    Validate();
    // Every size derived from the config must fit in size_t (a wrapped
    // product would size the weights below what the views reach) and in a
    // std::vector (else std::length_error, not an argument error).
    const size_t q = CheckedMul(name_, "num_heads * head_dim",
                                config_.num_heads, config_.head_dim);
    const size_t kv2 =
        CheckedMul(name_, "2 * num_kv_heads * head_dim", 2,
                   CheckedMul(name_, "num_kv_heads * head_dim",
                              config_.num_kv_heads, config_.head_dim));
    size_t qkv_rows = 0;
    SIMDATTN_REQUIRE(!__builtin_add_overflow(q, kv2, &qkv_rows), name_,
                     "the Q, K, V rows overflow size_t (", q, " + ", kv2, ")");
    if (config_.projections) {
      weights_.w_qkv.Assign(Floats("the QKV weights", qkv_rows, config_.d_in));
      if (config_.qkv_bias) weights_.b_qkv.assign(qkv_rows, 0.0f);
    }
    if (config_.out_proj) {
      weights_.w_out.Assign(Floats("out_proj", config_.y_features(), q));
      if (config_.out_bias) weights_.b_out.assign(config_.y_features(), 0.0f);
    }
    if (config_.variants.sinks) weights_.sinks.assign(config_.num_heads, 0.0f);
    if (config_.variants.alibi) alibi_slopes_ = AlibiSlopes(config_.num_heads);
  }

  const AttentionConfig& config() const { return config_; }

  // The state_dict's tensors, pointing into this engine's float weights.
  std::vector<Slot> Slots() {
    return internal::StateDictSlots(layout_, config_, &weights_);
  }
  // Their names and shapes.
  std::vector<Slot> SlotShapes() const {
    return internal::StateDictSlots(layout_, config_, nullptr);
  }
  void LoadStateDict(const StateDict& state_dict, const LoadOptions& options) {
    DType kept = DType::kF32;
    if (options.keep_dtype) kept = ProjectionType(state_dict);
    const DType held = weights_.w_qkv.type();
    Widen();
    try {
      internal::LoadSlots(name_, Slots(), state_dict);
    } catch (...) {  // Unchanged weights, held as they were.
      if (held != DType::kF32) Narrow(held);
      throw;
    }
    if (kept != DType::kF32) Narrow(kept);
  }
  void InitializeWeights(uint64_t seed) {
    Widen();
    internal::InitializeSlots(Slots(), seed);
  }
  DType weight_dtype() const { return weights_.w_qkv.type(); }
  size_t weight_bytes() const {
    const ModuleWeights& w = weights_;
    return w.w_qkv.bytes() + w.w_out.bytes() +
           (w.b_qkv.size() + w.b_out.size() + w.sinks.size()) * sizeof(float);
  }

  void Forward(ConstTensor3 x, Tensor3 y, const ForwardOptions& options) const;
  void ForwardStep(ConstTensor3 x, KVCache& cache, Tensor3 y,
                   const ForwardOptions& options) const;
  void ForwardStep(ConstMatrix x, const VarlenStep& step, const KVPages& pages,
                   Matrix y, const ForwardOptions& options) const;

 private:
  size_t q_dim() const { return config_.num_heads * config_.head_dim; }
  size_t kv_dim() const { return config_.num_kv_heads * config_.head_dim; }
  size_t qkv_width() const { return q_dim() + 2 * kv_dim(); }
  float ScoreScale() const {
    return config_.scaled
               ? 1.0f / std::sqrt(static_cast<float>(config_.head_dim))
               : 1.0f;
  }

  // Checks x (batch, tokens, d_in) against y (batch, tokens, d_out): shapes,
  // views, y's elements distinct (tokens and batch items are written
  // concurrently) and not overlapping x. `total_tokens`, the sequence length
  // including any cached tokens, is held to the context length. Returns the
  // byte ranges of x and y.
  std::pair<Footprint, Footprint> CheckInputOutput(ConstTensor3 x, Tensor3 y,
                                                   size_t total_tokens) const;

  // The scratch a forward over (batch, tokens) needs, in floats, computed
  // with overflow checks before anything is allocated.
  struct ScratchSizes {
    size_t qkv, context;
  };
  ScratchSizes CheckedScratchSizes(size_t batch, size_t tokens) const;

  // Where the attention context goes, as (batch, heads, tokens, head_dim):
  // laid out (batch, tokens, heads * head_dim) like torch's
  // transpose(1, 2).view(b, T, d_out), in `buffer` when out_proj follows,
  // else in y itself.
  Tensor4 ContextView(float* buffer, Tensor3 y) const {
    const AttentionConfig& c = config_;
    if (c.out_proj) {
      return Tensor4::FromTokenMajor(buffer, y.batch, y.tokens, c.num_heads,
                                     c.head_dim);
    }
    return Tensor4(y.data, y.batch, c.num_heads, y.tokens, c.head_dim,
                   y.batch_stride, c.head_dim, y.token_stride);
  }

  // The dtype of the projection matrices in a state_dict (kF32 if any is
  // float); an error if they mix 16-bit types.
  DType ProjectionType(const StateDict& state_dict) const {
    DType type = DType::kF32;
    bool first = true;
    for (const Slot& slot : SlotShapes()) {
      if (slot.kind != Slot::Kind::kWeight &&
          slot.kind != Slot::Kind::kTransposedWeight) {
        continue;
      }
      const auto it = state_dict.find(slot.name);
      if (it == state_dict.end()) continue;  // LoadSlots names it.
      const DType t = it->second.dtype;
      SIMDATTN_REQUIRE(
          first || t == type || t == DType::kF32 || type == DType::kF32, name_,
          "keep_dtype: tensor '", slot.name,
          "' is of another 16-bit type than the other weights");
      if (first || t == DType::kF32) type = t;
      first = false;
    }
    return type;
  }
  // Back to float storage (exact), and to 16 bits (exact for weights that
  // came from that type).
  void Widen() {
    weights_.w_qkv.Widen();
    weights_.w_out.Widen();
  }
  void Narrow(DType type) {
    weights_.w_qkv.Narrow(type);
    weights_.w_out.Narrow(type);
  }

  // qkv (batch * tokens, qkv_width()) = x W_qkv^T + b_qkv: Q, K and V of
  // every token in one product.
  void Project(ConstTensor3 x, float* qkv, ComputeType compute) const {
    const AttentionConfig& c = config_;
    const size_t tokens = x.tokens, width = qkv_width();
    MatMulOptions projection;
    projection.compute = ProductCompute(compute);
    projection.transpose_b = Transpose::kYes;
    projection.bias = c.qkv_bias ? weights_.b_qkv.data() : nullptr;
    weights_.w_qkv.Product(
        width, c.d_in, projection.compute, [&](const auto& w) {
          if (x.batch == 1 || x.batch_stride == tokens * x.token_stride) {
            MatMul(
                ConstMatrix(x.data, x.batch * tokens, c.d_in, x.token_stride),
                w, Matrix(qkv, x.batch * tokens, width), projection);
            return;
          }
          for (size_t b = 0; b < x.batch; ++b) {
            MatMul(x.Sequence(b), w,
                   Matrix(qkv + b * tokens * width, tokens, width), projection);
          }
        });
  }

  // The (batch, heads, tokens, head_dim) views of Q, K and V in Project's
  // output: row t of batch item b holds [Q heads | K heads | V heads].
  void HeadViews(const float* qkv, size_t batch, size_t tokens, ConstTensor4* q,
                 ConstTensor4* k, ConstTensor4* v) const {
    const AttentionConfig& c = config_;
    const size_t width = qkv_width();
    *q = ConstTensor4::FromTokenMajor(qkv, batch, tokens, c.num_heads,
                                      c.head_dim, width);
    *k = ConstTensor4::FromTokenMajor(qkv + q_dim(), batch, tokens,
                                      c.num_kv_heads, c.head_dim, width);
    *v = ConstTensor4::FromTokenMajor(qkv + q_dim() + kv_dim(), batch, tokens,
                                      c.num_kv_heads, c.head_dim, width);
  }

  // y = context W_out^T + b_out, context dense (batch * tokens, d_out).
  void ProjectOut(const float* context, Tensor3 y, ComputeType compute) const {
    const size_t tokens = y.tokens, features = config_.y_features();
    MatMulOptions out;
    out.compute = ProductCompute(compute);
    out.transpose_b = Transpose::kYes;
    out.bias = weights_.b_out.empty() ? nullptr : weights_.b_out.data();
    weights_.w_out.Product(features, q_dim(), out.compute, [&](const auto& w) {
      if (y.batch == 1 || y.batch_stride == tokens * y.token_stride) {
        MatMul(ConstMatrix(context, y.batch * tokens, q_dim()), w,
               Matrix(y.data, y.batch * tokens, features, y.token_stride), out);
        return;
      }
      for (size_t b = 0; b < y.batch; ++b) {
        MatMul(ConstMatrix(context + b * tokens * q_dim(), tokens, q_dim()), w,
               y.Sequence(b), out);
      }
    });
  }

  // ForwardStep's common conditions, over a cache of `type`.
  void CheckStep(const ForwardOptions& options, KVType type) const;

  // Scratch floats holding n size_t values (scratch memory is untyped, used
  // as size_t only: a step allocates nothing).
  static size_t SizeTs(size_t n) {
    return hwy::DivCeil(n * sizeof(size_t), sizeof(float));
  }

  // The projections' arithmetic: kInt8 is attention's only.
  static ComputeType ProductCompute(ComputeType compute) {
    return compute == ComputeType::kInt8 ? ComputeType::kFloat32 : compute;
  }

  // `step`: over a cache, where kInt8 may read its q8_0, q4_0 or int8 keys.
  void CheckCompute(const ForwardOptions& options, bool step) const {
    SIMDATTN_REQUIRE(options.compute == ComputeType::kFloat32 ||
                         options.compute == ComputeType::kBFloat16 ||
                         (step && options.compute == ComputeType::kInt8),
                     name_, "options.compute (",
                     static_cast<int>(options.compute), ") is not ",
                     step ? "kFloat32, kBFloat16 or kInt8"
                          : "kFloat32 or kBFloat16 (kInt8 reads a q8_0, "
                            "q4_0 or int8 cache: ForwardStep)");
    SIMDATTN_REQUIRE(options.compute == ComputeType::kFloat32 ||
                         options.attention_weights.data == nullptr,
                     name_,
                     "attention_weights are returned in float32 arithmetic "
                     "only: options.compute must be kFloat32");
  }

  // rows * cols floats, or an error naming `what` if no vector can hold them.
  size_t Floats(const char* what, size_t rows, size_t cols) const {
    const size_t n = CheckedMul(name_, what, rows, cols);
    SIMDATTN_REQUIRE(n <= std::vector<float>().max_size(), name_, what, " (",
                     rows, " x ", cols,
                     " floats) exceed the largest possible allocation");
    return n;
  }

  void Validate() const {
    const AttentionConfig& c = config_;
    SIMDATTN_REQUIRE(c.d_in > 0, name_, "d_in must be positive, got ", c.d_in);
    SIMDATTN_REQUIRE(c.head_dim > 0, name_, "d_out must be positive");
    SIMDATTN_REQUIRE(c.num_heads > 0, name_, "num_heads must be positive");
    SIMDATTN_REQUIRE(c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0,
                     name_, "num_heads (", c.num_heads,
                     ") is not divisible by num_kv_heads (", c.num_kv_heads,
                     ")");
    SIMDATTN_REQUIRE(c.dropout >= 0.0f && c.dropout <= 1.0f, name_, "dropout (",
                     c.dropout, ") is outside [0, 1]");
    SIMDATTN_REQUIRE(c.projections || c.head_dim == c.d_in, name_,
                     "without projections d_out must equal d_in");
    const AttentionVariants& v = c.variants;
    SIMDATTN_REQUIRE(std::isfinite(v.softcap) && v.softcap >= 0.0f, name_,
                     "variants.softcap (", v.softcap,
                     ") is not finite and >= 0 (0: off)");
    SIMDATTN_REQUIRE(c.causal || (v.window == 0 && v.softcap == 0.0f &&
                                  !v.alibi && !v.sinks),
                     name_, "variants need a causal module");
    if (c.rope) {
      SIMDATTN_REQUIRE(c.projections, name_, "rope needs projections");
      internal::CheckRopeOptions(name_, "rope", *c.rope, c.head_dim);
      SIMDATTN_REQUIRE(c.rope->positions == nullptr, name_,
                       "rope->positions must be null: tokens are rotated at "
                       "their positions in their sequences");
    }
  }

  // Rotates the queries, and the keys if `keys`, in Project's output, token
  // t of batch item b at positions[b] + t (positions null: t).
  void Rotate(float* qkv, size_t batch, size_t tokens, const size_t* positions,
              bool keys) const {
    const AttentionConfig& c = config_;
    RopeOptions rope = *c.rope;
    rope.positions = positions;
    ApplyRope(Tensor4::FromTokenMajor(qkv, batch, tokens, c.num_heads,
                                      c.head_dim, qkv_width()),
              rope);
    if (keys) {
      ApplyRope(
          Tensor4::FromTokenMajor(qkv + q_dim(), batch, tokens, c.num_kv_heads,
                                  c.head_dim, qkv_width()),
          rope);
    }
  }

  // The module's mask when the queries sit `offset` keys into the sequence.
  AttentionMask Mask(size_t offset) const {
    AttentionMask mask;
    mask.causal = config_.causal;
    mask.causal_offset = offset;
    mask.window = config_.variants.window;
    mask.softcap = config_.variants.softcap;
    if (!alibi_slopes_.empty()) mask.alibi_slopes = alibi_slopes_.data();
    if (!weights_.sinks.empty()) mask.sinks = weights_.sinks.data();
    return mask;
  }

  const char* name_;
  AttentionConfig config_;
  StateDictLayout layout_;
  ModuleWeights weights_;
  std::vector<float> alibi_slopes_;  // Empty without ALiBi.
};

std::pair<Footprint, Footprint> AttentionEngine::CheckInputOutput(
    ConstTensor3 x, Tensor3 y, size_t total_tokens) const {
  const AttentionConfig& c = config_;
  const size_t batch = x.batch, tokens = x.tokens;
  SIMDATTN_REQUIRE(x.features == c.d_in, name_, "x has ", x.features,
                   " features, expected d_in = ", c.d_in);
  SIMDATTN_REQUIRE(c.context_length == 0 || total_tokens <= c.context_length,
                   name_, "num_tokens (", total_tokens,
                   ") exceeds context_length (", c.context_length, ")");
  SIMDATTN_REQUIRE(
      y.batch == batch && y.tokens == tokens && y.features == c.y_features(),
      name_, "y is (", y.batch, ", ", y.tokens, ", ", y.features,
      "), expected (", batch, ", ", tokens, ", ", c.y_features(), ")");
  const ConstTensor4 x4(x.data, batch, 1, tokens, x.features, x.batch_stride, 0,
                        x.token_stride);
  const Tensor4 y4(y.data, batch, 1, tokens, y.features, y.batch_stride, 0,
                   y.token_stride);
  const Footprint x_range = internal::CheckTensor4(name_, "x", x4);
  const Footprint y_range = internal::CheckTensor4(name_, "y", y4);
  internal::CheckDistinctElements(name_, "y", y4.dims, y4.strides);
  SIMDATTN_REQUIRE(!y_range.Overlaps(x_range), name_, "y overlaps x");
  return {x_range, y_range};
}

AttentionEngine::ScratchSizes AttentionEngine::CheckedScratchSizes(
    size_t batch, size_t tokens) const {
  // Checked like the scores: y bounds batch * tokens * q_dim() in bytes, not
  // the three projections' width.
  const AttentionConfig& c = config_;
  const size_t rows = CheckedMul(name_, "batch * tokens", batch, tokens);
  const size_t width = c.projections ? qkv_width() : 0;
  ScratchSizes sizes;
  sizes.qkv = CheckedMul(name_, "the Q, K, V projections", rows, width);
  sizes.context =
      c.out_proj ? CheckedMul(name_, "the context", rows, q_dim()) : 1;
  return sizes;
}

void AttentionEngine::Forward(ConstTensor3 x, Tensor3 y,
                              const ForwardOptions& options) const {
  const AttentionConfig& c = config_;
  const size_t batch = x.batch, tokens = x.tokens;
  const size_t heads = c.num_heads, head_dim = c.head_dim;

  // Validation, before any allocation.
  const auto [x_range, y_range] = CheckInputOutput(x, y, tokens);
  const bool training_dropout = options.training && c.dropout > 0.0f;
  CheckCompute(options, /*step=*/false);
  Tensor4 weights = options.attention_weights;
  if (weights.data != nullptr) {
    SIMDATTN_REQUIRE(weights.dims[0] == batch && weights.dims[1] == heads &&
                         weights.dims[2] == tokens && weights.dims[3] == tokens,
                     name_, "attention_weights has shape ",
                     internal::ShapeString(weights.dims), ", expected (", batch,
                     ", ", heads, ", ", tokens, ", ", tokens, ")");
    const Footprint w_range =
        internal::CheckTensor4(name_, "attention_weights", weights);
    internal::CheckDistinctElements(name_, "attention_weights", weights.dims,
                                    weights.strides);
    SIMDATTN_REQUIRE(!w_range.Overlaps(x_range) && !w_range.Overlaps(y_range),
                     name_, "attention_weights overlaps x or y");
  }
  const ScratchSizes sizes = CheckedScratchSizes(batch, tokens);
  if (x.empty()) return;

  // 1. Q, K and V for every token in one product: (batch * tokens, width).
  ScratchBuffer qkv_buffer(c.projections ? sizes.qkv : 1);
  ConstTensor4 q, k, v;
  if (c.projections) {
    Project(x, qkv_buffer.data(), options.compute);
    if (c.rope) Rotate(qkv_buffer.data(), batch, tokens, nullptr, true);
    HeadViews(qkv_buffer.data(), batch, tokens, &q, &k, &v);
  } else {
    q = k = v = ConstTensor4(x.data, batch, 1, tokens, head_dim, x.batch_stride,
                             0, x.token_stride);
  }

  // 2-5. Context, laid out (batch, tokens, heads * head_dim) like torch's
  //      transpose(1, 2).view(b, T, d_out): into y unless out_proj follows.
  ScratchBuffer context_buffer(sizes.context);
  const Tensor4 context = ContextView(context_buffer.data(), y);
  const float scale = ScoreScale();
  if (weights.data == nullptr) {
    // Fused: the (tokens x tokens) weights are never stored. Dropout draws
    // the bits the unfused path would, so both give the same result.
    AttentionOptions attention;
    attention.scale = scale;
    attention.mask = Mask(0);
    attention.compute = options.compute;
    if (training_dropout) {
      attention.dropout = c.dropout;
      attention.dropout_key = options.dropout_key;
    }
    ScaledDotProductAttention(q, k, v, context, attention);
  } else {
    // The caller wants the weights: scores, softmax and dropout in place in
    // its tensor, then weights @ values.
    MatMulOptions scores;
    scores.transpose_b = Transpose::kYes;
    scores.alpha = scale;
    BatchedMatMul(q, k, weights, scores);
    const AttentionMask mask = Mask(0);
    Softmax(weights, weights, 1.0f, mask);
    if (training_dropout) Dropout(weights, c.dropout, options.dropout_key);
    internal::MaskedWeightsTimesValues(weights, v, context, mask);
  }

  // 6. Output projection.
  if (c.out_proj) ProjectOut(context_buffer.data(), y, options.compute);
}

void AttentionEngine::CheckStep(const ForwardOptions& options,
                                KVType type) const {
  const AttentionConfig& c = config_;
  SIMDATTN_REQUIRE(c.causal && c.projections, name_,
                   "ForwardStep needs a causal module with projections");
  SIMDATTN_REQUIRE(!(options.training && c.dropout > 0.0f), name_,
                   "ForwardStep is for generation: use eval mode (dropout ",
                   c.dropout, " in training)");
  SIMDATTN_REQUIRE(options.attention_weights.data == nullptr, name_,
                   "ForwardStep does not return attention weights");
  CheckCompute(options, /*step=*/true);
  SIMDATTN_REQUIRE(
      options.compute != ComputeType::kBFloat16 ||
          ElementTraitsOf(type).bf16_exact,
      name_,
      "options.compute is kBFloat16: the cache must hold bf16 or fp8 "
      "(KVCacheConfig::type or KVPages::type kBF16, kFp8E4M3, kFp8E5M2), "
      "its type is ",
      static_cast<int>(type));
  SIMDATTN_REQUIRE(options.compute != ComputeType::kInt8 ||
                       ElementTraitsOf(type).int8_scores,
                   name_,
                   "options.compute is kInt8: the cache must hold integer "
                   "codes (int8, q8_0, q4_0, iq4_nl), its type is ",
                   static_cast<int>(type));
}

void AttentionEngine::ForwardStep(ConstTensor3 x, KVCache& cache, Tensor3 y,
                                  const ForwardOptions& options) const {
  const AttentionConfig& c = config_;
  const size_t batch = x.batch, tokens = x.tokens;
  CheckStep(options, cache.config().type);
  SIMDATTN_REQUIRE(
      cache.batch() == batch && cache.kv_heads() == c.num_kv_heads &&
          cache.head_dim() == c.head_dim && cache.value_dim() == c.head_dim &&
          !cache.config().latent,
      name_, "the cache holds (batch ", cache.batch(), ", kv_heads ",
      cache.kv_heads(), ", head_dim ", cache.head_dim(), ") with value_dim ",
      cache.value_dim(), cache.config().latent ? " (latent)" : "",
      ", expected (", batch, ", ", c.num_kv_heads, ", ", c.head_dim,
      ") with value_dim ", c.head_dim);
  const std::optional<RopeOptions>& cache_rope = cache.config().rope;
  SIMDATTN_REQUIRE(!cache_rope || c.rope, name_,
                   "the cache rotates keys (config.rope) but the module has "
                   "no rotary embedding for its queries (config.rope)");
  SIMDATTN_REQUIRE(
      !cache_rope || (cache_rope->pairing == c.rope->pairing &&
                      cache_rope->theta == c.rope->theta &&
                      cache_rope->rotary_offset == c.rope->rotary_offset &&
                      internal::RotaryDim(*cache_rope, c.head_dim) ==
                          internal::RotaryDim(*c.rope, c.head_dim)),
      name_,
      "the cache rotates keys with other rope options than the module's");
  // Compared as a difference: size() + tokens could wrap.
  SIMDATTN_REQUIRE(tokens <= cache.capacity() - cache.size(), name_,
                   "the cache holds ", cache.size(), " of ", cache.capacity(),
                   " tokens: no room for ", tokens, " more");
  CheckInputOutput(x, y, cache.size() + tokens);
  const ScratchSizes sizes = CheckedScratchSizes(batch, tokens);
  if (x.empty()) return;

  ScratchBuffer qkv_buffer(sizes.qkv);
  Project(x, qkv_buffer.data(), options.compute);
  if (c.rope) {
    // Each sequence's new tokens start at its length.
    ScratchBuffer positions_buffer(SizeTs(batch));
    size_t* positions = reinterpret_cast<size_t*>(positions_buffer.data());
    for (size_t b = 0; b < batch; ++b) positions[b] = cache.length(b);
    Rotate(qkv_buffer.data(), batch, tokens, positions, !cache_rope);
  }
  ConstTensor4 q, k, v;
  HeadViews(qkv_buffer.data(), batch, tokens, &q, &k, &v);
  cache.Append(k, v);

  // The new tokens are the last of each sequence's: the cache gives the
  // causal offsets.
  ScratchBuffer context_buffer(sizes.context);
  AttentionOptions attention;
  attention.scale = ScoreScale();
  attention.mask = Mask(0);
  attention.compute = options.compute;
  ScaledDotProductAttention(q, cache.View(),
                            ContextView(context_buffer.data(), y), attention);
  if (c.out_proj) ProjectOut(context_buffer.data(), y, options.compute);
}

void AttentionEngine::ForwardStep(ConstMatrix x, const VarlenStep& step,
                                  const KVPages& pages, Matrix y,
                                  const ForwardOptions& options) const {
  const AttentionConfig& c = config_;
  const size_t num_tokens = x.rows, num_seqs = step.num_seqs;
  CheckStep(options, pages.type);
  SIMDATTN_REQUIRE(step.seq_lens != nullptr || num_seqs == 0, name_,
                   "step.seq_lens is null");
  const KVCacheView kv = internal::StepView(name_, pages, step);
  const size_t value_dim = internal::ValueDim(kv);
  SIMDATTN_REQUIRE(
      pages.kv_heads == c.num_kv_heads && pages.head_dim == c.head_dim &&
          value_dim == c.head_dim &&
          !internal::Latent(pages.keys, pages.values),
      name_, "the pages hold kv_heads ", pages.kv_heads, ", head_dim ",
      pages.head_dim, ", value_dim ", value_dim,
      internal::Latent(pages.keys, pages.values) ? " (latent)" : "",
      ", expected ", c.num_kv_heads, ", ", c.head_dim, ", ", c.head_dim);
  // Everything VarlenAttention checks, checked before the keys and values
  // are stored: an error changes no page.
  internal::CheckQueryStarts(name_, step.query_starts, num_seqs, num_tokens);
  SIMDATTN_REQUIRE(step.tree_offsets == nullptr || step.tree_bits != nullptr,
                   name_,
                   "step.tree_offsets is given but step.tree_bits is "
                   "null");
  const internal::KVCacheViewSpans spans = internal::CheckKVCacheView(
      name_, kv, num_tokens, step.query_starts, c.variants.window);
  const auto [x_range, y_range] =
      CheckInputOutput(ConstTensor3(x), Tensor3(y), spans.longest);
  for (const Footprint* pool :
       {&spans.keys, &spans.values, &spans.key_scales, &spans.value_scales}) {
    SIMDATTN_REQUIRE(!pool->Overlaps(y_range), name_, "y overlaps the pages");
  }
  const ScratchSizes sizes = CheckedScratchSizes(1, num_tokens);
  if (num_tokens == 0) return;

  ScratchBuffer qkv_buffer(sizes.qkv);
  Project(ConstTensor3(x), qkv_buffer.data(), options.compute);
  if (c.rope) {
    // Each token rotated as a batch item of one token at its position.
    ScratchBuffer positions_buffer(SizeTs(num_tokens));
    const size_t* positions = internal::TokenPositions(
        name_, step, num_tokens,
        reinterpret_cast<size_t*>(positions_buffer.data()));
    Rotate(qkv_buffer.data(), num_tokens, 1, positions, true);
  }
  ConstTensor4 q, k, v;
  HeadViews(qkv_buffer.data(), 1, num_tokens, &q, &k, &v);
  WriteKVSlots(k, v, step, pages);

  ScratchBuffer context_buffer(sizes.context);
  AttentionOptions attention;
  attention.scale = ScoreScale();
  attention.mask = Mask(0);
  attention.compute = options.compute;
  VarlenAttention(q, step, pages,
                  ContextView(context_buffer.data(), Tensor3(y)), attention);
  if (c.out_proj) {
    ProjectOut(context_buffer.data(), Tensor3(y), options.compute);
  }
}

AttentionModule::AttentionModule(const char* name,
                                 const AttentionConfig& config,
                                 internal::StateDictLayout layout,
                                 uint64_t seed)
    : engine_(std::make_unique<AttentionEngine>(name, config, layout)) {
  engine_->InitializeWeights(seed);
}
AttentionModule::AttentionModule(AttentionModule&&) noexcept = default;
AttentionModule& AttentionModule::operator=(AttentionModule&&) noexcept =
    default;
AttentionModule::~AttentionModule() = default;

void AttentionModule::Forward(ConstTensor3 x, Tensor3 y,
                              const ForwardOptions& options) const {
  engine_->Forward(x, y, options);
}
void AttentionModule::Forward(ConstMatrix x, Matrix y,
                              const ForwardOptions& options) const {
  engine_->Forward(ConstTensor3(x), Tensor3(y), options);
}
void AttentionModule::ForwardStep(ConstTensor3 x, KVCache& cache, Tensor3 y,
                                  const ForwardOptions& options) const {
  engine_->ForwardStep(x, cache, y, options);
}
void AttentionModule::ForwardStep(ConstMatrix x, const VarlenStep& step,
                                  const KVPages& pages, Matrix y,
                                  const ForwardOptions& options) const {
  engine_->ForwardStep(x, step, pages, y, options);
}
void AttentionModule::LoadStateDict(const StateDict& state_dict,
                                    const LoadOptions& options) {
  engine_->LoadStateDict(state_dict, options);
}
DType AttentionModule::weight_dtype() const { return engine_->weight_dtype(); }
size_t AttentionModule::weight_bytes() const { return engine_->weight_bytes(); }
std::map<std::string, std::vector<size_t>> AttentionModule::StateDictShapes()
    const {
  std::map<std::string, std::vector<size_t>> shapes;
  for (const Slot& slot : engine_->SlotShapes()) {
    shapes[slot.name] = slot.shape;
  }
  return shapes;
}
std::vector<std::string> AttentionModule::StateDictBuffers() const {
  std::vector<std::string> names;
  for (const Slot& slot : engine_->SlotShapes()) {
    if (slot.buffer()) names.push_back(slot.name);
  }
  return names;
}
void AttentionModule::InitializeWeights(uint64_t seed) {
  engine_->InitializeWeights(seed);
}
const AttentionConfig& AttentionModule::config() const {
  return engine_->config();
}

}  // namespace simdattn
