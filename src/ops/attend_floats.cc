// Fused attention over caches of f32, bf16 and f16 elements (attend.h).
#include "src/ops/attend.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/attend_floats.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
constexpr internal::AttendFn& AttendFloatCaches =
    AttentionOf<float, BFloat16, Float16>;
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace simdattn {
HWY_EXPORT(AttendFloatCaches);
internal::AttendFn* internal::FloatCachesAttention() {
  return &HWY_DYNAMIC_DISPATCH(AttendFloatCaches);
}
}  // namespace simdattn
#endif  // HWY_ONCE
