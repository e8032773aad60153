// Products of bf16 matrices on Intel AMX tiles (tdpbf16ps), for the bf16
// arithmetic of MatMul and fused attention. Internal.
//
// Highway 1.0.3 has no AMX (nor any native bf16 dot product), so these are
// intrinsics, compiled with target attributes: the products called only
// where AmxUsable(), the packing where the CPU has AVX512_BF16. AMX treats
// subnormal bf16 operands and results as zero.
//
// Operands in uint32 "pairs" (two bf16 along the reduction dimension, the
// first in the low half), in whole 16 x 16 tiles (AmxTiles).
#ifndef SIMDATTN_SRC_OPS_AMX_TILES_H_
#define SIMDATTN_SRC_OPS_AMX_TILES_H_

#include <cstddef>
#include <cstdint>

namespace simdattn {
namespace internal {

// Rows of a tile, pairs in a tile row: A's rows, C's rows and columns and
// the pairs of a product come in multiples of these.
inline constexpr size_t kAmxTileRows = 16;
inline constexpr size_t kAmxTilePairs = 16;

// The CPU has AMX-BF16 and the OS granted this process the tile state
// (Linux asks once, on the first call).
bool AmxUsable();

// A task's use of the tiles: configures them for this thread on
// construction and releases them (the core may leave AMX's power state)
// on destruction. Tiles are per thread, so every parallel task that calls
// AmxProduct holds one.
class AmxScope {
 public:
  AmxScope();
  ~AmxScope();
  AmxScope(const AmxScope&) = delete;
  AmxScope& operator=(const AmxScope&) = delete;
};

// Where an operand's 16 x 16 tiles of pairs lie: tile (i, q), the i-th
// along A's rows or B's columns and the q-th along the pairs, at base + i *
// tile_step + q * pair_step, its 16 rows row_stride pairs apart. A tile
// whose rows are 64 bytes apart (Strips) loads from consecutive cache lines.
struct AmxTiles {
  const uint32_t* base;
  size_t row_stride, tile_step, pair_step;

  // A's rows: row r's pairs at a + r * stride.
  static AmxTiles Rows(const uint32_t* a, size_t stride) {
    return {a, stride, kAmxTileRows * stride, kAmxTilePairs};
  }
  // B's "VNNI" rows: pair p of column n at b + p * stride + n.
  static AmxTiles Columns(const uint32_t* b, size_t stride) {
    return {b, stride, kAmxTileRows, kAmxTilePairs * stride};
  }
  // B as strips of 16 columns, each `pairs` pairs deep: pair p of column n
  // at b + (n / 16) * 16 * pairs + p * 16 + n % 16 (PackPairPanels' layout
  // for panels of 16 columns); every tile 1 KiB, contiguous.
  static AmxTiles Strips(const uint32_t* b, size_t pairs) {
    return {b, kAmxTileRows, kAmxTileRows * pairs,
            kAmxTilePairs * kAmxTileRows};
  }
  const uint32_t* Tile(size_t i, size_t q) const {
    return base + i * tile_step + q * pair_step;
  }
};

// What takes C's blocks when they do not go straight into C: Finish gets
// the block at C's rows [r, r + rows) and columns [n, n + cols) (rows and
// cols 16 or 32) as floats, 32 apart, and may apply an epilogue or drop
// what lies past C's edge.
class AmxBlocks {
 public:
  static constexpr size_t kStride = 2 * kAmxTileRows;
  virtual void Finish(const float* block, size_t r, size_t n, size_t rows,
                      size_t cols) const = 0;

 protected:
  ~AmxBlocks() = default;
};

// C (rows x cols floats, ldc apart) = A B: A rows x pairs, B pairs x cols;
// rows and cols multiples of 16, pairs of kAmxTilePairs. Blocks of 32 x 32
// go row by row, each row's blocks in turn (its A tiles reused from L1 by
// every block: wide rows of blocks run faster, bench/RESULTS.md). Into
// `blocks` instead of C when it is not null. Under an AmxScope.
void AmxProduct(const AmxTiles& a, const AmxTiles& b, size_t rows, size_t cols,
                size_t pairs, float* c, size_t ldc,
                const AmxBlocks* blocks = nullptr);
inline void AmxProduct(const uint32_t* a, size_t a_stride, const uint32_t* b,
                       size_t b_stride, size_t rows, size_t cols, size_t pairs,
                       float* c, size_t ldc) {
  AmxProduct(AmxTiles::Rows(a, a_stride), AmxTiles::Columns(b, b_stride), rows,
             cols, pairs, c, ldc);
}

// The packing, on AVX512_BF16 (which every AMX CPU has; MatMul's vdpbf16ps
// kernel uses it too), in plain C++ off x86 (Arm's BFDOT pairs):
// out[j] = (bf16(x[2j]), bf16(x[2j + 1])) for j < pairs, x[i] = 0 past n:
// a row of floats as A's pairs. Rounds to nearest even.
void PairsOfRow(const float* x, size_t n, size_t pairs, uint32_t* out);

// out[j] = (bf16(lo[j]), bf16(hi[j])) for j < n, hi null meaning zeros: two
// rows of floats interleaved as a row of B's pairs. Rounds to nearest even.
void InterleavedPairs(const float* lo, const float* hi, size_t n,
                      uint32_t* out);

// The same for two rows of bf16 (their bits), either null meaning zeros:
// the words as they lie, nothing rounded.
void InterleavedWords(const uint16_t* lo, const uint16_t* hi, size_t n,
                      uint32_t* out);

// out[c * out_stride + r] = in[r * in_stride + c] for r, c < 16: a 16 x 16
// block of pairs transposed (rows of pairs by key into B's by pair).
void TransposeTile(const uint32_t* in, size_t in_stride, uint32_t* out,
                   size_t out_stride);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_AMX_TILES_H_
