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

using internal::CheckDistinctElements;
using internal::ShapeString;

// The counter (16 * (j / 64) + j % 16, i, h, b) has 32-bit words: b, h, i <
// 2^32, and j / 64 < 2^28, i.e. j < 2^34.
constexpr uint64_t kMaxIndexDim = uint64_t{1} << 32;
constexpr uint64_t kMaxRowLength = uint64_t{1} << 34;


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
