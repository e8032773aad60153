// KVCache: validation and row copies; attention over it is
// ScaledDotProductAttention with a causal offset.
#include <cstring>

#include "simdattn/attention.h"
#include "src/common/check.h"

namespace simdattn {

using internal::ShapeString;

KVCache::KVCache(size_t batch, size_t kv_heads, size_t capacity,
                 size_t head_dim) {
  constexpr const char* kFn = "KVCache";
  const size_t per_tensor = internal::CheckedMul(
      kFn, "batch * kv_heads * capacity * head_dim",
      internal::CheckedMul(kFn, "batch * kv_heads", batch, kv_heads),
      internal::CheckedMul(kFn, "capacity * head_dim", capacity, head_dim));
  owned_.assign(internal::CheckedMul(kFn, "the keys and values", per_tensor, 2),
                0.0f);
  keys_ = Tensor4::Dense(owned_.data(), batch, kv_heads, capacity, head_dim);
  values_ = Tensor4::Dense(owned_.data() + per_tensor, batch, kv_heads,
                           capacity, head_dim);
}

KVCache::KVCache(Tensor4 keys, Tensor4 values) : keys_(keys), values_(values) {
  constexpr const char* kFn = "KVCache";
  SIMDATTN_REQUIRE(internal::SameDims(keys.dims, values.dims), kFn,
                   "keys have shape ", ShapeString(keys.dims),
                   " but values have shape ", ShapeString(values.dims));
  const internal::Footprint rk = internal::CheckTensor4(kFn, "keys", keys);
  const internal::Footprint rv = internal::CheckTensor4(kFn, "values", values);
  internal::CheckDistinctElements(kFn, "keys", keys.dims, keys.strides);
  internal::CheckDistinctElements(kFn, "values", values.dims, values.strides);
  SIMDATTN_REQUIRE(!rk.Overlaps(rv), kFn, "keys overlap values");
}

void KVCache::Append(ConstTensor4 keys, ConstTensor4 values) {
  constexpr const char* kFn = "KVCache::Append";
  const size_t n = keys.dims[2];
  const size_t expected[4] = {batch(), kv_heads(), n, head_dim()};
  SIMDATTN_REQUIRE(internal::SameDims(keys.dims, expected), kFn,
                   "keys have shape ", ShapeString(keys.dims), ", expected ",
                   ShapeString(expected));
  SIMDATTN_REQUIRE(internal::SameDims(values.dims, expected), kFn,
                   "values have shape ", ShapeString(values.dims),
                   ", expected ", ShapeString(expected));
  SIMDATTN_REQUIRE(n <= capacity() - size_, kFn, "appending ", n, " tokens to ",
                   size_, " exceeds the capacity (", capacity(), ")");
  internal::CheckTensor4(kFn, "keys", keys);
  internal::CheckTensor4(kFn, "values", values);
  // Nothing to copy (head_dim 0, no batch or heads): the views may be null,
  // and the loops below could be long for nothing.
  if (keys.empty()) {
    size_ += n;
    return;
  }
  const size_t row_bytes = head_dim() * sizeof(float);
  for (size_t b = 0; b < batch(); ++b) {
    for (size_t h = 0; h < kv_heads(); ++h) {
      for (size_t t = 0; t < n; ++t) {
        std::memmove(keys_.Slice(b, h).Row(size_ + t), keys.Slice(b, h).Row(t),
                     row_bytes);
        std::memmove(values_.Slice(b, h).Row(size_ + t),
                     values.Slice(b, h).Row(t), row_bytes);
      }
    }
  }
  size_ += n;
}

ConstTensor4 KVCache::keys() const {
  return ConstTensor4(keys_.data, batch(), kv_heads(), size_, head_dim(),
                      keys_.strides[0], keys_.strides[1], keys_.strides[2]);
}

ConstTensor4 KVCache::values() const {
  return ConstTensor4(values_.data, batch(), kv_heads(), size_, head_dim(),
                      values_.strides[0], values_.strides[1],
                      values_.strides[2]);
}

}  // namespace simdattn
