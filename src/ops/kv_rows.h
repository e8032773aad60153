// Keys and values as fused attention reads them, and where its queries
// lie: plain C++, shared by the
// validation (attention.cc) and every target's kernel (attention-inl.h).
#ifndef SIMDATTN_SRC_OPS_KV_ROWS_H_
#define SIMDATTN_SRC_OPS_KV_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "simdattn/kernels.h"
#include "simdattn/tensor.h"
#include "src/common/element.h"
#include "src/ops/matmul_bf16.h"

namespace simdattn {
namespace internal {

// Attention reads a row's keys from the first its window shows, rounded
// down to a multiple of this (of kDropoutGroup with dropout, whose bits come
// in column groups): table entries of blocks wholly before are never read,
// so a rolling window may release them.
inline constexpr size_t kFirstKeyGranule = 16;

// Contiguous storage is one block per sequence, found through this table.
inline constexpr int32_t kSingleBlock[1] = {0};

// The rows (tokens) of keys or values of one (sequence, kv head), from
// token `first` on: token t's row at
//   base + table[(t + first) >> shift] * block_stride
//        + ((t + first) & offset_mask) * stride,
// contiguous storage being one block (shift 63: t never reaches it). The
// same arithmetic for both layouts keeps paged and contiguous results equal
// bit for bit. int8 rows carry a scale each. Strides count units of T: the
// elements, or the blocks of a block type.
template <typename T>
struct KVRows {
  const T* base;
  const float* scales;  // int8 only: scales[block * scale_block_stride + row].
  const int32_t* table;
  size_t block_stride, stride, scale_block_stride;
  unsigned shift;
  size_t offset_mask;
  size_t first;
  size_t cols;

  size_t Block(size_t t) const {
    return static_cast<size_t>(table[(t + first) >> shift]);
  }
  const T* Row(size_t t) const {
    return base + Block(t) * block_stride +
           ((t + first) & offset_mask) * stride;
  }
  const float* ScaleAt(size_t t) const {
    return scales + Block(t) * scale_block_stride + ((t + first) & offset_mask);
  }
  float Scale(size_t t) const { return *ScaleAt(t); }
  // Rows from t on that lie `stride` apart: to the end of t's block.
  size_t RunFrom(size_t t) const {
    return offset_mask + 1 - ((t + first) & offset_mask);
  }
  // Contiguous storage: every token in block 0, at base + (t + first) *
  // stride.
  void MakeOneBlock() {
    table = kSingleBlock;
    shift = 63;
    offset_mask = ~size_t{0} >> 1;
  }
  // The rows from token j on.
  KVRows From(size_t j) const {
    KVRows rows = *this;
    rows.first += j;
    return rows;
  }
  // The same rows as units of U, of T's size: a view that reads them
  // another way (element.h's FiniteE4M3).
  template <typename U>
  KVRows<U> As() const {
    static_assert(sizeof(U) == sizeof(T), "same units");
    return {reinterpret_cast<const U*>(base),
            scales,
            table,
            block_stride,
            stride,
            scale_block_stride,
            shift,
            offset_mask,
            first,
            cols};
  }
};

// Keys or values: the memory side of a KVCacheView, or of a float tensor
// (blocks = batch items).
struct KVMemory {
  const void* data = nullptr;
  size_t block_stride = 0, head_stride = 0, row_stride = 0;
  const float* scales = nullptr;
  size_t scale_block_stride = 0, scale_head_stride = 0;
  size_t cols = 0;
  float side_scale = 1.0f;  // fp8: every element's scale.
};

// Everything fused attention needs to find keys and values.
struct KVSource {
  KVType type = KVType::kF32;
  KVMemory keys, values;
  size_t kv_heads = 0;
  size_t tokens = 0;  // Keys any query may see (the mask's key dimension).
  const int32_t* block_table = nullptr;  // Null: contiguous.
  size_t blocks_per_sequence = 0;
  unsigned block_shift = 0;  // log2(block_size) when paged.

  // KVMemory's strides count elements, KVRows' units of T.
  template <typename T>
  KVRows<T> Rows(const KVMemory& m, size_t b, size_t h) const {
    constexpr size_t kValues = kBlockValues<T>;
    KVRows<T> rows;
    rows.base = static_cast<const T*>(m.data) + h * m.head_stride / kValues;
    rows.scales =
        m.scales == nullptr ? nullptr : m.scales + h * m.scale_head_stride;
    rows.block_stride = m.block_stride / kValues;
    rows.stride = m.row_stride / kValues;
    rows.scale_block_stride = m.scale_block_stride;
    rows.first = 0;
    rows.cols = m.cols;
    if (block_table == nullptr) {
      rows.base += b * rows.block_stride;
      if (rows.scales != nullptr) rows.scales += b * m.scale_block_stride;
      rows.MakeOneBlock();
    } else {
      rows.table = block_table + b * blocks_per_sequence;
      rows.shift = block_shift;
      rows.offset_mask = (size_t{1} << block_shift) - 1;
    }
    return rows;
  }
};

// How one call computes, chosen once from its options (attention.cc).
struct AttentionArithmetic {
  bool round_weights = false;  // kBFloat16: P rounded before P V.
  // kBFloat16's dense path on bf16 pairs (amx_tiles.h's layouts) with this
  // kernel, AMX, vdpbf16ps or BFDOT; kFallback: on float panels.
  BFloat16DotKernelKind pair_kernel = BFloat16DotKernelKind::kFallback;
  // kBFloat16 with Q, K and V already rounded (else the dense path rounds
  // them while packing).
  bool inputs_rounded = true;
  // kInt8: decode's scores over q8_0, q4_0 and int8 keys as integer dot
  // products.
  bool integer_scores = false;
  // Decode's rows come from memory (more than the L3 holds) on a CPU where
  // pacing pays: it asks for kPacedRows types' rows at its own pace.
  bool rows_from_memory = false;
  // Decode reads E4M3 rows straight as float32 bits (attention_decode-inl.h).
  bool direct_e4m3 = false;
  // Decode's fp8 and bf16 products under kBFloat16 on bf16 pairs
  // (decode_pairs.h) in tasks of at most this many query rows (0: none).
  size_t decode_pair_rows = 0;
};

// Where batch item b's query rows, and its output rows, lie: rows
// [0, q.dims[2]) of q.Slice(b, h) (dense), or rows [starts[b], starts[b + 1])
// of q.Slice(0, h) (varlen: a serving step's sequences packed token-major,
// each with its own number of queries). The log-sum-exp follows q's rows.
struct QueryLayout {
  const size_t* starts = nullptr;  // Null: dense.
  size_t rows = 0;                 // q.dims[2]: per item, or in all.
  size_t heads = 0;                // q.dims[1].
  size_t batch = 0;                // Items (sequences).

  static QueryLayout Dense(const ConstTensor4& q) {
    return QueryLayout{nullptr, q.dims[2], q.dims[1], q.dims[0]};
  }

  size_t Tokens(size_t b) const {
    return starts == nullptr ? rows : starts[b + 1] - starts[b];
  }
  // Item b's rows of head h in x (q, or out).
  template <typename T>
  MatrixView<T> Rows(const Tensor4View<T>& x, size_t b, size_t h) const {
    if (starts == nullptr) return x.Slice(b, h);
    const MatrixView<T> m = x.Slice(0, h);
    return MatrixView<T>(m.data + starts[b] * m.stride, Tokens(b), m.cols,
                         m.stride);
  }
  size_t LogSumExpIndex(size_t b, size_t h, size_t i) const {
    return starts == nullptr ? (b * heads + h) * rows + i
                             : h * rows + starts[b] + i;
  }
};

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_KV_ROWS_H_
