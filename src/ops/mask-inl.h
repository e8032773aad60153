// Per-target application of the mask model (mask.h) to vectors of scores,
// shared by softmax-inl.h and attention-inl.h.

#if defined(SIMDATTN_SRC_OPS_MASK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_MASK_INL_H_
#undef SIMDATTN_SRC_OPS_MASK_INL_H_
#else
#define SIMDATTN_SRC_OPS_MASK_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "src/ops/lanes-inl.h"
#include "src/ops/mask.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace mask_detail {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Lanes whose boolean-mask byte is nonzero. Reads Lanes(d) bytes at p.
template <class D>
HWY_INLINE auto BooleanLanes(D d, const uint8_t* HWY_RESTRICT p) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::RebindToUnsigned<D> du;
  const auto bytes = hn::PromoteTo(du, hn::LoadU(d8, p));
  return hn::RebindMask(d, hn::Ne(bytes, hn::Zero(du)));
}

// Lanes of columns [j, j + Lanes(d)) below `end`.
template <class D>
HWY_INLINE auto LanesBelow(D d, size_t j, size_t end) {
  return hn::FirstN(d, end > j ? end - j : 0);
}

// The scores of columns [j, j + Lanes(d)) of a row under its element masks:
// scale * x (x alone without kScaled) plus the additive mask, rounded once,
// and -inf in the lanes the boolean or additive mask masks, whatever x holds
// there. Reads Lanes(d) elements at index j of each mask in use.
template <bool kAdditive, bool kBoolean, bool kScaled = true, class D,
          class V = hn::Vec<D>>
HWY_INLINE V MaskedScores(D d, V scale, V x, const internal::RowMasks& m,
                          size_t j) {
  V v = x;
  auto masked = hn::FirstN(d, 0);
  if constexpr (kAdditive) {
    const V additive = hn::LoadU(d, m.additive + j);
    v = hn::MulAdd(scale, x, additive);
    masked = hn::Eq(additive, hn::Set(d, -kInf));
  } else if constexpr (kScaled) {
    v = hn::Mul(scale, x);
  }
  if constexpr (kBoolean)
    masked = hn::Or(masked, BooleanLanes(d, m.boolean + j));
  if constexpr (kAdditive || kBoolean) {
    v = hn::IfThenElse(masked, hn::Set(d, -kInf), v);
  }
  return v;
}

// The call's softcap (0: off) and its reciprocal.
struct Softcap {
  explicit Softcap(float cap) : cap(cap), inverse(cap > 0.0f ? 1 / cap : 0) {}
  float cap, inverse;
};

// Lanes of columns [j, j + Lanes(d)) in [begin, end).
template <class D>
HWY_INLINE auto LanesBetween(D d, size_t j, size_t begin, size_t end) {
  return hn::AndNot(hn::FirstN(d, begin > j ? begin - j : 0),
                    LanesBelow(d, j, end));
}

// MaskedScores with the score terms: for scaled scores s of columns
// [j, j + Lanes(d)), softcap * tanh(s / softcap) (tanh within 4 ulp,
// Highway's), plus the additive mask, minus ALiBi's slope * |position - j|;
// -inf where masked. NaN stays NaN. Highway's Tanh gets no NaN, which it
// converts to an integer (undefined behaviour on EMU128 and SCALAR): s /
// softcap is NaN where s is, and where s is 0 and a denormal softcap's
// inverse is inf; the result there is s, the limit of softcap * tanh.
template <bool kAdditive, bool kBoolean, class D, class V = hn::Vec<D>>
HWY_INLINE V ScoresWithTerms(D d, const Softcap& softcap, V s,
                             const internal::RowMasks& m, size_t j) {
  if (softcap.cap > 0.0f) {
    const V x = hn::Mul(s, hn::Set(d, softcap.inverse));
    const auto nan = hn::IsNaN(x);
    s = hn::IfThenElse(nan, s,
                       hn::Mul(hn::Set(d, softcap.cap),
                               hn::Tanh(d, hn::IfThenZeroElse(nan, x))));
  }
  s = MaskedScores<kAdditive, kBoolean, false>(d, hn::Set(d, 1.0f), s, m, j);
  if (m.alibi_slope != 0.0f) {
    const V key = hn::Add(hn::Set(d, static_cast<float>(j)), hn::Iota(d, 0));
    const V distance = hn::Abs(hn::Sub(hn::Set(d, m.position), key));
    s = hn::NegMulAdd(hn::Set(d, m.alibi_slope), distance, s);
  }
  return s;
}

template <bool kAdditive, bool kBoolean, class D>
HWY_INLINE void WriteScoresOf(D d, const Softcap& softcap, float scale,
                              const float* x, internal::RowMasks m,
                              size_t limit, float* y) {
  const size_t N = hn::Lanes(d);
  const auto scores = [&](hn::Vec<D> xj, const internal::RowMasks& masks,
                          size_t j) {
    return ScoresWithTerms<kAdditive, kBoolean>(
        d, softcap, hn::Mul(hn::Set(d, scale), xj), masks, j);
  };
  size_t j = 0;
  for (; j + N <= limit; j += N) {
    hn::StoreU(scores(hn::LoadU(d, x + j), m, j), d, y + j);
  }
  if (j == limit) return;
  // The tail: a whole vector there could reach unmapped memory. The masks
  // are read through zero-padded copies.
  const size_t count = limit - j;
  HWY_ALIGN float additive[kMaxLanes] = {};
  HWY_ALIGN uint8_t boolean[kMaxLanes] = {};
  m.position -= static_cast<float>(j);
  if (kAdditive) {
    std::memcpy(additive, m.additive + j, count * sizeof(float));
    m.additive = additive;
  }
  if (kBoolean) {
    std::memcpy(boolean, m.boolean + j, count);
    m.boolean = boolean;
  }
  StoreTail(scores(LoadTail(d, x + j, count), m, 0), d, y + j, count);
}

// y[0, limit) = a row's scores (kernels.h's AttentionMask) from x[0, limit):
// softcap of scale * x, plus the additive mask and ALiBi; -inf where the
// element masks mask. y may be x.
template <class D>
HWY_INLINE void WriteScores(D d, const Softcap& softcap, float scale,
                            const float* x, const internal::RowMasks& m,
                            size_t limit, float* y) {
  if (m.additive != nullptr) {
    return m.boolean != nullptr
               ? WriteScoresOf<true, true>(d, softcap, scale, x, m, limit, y)
               : WriteScoresOf<true, false>(d, softcap, scale, x, m, limit, y);
  }
  return m.boolean != nullptr
             ? WriteScoresOf<false, true>(d, softcap, scale, x, m, limit, y)
             : WriteScoresOf<false, false>(d, softcap, scale, x, m, limit, y);
}

}  // namespace mask_detail
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_MASK_INL_H_
