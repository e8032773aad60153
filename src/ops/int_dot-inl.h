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

// Key types whose scores may be integer dot products.
template <typename T>
inline constexpr bool kIntegerKeys =
    std::is_same_v<T, BlockQ8_0> || std::is_same_v<T, BlockQ4_0>;

// Up to kMaxRows query rows of `blocks` blocks each, as int16 codes (int8
// values, widened once here rather than per key) with per block the scale
// (alpha d: the scores' scale folded in).
struct QuantizedQueries {
  static constexpr size_t kMaxRows = 4;
  int16_t* codes;  // rows x blocks * kQuantBlock.
  float* scales;   // rows x blocks.
  size_t rows, blocks;

  // scratch: kMaxRows * (head_dim / 2 + head_dim / 32) floats, head_dim a
  // multiple of kQuantBlock.
  QuantizedQueries(float* scratch, size_t head_dim)
      : codes(reinterpret_cast<int16_t*>(scratch)),
        scales(scratch + kMaxRows * head_dim / 2),
        rows(0),
        blocks(head_dim / kQuantBlock) {}

  const int16_t* Codes(size_t r, size_t block) const {
    return codes + (r * blocks + block) * kQuantBlock;
  }
};

// Quantizes `queries` (at most kMaxRows rows of blocks * 32) into q: per
// block d = max |x| / 127 and codes round(x 127 / max) (nearest even; 0
// where the block is 0; 127 / max in double where it overflows float).
// Returns false, leaving the rows to float32 arithmetic, if an element is
// not finite (NaN and infinity then propagate as they would there) or a
// block's d underflows to 0 (max below about 2^-143).
inline bool Quantize(ConstMatrix queries, float alpha, QuantizedQueries& q) {
  HWY_DASSERT(queries.rows <= QuantizedQueries::kMaxRows &&
              queries.cols == q.blocks * kQuantBlock);
  for (size_t r = 0; r < queries.rows; ++r) {
    for (size_t b = 0; b < q.blocks; ++b) {
      const float* x = queries.Row(r) + b * kQuantBlock;
      float max = 0.0f;
      for (size_t i = 0; i < kQuantBlock; ++i) {
        if (!std::isfinite(x[i])) return false;
        max = std::max(max, std::abs(x[i]));
      }
      const float d = max / 127.0f;
      if (max != 0.0f && d == 0.0f) return false;
      // Below 127 / FLT_MAX, 127 / max overflows float: double then.
      const float inverse = max == 0.0f ? 0.0f : 127.0f / max;
      const bool wide = !std::isfinite(inverse);
      const double wide_inverse = wide ? 127.0 / static_cast<double>(max) : 0;
      int16_t* codes = q.codes + (r * q.blocks + b) * kQuantBlock;
      for (size_t i = 0; i < kQuantBlock; ++i) {
        codes[i] =
            static_cast<int16_t>(wide ? std::nearbyint(x[i] * wide_inverse)
                                      : std::nearbyint(x[i] * inverse));
      }
      q.scales[r * q.blocks + b] = alpha * d;
    }
  }
  q.rows = queries.rows;
  return true;
}

// out[i * out_stride] for accumulator i < R * C: the score of query row
// (C == 1 ? i : 0) and key row keys[C == 1 ? 0 : i], C == 1 or R == 1. Per
// block, the int32 sums of the code products (exact: at most 32 * 128 * 127
// in magnitude), converted, times the key's scale, then times the query's
// (its scale alone may overflow where the score does not), summed in float32
// over the blocks, then over the lanes. Named accumulators: SVE vectors form
// no arrays.
template <size_t R, size_t C, typename T>
HWY_NOINLINE void DotTile(const QuantizedQueries& q, const T* const* keys,
                          float* HWY_RESTRICT out, size_t out_stride) {
  static_assert(R * C <= 4 && (R == 1 || C == 1), "one row or one key");
  // A whole block per vector where it fits (AVX-512: 32 lanes).
  const hn::CappedTag<int16_t, kQuantBlock> d16;
  const hn::RepartitionToWide<decltype(d16)> d32;
  const hn::Rebind<float, decltype(d32)> df;
  using VF = hn::Vec<decltype(df)>;
  using VI = hn::Vec<decltype(d32)>;
  VF f0 = hn::Zero(df), f1 = f0, f2 = f0, f3 = f0;
  for (size_t b = 0; b < q.blocks; ++b) {
    VI s0 = hn::Zero(d32), s1 = s0, s2 = s0, s3 = s0;
    VI o0 = s0, o1 = s0, o2 = s0, o3 = s0;  // The odd products' sums.
    for (size_t h = 0; h < kQuantBlock; h += hn::Lanes(d16)) {
      const auto k0 = matmul_detail::BlockCodes(d16, keys[0][b], h);
      const auto k1 =
          C > 1 ? matmul_detail::BlockCodes(d16, keys[1][b], h) : k0;
      const auto k2 =
          C > 2 ? matmul_detail::BlockCodes(d16, keys[2][b], h) : k0;
      const auto k3 =
          C > 3 ? matmul_detail::BlockCodes(d16, keys[3][b], h) : k0;
#define SIMDATTN_INT_TERM(i)                                                   \
  if (R * C > i) {                                                             \
    const auto codes = hn::LoadU(d16, q.Codes(C == 1 ? i : 0, b) + h);         \
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
    const float kd0 = matmul_detail::BlockScale(keys[0][b]);
    const float kd1 = C > 1 ? matmul_detail::BlockScale(keys[1][b]) : kd0;
    const float kd2 = C > 2 ? matmul_detail::BlockScale(keys[2][b]) : kd0;
    const float kd3 = C > 3 ? matmul_detail::BlockScale(keys[3][b]) : kd0;
#define SIMDATTN_INT_BLOCK(i)                                               \
  if (R * C > i) {                                                          \
    const VF dot = hn::Mul(hn::ConvertTo(df, hn::Add(s##i, o##i)),          \
                           hn::Set(df, C == 1 ? kd0 : kd##i));              \
    f##i = hn::MulAdd(                                                      \
        dot, hn::Set(df, q.scales[(C == 1 ? i : 0) * q.blocks + b]), f##i); \
  }
    SIMDATTN_INT_BLOCK(0)
    SIMDATTN_INT_BLOCK(1)
    SIMDATTN_INT_BLOCK(2)
    SIMDATTN_INT_BLOCK(3)
#undef SIMDATTN_INT_BLOCK
  }
  float sums[4];
  matmul_detail::SumsOfLanes<R * C>(df, f0, f1, f2, f3, sums);
  for (size_t i = 0; i < R * C; ++i) out[i * out_stride] = sums[i];
}

// scores[r * stride + j] = the score of q's row r and key j0 + j, j < cols:
// one query row four keys at a time, else each key for every row.
template <typename T>
inline void Scores(const QuantizedQueries& q, const internal::KVRows<T>& k,
                   size_t j0, size_t cols, float* scores, size_t stride) {
  size_t j = 0;
  if (q.rows == 1) {
    for (; j + 4 <= cols; j += 4) {
      const T* keys[4] = {k.Row(j0 + j), k.Row(j0 + j + 1), k.Row(j0 + j + 2),
                          k.Row(j0 + j + 3)};
      DotTile<1, 4>(q, keys, scores + j, 1);
    }
  }
  for (; j < cols; ++j) {
    const T* key = k.Row(j0 + j);
    matmul_detail::WithRows(q.rows, [&](auto rows) {
      DotTile<decltype(rows)::value, 1>(q, &key, scores + j, stride);
    });
  }
}

}  // namespace int_dot_detail
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_INT_DOT_INL_H_
