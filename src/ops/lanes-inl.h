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

namespace hn = hwy::HWY_NAMESPACE;

// Float lanes of this target's largest vector (an upper bound on SVE):
// the size of the zero-padded stack copies that vector tails go through.
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// Highway 1.0.3 converts between f32 and f16 in hardware only from AVX2
// (F16C) on and on Arm; its emulation elsewhere (SSE4, SSSE3, scalar)
// demotes by truncation and promotes exponent 31 as the finite 2^16 (1 + m
// / 1024), neither infinity nor NaN.
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2) || \
    (HWY_ARCH_ARM_A64 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128)
constexpr bool kNativeF16 = true;
#else
constexpr bool kNativeF16 = false;
#endif

// Float16 lanes as floats, exactly, infinities and NaN included.
template <class D>
HWY_INLINE hn::Vec<D> PromoteF16(D d,
                                 hn::Vec<hn::Rebind<hwy::float16_t, D>> h) {
  const hn::Vec<D> wide = hn::PromoteTo(d, h);
  if constexpr (kNativeF16) {
    return wide;
  } else {
    // Only exponent 31 comes out at 2^16 or more (the largest finite half
    // is 65504): its exponent made all ones keeps the sign and mantissa.
    const hn::RebindToUnsigned<D> du;
    const auto special =
        hn::BitCast(d, hn::Or(hn::BitCast(du, wide), hn::Set(du, 0x7F800000u)));
    return hn::IfThenElse(hn::Ge(hn::Abs(wide), hn::Set(d, 65536.0f)), special,
                          wide);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_LANES_INL_H_
