// ApplyRope: validation, then one dispatch per call.
#include <cmath>
#include <cstddef>

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

void ApplyRope(Tensor4 x, const RopeOptions& options) {
  constexpr const char* kFn = "ApplyRope";
  const size_t head_dim = x.dims[3];
  const size_t rotary_dim =
      options.rotary_dim == 0 ? head_dim : options.rotary_dim;
  SIMDATTN_REQUIRE(rotary_dim % 2 == 0 && rotary_dim <= head_dim, kFn,
                   "options.rotary_dim (", options.rotary_dim,
                   ") is not even and at most x.dims[3], the head_dim (",
                   head_dim, ")");
  SIMDATTN_REQUIRE(std::isfinite(options.theta) && options.theta > 0.0f, kFn,
                   "options.theta (", options.theta,
                   ") is not finite and positive");
  SIMDATTN_REQUIRE(options.pairing == RopePairing::kHalfSplit ||
                       options.pairing == RopePairing::kInterleaved,
                   kFn, "options.pairing (", static_cast<int>(options.pairing),
                   ") is unknown");
  const internal::Footprint rx = internal::CheckTensor4(kFn, "x", x);
  internal::CheckDistinctElements(kFn, "x", x.dims, x.strides);
  if (options.positions != nullptr && x.dims[0] != 0) {
    const internal::Footprint rp = internal::ContiguousFootprint(
        kFn, "options.positions", options.positions, x.dims[0], sizeof(size_t));
    SIMDATTN_REQUIRE(!rx.Overlaps(rp), kFn, "x overlaps options.positions");
  }
  if (x.empty() || rotary_dim == 0) return;
  HWY_DYNAMIC_DISPATCH(RopeImpl)
  (x, options.pairing, options.theta, rotary_dim, options.positions);
}

}  // namespace simdattn
#endif  // HWY_ONCE
