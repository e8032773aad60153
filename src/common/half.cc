// Scalar conversions between float32 and the 16-bit storage formats
// (tensor.h), for callers preparing weights; the kernels convert vectors.
#include <cstdint>
#include <cstring>

#include "simdattn/kernels.h"

namespace simdattn {
namespace {

uint32_t Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

}  // namespace

BFloat16 ToBFloat16(float x) {
  const uint32_t bits = Bits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep it quiet.
    return {static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  }
  // Round to nearest, ties to even; overflow rounds to infinity.
  return {static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1)) >> 16)};
}

float ToFloat(BFloat16 x) { return FromBits(uint32_t{x.bits} << 16); }

Float16 ToFloat16(float x) {
  const uint32_t bits = Bits(x);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return {static_cast<uint16_t>(sign | 0x7E00u)};
  // 65520 and above round to infinity.
  if (magnitude >= 0x477FF000u) return {static_cast<uint16_t>(sign | 0x7C00u)};
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent < -25) return {sign};  // Below half the smallest subnormal.
  // The significand with its implicit bit, shifted to 10 fraction bits of
  // the result (subnormals shift further), rounded to nearest even.
  const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  const int shift = exponent < -14 ? 13 + (-14 - exponent) : 13;
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t rest = significand & ((1u << shift) - 1);
  uint32_t rounded = significand >> shift;
  if (rest > halfway || (rest == halfway && (rounded & 1))) ++rounded;
  // Normal: add the biased exponent; a carry out of the significand moves
  // it up by one, as it should. Subnormal: rounded is the result itself.
  const uint32_t result =
      exponent < -14 ? rounded
                     : (static_cast<uint32_t>(exponent + 14) << 10) + rounded;
  return {static_cast<uint16_t>(sign | result)};
}

float ToFloat(Float16 x) {
  const uint32_t sign = uint32_t{x.bits & 0x8000u} << 16;
  const uint32_t exponent = (x.bits >> 10) & 0x1Fu;
  const uint32_t fraction = x.bits & 0x3FFu;
  if (exponent == 0x1F) return FromBits(sign | 0x7F800000u | (fraction << 13));
  if (exponent != 0) {
    return FromBits(sign | ((exponent + 112) << 23) | (fraction << 13));
  }
  // Zero or subnormal: fraction * 2^-24, exact in float.
  const float value = static_cast<float>(fraction) * 5.9604644775390625e-8f;
  return sign != 0 ? -value : value;
}

}  // namespace simdattn
