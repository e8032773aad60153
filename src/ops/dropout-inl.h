// Per-target in-place dropout with a vectorised Philox4x32-10. Included once
// per SIMD target by dropout.cc (and by fused kernels that apply dropout from
// the same target without another dispatch).
//
// Bits: element (b, h, i, j) takes half (j % 32) / 16 of word (j % 128) / 32
// of Philox4x32-10 at counter (16 * (j / 128) + j % 16, i, h, b) under the
// stream key (DropoutBits in simdattn/random.h, the scalar reference). One
// lane holds one counter, so a vector of N <= 16 lanes runs the rounds for
// counters 16g + l0 .. 16g + l0 + N - 1 of column group g, and the low and
// high halves of its four output words are the contiguous columns
// 128g + 32w + 16half + l0 .. + N - 1: no transpose, and every target (1 to
// 16 lanes) produces the same bits. Decision: drop iff bits <
// DropoutThreshold(p), compared as int32; kept values are multiplied by
// scale = 1.0f / (1.0f - p) (float), dropped ones become +0.

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
#include "src/common/parallel.h"
#include "src/ops/lanes-inl.h"

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
  int32_t threshold;  // DropoutThreshold(p) <= 2^16.
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

// Words of the first two rounds that depend only on the row (i, h, b): in a
// row's counters only word 0 varies, so round 0's second product (M1 * h)
// and round 1's first (M0 * word 0 after round 0) are lane-uniform. Computing
// them once per row leaves 18 of the 20 vector multiplies per counter.
struct RowWords {
  uint32_t round0_key1_b;   // b ^ key1(round 0).
  uint32_t round1_key0_lo;  // lo(M1 * h) ^ key0(round 1).
  uint32_t round1_key1_hi;  // hi(M0 * w) ^ key1(round 1), w = word 0 after
                            // round 0 = hi(M1 * h) ^ i ^ key0(round 0).
  uint32_t round1_lo;       // lo(M0 * w).
};

HWY_INLINE RowWords MakeRowWords(const Params& p, uint32_t b, uint32_t h,
                                 uint32_t i) {
  const uint64_t p1 = uint64_t{kPhiloxM1} * h;
  const uint32_t w = static_cast<uint32_t>(p1 >> 32) ^ i ^ p.round_key0[0];
  const uint64_t p0 = uint64_t{kPhiloxM0} * w;
  RowWords r;
  r.round0_key1_b = b ^ p.round_key1[0];
  r.round1_key0_lo = static_cast<uint32_t>(p1) ^ p.round_key0[1];
  r.round1_key1_hi = static_cast<uint32_t>(p0 >> 32) ^ p.round_key1[1];
  r.round1_lo = static_cast<uint32_t>(p0);
  return r;
}

// Philox4x32-10 of the counters (c0 lanes, i, h, b): sets (c0, c1, c2, c3)
// to the four output words. Same rounds as Philox4x32 in random.h; rounds 0
// and 1 use the row's uniform words.
template <class DU, class V = hn::Vec<DU>>
HWY_INLINE void Philox(DU du, const Params& p, const RowWords& row, V& c0,
                       V& c1, V& c2, V& c3) {
  const V m0 = hn::Set(du, kPhiloxM0);
  const V m1 = hn::Set(du, kPhiloxM1);
  // Round 0: the M1 product is uniform; afterwards words 0 and 1 are too.
  V hi0 = c0;
  const V lo0 = MulHiLo(du, c0, m0, hi0);
  const V round0_c2 = hn::Xor(hi0, hn::Set(du, row.round0_key1_b));
  // Round 1: the M0 product of the uniform word 0 is precomputed.
  V hi1 = round0_c2;
  const V lo1 = MulHiLo(du, round0_c2, m1, hi1);
  c0 = hn::Xor(hi1, hn::Set(du, row.round1_key0_lo));
  c1 = lo1;
  c2 = hn::Xor(lo0, hn::Set(du, row.round1_key1_hi));
  c3 = hn::Set(du, row.round1_lo);
  for (int round = 2; round < kPhiloxRounds; ++round) {
    hi0 = c0;
    hi1 = c2;
    const V lo0_r = MulHiLo(du, c0, m0, hi0);
    const V lo1_r = MulHiLo(du, c2, m1, hi1);
    c0 = hn::Xor3(hi1, c1, hn::Set(du, p.round_key0[round]));
    c1 = lo1_r;
    c2 = hn::Xor3(hi0, c3, hn::Set(du, p.round_key1[round]));
    c3 = lo0_r;
  }
}

// Applies the decisions in `bits` (16 per lane, in the low half) to
// row[start, start + count), count <= Lanes(du). A partial vector goes
// through a stack copy: a full load or store could reach past the row into
// unmapped memory or another task's row.
template <class DU>
HWY_INLINE void ApplyBits(DU du, hn::Vec<DU> bits, const Params& p,
                          float* HWY_RESTRICT row, size_t start, size_t count) {
  if (count == 0) return;
  const hn::Rebind<float, DU> df;
  const hn::RebindToSigned<DU> di;
  const auto drop = hn::RebindMask(
      df, hn::Lt(hn::BitCast(di, bits), hn::Set(di, p.threshold)));
  const auto scale = hn::Set(df, p.scale);
  float* HWY_RESTRICT x = row + start;
  if (count == hn::Lanes(du)) {
    hn::StoreU(hn::IfThenZeroElse(drop, hn::Mul(hn::LoadU(df, x), scale)), df,
               x);
    return;
  }
  StoreTail(hn::IfThenZeroElse(drop, hn::Mul(LoadTail(df, x, count), scale)),
            df, x, count);
}

// Columns of row[start, start + lanes) that exist.
HWY_INLINE size_t Valid(size_t start, size_t lanes, size_t cols) {
  return start >= cols ? 0 : std::min(lanes, cols - start);
}

// Applies both halves of one output word: the low to columns [start, start +
// lanes), the high to the kDropoutLanes columns after them.
template <class DU>
HWY_INLINE void ApplyWord(DU du, hn::Vec<DU> word, const Params& p,
                          float* HWY_RESTRICT row, size_t start, size_t lanes,
                          size_t cols) {
  ApplyBits(du, hn::And(word, hn::Set(du, 0xFFFFu)), p, row, start,
            Valid(start, lanes, cols));
  const size_t high = start + kDropoutLanes;
  ApplyBits(du, hn::ShiftRight<16>(word), p, row, high,
            Valid(high, lanes, cols));
}

// The per-call constants for dropout probability p in (0, 1) and a stream.
inline Params MakeParams(float p, PhiloxKey key) {
  Params params;
  for (int round = 0; round < kPhiloxRounds; ++round) {
    params.round_key0[round] =
        key[0] + static_cast<uint32_t>(round) * kPhiloxW0;
    params.round_key1[round] =
        key[1] + static_cast<uint32_t>(round) * kPhiloxW1;
  }
  params.threshold = static_cast<int32_t>(DropoutThreshold(p));
  params.scale = 1.0f / (1.0f - p);
  return params;
}

// Dropout of columns [first_col, first_col + cols) of row (b, h, i), stored
// at row[0, cols). first_col is a multiple of kDropoutGroup, so that a fused
// kernel's tile of columns draws exactly the bits of the whole row.
// Preconditions: b, h, i < 2^32 and first_col + cols <= 2^35 (so every
// counter word fits 32 bits). `inline`: fused kernels include this file too.
inline HWY_NOINLINE void DropoutRow(const Params& p, float* HWY_RESTRICT row,
                                    size_t cols, uint32_t b, uint32_t h,
                                    uint32_t i, size_t first_col = 0) {
  const hn::CappedTag<uint32_t, kDropoutLanes> du;
  using V = hn::Vec<decltype(du)>;
  const size_t N = hn::Lanes(du);
  constexpr size_t kWordColumns = 2 * kDropoutLanes;  // Columns per word.
  const RowWords row_words = MakeRowWords(p, b, h, i);
  // Highway 1.0.3's Iota goes through memory (a store-forwarding stall):
  // built once, then offset per group.
  const V lane = hn::Iota(du, 0);
  for (size_t group = 0; group < cols; group += kDropoutGroup) {
    const uint32_t first_counter = static_cast<uint32_t>(
        (first_col + group) / kDropoutGroup * kDropoutLanes);
    for (size_t l0 = 0; l0 < kDropoutLanes && group + l0 < cols; l0 += N) {
      V c0 =
          hn::Add(lane, hn::Set(du, first_counter + static_cast<uint32_t>(l0)));
      V c1 = c0, c2 = c0, c3 = c0;
      Philox(du, p, row_words, c0, c1, c2, c3);
      // Lanes past counter 16g + 15 (if N does not divide 16) are unused.
      const size_t lanes = std::min(N, kDropoutLanes - l0);
      const size_t start = group + l0;
      ApplyWord(du, c0, p, row, start, lanes, cols);
      ApplyWord(du, c1, p, row, start + kWordColumns, lanes, cols);
      ApplyWord(du, c2, p, row, start + 2 * kWordColumns, lanes, cols);
      ApplyWord(du, c3, p, row, start + 3 * kWordColumns, lanes, cols);
    }
  }
}

}  // namespace dropout_detail

// Same-target entry point; arguments were validated by the caller: 0 < p <=
// 1, dims[0..2] <= 2^32, dims[3] <= 2^35, elements of x distinct.
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
    internal::ParallelFor(0, total_rows, grain, [&](size_t first, size_t last) {
      for (size_t row = first; row != last; ++row) {
        size_t b, h, i;
        float* data = row_of(row, &b, &h, &i);
        std::fill(data, data + cols, 0.0f);
      }
    });
    return;
  }
  const Params params = MakeParams(p, key);
  internal::ParallelFor(0, total_rows, grain, [&](size_t first, size_t last) {
    for (size_t row = first; row != last; ++row) {
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
