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
AttendFn* BlockCachesAttention();  // ggml's blocks (attend_blocks.cc).

// The function for caches of element type `type`: by its traits, so a new
// type needs only its file's instantiation line.
inline AttendFn* AttentionFor(ElementType type) {
  const ElementTraits traits = ElementTraitsOf(type);
  if (traits.values > 1) return BlockCachesAttention();
  return traits.bytes == 1 ? ByteCachesAttention() : FloatCachesAttention();
}

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_ATTEND_H_
