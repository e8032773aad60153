// The one place that turns an ElementType into a C++ type: code written once
// for every element type visits it, so a new type is its traits
// (element.cc), its widening (Widen here, LoadRow in attention-inl.h) and its
// store (kv_store-inl.h).
#ifndef SIMDATTN_SRC_COMMON_ELEMENT_H_
#define SIMDATTN_SRC_COMMON_ELEMENT_H_

#include <cstdint>
#include <type_traits>

#include "simdattn/element.h"
#include "simdattn/kernels.h"
#include "simdattn/tensor.h"

namespace simdattn {
namespace internal {

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
    case ElementType::kF32:
      break;
  }
  return f(ElementTag<float>());
}

// One stored element as float: exact for every type (an int8 row's scale is
// applied by the caller, to the widened value).
inline float Widen(float x) { return x; }
inline float Widen(BFloat16 x) { return ToFloat(x); }
inline float Widen(Float16 x) { return ToFloat(x); }
inline float Widen(int8_t x) { return static_cast<float>(x); }

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_COMMON_ELEMENT_H_
