// decode_pairs.h's kernels: AVX512_BF16 and AVX512_VBMI by function
// attributes, chosen at run time (DecodePairsUsable), whatever Highway's
// targets.
#include "src/ops/decode_pairs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "simdattn/kernels.h"
#include "src/common/cpu.h"
#include "src/common/element.h"
#include "src/ops/target_family.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SIMDATTN_HAVE_DECODE_PAIRS 1
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
// chunk's 64 words: w0's 32, then w1's (Widen; bf16 rows load in order).
constexpr size_t WordOf(KVType type, size_t cc) {
  return type == KVType::kBF16 ? cc : (cc % 16 / 8) * 32 + cc / 16 * 8 + cc % 8;
}

}  // namespace

#ifdef SIMDATTN_HAVE_DECODE_PAIRS
#define SIMDATTN_PAIRS_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vbmi")))

namespace {

// The bf16 bits of each magnitude code's value (code & 127; E4M3's times
// 2^-8, decode_pairs.h): high bytes (the sign bit clear) and low bytes, each as
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

SIMDATTN_PAIRS_TARGET Lookup LoadLookup(KVType type) {
  const Tables& t = TablesOf(type);
  return {_mm512_load_si512(t.high), _mm512_load_si512(t.high + kCodes),
          _mm512_load_si512(t.low), _mm512_load_si512(t.low + kCodes)};
}

// The 64 codes as bf16 pairs: w0 holds codes 16L + [0, 8) of each 128-bit
// lane L, w1 codes 16L + [8, 16), each code's bf16 at the position of its
// byte within them (vpunpck's order).
SIMDATTN_PAIRS_TARGET inline void Widen(const Lookup& t, __m512i codes,
                                        __m512i& w0, __m512i& w1) {
  __m512i high = _mm512_permutex2var_epi8(t.high0, codes, t.high1);
  // high | (codes & 0x80): the sign.
  high = _mm512_ternarylogic_epi32(high, codes, _mm512_set1_epi8(-128), 0xF8);
  const __m512i low = _mm512_permutex2var_epi8(t.low0, codes, t.low1);
  w0 = _mm512_unpacklo_epi8(low, high);
  w1 = _mm512_unpackhi_epi8(low, high);
}

SIMDATTN_PAIRS_TARGET inline __mmask64 CodeMask(size_t count) {
  return count >= kCodes ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}

// The 32 words of mask bits for words [0, count) of a vector.
SIMDATTN_PAIRS_TARGET inline __mmask32 WordMask(size_t count) {
  return count >= 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
}

// A chunk's `count` (<= 64) elements of a key row at `row` as pairs in w0
// and w1, zero past count: fp8 codes widened (Widen), bf16 words as they lie.
template <bool kBf16>
SIMDATTN_PAIRS_TARGET inline void LoadPairs(const Lookup& t, const uint8_t* row,
                                            size_t count, __m512i& w0,
                                            __m512i& w1) {
  if constexpr (kBf16) {
    w0 = _mm512_maskz_loadu_epi16(WordMask(count), row);
    w1 = _mm512_maskz_loadu_epi16(count > 32 ? WordMask(count - 32) : 0,
                                  row + 64);
  } else {
    Widen(t, _mm512_maskz_loadu_epi8(CodeMask(count), row), w0, w1);
  }
}

SIMDATTN_PAIRS_TARGET inline __m512 Dot(__m512 acc, __m512i pairs,
                                        const uint32_t* operand) {
  return _mm512_dpbf16_ps(acc, (__m512bh)pairs,
                          (__m512bh)_mm512_loadu_si512(operand));
}

// The sums of a, b, c and d's lanes.
SIMDATTN_PAIRS_TARGET inline __m128 Sum4(__m512 a, __m512 b, __m512 c,
                                         __m512 d) {
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
template <int R, bool kBf16>
SIMDATTN_PAIRS_TARGET void ScoresOf(const Lookup& t, const uint32_t* q,
                                    size_t q_stride, const uint8_t* keys,
                                    size_t key_stride, size_t n, size_t cols,
                                    float alpha, float* scores,
                                    size_t score_stride) {
  // Two accumulators per key for one row: 8 chains of vdpbf16ps in flight.
  constexpr int kAccs = R == 1 ? 2 : 1;
  constexpr size_t kRowBytes = kBf16 ? 2 * kCodes : kCodes;  // A chunk's.
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
      for (int kk = 0; kk < 4; ++kk) {
        __m512i w0, w1;
        LoadPairs<kBf16>(t, keys + (j + kk) * key_stride + c * kRowBytes,
                         cols - c * kCodes, w0, w1);
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
      LoadPairs<kBf16>(t, keys + j * key_stride + c * kRowBytes,
                       cols - c * kCodes, w0, w1);
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

// Four vectors, passed by value (the accumulators' address never taken).
struct Quad {
  __m512 v[4];
};

// v[i]'s 128-bit block L to v[L]'s block i (its own inverse): between the
// natural order of 64 floats and fp8 P V's accumulators, whose vector i
// holds dims 16L + 4i + [0, 4) in block L (Widen over byte-interleaved
// rows).
SIMDATTN_PAIRS_TARGET inline Quad TransposeBlocks(Quad a) {
  const __m512 t0 = _mm512_shuffle_f32x4(a.v[0], a.v[1], 0x44);
  const __m512 t1 = _mm512_shuffle_f32x4(a.v[2], a.v[3], 0x44);
  const __m512 t2 = _mm512_shuffle_f32x4(a.v[0], a.v[1], 0xEE);
  const __m512 t3 = _mm512_shuffle_f32x4(a.v[2], a.v[3], 0xEE);
  return {
      {_mm512_shuffle_f32x4(t0, t1, 0x88), _mm512_shuffle_f32x4(t0, t1, 0xDD),
       _mm512_shuffle_f32x4(t2, t3, 0x88), _mm512_shuffle_f32x4(t2, t3, 0xDD)}};
}

SIMDATTN_PAIRS_TARGET inline __mmask16 FloatMask(size_t count) {
  return count >= 16 ? __mmask16{0xFFFF}
                     : static_cast<__mmask16>((1u << count) - 1);
}

// From the natural order of a chunk's 64 floats to bf16 rows' P V
// accumulators, whose vectors 2h and 2h + 1 hold dims 32h + 8L + [0, 4) and
// 32h + 8L + [4, 8) in block L (vpunpck of two rows' words), and back.
SIMDATTN_PAIRS_TARGET inline Quad ToWordPairOrder(Quad a) {
  Quad out;
  for (int h = 0; h < 2; ++h) {
    out.v[2 * h] = _mm512_shuffle_f32x4(a.v[2 * h], a.v[2 * h + 1], 0x88);
    out.v[2 * h + 1] = _mm512_shuffle_f32x4(a.v[2 * h], a.v[2 * h + 1], 0xDD);
  }
  return out;
}
SIMDATTN_PAIRS_TARGET inline Quad FromWordPairOrder(Quad a) {
  Quad out;
  for (int h = 0; h < 2; ++h) {
    const __m512 x = _mm512_shuffle_f32x4(a.v[2 * h], a.v[2 * h + 1], 0x44);
    const __m512 y = _mm512_shuffle_f32x4(a.v[2 * h], a.v[2 * h + 1], 0xEE);
    out.v[2 * h] = _mm512_shuffle_f32x4(x, x, 0xD8);
    out.v[2 * h + 1] = _mm512_shuffle_f32x4(y, y, 0xD8);
  }
  return out;
}

// Between the natural order and ProductOf's.
template <bool kBf16>
SIMDATTN_PAIRS_TARGET inline Quad ToPairOrder(Quad a) {
  return kBf16 ? ToWordPairOrder(a) : TransposeBlocks(a);
}
template <bool kBf16>
SIMDATTN_PAIRS_TARGET inline Quad ToNaturalOrder(Quad a) {
  return kBf16 ? FromWordPairOrder(a) : TransposeBlocks(a);
}

// A chunk's load masks for its first `count` (<= 64) elements: fp8 codes'
// or bf16 words' (two vectors).
struct ChunkMasks {
  __mmask64 codes = 0;
  __mmask32 words[2] = {0, 0};
};
SIMDATTN_PAIRS_TARGET inline ChunkMasks MasksFor(size_t count) {
  ChunkMasks m;
  m.codes = CodeMask(count);
  m.words[0] = WordMask(count);
  m.words[1] = count > 32 ? WordMask(count - 32) : 0;
  return m;
}

// A chunk of two value rows, even and odd (none where !pair), interleaved as
// pairs in w[0, 4): ProductOf's order.
template <bool kBf16>
SIMDATTN_PAIRS_TARGET __attribute__((always_inline)) inline void LoadValuePairs(
    const Lookup& t, const ChunkMasks& m, const uint8_t* even,
    const uint8_t* odd, bool pair, __m512i w[4]) {
  if constexpr (kBf16) {
#pragma GCC unroll 4
    for (size_t h = 0; h < 2; ++h) {
      const __m512i e = _mm512_maskz_loadu_epi16(m.words[h], even + 64 * h);
      const __m512i o =
          _mm512_maskz_loadu_epi16(pair ? m.words[h] : 0, odd + 64 * h);
      w[2 * h] = _mm512_unpacklo_epi16(e, o);
      w[2 * h + 1] = _mm512_unpackhi_epi16(e, o);
    }
  } else {
    const __m512i e = _mm512_maskz_loadu_epi8(m.codes, even);
    const __m512i o = _mm512_maskz_loadu_epi8(pair ? m.codes : 0, odd);
    Widen(t, _mm512_unpacklo_epi8(e, o), w[0], w[1]);
    Widen(t, _mm512_unpackhi_epi8(e, o), w[2], w[3]);
  }
}

// a += the products of values j and j + 1 (j alone where !pair) with their
// weights' pair (`pair_weights`, rows weight_stride apart).
template <int R, int C, bool kBf16>
SIMDATTN_PAIRS_TARGET __attribute__((always_inline)) inline void AddValuePairs(
    const Lookup& t, const ChunkMasks (&masks)[C], const uint8_t* row,
    size_t value_stride, bool pair, const uint32_t* pair_weights,
    size_t weight_stride, __m512 (&a)[R][C][4]) {
  constexpr size_t kRowBytes = kBf16 ? 2 * kCodes : kCodes;  // A chunk's.
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    __m512i w[4];
    LoadValuePairs<kBf16>(t, masks[c], row + c * kRowBytes,
                          row + c * kRowBytes + value_stride, pair, w);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512bh weight = (__m512bh)_mm512_set1_epi32(
          static_cast<int>(pair_weights[r * weight_stride]));
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) {
        a[r][c][b] = _mm512_dpbf16_ps(a[r][c][b], (__m512bh)w[b], weight);
      }
    }
  }
}

// acc += P V for R rows, C chunks of 64 dims held in registers from chunk
// c0 on. Its loops over rows, chunks and vectors are unrolled by pragma:
// else GCC 12 kept the accumulators in memory, stored on every step.
template <int R, int C, bool kBf16>
SIMDATTN_PAIRS_TARGET void ProductOf(const Lookup& t, const uint32_t* weights,
                                     size_t weight_stride,
                                     const uint8_t* values, size_t value_stride,
                                     size_t n, size_t cols, size_t c0,
                                     float* acc, size_t acc_stride) {
  constexpr size_t kRowBytes = kBf16 ? 2 * kCodes : kCodes;  // A chunk's.
  __m512 a[R][C][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      Quad q;
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) {
        const size_t dim = (c0 + c) * kCodes + 16 * b;
        q.v[b] = dim < cols ? _mm512_maskz_loadu_ps(FloatMask(cols - dim),
                                                    acc + r * acc_stride + dim)
                            : _mm512_setzero_ps();
      }
      q = ToPairOrder<kBf16>(q);
      for (int b = 0; b < 4; ++b) a[r][c][b] = q.v[b];
    }
  }
  ChunkMasks masks[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    const size_t first = (c0 + c) * kCodes;
    masks[c] = MasksFor(first < cols ? cols - first : 0);
  }
  const uint8_t* rows = values + c0 * kRowBytes;
  size_t j = 0;
  for (; j + 2 <= n; j += 2) {
    AddValuePairs<R, C, kBf16>(t, masks, rows + j * value_stride, value_stride,
                               true, weights + j / 2, weight_stride, a);
  }
  if (j < n) {
    AddValuePairs<R, C, kBf16>(t, masks, rows + j * value_stride, value_stride,
                               false, weights + j / 2, weight_stride, a);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const Quad q = ToNaturalOrder<kBf16>(
          {{a[r][c][0], a[r][c][1], a[r][c][2], a[r][c][3]}});
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) {
        const size_t dim = (c0 + c) * kCodes + 16 * b;
        if (dim < cols) {
          _mm512_mask_storeu_ps(acc + r * acc_stride + dim,
                                FloatMask(cols - dim), q.v[b]);
        }
      }
    }
  }
}

// f(integral_constant<int, R>) for R = rows, 1 to kMost (<= 4).
template <int kMost = 4, class F>
void WithRows(size_t rows, const F& f) {
  if (rows <= 1) return f(std::integral_constant<int, 1>());
  if constexpr (kMost == 2) {
    return f(std::integral_constant<int, 2>());
  } else {
    if (rows == 2) return f(std::integral_constant<int, 2>());
    if (rows == 3) return f(std::integral_constant<int, 3>());
    return f(std::integral_constant<int, 4>());
  }
}

// f(bool_constant<type is kBF16>) and its lookup tables (fp8's only).
template <class F>
void WithType(KVType type, const F& f) {
  if (type == KVType::kBF16) {
    f(std::true_type(), Lookup{});
  } else {
    f(std::false_type(), LoadLookup(type));
  }
}

}  // namespace

SIMDATTN_PAIRS_TARGET bool RoundWeightPairs(const float* p, size_t n,
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

bool DecodePairsUsable(KVType, int64_t target) {
  return IsAvx512Target(target) && ThisCpu().avx512_bf16 &&
         ThisCpu().avx512_vbmi;
}

void PairScores(KVType type, const uint32_t* queries, size_t rows,
                const uint8_t* keys, size_t key_stride, size_t n, size_t cols,
                float alpha, float* scores, size_t score_stride) {
  WithType(type, [&](auto bf16, const Lookup& t) {
    WithRows(rows, [&](auto r) {
      ScoresOf<decltype(r)::value, decltype(bf16)::value>(
          t, queries, PairQueryStride(cols), keys, key_stride, n, cols, alpha,
          scores, score_stride);
    });
  });
}

void PairWeightsTimesValues(KVType type, const uint32_t* weights,
                            size_t weight_stride, size_t rows,
                            const uint8_t* values, size_t value_stride,
                            size_t n, size_t cols, float* acc,
                            size_t acc_stride) {
  const size_t chunks = (cols + kCodes - 1) / kCodes;
  // Rows two by two: each pass reads whole value rows (a pass of 4 rows over
  // half of each ran 1.3x as long from memory; the same bits).
  if (rows > 2) {
    for (size_t r0 = 0; r0 < rows; r0 += 2) {
      PairWeightsTimesValues(type, weights + r0 * weight_stride, weight_stride,
                             std::min<size_t>(2, rows - r0), values,
                             value_stride, n, cols, acc + r0 * acc_stride,
                             acc_stride);
    }
    return;
  }
  WithType(type, [&](auto bf16, const Lookup& t) {
    WithRows<2>(rows, [&](auto r) {
      // 16 accumulators: two chunks (128 dims) a pass.
      constexpr int kRows = decltype(r)::value;
      constexpr int kChunks = 2;
      for (size_t c0 = 0; c0 < chunks; c0 += kChunks) {
        ProductOf<kRows, kChunks, decltype(bf16)::value>(
            t, weights, weight_stride, values, value_stride, n, cols, c0, acc,
            acc_stride);
      }
    });
  });
}

SIMDATTN_PAIRS_TARGET float QueryPairs(KVType type, const float* q, size_t rows,
                                       size_t cols, size_t stride,
                                       uint32_t* out) {
  const __m512 infinity =
      _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 largest = _mm512_setzero_ps();
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; c += 16) {
      const __m512 x = _mm512_abs_ps(
          _mm512_maskz_loadu_ps(FloatMask(cols - c), q + r * stride + c));
      if (_mm512_cmp_ps_mask(x, infinity, _CMP_LT_OQ) != 0xFFFF) return 0.0f;
      largest = _mm512_max_ps(largest, x);
    }
  }
  const float most = _mm512_reduce_max_ps(largest);
  // A denormal largest is declined: its power, 2^(1 - e), is no float.
  if (most != 0.0f && most < 0x1p-126f) return 0.0f;
  int e = 0;
  std::frexp(most, &e);  // most in [2^(e-1), 2^e); e = 0 for 0.
  const __m512 power = _mm512_set1_ps(std::ldexp(1.0f, 1 - e));  // Exact.
  const __m512 smallest = _mm512_set1_ps(0x1p-126f);
  const size_t q_stride = PairQueryStride(cols);
  std::memset(out, 0, rows * q_stride * sizeof(uint32_t));
  for (size_t r = 0; r < rows; ++r) {
    auto* words = reinterpret_cast<uint16_t*>(out + r * q_stride);
    for (size_t c = 0; c < cols; c += 16) {
      const __m512 x = _mm512_mul_ps(
          _mm512_maskz_loadu_ps(FloatMask(cols - c), q + r * stride + c),
          power);
      const __m512 magnitude = _mm512_abs_ps(x);
      if ((_mm512_cmp_ps_mask(magnitude, smallest, _CMP_LT_OQ) &
           _mm512_cmp_ps_mask(magnitude, _mm512_setzero_ps(), _CMP_NEQ_OQ)) !=
          0) {
        return 0.0f;
      }
      // Nearest even, as ToBFloat16 (finite, normal or zero here).
      const __m256i bits = (__m256i)_mm512_cvtneps_pbh(x);
      // Sixteen elements: WordOf's two runs of 8 (bf16 rows: one of 16).
      uint16_t* first = words + c / kCodes * kCodes + WordOf(type, c % kCodes);
      uint16_t* second =
          words + c / kCodes * kCodes + WordOf(type, c % kCodes + 8);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(first),
                       _mm256_castsi256_si128(bits));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(second),
                       _mm256_extracti128_si256(bits, 1));
    }
  }
  return 1.0f / _mm512_cvtss_f32(power);
}

#elif !(defined(__aarch64__) && defined(__GNUC__) && defined(__linux__))
// Neither x86-64 nor Arm's BFDOT (decode_pairs_arm.cc): never called
// (DecodePairsUsable).

float QueryPairs(KVType, const float*, size_t, size_t, size_t, uint32_t*) {
  return 0.0f;
}

bool DecodePairsUsable(KVType, int64_t) { return false; }
void PairScores(KVType, const uint32_t*, size_t, const uint8_t*, size_t, size_t,
                size_t, float, float*, size_t) {}
bool RoundWeightPairs(const float*, size_t, uint32_t*) { return false; }
void PairWeightsTimesValues(KVType, const uint32_t*, size_t, size_t,
                            const uint8_t*, size_t, size_t, size_t, float*,
                            size_t) {}

#endif

}  // namespace internal
}  // namespace simdattn
