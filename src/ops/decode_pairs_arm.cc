// decode_pairs.h's kernels on Arm's BFDOT (FEAT_BF16), bf16 rows only (fp8
// rows take the float32 route here: their widening by table lookups is
// x86's). Chosen at run time (DecodePairsUsable); the intrinsics by function
// attribute, as matmul_bf16_arm.cc, since Highway 1.0.3's bf16 dot product is
// emulated. BFDOT ignores the FPCR: it flushes denormal operands and results
// and rounds its sums to odd, so each sum is within 1 ulp of float32's
// (nearest even: half an ulp); the queries' power of two and the declined
// denormals are decode_pairs.h's, as on vdpbf16ps.
#include "src/ops/decode_pairs.h"

#if defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "simdattn/kernels.h"
#include "src/common/cpu.h"
#include "src/ops/target_family.h"

namespace simdattn {
namespace internal {
namespace {

#define SIMDATTN_BFDOT_TARGET __attribute__((target("arch=armv8.2-a+bf16")))

constexpr size_t kWords = 8;  // bf16 per vector.

SIMDATTN_BFDOT_TARGET inline float32x4_t Dot(float32x4_t acc, uint16x8_t a,
                                             uint16x8_t b) {
  return vbfdotq_f32(acc, vreinterpretq_bf16_u16(a), vreinterpretq_bf16_u16(b));
}

// The vector loops read whole vectors of 8 words, so that no load reads
// past a row and no masked copy (a call to memcpy, which spilled every
// accumulator) sits in them; a row's last cols % 8 words (none for the usual
// head dims) are summed in float32 by these, after the vector loops.
inline float Widened(uint16_t word) { return ToFloat(BFloat16{word}); }
inline float TailDot(const uint16_t* a, const uint16_t* b, size_t from,
                     size_t cols) {
  float sum = 0.0f;
  for (size_t c = from; c < cols; ++c) sum += Widened(a[c]) * Widened(b[c]);
  return sum;
}

// Scores of R rows over keys [0, n): key j's cols words at keys + j *
// key_stride bytes, row r's query at q + r * q_stride.
template <int R>
SIMDATTN_BFDOT_TARGET void ScoresOf(const uint32_t* q, size_t q_stride,
                                    const uint8_t* keys, size_t key_stride,
                                    size_t n, size_t cols, float alpha,
                                    float* scores, size_t score_stride) {
  // One row: two accumulators per key, 8 chains of BFDOT in flight.
  constexpr int kAccs = R == 1 ? 2 : 1;
  const size_t full = cols / kWords * kWords;
  const auto* query = reinterpret_cast<const uint16_t*>(q);
  const size_t query_stride = 2 * q_stride;  // In words.
  const auto key = [&](size_t j) {
    return reinterpret_cast<const uint16_t*>(keys + j * key_stride);
  };
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const uint16_t* k[4] = {key(j), key(j + 1), key(j + 2), key(j + 3)};
    float32x4_t acc[R][4][kAccs];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {
#pragma GCC unroll 2
        for (int h = 0; h < kAccs; ++h) acc[r][kk][h] = vdupq_n_f32(0.0f);
      }
    }
    for (size_t c0 = 0; c0 < full; c0 += kAccs * kWords) {
#pragma GCC unroll 2
      for (int h = 0; h < kAccs; ++h) {
        const size_t c = c0 + h * kWords;
        if (c >= full) break;
#pragma GCC unroll 4
        for (int kk = 0; kk < 4; ++kk) {
          const uint16x8_t kv = vld1q_u16(k[kk] + c);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            acc[r][kk][h] =
                Dot(acc[r][kk][h], vld1q_u16(query + r * query_stride + c), kv);
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float32x4_t total[4];
#pragma GCC unroll 4
      for (int kk = 0; kk < 4; ++kk) {
        total[kk] = kAccs == 1
                        ? acc[r][kk][0]
                        : vaddq_f32(acc[r][kk][0], acc[r][kk][kAccs - 1]);
      }
      float32x4_t sums = vpaddq_f32(vpaddq_f32(total[0], total[1]),
                                    vpaddq_f32(total[2], total[3]));
      if (full < cols) {
        float tail[4];
        for (int kk = 0; kk < 4; ++kk) {
          tail[kk] = TailDot(query + r * query_stride, k[kk], full, cols);
        }
        sums = vaddq_f32(sums, vld1q_f32(tail));
      }
      vst1q_f32(scores + r * score_stride + j, vmulq_n_f32(sums, alpha));
    }
  }
  for (; j < n; ++j) {
    float32x4_t acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = vdupq_n_f32(0.0f);
    for (size_t c = 0; c < full; c += kWords) {
      const uint16x8_t kv = vld1q_u16(key(j) + c);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        acc[r] = Dot(acc[r], vld1q_u16(query + r * query_stride + c), kv);
      }
    }
    for (int r = 0; r < R; ++r) {
      scores[r * score_stride + j] =
          alpha * (vaddvq_f32(acc[r]) +
                   TailDot(query + r * query_stride, key(j), full, cols));
    }
  }
}

// a += values j and j + 1 (j alone where !pair; rows `even` and `odd` from
// the pass's first dim) times their weights' pair, row r's at
// pair_weights[r * weight_stride], over the pass's first `groups` groups of
// 8 dims. Zipped word by word, the two values of a dim meet the pair in one
// float lane of BFDOT: the accumulators stay in the dims' order.
template <int R, int G>
SIMDATTN_BFDOT_TARGET __attribute__((always_inline)) inline void AddValuePair(
    const uint16_t* even, const uint16_t* odd, bool pair, size_t groups,
    const uint32_t* pair_weights, size_t weight_stride,
    float32x4_t (&a)[R][G][2]) {
  uint16x8_t w[R];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    w[r] = vreinterpretq_u16_u32(vdupq_n_u32(pair_weights[r * weight_stride]));
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    if (static_cast<size_t>(g) >= groups) break;
    const uint16x8_t e = vld1q_u16(even + kWords * g);
    const uint16x8_t o = pair ? vld1q_u16(odd + kWords * g) : vdupq_n_u16(0);
    const uint16x8_t low = vzip1q_u16(e, o), high = vzip2q_u16(e, o);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      a[r][g][0] = Dot(a[r][g][0], low, w[r]);
      a[r][g][1] = Dot(a[r][g][1], high, w[r]);
    }
  }
}

// acc[r][d0, d0 + 8 groups) += P V for R rows, groups <= G, those dims held
// in 2G registers per row.
template <int R, int G>
SIMDATTN_BFDOT_TARGET void ProductOf(const uint32_t* weights,
                                     size_t weight_stride,
                                     const uint8_t* values, size_t value_stride,
                                     size_t n, size_t d0, size_t groups,
                                     float* acc, size_t acc_stride) {
  float32x4_t a[R][G][2];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const float* out = acc + r * acc_stride + d0 + kWords * g;
      const bool in = static_cast<size_t>(g) < groups;
      a[r][g][0] = in ? vld1q_f32(out) : vdupq_n_f32(0.0f);
      a[r][g][1] = in ? vld1q_f32(out + 4) : vdupq_n_f32(0.0f);
    }
  }
  const auto row = [&](size_t j) {
    return reinterpret_cast<const uint16_t*>(values + j * value_stride) + d0;
  };
  size_t j = 0;
  for (; j + 2 <= n; j += 2) {
    AddValuePair<R, G>(row(j), row(j + 1), true, groups, weights + j / 2,
                       weight_stride, a);
  }
  if (j < n) {
    AddValuePair<R, G>(row(j), nullptr, false, groups, weights + j / 2,
                       weight_stride, a);
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      if (static_cast<size_t>(g) >= groups) break;
      float* out = acc + r * acc_stride + d0 + kWords * g;
      vst1q_f32(out, a[r][g][0]);
      vst1q_f32(out + 4, a[r][g][1]);
    }
  }
}

// acc[r][from, cols) += P V in float32 (TailDot's dims).
void TailProduct(const uint32_t* weights, size_t weight_stride, size_t rows,
                 const uint8_t* values, size_t value_stride, size_t n,
                 size_t from, size_t cols, float* acc, size_t acc_stride) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      const uint32_t pair = weights[r * weight_stride + j / 2];
      const float w = Widened(static_cast<uint16_t>(pair >> (j % 2 * 16)));
      const auto* v =
          reinterpret_cast<const uint16_t*>(values + j * value_stride);
      for (size_t c = from; c < cols; ++c) {
        acc[r * acc_stride + c] += w * Widened(v[c]);
      }
    }
  }
}

}  // namespace

SIMDATTN_BFDOT_TARGET bool RoundWeightPairs(const float* p, size_t n,
                                            uint32_t* out) {
  const float32x4_t smallest = vdupq_n_f32(0x1p-126f);
  uint32x4_t denormal = vdupq_n_u32(0);
  for (size_t i = 0; i < n; i += kWords) {
    float tail[kWords] = {};
    const float* x = p + i;
    if (n - i < kWords) {
      std::memcpy(tail, x, (n - i) * sizeof(float));
      x = tail;
    }
    const float32x4_t lo = vld1q_f32(x), hi = vld1q_f32(x + 4);
    denormal = vorrq_u32(denormal, vandq_u32(vcaltq_f32(lo, smallest),
                                             vmvnq_u32(vceqzq_f32(lo))));
    denormal = vorrq_u32(denormal, vandq_u32(vcaltq_f32(hi, smallest),
                                             vmvnq_u32(vceqzq_f32(hi))));
    const bfloat16x8_t words = vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(lo), hi);
    vst1q_u32(out + i / 2, vreinterpretq_u32_bf16(words));
  }
  return vmaxvq_u32(denormal) == 0;
}

bool DecodePairsUsable(KVType type, int64_t target) {
  return type == KVType::kBF16 && IsArmSimdTarget(target) && ThisCpu().arm_bf16;
}

float QueryPairs(KVType, const float* q, size_t rows, size_t cols,
                 size_t stride, uint32_t* out) {
  float most = 0.0f;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const float x = std::abs(q[r * stride + c]);
      if (!std::isfinite(x)) return 0.0f;
      most = std::max(most, x);
    }
  }
  // A denormal largest is declined: its power, 2^(1 - e), is no float.
  if (most != 0.0f && most < 0x1p-126f) return 0.0f;
  int e = 0;
  std::frexp(most, &e);  // most in [2^(e-1), 2^e); e = 0 for 0.
  const float power = std::ldexp(1.0f, 1 - e);  // Exact.
  const size_t q_stride = PairQueryStride(cols);
  std::memset(out, 0, rows * q_stride * sizeof(uint32_t));
  for (size_t r = 0; r < rows; ++r) {
    auto* words = reinterpret_cast<uint16_t*>(out + r * q_stride);
    for (size_t c = 0; c < cols; ++c) {
      const float x = q[r * stride + c] * power;
      if (x != 0.0f && std::abs(x) < 0x1p-126f) return 0.0f;
      words[c] = ToBFloat16(x).bits;
    }
  }
  return 1.0f / power;
}

void PairScores(KVType, const uint32_t* queries, size_t rows,
                const uint8_t* keys, size_t key_stride, size_t n, size_t cols,
                float alpha, float* scores, size_t score_stride) {
  const size_t q_stride = PairQueryStride(cols);
  switch (rows) {
    case 1:
      return ScoresOf<1>(queries, q_stride, keys, key_stride, n, cols, alpha,
                         scores, score_stride);
    case 2:
      return ScoresOf<2>(queries, q_stride, keys, key_stride, n, cols, alpha,
                         scores, score_stride);
    case 3:
      return ScoresOf<3>(queries, q_stride, keys, key_stride, n, cols, alpha,
                         scores, score_stride);
    default:
      return ScoresOf<4>(queries, q_stride, keys, key_stride, n, cols, alpha,
                         scores, score_stride);
  }
}

void PairWeightsTimesValues(KVType, const uint32_t* weights,
                            size_t weight_stride, size_t rows,
                            const uint8_t* values, size_t value_stride,
                            size_t n, size_t cols, float* acc,
                            size_t acc_stride) {
  // Rows two by two, 16 accumulators a pass: 64 dims of one row or 32 of
  // two.
  const size_t full = cols / kWords * kWords;
  for (size_t r0 = 0; r0 < rows; r0 += 2) {
    const uint32_t* w = weights + r0 * weight_stride;
    float* out = acc + r0 * acc_stride;
    const bool one = rows - r0 == 1;
    const size_t pass = (one ? 8 : 4) * kWords;
    for (size_t d0 = 0; d0 < full; d0 += pass) {
      const size_t groups = (std::min(full, d0 + pass) - d0) / kWords;
      if (one) {
        ProductOf<1, 8>(w, weight_stride, values, value_stride, n, d0, groups,
                        out, acc_stride);
      } else {
        ProductOf<2, 4>(w, weight_stride, values, value_stride, n, d0, groups,
                        out, acc_stride);
      }
    }
  }
  if (full < cols) {
    TailProduct(weights, weight_stride, rows, values, value_stride, n, full,
                cols, acc, acc_stride);
  }
}

}  // namespace internal
}  // namespace simdattn

#endif  // aarch64 Linux
