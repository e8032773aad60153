// Per-target rounding of float lanes to bfloat16, shared by the KV cache's
// conversion and bf16 attention.

#if defined(SIMDATTN_SRC_OPS_BF16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_BF16_INL_H_
#undef SIMDATTN_SRC_OPS_BF16_INL_H_
#else
#define SIMDATTN_SRC_OPS_BF16_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The bf16 bits of v's lanes in the low halves of 32-bit lanes: rounded to
// nearest even, NaN kept and made quiet, as ToBFloat16 (Highway 1.0.3's
// DemoteTo truncates).
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> BFloat16Bits(D /* d */,
                                                         hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::BitCast(du, v);
  const auto odd = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
  const auto rounded =
      hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFF), odd)));
  const auto quiet = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet, rounded);
}

// v's lanes rounded to bf16 and widened back (exactly): ToFloat(ToBFloat16).
template <class D>
HWY_INLINE hn::Vec<D> RoundToBFloat16(D d, hn::Vec<D> v) {
  return hn::BitCast(d, hn::ShiftLeft<16>(BFloat16Bits(d, v)));
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_BF16_INL_H_
