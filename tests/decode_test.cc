// Generation with a KV cache: MultiHeadAttention::ForwardStep, token by token
// or after a prefill, equals the rows of one causal Forward over the whole
// sequence, on every SIMD target; grouped-query heads; cache errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/attention.h"
#include "simdattn/targets.h"
#include "tests/test_util.h"

namespace simdattn {
namespace {

using test::ExpectInvalid;

class DecodeTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(DecodeTest);

// The largest |a - b|, and the largest |a| (at least 1).
std::pair<double, double> WorstDifference(const std::vector<float>& a,
                                          const std::vector<float>& b) {
  double scale = 1.0, worst = 0.0;
  for (float f : a) scale = std::max(scale, double(std::abs(f)));
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  }
  return {worst, scale};
}

// Generates `tokens` outputs in steps of `step` tokens and compares each with
// the full forward's row; with variants, the full forward also with the
// unfused path (the attention weights returned). Sinks get random logits.
void ExpectStepsMatchFullForward(size_t num_heads, size_t num_kv_heads,
                                 size_t tokens, size_t prefill, size_t step,
                                 const AttentionVariants& variants = {}) {
  const size_t batch = 2, d_in = 24, d_out = 32;
  MultiHeadAttentionConfig config =
      test::MhaConfig(d_in, d_out, /*context_length=*/tokens, num_heads,
                      /*qkv_bias=*/true, /*seed=*/5);
  config.dropout = 0.1f;
  config.num_kv_heads = num_kv_heads;
  config.variants = variants;
  MultiHeadAttention mha(config);
  if (variants.sinks) {
    const std::vector<float> sinks = test::RandomVector(num_heads, 9, -2, 2);
    StateDict state_dict;
    std::vector<std::vector<float>> values;
    for (const auto& [name, shape] : mha.StateDictShapes()) {
      if (name == "mask") continue;
      size_t n = 1;
      for (size_t dim : shape) n *= dim;
      values.push_back(name == "sinks" ? sinks
                                       : test::RandomVector(n, values.size()));
      state_dict[name] = {values.back().data(), shape};
    }
    mha.LoadStateDict(state_dict);
  }
  const std::vector<float> x = test::RandomVector(batch * tokens * d_in, 3);
  std::vector<float> full(batch * tokens * d_out);
  mha.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
              Tensor3(full.data(), batch, tokens, d_out));
  const std::string what = "heads " + std::to_string(num_heads) + "/" +
                           std::to_string(num_kv_heads) + " prefill " +
                           std::to_string(prefill) + " step " +
                           std::to_string(step) + " window " +
                           std::to_string(variants.window);
  if (variants.window || variants.softcap || variants.alibi || variants.sinks) {
    std::vector<float> unfused(full.size());
    std::vector<float> weights(batch * num_heads * tokens * tokens);
    ForwardOptions options;
    options.attention_weights =
        Tensor4::Dense(weights.data(), batch, num_heads, tokens, tokens);
    mha.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                Tensor3(unfused.data(), batch, tokens, d_out), options);
    const auto [worst, scale] = WorstDifference(full, unfused);
    EXPECT_LE(worst, 1e-5 * scale) << what << ": unfused";
    // The weights: exactly 0 outside the window; rows sum to 1 less the
    // sink's share (visibly less in some rows).
    size_t sinking = 0;
    for (size_t row = 0; row < batch * num_heads * tokens; ++row) {
      const size_t i = row % tokens;
      double sum = 0.0;
      for (size_t j = 0; j < tokens; ++j) {
        const float w = weights[row * tokens + j];
        sum += w;
        if (j > i || (variants.window && j + variants.window <= i)) {
          ASSERT_EQ(w, 0.0f) << what << " row " << row << " key " << j;
        }
      }
      if (variants.sinks) {
        EXPECT_LT(sum, 1.0 + 1e-5) << what << " row " << row;
        sinking += sum < 1.0 - 1e-3;
      } else {
        EXPECT_NEAR(sum, 1.0, 1e-5) << what << " row " << row;
      }
    }
    if (variants.sinks) {
      EXPECT_GT(sinking, tokens) << what;
    }
    // Softcap and ALiBi change the result (same weights without them), by
    // ten times what the paths above may differ.
    if (variants.softcap != 0.0f || variants.alibi) {
      MultiHeadAttentionConfig plain_config = config;
      plain_config.variants = {};
      const MultiHeadAttention plain(plain_config);
      std::vector<float> without(full.size());
      plain.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                    Tensor3(without.data(), batch, tokens, d_out));
      EXPECT_GT(WorstDifference(full, without).first, 1e-4) << what;
    }
  }

  KVCache cache(batch, num_kv_heads == 0 ? num_heads : num_kv_heads, tokens,
                d_out / num_heads);
  std::vector<float> y(batch * tokens * d_out, -1.0f);
  size_t done = 0;
  while (done < tokens) {
    const size_t n =
        std::min(done == 0 && prefill ? prefill : step, tokens - done);
    // Views of tokens [done, done + n) of every batch item, in place.
    mha.ForwardStep(ConstTensor3(x.data() + done * d_in, batch, n, d_in,
                                 tokens * d_in, d_in),
                    cache,
                    Tensor3(y.data() + done * d_out, batch, n, d_out,
                            tokens * d_out, d_out));
    done += n;
    EXPECT_EQ(cache.size(), done);
  }
  const auto [worst, scale] = WorstDifference(full, y);
  EXPECT_LE(worst, 1e-5 * scale) << what;
}

TEST_P(DecodeTest, TokenByTokenEqualsFullForward) {
  ExpectStepsMatchFullForward(4, 0, 32, 0, 1);
}

TEST_P(DecodeTest, PrefillThenStepsEqualsFullForward) {
  ExpectStepsMatchFullForward(4, 0, 40, 17, 1);
  ExpectStepsMatchFullForward(2, 0, 30, 0, 7);
}

TEST_P(DecodeTest, GroupedAndMultiQueryHeads) {
  ExpectStepsMatchFullForward(4, 2, 32, 0, 1);
  ExpectStepsMatchFullForward(8, 1, 20, 5, 3);
}

// Long caches split the keys over tasks (few heads x one query): the merged
// partials must equal the unsplit result of a full forward.
TEST_P(DecodeTest, LongCacheSplitsKeys) {
  ExpectStepsMatchFullForward(2, 0, 1200, 1190, 1);
}

// Sliding windows (inside a step, longer than the sequence), softcapping,
// ALiBi and sinks, alone and together with grouped-query heads.
TEST_P(DecodeTest, VariantsStepsMatchFullForward) {
  AttentionVariants window, softcap, alibi, sinks, all;
  window.window = 5;
  softcap.softcap = 2.0f;
  alibi.alibi = true;
  sinks.sinks = true;
  all = {7, 1.5f, true, true};
  ExpectStepsMatchFullForward(4, 0, 30, 0, 1, window);
  ExpectStepsMatchFullForward(4, 2, 30, 11, 3, window);
  ExpectStepsMatchFullForward(2, 0, 300, 290, 1, AttentionVariants{400});
  ExpectStepsMatchFullForward(4, 0, 20, 0, 1, softcap);
  ExpectStepsMatchFullForward(4, 0, 20, 0, 1, alibi);
  ExpectStepsMatchFullForward(4, 2, 20, 6, 2, sinks);
  ExpectStepsMatchFullForward(4, 2, 40, 9, 1, all);
}

// A llama-style module (MultiHeadAttentionConfig::rope, grouped queries, no
// biases): Forward equals the composition of the public kernels (projections,
// ApplyRope on queries and keys, causal attention, out_proj), and generation
// steps over a cache that rotates keys itself or not give its rows.
TEST_P(DecodeTest, RopeModuleMatchesKernelsAndSteps) {
  const size_t batch = 2, tokens = 19, d_in = 24, d_out = 32, heads = 4,
               kv_heads = 2, head_dim = d_out / heads;
  for (const RopePairing pairing :
       {RopePairing::kHalfSplit, RopePairing::kInterleaved}) {
    RopeOptions rope;
    rope.pairing = pairing;
    rope.theta = 500.0f;
    rope.rotary_dim = pairing == RopePairing::kHalfSplit ? 0 : 4;  // Partial.
    MultiHeadAttentionConfig config = test::MhaConfig(d_in, d_out, 0, heads);
    config.num_kv_heads = kv_heads;
    config.rope = rope;
    MultiHeadAttention mha(config);
    const std::vector<float> wq = test::RandomVector(d_out * d_in, 1);
    const std::vector<float> wk =
        test::RandomVector(kv_heads * head_dim * d_in, 2);
    const std::vector<float> wv =
        test::RandomVector(kv_heads * head_dim * d_in, 3);
    const std::vector<float> wo = test::RandomVector(d_out * d_out, 4);
    const std::vector<float> bo = test::RandomVector(d_out, 5);
    mha.LoadStateDict(
        {{"W_query.weight", {wq.data(), {d_out, d_in}}},
         {"W_key.weight", {wk.data(), {kv_heads * head_dim, d_in}}},
         {"W_value.weight", {wv.data(), {kv_heads * head_dim, d_in}}},
         {"out_proj.weight", {wo.data(), {d_out, d_out}}},
         {"out_proj.bias", {bo.data(), {d_out}}}});
    const std::vector<float> x = test::RandomVector(batch * tokens * d_in, 6);
    std::vector<float> full(batch * tokens * d_out);
    mha.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                Tensor3(full.data(), batch, tokens, d_out));

    // The same from the kernels.
    const size_t rows = batch * tokens, kv_dim = kv_heads * head_dim;
    std::vector<float> q(rows * d_out), k(rows * kv_dim), v(rows * kv_dim);
    MatMulOptions linear;
    linear.transpose_b = Transpose::kYes;
    const ConstMatrix xm(x.data(), rows, d_in);
    MatMul(xm, ConstMatrix(wq.data(), d_out, d_in),
           Matrix(q.data(), rows, d_out), linear);
    MatMul(xm, ConstMatrix(wk.data(), kv_dim, d_in),
           Matrix(k.data(), rows, kv_dim), linear);
    MatMul(xm, ConstMatrix(wv.data(), kv_dim, d_in),
           Matrix(v.data(), rows, kv_dim), linear);
    const Tensor4 q4 =
        Tensor4::FromTokenMajor(q.data(), batch, tokens, heads, head_dim);
    const Tensor4 k4 =
        Tensor4::FromTokenMajor(k.data(), batch, tokens, kv_heads, head_dim);
    ApplyRope(q4, rope);
    ApplyRope(k4, rope);
    std::vector<float> context(rows * d_out), expected(rows * d_out);
    AttentionOptions causal;
    causal.mask.causal = true;
    ScaledDotProductAttention(
        q4, k4,
        Tensor4::FromTokenMajor(v.data(), batch, tokens, kv_heads, head_dim),
        Tensor4::FromTokenMajor(context.data(), batch, tokens, heads, head_dim),
        causal);
    linear.bias = bo.data();
    MatMul(ConstMatrix(context.data(), rows, d_out),
           ConstMatrix(wo.data(), d_out, d_out),
           Matrix(expected.data(), rows, d_out), linear);
    const auto [worst, scale] = WorstDifference(full, expected);
    EXPECT_LE(worst, 1e-6 * scale) << "rotary_dim " << rope.rotary_dim;

    // Rotation matters: without it the outputs differ.
    MultiHeadAttentionConfig plain_config = config;
    plain_config.rope.reset();
    MultiHeadAttention plain(plain_config);
    std::vector<float> unrotated(full.size());
    plain.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                  Tensor3(unrotated.data(), batch, tokens, d_out));
    EXPECT_GT(WorstDifference(full, unrotated).first, 1e-4);

    // Steps (a prefill of 5, then one token at a time), over a cache without
    // RoPE (the module rotates keys) and one rotating them on append.
    for (const bool cache_rotates : {false, true}) {
      KVCacheConfig cache_config;
      if (cache_rotates) cache_config.rope = rope;
      KVCache cache(batch, kv_heads, tokens, head_dim, cache_config);
      std::vector<float> y(full.size(), -1.0f);
      for (size_t done = 0; done < tokens;) {
        const size_t n = done == 0 ? 5 : 1;
        mha.ForwardStep(ConstTensor3(x.data() + done * d_in, batch, n, d_in,
                                     tokens * d_in, d_in),
                        cache,
                        Tensor3(y.data() + done * d_out, batch, n, d_out,
                                tokens * d_out, d_out));
        done += n;
      }
      const auto [step_worst, step_scale] = WorstDifference(full, y);
      EXPECT_LE(step_worst, 1e-5 * step_scale)
          << "cache rotates " << cache_rotates;
    }
  }
}

TEST(DecodeErrors, RopeOfModuleAndCacheMustAgree) {
  MultiHeadAttentionConfig config = test::MhaConfig(8, 8, 16, 2);
  const std::vector<float> x(8);
  std::vector<float> y(8);
  KVCacheConfig rotating;
  rotating.rope = RopeOptions{};
  KVCache cache(1, 2, 4, 4, rotating);
  const auto step = [&](const MultiHeadAttention& mha) {
    mha.ForwardStep(ConstTensor3(x.data(), 1, 1, 8), cache,
                    Tensor3(y.data(), 1, 1, 8));
  };
  ExpectInvalid([&] { step(MultiHeadAttention(config)); },
                "no rotary embedding for its queries");
  config.rope = RopeOptions{};
  config.rope->theta = 1e6f;
  ExpectInvalid([&] { step(MultiHeadAttention(config)); },
                "other rope options");
  config.rope->theta = 10000.0f;
  step(MultiHeadAttention(config));
  EXPECT_EQ(cache.length(0), 1u);
  size_t positions[1] = {0};
  config.rope->positions = positions;
  ExpectInvalid([&] { MultiHeadAttention{config}; }, "rope->positions");
  config.rope->positions = nullptr;
  config.rope->rotary_dim = 3;
  ExpectInvalid([&] { MultiHeadAttention{config}; }, "rope");
}

TEST(DecodeErrors, VariantsAreChecked) {
  ExpectInvalid(
      [] {
        MultiHeadAttentionConfig config = test::MhaConfig(8, 8, 16, 2);
        config.variants.softcap = -1.0f;
        MultiHeadAttention{config};
      },
      "variants.softcap (-1)");
  AttentionVariants sinks;
  sinks.sinks = true;
  MultiHeadAttentionConfig sinks_config = test::MhaConfig(8, 8, 16, 2);
  sinks_config.variants = sinks;
  const MultiHeadAttention mha(sinks_config);
  EXPECT_EQ(mha.StateDictShapes().at("sinks"), std::vector<size_t>{2});
}

TEST(DecodeErrors, CacheShapeAndCapacity) {
  const MultiHeadAttention mha(8, 8, 16, 0.0f, 2);
  const std::vector<float> x(3 * 8);
  std::vector<float> y(3 * 8);
  KVCache small(1, 2, 2, 4);
  ExpectInvalid(
      [&] {
        mha.ForwardStep(ConstTensor3(x.data(), 1, 3, 8), small,
                        Tensor3(y.data(), 1, 3, 8));
      },
      "the cache holds 0 of 2 tokens: no room for 3 more");
  KVCache wrong(1, 1, 8, 4);
  ExpectInvalid(
      [&] {
        mha.ForwardStep(ConstTensor3(x.data(), 1, 1, 8), wrong,
                        Tensor3(y.data(), 1, 1, 8));
      },
      "kv_heads 1");
  KVCache big(1, 2, 32, 4);
  ForwardOptions training;
  training.training = true;
  const MultiHeadAttention with_dropout(8, 8, 16, 0.5f, 2);
  ExpectInvalid(
      [&] {
        with_dropout.ForwardStep(ConstTensor3(x.data(), 1, 1, 8), big,
                                 Tensor3(y.data(), 1, 1, 8), training);
      },
      "eval mode");
  std::vector<float> kv(64);
  ExpectInvalid(
      [&] {
        big.Append(ConstTensor4::Dense(kv.data(), 1, 2, 3, 5),
                   ConstTensor4::Dense(kv.data(), 1, 2, 3, 5));
      },
      "keys have shape (1, 2, 3, 5), expected (1, 2, 3, 4)");
  ExpectInvalid(
      [&] {
        KVCache(Tensor4::Dense(kv.data(), 1, 2, 4, 4),
                Tensor4::Dense(kv.data() + 8, 1, 2, 4, 4));
      },
      "keys overlap values");
  // Fills to the context length, then refuses more.
  KVCache cache(1, 2, 64, 4);
  for (int t = 0; t < 16; ++t) {
    mha.ForwardStep(ConstTensor3(x.data(), 1, 1, 8), cache,
                    Tensor3(y.data(), 1, 1, 8));
  }
  ExpectInvalid(
      [&] {
        mha.ForwardStep(ConstTensor3(x.data(), 1, 1, 8), cache,
                        Tensor3(y.data(), 1, 1, 8));
      },
      "num_tokens (17) exceeds context_length (16)");
}

// Weights kept in bf16 or f16 (LoadOptions::keep_dtype) give the bits of the
// same weights widened to float, in Forward and ForwardStep, for the
// nn.Linear and the nn.Parameter (transposed) layouts; half the bytes.
TEST_P(DecodeTest, SixteenBitWeightsGiveTheWidenedWeightsResults) {
  const size_t batch = 2, tokens = 9, d_in = 24, d_out = 32;
  const std::vector<float> x = test::RandomVector(batch * tokens * d_in, 1);
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    MultiHeadAttentionConfig config =
        test::MhaConfig(d_in, d_out, tokens, 4, true);
    config.num_kv_heads = 2;
    MultiHeadAttention wide(config);
    MultiHeadAttention kept(config);
    StateDict narrow_dict, wide_dict;
    std::vector<std::vector<uint16_t>> bits;
    std::vector<std::vector<float>> widened;
    for (const auto& [name, shape] : wide.StateDictShapes()) {
      if (name == "mask") continue;
      size_t n = 1;
      for (size_t dim : shape) n *= dim;
      const std::vector<float> values = test::RandomVector(n, bits.size() + 7);
      bits.emplace_back(n);
      widened.emplace_back(n);
      for (size_t i = 0; i < n; ++i) {
        if (dtype == DType::kBF16) {
          const BFloat16 b = ToBFloat16(values[i]);
          bits.back()[i] = b.bits;
          widened.back()[i] = ToFloat(b);
        } else {
          const Float16 h = ToFloat16(values[i]);
          bits.back()[i] = h.bits;
          widened.back()[i] = ToFloat(h);
        }
      }
      narrow_dict[name] = {bits.back().data(), shape, dtype};
      wide_dict[name] = {widened.back().data(), shape};
    }
    wide.LoadStateDict(wide_dict);
    LoadOptions keep;
    keep.keep_dtype = true;
    kept.LoadStateDict(narrow_dict, keep);
    EXPECT_EQ(kept.weight_dtype(), dtype);
    EXPECT_EQ(wide.weight_dtype(), DType::kF32);
    // Projections dominate: well under 60% of the float module's bytes.
    EXPECT_LT(kept.weight_bytes(), wide.weight_bytes() * 6 / 10);
    std::vector<float> y_wide(batch * tokens * d_out), y_kept(y_wide.size());
    wide.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                 Tensor3(y_wide.data(), batch, tokens, d_out));
    kept.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                 Tensor3(y_kept.data(), batch, tokens, d_out));
    EXPECT_EQ(y_wide, y_kept);
    KVCache cache_wide(batch, 2, tokens, 8), cache_kept(batch, 2, tokens, 8);
    for (size_t t = 0; t < tokens; ++t) {
      const ConstTensor3 step(x.data() + t * d_in, batch, 1, d_in,
                              tokens * d_in, d_in);
      wide.ForwardStep(step, cache_wide,
                       Tensor3(y_wide.data(), batch, 1, d_out));
      kept.ForwardStep(step, cache_kept,
                       Tensor3(y_kept.data(), batch, 1, d_out));
      ASSERT_EQ(y_wide, y_kept) << "step " << t;
    }
    // Without keep_dtype the same tensors are widened.
    MultiHeadAttention widened_on_load(config);
    widened_on_load.LoadStateDict(narrow_dict);
    EXPECT_EQ(widened_on_load.weight_dtype(), DType::kF32);
    widened_on_load.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                            Tensor3(y_kept.data(), batch, tokens, d_out));
    wide.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                 Tensor3(y_wide.data(), batch, tokens, d_out));
    EXPECT_EQ(y_wide, y_kept);
    // A failed load changes nothing, not even how the weights are held.
    StateDict missing = narrow_dict;
    missing.erase("out_proj.weight");
    ExpectInvalid([&] { kept.LoadStateDict(missing, keep); },
                  "missing tensor 'out_proj.weight'");
    EXPECT_EQ(kept.weight_dtype(), dtype);
    kept.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                 Tensor3(y_kept.data(), batch, tokens, d_out));
    EXPECT_EQ(y_wide, y_kept);
    // Re-initialising returns to float, and products see the new weights
    // (nothing packed from the old ones is kept).
    kept.InitializeWeights(3);
    EXPECT_EQ(kept.weight_dtype(), DType::kF32);
    MultiHeadAttention fresh(config);
    fresh.InitializeWeights(3);
    kept.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                 Tensor3(y_kept.data(), batch, tokens, d_out));
    fresh.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
                  Tensor3(y_wide.data(), batch, tokens, d_out));
    EXPECT_EQ(y_wide, y_kept);
  }

  // SelfAttention_v1's (d_in, d_out) parameters, transposed on load.
  const size_t d = 6;
  SelfAttentionV1 v1_wide(d, 4), v1_kept(d, 4);
  std::vector<std::vector<uint16_t>> bits;
  std::vector<std::vector<float>> widened;
  StateDict narrow_dict, wide_dict;
  for (const char* name : {"W_query", "W_key", "W_value"}) {
    const std::vector<float> values = test::RandomVector(d * 4, bits.size());
    bits.emplace_back(values.size());
    widened.emplace_back(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      bits.back()[i] = ToBFloat16(values[i]).bits;
      widened.back()[i] = ToFloat(BFloat16{bits.back()[i]});
    }
    narrow_dict[name] = {bits.back().data(), {d, 4}, DType::kBF16};
    wide_dict[name] = {widened.back().data(), {d, 4}};
  }
  v1_wide.LoadStateDict(wide_dict);
  LoadOptions keep;
  keep.keep_dtype = true;
  v1_kept.LoadStateDict(narrow_dict, keep);
  EXPECT_EQ(v1_kept.weight_dtype(), DType::kBF16);
  std::vector<float> a(5 * 4), b(5 * 4);
  v1_wide.Forward(ConstMatrix(x.data(), 5, d), Matrix(a.data(), 5, 4));
  v1_kept.Forward(ConstMatrix(x.data(), 5, d), Matrix(b.data(), 5, 4));
  EXPECT_EQ(a, b);

  // Mixed 16-bit types cannot be kept; the module is left as it was.
  std::vector<uint16_t> ones(d * 4, 0x3C00);  // 1.0 in f16.
  narrow_dict["W_key"] = {ones.data(), {d, 4}, DType::kF16};
  ExpectInvalid([&] { v1_kept.LoadStateDict(narrow_dict, keep); },
                {"SelfAttentionV1", "keep_dtype", "'W_key'"});
  EXPECT_EQ(v1_kept.weight_dtype(), DType::kBF16);
  v1_kept.Forward(ConstMatrix(x.data(), 5, d), Matrix(b.data(), 5, 4));
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace simdattn

namespace simdattn {
namespace {

// LastAttentionPlan names what the calling thread's last call ran: nothing
// on a thread that made none; a decode's few-row tasks and their products;
// a task of many rows whose partials would outweigh its keys split into
// chunks of twice the tile (128 heads of 16 dims read values of 64: a
// split's 128 x 64 floats of partials, written and read, match 1024 keys of
// 64 bytes).
TEST_P(DecodeTest, LastAttentionPlanNamesWhatRan) {
  std::vector<std::string> fresh = {"not called"};
  std::thread([&] { fresh = LastAttentionPlan(); }).join();
  EXPECT_TRUE(fresh.empty());
  const auto contains = [](const std::vector<std::string>& lines,
                           const std::string& text) {
    for (const std::string& line : lines) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  };
  const auto joined = [](const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& line : lines) out += line + "\n";
    return out;
  };
  const auto attend = [](size_t heads, size_t kv_heads, size_t tokens,
                         size_t head_dim, size_t value_dim) {
    const std::vector<float> q = test::RandomVector(heads * head_dim, 1),
                             k = test::RandomVector(
                                 kv_heads * tokens * head_dim, 2),
                             v = test::RandomVector(
                                 kv_heads * tokens * value_dim, 3);
    std::vector<float> out(heads * value_dim);
    ScaledDotProductAttention(
        ConstTensor4::Dense(q.data(), 1, heads, 1, head_dim),
        ConstTensor4::Dense(k.data(), 1, kv_heads, tokens, head_dim),
        ConstTensor4::Dense(v.data(), 1, kv_heads, tokens, value_dim),
        Tensor4::Dense(out.data(), 1, heads, 1, value_dim));
    return LastAttentionPlan();
  };
  const std::vector<std::string> decode = attend(8, 2, 300, 32, 32);
  const std::string what = "decode:\n" + joined(decode);
  EXPECT_TRUE(
      contains(decode, "target " + ActiveTarget() + ", f32 cache, float32"))
      << what;
  EXPECT_TRUE(contains(decode, "2 tasks of 4 query heads")) << what;
  EXPECT_TRUE(contains(decode, "rows: K and V read in place, float32 rows"))
      << what;
  EXPECT_FALSE(contains(decode, "packed")) << what;

  const std::vector<std::string> heavy = attend(128, 1, 2048, 16, 64);
  const std::string heavy_what = "128 heads:\n" + joined(heavy);
  EXPECT_TRUE(contains(heavy, "1 task of 128 query heads")) << heavy_what;
  EXPECT_TRUE(contains(heavy, "split 2 ways, 1024 each")) << heavy_what;
  EXPECT_TRUE(contains(heavy, "tasks: tiles of K and V packed, float32"))
      << heavy_what;

  // head_dim 0 (keys of no bytes, every score 0): planned all the same,
  // each output the values' mean.
  constexpr size_t kHeads = 128, kKeys = 2048, kValueDim = 8;
  const std::vector<float> v = test::RandomVector(kKeys * kValueDim, 4);
  std::vector<float> out(kHeads * kValueDim);
  const float none = 0.0f;
  ScaledDotProductAttention(
      ConstTensor4::Dense(&none, 1, kHeads, 1, 0),
      ConstTensor4::Dense(&none, 1, 1, kKeys, 0),
      ConstTensor4::Dense(v.data(), 1, 1, kKeys, kValueDim),
      Tensor4::Dense(out.data(), 1, kHeads, 1, kValueDim));
  EXPECT_TRUE(contains(LastAttentionPlan(), "1 task of 128 query heads"));
  for (size_t c = 0; c < kValueDim; ++c) {
    double mean = 0.0;
    for (size_t j = 0; j < kKeys; ++j) mean += v[j * kValueDim + c];
    mean /= kKeys;
    for (size_t h = 0; h < kHeads; ++h) {
      ASSERT_NEAR(out[h * kValueDim + c], mean, 1e-5) << h << " " << c;
    }
  }
}

// The policy table's rules by CPU, and overrides that nest and restore.
TEST(PolicyTable, RulesFollowTheCpuDescription) {
  using internal::CpuDescription;
  using internal::CpuVendor;
  CpuDescription zen4;
  zen4.vendor = CpuVendor::kAmd;
  zen4.family = 0x19;
  CpuDescription zen5 = zen4;
  zen5.family = 0x1A;
  CpuDescription xeon;
  xeon.vendor = CpuVendor::kIntel;
  xeon.family = 6;
  std::vector<std::string> rules;
  const internal::Policy p4 = internal::PolicyFor(zen4, &rules);
  EXPECT_FALSE(p4.pace_rows_from_memory);
  EXPECT_TRUE(p4.direct_e4m3 && p4.bf16_decode_pairs && p4.fp8_decode_pairs &&
              p4.dot_product_pairs);
  EXPECT_EQ(rules.size(), 5u);
  const internal::Policy p5 = internal::PolicyFor(zen5);
  EXPECT_TRUE(p5.pace_rows_from_memory && p5.direct_e4m3 &&
              p5.bf16_decode_pairs);
  EXPECT_FALSE(p5.fp8_decode_pairs);
  EXPECT_EQ(p5.cached_decode_pair_rows, 1u);
  EXPECT_EQ(p4.cached_decode_pair_rows, 4u);
  EXPECT_EQ(p5.decode_pair_rows, 4u);
  rules.clear();
  const internal::Policy px = internal::PolicyFor(xeon, &rules);
  EXPECT_TRUE(px.pace_rows_from_memory);
  EXPECT_FALSE(px.direct_e4m3 || px.bf16_decode_pairs || px.fp8_decode_pairs ||
               px.dot_product_pairs);
  EXPECT_TRUE(rules.empty());
  EXPECT_EQ(px.bf16_dot, internal::BFloat16DotPolicy::kAuto);
  CpuDescription arm;
  arm.arm_bf16 = true;
  const internal::Policy pa = internal::PolicyFor(arm, &rules);
  EXPECT_TRUE(pa.bf16_decode_pairs);
  EXPECT_FALSE(pa.fp8_decode_pairs || pa.dot_product_pairs || pa.direct_e4m3);
  EXPECT_EQ(rules.size(), 1u);

  const internal::Policy table = internal::ActivePolicy();
  {
    const auto outer =
        test::ForcePolicy([](internal::Policy& p) { p.from_memory_bytes = 7; });
    {
      const auto inner = test::ForcePolicy([](internal::Policy& p) {
        p.bf16_decode_pairs = !p.bf16_decode_pairs;
      });
      EXPECT_EQ(internal::ActivePolicy().from_memory_bytes, 7u);
      EXPECT_NE(internal::ActivePolicy().bf16_decode_pairs,
                table.bf16_decode_pairs);
    }
    EXPECT_EQ(internal::ActivePolicy().bf16_decode_pairs,
              table.bf16_decode_pairs);
    EXPECT_EQ(internal::ActivePolicy().from_memory_bytes, 7u);
  }
  EXPECT_EQ(internal::ActivePolicy().from_memory_bytes,
            table.from_memory_bytes);
  EXPECT_FALSE(CpuSummary().empty());
}

// A plan file: its knobs (the speed knobs) replace the table's when it was
// made on this CPU by this version; one from another CPU or version, or
// malformed, is refused with a message naming both sides (or the line) and
// changes nothing; an empty path goes back to the table.
TEST(PlanFiles, LoadOnlyWhatThisMachineMade) {
  const std::string path = testing::TempDir() + "simdattn_plans_test.txt";
  const auto write = [&](const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  };
  const auto message = [&] {
    try {
      LoadPlans(path);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  const internal::Policy table = internal::ActivePolicy();
  internal::PlanFile file;
  file.cpu = CpuSummary();
  file.version = Version();
  file.knobs = {{"matmul_task_tiles", "5", "measured"},
                {"direct_e4m3", table.direct_e4m3 ? "false" : "true", ""}};
  const std::string text = file.Format();
  const internal::PlanFile parsed = internal::PlanFile::Parse(text, "x");
  EXPECT_EQ(parsed.Format(), text);

  write(text);
  ASSERT_EQ(message(), "loaded");
  EXPECT_EQ(internal::ActivePolicy().matmul_task_tiles, 5u);
  EXPECT_NE(internal::ActivePolicy().direct_e4m3, table.direct_e4m3);
  EXPECT_EQ(internal::ActivePolicy().pace_rows_from_memory,
            table.pace_rows_from_memory);
  const std::vector<std::string> rules = PolicyRules();
  ASSERT_GE(rules.size(), 2u);
  EXPECT_EQ(rules[rules.size() - 2],
            "matmul_task_tiles = 5: tuned (" + path + "), measured");
  EXPECT_EQ(internal::ActivePolicySource(), "the table and plan file " + path);

  const auto refused = [&](const std::string& bad, const std::string& want) {
    write(bad);
    const std::string m = message();
    EXPECT_NE(m.find(want), std::string::npos) << m;
    EXPECT_EQ(internal::ActivePolicy().matmul_task_tiles, 5u) << m;
  };
  internal::PlanFile other = file;
  other.cpu = "Intel family 0x6 model 0x8f, AMX-BF16, 1 cores";
  refused(other.Format(), "tuned on \"" + other.cpu + "\" by simdattn " +
                              file.version + "; this is \"" + file.cpu +
                              "\", simdattn " + file.version);
  other = file;
  other.version = "0.0.1";
  refused(other.Format(), "by simdattn 0.0.1; this is");
  refused("simdattn " + file.version + "\ncpu " + file.cpu +
              "\nmatmul_task_tiles 0\n",
          ":3: SetKnob: matmul_task_tiles takes a whole number in [1, 64]");
  refused(
      "simdattn " + file.version + "\ncpu " + file.cpu + "\nrow_pacing true\n",
      ":3: SetKnob: no knob \"row_pacing\"");
  // A kernel choice changes bits: not a plan's.
  refused("simdattn " + file.version + "\ncpu " + file.cpu +
              "\nbf16_decode_pairs false\n",
          ":3: SetKnob: no knob \"bf16_decode_pairs\"");
  refused("matmul_task_tiles 4\n", ":1: the simdattn and cpu lines come");
  refused("# nothing\n", "not a plan file");
  std::remove(path.c_str());
  EXPECT_NE(message().find("cannot read plan file \"" + path),
            std::string::npos);

  LoadPlans("");
  EXPECT_EQ(internal::ActivePolicy().matmul_task_tiles,
            table.matmul_task_tiles);
  EXPECT_EQ(internal::ActivePolicySource(), "the table");
  EXPECT_EQ(PolicyRules().size(), [] {
    std::vector<std::string> r;
    internal::PolicyFor(internal::ThisCpu(), &r);
    return r.size();
  }());
}

}  // namespace
}  // namespace simdattn
