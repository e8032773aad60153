// Per-target integer scores (ComputeType::kInt8). Over ggml's q8_0, q4_0 and
// iq4_nl key blocks (DotTile, through their codecs' Codes and Scale; q4_0 on
// AVX-512 by pairs of blocks, NibblePairTile):
// query rows quantized to blocks of 32 int8 codes, each block's code
// products summed exactly in int32, as llama.cpp's vec_dot_q8_0_q8_0 and
// vec_dot_q4_0_q8_0 do, then scaled by both blocks' scales in float32.
// Over int8 key rows (RowTile): query rows quantized per row, one exact
// int32 sum per score, converted once, then scaled.

#if defined(SIMDATTN_SRC_OPS_INT_DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_INT_DOT_INL_H_
#undef SIMDATTN_SRC_OPS_INT_DOT_INL_H_
#else
#define SIMDATTN_SRC_OPS_INT_DOT_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "src/common/element.h"
#include "src/ops/gemm_driver.h"
#include "src/ops/kv_rows.h"
#include "src/ops/matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace int_dot_detail {

namespace hn = hwy::HWY_NAMESPACE;
using internal::BlockQ4_0;
using internal::BlockQ8_0;
using internal::kQuantBlock;

// Key types whose scores may be integer dot products (ElementTraits::
// int8_scores): ggml's blocks of integer codes, whose query rows are
// quantized per block, and int8 rows (one scale per row), whose query rows
// are quantized per row.
template <typename T>
inline constexpr bool kIntegerKeys = internal::kTraitsOf<T>.int8_scores;
template <typename T>
inline constexpr bool kBlockKeys =
    kIntegerKeys<T>&& internal::kBlockValues<T> > 1;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// q4_0 keys on AVX-512 go by pairs of blocks: a pair's 64 nibbles as
// unsigned bytes times the query's int8 codes, summed by fours into int32
// lanes (vpmaddubsw, then vpmaddwd by ones: Highway 1.0.3's AVX3 target has
// no VNNI), the pair's scales converted by one vector. 7 vector ops a block
// where int16 codes (DotTile) take about 13, converting and broadcasting
// each block's scale alone.
#define SIMDATTN_NIBBLE_PAIRS 1
constexpr size_t kPairLanes = 16;  // int32 lanes of a pair's sums.
#else
#define SIMDATTN_NIBBLE_PAIRS 0
constexpr size_t kPairLanes = 0;
#endif

// Up to kMaxRows query rows as int16 codes (int8 values, widened once here
// rather than per key), with a scale per group of `group` elements (alpha d:
// the scores' scale folded in). Each row's codes are zero-padded to
// `stride`, a multiple of the vector length. For q4_0 keys where
// SIMDATTN_NIBBLE_PAIRS, also per row and pair of blocks (a, b; b zero past
// the last block) kPairFloats floats: the pair's 64 codes as int8 in
// PairNibbles' order (a's elements 0-15, b's 0-15, a's 16-31, b's 16-31);
// per int32 lane l of the pair's sums, -8 times codes 4l to 4l + 3 summed
// (the nibbles' offset: q4_0's values are its codes minus 8); and lane l's
// block's scale (0 for b past the last).
struct QuantizedQueries {
  static constexpr size_t kMaxRows = 4;
  static constexpr size_t kPairFloats = 3 * kPairLanes;
  int16_t* codes;    // rows x stride.
  float* scales;     // rows x groups.
  float* pair_data;  // rows x pairs x kPairFloats.
  size_t rows, group, groups, stride, pairs;

  // Groups of kQuantBlock for block keys (head_dim a multiple of it), one
  // per row for int8 keys. scratch: kMaxRows * (stride / 2 + groups + pairs
  // * kPairFloats) + 16 floats.
  template <typename T>
  static QuantizedQueries For(float* scratch, size_t head_dim) {
    const size_t lanes = hn::Lanes(hn::ScalableTag<int16_t>());
    QuantizedQueries q;
    q.codes = reinterpret_cast<int16_t*>(scratch);
    q.rows = 0;
    q.group = kBlockKeys<T> ? kQuantBlock : head_dim;
    q.groups = hwy::DivCeil(head_dim, q.group);
    q.stride = hwy::DivCeil(head_dim, lanes) * lanes;
    q.scales = scratch + kMaxRows * q.stride / 2;
    q.pairs = std::is_same_v<T, BlockQ4_0> && SIMDATTN_NIBBLE_PAIRS
                  ? hwy::DivCeil(q.groups, 2)
                  : 0;
    q.pair_data = q.scales + hwy::RoundUpTo(kMaxRows * q.groups, 16);
    return q;
  }

  const int16_t* Codes(size_t r, size_t group_index) const {
    return codes + r * stride + group_index * group;
  }
  float Scale(size_t r, size_t group_index) const {
    return scales[r * groups + group_index];
  }
  const float* Pair(size_t r, size_t pair) const {
    return pair_data + (r * pairs + pair) * kPairFloats;
  }
};

// Row r's pair data (see QuantizedQueries) from its codes and scales.
inline void FillPairs(QuantizedQueries& q, size_t r) {
  for (size_t p = 0; p < q.pairs; ++p) {
    float* data = q.pair_data + (r * q.pairs + p) * q.kPairFloats;
    int8_t* codes = reinterpret_cast<int8_t*>(data);
    int32_t* offsets = reinterpret_cast<int32_t*>(data + kPairLanes);
    float* scales = data + 2 * kPairLanes;
    for (size_t lane = 0; lane < kPairLanes; ++lane) {
      // Lanes 0-3 and 8-11 hold block 2p's elements, 4-7 and 12-15 2p + 1's.
      const size_t g = 2 * p + lane / 4 % 2;
      int32_t sum = 0;
      for (size_t i = 4 * lane; i < 4 * lane + 4; ++i) {
        const size_t element = i / 32 * 16 + i % 16;
        codes[i] = g < q.groups ? static_cast<int8_t>(q.Codes(r, g)[element])
                                : int8_t{0};
        sum += codes[i];
      }
      offsets[lane] = -8 * sum;
      scales[lane] = g < q.groups ? q.Scale(r, g) : 0.0f;
    }
  }
}

// Quantizes `queries` (at most kMaxRows rows) into q: per group d = max |x|
// / 127 and codes round(x 127 / max) (nearest even; 0 where the group is 0;
// 127 / max in double where it overflows float). Returns false, leaving the
// rows to float32 arithmetic, if an element is not finite (NaN and infinity
// then propagate as they would there) or a group's d underflows to 0 (max
// below about 2^-143).
inline bool Quantize(ConstMatrix queries, float alpha, QuantizedQueries& q) {
  HWY_DASSERT(queries.rows <= QuantizedQueries::kMaxRows &&
              queries.cols <= q.groups * q.group);
  for (size_t r = 0; r < queries.rows; ++r) {
    int16_t* row_codes = q.codes + r * q.stride;
    for (size_t g = 0; g < q.groups; ++g) {
      const float* x = queries.Row(r) + g * q.group;
      const size_t n = std::min(q.group, queries.cols - g * q.group);
      float max = 0.0f;
      for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(x[i])) return false;
        max = std::max(max, std::abs(x[i]));
      }
      const float d = max / 127.0f;
      if (max != 0.0f && d == 0.0f) return false;
      // Below 127 / FLT_MAX, 127 / max overflows float: double then.
      const float inverse = max == 0.0f ? 0.0f : 127.0f / max;
      const bool wide = !std::isfinite(inverse);
      const double wide_inverse = wide ? 127.0 / static_cast<double>(max) : 0;
      int16_t* codes = row_codes + g * q.group;
      for (size_t i = 0; i < n; ++i) {
        codes[i] =
            static_cast<int16_t>(wide ? std::nearbyint(x[i] * wide_inverse)
                                      : std::nearbyint(x[i] * inverse));
      }
      q.scales[r * q.groups + g] = alpha * d;
    }
    std::fill(row_codes + queries.cols, row_codes + q.stride, int16_t{0});
    FillPairs(q, r);
  }
  q.rows = queries.rows;
  return true;
}

// Lanes [h, h + count) of an int8 row widened to int16, count <
// Lanes(di) only at the row's end.
template <class DI>
HWY_INLINE hn::Vec<DI> RowCodes(DI di, const int8_t* key, size_t h,
                                size_t count) {
  const hn::Rebind<int8_t, DI> d8;
  return hn::PromoteTo(di, count == hn::Lanes(di)
                               ? hn::LoadU(d8, key + h)
                               : LoadTail(d8, key + h, count));
}

// out[i * out_stride] = the sum of v<i>'s lanes, i < kCount <= 4.
template <size_t kCount, class D, class V = hn::Vec<D>>
HWY_INLINE void StoreLaneSums(D d, V v0, V v1, V v2, V v3,
                              float* HWY_RESTRICT out, size_t out_stride) {
  float sums[4];
  matmul_detail::SumsOfLanes<kCount>(d, v0, v1, v2, v3, sums);
  for (size_t i = 0; i < kCount; ++i) out[i * out_stride] = sums[i];
}

#if SIMDATTN_NIBBLE_PAIRS
// The nibbles of blocks a and b (null: zeros) as bytes, in the order of
// QuantizedQueries' pair codes.
HWY_INLINE hn::Vec512<uint8_t> PairNibbles(const BlockQ4_0& a,
                                           const BlockQ4_0* b) {
  const hn::Full128<uint8_t> d16;
  const hn::Full256<uint8_t> d32;
  const hn::Full512<uint8_t> d64;
  const auto packed =
      hn::Combine(d32, b != nullptr ? hn::LoadU(d16, b->qs) : hn::Zero(d16),
                  hn::LoadU(d16, a.qs));
  const auto high = hn::BitCast(
      d32, hn::ShiftRight<4>(hn::BitCast(hn::Full256<uint16_t>(), packed)));
  return hn::And(hn::Combine(d64, high, packed), hn::Set(d64, uint8_t{15}));
}

// The scales of blocks a[0] and a[1] (pair false: a[0]'s, zeros for a[1]'s)
// in the lanes of their sums: a[0]'s 0-3 and 8-11, a[1]'s 4-7 and 12-15.
HWY_INLINE hn::Vec512<float> PairScales(const BlockQ4_0* a, bool pair) {
  const hn::Full512<float> df;
  if (!pair) {
    return hn::Vec512<float>{_mm512_maskz_mov_ps(
        0x0F0F, hn::Set(df, Codec<BlockQ4_0>::Scale(*a)).raw)};
  }
  // 32 bytes from a hold both: a[0]'s scale is 16-bit word 0, a[1]'s word 9.
  const hn::Full256<int16_t> dw;
  HWY_ALIGN static constexpr int16_t kWords[16] = {0, 0, 0, 0, 9, 9, 9, 9,
                                                   0, 0, 0, 0, 9, 9, 9, 9};
  const auto halves = LookUp(hn::LoadU(dw, reinterpret_cast<const int16_t*>(a)),
                             hn::Load(dw, kWords));
  return PromoteF16(df, hn::BitCast(hn::Full256<hwy::float16_t>(), halves));
}

// DotTile over q4_0 keys by pairs of blocks: per pair and key, the code
// products summed by fours in int32 (exact: at most 4 15 127 in magnitude),
// plus the query's offsets, converted, times the key's scales, then times
// the query's; summed in float32 over the pairs, then over the lanes.
template <size_t R, size_t C>
HWY_INLINE void NibblePairTile(const QuantizedQueries& q,
                               const BlockQ4_0* const* keys,
                               float* HWY_RESTRICT out, size_t out_stride) {
  const hn::Full512<float> df;
  const hn::Full512<int32_t> d32;
  const hn::Full512<int16_t> d16;
  const hn::Full512<int8_t> d8;
  using VF = hn::Vec<decltype(df)>;
  const auto ones = hn::Set(d16, int16_t{1});
  const BlockQ4_0* const key0 = keys[0];
  const BlockQ4_0* const key1 = C > 1 ? keys[1] : key0;
  const BlockQ4_0* const key2 = C > 2 ? keys[2] : key0;
  const BlockQ4_0* const key3 = C > 3 ? keys[3] : key0;
  VF f0 = hn::Zero(df), f1 = f0, f2 = f0, f3 = f0;
  for (size_t g = 0, p = 0; g < q.groups; g += 2, ++p) {
    const bool pair = g + 1 < q.groups;
#define SIMDATTN_PAIR_KEY(c)                                                \
  const auto n##c =                                                         \
      C > c ? PairNibbles(key##c[g], pair ? &key##c[g + 1] : nullptr) : n0; \
  const auto k##c = C > c ? PairScales(&key##c[g], pair) : k0;
    const auto n0 = PairNibbles(key0[g], pair ? &key0[g + 1] : nullptr);
    const auto k0 = PairScales(&key0[g], pair);
    SIMDATTN_PAIR_KEY(1)
    SIMDATTN_PAIR_KEY(2)
    SIMDATTN_PAIR_KEY(3)
#undef SIMDATTN_PAIR_KEY
#define SIMDATTN_PAIR_TERM(i)                                                \
  if (R * C > i) {                                                           \
    const float* data = q.Pair(C == 1 ? i : 0, p);                           \
    const hn::Vec512<int16_t> products{_mm512_maddubs_epi16(                 \
        (C == 1 ? n0 : n##i).raw,                                            \
        hn::LoadU(d8, reinterpret_cast<const int8_t*>(data)).raw)};          \
    hn::Vec512<int32_t> unused;                                              \
    const auto sums = hn::ReorderWidenMulAccumulate(                         \
        d32, products, ones,                                                 \
        hn::LoadU(d32, reinterpret_cast<const int32_t*>(data + kPairLanes)), \
        unused);                                                             \
    f##i = hn::MulAdd(hn::Mul(hn::ConvertTo(df, sums), C == 1 ? k0 : k##i),  \
                      hn::LoadU(df, data + 2 * kPairLanes), f##i);           \
  }
    SIMDATTN_PAIR_TERM(0)
    SIMDATTN_PAIR_TERM(1)
    SIMDATTN_PAIR_TERM(2)
    SIMDATTN_PAIR_TERM(3)
#undef SIMDATTN_PAIR_TERM
  }
  StoreLaneSums<R * C>(df, f0, f1, f2, f3, out, out_stride);
}
#endif  // SIMDATTN_NIBBLE_PAIRS

// out[i * out_stride] for i < R * C: the score of query row (C == 1 ? i :
// 0) and key block row keys[C == 1 ? 0 : i], C == 1 or R == 1. Per block,
// the int32 sum of the code products (exact: at most 32 127^2 in
// magnitude), converted, times the key's scale, then times the query's (its
// scale alone may overflow where the score does not), summed in float32
// over the blocks, then over the lanes. Named accumulators: SVE vectors
// form no arrays.
template <size_t R, size_t C, typename T>
HWY_INLINE void DotTile(const QuantizedQueries& q, const T* const* keys,
                        float* HWY_RESTRICT out, size_t out_stride) {
  static_assert(R * C <= 4 && (R == 1 || C == 1), "one row or one key");
#if SIMDATTN_NIBBLE_PAIRS
  if constexpr (std::is_same_v<T, BlockQ4_0>) {
    return NibblePairTile<R, C>(q, keys, out, out_stride);
  }
#endif
  // A whole block per vector where it fits (AVX-512: 32 lanes).
  const hn::CappedTag<int16_t, kQuantBlock> d16;
  const hn::RepartitionToWide<decltype(d16)> d32;
  const hn::Rebind<float, decltype(d32)> df;
  using VF = hn::Vec<decltype(df)>;
  using VI = hn::Vec<decltype(d32)>;
  const size_t N = hn::Lanes(d16);
  // Element by element: the caller stored these arrays a lane at a time,
  // and one wide load of them would wait for the stores.
  const T* const key0 = keys[0];
  const T* const key1 = C > 1 ? keys[1] : key0;
  const T* const key2 = C > 2 ? keys[2] : key0;
  const T* const key3 = C > 3 ? keys[3] : key0;
  VF f0 = hn::Zero(df), f1 = f0, f2 = f0, f3 = f0;
  for (size_t g = 0; g < q.groups; ++g) {
    VI s0 = hn::Zero(d32), s1 = s0, s2 = s0, s3 = s0;
    VI o0 = s0, o1 = s0, o2 = s0, o3 = s0;  // The odd products' sums.
    const int16_t* c0 = q.Codes(0, g);
    const int16_t* c1 = C == 1 && R > 1 ? q.Codes(1, g) : c0;
    const int16_t* c2 = C == 1 && R > 2 ? q.Codes(2, g) : c0;
    const int16_t* c3 = C == 1 && R > 3 ? q.Codes(3, g) : c0;
    for (size_t h = 0; h < kQuantBlock; h += N) {
      const auto k0 = Codec<T>::Codes(d16, key0[g], h);
      const auto k1 = C > 1 ? Codec<T>::Codes(d16, key1[g], h) : k0;
      const auto k2 = C > 2 ? Codec<T>::Codes(d16, key2[g], h) : k0;
      const auto k3 = C > 3 ? Codec<T>::Codes(d16, key3[g], h) : k0;
#define SIMDATTN_INT_TERM(i)                                                   \
  if (R * C > i) {                                                             \
    const auto codes = hn::LoadU(d16, c##i + h);                               \
    s##i = hn::ReorderWidenMulAccumulate(d32, codes, C == 1 ? k0 : k##i, s##i, \
                                         o##i);                                \
  }
      SIMDATTN_INT_TERM(0)
      SIMDATTN_INT_TERM(1)
      SIMDATTN_INT_TERM(2)
      SIMDATTN_INT_TERM(3)
#undef SIMDATTN_INT_TERM
    }
    // Per block: each key's scale once, not per vector or row.
    const float kd0 = Codec<T>::Scale(key0[g]);
    const float kd1 = C > 1 ? Codec<T>::Scale(key1[g]) : kd0;
    const float kd2 = C > 2 ? Codec<T>::Scale(key2[g]) : kd0;
    const float kd3 = C > 3 ? Codec<T>::Scale(key3[g]) : kd0;
#define SIMDATTN_INT_GROUP(i)                                              \
  if (R * C > i) {                                                         \
    const VF dot = hn::Mul(hn::ConvertTo(df, hn::Add(s##i, o##i)),         \
                           hn::Set(df, C == 1 ? kd0 : kd##i));             \
    f##i = hn::MulAdd(dot, hn::Set(df, q.Scale(C == 1 ? i : 0, g)), f##i); \
  }
    SIMDATTN_INT_GROUP(0)
    SIMDATTN_INT_GROUP(1)
    SIMDATTN_INT_GROUP(2)
    SIMDATTN_INT_GROUP(3)
#undef SIMDATTN_INT_GROUP
  }
  StoreLaneSums<R * C>(df, f0, f1, f2, f3, out, out_stride);
}

// The scores of query row 0 and block keys [j0, j0 + cols) in scores[j],
// four keys at a time: one call for the tile. A call per four keys, which
// set up its constants each time, made q4_0 decode take 1.4 times as long.
template <typename T>
HWY_NOINLINE void RowDotTiles(const QuantizedQueries& q,
                              const internal::KVRows<T>& k, size_t j0,
                              size_t cols, float* HWY_RESTRICT scores) {
  size_t j = 0;
  for (; j + 4 <= cols; j += 4) {
    const T* keys[4] = {k.Row(j0 + j), k.Row(j0 + j + 1), k.Row(j0 + j + 2),
                        k.Row(j0 + j + 3)};
    DotTile<1, 4>(q, keys, scores + j, 1);
  }
  for (; j < cols; ++j) {
    const T* row = k.Row(j0 + j);
    DotTile<1, 1>(q, &row, scores + j, 1);
  }
}

// The scores of R query rows and one block key, out[r * out_stride]: a call
// per key (inlined into a loop over the keys, four rows ran 6-11% slower).
template <size_t R, typename T>
HWY_NOINLINE void KeyDotTile(const QuantizedQueries& q, const T* row,
                             float* HWY_RESTRICT out, size_t out_stride) {
  DotTile<R, 1>(q, &row, out, out_stride);
}

// Keys per tile of int8 rows: R <= 4 query rows times kRowTileKeys keys of
// int32 accumulators fit the registers (AVX-512's 32 with 16 of them; the
// Arm targets keep Highway's second sum per accumulator, and AVX2 has 16).
constexpr size_t kRowTileKeys = HWY_ARCH_X86 && kVectorRegisters == 32 ? 4 : 2;

// out[r * out_stride + c], r < R, c < C: the scores of query row r and the
// int8 key row at keys + c * key_stride, of scale key_scales[c]. The int32
// sum of the code products over the row (exact: head_dim 127^2 < 2^31),
// reduced across lanes in int32, converted once (exact while below 2^24:
// head_dim <= 1040), times the key's scale, then times the query's (its
// scale alone may overflow where the score does not). Each key's codes are
// widened once for the R rows.
template <size_t R, size_t C>
HWY_NOINLINE void RowTile(const QuantizedQueries& q, const int8_t* keys,
                          size_t key_stride, const float* key_scales,
                          float* HWY_RESTRICT out, size_t out_stride) {
  static_assert(R >= 1 && R <= 4 && C >= 1 && C <= kRowTileKeys, "tile");
  const hn::ScalableTag<int16_t> d16;
  const hn::RepartitionToWide<decltype(d16)> d32;
  using VI = hn::Vec<decltype(d32)>;
  const size_t N = hn::Lanes(d16), head_dim = q.group;
  const int8_t* const key0 = keys;
  const int8_t* const key1 = key0 + (C > 1 ? key_stride : 0);
  const int8_t* const key2 = key0 + (C > 2 ? 2 * key_stride : 0);
  const int8_t* const key3 = key0 + (C > 3 ? 3 * key_stride : 0);
  const VI zero = hn::Zero(d32);
  // s<r><c>: row r, key c; o<r><c>: the odd products' sums (unused on x86).
// clang-format off
#define SIMDATTN_TILE(X)          \
  X(0, 0) X(0, 1) X(0, 2) X(0, 3) \
  X(1, 0) X(1, 1) X(1, 2) X(1, 3) \
  X(2, 0) X(2, 1) X(2, 2) X(2, 3) \
  X(3, 0) X(3, 1) X(3, 2) X(3, 3)
  // clang-format on
#define SIMDATTN_DECLARE(r, c) VI s##r##c = zero, o##r##c = zero;
  SIMDATTN_TILE(SIMDATTN_DECLARE)
#undef SIMDATTN_DECLARE
  for (size_t h = 0; h < head_dim; h += N) {
    const size_t count = std::min(N, head_dim - h);
    const auto k0 = RowCodes(d16, key0, h, count);
    const auto k1 = C > 1 ? RowCodes(d16, key1, h, count) : k0;
    const auto k2 = C > 2 ? RowCodes(d16, key2, h, count) : k0;
    const auto k3 = C > 3 ? RowCodes(d16, key3, h, count) : k0;
    // The query's codes are zero-padded past head_dim.
    const auto q0 = hn::LoadU(d16, q.Codes(0, 0) + h);
    const auto q1 = R > 1 ? hn::LoadU(d16, q.Codes(1, 0) + h) : q0;
    const auto q2 = R > 2 ? hn::LoadU(d16, q.Codes(2, 0) + h) : q0;
    const auto q3 = R > 3 ? hn::LoadU(d16, q.Codes(3, 0) + h) : q0;
#define SIMDATTN_TERM(r, c)                                               \
  if (R > r && C > c) {                                                   \
    s##r##c =                                                             \
        hn::ReorderWidenMulAccumulate(d32, q##r, k##c, s##r##c, o##r##c); \
  }
    SIMDATTN_TILE(SIMDATTN_TERM)
#undef SIMDATTN_TERM
  }
#define SIMDATTN_JOIN(r, c) s##r##c = hn::Add(s##r##c, o##r##c);
  SIMDATTN_TILE(SIMDATTN_JOIN)
#undef SIMDATTN_JOIN
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  const hn::CappedTag<float, 4> d4;
  const auto key_scale =
      C == 4 ? hn::LoadU(d4, key_scales) : LoadTail(d4, key_scales, C);
#define SIMDATTN_ROW(r)                                                     \
  if (R > r) {                                                              \
    const auto sums = hn::ConvertTo(                                        \
        d4, matmul_detail::Sums4(d32, s##r##0, s##r##1, s##r##2, s##r##3)); \
    const auto scores =                                                     \
        hn::Mul(hn::Mul(sums, key_scale), hn::Set(d4, q.Scale(r, 0)));      \
    if (C == 4) {                                                           \
      hn::StoreU(scores, d4, out + r * out_stride);                         \
    } else {                                                                \
      StoreTail(scores, d4, out + r * out_stride, C);                       \
    }                                                                       \
  }
  SIMDATTN_ROW(0)
  SIMDATTN_ROW(1)
  SIMDATTN_ROW(2)
  SIMDATTN_ROW(3)
#undef SIMDATTN_ROW
#else
#define SIMDATTN_SCORE(r, c)                                           \
  if (R > r && C > c) {                                                \
    const float sum =                                                  \
        static_cast<float>(hn::GetLane(hn::SumOfLanes(d32, s##r##c))); \
    out[r * out_stride + c] = sum * key_scales[c] * q.Scale(r, 0);     \
  }
  SIMDATTN_TILE(SIMDATTN_SCORE)
#undef SIMDATTN_SCORE
#endif
#undef SIMDATTN_TILE
}

// scores[r * stride + j] = the score of q's row r and key j0 + j, j < cols.
// Block keys: one query row four keys at a time, else each key for every
// row. int8 rows: tiles of every row and kRowTileKeys keys, each key's
// lines asked for kAhead keys ahead (the float path's DotTile asks too);
// ggml's blocks ask for none (it did not pay there: bench/RESULTS.md).
template <typename T>
inline void Scores(const QuantizedQueries& q, const internal::KVRows<T>& k,
                   size_t j0, size_t cols, float* scores, size_t stride) {
  if constexpr (std::is_same_v<T, int8_t>) {
    constexpr size_t kAhead = 16;
    internal::WithRowCount<4>(q.rows, [&](auto rows) {
      constexpr size_t R = decltype(rows)::value;
      // By runs of rows `stride` apart (their scales contiguous).
      for (size_t j = 0, run = 0; j < cols; j += run) {
        run = std::min(cols - j, k.RunFrom(j0 + j));
        const int8_t* keys = k.Row(j0 + j);
        const float* key_scales = k.ScaleAt(j0 + j);
        for (size_t c = 0; c < run;) {
          const size_t tile = run - c >= kRowTileKeys ? kRowTileKeys : 1;
          for (size_t i = j + c + kAhead;
               i < std::min(cols, j + c + tile + kAhead); ++i) {
            matmul_detail::PrefetchElements(k.Row(j0 + i), 0, k.cols);
          }
          const int8_t* tile_keys = keys + c * k.stride;
          if (tile == kRowTileKeys) {
            RowTile<R, kRowTileKeys>(q, tile_keys, k.stride, key_scales + c,
                                     scores + j + c, stride);
          } else {
            RowTile<R, 1>(q, tile_keys, k.stride, key_scales + c,
                          scores + j + c, stride);
          }
          c += tile;
        }
      }
    });
  } else if (q.rows == 1) {
    RowDotTiles(q, k, j0, cols, scores);
  } else {
    for (size_t j = 0; j < cols; ++j) {
      internal::WithRowCount<4>(q.rows, [&](auto rows) {
        KeyDotTile<decltype(rows)::value>(q, k.Row(j0 + j), scores + j, stride);
      });
    }
  }
}

}  // namespace int_dot_detail
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#undef SIMDATTN_NIBBLE_PAIRS
#endif  // SIMDATTN_SRC_OPS_INT_DOT_INL_H_
