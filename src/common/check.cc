#include "src/common/check.h"

#include <algorithm>
#include <string>
#include <utility>

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
  const size_t bytes =
      SpanBytes(function, name, dims, strides, 2, sizeof(float));
  const auto begin = reinterpret_cast<uintptr_t>(m.data);
  return {begin, begin + bytes};
}

ByteRange CheckTensor4(const char* function, const char* name, const void* data,
                       const size_t (&dims)[4], const size_t (&strides)[3],
                       size_t element_size) {
  SIMDATTN_REQUIRE(strides[2] >= dims[3] || dims[2] <= 1, function, name,
                   " row stride (", strides[2],
                   ") is less than its row length (", dims[3], ")");
  if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || dims[3] == 0) return {};
  SIMDATTN_REQUIRE(data != nullptr, function, name, " is null but has shape ",
                   ShapeString(dims));
  const size_t bytes =
      SpanBytes(function, name, dims, strides, 4, element_size);
  const auto begin = reinterpret_cast<uintptr_t>(data);
  return {begin, begin + bytes};
}

std::string ShapeString(const size_t (&dims)[4]) {
  return "(" + std::to_string(dims[0]) + ", " + std::to_string(dims[1]) + ", " +
         std::to_string(dims[2]) + ", " + std::to_string(dims[3]) + ")";
}

// Sufficient condition: taking the dimensions of extent > 1 by increasing
// stride, each stride is at least the span of the faster ones.
void CheckDistinctElements(const char* function, const char* name,
                           const size_t (&dims)[4],
                           const size_t (&strides)[3]) {
  if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || dims[3] == 0) return;
  int order[3];
  int n = 0;
  for (int k = 0; k < 3; ++k) {
    if (dims[k] > 1) order[n++] = k;
  }
  // Insertion sort (std::sort on 3 ints trips GCC 12's -Warray-bounds).
  for (int a = 1; a < n; ++a) {
    for (int b = a; b > 0 && strides[order[b]] < strides[order[b - 1]]; --b) {
      std::swap(order[b], order[b - 1]);
    }
  }
  size_t span = dims[3];
  for (int o = 0; o < n; ++o) {
    const int k = order[o];
    SIMDATTN_REQUIRE(strides[k] >= span, function, name, ".strides[", k, "] (",
                     strides[k], ") makes elements of ", name, " (shape ",
                     ShapeString(dims), ") overlap: it is less than the ", span,
                     " elements spanned by the faster dimensions");
    span += (dims[k] - 1) * strides[k];
  }
}

namespace {

// A mask must have the scores' dims; a stride of 0 broadcasts that dimension
// (a row stride of 0 shares one row among all rows). Returns its bytes.
template <typename T>
ByteRange CheckMask(const char* function, const char* name,
                    Tensor4View<const T> m, const size_t (&dims)[4]) {
  SIMDATTN_REQUIRE(SameDims(m.dims, dims), function, name, " has shape ",
                   ShapeString(m.dims), " but the scores have shape ",
                   ShapeString(dims));
  size_t spanned[4] = {m.dims[0], m.dims[1], m.dims[2], m.dims[3]};
  for (int k = 0; k < 3; ++k) {
    if (m.strides[k] == 0) spanned[k] = std::min<size_t>(spanned[k], 1);
  }
  return CheckTensor4(function, name, m.data, spanned, m.strides, sizeof(T));
}

}  // namespace

void CheckAttentionMask(const char* function, const AttentionMask& mask,
                        const size_t (&scores)[4], const char* keys_name,
                        ByteRange output, const char* output_name) {
  if (mask.boolean.data != nullptr) {
    const ByteRange rm =
        CheckMask(function, "mask.boolean", mask.boolean, scores);
    SIMDATTN_REQUIRE(!output.Overlaps(rm), function, output_name,
                     " overlaps mask.boolean");
  }
  if (mask.additive.data != nullptr) {
    const ByteRange rm =
        CheckMask(function, "mask.additive", mask.additive, scores);
    SIMDATTN_REQUIRE(!output.Overlaps(rm), function, output_name,
                     " overlaps mask.additive");
  }
  if (mask.key_lengths != nullptr && scores[0] != 0) {
    const auto begin = reinterpret_cast<uintptr_t>(mask.key_lengths);
    const ByteRange rk{
        begin, begin + CheckedMul(function, "mask.key_lengths' size", scores[0],
                                  sizeof(size_t))};
    SIMDATTN_REQUIRE(!output.Overlaps(rk), function, output_name,
                     " overlaps mask.key_lengths");
    for (size_t b = 0; b < scores[0]; ++b) {
      SIMDATTN_REQUIRE(mask.key_lengths[b] <= scores[3], function,
                       "mask.key_lengths[", b, "] (", mask.key_lengths[b],
                       ") exceeds the number of keys, ", keys_name, " (",
                       scores[3], ")");
    }
  }
}

void CheckDropout(const char* function, const char* p_name, float p,
                  const char* const (&dim_names)[4], const size_t (&dims)[4]) {
  SIMDATTN_REQUIRE(p >= 0.0f && p <= 1.0f, function, p_name, " (", p,
                   ") is not a probability in [0, 1]");
  constexpr uint64_t kMaxIndexDim = uint64_t{1} << 32;
  constexpr uint64_t kMaxRowLength = uint64_t{1} << 35;
  for (int k = 0; k < 3; ++k) {
    SIMDATTN_REQUIRE(static_cast<uint64_t>(dims[k]) <= kMaxIndexDim, function,
                     dim_names[k], " (", dims[k],
                     ") exceeds 2^32, the range of its dropout counter word");
  }
  SIMDATTN_REQUIRE(static_cast<uint64_t>(dims[3]) <= kMaxRowLength, function,
                   dim_names[3], " (", dims[3],
                   ") exceeds 2^35, the range of the dropout counter's "
                   "column word");
}

}  // namespace internal
}  // namespace simdattn
