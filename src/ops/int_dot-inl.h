// Per-target integer scores (ComputeType::kInt8): query rows quantized to
// blocks of 32 int8 codes, dot products with ggml's q8_0 and q4_0 key blocks
// summed exactly in int32 per block, as llama.cpp's vec_dot_q8_0_q8_0 and
// vec_dot_q4_0_q8_0 do, then scaled by both blocks' scales in float32.

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

// Key types whose scores may be integer dot products: ggml's blocks, whose
// query rows are quantized per block, and int8 rows (one scale per row),
// whose query rows are quantized per row.
template <typename T>
inline constexpr bool kBlockKeys =
    std::is_same_v<T, BlockQ8_0> || std::is_same_v<T, BlockQ4_0>;
template <typename T>
inline constexpr bool kIntegerKeys = kBlockKeys<T> || std::is_same_v<T, int8_t>;

// Up to kMaxRows query rows as int16 codes (int8 values, widened once here
// rather than per key), with a scale per group of `group` elements (alpha d:
// the scores' scale folded in). Each row's codes are zero-padded to
// `stride`, a multiple of the vector length.
struct QuantizedQueries {
  static constexpr size_t kMaxRows = 4;
  int16_t* codes;  // rows x stride.
  float* scales;   // rows x groups.
  size_t rows, group, groups, stride;

  // Groups of kQuantBlock for block keys (head_dim a multiple of it), one
  // per row for int8 keys. scratch: kMaxRows * (stride / 2 + groups)
  // floats.
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
    return q;
  }

  const int16_t* Codes(size_t r, size_t group_index) const {
    return codes + r * stride + group_index * group;
  }
  float Scale(size_t r, size_t group_index) const {
    return scales[r * groups + group_index];
  }
};

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
  }
  q.rows = queries.rows;
  return true;
}

// A key's codes [h, h + count) of group g, widened to int16 (count <
// Lanes(di) only at the end of an int8 row), and the group's scale (int8
// rows: row_scales[c], key c's; block keys carry theirs).
template <class DI>
HWY_INLINE hn::Vec<DI> KeyCodes(DI di, const int8_t* key, size_t /*g*/,
                                size_t h, size_t count) {
  const hn::Rebind<int8_t, DI> d8;
  return hn::PromoteTo(di, count == hn::Lanes(di)
                               ? hn::LoadU(d8, key + h)
                               : LoadTail(d8, key + h, count));
}
template <class DI, typename T>
HWY_INLINE hn::Vec<DI> KeyCodes(DI di, const T* key, size_t g, size_t h,
                                size_t /*count*/) {
  return matmul_detail::BlockCodes(di, key[g], h);
}
HWY_INLINE float KeyScale(const int8_t* /*key*/, size_t /*g*/,
                          const float* row_scales, size_t c) {
  return row_scales[c];
}
template <typename T>
HWY_INLINE float KeyScale(const T* key, size_t g, const float* /*row_scales*/,
                          size_t /*c*/) {
  return matmul_detail::BlockScale(key[g]);
}

// out[i * out_stride] for accumulator i < R * C: the score of query row
// (C == 1 ? i : 0) and key row keys[C == 1 ? 0 : i] (int8 rows: of scale
// row_scales[C == 1 ? 0 : i]), C == 1 or R == 1. Per group, the int32 sums
// of the code products (exact: at most head_dim 127^2 in magnitude),
// converted, times the key's scale, then times the query's (its scale alone
// may overflow where the score does not), summed in float32 over the groups,
// then over the lanes (exact for int8 rows up to head_dim 1040, the sums
// then being integers below 2^24). Named accumulators: SVE vectors form no
// arrays.
template <size_t R, size_t C, typename T>
HWY_NOINLINE void DotTile(const QuantizedQueries& q, const T* const* keys,
                          const float* row_scales, float* HWY_RESTRICT out,
                          size_t out_stride) {
  static_assert(R * C <= 4 && (R == 1 || C == 1), "one row or one key");
  // A whole block per vector where it fits (AVX-512: 32 lanes).
  using D16 =
      std::conditional_t<kBlockKeys<T>, hn::CappedTag<int16_t, kQuantBlock>,
                         hn::ScalableTag<int16_t>>;
  const D16 d16;
  const hn::RepartitionToWide<decltype(d16)> d32;
  const hn::Rebind<float, decltype(d32)> df;
  using VF = hn::Vec<decltype(df)>;
  using VI = hn::Vec<decltype(d32)>;
  const size_t N = hn::Lanes(d16);
  // Block keys: kQuantBlock, known here.
  const size_t group = kBlockKeys<T> ? kQuantBlock : q.group;
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
    for (size_t h = 0; h < group; h += N) {
      const size_t count = std::min(N, group - h);
      const auto k0 = KeyCodes(d16, key0, g, h, count);
      const auto k1 = C > 1 ? KeyCodes(d16, key1, g, h, count) : k0;
      const auto k2 = C > 2 ? KeyCodes(d16, key2, g, h, count) : k0;
      const auto k3 = C > 3 ? KeyCodes(d16, key3, g, h, count) : k0;
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
    // Per group: each key's scale once, not per vector or row.
    const float kd0 = KeyScale(key0, g, row_scales, 0);
    const float kd1 = C > 1 ? KeyScale(key1, g, row_scales, 1) : kd0;
    const float kd2 = C > 2 ? KeyScale(key2, g, row_scales, 2) : kd0;
    const float kd3 = C > 3 ? KeyScale(key3, g, row_scales, 3) : kd0;
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
  float sums[4];
  matmul_detail::SumsOfLanes<R * C>(df, f0, f1, f2, f3, sums);
  for (size_t i = 0; i < R * C; ++i) out[i * out_stride] = sums[i];
}

// scores[r * stride + j] = the score of q's row r and key j0 + j, j < cols:
// one query row four keys at a time, else each key for every row. int8
// rows ask for each key's lines kAhead keys ahead (the float path's
// DotTile asks too); ggml's blocks, measured without it, are left so.
template <typename T>
inline void Scores(const QuantizedQueries& q, const internal::KVRows<T>& k,
                   size_t j0, size_t cols, float* scores, size_t stride) {
  constexpr bool kRows = std::is_same_v<T, int8_t>;
  constexpr size_t kAhead = 16;
  const auto key = [&](size_t j, float* row_scale) {
    if constexpr (kRows) {
      if (j + kAhead < cols) {
        matmul_detail::PrefetchElements(k.Row(j0 + j + kAhead), 0, k.cols);
      }
      *row_scale = k.Scale(j0 + j);
    }
    return k.Row(j0 + j);
  };
  size_t j = 0;
  if (q.rows == 1) {
    for (; j + 4 <= cols; j += 4) {
      float row_scales[4];
      const T* keys[4] = {key(j, row_scales), key(j + 1, row_scales + 1),
                          key(j + 2, row_scales + 2),
                          key(j + 3, row_scales + 3)};
      DotTile<1, 4>(q, keys, row_scales, scores + j, 1);
    }
  }
  for (; j < cols; ++j) {
    float row_scale;
    const T* row = key(j, &row_scale);
    matmul_detail::WithRows(q.rows, [&](auto rows) {
      DotTile<decltype(rows)::value, 1>(q, &row, &row_scale, scores + j,
                                        stride);
    });
  }
}

}  // namespace int_dot_detail
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_INT_DOT_INL_H_
