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
  kF32,   // float
  kBF16,  // BFloat16 (tensor.h)
  kF16,   // Float16 (tensor.h)
  kInt8,  // int8_t, one float scale per row: value = scale * q
};
// A KV cache's element type (any ElementType).
using KVType = ElementType;
// A state_dict tensor's element type (kF32, kBF16 or kF16).
using DType = ElementType;

// What a type is, for code that handles every type alike.
struct ElementTraits {
  const char* name;  // "f32", "bf16", "f16", "int8" (the CLI's suffixes).
  size_t bytes;      // Of one element.
  bool scaled;       // One float scale per row (per token and head).
};

// Whether `type` is one of the enumerators (a value cast from an integer may
// not be).
SIMDATTN_API bool IsElementType(ElementType type);
// The traits of `type`; throws std::invalid_argument unless IsElementType.
SIMDATTN_API ElementTraits ElementTraitsOf(ElementType type);
// ElementTraitsOf(type).bytes.
SIMDATTN_API size_t KVTypeBytes(KVType type);

}  // namespace simdattn

#endif  // SIMDATTN_ELEMENT_H_
