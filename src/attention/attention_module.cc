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
#include <string>
#include <utility>
#include <vector>

#include "simdattn/attention.h"
#include "simdattn/random.h"
#include "src/common/check.h"
#include "src/common/scratch.h"
#include "src/ops/mask.h"

namespace simdattn {

namespace {

using internal::ByteRange;
using internal::CheckedMul;
using internal::ScratchBuffer;

// One tensor of the state_dict and where its values live in the engine.
struct Slot {
  enum class Kind { kWeight, kTransposedWeight, kBias, kCausalMask };
  std::string name;
  Kind kind;
  std::vector<size_t> shape;  // PyTorch's shape.
  float* destination;         // Row-major (out, in) weights; nullptr for masks.
  float init_low, init_high;  // PyTorch's initial distribution U(low, high).
};

std::string ShapeToString(const std::vector<size_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace

class AttentionEngine {
 public:
  AttentionEngine(const char* name, const AttentionConfig& config)
      : name_(name), config_(config) {
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
      w_qkv_.assign(Floats("the QKV weights", qkv_rows, config_.d_in), 0.0f);
      if (config_.qkv_bias) b_qkv_.assign(qkv_rows, 0.0f);
    }
    if (config_.out_proj) {
      w_out_.assign(Floats("out_proj", q, q), 0.0f);
      b_out_.assign(q, 0.0f);
    }
  }

  const AttentionConfig& config() const { return config_; }

  std::map<std::string, std::vector<size_t>> StateDictShapes() {
    std::map<std::string, std::vector<size_t>> shapes;
    for (const Slot& slot : Slots()) shapes[slot.name] = slot.shape;
    return shapes;
  }

  void LoadStateDict(const StateDict& state_dict) {
    const std::vector<Slot> slots = Slots();
    for (const auto& entry : state_dict) {
      bool known = false;
      for (const Slot& slot : slots) known |= slot.name == entry.first;
      SIMDATTN_REQUIRE(known, name_, "unexpected tensor '", entry.first,
                       "' in the state_dict");
    }
    // Check every tensor before changing any weight: a failed load leaves
    // the module as it was.
    for (const Slot& slot : slots) {
      const auto it = state_dict.find(slot.name);
      // The mask buffer is derived from the config; checked when present.
      if (it == state_dict.end() && slot.kind == Slot::Kind::kCausalMask) {
        continue;
      }
      SIMDATTN_REQUIRE(it != state_dict.end(), name_, "missing tensor '",
                       slot.name, "' of shape ", ShapeToString(slot.shape));
      const TensorRef& t = it->second;
      SIMDATTN_REQUIRE(t.shape == slot.shape, name_, "tensor '", slot.name,
                       "' has shape ", ShapeToString(t.shape), ", expected ",
                       ShapeToString(slot.shape));
      SIMDATTN_REQUIRE(t.data != nullptr, name_, "tensor '", slot.name,
                       "' is null");
      if (slot.kind == Slot::Kind::kCausalMask) CheckCausalMask(slot.name, t);
    }
    for (const Slot& slot : slots) {
      if (slot.destination == nullptr) continue;
      const TensorRef& t = state_dict.at(slot.name);
      if (slot.kind == Slot::Kind::kTransposedWeight) {
        // (in, out) parameter into the engine's (out, in) rows.
        const size_t in = slot.shape[0], out = slot.shape[1];
        for (size_t i = 0; i < in; ++i) {
          for (size_t o = 0; o < out; ++o) {
            slot.destination[o * in + i] = t.data[i * out + o];
          }
        }
      } else {
        std::memcpy(slot.destination, t.data, Elements(slot) * sizeof(float));
      }
    }
  }

  void InitializeWeights(uint64_t seed) {
    const PhiloxKey key = {static_cast<uint32_t>(seed),
                           static_cast<uint32_t>(seed >> 32)};
    const std::vector<Slot> slots = Slots();
    for (size_t s = 0; s < slots.size(); ++s) {
      const Slot& slot = slots[s];
      if (slot.destination == nullptr) continue;
      // Element e of slot s draws word e % 4 of counter (e / 4, s).
      const size_t n = Elements(slot);
      for (size_t e = 0; e < n; ++e) {
        const uint32_t bits = Philox4x32(
            {static_cast<uint32_t>(e / 4), static_cast<uint32_t>(e >> 34),
             static_cast<uint32_t>(s), 0},
            key)[e % 4];
        const float unit = static_cast<float>(bits >> 8) * 0x1.0p-24f;
        // Transposed parameters are drawn in PyTorch's element order.
        size_t index = e;
        if (slot.kind == Slot::Kind::kTransposedWeight) {
          index = (e % slot.shape[1]) * slot.shape[0] + e / slot.shape[1];
        }
        slot.destination[index] =
            slot.init_low + (slot.init_high - slot.init_low) * unit;
      }
    }
  }

  void Forward(ConstTensor3 x, Tensor3 y, const ForwardOptions& options) const;
  void ForwardStep(ConstTensor3 x, KVCache& cache, Tensor3 y,
                   const ForwardOptions& options) const;

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
  std::pair<ByteRange, ByteRange> CheckInputOutput(ConstTensor3 x, Tensor3 y,
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

  // qkv (batch * tokens, qkv_width()) = x W_qkv^T + b_qkv: Q, K and V of
  // every token in one product.
  void Project(ConstTensor3 x, float* qkv) const {
    const AttentionConfig& c = config_;
    const size_t tokens = x.tokens, width = qkv_width();
    MatMulOptions projection;
    projection.transpose_b = Transpose::kYes;
    projection.bias = c.qkv_bias ? b_qkv_.data() : nullptr;
    const ConstMatrix w(w_qkv_.data(), width, c.d_in);
    if (x.batch == 1 || x.batch_stride == tokens * x.token_stride) {
      MatMul(ConstMatrix(x.data, x.batch * tokens, c.d_in, x.token_stride), w,
             Matrix(qkv, x.batch * tokens, width), projection);
      return;
    }
    for (size_t b = 0; b < x.batch; ++b) {
      MatMul(x.Sequence(b), w, Matrix(qkv + b * tokens * width, tokens, width),
             projection);
    }
  }

  // The (batch, heads, tokens, head_dim) views of Q, K and V in Project's
  // output: row t of batch item b holds [Q heads | K heads | V heads].
  void HeadViews(const float* qkv, size_t batch, size_t tokens, ConstTensor4* q,
                 ConstTensor4* k, ConstTensor4* v) const {
    const AttentionConfig& c = config_;
    const size_t width = qkv_width();
    *q = ConstTensor4(qkv, batch, c.num_heads, tokens, c.head_dim,
                      tokens * width, c.head_dim, width);
    *k = ConstTensor4(qkv + q_dim(), batch, c.num_kv_heads, tokens, c.head_dim,
                      tokens * width, c.head_dim, width);
    *v = ConstTensor4(qkv + q_dim() + kv_dim(), batch, c.num_kv_heads, tokens,
                      c.head_dim, tokens * width, c.head_dim, width);
  }

  // y = context W_out^T + b_out, context dense (batch * tokens, d_out).
  void ProjectOut(const float* context, Tensor3 y) const {
    const size_t tokens = y.tokens;
    MatMulOptions out;
    out.transpose_b = Transpose::kYes;
    out.bias = b_out_.data();
    const ConstMatrix w(w_out_.data(), q_dim(), q_dim());
    if (y.batch == 1 || y.batch_stride == tokens * y.token_stride) {
      MatMul(ConstMatrix(context, y.batch * tokens, q_dim()), w,
             Matrix(y.data, y.batch * tokens, q_dim(), y.token_stride), out);
      return;
    }
    for (size_t b = 0; b < y.batch; ++b) {
      MatMul(ConstMatrix(context + b * tokens * q_dim(), tokens, q_dim()), w,
             y.Sequence(b), out);
    }
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
  }

  static size_t Elements(const Slot& slot) {
    size_t n = 1;
    for (size_t d : slot.shape) n *= d;
    return n;
  }

  void CheckCausalMask(const std::string& name, const TensorRef& t) const {
    const size_t n = t.shape[0];
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        const float expected = j > i ? 1.0f : 0.0f;
        SIMDATTN_REQUIRE(t.data[i * n + j] == expected, name_, "buffer '", name,
                         "' is not the causal mask triu(ones, diagonal=1): (",
                         i, ", ", j, ") is ", t.data[i * n + j]);
      }
    }
  }

  // The state_dict of this configuration, in PyTorch's order.
  std::vector<Slot> Slots() {
    const AttentionConfig& c = config_;
    std::vector<Slot> slots;
    const float linear = 1.0f / std::sqrt(static_cast<float>(c.d_in));
    const char* const kProjections[3] = {"W_query", "W_key", "W_value"};
    const size_t rows[3] = {q_dim(), kv_dim(), kv_dim()};
    const size_t first_row[3] = {0, q_dim(), q_dim() + kv_dim()};
    const std::vector<size_t> mask_shape = {c.context_length, c.context_length};
    switch (c.naming) {
      case AttentionConfig::Naming::kNone:
        break;
      case AttentionConfig::Naming::kParameter:
        for (int p = 0; p < 3; ++p) {
          slots.push_back({kProjections[p],
                           Slot::Kind::kTransposedWeight,
                           {c.d_in, rows[p]},
                           &w_qkv_[first_row[p] * c.d_in],
                           0.0f,
                           1.0f});
        }
        break;
      case AttentionConfig::Naming::kLinear:
        for (int p = 0; p < 3; ++p) {
          const std::string n = kProjections[p];
          slots.push_back({n + ".weight",
                           Slot::Kind::kWeight,
                           {rows[p], c.d_in},
                           &w_qkv_[first_row[p] * c.d_in],
                           -linear,
                           linear});
          if (c.qkv_bias) {
            slots.push_back({n + ".bias",
                             Slot::Kind::kBias,
                             {rows[p]},
                             &b_qkv_[first_row[p]],
                             -linear,
                             linear});
          }
        }
        if (c.out_proj) {
          const float out = 1.0f / std::sqrt(static_cast<float>(q_dim()));
          slots.push_back({"out_proj.weight",
                           Slot::Kind::kWeight,
                           {q_dim(), q_dim()},
                           w_out_.data(),
                           -out,
                           out});
          slots.push_back({"out_proj.bias",
                           Slot::Kind::kBias,
                           {q_dim()},
                           b_out_.data(),
                           -out,
                           out});
        }
        if (c.causal) {
          slots.push_back({"mask", Slot::Kind::kCausalMask, mask_shape, nullptr,
                           0.0f, 0.0f});
        }
        break;
      case AttentionConfig::Naming::kHeads:
        // heads.h.W_query is rows [h * head_dim, (h + 1) * head_dim) of the
        // stacked Q weights (likewise K and V): concatenating the heads'
        // outputs is then the engine's usual head layout.
        for (size_t h = 0; h < c.num_heads; ++h) {
          const std::string prefix = "heads." + std::to_string(h) + ".";
          for (int p = 0; p < 3; ++p) {
            const size_t row = first_row[p] + h * c.head_dim;
            slots.push_back({prefix + kProjections[p] + ".weight",
                             Slot::Kind::kWeight,
                             {c.head_dim, c.d_in},
                             &w_qkv_[row * c.d_in],
                             -linear,
                             linear});
            if (c.qkv_bias) {
              slots.push_back({prefix + kProjections[p] + ".bias",
                               Slot::Kind::kBias,
                               {c.head_dim},
                               &b_qkv_[row],
                               -linear,
                               linear});
            }
          }
          slots.push_back({prefix + "mask", Slot::Kind::kCausalMask, mask_shape,
                           nullptr, 0.0f, 0.0f});
        }
        break;
    }
    return slots;
  }

  const char* name_;
  AttentionConfig config_;
  std::vector<float> w_qkv_;  // (q_dim + 2 kv_dim, d_in): Q, K, V rows.
  std::vector<float> b_qkv_;  // Empty without qkv_bias.
  std::vector<float> w_out_;  // (d_out, d_out).
  std::vector<float> b_out_;
};

std::pair<ByteRange, ByteRange> AttentionEngine::CheckInputOutput(
    ConstTensor3 x, Tensor3 y, size_t total_tokens) const {
  const AttentionConfig& c = config_;
  const size_t batch = x.batch, tokens = x.tokens;
  SIMDATTN_REQUIRE(x.features == c.d_in, name_, "x has ", x.features,
                   " features, expected d_in = ", c.d_in);
  SIMDATTN_REQUIRE(c.context_length == 0 || total_tokens <= c.context_length,
                   name_, "num_tokens (", total_tokens,
                   ") exceeds context_length (", c.context_length, ")");
  SIMDATTN_REQUIRE(
      y.batch == batch && y.tokens == tokens && y.features == q_dim(), name_,
      "y is (", y.batch, ", ", y.tokens, ", ", y.features, "), expected (",
      batch, ", ", tokens, ", ", q_dim(), ")");
  const ConstTensor4 x4(x.data, batch, 1, tokens, x.features, x.batch_stride, 0,
                        x.token_stride);
  const Tensor4 y4(y.data, batch, 1, tokens, y.features, y.batch_stride, 0,
                   y.token_stride);
  const ByteRange x_range = internal::CheckTensor4(name_, "x", x4);
  const ByteRange y_range = internal::CheckTensor4(name_, "y", y4);
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
  Tensor4 weights = options.attention_weights;
  if (weights.data != nullptr) {
    SIMDATTN_REQUIRE(weights.dims[0] == batch && weights.dims[1] == heads &&
                         weights.dims[2] == tokens && weights.dims[3] == tokens,
                     name_, "attention_weights has shape ",
                     internal::ShapeString(weights.dims), ", expected (", batch,
                     ", ", heads, ", ", tokens, ", ", tokens, ")");
    const ByteRange w_range =
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
    Project(x, qkv_buffer.data());
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
    attention.mask.causal = c.causal;
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
    AttentionMask mask;
    mask.causal = c.causal;
    Softmax(weights, weights, 1.0f, mask);
    if (training_dropout) Dropout(weights, c.dropout, options.dropout_key);
    internal::MaskedWeightsTimesValues(weights, v, context, mask);
  }

  // 6. Output projection.
  if (c.out_proj) ProjectOut(context_buffer.data(), y);
}

void AttentionEngine::ForwardStep(ConstTensor3 x, KVCache& cache, Tensor3 y,
                                  const ForwardOptions& options) const {
  const AttentionConfig& c = config_;
  const size_t batch = x.batch, tokens = x.tokens;
  SIMDATTN_REQUIRE(c.causal && c.projections, name_,
                   "ForwardStep needs a causal module with projections");
  SIMDATTN_REQUIRE(!(options.training && c.dropout > 0.0f), name_,
                   "ForwardStep is for generation: use eval mode (dropout ",
                   c.dropout, " in training)");
  SIMDATTN_REQUIRE(options.attention_weights.data == nullptr, name_,
                   "ForwardStep does not return attention weights");
  SIMDATTN_REQUIRE(
      cache.batch() == batch && cache.kv_heads() == c.num_kv_heads &&
          cache.head_dim() == c.head_dim,
      name_, "the cache holds (batch ", cache.batch(), ", kv_heads ",
      cache.kv_heads(), ", head_dim ", cache.head_dim(), "), expected (", batch,
      ", ", c.num_kv_heads, ", ", c.head_dim, ")");
  // Compared as a difference: size() + tokens could wrap.
  SIMDATTN_REQUIRE(tokens <= cache.capacity() - cache.size(), name_,
                   "the cache holds ", cache.size(), " of ", cache.capacity(),
                   " tokens: no room for ", tokens, " more");
  CheckInputOutput(x, y, cache.size() + tokens);
  const ScratchSizes sizes = CheckedScratchSizes(batch, tokens);
  if (x.empty()) return;

  ScratchBuffer qkv_buffer(sizes.qkv);
  Project(x, qkv_buffer.data());
  ConstTensor4 q, k, v;
  HeadViews(qkv_buffer.data(), batch, tokens, &q, &k, &v);
  cache.Append(k, v);

  // The new tokens are the last of the cache's: causal offset size - n.
  ScratchBuffer context_buffer(sizes.context);
  AttentionOptions attention;
  attention.scale = ScoreScale();
  attention.mask.causal = true;
  attention.mask.causal_offset = cache.size() - tokens;
  ScaledDotProductAttention(q, cache.keys(), cache.values(),
                            ContextView(context_buffer.data(), y), attention);
  if (c.out_proj) ProjectOut(context_buffer.data(), y);
}

AttentionModule::AttentionModule(const char* name,
                                 const AttentionConfig& config, uint64_t seed)
    : engine_(std::make_unique<AttentionEngine>(name, config)) {
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
void AttentionModule::LoadStateDict(const StateDict& state_dict) {
  engine_->LoadStateDict(state_dict);
}
std::map<std::string, std::vector<size_t>> AttentionModule::StateDictShapes()
    const {
  return engine_->StateDictShapes();
}
void AttentionModule::InitializeWeights(uint64_t seed) {
  engine_->InitializeWeights(seed);
}
const AttentionConfig& AttentionModule::config() const {
  return engine_->config();
}

}  // namespace simdattn
