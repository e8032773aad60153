// Decode's P V over value rows of ggml's blocks (q8_0, q4_0) under kInt8
// arithmetic, on int16 pairs: two keys' codes in each int32 lane of
// vpdpwssd (AVX512_VNNI), q4_0's nibbles spread by vpermb (AVX512_VBMI).
// Per row and value block b of a tile, each weight times its key's block
// scale, w_j = p_j d_jb, becomes an integer u_j = w_j (2^30 - 2^15) / m_b,
// m_b the largest |w_j| over the tile's keys, rounded to nearest (after
// float32's rounding of the product: at most 2^-24 |w_j| + 2^-31 m_b off),
// held as two int16 halves. The halves times the codes are summed exactly in
// int32 over the tile, then converted and scaled back in float32: P V
// agrees with the float32 route's to about float32's rounding. The sums
// are exact, so the order of the keys (a paged tile's runs) changes no bit.
// Internal: attention-inl.h calls them where BlockPairsUsable().
#ifndef SIMDATTN_SRC_OPS_BLOCK_PAIRS_H_
#define SIMDATTN_SRC_OPS_BLOCK_PAIRS_H_

#include <cstddef>
#include <cstdint>

#include "simdattn/element.h"

namespace simdattn {
namespace internal {

// Built for x86-64 and the CPU has AVX512_VNNI and AVX512_VBMI.
bool BlockPairsUsable();

// Keys per call at most: the int32 sums stay below 256 * 2^15 * 128 = 2^30.
inline constexpr size_t kBlockPairKeys = 256;

// Rows of weights per call at most (kInt8's tasks).
inline constexpr size_t kBlockPairRows = 4;

// `keys` value rows, `stride` bytes apart: one run of a tile (a block of a
// paged cache, or the whole tile).
struct BlockRun {
  const uint8_t* rows;
  size_t keys;
};

// Bytes of scratch BlockWeightsTimesValues takes for `cols` dims.
size_t BlockPairScratchBytes(size_t cols);

// acc[r * acc_stride + c] (+)= sum_j p[r * p_stride + j] value_j[c] for rows
// r < rows (<= kBlockPairRows), dims c < cols (a multiple of 32) and the
// tile's keys j (its runs in order, at most kBlockPairKeys), on the grid
// above; += where `accumulate`, else =. Returns false (acc unchanged) where
// a w_j is not finite, or an m_b lies in (0, 2^-96): the float32 route then
// stands in.
bool BlockWeightsTimesValues(KVType type, const float* p, size_t rows,
                             size_t p_stride, const BlockRun* runs,
                             size_t run_count, size_t stride, size_t cols,
                             void* scratch, bool accumulate, float* acc,
                             size_t acc_stride);

// scores[r * score_stride + j] = the score of query row r < rows (<=
// kBlockPairRows) and the tile's key j (its runs in order; rows `stride`
// bytes apart, of `blocks` blocks) as kInt8 computes it (kernels.h): the
// rows' codes (int16, `code_stride` apart) and their blocks' scales alpha d
// (`blocks` a row), the products with the key's codes summed exactly in
// int32 by fours (vpdpbusd), each four converted, times the key block's
// scale, then times the query's, summed in float32. False (scores
// untouched) past head dims of 1024.
bool BlockScores(KVType type, const int16_t* codes, size_t code_stride,
                 const float* scales, size_t rows, size_t blocks,
                 const BlockRun* runs, size_t run_count, size_t stride,
                 float* scores, size_t score_stride);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_BLOCK_PAIRS_H_
