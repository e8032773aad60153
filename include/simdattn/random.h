// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC'11). Every output is a pure
// function of (counter, key), so any element's draw can be computed alone, in
// any order, on any thread and any SIMD target. This scalar code is the
// reference that the vectorised dropout kernel is tested against.
#ifndef SIMDATTN_RANDOM_H_
#define SIMDATTN_RANDOM_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace simdattn {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // Golden ratio.
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1.
inline constexpr int kPhiloxRounds = 10;

// Philox4x32 with kPhiloxRounds rounds: four 32-bit words per counter.
constexpr PhiloxCounter Philox4x32(PhiloxCounter ctr, PhiloxKey key) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    const uint64_t p0 = uint64_t{kPhiloxM0} * ctr[0];
    const uint64_t p1 = uint64_t{kPhiloxM1} * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0],
           static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1],
           static_cast<uint32_t>(p0)};
    key = {key[0] + kPhiloxW0, key[1] + kPhiloxW1};
  }
  return ctr;
}

// The key of one dropout draw: Philox(seed; counter = offset), so every
// (seed, offset) pair has its own stream.
constexpr PhiloxKey DropoutStreamKey(uint64_t seed, uint64_t offset) {
  const PhiloxCounter out = Philox4x32(
      {static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), 0,
       0},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return {out[0], out[1]};
}

// Element (b, h, i, j) of a score tensor takes 16 bits: half (j % 32) / 16
// (0: low, 1: high) of word (j % 128) / 32 of counter
// (16 * (j / 128) + j % 16, i, h, b). Groups of 128 columns thus come from
// 16 counters whose half-words, taken one at a time, cover 16 consecutive
// columns: a vector of up to 16 lanes generates contiguous columns without a
// transpose, so every SIMD width produces the same bits. 16 bits rather than
// 32 halve the Philox work per element (FlashAttention takes 8); they set
// the resolution at which p is applied (DropoutThreshold).
inline constexpr size_t kDropoutGroup = 128;
inline constexpr size_t kDropoutLanes = 16;

constexpr uint32_t DropoutBits(PhiloxKey key, uint64_t b, uint64_t h,
                               uint64_t i, uint64_t j) {
  const PhiloxCounter ctr = {
      static_cast<uint32_t>(kDropoutLanes * (j / kDropoutGroup) +
                            j % kDropoutLanes),
      static_cast<uint32_t>(i), static_cast<uint32_t>(h),
      static_cast<uint32_t>(b)};
  const uint32_t word = Philox4x32(ctr, key)[(j % kDropoutGroup) / 32];
  return (j % 32) < kDropoutLanes ? word & 0xFFFFu : word >> 16;
}

// An element is dropped iff DropoutBits(...) < DropoutThreshold(p): with
// probability round(p * 2^16) / 2^16, within 2^-17 of p. Requires
// 0 <= p < 1.
constexpr uint32_t DropoutThreshold(float p) {
  return static_cast<uint32_t>(static_cast<double>(p) * 65536.0 + 0.5);
}

}  // namespace simdattn

#endif  // SIMDATTN_RANDOM_H_
