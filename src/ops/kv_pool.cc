// Pool sizes, slot reads and copies, and the transfer format (kernels.h's
// "Pool sizes and operations"; kv_pool.h).
#include "src/ops/kv_pool.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "hwy/base.h"
#include "simdattn/random.h"
#include "src/common/check.h"
#include "src/common/element.h"
#include "src/common/scratch.h"
#include "src/ops/kv_rows.h"

// xxHash, header-only: the checksum's definition is its XXH3-64.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace simdattn {
namespace internal {

KVPool KVPool::Of(const KVCacheView& view) {
  KVPool p;
  p.type = view.type;
  p.kv_heads = view.kv_heads;
  p.head_dim = view.head_dim;
  p.value_dim = ValueDim(view);
  p.latent = Latent(view.keys, view.values);
  p.keys = static_cast<uint8_t*>(const_cast<void*>(view.keys));
  p.values = static_cast<uint8_t*>(const_cast<void*>(view.values));
  p.key_scales = const_cast<float*>(view.key_scales);
  p.value_scales =
      p.latent ? p.key_scales : const_cast<float*>(view.value_scales);
  p.block_stride = view.block_stride;
  p.head_stride = view.head_stride;
  p.row_stride = view.row_stride;
  p.scale_block_stride = view.scale_block_stride;
  p.scale_head_stride = view.scale_head_stride;
  p.block_size = std::max<size_t>(view.block_size, 1);
  if (ElementTraitsOf(view.type).side_scaled) {
    p.key_scale = view.key_scale;
    p.value_scale = p.latent ? view.key_scale : view.value_scale;
  }
  return p;
}

KVPool KVPool::Of(const KVPages& pages) {
  return Of(pages.View(0, nullptr, nullptr, 0));
}

bool KVPool::scaled() const { return ElementTraitsOf(type).scaled; }
size_t KVPool::KeyRowBytes() const { return ElementBytes(type, head_dim); }
size_t KVPool::ValueRowBytes() const {
  return latent ? 0 : ElementBytes(type, value_dim);
}
uint8_t* KVPool::Key(size_t slot, size_t h) const {
  return keys +
         ElementBytes(type, slot / block_size * block_stride + h * head_stride +
                                slot % block_size * row_stride);
}
uint8_t* KVPool::Value(size_t slot, size_t h) const {
  return values +
         ElementBytes(type, slot / block_size * block_stride + h * head_stride +
                                slot % block_size * row_stride);
}
float* KVPool::KeyScale(size_t slot, size_t h) const {
  return key_scales + slot / block_size * scale_block_stride +
         h * scale_head_stride + slot % block_size;
}
float* KVPool::ValueScale(size_t slot, size_t h) const {
  return latent ? KeyScale(slot, h)
                : value_scales + slot / block_size * scale_block_stride +
                      h * scale_head_stride + slot % block_size;
}
float KVPool::KeyFactor(size_t slot, size_t h) const {
  return scaled() ? *KeyScale(slot, h) : key_scale;
}
float KVPool::ValueFactor(size_t slot, size_t h) const {
  return scaled() ? *ValueScale(slot, h) : value_scale;
}

const size_t* TokenPositions(const char* function, const VarlenStep& step,
                             size_t num_tokens, size_t* scratch) {
  CheckQueryStarts(function, step.query_starts, step.num_seqs, num_tokens);
  SIMDATTN_REQUIRE(step.seq_lens != nullptr || step.num_seqs == 0, function,
                   "step.seq_lens is null");
  for (size_t b = 0; b < step.num_seqs; ++b) {
    const size_t first = step.query_starts[b], end = step.query_starts[b + 1];
    SIMDATTN_REQUIRE(step.seq_lens[b] >= end - first, function,
                     "step.seq_lens[", b, "] (", step.seq_lens[b],
                     ") is less than its ", end - first, " new tokens");
    if (step.positions != nullptr) continue;
    for (size_t t = first; t < end; ++t) {
      scratch[t] = step.seq_lens[b] - (end - t);
    }
  }
  return step.positions != nullptr ? step.positions : scratch;
}

void WidenRow(KVType type, const void* src, float factor, size_t n,
              float* dst) {
  VisitElementType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* row = static_cast<const T*>(src);
    for (size_t i = 0; i < n; ++i) dst[i] = factor * WidenAt(row, i);
  });
}

namespace {

constexpr char kMagic[8] = {'S', 'I', 'M', 'D', 'A', 'K', 'V', '\0'};
constexpr uint32_t kFormatVersion = 1;

// The header's fields, in the order and widths kernels.h gives.
struct Header {
  uint32_t version = kFormatVersion;
  uint32_t type = 0, flags = 0;
  uint32_t kv_heads = 0, head_dim = 0, value_dim = 0;
  uint64_t tokens = 0;
  float key_scale = 1.0f, value_scale = 1.0f;
  uint64_t payload = 0;
};

// Little-endian stores and loads (the format's byte order, on any host).
template <typename T>
void Put(uint8_t* at, T value) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  std::reverse(bytes, bytes + sizeof(T));
#endif
  std::memcpy(at, bytes, sizeof(T));
}
template <typename T>
T Get(const uint8_t* at) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, at, sizeof(T));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  std::reverse(bytes, bytes + sizeof(T));
#endif
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

void Encode(const Header& h, uint8_t* out) {
  std::memcpy(out, kMagic, sizeof(kMagic));
  Put(out + 8, h.version);
  Put(out + 12, h.type);
  Put(out + 16, h.flags);
  Put(out + 20, h.kv_heads);
  Put(out + 24, h.head_dim);
  Put(out + 28, h.value_dim);
  Put(out + 32, h.tokens);
  Put(out + 40, h.key_scale);
  Put(out + 44, h.value_scale);
  Put(out + 48, h.payload);
}

Header Decode(const uint8_t* in) {
  Header h;
  h.version = Get<uint32_t>(in + 8);
  h.type = Get<uint32_t>(in + 12);
  h.flags = Get<uint32_t>(in + 16);
  h.kv_heads = Get<uint32_t>(in + 20);
  h.head_dim = Get<uint32_t>(in + 24);
  h.value_dim = Get<uint32_t>(in + 28);
  h.tokens = Get<uint64_t>(in + 32);
  h.key_scale = Get<float>(in + 40);
  h.value_scale = Get<float>(in + 44);
  h.payload = Get<uint64_t>(in + 48);
  return h;
}

// XXH3-64 of the header's first 56 bytes and the payload.
uint64_t Checksum(const uint8_t* buffer, size_t payload) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, buffer, 56);
  XXH3_64bits_update(&state, buffer + kTransferHeaderBytes, payload);
  return XXH3_64bits_digest(&state);
}

// What a pool's transfers say of it.
Header Describe(const KVPool& pool) {
  Header h;
  h.type = static_cast<uint32_t>(pool.type);
  h.flags = pool.latent ? 1 : 0;
  h.kv_heads = static_cast<uint32_t>(pool.kv_heads);
  h.head_dim = static_cast<uint32_t>(pool.head_dim);
  h.value_dim = static_cast<uint32_t>(pool.value_dim);
  h.key_scale = pool.key_scale;
  h.value_scale = pool.value_scale;
  return h;
}

std::string DescribeText(const Header& h) {
  const ElementType type = static_cast<ElementType>(h.type);
  std::string s = IsElementType(type) ? ElementTraitsOf(type).name
                                      : "type " + std::to_string(h.type);
  s += " kv_heads " + std::to_string(h.kv_heads) + " head_dim " +
       std::to_string(h.head_dim) + " value_dim " +
       std::to_string(h.value_dim) + ((h.flags & 1) ? " latent" : "");
  if (IsElementType(type) && ElementTraitsOf(type).side_scaled) {
    s += " scales " + std::to_string(h.key_scale) + "/" +
         std::to_string(h.value_scale);
  }
  return s;
}

size_t PayloadRowBytes(const KVPool& pool) {
  return pool.KeyRowBytes() + pool.ValueRowBytes() +
         (pool.scaled() ? (pool.latent ? 1 : 2) * sizeof(float) : 0);
}

// Visits the payload's pieces of token i at `slot`, head h: copy(pool
// memory, payload offset, bytes).
template <class Copy>
void ForEachRow(const KVPool& pool, SlotOf slot, const void* context,
                size_t count, const Copy& copy) {
  const size_t rows = pool.kv_heads * count;
  const size_t key_row = pool.KeyRowBytes(), value_row = pool.ValueRowBytes();
  const size_t values = rows * key_row;
  const size_t key_scales = values + rows * value_row;
  const size_t value_scales = key_scales + rows * sizeof(float);
  for (size_t i = 0; i < count; ++i) {
    const size_t s = slot(context, i);
    for (size_t h = 0; h < pool.kv_heads; ++h) {
      const size_t row = h * count + i;
      // Empty rows form no pointer (the memory may be null).
      if (key_row != 0) copy(pool.Key(s, h), row * key_row, key_row);
      if (value_row != 0) {
        copy(pool.Value(s, h), values + row * value_row, value_row);
      }
      if (!pool.scaled()) continue;
      copy(reinterpret_cast<uint8_t*>(pool.KeyScale(s, h)),
           key_scales + row * sizeof(float), sizeof(float));
      if (!pool.latent) {
        copy(reinterpret_cast<uint8_t*>(pool.ValueScale(s, h)),
             value_scales + row * sizeof(float), sizeof(float));
      }
    }
  }
}

}  // namespace

size_t TransferBytes(const char* function, const KVPool& pool, size_t count) {
  const size_t rows =
      CheckedMul(function, "count * kv_heads", count, pool.kv_heads);
  const size_t payload =
      CheckedMul(function, "count * kv_heads * the bytes of a token's row",
                 rows, PayloadRowBytes(pool));
  SIMDATTN_REQUIRE(
      payload <= std::numeric_limits<size_t>::max() - kTransferHeaderBytes,
      function, "the transfer of ", count, " tokens overflows size_t");
  return kTransferHeaderBytes + payload;
}

void ExportRows(const KVPool& pool, SlotOf slot, const void* context,
                size_t count, void* buffer) {
  uint8_t* out = static_cast<uint8_t*>(buffer);
  Header h = Describe(pool);
  h.tokens = count;
  h.payload = pool.kv_heads * count * PayloadRowBytes(pool);
  Encode(h, out);
  uint8_t* payload = out + kTransferHeaderBytes;
  ForEachRow(pool, slot, context, count,
             [&](const uint8_t* memory, size_t at, size_t bytes) {
               std::memcpy(payload + at, memory, bytes);
             });
  Put(out + 56, Checksum(out, h.payload));
}

size_t CheckTransfer(const char* function, const KVPool& pool,
                     const void* buffer, size_t bytes) {
  SIMDATTN_REQUIRE(buffer != nullptr, function, "buffer is null");
  SIMDATTN_REQUIRE(bytes >= kTransferHeaderBytes, function, "the buffer's ",
                   bytes, " bytes hold no ", kTransferHeaderBytes,
                   "-byte transfer header");
  const uint8_t* in = static_cast<const uint8_t*>(buffer);
  SIMDATTN_REQUIRE(std::memcmp(in, kMagic, sizeof(kMagic)) == 0, function,
                   "the buffer is not a simdattn KV transfer (no \"SIMDAKV\" "
                   "header)");
  const Header h = Decode(in);
  SIMDATTN_REQUIRE(h.version == kFormatVersion, function,
                   "the buffer's transfer format version (", h.version,
                   ") is not this library's (", kFormatVersion, ")");
  const Header want = Describe(pool);
  const bool side_scaled =
      ElementTraitsOf(pool.type).side_scaled &&
      (h.key_scale != want.key_scale ||
       (!pool.latent && h.value_scale != want.value_scale));
  SIMDATTN_REQUIRE(h.type == want.type && h.flags == want.flags &&
                       h.kv_heads == want.kv_heads &&
                       h.head_dim == want.head_dim &&
                       h.value_dim == want.value_dim && !side_scaled,
                   function, "the buffer holds ", DescribeText(h),
                   " tokens, the target is ", DescribeText(want));
  const size_t payload = pool.kv_heads * PayloadRowBytes(pool);
  SIMDATTN_REQUIRE(h.payload == h.tokens * payload &&
                       (payload == 0 || h.tokens <= h.payload / payload) &&
                       h.payload <= bytes - kTransferHeaderBytes,
                   function, "the buffer's ", bytes, " bytes do not hold the ",
                   h.tokens, " tokens (", h.payload,
                   " payload bytes) its header announces");
  SIMDATTN_REQUIRE(Get<uint64_t>(in + 56) == Checksum(in, h.payload), function,
                   "the transfer's checksum does not match its bytes: it was "
                   "corrupted or truncated");
  return h.tokens;
}

void ImportRows(const KVPool& pool, SlotOf slot, const void* context,
                const void* buffer) {
  const uint8_t* in = static_cast<const uint8_t*>(buffer);
  const size_t count = Decode(in).tokens;
  const uint8_t* payload = in + kTransferHeaderBytes;
  ForEachRow(pool, slot, context, count,
             [&](uint8_t* memory, size_t at, size_t bytes) {
               std::memcpy(memory, payload + at, bytes);
             });
}

KVCacheViewSpans CheckPages(const char* function, const KVPages& pages) {
  return CheckKVCacheView(function, StepView(function, pages, VarlenStep{}), 0);
}

void CheckPoolShape(const char* function, KVType type, size_t head_dim,
                    size_t value_dim, size_t block_size) {
  SIMDATTN_REQUIRE(IsElementType(type), function, "type (",
                   static_cast<int>(type), ") is not a KVType");
  const ElementTraits traits = ElementTraitsOf(type);
  SIMDATTN_REQUIRE(block_size != 0 && (block_size & (block_size - 1)) == 0,
                   function, "block_size (", block_size,
                   ") is not a power of two");
  const size_t values = value_dim == 0 ? head_dim : value_dim;
  SIMDATTN_REQUIRE(head_dim % traits.values == 0 && values % traits.values == 0,
                   function, "type ", traits.name, " stores blocks of ",
                   traits.values, " elements, but head_dim (", head_dim,
                   ") or value_dim (", values, ") is not a multiple of them");
}

KVCacheView StepView(const char* function, const KVPages& pages,
                     const VarlenStep& step) {
  SIMDATTN_REQUIRE(step.block_table != nullptr || step.num_seqs == 0, function,
                   "step.block_table is null");
  static const int32_t kNoTable[1] = {0};
  return pages.View(step.num_seqs, step.seq_lens,
                    step.num_seqs == 0 ? kNoTable : step.block_table,
                    step.blocks_per_sequence);
}

// Throws, naming `function` and `name`, if a value other than a negative
// one appears twice among values[0..n).
template <typename T>
void CheckDistinct(const char* function, const char* name, const T* values,
                   size_t n, const char* what) {
  ScratchBuffer buffer(hwy::DivCeil(n * sizeof(T), sizeof(float)));
  T* sorted = reinterpret_cast<T*>(buffer.data());
  std::copy(values, values + n, sorted);
  std::sort(sorted, sorted + n);
  for (size_t i = 1; i < n; ++i) {
    SIMDATTN_REQUIRE(sorted[i] < 0 || sorted[i] != sorted[i - 1], function,
                     what, " ", sorted[i], " appears twice in ", name);
  }
}

// Throws unless each of the n slots (named `name`) is a slot of the pool,
// negative ones allowed where `skip`, and, where `distinct`, no slot twice.
void CheckSlots(const char* function, const char* name, const KVPages& pages,
                const int64_t* slots, size_t n, bool skip, bool distinct) {
  if (n == 0) return;
  SIMDATTN_REQUIRE(slots != nullptr, function, name, " is null");
  const size_t total = CheckedMul(function, "the pool's slots",
                                  pages.num_blocks, pages.block_size);
  for (size_t i = 0; i < n; ++i) {
    SIMDATTN_REQUIRE(
        (skip && slots[i] < 0) ||
            (slots[i] >= 0 && static_cast<uint64_t>(slots[i]) < total),
        function, name, "[", i, "] (", slots[i], ") is not a slot of the ",
        pages.num_blocks, " x ", pages.block_size, " pool");
  }
  if (distinct) CheckDistinct(function, name, slots, n, "slot");
}

}  // namespace internal

// ---------------------------------------------------------------------------
// The public pool operations.

namespace {

using internal::KVPool;

size_t SlotAt(const void* slots, size_t i) {
  return static_cast<size_t>(static_cast<const int64_t*>(slots)[i]);
}

// Throws unless `buffer` of `bytes` does not overlap the pool's memory.
void CheckApart(const char* function, const internal::KVCacheViewSpans& pool,
                internal::Footprint buffer, const char* name) {
  for (const internal::Footprint* held :
       {&pool.keys, &pool.values, &pool.key_scales, &pool.value_scales}) {
    SIMDATTN_REQUIRE(!held->Overlaps(buffer), function, name,
                     " overlaps the pages");
  }
}

}  // namespace

KVPages DenseKVPages(KVType type, size_t kv_heads, size_t head_dim,
                     size_t value_dim, size_t block_size, size_t num_blocks) {
  constexpr const char* kFn = "DenseKVPages";
  internal::CheckPoolShape(kFn, type, head_dim, value_dim, block_size);
  const ElementTraits traits = ElementTraitsOf(type);
  const size_t values = value_dim == 0 ? head_dim : value_dim;
  KVPages pages;
  pages.type = type;
  pages.kv_heads = kv_heads;
  pages.head_dim = head_dim;
  pages.value_dim = value_dim;
  pages.row_stride = std::max(head_dim, values);
  pages.head_stride = internal::CheckedMul(kFn, "block_size * row", block_size,
                                           pages.row_stride);
  pages.block_stride = internal::CheckedMul(kFn, "kv_heads * block_size * row",
                                            kv_heads, pages.head_stride);
  if (traits.scaled) {
    pages.scale_head_stride = block_size;
    pages.scale_block_stride = internal::CheckedMul(
        kFn, "kv_heads * block_size", kv_heads, block_size);
  }
  pages.block_size = block_size;
  pages.num_blocks = num_blocks;
  // Every size representable.
  SizeOf(pages);
  return pages;
}

KVPagesSize SizeOf(const KVPages& pages) {
  constexpr const char* kFn = "SizeOf";
  KVPagesSize size;
  if (pages.num_blocks == 0 || pages.kv_heads == 0 || pages.block_size == 0) {
    return size;
  }
  // The last element's offset, plus one.
  const auto reach = [&](size_t block_stride, size_t head_stride,
                         size_t row_stride, size_t row) {
    size_t last = internal::CheckedMul(kFn, "the pool's blocks",
                                       pages.num_blocks - 1, block_stride);
    const size_t parts[] = {
        internal::CheckedMul(kFn, "the pool's heads", pages.kv_heads - 1,
                             head_stride),
        internal::CheckedMul(kFn, "a block's rows", pages.block_size - 1,
                             row_stride),
        row};
    for (const size_t part : parts) {
      SIMDATTN_REQUIRE(last <= std::numeric_limits<size_t>::max() - part, kFn,
                       "the pool's size overflows size_t");
      last += part;
    }
    return last;
  };
  const size_t value_dim =
      pages.value_dim == 0 ? pages.head_dim : pages.value_dim;
  const size_t unit = ElementTraitsOf(pages.type).values;
  for (const auto& [bytes, dim] : {std::pair{&size.key_bytes, pages.head_dim},
                                   std::pair{&size.value_bytes, value_dim}}) {
    if (dim == 0) continue;
    *bytes = ElementBytes(
        pages.type, reach(pages.block_stride / unit, pages.head_stride / unit,
                          pages.row_stride / unit, dim / unit) *
                        unit);
  }
  if (ElementTraitsOf(pages.type).scaled) {
    size.scales =
        reach(pages.scale_block_stride, pages.scale_head_stride, 1, 1);
  }
  return size;
}

size_t FirstKeyRead(size_t length, size_t q_tokens, size_t window,
                    bool dropout) {
  if (q_tokens == 0 || length == 0) return length;
  if (window == 0) return 0;
  const size_t granule = dropout ? kDropoutGroup : internal::kFirstKeyGranule;
  const size_t seen = length - std::min(length, q_tokens) + 1;
  const size_t first = seen > window ? seen - window : 0;
  return first - first % granule;
}

void ReadKVSlots(const KVPages& pages, const int64_t* slot_mapping,
                 Tensor4 keys, Tensor4 values) {
  constexpr const char* kFn = "ReadKVSlots";
  const internal::KVCacheViewSpans spans = internal::CheckPages(kFn, pages);
  const KVPool pool = KVPool::Of(pages);
  const size_t n = keys.dims[2];
  const size_t expected_keys[4] = {1, pages.kv_heads, n, pages.head_dim};
  SIMDATTN_REQUIRE(internal::SameDims(keys.dims, expected_keys), kFn,
                   "keys has shape ", internal::ShapeString(keys.dims),
                   ", expected ", internal::ShapeString(expected_keys),
                   " (1, kv_heads, n, head_dim)");
  const size_t expected_values[4] = {1, pages.kv_heads, n, pool.value_dim};
  SIMDATTN_REQUIRE(internal::SameDims(values.dims, expected_values) ||
                       (pool.latent && values.empty()),
                   kFn, "values has shape ", internal::ShapeString(values.dims),
                   ", expected ", internal::ShapeString(expected_values),
                   " (1, kv_heads, n, value_dim)",
                   pool.latent ? " or empty (latent)" : "");
  const internal::Footprint rk = internal::CheckTensor4(kFn, "keys", keys);
  const internal::Footprint rv = internal::CheckTensor4(kFn, "values", values);
  internal::CheckDistinctElements(kFn, "keys", keys.dims, keys.strides);
  internal::CheckDistinctElements(kFn, "values", values.dims, values.strides);
  SIMDATTN_REQUIRE(!rk.Overlaps(rv), kFn, "values overlap keys");
  CheckApart(kFn, spans, rk, "keys");
  CheckApart(kFn, spans, rv, "values");
  internal::CheckSlots(kFn, "slot_mapping", pages, slot_mapping, n,
                       /*skip=*/true,
                       /*distinct=*/false);
  for (size_t t = 0; t < n; ++t) {
    if (slot_mapping[t] < 0) continue;
    const size_t s = static_cast<size_t>(slot_mapping[t]);
    for (size_t h = 0; h < pages.kv_heads; ++h) {
      if (pages.head_dim != 0) {
        internal::WidenRow(pool.type, pool.Key(s, h), pool.KeyFactor(s, h),
                           pages.head_dim, keys.Slice(0, h).Row(t));
      }
      if (!values.empty() && pool.value_dim != 0) {
        internal::WidenRow(pool.type, pool.Value(s, h), pool.ValueFactor(s, h),
                           pool.value_dim, values.Slice(0, h).Row(t));
      }
    }
  }
}

void CopyKVSlots(const KVPages& pages, const int64_t* from, const int64_t* to,
                 size_t count) {
  constexpr const char* kFn = "CopyKVSlots";
  internal::CheckPages(kFn, pages);
  internal::CheckSlots(kFn, "from", pages, from, count, false, false);
  internal::CheckSlots(kFn, "to", pages, to, count, false, true);
  if (count == 0) return;
  // Through a transfer in scratch: every source read before any target is
  // written.
  const KVPool pool = KVPool::Of(pages);
  const size_t bytes = internal::TransferBytes(kFn, pool, count);
  internal::ScratchBuffer buffer(hwy::DivCeil(bytes, sizeof(float)));
  internal::ExportRows(pool, SlotAt, from, count, buffer.data());
  internal::ImportRows(pool, SlotAt, to, buffer.data());
}

void CopyKVBlocks(const KVPages& pages, const int32_t* from, const int32_t* to,
                  size_t count) {
  constexpr const char* kFn = "CopyKVBlocks";
  internal::CheckPages(kFn, pages);
  SIMDATTN_REQUIRE(count == 0 || (from != nullptr && to != nullptr), kFn,
                   from == nullptr ? "from" : "to", " is null");
  for (size_t i = 0; i < count; ++i) {
    for (const int32_t* blocks : {from, to}) {
      SIMDATTN_REQUIRE(
          blocks[i] >= 0 && static_cast<size_t>(blocks[i]) < pages.num_blocks,
          kFn, blocks == from ? "from[" : "to[", i, "] (", blocks[i],
          ") is not a block of the ", pages.num_blocks, " in the pool");
    }
  }
  internal::CheckDistinct(kFn, "to", to, count, "block");
  const size_t slots =
      internal::CheckedMul(kFn, "count * block_size", count, pages.block_size);
  internal::ScratchBuffer buffer(
      hwy::DivCeil(2 * slots * sizeof(int64_t), sizeof(float)));
  int64_t* source = reinterpret_cast<int64_t*>(buffer.data());
  int64_t* target = source + slots;
  for (size_t i = 0; i < slots; ++i) {
    const size_t block = i / pages.block_size, offset = i % pages.block_size;
    source[i] =
        int64_t{from[block]} * int64_t(pages.block_size) + int64_t(offset);
    target[i] =
        int64_t{to[block]} * int64_t(pages.block_size) + int64_t(offset);
  }
  CopyKVSlots(pages, source, target, slots);
}

size_t KVTransferBytes(const KVPages& pages, size_t count) {
  constexpr const char* kFn = "KVTransferBytes";
  internal::CheckPages(kFn, pages);
  return internal::TransferBytes(kFn, KVPool::Of(pages), count);
}

void ExportKVSlots(const KVPages& pages, const int64_t* slots, size_t count,
                   void* buffer, size_t buffer_bytes) {
  constexpr const char* kFn = "ExportKVSlots";
  const internal::KVCacheViewSpans spans = internal::CheckPages(kFn, pages);
  const KVPool pool = KVPool::Of(pages);
  internal::CheckSlots(kFn, "slots", pages, slots, count, false, false);
  const size_t bytes = internal::TransferBytes(kFn, pool, count);
  SIMDATTN_REQUIRE(buffer != nullptr, kFn, "buffer is null");
  SIMDATTN_REQUIRE(buffer_bytes >= bytes, kFn, "buffer_bytes (", buffer_bytes,
                   ") is less than the ", bytes, " bytes of ", count,
                   " tokens");
  CheckApart(kFn, spans,
             internal::ContiguousFootprint(kFn, "buffer", buffer, bytes, 1),
             "buffer");
  internal::ExportRows(pool, SlotAt, slots, count, buffer);
}

void ImportKVSlots(const KVPages& pages, const int64_t* slots, size_t count,
                   const void* buffer, size_t buffer_bytes) {
  constexpr const char* kFn = "ImportKVSlots";
  const internal::KVCacheViewSpans spans = internal::CheckPages(kFn, pages);
  const KVPool pool = KVPool::Of(pages);
  const size_t tokens =
      internal::CheckTransfer(kFn, pool, buffer, buffer_bytes);
  SIMDATTN_REQUIRE(tokens == count, kFn, "the buffer holds ", tokens,
                   " tokens, count is ", count);
  internal::CheckSlots(kFn, "slots", pages, slots, count, false, true);
  CheckApart(
      kFn, spans,
      internal::ContiguousFootprint(kFn, "buffer", buffer, buffer_bytes, 1),
      "buffer");
  internal::ImportRows(pool, SlotAt, slots, buffer);
}

}  // namespace simdattn
