// Products of bf16 matrices on Intel AMX tiles (tdpbf16ps), for the bf16
// arithmetic of MatMul and fused attention. Internal.
//
// Highway 1.0.3 has no AMX (nor any native bf16 dot product), so these are
// intrinsics, compiled with target attributes: the products called only
// where AmxUsable(), the packing where the CPU has AVX512_BF16. AMX treats
// subnormal bf16 operands and results as zero.
//
// Layouts, in uint32 "pairs" (two bf16 along the reduction dimension, the
// first in the low half):
//   A: row-major, row r's pairs at a + r * a_stride;
//   B: "VNNI", pair p of column n at b + p * b_stride + n.
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

// C (rows x cols floats, ldc apart) = A B: A rows x pairs, B pairs x cols;
// rows and cols multiples of 16, pairs of kAmxTilePairs. Under an AmxScope.
void AmxProduct(const uint32_t* a, size_t a_stride, const uint32_t* b,
                size_t b_stride, size_t rows, size_t cols, size_t pairs,
                float* c, size_t ldc);

// The packing, on AVX512_BF16 (which every AMX CPU has; MatMul's vdpbf16ps
// kernel uses it too):
// out[j] = (bf16(x[2j]), bf16(x[2j + 1])) for j < pairs, x[i] = 0 past n:
// a row of floats as A's pairs. Rounds to nearest even.
void PairsOfRow(const float* x, size_t n, size_t pairs, uint32_t* out);

// out[j] = (bf16(lo[j]), bf16(hi[j])) for j < n, hi null meaning zeros: two
// rows of floats interleaved as a row of B's pairs. Rounds to nearest even.
void InterleavedPairs(const float* lo, const float* hi, size_t n,
                      uint32_t* out);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_AMX_TILES_H_
