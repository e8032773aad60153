// The one place that turns an ElementType into a C++ type and says what
// each type is (ElementFormat): code written once for every element type
// visits it.
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

// Each storage type's scalar facts in one place, ElementFormat<T>: its
// ElementType, its public traits (which validation and the tools ask instead
// of listing types) and element c of a row widened to float. Its SIMD codec
// (the vector load, the integer codes of a block) is codecs-inl.h's
// Codec<T>; a block type's quantizer is QuantizeBlock (element.cc); the
// store (kv_store-inl.h) and the kernels are written once for every type.
// A new type: its enumerator, its ElementFormat and QuantizeBlock here and
// in element.cc, its Codec, and one instantiation line (attend_*.cc).
template <typename T>
struct ElementFormat;

// fp8 elements: their bits (OCP 8-bit floating point, v1.0). E4M3: bias 7,
// no infinities, S.1111.111 NaN, max 448. E5M2: bias 15, IEEE-like (inf
// S.11111.00, NaN S.11111.xx), max 57344.
struct Fp8E4M3 {
  uint8_t bits;
};
struct Fp8E5M2 {
  uint8_t bits;
};

// fp8 bits to float and back (element.cc). Decoding is exact. Encoding
// rounds to nearest, ties to even; E4M3 saturates finite values to +-448
// and stores infinities as NaN (it has none); E5M2 rounds 61440 and above to
// infinity; NaN stays NaN.
float Fp8E4M3ToFloat(uint8_t bits);
float Fp8E5M2ToFloat(uint8_t bits);
uint8_t FloatToFp8E4M3(float x);
uint8_t FloatToFp8E5M2(float x);

// ggml's blocks, byte for byte (ggml-common.h's block_q8_0, block_q4_0,
// block_q4_1, block_iq4_nl): 32 consecutive elements of a row, their fp16
// scale d (and q4_1's fp16 offset m). 4-bit blocks hold element j < 16 in
// the low nibble of qs[j], element 16 + j in its high nibble.
inline constexpr size_t kQuantBlock = 32;
struct BlockQ8_0 {
  Float16 d;
  int8_t qs[kQuantBlock];  // Element j = d * qs[j].
};
struct BlockQ4_0 {
  Float16 d;
  uint8_t qs[kQuantBlock / 2];  // Element = d * (nibble - 8).
};
struct BlockQ4_1 {
  Float16 d, m;
  uint8_t qs[kQuantBlock / 2];  // Element = d * nibble + m.
};
struct BlockIQ4NL {
  Float16 d;
  uint8_t qs[kQuantBlock / 2];  // Element = d * kIQ4NLValues[nibble].
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 &&
                  sizeof(BlockQ4_1) == 20 && sizeof(BlockIQ4NL) == 18,
              "ggml's block sizes");

// iq4_nl's code values (ggml-common.h's kvalues_iq4nl), ascending.
inline constexpr int8_t kIQ4NLValues[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Nibble j of a 4-bit block's 32 (see above).
inline int Nibble(const uint8_t* qs, size_t j) {
  return j < kQuantBlock / 2 ? qs[j] & 15 : qs[j - kQuantBlock / 2] >> 4;
}

template <>
struct ElementFormat<float> {
  static constexpr ElementType kType = ElementType::kF32;
  static constexpr ElementTraits kTraits = {"f32", 4,     1,     false,
                                            false, false, false, true};
  static float At(const float* row, size_t c) { return row[c]; }
};
template <>
struct ElementFormat<BFloat16> {
  static constexpr ElementType kType = ElementType::kBF16;
  static constexpr ElementTraits kTraits = {"bf16", 2,     1,    false,
                                            false,  false, true, true};
  static float At(const BFloat16* row, size_t c) { return ToFloat(row[c]); }
};
template <>
struct ElementFormat<Float16> {
  static constexpr ElementType kType = ElementType::kF16;
  static constexpr ElementTraits kTraits = {"f16", 2,     1,     false,
                                            false, false, false, true};
  static float At(const Float16* row, size_t c) { return ToFloat(row[c]); }
};
template <>
struct ElementFormat<int8_t> {  // The row's scale is applied by the caller.
  static constexpr ElementType kType = ElementType::kInt8;
  static constexpr ElementTraits kTraits = {"int8", 1,    1,     true,
                                            false,  true, false, false};
  static float At(const int8_t* row, size_t c) {
    return static_cast<float>(row[c]);
  }
};
template <>
struct ElementFormat<Fp8E4M3> {  // The side's scale: the caller's.
  static constexpr ElementType kType = ElementType::kFp8E4M3;
  static constexpr ElementTraits kTraits = {"fp8", 1,     1,    false,
                                            true,  false, true, false};
  static float At(const Fp8E4M3* row, size_t c) {
    return Fp8E4M3ToFloat(row[c].bits);
  }
};
template <>
struct ElementFormat<Fp8E5M2> {
  static constexpr ElementType kType = ElementType::kFp8E5M2;
  static constexpr ElementTraits kTraits = {"fp8e5m2", 1,     1,    false,
                                            true,      false, true, false};
  static float At(const Fp8E5M2* row, size_t c) {
    return Fp8E5M2ToFloat(row[c].bits);
  }
};
template <>
struct ElementFormat<BlockQ8_0> {
  static constexpr ElementType kType = ElementType::kQ8_0;
  static constexpr ElementTraits kTraits = {"q8_0", 34,   32,    false,
                                            false,  true, false, false};
  static float At(const BlockQ8_0* row, size_t c) {
    const BlockQ8_0& block = row[c / kQuantBlock];
    return ToFloat(block.d) * static_cast<float>(block.qs[c % kQuantBlock]);
  }
};
template <>
struct ElementFormat<BlockQ4_0> {
  static constexpr ElementType kType = ElementType::kQ4_0;
  static constexpr ElementTraits kTraits = {"q4_0", 18,   32,    false,
                                            false,  true, false, false};
  static float At(const BlockQ4_0* row, size_t c) {
    const BlockQ4_0& block = row[c / kQuantBlock];
    return ToFloat(block.d) *
           static_cast<float>(Nibble(block.qs, c % kQuantBlock) - 8);
  }
};
// Not integer scores: a score would need each query block's sum for m.
template <>
struct ElementFormat<BlockQ4_1> {
  static constexpr ElementType kType = ElementType::kQ4_1;
  static constexpr ElementTraits kTraits = {"q4_1", 20,    32,    false,
                                            false,  false, false, false};
  // d n is exact (11 by 4 significant bits), so the sum is rounded once,
  // fused or not: every target's bits agree.
  static float At(const BlockQ4_1* row, size_t c) {
    const BlockQ4_1& block = row[c / kQuantBlock];
    return ToFloat(block.d) *
               static_cast<float>(Nibble(block.qs, c % kQuantBlock)) +
           ToFloat(block.m);
  }
};
template <>
struct ElementFormat<BlockIQ4NL> {
  static constexpr ElementType kType = ElementType::kIQ4_NL;
  static constexpr ElementTraits kTraits = {"iq4_nl", 18,   32,    false,
                                            false,    true, false, false};
  static float At(const BlockIQ4NL* row, size_t c) {
    const BlockIQ4NL& block = row[c / kQuantBlock];
    return ToFloat(block.d) *
           static_cast<float>(kIQ4NLValues[Nibble(block.qs, c % kQuantBlock)]);
  }
};

// E4M3 rows as the kernels may read them another way (codecs-inl.h): with
// no test for NaN codes (FiniteE4M3), or straight to float32 bits
// (DirectE4M3). Their format is Fp8E4M3's.
struct FiniteE4M3 {
  uint8_t bits;
};
struct DirectE4M3 {
  uint8_t bits;
};

// The format of T's storage: T's own, or the one a view reads.
template <typename T>
struct FormatOf {
  using type = ElementFormat<T>;
};
template <>
struct FormatOf<FiniteE4M3> {
  using type = ElementFormat<Fp8E4M3>;
};
template <>
struct FormatOf<DirectE4M3> {
  using type = ElementFormat<Fp8E4M3>;
};
template <typename T>
inline constexpr ElementTraits kTraitsOf = FormatOf<T>::type::kTraits;

// Elements per storage unit of T: rows of a block type are arrays of
// blocks, and strides in elements are multiples of this.
template <typename T>
inline constexpr size_t kBlockValues = kTraitsOf<T>.values;

// Whether rows of T carry a scale (ElementTraits::scaled).
template <typename T>
inline constexpr bool kScaled = kTraitsOf<T>.scaled;

// The storage type of an ElementType, as an empty tag value.
template <typename T>
struct ElementTag {
  using type = T;
};

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
    case ElementType::kQ4_1:
      return f(ElementTag<BlockQ4_1>());
    case ElementType::kIQ4_NL:
      return f(ElementTag<BlockIQ4NL>());
    case ElementType::kF32:
      break;
  }
  return f(ElementTag<float>());
}

// 32 floats as one block, the bits of ggml's reference quantizers
// (quantize_row_q8_0_ref, _q4_0_ref, _q4_1_ref, _iq4_nl_ref); a block
// holding a NaN or an infinity gets d NaN (q4_1: m NaN too) and codes of 0.
void QuantizeBlock(const float* x, BlockQ8_0* out);
void QuantizeBlock(const float* x, BlockQ4_0* out);
void QuantizeBlock(const float* x, BlockQ4_1* out);
void QuantizeBlock(const float* x, BlockIQ4NL* out);

// Element c of a row of T as float: exact for every type but q4_1 (d n + m,
// the sum rounded once); an int8 row's scale and an fp8 side's scale are
// applied by the caller.
template <typename T>
float WidenAt(const T* row, size_t c) {
  return ElementFormat<T>::At(row, c);
}

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_COMMON_ELEMENT_H_
