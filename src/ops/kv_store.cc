// StoreKVRows: one dispatch per run of rows.
#include "src/ops/kv_store.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/kv_store.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/kv_store-inl.h"

#if HWY_ONCE
#include <algorithm>
#include <cstring>

#include "src/common/parallel.h"

namespace simdattn {
namespace internal {
HWY_EXPORT(StoreKVRowsImpl);

void StoreKVRows(KVType type, ConstMatrix src, void* dst, size_t dst_stride,
                 float* scales, float side_scale, const RopeTables* rope,
                 size_t first_position) {
  if (src.rows == 0 || src.cols == 0) return;
  HWY_DYNAMIC_DISPATCH(StoreKVRowsImpl)
  (type, src, dst, dst_stride, scales, side_scale, rope, first_position);
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
                  out + row * cols, cols, nullptr, 1.0f, nullptr, 0);
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

}  // namespace internal
}  // namespace simdattn
#endif  // HWY_ONCE
