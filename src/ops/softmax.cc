// Softmax: validation, then one dispatch per call.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "simdattn/kernels.h"
#include "src/common/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/softmax.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/softmax-inl.h"

#if HWY_ONCE
namespace simdattn {
HWY_EXPORT(SoftmaxImpl);

using internal::CheckDistinctElements;
using internal::Footprint;
using internal::SameDims;
using internal::ShapeString;

void Softmax(ConstTensor4 x, Tensor4 y, float scale,
             const AttentionMask& mask) {
  constexpr const char* kFn = "Softmax";
  SIMDATTN_REQUIRE(SameDims(x.dims, y.dims), kFn, "y has shape ",
                   ShapeString(y.dims), " but x has shape ",
                   ShapeString(x.dims));
  SIMDATTN_REQUIRE(std::isfinite(scale), kFn, "scale (", scale,
                   ") is not finite");
  const Footprint rx = internal::CheckTensor4(kFn, "x", x);
  const Footprint ry = internal::CheckTensor4(kFn, "y", y);
  CheckDistinctElements(kFn, "y", y.dims, y.strides);
  const bool in_place = x.data == y.data && rx.SameLayout(ry);
  SIMDATTN_REQUIRE(in_place || !ry.Overlaps(rx), kFn,
                   "y overlaps x but is not the same view (in place needs "
                   "y.data == x.data and equal strides)");
  SIMDATTN_REQUIRE(mask.tree_offsets == nullptr, kFn,
                   "mask.tree_offsets is given: draft trees are for attention "
                   "over a cache");
  internal::CheckAttentionMask(kFn, mask, x.dims, "x.dims[3]", ry, "y");
  if (y.empty()) return;
  HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, y, scale, mask);
}

}  // namespace simdattn
#endif  // HWY_ONCE
