// Per-target peak loops, included once per SIMD target by peak.cc.

#if defined(SIMDATTN_TOOLS_MEASURE_PEAK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_TOOLS_MEASURE_PEAK_INL_H_
#undef SIMDATTN_TOOLS_MEASURE_PEAK_INL_H_
#else
#define SIMDATTN_TOOLS_MEASURE_PEAK_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "tools/measure/peak.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace measure {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Float lanes per vector: FLOPs per MulAdd are 2 * lanes.
inline size_t FloatLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

// Runs `iterations` x kFmaChains MulAdds (separate variables, not an
// array: SVE vectors are sizeless); returns a value that depends on
// all of them so that none is optimised away. a = a * m + c converges to
// c / (1 - m) = 1e-1: values stay normal (denormals would be slow).
HWY_NOINLINE float FmaLoop(uint64_t iterations) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.999999f);
  const auto c = hn::Set(d, 1e-7f);
  auto a0 = hn::Set(d, 0.10f), a1 = hn::Set(d, 0.11f), a2 = hn::Set(d, 0.12f);
  auto a3 = hn::Set(d, 0.13f), a4 = hn::Set(d, 0.14f), a5 = hn::Set(d, 0.15f);
  auto a6 = hn::Set(d, 0.16f), a7 = hn::Set(d, 0.17f), a8 = hn::Set(d, 0.18f);
  auto a9 = hn::Set(d, 0.19f), a10 = hn::Set(d, 0.20f), a11 = hn::Set(d, 0.21f);
  for (uint64_t i = 0; i < iterations; ++i) {
    a0 = hn::MulAdd(a0, m, c);
    a1 = hn::MulAdd(a1, m, c);
    a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c);
    a4 = hn::MulAdd(a4, m, c);
    a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c);
    a7 = hn::MulAdd(a7, m, c);
    a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c);
    a10 = hn::MulAdd(a10, m, c);
    a11 = hn::MulAdd(a11, m, c);
  }
  const auto sum = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)),
                                   hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                           hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// to[0, n) = from[0, n); n a multiple of 4 * Lanes (the caller's buffers
// are), both aligned to HWY_ALIGNMENT. Four vectors per iteration keep
// several loads in flight without relying on the compiler to unroll.
HWY_NOINLINE void CopyLoop(const float* HWY_RESTRICT from,
                           float* HWY_RESTRICT to, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t i = 0; i + 4 * N <= n; i += 4 * N) {
    const auto v0 = hn::Load(d, from + i);
    const auto v1 = hn::Load(d, from + i + N);
    const auto v2 = hn::Load(d, from + i + 2 * N);
    const auto v3 = hn::Load(d, from + i + 3 * N);
    hn::Store(v0, d, to + i);
    hn::Store(v1, d, to + i + N);
    hn::Store(v2, d, to + i + 2 * N);
    hn::Store(v3, d, to + i + 3 * N);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace measure
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // include guard
