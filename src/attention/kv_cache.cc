// KVCache: storage in every element type and two layouts, the block pool of
// the paged layout, and the conversions on append. Attention over it is
// ScaledDotProductAttention over View().
#ifdef __linux__
#include <sys/mman.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "hwy/base.h"
#include "simdattn/attention.h"
#include "src/common/check.h"
#include "src/common/element.h"
#include "src/common/parallel.h"
#include "src/ops/kv_pool.h"
#include "src/ops/kv_rows.h"
#include "src/ops/kv_store.h"

namespace simdattn {

using internal::CheckedMul;
using internal::ShapeString;

namespace {

// Zeroed memory for a cache's elements. Large buffers are 2 MiB aligned and
// advised to use transparent huge pages (Linux): a paged cache's blocks are
// scattered over the pool, and with 4 KiB pages the TLB misses on nearly
// every block of every head (bench/RESULTS.md).
class CacheMemory {
 public:
  CacheMemory() = default;
  explicit CacheMemory(size_t bytes) {
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t align = bytes >= kHugePage ? kHugePage : 64;
    if (bytes > SIZE_MAX - align) throw std::bad_alloc();
    // aligned_alloc takes whole alignments.
    const size_t rounded = hwy::RoundUpTo(std::max<size_t>(bytes, 1), align);
    void* memory = std::aligned_alloc(align, rounded);
    if (memory == nullptr) throw std::bad_alloc();
#ifdef __linux__
    if (align == kHugePage) madvise(memory, rounded, MADV_HUGEPAGE);
#endif
    std::memset(memory, 0, bytes);
    data_.reset(static_cast<uint8_t*>(memory));
  }
  uint8_t* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
};

// A cache keeps a length per sequence, even when it holds no elements, and
// some operations visit every sequence: the batch is bounded.
constexpr size_t kMaxBatch = size_t{1} << 24;
void CheckBatch(const char* function, size_t batch) {
  SIMDATTN_REQUIRE(batch <= kMaxBatch, function, "batch (", batch, ") exceeds ",
                   kMaxBatch, " sequences");
}

}  // namespace

// The memory and the bookkeeping: element (block, h, row, c) of keys at
// element offset block * block_stride + h * head_stride + row * row_stride +
// c from keys, as KVCacheView describes (Bytes() turns offsets into bytes);
// contiguous storage has a block per sequence.
struct KVCache::Storage {
  KVType type = KVType::kF32;
  size_t element = 4;    // Bytes of an element, or of a block (values > 1).
  size_t per_block = 1;  // Elements per block (ElementTraits::values).
  bool scaled = false;   // A scale per row (ElementTraits::scaled).
  float key_scale = 1.0f, value_scale = 1.0f;  // fp8 (1 for other types).
  CacheMemory owned_keys, owned_values;
  uint8_t* keys = nullptr;
  uint8_t* values = nullptr;  // keys when latent.
  size_t head_dim = 0, value_dim = 0;
  bool latent = false;  // Values are the keys' rows' first value_dim.
  size_t kv_heads = 0;
  size_t block_stride = 0, head_stride = 0, row_stride = 0;
  std::vector<float> key_scales, value_scales;  // int8.
  size_t scale_block_stride = 0, scale_head_stride = 0;
  size_t block_size = 0;
  bool paged = false;
  size_t blocks_per_sequence = 0, num_blocks = 0;
  std::vector<int32_t> table;        // Paged: -1 where no block is held.
  std::vector<uint32_t> references;  // Per block: sequences holding it.
  std::vector<int32_t> free_blocks;
  std::vector<size_t> lengths;
  // A rolling window (KVCacheConfig::window; 0: off), and per sequence its
  // first held token (a multiple of block_size; blocks before are released).
  size_t window = 0;
  std::vector<size_t> first_held;
  std::optional<internal::RopeTables> rope;  // Keys rotated on append.
  // Append's bookkeeping, kept so that steady-state appends allocate
  // nothing: sequence b was listed in the append numbered appended[b], and
  // the partly filled blocks an append writes into.
  std::vector<uint64_t> appended;
  uint64_t appends = 0;
  std::vector<int32_t> written;

  size_t Block(size_t b, size_t t) const {
    return paged ? static_cast<size_t>(
                       table[b * blocks_per_sequence + t / block_size])
                 : b;
  }
  size_t Offset(size_t b, size_t h, size_t t) const {
    return Block(b, t) * block_stride + h * head_stride +
           t % block_size * row_stride;
  }
  size_t ScaleOffset(size_t b, size_t h, size_t t) const {
    return Block(b, t) * scale_block_stride + h * scale_head_stride +
           t % block_size;
  }
  // Tokens [first, first + count) of sequence b as slots of the pool
  // (kv_pool.h's SlotOf over a TokenSlots).
  struct TokenSlots {
    const Storage* storage;
    size_t b, first;
  };
  static size_t SlotOfToken(const void* context, size_t i) {
    const auto& at = *static_cast<const TokenSlots*>(context);
    const size_t t = at.first + i;
    return at.storage->Block(at.b, t) * at.storage->block_size +
           t % at.storage->block_size;
  }
  // Bytes of `elements` elements (a multiple of per_block).
  size_t Bytes(size_t elements) const { return elements / per_block * element; }
  size_t BlocksFor(size_t tokens) const {
    return hwy::DivCeil(tokens, block_size);
  }

  // Rolling: sequence b's blocks before this one hold only tokens that
  // tokens appended at `length` cannot see (kv_rows.h's kFirstKeyGranule:
  // attention reads from the window's first key rounded down to it).
  size_t RollTo(size_t length) const {
    if (window == 0 || length + 1 <= window) return 0;
    size_t seen = length + 1 - window;
    seen -= seen % internal::kFirstKeyGranule;
    return seen / block_size;
  }
  // The blocks Roll(b, length) gives back to the pool (those b alone holds).
  size_t Rollable(size_t b, size_t length) const {
    size_t count = 0;
    for (size_t i = first_held[b] / block_size; i < RollTo(length); ++i) {
      const int32_t entry = table[b * blocks_per_sequence + i];
      count += entry >= 0 && references[entry] == 1;
    }
    return count;
  }
  // Before an append at `length`: releases those blocks.
  void Roll(size_t b, size_t length) {
    const size_t blocks = RollTo(length);
    if (blocks * block_size <= first_held[b]) return;
    Release(b, first_held[b] / block_size, blocks);
    first_held[b] = blocks * block_size;
  }
  // Paged: drops sequence b's hold on its blocks [from, to) (default: to the
  // end).
  void Release(size_t b, size_t from, size_t to = ~size_t{0}) {
    to = std::min(to, blocks_per_sequence);
    for (size_t i = from; i < to; ++i) {
      int32_t& entry = table[b * blocks_per_sequence + i];
      if (entry < 0) continue;
      if (--references[entry] == 0) free_blocks.push_back(entry);
      entry = -1;
    }
  }
  int32_t TakeBlock() {
    const int32_t block = free_blocks.back();
    free_blocks.pop_back();
    references[block] = 1;
    return block;
  }
  // Blocks an append of n tokens to `sequences` takes from the pool: new
  // ones, and copies of shared, partly filled blocks written into. Reserve
  // copies a shared block for each appending holder but the last when all
  // its holders append (that one then writes in place).
  // sequences[i] (i < count), or i itself when sequences is null.
  size_t BlocksNeeded(const size_t* sequences, size_t count, size_t n) {
    if (n == 0) return 0;
    size_t needed = 0;
    written.clear();
    for (size_t i = 0; i < count; ++i) {
      const size_t b = sequences == nullptr ? i : sequences[i];
      const size_t length = lengths[b];
      needed += BlocksFor(length + n) - BlocksFor(length);
      if (length % block_size != 0) {
        written.push_back(table[b * blocks_per_sequence + length / block_size]);
      }
    }
    std::sort(written.begin(), written.end());
    for (size_t i = 0; i < written.size();) {
      size_t holders = 1;
      while (i + holders < written.size() &&
             written[i + holders] == written[i]) {
        ++holders;
      }
      const uint32_t refs = references[written[i]];
      needed += refs == 1 ? 0 : holders - (holders == refs ? 1 : 0);
      i += holders;
    }
    return needed;
  }
  // Makes room for n more tokens in sequence b (BlocksNeeded are free).
  void Reserve(size_t b, size_t n) {
    const size_t length = lengths[b];
    if (length % block_size != 0 && n != 0) {
      int32_t& entry = table[b * blocks_per_sequence + length / block_size];
      if (references[entry] > 1) {  // Copy on write.
        const int32_t copy = TakeBlock();
        const size_t bytes = Bytes(block_size * row_stride);
        for (size_t h = 0; h < kv_heads; ++h) {  // Each head's rows.
          const size_t from = Bytes(entry * block_stride + h * head_stride);
          const size_t to = Bytes(copy * block_stride + h * head_stride);
          std::memcpy(keys + to, keys + from, bytes);
          if (!latent) std::memcpy(values + to, values + from, bytes);
          if (!scaled) continue;
          for (std::vector<float>* s : {&key_scales, &value_scales}) {
            if (s->empty()) continue;  // Latent: no value scales.
            const size_t at = h * scale_head_stride;
            std::copy_n(s->data() + entry * scale_block_stride + at, block_size,
                        s->data() + copy * scale_block_stride + at);
          }
        }
        --references[entry];
        entry = copy;
      }
    }
    for (size_t i = BlocksFor(length); i < BlocksFor(length + n); ++i) {
      table[b * blocks_per_sequence + i] = TakeBlock();
    }
  }

  // Bytes of a token's key row and of its value row (none when latent).
  size_t KeyRowBytes() const { return Bytes(head_dim); }
  size_t ValueRowBytes() const { return latent ? 0 : Bytes(value_dim); }
  bool ValueScales() const { return scaled && !latent; }

  // The raw bytes (and scales) of a sequence's tokens, and back: how
  // contiguous storage copies and reorders sequences.
  void SaveSequence(size_t b, size_t kv_heads, std::vector<uint8_t>* bytes,
                    std::vector<float>* scales) const {
    const size_t key_row = KeyRowBytes(), value_row = ValueRowBytes();
    bytes->resize(kv_heads * lengths[b] * (key_row + value_row));
    scales->resize(2 * kv_heads * lengths[b]);
    uint8_t* out = bytes->data();
    float* scale = scales->data();
    for (size_t h = 0; h < kv_heads; ++h) {
      for (size_t t = 0; t < lengths[b]; ++t) {
        // Empty rows: no bytes (and maybe no buffer).
        if (key_row != 0) {
          std::memcpy(out, keys + Bytes(Offset(b, h, t)), key_row);
        }
        if (value_row != 0) {
          std::memcpy(out + key_row, values + Bytes(Offset(b, h, t)),
                      value_row);
        }
        out += key_row + value_row;
        if (scaled) *scale++ = key_scales[ScaleOffset(b, h, t)];
        if (ValueScales()) *scale++ = value_scales[ScaleOffset(b, h, t)];
      }
    }
  }
  void RestoreSequence(size_t b, size_t kv_heads, size_t length,
                       const std::vector<uint8_t>& bytes,
                       const std::vector<float>& scales) {
    const size_t key_row = KeyRowBytes(), value_row = ValueRowBytes();
    const uint8_t* in = bytes.data();
    const float* scale = scales.data();
    for (size_t h = 0; h < kv_heads; ++h) {
      for (size_t t = 0; t < length; ++t) {
        if (key_row != 0) {
          std::memcpy(keys + Bytes(Offset(b, h, t)), in, key_row);
        }
        if (value_row != 0) {
          std::memcpy(values + Bytes(Offset(b, h, t)), in + key_row, value_row);
        }
        in += key_row + value_row;
        if (scaled) key_scales[ScaleOffset(b, h, t)] = *scale++;
        if (ValueScales()) value_scales[ScaleOffset(b, h, t)] = *scale++;
      }
    }
    lengths[b] = length;
  }
};

KVCache::KVCache(size_t batch, size_t kv_heads, size_t capacity,
                 size_t head_dim, const KVCacheConfig& config)
    : batch_(batch),
      kv_heads_(kv_heads),
      capacity_(capacity),
      head_dim_(head_dim),
      config_(config),
      storage_(std::make_unique<Storage>()) {
  constexpr const char* kFn = "KVCache";
  SIMDATTN_REQUIRE(IsElementType(config.type), kFn, "config.type (",
                   static_cast<int>(config.type), ") is not a KVType");
  SIMDATTN_REQUIRE(!config.rope || config.rope->positions == nullptr, kFn,
                   "config.rope->positions must be null: keys are rotated at "
                   "their positions in their sequences");
  Storage& s = *storage_;
  CheckBatch(kFn, batch);
  value_dim_ = config.value_dim == 0 ? head_dim : config.value_dim;
  SIMDATTN_REQUIRE(!config.latent || value_dim_ < head_dim, kFn,
                   "config.latent: config.value_dim (", config.value_dim,
                   ") must be below the head_dim (", head_dim,
                   "), the values being the first dims of each key row");
  const ElementTraits traits = ElementTraitsOf(config.type);
  SIMDATTN_REQUIRE(
      head_dim % traits.values == 0 && value_dim_ % traits.values == 0, kFn,
      traits.name, " stores blocks of ", traits.values,
      " elements, but head_dim (", head_dim, ") or value_dim (", value_dim_,
      ") is not a multiple of them");
  for (const float scale : {config.key_scale, config.value_scale}) {
    SIMDATTN_REQUIRE(std::isfinite(scale) && scale > 0.0f, kFn,
                     "config.key_scale (", config.key_scale,
                     ") and config.value_scale (", config.value_scale,
                     ") must be finite and positive");
  }
  s.type = config.type;
  s.element = traits.bytes;
  s.per_block = traits.values;
  s.scaled = traits.scaled;
  if (traits.side_scaled) {
    s.key_scale = config.key_scale;
    s.value_scale = config.latent ? config.key_scale : config.value_scale;
  }
  s.head_dim = head_dim;
  s.value_dim = value_dim_;
  s.latent = config.latent;
  if (config.rope) {
    internal::CheckRopeOptions(kFn, "config.rope", *config.rope, head_dim);
    s.rope.emplace(*config.rope, head_dim);
  }
  s.lengths.assign(batch, 0);
  s.paged = config.block_size != 0;
  SIMDATTN_REQUIRE(config.window == 0 || s.paged, kFn, "config.window (",
                   config.window,
                   ") needs a paged cache (config.block_size != 0)");
  s.window = config.window;
  s.first_held.assign(batch, 0);
  size_t blocks = batch;
  if (s.paged) {
    const size_t bs = config.block_size;
    SIMDATTN_REQUIRE(bs >= 16 && bs <= 256 && (bs & (bs - 1)) == 0, kFn,
                     "config.block_size (", bs,
                     ") is not a power of two from 16 to 256");
    s.block_size = bs;
    s.blocks_per_sequence = capacity / bs + (capacity % bs != 0);
    blocks = config.num_blocks != 0
                 ? config.num_blocks
                 : CheckedMul(kFn, "batch * blocks per sequence", batch,
                              s.blocks_per_sequence);
    SIMDATTN_REQUIRE(
        blocks <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), kFn,
        "the pool's ", blocks, " blocks exceed 2^31 - 1");
    s.num_blocks = blocks;
    s.table.assign(
        CheckedMul(kFn, "the block table", batch, s.blocks_per_sequence), -1);
    s.references.assign(blocks, 0);
    for (size_t i = blocks; i-- > 0;) {
      s.free_blocks.push_back(static_cast<int32_t>(i));
    }
  } else {
    s.block_size = capacity;
  }
  // Keys and values share the strides: rows of the longer of the two. A
  // paged pool holds each kv head's blocks together ([head][block][row]):
  // a task of decode reads one head, and a sequence's blocks taken in order
  // are then one stream to the hardware prefetchers. Blocks of every head
  // ([block][head][row], as engines' pages often are) leave it short runs
  // far apart, which no prefetch rule made as fast (bench/RESULTS.md, "Kept
  // decisions").
  s.row_stride = std::max(head_dim, value_dim_);
  const size_t run =
      CheckedMul(kFn, "block_size * row length", s.block_size, s.row_stride);
  const size_t per_head =
      CheckedMul(kFn, "blocks * block_size * row length", blocks, run);
  const size_t elements =
      CheckedMul(kFn, "the cache's elements", kv_heads, per_head);
  s.kv_heads = kv_heads;
  s.block_stride = s.paged ? run : kv_heads * run;
  s.head_stride = s.paged ? per_head : run;
  const size_t bytes =
      CheckedMul(kFn, "the cache's bytes", elements / s.per_block, s.element);
  s.owned_keys = CacheMemory(bytes);
  s.keys = s.owned_keys.data();
  if (s.latent) {
    s.values = s.keys;
  } else {
    s.owned_values = CacheMemory(bytes);
    s.values = s.owned_values.data();
  }
  if (s.scaled) {
    if (s.paged) {  // Laid out as the rows are.
      s.scale_block_stride = s.block_size;
      s.scale_head_stride = blocks * s.block_size;
    } else {
      s.scale_head_stride = s.block_size;
      s.scale_block_stride = kv_heads * s.block_size;
    }
    const size_t scales = blocks * kv_heads * s.block_size;
    s.key_scales.assign(scales, 0.0f);
    if (!s.latent) s.value_scales.assign(scales, 0.0f);
  }
}

KVCache::KVCache(Tensor4 keys, Tensor4 values)
    : batch_(keys.dims[0]),
      kv_heads_(keys.dims[1]),
      capacity_(keys.dims[2]),
      head_dim_(keys.dims[3]),
      storage_(std::make_unique<Storage>()) {
  constexpr const char* kFn = "KVCache";
  value_dim_ = head_dim_;
  SIMDATTN_REQUIRE(internal::SameDims(keys.dims, values.dims), kFn,
                   "keys have shape ", ShapeString(keys.dims),
                   " but values have shape ", ShapeString(values.dims));
  const internal::Footprint rk = internal::CheckTensor4(kFn, "keys", keys);
  const internal::Footprint rv = internal::CheckTensor4(kFn, "values", values);
  internal::CheckDistinctElements(kFn, "keys", keys.dims, keys.strides);
  internal::CheckDistinctElements(kFn, "values", values.dims, values.strides);
  SIMDATTN_REQUIRE(!rk.Overlaps(rv), kFn, "keys overlap values");
  SIMDATTN_REQUIRE(keys.strides[0] == values.strides[0] &&
                       keys.strides[1] == values.strides[1] &&
                       keys.strides[2] == values.strides[2],
                   kFn, "keys and values have different strides");
  Storage& s = *storage_;
  CheckBatch(kFn, batch_);
  s.keys = reinterpret_cast<uint8_t*>(keys.data);
  s.values = reinterpret_cast<uint8_t*>(values.data);
  s.head_dim = s.value_dim = head_dim_;
  s.kv_heads = kv_heads_;
  s.block_stride = keys.strides[0];
  s.head_stride = keys.strides[1];
  s.row_stride = keys.strides[2];
  s.block_size = capacity_;
  s.lengths.assign(batch_, 0);
  s.first_held.assign(batch_, 0);
}

KVCache::KVCache(KVCache&&) noexcept = default;
KVCache& KVCache::operator=(KVCache&&) noexcept = default;
KVCache::~KVCache() = default;

void KVCache::CheckTokens(const char* function, ConstTensor4 keys,
                          ConstTensor4 values, size_t count) const {
  const size_t expected[4] = {count, kv_heads_, keys.dims[2], head_dim_};
  SIMDATTN_REQUIRE(internal::SameDims(keys.dims, expected), function,
                   "keys have shape ", ShapeString(keys.dims), ", expected ",
                   ShapeString(expected));
  internal::CheckTensor4(function, "keys", keys);
  if (storage_->latent) {
    const size_t none[4] = {0, 0, 0, 0};
    SIMDATTN_REQUIRE(
        values.data == nullptr && internal::SameDims(values.dims, none),
        function, "values have shape ", ShapeString(values.dims),
        ", but the cache is latent: the keys' rows hold the "
        "values, which must be empty (ConstTensor4{})");
    return;
  }
  const size_t expected_values[4] = {count, kv_heads_, keys.dims[2],
                                     value_dim_};
  SIMDATTN_REQUIRE(internal::SameDims(values.dims, expected_values), function,
                   "values have shape ", ShapeString(values.dims),
                   ", expected ", ShapeString(expected_values));
  internal::CheckTensor4(function, "values", values);
}

void KVCache::Append(ConstTensor4 keys, ConstTensor4 values) {
  AppendTo(keys, values, nullptr, batch_);
}

void KVCache::Append(ConstTensor4 keys, ConstTensor4 values,
                     const std::vector<size_t>& sequences) {
  AppendTo(keys, values, sequences.data(), sequences.size());
}

size_t KVCache::Reserve(const char* kFn, const size_t* list, size_t count,
                        size_t n) {
  Storage& s = *storage_;
  if (s.appended.size() != batch_) s.appended.assign(batch_, 0);
  s.written.reserve(batch_);
  const uint64_t append = ++s.appends;
  const auto sequence = [list](size_t i) { return list ? list[i] : i; };
  for (size_t i = 0; i < count; ++i) {
    const size_t b = sequence(i);
    SIMDATTN_REQUIRE(b < batch_, kFn, "sequences[", i, "] (", b,
                     ") is not below the batch (", batch_, ")");
    SIMDATTN_REQUIRE(s.appended[b] != append, kFn, "sequence ", b,
                     " is listed twice");
    s.appended[b] = append;
    // Compared as a difference: length + n could wrap.
    SIMDATTN_REQUIRE(n <= capacity_ - s.lengths[b], kFn, "appending ", n,
                     " tokens to sequence ", b, "'s ", s.lengths[b],
                     " exceeds the capacity (", capacity_, ")");
  }
  const size_t blocks_needed = s.paged ? s.BlocksNeeded(list, count, n) : 0;
  // A rolling window's blocks the appended tokens cannot see come back first.
  size_t rollable = 0;
  for (size_t i = 0; i < count && s.window != 0 && n != 0; ++i) {
    rollable += s.Rollable(sequence(i), s.lengths[sequence(i)]);
  }
  SIMDATTN_REQUIRE(blocks_needed <= s.free_blocks.size() + rollable, kFn,
                   "appending ", n, " tokens needs ", blocks_needed,
                   " blocks, but only ", s.free_blocks.size() + rollable,
                   " of the pool's ", s.num_blocks, " are free");
  // Blocks for every token, even of zero bytes: the table stays complete.
  // Rolled first: the reservations may take the blocks rolling returns.
  for (size_t i = 0; i < count && s.window != 0 && n != 0; ++i) {
    s.Roll(sequence(i), s.lengths[sequence(i)]);
  }
  size_t longest = 0;
  for (size_t i = 0; i < count && n != 0; ++i) {
    const size_t b = sequence(i);
    if (s.paged) s.Reserve(b, n);
    longest = std::max(longest, s.lengths[b] + n);
  }
  return longest;
}

void KVCache::AppendTo(ConstTensor4 keys, ConstTensor4 values,
                       const size_t* list, size_t count) {
  constexpr const char* kFn = "KVCache::Append";
  Storage& s = *storage_;
  const size_t n = keys.dims[2];
  CheckTokens(kFn, keys, values, count);
  const auto sequence = [list](size_t i) { return list ? list[i] : i; };
  const size_t longest = Reserve(kFn, list, count, n);
  if (n == 0 || count == 0) return;
  const size_t row = std::max(head_dim_, value_dim_);
  if (kv_heads_ == 0 || row == 0) {
    for (size_t i = 0; i < count; ++i) s.lengths[sequence(i)] += n;
    return;
  }
  if (s.rope) s.rope->Reserve(longest);
  // Per (sequence, head), runs of tokens within one block, converted (keys
  // rotated at their positions) where they go.
  const bool int8 = s.scaled;
  // Tasks of about 16K elements or more.
  const size_t grain = std::max<size_t>(1, 16384 / (n * row));
  internal::ParallelFor(
      0, count * kv_heads_, grain, [&](size_t first, size_t last) {
        for (size_t task = first; task != last; ++task) {
          const size_t i = task / kv_heads_, h = task % kv_heads_;
          const size_t b = sequence(i), start = s.lengths[b];
          for (size_t t = 0; t < n;) {
            const size_t position = start + t;
            const size_t run =
                std::min(n - t, s.block_size - position % s.block_size);
            const size_t at = s.Offset(b, h, position);
            const size_t scale = int8 ? s.ScaleOffset(b, h, position) : 0;
            const MatrixView<const float> k(keys.Slice(i, h).Row(t), run,
                                            head_dim_, keys.strides[2]);
            const internal::RopeRows rope =
                s.rope ? s.rope->From(position) : internal::RopeRows{};
            internal::StoreKVRows(s.type, k, s.keys + s.Bytes(at), s.row_stride,
                                  int8 ? &s.key_scales[scale] : nullptr,
                                  s.key_scale, s.rope ? &rope : nullptr);
            if (!s.latent) {
              const MatrixView<const float> v(values.Slice(i, h).Row(t), run,
                                              value_dim_, values.strides[2]);
              internal::StoreKVRows(
                  s.type, v, s.values + s.Bytes(at), s.row_stride,
                  int8 ? &s.value_scales[scale] : nullptr, s.value_scale);
            }
            t += run;
          }
        }
      });
  for (size_t i = 0; i < count; ++i) s.lengths[sequence(i)] += n;
}

void KVCache::Truncate(size_t sequence, size_t length) {
  constexpr const char* kFn = "KVCache::Truncate";
  Storage& s = *storage_;
  SIMDATTN_REQUIRE(sequence < batch_, kFn, "sequence (", sequence,
                   ") is not below the batch (", batch_, ")");
  SIMDATTN_REQUIRE(length <= s.lengths[sequence], kFn, "length (", length,
                   ") exceeds sequence ", sequence, "'s length (",
                   s.lengths[sequence], ")");
  SIMDATTN_REQUIRE(length == 0 || length >= s.first_held[sequence], kFn,
                   "length (", length, ") is before sequence ", sequence,
                   "'s first held token (", s.first_held[sequence],
                   "): the rolling window released the tokens before it");
  if (s.paged) s.Release(sequence, s.BlocksFor(length));
  if (length == 0) s.first_held[sequence] = 0;
  s.lengths[sequence] = length;
}

void KVCache::Clear() {
  for (size_t b = 0; b < batch_; ++b) Reset(b);
}

void KVCache::Copy(size_t src, size_t dst) {
  constexpr const char* kFn = "KVCache::Copy";
  SIMDATTN_REQUIRE(src < batch_ && dst < batch_, kFn, "src (", src,
                   ") and dst (", dst, ") must be below the batch (", batch_,
                   ")");
  std::vector<size_t> order(batch_);
  for (size_t b = 0; b < batch_; ++b) order[b] = b;
  order[dst] = src;
  Reorder(order);
}

void KVCache::Reorder(const std::vector<size_t>& order) {
  constexpr const char* kFn = "KVCache::Reorder";
  Storage& s = *storage_;
  SIMDATTN_REQUIRE(order.size() == batch_, kFn, "order has ", order.size(),
                   " entries, expected the batch (", batch_, ")");
  for (size_t b = 0; b < batch_; ++b) {
    SIMDATTN_REQUIRE(order[b] < batch_, kFn, "order[", b, "] (", order[b],
                     ") is not below the batch (", batch_, ")");
  }
  std::vector<size_t> lengths(batch_), first_held(batch_);
  for (size_t b = 0; b < batch_; ++b) {
    lengths[b] = s.lengths[order[b]];
    first_held[b] = s.first_held[order[b]];
  }
  if (s.paged) {  // Share blocks: take the new holds before dropping the old.
    std::vector<int32_t> table(s.table.size(), -1);
    for (size_t b = 0; b < batch_; ++b) {
      for (size_t i = first_held[b] / s.block_size; i < s.BlocksFor(lengths[b]);
           ++i) {
        const int32_t block = s.table[order[b] * s.blocks_per_sequence + i];
        table[b * s.blocks_per_sequence + i] = block;
        ++s.references[block];
      }
    }
    for (size_t b = 0; b < batch_; ++b) s.Release(b, 0);
    s.table = std::move(table);
    s.lengths = std::move(lengths);
    s.first_held = std::move(first_held);
    return;
  }
  // Contiguous: every sequence that moves goes through a saved copy.
  std::vector<std::vector<uint8_t>> bytes(batch_);
  std::vector<std::vector<float>> scales(batch_);
  for (size_t b = 0; b < batch_; ++b) {
    if (order[b] != b && bytes[order[b]].empty()) {
      s.SaveSequence(order[b], kv_heads_, &bytes[order[b]], &scales[order[b]]);
    }
  }
  for (size_t b = 0; b < batch_; ++b) {
    if (order[b] == b) continue;
    s.RestoreSequence(b, kv_heads_, lengths[b], bytes[order[b]],
                      scales[order[b]]);
  }
}

KVCacheView KVCache::View() const {
  const Storage& s = *storage_;
  KVCacheView view;
  view.type = s.type;
  view.batch = batch_;
  view.kv_heads = kv_heads_;
  view.head_dim = head_dim_;
  view.value_dim = value_dim_;
  view.lengths = s.lengths.data();
  view.keys = s.keys;
  view.values = s.values;
  view.block_stride = s.block_stride;
  view.head_stride = s.head_stride;
  view.row_stride = s.row_stride;
  view.key_scale = s.key_scale;
  view.value_scale = s.value_scale;
  if (s.scaled) {
    view.key_scales = s.key_scales.data();
    view.value_scales = s.latent ? view.key_scales : s.value_scales.data();
    view.scale_block_stride = s.scale_block_stride;
    view.scale_head_stride = s.scale_head_stride;
  }
  view.block_size = s.block_size;
  view.capacity = capacity_;
  if (s.paged) {
    view.block_table = s.table.data();
    view.blocks_per_sequence = s.blocks_per_sequence;
    view.num_blocks = s.num_blocks;
  }
  return view;
}

size_t KVCache::ExportBytes(size_t count) const {
  return internal::TransferBytes("KVCache::ExportBytes",
                                 internal::KVPool::Of(View()), count);
}

void KVCache::Export(size_t sequence, size_t first, size_t count,
                     void* buffer) const {
  constexpr const char* kFn = "KVCache::Export";
  const Storage& s = *storage_;
  SIMDATTN_REQUIRE(sequence < batch_, kFn, "sequence (", sequence,
                   ") is not below the batch (", batch_, ")");
  SIMDATTN_REQUIRE(first >= s.first_held[sequence], kFn, "first (", first,
                   ") is before sequence ", sequence, "'s first held token (",
                   s.first_held[sequence],
                   "): the rolling window released the tokens before it");
  SIMDATTN_REQUIRE(
      first <= s.lengths[sequence] && count <= s.lengths[sequence] - first, kFn,
      "tokens [", first, ", ", first, " + ", count,
      ") are not within sequence ", sequence, "'s ", s.lengths[sequence]);
  SIMDATTN_REQUIRE(buffer != nullptr, kFn, "buffer is null");
  const Storage::TokenSlots slots{&s, sequence, first};
  internal::ExportRows(internal::KVPool::Of(View()), Storage::SlotOfToken,
                       &slots, count, buffer);
}

void KVCache::Import(size_t sequence, const void* buffer, size_t count) {
  constexpr const char* kFn = "KVCache::Import";
  Storage& s = *storage_;
  SIMDATTN_REQUIRE(sequence < batch_, kFn, "sequence (", sequence,
                   ") is not below the batch (", batch_, ")");
  const internal::KVPool pool = internal::KVPool::Of(View());
  const size_t tokens =
      internal::CheckTransfer(kFn, pool, buffer, ExportBytes(count));
  SIMDATTN_REQUIRE(tokens == count, kFn, "the buffer holds ", tokens,
                   " tokens, count is ", count);
  Reserve(kFn, &sequence, 1, count);
  const Storage::TokenSlots slots{&s, sequence, s.lengths[sequence]};
  internal::ImportRows(pool, Storage::SlotOfToken, &slots, buffer);
  s.lengths[sequence] += count;
}

void KVCache::Read(size_t sequence, Tensor3 keys, Tensor3 values) const {
  constexpr const char* kFn = "KVCache::Read";
  const Storage& s = *storage_;
  SIMDATTN_REQUIRE(sequence < batch_, kFn, "sequence (", sequence,
                   ") is not below the batch (", batch_, ")");
  const size_t length = s.lengths[sequence];
  SIMDATTN_REQUIRE(s.first_held[sequence] == 0, kFn, "sequence ", sequence,
                   "'s first ", s.first_held[sequence],
                   " tokens were released by the rolling window: Read gives "
                   "whole sequences (Export gives the held tokens)");
  internal::Footprint spans[2];
  for (int i = 0; i < 2; ++i) {
    const Tensor3& t = i == 0 ? keys : values;
    const char* name = i == 0 ? "keys" : "values";
    const size_t dim = i == 0 ? head_dim_ : value_dim_;
    SIMDATTN_REQUIRE(
        t.batch == kv_heads_ && t.tokens == length && t.features == dim, kFn,
        name, " are (", t.batch, ", ", t.tokens, ", ", t.features,
        "), expected (", kv_heads_, ", ", length, ", ", dim, ")");
    const Tensor4 view(t.data, 1, t.batch, t.tokens, t.features, 0,
                       t.batch_stride, t.token_stride);
    spans[i] = internal::CheckTensor4(kFn, name, view);
    internal::CheckDistinctElements(kFn, name, view.dims, view.strides);
  }
  SIMDATTN_REQUIRE(!spans[0].Overlaps(spans[1]), kFn, "values overlap keys");
  // Nor the cache's own memory (a cache over the caller's buffers).
  const internal::KVCacheViewSpans cache =
      internal::CheckKVCacheView(kFn, View(), 0);
  for (int i = 0; i < 2; ++i) {
    for (const internal::Footprint* held :
         {&cache.keys, &cache.values, &cache.key_scales, &cache.value_scales}) {
      SIMDATTN_REQUIRE(!spans[i].Overlaps(*held), kFn,
                       i == 0 ? "keys" : "values",
                       " overlap the cache's own memory");
    }
  }
  const bool int8 = s.scaled;
  const std::vector<float>& value_scales =
      s.latent ? s.key_scales : s.value_scales;
  for (size_t h = 0; h < kv_heads_; ++h) {
    for (size_t t = 0; t < length; ++t) {
      const size_t at = s.Bytes(s.Offset(sequence, h, t));
      const size_t scale = int8 ? s.ScaleOffset(sequence, h, t) : 0;
      // Empty rows: nothing to read (views may be null).
      if (head_dim_ != 0) {
        internal::WidenRow(s.type, s.keys + at,
                           int8 ? s.key_scales[scale] : s.key_scale, head_dim_,
                           keys.Sequence(h).Row(t));
      }
      if (value_dim_ != 0) {
        internal::WidenRow(s.type, s.values + at,
                           int8 ? value_scales[scale] : s.value_scale,
                           value_dim_, values.Sequence(h).Row(t));
      }
    }
  }
}

size_t KVCache::length(size_t sequence) const {
  SIMDATTN_REQUIRE(sequence < batch_, "KVCache::length", "sequence (", sequence,
                   ") is not below the batch (", batch_, ")");
  return storage_->lengths[sequence];
}

size_t KVCache::size() const {
  const std::vector<size_t>& lengths = storage_->lengths;
  return lengths.empty() ? 0
                         : *std::max_element(lengths.begin(), lengths.end());
}

ConstTensor4 KVCache::keys() const {
  const Storage& s = *storage_;
  SIMDATTN_REQUIRE(s.type == KVType::kF32 && !s.paged, "KVCache::keys",
                   "only a contiguous float cache is a tensor: use View()");
  return ConstTensor4(reinterpret_cast<const float*>(s.keys), batch_, kv_heads_,
                      size(), head_dim_, s.block_stride, s.head_stride,
                      s.row_stride);
}

ConstTensor4 KVCache::values() const {
  const Storage& s = *storage_;
  SIMDATTN_REQUIRE(s.type == KVType::kF32 && !s.paged, "KVCache::values",
                   "only a contiguous float cache is a tensor: use View()");
  return ConstTensor4(reinterpret_cast<const float*>(s.values), batch_,
                      kv_heads_, size(), value_dim_, s.block_stride,
                      s.head_stride, s.row_stride);
}

}  // namespace simdattn
