// ApplyRope: validation, then one dispatch per call.
#include "src/ops/rope.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include "simdattn/kernels.h"
#include "src/common/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/rope.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/rope-inl.h"

#if HWY_ONCE
namespace simdattn {
HWY_EXPORT(RopeImpl);

namespace internal {

void RopeFrequencies(float theta, size_t rotary_dim, double* frequency) {
  for (size_t i = 0; i < rotary_dim / 2; ++i) {
    frequency[i] = std::pow(double(theta), -2.0 * double(i) / rotary_dim);
  }
}

void RopeAngles(const double* frequency, size_t half, double position,
                float* cos, float* sin) {
  for (size_t i = 0; i < half; ++i) {
    const double angle = position * frequency[i];
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
}

RopeTables::RopeTables(const RopeOptions& options, size_t head_dim)
    : pairing_(options.pairing),
      offset_(options.rotary_offset),
      half_(RotaryDim(options, head_dim) / 2),
      frequency_(half_) {
  RopeFrequencies(options.theta, 2 * half_, frequency_.data());
}

void RopeTables::Reserve(size_t count) {
  if (half_ == 0 || count <= cos_.size() / half_) return;
  const size_t have = cos_.size() / half_;
  cos_.resize(count * half_);
  sin_.resize(count * half_);
  for (size_t p = have; p < count; ++p) {
    RopeAngles(frequency_.data(), half_, double(p), &cos_[p * half_],
               &sin_[p * half_]);
  }
}

size_t RotaryDim(const RopeOptions& options, size_t head_dim) {
  if (options.rotary_dim != 0) return options.rotary_dim;
  return options.rotary_offset <= head_dim ? head_dim - options.rotary_offset
                                           : 0;
}

void CheckRopeOptions(const char* function, const char* name,
                      const RopeOptions& options, size_t head_dim) {
  // 0 means all from the offset on, which must then be even in number.
  const size_t rotary_dim = RotaryDim(options, head_dim);
  SIMDATTN_REQUIRE(options.rotary_offset <= head_dim &&
                       rotary_dim <= head_dim - options.rotary_offset,
                   function, name, ".rotary_offset (", options.rotary_offset,
                   ") + .rotary_dim (", options.rotary_dim,
                   ") exceeds the head_dim (", head_dim, ")");
  SIMDATTN_REQUIRE(rotary_dim % 2 == 0, function, name, ".rotary_dim (",
                   options.rotary_dim, ") is not even: it rotates ", rotary_dim,
                   " dims");
  SIMDATTN_REQUIRE(std::isfinite(options.theta) && options.theta > 0.0f,
                   function, name, ".theta (", options.theta,
                   ") is not finite and positive");
  SIMDATTN_REQUIRE(options.pairing == RopePairing::kHalfSplit ||
                       options.pairing == RopePairing::kInterleaved,
                   function, name, ".pairing (",
                   static_cast<int>(options.pairing), ") is unknown");
}

}  // namespace internal

void ApplyRope(Tensor4 x, const RopeOptions& options) {
  constexpr const char* kFn = "ApplyRope";
  const size_t head_dim = x.dims[3];
  internal::CheckRopeOptions(kFn, "options", options, head_dim);
  const size_t rotary_dim = internal::RotaryDim(options, head_dim);
  const internal::Footprint rx = internal::CheckTensor4(kFn, "x", x);
  internal::CheckDistinctElements(kFn, "x", x.dims, x.strides);
  if (options.positions != nullptr && x.dims[0] != 0) {
    const internal::Footprint rp = internal::ContiguousFootprint(
        kFn, "options.positions", options.positions, x.dims[0], sizeof(size_t));
    SIMDATTN_REQUIRE(!rx.Overlaps(rp), kFn, "x overlaps options.positions");
  }
  if (x.empty() || rotary_dim == 0) return;
  // The rotated dims as a tensor of their own.
  Tensor4 rotated = x;
  rotated.data += options.rotary_offset;
  rotated.dims[3] = rotary_dim;
  HWY_DYNAMIC_DISPATCH(RopeImpl)
  (rotated, options.pairing, options.theta, rotary_dim, options.positions);
}

}  // namespace simdattn
#endif  // HWY_ONCE
