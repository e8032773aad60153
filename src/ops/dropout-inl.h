// Per-target in-place dropout with a vectorised Philox4x32-10. Included once
// per SIMD target by dropout.cc (and by fused kernels that apply dropout from
// the same target without another dispatch).
//
// Bits: element (b, h, i, j) takes word (j % 64) / 16 of Philox4x32-10 at
// counter (16 * (j / 64) + j % 16, i, h, b) under the stream key
// (DropoutBits in simdattn/random.h, the scalar reference). One lane holds
// one counter, so a vector of N <= 16 lanes runs the rounds for counters
// 16g + l0 .. 16g + l0 + N - 1 of column group g, and its four output words
// are the contiguous columns 64g + 16w + l0 .. + N - 1 (w = 0..3): no
// transpose, and every target (1 to 16 lanes) produces the same bits.
// Decision: drop iff (bits >> 1) < DropoutThreshold(p), compared as int32;
// kept values are multiplied by scale = 1.0f / (1.0f - p) (float), dropped
// ones become +0.

#if defined(SIMDATTN_SRC_OPS_DROPOUT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_DROPOUT_INL_H_
#undef SIMDATTN_SRC_OPS_DROPOUT_INL_H_
#else
#define SIMDATTN_SRC_OPS_DROPOUT_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "simdattn/kernels.h"
#include "simdattn/random.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace dropout_detail {

// Rows per task: at least this many elements, so that task overhead is
// amortised even for short rows.
constexpr size_t kGrainElements = size_t{1} << 14;

// Everything a row needs besides its position.
struct Params {
  uint32_t round_key0[kPhiloxRounds];  // Key of each round (Weyl sequence).
  uint32_t round_key1[kPhiloxRounds];
  int32_t threshold;  // DropoutThreshold(p) < 2^31 since p < 1.
  float scale;        // 1 / (1 - p).
};

// Returns the low halves of the 32 x 32 -> 64-bit products a * m per lane
// and sets hi to the high halves.
template <class DU, class V = hn::Vec<DU>>
HWY_INLINE V MulHiLo(DU du, V a, V m, V& hi) {
#if HWY_TARGET == HWY_SCALAR
  const uint64_t product = uint64_t{hn::GetLane(a)} * hn::GetLane(m);
  hi = hn::Set(du, static_cast<uint32_t>(product >> 32));
  return hn::Set(du, static_cast<uint32_t>(product));
#elif HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || \
    HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128
  (void)du;
  hi = hn::MulHigh(a, m);  // SVE has a 32-bit high-half multiply.
  return hn::Mul(a, m);
#else
  // MulEven multiplies the even lanes into u64 lanes; shifting the u64 view
  // of a right by 32 brings the odd lanes to even positions. Highway 1.0.3
  // has no u32 MulHigh on x86 or NEON.
  const hn::Repartition<uint64_t, DU> d64;
  const auto even = hn::MulEven(a, m);
  const auto odd =
      hn::MulEven(hn::BitCast(du, hn::ShiftRight<32>(hn::BitCast(d64, a))), m);
  hi = hn::OddEven(hn::BitCast(du, odd),
                   hn::BitCast(du, hn::ShiftRight<32>(even)));
  return hn::OddEven(hn::BitCast(du, hn::ShiftLeft<32>(odd)),
                     hn::BitCast(du, even));
#endif
}

// Philox4x32-10 on one counter per lane, in place: (c0, c1, c2, c3) become
// the four output words. Same round function as Philox4x32 in random.h.
template <class DU, class V = hn::Vec<DU>>
HWY_INLINE void Philox(DU du, const Params& p, V& c0, V& c1, V& c2, V& c3) {
  const V m0 = hn::Set(du, kPhiloxM0);
  const V m1 = hn::Set(du, kPhiloxM1);
  for (int round = 0; round < kPhiloxRounds; ++round) {
    V hi0 = c0, hi1 = c2;
    const V lo0 = MulHiLo(du, c0, m0, hi0);
    const V lo1 = MulHiLo(du, c2, m1, hi1);
    c0 = hn::Xor3(hi1, c1, hn::Set(du, p.round_key0[round]));
    c1 = lo1;
    c2 = hn::Xor3(hi0, c3, hn::Set(du, p.round_key1[round]));
    c3 = lo0;
  }
}

// Applies the decisions in `bits` to row[start, start + count), count <=
// Lanes(du). A partial vector goes through a stack copy: a full load or store
// could reach past the row into unmapped memory or another task's row.
template <class DU>
HWY_INLINE void ApplyWord(DU du, hn::Vec<DU> bits, const Params& p,
                          float* HWY_RESTRICT row, size_t start,
                          size_t count) {
  if (count == 0) return;
  const hn::Rebind<float, DU> df;
  const hn::RebindToSigned<DU> di;
  const auto drop = hn::RebindMask(
      df, hn::Lt(hn::BitCast(di, hn::ShiftRight<1>(bits)),
                 hn::Set(di, p.threshold)));
  const auto scale = hn::Set(df, p.scale);
  float* HWY_RESTRICT x = row + start;
  if (count == hn::Lanes(du)) {
    hn::StoreU(hn::IfThenZeroElse(drop, hn::Mul(hn::LoadU(df, x), scale)), df,
               x);
    return;
  }
  HWY_ALIGN float buf[kDropoutLanes] = {};
  std::memcpy(buf, x, count * sizeof(float));
  hn::Store(hn::IfThenZeroElse(drop, hn::Mul(hn::Load(df, buf), scale)), df,
            buf);
  std::memcpy(x, buf, count * sizeof(float));
}

// Columns of row[start, start + lanes) that exist.
HWY_INLINE size_t Valid(size_t start, size_t lanes, size_t cols) {
  return start >= cols ? 0 : std::min(lanes, cols - start);
}

// Dropout of one row (b, h, i) of `cols` elements. Preconditions: b, h, i <
// 2^32 and cols <= 2^34 (so every counter word fits 32 bits).
HWY_NOINLINE void DropoutRow(const Params& p, float* HWY_RESTRICT row,
                             size_t cols, uint32_t b, uint32_t h, uint32_t i) {
  const hn::CappedTag<uint32_t, kDropoutLanes> du;
  using V = hn::Vec<decltype(du)>;
  const size_t N = hn::Lanes(du);
  constexpr size_t kWordColumns = kDropoutLanes;  // Columns per output word.
  for (size_t group = 0; group < cols; group += kDropoutGroup) {
    const uint32_t first_counter =
        static_cast<uint32_t>(group / kDropoutGroup * kDropoutLanes);
    for (size_t l0 = 0; l0 < kDropoutLanes && group + l0 < cols; l0 += N) {
      V c0 = hn::Iota(du, first_counter + static_cast<uint32_t>(l0));
      V c1 = hn::Set(du, i);
      V c2 = hn::Set(du, h);
      V c3 = hn::Set(du, b);
      Philox(du, p, c0, c1, c2, c3);
      // Lanes past counter 16g + 15 (if N does not divide 16) are unused.
      const size_t lanes = std::min(N, kDropoutLanes - l0);
      const size_t start = group + l0;
      ApplyWord(du, c0, p, row, start, Valid(start, lanes, cols));
      ApplyWord(du, c1, p, row, start + kWordColumns,
                Valid(start + kWordColumns, lanes, cols));
      ApplyWord(du, c2, p, row, start + 2 * kWordColumns,
                Valid(start + 2 * kWordColumns, lanes, cols));
      ApplyWord(du, c3, p, row, start + 3 * kWordColumns,
                Valid(start + 3 * kWordColumns, lanes, cols));
    }
  }
}

}  // namespace dropout_detail

// Same-target entry point; arguments were validated by the caller: 0 < p <=
// 1, dims[0..2] <= 2^32, dims[3] <= 2^34, elements of x distinct.
inline void DropoutImpl(Tensor4 x, float p, PhiloxKey key) {
  using namespace dropout_detail;
  const size_t heads = x.dims[1], rows = x.dims[2], cols = x.dims[3];
  const size_t total_rows = x.NumMatrices() * rows;
  if (total_rows == 0 || cols == 0) return;
  const size_t grain = std::max<size_t>(1, kGrainElements / cols);
  const auto row_of = [&](size_t row, size_t* b, size_t* h, size_t* i) {
    *i = row % rows;
    *b = row / rows / heads;
    *h = row / rows % heads;
    return x.data + *b * x.strides[0] + *h * x.strides[1] + *i * x.strides[2];
  };
  if (p >= 1.0f) {  // Everything dropped: no bits needed.
    tbb::parallel_for(tbb::blocked_range<size_t>(0, total_rows, grain),
                      [&](const tbb::blocked_range<size_t>& range) {
                        for (size_t row = range.begin(); row != range.end();
                             ++row) {
                          size_t b, h, i;
                          float* data = row_of(row, &b, &h, &i);
                          std::fill(data, data + cols, 0.0f);
                        }
                      });
    return;
  }
  Params params;
  for (int round = 0; round < kPhiloxRounds; ++round) {
    params.round_key0[round] = key[0] + static_cast<uint32_t>(round) * kPhiloxW0;
    params.round_key1[round] = key[1] + static_cast<uint32_t>(round) * kPhiloxW1;
  }
  params.threshold = static_cast<int32_t>(DropoutThreshold(p));
  params.scale = 1.0f / (1.0f - p);
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, total_rows, grain),
      [&](const tbb::blocked_range<size_t>& range) {
        for (size_t row = range.begin(); row != range.end(); ++row) {
          size_t b, h, i;
          float* data = row_of(row, &b, &h, &i);
          DropoutRow(params, data, cols, static_cast<uint32_t>(b),
                     static_cast<uint32_t>(h), static_cast<uint32_t>(i));
        }
      });
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_DROPOUT_INL_H_
