// Lane sums of AVX-512 float vectors for the kernels that take AVX-512 by
// function attributes (fp8_pairs.cc, block_pairs.cc): x86-64 with GCC or
// Clang only.
#ifndef SIMDATTN_SRC_OPS_X86_SUMS_H_
#define SIMDATTN_SRC_OPS_X86_SUMS_H_

#include <immintrin.h>

namespace simdattn {
namespace internal {

// The sums of a, b, c and d's lanes.
__attribute__((target("avx512f"))) inline __m128 Sum4(__m512 a, __m512 b,
                                                      __m512 c, __m512 d) {
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

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_X86_SUMS_H_
