// Argument validation at the API boundary. Kernels behind it assume valid
// input; every message names the function, the argument and the values.
#ifndef SIMDATTN_SRC_COMMON_CHECK_H_
#define SIMDATTN_SRC_COMMON_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "simdattn/tensor.h"

namespace simdattn {
namespace internal {

template <typename... Args>
[[noreturn]] void ThrowInvalidArgument(const char* function, Args&&... parts) {
  std::ostringstream message;
  message << function << ": ";
  (message << ... << parts);
  throw std::invalid_argument(message.str());
}

// Throws std::invalid_argument("<function>: <parts...>") unless `condition`.
#define SIMDATTN_REQUIRE(condition, function, ...)                   \
  do {                                                               \
    if (!(condition)) {                                              \
      ::simdattn::internal::ThrowInvalidArgument(function, __VA_ARGS__); \
    }                                                                \
  } while (false)

// a * b, or throws naming `what` if the product does not fit in size_t.
size_t CheckedMul(const char* function, const char* what, size_t a, size_t b);

// The half-open byte range a view can touch; empty for an empty view.
struct ByteRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool Overlaps(const ByteRange& other) const {
    return begin < other.end && other.begin < end;
  }
};

// Validates a matrix argument (null data with a non-zero size, stride < cols,
// extents that overflow) and returns the memory it spans.
ByteRange CheckMatrix(const char* function, const char* name, ConstMatrix m);

// The same for a 4-D view; element size in bytes for non-float views.
ByteRange CheckTensor4(const char* function, const char* name,
                       const void* data, const size_t (&dims)[4],
                       const size_t (&strides)[3], size_t element_size);
template <typename T>
ByteRange CheckTensor4(const char* function, const char* name,
                       Tensor4View<T> t) {
  return CheckTensor4(function, name, t.data, t.dims, t.strides, sizeof(T));
}

// "(2, 3, 4, 5)" for error messages.
std::string ShapeString(const size_t (&dims)[4]);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_COMMON_CHECK_H_
