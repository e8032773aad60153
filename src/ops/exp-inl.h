// Per-target exp for the arguments softmax takes: x - max <= 0. Included by
// the kernels that need it (softmax-inl.h, attention-inl.h).
//
// Why not hn::Exp: it serves the whole float range, so it rounds with a
// float->int conversion (plus x86's overflow fix-up), handles large positive
// arguments and builds 2^n from two halves: ~30 vector ops. Softmax spends
// most of its time there, and on a core that issues about one 512-bit op
// per cycle (measured: the AMD EPYC development machine) the op count is the
// speed. ExpNonPositive uses ~12 ops on AVX-512 and ~20 elsewhere, for the
// same accuracy.
//
// Method: n = round(x / ln 2) with the 1.5 * 2^23 shifter (adding it leaves
// n in the low mantissa bits, no conversion); r = x - n ln 2 in two parts
// (Cody-Waite: n * kLn2Hi is exact for |n| < 2^8), |r| <= ln(2) / 2;
// exp(r) by a degree-6 polynomial (Horner); result = exp(r) * 2^n.
//
// Accuracy: the polynomial's relative error is 0.1 ULP on |r| <= 1.02 ln2/2
// (float coefficients, fitted with c0 = c1 = 1 so that exp(0) is exactly
// 1); with the reduction and Horner rounding the result is within 2 ULP of
// exp(x) for outputs >= FLT_MIN (tests/softmax_test.cc sweeps every target).
// Outputs below FLT_MIN (x < -87.3) are denormal, correctly rounded from an
// exact scaling; x <= -104 (and -inf, after the clamp) gives exactly 0.
// x > 0 is outside the contract (no overflow handling). NaN gives NaN
// (softmax finds NaN scores in its sum of exps).

#if defined(SIMDATTN_SRC_OPS_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_EXP_INL_H_
#undef SIMDATTN_SRC_OPS_EXP_INL_H_
#else
#define SIMDATTN_SRC_OPS_EXP_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace exp_detail {

// Arguments are clamped here first: exp(-105) * 2 < 2^-149, the smallest
// denormal, so it rounds to 0, and so does -inf.
constexpr float kFloor = -105.0f;
constexpr float kLog2E = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;  // 16 significant bits.
constexpr float kLn2Lo = 1.42860676533018704e-6f;
// t = x * log2(e) + kShifter lies in [2^23, 2^24), where floats are spaced
// 1 apart: t - kShifter is x * log2(e) rounded to nearest, and t's bits are
// kShifterBits + n.
constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23
constexpr int32_t kShifterBits = 0x4B400000;
// exp(r) = 1 + r (1 + r (c2 + r (c3 + r (c4 + r (c5 + r c6))))).
constexpr float kC2 = 0.49999994f;
constexpr float kC3 = 0.166665092f;
constexpr float kC4 = 0.0416685268f;
constexpr float kC5 = 0.00837013498f;
constexpr float kC6 = 0.00138116628f;

// p * 2^n for integral n in [-152, 0]; t holds n as described at kShifter.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Scale(D d, V p, [[maybe_unused]] V n, V t) {
#if HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16) {
    // One op, denormals and underflow to 0 included. (The maskz form with
    // every lane set: g++ 12's _mm512_scalef_ps reads an undefined vector
    // and trips -Wmaybe-uninitialized.)
    return V{_mm512_maskz_scalef_ps(0xFFFF, p.raw, n.raw)};
  }
#endif
  // 2^n may be below the normal range, so it is applied in two halves that
  // are not; p * 2^n1 is exact and the second product rounds once.
  const hn::RebindToSigned<D> di;
  const auto n_int = hn::Sub(hn::BitCast(di, t), hn::Set(di, kShifterBits));
  const auto n1 = hn::ShiftRight<1>(n_int);
  const auto n2 = hn::Sub(n_int, n1);
  const auto bias = hn::Set(di, 127);
  const V pow1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n1, bias)));
  const V pow2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n2, bias)));
  return hn::Mul(hn::Mul(p, pow1), pow2);
}

// max(x, kFloor), NaN kept. x86's max returns its second operand when
// either is NaN: one op. Elsewhere Highway's Max returns the number (Arm's
// FMAXNM, the scalar and emulated targets), so a compare and a select.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ClampKeepingNaN(D d, V x) {
  const V floor = hn::Set(d, kFloor);
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  return hn::Max(floor, x);
#else
  return hn::IfThenElse(hn::Lt(x, floor), floor, x);
#endif
}

}  // namespace exp_detail

// exp(x) for x <= 0 (see above); -inf gives 0, NaN gives NaN.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositive(D d, V x) {
  using namespace exp_detail;
  x = ClampKeepingNaN(d, x);
  const V t = hn::MulAdd(x, hn::Set(d, kLog2E), hn::Set(d, kShifter));
  const V n = hn::Sub(t, hn::Set(d, kShifter));
  V r = hn::NegMulAdd(n, hn::Set(d, kLn2Hi), x);
  r = hn::NegMulAdd(n, hn::Set(d, kLn2Lo), r);
  const V one = hn::Set(d, 1.0f);
  V p = hn::MulAdd(hn::Set(d, kC6), r, hn::Set(d, kC5));
  p = hn::MulAdd(p, r, hn::Set(d, kC4));
  p = hn::MulAdd(p, r, hn::Set(d, kC3));
  p = hn::MulAdd(p, r, hn::Set(d, kC2));
  p = hn::MulAdd(p, r, one);
  p = hn::MulAdd(p, r, one);
  return Scale(d, p, n, t);
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_EXP_INL_H_
