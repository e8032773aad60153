// A KV pool's memory row by row, for what moves bytes rather than computes:
// the transfer format that KVCache::Export/Import and the pages' Export/
// Import share (kernels.h's "Moving tokens"), and slot reads and copies.
// Plain C++: the rows are copied as stored, or widened one element at a time.
#ifndef SIMDATTN_SRC_OPS_KV_POOL_H_
#define SIMDATTN_SRC_OPS_KV_POOL_H_

#include <cstddef>
#include <cstdint>

#include "simdattn/kernels.h"
#include "src/common/check.h"

namespace simdattn {
namespace internal {

// A pool's memory: slot s = block * block_size + offset holds head h's key
// row at Key(s, h) and its value row at Value(s, h) (a latent pool's is the
// key row), int8 scales at KeyScale/ValueScale (the keys' when latent).
// Strides in elements of `type`, as KVCacheView's.
struct KVPool {
  KVType type = KVType::kF32;
  size_t kv_heads = 0, head_dim = 0, value_dim = 0;
  bool latent = false;
  uint8_t* keys = nullptr;
  uint8_t* values = nullptr;
  float* key_scales = nullptr;
  float* value_scales = nullptr;
  size_t block_stride = 0, head_stride = 0, row_stride = 0;
  size_t scale_block_stride = 0, scale_head_stride = 0;
  size_t block_size = 1;
  float key_scale = 1.0f, value_scale = 1.0f;  // fp8.

  // The pool of a view (contiguous: sequence b is block b) or of pages. The
  // memory is written through only by callers that own it.
  static KVPool Of(const KVCacheView& view);
  static KVPool Of(const KVPages& pages);

  bool scaled() const;  // int8: a float per row.
  size_t KeyRowBytes() const;
  size_t ValueRowBytes() const;  // 0 when latent: the key row holds it.
  uint8_t* Key(size_t slot, size_t h) const;
  uint8_t* Value(size_t slot, size_t h) const;
  float* KeyScale(size_t slot, size_t h) const;
  float* ValueScale(size_t slot, size_t h) const;
  // The scale that widens the row's key or value: int8's row scale, fp8's
  // side scale, else 1 (latent values: the key's).
  float KeyFactor(size_t slot, size_t h) const;
  float ValueFactor(size_t slot, size_t h) const;
};

// Slot of the i-th token moved, i < count.
using SlotOf = size_t (*)(const void* context, size_t i);

// The transfer format (kernels.h): a 64-byte header, then for every head h
// and token i (h-major) the key rows, the value rows (none when latent), the
// int8 key scales and value scales (none when latent).
inline constexpr size_t kTransferHeaderBytes = 64;
// Bytes of `count` tokens of `pool` in the format; throws on overflow.
size_t TransferBytes(const char* function, const KVPool& pool, size_t count);
// Writes the header and rows of tokens slot(context, 0..count) to buffer
// (TransferBytes of them).
void ExportRows(const KVPool& pool, SlotOf slot, const void* context,
                size_t count, void* buffer);
// Throws, naming `function`, unless buffer (of `bytes`) holds a transfer of
// tokens whose type, heads, dims, latent and fp8 scales are `pool`'s, whole
// and with its checksum; returns its token count.
size_t CheckTransfer(const char* function, const KVPool& pool,
                     const void* buffer, size_t bytes);
// Writes the rows of a transfer CheckTransfer accepted into slot(context,
// i) for each of its tokens i.
void ImportRows(const KVPool& pool, SlotOf slot, const void* context,
                const void* buffer);

// Checks pages as attention checks a view of them (block size, type,
// strides, scales, memory), naming `function`; returns what they span.
KVCacheViewSpans CheckPages(const char* function, const KVPages& pages);

// Throws, naming `function`, unless a pool of `type` may have this shape:
// block_size a power of two, head_dim and value_dim (0: head_dim) whole
// blocks of a block type.
void CheckPoolShape(const char* function, KVType type, size_t head_dim,
                    size_t value_dim, size_t block_size);

// The pages as a step's sequences see them: always a paged view (a step of
// no sequence through a one-entry table, so that its pages are checked as
// any step's). Throws, naming `function`, where the step has sequences but
// no block_table.
KVCacheView StepView(const char* function, const KVPages& pages,
                     const VarlenStep& step);

// Throws unless each of slots[0..n) (named `name` in messages) is a slot of
// the pool (negative ones allowed where `skip`) and, where `distinct`, none
// but negative ones appears twice.
void CheckSlots(const char* function, const char* name, const KVPages& pages,
                const int64_t* slots, size_t n, bool skip, bool distinct);

// Each packed token's position (VarlenStep's): step.positions when given,
// else token t of sequence b at seq_lens[b] - q_len + (t - query_starts[b])
// written to `scratch` (num_tokens). Throws, naming `function`, unless the
// step's query_starts fit num_tokens and each sequence holds its new
// tokens.
const size_t* TokenPositions(const char* function, const VarlenStep& step,
                             size_t num_tokens, size_t* scratch);

// Row n of a type's elements widened to float times `factor` (attention's
// reading of a stored row).
void WidenRow(KVType type, const void* src, float factor, size_t n, float* dst);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_KV_POOL_H_
