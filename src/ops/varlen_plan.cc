// VarlenPlan: a serving step checked once, its layers' calls checking their
// own tensors and pages.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "simdattn/kernels.h"
#include "src/common/check.h"
#include "src/ops/kv_pool.h"
#include "src/ops/varlen.h"

namespace simdattn {

constexpr size_t kNone = ~size_t{0};

struct VarlenPlan::Impl {
  VarlenStep step;
  KVPages shape;  // The pools' shape; no memory.
  size_t num_tokens = 0;
  std::vector<size_t> offsets;    // Per sequence: length less its queries.
  std::vector<size_t> positions;  // Per token, where the step gives none.
  internal::CheckedSequences checked;
  size_t short_sequence = kNone;  // The first with fewer tokens than queries.

  size_t no_tokens[1] = {0};  // A default plan's query_starts.

  const size_t* Positions() const {
    return step.positions != nullptr ? step.positions : positions.data();
  }
};

namespace {

// Throws, naming `function`, unless pages have the plan's shape.
void CheckShape(const char* function, const KVPages& shape,
                const KVPages& pages) {
  const auto value_dim = [](const KVPages& p) {
    return p.value_dim == 0 ? p.head_dim : p.value_dim;
  };
  SIMDATTN_REQUIRE(
      pages.type == shape.type && pages.kv_heads == shape.kv_heads &&
          pages.head_dim == shape.head_dim &&
          value_dim(pages) == value_dim(shape) &&
          pages.block_size == shape.block_size &&
          pages.num_blocks == shape.num_blocks,
      function, "pages (type ", static_cast<int>(pages.type), ", kv_heads ",
      pages.kv_heads, ", head_dim ", pages.head_dim, ", value_dim ",
      value_dim(pages), ", block_size ", pages.block_size, ", num_blocks ",
      pages.num_blocks, ") differ from the planned shape (type ",
      static_cast<int>(shape.type), ", kv_heads ", shape.kv_heads,
      ", head_dim ", shape.head_dim, ", value_dim ", value_dim(shape),
      ", block_size ", shape.block_size, ", num_blocks ", shape.num_blocks,
      ")");
}

}  // namespace

VarlenPlan::VarlenPlan() {
  auto impl = std::make_shared<Impl>();
  impl->step.query_starts = impl->no_tokens;
  impl_ = std::move(impl);
}

VarlenPlan::VarlenPlan(const VarlenStep& step, const KVPages& shape,
                       size_t max_window) {
  constexpr const char* kFn = "VarlenPlan";
  auto impl = std::make_shared<Impl>();
  impl->step = step;
  internal::CheckPoolShape(kFn, shape.type, shape.head_dim, shape.value_dim,
                           shape.block_size);
  KVPages& planned = impl->shape;
  planned.type = shape.type;
  planned.kv_heads = shape.kv_heads;
  planned.head_dim = shape.head_dim;
  planned.value_dim = shape.value_dim;
  planned.block_size = shape.block_size;
  planned.num_blocks = shape.num_blocks;

  const size_t num_seqs = step.num_seqs;
  SIMDATTN_REQUIRE(step.query_starts != nullptr, kFn,
                   "step.query_starts is null");
  const size_t num_tokens = step.query_starts[num_seqs];
  internal::CheckQueryStarts(kFn, step.query_starts, num_seqs, num_tokens);
  impl->num_tokens = num_tokens;
  const KVCacheView view = internal::StepView(kFn, planned, step);
  impl->checked.max_window = max_window;
  impl->checked.longest = internal::CheckKVSequences(
      kFn, view, 0, step.query_starts, max_window, /*dropout=*/false);
  impl->offsets.resize(num_seqs);
  for (size_t b = 0; b < num_seqs; ++b) {
    const size_t length = step.seq_lens[b];
    const size_t q_len = step.query_starts[b + 1] - step.query_starts[b];
    impl->offsets[b] = length - std::min(length, q_len);
  }
  impl->checked.offsets = impl->offsets.data();
  if (step.slot_mapping != nullptr) {
    internal::CheckSlots(kFn, "step.slot_mapping", planned, step.slot_mapping,
                         num_tokens, /*skip=*/true, /*distinct=*/true);
  }
  // Rotated writes need each sequence to hold its new tokens; attention
  // takes an empty sequence with queries (they see no key).
  for (size_t b = 0; b < num_seqs && impl->short_sequence == kNone; ++b) {
    if (step.seq_lens[b] < step.query_starts[b + 1] - step.query_starts[b]) {
      impl->short_sequence = b;
    }
  }
  if (step.positions == nullptr && impl->short_sequence == kNone) {
    impl->positions.resize(num_tokens);
    internal::TokenPositions(kFn, step, num_tokens, impl->positions.data());
  }
  impl_ = std::move(impl);
}

void VarlenPlan::Attention(ConstTensor4 q, const KVPages& pages, Tensor4 out,
                           const AttentionOptions& options) const {
  constexpr const char* kFn = "VarlenPlan::Attention";
  const Impl& plan = *impl_;
  CheckShape(kFn, plan.shape, pages);
  const VarlenStep& step = plan.step;
  internal::AttendVarlen(
      kFn, q, step.query_starts, internal::StepView(kFn, pages, step), out,
      internal::WithStepTrees(kFn, step, options), &plan.checked);
}

void VarlenPlan::WriteKVSlots(ConstTensor4 keys, ConstTensor4 values,
                              const KVPages& pages,
                              const RopeOptions* rope) const {
  constexpr const char* kFn = "VarlenPlan::WriteKVSlots";
  const Impl& plan = *impl_;
  CheckShape(kFn, plan.shape, pages);
  SIMDATTN_REQUIRE(plan.step.slot_mapping != nullptr || plan.num_tokens == 0,
                   kFn, "the plan's step has no slot_mapping");
  SIMDATTN_REQUIRE(keys.dims[2] == plan.num_tokens, kFn, "keys has ",
                   keys.dims[2], " tokens but the plan's step ",
                   plan.num_tokens, ": keys has shape ",
                   internal::ShapeString(keys.dims));
  if (rope != nullptr && plan.short_sequence != kNone) {
    const size_t b = plan.short_sequence;
    SIMDATTN_REQUIRE(false, kFn, "step.seq_lens[", b, "] (",
                     plan.step.seq_lens[b], ") is less than its ",
                     plan.step.query_starts[b + 1] - plan.step.query_starts[b],
                     " new tokens");
  }
  internal::WriteSlots(keys, values, plan.step.slot_mapping, pages, rope,
                       rope != nullptr ? plan.Positions() : nullptr,
                       /*slots_checked=*/true);
}

const VarlenStep& VarlenPlan::step() const { return impl_->step; }
size_t VarlenPlan::num_tokens() const { return impl_->num_tokens; }

}  // namespace simdattn
