#include "simdattn/element.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "src/common/check.h"
#include "src/common/element.h"

namespace simdattn {

bool IsElementType(ElementType type) {
  return static_cast<unsigned>(type) <=
         static_cast<unsigned>(ElementType::kQ4_0);
}

ElementTraits ElementTraitsOf(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return {"f32", 4, 1, false, false};
    case ElementType::kBF16:
      return {"bf16", 2, 1, false, false};
    case ElementType::kF16:
      return {"f16", 2, 1, false, false};
    case ElementType::kInt8:
      return {"int8", 1, 1, true, false};
    case ElementType::kFp8E4M3:
      return {"fp8", 1, 1, false, true};
    case ElementType::kFp8E5M2:
      return {"fp8e5m2", 1, 1, false, true};
    case ElementType::kQ8_0:
      return {"q8_0", 34, 32, false, false};
    case ElementType::kQ4_0:
      return {"q4_0", 18, 32, false, false};
  }
  internal::ThrowInvalidArgument("ElementTraitsOf", "type (",
                                 static_cast<int>(type),
                                 ") is not an ElementType");
}

size_t KVTypeBytes(KVType type) { return ElementTraitsOf(type).bytes; }

size_t ElementBytes(ElementType type, size_t n) {
  const ElementTraits traits = ElementTraitsOf(type);
  return n / traits.values * traits.bytes;
}

}  // namespace simdattn

namespace simdattn {
namespace internal {
namespace {

// An fp8 format: kMantissa fraction bits, exponent bias kBias.
template <int kMantissa, int kBias>
struct Minifloat {
  static constexpr float kMinNormal = 1.0f / (1 << (kBias - 1));  // 2^(1-bias)

  // The bits of sign * magnitude, magnitude a value of the format
  // (subnormals included), below its infinity.
  static uint8_t Encode(bool negative, float magnitude) {
    uint32_t code;
    if (magnitude < kMinNormal) {  // Subnormal: a multiple of the quantum.
      code =
          static_cast<uint32_t>(std::ldexp(magnitude, kBias - 1 + kMantissa));
    } else {
      int exponent;
      const float fraction = std::frexp(magnitude, &exponent);  // [0.5, 1)
      code = static_cast<uint32_t>(exponent - 1 + kBias) << kMantissa |
             (static_cast<uint32_t>(std::ldexp(fraction, kMantissa + 1)) -
              (1u << kMantissa));
    }
    return static_cast<uint8_t>((negative ? 0x80u : 0u) | code);
  }

  // |x| rounded to the format's precision, to nearest, ties to even
  // (default rounding mode): the quantum is that of |x|'s binade, or the
  // subnormals' below the smallest normal. The result may be the next
  // binade's first value, or past the format's range (callers clamp).
  static float Round(float magnitude) {
    int exponent;
    std::frexp(std::max(magnitude, kMinNormal), &exponent);
    const int shift = kMantissa + 1 - exponent;  // quantum = 2^-shift
    return std::ldexp(std::nearbyint(std::ldexp(magnitude, shift)), -shift);
  }

  static float Decode(uint8_t bits) {
    const int exponent = (bits & 0x7F) >> kMantissa;
    const int fraction = bits & ((1 << kMantissa) - 1);
    const float magnitude =
        exponent == 0
            ? std::ldexp(static_cast<float>(fraction), 1 - kBias - kMantissa)
            : std::ldexp(static_cast<float>(fraction + (1 << kMantissa)),
                         exponent - kBias - kMantissa);
    return bits & 0x80 ? -magnitude : magnitude;
  }
};

using E4M3 = Minifloat<3, 7>;
using E5M2 = Minifloat<2, 15>;

}  // namespace

float Fp8E4M3ToFloat(uint8_t bits) {
  if ((bits & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  return E4M3::Decode(bits);
}

float Fp8E5M2ToFloat(uint8_t bits) {
  if ((bits & 0x7C) == 0x7C) {  // Exponent all ones.
    if ((bits & 3) != 0) return std::numeric_limits<float>::quiet_NaN();
    return bits & 0x80 ? -std::numeric_limits<float>::infinity()
                       : std::numeric_limits<float>::infinity();
  }
  return E5M2::Decode(bits);
}

uint8_t FloatToFp8E4M3(float x) {
  if (!std::isfinite(x)) return 0x7F;  // NaN; E4M3 has no infinity.
  const float rounded = std::min(E4M3::Round(std::abs(x)), 448.0f);
  return E4M3::Encode(std::signbit(x), rounded);
}

uint8_t FloatToFp8E5M2(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | 0x7E;
  if (std::isinf(x)) return sign | 0x7C;
  const float rounded = E5M2::Round(std::abs(x));
  if (rounded > 57344.0f) return sign | 0x7C;  // Infinity.
  return E5M2::Encode(sign != 0, rounded);
}

namespace {

// Whether x[0, kQuantBlock) are all finite.
bool AllFinite(const float* x) {
  for (size_t j = 0; j < kQuantBlock; ++j) {
    if (!std::isfinite(x[j])) return false;
  }
  return true;
}

constexpr Float16 kHalfNaN = {0x7E00};

// ggml's 1 / d, 0 for d = 0; also 0 where 1 / d overflows (|d| < 2^-128,
// whose fp16 is 0): ggml's quants are undefined there, these are 0.
float Inverse(float d) {
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  return std::isfinite(inverse) ? inverse : 0.0f;
}

}  // namespace

// This file is compiled without floating-point contraction (CMakeLists.txt):
// x * id + 8.5f fused into one multiply-add would round differently from
// ggml's reference build.
void QuantizeBlock(const float* x, BlockQ8_0* out) {
  if (!AllFinite(x)) {
    out->d = kHalfNaN;
    std::fill_n(out->qs, kQuantBlock, int8_t{0});
    return;
  }
  float max_abs = 0.0f;
  for (size_t j = 0; j < kQuantBlock; ++j) {
    max_abs = std::max(max_abs, std::abs(x[j]));
  }
  const float d = max_abs / 127.0f;
  const float inverse = Inverse(d);
  out->d = ToFloat16(d);
  for (size_t j = 0; j < kQuantBlock; ++j) {
    out->qs[j] = static_cast<int8_t>(std::round(x[j] * inverse));
  }
}

void QuantizeBlock(const float* x, BlockQ4_0* out) {
  if (!AllFinite(x)) {
    out->d = kHalfNaN;
    std::fill_n(out->qs, kQuantBlock / 2, uint8_t{0x88});  // Quants of 0.
    return;
  }
  // The first element of the largest magnitude, with its sign.
  float max_abs = 0.0f, max = 0.0f;
  for (size_t j = 0; j < kQuantBlock; ++j) {
    if (max_abs < std::abs(x[j])) {
      max_abs = std::abs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float inverse = Inverse(d);
  out->d = ToFloat16(d);
  const auto quant = [&](float v) {
    const float shifted = v * inverse + 8.5f;  // In [0.5, 16.5].
    return std::min(15, static_cast<int>(shifted));
  };
  for (size_t j = 0; j < kQuantBlock / 2; ++j) {
    out->qs[j] =
        static_cast<uint8_t>(quant(x[j]) | quant(x[j + kQuantBlock / 2]) << 4);
  }
}

}  // namespace internal
}  // namespace simdattn
