// The element types simdattn stores, one vocabulary for KV caches
// (KVCacheConfig::type, KVCacheView::type), state_dict tensors
// (TensorRef::dtype), the C API and the command-line program.
#ifndef SIMDATTN_ELEMENT_H_
#define SIMDATTN_ELEMENT_H_

#include <cstddef>
#include <cstdint>

#include "simdattn/export.h"

namespace simdattn {

// Arithmetic is float32 whatever the type: kernels widen each element in
// registers as they read it. kernels.h's KVType comment states each type's
// rounding and error.
enum class ElementType : uint8_t {
  kF32,      // float
  kBF16,     // BFloat16 (tensor.h)
  kF16,      // Float16 (tensor.h)
  kInt8,     // int8_t, one float scale per row: value = scale * q
  kFp8E4M3,  // OCP fp8 E4M3 (no infinities, max 448), times a scale per side
  kFp8E5M2,  // OCP fp8 E5M2 (IEEE-like), times a scale per side
  kQ8_0,     // ggml's block_q8_0: 32 values as int8 times one fp16 scale
  kQ4_0,     // ggml's block_q4_0: 32 values as 4 bits times one fp16 scale
  kQ4_1,     // ggml's block_q4_1: 32 values as 4 bits times d, plus m (fp16)
  kIQ4_NL,   // ggml's block_iq4_nl: 32 4-bit indices into a fixed table of
             // 16 int8 values, times one fp16 scale
};
// The last enumerator: every value up to it is an ElementType.
inline constexpr ElementType kLastElementType = ElementType::kIQ4_NL;
// A KV cache's element type (any ElementType).
using KVType = ElementType;
// A state_dict tensor's element type (kF32, kBF16 or kF16).
using DType = ElementType;

// What a type is, for code that handles every type alike: ask these rather
// than list types. Block types (q8_0, q4_0, q4_1, iq4_nl) store `values`
// consecutive elements of a row in `bytes` bytes; rows of them hold a
// multiple of `values` elements.
struct ElementTraits {
  const char* name;  // "f32", "bf16", "f16", "int8", "fp8", "fp8e5m2",
                     // "q8_0", "q4_0", "q4_1", "iq4_nl" (the CLI's suffixes).
  size_t bytes;      // Of one element, or of one block.
  size_t values;     // Elements per block: 1 unless a block type.
  bool scaled;       // One float scale per row (per token and head).
  bool side_scaled;  // One float scale per cache side (keys, values).
  bool int8_scores;  // Keys of integer codes: ComputeType::kInt8 reads
                     // them (int8, q8_0, q4_0, iq4_nl).
  bool bf16_exact;   // Every value is a bf16 value (times a side scale):
                     // ComputeType::kBFloat16 reads them (bf16, fp8s).
  bool state_dict;   // A state_dict tensor may hold it (f32, bf16, f16).
};

// Whether `type` is one of the enumerators (a value cast from an integer may
// not be).
SIMDATTN_API bool IsElementType(ElementType type);
// The traits of `type`; throws std::invalid_argument unless IsElementType.
SIMDATTN_API ElementTraits ElementTraitsOf(ElementType type);
// ElementTraitsOf(type).bytes.
SIMDATTN_API size_t KVTypeBytes(KVType type);
// Bytes of n elements of `type` (n a multiple of its block's values).
SIMDATTN_API size_t ElementBytes(ElementType type, size_t n);

}  // namespace simdattn

#endif  // SIMDATTN_ELEMENT_H_
