#include "simdattn/element.h"

#include "src/common/check.h"

namespace simdattn {

bool IsElementType(ElementType type) {
  return static_cast<unsigned>(type) <=
         static_cast<unsigned>(ElementType::kInt8);
}

ElementTraits ElementTraitsOf(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return {"f32", 4, false};
    case ElementType::kBF16:
      return {"bf16", 2, false};
    case ElementType::kF16:
      return {"f16", 2, false};
    case ElementType::kInt8:
      return {"int8", 1, true};
  }
  internal::ThrowInvalidArgument("ElementTraitsOf", "type (",
                                 static_cast<int>(type),
                                 ") is not an ElementType");
}

size_t KVTypeBytes(KVType type) { return ElementTraitsOf(type).bytes; }

}  // namespace simdattn
