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
