// RoPE's angles, shared by ApplyRope and the KV cache's tables so that keys
// rotated on append get ApplyRope's bits.
#ifndef SIMDATTN_SRC_OPS_ROPE_H_
#define SIMDATTN_SRC_OPS_ROPE_H_

#include <cstddef>
#include <vector>

#include "simdattn/kernels.h"

namespace simdattn {
namespace internal {

// The angles of consecutive rows: row r's `half` cos and sin values at
// cos + r * half and sin + r * half, rotating dims from `offset` on.
struct RopeRows {
  const float* cos = nullptr;
  const float* sin = nullptr;
  size_t half = 0, offset = 0;
  RopePairing pairing = RopePairing::kHalfSplit;

  // The rows from row r on.
  RopeRows From(size_t r) const {
    return {cos + r * half, sin + r * half, half, offset, pairing};
  }
};

// cos and sin of every rotary pair's angle at positions 0, 1, ..., computed
// as ApplyRope computes them (RopeAngles), grown on demand.
class RopeTables {
 public:
  explicit RopeTables(const RopeOptions& options, size_t head_dim);
  // Makes positions [0, count) available.
  void Reserve(size_t count);
  // Position p's `half` values each.
  const float* Cos(size_t p) const { return cos_.data() + p * half_; }
  const float* Sin(size_t p) const { return sin_.data() + p * half_; }
  // Rows from position p on.
  RopeRows From(size_t p) const {
    return RopeRows{cos_.data(), sin_.data(), half_, offset_, pairing_}.From(p);
  }
  size_t half() const { return half_; }
  size_t offset() const { return offset_; }  // The first rotated dim.
  RopePairing pairing() const { return pairing_; }

 private:
  RopePairing pairing_;
  size_t offset_, half_;
  std::vector<double> frequency_;
  std::vector<float> cos_, sin_;
};

// The cos and sin (rounded to float) of pair i's angle at `position`, i <
// half: one definition for ApplyRope and RopeTables.
void RopeAngles(const double* frequency, size_t half, double position,
                float* cos, float* sin);
// frequency[i] = pair i's frequency theta^(-2i / rotary_dim), in double, for
// the rotary_dim / 2 pairs.
void RopeFrequencies(float theta, size_t rotary_dim, double* frequency);

// The dims rotated: rotary_dim, or 0's all from rotary_offset on (0 when
// rotary_offset exceeds head_dim: CheckRopeOptions refuses it).
size_t RotaryDim(const RopeOptions& options, size_t head_dim);

// Throws, naming `function` and the options as `name`, unless the rotated
// dims are even in number and within head_dim, theta finite and > 0, and
// the pairing known.
void CheckRopeOptions(const char* function, const char* name,
                      const RopeOptions& options, size_t head_dim);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_ROPE_H_
