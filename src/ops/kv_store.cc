// StoreKVRows: one dispatch per run of rows.
#include "src/ops/kv_store.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/kv_store.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/kv_store-inl.h"

#if HWY_ONCE
namespace simdattn {
namespace internal {
HWY_EXPORT(StoreKVRowsImpl);

void StoreKVRows(KVType type, ConstMatrix src, void* dst, size_t dst_stride,
                 float* scales, const RopeTables* rope, size_t first_position) {
  if (src.rows == 0 || src.cols == 0) return;
  HWY_DYNAMIC_DISPATCH(StoreKVRowsImpl)
  (type, src, dst, dst_stride, scales, rope, first_position);
}

}  // namespace internal
}  // namespace simdattn
#endif  // HWY_ONCE
