// A serving step's checked entry points, shared by VarlenAttention and
// WriteKVSlots (which check everything at every call) and VarlenPlan (which
// checks the step once and each layer's tensors and pages per call).
#ifndef SIMDATTN_SRC_OPS_VARLEN_H_
#define SIMDATTN_SRC_OPS_VARLEN_H_

#include <cstddef>
#include <cstdint>

#include "simdattn/kernels.h"
#include "simdattn/tensor.h"

namespace simdattn {
namespace internal {

// What a plan checked once for its step: query_starts, the lengths and the
// table entries of the blocks read with windows of at most max_window (0:
// every block up to the length); the longest length; each sequence's
// causal offset (its length less its queries).
struct CheckedSequences {
  size_t max_window = 0;
  size_t longest = 0;
  const size_t* offsets = nullptr;
};

// VarlenAttention over kv (a paged view of the step), its checks named
// `function`; with `checked`, the step's sequences are taken as checked
// (options.mask.window must then lie in [1, max_window] unless max_window
// is 0).
void AttendVarlen(const char* function, ConstTensor4 q,
                  const size_t* query_starts, const KVCacheView& kv,
                  Tensor4 out, const AttentionOptions& options,
                  const CheckedSequences* checked);

// options with the step's draft trees (throws, naming `function`, where
// options.mask gives trees too).
AttentionOptions WithStepTrees(const char* function, const VarlenStep& step,
                               const AttentionOptions& options);

// WriteKVSlots (rope and positions null, or both given); slots_checked: the
// slots are known to be slots of a pool of this shape, distinct (a plan's).
void WriteSlots(ConstTensor4 keys, ConstTensor4 values,
                const int64_t* slot_mapping, const KVPages& pages,
                const RopeOptions* rope, const size_t* positions,
                bool slots_checked);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_VARLEN_H_
