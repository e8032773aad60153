// StoreKVRows: one dispatch per run of rows; WriteKVSlots over them.
#include "src/ops/kv_store.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/kv_store.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/kv_store-inl.h"

#if HWY_ONCE
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#include "src/common/check.h"
#include "src/common/parallel.h"
#include "src/common/scratch.h"
#include "src/ops/kv_pool.h"
#include "src/ops/rope.h"
#include "src/ops/varlen.h"

namespace simdattn {
namespace internal {
HWY_EXPORT(StoreKVRowsImpl);

void StoreKVRows(KVType type, ConstMatrix src, void* dst, size_t dst_stride,
                 float* scales, float side_scale, const RopeRows* rope) {
  if (src.rows == 0 || src.cols == 0) return;
  HWY_DYNAMIC_DISPATCH(StoreKVRowsImpl)
  (type, src, dst, dst_stride, scales, side_scale, rope);
}

void RoundToBFloat16(ConstTensor4 t, BFloat16* out, float* widened) {
  const size_t heads = t.dims[1], tokens = t.dims[2], cols = t.dims[3];
  if (t.empty()) return;
  // One pass over every row; a chunk's rows are runs within slices.
  ParallelFor(0, t.NumMatrices() * tokens, 64, [&](size_t first, size_t last) {
    for (size_t row = first; row < last;) {
      const size_t slice = row / tokens, i = row % tokens;
      const size_t n = std::min(last - row, tokens - i);
      const ConstMatrix m = t.Slice(slice / heads, slice % heads);
      StoreKVRows(KVType::kBF16, ConstMatrix(m.Row(i), n, cols, m.stride),
                  out + row * cols, cols, nullptr, 1.0f);
      if (widened != nullptr) {
        for (size_t e = row * cols; e < (row + n) * cols; ++e) {
          const uint32_t bits = uint32_t{out[e].bits} << 16;
          std::memcpy(&widened[e], &bits, sizeof(bits));
        }
      }
      row += n;
    }
  });
}

void WriteSlots(ConstTensor4 keys, ConstTensor4 values,
                const int64_t* slot_mapping, const KVPages& pages,
                const RopeOptions* rope, const size_t* positions,
                bool slots_checked) {
  constexpr const char* kFn = "WriteKVSlots";
  const size_t tokens = keys.dims[2], heads = pages.kv_heads;
  const bool latent = internal::Latent(pages.keys, pages.values);
  const internal::KVCacheViewSpans spans = internal::CheckPages(kFn, pages);
  const size_t value_dim =
      pages.value_dim == 0 ? pages.head_dim : pages.value_dim;
  const size_t expected_keys[4] = {1, heads, tokens, pages.head_dim};
  SIMDATTN_REQUIRE(internal::SameDims(keys.dims, expected_keys), kFn,
                   "keys has shape ", internal::ShapeString(keys.dims),
                   ", expected ", internal::ShapeString(expected_keys),
                   " (1, kv_heads, num_tokens, head_dim)");
  const size_t expected_values[4] = {1, heads, tokens, value_dim};
  if (latent) {
    SIMDATTN_REQUIRE(values.empty(), kFn, "values has shape ",
                     internal::ShapeString(values.dims),
                     " but the pages are latent (values == keys): the keys' "
                     "rows hold the values, so values must be empty");
  } else {
    SIMDATTN_REQUIRE(internal::SameDims(values.dims, expected_values), kFn,
                     "values has shape ", internal::ShapeString(values.dims),
                     ", expected ", internal::ShapeString(expected_values),
                     " (1, kv_heads, num_tokens, value_dim)");
  }
  const internal::Footprint rk = internal::CheckTensor4(kFn, "keys", keys);
  const internal::Footprint rv = internal::CheckTensor4(kFn, "values", values);
  for (const internal::Footprint* pool :
       {&spans.keys, &spans.values, &spans.key_scales, &spans.value_scales}) {
    SIMDATTN_REQUIRE(!pool->Overlaps(rk) && !pool->Overlaps(rv), kFn,
                     "keys or values overlap the pages");
  }
  if (rope != nullptr) {
    internal::CheckRopeOptions(kFn, "rope", *rope, pages.head_dim);
    SIMDATTN_REQUIRE(rope->positions == nullptr, kFn,
                     "rope.positions must be null: positions gives each "
                     "token's");
    SIMDATTN_REQUIRE(positions != nullptr || tokens == 0, kFn,
                     "positions is null");
  }
  if (tokens == 0) return;
  if (!slots_checked) {
    internal::CheckSlots(kFn, "slot_mapping", pages, slot_mapping, tokens,
                         /*skip=*/true, /*distinct=*/true);
  }
  // Fused RoPE: each token's angles, computed as ApplyRope computes them, in
  // scratch (a step allocates nothing).
  std::optional<internal::ScratchBuffer> angles_buffer;
  internal::RopeRows angles;
  if (rope != nullptr) {
    const size_t half = internal::RotaryDim(*rope, pages.head_dim) / 2;
    angles_buffer.emplace(2 * tokens * half + 2 * half);
    float* cos = angles_buffer->data();
    float* sin = cos + tokens * half;
    double* frequency = reinterpret_cast<double*>(sin + tokens * half);
    internal::RopeFrequencies(rope->theta, 2 * half, frequency);
    for (size_t t = 0; t < tokens; ++t) {
      internal::RopeAngles(frequency, half, double(positions[t]),
                           cos + t * half, sin + t * half);
    }
    angles = {cos, sin, half, rope->rotary_offset, rope->pairing};
  }
  if (heads == 0 || pages.head_dim == 0) return;

  const internal::KVPool pool = internal::KVPool::Of(pages);
  const bool scaled = pool.scaled();
  const size_t block_size = pages.block_size;
  // Per head, runs of tokens in consecutive slots of one block (a prefill
  // chunk's) are one store each.
  internal::ParallelFor(0, heads, 1, [&](size_t first, size_t last) {
    for (size_t h = first; h < last; ++h) {
      for (size_t t = 0; t < tokens;) {
        const int64_t slot = slot_mapping[t];
        size_t run = 1;
        while (t + run < tokens && slot >= 0 &&
               slot_mapping[t + run] == slot + static_cast<int64_t>(run) &&
               (static_cast<size_t>(slot) + run) % block_size != 0) {
          ++run;
        }
        if (slot >= 0) {
          const size_t s = static_cast<size_t>(slot);
          const ConstMatrix k = keys.Slice(0, h);
          const internal::RopeRows rows = angles.From(t);
          internal::StoreKVRows(
              pages.type, ConstMatrix(k.Row(t), run, k.cols, k.stride),
              pool.Key(s, h), pages.row_stride,
              scaled ? pool.KeyScale(s, h) : nullptr, pool.key_scale,
              rope != nullptr ? &rows : nullptr);
          if (!latent) {
            const ConstMatrix v = values.Slice(0, h);
            internal::StoreKVRows(
                pages.type, ConstMatrix(v.Row(t), run, v.cols, v.stride),
                pool.Value(s, h), pages.row_stride,
                scaled ? pool.ValueScale(s, h) : nullptr, pool.value_scale);
          }
        }
        t += run;
      }
    }
  });
}

}  // namespace internal

void WriteKVSlots(ConstTensor4 keys, ConstTensor4 values,
                  const int64_t* slot_mapping, const KVPages& pages) {
  internal::WriteSlots(keys, values, slot_mapping, pages, nullptr, nullptr,
                       false);
}

void WriteKVSlots(ConstTensor4 keys, ConstTensor4 values,
                  const int64_t* slot_mapping, const KVPages& pages,
                  const RopeOptions& rope, const size_t* positions) {
  internal::WriteSlots(keys, values, slot_mapping, pages, &rope, positions,
                       false);
}

void WriteKVSlots(ConstTensor4 keys, ConstTensor4 values,
                  const VarlenStep& step, const KVPages& pages,
                  const RopeOptions* rope) {
  if (rope == nullptr) {
    internal::WriteSlots(keys, values, step.slot_mapping, pages, nullptr,
                         nullptr, false);
    return;
  }
  const size_t tokens = keys.dims[2];
  internal::ScratchBuffer buffer(
      hwy::DivCeil(tokens * sizeof(size_t), sizeof(float)));
  const size_t* positions = internal::TokenPositions(
      "WriteKVSlots", step, tokens, reinterpret_cast<size_t*>(buffer.data()));
  internal::WriteSlots(keys, values, step.slot_mapping, pages, rope, positions,
                       false);
}

}  // namespace simdattn
#endif  // HWY_ONCE
