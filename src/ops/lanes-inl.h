// Per-target vector sizes shared by the kernels' -inl.h files.

#if defined(SIMDATTN_SRC_OPS_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_LANES_INL_H_
#undef SIMDATTN_SRC_OPS_LANES_INL_H_
#else
#define SIMDATTN_SRC_OPS_LANES_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {

// Float lanes of this target's largest vector (an upper bound on SVE):
// the size of the zero-padded stack copies that vector tails go through.
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_LANES_INL_H_
