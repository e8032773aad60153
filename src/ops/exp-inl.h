// Per-target exp for the arguments softmax takes: x - max <= 0. Included by
// the kernels that need it (softmax-inl.h, attention-inl.h).
//
// Why not hn::Exp: it serves the whole float range, so it rounds with a
// float->int conversion (plus x86's overflow fix-up), handles large positive
// arguments and builds 2^n from two halves: ~30 vector ops. Softmax spends
// most of its time here, and the op count is the speed (bench/RESULTS.md:
// "What bounds each kernel").
//
// x86's 16- and 8-lane targets (AVX-512, AVX2): exp(x) = 2^(k/L) exp(r),
// k = round(L x / ln 2) for L lanes, with 2^(k mod L / L) from an L-entry
// table held in one register (a permute looks it up) and a degree-3
// polynomial for |r| <= ln 2 / (2 L): 6 multiply-class ops and a permute,
// where a degree-6 polynomial and scalef take 12 (scalef counts twice).
// Other targets: n = round(x / ln 2), a degree-6 polynomial for |r| <= ln 2 /
// 2, 2^n applied in two halves (denormal outputs rounded once): ~20 ops.
//
// Both round with the 1.5 * 2^23 shifter (adding it leaves k in the low
// mantissa bits, no conversion). Where FMA is native, r = x - k c in one
// fused multiply-add with c = fl(ln 2 / L): k c is exact inside it, so r is
// exact but for one rounding and c's own error, c = (ln 2 / L)(1 + 0.046 u)
// for every power-of-two L, which makes the result exp(x (1 - e)) with |e|
// <= 0.046 u: a relative error of 0.046 |x| u (at most 4.8 u, at the clamp),
// far below the |x| u that rounding x itself, a float, already costs, and one
// op fewer than the two-part (Cody-Waite) reduction, which the targets
// without FMA (SSSE3, SSE4, scalar, emulated) keep: there k's product with
// the constant's high part is exact, as a separate multiply must be.
// Accuracy: polynomials within 0.3 ULP (float coefficients, fitted with c0 =
// c1 = 1, so exp(0) is exactly 1); with the table's and the final rounding
// and c's error the result is within (2 + 0.046 |x|) u of exp(x) for outputs
// >= FLT_MIN. Every float in [-110, 0] checked (Arm: every 16th, under
// qemu): at most 2.3 u for |x| <= 21 and 5.4 u down to FLT_MIN with 16 lanes,
// 2.8 u and 5.9 u with 8, 2.0 u and 5.1 u on NEON, 1.3 u without FMA;
// tests/softmax_test.cc sweeps every target. Outputs below FLT_MIN (x <
// -87.3) are denormal, rounded once from an exact scaling; x <= -104 (and
// -inf, after the clamp) gives exactly 0. x > 0 is outside the contract (no
// overflow handling; small x, such as the 2^-149 a denormal max may leave in
// softmax, come out right). NaN gives NaN (softmax finds NaN scores in its
// sum of exps).
//
// ExpTimes2To64 returns exp(s x) * 2^64: every output down to exp(-104) is
// then a normal float, so it needs no final scaling (one op) and no
// denormal rounding; softmax divides the factor out with the sum. s, in
// [2^-24, 2^24], is a run-time factor (softmax's scale) that costs no op: it
// goes into the constants (ExpScaling), k = round(L s x / ln 2), r = x - k
// fl(ln 2 / (L s)) and the polynomial's coefficients times s^i. Unless s is
// a power of two, fl(ln 2 / (L s)) errs by up to u (relative, u = 2^-24)
// instead of 0.046 u: a relative error of up to |s x| u (0.11 u for s =
// 1/sqrt(128), 0.55 u for 1/sqrt(96), 0.71 u for 0.3).

#if defined(SIMDATTN_SRC_OPS_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_EXP_INL_H_
#undef SIMDATTN_SRC_OPS_EXP_INL_H_
#else
#define SIMDATTN_SRC_OPS_EXP_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "src/ops/lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace exp_detail {

// Arguments are clamped here first: exp(-105) * 2 < 2^-149, the smallest
// denormal, so it rounds to 0, and so does -inf.
constexpr float kFloor = -105.0f;
// t = x * log2(e) + kShifter lies in [2^23, 2^24), where floats are spaced
// 1 apart: t - kShifter is x * log2(e) rounded to nearest, and t's bits are
// kShifterBits + n.
constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23
constexpr int32_t kShifterBits = 0x4B400000;
// ExpNonPositiveFlushed's floor: exp(-44) = 2^-63.5.
constexpr float kFlushBelow = -44.0f;
// The factor of ExpTimes2To64, 2^kLog2Factor.
constexpr int kLog2Factor = 64;
constexpr float kInverseFactor = 5.42101086e-20f;  // 2^-64, exact.

constexpr double kLog2E = 1.44269504088896341;
constexpr double kLn2 = 0.693147180559945309;

// Degree 6, |r| <= ln(2) / 2 (other targets).
// exp(r) = 1 + r (1 + r (c2 + r (c3 + r (c4 + r (c5 + r c6))))).
constexpr float kC2 = 0.49999994f;
constexpr float kC3 = 0.166665092f;
constexpr float kC4 = 0.0416685268f;
constexpr float kC5 = 0.00837013498f;
constexpr float kC6 = 0.00138116628f;

// The table method's coefficients and table for kLanes-lane vectors (kLanes
// entries, one register): k = round(x kLanes / ln 2), |r| <= ln(2) / (2
// kLanes).
// table[i] holds the bits of 2^(i / kLanes) * 2^kLog2Factor, rounded to
// float, minus i << kShift (kShift = 23 - log2(kLanes)): adding t's bits
// shifted left by kShift (k << kShift; kShifterBits are shifted out) adds i
// back and floor(k / kLanes) to the exponent, so table[k mod kLanes] + (k <<
// kShift) is 2^(k / kLanes) * 2^kLog2Factor. The factor keeps it a normal
// float for every k down to the clamp's. exp(r) = 1 + r (1 + r (c2 + r
// c3)): minimax relative error 0.03 u for 16 lanes, 0.53 u for 8.
template <size_t kLanes>
struct TableExp;
template <>
struct TableExp<16> {
  static constexpr float kC2 = 0.500017822f;
  static constexpr float kC3 = 0.166668519f;
  HWY_ALIGN static constexpr int32_t kTable[16] = {
      0x5F800000, 0x5F7DAAC3, 0x5F7B95C2, 0x5F79C3D3,  //
      0x5F7837F0, 0x5F76F532, 0x5F75FED7, 0x5F75583F,  //
      0x5F7504F3, 0x5F7508A4, 0x5F75672A, 0x5F76248C,  //
      0x5F7744FD, 0x5F78CCDF, 0x5F7AC0C7, 0x5F7D257D};
};
template <>
struct TableExp<8> {
  static constexpr float kC2 = 0.500071228f;
  static constexpr float kC3 = 0.166671738f;
  HWY_ALIGN static constexpr int32_t kTable[8] = {
      0x5F800000, 0x5F7B95C2, 0x5F7837F0, 0x5F75FED7,  //
      0x5F7504F3, 0x5F75672A, 0x5F7744FD, 0x5F7AC0C7};
};

// The table's lanes are looked up by t's bits as they are (LookUp,
// lanes-inl.h).
constexpr bool kHaveTableExp = kHaveLookUp;

// The exp's constants for exp(s x), s in [2^-24, 2^24] a run-time factor (s
// = 1 for plain exp; softmax's scale, or the part of it that is not a power
// of two: softmax-inl.h). Floats only (SVE vectors cannot be members);
// MakeExpScaling fills them for the target's method.
struct ExpScaling {
  float floor;    // kFloor / s: x's clamp.
  float k_per_x;  // L log2(e) s, for L lanes (1 without the table).
  // ln(2) / (L s): rounded to float where FMA is native; else in two parts,
  // the first with 16 significant bits, so that its products with k (at
  // most 8 bits) are exact (Cody-Waite).
  float ln2_hi;
  float ln2_lo;
  float c[7];  // c[i] s^i: the polynomial's coefficients, for r in x's units.
};

// x > 0 rounded to 16 significant bits (scaled by powers of two, exactly,
// so that it works in a constant expression for any s).
constexpr double RoundTo16Bits(double x) {
  double scale = 1.0;
  while (x * scale < 32768.0) scale *= 2.0;
  while (x * scale >= 65536.0) scale *= 0.5;
  return static_cast<double>(static_cast<int64_t>(x * scale + 0.5)) / scale;
}

template <class D>
constexpr ExpScaling MakeExpScaling(D /*d*/, float s) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  constexpr bool kTable = kHaveTableExp && (kLanes == 8 || kLanes == 16);
  const double lanes = kTable ? static_cast<double>(kLanes) : 1.0;
  ExpScaling e{};
  e.floor = kFloor / s;
  e.k_per_x = static_cast<float>(lanes * kLog2E * s);
  const double ln2_part = kLn2 / (lanes * s);
#if HWY_NATIVE_FMA
  e.ln2_hi = static_cast<float>(ln2_part);
#else
  e.ln2_hi = static_cast<float>(RoundTo16Bits(ln2_part));
  e.ln2_lo = static_cast<float>(ln2_part - e.ln2_hi);
#endif
  float coefficients[7] = {1.0f, 1.0f, kC2, kC3, kC4, kC5, kC6};
  if constexpr (kTable) {
    coefficients[2] = TableExp<kLanes>::kC2;
    coefficients[3] = TableExp<kLanes>::kC3;
  }
  double power = 1.0;
  for (int i = 0; i < 7; ++i, power *= s) {
    e.c[i] = static_cast<float>(coefficients[i] * power);
  }
  return e;
}

// exp's own constants (s = 1).
template <class D>
constexpr ExpScaling kUnitScaling = MakeExpScaling(D(), 1.0f);

// The same clamped at kFlushBelow: the lanes that
// ExpNonPositiveFlushed discards compute exp(-44), so none of their
// products is denormal either.
constexpr ExpScaling ClampedAt(ExpScaling s, float floor_value) {
  s.floor = floor_value;
  return s;
}
template <class D>
constexpr ExpScaling kFlushScaling = ClampedAt(MakeExpScaling(D(), 1.0f),
                                               kFlushBelow);

// p * 2^(n + kLog2Extra) for integral n in [-152, 0]; t holds n as
// described at kShifter. 2^n may be below the normal range, so it is
// applied in two halves that are not; p * 2^n1 is exact and the second
// product rounds once.
template <int kLog2Extra, class D, class V = hn::Vec<D>>
HWY_INLINE V Scale(D d, V p, V t) {
  const hn::RebindToSigned<D> di;
  const auto n_int =
      hn::Sub(hn::BitCast(di, t), hn::Set(di, kShifterBits - kLog2Extra));
  const auto n1 = hn::ShiftRight<1>(n_int);
  const auto n2 = hn::Sub(n_int, n1);
  const auto bias = hn::Set(di, 127);
  const V pow1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n1, bias)));
  const V pow2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n2, bias)));
  return hn::Mul(hn::Mul(p, pow1), pow2);
}

// max(x, floor), NaN kept. x86's max returns its second operand when
// either is NaN: one op. Elsewhere Highway's Max returns the number (Arm's
// FMAXNM, the scalar and emulated targets), so a compare and a select.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ClampKeepingNaN(D d, V x, float floor_value) {
  const V floor = hn::Set(d, floor_value);
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  return hn::Max(floor, x);
#else
  return hn::IfThenElse(hn::Lt(x, floor), floor, x);
#endif
}

// exp(s x), times 2^kLog2Factor with kTimesFactor, for s x <= 0, with
// ExpScaling's constants for s.
template <bool kTimesFactor, class D, class V = hn::Vec<D>>
HWY_INLINE V ExpTimesFactor(D d, V x, const ExpScaling& c) {
  x = ClampKeepingNaN(d, x, c.floor);
  const V t = hn::MulAdd(x, hn::Set(d, c.k_per_x), hn::Set(d, kShifter));
  const V k = hn::Sub(t, hn::Set(d, kShifter));
#if HWY_NATIVE_FMA
  const V r = hn::NegMulAdd(k, hn::Set(d, c.ln2_hi), x);
#else  // k ln2_hi is exact, so the product rounds only in the small term.
  const V r = hn::NegMulAdd(k, hn::Set(d, c.ln2_lo),
                            hn::NegMulAdd(k, hn::Set(d, c.ln2_hi), x));
#endif
  constexpr size_t kLanes = hn::MaxLanes(D());
  if constexpr (kHaveTableExp && (kLanes == 8 || kLanes == 16)) {
    using P = TableExp<kLanes>;
    // Exact: kLanes is a power of two.
    constexpr int kShift = 23 - static_cast<int>(hwy::FloorLog2(kLanes));
    const hn::RebindToSigned<D> di;
    const auto t_bits = hn::BitCast(di, t);
    const auto entry = LookUp(hn::Load(di, P::kTable), t_bits);
    const V scaled =
        hn::BitCast(d, hn::Add(entry, hn::ShiftLeft<kShift>(t_bits)));
    // scaled exp(s r) = scaled + (scaled r)(c1 + r (c2 + r c3)).
    V a = hn::MulAdd(hn::Set(d, c.c[3]), r, hn::Set(d, c.c[2]));
    a = hn::MulAdd(a, r, hn::Set(d, c.c[1]));
    const V e = hn::MulAdd(hn::Mul(scaled, r), a, scaled);
    if constexpr (kTimesFactor) {
      return e;
    } else {  // One rounding, to a denormal where exp(x) is one.
      return hn::Mul(e, hn::Set(d, kInverseFactor));
    }
  } else {
    V p = hn::MulAdd(hn::Set(d, c.c[6]), r, hn::Set(d, c.c[5]));
    p = hn::MulAdd(p, r, hn::Set(d, c.c[4]));
    p = hn::MulAdd(p, r, hn::Set(d, c.c[3]));
    p = hn::MulAdd(p, r, hn::Set(d, c.c[2]));
    p = hn::MulAdd(p, r, hn::Set(d, c.c[1]));
    p = hn::MulAdd(p, r, hn::Set(d, c.c[0]));
    constexpr int kLog2Extra = kTimesFactor ? kLog2Factor : 0;
    return Scale<kLog2Extra>(d, p, t);
  }
}

}  // namespace exp_detail

// exp(x) for x <= 0 (see above), 0 where x < kFlushBelow: every output is
// 0 or a normal float of at least exp(-44) > 2^-64, and NaN gives NaN. For
// attention's weights: no weight is denormal, nor is its product with a
// value of magnitude 2^-62 or more, so no instruction makes a denormal (an
// Intel core takes a microcode assist, of the order of 100 cycles, for each
// that does, and ALiBi's far keys, at exp(-87) to exp(-104), did). A flushed
// weight is below 2^-63 times the row's largest (1): at most n 2^-63 max |v|
// off an output over n keys, against float32's own n 2^-24 max |v| bound.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositiveFlushed(D d, V x) {
  const V e =
      exp_detail::ExpTimesFactor<false>(d, x, exp_detail::kFlushScaling<D>);
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, exp_detail::kFlushBelow)), e);
}

// exp(s x) * 2^64 for s x <= 0, s the factor of `scaling`: a normal float
// down to s x = -104, 0 below.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpTimes2To64(D d, V x, const exp_detail::ExpScaling& scaling) {
  return exp_detail::ExpTimesFactor<true>(d, x, scaling);
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_EXP_INL_H_
