#include "simdattn/element.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "src/common/check.h"
#include "src/common/element.h"

namespace simdattn {

bool IsElementType(ElementType type) {
  return static_cast<unsigned>(type) <= static_cast<unsigned>(kLastElementType);
}

ElementTraits ElementTraitsOf(ElementType type) {
  SIMDATTN_REQUIRE(IsElementType(type), "ElementTraitsOf", "type (",
                   static_cast<int>(type), ") is not an ElementType");
  return internal::VisitElementType(type, [](auto tag) {
    return internal::ElementFormat<typename decltype(tag)::type>::kTraits;
  });
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

// ggml's q4_1: d = (max - min) / 15, m = min, codes min(15, trunc((x - min)
// (1 / d) + 0.5)) in 0..15.
void QuantizeBlock(const float* x, BlockQ4_1* out) {
  if (!AllFinite(x)) {
    out->d = out->m = kHalfNaN;
    std::fill_n(out->qs, kQuantBlock / 2, uint8_t{0});
    return;
  }
  float min = std::numeric_limits<float>::max(), max = -min;
  for (size_t j = 0; j < kQuantBlock; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 15.0f;
  const float inverse = Inverse(d);
  out->d = ToFloat16(d);
  out->m = ToFloat16(min);
  const auto quant = [&](float v) {
    return std::min(15, static_cast<int>((v - min) * inverse + 0.5f));
  };
  for (size_t j = 0; j < kQuantBlock / 2; ++j) {
    out->qs[j] =
        static_cast<uint8_t>(quant(x[j]) | quant(x[j + kQuantBlock / 2]) << 4);
  }
}

namespace {

// The index of the iq4_nl value nearest x (the upper one on a tie), as
// ggml's best_index_int8 finds it.
int NearestIQ4NL(float x) {
  const int8_t* values = kIQ4NLValues;
  if (x <= values[0]) return 0;
  if (x >= values[15]) return 15;
  int low = 0, high = 15;
  while (high - low > 1) {
    const int middle = (low + high) / 2;
    (x < values[middle] ? high : low) = middle;
  }
  return x - values[high - 1] < values[high] - x ? high - 1 : high;
}

}  // namespace

// ggml's iq4_nl reference (quantize_row_iq4_nl_impl with no importance
// weights and no scale search): the element m of largest magnitude maps to
// the table's -127 (1 / d = -127 / m), each element to its nearest value,
// then d is the least-squares scale for those codes with weights x^2. A block
// below 1e-15 in magnitude gets d 0 and codes 0 (ggml leaves its codes
// undefined).
void QuantizeBlock(const float* x, BlockIQ4NL* out) {
  std::fill_n(out->qs, kQuantBlock / 2, uint8_t{0});
  if (!AllFinite(x)) {
    out->d = kHalfNaN;
    return;
  }
  float max_abs = 0.0f, max = 0.0f;
  for (size_t j = 0; j < kQuantBlock; ++j) {
    if (std::abs(x[j]) > max_abs) {
      max_abs = std::abs(x[j]);
      max = x[j];
    }
  }
  out->d = ToFloat16(0.0f);
  if (max_abs < 1e-15f) return;
  const float inverse = 1.0f / (max / static_cast<float>(kIQ4NLValues[0]));
  float sum_qx = 0.0f, sum_q2 = 0.0f;
  for (size_t j = 0; j < kQuantBlock; ++j) {
    const int index = NearestIQ4NL(inverse * x[j]);
    const float q = kIQ4NLValues[index], w = x[j] * x[j];
    sum_qx += w * q * x[j];
    sum_q2 += w * q * q;
    out->qs[j % 16] |= static_cast<uint8_t>(index << (j < 16 ? 0 : 4));
  }
  out->d = ToFloat16(sum_q2 > 0.0f ? sum_qx / sum_q2 : 0.0f);
}

}  // namespace internal
}  // namespace simdattn
