// block_pairs.h's kernels: AVX512_VNNI and AVX512_VBMI by function
// attributes, chosen at run time (BlockPairsUsable), whatever Highway's
// targets.
#include "src/ops/block_pairs.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "src/common/element.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "src/ops/x86_sums.h"
#define SIMDATTN_HAVE_BLOCK_PAIRS 1
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's _mm512_undefined_* (in _mm512_castsi256_si512 and others) is a
// self-initialised variable, which its warnings report.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace simdattn {
namespace internal {
namespace {

// int16 weights per row, block and half: a tile's keys, then a zero
// partner for an odd last key and room for a vector's masked stores.
constexpr size_t kWeightStride = kBlockPairKeys + 32;

// What a call keeps in its scratch, for `blocks` blocks a row. The integer
// weights u (block_pairs.h) are held as two int16 halves, u = 2^15 high +
// low (low in [0, 2^15)).
struct Scratch {
  uint16_t* scales;  // blocks x kBlockPairKeys: d_jb's fp16 bits.
  int16_t* weights;  // kBlockPairRows x blocks x 2 x kWeightStride.
  float* steps;      // kBlockPairRows x blocks: m_b / kGrid.
  int32_t* sums;     // kBlockPairRows x blocks x 2: each half's sum.
  size_t blocks;

  static size_t Bytes(size_t blocks) {
    return blocks * (kBlockPairKeys * sizeof(uint16_t) +
                     kBlockPairRows * (2 * kWeightStride * sizeof(int16_t) +
                                       sizeof(float) + 2 * sizeof(int32_t)));
  }
  static Scratch At(void* memory, size_t blocks) {
    Scratch s;
    s.blocks = blocks;
    s.scales = static_cast<uint16_t*>(memory);
    s.weights = reinterpret_cast<int16_t*>(s.scales + blocks * kBlockPairKeys);
    s.steps = reinterpret_cast<float*>(s.weights + kBlockPairRows * blocks *
                                                       2 * kWeightStride);
    s.sums = reinterpret_cast<int32_t*>(s.steps + kBlockPairRows * blocks);
    return s;
  }
  // Row r's weights in block b: their high halves, then their low ones.
  int16_t* Weights(size_t r, size_t b) const {
    return weights + (r * blocks + b) * 2 * kWeightStride;
  }
};

}  // namespace

size_t BlockPairScratchBytes(size_t cols) {
  return Scratch::Bytes(cols / kQuantBlock);
}

#ifdef SIMDATTN_HAVE_BLOCK_PAIRS
#define SIMDATTN_BLOCK_TARGET                                     \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl," \
                        "avx512vnni,avx512vbmi")))

namespace {

// The grid's steps in m_b: u = w kGrid / m_b, |u| <= kGrid, has a high
// half in [-2^15, 2^15) and sums of 256 products of either half and a code
// stay below 2^30.
constexpr float kGrid = 32767.0f * 32768.0f;

// Groups of a query row BlockScores takes at most (head dims to 1024).
constexpr size_t kMaxScoreGroups = 16;

template <KVType kType>
using BlockOf =
    std::conditional_t<kType == KVType::kQ8_0, BlockQ8_0, BlockQ4_0>;

// vpermb's indices that spread two q4_0 blocks' 16 code bytes (a's, then
// b's) over 32 words, word w taking byte w / 2 of a (w even) or of b.
struct Spread {
  alignas(64) uint8_t index[64];
};
constexpr Spread MakeSpread() {
  Spread s{};
  for (size_t w = 0; w < 32; ++w) {
    s.index[2 * w] = static_cast<uint8_t>(w % 2 * 16 + w / 2);
  }
  return s;
}
constexpr Spread kSpread = MakeSpread();

SIMDATTN_BLOCK_TARGET inline __mmask16 FirstLanes(size_t count) {
  return count >= 16 ? __mmask16{0xFFFF}
                     : static_cast<__mmask16>((1u << count) - 1);
}

// d_jb of every key j of the runs and block b in s.scales, as fp16 bits:
// the rows read in order, as the products read them next (a gather per
// block and 16 keys took 4 times as long as the products on Zen 4, with
// the rows from memory).
void CollectScales(const BlockRun* runs, size_t run_count, size_t stride,
                   size_t block_bytes, const Scratch& s) {
  size_t j = 0;
  for (size_t i = 0; i < run_count; ++i) {
    const uint8_t* row = runs[i].rows;
    for (size_t k = 0; k < runs[i].keys; ++k, ++j, row += stride) {
      for (size_t b = 0; b < s.blocks; ++b) {
        std::memcpy(s.scales + b * kBlockPairKeys + j, row + b * block_bytes,
                    sizeof(uint16_t));
      }
    }
  }
}

// Row r's weights p[0, n) on the grid (block_pairs.h): s.Weights(r, b),
// s.steps and s.sums. False where a w is not finite or an m_b lies in (0,
// 2^-96) (its step would be a denormal).
SIMDATTN_BLOCK_TARGET bool QuantizeRow(const float* p, size_t n, size_t r,
                                       const Scratch& s) {
  for (size_t b = 0; b < s.blocks; ++b) {
    const uint16_t* d = s.scales + b * kBlockPairKeys;
    __m512 largest = _mm512_setzero_ps();
    __mmask16 nonfinite = 0;
    for (size_t j = 0; j < n; j += 16) {
      const __mmask16 m = FirstLanes(n - j);
      const __m512 w = _mm512_mul_ps(
          _mm512_maskz_loadu_ps(m, p + j),
          _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, d + j)));
      nonfinite |= _mm512_fpclass_ps_mask(w, 0x99);  // NaN or infinite.
      largest = _mm512_max_ps(largest, _mm512_abs_ps(w));
    }
    const float top = _mm512_reduce_max_ps(largest);
    if (nonfinite != 0 || (top > 0.0f && top < 0x1p-96f)) return false;
    const __m512 inverse = _mm512_set1_ps(top > 0.0f ? kGrid / top : 0.0f);
    int16_t* high = s.Weights(r, b);
    int16_t* low = high + kWeightStride;
    __m512i high_sum = _mm512_setzero_si512(), low_sum = high_sum;
    for (size_t j = 0; j < n; j += 16) {
      const __mmask16 m = FirstLanes(n - j);
      const __m512 w = _mm512_mul_ps(
          _mm512_maskz_loadu_ps(m, p + j),
          _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, d + j)));
      // Nearest even; |w| <= top, so |u| <= kGrid. Zeros past n.
      const __m512i u = _mm512_cvtps_epi32(_mm512_mul_ps(w, inverse));
      const __m512i h = _mm512_srai_epi32(u, 15);
      const __m512i l = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFF));
      high_sum = _mm512_add_epi32(high_sum, h);
      low_sum = _mm512_add_epi32(low_sum, l);
      _mm512_mask_cvtepi32_storeu_epi16(high + j, m, h);
      _mm512_mask_cvtepi32_storeu_epi16(low + j, m, l);
    }
    high[n] = low[n] = 0;  // An odd last key's partner.
    const size_t index = r * s.blocks + b;
    s.steps[index] = top / kGrid;
    s.sums[2 * index] = _mm512_reduce_add_epi32(high_sum);
    s.sums[2 * index + 1] = _mm512_reduce_add_epi32(low_sum);
  }
  return true;
}

// Block codes of rows a and b (kPair false: zeros for b) as int16 pairs
// in lo and hi, int32 lane l of each holding one dim of both: q4_0's
// nibbles unsigned (dims l and 16 + l), q8_0's codes (vpunpck's order: dims
// 8 (l / 4) + l % 4 and those 4 on, which Natural undoes).
template <KVType kType, bool kPair>
SIMDATTN_BLOCK_TARGET inline __attribute__((always_inline)) void Codes(
    __m512i spread, const uint8_t* a, const uint8_t* b, __m512i& lo,
    __m512i& hi) {
  if constexpr (kType == KVType::kQ4_0) {
    const __m128i qa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
    const __m128i qb =
        kPair ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b))
              : _mm_setzero_si128();
    const __m256i both =
        _mm256_inserti128_si256(_mm256_castsi128_si256(qa), qb, 1);
    const __m512i words = _mm512_maskz_permutexvar_epi8(
        0x5555555555555555ull, spread, _mm512_castsi256_si512(both));
    lo = _mm512_and_si512(words, _mm512_set1_epi16(15));
    hi = _mm512_srli_epi16(words, 4);
  } else {
    const __m512i wa = _mm512_cvtepi8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
    const __m512i wb =
        kPair ? _mm512_cvtepi8_epi16(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)))
              : _mm512_setzero_si512();
    lo = _mm512_unpacklo_epi16(wa, wb);
    hi = _mm512_unpackhi_epi16(wa, wb);
  }
}

// Sums of one row and block: [half of the weights][lo or hi codes].
using BlockSums = __m512i[2][2];

// sums += the products of keys `key` and key + 1 (rows a, a + stride; a
// alone where not kPair) for R rows from r0 and C blocks from b0.
template <KVType kType, int R, int C, bool kPair>
SIMDATTN_BLOCK_TARGET inline __attribute__((always_inline)) void AddKeys(
    __m512i spread, const Scratch& s, size_t r0, size_t b0, const uint8_t* a,
    size_t stride, size_t key, BlockSums (&sums)[R][C]) {
  constexpr size_t kBlockBytes = sizeof(BlockOf<kType>);
  constexpr size_t kCodesAt = offsetof(BlockOf<kType>, qs);
  for (int c = 0; c < C; ++c) {
    const uint8_t* block = a + (b0 + c) * kBlockBytes + kCodesAt;
    __m512i lo, hi;
    Codes<kType, kPair>(spread, block, block + stride, lo, hi);
    for (int r = 0; r < R; ++r) {
      const int16_t* weights = s.Weights(r0 + r, b0 + c) + key;
      for (int half = 0; half < 2; ++half) {
        int32_t pair;
        std::memcpy(&pair, weights + half * kWeightStride, sizeof(pair));
        const __m512i w = _mm512_set1_epi32(pair);
        sums[r][c][half][0] = _mm512_dpwssd_epi32(sums[r][c][half][0], lo, w);
        sums[r][c][half][1] = _mm512_dpwssd_epi32(sums[r][c][half][1], hi, w);
      }
    }
  }
}

// acc (+)= P V for R rows from r0 and C blocks from b0, the sums in
// registers over every run.
template <KVType kType, int R, int C>
SIMDATTN_BLOCK_TARGET void ProductOf(const Scratch& s, size_t r0, size_t b0,
                                     const BlockRun* runs, size_t run_count,
                                     size_t stride, bool accumulate,
                                     float* acc, size_t acc_stride) {
  const __m512i spread = _mm512_load_si512(kSpread.index);
  BlockSums sums[R][C];
  for (auto& row : sums) {
    for (auto& block : row) {
      for (auto& half : block) half[0] = half[1] = _mm512_setzero_si512();
    }
  }
  size_t key = 0;
  for (size_t i = 0; i < run_count; ++i) {
    const uint8_t* row = runs[i].rows;
    size_t k = 0;
    for (; k + 2 <= runs[i].keys; k += 2, row += 2 * stride) {
      AddKeys<kType, R, C, true>(spread, s, r0, b0, row, stride, key + k, sums);
    }
    if (k < runs[i].keys) {
      AddKeys<kType, R, C, false>(spread, s, r0, b0, row, stride, key + k,
                                  sums);
    }
    key += runs[i].keys;
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      const size_t index = (r0 + r) * s.blocks + b0 + c;
      __m512 f[2];  // Dims 0-15, 16-31: sum_half 2^15 high + low.
      for (int half = 0; half < 2; ++half) {
        __m512i v0 = sums[r][c][half][0], v1 = sums[r][c][half][1];
        if constexpr (kType == KVType::kQ8_0) {  // Natural order.
          const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
          const __m512i second =
              _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
          const __m512i lo = v0;
          v0 = _mm512_permutex2var_epi64(lo, first, v1);
          v1 = _mm512_permutex2var_epi64(lo, second, v1);
        } else {  // The codes' offset: values are nibbles minus 8.
          const __m512i offset =
              _mm512_set1_epi32(-8 * s.sums[2 * index + half]);
          v0 = _mm512_add_epi32(v0, offset);
          v1 = _mm512_add_epi32(v1, offset);
        }
        const __m512 scale = _mm512_set1_ps(half == 0 ? 32768.0f : 1.0f);
        f[0] = half == 0 ? _mm512_mul_ps(_mm512_cvtepi32_ps(v0), scale)
                         : _mm512_add_ps(f[0], _mm512_cvtepi32_ps(v0));
        f[1] = half == 0 ? _mm512_mul_ps(_mm512_cvtepi32_ps(v1), scale)
                         : _mm512_add_ps(f[1], _mm512_cvtepi32_ps(v1));
      }
      const __m512 step = _mm512_set1_ps(s.steps[index]);
      float* out = acc + (r0 + r) * acc_stride + (b0 + c) * kQuantBlock;
      __m512 f0 = _mm512_mul_ps(f[0], step);
      __m512 f1 = _mm512_mul_ps(f[1], step);
      if (accumulate) {
        f0 = _mm512_add_ps(f0, _mm512_loadu_ps(out));
        f1 = _mm512_add_ps(f1, _mm512_loadu_ps(out + 16));
      }
      _mm512_storeu_ps(out, f0);
      _mm512_storeu_ps(out + 16, f1);
    }
  }
}

// ProductOf for R rows from r0 over every block, 4 / R at a time (16 int32
// sums: half the registers).
template <KVType kType, int R>
void ProductRows(const Scratch& s, size_t r0, const BlockRun* runs,
                 size_t run_count, size_t stride, bool accumulate, float* acc,
                 size_t acc_stride) {
  constexpr size_t kBlocks = 4 / R;
  for (size_t b0 = 0; b0 < s.blocks; b0 += kBlocks) {
    const auto product = [&](auto c) {
      ProductOf<kType, R, decltype(c)::value>(s, r0, b0, runs, run_count,
                                              stride, accumulate, acc,
                                              acc_stride);
    };
    const size_t blocks = std::min(kBlocks, s.blocks - b0);
    if (blocks == 1) {
      product(std::integral_constant<int, 1>());
    } else if (blocks == 2) {
      product(std::integral_constant<int, 2>());
    } else if constexpr (R == 1) {
      if (blocks == 3) {
        product(std::integral_constant<int, 3>());
      } else {
        product(std::integral_constant<int, 4>());
      }
    }
  }
}

template <KVType kType>
void Product(const Scratch& s, size_t rows, const BlockRun* runs,
             size_t run_count, size_t stride, bool accumulate, float* acc,
             size_t acc_stride) {
  for (size_t r0 = 0; r0 < rows; r0 += 2) {
    if (rows - r0 >= 2) {
      ProductRows<kType, 2>(s, r0, runs, run_count, stride, accumulate, acc,
                            acc_stride);
    } else {
      ProductRows<kType, 1>(s, r0, runs, run_count, stride, accumulate, acc,
                            acc_stride);
    }
  }
}

// Scores.

// A query row as BlockScores reads it, per group of 64 key code bytes
// (q4_0: 4 blocks' nibbles, read as low and high halves; q8_0: 2 blocks'
// codes). Lane l of a group's int32 sums covers its bytes 4l to 4l + 3,
// of block l / 4 (q4_0) or l / 8 (q8_0) of the group.
struct QueryGroup {
  alignas(64) int8_t codes[2][64];  // Per byte of the key vectors.
  // The codes' offsets: q4_0's values are nibbles minus 8, q8_0's bytes
  // are read as unsigned (code + 128): -8 or -128 times the lane's codes.
  alignas(64) int32_t offsets[16];
  alignas(64) float scales[16];  // The lane's block's alpha d.
};

template <KVType kType>
constexpr size_t kGroupBlocks = kType == KVType::kQ4_0 ? 4 : 2;

// Query rows (int16 codes `code_stride` apart, alpha d per block) as
// QueryGroups: groups[r * group_count + g]; blocks past the row's zero.
template <KVType kType>
void FillQueryGroups(const int16_t* codes, size_t code_stride,
                     const float* scales, size_t rows, size_t blocks,
                     size_t group_count, QueryGroup* groups) {
  constexpr size_t kBlocks = kGroupBlocks<kType>;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t g = 0; g < group_count; ++g) {
      QueryGroup& q = groups[r * group_count + g];
      std::memset(&q, 0, sizeof(q));
      for (size_t k = 0; k < kBlocks && g * kBlocks + k < blocks; ++k) {
        const size_t b = g * kBlocks + k;
        const int16_t* x = codes + r * code_stride + b * kQuantBlock;
        for (size_t i = 0; i < kQuantBlock; ++i) {
          // q4_0: byte 16 k + i holds elements i and 16 + i.
          const size_t half = kType == KVType::kQ4_0 ? i / 16 : 0;
          const size_t byte =
              kType == KVType::kQ4_0 ? 16 * k + i % 16 : kQuantBlock * k + i;
          q.codes[half][byte] = static_cast<int8_t>(x[i]);
          q.offsets[byte / 4] +=
              (kType == KVType::kQ4_0 ? -8 : -128) * int32_t{x[i]};
        }
        const size_t lanes = 16 / kBlocks;
        std::fill_n(q.scales + k * lanes, lanes, scales[r * blocks + b]);
      }
    }
  }
}

// The vpermi2b indices that gather 4 q4_0 blocks' code bytes from 72
// bytes, and the vpermw ones of each lane's block scale word.
struct KeyIndices {
  alignas(64) uint8_t nibbles[64];
  alignas(64) uint16_t q4_scales[32];
  alignas(64) uint16_t q8_scales[32];
};
constexpr KeyIndices MakeKeyIndices() {
  KeyIndices t{};
  for (size_t i = 0; i < 64; ++i) {
    t.nibbles[i] = static_cast<uint8_t>(i / 16 * 18 + 2 + i % 16);
  }
  for (size_t l = 0; l < 16; ++l) {
    t.q4_scales[l] = static_cast<uint16_t>(l / 4 * 9);   // 18-byte blocks.
    t.q8_scales[l] = static_cast<uint16_t>(l / 8 * 17);  // 34-byte blocks.
  }
  return t;
}
constexpr KeyIndices kKeyIndices = MakeKeyIndices();

SIMDATTN_BLOCK_TARGET inline __mmask64 FirstBytes(size_t count) {
  return count >= 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}

// Group g of a key row (`row_bytes` long) as u8 code vectors (q4_0: low and
// high nibbles; q8_0: codes + 128 in keys[0]) and its lanes' block scales.
template <KVType kType>
SIMDATTN_BLOCK_TARGET inline __attribute__((always_inline)) void KeyGroup(
    const uint8_t* row, size_t row_bytes, size_t g, __m512i keys[2],
    __m512& scales) {
  constexpr size_t kBytes = kGroupBlocks<kType> * sizeof(BlockOf<kType>);
  const uint8_t* base = row + g * kBytes;
  const size_t bytes = std::min(kBytes, row_bytes - g * kBytes);
  const __m512i head = _mm512_maskz_loadu_epi8(FirstBytes(bytes), base);
  const uint16_t* scale_words;
  if constexpr (kType == KVType::kQ4_0) {
    const __m512i tail = _mm512_maskz_loadu_epi8(
        bytes > 64 ? FirstBytes(bytes - 64) : 0, base + 64);
    const __m512i packed = _mm512_permutex2var_epi8(
        head, _mm512_load_si512(kKeyIndices.nibbles), tail);
    const __m512i fifteen = _mm512_set1_epi8(15);
    keys[0] = _mm512_and_si512(packed, fifteen);
    keys[1] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), fifteen);
    scale_words = kKeyIndices.q4_scales;
  } else {
    constexpr size_t kBlock = sizeof(BlockQ8_0), kCodesAt = 2;
    const __m256i first =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + kCodesAt));
    const __m256i second =
        bytes > kBlock ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                             base + kBlock + kCodesAt))
                       : _mm256_setzero_si256();
    keys[0] = _mm512_xor_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(first), second, 1),
        _mm512_set1_epi8(-128));
    scale_words = kKeyIndices.q8_scales;
  }
  scales = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(
      _mm512_load_si512(scale_words), head)));
}

// Per row r < R and key k < K (rows keys[k]): f[r][k] += the group's
// per-lane scores, (sums times the key's scale) times the query's.
template <KVType kType, int R, int K>
SIMDATTN_BLOCK_TARGET inline __attribute__((always_inline)) void AddGroup(
    const QueryGroup* queries, size_t group_count, const uint8_t* const* keys,
    size_t row_bytes, size_t g, __m512 (&f)[R][K]) {
  for (int k = 0; k < K; ++k) {
    __m512i codes[2];
    __m512 key_scales;
    KeyGroup<kType>(keys[k], row_bytes, g, codes, key_scales);
    for (int r = 0; r < R; ++r) {
      const QueryGroup& q = queries[r * group_count + g];
      __m512i sums = _mm512_dpbusd_epi32(
          _mm512_load_si512(q.offsets), codes[0],
          _mm512_load_si512(q.codes[0]));
      if constexpr (kType == KVType::kQ4_0) {
        sums = _mm512_dpbusd_epi32(sums, codes[1],
                                   _mm512_load_si512(q.codes[1]));
      }
      f[r][k] = _mm512_fmadd_ps(
          _mm512_mul_ps(_mm512_cvtepi32_ps(sums), key_scales),
          _mm512_load_ps(q.scales), f[r][k]);
    }
  }
}

// scores[r * score_stride + j] for R rows and the run's keys j.
template <KVType kType, int R>
SIMDATTN_BLOCK_TARGET void ScoresOf(const QueryGroup* queries,
                                    size_t group_count, const uint8_t* rows,
                                    size_t n, size_t stride, size_t row_bytes,
                                    float* scores, size_t score_stride) {
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const uint8_t* keys[4] = {rows + j * stride, rows + (j + 1) * stride,
                              rows + (j + 2) * stride,
                              rows + (j + 3) * stride};
    __m512 f[R][4];
    for (auto& row : f) {
      for (__m512& v : row) v = _mm512_setzero_ps();
    }
    for (size_t g = 0; g < group_count; ++g) {
      AddGroup<kType, R, 4>(queries, group_count, keys, row_bytes, g, f);
    }
    for (int r = 0; r < R; ++r) {
      _mm_storeu_ps(scores + r * score_stride + j,
                    Sum4(f[r][0], f[r][1], f[r][2], f[r][3]));
    }
  }
  for (; j < n; ++j) {
    const uint8_t* key = rows + j * stride;
    __m512 f[R][1];
    for (auto& row : f) row[0] = _mm512_setzero_ps();
    for (size_t g = 0; g < group_count; ++g) {
      AddGroup<kType, R, 1>(queries, group_count, &key, row_bytes, g, f);
    }
    for (int r = 0; r < R; ++r) {
      scores[r * score_stride + j] = _mm512_reduce_add_ps(f[r][0]);
    }
  }
}

template <KVType kType>
void Scores(const int16_t* codes, size_t code_stride, const float* scales,
            size_t rows, size_t blocks, const BlockRun* runs, size_t run_count,
            size_t stride, float* scores, size_t score_stride) {
  constexpr size_t kBlocks = kGroupBlocks<kType>;
  const size_t group_count = (blocks + kBlocks - 1) / kBlocks;
  QueryGroup queries[kBlockPairRows * kMaxScoreGroups];
  FillQueryGroups<kType>(codes, code_stride, scales, rows, blocks,
                         group_count, queries);
  const size_t row_bytes = blocks * sizeof(BlockOf<kType>);
  size_t j = 0;
  for (size_t i = 0; i < run_count; ++i) {
    const auto run = [&](auto r) {
      ScoresOf<kType, decltype(r)::value>(queries, group_count, runs[i].rows,
                                          runs[i].keys, stride, row_bytes,
                                          scores + j, score_stride);
    };
    switch (rows) {
      case 1:
        run(std::integral_constant<int, 1>());
        break;
      case 2:
        run(std::integral_constant<int, 2>());
        break;
      case 3:
        run(std::integral_constant<int, 3>());
        break;
      default:
        run(std::integral_constant<int, 4>());
    }
    j += runs[i].keys;
  }
}

}  // namespace

bool BlockPairsUsable() {
  return __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("avx512vbmi");
}

bool BlockWeightsTimesValues(KVType type, const float* p, size_t rows,
                             size_t p_stride, const BlockRun* runs,
                             size_t run_count, size_t stride, size_t cols,
                             void* scratch, bool accumulate, float* acc,
                             size_t acc_stride) {
  const Scratch s = Scratch::At(scratch, cols / kQuantBlock);
  size_t n = 0;
  for (size_t i = 0; i < run_count; ++i) n += runs[i].keys;
  CollectScales(runs, run_count, stride,
               type == KVType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0),
               s);
  for (size_t r = 0; r < rows; ++r) {
    if (!QuantizeRow(p + r * p_stride, n, r, s)) return false;
  }
  if (type == KVType::kQ8_0) {
    Product<KVType::kQ8_0>(s, rows, runs, run_count, stride, accumulate, acc,
                           acc_stride);
  } else {
    Product<KVType::kQ4_0>(s, rows, runs, run_count, stride, accumulate, acc,
                           acc_stride);
  }
  return true;
}

bool BlockScores(KVType type, const int16_t* codes, size_t code_stride,
                 const float* scales, size_t rows, size_t blocks,
                 const BlockRun* runs, size_t run_count, size_t stride,
                 float* scores, size_t score_stride) {
  if (blocks > kMaxScoreGroups * kGroupBlocks<KVType::kQ8_0>) return false;
  if (type == KVType::kQ8_0) {
    Scores<KVType::kQ8_0>(codes, code_stride, scales, rows, blocks, runs,
                          run_count, stride, scores, score_stride);
  } else {
    Scores<KVType::kQ4_0>(codes, code_stride, scales, rows, blocks, runs,
                          run_count, stride, scores, score_stride);
  }
  return true;
}

#else  // !SIMDATTN_HAVE_BLOCK_PAIRS: never called (BlockPairsUsable).

bool BlockPairsUsable() { return false; }
bool BlockWeightsTimesValues(KVType, const float*, size_t, size_t,
                             const BlockRun*, size_t, size_t, size_t, void*,
                             bool, float*, size_t) {
  return false;
}
bool BlockScores(KVType, const int16_t*, size_t, const float*, size_t, size_t,
                 const BlockRun*, size_t, size_t, float*, size_t) {
  return false;
}

#endif  // SIMDATTN_HAVE_BLOCK_PAIRS

}  // namespace internal
}  // namespace simdattn
