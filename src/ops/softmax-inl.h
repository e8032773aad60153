// Per-target row-wise masked softmax, y = softmax(scale * x + mask): what a
// row computes. How rows are grouped, staged, streamed and prefetched is
// softmax.h; which columns are masked and how, mask.h and mask-inl.h.
//
// A causal or key-length limit cuts each row at `limit`: columns [limit,
// cols) get 0 without an exp (at most one vector of them is read, inside the
// row). Over [0, limit):
//   pass 1: v = scale * x (+ additive), -inf where masked; max(v).
//   pass 2: e = exp(v - max) 2^64 into the L1 stage (or y), summed.
//   pass 3: y = e / sum.
// Special rows: max = -inf (every column masked, or every v = -inf) gives
// zeros; a NaN v or max = +inf (inf - inf is undefined; PyTorch gives NaN
// too) gives a row of NaN, masked columns included.
//
// Error bound, per element relative to the exact softmax of the float
// inputs (u = 2^-24, arg = v - max <= 0), from the element's exp and from
// the sum it is divided by:
//     |arg| u   rounding of exp's argument, a float (without an additive
//               mask one subtraction or fused multiply-add: Form)
//   + |v| u     with an additive mask only (scale * x + additive is rounded)
//   + (2 + 0.05 |arg|) u   ExpTimes2To64 (exp-inl.h); (2 + |arg|) u
//               where the exp's factor s is not a power of two (Form)
//   + the sum's share of those terms: their mean over the row weighted by
//               the outputs, at most (2 + 1.05 ln(cols)) u without an
//               additive mask (the weighted mean of |arg| is at most
//               ln(cols))
//   + 8 u       (kSumBlock - 1) u: float partial sums over at most kSumBlock
//               vectors per lane, then double lanes (< 0.5 u for rows up to
//               2^35 columns)
//   + 2 u       reciprocal (double, rounded to float) and final product.
// That is <= 2e-6 (kernels.h) for |arg| + ln(cols) <= 18 (outputs within
// e^-11 of their row's largest in rows of 1024 columns), if every rounding
// errs the same way; with a factor s that is not a power of two, for |arg| +
// ln(cols) <= 9 in the worst case (its constant's error is fixed per s:
// 0.11 u for 1/sqrt(128)). The tests hold every output to 2e-6 or (16 +
// |arg|) u, whichever is larger.
// Outputs below FLT_MIN (arg below about -87) are denormal, accurate only in
// absolute terms; exp underflows to 0 below -104.

#if defined(SIMDATTN_SRC_OPS_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_SOFTMAX_INL_H_
#undef SIMDATTN_SRC_OPS_SOFTMAX_INL_H_
#else
#define SIMDATTN_SRC_OPS_SOFTMAX_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "simdattn/kernels.h"
#include "src/common/parallel.h"
#include "src/ops/exp-inl.h"
#include "src/ops/lanes-inl.h"
#include "src/ops/mask-inl.h"
#include "src/ops/softmax.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace softmax_detail {

using internal::SoftmaxPlan;
using internal::SoftmaxRow;
using mask_detail::MaskedScores;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Vectors summed per lane in float before the partial sums move to double
// lanes (SumInDouble): bounds the summation error by (kSumBlock - 1) u
// whatever the row length.
constexpr size_t kSumBlock = 8;

// Double lanes holding a row's sum of exps: a float vector's halves are
// promoted and added to `lo` and `hi`, whose lanes are summed once per row
// (a serial chain of shuffles every kSumBlock vectors would cost more).
// One-lane targets have no halves: `lo` alone.
#if HWY_TARGET == HWY_SCALAR
template <class D>
using SumD = hn::Rebind<double, D>;
#else
template <class D>
using SumD = hn::Rebind<double, hn::Half<D>>;
#endif
template <class D, class VD = hn::Vec<SumD<D>>>
HWY_INLINE void SumInDouble(D /*d*/, hn::Vec<D> v, VD& lo,
                            [[maybe_unused]] VD& hi) {
#if HWY_TARGET == HWY_SCALAR
  lo = hn::Add(lo, hn::PromoteTo(SumD<D>(), v));
#else
  const hn::Half<D> dh;
  lo = hn::Add(lo, hn::PromoteTo(SumD<D>(), hn::LowerHalf(dh, v)));
  hi = hn::Add(hi, hn::PromoteTo(SumD<D>(), hn::UpperHalf(dh, v)));
#endif
}

// How pass 2 forms a row's exp argument arg, exact but for one rounding and
// never positive, and what the exp multiplies it by: exp(s arg), s going
// into the exp's constants at no cost (exp-inl.h's ExpScaling). Chosen once
// per call (Scaling).
enum class Form {
  // arg = fl(scale * x + additive) - max, s = 1: the max is of the same
  // rounded sums.
  kAdditive,
  // arg = x - max x, s = scale: a scale in [2^-24, 2^24] (the usual case),
  // where s's powers in the polynomial stay normal floats and an x - max
  // that overflows lies below -105 / s anyway. A subtraction, where the
  // other forms take a fused multiply-add.
  kDifference,
  // arg = sigma * x - max fl(sigma * x), sigma = the power of two in scale
  // (0 for 0), whose products are exact, s = scale / sigma in [1, 2): the
  // other scales (negative, 0, extreme). (sigma = scale would leave arg
  // positive by up to half an ulp of the max, ~2^100 for scores near 1e37.)
  kPow2,
};

// The scale's part of every row, computed once per call. Scores with terms
// (softcap, ALiBi) or a sink are first written to y (Materialize), and the
// passes then run over y in place with scale 1 and no element masks.
struct Scaling {
  Scaling(float scale, const internal::MaskModel& model)
      : materialize(model.HasScoreTerms() || model.mask().sinks != nullptr),
        score_scale(scale),
        softcap(model.softcap()) {
    const hn::ScalableTag<float> d;
    constexpr float kMinDifference = 5.96046448e-8f;  // 2^-24
    constexpr float kMaxDifference = 16777216.0f;     // 2^24
    if (materialize) scale = 1.0f;
    if (model.has_additive() && !materialize) {
      form = Form::kAdditive;
      sigma = scale;
      exp = exp_detail::kUnitScaling<hn::ScalableTag<float>>;
    } else if (scale >= kMinDifference && scale <= kMaxDifference) {
      form = Form::kDifference;
      sigma = 1.0f;
      exp = exp_detail::MakeExpScaling(d, scale);
    } else {
      form = Form::kPow2;
      sigma = scale == 0.0f
                  ? 0.0f
                  : std::copysign(std::ldexp(1.0f, std::ilogb(scale)), scale);
      exp = exp_detail::MakeExpScaling(d, scale == 0.0f ? 1.0f : scale / sigma);
    }
  }
  bool materialize;
  float score_scale;  // The call's scale, for Materialize.
  mask_detail::Softcap softcap;
  Form form;
  float sigma;  // x's multiplier in the argument (1 for kDifference).
  exp_detail::ExpScaling exp;
};

// Zeroes the columns before the row's window; with Scaling::materialize,
// writes its scores to y, which it then reads in place, unmasked.
template <class D>
HWY_INLINE void PrepareRow(D d, const Scaling& scaling, SoftmaxRow& r) {
  std::fill(r.y - r.skipped, r.y, 0.0f);
  if (!scaling.materialize) return;
  mask_detail::WriteScores(d, scaling.softcap, scaling.score_scale, r.x,
                           r.masks, r.limit, r.y);
  r.x = r.y;
  r.masks = internal::RowMasks{};
}

// The row's last `count` (< one vector) columns below its limit, read at
// index j of x and of the masks: the row itself when a whole vector fits
// inside it (the lanes past the limit are discarded), else zero-padded
// copies, since a full load there could reach unmapped memory or another
// task's row.
struct Tail {
  const float* x;
  internal::RowMasks masks;
  size_t j;
  size_t count;
};

// One row on its way through the passes. Not copyable: the tail may point
// at the copies inside.
struct RowPasses {
  RowPasses() = default;
  RowPasses(const RowPasses&) = delete;
  RowPasses& operator=(const RowPasses&) = delete;

  const SoftmaxRow* r;
  Tail t;
  size_t full;    // Columns in whole vectors below the limit.
  float* e;       // Pass 2's output: a stage slot, or y.
  float row_max;  // As the row's Form has it.
  double total;   // Sum of the row's exps.
  bool done;      // y already holds the row's result (a special row).
  HWY_ALIGN float x_copy[kMaxLanes];
  HWY_ALIGN float additive_copy[kMaxLanes];
  HWY_ALIGN uint8_t boolean_copy[kMaxLanes];
};

// v of columns [j, j + N) as pass 1 takes its max: fl(sigma * x + additive)
// for kAdditive, x itself for kDifference (and kPow2 with sigma > 0: the
// max is scaled once), else fl(sigma * x); -inf where masked.
template <bool kAdditive, bool kBoolean, bool kScaled, class D,
          class V = hn::Vec<D>>
HWY_INLINE V PassOneScores(D d, V sigma, const float* x,
                           const internal::RowMasks& m, size_t j) {
  return MaskedScores<kAdditive, kBoolean, kScaled>(d, sigma,
                                                    hn::LoadU(d, x + j), m, j);
}

// The max of the row's scores (PassOneScores), and with kFindNaN whether
// one is NaN (x86's max drops NaN, so this takes a second op per vector and
// runs only for rows whose max is infinite: elsewhere a NaN score shows in
// the sum of exps).
template <bool kAdditive, bool kBoolean, bool kScaled, bool kFindNaN = false,
          class D, class V = hn::Vec<D>>
HWY_INLINE float PassOneMax(D d, float sigma, const RowPasses& p,
                            bool* nan = nullptr) {
  const size_t N = hn::Lanes(d);
  const V vsigma = hn::Set(d, sigma);
  const SoftmaxRow& r = *p.r;
  // Four independent chains: one would wait on max's latency each vector.
  // (Four named vectors: SVE vectors cannot be array elements.)
  V max0 = hn::Set(d, -kInf), max1 = max0, max2 = max0, max3 = max0;
  auto any_nan = hn::FirstN(d, 0);
  const auto update = [&](V& chain, V v) {
    if constexpr (kFindNaN) any_nan = hn::Or(any_nan, hn::IsNaN(v));
    chain = hn::Max(chain, v);
  };
  const auto scores = [&](size_t j) {
    return PassOneScores<kAdditive, kBoolean, kScaled>(d, vsigma, r.x, r.masks,
                                                       j);
  };
  size_t j = 0;
  for (; j + 4 * N <= p.full; j += 4 * N) {
    update(max0, scores(j));
    update(max1, scores(j + N));
    update(max2, scores(j + 2 * N));
    update(max3, scores(j + 3 * N));
  }
  for (; j < p.full; j += N) update(max0, scores(j));
  if (p.t.count != 0) {
    update(max1, hn::IfThenElse(hn::FirstN(d, p.t.count),
                                PassOneScores<kAdditive, kBoolean, kScaled>(
                                    d, vsigma, p.t.x, p.t.masks, p.t.j),
                                hn::Set(d, -kInf)));
  }
  if constexpr (kFindNaN) *nan = !hn::AllFalse(d, any_nan);
  const V max = hn::Max(hn::Max(max0, max1), hn::Max(max2, max3));
  return hn::GetLane(hn::MaxOfLanes(d, max));
}

// Pass 1: finds the row's tail and max; writes special rows at once.
template <Form kForm, bool kBoolean, class D>
HWY_INLINE void PassOne(D d, const SoftmaxRow& r, const Scaling& scaling,
                        RowPasses& p) {
  constexpr bool kAdditive = kForm == Form::kAdditive;
  const size_t N = hn::Lanes(d);
  p.r = &r;
  p.full = r.limit - r.limit % N;
  p.e = nullptr;
  p.total = 0.0;
  const size_t tail = r.limit - p.full;
  p.t = Tail{r.x, r.masks, p.full, tail};
  if (tail != 0 && p.full + N > r.cols) {
    std::memset(p.x_copy, 0, sizeof(p.x_copy));
    std::memcpy(p.x_copy, r.x + p.full, tail * sizeof(float));
    p.t.x = p.x_copy;
    if constexpr (kAdditive) {
      std::memset(p.additive_copy, 0, sizeof(p.additive_copy));
      std::memcpy(p.additive_copy, r.masks.additive + p.full,
                  tail * sizeof(float));
      p.t.masks.additive = p.additive_copy;
    }
    if constexpr (kBoolean) {
      std::memset(p.boolean_copy, 0, sizeof(p.boolean_copy));
      std::memcpy(p.boolean_copy, r.masks.boolean + p.full, tail);
      p.t.masks.boolean = p.boolean_copy;
    }
    p.t.j = 0;
  }

  // The max as the Form needs it: of fl(sigma * x + additive), of x, or of
  // fl(sigma * x) (sigma = 0: of 0 * x, NaN for infinite x). A positive
  // sigma multiplies the max instead of every column: rounding is monotonic,
  // so fl(sigma * max x) = max fl(sigma * x).
  const float sigma = scaling.sigma;
  const bool scale_max = kForm == Form::kPow2 && sigma > 0.0f;
  if (kForm == Form::kDifference || scale_max) {
    const float max = PassOneMax<false, kBoolean, false>(d, sigma, p);
    p.row_max = scale_max ? sigma * max : max;
  } else {
    p.row_max = PassOneMax<kAdditive, kBoolean, true>(d, sigma, p);
  }
  // The sink joins the max (Scaling: sinks come with scale 1).
  p.row_max = std::max(p.row_max, r.sink);
  p.done = p.row_max == kInf || p.row_max == -kInf;  // -inf: also limit 0.
  if (p.done) {
    // -inf may hide a NaN; +inf gives NaN anyway (inf - inf).
    bool nan = p.row_max == kInf;
    if (!nan) PassOneMax<kAdditive, kBoolean, true, true>(d, sigma, p, &nan);
    std::fill(r.y, r.y + r.cols, nan ? kNaN : 0.0f);
  }
}

// exp's argument for columns [j, j + N) (Form), -inf where masked.
template <Form kForm, bool kBoolean, class D, class V = hn::Vec<D>>
HWY_INLINE V ExpArg(D d, V sigma, V row_max, const float* x,
                    const internal::RowMasks& m, size_t j) {
  if constexpr (kForm == Form::kAdditive) {
    return hn::Sub(
        MaskedScores<true, kBoolean>(d, sigma, hn::LoadU(d, x + j), m, j),
        row_max);
  }
  const V x_j = hn::LoadU(d, x + j);
  const V arg = kForm == Form::kDifference
                    ? hn::Sub(x_j, row_max)
                    : hn::MulAdd(sigma, x_j, hn::Neg(row_max));
  return MaskedScores<false, kBoolean, false>(d, sigma, arg, m, j);
}

// Pass 2: e = exp(v - max) 2^64 into `stage` (room for limit plus a vector)
// or, when null, y; sums them in blocks. The factor (a power of 2, exact)
// cancels in e / sum and keeps every e down to exp(-104) a normal float, so
// pass 3 rounds tiny outputs once. Meanwhile the first columns of `later`
// (or null) are prefetched, a line per vector, so that their loads overlap
// this row's arithmetic.
template <Form kForm, bool kBoolean, class D>
HWY_INLINE void PassTwo(D d, const Scaling& scaling, float* stage,
                        const SoftmaxRow* later, RowPasses& p) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  // Locals, not fields: the stores below may alias any memory, and fields
  // would be reloaded after each.
  const SoftmaxRow& r = *p.r;
  const float* const x = r.x;
  const internal::RowMasks masks = r.masks;
  const size_t full = p.full;
  const V vsigma = hn::Set(d, scaling.sigma);
  const V vrow_max = hn::Set(d, p.row_max);
  const exp_detail::ExpScaling exp = scaling.exp;
  float* const e_out = stage != nullptr ? stage : r.y;
  p.e = e_out;
  // Field by field: `later` was just written, and a wide load of narrower
  // stores cannot be forwarded.
  const float* const later_x = later == nullptr ? nullptr : later->x;
  const internal::RowMasks later_masks =
      later == nullptr ? internal::RowMasks{} : later->masks;
  const size_t prefetch_end =
      later == nullptr ? 0 : std::min(full, internal::PrefetchEnd(*later));
  const SumD<D> dd;
  auto sum_lo = hn::Zero(dd);
  auto sum_hi = hn::Zero(dd);
  for (size_t j = 0; j < full;) {
    const size_t block_end = std::min(full, j + kSumBlock * N);
    V sum = hn::Zero(d);
    for (; j < block_end; j += N) {
      if (j < prefetch_end && j % SoftmaxPlan::kLineFloats == 0) {
        internal::PrefetchColumns(later_x, later_masks, j);
      }
      const V e = ExpTimes2To64(
          d, ExpArg<kForm, kBoolean>(d, vsigma, vrow_max, x, masks, j), exp);
      hn::StoreU(e, d, e_out + j);
      sum = hn::Add(sum, e);
    }
    SumInDouble(d, sum, sum_lo, sum_hi);
  }
  const Tail& t = p.t;
  if (t.count != 0) {
    // 0 in the lanes past the limit.
    const V e = ExpTimes2To64(
        d,
        hn::IfThenElse(
            hn::FirstN(d, t.count),
            ExpArg<kForm, kBoolean>(d, vsigma, vrow_max, t.x, t.masks, t.j),
            hn::Set(d, -kInf)),
        exp);
    SumInDouble(d, e, sum_lo, sum_hi);
    if (stage != nullptr || full + N <= r.cols) {
      hn::StoreU(e, d, e_out + full);
    } else {
      StoreTail(e, d, r.y + full, t.count);
    }
  }
  if (later != nullptr) internal::PrefetchRow(*later, prefetch_end);
  p.total = hn::GetLane(hn::SumOfLanes(dd, hn::Add(sum_lo, sum_hi)));
  if (r.sink != -kInf) p.total += std::ldexp(std::exp(r.sink - p.row_max), 64);
}

// y[j] = src[j] * scale for j < end, 0 for end <= j < cols, whole cache
// lines of y with non-temporal stores, the partial lines at either end with
// ordinary ones (a line half streamed and half stored normally costs a
// partial write-combining flush). src has room for a vector past end.
template <class D>
HWY_INLINE void StreamScaled(D d, const float* HWY_RESTRICT src, size_t end,
                             float scale, float* HWY_RESTRICT y, size_t cols) {
  const size_t N = hn::Lanes(d);
  const size_t align_floats = std::max(SoftmaxPlan::kLineFloats, N);
  const size_t misalignment =
      reinterpret_cast<uintptr_t>(y) / sizeof(float) % align_floats;
  const size_t head =
      std::min(cols, misalignment == 0 ? 0 : align_floats - misalignment);
  const size_t body_end = head + (cols - head) / align_floats * align_floats;
  const auto value = [&](size_t j) { return j < end ? src[j] * scale : 0.0f; };
  for (size_t j = 0; j < head; ++j) y[j] = value(j);
  const auto vscale = hn::Set(d, scale);
  for (size_t j = head; j < body_end; j += N) {
    auto v = hn::Zero(d);
    if (j < end) {
      v = hn::Mul(hn::LoadU(d, src + j), vscale);
      if (j + N > end) v = hn::IfThenElseZero(hn::FirstN(d, end - j), v);
    }
    hn::Stream(v, d, y + j);
  }
  for (size_t j = body_end; j < cols; ++j) y[j] = value(j);
}

// Pass 3: y = e / sum (NaN for a NaN score, see pass 1); with `stream`,
// staged rows go to y with non-temporal stores.
template <class D>
HWY_INLINE void PassThree(D d, bool stream, const RowPasses& p) {
  const size_t N = hn::Lanes(d);
  float* const y = p.r->y;
  const size_t cols = p.r->cols, end = p.r->limit;
  const float* const e = p.e;
  if (std::isnan(p.total)) {
    std::fill(y, y + cols, kNaN);
    return;
  }
  // total >= 2^64: the max column contributes exp(~0).
  const float inv = static_cast<float>(1.0 / p.total);
  if (stream && e != y) return StreamScaled(d, e, end, inv, y, cols);
  const auto vinv = hn::Set(d, inv);
  size_t j = 0;
  for (; j + N <= end; j += N) {
    hn::StoreU(hn::Mul(hn::LoadU(d, e + j), vinv), d, y + j);
  }
  for (; j < end; ++j) y[j] = e[j] * inv;
  std::fill(y + end, y + cols, 0.0f);
}

// Softmax of `count` rows of equal length, pass by pass, while rows
// later[0, later_count) load. Row g's exps go to stage + g * slot when they
// fit there, else to y.
template <Form kForm, bool kBoolean>
HWY_NOINLINE void SoftmaxGroup(SoftmaxRow* rows, size_t count,
                               const SoftmaxRow* later, size_t later_count,
                               const Scaling& scaling, float* stage,
                               size_t slot, bool stream) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  RowPasses passes[SoftmaxPlan::kMaxGroup];
  for (size_t g = 0; g < count; ++g) {
    PrepareRow(d, scaling, rows[g]);
    PassOne<kForm, kBoolean>(d, rows[g], scaling, passes[g]);
  }
  for (size_t g = 0; g < count; ++g) {
    const SoftmaxRow* ahead = g < later_count ? &later[g] : nullptr;
    if (passes[g].done) {
      if (ahead != nullptr) internal::PrefetchRow(*ahead, 0);
      continue;
    }
    float* const row_stage =
        rows[g].limit + N <= slot ? stage + g * slot : nullptr;
    PassTwo<kForm, kBoolean>(d, scaling, row_stage, ahead, passes[g]);
  }
  for (size_t g = count; g < later_count; ++g)
    internal::PrefetchRow(later[g], 0);
  for (size_t g = 0; g < count; ++g) {
    if (!passes[g].done) PassThree(d, stream, passes[g]);
  }
}

// SoftmaxGroup for the call's form and boolean mask.
template <Form kForm>
HWY_INLINE void SoftmaxGroupOfForm(bool boolean, SoftmaxRow* rows, size_t count,
                                   const SoftmaxRow* later, size_t later_count,
                                   const Scaling& scaling, float* stage,
                                   size_t slot, bool stream) {
  if (boolean) {
    SoftmaxGroup<kForm, true>(rows, count, later, later_count, scaling, stage,
                              slot, stream);
  } else {
    SoftmaxGroup<kForm, false>(rows, count, later, later_count, scaling, stage,
                               slot, stream);
  }
}

}  // namespace softmax_detail

// Same-target entry point; arguments were validated by the caller (shapes
// equal, y either exactly x or disjoint from it, key_lengths[b] <= dims[3]).
inline void SoftmaxImpl(ConstTensor4 x, Tensor4 y, float scale,
                        const AttentionMask& mask) {
  using namespace softmax_detail;
  const size_t cols = x.dims[3];
  const size_t total_rows = x.NumMatrices() * x.dims[2];
  if (total_rows == 0 || cols == 0) return;
  const internal::MaskModel model(mask, cols);
  const Scaling scaling(scale, model);
  const SoftmaxPlan plan(total_rows, cols);
  const bool boolean = model.has_boolean() && !scaling.materialize;
  internal::ParallelFor(
      0, total_rows, plan.grain, [&](size_t first, size_t last) {
        HWY_ALIGN float stage[SoftmaxPlan::kStageFloats];
        const size_t slot =
            plan.group == 1 ? SoftmaxPlan::kStageFloats : plan.slot;
        // The rows computed, and those prefetched plan.ahead rows later.
        internal::SoftmaxRowWalk walk(x, y, model, first);
        const size_t ahead_first = std::min(last, first + plan.ahead);
        internal::SoftmaxRowWalk ahead(x, y, model, ahead_first);
        SoftmaxRow rows[SoftmaxPlan::kMaxGroup], later[SoftmaxPlan::kMaxGroup];
        for (size_t row = first, ahead_row = ahead_first; row != last;) {
          const size_t count = std::min(plan.group, last - row);
          const size_t later_count = std::min(count, last - ahead_row);
          for (size_t g = 0; g < count; ++g) rows[g] = walk.Next();
          for (size_t g = 0; g < later_count; ++g) later[g] = ahead.Next();
          row += count;
          ahead_row += later_count;
          switch (scaling.form) {
            case Form::kAdditive:
              SoftmaxGroupOfForm<Form::kAdditive>(boolean, rows, count, later,
                                                  later_count, scaling, stage,
                                                  slot, plan.stream);
              break;
            case Form::kDifference:
              SoftmaxGroupOfForm<Form::kDifference>(boolean, rows, count, later,
                                                    later_count, scaling, stage,
                                                    slot, plan.stream);
              break;
            case Form::kPow2:
              SoftmaxGroupOfForm<Form::kPow2>(boolean, rows, count, later,
                                              later_count, scaling, stage, slot,
                                              plan.stream);
              break;
          }
        }
        if (plan.stream) hwy::FlushStream();
      });
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_SOFTMAX_INL_H_
