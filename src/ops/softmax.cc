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

namespace {

using internal::ByteRange;
using internal::ShapeString;

bool SameDims(const size_t (&a)[4], const size_t (&b)[4]) {
  return std::equal(a, a + 4, b);
}

// Strides matter only along dimensions with more than one index.
template <typename T, typename U>
bool SameLayout(Tensor4View<T> a, Tensor4View<U> b) {
  for (int k = 0; k < 3; ++k) {
    if (a.dims[k] > 1 && a.strides[k] != b.strides[k]) return false;
  }
  return SameDims(a.dims, b.dims);
}

// A written view must not reach one element through two indices: rows are
// written concurrently. Sufficient condition: taking the dimensions of
// extent > 1 by increasing stride, each stride is at least the span of the
// faster ones. Call after CheckTensor4 (which bounds every span).
void CheckDistinctElements(const char* fn, const char* name,
                           const size_t (&dims)[4],
                           const size_t (&strides)[3]) {
  if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || dims[3] == 0) return;
  int order[3];
  int n = 0;
  for (int k = 0; k < 3; ++k) {
    if (dims[k] > 1) order[n++] = k;
  }
  // Insertion sort (std::sort on 3 ints trips GCC 12's -Warray-bounds).
  for (int a = 1; a < n; ++a) {
    for (int b = a; b > 0 && strides[order[b]] < strides[order[b - 1]]; --b) {
      std::swap(order[b], order[b - 1]);
    }
  }
  size_t span = dims[3];
  for (int o = 0; o < n; ++o) {
    const int k = order[o];
    SIMDATTN_REQUIRE(strides[k] >= span, fn, name, ".strides[", k, "] (",
                     strides[k], ") makes elements of ", name, " (shape ",
                     ShapeString(dims), ") overlap: it is less than the ", span,
                     " elements spanned by the faster dimensions");
    span += (dims[k] - 1) * strides[k];
  }
}

// A mask must have the scores' dims; a stride of 0 broadcasts that dimension
// (a row stride of 0 shares one row among all rows). Returns its bytes.
template <typename T>
ByteRange CheckMask(const char* fn, const char* name, Tensor4View<const T> m,
                    const size_t (&dims)[4]) {
  SIMDATTN_REQUIRE(SameDims(m.dims, dims), fn, name, " has shape ",
                   ShapeString(m.dims), " but the scores have shape ",
                   ShapeString(dims));
  size_t spanned[4] = {m.dims[0], m.dims[1], m.dims[2], m.dims[3]};
  for (int k = 0; k < 3; ++k) {
    if (m.strides[k] == 0) spanned[k] = std::min<size_t>(spanned[k], 1);
  }
  return internal::CheckTensor4(fn, name, m.data, spanned, m.strides,
                                sizeof(T));
}

}  // namespace

void Softmax(ConstTensor4 x, Tensor4 y, float scale,
             const AttentionMask& mask) {
  constexpr const char* kFn = "Softmax";
  SIMDATTN_REQUIRE(SameDims(x.dims, y.dims), kFn, "y has shape ",
                   ShapeString(y.dims), " but x has shape ",
                   ShapeString(x.dims));
  SIMDATTN_REQUIRE(std::isfinite(scale), kFn, "scale (", scale,
                   ") is not finite");
  const ByteRange rx = internal::CheckTensor4(kFn, "x", x);
  const ByteRange ry = internal::CheckTensor4(kFn, "y", y);
  CheckDistinctElements(kFn, "y", y.dims, y.strides);
  const bool in_place = x.data == y.data && SameLayout(x, y);
  SIMDATTN_REQUIRE(in_place || !ry.Overlaps(rx), kFn,
                   "y overlaps x but is not the same view (in place needs "
                   "y.data == x.data and equal strides)");
  if (mask.boolean.data != nullptr) {
    const ByteRange rm = CheckMask(kFn, "mask.boolean", mask.boolean, x.dims);
    SIMDATTN_REQUIRE(!ry.Overlaps(rm), kFn, "y overlaps mask.boolean");
  }
  if (mask.additive.data != nullptr) {
    const ByteRange rm = CheckMask(kFn, "mask.additive", mask.additive, x.dims);
    SIMDATTN_REQUIRE(!ry.Overlaps(rm), kFn, "y overlaps mask.additive");
  }
  if (mask.key_lengths != nullptr && x.dims[0] != 0) {
    const auto begin = reinterpret_cast<uintptr_t>(mask.key_lengths);
    const ByteRange rk{
        begin, begin + internal::CheckedMul(kFn, "mask.key_lengths' size",
                                            x.dims[0], sizeof(size_t))};
    SIMDATTN_REQUIRE(!ry.Overlaps(rk), kFn, "y overlaps mask.key_lengths");
    for (size_t b = 0; b < x.dims[0]; ++b) {
      SIMDATTN_REQUIRE(mask.key_lengths[b] <= x.dims[3], kFn,
                       "mask.key_lengths[", b, "] (", mask.key_lengths[b],
                       ") exceeds the row length x.dims[3] (", x.dims[3], ")");
    }
  }
  if (y.empty()) return;
  HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, y, scale, mask);
}

}  // namespace simdattn
#endif  // HWY_ONCE
