// Argument validation at the API boundary. Kernels behind it assume valid
// input; every message names the function, the argument and the values.
#ifndef SIMDATTN_SRC_COMMON_CHECK_H_
#define SIMDATTN_SRC_COMMON_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "simdattn/kernels.h"
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
#define SIMDATTN_REQUIRE(condition, function, ...)                       \
  do {                                                                   \
    if (!(condition)) {                                                  \
      ::simdattn::internal::ThrowInvalidArgument(function, __VA_ARGS__); \
    }                                                                    \
  } while (false)

// a * b, or throws naming `what` if the product does not fit in size_t.
size_t CheckedMul(const char* function, const char* what, size_t a, size_t b);

// The elements a strided view touches: `range`, the half-open bytes from its
// first to one past its last element, bounds them; the layout (in elements)
// tells which of those bytes it really touches.
struct Footprint {
  uintptr_t begin = 0, end = 0;  // begin == end for an empty view.
  size_t element_size = 0;
  size_t dims[4] = {};
  size_t strides[3] = {};
  // Whether the two views share a byte. Exact where the views have the same
  // element size and the same stride in every dimension either spans (Q, K,
  // V and O as column blocks of one (batch, tokens, 4 d) buffer share none);
  // otherwise whether their byte ranges meet.
  bool Overlaps(const Footprint& other) const;
  // The same element size, and the same stride along every dimension either
  // spans (more than one index): element (i, j, k, l) sits at the same
  // offset from data in both.
  bool SameLayout(const Footprint& other) const;
};

// The footprint of `count` contiguous elements.
Footprint ContiguousFootprint(const char* function, const char* name,
                              const void* data, size_t count,
                              size_t element_size);

// Validates a matrix argument (null data with a non-zero size, stride < cols,
// extents that overflow) and returns the memory it spans.
Footprint CheckMatrix(const char* function, const char* name, const void* data,
                      size_t rows, size_t cols, size_t stride,
                      size_t element_size);
template <typename T>
Footprint CheckMatrix(const char* function, const char* name, MatrixView<T> m) {
  return CheckMatrix(function, name, m.data, m.rows, m.cols, m.stride,
                     sizeof(T));
}

// The same for a 4-D view; element size in bytes for non-float views.
Footprint CheckTensor4(const char* function, const char* name, const void* data,
                       const size_t (&dims)[4], const size_t (&strides)[3],
                       size_t element_size);
template <typename T>
Footprint CheckTensor4(const char* function, const char* name,
                       Tensor4View<T> t) {
  return CheckTensor4(function, name, t.data, t.dims, t.strides, sizeof(T));
}

// "(2, 3, 4, 5)" for error messages.
std::string ShapeString(const size_t (&dims)[4]);

inline bool SameDims(const size_t (&a)[4], const size_t (&b)[4]) {
  return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

// A written view must not reach one element through two indices: rows are
// written concurrently. Call after CheckTensor4 (which bounds every span).
void CheckDistinctElements(const char* function, const char* name,
                           const size_t (&dims)[4], const size_t (&strides)[3]);

// Validates the masks of a softmax or attention over scores of shape
// `scores` (batch, heads, rows, cols): each mask has those dims (a stride of
// 0 broadcasts), key_lengths[b] <= cols (named keys_name in messages), and
// none overlaps `output`.
void CheckAttentionMask(const char* function, const AttentionMask& mask,
                        const size_t (&scores)[4], const char* keys_name,
                        Footprint output, const char* output_name);

// A view's value row length: value_dim, 0 meaning head_dim.
inline size_t ValueDim(const KVCacheView& kv) {
  return kv.value_dim == 0 ? kv.head_dim : kv.value_dim;
}

// Whether keys and values are one latent pool (MLA): values == keys, each
// key row's first ValueDim elements its value, read with the keys' scales
// (key_scale, key_scales) wherever the view or pages came from.
inline bool Latent(const void* keys, const void* values) {
  return keys != nullptr && values == keys;
}

// Validates a varlen step's query_starts (kernels.h's VarlenAttention):
// num_seqs + 1 offsets from 0, non-decreasing, the last num_tokens.
void CheckQueryStarts(const char* function, const size_t* query_starts,
                      size_t num_seqs, size_t num_tokens);

// Validates a KV cache's layout (kernels.h's KVCacheView) for attention of
// q_tokens queries per sequence (or, with query_starts, already validated,
// query_starts[b + 1] - query_starts[b] for sequence b), the type and the
// shapes against q checked by the caller: block size and table entries,
// capacity, lengths (each at least its queries), and the memory of keys,
// values and scales. With a sliding `window`, only the table entries of
// blocks from the first key a query reads (kernels.h's FirstKeyRead) on.
// Returns what they span, and the longest length.
struct KVCacheViewSpans {
  Footprint keys, values, key_scales, value_scales;
  size_t longest = 0;
};
KVCacheViewSpans CheckKVCacheView(const char* function, const KVCacheView& kv,
                                  size_t q_tokens,
                                  const size_t* query_starts = nullptr,
                                  size_t window = 0, bool dropout = false);
// CheckKVCacheView's two halves: the sequences (lengths and table entries;
// returns the longest length), in time linear in the blocks read, and the
// layout and memory (block size, capacity, strides, scales, spans), in
// constant time. A VarlenPlan checks the first once per step.
size_t CheckKVSequences(const char* function, const KVCacheView& kv,
                        size_t q_tokens, const size_t* query_starts,
                        size_t window, bool dropout);
KVCacheViewSpans CheckKVMemory(const char* function, const KVCacheView& kv);

// Validates a dropout probability `p` (named p_name; NaN fails) over a
// weights tensor of shape `dims`, whose dims are named dim_names in messages.
// The Philox counter of element (b, h, i, j) is (16 * (j / 128) + j % 16, i,
// h, b) in 32-bit words (dropout-inl.h), so b, h, i < 2^32 and j < 2^35.
void CheckDropout(const char* function, const char* p_name, float p,
                  const char* const (&dim_names)[4], const size_t (&dims)[4]);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_COMMON_CHECK_H_
