// Per-target row-wise masked softmax, y = softmax(scale * x + mask). Included
// once per SIMD target by softmax.cc (and by kernels that call it from the
// same target without another dispatch).
//
// Each row of n columns is handled by one task, in a fixed order, so results
// are bit-identical for any thread count. A causal or key-length limit cuts
// the row at `limit`: columns [limit, n) get 0 without an exp (at most one
// vector of them is read, inside the row), so a causal softmax computes half
// the exps of an unmasked one. Short rows go through the passes in groups of
// up to four (SoftmaxRows). Over [0, limit):
//   pass 1: v = scale * x (+ additive), -inf where the boolean mask is set;
//           max(v) (a NaN v shows in pass 2's sum, as exp keeps NaN).
//   pass 2: e = exp(v - max) 2^64, summed and stored into an L1 stage (rows of
//           up to 4096 columns; longer rows use y itself); meanwhile the
//           task's next row (group) is prefetched to L1, a line per vector,
//           or, for long rows, the next row's pass 1 is done (CarriesMax);
//           the row (group) after it is prefetched to L2, except by long
//           rows that do not carry.
//   pass 3: y = e / sum, with non-temporal stores when y exceeds 8 MiB
//           (Output, StreamScaled), into pages touched two groups before
//           (PageTouch).
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
// 0.11 u for 1/sqrt(128)). Measured errors are far smaller (rows of 1024
// Gaussian scores of standard deviation 1 to 10, scale 1/8: median 4e-8 to
// 8e-8, worst 2e-7 to 6e-7), and the tests hold every output to 2e-6 or (16 +
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

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace softmax_detail {

// Vectors summed per lane in float before the partial sums move to double
// lanes (SumInDouble): bounds the summation error by (kSumBlock - 1) u
// whatever the row length (one float accumulator over a 4099-column row on a
// 4-lane target would allow ~1000 u).
constexpr size_t kSumBlock = 8;

// Double lanes holding a row's sum of exps: a float vector's lower and upper
// halves are promoted and added to `lo` and `hi`, and the lanes are summed
// once per row. (Summing each block's lanes in float, then in a double
// scalar, was ~20% of an in-cache 1024-column row on AVX3: a serial chain of
// shuffles every kSumBlock vectors.) One-lane targets have no halves: `lo`
// alone.
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
// Rows per task: at least this many elements, so that task overhead is
// amortised even for short rows.
constexpr size_t kGrainElements = size_t{1} << 14;
// Room for one vector of the widest target.
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

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
  // other forms take a fused multiply-add: against arg = scale * x -
  // fl(scale * max x), one AVX3 thread (AMD EPYC) took 1x12x1024x1024 from
  // 4.40 and 4.26 to 4.05 and 4.07 ms from memory (two sets of twelve
  // alternating runs, medians), 1x1x64x1024 from 18.6 to 18.0 us in cache.
  kDifference,
  // arg = sigma * x - max fl(sigma * x), sigma = the power of two in scale
  // (0 for 0), whose products are exact, s = scale / sigma in [1, 2): the
  // other scales (negative, 0, extreme). (sigma = scale would leave arg
  // positive by up to half an ulp of the max, ~2^100 for scores near 1e37:
  // such rows came out as NaN or garbage.)
  kPow2,
};

// The scale's part of every row, computed once per call.
struct Scaling {
  Scaling(float scale, bool additive) {
    const hn::ScalableTag<float> d;
    constexpr float kMinDifference = 5.96046448e-8f;  // 2^-24
    constexpr float kMaxDifference = 16777216.0f;     // 2^24
    if (additive) {
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
  Form form;
  float sigma;  // x's multiplier in the argument (1 for kDifference).
  exp_detail::ExpScaling exp;
};

// One row's operands. x and y may be the same memory (in place), hence no
// HWY_RESTRICT. additive and masked are null when absent.
struct Row {
  const float* x;
  float* y;
  const float* additive;
  const uint8_t* masked;
  size_t cols;   // Row length.
  size_t limit;  // Columns [limit, cols) are masked by causality or length.
};

// Lanes whose boolean-mask byte is nonzero. Reads Lanes(d) bytes at p.
template <class D>
HWY_INLINE auto MaskedLanes(D d, const uint8_t* HWY_RESTRICT p) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::RebindToUnsigned<D> du;
  const auto bytes = hn::PromoteTo(du, hn::LoadU(d8, p));
  return hn::RebindMask(d, hn::Ne(bytes, hn::Zero(du)));
}

// v = scale * x[j] (+ additive[j]), -inf where masked[j] != 0; without
// kScaled (and no additive mask) v = x[j]. Reads Lanes(d) elements at index
// j of each operand in use.
template <bool kAdditive, bool kBoolean, bool kScaled = true, class D,
          class V = hn::Vec<D>>
HWY_INLINE V Scores(D d, V scale, const float* x, const float* additive,
                    const uint8_t* masked, size_t j) {
  V v;
  if constexpr (kAdditive) {
    v = hn::MulAdd(scale, hn::LoadU(d, x + j), hn::LoadU(d, additive + j));
  } else if constexpr (kScaled) {
    v = hn::Mul(scale, hn::LoadU(d, x + j));
  } else {
    v = hn::LoadU(d, x + j);
  }
  if constexpr (kBoolean) {
    v = hn::IfThenElse(MaskedLanes(d, masked + j), hn::Set(d, -kInf), v);
  }
  return v;
}

// exp's argument (Form), -inf where masked. The exp clamps -inf and
// overflowed differences itself.
template <Form kForm, bool kBoolean, class D, class V = hn::Vec<D>>
HWY_INLINE V ExpArg(D d, V sigma, V row_max, const float* x,
                    const float* additive, const uint8_t* masked, size_t j) {
  V arg;
  if constexpr (kForm == Form::kAdditive) {
    arg = hn::Sub(
        hn::MulAdd(sigma, hn::LoadU(d, x + j), hn::LoadU(d, additive + j)),
        row_max);
  } else if constexpr (kForm == Form::kDifference) {
    arg = hn::Sub(hn::LoadU(d, x + j), row_max);
  } else {
    arg = hn::MulAdd(sigma, hn::LoadU(d, x + j), hn::Neg(row_max));
  }
  if constexpr (kBoolean) {
    arg = hn::IfThenElse(MaskedLanes(d, masked + j), hn::Set(d, -kInf), arg);
  }
  return arg;
}

// Where pass 2 puts the exps and how pass 3 writes y.
struct Output {
  // kStageFloats floats in L1 (the task's stack), a slot of `slot` floats
  // per row of a group: a row that fits computes its exps there, so y is
  // written once, by pass 3.
  float* stage;
  size_t slot;
  // Pass 3 writes y with non-temporal stores (only for staged rows). Set
  // when y is too large to stay in cache for its reader anyway: the stores
  // then skip reading y's lines from memory before writing them, a third of
  // an out-of-place softmax's memory traffic.
  bool stream;
};
constexpr size_t kStageFloats = 4096 + kMaxLanes;
// Outputs larger than this are streamed (see Output::stream): about an L3
// share, beyond which the reader finds y in memory whatever the stores do.
constexpr size_t kStreamBytes = size_t{8} << 20;

// y[j] = src[j] * scale for j < end, 0 for end <= j < cols. Whole cache
// lines of y get non-temporal stores; the partial lines at either end get
// ordinary ones. (Streaming only whole vectors was slower for AVX2's 32-byte
// vectors: a line half streamed and half stored normally costs a partial
// write-combining flush, and causal rows end mid-line: AVX2 causal
// 8x12x256x256 took 1.6x as long as unmasked.) src has room for a vector
// past end; lanes read there are discarded.
template <class D>
HWY_INLINE void StreamScaled(D d, const float* HWY_RESTRICT src, size_t end,
                             float scale, float* HWY_RESTRICT y, size_t cols) {
  const size_t N = hn::Lanes(d);
  const size_t align_floats = std::max<size_t>(64 / sizeof(float), N);
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

// Starts loading a row's columns from `from` up to its limit, capped at
// kPrefetchFloats so as not to evict the current row from L1 (the hardware
// prefetcher takes over in long rows), while the current row computes. Rows
// that a causal or length limit cuts are read in short pieces the hardware
// prefetcher does not follow: on one AVX3 thread (AMD EPYC), 8x12x256x256
// causal spent 35% of its time in the first load of x, and prefetching took
// it from 4.4-4.8 to 3.5 ms.
constexpr size_t kPrefetchFloats = 1024;
constexpr size_t kLineFloats = 64 / sizeof(float);

// A prefetch with x86's locality hint (0: prefetchnta ... 3: prefetcht0);
// elsewhere (not measured) an ordinary prefetch.
template <int kLocality, typename T>
HWY_INLINE void PrefetchLine(const T* p) {
#if HWY_ARCH_X86 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
  __builtin_prefetch(p, /*rw=*/0, kLocality);
#else
  hwy::Prefetch(p);
#endif
}
// The next row is read by pass 1 and pass 2 soon after it arrives and not
// again, so its lines come in non-temporally (prefetchnta), which spares the
// lines already in the caches: on one AVX3 thread (AMD EPYC), eight
// alternating runs from memory took 1x12x1024x1024 from 4.14 to 4.05 ms
// and 8x12x256x256 from 2.33 to 2.30 ms (medians; minimums 3.96 to 3.88 and
// 2.22 to 2.08), in-cache shapes unchanged.
constexpr int kNextRowLocality = 0;
// The row (group) after next goes to L2 meanwhile, where it waits a row
// (prefetcht1; prefetcht0, to L1 as well, was slower for long rows), so its
// misses have two rows' time to arrive. For groups of short rows, alternating
// runs on one AVX3 thread (AMD EPYC) took 8x12x256x256 from 2.00-2.16 to
// 1.83-1.95 ms (minimums of ten sets; medians of minimums 0-12% lower, never
// higher) and its causal form 5-22% lower; without the next group's
// prefetch to L1, or with prefetcht0 for it, it was slower (RESULTS.md).
constexpr int kRowAfterNextLocality = 2;

template <int kLocality = kNextRowLocality>
HWY_INLINE void PrefetchColumns(const Row& r, size_t j) {
  PrefetchLine<kLocality>(r.x + j);
  if (r.additive != nullptr) PrefetchLine<kLocality>(r.additive + j);
  if (r.masked != nullptr && j % (4 * kLineFloats) == 0) {
    PrefetchLine<kLocality>(r.masked + j);
  }
}

template <int kLocality = kNextRowLocality>
HWY_INLINE void PrefetchRow(const Row& r, size_t from) {
  const size_t to = std::min(r.limit, kPrefetchFloats);
  for (size_t j = from - from % kLineFloats; j < to; j += kLineFloats) {
    PrefetchColumns<kLocality>(r, j);
  }
}

// Where the last `count` (< one vector) columns of a row are read from: at
// index j of x, additive and masked (the row itself, or zero-padded copies).
struct Tail {
  const float* x;
  const float* additive;
  const uint8_t* masked;
  size_t j;
  size_t count;
};

// Pass 1 of SoftmaxRow: the max of Scores<kAdditive, kBoolean, kScaled>
// over the row's whole vectors [from, full) and its tail, and of `initial`
// (the max of [0, from), if found before). With kFindNaN, also sets
// *nan if a score is NaN; without, a NaN score may or may not show in the max
// (x86's max drops it), and the caller finds it in the sum of exps (see
// SoftmaxRow).
template <bool kAdditive, bool kBoolean, bool kScaled, bool kFindNaN = false,
          class D, class V = hn::Vec<D>>
HWY_INLINE float PassOneMax(D d, V scale, const Row& r, size_t full,
                            const Tail& tail, bool* nan = nullptr,
                            size_t from = 0, float initial = -kInf) {
  const size_t N = hn::Lanes(d);
  V vmax = hn::Set(d, initial);
  auto any_nan = hn::FirstN(d, 0);
  for (size_t j = from; j < full; j += N) {
    const V v = Scores<kAdditive, kBoolean, kScaled>(d, scale, r.x, r.additive,
                                                     r.masked, j);
    if constexpr (kFindNaN) any_nan = hn::Or(any_nan, hn::IsNaN(v));
    vmax = hn::Max(vmax, v);
  }
  if (tail.count != 0) {
    const V v = hn::IfThenElse(
        hn::FirstN(d, tail.count),
        Scores<kAdditive, kBoolean, kScaled>(d, scale, tail.x, tail.additive,
                                             tail.masked, tail.j),
        hn::Set(d, -kInf));
    if constexpr (kFindNaN) any_nan = hn::Or(any_nan, hn::IsNaN(v));
    vmax = hn::Max(vmax, v);
  }
  if constexpr (kFindNaN) *nan = !hn::AllFalse(d, any_nan);
  return hn::GetLane(hn::MaxOfLanes(d, vmax));
}

// Rows a task runs through the passes together (see SoftmaxRows): up to
// kMaxGroup rows of at most kGroupFloats columns in all.
constexpr size_t kMaxGroup = 4;
constexpr size_t kGroupFloats = 1024;

// One row on its way through the passes of SoftmaxRows. Not copyable: the
// tail may point at the copies inside.
struct RowPasses {
  RowPasses() = default;
  RowPasses(const RowPasses&) = delete;
  RowPasses& operator=(const RowPasses&) = delete;

  const Row* r;
  Tail t;
  size_t full;    // Columns in whole vectors below the limit.
  float* e;       // Pass 2's output: a stage slot, or y.
  size_t end;     // y[0, end) is written by pass 3, [end, cols) zeroed.
  float row_max;  // As the row's Form has it.
  double total;   // Sum of the row's exps.
  bool done;      // y already holds the row's result (a special row).
  HWY_ALIGN float x_copy[kMaxLanes];
  HWY_ALIGN float additive_copy[kMaxLanes];
  HWY_ALIGN uint8_t masked_copy[kMaxLanes];
};

// The max of a row's first columns, found by the previous row's pass 2
// (CarriesMax), so that the row's loads overlap that row's arithmetic and
// its own pass 1 covers only the rest. The max is exact whatever the order,
// so whether a row's first columns were carried (not for the first row of a
// task) changes no result.
struct CarriedMax {
  const float* x = nullptr;  // The row's; null: nothing carried.
  size_t columns = 0;        // [0, columns), whole vectors, are in `max`.
  float max = -kInf;
};

// Whether pass 2 finds the next row's max as it goes, for rows that go
// through the passes one at a time (long rows): unscaled scores without a
// boolean mask (Form::kDifference, the usual case). The row after next is
// then prefetched to L2 instead of the next one to L1. On one AVX3 thread
// (AMD EPYC), 1x12x1024x1024 in cache took 253 instead of 273 ns a row,
// and from memory 4.00 instead of 4.26 ms and 3.67 instead of 3.98 ms
// (two sets of alternating runs, medians of the runs' minimums; against
// oneDNN 1.74x instead of 1.65x, 1.78x instead of 1.68x). Carrying the max
// within groups of short rows made 8x12x256x256 slower (2.03 -> 2.23 ms).
template <Form kForm, bool kBoolean>
constexpr bool CarriesMax() {
  return kForm == Form::kDifference && !kBoolean;
}

// The row's max as its Form needs it: of fl(sigma * x + additive), of x, or
// of fl(sigma * x) (sigma = 0: of 0 * x, NaN for infinite x). A positive
// sigma multiplies the max instead of every column: rounding is monotonic,
// so fl(sigma * max x) = max fl(sigma * x). Starts from `carried` if it is
// the row's.
template <Form kForm, bool kBoolean, class D>
HWY_INLINE float RowMax(D d, const Scaling& scaling, const Row& r,
                        const RowPasses& p, const CarriedMax& carried) {
  constexpr bool kAdditive = kForm == Form::kAdditive;
  const float sigma = scaling.sigma;
  if constexpr (CarriesMax<kForm, kBoolean>()) {
    const bool own = carried.x == r.x;
    return PassOneMax<false, false, false>(d, hn::Set(d, sigma), r, p.full, p.t,
                                           nullptr, own ? carried.columns : 0,
                                           own ? carried.max : -kInf);
  }
  if (kForm == Form::kDifference || (kForm == Form::kPow2 && sigma > 0.0f)) {
    const float max = PassOneMax<kAdditive, kBoolean, false>(
        d, hn::Set(d, sigma), r, p.full, p.t);
    return kForm == Form::kDifference ? max : sigma * max;
  }
  return PassOneMax<kAdditive, kBoolean, true>(d, hn::Set(d, sigma), r, p.full,
                                               p.t);
}

// Finds the row's tail and max (pass 1); writes special rows at once. Reads
// x[0, limit) (and the masks' same columns), plus at most one vector of
// further columns inside the row. A tail vector that would cross the row's
// end goes through copies: a full load there could reach unmapped memory or
// another task's row.
template <Form kForm, bool kBoolean, class D>
HWY_INLINE void PassOne(D d, const Row& r, const Scaling& scaling,
                        const CarriedMax& carried, RowPasses& p) {
  constexpr bool kAdditive = kForm == Form::kAdditive;
  const size_t N = hn::Lanes(d);
  const size_t limit = r.limit;
  p.r = &r;
  p.full = limit - limit % N;
  // Set by pass 2, read by pass 3 only after it; g++ -O2 cannot see that
  // through the group loops (-Wmaybe-uninitialized).
  p.end = 0;
  p.e = nullptr;
  p.total = 0.0;
  const size_t tail = limit - p.full;
  p.t = Tail{r.x, r.additive, r.masked, p.full, tail};
  // With a causal or length cut, the tail vector usually fits in the row:
  // its lanes past the limit (masked columns, still in bounds) are then
  // loaded from the row itself and stored with the 0 they get anyway, which
  // saves the copies (measured: causal 256-column rows were slower than
  // unmasked ones with copies for every row).
  if (tail != 0 && p.full + N > r.cols) {
    std::memset(p.x_copy, 0, sizeof(p.x_copy));
    std::memcpy(p.x_copy, r.x + p.full, tail * sizeof(float));
    p.t.x = p.x_copy;
    if constexpr (kAdditive) {
      std::memset(p.additive_copy, 0, sizeof(p.additive_copy));
      std::memcpy(p.additive_copy, r.additive + p.full, tail * sizeof(float));
      p.t.additive = p.additive_copy;
    }
    if constexpr (kBoolean) {
      std::memset(p.masked_copy, 0, sizeof(p.masked_copy));
      std::memcpy(p.masked_copy, r.masked + p.full, tail);
      p.t.masked = p.masked_copy;
    }
    p.t.j = 0;
  }

  // NaN is not looked for here (two ops per vector): a NaN score makes its
  // exp, and so the row's sum, NaN (the exp keeps NaN), which pass 2 checks.
  // Only a row whose max is infinite is scanned for NaN: -inf may hide a
  // NaN, and +inf gives NaN anyway (inf - inf).
  p.row_max = RowMax<kForm, kBoolean>(d, scaling, r, p, carried);
  p.done = p.row_max == kInf || p.row_max == -kInf;  // -inf: also limit 0.
  if (p.done) {
    bool nan = p.row_max == kInf;
    if (!nan) {
      PassOneMax<kAdditive, kBoolean, true, true>(d, hn::Set(d, scaling.sigma),
                                                  r, p.full, p.t, &nan);
    }
    std::fill(r.y, r.y + r.cols, nan ? kNaN : 0.0f);
  }
}

// Pass 2: e = exp(v - max) 2^64 into `stage` (room for limit plus a vector)
// or, when null, y; sums them in blocks. The factor (a power of 2, exact)
// cancels in e / sum and keeps every e down to exp(-104) a normal float, so
// pass 3 rounds tiny outputs once. Meanwhile the first columns of `next` (or
// null) are prefetched to L1 and those of `after` (or null), the row that
// follows `next`'s, to L2, a line per vector, so that their loads overlap
// this row's arithmetic instead of stalling the core in a burst. With
// kCarry, `next`'s max over the columns both rows have is found instead of
// prefetching it (into *carry).
template <Form kForm, bool kBoolean, bool kCarry = false, class D>
HWY_INLINE void PassTwo(D d, const Scaling& scaling, float* stage,
                        const Row* next, RowPasses& p,
                        const Row* after = nullptr,
                        CarriedMax* carry = nullptr) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  // Locals, not fields: the stores below may alias any memory, and fields
  // would be reloaded after each.
  const Row& r = *p.r;
  const float* const x = r.x;
  const float* const additive = r.additive;
  const uint8_t* const masked = r.masked;
  const size_t full = p.full;
  const V vsigma = hn::Set(d, scaling.sigma);
  const V vrow_max = hn::Set(d, p.row_max);
  const exp_detail::ExpScaling exp = scaling.exp;
  float* const e_out = stage != nullptr ? stage : r.y;
  p.e = e_out;
  const Row* const prefetched = kCarry ? after : next;
  const size_t prefetch_end =
      prefetched == nullptr
          ? 0
          : std::min({full, prefetched->limit, kPrefetchFloats});
  // A copy of the record, written before the group's pass 1 (long enough
  // ago for store forwarding not to matter), whose fields stay in registers.
  const Row ahead = next == nullptr ? Row{} : *next;
  // `after`'s row was just written: its x alone is read (and prefetched).
  const float* const after_x = after != nullptr ? after->x : nullptr;
  const size_t carry_end =
      kCarry ? std::min(full, ahead.limit - ahead.limit % N) : 0;
  V next_max = hn::Set(d, -kInf);
  const SumD<D> dd;
  auto sum_lo = hn::Zero(dd);
  auto sum_hi = hn::Zero(dd);
  for (size_t j = 0; j < full;) {
    const size_t block_end = std::min(full, j + kSumBlock * N);
    V sum = hn::Zero(d);
    for (; j < block_end; j += N) {
      if constexpr (kCarry) {
        if (j < carry_end)
          next_max = hn::Max(next_max, hn::LoadU(d, ahead.x + j));
        if (j < prefetch_end && j % kLineFloats == 0)
          PrefetchLine<kRowAfterNextLocality>(after_x + j);
      } else if (j < prefetch_end && j % kLineFloats == 0) {
        PrefetchColumns(ahead, j);
        if (after_x != nullptr) {
          PrefetchLine<kRowAfterNextLocality>(after_x + j);
        }
      }
      const V e = ExpTimes2To64(
          d,
          ExpArg<kForm, kBoolean>(d, vsigma, vrow_max, x, additive, masked, j),
          exp);
      hn::StoreU(e, d, e_out + j);
      sum = hn::Add(sum, e);
    }
    SumInDouble(d, sum, sum_lo, sum_hi);
  }
  // Columns [0, end) are now written; [end, cols) remain to be zeroed.
  p.end = full;
  const Tail& t = p.t;
  if (t.count != 0) {
    const V arg =
        hn::IfThenElse(hn::FirstN(d, t.count),
                       ExpArg<kForm, kBoolean>(d, vsigma, vrow_max, t.x,
                                               t.additive, t.masked, t.j),
                       hn::Set(d, -kInf));
    // 0 in the lanes past the limit.
    const V e = ExpTimes2To64(d, arg, exp);
    SumInDouble(d, e, sum_lo, sum_hi);
    if (stage != nullptr || full + N <= r.cols) {
      hn::StoreU(e, d, e_out + full);
      p.end = stage != nullptr ? r.limit : full + N;
    } else {
      HWY_ALIGN float e_copy[kMaxLanes];
      hn::Store(e, d, e_copy);
      std::memcpy(r.y + full, e_copy, t.count * sizeof(float));
      p.end = r.limit;
    }
  }
  if constexpr (kCarry) {
    *carry = CarriedMax{ahead.x, carry_end,
                        hn::GetLane(hn::MaxOfLanes(d, next_max))};
  } else if (next != nullptr) {
    PrefetchRow(*next, prefetch_end);
  }
  // `after`'s lines that the loop left out.
  if (after != nullptr) {
    PrefetchRow<kRowAfterNextLocality>(*after, prefetch_end);
  }
  p.total = hn::GetLane(hn::SumOfLanes(dd, hn::Add(sum_lo, sum_hi)));
}

// Pass 3: y = e / sum (NaN for a NaN score, see pass 1).
template <class D>
HWY_INLINE void PassThree(D d, bool stream, const RowPasses& p) {
  const size_t N = hn::Lanes(d);
  // Locals, as in PassTwo.
  float* const y = p.r->y;
  const size_t cols = p.r->cols;
  const float* const e = p.e;
  const size_t end = p.end;
  if (std::isnan(p.total)) {
    std::fill(y, y + cols, kNaN);
    return;
  }
  // total >= 2^64: the max column contributes exp(~0).
  const float inv = static_cast<float>(1.0 / p.total);
  if (stream && e != y) {
    StreamScaled(d, e, end, inv, y, cols);
    return;
  }
  const auto vinv = hn::Set(d, inv);
  size_t j = 0;
  for (; j + N <= end; j += N) {
    hn::StoreU(hn::Mul(hn::LoadU(d, e + j), vinv), d, y + j);
  }
  for (; j < end; ++j) y[j] = e[j] * inv;
  std::fill(y + end, y + cols, 0.0f);
}

// Softmax of `count` (<= kMaxGroup) rows of equal length, pass by pass: a
// row's passes wait on its max and on its sum, and the other rows' passes
// in between keep the core busy meanwhile, while the next group loads. On
// one AVX3 thread (AMD EPYC), groups of 4 took 8x12x256x256 from 2.45 to
// 2.31 ms (medians; minimums 2.35 to 2.16) and 1x16x64x64 (in cache) from
// 38 to 31 us; rows of 1024 columns gained nothing (so they go one at a
// time: kGroupFloats).
// Row g's exps go to out.stage + g * out.slot when they fit there (then y
// is written once, by pass 3). During row g's pass 2, next[g] (g <
// next_count) is prefetched to L1, or, for a row alone (kAlone: count is 1)
// whose Form CarriesMax, its max found (into `carried`, which holds
// rows[0]'s on the way in); after[g] (g < after_count) is prefetched to L2,
// except by a row alone that does not carry.
template <Form kForm, bool kBoolean, bool kAlone>
HWY_INLINE void PassGroup(const Row* rows, size_t count, const Row* next,
                          size_t next_count, const Row* after,
                          size_t after_count, const Scaling& scaling,
                          const Output& out, CarriedMax& carried) {
  constexpr bool kCarry = kAlone && CarriesMax<kForm, kBoolean>();
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  RowPasses passes[kMaxGroup];
  if constexpr (kCarry) {
    PassOne<kForm, kBoolean>(d, rows[0], scaling, carried, passes[0]);
    carried = CarriedMax{};
  } else {
    for (size_t g = 0; g < count; ++g) {
      PassOne<kForm, kBoolean>(d, rows[g], scaling, CarriedMax{}, passes[g]);
    }
  }
  for (size_t g = 0; g < count; ++g) {
    const Row* prefetched = g < next_count ? &next[g] : nullptr;
    // A long row that does not carry the max (masked or otherwise scaled
    // scores) prefetches only the next one: the L2 prefetch was measured
    // for groups and for carrying rows.
    const Row* later =
        (kCarry || !kAlone) && g < after_count ? &after[g] : nullptr;
    if (passes[g].done) {
      if (prefetched != nullptr) PrefetchRow(*prefetched, 0);
      if (later != nullptr) PrefetchRow<kRowAfterNextLocality>(*later, 0);
      continue;
    }
    float* const stage =
        rows[g].limit + N <= out.slot ? out.stage + g * out.slot : nullptr;
    if constexpr (kCarry) {
      if (next_count == 1) {
        PassTwo<kForm, kBoolean, true>(d, scaling, stage, prefetched, passes[g],
                                       later, &carried);
        continue;
      }
    }
    PassTwo<kForm, kBoolean>(d, scaling, stage, prefetched, passes[g], later);
  }
  for (size_t g = count; g < next_count; ++g) PrefetchRow(next[g], 0);
  for (size_t g = 0; g < count; ++g) {
    if (!passes[g].done) PassThree(d, out.stream, passes[g]);
  }
}

// Touches each 4 KiB page of a streamed y once, two groups before pass 3
// writes it: on 4 KiB pages every 1024 floats of y start a page, and the
// non-temporal stores into a page whose translation is not in the TLB wait
// for its walk. A prefetch of one line of the page makes the walk early (and
// reads that line, 1/64 of the page). On one AVX3 thread (AMD EPYC),
// alternating runs took 8x12x256x256 from 1.87-2.00 to 1.845-1.865 ms and
// 1x12x1024x1024 from 3.62-3.90 to 3.475-3.72 ms (medians of the runs'
// minimums, four sets; the least gain in the quietest), near what 2 MiB
// pages give the same kernel (1.84-1.88 and 3.41-3.47 ms); prefetcht1 instead
// of prefetchnta gained nothing, and touching the first line of every row
// instead gained less.
class PageTouch {
 public:
  void Touch(const float* begin, size_t floats) {
    constexpr uintptr_t kPage = 4096;
    const uintptr_t first = reinterpret_cast<uintptr_t>(begin);
    const uintptr_t last = first + floats * sizeof(float) - 1;
    for (uintptr_t at = first; at <= last; at = (at | (kPage - 1)) + 1) {
      if (at / kPage == touched_) continue;
      touched_ = at / kPage;
      PrefetchLine</*prefetchnta*/ 0>(reinterpret_cast<const float*>(at));
    }
  }

 private:
  uintptr_t touched_ = 0;  // The page last touched (its number).
};

// A task's groups of rows: the one SoftmaxRows takes through the passes and
// the two after it (their records made, for PassGroup to look ahead).
struct Groups {
  const Row* rows[3];
  size_t count[3];
};

template <Form kForm, bool kBoolean>
HWY_NOINLINE void SoftmaxRows(const Groups& groups, const Scaling& scaling,
                              const Output& out, CarriedMax& carried) {
  const Row* const* rows = groups.rows;
  const size_t* count = groups.count;
  // A constant count of 1 (long rows) compiles to straight-line passes:
  // with loops over a variable count, 1x12x1024x1024 took 4% longer on one
  // AVX3 thread (AMD EPYC).
  if (count[0] == 1) {
    PassGroup<kForm, kBoolean, true>(rows[0], 1, rows[1], count[1], rows[2],
                                     count[2], scaling, out, carried);
  } else {
    PassGroup<kForm, kBoolean, false>(rows[0], count[0], rows[1], count[1],
                                      rows[2], count[2], scaling, out, carried);
  }
}

// SoftmaxRows for the call's form and boolean mask (one instantiation each).
template <Form kForm>
HWY_INLINE void SoftmaxRowsOfForm(bool boolean, const Groups& groups,
                                  const Scaling& scaling, const Output& out,
                                  CarriedMax& carried) {
  if (boolean) {
    SoftmaxRows<kForm, true>(groups, scaling, out, carried);
  } else {
    SoftmaxRows<kForm, false>(groups, scaling, out, carried);
  }
}

}  // namespace softmax_detail

// Same-target entry point; arguments were validated by the caller (shapes
// equal, y either exactly x or disjoint from it, key_lengths[b] <= dims[3]).
inline void SoftmaxImpl(ConstTensor4 x, Tensor4 y, float scale,
                        const AttentionMask& mask) {
  using namespace softmax_detail;
  const size_t heads = x.dims[1], rows = x.dims[2], cols = x.dims[3];
  const size_t total_rows = x.NumMatrices() * rows;
  if (total_rows == 0 || cols == 0) return;
  const bool has_additive = mask.additive.data != nullptr;
  const bool has_boolean = mask.boolean.data != nullptr;
  // A task walks its rows by (b, h, i), advanced without divisions, and
  // takes turns with three groups of Row records instead of copying one: on one
  // AVX3 thread (AMD EPYC), the copy of a just-written Row (a wide load of
  // narrower stores, which store forwarding cannot serve) and the divisions
  // took ~12% of an in-cache 256-column softmax.
  struct RowIndex {
    size_t b, h, i;
  };
  const auto advance = [&](RowIndex& k) {
    if (++k.i == rows) {
      k.i = 0;
      if (++k.h == heads) {
        k.h = 0;
        ++k.b;
      }
    }
  };
  const auto make_row = [&](const RowIndex& k, Row& r) {
    const size_t b = k.b, h = k.h, i = k.i;
    r.x = x.data + b * x.strides[0] + h * x.strides[1] + i * x.strides[2];
    r.y = y.data + b * y.strides[0] + h * y.strides[1] + i * y.strides[2];
    r.additive = nullptr;
    r.masked = nullptr;
    if (has_additive) {
      const ConstTensor4& m = mask.additive;
      r.additive =
          m.data + b * m.strides[0] + h * m.strides[1] + i * m.strides[2];
    }
    if (has_boolean) {
      const Tensor4View<const uint8_t>& m = mask.boolean;
      r.masked =
          m.data + b * m.strides[0] + h * m.strides[1] + i * m.strides[2];
    }
    r.cols = cols;
    r.limit = cols;
    // j <= i + offset, written so that nothing overflows.
    if (mask.causal && mask.causal_offset < cols &&
        i < cols - 1 - mask.causal_offset) {
      r.limit = i + mask.causal_offset + 1;
    }
    if (mask.key_lengths != nullptr) {
      r.limit = std::min(r.limit, mask.key_lengths[b]);
    }
  };
  const Scaling scaling(scale, has_additive);
  const size_t grain = std::max<size_t>(1, kGrainElements / cols);
  const bool stream = total_rows * cols * sizeof(float) > kStreamBytes;
  // Stage slots of whole cache lines with room for a vector past the row.
  const size_t slot = hwy::RoundUpTo(cols + kMaxLanes, kLineFloats);
  const size_t group = std::clamp<size_t>(
      std::min(kStageFloats / slot, kGroupFloats / cols), 1, kMaxGroup);
  internal::ParallelFor(0, total_rows, grain, [&](size_t first, size_t last) {
    HWY_ALIGN float stage[kStageFloats];
    const Output out{stage, group == 1 ? kStageFloats : slot, stream};
    RowIndex k{first / rows / heads, first / rows % heads, first % rows};
    // Three groups' records in turn: each is made once, two groups ahead.
    Row records[3][kMaxGroup];
    size_t made = first;  // Rows whose records exist.
    PageTouch pages;
    const auto make_group = [&](size_t which) {
      const size_t count = std::min(group, last - made);
      for (size_t g = 0; g < count; ++g) {
        make_row(k, records[which][g]);
        if (stream) pages.Touch(records[which][g].y, cols);
        advance(k);
      }
      made += count;
      return count;
    };
    size_t counts[3];
    counts[0] = make_group(0);
    counts[1] = make_group(1);
    CarriedMax carried;
    for (size_t row = first, turn = 0; row != last; turn = (turn + 1) % 3) {
      const size_t next = (turn + 1) % 3, after = (turn + 2) % 3;
      counts[after] = make_group(after);
      const Groups groups{{records[turn], records[next], records[after]},
                          {counts[turn], counts[next], counts[after]}};
      switch (scaling.form) {
        case Form::kAdditive:
          SoftmaxRowsOfForm<Form::kAdditive>(has_boolean, groups, scaling, out,
                                             carried);
          break;
        case Form::kDifference:
          SoftmaxRowsOfForm<Form::kDifference>(has_boolean, groups, scaling,
                                               out, carried);
          break;
        case Form::kPow2:
          SoftmaxRowsOfForm<Form::kPow2>(has_boolean, groups, scaling, out,
                                         carried);
          break;
      }
      row += counts[turn];
    }
    if (stream) hwy::FlushStream();
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_SOFTMAX_INL_H_
