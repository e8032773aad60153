// Per-target vector sizes, tails and table lookups shared by the kernels'
// -inl.h files.

#if defined(SIMDATTN_SRC_OPS_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_LANES_INL_H_
#undef SIMDATTN_SRC_OPS_LANES_INL_H_
#else
#define SIMDATTN_SRC_OPS_LANES_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Float lanes of this target's largest vector (an upper bound on SVE):
// the size of the zero-padded stack copies that vector tails go through.
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// p[0, count) in the first lanes, zeros after (LoadN of newer Highway):
// 0 < count <= Lanes(d) (the scalar target reads p[0] regardless), and no
// element past p[count) is read (it may be unmapped). Masked loads where
// Highway's memory operations cannot fault, else a zero-padded copy.
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> LoadTail(D d, const T* HWY_RESTRICT p, size_t count) {
#if HWY_MEM_OPS_MIGHT_FAULT
  HWY_ALIGN T lanes[HWY_MAX_BYTES / sizeof(T)] = {};
  std::copy_n(p, count, lanes);
  return hn::Load(d, lanes);
#else
  return hn::MaskedLoad(hn::FirstN(d, count), d, p);
#endif
}

// v's first count lanes to p[0, count), 0 < count <= Lanes(d); nothing
// past p[count) is written (StoreN of newer Highway).
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE void StoreTail(hn::Vec<D> v, D d, T* HWY_RESTRICT p, size_t count) {
#if HWY_MEM_OPS_MIGHT_FAULT
  HWY_ALIGN T lanes[HWY_MAX_BYTES / sizeof(T)];
  hn::Store(v, d, lanes);
  std::copy_n(lanes, count, p);
#else
  hn::BlendedStore(v, hn::FirstN(d, count), d, p);
#endif
}

// Vector registers of this target: 32 with AVX-512 and on AArch64 (NEON,
// SVE), 16 on AVX2 and SSE (on the scalar target, a cap on tile sizes).
#if HWY_TARGET != HWY_SCALAR && \
    (HWY_ARCH_ARM_A64 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
constexpr size_t kVectorRegisters = 32;
#else
constexpr size_t kVectorRegisters = 16;
#endif

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

// table's lane (index mod Lanes) for each lane of index, by x86's
// whole-register permutes, which read only the index bits they need: the
// bits above pass as they are. (Highway 1.0.3's TableLookupLanes wants
// indices below the lane count.)
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
constexpr bool kHaveLookUp = true;
#if HWY_TARGET <= HWY_AVX3
// The maskz forms with every lane set: g++ 12's plain ones read an undefined
// vector and trip -Wmaybe-uninitialized.
HWY_INLINE hn::Vec512<int32_t> LookUp(hn::Vec512<int32_t> table,
                                      hn::Vec512<int32_t> index) {
  return hn::Vec512<int32_t>{
      _mm512_maskz_permutexvar_epi32(0xFFFF, index.raw, table.raw)};
}
HWY_INLINE hn::Vec256<int16_t> LookUp(hn::Vec256<int16_t> table,
                                      hn::Vec256<int16_t> index) {
  return hn::Vec256<int16_t>{
      _mm256_maskz_permutexvar_epi16(0xFFFF, index.raw, table.raw)};
}
#endif
HWY_INLINE hn::Vec256<int32_t> LookUp(hn::Vec256<int32_t> table,
                                      hn::Vec256<int32_t> index) {
  return hn::Vec256<int32_t>{_mm256_permutevar8x32_epi32(table.raw, index.raw)};
}
#else
constexpr bool kHaveLookUp = false;
#endif

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_LANES_INL_H_
