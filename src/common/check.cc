#include "src/common/check.h"

#include <string>

namespace simdattn {
namespace internal {

size_t CheckedMul(const char* function, const char* what, size_t a, size_t b) {
  size_t product;
  SIMDATTN_REQUIRE(!__builtin_mul_overflow(a, b, &product), function, what,
                   " overflows size_t (", a, " * ", b, ")");
  return product;
}

namespace {

// Bytes from the first to one past the last element of a strided view.
size_t SpanBytes(const char* function, const char* name, const size_t* dims,
                 const size_t* strides, int rank, size_t element_size) {
  size_t last = dims[rank - 1];  // Index of one past the last element.
  for (int k = 0; k < rank - 1; ++k) {
    const size_t offset = CheckedMul(function, name, dims[k] - 1, strides[k]);
    SIMDATTN_REQUIRE(!__builtin_add_overflow(last, offset, &last), function,
                     name, " extent overflows size_t");
  }
  return CheckedMul(function, name, last, element_size);
}

}  // namespace

ByteRange CheckMatrix(const char* function, const char* name, ConstMatrix m) {
  SIMDATTN_REQUIRE(m.stride >= m.cols || m.rows <= 1, function, name,
                   ".stride (", m.stride, ") is less than ", name, ".cols (",
                   m.cols, ")");
  if (m.empty()) return {};
  SIMDATTN_REQUIRE(m.data != nullptr, function, name, " is null but has shape ",
                   m.rows, " x ", m.cols);
  const size_t dims[2] = {m.rows, m.cols};
  const size_t strides[1] = {m.stride};
  const size_t bytes = SpanBytes(function, name, dims, strides, 2, sizeof(float));
  const auto begin = reinterpret_cast<uintptr_t>(m.data);
  return {begin, begin + bytes};
}

ByteRange CheckTensor4(const char* function, const char* name,
                       const void* data, const size_t (&dims)[4],
                       const size_t (&strides)[3], size_t element_size) {
  SIMDATTN_REQUIRE(strides[2] >= dims[3] || dims[2] <= 1, function, name,
                   " row stride (", strides[2], ") is less than its row length (",
                   dims[3], ")");
  if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || dims[3] == 0) return {};
  SIMDATTN_REQUIRE(data != nullptr, function, name, " is null but has shape ",
                   ShapeString(dims));
  const size_t bytes = SpanBytes(function, name, dims, strides, 4, element_size);
  const auto begin = reinterpret_cast<uintptr_t>(data);
  return {begin, begin + bytes};
}

std::string ShapeString(const size_t (&dims)[4]) {
  return "(" + std::to_string(dims[0]) + ", " + std::to_string(dims[1]) + ", " +
         std::to_string(dims[2]) + ", " + std::to_string(dims[3]) + ")";
}

}  // namespace internal
}  // namespace simdattn
