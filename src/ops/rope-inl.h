// Per-target rotary position embedding (kernels.h's ApplyRope): one token
// row of one head at a time, against that token's cos and sin tables.

#if defined(SIMDATTN_SRC_OPS_ROPE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_ROPE_INL_H_
#undef SIMDATTN_SRC_OPS_ROPE_INL_H_
#else
#define SIMDATTN_SRC_OPS_ROPE_INL_H_
#endif

#include <cmath>
#include <cstddef>

#include "hwy/highway.h"
#include "simdattn/kernels.h"
#include "src/common/parallel.h"
#include "src/common/scratch.h"
#include "src/ops/rope.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace rope_detail {

// (x1, x2) -> (x1 c - x2 s, x2 c + x1 s), each with one product fused.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void Rotate(V& x1, V& x2, V c, V s) {
  const V r1 = hn::NegMulAdd(x2, s, hn::Mul(x1, c));
  x2 = hn::MulAdd(x1, s, hn::Mul(x2, c));
  x1 = r1;
}

// Rotates the `half` pairs of one row: x1 at x1s[i], x2 at x2s[i] (half
// split), or interleaved at row[2i], row[2i + 1].
inline void RotateRow(float* row, const float* cos, const float* sin,
                      size_t half, RopePairing pairing) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  if (pairing == RopePairing::kHalfSplit) {
    float* x1s = row;
    float* x2s = row + half;
    const auto rotate = [&](auto dv, size_t at) {
      auto x1 = hn::LoadU(dv, x1s + at), x2 = hn::LoadU(dv, x2s + at);
      Rotate<decltype(dv)>(x1, x2, hn::LoadU(dv, cos + at),
                           hn::LoadU(dv, sin + at));
      hn::StoreU(x1, dv, x1s + at);
      hn::StoreU(x2, dv, x2s + at);
    };
    for (; i + N <= half; i += N) rotate(d, i);
    for (; i < half; ++i) rotate(d1, i);
    return;
  }
  const auto rotate = [&](auto dv, size_t at) {
    hn::Vec<decltype(dv)> x1, x2;
    hn::LoadInterleaved2(dv, row + 2 * at, x1, x2);
    Rotate<decltype(dv)>(x1, x2, hn::LoadU(dv, cos + at),
                         hn::LoadU(dv, sin + at));
    hn::StoreInterleaved2(x1, x2, dv, row + 2 * at);
  };
  for (; i + N <= half; i += N) rotate(d, i);
  for (; i < half; ++i) rotate(d1, i);
}

}  // namespace rope_detail

// Same-target entry point; arguments were validated by the caller
// (rotary_dim even, non-zero and <= head_dim).
inline void RopeImpl(Tensor4 x, RopePairing pairing, float theta,
                     size_t rotary_dim, const size_t* positions) {
  const size_t batch = x.dims[0], heads = x.dims[1], tokens = x.dims[2];
  const size_t half = rotary_dim / 2;
  // Tables from the scratch pool (a call allocates nothing once warm); the
  // frequencies are doubles in float-sized scratch, 64-byte aligned.
  internal::ScratchBuffer frequency_buffer(2 * half);
  double* frequency = reinterpret_cast<double*>(frequency_buffer.data());
  internal::RopeFrequencies(theta, rotary_dim, frequency);
  // A task per (batch item, token): its tables serve every head.
  internal::ParallelFor(
      0, batch * tokens, std::max<size_t>(1, 4096 / (heads * rotary_dim + 1)),
      [&](size_t first, size_t last) {
        internal::ScratchBuffer tables(2 * half);
        float* cos = tables.data();
        float* sin = cos + half;
        for (size_t index = first; index != last; ++index) {
          const size_t b = index / tokens, t = index % tokens;
          const double position =
              double(positions != nullptr ? positions[b] : 0) + double(t);
          internal::RopeAngles(frequency, half, position, cos, sin);
          for (size_t h = 0; h < heads; ++h) {
            rope_detail::RotateRow(x.Slice(b, h).Row(t), cos, sin, half,
                                   pairing);
          }
        }
      });
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_ROPE_INL_H_
