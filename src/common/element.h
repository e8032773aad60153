// The one place that turns an ElementType into a C++ type: code written once
// for every element type visits it, so a new type is its traits
// (element.cc), its widening (Widen here, LoadB in matmul-inl.h) and its
// store (kv_store-inl.h).
#ifndef SIMDATTN_SRC_COMMON_ELEMENT_H_
#define SIMDATTN_SRC_COMMON_ELEMENT_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "simdattn/element.h"
#include "simdattn/kernels.h"
#include "simdattn/tensor.h"

namespace simdattn {
namespace internal {

// fp8 elements: their bits (OCP 8-bit floating point, v1.0). E4M3: bias 7,
// no infinities, S.1111.111 NaN, max 448. E5M2: bias 15, IEEE-like (inf
// S.11111.00, NaN S.11111.xx), max 57344.
struct Fp8E4M3 {
  uint8_t bits;
};
struct Fp8E5M2 {
  uint8_t bits;
};

// ggml's blocks, byte for byte (ggml-common.h's block_q8_0, block_q4_0):
// 32 consecutive elements of a row and their fp16 scale d.
inline constexpr size_t kQuantBlock = 32;
struct BlockQ8_0 {
  Float16 d;
  int8_t qs[kQuantBlock];  // Element j = d * qs[j].
};
struct BlockQ4_0 {
  Float16 d;
  // Element j < 16 = d * ((qs[j] & 15) - 8); element 16 + j = d * ((qs[j]
  // >> 4) - 8).
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18,
              "ggml's block sizes");

// Elements per storage unit of T: rows of a block type are arrays of
// blocks, and strides in elements are multiples of this.
template <typename T>
inline constexpr size_t kBlockValues =
    std::is_same_v<T, BlockQ8_0> || std::is_same_v<T, BlockQ4_0> ? kQuantBlock
                                                                 : 1;

// The storage type of an ElementType, as an empty tag value.
template <typename T>
struct ElementTag {
  using type = T;
};

// Whether rows of T carry a scale (ElementTraits::scaled).
template <typename T>
inline constexpr bool kScaled = std::is_same_v<T, int8_t>;

// f(ElementTag<T>()) for the storage type T of `type` (a valid one: callers
// validate at the API boundary).
template <class F>
decltype(auto) VisitElementType(ElementType type, F&& f) {
  switch (type) {
    case ElementType::kBF16:
      return f(ElementTag<BFloat16>());
    case ElementType::kF16:
      return f(ElementTag<Float16>());
    case ElementType::kInt8:
      return f(ElementTag<int8_t>());
    case ElementType::kFp8E4M3:
      return f(ElementTag<Fp8E4M3>());
    case ElementType::kFp8E5M2:
      return f(ElementTag<Fp8E5M2>());
    case ElementType::kQ8_0:
      return f(ElementTag<BlockQ8_0>());
    case ElementType::kQ4_0:
      return f(ElementTag<BlockQ4_0>());
    case ElementType::kF32:
      break;
  }
  return f(ElementTag<float>());
}

// fp8 bits to float and back (element.cc). Decoding is exact. Encoding
// rounds to nearest, ties to even; E4M3 saturates finite values to +-448
// and stores infinities as NaN (it has none); E5M2 rounds 61440 and above to
// infinity; NaN stays NaN.
float Fp8E4M3ToFloat(uint8_t bits);
float Fp8E5M2ToFloat(uint8_t bits);
uint8_t FloatToFp8E4M3(float x);
uint8_t FloatToFp8E5M2(float x);

// 32 floats as one block, the bits of ggml's reference quantizers
// (quantize_row_q8_0_ref, quantize_row_q4_0_ref); a block holding a NaN or an
// infinity gets d NaN and quants of 0.
void QuantizeBlock(const float* x, BlockQ8_0* out);
void QuantizeBlock(const float* x, BlockQ4_0* out);

// Element c of a row of T as float: exact for every type (an int8 row's
// scale and an fp8 side's scale are applied by the caller).
inline float WidenAt(const float* row, size_t c) { return row[c]; }
inline float WidenAt(const BFloat16* row, size_t c) { return ToFloat(row[c]); }
inline float WidenAt(const Float16* row, size_t c) { return ToFloat(row[c]); }
inline float WidenAt(const int8_t* row, size_t c) {
  return static_cast<float>(row[c]);
}
inline float WidenAt(const Fp8E4M3* row, size_t c) {
  return Fp8E4M3ToFloat(row[c].bits);
}
inline float WidenAt(const Fp8E5M2* row, size_t c) {
  return Fp8E5M2ToFloat(row[c].bits);
}
inline float WidenAt(const BlockQ8_0* row, size_t c) {
  const BlockQ8_0& block = row[c / kQuantBlock];
  return ToFloat(block.d) * static_cast<float>(block.qs[c % kQuantBlock]);
}
inline float WidenAt(const BlockQ4_0* row, size_t c) {
  const BlockQ4_0& block = row[c / kQuantBlock];
  const size_t j = c % kQuantBlock;
  const int nibble =
      j < kQuantBlock / 2 ? block.qs[j] & 15 : block.qs[j - 16] >> 4;
  return ToFloat(block.d) * static_cast<float>(nibble - 8);
}

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_COMMON_ELEMENT_H_
