// Fused attention's per-target code (attention-inl.h), compiled in three
// files, each for a group of the caches' element types, so that a build
// compiles them at once: the single file it was took the longest of every
// build, by far, with one core idle.
#ifndef SIMDATTN_SRC_OPS_ATTEND_H_
#define SIMDATTN_SRC_OPS_ATTEND_H_

#include "simdattn/kernels.h"
#include "simdattn/random.h"
#include "src/common/element.h"
#include "src/ops/kv_rows.h"

namespace simdattn {
namespace internal {

// AttentionOf (attention-inl.h) for the best target this CPU has; the caller
// validated the arguments (see there).
using AttendFn = void(ConstTensor4 q, const QueryLayout& layout,
                      const KVSource& kv, Tensor4 out, float scale,
                      const AttentionMask& mask, float dropout,
                      PhiloxKey dropout_key, float* log_sum_exp,
                      const AttentionArithmetic& arith);

AttendFn* FloatCachesAttention();  // f32, bf16, f16 (attend_floats.cc).
AttendFn* ByteCachesAttention();   // int8, E4M3, E5M2 (attend_bytes.cc).
AttendFn* BlockCachesAttention();  // q8_0, q4_0 (attend_blocks.cc).

// The function for caches of element type `type`.
inline AttendFn* AttentionFor(ElementType type) {
  switch (type) {
    case ElementType::kInt8:
    case ElementType::kFp8E4M3:
    case ElementType::kFp8E5M2:
      return ByteCachesAttention();
    case ElementType::kQ8_0:
    case ElementType::kQ4_0:
      return BlockCachesAttention();
    case ElementType::kF32:
    case ElementType::kBF16:
    case ElementType::kF16:
      break;
  }
  return FloatCachesAttention();
}

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_ATTEND_H_
