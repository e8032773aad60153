// Fused attention over caches of ggml's blocks (attend.h).
#include "src/ops/attend.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/attend_blocks.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
constexpr internal::AttendFn& AttendBlockCaches =
    AttentionOf<internal::BlockQ8_0, internal::BlockQ4_0, internal::BlockQ4_1,
                internal::BlockIQ4NL>;
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace simdattn {
HWY_EXPORT(AttendBlockCaches);
internal::AttendFn* internal::BlockCachesAttention() {
  return &HWY_DYNAMIC_DISPATCH(AttendBlockCaches);
}
}  // namespace simdattn
#endif  // HWY_ONCE
