// The SIMD target the kernels dispatch to, as Highway's bit, and the families
// backends are selected by: kernels are chosen from these bits and the CPU's
// feature checks, never from target names.
#ifndef SIMDATTN_SRC_OPS_TARGET_FAMILY_H_
#define SIMDATTN_SRC_OPS_TARGET_FAMILY_H_

#include <cstdint>

#include "hwy/detect_targets.h"

namespace simdattn {
namespace internal {

// Highway's AVX-512 targets: AVX3 and the newer variants this Highway has.
inline constexpr int64_t kAvx512Targets = HWY_AVX3 | HWY_AVX3_DL
#ifdef HWY_AVX3_ZEN4
                                          | HWY_AVX3_ZEN4
#endif
#ifdef HWY_AVX3_SPR
                                          | HWY_AVX3_SPR
#endif
    ;

// Highway's Arm targets with vectors: NEON and every SVE this Highway has.
inline constexpr int64_t kArmSimdTargets = HWY_NEON | HWY_SVE | HWY_SVE2 |
                                           HWY_SVE_256 | HWY_SVE2_128
#ifdef HWY_NEON_BF16
                                           | HWY_NEON_BF16
#endif
#ifdef HWY_NEON_WITHOUT_AES
                                           | HWY_NEON_WITHOUT_AES
#endif
    ;

// HWY_AVX2, HWY_AVX3, HWY_NEON, ...: the target dispatch picks now.
int64_t ActiveTargetBit();
// AVX-512 targets (AVX3 and its newer variants).
bool IsAvx512Target(int64_t target);
// Arm targets with vectors: NEON and every SVE.
bool IsArmSimdTarget(int64_t target);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_TARGET_FAMILY_H_
