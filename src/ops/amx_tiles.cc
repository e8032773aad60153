#include "src/ops/amx_tiles.h"

#include <cstdlib>

#include "src/common/cpu.h"
#include "src/ops/bf16_pairs.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define SIMDATTN_HAVE_AMX_KERNELS 1
#endif

namespace simdattn {
namespace internal {

#ifdef SIMDATTN_HAVE_AMX_KERNELS
#define SIMDATTN_AMX_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))
#define SIMDATTN_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

// Every tile 16 rows x 64 bytes (16 pairs or 16 floats).
struct TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
  constexpr TileConfig() {
    for (size_t t = 0; t < 8; ++t) {
      bytes_per_row[t] = 64;
      rows[t] = kAmxTileRows;
    }
  }
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");
// In memory, whole: the compiler does not see LDTILECFG read all 64 bytes
// of a local (GCC 12 dropped the stores to one).
constexpr TileConfig kTileConfig;

SIMDATTN_AMX_TARGET void LoadConfig() { _tile_loadconfig(&kTileConfig); }

SIMDATTN_AMX_TARGET void Release() { _tile_release(); }

// C's 16 R rows x 16 N columns = A's R row tiles (from i) times B's N
// column tiles (from j), R and N 1 or 2: each A tile meets N B tiles and
// each B tile R A tiles, so a 2 x 2 block loads 4 tiles per 4 products
// where a row of 4 C tiles loads 5. Tiles 0-3 hold C (row-major), 4-5 A,
// 6-7 B.
template <int R, int N>
SIMDATTN_AMX_TARGET void BlockOfTiles(const AmxTiles& a, size_t i,
                                      const AmxTiles& b, size_t j, size_t pairs,
                                      float* c, size_t ldc) {
  const size_t a_bytes = a.row_stride * sizeof(uint32_t);
  const size_t b_bytes = b.row_stride * sizeof(uint32_t);
  const size_t c_bytes = ldc * sizeof(float);
  float* c1 = c + kAmxTileRows * ldc;
  _tile_zero(0);
  if constexpr (N > 1) _tile_zero(1);
  if constexpr (R > 1) _tile_zero(2);
  if constexpr (R > 1 && N > 1) _tile_zero(3);
  for (size_t q = 0; q < pairs / kAmxTilePairs; ++q) {
    _tile_loadd(4, a.Tile(i, q), a_bytes);
    _tile_loadd(6, b.Tile(j, q), b_bytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (N > 1) {
      _tile_loadd(7, b.Tile(j + 1, q), b_bytes);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (R > 1) {
      _tile_loadd(5, a.Tile(i + 1, q), a_bytes);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (N > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, c_bytes);
  if constexpr (N > 1) _tile_stored(1, c + 16, c_bytes);
  if constexpr (R > 1) _tile_stored(2, c1, c_bytes);
  if constexpr (R > 1 && N > 1) _tile_stored(3, c1 + 16, c_bytes);
}

}  // namespace

bool AmxUsable() {
  static const bool usable = [] {
    if (!ThisCpu().amx_bf16) return false;
#ifdef __linux__
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
#else
    return false;
#endif
  }();
  return usable;
}

AmxScope::AmxScope() { LoadConfig(); }
AmxScope::~AmxScope() { Release(); }

void AmxProduct(const AmxTiles& a, const AmxTiles& b, size_t rows, size_t cols,
                size_t pairs, float* c, size_t ldc, const AmxBlocks* blocks) {
  constexpr size_t kBlock = 2 * kAmxTileRows;  // Rows and columns.
  alignas(64) float block[kBlock * AmxBlocks::kStride];
  for (size_t r = 0; r < rows; r += kBlock) {
    const bool two_rows = rows - r >= kBlock;
    for (size_t n = 0; n < cols; n += kBlock) {
      const bool two_cols = cols - n >= kBlock;
      const auto product =
          two_rows ? (two_cols ? BlockOfTiles<2, 2> : BlockOfTiles<2, 1>)
                   : (two_cols ? BlockOfTiles<1, 2> : BlockOfTiles<1, 1>);
      const size_t i = r / kAmxTileRows, j = n / kAmxTileRows;
      if (blocks == nullptr) {
        product(a, i, b, j, pairs, c + r * ldc + n, ldc);
        continue;
      }
      product(a, i, b, j, pairs, block, AmxBlocks::kStride);
      blocks->Finish(block, r, n, two_rows ? kBlock : kAmxTileRows,
                     two_cols ? kBlock : kAmxTileRows);
    }
  }
}

SIMDATTN_BF16_TARGET void PairsOfRow(const float* x, size_t n, size_t pairs,
                                     uint32_t* out) {
  for (size_t j = 0; j < pairs; j += 16) {
    // Floats [2j, 2j + 32) of x, zeros past n.
    const size_t i = 2 * j;
    const size_t left = i < n ? n - i : 0;
    const __mmask16 lo_mask =
        static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
    const __mmask16 hi_mask =
        static_cast<__mmask16>(left >= 32   ? 0xFFFF
                               : left <= 16 ? 0
                                            : (1u << (left - 16)) - 1);
    const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, x + i);
    const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, x + i + 16);
    // cvtne2ps_pbh(hi, lo): lo's bf16 in the low 16 halves, so that
    // consecutive floats stay consecutive: pairs (2j, 2j + 1) as they lie.
    const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    const size_t count = pairs - j < 16 ? pairs - j : 16;
    _mm512_mask_storeu_epi32(out + j, static_cast<__mmask16>((1u << count) - 1),
                             packed);
  }
}

SIMDATTN_BF16_TARGET void InterleavedPairs(const float* lo, const float* hi,
                                           size_t n, uint32_t* out) {
  for (size_t j = 0; j < n; j += 16) {
    const size_t count = n - j < 16 ? n - j : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
    const __m512 l = _mm512_maskz_loadu_ps(mask, lo + j);
    const __m512 h = hi == nullptr ? _mm512_setzero_ps()
                                   : _mm512_maskz_loadu_ps(mask, hi + j);
    // [lo's 16 bf16 | hi's 16], then interleaved: pair j = (lo[j], hi[j]).
    const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh(h, l);
    const __m512i order = _mm512_set_epi16(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
        6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    _mm512_mask_storeu_epi32(out + j, mask,
                             _mm512_permutexvar_epi16(order, halves));
  }
}

namespace {

// Words [j, j + 16) of a bf16 row (zeros past the mask, or for a null row)
// as the low halves of 16 uint32. The zero-masked forms with every lane
// kept, as in TransposeTile.
SIMDATTN_BF16_TARGET inline __m512i WordsAt(const uint16_t* row, size_t j,
                                            __mmask16 mask) {
  return row == nullptr ? _mm512_setzero_si512()
                        : _mm512_maskz_cvtepu16_epi32(
                              0xFFFF, _mm256_maskz_loadu_epi16(mask, row + j));
}

}  // namespace

SIMDATTN_BF16_TARGET void InterleavedWords(const uint16_t* lo,
                                           const uint16_t* hi, size_t n,
                                           uint32_t* out) {
  for (size_t j = 0; j < n; j += 16) {
    const size_t count = n - j < 16 ? n - j : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
    _mm512_mask_storeu_epi32(
        out + j, mask,
        _mm512_or_si512(
            WordsAt(lo, j, mask),
            _mm512_maskz_slli_epi32(0xFFFF, WordsAt(hi, j, mask), 16)));
  }
}

// Four stages of AVX-512 shuffles: 32-bit and 64-bit interleaves within
// 128-bit lanes, after which u[4i + k]'s lane L holds column 4L + k of rows
// 4i .. 4i + 3; then whole lanes gathered across u[k], u[4 + k], u[8 + k]
// and u[12 + k]. The zero-masked forms with every lane kept: GCC 12's
// unmasked ones start from an "uninitialised" vector that -Wuninitialized
// flags at -O3.
SIMDATTN_BF16_TARGET void TransposeTile(const uint32_t* in, size_t in_stride,
                                        uint32_t* out, size_t out_stride) {
  constexpr __mmask16 kAll16 = 0xFFFF;
  constexpr __mmask8 kAll8 = 0xFF;
  __m512i r[16], t[16], u[16];
  for (size_t i = 0; i < 16; ++i) {
    r[i] = _mm512_loadu_si512(in + i * in_stride);
  }
  for (size_t i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(kAll16, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(kAll16, r[i], r[i + 1]);
  }
  for (size_t i = 0; i < 16; i += 4) {
    u[i] = _mm512_maskz_unpacklo_epi64(kAll8, t[i], t[i + 2]);
    u[i + 1] = _mm512_maskz_unpackhi_epi64(kAll8, t[i], t[i + 2]);
    u[i + 2] = _mm512_maskz_unpacklo_epi64(kAll8, t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_maskz_unpackhi_epi64(kAll8, t[i + 1], t[i + 3]);
  }
  for (size_t k = 0; k < 4; ++k) {
    // Lanes 0-1 and 2-3 of rows 0-7, then of rows 8-15.
    const __m512i a01 =
        _mm512_maskz_shuffle_i32x4(kAll16, u[k], u[4 + k], 0x44);
    const __m512i a23 =
        _mm512_maskz_shuffle_i32x4(kAll16, u[k], u[4 + k], 0xEE);
    const __m512i b01 =
        _mm512_maskz_shuffle_i32x4(kAll16, u[8 + k], u[12 + k], 0x44);
    const __m512i b23 =
        _mm512_maskz_shuffle_i32x4(kAll16, u[8 + k], u[12 + k], 0xEE);
    _mm512_storeu_si512(out + k * out_stride,
                        _mm512_maskz_shuffle_i32x4(kAll16, a01, b01, 0x88));
    _mm512_storeu_si512(out + (4 + k) * out_stride,
                        _mm512_maskz_shuffle_i32x4(kAll16, a01, b01, 0xDD));
    _mm512_storeu_si512(out + (8 + k) * out_stride,
                        _mm512_maskz_shuffle_i32x4(kAll16, a23, b23, 0x88));
    _mm512_storeu_si512(out + (12 + k) * out_stride,
                        _mm512_maskz_shuffle_i32x4(kAll16, a23, b23, 0xDD));
  }
}

#else  // No AMX kernels: AmxUsable() is false and the products are never
       // called. The packing, in plain C++, serves BFDOT's pairs (Arm):
       // O(keys x dims) a tile against the products' O(rows x keys x dims).

bool AmxUsable() { return false; }
AmxScope::AmxScope() { std::abort(); }
AmxScope::~AmxScope() = default;
void AmxProduct(const AmxTiles&, const AmxTiles&, size_t, size_t, size_t,
                float*, size_t, const AmxBlocks*) {
  std::abort();
}
void PairsOfRow(const float* x, size_t n, size_t pairs, uint32_t* out) {
  for (size_t j = 0; j < pairs; ++j) {
    out[j] = BFloat16Pair(2 * j < n ? x[2 * j] : 0.0f,
                          2 * j + 1 < n ? x[2 * j + 1] : 0.0f);
  }
}
void InterleavedPairs(const float* lo, const float* hi, size_t n,
                      uint32_t* out) {
  for (size_t j = 0; j < n; ++j) {
    out[j] = BFloat16Pair(lo[j], hi == nullptr ? 0.0f : hi[j]);
  }
}
void InterleavedWords(const uint16_t* lo, const uint16_t* hi, size_t n,
                      uint32_t* out) {
  for (size_t j = 0; j < n; ++j) {
    out[j] = uint32_t{lo == nullptr ? uint16_t{0} : lo[j]} |
             uint32_t{hi == nullptr ? uint16_t{0} : hi[j]} << 16;
  }
}
void TransposeTile(const uint32_t* in, size_t in_stride, uint32_t* out,
                   size_t out_stride) {
  for (size_t r = 0; r < kAmxTileRows; ++r) {
    for (size_t c = 0; c < kAmxTileRows; ++c) {
      out[c * out_stride + r] = in[r * in_stride + c];
    }
  }
}

#endif  // SIMDATTN_HAVE_AMX_KERNELS

}  // namespace internal
}  // namespace simdattn
