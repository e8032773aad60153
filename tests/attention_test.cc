// Fused ScaledDotProductAttention on every SIMD target: against a float64
// reference (eval), against the library's own unfused Softmax -> Dropout ->
// BatchedMatMul path (dropout draws the same bits), masks, grouped-query
// heads, strided layouts, special rows, thread-count independence, memory
// bound, and argument errors.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/kernels.h"
#include "src/common/scratch.h"
#include "src/ops/matmul_bf16.h"
#include "tbb/task_arena.h"
#include "tests/test_util.h"
#include "tools/reference/reference.h"

namespace simdattn {
namespace {

using test::ExpectNear;

struct Shape {
  size_t batch, q_heads, kv_heads, q_tokens, k_tokens, head_dim, value_dim;
};

// Dense (b, h, T, D) operands filled with random values.
struct Operands {
  Shape s;
  std::vector<float> q, k, v, out;
  explicit Operands(const Shape& shape, uint64_t seed) : s(shape) {
    q = test::RandomVector(s.batch * s.q_heads * s.q_tokens * s.head_dim, seed);
    k = test::RandomVector(s.batch * s.kv_heads * s.k_tokens * s.head_dim,
                           seed + 1);
    v = test::RandomVector(s.batch * s.kv_heads * s.k_tokens * s.value_dim,
                           seed + 2);
    out.assign(s.batch * s.q_heads * s.q_tokens * s.value_dim, -7.0f);
  }
  ConstTensor4 Q() const {
    return ConstTensor4::Dense(q.data(), s.batch, s.q_heads, s.q_tokens,
                               s.head_dim);
  }
  ConstTensor4 K() const {
    return ConstTensor4::Dense(k.data(), s.batch, s.kv_heads, s.k_tokens,
                               s.head_dim);
  }
  ConstTensor4 V() const {
    return ConstTensor4::Dense(v.data(), s.batch, s.kv_heads, s.k_tokens,
                               s.value_dim);
  }
  Tensor4 Out() {
    return Tensor4::Dense(out.data(), s.batch, s.q_heads, s.q_tokens,
                          s.value_dim);
  }
};

// softmax(scale q k^T + mask) v in double; rows with nothing to attend are 0.
std::vector<double> Reference(const Operands& o, double scale,
                              const AttentionMask& mask) {
  return reference::Attention(o.Q(), o.K(), o.V(), scale, mask);
}

std::string Describe(const Shape& s) {
  return "b=" + std::to_string(s.batch) + " hq=" + std::to_string(s.q_heads) +
         " hkv=" + std::to_string(s.kv_heads) +
         " Tq=" + std::to_string(s.q_tokens) +
         " Tk=" + std::to_string(s.k_tokens) +
         " D=" + std::to_string(s.head_dim) +
         " Dv=" + std::to_string(s.value_dim);
}

class AttentionTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(AttentionTest);

// Shapes around the tile sizes (48-row query blocks on most targets, four
// per task, 64-key tiles), decode shapes that split the keys, grouped-query
// heads. Under emulation (test::Emulated()) the largest take fewer heads and
// tokens, crossing the same boundaries: more than four query blocks (two
// tasks), several key tiles, groups of four.
std::vector<Shape> Shapes() {
  const bool emulated = test::Emulated();
  return {
      {1, 1, 1, 1, 1, 1, 1},
      {1, 1, 1, 6, 6, 2, 2},
      {2, 2, 2, 7, 7, 3, 5},
      {1, 2, 1, 63, 63, 16, 16},
      {1, 1, 1, 64, 64, 64, 64},
      {1, 3, 3, 65, 65, 8, 24},
      emulated ? Shape{1, 4, 2, 97, 130, 32, 32}
               : Shape{2, 4, 2, 97, 130, 32, 32},
      emulated ? Shape{1, 1, 1, 200, 200, 64, 64}
               : Shape{1, 2, 2, 200, 200, 64, 64},
      {1, 1, 1, 1, 1000, 64, 64},
      emulated ? Shape{2, 4, 1, 3, 777, 40, 72}
               : Shape{2, 8, 1, 3, 777, 40, 72},
      {1, 4, 4, 50, 0, 8, 8},
      {1, 1, 1, 49, 300, 128, 128},
      emulated ? Shape{1, 2, 1, 211, 230, 16, 8}
               : Shape{1, 2, 1, 421, 450, 16, 8},
  };
}

TEST_P(AttentionTest, MatchesFloat64Reference) {
  uint64_t seed = 1;
  for (const Shape& s : Shapes()) {
    for (int variant = 0; variant < 3; ++variant) {
      Operands o(s, seed++);
      AttentionOptions options;
      if (variant >= 1) {
        options.mask.causal = true;
        // Queries are the last q_tokens of the keys (a KV cache).
        options.mask.causal_offset =
            s.k_tokens >= s.q_tokens ? s.k_tokens - s.q_tokens : 0;
      }
      std::vector<size_t> lengths(s.batch);
      if (variant == 2) {
        for (size_t b = 0; b < s.batch; ++b)
          lengths[b] = (s.k_tokens * (b + 1)) / 3;
        options.mask.key_lengths = lengths.data();
      }
      options.scale = 0.7f;
      ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
      ExpectNear(o.out, Reference(o, 0.7, options.mask), 2e-6,
                 Describe(s) + " variant " + std::to_string(variant));
    }
  }
}

// Operands rounded to bf16 (ToBFloat16), as kBFloat16 arithmetic sees them.
Operands Rounded(const Operands& o) {
  Operands r = o;
  for (std::vector<float>* x : {&r.q, &r.k, &r.v}) {
    for (float& e : *x) e = ToFloat(ToBFloat16(e));
  }
  return r;
}

// kBFloat16 attention over one tile of keys (k_tokens <= 256, the tile
// length on every target), causal from offset k_tokens - q_tokens, in
// double: P = bf16(exp(s - max)) over the rounded operands, divided by the
// sum of the unrounded exp(s - max).
std::vector<double> OneTileBFloat16Reference(const Operands& r, double scale) {
  const Shape& s = r.s;
  const size_t offset = s.k_tokens - s.q_tokens;
  std::vector<double> out;
  for (size_t b = 0; b < s.batch; ++b) {
    for (size_t h = 0; h < s.q_heads; ++h) {
      const size_t kh = h / (s.q_heads / s.kv_heads);
      for (size_t i = 0; i < s.q_tokens; ++i) {
        const size_t keys = i + offset + 1;
        std::vector<double> e(keys);
        double max = -INFINITY, sum = 0.0;
        for (size_t j = 0; j < keys; ++j) {
          double dot = 0.0;
          for (size_t c = 0; c < s.head_dim; ++c) {
            dot += double{r.Q().Slice(b, h)(i, c)} * r.K().Slice(b, kh)(j, c);
          }
          e[j] = scale * dot;
          max = std::max(max, e[j]);
        }
        for (double& x : e) sum += (x = std::exp(x - max));
        for (size_t c = 0; c < s.value_dim; ++c) {
          double acc = 0.0;
          for (size_t j = 0; j < keys; ++j) {
            acc += double{ToFloat(ToBFloat16(static_cast<float>(e[j])))} *
                   r.V().Slice(b, kh)(j, c);
          }
          out.push_back(acc / sum);
        }
      }
    }
  }
  return out;
}

// kBFloat16: Q, K, V and P rounded to bf16. Within one tile of keys the
// result is that of OneTileBFloat16Reference up to float32 scores and exp
// (a weight near a rounding boundary may round the other way: 2^-9 of it);
// over any shape and mask, within P's rounding (2^-8 of sum w |v|,
// |v| <= 1) of float64 attention over the rounded Q, K and V. On the
// default kernel (AMX tiles where the CPU has them), on vdpbf16ps where it
// has AVX512_BF16 (BFDOT on Arm), and on the float32 kernels: each once
// (attention takes bf16 pairs on each native kernel, float panels on the
// fallback). BFDOT rounds each step of its sums to odd (within an ulp, not
// half of one), so its scores move further and a weight near a rounding
// boundary flips more often: 1.7e-4 seen within one tile (SVE2, qemu).
TEST_P(AttentionTest, BFloat16ArithmeticRoundsOperandsAndWeights) {
  using internal::BFloat16DotKernelKind;
  using internal::BFloat16DotPolicy;
  const auto attention_code = [](BFloat16DotPolicy) {
    return static_cast<int>(internal::ChosenBFloat16DotKernel());
  };
  test::ForEachBFloat16DotPolicy(
      {BFloat16DotPolicy::kAuto, BFloat16DotPolicy::kDotProduct,
       BFloat16DotPolicy::kFallback},
      [&](BFloat16DotPolicy policy) {
        uint64_t seed = 300;
        const double one_tile =
            internal::ChosenBFloat16DotKernel() == BFloat16DotKernelKind::kBfdot
                ? 4e-4
                : 1e-4;
        for (const Shape& s : Shapes()) {
          for (const bool causal : {false, true}) {
            Operands o(s, seed++);
            AttentionOptions options;
            options.compute = ComputeType::kBFloat16;
            options.scale = 2.0f;  // Peaked weights: P's rounding shows.
            options.mask.causal = causal;
            options.mask.causal_offset =
                s.k_tokens >= s.q_tokens ? s.k_tokens - s.q_tokens : 0;
            // Long non-causal shapes take a window and a softcap instead.
            if (!causal && s.q_tokens > 40) {
              options.mask.causal = true;
              options.mask.window = 37;
              options.mask.softcap = 5.0f;
            }
            ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
            const Operands r = Rounded(o);
            const std::string what = Describe(s) + (causal ? " causal" : "") +
                                     " policy " +
                                     std::to_string(static_cast<int>(policy));
            ExpectNear(o.out, Reference(r, 2.0, options.mask), 1.0 / 256 + 2e-6,
                       what);
            if (causal && s.k_tokens <= 256 && s.k_tokens >= s.q_tokens) {
              // Unrounded P misses by ~1e-3 here; a flipped weight by ~3e-5.
              ExpectNear(o.out, OneTileBFloat16Reference(r, 2.0), one_tile,
                         what);
            }
          }
        }
      },
      attention_code);
}

// The variants of current models (kernels.h's AttentionMask), alone and
// combined, over the same shapes: sliding windows (W = 1, inside a tile,
// across tiles, beyond T), softcapping, ALiBi, sinks, per-sequence offsets
// and lengths; and each row's log-sum-exp.
TEST_P(AttentionTest, VariantsMatchFloat64Reference) {
  uint64_t seed = 100;
  const size_t windows[] = {1, 5, 70, 300, 5000};
  for (const Shape& s : Shapes()) {
    std::vector<float> slopes(s.q_heads), sinks(s.q_heads);
    for (size_t h = 0; h < s.q_heads; ++h) {
      slopes[h] = 0.5f / float(h + 1);
      sinks[h] = 0.3f * float(h) - 0.5f;
    }
    std::vector<size_t> offsets(s.batch), lengths(s.batch);
    for (size_t b = 0; b < s.batch; ++b) {
      offsets[b] =
          b * 3 + (s.k_tokens >= s.q_tokens ? s.k_tokens - s.q_tokens : 0);
      lengths[b] = s.k_tokens - (b * s.k_tokens) / 4;
    }
    for (int variant = 0; variant < 8; ++variant) {
      Operands o(s, seed++);
      AttentionOptions options;
      AttentionMask& m = options.mask;
      m.causal = variant % 2 == 0;
      m.causal_offset = s.k_tokens >= s.q_tokens ? s.k_tokens - s.q_tokens : 0;
      m.window = variant == 1 ? 0 : windows[variant % 5];
      if (variant == 2 || variant >= 6) m.softcap = 0.8f;
      if (variant == 3 || variant >= 6) m.alibi_slopes = slopes.data();
      if (variant == 4 || variant >= 6) m.sinks = sinks.data();
      if (variant == 5 || variant == 7) {
        m.causal_offsets = offsets.data();
        m.key_lengths = lengths.data();
      }
      std::vector<float> lse(s.batch * s.q_heads * s.q_tokens, -7.0f);
      options.log_sum_exp = lse.data();
      options.scale = 0.7f;
      ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
      std::vector<double> expected_lse;
      const std::string what = Describe(s) + " variant " +
                               std::to_string(variant) + " window " +
                               std::to_string(m.window);
      // Softcap and ALiBi round each score once more (tanh within 4 ulp).
      ExpectNear(
          o.out,
          reference::Attention(o.Q(), o.K(), o.V(), 0.7, m, &expected_lse),
          4e-6, what);
      if (o.out.empty()) continue;
      for (size_t r = 0; r < lse.size(); ++r) {
        if (std::isinf(expected_lse[r])) {
          EXPECT_EQ(lse[r], expected_lse[r]) << what << " row " << r;
        } else {
          EXPECT_NEAR(lse[r], expected_lse[r],
                      2e-6 * (1.0 + std::abs(expected_lse[r])))
              << what << " row " << r;
        }
      }
    }
  }
}

// ALiBi puts far keys at exp(-87) to exp(-104) of the row's largest weight,
// where a float is denormal. Those weights are flushed to 0, and no
// instruction makes a denormal (an Intel core takes a microcode assist for
// each that does): the underflow flag of the calling thread, which a
// one-thread arena runs every task on, stays clear, tiled and in decode.
TEST_P(AttentionTest, FarKeysUnderAlibiMakeNoDenormals) {
  for (const size_t q_tokens : {size_t{1}, size_t{160}}) {
    const Shape s{1, 2, 2, q_tokens, 160, 64, 64};
    Operands o(s, 11);
    const float slopes[] = {1.0f, 0.7f};
    AttentionOptions options;
    options.mask.causal = true;
    options.mask.causal_offset = s.k_tokens - q_tokens;
    options.mask.alibi_slopes = slopes;
    options.scale = 0.125f;
    int underflow = 0;
    tbb::task_arena(1).execute([&] {
      std::feclearexcept(FE_ALL_EXCEPT);
      ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
      underflow = std::fetestexcept(FE_UNDERFLOW);
    });
    EXPECT_EQ(underflow, 0) << Describe(s);
    ExpectNear(o.out, Reference(o, 0.125, options.mask), 4e-6, Describe(s));
  }
}

// Keys split over two calls (the sinks in the first) merge, through the
// log-sum-exps, into the one call's outputs and log-sum-exp.
TEST_P(AttentionTest, LogSumExpMergesPartialAttentions) {
  const Shape s{2, 4, 2, 37, 600, 16, 24};
  Operands o(s, 7);
  std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  AttentionOptions options;
  options.mask.causal = true;
  options.mask.causal_offset = s.k_tokens - s.q_tokens;
  options.mask.window = 450;
  options.mask.sinks = sinks.data();
  const size_t rows = s.batch * s.q_heads * s.q_tokens;
  std::vector<float> lse(rows);
  options.log_sum_exp = lse.data();
  ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);

  // Keys [0, split) with the sinks, then keys [split, Tk) without.
  const size_t split = 300;
  const ConstTensor4 k = o.K(), v = o.V();
  std::vector<float> out1(o.out.size()), out2(o.out.size());
  std::vector<float> lse1(rows), lse2(rows);
  AttentionOptions first = options;
  first.log_sum_exp = lse1.data();
  ConstTensor4 k1 = k, v1 = v;
  k1.dims[2] = v1.dims[2] = split;
  // Row i sits at i + offset among all keys, whichever part it sees.
  ScaledDotProductAttention(
      o.Q(), k1, v1,
      Tensor4::Dense(out1.data(), s.batch, s.q_heads, s.q_tokens, s.value_dim),
      first);
  AttentionOptions second = options;
  second.mask.sinks = nullptr;
  second.log_sum_exp = lse2.data();
  ConstTensor4 k2 = k, v2 = v;
  k2.data += split * k.strides[2];
  v2.data += split * v.strides[2];
  k2.dims[2] = v2.dims[2] = s.k_tokens - split;
  // Keys shift by `split`: so do the rows' positions and windows.
  second.mask.causal_offset -= split;
  ScaledDotProductAttention(
      o.Q(), k2, v2,
      Tensor4::Dense(out2.data(), s.batch, s.q_heads, s.q_tokens, s.value_dim),
      second);
  for (size_t r = 0; r < rows; ++r) {
    const double l1 = lse1[r], l2 = lse2[r];
    const double l =
        std::max(l1, l2) + std::log(std::exp(l1 - std::max(l1, l2)) +
                                    std::exp(l2 - std::max(l1, l2)));
    EXPECT_NEAR(lse[r], l, 2e-6 * (1.0 + std::abs(l))) << "row " << r;
    for (size_t c = 0; c < s.value_dim; ++c) {
      const size_t e = r * s.value_dim + c;
      const double merged =
          std::exp(l1 - l) * out1[e] + std::exp(l2 - l) * out2[e];
      EXPECT_NEAR(o.out[e], merged, 4e-6) << "row " << r << " column " << c;
    }
  }
}

// ALiBi's published slopes (the paper's get_slopes): 12 heads take the 8 of
// 8 heads, then every other one of 16 heads.
TEST(AlibiSlopes, AsPublished) {
  const std::vector<float> expected = {0.5f,        0.25f,       0.125f,
                                       0.0625f,     0.03125f,    0.015625f,
                                       0.0078125f,  0.00390625f, 0.70710678f,
                                       0.35355339f, 0.17677670f, 0.08838835f};
  const std::vector<float> slopes = AlibiSlopes(12);
  ASSERT_EQ(slopes.size(), expected.size());
  for (size_t h = 0; h < slopes.size(); ++h) {
    EXPECT_FLOAT_EQ(slopes[h], expected[h]) << h;
  }
  EXPECT_EQ(AlibiSlopes(1), std::vector<float>{0.00390625f});
  EXPECT_TRUE(AlibiSlopes(0).empty());
}

// A sink takes all the weight of a row that sees no key: zeros, LSE = sink.
TEST_P(AttentionTest, SinkAloneGivesZeros) {
  const Shape s{2, 2, 1, 5, 40, 8, 8};
  Operands o(s, 9);
  std::vector<float> sinks = {1.5f, -2.0f};
  std::vector<size_t> lengths = {0, 40};
  AttentionOptions options;
  options.mask.sinks = sinks.data();
  options.mask.key_lengths = lengths.data();
  std::vector<float> lse(s.batch * s.q_heads * s.q_tokens);
  options.log_sum_exp = lse.data();
  ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
  for (size_t h = 0; h < s.q_heads; ++h) {
    for (size_t i = 0; i < s.q_tokens; ++i) {
      EXPECT_EQ(lse[h * s.q_tokens + i], sinks[h]);
      for (size_t c = 0; c < s.value_dim; ++c) {
        EXPECT_EQ(o.out[(h * s.q_tokens + i) * s.value_dim + c], 0.0f);
      }
    }
  }
}

TEST_P(AttentionTest, BooleanAndAdditiveMasks) {
  const Shape s{2, 3, 3, 70, 90, 16, 16};
  Operands o(s, 42);
  std::vector<uint8_t> masked(s.batch * s.q_tokens * s.k_tokens);
  std::vector<float> additive(s.q_tokens * s.k_tokens);
  std::mt19937 rng(3);
  for (auto& m : masked) m = rng() % 4 == 0;
  // Row 5 of batch 1 entirely masked: it must come out as zeros.
  for (size_t j = 0; j < s.k_tokens; ++j) {
    masked[(1 * s.q_tokens + 5) * s.k_tokens + j] = 1;
  }
  for (auto& a : additive) a = float(rng() % 100) / 50.0f - 1.0f;
  AttentionOptions options;
  // Boolean mask shared by heads, additive mask shared by batch and heads.
  options.mask.boolean = Tensor4View<const uint8_t>(
      masked.data(), s.batch, s.q_heads, s.q_tokens, s.k_tokens,
      s.q_tokens * s.k_tokens, 0, s.k_tokens);
  options.mask.additive =
      ConstTensor4(additive.data(), s.batch, s.q_heads, s.q_tokens, s.k_tokens,
                   0, 0, s.k_tokens);
  options.mask.causal = true;
  options.mask.causal_offset = s.k_tokens - s.q_tokens;
  ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
  const double scale = 1.0 / std::sqrt(double(s.head_dim));
  ExpectNear(o.out, Reference(o, scale, options.mask), 2e-6, "masks");
  for (size_t h = 0; h < s.q_heads; ++h) {
    for (size_t c = 0; c < s.value_dim; ++c) {
      EXPECT_EQ(o.Out().Slice(1, h)(5, c), 0.0f);
    }
  }
}

// Grouped heads share their tiles of K and V (the heads of a group in one
// task, rows stacked token-major) yet each row keeps its own head's masks:
// per-head boolean and additive masks, ALiBi slopes and sinks, for decode
// (a few stacked rows, keys split) and for several tokens.
TEST_P(AttentionTest, GroupedHeadsKeepTheirOwnMasks) {
  const Shape shapes[] = {{1, 8, 2, 1, 600, 16, 16}, {2, 6, 2, 9, 300, 16, 24}};
  for (const Shape& s : shapes) {
    Operands o(s, 9);
    const size_t per_head = s.q_tokens * s.k_tokens;
    std::vector<uint8_t> masked(s.batch * s.q_heads * per_head);
    std::vector<float> additive(masked.size());
    std::mt19937 rng(11);
    for (size_t e = 0; e < masked.size(); ++e) {
      masked[e] = rng() % 3 == 0;
      additive[e] = float(rng() % 100) / 25.0f - 2.0f;
    }
    std::vector<float> slopes = AlibiSlopes(s.q_heads), sinks(s.q_heads);
    for (size_t h = 0; h < s.q_heads; ++h) sinks[h] = 0.4f * float(h) - 1.0f;
    AttentionOptions options;
    AttentionMask& m = options.mask;
    m.boolean = Tensor4View<const uint8_t>::Dense(
        masked.data(), s.batch, s.q_heads, s.q_tokens, s.k_tokens);
    m.additive = ConstTensor4::Dense(additive.data(), s.batch, s.q_heads,
                                     s.q_tokens, s.k_tokens);
    m.alibi_slopes = slopes.data();
    m.sinks = sinks.data();
    m.causal = true;
    m.causal_offset = s.k_tokens - s.q_tokens;
    options.scale = 0.5f;
    ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
    ExpectNear(o.out, Reference(o, 0.5, m), 4e-6, Describe(s));
  }
}

// The (batch, tokens, heads, head_dim) layout a projection writes, with
// padding between tokens: used in place, no transpose.
TEST_P(AttentionTest, TokenMajorStridedViews) {
  const size_t batch = 2, tokens = 75, heads = 4, kv_heads = 2, dim = 24;
  const size_t width = (heads + 2 * kv_heads) * dim + 5;  // Padded rows.
  const std::vector<float> qkv = test::RandomVector(batch * tokens * width, 9);
  const auto q = ConstTensor4::FromTokenMajor(qkv.data(), batch, tokens, heads,
                                              dim, width);
  const auto k = ConstTensor4::FromTokenMajor(qkv.data() + heads * dim, batch,
                                              tokens, kv_heads, dim, width);
  const auto v =
      ConstTensor4::FromTokenMajor(qkv.data() + (heads + kv_heads) * dim, batch,
                                   tokens, kv_heads, dim, width);
  std::vector<float> out(batch * tokens * heads * dim);
  AttentionOptions options;
  options.mask.causal = true;
  ScaledDotProductAttention(
      q, k, v, Tensor4::FromTokenMajor(out.data(), batch, tokens, heads, dim),
      options);
  // The same problem, dense.
  Operands o({batch, heads, kv_heads, tokens, tokens, dim, dim}, 1);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t t = 0; t < tokens; ++t) {
      for (size_t c = 0; c < dim; ++c) {
        for (size_t h = 0; h < heads; ++h) {
          o.q[((b * heads + h) * tokens + t) * dim + c] = q.Slice(b, h)(t, c);
        }
        for (size_t h = 0; h < kv_heads; ++h) {
          o.k[((b * kv_heads + h) * tokens + t) * dim + c] =
              k.Slice(b, h)(t, c);
          o.v[((b * kv_heads + h) * tokens + t) * dim + c] =
              v.Slice(b, h)(t, c);
        }
      }
    }
  }
  const std::vector<double> expected =
      Reference(o, 1.0 / std::sqrt(double(dim)), options.mask);
  double worst = 0.0;
  for (size_t b = 0; b < batch; ++b) {
    for (size_t h = 0; h < heads; ++h) {
      for (size_t t = 0; t < tokens; ++t) {
        for (size_t c = 0; c < dim; ++c) {
          const double e = expected[((b * heads + h) * tokens + t) * dim + c];
          const float a = out[((b * tokens + t) * heads + h) * dim + c];
          worst = std::max(worst, std::abs(a - e));
        }
      }
    }
  }
  EXPECT_LE(worst, 2e-6);
}

// Q, K, V and the output as column blocks of one (batch, tokens, 4 d) buffer:
// no element is shared, so it is accepted, and the output is the one that
// separate buffers give, bit for bit.
TEST_P(AttentionTest, OutputInterleavedWithInputs) {
  const size_t batch = 2, tokens = 70, heads = 3, dim = 16, d = heads * dim;
  const size_t width = 4 * d;
  std::vector<float> buffer = test::RandomVector(batch * tokens * width, 21);
  const auto view = [&](size_t block) {
    return Tensor4::FromTokenMajor(buffer.data() + block * d, batch, tokens,
                                   heads, dim, width);
  };
  std::vector<float> separate(batch * tokens * d);
  AttentionOptions options;
  options.mask.causal = true;
  ScaledDotProductAttention(
      view(0), view(1), view(2),
      Tensor4::FromTokenMajor(separate.data(), batch, tokens, heads, dim),
      options);
  ScaledDotProductAttention(view(0), view(1), view(2), view(3), options);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t h = 0; h < heads; ++h) {
      for (size_t t = 0; t < tokens; ++t) {
        for (size_t c = 0; c < dim; ++c) {
          ASSERT_EQ(view(3).Slice(b, h)(t, c),
                    separate[((b * tokens + t) * heads + h) * dim + c])
              << b << " " << h << " " << t << " " << c;
        }
      }
    }
  }
  // Shifted by one float, the output shares elements with V: rejected.
  const Tensor4 shifted = Tensor4::FromTokenMajor(
      buffer.data() + 3 * d - 1, batch, tokens, heads, dim, width);
  test::ExpectInvalid(
      [&] {
        ScaledDotProductAttention(view(0), view(1), view(2), shifted, options);
      },
      {"ScaledDotProductAttention: out overlaps v"});
}

// The unfused path the modules take when they must return the weights.
void Unfused(const Operands& o, const AttentionOptions& options,
             std::vector<float>* out) {
  const Shape& s = o.s;
  std::vector<float> weights(s.batch * s.q_heads * s.q_tokens * s.k_tokens);
  const Tensor4 w = Tensor4::Dense(weights.data(), s.batch, s.q_heads,
                                   s.q_tokens, s.k_tokens);
  MatMulOptions scores;
  scores.transpose_b = Transpose::kYes;
  scores.alpha = *options.scale;
  BatchedMatMul(o.Q(), o.K(), w, scores);
  Softmax(w, w, 1.0f, options.mask);
  Dropout(w, options.dropout, options.dropout_key);
  out->assign(s.batch * s.q_heads * s.q_tokens * s.value_dim, 0.0f);
  BatchedMatMul(
      w, o.V(),
      Tensor4::Dense(out->data(), s.batch, s.q_heads, s.q_tokens, s.value_dim));
}

// Dropout in the fused kernel draws Dropout()'s bits: a weight dropped in one
// path and kept in the other would change outputs by ~|v| / Tk, far above
// the tolerance.
TEST_P(AttentionTest, DropoutDropsTheSameWeightsAsUnfused) {
  const Shape shapes[] = {{2, 3, 3, 70, 70, 16, 16},
                          {1, 2, 1, 1, 1100, 32, 32},
                          {1, 4, 2, 30, 300, 16, 16},
                          {1, 1, 1, 130, 200, 8, 8}};
  for (const Shape& s : shapes) {
    for (float p : {0.1f, 0.5f}) {
      Operands o(s, 5);
      AttentionOptions options;
      options.scale = 0.3f;
      options.mask.causal = true;
      options.mask.causal_offset = s.k_tokens - s.q_tokens;
      options.dropout = p;
      options.dropout_key = {77, 3};
      ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
      std::vector<float> unfused;
      Unfused(o, options, &unfused);
      double worst = 0.0;
      for (size_t i = 0; i < unfused.size(); ++i) {
        worst = std::max(worst, double(std::abs(unfused[i] - o.out[i])));
      }
      // Kept weights are scaled by 1 / (1 - p): outputs up to that size.
      EXPECT_LE(worst, 4e-6 / (1 - p)) << Describe(s) << " p=" << p;
      // And the other seed gives another mask.
      std::vector<float> first = o.out;
      options.dropout_key.offset = 4;
      ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
      EXPECT_NE(first, o.out);
    }
  }
}

TEST_P(AttentionTest, SpecialRows) {
  const Shape s{1, 1, 1, 4, 100, 8, 8};
  Operands o(s, 8);
  o.q[1 * s.head_dim + 3] = std::numeric_limits<float>::quiet_NaN();  // Row 1.
  const size_t lengths[1] = {100};
  AttentionOptions options;
  options.mask.key_lengths = lengths;
  ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
  for (size_t c = 0; c < s.value_dim; ++c) {
    EXPECT_TRUE(std::isnan(o.out[1 * s.value_dim + c]));
    EXPECT_FALSE(std::isnan(o.out[2 * s.value_dim + c]));
  }
  // Every key masked: zeros, not NaN.
  const size_t none[1] = {0};
  options.mask.key_lengths = none;
  o.q[1 * s.head_dim + 3] = 0.0f;
  ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
  for (float x : o.out) EXPECT_EQ(x, 0.0f);
  // Dropout 1 drops every weight.
  options = {};
  options.dropout = 1.0f;
  ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
  for (float x : o.out) EXPECT_EQ(x, 0.0f);
}

TEST_P(AttentionTest, BitIdenticalForAnyThreadCount) {
  const Shape shapes[] = {{2, 4, 2, 130, 130, 32, 32},
                          {1, 2, 2, 1, 2000, 64, 64}};  // Split keys.
  for (const Shape& s : shapes) {
    test::ExpectSameBitsForAnyThreadCount(
        [&] {
          Operands o(s, 11);
          AttentionOptions options;
          options.mask.causal = true;
          options.mask.causal_offset = s.k_tokens - s.q_tokens;
          options.dropout = 0.2f;
          ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
          return o.out;
        },
        Describe(s));
  }
}

// The scores of T = 2048 would take 16 MiB a head; the kernel's scratch is
// a few tiles per thread whatever T is.
TEST(AttentionMemory, ExtraMemoryIndependentOfLength) {
  for (size_t tokens : {256, 2048}) {
    Operands o({1, 1, 1, tokens, tokens, 16, 16}, 4);
    AttentionOptions options;
    options.mask.causal = true;
    const size_t before = internal::ScratchBytesAllocated();
    ScaledDotProductAttention(o.Q(), o.K(), o.V(), o.Out(), options);
    const size_t used = internal::ScratchBytesAllocated() - before;
    const size_t tile_bytes = 64 * 1024;  // Order of one task's workspace.
    EXPECT_LE(used, 64 * tile_bytes) << tokens;
  }
}

// Every message starts with the function's name.
void ExpectInvalid(const std::function<void()>& call,
                   const std::vector<std::string>& parts) {
  const std::string message = test::ExpectInvalid(call, parts);
  EXPECT_EQ(message.rfind("ScaledDotProductAttention: ", 0), 0u) << message;
}

TEST(AttentionErrors, NameTheArgumentAndValues) {
  Operands o({1, 4, 2, 5, 6, 8, 8}, 1);
  const ConstTensor4 q = o.Q(), k = o.K(), v = o.V();
  const Tensor4 out = o.Out();
  ExpectInvalid(
      [&] {
        ScaledDotProductAttention(
            q, ConstTensor4::Dense(o.k.data(), 1, 3, 6, 8),
            ConstTensor4::Dense(o.v.data(), 1, 3, 6, 8), out);
      },
      {"q's heads (4)", "k's and v's heads (3)"});
  ExpectInvalid(
      [&] {
        ScaledDotProductAttention(
            q, ConstTensor4::Dense(o.k.data(), 1, 2, 6, 7), v, out);
      },
      {"k's head_dim (7)", "q's (8)"});
  ExpectInvalid(
      [&] {
        ScaledDotProductAttention(
            q, k, ConstTensor4::Dense(o.v.data(), 1, 2, 5, 8), out);
      },
      {"k (1, 2, 6, 8)", "v (1, 2, 5, 8)"});
  ExpectInvalid(
      [&] {
        ScaledDotProductAttention(q, k, v,
                                  Tensor4::Dense(o.out.data(), 1, 4, 5, 7));
      },
      {"out has shape (1, 4, 5, 7)", "expected (1, 4, 5, 8)"});
  AttentionOptions options;
  options.dropout = std::nanf("");
  ExpectInvalid([&] { ScaledDotProductAttention(q, k, v, out, options); },
                {"dropout (nan)"});
  options = {};
  options.scale = INFINITY;
  ExpectInvalid([&] { ScaledDotProductAttention(q, k, v, out, options); },
                {"scale (inf) is not finite"});
  ExpectInvalid(
      [&] {
        ScaledDotProductAttention(
            q, k, v,
            Tensor4::Dense(const_cast<float*>(o.q.data()), 1, 4, 5, 8));
      },
      {"out overlaps q"});
  ExpectInvalid(
      [&] {
        ScaledDotProductAttention(ConstTensor4::Dense(nullptr, 1, 4, 5, 8), k,
                                  v, out);
      },
      {"q is null", "(1, 4, 5, 8)"});
  options = {};
  const size_t lengths[1] = {7};
  options.mask.key_lengths = lengths;
  ExpectInvalid([&] { ScaledDotProductAttention(q, k, v, out, options); },
                {"mask.key_lengths[0] (7)", "k.dims[2] (6)"});
  options = {};
  std::vector<uint8_t> bytes(64);
  options.mask.boolean =
      Tensor4View<const uint8_t>::Dense(bytes.data(), 1, 4, 5, 5);
  ExpectInvalid([&] { ScaledDotProductAttention(q, k, v, out, options); },
                {"mask.boolean has shape (1, 4, 5, 5)", "(1, 4, 5, 6)"});
  // Empty shapes are valid and touch nothing.
  ScaledDotProductAttention(ConstTensor4::Dense(nullptr, 0, 4, 5, 8),
                            ConstTensor4::Dense(nullptr, 0, 2, 6, 8),
                            ConstTensor4::Dense(nullptr, 0, 2, 6, 8),
                            Tensor4::Dense(nullptr, 0, 4, 5, 8));
}

}  // namespace
}  // namespace simdattn
