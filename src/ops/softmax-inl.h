// Per-target row-wise masked softmax, y = softmax(scale * x + mask). Included
// once per SIMD target by softmax.cc (and by kernels that call it from the
// same target without another dispatch).
//
// Each row of n columns is handled by one task, in a fixed order, so results
// are bit-identical for any thread count. A causal or key-length limit cuts
// the row at `limit`: columns [limit, n) are zeroed without being read, so a
// causal softmax costs about half an unmasked one. Over [0, limit):
//   pass 1: v = scale * x (+ additive), -inf where the boolean mask is set;
//           max(v) and whether any v is NaN.
//   pass 2: e = exp(v - max), stored into y and summed.
//   pass 3: y *= 1 / sum.
// Special rows: max = -inf (every column masked, or every v = -inf) gives
// zeros; a NaN v or max = +inf (inf - inf is undefined, as in PyTorch) gives
// a row of NaN.
//
// Error bound (unit roundoff u = 2^-24), per element relative to the exact
// softmax of the float inputs:
//   |arg| u  (rounding of exp's argument; without an additive mask it is one
//             fused multiply-add, scale * x - max, so |arg| is the distance
//             below the row max)
//   + (|v| u with an additive mask, whose sum scale * x + additive is rounded)
//   + 1 ULP (hn::Exp)
//   + (kSumBlock - 1 + log2(lanes)) u (float partial sums over at most
//             kSumBlock vectors per lane, then a double total)
//   + 2 u (reciprocal in double rounded to float, final product).
// For |arg| <= 8 and lanes <= 16 that is <= 23 u = 1.4e-6 (worst case; the
// roundings rarely align, typical errors are < 2e-7). Outputs below FLT_MIN
// (exp arguments below about -87) are denormal and carry only absolute
// accuracy; exp underflows to 0 below -104.

#if defined(SIMDATTN_SRC_OPS_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_SOFTMAX_INL_H_
#undef SIMDATTN_SRC_OPS_SOFTMAX_INL_H_
#else
#define SIMDATTN_SRC_OPS_SOFTMAX_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "simdattn/kernels.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace softmax_detail {

// Vectors summed per lane in float before the partial sum moves to a double
// total: bounds the summation error by (kSumBlock - 1 + log2 lanes) u
// whatever the row length (one float accumulator over a 4099-column row on a
// 4-lane target would allow ~1000 u). One reduction per kSumBlock exp
// vectors costs a few percent.
constexpr size_t kSumBlock = 8;
// Rows per task: at least this many elements, so that task overhead is
// amortised even for short rows.
constexpr size_t kGrainElements = size_t{1} << 14;
// Room for one vector of the widest target.
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
// hn::Exp is specified on [-FLT_MAX, 104] and returns 0 below -104; clamping
// its argument here keeps -inf (masked columns, or v - max overflowing for
// |v| near FLT_MAX) inside that range and still yields exactly 0.
constexpr float kExpFloor = -105.0f;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

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

// v = scale * x[j] (+ additive[j]), -inf where masked[j] != 0. Reads
// Lanes(d) elements at index j of each operand in use.
template <bool kAdditive, bool kBoolean, class D, class V = hn::Vec<D>>
HWY_INLINE V Scores(D d, V scale, const float* x, const float* additive,
                    const uint8_t* masked, size_t j) {
  V v;
  if constexpr (kAdditive) {
    v = hn::MulAdd(scale, hn::LoadU(d, x + j), hn::LoadU(d, additive + j));
  } else {
    v = hn::Mul(scale, hn::LoadU(d, x + j));
  }
  if constexpr (kBoolean) {
    v = hn::IfThenElse(MaskedLanes(d, masked + j), hn::Set(d, -kInf), v);
  }
  return v;
}

// exp's argument v - max, clamped to kExpFloor. Without an additive mask it
// is one fused multiply-add of the inputs (one rounding, see the bound).
template <bool kAdditive, bool kBoolean, class D, class V = hn::Vec<D>>
HWY_INLINE V ExpArg(D d, V scale, V row_max, const float* x,
                    const float* additive, const uint8_t* masked, size_t j) {
  V arg;
  if constexpr (kAdditive) {
    arg = hn::Sub(
        hn::MulAdd(scale, hn::LoadU(d, x + j), hn::LoadU(d, additive + j)),
        row_max);
  } else {
    arg = hn::MulAdd(scale, hn::LoadU(d, x + j), hn::Neg(row_max));
  }
  if constexpr (kBoolean) {
    arg = hn::IfThenElse(MaskedLanes(d, masked + j), hn::Set(d, kExpFloor),
                         arg);
  }
  return hn::Max(arg, hn::Set(d, kExpFloor));
}

// Softmax of one row. Touches exactly x[0, limit) (and the masks' same
// columns) and y[0, cols): partial vectors go through stack copies, because
// a full load or store could reach past the row into unmapped memory or
// another task's row.
template <bool kAdditive, bool kBoolean>
HWY_NOINLINE void SoftmaxRow(const Row& r, float scale) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  const size_t limit = r.limit;
  const size_t full = limit - limit % N;  // Columns in whole vectors.
  const size_t tail = limit - full;
  const V vscale = hn::Set(d, scale);

  // The tail's operands, zero padded (padding lanes are excluded below).
  HWY_ALIGN float x_tail[kMaxLanes] = {};
  HWY_ALIGN float add_tail[kMaxLanes] = {};
  HWY_ALIGN uint8_t mask_tail[kMaxLanes] = {};
  if (tail != 0) {
    std::memcpy(x_tail, r.x + full, tail * sizeof(float));
    if constexpr (kAdditive) {
      std::memcpy(add_tail, r.additive + full, tail * sizeof(float));
    }
    if constexpr (kBoolean) std::memcpy(mask_tail, r.masked + full, tail);
  }

  // Pass 1: max and NaN.
  V vmax = hn::Set(d, -kInf);
  auto nan = hn::FirstN(d, 0);
  for (size_t j = 0; j < full; j += N) {
    const V v = Scores<kAdditive, kBoolean>(d, vscale, r.x, r.additive,
                                            r.masked, j);
    nan = hn::Or(nan, hn::IsNaN(v));
    vmax = hn::Max(vmax, v);
  }
  const auto valid = hn::FirstN(d, tail);
  if (tail != 0) {
    const V v = hn::IfThenElse(
        valid,
        Scores<kAdditive, kBoolean>(d, vscale, x_tail, add_tail, mask_tail, 0),
        hn::Set(d, -kInf));
    nan = hn::Or(nan, hn::IsNaN(v));
    vmax = hn::Max(vmax, v);
  }
  const float row_max = hn::GetLane(hn::MaxOfLanes(d, vmax));
  float* y = r.y;
  if (!hn::AllFalse(d, nan) || row_max == kInf) {
    std::fill(y, y + r.cols, kNaN);
    return;
  }
  if (row_max == -kInf) {  // Also limit == 0.
    std::fill(y, y + r.cols, 0.0f);
    return;
  }

  // Pass 2: e = exp(v - max) into y, summed in blocks.
  const V vrow_max = hn::Set(d, row_max);
  double total = 0.0;
  for (size_t j = 0; j < full;) {
    const size_t block_end = std::min(full, j + kSumBlock * N);
    V sum = hn::Zero(d);
    for (; j < block_end; j += N) {
      const V e = hn::Exp(d, ExpArg<kAdditive, kBoolean>(
                                 d, vscale, vrow_max, r.x, r.additive,
                                 r.masked, j));
      hn::StoreU(e, d, y + j);
      sum = hn::Add(sum, e);
    }
    total += hn::GetLane(hn::SumOfLanes(d, sum));
  }
  if (tail != 0) {
    const V arg = hn::IfThenElse(
        valid,
        ExpArg<kAdditive, kBoolean>(d, vscale, vrow_max, x_tail, add_tail,
                                    mask_tail, 0),
        hn::Set(d, kExpFloor));
    const V e = hn::Exp(d, arg);  // 0 in the padding lanes.
    HWY_ALIGN float e_tail[kMaxLanes];
    hn::Store(e, d, e_tail);
    std::memcpy(y + full, e_tail, tail * sizeof(float));
    total += hn::GetLane(hn::SumOfLanes(d, e));
  }

  // Pass 3: normalise. total >= 1 (the max column contributes exp(~0)).
  const float inv = static_cast<float>(1.0 / total);
  const V vinv = hn::Set(d, inv);
  for (size_t j = 0; j < full; j += N) {
    hn::StoreU(hn::Mul(hn::LoadU(d, y + j), vinv), d, y + j);
  }
  for (size_t j = full; j < limit; ++j) y[j] *= inv;
  std::fill(y + limit, y + r.cols, 0.0f);
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
  const size_t grain = std::max<size_t>(1, kGrainElements / cols);
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, total_rows, grain),
      [&](const tbb::blocked_range<size_t>& range) {
        for (size_t row = range.begin(); row != range.end(); ++row) {
          const size_t i = row % rows;
          const size_t b = row / rows / heads, h = row / rows % heads;
          Row r;
          r.x = x.data + b * x.strides[0] + h * x.strides[1] + i * x.strides[2];
          r.y = y.data + b * y.strides[0] + h * y.strides[1] + i * y.strides[2];
          r.additive = nullptr;
          r.masked = nullptr;
          if (has_additive) {
            const ConstTensor4& m = mask.additive;
            r.additive = m.data + b * m.strides[0] + h * m.strides[1] +
                         i * m.strides[2];
          }
          if (has_boolean) {
            const Tensor4View<const uint8_t>& m = mask.boolean;
            r.masked = m.data + b * m.strides[0] + h * m.strides[1] +
                       i * m.strides[2];
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
          if (has_additive) {
            if (has_boolean) {
              SoftmaxRow<true, true>(r, scale);
            } else {
              SoftmaxRow<true, false>(r, scale);
            }
          } else if (has_boolean) {
            SoftmaxRow<false, true>(r, scale);
          } else {
            SoftmaxRow<false, false>(r, scale);
          }
        }
      });
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_SOFTMAX_INL_H_
