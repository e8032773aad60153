// The op table of `simdattn bench` and its --check cases, which hold the
// kernels to the float64 references of tools/reference (the tests' own).
#include "tools/bench_ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "simdattn/attention.h"
#include "simdattn/kernels.h"
#include "tools/measure/shapes.h"
#include "tools/measure/workloads.h"
#include "tools/reference/reference.h"

namespace simdattn {
namespace tools {
namespace {

using measure::Library;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<float> Random(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |error| / bound, with a zero bound meaning "must be exact".
double Ratio(double error, double bound) {
  error = std::abs(error);
  if (std::isnan(error)) return kInf;
  return bound > 0 ? error / bound : (error == 0 ? 0.0 : kInf);
}

// C = 0.5 A op(B) + 0.25 C + bias with padded row strides, so that alpha,
// beta, bias and strides are all exercised; reference::MatMulElement's
// componentwise bound. With _abf16, A in bf16 (an even stride: its pairs
// read in place where K is even too).
double CheckMatMul(const measure::MatMulShape& s) {
  const size_t lda = s.k + (s.a_bf16 ? 4 : 3), ldc = s.n + 5;
  const size_t b_rows = s.transpose_b ? s.n : s.k;
  const size_t b_cols = s.transpose_b ? s.k : s.n;
  std::vector<float> a = Random(s.m * lda, 1, -1.0f, 1.0f);
  std::vector<BFloat16> a16(s.a_bf16 ? a.size() : 0);
  for (size_t i = 0; i < a16.size(); ++i) {
    a16[i] = ToBFloat16(a[i]);
    a[i] = ToFloat(a16[i]);  // The values the product reads.
  }
  const std::vector<float> b = Random(b_rows * b_cols, 2, -1.0f, 1.0f);
  const std::vector<float> bias = Random(s.n, 3, -1.0f, 1.0f);
  const std::vector<float> c0 = Random(s.m * ldc, 4, -1.0f, 1.0f);
  std::vector<float> c = c0;
  MatMulOptions options;
  options.transpose_b = s.transpose_b ? Transpose::kYes : Transpose::kNo;
  options.alpha = 0.5f;
  options.beta = 0.25f;
  options.bias = bias.data();
  const ConstMatrix a_view(a.data(), s.m, s.k, lda);
  // The reference multiplies the values B holds in its storage (and with
  // _bf16dot, A and B rounded to bf16).
  const measure::StoredB stored(b.data(), b_rows, b_cols, s.b_storage);
  options.compute = s.bf16dot ? ComputeType::kBFloat16 : ComputeType::kFloat32;
  const Matrix c_view(c.data(), s.m, s.n, ldc);
  if (s.a_bf16) {
    MatMul(MatrixView<const BFloat16>(a16.data(), s.m, s.k, lda),
           stored.Pack(options), c_view, options);
  } else if (s.packed) {
    MatMul(a_view, stored.Pack(options), c_view, options);
  } else {
    stored.Multiply(a_view, c_view, options);
  }
  options.compute = ComputeType::kFloat32;
  std::vector<float> a_rounded = a, b_rounded(b_rows * b_cols);
  ConstMatrix a_ref = a_view, b_ref = stored.widened();
  if (s.bf16dot) {
    for (float& x : a_rounded) x = ToFloat(ToBFloat16(x));
    for (size_t r = 0; r < b_rows; ++r) {
      for (size_t k = 0; k < b_cols; ++k) {
        b_rounded[r * b_cols + k] = ToFloat(ToBFloat16(b_ref.Row(r)[k]));
      }
    }
    a_ref = ConstMatrix(a_rounded.data(), s.m, s.k, lda);
    b_ref = ConstMatrix(b_rounded.data(), b_rows, b_cols);
  }
  double worst = 0;
  for (size_t i = 0; i < s.m; ++i) {
    for (size_t j = 0; j < s.n; ++j) {
      const reference::Bounded want = reference::MatMulElement(
          a_ref, b_ref, options, c0[i * ldc + j], i, j);
      worst = std::max(worst, Ratio(c[i * ldc + j] - want.value, want.bound));
    }
  }
  // Row padding of C is never written.
  for (size_t i = 0; i < s.m; ++i) {
    for (size_t j = s.n; j < ldc; ++j) {
      worst = std::max(worst, Ratio(c[i * ldc + j] - c0[i * ldc + j], 0));
    }
  }
  return worst;
}

// reference::SoftmaxRow's bound per element; masked columns exactly 0.
double CheckSoftmax(const measure::ScoresShape& s) {
  const float scale = 0.3f;
  const std::vector<float> x = Random(s.Elements(), 5, -8.0f, 8.0f);
  std::vector<float> y(x.size(), -1.0f);
  const measure::ShapeMask shape_mask(s.variants, s.heads, s.causal, 0);
  const AttentionMask& mask = shape_mask.mask();
  const ConstTensor4 x_view =
      ConstTensor4::Dense(x.data(), s.batch, s.heads, s.rows, s.cols);
  Softmax(x_view, Tensor4::Dense(y.data(), s.batch, s.heads, s.rows, s.cols),
          scale, mask);
  double worst = 0;
  const float* yr = y.data();
  for (size_t b = 0; b < s.batch; ++b) {
    for (size_t h = 0; h < s.heads; ++h) {
      for (size_t i = 0; i < s.rows; ++i, yr += s.cols) {
        const std::vector<reference::SoftmaxValue> ref =
            reference::SoftmaxRow(x_view, scale, mask, b, h, i);
        for (size_t j = 0; j < s.cols; ++j) {
          const double bound = ref[j].masked
                                   ? 0.0
                                   : ref[j].relative_error * ref[j].value +
                                         reference::kSoftmaxAbsoluteFloor;
          worst = std::max(worst, Ratio(yr[j] - ref[j].value, bound));
        }
      }
    }
  }
  return worst;
}

// Bit-exact against reference::Dropout (the scalar Philox draw): the
// mask may not depend on the target or the thread count.
double CheckDropout(const measure::ScoresShape& s) {
  constexpr float kP = 0.1f;
  const DropoutKey key{7, 3};
  const std::vector<float> x = Random(s.Elements(), 6, -1.0f, 1.0f);
  std::vector<float> y = x;
  Dropout(Tensor4::Dense(y.data(), s.batch, s.heads, s.rows, s.cols), kP, key);
  const reference::Dropout dropout(kP, key);
  double worst = 0;
  size_t e = 0;
  for (size_t b = 0; b < s.batch; ++b) {
    for (size_t h = 0; h < s.heads; ++h) {
      for (size_t i = 0; i < s.rows; ++i) {
        for (size_t j = 0; j < s.cols; ++j, ++e) {
          const float expected = dropout(x[e], b, h, i, j);
          worst = std::max(worst, Ratio(double(y[e]) - expected, 0));
        }
      }
    }
  }
  return worst;
}

// MultiHeadAttention (causal, eval, out_proj with bias) with random weights
// loaded through its state_dict, against the module computed in float64.
// _bf16: the weights rounded to bf16 and kept so (the reference uses the
// rounded values); _step: ForwardStep of T - 1 tokens, then of the last.
// Bound: 1e-5 of the output's largest magnitude (the golden tests' bound).
// _bf16dot: the reference rounds x, the weights, Q, K, V and the context
// to bf16 as the module does, but not the weights P (2^-9 relative each,
// through P V and out_proj): bound 4e-3 of the largest magnitude.
double CheckMha(const measure::MhaShape& s) {
  const size_t t_len = s.tokens, d_in = s.d_in, d = s.d_out;
  const size_t hd = d / s.heads;
  const float w_range = 1.0f / std::sqrt(float(d_in));
  const float o_range = 1.0f / std::sqrt(float(d));
  std::vector<float> x = Random(s.batch * t_len * d_in, 7, -1.0f, 1.0f);
  std::vector<float> wq = Random(d * d_in, 8, -w_range, w_range);
  std::vector<float> wk = Random(d * d_in, 9, -w_range, w_range);
  std::vector<float> wv = Random(d * d_in, 10, -w_range, w_range);
  std::vector<float> wo = Random(d * d, 11, -o_range, o_range);
  const std::vector<float> bo = Random(d, 12, -o_range, o_range);
  std::vector<std::vector<BFloat16>> bits;
  const auto tensor = [&](std::vector<float>& w,
                          std::vector<size_t> shape) -> TensorRef {
    if (!s.bf16) return {w.data(), shape};
    std::vector<BFloat16>& b = bits.emplace_back(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      b[i] = ToBFloat16(w[i]);
      w[i] = ToFloat(b[i]);
    }
    return {b.data(), shape, DType::kBF16};
  };
  MultiHeadAttention mha(d_in, d, t_len, 0.0f, s.heads);
  LoadOptions keep;
  keep.keep_dtype = true;
  mha.LoadStateDict({{"W_query.weight", tensor(wq, {d, d_in})},
                     {"W_key.weight", tensor(wk, {d, d_in})},
                     {"W_value.weight", tensor(wv, {d, d_in})},
                     {"out_proj.weight", tensor(wo, {d, d})},
                     {"out_proj.bias", {bo.data(), {d}}}},
                    keep);
  std::vector<float> y(s.batch * t_len * d);
  const ConstTensor3 x_view(x.data(), s.batch, t_len, d_in);
  const Tensor3 y_view(y.data(), s.batch, t_len, d);
  ForwardOptions forward;
  KVCacheConfig cache_config;
  if (s.bf16dot) {
    forward.compute = ComputeType::kBFloat16;
    cache_config.type = KVType::kBF16;
  }
  if (s.step) {
    KVCache cache(s.batch, s.heads, t_len, hd, cache_config);
    const auto tokens = [](auto t, size_t first, size_t count) {
      return decltype(t)(t.data + first * t.token_stride, t.batch, count,
                         t.features, t.batch_stride, t.token_stride);
    };
    mha.ForwardStep(tokens(x_view, 0, t_len - 1), cache,
                    tokens(y_view, 0, t_len - 1), forward);
    mha.ForwardStep(tokens(x_view, t_len - 1, 1), cache,
                    tokens(y_view, t_len - 1, 1), forward);
  } else {
    mha.Forward(x_view, y_view, forward);
  }
  const auto round = [&](auto& values) {
    if (!s.bf16dot) return;
    for (auto& e : values) e = ToFloat(ToBFloat16(float(e)));
  };
  for (std::vector<float>* operand : {&x, &wq, &wk, &wv, &wo}) round(*operand);

  // out[r][o] = sum_i in[r][i] * w[o][i] (+ bias[o]): nn.Linear, float64.
  const auto linear = [](const auto* in, size_t rows, size_t n_in,
                         const std::vector<float>& w, size_t n_out,
                         const float* bias) {
    std::vector<double> out(rows * n_out);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t o = 0; o < n_out; ++o) {
        double acc = bias ? bias[o] : 0.0;
        for (size_t i = 0; i < n_in; ++i) {
          acc += double(in[r * n_in + i]) * w[o * n_in + i];
        }
        out[r * n_out + o] = acc;
      }
    }
    return out;
  };
  const size_t rows = s.batch * t_len;
  std::vector<double> q = linear(x.data(), rows, d_in, wq, d, nullptr);
  std::vector<double> k = linear(x.data(), rows, d_in, wk, d, nullptr);
  std::vector<double> v = linear(x.data(), rows, d_in, wv, d, nullptr);
  for (std::vector<double>* p : {&q, &k, &v}) round(*p);
  // The heads of a (b, T, d) projection, where they lie.
  const auto heads = [&](const std::vector<double>& p) {
    return Tensor4View<const double>(p.data(), s.batch, s.heads, t_len, hd,
                                     t_len * d, hd, d);
  };
  AttentionMask causal;
  causal.causal = true;
  const std::vector<double> per_head = reference::Attention(
      heads(q), heads(k), heads(v), 1.0 / std::sqrt(double(hd)), causal);
  // (b, heads, T, hd) back to (b, T, d) for out_proj.
  std::vector<double> context(rows * d);
  for (size_t b = 0; b < s.batch; ++b) {
    for (size_t h = 0; h < s.heads; ++h) {
      for (size_t i = 0; i < t_len; ++i) {
        for (size_t c = 0; c < hd; ++c) {
          context[(b * t_len + i) * d + h * hd + c] =
              per_head[((b * s.heads + h) * t_len + i) * hd + c];
        }
      }
    }
  }
  round(context);
  const std::vector<double> ref =
      linear(context.data(), rows, d, wo, d, bo.data());
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  const double bound = (s.bf16dot ? 4e-3 : 1e-5) * scale + 1e-30;
  double worst = 0;
  for (size_t e = 0; e < y.size(); ++e) {
    worst = std::max(worst, Ratio(y[e] - ref[e], bound));
  }
  return worst;
}

// ScaledDotProductAttention on random data against reference::Attention,
// the queries being the last positions (decode: one query seeing the whole
// cache, or its window), with the shape's mask. Bound: 1e-5 of max |v|
// (each output is a convex combination of values); each row's log-sum-exp
// within 1e-5 (1 + |L|), -inf exactly. Dropout is left to CheckDropout: the
// fused kernel draws the same bits. Shapes in a KVCache are checked against
// the reference over what the cache holds (KVCache::Read). _bf16dot: the
// reference over Q, K and V rounded to bf16; outputs within 2^-8 max |v|
// (the weights P are rounded too, 2^-9 relative each) plus 1e-5. _int8dot:
// the reference over Q quantized as kInt8 quantizes it.
double CheckAttention(const measure::AttentionShape& s) {
  const size_t tq = s.QueryTokens(), tk = s.tokens, d = s.head_dim;
  const size_t dv = s.ValueDim();
  std::vector<float> q = Random(s.batch * s.heads * tq * d, 13, -1, 1);
  std::vector<float> k = Random(s.batch * s.kv_heads * tk * d, 14, -1, 1);
  std::vector<float> v = Random(s.batch * s.kv_heads * tk * dv, 15, -1, 1);
  std::optional<KVCache> cache;
  if (s.InCache()) {
    cache.emplace(s.batch, s.kv_heads, tk, d, measure::CacheConfig(s));
    cache->Append(ConstTensor4::Dense(k.data(), s.batch, s.kv_heads, tk, d),
                  s.mla != 0 ? ConstTensor4{}
                             : ConstTensor4::Dense(v.data(), s.batch,
                                                   s.kv_heads, tk, dv));
    for (size_t b = 0; b < s.batch; ++b) {
      cache->Read(
          b, Tensor3(k.data() + b * s.kv_heads * tk * d, s.kv_heads, tk, d),
          Tensor3(v.data() + b * s.kv_heads * tk * dv, s.kv_heads, tk, dv));
    }
  }
  std::vector<float> out(s.batch * s.heads * tq * dv, -1.0f);
  std::vector<float> lse(s.batch * s.heads * tq, -1.0f);
  const measure::ShapeMask shape_mask(s.variants, s.heads, s.causal || s.decode,
                                      tk - tq);
  AttentionOptions options;
  options.mask = shape_mask.mask();
  options.log_sum_exp = lse.data();
  if (s.bf16dot) options.compute = ComputeType::kBFloat16;
  if (s.int8dot) options.compute = ComputeType::kInt8;
  const ConstTensor4 q_view =
      ConstTensor4::Dense(q.data(), s.batch, s.heads, tq, d);
  const ConstTensor4 k_view =
      ConstTensor4::Dense(k.data(), s.batch, s.kv_heads, tk, d);
  const ConstTensor4 v_view =
      ConstTensor4::Dense(v.data(), s.batch, s.kv_heads, tk, dv);
  const Tensor4 out_view = Tensor4::Dense(out.data(), s.batch, s.heads, tq, dv);
  if (cache) {
    AttentionOptions from_cache = options;
    from_cache.mask.causal_offset = 0;  // The cache's lengths give it.
    ScaledDotProductAttention(q_view, cache->View(), out_view, from_cache);
  } else {
    ScaledDotProductAttention(q_view, k_view, v_view, out_view, options);
  }
  if (s.bf16dot) {
    for (std::vector<float>* operand : {&q, &k, &v}) {
      for (float& e : *operand) e = ToFloat(ToBFloat16(e));
    }
  }
  if (s.int8dot) {
    reference::QuantizeQueries(q, s.cache == KVType::kInt8 ? d : 32);
  }
  const double out_bound = s.bf16dot ? 1.0 / 256 + 1e-5 : 1e-5;
  std::vector<double> ref_lse;
  const std::vector<double> ref =
      reference::Attention(q_view, k_view, v_view, 1.0 / std::sqrt(double(d)),
                           options.mask, &ref_lse);
  double worst = 0;
  for (size_t e = 0; e < out.size(); ++e) {
    worst = std::max(worst, Ratio(out[e] - ref[e], out_bound));
  }
  for (size_t r = 0; r < lse.size(); ++r) {
    const double bound =
        std::isinf(ref_lse[r]) ? 0 : 1e-5 * (1 + std::abs(ref_lse[r]));
    const double error = lse[r] == ref_lse[r] ? 0 : lse[r] - ref_lse[r];
    worst = std::max(worst, Ratio(error, bound));
  }
  return worst;
}

// A serving step (one call, or one per group with _separate) against
// reference::Attention over each sequence's keys and values as the cache
// holds them (KVCache::Read), its queries its last positions: outputs within
// 1e-5 (convex combinations of values in [-1, 1]), log-sum-exps within
// 1e-5 (1 + |L|).
double CheckServe(const measure::ServeShape& s) {
  const measure::ServeOperands step(s);
  const size_t heads = s.heads, d = s.head_dim, n = step.starts.back();
  std::vector<float> out(n * heads * d, -1.0f), lse(heads * n, -1.0f);
  const measure::ShapeMask cache_mask(s.variants, heads, true, 0);
  AttentionOptions options;
  options.mask = cache_mask.mask();
  // The separate calls' log-sum-exps would be per group: compared in the
  // single call only.
  if (!s.separate) options.log_sum_exp = lse.data();
  step.Run(options, out.data());
  double worst = 0;
  for (size_t b = 0; b + 1 < step.starts.size(); ++b) {
    const size_t m = step.starts[b + 1] - step.starts[b];
    const size_t length = step.cache.length(b);
    std::vector<float> k(s.kv_heads * length * d), v(k.size());
    step.cache.Read(b, Tensor3(k.data(), s.kv_heads, length, d),
                    Tensor3(v.data(), s.kv_heads, length, d));
    const measure::ShapeMask shape_mask(s.variants, heads, true, length - m);
    AttentionMask mask = shape_mask.mask();
    // A tree hides the drafts that are not a row's ancestors (causality
    // already hides its descendants: they come later).
    std::vector<uint8_t> hidden;
    if (s.tree && step.tree_offsets[b] != AttentionMask::kNoTree) {
      hidden.assign(m * length, 0);
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < m; ++j) {
          hidden[i * length + length - m + j] = !step.TreeSees(b, i, j);
        }
      }
      mask.boolean = Tensor4View<const uint8_t>(hidden.data(), 1, heads, m,
                                                length, 0, 0, length);
    }
    std::vector<double> ref_lse;
    const std::vector<double> ref = reference::Attention(
        ConstTensor4::FromTokenMajor(step.q.data() + step.starts[b] * heads * d,
                                     1, m, heads, d),
        ConstTensor4::Dense(k.data(), 1, s.kv_heads, length, d),
        ConstTensor4::Dense(v.data(), 1, s.kv_heads, length, d),
        1.0 / std::sqrt(double(d)), mask, &ref_lse);
    for (size_t h = 0; h < heads; ++h) {
      for (size_t i = 0; i < m; ++i) {
        const size_t token = step.starts[b] + i;
        for (size_t c = 0; c < d; ++c) {
          const double error =
              out[(token * heads + h) * d + c] - ref[(h * m + i) * d + c];
          worst = std::max(worst, Ratio(error, 1e-5));
        }
        if (s.separate) continue;
        const double expected = ref_lse[h * m + i];
        const double got = lse[h * n + token];
        const double bound =
            std::isinf(expected) ? 0 : 1e-5 * (1 + std::abs(expected));
        worst =
            std::max(worst, Ratio(got == expected ? 0 : got - expected, bound));
      }
    }
  }
  return worst;
}

// KVCache::Append of random tokens (keys rotated with _rope) read back:
// each element within its type's stated bound (kernels.h) of the float key
// (rotated by ApplyRope, which the rope tests hold to PyTorch) or value:
// bf16, f16 and fp8 within half an ulp, int8 within half its row's scale,
// q8_0 and q4_0 within half (q4_0's clamped elements: all) of their block's
// scale plus its fp16 rounding, f32 exact.
double CheckAppend(const measure::AttentionShape& s) {
  const size_t n = s.tokens, d = s.head_dim;
  const size_t per_sequence = s.kv_heads * n * d;
  std::vector<float> k = Random(s.batch * per_sequence, 16, -2, 2);
  const std::vector<float> v = Random(k.size(), 17, -2, 2);
  KVCache cache(s.batch, s.kv_heads, n, d, measure::CacheConfig(s));
  cache.Append(ConstTensor4::Dense(k.data(), s.batch, s.kv_heads, n, d),
               ConstTensor4::Dense(v.data(), s.batch, s.kv_heads, n, d));
  if (s.rope) ApplyRope(Tensor4::Dense(k.data(), s.batch, s.kv_heads, n, d));
  std::vector<float> held_k(per_sequence), held_v(per_sequence);
  // Elements sharing a scale: a row, or a block.
  const size_t group = ElementTraitsOf(s.cache).values > 1 ? 32 : d;
  double worst = 0;
  for (size_t b = 0; b < s.batch; ++b) {
    cache.Read(b, Tensor3(held_k.data(), s.kv_heads, n, d),
               Tensor3(held_v.data(), s.kv_heads, n, d));
    for (const auto& [in, out] : {std::pair<const float*, const float*>{
                                      &k[b * per_sequence], held_k.data()},
                                  {&v[b * per_sequence], held_v.data()}}) {
      for (size_t g = 0; g < s.kv_heads * n * d; g += group) {
        double max_abs = 0, min_v = in[g], max_v = in[g];
        for (size_t c = g; c < g + group; ++c) {
          max_abs = std::max(max_abs, double(std::abs(in[c])));
          min_v = std::min(min_v, double(in[c]));
          max_v = std::max(max_v, double(in[c]));
        }
        for (size_t c = g; c < g + group; ++c) {
          const double x = in[c], ax = std::abs(x);
          double bound = 0;
          switch (s.cache) {
            case KVType::kF32:
              break;
            case KVType::kBF16:
              bound = ax * 0x1p-8;
              break;
            case KVType::kF16:
              bound = std::max(ax * 0x1p-11, 0x1p-25);
              break;
            case KVType::kInt8:
              bound = max_abs / 127 * (0.5 + 1e-6);
              break;
            case KVType::kFp8E4M3:
              bound = std::max(ax * 0x1p-4, 0x1p-10);
              break;
            case KVType::kFp8E5M2:
              bound = std::max(ax * 0x1p-3, 0x1p-17);
              break;
            case KVType::kQ8_0:
              bound = max_abs / 127 * (0.5 + 1e-6) + max_abs * 0x1p-11;
              break;
            case KVType::kQ4_0:
              bound = max_abs / 8 * (1 + 1e-6) + max_abs * 0x1p-11;
              break;
            case KVType::kQ4_1:  // d = (max - min) / 15, m's rounding too.
              bound = (max_v - min_v) / 15 * (0.5 + 1e-6) +
                      (max_v - min_v) * 0x1p-11 + max_abs * 0x1p-11;
              break;
            case KVType::kIQ4_NL:  // The table's widest gap, 24 d, halved.
              bound = max_abs / 8 * (1 + 1e-6) + max_abs * 0x1p-11;
              break;
          }
          worst = std::max(worst, Ratio(out[c] - x, bound));
        }
      }
    }
  }
  return worst;
}

template <typename Shape>
std::vector<std::string> Names(const std::vector<Shape>& shapes) {
  std::vector<std::string> names;
  for (const Shape& s : shapes) names.push_back(s.Name());
  return names;
}

OpCase MatMulCase(const std::string& text) {
  const measure::MatMulShape s = measure::ParseMatMulShape(text);
  return {s.Name(), s.Flops(),
          [s](Library lib, int threads) {
            return measure::MakeMatMul(s, lib, threads);
          },
          [s] { return CheckMatMul(s); }};
}

OpCase SoftmaxCase(const std::string& text) {
  const measure::ScoresShape s = measure::ParseScoresShape(text, true);
  return {s.Name(), s.SoftmaxBytes(),
          [s](Library lib, int threads) {
            return measure::MakeSoftmax(s, lib, threads);
          },
          [s] { return CheckSoftmax(s); }};
}

OpCase DropoutCase(const std::string& text) {
  const measure::ScoresShape s = measure::ParseScoresShape(text, false);
  return {s.Name(), s.DropoutBytes(),
          [s](Library lib, int) -> std::unique_ptr<measure::Workload> {
            if (lib != Library::kSimdattn) return nullptr;
            return measure::MakeDropout(s);
          },
          [s] { return CheckDropout(s); }};
}

OpCase MhaCase(const std::string& text) {
  const measure::MhaShape s = measure::ParseMhaShape(text);
  return {s.Name(), s.Flops(),
          [s](Library lib, int) -> std::unique_ptr<measure::Workload> {
            if (lib != Library::kSimdattn) return nullptr;
            return measure::MakeMha(s);
          },
          [s] { return CheckMha(s); }};
}

// Prefill is counted in FLOPs, decode (memory-bound) in bytes.
OpCase AttentionCase(const std::string& text, bool decode) {
  const measure::AttentionShape s = measure::ParseAttentionShape(text, decode);
  return {s.Name(), decode ? s.Bytes() : s.Flops(),
          [s](Library lib, int) -> std::unique_ptr<measure::Workload> {
            if (lib != Library::kSimdattn) return nullptr;
            return measure::MakeAttention(s);
          },
          [s] { return CheckAttention(s); }};
}

OpCase AppendCase(const std::string& text) {
  const measure::AttentionShape s = measure::ParseAppendShape(text);
  return {s.Name(), s.AppendBytes(),
          [s](Library lib, int) -> std::unique_ptr<measure::Workload> {
            if (lib != Library::kSimdattn) return nullptr;
            return measure::MakeAppend(s);
          },
          [s] { return CheckAppend(s); }};
}

OpCase ServeCase(const std::string& text) {
  const measure::ServeShape s = measure::ParseServeShape(text);
  return {s.Name(), s.Flops(),
          [s](Library lib, int) -> std::unique_ptr<measure::Workload> {
            if (lib != Library::kSimdattn) return nullptr;
            return measure::MakeServe(s);
          },
          [s] { return CheckServe(s); }};
}

}  // namespace

const std::vector<OpSpec>& Ops() {
  static const std::vector<OpSpec> ops = {
      {"matmul",
       Metric::kGflops,
       "MxKxN[_Bt][_bf16|_f16][_cold][_bf16dot][_packed[_abf16]]  C = A "
       "op(B), op(B) = B^T with _Bt, B stored in bfloat16 or float16, a copy "
       "of B per call past the L3 with _cold, bf16 arithmetic with _bf16dot, "
       "B packed before the timing with _packed, A in bf16 with _abf16",
       Names(measure::StandardMatMulShapes()),
       {"6x3x2", "67x45x33", "67x45x33_Bt", "1x64x300_Bt", "130x257x129",
        "3x45x70_bf16", "67x45x33_Bt_bf16", "130x257x129_f16",
        "2x64x300_Bt_f16", "67x45x33_bf16dot", "130x257x129_Bt_bf16dot",
        "1x64x300_Bt_bf16dot", "1x64x300_Bt_packed", "67x45x33_Bt_bf16_packed",
        "130x257x129_f16_bf16dot_packed", "130x258x129_bf16dot_packed_abf16",
        "67x45x33_Bt_packed_abf16"},
       MatMulCase},
      {"softmax",
       Metric::kGbPerSec,
       "BxHxRxC[_causal][_windowW][_softcapC][_sinks][_alibi]  "
       "softmax(0.125 x) over C columns; a window of W keys (causal), "
       "scores capped at C tanh(s / C), per-head sink logits, ALiBi slopes",
       Names(measure::StandardSoftmaxShapes()),
       {"2x3x37x37", "2x3x37x37_causal", "1x2x5x300", "1x1x70x70_causal",
        "2x3x37x37_window5_softcap5_sinks_alibi"},
       SoftmaxCase},
      {"dropout",
       Metric::kGbPerSec,
       "BxHxRxC  in-place dropout, p = 0.1",
       Names(measure::StandardDropoutShapes()),
       {"2x3x37x130", "1x1x3x1000"},
       DropoutCase},
      {"mha",
       Metric::kGflops,
       "BxTxDxH or BxTxDINxDOUTxH[_step][_bf16][_bf16dot]  "
       "MultiHeadAttention forward, causal, eval (_step: ForwardStep of "
       "token T after T - 1 cached; _bf16: weights kept in bf16; _bf16dot: "
       "bf16 arithmetic); useful FLOPs",
       Names(measure::StandardMhaShapes()),
       {"2x6x3x2x2", "2x7x16x4", "1x33x24x12x3", "2x7x16x4_step",
        "1x9x24x12x3_bf16", "2x40x32x4_step_bf16", "2x70x48x4_bf16dot",
        "1x40x32x4_step_bf16_bf16dot"},
       MhaCase},
      {"attention",
       Metric::kGflops,
       "BxHxTxD[_kvG][_causal][_dropout][_windowW][_softcapC][_sinks][_alibi]"
       "[_bf16dot]  fused softmax(Q K^T / sqrt(D)) V, G key/value heads, "
       "dropout 0.1, the softmax's variants, bf16 arithmetic; useful FLOPs "
       "(a window's pairs only)",
       Names(measure::StandardAttentionShapes()),
       {"1x2x5x8", "2x3x37x16_causal", "1x4x70x8_kv2_causal", "1x2x130x32",
        "2x4x67x16_kv2_causal_window9_softcap5_sinks_alibi",
        "1x3x200x8_window17", "1x6x40x8_kv3_window50_sinks_alibi",
        "1x2x300x64_causal_bf16dot", "1x4x70x16_kv2_window9_bf16dot"},
       [](const std::string& text) { return AttentionCase(text, false); }},
      {"decode",
       Metric::kGbPerSec,
       "BxHxNxD[_kvG][_qQ][_windowW][_softcapC][_sinks][_alibi][_kvbf16|_kvf16|"
       "_kvint8|_kvfp8|_kvfp8e5m2|_kvq8_0|_kvq4_0|_kvq4_1|_kviq4_nl][_pagedN]"
       "[_cold][_mlaN]"
       "[_bf16dot|_int8dot]  one "
       "query (Q with _qQ, causal) per sequence, the last of N "
       "cached keys (the last W with a window), in a KVCache of that type "
       "and layout, with _cold a copy per call past the L3, with _mlaN a "
       "latent cache whose values are the first N dims of each key row, "
       "with _bf16dot (bf16 or fp8 caches) bf16 arithmetic, with _int8dot "
       "kInt8 scores; bytes of K and V read",
       Names(measure::StandardDecodeShapes()),
       {"1x2x5x8",
        "2x4x300x16_kv2",
        "1x3x1000x64",
        "2x4x300x16_window40",
        "1x6x100x8_kv3_softcap30.5_sinks_alibi",
        "2x4x300x16_kv2_kvbf16",
        "2x4x300x16_kvf16_paged16",
        "1x6x1000x64_kv3_kvint8",
        "2x4x300x16_kv2_kvint8_paged32_window40_sinks",
        "2x2x70x8_paged16",
        "2x4x300x16_kvbf16_paged64",
        "1x2x70x8_kvf16",
        "1x16x500x16_kv2_kvbf16_paged16",
        "2x8x300x16_kv1_kvint8_cold",
        "2x16x300x36_kv1_mla32_kvbf16_paged16",
        "1x8x200x24_kv1_mla16",
        "2x4x300x32_kv2_kvfp8",
        "1x4x200x20_kvfp8e5m2_paged16_q7",
        "2x4x300x64_kv2_kvq8_0_paged16",
        "1x4x300x64_kv1_kvq4_0_q40",
        "1x2x200x32_kvq8_0_cold_q3",
        "2x8x300x64_kv2_kvq8_0_paged16_int8dot",
        "1x4x1000x64_kvq4_0_int8dot",
        "2x4x300x32_kv2_kvq4_0_window40_softcap30.5_sinks_q2_int8dot",
        "1x2x200x96_kvq8_0_q3_int8dot",
        "2x8x300x40_kv2_kvint8_paged16_int8dot",
        "1x4x1000x72_kvint8_window300_q3_int8dot",
        "1x3x300x72",
        "1x2x100x36_kvbf16_paged16",
        "1x2x60x18_kvf16",
        "2x6x300x64_kv2_kvint8_paged16_window50_int8dot",
        "2x4x300x72_kv2_kvfp8_paged16_bf16dot",
        "1x2x300x136_kvfp8e5m2_window100_bf16dot",
        "1x6x300x20_kv2_kvfp8_q2_bf16dot",
        "2x8x300x68_kv2_kvbf16_paged16_bf16dot",
        "1x16x300x72_kv1_mla64_kvbf16_bf16dot",
        "1x4x300x72_kv1_mla64_kvbf16_q2_bf16dot",
        "2x4x300x64_kv2_kvq4_1_paged16",
        "1x4x300x64_kviq4_nl_q3",
        "1x4x1000x64_kv2_kviq4_nl_int8dot"},
       [](const std::string& text) { return AttentionCase(text, true); }},
      {"append",
       Metric::kGbPerSec,
       "BxHxNxD[_kvbf16|_kvf16|_kvint8|_kvfp8|_kvfp8e5m2|_kvq8_0|_kvq4_0|_kvq4_"
       "1|"
       "_kviq4_nl]"
       "[_pagedN][_rope]  KVCache::Append of "
       "N tokens to each of B sequences of H key/value heads (an emptied "
       "cache), keys rotated with _rope; bytes of float K and V read and "
       "of the cache's written",
       {"8x12x512x64", "8x12x512x64_rope", "8x12x512x64_kvbf16_rope",
        "8x12x512x64_kvf16_rope", "8x12x512x64_kvint8_rope",
        "8x12x512x64_kvbf16_paged16_rope"},
       {"2x3x37x8", "2x3x37x20_rope", "1x2x70x16_kvbf16_paged16_rope",
        "2x2x33x10_kvf16", "2x3x50x24_kvint8_paged32_rope",
        "2x3x37x20_kvfp8_rope", "1x2x40x64_kvq4_0_paged16_rope",
        "1x2x40x64_kvq4_1_rope", "2x2x33x32_kviq4_nl_paged16",
        "2x2x33x32_kvq8_0"},
       AppendCase},
      {"serve",
       Metric::kGflops,
       "HxGxD_ctxN_dS_pSxT_vSxT[_windowW][_softcapC][_sinks][_alibi]"
       "[_tree][_kv<type>][_pagedN][_separate]  one serving step over a paged "
       "cache (blocks of 16 unless _pagedN): H query heads over G key/value "
       "heads of D dims, every sequence N cached tokens plus its new ones; "
       "S sequences decode a token (_dS), prefill T tokens (_pSxT) or verify "
       "T draft tokens (_vSxT), all in one VarlenAttention call, or one call "
       "per group with _separate; _tree: the drafts verified as a binary "
       "tree; useful FLOPs (causal's count)",
       {"32x8x128_ctx4096_d28_p2x512_v2x5",
        "32x8x128_ctx4096_d28_p2x512_v2x5_separate", "32x8x128_ctx4096_d32",
        "32x8x128_ctx4096_d32_separate"},
       {"4x2x16_ctx40_d3_p1x20_v2x3", "4x2x16_ctx40_d3_p1x20_v2x3_separate",
        "6x2x32_ctx100_d2_p1x37_window30_sinks_kvbf16_paged32",
        "4x1x64_ctx70_d2_v1x4_kvq8_0",
        "4x4x24_ctx50_p2x9_softcap20_alibi_kvint8", "4x2x16_ctx30_d2_v3x7_tree",
        "4x2x16_ctx30_d1_v2x6_tree_separate"},
       ServeCase},
  };
  return ops;
}

}  // namespace tools
}  // namespace simdattn
