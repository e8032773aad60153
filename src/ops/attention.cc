// ScaledDotProductAttention: validation, then one dispatch per call.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hwy/base.h"
#include "simdattn/kernels.h"
#include "simdattn/random.h"
#include "src/common/check.h"
#include "src/common/cpu.h"
#include "src/common/scratch.h"
#include "src/ops/attend.h"
#include "src/ops/decode_pairs.h"
#include "src/ops/kv_pool.h"
#include "src/ops/kv_rows.h"
#include "src/ops/kv_store.h"
#include "src/ops/matmul_bf16.h"
#include "src/ops/policy.h"
#include "src/ops/target_family.h"
#include "src/ops/varlen.h"

namespace simdattn {

using internal::Footprint;
using internal::KVSource;
using internal::ShapeString;

namespace {

using internal::ScratchBuffer;

// Floats of scratch that hold n bf16 elements.
size_t BFloat16Floats(size_t n) { return n / 2 + 1; }

// The bytes of K and V the call reads: batch items' kv heads' rows. A
// latent cache's values are its key rows (kv.values.data == keys').
size_t CacheBytes(const KVSource& kv, size_t batch) {
  const size_t row_bytes =
      ElementBytes(kv.type, kv.keys.cols) +
      (kv.values.data == kv.keys.data ? 0
                                      : ElementBytes(kv.type, kv.values.cols));
  return batch * kv.kv_heads * kv.tokens * row_bytes;
}

// Whether decode's rows come from memory: more K and V than the last-level
// cache holds (a model's layers, each read once a step, evict each other
// then), where the policy paces them (its pace_rows_from_memory: the walk
// asks for every row ahead at its own pace, attention_decode-inl.h's
// kPacedRows). A cache found in the L3 all the same pays for it: on Zen 5,
// one of 1.06 times the L3 (q8_0, grouped, read again at once) ran 8-11%
// slower paced, where read from memory 1.2 times as fast.
bool RowsFromMemory(const KVSource& kv, size_t batch) {
  const internal::Policy& policy = internal::ActivePolicy();
  if (!policy.pace_rows_from_memory) return false;
  return CacheBytes(kv, batch) >
         (policy.from_memory_bytes != 0
              ? policy.from_memory_bytes
              : internal::ThisCpu().last_level_cache_bytes);
}

// Whether decode reads E4M3 rows straight as float32 bits: where the policy
// says the CPU takes denormal operands at full speed.
bool DirectE4M3(const KVSource& kv) {
  return kv.type == KVType::kFp8E4M3 && internal::ActivePolicy().direct_e4m3;
}

// The query rows up to which decode's tasks take bf16 pairs for bf16 or fp8
// products under kBFloat16 (0: none): where the policy says so for the
// type and the kernels serve the type on the target dispatch picks
// (DecodePairsUsable);
// the policy's decode_pair_rows, or cached_decode_pair_rows where K and V
// fit the last-level cache. The choice changes bits, so no speed knob
// (pacing, its threshold) moves it. Under float32 arithmetic the queries
// and weights would need 3 bf16 parts each, which ran slower than the
// float32 route.
size_t DecodePairRows(const KVSource& kv, bool bf16, size_t batch) {
  const internal::Policy& policy = internal::ActivePolicy();
  const bool pairs =
      bf16 && ElementTraitsOf(kv.type).bf16_exact &&
      internal::DecodePairsUsable(kv.type, internal::ActiveTargetBit()) &&
      (kv.type == KVType::kBF16 ? policy.bf16_decode_pairs
                                : policy.fp8_decode_pairs);
  if (!pairs) return 0;
  return CacheBytes(kv, batch) > internal::ThisCpu().last_level_cache_bytes
             ? policy.decode_pair_rows
             : policy.cached_decode_pair_rows;
}

// Float keys or values (tensor memory, `heads` per batch item of `tokens`
// rows) rounded to bf16, dense in `store`.
internal::KVMemory RoundedRows(const internal::KVMemory& m, size_t batch,
                               size_t heads, size_t tokens,
                               const ScratchBuffer& store) {
  auto* out16 = reinterpret_cast<BFloat16*>(store.data());
  internal::RoundToBFloat16(
      ConstTensor4(static_cast<const float*>(m.data), batch, heads, tokens,
                   m.cols, m.block_stride, m.head_stride, m.row_stride),
      out16, nullptr);
  internal::KVMemory rounded;
  rounded.data = out16;
  rounded.row_stride = m.cols;
  rounded.head_stride = tokens * m.cols;
  rounded.block_stride = heads * tokens * m.cols;
  rounded.cols = m.cols;
  return rounded;
}

// The checks and the dispatch both overloads share: q and out against the
// keys' and values' footprints, the mask over (batch, q_heads, q_tokens,
// `capacity`) keys, dropout and the log-sum-exp.
void Attend(const char* kFn, ConstTensor4 q,
            const internal::QueryLayout& layout, KVSource kv, size_t capacity,
            std::initializer_list<std::pair<Footprint, const char*>> inputs,
            Tensor4 out, const AttentionOptions& options,
            const AttentionMask& mask) {
  const size_t expected_out[4] = {q.dims[0], q.dims[1], q.dims[2],
                                  kv.values.cols};
  SIMDATTN_REQUIRE(internal::SameDims(out.dims, expected_out), kFn,
                   "out has shape ", ShapeString(out.dims), ", expected ",
                   ShapeString(expected_out));
  const float dropout = options.dropout;
  // The weights (batch, q_heads, q_tokens, k_tokens) are dropped with
  // Dropout()'s counters.
  internal::CheckDropout(kFn, "dropout", dropout,
                         {"q.dims[0]", "q.dims[1]", "q.dims[2]", "k.dims[2]"},
                         {q.dims[0], q.dims[1], q.dims[2], capacity});
  SIMDATTN_REQUIRE(!options.scale || std::isfinite(*options.scale), kFn,
                   "scale (", options.scale.value_or(0.0f), ") is not finite");
  const bool bf16 = options.compute == ComputeType::kBFloat16;
  const bool int8 = options.compute == ComputeType::kInt8;
  SIMDATTN_REQUIRE(bf16 || int8 || options.compute == ComputeType::kFloat32,
                   kFn, "options.compute (", static_cast<int>(options.compute),
                   ") is not a ComputeType");
  SIMDATTN_REQUIRE(!int8 || ElementTraitsOf(kv.type).int8_scores, kFn,
                   "options.compute is kInt8 but the keys are ",
                   ElementTraitsOf(kv.type).name,
                   ": int8 arithmetic reads a cache of integer codes (int8, "
                   "q8_0, q4_0, iq4_nl)");

  const Footprint rq = internal::CheckTensor4(kFn, "q", q);
  const Footprint ro = internal::CheckTensor4(kFn, "out", out);
  internal::CheckDistinctElements(kFn, "out", out.dims, out.strides);
  SIMDATTN_REQUIRE(!ro.Overlaps(rq), kFn, "out overlaps q");
  for (const auto& [input, name] : inputs) {
    SIMDATTN_REQUIRE(!ro.Overlaps(input), kFn, "out overlaps ", name);
  }
  // Varlen: the mask's arrays have an entry per sequence.
  const size_t scores[4] = {layout.batch, q.dims[1], q.dims[2], capacity};
  internal::CheckAttentionMask(kFn, mask, scores, "k.dims[2]", ro, "out");
  if (options.log_sum_exp != nullptr && !out.empty()) {
    const Footprint rl = internal::ContiguousFootprint(
        kFn, "log_sum_exp", options.log_sum_exp,
        internal::CheckedMul(kFn, "log_sum_exp's size",
                             internal::CheckedMul(kFn, "log_sum_exp's size",
                                                  q.dims[0], q.dims[1]),
                             q.dims[2]),
        sizeof(float));
    bool overlaps = rl.Overlaps(rq) || rl.Overlaps(ro);
    for (const auto& input : inputs) {
      overlaps = overlaps || rl.Overlaps(input.first);
    }
    SIMDATTN_REQUIRE(!overlaps, kFn, "log_sum_exp overlaps q, k, v or out");
    internal::CheckAttentionMask(kFn, mask, scores, "k.dims[2]", rl,
                                 "log_sum_exp");
  }
  if (out.empty()) return;
  // head_dim 0 makes every score 0; 1/sqrt(0) would turn them into NaN.
  const float scale = options.scale.value_or(
      q.dims[3] == 0 ? 1.0f : 1.0f / std::sqrt(static_cast<float>(q.dims[3])));
  // bf16: prefill rounds Q, K and V as it packs them (AMX tiles or float
  // panels). A single query (decode) reads K and V rows in place: Q is
  // rounded here, and float K and V (tensors) into bf16 copies, which the
  // kernel widens exactly; so is a varlen step's Q, whose decodes read the
  // cache in place, and Q over a cache whose rows bf16 holds exactly (bf16,
  // fp8), so that tasks of a few query rows (drafts, a group's heads) read
  // it in place instead of packing it per task. Sizes are those of
  // validated tensors.
  // The dense path's bf16 pairs on AMX, vdpbf16ps or BFDOT.
  const internal::BFloat16DotKernelKind kernel =
      internal::ChosenBFloat16DotKernel();
  const bool pairs =
      bf16 && kernel != internal::BFloat16DotKernelKind::kFallback;
  const bool round_inputs =
      bf16 && (q.dims[2] == 1 || layout.starts != nullptr ||
               ElementTraitsOf(kv.type).bf16_exact);
  const size_t q_size =
      round_inputs ? q.dims[0] * q.dims[1] * q.dims[2] * q.dims[3] : 0;
  const size_t k_size = round_inputs && kv.type == KVType::kF32
                            ? q.dims[0] * kv.kv_heads * kv.tokens * kv.keys.cols
                            : 0;
  const size_t v_size =
      k_size == 0 ? 0 : k_size / kv.keys.cols * kv.values.cols;
  ScratchBuffer q_bits(BFloat16Floats(q_size)), q_rounded(q_size + 1),
      k16(BFloat16Floats(k_size)), v16(BFloat16Floats(v_size));
  if (round_inputs) {
    internal::RoundToBFloat16(q, reinterpret_cast<BFloat16*>(q_bits.data()),
                              q_rounded.data());
    q = ConstTensor4::Dense(q_rounded.data(), q.dims[0], q.dims[1], q.dims[2],
                            q.dims[3]);
  }
  if (k_size != 0) {
    kv.keys = RoundedRows(kv.keys, q.dims[0], kv.kv_heads, kv.tokens, k16);
    kv.values = RoundedRows(kv.values, q.dims[0], kv.kv_heads, kv.tokens, v16);
    kv.type = KVType::kBF16;
  }
  internal::AttentionArithmetic arith;
  arith.round_weights = bf16;
  if (pairs) arith.pair_kernel = kernel;
  arith.inputs_rounded = round_inputs || !bf16;
  arith.integer_scores = int8;
  arith.rows_from_memory = RowsFromMemory(kv, layout.batch);
  arith.direct_e4m3 = DirectE4M3(kv);
  arith.decode_pair_rows = DecodePairRows(kv, bf16, layout.batch);
  internal::AttentionFor(kv.type)(
      q, layout, kv, out, scale, mask, dropout,
      DropoutStreamKey(options.dropout_key.seed, options.dropout_key.offset),
      options.log_sum_exp, arith);
}

// A float tensor's rows as a contiguous KV source's.
internal::KVMemory TensorMemory(ConstTensor4 t) {
  internal::KVMemory m;
  m.data = t.data;
  m.block_stride = t.strides[0];
  m.head_stride = t.strides[1];
  m.row_stride = t.strides[2];
  m.cols = t.dims[3];
  return m;
}

}  // namespace

void ScaledDotProductAttention(ConstTensor4 q, ConstTensor4 k, ConstTensor4 v,
                               Tensor4 out, const AttentionOptions& options) {
  constexpr const char* kFn = "ScaledDotProductAttention";
  SIMDATTN_REQUIRE(k.dims[0] == q.dims[0] && v.dims[0] == q.dims[0], kFn,
                   "batch sizes differ: q ", ShapeString(q.dims), ", k ",
                   ShapeString(k.dims), ", v ", ShapeString(v.dims));
  SIMDATTN_REQUIRE(k.dims[1] == v.dims[1] && k.dims[2] == v.dims[2], kFn, "k ",
                   ShapeString(k.dims), " and v ", ShapeString(v.dims),
                   " differ in heads or tokens");
  SIMDATTN_REQUIRE(k.dims[3] == q.dims[3], kFn, "k's head_dim (", k.dims[3],
                   ") differs from q's (", q.dims[3], ")");
  SIMDATTN_REQUIRE(
      q.dims[1] == 0 || (k.dims[1] != 0 && q.dims[1] % k.dims[1] == 0), kFn,
      "q's heads (", q.dims[1], ") are not a multiple of k's and v's heads (",
      k.dims[1], ")");
  const Footprint rk = internal::CheckTensor4(kFn, "k", k);
  const Footprint rv = internal::CheckTensor4(kFn, "v", v);
  KVSource kv;
  kv.keys = TensorMemory(k);
  kv.values = TensorMemory(v);
  kv.kv_heads = k.dims[1];
  kv.tokens = k.dims[2];
  Attend(kFn, q, internal::QueryLayout::Dense(q), kv, k.dims[2],
         {{rk, "k"}, {rv, "v"}}, out, options, options.mask);
}

namespace {

// Both overloads over a cache: its memory as the source, its lengths as the
// key lengths, each sequence's queries (as `layout` places them, validated)
// its last tokens.
// With `checked`, the sequences were checked by a plan (the cache's memory
// is checked here).
void AttendCache(const char* kFn, ConstTensor4 q,
                 const internal::QueryLayout& layout, const KVCacheView& kv,
                 Tensor4 out, const AttentionOptions& options,
                 const internal::CheckedSequences* checked = nullptr) {
  const size_t batch = layout.batch;
  SIMDATTN_REQUIRE(IsElementType(kv.type), kFn, "kv.type (",
                   static_cast<int>(kv.type), ") is not a KVType");
  SIMDATTN_REQUIRE(
      options.compute != ComputeType::kBFloat16 ||
          ElementTraitsOf(kv.type).bf16_exact,
      kFn, "options.compute is kBFloat16 but the cache's type is ",
      static_cast<int>(kv.type),
      ", not kBF16, kFp8E4M3 or kFp8E5M2: bf16 arithmetic reads a cache "
      "whose values bf16 holds");
  SIMDATTN_REQUIRE(kv.head_dim == q.dims[3], kFn, "the cache's head_dim (",
                   kv.head_dim, ") differs from q's: q has shape ",
                   ShapeString(q.dims));
  SIMDATTN_REQUIRE(
      q.dims[1] == 0 || (kv.kv_heads != 0 && q.dims[1] % kv.kv_heads == 0), kFn,
      "q's heads (", q.dims[1],
      ") are not a multiple of the cache's kv_heads (", kv.kv_heads, ")");
  const AttentionMask& user_mask = options.mask;
  SIMDATTN_REQUIRE(user_mask.causal_offset == 0 &&
                       user_mask.causal_offsets == nullptr &&
                       user_mask.key_lengths == nullptr,
                   kFn,
                   "mask.causal_offset(s) and mask.key_lengths must be unset: "
                   "the cache's lengths give them");
  internal::KVCacheViewSpans spans;
  if (checked == nullptr) {
    spans =
        internal::CheckKVCacheView(kFn, kv, layout.rows, layout.starts,
                                   user_mask.window, options.dropout > 0.0f);
  } else {
    SIMDATTN_REQUIRE(
        checked->max_window == 0 ||
            (user_mask.window != 0 && user_mask.window <= checked->max_window),
        kFn, "mask.window (", user_mask.window, ") must lie in [1, ",
        checked->max_window,
        "]: the plan checked the blocks such windows read (its max_window)");
    spans = internal::CheckKVMemory(kFn, kv);
    spans.longest = checked->longest;
  }
  const bool paged = kv.block_table != nullptr;
  KVSource source;
  source.type = kv.type;
  source.kv_heads = kv.kv_heads;
  source.tokens = spans.longest;
  if (paged) {
    source.block_table = kv.block_table;
    source.blocks_per_sequence = kv.blocks_per_sequence;
    source.block_shift = static_cast<unsigned>(
        hwy::Num0BitsBelowLS1Bit_Nonzero64(kv.block_size));
  }
  const bool latent = internal::Latent(kv.keys, kv.values);
  for (internal::KVMemory* m : {&source.keys, &source.values}) {
    const bool keys = m == &source.keys;
    const bool key_scales = keys || latent;
    m->data = keys ? kv.keys : kv.values;
    m->block_stride = kv.block_stride;
    m->head_stride = kv.head_stride;
    m->row_stride = kv.row_stride;
    if (ElementTraitsOf(kv.type).scaled) {
      m->scales = key_scales ? kv.key_scales : kv.value_scales;
      m->scale_block_stride = kv.scale_block_stride;
      m->scale_head_stride = kv.scale_head_stride;
    }
    m->cols = keys ? kv.head_dim : internal::ValueDim(kv);
    if (ElementTraitsOf(kv.type).side_scaled) {
      m->side_scale = key_scales ? kv.key_scale : kv.value_scale;
    }
  }
  AttentionMask mask = user_mask;
  mask.key_lengths = kv.lengths;
  // From the scratch pool (untyped memory, used as size_t only): a decode
  // step allocates nothing.
  std::optional<internal::ScratchBuffer> offsets_buffer;
  const bool positions = mask.causal || mask.window != 0 ||
                         mask.alibi_slopes != nullptr ||
                         mask.tree_offsets != nullptr;
  if (positions && checked != nullptr) {
    mask.causal_offsets = checked->offsets;
  } else if (positions) {
    offsets_buffer.emplace(hwy::DivCeil(batch * sizeof(size_t), sizeof(float)));
    size_t* offsets = reinterpret_cast<size_t*>(offsets_buffer->data());
    for (size_t b = 0; b < batch; ++b) {
      // An empty sequence's rows: offset 0, and no key to see.
      offsets[b] = kv.lengths[b] - std::min(kv.lengths[b], layout.Tokens(b));
    }
    mask.causal_offsets = offsets;
  }
  Attend(kFn, q, layout, source, kv.capacity,
         {{spans.keys, "kv.keys"},
          {spans.values, "kv.values"},
          {spans.key_scales, "kv.key_scales"},
          {spans.value_scales, "kv.value_scales"}},
         out, options, mask);
}

}  // namespace

void VarlenAttention(ConstTensor4 q, const VarlenStep& step,
                     const KVPages& pages, Tensor4 out,
                     const AttentionOptions& options) {
  VarlenAttention(q, step.query_starts,
                  internal::StepView("VarlenAttention", pages, step), out,
                  internal::WithStepTrees("VarlenAttention", step, options));
}

namespace internal {

AttentionOptions WithStepTrees(const char* kFn, const VarlenStep& step,
                               const AttentionOptions& options) {
  AttentionOptions o = options;
  if (step.tree_bits != nullptr || step.tree_offsets != nullptr) {
    SIMDATTN_REQUIRE(
        options.mask.tree_bits == nullptr &&
            options.mask.tree_offsets == nullptr,
        kFn, "step and options.mask both give draft trees: give them once");
    o.mask.tree_bits = step.tree_bits;
    o.mask.tree_offsets = step.tree_offsets;
  }
  return o;
}

void AttendVarlen(const char* kFn, ConstTensor4 q, const size_t* query_starts,
                  const KVCacheView& kv, Tensor4 out,
                  const AttentionOptions& options,
                  const CheckedSequences* checked) {
  const size_t num_tokens = q.dims[2];
  SIMDATTN_REQUIRE(q.dims[0] == 1, kFn, "q has shape ", ShapeString(q.dims),
                   ": expected (1, q_heads, num_tokens, head_dim), the "
                   "packed queries' FromTokenMajor view");
  if (checked == nullptr) {
    CheckQueryStarts(kFn, query_starts, kv.batch, num_tokens);
  } else {
    SIMDATTN_REQUIRE(query_starts[kv.batch] == num_tokens, kFn, "q has ",
                     num_tokens, " tokens but the plan's step ",
                     query_starts[kv.batch], ": q has shape ",
                     ShapeString(q.dims));
  }
  const AttentionMask& mask = options.mask;
  SIMDATTN_REQUIRE(
      mask.boolean.data == nullptr && mask.additive.data == nullptr, kFn,
      "mask.boolean and mask.additive must be unset: a step's "
      "sequences have no common (q_tokens, k_tokens) shape");
  SIMDATTN_REQUIRE(options.dropout == 0.0f, kFn, "options.dropout (",
                   options.dropout,
                   ") must be 0: VarlenAttention is for "
                   "inference");
  QueryLayout layout;
  layout.starts = query_starts;
  layout.rows = num_tokens;
  layout.heads = q.dims[1];
  layout.batch = kv.batch;
  AttendCache(kFn, q, layout, kv, out, options, checked);
}

}  // namespace internal

void ScaledDotProductAttention(ConstTensor4 q, const KVCacheView& kv,
                               Tensor4 out, const AttentionOptions& options) {
  constexpr const char* kFn = "ScaledDotProductAttention";
  SIMDATTN_REQUIRE(kv.batch == q.dims[0], kFn, "the cache holds batch ",
                   kv.batch, " but q has shape ", ShapeString(q.dims));
  AttendCache(kFn, q, internal::QueryLayout::Dense(q), kv, out, options);
}

void VarlenAttention(ConstTensor4 q, const size_t* query_starts,
                     const KVCacheView& kv, Tensor4 out,
                     const AttentionOptions& options) {
  internal::AttendVarlen("VarlenAttention", q, query_starts, kv, out, options,
                         nullptr);
}

}  // namespace simdattn
