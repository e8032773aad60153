// The measurement library (tools/measure) that `simdattn bench` and bench/
// share: FLOP counts, shape names and the SIMD target scope.
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/targets.h"
#include "tools/measure/shapes.h"
#include "tools/measure/target_scope.h"

namespace simdattn {
namespace {

using measure::AttentionFlops;

// 4 head_dim per visible (query, key) pair, times batch and heads.
TEST(AttentionFlops, CountsOnlyThePairsAQuerySees) {
  const double per_pair = 4.0 * 2 * 3 * 8;  // batch 2, heads 3, head_dim 8.
  EXPECT_EQ(AttentionFlops(2, 3, 5, 7, 8, false), per_pair * 5 * 7);
  // Causal prefill: 1 + 2 + ... + 5, the diagonal included.
  EXPECT_EQ(AttentionFlops(2, 3, 5, 5, 8, true), per_pair * 15);
  // Fewer queries than keys (the last positions): 3 + 4 + 5.
  EXPECT_EQ(AttentionFlops(2, 3, 3, 5, 8, true), per_pair * 12);
  // A decode query sees its whole cache.
  EXPECT_EQ(AttentionFlops(2, 3, 1, 7, 8, true), per_pair * 7);
}

// A window W keeps the last W keys a causal query sees: exactly the pairs
// p - W < j <= p.
TEST(AttentionFlops, CountsOnlyAWindowsPairs) {
  const double per_pair = 4.0 * 2 * 3 * 8;
  // Rows 0..4 see 1, 2, 2, 2, 2 keys.
  EXPECT_EQ(AttentionFlops(2, 3, 5, 5, 8, true, 2), per_pair * 9);
  // The window alone is causal; W = 1 is the diagonal, W >= T all of causal.
  EXPECT_EQ(AttentionFlops(2, 3, 5, 5, 8, false, 2), per_pair * 9);
  EXPECT_EQ(AttentionFlops(2, 3, 5, 5, 8, true, 1), per_pair * 5);
  EXPECT_EQ(AttentionFlops(2, 3, 5, 5, 8, true, 9), per_pair * 15);
  // The last 3 positions of 5 keys, W = 2; a decode query against 7 keys.
  EXPECT_EQ(AttentionFlops(2, 3, 3, 5, 8, true, 2), per_pair * 6);
  EXPECT_EQ(AttentionFlops(2, 3, 1, 7, 8, false, 3), per_pair * 3);
  // The shape: 1 + 2 + ... + 512, then 512 for each of 3584 rows,
  // about a quarter of causal's 4096 * 4097 / 2.
  const measure::AttentionShape windowed =
      measure::ParseAttentionShape("1x32x4096x128_kv8_causal_window512", false);
  EXPECT_EQ(windowed.Flops(),
            4.0 * 32 * 128 * (512.0 * 513 / 2 + 3584.0 * 512));
  // Decode reads only the window's keys and values.
  const measure::AttentionShape decode =
      measure::ParseAttentionShape("8x12x4096x64_window512", true);
  EXPECT_EQ(decode.Flops(), AttentionFlops(8, 12, 1, 512, 64, false));
  EXPECT_EQ(decode.Bytes(),
            (2.0 * 8 * 12 * 512 * 64 + 2.0 * 8 * 12 * 64) * sizeof(float));
  // A windowed softmax row reads the columns it sees, writes them all.
  const measure::ScoresShape softmax =
      measure::ParseScoresShape("1x2x5x5_window2", true);
  EXPECT_EQ(softmax.SoftmaxBytes(), 2.0 * (9 + 25) * sizeof(float));
}

TEST(AttentionFlops, EveryAttentionRateUsesIt) {
  measure::AttentionShape prefill{1, 4, 2, 6, 16, true};
  EXPECT_EQ(prefill.Flops(), AttentionFlops(1, 4, 6, 6, 16, true));
  measure::AttentionShape decode{2, 4, 4, 9, 16, false, false, true};
  EXPECT_EQ(decode.Flops(), AttentionFlops(2, 4, 1, 9, 16, false));
  // MultiHeadAttention (causal): projections, 2 FLOPs per multiply-add,
  // then the visible half of the scores. b 1, T 4, d 8, 2 heads of 4.
  const measure::MhaShape mha{1, 4, 8, 8, 2};
  EXPECT_EQ(mha.Flops(), 2.0 * (3 * 4 * 8 * 8 + 4 * 8 * 8) +
                             AttentionFlops(1, 2, 4, 4, 4, true));
  EXPECT_EQ(AttentionFlops(1, 2, 4, 4, 4, true), 4.0 * 2 * 10 * 4);
}

TEST(Shapes, NamesParseBack) {
  for (const measure::MatMulShape& s : measure::StandardMatMulShapes()) {
    EXPECT_EQ(measure::ParseMatMulShape(s.Name()).Name(), s.Name());
  }
  for (const measure::MhaShape& s : measure::StandardMhaShapes()) {
    EXPECT_EQ(measure::ParseMhaShape(s.Name()).Name(), s.Name());
  }
  for (const measure::AttentionShape& s : measure::StandardAttentionShapes()) {
    EXPECT_EQ(measure::ParseAttentionShape(s.Name(), false).Name(), s.Name());
  }
  for (const measure::AttentionShape& s : measure::StandardDecodeShapes()) {
    EXPECT_EQ(measure::ParseAttentionShape(s.Name(), true).Name(), s.Name());
  }
}

TEST(Shapes, MatMulStorageFlags) {
  const measure::MatMulShape s =
      measure::ParseMatMulShape("8x768x2304_bf16_Bt");
  EXPECT_TRUE(s.transpose_b);
  EXPECT_EQ(s.b_storage, ElementType::kBF16);
  EXPECT_EQ(s.Name(), "8x768x2304_Bt_bf16");
  EXPECT_EQ(measure::ParseMatMulShape("2x3x4_f16").b_storage,
            ElementType::kF16);
  EXPECT_EQ(measure::ParseMatMulShape("8x768x2304_cold_Bt_bf16").Name(),
            "8x768x2304_Bt_bf16_cold");
  for (const char* bad :
       {"2x3x4_bf16_f16", "2x3x4_bf16_bf16", "2x3x4_fp16", "2x3x4_cold_cold"}) {
    EXPECT_THROW(measure::ParseMatMulShape(bad), std::invalid_argument) << bad;
  }
}

TEST(Shapes, DecodeFromMemory) {
  const measure::AttentionShape s =
      measure::ParseAttentionShape("1x32x32768x128_cold_kv8_kvbf16", true);
  EXPECT_TRUE(s.cold);
  EXPECT_TRUE(s.InCache());  // The copies are caches.
  EXPECT_EQ(s.Name(), "1x32x32768x128_kv8_kvbf16_cold");
  EXPECT_THROW(measure::ParseAttentionShape("1x2x8x8_cold_cold", true),
               std::invalid_argument);
  EXPECT_THROW(measure::ParseAttentionShape("1x2x8x8_cold", false),
               std::invalid_argument);
  // A latent cache: one row of 576 per token, its first 512 the values.
  const measure::AttentionShape mla = measure::ParseAttentionShape(
      "1x128x8192x576_kv1_mla512_kvbf16_cold", true);
  EXPECT_EQ(mla.mla, 512u);
  EXPECT_EQ(mla.ValueDim(), 512u);
  EXPECT_EQ(mla.Name(), "1x128x8192x576_kv1_mla512_kvbf16_cold");
  EXPECT_DOUBLE_EQ(mla.Bytes(),
                   8192.0 * 576 * 2 + 128.0 * (576 + 512) * sizeof(float));
  for (const char* bad :
       {"1x2x8x8_mla8", "1x2x8x8_mla0", "1x2x8x8_mla4_mla4"}) {
    EXPECT_THROW(measure::ParseAttentionShape(bad, true), std::invalid_argument)
        << bad;
  }
  EXPECT_THROW(measure::ParseAttentionShape("1x2x8x8_mla4", false),
               std::invalid_argument);
}

TEST(Shapes, VariantsParseInAnyOrderAndPrintInOne) {
  const measure::AttentionShape s = measure::ParseAttentionShape(
      "1x32x4096x128_kv8_causal_softcap50_sinks_alibi_window512", false);
  EXPECT_EQ(s.kv_heads, 8u);
  EXPECT_TRUE(s.causal);
  EXPECT_EQ(s.variants.window, 512u);
  EXPECT_EQ(s.variants.softcap, 50.0f);
  EXPECT_TRUE(s.variants.sinks);
  EXPECT_TRUE(s.variants.alibi);
  EXPECT_EQ(s.Name(),
            "1x32x4096x128_kv8_causal_window512_softcap50_sinks_alibi");
  for (const char* name : {"2x4x67x16_kv2_causal_window9_softcap5_sinks_alibi",
                           "1x2x8x8_softcap30.5", "1x2x8x8_dropout_alibi"}) {
    EXPECT_EQ(measure::ParseAttentionShape(name, false).Name(), name);
  }
  for (const char* name :
       {"8x12x4096x64_window512", "1x6x100x8_kv3_softcap30.5_sinks_alibi"}) {
    EXPECT_EQ(measure::ParseAttentionShape(name, true).Name(), name);
  }
  EXPECT_EQ(
      measure::ParseScoresShape("2x3x37x37_causal_alibi_window5", true).Name(),
      "2x3x37x37_causal_window5_alibi");
  for (const char* bad :
       {"1x2x8x8_window0", "1x2x8x8_window", "1x2x8x8_window-3",
        "1x2x8x8_softcap0", "1x2x8x8_softcap-1", "1x2x8x8_softcap.5",
        "1x2x8x8_softcap5.", "1x2x8x8_softcap1e3", "1x2x8x8_sinks_sinks",
        "1x2x8x8_window4_window5", "1x2x8x8_alibi2", "1x2x8x8_Sinks"}) {
    EXPECT_THROW(measure::ParseAttentionShape(bad, false),
                 std::invalid_argument)
        << bad;
    EXPECT_THROW(measure::ParseScoresShape(bad, true), std::invalid_argument)
        << bad;
  }
  // Dropout shapes take no mask; decode is causal already.
  EXPECT_THROW(measure::ParseScoresShape("1x2x8x8_sinks", false),
               std::invalid_argument);
  EXPECT_THROW(measure::ParseAttentionShape("1x2x8x8_window4_causal", true),
               std::invalid_argument);
}

TEST(Shapes, SinkLogits) {
  EXPECT_EQ(measure::SinkLogits(6),
            (std::vector<float>{1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.0f}));
}

// The scope pins the target and restores the default dispatch after. The
// default is what a reset gives: under qemu with 256-bit SVE, Highway 1.0.3
// first dispatches to SVE_256 but to SVE2 after any reset of its targets.
TEST(TargetScope, PinsThenRestoresTheDefault) {
  { const measure::TargetScope reset(""); }
  const std::string dispatched = ActiveTarget();
  for (const std::string& target : SupportedTargets()) {
    {
      const measure::TargetScope scope(target);
      EXPECT_EQ(ActiveTarget(), target);
    }
    EXPECT_EQ(ActiveTarget(), dispatched);
  }
  {
    const measure::TargetScope scope("");
    EXPECT_EQ(ActiveTarget(), dispatched);
  }
  EXPECT_THROW(measure::TargetScope("NOT_A_TARGET"), std::invalid_argument);
  EXPECT_EQ(ActiveTarget(), dispatched);
}

}  // namespace
}  // namespace simdattn
