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

void Dropout(Tensor4 x, float p, DropoutKey key) {
  constexpr const char* kFn = "Dropout";
  internal::CheckDropout(kFn, "p", p,
                         {"x.dims[0]", "x.dims[1]", "x.dims[2]", "x.dims[3]"},
                         x.dims);
  internal::CheckTensor4(kFn, "x", x);
  internal::CheckDistinctElements(kFn, "x", x.dims, x.strides);
  if (p == 0.0f || x.empty()) return;
  HWY_DYNAMIC_DISPATCH(DropoutImpl)
  (x, p, DropoutStreamKey(key.seed, key.offset));
}

}  // namespace simdattn
#endif  // HWY_ONCE
