// Dropout: validation, then one dispatch per call.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "simdattn/kernels.h"
#include "simdattn/random.h"
#include "src/common/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/dropout.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/dropout-inl.h"

#if HWY_ONCE
namespace simdattn {
HWY_EXPORT(DropoutImpl);

namespace {

using internal::ShapeString;

// The counter (16 * (j / 64) + j % 16, i, h, b) has 32-bit words: b, h, i <
// 2^32, and j / 64 < 2^28, i.e. j < 2^34.
constexpr uint64_t kMaxIndexDim = uint64_t{1} << 32;
constexpr uint64_t kMaxRowLength = uint64_t{1} << 34;

// A written view must not reach one element through two indices: rows are
// written concurrently. Sufficient condition: taking the dimensions of
// extent > 1 by increasing stride, each stride is at least the span of the
// faster ones. Call after CheckTensor4 (which bounds every span).
// TODO(simdattn): shared with softmax.cc; belongs in src/common/check.h.
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

}  // namespace

void Dropout(Tensor4 x, float p, DropoutKey key) {
  constexpr const char* kFn = "Dropout";
  // Written so that NaN fails too.
  SIMDATTN_REQUIRE(p >= 0.0f && p <= 1.0f, kFn, "p (", p,
                   ") is not a probability in [0, 1]");
  for (int k = 0; k < 3; ++k) {
    SIMDATTN_REQUIRE(static_cast<uint64_t>(x.dims[k]) <= kMaxIndexDim, kFn,
                     "x.dims[", k, "] (", x.dims[k],
                     ") exceeds 2^32, the range of its dropout counter word");
  }
  SIMDATTN_REQUIRE(static_cast<uint64_t>(x.dims[3]) <= kMaxRowLength, kFn,
                   "x.dims[3] (", x.dims[3],
                   ") exceeds 2^34, the range of the dropout counter's "
                   "column word");
  internal::CheckTensor4(kFn, "x", x);
  CheckDistinctElements(kFn, "x", x.dims, x.strides);
  if (p == 0.0f || x.empty()) return;
  HWY_DYNAMIC_DISPATCH(DropoutImpl)
  (x, p, DropoutStreamKey(key.seed, key.offset));
}

}  // namespace simdattn
#endif  // HWY_ONCE
