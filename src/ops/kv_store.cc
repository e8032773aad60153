// StoreKVRows: one dispatch per run of rows.
#include "src/ops/kv_store.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/kv_store.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/kv_store-inl.h"

#if HWY_ONCE
#include <cstring>

#include "src/common/parallel.h"

namespace simdattn {
namespace internal {
HWY_EXPORT(StoreKVRowsImpl);

void StoreKVRows(KVType type, ConstMatrix src, void* dst, size_t dst_stride,
                 float* scales, const RopeTables* rope, size_t first_position) {
  if (src.rows == 0 || src.cols == 0) return;
  HWY_DYNAMIC_DISPATCH(StoreKVRowsImpl)
  (type, src, dst, dst_stride, scales, rope, first_position);
}

void RoundToBFloat16Rows(ConstMatrix m, BFloat16* out, float* widened) {
  ParallelFor(0, m.rows, 16, [&](size_t first, size_t last) {
    StoreKVRows(KVType::kBF16,
                ConstMatrix(m.Row(first), last - first, m.cols, m.stride),
                out + first * m.cols, m.cols, nullptr, nullptr, 0);
    if (widened == nullptr) return;
    for (size_t i = first * m.cols; i < last * m.cols; ++i) {
      const uint32_t bits = uint32_t{out[i].bits} << 16;
      std::memcpy(&widened[i], &bits, sizeof(bits));
    }
  });
}

}  // namespace internal
}  // namespace simdattn
#endif  // HWY_ONCE
