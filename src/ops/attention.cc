// ScaledDotProductAttention: validation, then one dispatch per call.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "simdattn/kernels.h"
#include "simdattn/random.h"
#include "src/common/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/attention-inl.h"

#if HWY_ONCE
namespace simdattn {
HWY_EXPORT(AttentionImpl);

using internal::Footprint;
using internal::ShapeString;

void ScaledDotProductAttention(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v,
                               Tensor4 out, const AttentionOptions& options) {
  constexpr const char* kFn = "ScaledDotProductAttention";
  SIMDATTN_REQUIRE(k.dims[0] == q.dims[0] && v.dims[0] == q.dims[0], kFn,
                   "batch sizes differ: q ", ShapeString(q.dims), ", k ",
                   ShapeString(k.dims), ", v ", ShapeString(v.dims));
  SIMDATTN_REQUIRE(k.dims[1] == v.dims[1] && k.dims[2] == v.dims[2], kFn, "k ",
                   ShapeString(k.dims), " and v ", ShapeString(v.dims),
                   " differ in heads or tokens");
  SIMDATTN_REQUIRE(k.dims[3] == q.dims[3], kFn, "k's head_dim (", k.dims[3],
                   ") differs from q's (", q.dims[3], ")");
  SIMDATTN_REQUIRE(
      q.dims[1] == 0 || (k.dims[1] != 0 && q.dims[1] % k.dims[1] == 0), kFn,
      "q's heads (", q.dims[1], ") are not a multiple of k's and v's heads (",
      k.dims[1], ")");
  const size_t expected_out[4] = {q.dims[0], q.dims[1], q.dims[2], v.dims[3]};
  SIMDATTN_REQUIRE(internal::SameDims(out.dims, expected_out), kFn,
                   "out has shape ", ShapeString(out.dims), ", expected ",
                   ShapeString(expected_out));
  const float dropout = options.dropout;
  // The weights (batch, q_heads, q_tokens, k_tokens) are dropped with
  // Dropout()'s counters.
  internal::CheckDropout(kFn, "dropout", dropout,
                         {"q.dims[0]", "q.dims[1]", "q.dims[2]", "k.dims[2]"},
                         {q.dims[0], q.dims[1], q.dims[2], k.dims[2]});
  SIMDATTN_REQUIRE(!options.scale || std::isfinite(*options.scale), kFn,
                   "scale (", options.scale.value_or(0.0f), ") is not finite");
  const Footprint rq = internal::CheckTensor4(kFn, "q", q);
  const Footprint rk = internal::CheckTensor4(kFn, "k", k);
  const Footprint rv = internal::CheckTensor4(kFn, "v", v);
  const Footprint ro = internal::CheckTensor4(kFn, "out", out);
  internal::CheckDistinctElements(kFn, "out", out.dims, out.strides);
  SIMDATTN_REQUIRE(!ro.Overlaps(rq), kFn, "out overlaps q");
  SIMDATTN_REQUIRE(!ro.Overlaps(rk), kFn, "out overlaps k");
  SIMDATTN_REQUIRE(!ro.Overlaps(rv), kFn, "out overlaps v");
  const size_t scores[4] = {q.dims[0], q.dims[1], q.dims[2], k.dims[2]};
  internal::CheckAttentionMask(kFn, options.mask, scores, "k.dims[2]", ro,
                               "out");
  if (options.log_sum_exp != nullptr && !out.empty()) {
    const Footprint rl = internal::ContiguousFootprint(
        kFn, "log_sum_exp", options.log_sum_exp,
        internal::CheckedMul(kFn, "log_sum_exp's size",
                             internal::CheckedMul(kFn, "log_sum_exp's size",
                                                  q.dims[0], q.dims[1]),
                             q.dims[2]),
        sizeof(float));
    for (const Footprint& input : {rq, rk, rv, ro}) {
      SIMDATTN_REQUIRE(!rl.Overlaps(input), kFn,
                       "log_sum_exp overlaps q, k, v or out");
    }
    internal::CheckAttentionMask(kFn, options.mask, scores, "k.dims[2]", rl,
                                 "log_sum_exp");
  }
  if (out.empty()) return;
  // head_dim 0 makes every score 0; 1/sqrt(0) would turn them into NaN.
  const float scale = options.scale.value_or(
      q.dims[3] == 0 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(q.dims[3])));
  HWY_DYNAMIC_DISPATCH(AttentionImpl)
  (q, k, v, out, scale, options.mask, dropout,
   DropoutStreamKey(options.dropout_key.seed, options.dropout_key.offset),
   options.log_sum_exp);
}

}  // namespace simdattn
#endif  // HWY_ONCE
