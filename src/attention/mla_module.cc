// MlaAttention (attention.h): DeepSeek's latent attention in the absorbed
// form, plain C++ over MatMul, BatchedMatMul, ApplyRope, the latent cache
// and the serving kernels.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hwy/base.h"
#include "simdattn/attention.h"
#include "src/attention/state_dict.h"
#include "src/common/check.h"
#include "src/common/scratch.h"
#include "src/ops/kv_pool.h"
#include "src/ops/rope.h"

namespace simdattn {

namespace {

constexpr const char* kName = "MlaAttention";

// x * rsqrt(mean(x^2) + eps) * weight on each of n rows of `cols` (HF's
// DeepseekV2RMSNorm; the mean summed in double).
void RmsNormRows(float* rows, size_t n, size_t cols, size_t stride,
                 const float* weight, float eps) {
  for (size_t r = 0; r < n; ++r) {
    float* x = rows + r * stride;
    double squares = 0.0;
    for (size_t c = 0; c < cols; ++c) squares += double(x[c]) * x[c];
    const float inverse =
        1.0f / std::sqrt(static_cast<float>(squares / double(cols)) + eps);
    for (size_t c = 0; c < cols; ++c) x[c] = weight[c] * (x[c] * inverse);
  }
}

MatMulOptions Transposed(ComputeType compute) {
  MatMulOptions o;
  o.transpose_b = Transpose::kYes;
  o.compute = compute;
  return o;
}

}  // namespace

struct MlaAttention::Impl {
  MlaConfig c;
  // nn.Linear weights, row-major (out, in); the norms' weights.
  std::vector<float> w_q, w_qa, qa_norm, w_kva, kva_norm, w_kvb, w_o;

  explicit Impl(const MlaConfig& config) : c(config) {
    const size_t q = c.num_heads * QkDim();
    if (c.q_lora_rank == 0) {
      w_q.resize(q * c.hidden_size);
    } else {
      w_qa.resize(c.q_lora_rank * c.hidden_size);
      qa_norm.resize(c.q_lora_rank);
      w_q.resize(q * c.q_lora_rank);
    }
    w_kva.resize(Latent() * c.hidden_size);
    kva_norm.resize(c.kv_lora_rank);
    w_kvb.resize(c.num_heads * KvbRows() * c.kv_lora_rank);
    w_o.resize(c.hidden_size * c.num_heads * c.v_head_dim);
  }

  size_t QkDim() const { return c.qk_nope_head_dim + c.qk_rope_head_dim; }
  size_t KvbRows() const { return c.qk_nope_head_dim + c.v_head_dim; }
  size_t Latent() const { return c.kv_lora_rank + c.qk_rope_head_dim; }

  // HF's state_dict, pointing into the weights (null: shapes only).
  std::vector<internal::Slot> Slots(bool point) {
    using Kind = internal::Slot::Kind;
    std::vector<internal::Slot> slots;
    const auto add = [&](const char* name, std::vector<float>& w,
                         std::vector<size_t> shape) {
      const bool vector = shape.size() == 1;
      // nn.Linear: U(-1/sqrt(in), 1/sqrt(in)); RMSNorm weights: ones.
      const float bound =
          vector ? 1.0f : 1.0f / std::sqrt(static_cast<float>(shape[1]));
      slots.push_back({name, vector ? Kind::kBias : Kind::kWeight,
                       std::move(shape), point ? w.data() : nullptr,
                       vector ? 1.0f : -bound, bound});
    };
    const size_t q = c.num_heads * QkDim();
    if (c.q_lora_rank == 0) {
      add("q_proj.weight", w_q, {q, c.hidden_size});
    } else {
      add("q_a_proj.weight", w_qa, {c.q_lora_rank, c.hidden_size});
      add("q_a_layernorm.weight", qa_norm, {c.q_lora_rank});
      add("q_b_proj.weight", w_q, {q, c.q_lora_rank});
    }
    add("kv_a_proj_with_mqa.weight", w_kva, {Latent(), c.hidden_size});
    add("kv_a_layernorm.weight", kva_norm, {c.kv_lora_rank});
    add("kv_b_proj.weight", w_kvb, {c.num_heads * KvbRows(), c.kv_lora_rank});
    add("o_proj.weight", w_o, {c.hidden_size, c.num_heads * c.v_head_dim});
    return slots;
  }

  RopeOptions Rope() const {
    RopeOptions rope;
    rope.pairing = RopePairing::kInterleaved;
    rope.theta = c.rope_theta;
    rope.rotary_offset = c.kv_lora_rank;
    rope.rotary_dim = c.qk_rope_head_dim;
    return rope;
  }

  // Floats of Project's and Output's scratch for n tokens.
  struct Scratch {
    float* qa;        // (n, q_lora_rank)
    float* q;         // (n, heads, nope + rope)
    float* absorbed;  // (n, heads, latent): the queries attention takes
    float* latent;    // (n, latent): the rows cached
    float* context;   // (n, heads, kv_lora_rank): attention's output
    float* values;    // (n, heads, v_head_dim)
  };
  size_t ScratchFloats(size_t n) const {
    const size_t h = c.num_heads;
    return internal::CheckedMul(kName, "the step's scratch", n,
                                c.q_lora_rank + h * QkDim() + h * Latent() +
                                    Latent() + h * c.kv_lora_rank +
                                    h * c.v_head_dim);
  }
  Scratch Carve(float* base, size_t n) const {
    const size_t h = c.num_heads;
    Scratch s;
    s.qa = base;
    s.q = s.qa + n * c.q_lora_rank;
    s.absorbed = s.q + n * h * QkDim();
    s.latent = s.absorbed + n * h * Latent();
    s.context = s.latent + n * Latent();
    s.values = s.context + n * h * c.kv_lora_rank;
    return s;
  }

  // The arrays of s from row `first` on.
  Scratch From(const Scratch& s, size_t first) const {
    const size_t h = c.num_heads;
    return {s.qa + first * c.q_lora_rank,
            s.q + first * h * QkDim(),
            s.absorbed + first * h * Latent(),
            s.latent + first * Latent(),
            s.context + first * h * c.kv_lora_rank,
            s.values + first * h * c.v_head_dim};
  }

  // The n token rows of x (n, hidden_size) into absorbed queries, their rope
  // dims rotated at positions[i] (null: first + i), and latent rows, k_pe
  // not rotated.
  void Project(ConstMatrix x, const size_t* positions, size_t first,
               const Scratch& s, ComputeType compute) const {
    const size_t n = x.rows, h = c.num_heads;
    const MatMulOptions t = Transposed(compute);
    const size_t q_in = c.q_lora_rank == 0 ? c.hidden_size : c.q_lora_rank;
    ConstMatrix q_source = x;
    if (c.q_lora_rank != 0) {
      MatMul(x, ConstMatrix(w_qa.data(), c.q_lora_rank, c.hidden_size),
             Matrix(s.qa, n, c.q_lora_rank), t);
      RmsNormRows(s.qa, n, c.q_lora_rank, c.q_lora_rank, qa_norm.data(),
                  c.rms_norm_eps);
      q_source = ConstMatrix(s.qa, n, c.q_lora_rank);
    }
    MatMul(q_source, ConstMatrix(w_q.data(), h * QkDim(), q_in),
           Matrix(s.q, n, h * QkDim()), t);
    MatMul(x, ConstMatrix(w_kva.data(), Latent(), c.hidden_size),
           Matrix(s.latent, n, Latent()), t);
    RmsNormRows(s.latent, n, c.kv_lora_rank, Latent(), kva_norm.data(),
                c.rms_norm_eps);
    // Absorbed: head k's q_nope times W_UK (kv_b_proj's first nope rows of
    // the head, (nope, kv_lora)), then its q_pe.
    const size_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
    MatMulOptions plain;
    plain.compute = compute;
    BatchedMatMul(
        ConstTensor4(s.q, 1, h, n, nope, 0, QkDim(), h * QkDim()),
        ConstTensor4(w_kvb.data(), 1, h, nope, c.kv_lora_rank, 0,
                     KvbRows() * c.kv_lora_rank, c.kv_lora_rank),
        Tensor4(s.absorbed, 1, h, n, c.kv_lora_rank, 0, Latent(), h * Latent()),
        plain);
    for (size_t i = 0; i < n * h; ++i) {
      std::memcpy(s.absorbed + i * Latent() + c.kv_lora_rank,
                  s.q + i * QkDim() + nope, rope * sizeof(float));
    }
    RopeOptions rotate = Rope();
    if (positions != nullptr) {
      // Each token a batch item of one row at its position.
      rotate.positions = positions;
      ApplyRope(Tensor4::FromTokenMajor(s.absorbed, n, 1, h, Latent()), rotate);
    } else {
      // One item whose tokens start at `first`.
      rotate.positions = &first;
      ApplyRope(
          Tensor4(s.absorbed, 1, h, n, Latent(), 0, Latent(), h * Latent()),
          rotate);
    }
  }

  // y (n, hidden_size) from attention's context (n, heads, kv_lora): each
  // head's W_UV (kv_b_proj's last v_head_dim rows of the head), then o_proj.
  void Output(size_t n, const Scratch& s, Matrix y, ComputeType compute) const {
    const size_t h = c.num_heads, v = c.v_head_dim;
    BatchedMatMul(
        ConstTensor4(s.context, 1, h, n, c.kv_lora_rank, 0, c.kv_lora_rank,
                     h * c.kv_lora_rank),
        ConstTensor4(w_kvb.data() + c.qk_nope_head_dim * c.kv_lora_rank, 1, h,
                     v, c.kv_lora_rank, 0, KvbRows() * c.kv_lora_rank,
                     c.kv_lora_rank),
        Tensor4(s.values, 1, h, n, v, 0, v, h * v), Transposed(compute));
    MatMul(ConstMatrix(s.values, n, h * v),
           ConstMatrix(w_o.data(), c.hidden_size, h * v), y,
           Transposed(compute));
  }

  AttentionOptions Attention(ComputeType compute) const {
    AttentionOptions o;
    o.scale = 1.0f / std::sqrt(static_cast<float>(QkDim()));
    o.mask.causal = true;
    o.compute = compute;
    return o;
  }

  // Throws unless x is (batch, tokens, hidden_size) and y likewise,
  // distinct elements not overlapping x; returns what x and y span.
  std::pair<internal::Footprint, internal::Footprint> CheckInputOutput(
      ConstTensor3 x, Tensor3 y) const {
    const size_t batch = x.batch, tokens = x.tokens, hidden = c.hidden_size;
    SIMDATTN_REQUIRE(x.features == hidden && y.batch == batch &&
                         y.tokens == tokens && y.features == hidden,
                     kName, "x is (", x.batch, ", ", x.tokens, ", ", x.features,
                     ") and y (", y.batch, ", ", y.tokens, ", ", y.features,
                     "): expected both (", batch, ", ", tokens, ", ", hidden,
                     ")");
    const internal::Footprint in =
        internal::CheckTensor4(kName, "x",
                               ConstTensor4(x.data, 1, batch, tokens, hidden, 0,
                                            x.batch_stride, x.token_stride));
    const Tensor4 out(y.data, 1, batch, tokens, hidden, 0, y.batch_stride,
                      y.token_stride);
    const internal::Footprint out_range =
        internal::CheckTensor4(kName, "y", out);
    internal::CheckDistinctElements(kName, "y", out.dims, out.strides);
    SIMDATTN_REQUIRE(!out_range.Overlaps(in), kName, "y overlaps x");
    return {in, out_range};
  }

  void CheckOptions(const ForwardOptions& options) const {
    SIMDATTN_REQUIRE(!options.training && options.attention_weights.empty(),
                     kName,
                     "options.training and options.attention_weights are "
                     "not supported: MlaAttention is for inference");
  }
};

MlaAttention::MlaAttention(const MlaConfig& config) {
  const MlaConfig& c = config;
  SIMDATTN_REQUIRE(
      c.hidden_size != 0 && c.num_heads != 0 && c.kv_lora_rank != 0 &&
          c.v_head_dim != 0 && c.qk_nope_head_dim + c.qk_rope_head_dim != 0,
      kName, "config.hidden_size (", c.hidden_size, "), num_heads (",
      c.num_heads, "), kv_lora_rank (", c.kv_lora_rank, "), v_head_dim (",
      c.v_head_dim, ") and the query head's dims (", c.qk_nope_head_dim, " + ",
      c.qk_rope_head_dim, ") must be nonzero");
  SIMDATTN_REQUIRE(c.qk_rope_head_dim % 2 == 0, kName,
                   "config.qk_rope_head_dim (", c.qk_rope_head_dim,
                   ") is not even");
  SIMDATTN_REQUIRE(std::isfinite(c.rope_theta) && c.rope_theta > 0.0f &&
                       std::isfinite(c.rms_norm_eps) && c.rms_norm_eps >= 0.0f,
                   kName, "config.rope_theta (", c.rope_theta,
                   ") must be finite and positive, config.rms_norm_eps (",
                   c.rms_norm_eps, ") finite and >= 0");
  // Every size representable before any allocation.
  internal::CheckedMul(
      kName, "kv_b_proj's elements",
      internal::CheckedMul(kName, "num_heads * (nope + v_head_dim)",
                           c.num_heads, c.qk_nope_head_dim + c.v_head_dim),
      c.kv_lora_rank);
  internal::CheckedMul(
      kName, "the projections' elements",
      internal::CheckedMul(
          kName, "num_heads * the head dims", c.num_heads,
          c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim),
      c.hidden_size + c.q_lora_rank);
  impl_ = std::make_unique<Impl>(config);
  internal::InitializeSlots(impl_->Slots(true), c.seed);
}

MlaAttention::MlaAttention(MlaAttention&&) noexcept = default;
MlaAttention& MlaAttention::operator=(MlaAttention&&) noexcept = default;
MlaAttention::~MlaAttention() = default;

const MlaConfig& MlaAttention::config() const { return impl_->c; }
size_t MlaAttention::latent_dim() const { return impl_->Latent(); }

void MlaAttention::LoadStateDict(const StateDict& state_dict) {
  internal::LoadSlots(kName, impl_->Slots(true), state_dict);
}

std::map<std::string, std::vector<size_t>> MlaAttention::StateDictShapes()
    const {
  std::map<std::string, std::vector<size_t>> shapes;
  for (const internal::Slot& slot : impl_->Slots(false)) {
    shapes[slot.name] = slot.shape;
  }
  return shapes;
}

KVCacheConfig MlaAttention::LatentCacheConfig(KVType type) const {
  KVCacheConfig config;
  config.type = type;
  config.latent = true;
  config.value_dim = impl_->c.kv_lora_rank;
  config.rope = impl_->Rope();
  return config;
}

void MlaAttention::Forward(ConstTensor3 x, Tensor3 y,
                           const ForwardOptions& options) const {
  const Impl& m = *impl_;
  const size_t batch = x.batch, tokens = x.tokens;
  m.CheckOptions(options);
  m.CheckInputOutput(x, y);
  if (batch == 0 || tokens == 0) return;
  const size_t rows =
      internal::CheckedMul(kName, "batch * tokens", batch, tokens);
  internal::ScratchBuffer buffer(m.ScratchFloats(rows));
  const Impl::Scratch s = m.Carve(buffer.data(), rows);
  const size_t h = m.c.num_heads, latent = m.Latent();
  for (size_t b = 0; b < batch; ++b) {
    m.Project(x.Sequence(b), nullptr, 0, m.From(s, b * tokens),
              options.compute);
  }
  // Each sequence's keys from position 0; its first kv_lora_rank elements
  // its values.
  ApplyRope(Tensor4::Dense(s.latent, batch, 1, tokens, latent), m.Rope());
  ScaledDotProductAttention(
      ConstTensor4::FromTokenMajor(s.absorbed, batch, tokens, h, latent),
      ConstTensor4::Dense(s.latent, batch, 1, tokens, latent),
      ConstTensor4(s.latent, batch, 1, tokens, m.c.kv_lora_rank,
                   tokens * latent, tokens * latent, latent),
      Tensor4::FromTokenMajor(s.context, batch, tokens, h, m.c.kv_lora_rank),
      m.Attention(options.compute));
  for (size_t b = 0; b < batch; ++b) {
    m.Output(tokens, m.From(s, b * tokens), y.Sequence(b), options.compute);
  }
}

void MlaAttention::ForwardStep(ConstTensor3 x, KVCache& cache, Tensor3 y,
                               const ForwardOptions& options) const {
  const Impl& m = *impl_;
  const size_t batch = x.batch, n = x.tokens;
  const size_t h = m.c.num_heads, latent = m.Latent();
  m.CheckOptions(options);
  const KVCacheConfig& cc = cache.config();
  SIMDATTN_REQUIRE(
      cc.latent && cache.kv_heads() == 1 && cache.head_dim() == latent &&
          cache.value_dim() == m.c.kv_lora_rank,
      kName, "the cache holds kv_heads ", cache.kv_heads(), ", head_dim ",
      cache.head_dim(), ", value_dim ", cache.value_dim(),
      cc.latent ? " (latent)" : "", ": expected a latent cache of 1, ", latent,
      ", ", m.c.kv_lora_rank, " (LatentCacheConfig)");
  const RopeOptions rope = m.Rope();
  SIMDATTN_REQUIRE(
      !cc.rope ||
          (cc.rope->pairing == rope.pairing && cc.rope->theta == rope.theta &&
           cc.rope->rotary_offset == rope.rotary_offset &&
           internal::RotaryDim(*cc.rope, latent) == rope.rotary_dim),
      kName,
      "the cache rotates keys otherwise than the module "
      "(LatentCacheConfig's rope, or none)");
  SIMDATTN_REQUIRE(x.batch == cache.batch(), kName, "x has batch ", x.batch,
                   ", the cache ", cache.batch());
  // Every argument checked before the cache changes.
  m.CheckInputOutput(x, y);
  if (batch == 0 || n == 0) return;
  const size_t rows = internal::CheckedMul(kName, "batch * n", batch, n);
  internal::ScratchBuffer buffer(m.ScratchFloats(rows));
  const Impl::Scratch s = m.Carve(buffer.data(), rows);
  // Project every sequence, append all, then attend: Append checks the
  // room before it writes.
  for (size_t b = 0; b < batch; ++b) {
    const Impl::Scratch part = m.From(s, b * n);
    m.Project(x.Sequence(b), nullptr, cache.length(b), part, options.compute);
    if (!cc.rope) {
      RopeOptions at = rope;
      const size_t position = cache.length(b);
      at.positions = &position;
      ApplyRope(Tensor4::Dense(part.latent, 1, 1, n, latent), at);
    }
  }
  cache.Append(ConstTensor4::Dense(s.latent, batch, 1, n, latent),
               ConstTensor4{});
  ScaledDotProductAttention(
      ConstTensor4::FromTokenMajor(s.absorbed, batch, n, h, latent),
      cache.View(),
      Tensor4::FromTokenMajor(s.context, batch, n, h, m.c.kv_lora_rank),
      m.Attention(options.compute));
  for (size_t b = 0; b < batch; ++b) {
    m.Output(n, m.From(s, b * n), y.Sequence(b), options.compute);
  }
}

void MlaAttention::ForwardStep(ConstMatrix x, const VarlenStep& step,
                               const KVPages& pages, Matrix y,
                               const ForwardOptions& options) const {
  const Impl& m = *impl_;
  const size_t n = x.rows;
  const size_t h = m.c.num_heads, latent = m.Latent();
  m.CheckOptions(options);
  const size_t value_dim =
      pages.value_dim == 0 ? pages.head_dim : pages.value_dim;
  SIMDATTN_REQUIRE(
      internal::Latent(pages.keys, pages.values) && pages.kv_heads == 1 &&
          pages.head_dim == latent && value_dim == m.c.kv_lora_rank,
      kName, "the pages hold kv_heads ", pages.kv_heads, ", head_dim ",
      pages.head_dim, ", value_dim ", value_dim,
      internal::Latent(pages.keys, pages.values) ? " (latent)" : "",
      ": expected latent pages of 1, ", latent, ", ", m.c.kv_lora_rank);
  // Everything the write and VarlenAttention check, before anything is
  // written.
  internal::ScratchBuffer position_buffer(
      hwy::DivCeil(n * sizeof(size_t), sizeof(float)));
  const size_t* positions = internal::TokenPositions(
      kName, step, n, reinterpret_cast<size_t*>(position_buffer.data()));
  SIMDATTN_REQUIRE(step.tree_offsets == nullptr || step.tree_bits != nullptr,
                   kName,
                   "step.tree_offsets is given but step.tree_bits is null");
  const internal::KVCacheViewSpans spans = internal::CheckKVCacheView(
      kName, internal::StepView(kName, pages, step), n, step.query_starts);
  internal::CheckSlots(kName, "step.slot_mapping", pages, step.slot_mapping, n,
                       /*skip=*/true, /*distinct=*/true);
  const auto [x_range, y_range] =
      m.CheckInputOutput(ConstTensor3(x), Tensor3(y));
  for (const internal::Footprint* pool :
       {&spans.keys, &spans.values, &spans.key_scales, &spans.value_scales}) {
    SIMDATTN_REQUIRE(!pool->Overlaps(y_range) && !pool->Overlaps(x_range),
                     kName, "x or y overlaps the pages");
  }
  if (n == 0) return;
  internal::ScratchBuffer buffer(m.ScratchFloats(n));
  const Impl::Scratch s = m.Carve(buffer.data(), n);
  m.Project(x, positions, 0, s, options.compute);
  const RopeOptions rope = m.Rope();
  WriteKVSlots(ConstTensor4::Dense(s.latent, 1, 1, n, latent), ConstTensor4{},
               step.slot_mapping, pages, rope, positions);
  VarlenAttention(ConstTensor4::FromTokenMajor(s.absorbed, 1, n, h, latent),
                  step, pages,
                  Tensor4::FromTokenMajor(s.context, 1, n, h, m.c.kv_lora_rank),
                  m.Attention(options.compute));
  m.Output(n, s, y, options.compute);
}

}  // namespace simdattn
