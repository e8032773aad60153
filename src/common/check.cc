#include "src/common/check.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace simdattn {
namespace internal {

size_t CheckedMul(const char* function, const char* what, size_t a, size_t b) {
  size_t product;
  SIMDATTN_REQUIRE(!__builtin_mul_overflow(a, b, &product), function, what,
                   " overflows size_t (", a, " * ", b, ")");
  return product;
}

namespace {

// Bytes from the first to one past the last element of a strided view.
size_t SpanBytes(const char* function, const char* name, const size_t* dims,
                 const size_t* strides, int rank, size_t element_size) {
  size_t last = dims[rank - 1];  // Index of one past the last element.
  for (int k = 0; k < rank - 1; ++k) {
    const size_t offset = CheckedMul(function, name, dims[k] - 1, strides[k]);
    SIMDATTN_REQUIRE(!__builtin_add_overflow(last, offset, &last), function,
                     name, " extent overflows size_t");
  }
  return CheckedMul(function, name, last, element_size);
}

}  // namespace

Footprint CheckMatrix(const char* function, const char* name, const void* data,
                      size_t rows, size_t cols, size_t stride,
                      size_t element_size) {
  SIMDATTN_REQUIRE(stride >= cols || rows <= 1, function, name, ".stride (",
                   stride, ") is less than ", name, ".cols (", cols, ")");
  SIMDATTN_REQUIRE(data != nullptr || rows == 0 || cols == 0, function, name,
                   " is null but has shape ", rows, " x ", cols);
  const size_t dims[4] = {1, 1, rows, cols};
  const size_t strides[3] = {0, 0, stride};
  return CheckTensor4(function, name, data, dims, strides, element_size);
}

Footprint CheckTensor4(const char* function, const char* name, const void* data,
                       const size_t (&dims)[4], const size_t (&strides)[3],
                       size_t element_size) {
  SIMDATTN_REQUIRE(strides[2] >= dims[3] || dims[2] <= 1, function, name,
                   " row stride (", strides[2],
                   ") is less than its row length (", dims[3], ")");
  Footprint f;
  if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || dims[3] == 0) return f;
  SIMDATTN_REQUIRE(data != nullptr, function, name, " is null but has shape ",
                   ShapeString(dims));
  const size_t bytes =
      SpanBytes(function, name, dims, strides, 4, element_size);
  f.begin = reinterpret_cast<uintptr_t>(data);
  f.end = f.begin + bytes;
  f.element_size = element_size;
  std::copy(dims, dims + 4, f.dims);
  std::copy(strides, strides + 3, f.strides);
  return f;
}

Footprint ContiguousFootprint(const char* function, const char* name,
                              const void* data, size_t count,
                              size_t element_size) {
  const size_t dims[4] = {1, 1, 1, count};
  const size_t strides[3] = {0, 0, count};
  return CheckTensor4(function, name, data, dims, strides, element_size);
}

namespace {

// The offsets (in elements) of a view relative to its first element are
// sum_k i_k strides[k] + j, 0 <= i_k < dims[k], 0 <= j < dims[3]. Two views
// with the same strides share an element iff some difference of offsets,
// sum_k c_k strides[k] + r with c_k in (-other.dims[k], dims[k]) and r in
// (-other.dims[3], dims[3]), equals `delta`, the distance between their first
// elements. Searched from the largest stride down: at each level the
// coefficients are those that leave a remainder the faster dimensions can
// still reach, at most a few for views whose elements are distinct. Gives up
// (reports sharing) after kMaxNodes coefficients.
class SharedElementSearch {
 public:
  SharedElementSearch(const Footprint& a, const Footprint& b) {
    // A dimension neither view spans is a level with the single coefficient
    // 0 (stride 1 keeps the division defined).
    for (int k = 0; k < kLevels; ++k) {
      const bool spanned =
          a.strides[k] != 0 && (a.dims[k] > 1 || b.dims[k] > 1);
      levels_[k] = spanned ? Level{static_cast<Wide>(a.strides[k]),
                                   static_cast<Wide>(a.dims[k]) - 1,
                                   1 - static_cast<Wide>(b.dims[k])}
                           : Level{1, 0, 0};
    }
    // By decreasing stride (insertion sort: std::sort on three elements
    // trips GCC 12's -Warray-bounds).
    for (int x = 1; x < kLevels; ++x) {
      for (int y = x; y > 0 && levels_[y].stride > levels_[y - 1].stride; --y) {
        std::swap(levels_[y], levels_[y - 1]);
      }
    }
    // [reach_lo_[l], reach_hi_[l]]: what levels l.. and r can sum to.
    reach_hi_[kLevels] = static_cast<Wide>(a.dims[3]) - 1;
    reach_lo_[kLevels] = 1 - static_cast<Wide>(b.dims[3]);
    for (int l = kLevels - 1; l >= 0; --l) {
      reach_hi_[l] = reach_hi_[l + 1] + levels_[l].max_c * levels_[l].stride;
      reach_lo_[l] = reach_lo_[l + 1] + levels_[l].min_c * levels_[l].stride;
    }
  }

  bool Reaches(__int128 delta) { return Search(0, delta); }

 private:
  using Wide = __int128;
  struct Level {
    Wide stride, max_c, min_c;
  };
  static constexpr int kLevels = 3;
  static constexpr int kMaxNodes = 4096;

  static Wide FloorDiv(Wide a, Wide b) {
    const Wide q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
  }

  bool Search(int l, Wide delta) {
    if (delta < reach_lo_[l] || delta > reach_hi_[l]) return false;
    if (l == kLevels) return true;
    const Level& v = levels_[l];
    // delta - c stride must lie in [reach_lo_[l + 1], reach_hi_[l + 1]].
    const Wide c_lo =
        std::max(v.min_c, -FloorDiv(reach_hi_[l + 1] - delta, v.stride));
    const Wide c_hi =
        std::min(v.max_c, FloorDiv(delta - reach_lo_[l + 1], v.stride));
    for (Wide c = c_lo; c <= c_hi; ++c) {
      if (++nodes_ > kMaxNodes) return true;
      if (Search(l + 1, delta - c * v.stride)) return true;
    }
    return false;
  }

  Level levels_[kLevels];
  Wide reach_lo_[kLevels + 1], reach_hi_[kLevels + 1];
  int nodes_ = 0;
};

}  // namespace

bool Footprint::SameLayout(const Footprint& other) const {
  if (element_size != other.element_size) return false;
  for (int k = 0; k < 3; ++k) {
    const bool spanned = dims[k] > 1 || other.dims[k] > 1;
    if (spanned && strides[k] != other.strides[k]) return false;
  }
  return true;
}

bool Footprint::Overlaps(const Footprint& other) const {
  if (!(begin < other.end && other.begin < end)) return false;
  if (!SameLayout(other)) return true;
  // Elements e (bytes [e s, e s + s)) of this view and e' of the other share
  // a byte iff e - e' is within one element of the byte distance over s.
  const __int128 s = static_cast<__int128>(element_size);
  const __int128 distance =
      static_cast<__int128>(other.begin) - static_cast<__int128>(begin);
  const __int128 low =
      distance >= 0 ? distance / s : -((-distance + s - 1) / s);
  const __int128 high = distance % s == 0 ? low : low + 1;
  SharedElementSearch search(*this, other);
  for (__int128 delta = low; delta <= high; ++delta) {
    if (search.Reaches(delta)) return true;
  }
  return false;
}

std::string ShapeString(const size_t (&dims)[4]) {
  return "(" + std::to_string(dims[0]) + ", " + std::to_string(dims[1]) + ", " +
         std::to_string(dims[2]) + ", " + std::to_string(dims[3]) + ")";
}

// Sufficient condition: taking the dimensions of extent > 1 by increasing
// stride, each stride is at least the span of the faster ones.
void CheckDistinctElements(const char* function, const char* name,
                           const size_t (&dims)[4],
                           const size_t (&strides)[3]) {
  if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || dims[3] == 0) return;
  int order[3];
  int n = 0;
  for (int k = 0; k < 3; ++k) {
    if (dims[k] > 1) order[n++] = k;
  }
  // Insertion sort (std::sort on 3 ints trips GCC 12's -Warray-bounds).
  for (int a = 1; a < n; ++a) {
    for (int b = a; b > 0 && strides[order[b]] < strides[order[b - 1]]; --b) {
      std::swap(order[b], order[b - 1]);
    }
  }
  size_t span = dims[3];
  for (int o = 0; o < n; ++o) {
    const int k = order[o];
    SIMDATTN_REQUIRE(strides[k] >= span, function, name, ".strides[", k, "] (",
                     strides[k], ") makes elements of ", name, " (shape ",
                     ShapeString(dims), ") overlap: it is less than the ", span,
                     " elements spanned by the faster dimensions");
    span += (dims[k] - 1) * strides[k];
  }
}

namespace {

// A mask must have the scores' dims; a stride of 0 broadcasts that dimension
// (a row stride of 0 shares one row among all rows). Returns its bytes.
template <typename T>
Footprint CheckMask(const char* function, const char* name,
                    Tensor4View<const T> m, const size_t (&dims)[4]) {
  SIMDATTN_REQUIRE(SameDims(m.dims, dims), function, name, " has shape ",
                   ShapeString(m.dims), " but the scores have shape ",
                   ShapeString(dims));
  size_t spanned[4] = {m.dims[0], m.dims[1], m.dims[2], m.dims[3]};
  for (int k = 0; k < 3; ++k) {
    if (m.strides[k] == 0) spanned[k] = std::min<size_t>(spanned[k], 1);
  }
  return CheckTensor4(function, name, m.data, spanned, m.strides, sizeof(T));
}

}  // namespace

void CheckAttentionMask(const char* function, const AttentionMask& mask,
                        const size_t (&scores)[4], const char* keys_name,
                        Footprint output, const char* output_name) {
  if (mask.boolean.data != nullptr) {
    const Footprint rm =
        CheckMask(function, "mask.boolean", mask.boolean, scores);
    SIMDATTN_REQUIRE(!output.Overlaps(rm), function, output_name,
                     " overlaps mask.boolean");
  }
  if (mask.additive.data != nullptr) {
    const Footprint rm =
        CheckMask(function, "mask.additive", mask.additive, scores);
    SIMDATTN_REQUIRE(!output.Overlaps(rm), function, output_name,
                     " overlaps mask.additive");
  }
  // An array of `count` entries read by the kernel: in bounds, apart from
  // the output.
  const auto check_array = [&](const char* name, const void* data, size_t count,
                               size_t element_size) {
    if (data == nullptr || count == 0) return;
    const Footprint rk =
        ContiguousFootprint(function, name, data, count, element_size);
    SIMDATTN_REQUIRE(!output.Overlaps(rk), function, output_name, " overlaps ",
                     name);
  };
  check_array("mask.key_lengths", mask.key_lengths, scores[0], sizeof(size_t));
  if (mask.key_lengths != nullptr) {
    for (size_t b = 0; b < scores[0]; ++b) {
      SIMDATTN_REQUIRE(mask.key_lengths[b] <= scores[3], function,
                       "mask.key_lengths[", b, "] (", mask.key_lengths[b],
                       ") exceeds the number of keys, ", keys_name, " (",
                       scores[3], ")");
    }
  }
  // The offsets place rows among the keys: for causality, the window and
  // ALiBi's distances.
  SIMDATTN_REQUIRE(mask.causal_offsets == nullptr || mask.causal ||
                       mask.window != 0 || mask.alibi_slopes != nullptr ||
                       mask.tree_offsets != nullptr,
                   function,
                   "mask.causal_offsets is given but none of mask.causal, "
                   "mask.window, mask.alibi_slopes and mask.tree_offsets is "
                   "set");
  // A tree's new tokens are [causal_offsets[b], key_lengths[b]): what a
  // cache's lengths give.
  if (mask.tree_offsets != nullptr) {
    SIMDATTN_REQUIRE(
        mask.key_lengths != nullptr && mask.causal_offsets != nullptr, function,
        "mask.tree_offsets is given outside attention over a "
        "cache (VarlenAttention, or a KVCacheView)");
    SIMDATTN_REQUIRE(mask.tree_bits != nullptr, function,
                     "mask.tree_offsets is given but mask.tree_bits is null");
    check_array("mask.tree_offsets", mask.tree_offsets, scores[0],
                sizeof(size_t));
  }
  check_array("mask.causal_offsets", mask.causal_offsets, scores[0],
              sizeof(size_t));
  SIMDATTN_REQUIRE(std::isfinite(mask.softcap) && mask.softcap >= 0.0f,
                   function, "mask.softcap (", mask.softcap,
                   ") is not finite and >= 0 (0: off)");
  // Per-head parameters: finite.
  const auto check_heads = [&](const char* name, const float* values) {
    check_array(name, values, scores[1], sizeof(float));
    for (size_t h = 0; values != nullptr && h < scores[1]; ++h) {
      SIMDATTN_REQUIRE(std::isfinite(values[h]), function, name, "[", h, "] (",
                       values[h], ") is not finite");
    }
  };
  check_heads("mask.alibi_slopes", mask.alibi_slopes);
  check_heads("mask.sinks", mask.sinks);
}

void CheckDropout(const char* function, const char* p_name, float p,
                  const char* const (&dim_names)[4], const size_t (&dims)[4]) {
  SIMDATTN_REQUIRE(p >= 0.0f && p <= 1.0f, function, p_name, " (", p,
                   ") is not a probability in [0, 1]");
  constexpr uint64_t kMaxIndexDim = uint64_t{1} << 32;
  constexpr uint64_t kMaxRowLength = uint64_t{1} << 35;
  for (int k = 0; k < 3; ++k) {
    SIMDATTN_REQUIRE(static_cast<uint64_t>(dims[k]) <= kMaxIndexDim, function,
                     dim_names[k], " (", dims[k],
                     ") exceeds 2^32, the range of its dropout counter word");
  }
  SIMDATTN_REQUIRE(static_cast<uint64_t>(dims[3]) <= kMaxRowLength, function,
                   dim_names[3], " (", dims[3],
                   ") exceeds 2^35, the range of the dropout counter's "
                   "column word");
}

void CheckQueryStarts(const char* function, const size_t* query_starts,
                      size_t num_seqs, size_t num_tokens) {
  SIMDATTN_REQUIRE(query_starts != nullptr, function, "query_starts is null");
  SIMDATTN_REQUIRE(query_starts[0] == 0, function, "query_starts[0] (",
                   query_starts[0], ") is not 0");
  for (size_t b = 0; b < num_seqs; ++b) {
    SIMDATTN_REQUIRE(query_starts[b + 1] >= query_starts[b], function,
                     "query_starts[", b + 1, "] (", query_starts[b + 1],
                     ") is less than query_starts[", b, "] (", query_starts[b],
                     ")");
  }
  SIMDATTN_REQUIRE(query_starts[num_seqs] == num_tokens, function,
                   "query_starts[", num_seqs, "] (", query_starts[num_seqs],
                   ") differs from the ", num_tokens, " packed tokens");
}

KVCacheViewSpans CheckKVMemory(const char* function, const KVCacheView& kv) {
  const bool paged = kv.block_table != nullptr;
  SIMDATTN_REQUIRE(kv.block_size != 0 || !paged, function,
                   "kv.block_size is 0");
  if (paged) {
    SIMDATTN_REQUIRE((kv.block_size & (kv.block_size - 1)) == 0, function,
                     "kv.block_size (", kv.block_size,
                     ") is not a power of two");
  }
  const size_t room =
      CheckedMul(function, "kv.blocks_per_sequence * kv.block_size",
                 paged ? kv.blocks_per_sequence : 1, kv.block_size);
  SIMDATTN_REQUIRE(kv.capacity <= room, function, "kv.capacity (", kv.capacity,
                   ") exceeds the ", room, " tokens the layout holds");
  const size_t blocks = paged ? kv.num_blocks : kv.batch;
  KVCacheViewSpans spans;
  const ElementTraits traits = ElementTraitsOf(kv.type);
  if (traits.values > 1) {
    SIMDATTN_REQUIRE(
        kv.head_dim % traits.values == 0 && ValueDim(kv) % traits.values == 0 &&
            kv.block_stride % traits.values == 0 &&
            kv.head_stride % traits.values == 0 &&
            kv.row_stride % traits.values == 0,
        function, "kv.type ", traits.name, " stores blocks of ", traits.values,
        " elements, but kv.head_dim (", kv.head_dim, "), the value dim (",
        ValueDim(kv), ") or a stride (", kv.block_stride, ", ", kv.head_stride,
        ", ", kv.row_stride, ") is not a multiple of them");
  }
  // A latent view's values take the keys' scales: its value scales are
  // neither read nor checked.
  const bool latent = Latent(kv.keys, kv.values);
  if (traits.side_scaled) {
    const auto usable = [](float scale) {
      return std::isfinite(scale) && scale > 0.0f;
    };
    SIMDATTN_REQUIRE(usable(kv.key_scale), function, "kv.key_scale (",
                     kv.key_scale, ") must be finite and positive");
    SIMDATTN_REQUIRE(latent || usable(kv.value_scale), function,
                     "kv.value_scale (", kv.value_scale,
                     ") must be finite and positive");
  }
  // What the cache's memory spans, as (blocks, kv_heads, block_size, dim),
  // in units of the type (blocks of a block type).
  const size_t unit = traits.values;
  const size_t dims[4] = {blocks, kv.kv_heads, kv.block_size,
                          kv.head_dim / unit};
  const size_t strides[3] = {kv.block_stride / unit, kv.head_stride / unit,
                             kv.row_stride / unit};
  const size_t element_size = traits.bytes;
  spans.keys =
      CheckTensor4(function, "kv.keys", kv.keys, dims, strides, element_size);
  const size_t value_dims[4] = {blocks, kv.kv_heads, kv.block_size,
                                ValueDim(kv) / unit};
  spans.values = CheckTensor4(function, "kv.values", kv.values, value_dims,
                              strides, element_size);
  if (traits.scaled) {
    const size_t scale_dims[4] = {blocks, kv.kv_heads, kv.block_size, 1};
    const size_t scale_strides[3] = {kv.scale_block_stride,
                                     kv.scale_head_stride, 1};
    spans.key_scales = CheckTensor4(function, "kv.key_scales", kv.key_scales,
                                    scale_dims, scale_strides, sizeof(float));
    spans.value_scales =
        latent ? spans.key_scales
               : CheckTensor4(function, "kv.value_scales", kv.value_scales,
                              scale_dims, scale_strides, sizeof(float));
  }
  return spans;
}

size_t CheckKVSequences(const char* function, const KVCacheView& kv,
                        size_t q_tokens, const size_t* query_starts,
                        size_t window, bool dropout) {
  const bool paged = kv.block_table != nullptr;
  const size_t capacity = kv.capacity;
  const size_t batch = kv.batch;
  const size_t blocks = paged ? kv.num_blocks : batch;
  SIMDATTN_REQUIRE(kv.lengths != nullptr || batch == 0, function,
                   "kv.lengths is null");
  size_t longest = 0;
  for (size_t b = 0; b < batch; ++b) {
    const size_t length = kv.lengths[b];
    if (query_starts != nullptr) {
      q_tokens = query_starts[b + 1] - query_starts[b];
    }
    SIMDATTN_REQUIRE(length <= capacity, function, "kv.lengths[", b, "] (",
                     length, ") exceeds the capacity (", capacity, ")");
    // An empty sequence is a normal state (a slot between requests): its
    // queries see no key.
    SIMDATTN_REQUIRE(length >= q_tokens || length == 0, function, "kv.lengths[",
                     b, "] (", length, ") is less than its ", q_tokens,
                     " queries, the sequence's last tokens");
    longest = std::max(longest, length);
    if (!paged) continue;
    // Blocks before the first key any of its queries reads may be released
    // (-1). A sequence without queries is not read.
    const size_t first = FirstKeyRead(length, q_tokens, window, dropout);
    for (size_t block = first / kv.block_size; block * kv.block_size < length;
         ++block) {
      const int32_t entry = kv.block_table[b * kv.blocks_per_sequence + block];
      SIMDATTN_REQUIRE(entry >= 0 && static_cast<size_t>(entry) < blocks,
                       function, "kv.block_table[", b, " * ",
                       kv.blocks_per_sequence, " + ", block, "] (", entry,
                       ") is not a block of the ", blocks, " in the pool",
                       entry < 0 ? " (released: its keys are outside every "
                                   "query's mask.window)"
                                 : "");
    }
  }
  return longest;
}

KVCacheViewSpans CheckKVCacheView(const char* function, const KVCacheView& kv,
                                  size_t q_tokens, const size_t* query_starts,
                                  size_t window, bool dropout) {
  KVCacheViewSpans spans = CheckKVMemory(function, kv);
  spans.longest =
      CheckKVSequences(function, kv, q_tokens, query_starts, window, dropout);
  return spans;
}

}  // namespace internal
}  // namespace simdattn
