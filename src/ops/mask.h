// The one mask model: which keys a query row sees and what joins its scores.
// Softmax, fused attention (prefill and split-KV decode) and the unfused
// module path all read an AttentionMask (kernels.h, which states the rules)
// through it; the per-target code that applies it in registers is
// mask-inl.h.
//
// Row i of (batch b, head h) sees keys [Begin(b, i), End(b, i)) less those
// its element masks (boolean, additive -inf) mask; Begin and End grow with
// i, so a block of rows bounds its keys by its first row's Begin and its
// last row's End, and tiles outside are never computed. A masked key
// contributes exactly nothing, whatever x, K or V hold there: its score is
// selected to -inf, never computed with, and its value row is never
// multiplied in (attention_tile-inl.h's NonFiniteValues). NaN at a visible key
// propagates to its row, as in PyTorch.
#ifndef SIMDATTN_SRC_OPS_MASK_H_
#define SIMDATTN_SRC_OPS_MASK_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "simdattn/kernels.h"

namespace simdattn {
namespace internal {

// One row's element masks, null when absent, indexed by key; and its score
// terms: ALiBi's bias -alibi_slope * |position - j| (slope 0: none).
struct RowMasks {
  const float* additive = nullptr;
  const uint8_t* boolean = nullptr;
  float alibi_slope = 0.0f;
  float position = 0.0f;  // i + offset; exact up to 2^24 keys.
};

// How a block of rows meets a range of keys.
enum class TileKind {
  kEmpty,    // No row sees any key: skip it.
  kPartial,  // Some (row, key) may be masked: apply the masks.
  kFull,     // Every row sees every key: no masking at all.
};

class MaskModel {
 public:
  // `keys`: the scores' last dimension. The mask was validated against it.
  MaskModel(const AttentionMask& mask, size_t keys)
      : mask_(mask), keys_(keys) {}

  const AttentionMask& mask() const { return mask_; }
  bool has_additive() const { return mask_.additive.data != nullptr; }
  bool has_boolean() const { return mask_.boolean.data != nullptr; }
  bool HasElementMasks() const { return has_additive() || has_boolean(); }
  // Whether scores are more than scale * x (+ additive): softcap or ALiBi.
  bool HasScoreTerms() const {
    return mask_.softcap > 0.0f || mask_.alibi_slopes != nullptr;
  }
  float softcap() const { return mask_.softcap; }
  // Head h's sink logit; -inf without sinks (exp gives 0).
  float Sink(size_t h) const {
    return mask_.sinks == nullptr ? -std::numeric_limits<float>::infinity()
                                  : mask_.sinks[h];
  }

  // Row i's position among the keys, i + offset, saturating.
  size_t Position(size_t b, size_t i) const {
    const size_t offset = mask_.causal_offsets != nullptr
                              ? mask_.causal_offsets[b]
                              : mask_.causal_offset;
    return i > SIZE_MAX - offset ? SIZE_MAX : i + offset;
  }

  // Keys [0, Begin(b, i)) are outside row i's window; Begin grows with i.
  size_t Begin(size_t b, size_t i) const {
    const size_t position = Position(b, i);
    if (mask_.window == 0 || position < mask_.window) return 0;
    return std::min(position - mask_.window + 1, keys_);
  }

  // Whether item b's new tokens, keys [Position(b, 0), key_lengths[b]),
  // see each other through a draft tree (kernels.h's AttentionMask).
  bool HasTree(size_t b) const {
    return mask_.tree_offsets != nullptr &&
           mask_.tree_offsets[b] != AttentionMask::kNoTree;
  }
  // Whether row i of item b, which HasTree, sees new token j by its bits.
  bool TreeSees(size_t b, size_t i, size_t j) const {
    const size_t first = Position(b, 0);
    const size_t n = mask_.key_lengths[b] - first;
    const size_t bit = mask_.tree_offsets[b] + i * n + (j - first);
    return ((mask_.tree_bits[bit / 64] >> (bit % 64)) & 1) != 0;
  }
  // Keys [End(b, i), keys) are masked for row i; End grows with i.
  size_t End(size_t b, size_t i) const {
    size_t end = keys_;
    const size_t position = Position(b, i);
    if ((mask_.causal || mask_.window != 0) && position < keys_ &&
        !HasTree(b)) {
      end = position + 1;
    }
    if (mask_.key_lengths != nullptr) end = std::min(end, mask_.key_lengths[b]);
    return end;
  }

  RowMasks Row(size_t b, size_t h, size_t i) const {
    RowMasks r;
    if (has_additive()) {
      const ConstTensor4& m = mask_.additive;
      r.additive =
          m.data + b * m.strides[0] + h * m.strides[1] + i * m.strides[2];
    }
    if (has_boolean()) {
      const Tensor4View<const uint8_t>& m = mask_.boolean;
      r.boolean =
          m.data + b * m.strides[0] + h * m.strides[1] + i * m.strides[2];
    }
    if (mask_.alibi_slopes != nullptr) {
      r.alibi_slope = mask_.alibi_slopes[h];
      r.position = static_cast<float>(Position(b, i));
    }
    return r;
  }

  bool Visible(size_t b, size_t h, size_t i, size_t j) const {
    if (j < Begin(b, i) || j >= End(b, i)) return false;
    if (HasTree(b) && j >= Position(b, 0) && !TreeSees(b, i, j)) return false;
    const RowMasks r = Row(b, h, i);
    if (r.boolean != nullptr && r.boolean[j] != 0) return false;
    return r.additive == nullptr ||
           r.additive[j] != -std::numeric_limits<float>::infinity();
  }

  // Rows [i_begin, i_end) (non-empty) against keys [j_begin, j_end).
  TileKind Classify(size_t b, size_t i_begin, size_t i_end, size_t j_begin,
                    size_t j_end) const {
    if (End(b, i_end - 1) <= j_begin || Begin(b, i_begin) >= j_end) {
      return TileKind::kEmpty;
    }
    if (End(b, i_begin) >= j_end && Begin(b, i_end - 1) <= j_begin &&
        !HasElementMasks() && (!HasTree(b) || j_end <= Position(b, 0))) {
      return TileKind::kFull;
    }
    return TileKind::kPartial;
  }

 private:
  AttentionMask mask_;
  size_t keys_;
};

// The unfused path's out = weights V (BatchedMatMul's grouped heads), where
// weights (batch, heads, rows, keys) are a softmax under `mask`: a value row
// holding Inf or NaN reaches only the rows that see its key, as in the fused
// path. Arguments are validated by BatchedMatMul.
void MaskedWeightsTimesValues(ConstTensor4 weights, ConstTensor4 v, Tensor4 out,
                              const AttentionMask& mask);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_MASK_H_
