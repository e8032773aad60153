// fp8_pairs.h's kernels: AVX512_BF16 and AVX512_VBMI by function
// attributes, chosen at run time (Fp8PairsUsable), whatever Highway's
// targets.
#include "src/ops/fp8_pairs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "simdattn/kernels.h"
#include "src/common/element.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SIMDATTN_HAVE_FP8_PAIRS 1
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's _mm512_undefined_ps (in _mm512_unpacklo_ps, shuffle_f32x4 and
// others) is a self-initialised variable, which its warnings report.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace simdattn {
namespace internal {
namespace {

constexpr size_t kCodes = 64;  // Codes per vector.

// The word a query element's code position cc (in [0, 64)) takes in a
// chunk's 64 words: w0's 32, then w1's (Widen).
constexpr size_t WordOf(size_t cc) {
  return (cc % 16 / 8) * 32 + cc / 16 * 8 + cc % 8;
}

}  // namespace

#ifdef SIMDATTN_HAVE_FP8_PAIRS
#define SIMDATTN_FP8_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vbmi")))

namespace {

// The bf16 bits of each magnitude code's value (code & 127; E4M3's times
// 2^-8, fp8_pairs.h): high bytes (the sign bit clear) and low bytes, each as
// two vectors of 64 entries (vpermi2b's table). Exact: fp8 values have at
// most 4 significant bits and their exponents lie within bf16's range; NaN
// codes are a quiet NaN.
struct Tables {
  alignas(64) uint8_t high[128];
  alignas(64) uint8_t low[128];
};

Tables MakeTables(KVType type) {
  Tables t;
  for (uint32_t m = 0; m < 128; ++m) {
    const float x = type == KVType::kFp8E4M3
                        ? 0x1p-8f * Fp8E4M3ToFloat(static_cast<uint8_t>(m))
                        : Fp8E5M2ToFloat(static_cast<uint8_t>(m));
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    if (std::isnan(x)) bits = 0x7FC00000u;
    t.high[m] = static_cast<uint8_t>(bits >> 24);
    t.low[m] = static_cast<uint8_t>(bits >> 16);
  }
  return t;
}

const Tables& TablesOf(KVType type) {
  static const Tables e4m3 = MakeTables(KVType::kFp8E4M3);
  static const Tables e5m2 = MakeTables(KVType::kFp8E5M2);
  return type == KVType::kFp8E4M3 ? e4m3 : e5m2;
}

struct Lookup {
  __m512i high0, high1, low0, low1;
};

SIMDATTN_FP8_TARGET Lookup LoadLookup(KVType type) {
  const Tables& t = TablesOf(type);
  return {_mm512_load_si512(t.high), _mm512_load_si512(t.high + kCodes),
          _mm512_load_si512(t.low), _mm512_load_si512(t.low + kCodes)};
}

// The 64 codes as bf16 pairs: w0 holds codes 16L + [0, 8) of each 128-bit
// lane L, w1 codes 16L + [8, 16), each code's bf16 at the position of its
// byte within them (vpunpck's order).
SIMDATTN_FP8_TARGET inline void Widen(const Lookup& t, __m512i codes,
                                      __m512i& w0, __m512i& w1) {
  __m512i high = _mm512_permutex2var_epi8(t.high0, codes, t.high1);
  // high | (codes & 0x80): the sign.
  high = _mm512_ternarylogic_epi32(high, codes, _mm512_set1_epi8(-128), 0xF8);
  const __m512i low = _mm512_permutex2var_epi8(t.low0, codes, t.low1);
  w0 = _mm512_unpacklo_epi8(low, high);
  w1 = _mm512_unpackhi_epi8(low, high);
}

SIMDATTN_FP8_TARGET inline __mmask64 CodeMask(size_t count) {
  return count >= kCodes ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}

SIMDATTN_FP8_TARGET inline __m512 Dot(__m512 acc, __m512i pairs,
                                      const uint32_t* operand) {
  return _mm512_dpbf16_ps(acc, (__m512bh)pairs,
                          (__m512bh)_mm512_loadu_si512(operand));
}

// The sums of a, b, c and d's lanes.
SIMDATTN_FP8_TARGET inline __m128 Sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // Per 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3], likewise c, d.
  const __m512 ab =
      _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd =
      _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512d ab2 = _mm512_castps_pd(ab), cd2 = _mm512_castps_pd(cd);
  const __m512 abcd =
      _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ab2, cd2)),
                    _mm512_castpd_ps(_mm512_unpackhi_pd(ab2, cd2)));
  const __m256 half = _mm256_add_ps(
      _mm512_castps512_ps256(abcd),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(abcd), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(half),
                    _mm256_extractf128_ps(half, 1));
}

// Scores of R rows over keys [0, n).
template <int R>
SIMDATTN_FP8_TARGET void ScoresOf(const Lookup& t, const uint32_t* q,
                                  size_t q_stride, const uint8_t* keys,
                                  size_t key_stride, size_t n, size_t cols,
                                  float alpha, float* scores,
                                  size_t score_stride) {
  // Two accumulators per key for one row: 8 chains of vdpbf16ps in flight.
  constexpr int kAccs = R == 1 ? 2 : 1;
  const size_t chunks = (cols + kCodes - 1) / kCodes;
  const auto query = [&](int r, size_t c) {
    return q + r * q_stride + c * (kCodes / 2);
  };
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    __m512 acc[R][4][kAccs];
    for (auto& row : acc) {
      for (auto& key : row) {
        for (__m512& a : key) a = _mm512_setzero_ps();
      }
    }
    for (size_t c = 0; c < chunks; ++c) {
      const __mmask64 m = CodeMask(cols - c * kCodes);
      for (int kk = 0; kk < 4; ++kk) {
        __m512i w0, w1;
        Widen(t,
              _mm512_maskz_loadu_epi8(
                  m, keys + (j + kk) * key_stride + c * kCodes),
              w0, w1);
        for (int r = 0; r < R; ++r) {
          acc[r][kk][0] = Dot(acc[r][kk][0], w0, query(r, c));
          acc[r][kk][kAccs - 1] =
              Dot(acc[r][kk][kAccs - 1], w1, query(r, c) + 16);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      __m512 total[4];
      for (int kk = 0; kk < 4; ++kk) {
        total[kk] = kAccs == 1
                        ? acc[r][kk][0]
                        : _mm512_add_ps(acc[r][kk][0], acc[r][kk][kAccs - 1]);
      }
      const __m128 s = Sum4(total[0], total[1], total[2], total[3]);
      _mm_storeu_ps(scores + r * score_stride + j,
                    _mm_mul_ps(s, _mm_set1_ps(alpha)));
    }
  }
  for (; j < n; ++j) {
    __m512 acc[R];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    for (size_t c = 0; c < chunks; ++c) {
      __m512i w0, w1;
      Widen(t,
            _mm512_maskz_loadu_epi8(CodeMask(cols - c * kCodes),
                                    keys + j * key_stride + c * kCodes),
            w0, w1);
      for (int r = 0; r < R; ++r) {
        acc[r] = Dot(acc[r], w0, query(r, c));
        acc[r] = Dot(acc[r], w1, query(r, c) + 16);
      }
    }
    for (int r = 0; r < R; ++r) {
      scores[r * score_stride + j] = alpha * _mm512_reduce_add_ps(acc[r]);
    }
  }
}

// a[i]'s 128-bit block L to a[L]'s block i (its own inverse): between the
// natural order of 64 floats and P V's accumulators, whose vector i holds
// dims 16L + 4i + [0, 4) in block L (Widen over byte-interleaved rows).
SIMDATTN_FP8_TARGET inline void TransposeBlocks(__m512 a[4]) {
  const __m512 t0 = _mm512_shuffle_f32x4(a[0], a[1], 0x44);
  const __m512 t1 = _mm512_shuffle_f32x4(a[2], a[3], 0x44);
  const __m512 t2 = _mm512_shuffle_f32x4(a[0], a[1], 0xEE);
  const __m512 t3 = _mm512_shuffle_f32x4(a[2], a[3], 0xEE);
  a[0] = _mm512_shuffle_f32x4(t0, t1, 0x88);
  a[1] = _mm512_shuffle_f32x4(t0, t1, 0xDD);
  a[2] = _mm512_shuffle_f32x4(t2, t3, 0x88);
  a[3] = _mm512_shuffle_f32x4(t2, t3, 0xDD);
}

SIMDATTN_FP8_TARGET inline __mmask16 FloatMask(size_t count) {
  return count >= 16 ? __mmask16{0xFFFF}
                     : static_cast<__mmask16>((1u << count) - 1);
}

// acc += P V for R rows, C chunks of 64 dims held in registers from chunk
// c0 on.
template <int R, int C>
SIMDATTN_FP8_TARGET void ProductOf(const Lookup& t, const uint32_t* weights,
                                   size_t weight_stride, const uint8_t* values,
                                   size_t value_stride, size_t n, size_t cols,
                                   size_t c0, float* acc, size_t acc_stride) {
  __m512 a[R][C][4];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      for (int b = 0; b < 4; ++b) {
        const size_t dim = (c0 + c) * kCodes + 16 * b;
        a[r][c][b] = dim < cols
                         ? _mm512_maskz_loadu_ps(FloatMask(cols - dim),
                                                 acc + r * acc_stride + dim)
                         : _mm512_setzero_ps();
      }
      TransposeBlocks(a[r][c]);
    }
  }
  for (size_t j = 0; j < n; j += 2) {
    const bool pair = j + 1 < n;
    for (int c = 0; c < C; ++c) {
      const size_t first = (c0 + c) * kCodes;
      const __mmask64 m = first < cols ? CodeMask(cols - first) : 0;
      const uint8_t* row = values + j * value_stride + first;
      const __m512i even = _mm512_maskz_loadu_epi8(m, row);
      const __m512i odd =
          _mm512_maskz_loadu_epi8(pair ? m : 0, row + value_stride);
      __m512i w[4];
      Widen(t, _mm512_unpacklo_epi8(even, odd), w[0], w[1]);
      Widen(t, _mm512_unpackhi_epi8(even, odd), w[2], w[3]);
      for (int r = 0; r < R; ++r) {
        const __m512bh weight = (__m512bh)_mm512_set1_epi32(
            static_cast<int>(weights[r * weight_stride + j / 2]));
        for (int b = 0; b < 4; ++b) {
          a[r][c][b] = _mm512_dpbf16_ps(a[r][c][b], (__m512bh)w[b], weight);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      TransposeBlocks(a[r][c]);
      for (int b = 0; b < 4; ++b) {
        const size_t dim = (c0 + c) * kCodes + 16 * b;
        if (dim < cols) {
          _mm512_mask_storeu_ps(acc + r * acc_stride + dim,
                                FloatMask(cols - dim), a[r][c][b]);
        }
      }
    }
  }
}

// f(integral_constant<int, R>) for R = rows, 1 or 2.
template <class F>
void WithRows(size_t rows, const F& f) {
  if (rows == 1) {
    f(std::integral_constant<int, 1>());
  } else {
    f(std::integral_constant<int, 2>());
  }
}

// p[0, n) rounded to bf16, weights 2i and 2i + 1 in out[i]; false where a
// weight is a float32 denormal (out unspecified).
SIMDATTN_FP8_TARGET bool RoundIntoPairs(const float* p, size_t n,
                                        uint32_t* out) {
  const __m512 smallest = _mm512_set1_ps(0x1p-126f);
  __mmask16 denormal = 0;
  for (size_t i = 0; i < n; i += 16) {
    const __m512 x = _mm512_maskz_loadu_ps(FloatMask(n - i), p + i);
    const __m512 magnitude = _mm512_abs_ps(x);
    denormal |= _mm512_cmp_ps_mask(magnitude, smallest, _CMP_LT_OQ) &
                _mm512_cmp_ps_mask(magnitude, _mm512_setzero_ps(), _CMP_NEQ_OQ);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i / 2),
                        (__m256i)_mm512_cvtneps_pbh(x));
  }
  return denormal == 0;
}

}  // namespace

bool Fp8PairsUsable() {
  return __builtin_cpu_supports("avx512bf16") &&
         __builtin_cpu_supports("avx512vbmi");
}

void Fp8Scores(KVType type, const uint32_t* queries, size_t rows,
               const uint8_t* keys, size_t key_stride, size_t n, size_t cols,
               float alpha, float* scores, size_t score_stride) {
  const Lookup t = LoadLookup(type);
  WithRows(rows, [&](auto r) {
    ScoresOf<decltype(r)::value>(t, queries, Fp8QueryStride(cols), keys,
                                 key_stride, n, cols, alpha, scores,
                                 score_stride);
  });
}

bool Fp8WeightPairs(const float* p, size_t rows, size_t n, size_t stride,
                    uint32_t* out, size_t out_stride) {
  bool normal = true;
  for (size_t r = 0; r < rows; ++r) {
    normal &= RoundIntoPairs(p + r * stride, n, out + r * out_stride);
  }
  return normal;
}

void Fp8WeightsTimesValues(KVType type, const uint32_t* weights,
                           size_t weight_stride, size_t rows,
                           const uint8_t* values, size_t value_stride, size_t n,
                           size_t cols, float* acc, size_t acc_stride) {
  const Lookup t = LoadLookup(type);
  const size_t chunks = (cols + kCodes - 1) / kCodes;
  WithRows(rows, [&](auto r) {
    // Two chunks (128 dims) a pass: up to 16 accumulators.
    constexpr int kChunks = 2;
    for (size_t c0 = 0; c0 < chunks; c0 += kChunks) {
      ProductOf<decltype(r)::value, kChunks>(t, weights, weight_stride, values,
                                             value_stride, n, cols, c0, acc,
                                             acc_stride);
    }
  });
}

#else  // !SIMDATTN_HAVE_FP8_PAIRS: never called (Fp8PairsUsable).

bool Fp8PairsUsable() { return false; }
void Fp8Scores(KVType, const uint32_t*, size_t, const uint8_t*, size_t, size_t,
               size_t, float, float*, size_t) {}
bool Fp8WeightPairs(const float*, size_t, size_t, size_t, uint32_t*, size_t) {
  return false;
}
void Fp8WeightsTimesValues(KVType, const uint32_t*, size_t, size_t,
                           const uint8_t*, size_t, size_t, size_t, float*,
                           size_t) {}

#endif  // SIMDATTN_HAVE_FP8_PAIRS

float Fp8QueryPairs(const float* q, size_t rows, size_t cols, size_t stride,
                    uint32_t* out) {
  float largest = 0.0f;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const float x = q[r * stride + c];
      if (!std::isfinite(x)) return 0.0f;
      largest = std::max(largest, std::fabs(x));
    }
  }
  int e = 0;
  std::frexp(largest, &e);  // largest in [2^(e-1), 2^e); e = 0 for 0.
  const size_t q_stride = Fp8QueryStride(cols);
  auto* words = reinterpret_cast<uint16_t*>(out);
  std::memset(out, 0, rows * q_stride * sizeof(uint32_t));
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const float x = std::ldexp(q[r * stride + c], 1 - e);
      if (x != 0.0f && std::fabs(x) < 0x1p-126f) return 0.0f;
      words[2 * r * q_stride + c / kCodes * kCodes + WordOf(c % kCodes)] =
          ToBFloat16(x).bits;
    }
  }
  return std::ldexp(1.0f, e - 1);
}

}  // namespace internal
}  // namespace simdattn
