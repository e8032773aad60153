// The unfused path's product with the values under the mask model (mask.h).
#include "src/ops/mask.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "simdattn/kernels.h"
#include "src/common/scratch.h"

namespace simdattn {
namespace internal {
namespace {

bool AllFinite(const float* row, size_t n) {
  for (size_t c = 0; c < n; ++c) {
    if (!std::isfinite(row[c])) return false;
  }
  return true;
}

}  // namespace

void MaskedWeightsTimesValues(ConstTensor4 weights, ConstTensor4 v, Tensor4 out,
                              const AttentionMask& mask) {
  const size_t batch = v.dims[0], kv_heads = v.dims[1], keys = v.dims[2];
  const size_t value_dim = v.dims[3];
  // (b, kv head, key) of every value row with a non-finite element: where
  // a masked key's weight 0 times V would not be 0.
  struct Key {
    size_t b, g, j;
  };
  std::vector<Key> nonfinite;
  for (size_t b = 0; b < batch; ++b) {
    for (size_t g = 0; g < kv_heads; ++g) {
      const ConstMatrix values = v.Slice(b, g);
      for (size_t j = 0; j < keys; ++j) {
        if (!AllFinite(values.Row(j), value_dim))
          nonfinite.push_back({b, g, j});
      }
    }
  }
  if (nonfinite.empty() || weights.empty()) {
    BatchedMatMul(weights, v, out);
    return;
  }
  // The product over a dense copy with those rows zeroed, then each row
  // that sees such a key gets its weight times the row added.
  ScratchBuffer copy(batch * kv_heads * keys * value_dim);
  const Tensor4 clean =
      Tensor4::Dense(copy.data(), batch, kv_heads, keys, value_dim);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t g = 0; g < kv_heads; ++g) {
      for (size_t j = 0; j < keys; ++j) {
        std::memcpy(clean.Slice(b, g).Row(j), v.Slice(b, g).Row(j),
                    value_dim * sizeof(float));
      }
    }
  }
  for (const Key& key : nonfinite) {
    std::fill_n(clean.Slice(key.b, key.g).Row(key.j), value_dim, 0.0f);
  }
  BatchedMatMul(weights, clean, out);
  const MaskModel model(mask, keys);
  const size_t group = weights.dims[1] / kv_heads;
  for (const Key& key : nonfinite) {
    const float* value = v.Slice(key.b, key.g).Row(key.j);
    for (size_t h = key.g * group; h < (key.g + 1) * group; ++h) {
      for (size_t i = 0; i < weights.dims[2]; ++i) {
        if (!model.Visible(key.b, h, i, key.j)) continue;
        const float weight = weights.Slice(key.b, h).Row(i)[key.j];
        float* row = out.Slice(key.b, h).Row(i);
        for (size_t c = 0; c < value_dim; ++c) row[c] += weight * value[c];
      }
    }
  }
}

}  // namespace internal

std::vector<float> AlibiSlopes(size_t num_heads) {
  if (num_heads == 0) return {};
  size_t power = 1;  // The largest power of two <= num_heads.
  while (power <= num_heads / 2) power *= 2;
  // 2^(-8k/n) for k = 1..n, n a power of two.
  const auto slopes_of = [](size_t n, size_t k) {
    return static_cast<float>(std::exp2(-8.0 * double(k) / double(n)));
  };
  std::vector<float> slopes;
  for (size_t k = 1; k <= power; ++k) slopes.push_back(slopes_of(power, k));
  for (size_t k = 1; slopes.size() < num_heads; k += 2) {
    slopes.push_back(slopes_of(2 * power, k));
  }
  return slopes;
}

}  // namespace simdattn
