// Decode's products over fp8 cache rows (E4M3, E5M2) and bf16 ones under
// kBFloat16 arithmetic (Q and P rounded to bf16) on bf16 pairs: vdpbf16ps
// (decode_pairs.cc), each vector of 64 fp8 codes widened in registers by two
// table lookups (vpermi2b, AVX512_VBMI), bf16 words paired as they lie; on
// Arm, BFDOT over bf16 rows (decode_pairs_arm.cc, which states its
// rounding). Every fp8 value is
// a bf16 exactly (subnormals, E5M2's infinities and both NaNs included), so
// each product is exact in float32, as on the float32 route over the same
// rounded operands; sums are float32, in the kernels' own order. vdpbf16ps
// reads bf16 denormals as zero and flushes denormal results: the queries are
// scaled by a power of two, and queries or weights that would still hold a
// denormal are declined (the float32 route stands in), so that only
// products below 2^-125 are lost (a bf16 row's denormal elements among them,
// times queries below 2 and weights up to 1). Infinities and NaNs then
// propagate as on the float32 route. BFDOT flushes likewise.
// E4M3 codes count as 2^-8 of their value, E5M2's as theirs: matmul-inl.h's
// LoadB reads them so (kLoadScale), and the callers' scales expect it.
// Rows are given as bytes, `stride` bytes apart.
// Internal: attention_decode-inl.h calls them where DecodePairsUsable().
#ifndef SIMDATTN_SRC_OPS_DECODE_PAIRS_H_
#define SIMDATTN_SRC_OPS_DECODE_PAIRS_H_

#include <cstddef>
#include <cstdint>

#include "simdattn/element.h"

namespace simdattn {
namespace internal {

// Whether decode's tasks on `target` (Highway's bit) may take these kernels
// over rows of `type`: an AVX-512 target on a CPU with AVX512_BF16 and
// AVX512_VBMI (bf16 and fp8 rows), or an Arm target on one with BF16 (bf16
// rows).
bool DecodePairsUsable(KVType type, int64_t target);

// Rows of queries and weights handled together: up to a group of four
// heads (P V takes them two by two: bench/RESULTS.md, "Kept
// decisions").
inline constexpr size_t kMaxPairRows = 4;

// uint32 per query row of `cols` elements (QueryPairs).
inline constexpr size_t PairQueryStride(size_t cols) {
  return (cols + 63) / 64 * 32;
}

// Query rows (rows <= kMaxPairRows, `stride` floats apart) as PairScores
// reads them over rows of `type`: row r at out + r * PairQueryStride(cols),
// bf16 (nearest even) in the lookups' lane order (bf16 rows: in order), zero
// past cols, all rows times one power of two that
// brings their largest magnitude into [1, 2). Returns the inverse power,
// which the products then carry, or 0 (out unspecified) where an element is
// not finite, or would be a denormal (2^126 times below the largest).
float QueryPairs(KVType type, const float* q, size_t rows, size_t cols,
                 size_t stride, uint32_t* out);

// scores[r * score_stride + j] = alpha * sum_c q[r][c] key_j[c] for the
// rows QueryPairs wrote (alpha including its factor) and keys j in
// [0, n), key j's cols codes at keys + j * key_stride.
void PairScores(KVType type, const uint32_t* queries, size_t rows,
                const uint8_t* keys, size_t key_stride, size_t n, size_t cols,
                float alpha, float* scores, size_t score_stride);

// p[0, n) rounded to bf16 (nearest even): weights 2i and 2i + 1 in out[i],
// zeros past n, (n + 15) / 16 * 8 words at most written. False (out
// unspecified) where a weight is a float32 denormal.
bool RoundWeightPairs(const float* p, size_t n, uint32_t* out);

// P's rows (rows <= kMaxPairRows, n weights each, `stride` apart) rounded to
// bf16 as PairWeightsTimesValues reads them: row r at out + r * out_stride,
// out_stride >= (n + 15) / 16 * 8. False (out unspecified) where a weight
// is a denormal.
inline bool WeightPairs(const float* p, size_t rows, size_t n, size_t stride,
                        uint32_t* out, size_t out_stride) {
  bool normal = true;
  for (size_t r = 0; r < rows; ++r) {
    normal &= RoundWeightPairs(p + r * stride, n, out + r * out_stride);
  }
  return normal;
}

// acc[r * acc_stride + c] += sum_j p[r][j] value_j[c] for c in [0, cols) and
// values j in [0, n) (cols codes each at values + j * value_stride), over
// the pairs WeightPairs wrote (row r at weights + r * weight_stride).
void PairWeightsTimesValues(KVType type, const uint32_t* weights,
                            size_t weight_stride, size_t rows,
                            const uint8_t* values, size_t value_stride,
                            size_t n, size_t cols, float* acc,
                            size_t acc_stride);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_DECODE_PAIRS_H_
