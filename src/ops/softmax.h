// How Softmax schedules its rows, apart from what a row computes
// (softmax-inl.h): rows per task, groups of short rows, where the exps are
// staged, which outputs are streamed, and what is prefetched. Plain C++,
// the same for every SIMD target. Why each choice pays, measured, is in
// bench/RESULTS.md ("Kept decisions").
#ifndef SIMDATTN_SRC_OPS_SOFTMAX_H_
#define SIMDATTN_SRC_OPS_SOFTMAX_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hwy/base.h"
#include "hwy/cache_control.h"
#include "simdattn/kernels.h"
#include "src/ops/mask.h"

namespace simdattn {
namespace internal {

// One row's operands from its window on: the `skipped` columns before it
// are zeroed, and x, y, masks and cols start after them. x and y may be the
// same memory (in place).
struct SoftmaxRow {
  const float* x;
  float* y;
  RowMasks masks;
  size_t cols;   // Row length.
  size_t limit;  // Columns [limit, cols) are masked by causality or length.
  size_t skipped;
  float sink;  // -inf: none.
};

struct SoftmaxPlan {
  // Rows per task: at least kGrainElements elements, so that task overhead
  // is amortised even for short rows.
  static constexpr size_t kGrainElements = size_t{1} << 14;
  // Short rows go through the passes in groups of up to kMaxGroup rows and
  // kGroupFloats columns: a row's passes wait on its max and on its sum, and
  // the other rows' passes fill that time.
  static constexpr size_t kMaxGroup = 4;
  static constexpr size_t kGroupFloats = 1024;
  // A task's L1 stage for the exps (plus room for one vector of the widest
  // target): a row that fits computes its exps there, so y is written once.
  static constexpr size_t kStageFloats = 4096 + HWY_MAX_BYTES / sizeof(float);
  // Outputs larger than this (about an L3 share) are written with
  // non-temporal stores: their reader finds them in memory anyway, and the
  // stores then skip reading y's lines first.
  static constexpr size_t kStreamBytes = size_t{8} << 20;
  static constexpr size_t kLineFloats = 64 / sizeof(float);
  static constexpr size_t kPrefetchGroups = 2;

  SoftmaxPlan(size_t total_rows, size_t cols)
      : grain(std::max<size_t>(1, kGrainElements / cols)),
        // Stage slots of whole cache lines with room for a vector past the
        // row.
        slot(hwy::RoundUpTo(cols + HWY_MAX_BYTES / sizeof(float), kLineFloats)),
        group(std::clamp<size_t>(
            std::min(kStageFloats / slot, kGroupFloats / cols), 1, kMaxGroup)),
        stream(total_rows * cols * sizeof(float) > kStreamBytes),
        ahead(kPrefetchGroups * group) {}

  size_t grain;
  size_t slot;  // Stage floats per row of a group.
  size_t group;
  bool stream;
  // Rows between the one computed and the one prefetched meanwhile: rows
  // from memory then have kPrefetchGroups groups' time to arrive.
  size_t ahead;
};

// Rows in (b, h, i) order from `first`, advanced without divisions.
class SoftmaxRowWalk {
 public:
  SoftmaxRowWalk(ConstTensor4 x, Tensor4 y, const MaskModel& model,
                 size_t first)
      : x_(x), y_(y), model_(model) {
    const size_t rows = x.dims[2], heads = x.dims[1];
    b_ = first / rows / heads;
    h_ = first / rows % heads;
    i_ = first % rows;
  }

  // The current row's record, then moves to the next row.
  SoftmaxRow Next() {
    const size_t end = model_.End(b_, i_);
    const size_t skipped = std::min(model_.Begin(b_, i_), end);
    RowMasks masks = model_.Row(b_, h_, i_);
    if (masks.additive != nullptr) masks.additive += skipped;
    if (masks.boolean != nullptr) masks.boolean += skipped;
    masks.position -= static_cast<float>(skipped);
    SoftmaxRow r{x_.data + b_ * x_.strides[0] + h_ * x_.strides[1] +
                     i_ * x_.strides[2] + skipped,
                 y_.data + b_ * y_.strides[0] + h_ * y_.strides[1] +
                     i_ * y_.strides[2] + skipped,
                 masks,
                 x_.dims[3] - skipped,
                 end - skipped,
                 skipped,
                 model_.Sink(h_)};
    if (++i_ == x_.dims[2]) {
      i_ = 0;
      if (++h_ == x_.dims[1]) {
        h_ = 0;
        ++b_;
      }
    }
    return r;
  }

 private:
  ConstTensor4 x_;
  Tensor4 y_;
  const MaskModel& model_;
  size_t b_, h_, i_;
};

// Loads a row's columns [from, min(limit, kPrefetchFloats)) ahead of use, a
// line at a time, into L1 (prefetcht0: the row is read at once; RESULTS.md
// has prefetchnta against it).
// Rows cut short by causality or length are read in pieces the hardware
// prefetcher does not follow; beyond kPrefetchFloats it takes over, and more
// would evict the current row. HWY_INLINE: GCC deletes calls to a plain
// inline prefetch function from target-specific code as if it had no effect.
constexpr size_t kPrefetchFloats = 1024;

// The columns at j of each operand a row reads.
HWY_INLINE void PrefetchColumns(const float* x, const RowMasks& masks,
                                size_t j) {
  hwy::Prefetch(x + j);
  if (masks.additive != nullptr) hwy::Prefetch(masks.additive + j);
  if (masks.boolean != nullptr && j % (4 * SoftmaxPlan::kLineFloats) == 0) {
    hwy::Prefetch(masks.boolean + j);
  }
}

HWY_INLINE size_t PrefetchEnd(const SoftmaxRow& r) {
  return std::min(r.limit, kPrefetchFloats);
}

HWY_INLINE void PrefetchRow(const SoftmaxRow& r, size_t from) {
  const size_t line = SoftmaxPlan::kLineFloats;
  for (size_t j = from - from % line; j < PrefetchEnd(r); j += line) {
    PrefetchColumns(r.x, r.masks, j);
  }
}

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_SOFTMAX_H_
