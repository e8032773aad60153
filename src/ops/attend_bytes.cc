// Fused attention over caches of int8 and fp8 (E4M3, E5M2) elements (attend.h).
#include "src/ops/attend.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/attend_bytes.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
constexpr internal::AttendFn& AttendByteCaches =
    AttentionOf<int8_t, internal::Fp8E4M3, internal::Fp8E5M2>;
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace simdattn {
HWY_EXPORT(AttendByteCaches);
internal::AttendFn* internal::ByteCachesAttention() {
  return &HWY_DYNAMIC_DISPATCH(AttendByteCaches);
}
}  // namespace simdattn
#endif  // HWY_ONCE
