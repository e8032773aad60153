// Per-target fused attention, softmax(scale * Q K^T + mask) V, included once
// per SIMD target by each of attend_*.cc (attend.h).
//
// Schedule (FlashAttention-2 on a CPU): a task owns up to kTaskRows query
// rows of one batch item, the query heads of one key/value group stacked
// token-major (QueryRows) over a run of tokens, and walks the keys in tiles
// of kKeyBlock, packing each tile of K (transposed) and V into panels once,
// as MatMul packs op(B). Then per block of kQueryBlock query rows that sees
// the tile:
//   1. S = scale * Q_block K_tile^T with the matmul micro-kernel;
//   2. per row: masks applied in registers (columns past the row's causal or
//      key-length limit, boolean, additive), the running max updated, the
//      accumulator's correction exp(old_max - new_max) and P = exp(S - max)
//      computed, their sum added to the running sum, then dropout on P with
//      the bits Dropout() draws for the same (b, h, i, j);
//   3. acc = corr * acc + P V_tile, the micro-kernel again.
// Tiles past a block's last row's limit are never computed, nor, within a
// tile, vectors of columns past a micro-kernel tile's last row's limit, so
// causal attention does half the work to within a few percent. The output
// row is acc / sum (zeros when every key is masked, NaN when a score was
// NaN).
//
// Decode (few query rows, long caches): when the tasks are fewer than
// kMinTasks (a query block each by then), the keys are also split into
// chunks that run as separate tasks, and their (max, sum, acc) partials are
// merged. The split depends only on the shapes, so results do not depend on
// the number of threads. Tasks run heaviest first on a dynamic schedule.
//
// The parts, each including the one before: attention_tile-inl.h (the
// problem, scratch, masks and softmax of a tile), attention_decode-inl.h
// (few rows over long caches), attention_dense-inl.h (packed tiles), and
// this file, the schedule: AttendAll sizes and orders the tasks, runs each,
// and merges split keys' partials.

#if defined(SIMDATTN_SRC_OPS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_ATTENTION_INL_H_
#undef SIMDATTN_SRC_OPS_ATTENTION_INL_H_
#else
#define SIMDATTN_SRC_OPS_ATTENTION_INL_H_
#endif

#include "src/ops/attention_dense-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace attention_detail {

// How a call's query rows become tasks: plain arithmetic over the shapes,
// never the thread count, so results do not depend on it.
struct TaskPlan {
  size_t task_heads;   // Query heads of one group per task.
  size_t head_blocks;  // Task heads per batch item: heads / task_heads.
  size_t task_tokens;  // Tokens per task, at most.
  size_t tasks;        // Over the batch.
  size_t splits;       // Key chunks per task (1: the keys are not split),
  size_t chunk;        // of this many keys, a multiple of kKeyBlock.
  size_t block_rows;   // Rows of a task, at most,
  size_t fewest_rows;  // and at least.

  size_t Tasks(size_t tokens) const {
    return head_blocks * hwy::DivCeil(tokens, task_tokens);
  }
};

// A task: task_heads query heads of one group (the largest divisor of the
// group that fits) times up to task_tokens tokens. Too few tasks for the
// cores: a query block per task (each tile of K and V packed for fewer rows,
// a few % more work) before splitting the keys, whose partials take memory
// in proportion to the rows: a split reads at least as many bytes of keys
// (key_bytes per key; head_dim 0 counts as a byte) as its partials take,
// written and merged. MLA's 128 heads over one latent row per key moved
// more bytes of partials than of cache in splits of one tile; two tiles made
// its decode (1x128x8192x576_kv1_mla512_kvbf16_cold) 1.08x (bf16 arithmetic)
// and 1.03x (float32) as fast at 1 thread on Zen 5, 1.15x and 1.03x at 2.
inline TaskPlan PlanTasks(const internal::QueryLayout& layout, size_t heads,
                          size_t group, size_t k_tokens, size_t key_bytes,
                          size_t value_dim) {
  TaskPlan plan;
  plan.task_heads = std::min(group, kTaskRows);
  while (group % plan.task_heads != 0) --plan.task_heads;
  plan.head_blocks = heads / plan.task_heads;
  plan.task_tokens = kTaskRows / plan.task_heads;
  size_t most_tokens = 0, fewest_tokens = 0;
  const auto count_tasks = [&] {
    size_t tasks = 0;
    fewest_tokens = plan.task_tokens;
    for (size_t b = 0; b < layout.batch; ++b) {
      const size_t tokens = layout.Tokens(b);
      tasks += plan.Tasks(tokens);
      most_tokens = std::max(most_tokens, tokens);
      // A run's last task holds what is left of its tokens.
      const size_t left = tokens % plan.task_tokens;
      if (tokens != 0) {
        fewest_tokens =
            std::min(fewest_tokens, left == 0 ? plan.task_tokens : left);
      }
    }
    return tasks;
  };
  plan.tasks = count_tasks();
  if (plan.tasks < kMinTasks) {
    plan.task_tokens = std::max<size_t>(1, kQueryBlock / plan.task_heads);
    plan.tasks = count_tasks();
  }
  const size_t task_rows =
      plan.task_heads * std::min(plan.task_tokens, most_tokens);
  const size_t partial_bytes = 2 * task_rows * value_dim * sizeof(float);
  const size_t min_split_keys = hwy::RoundUpTo(
      std::max(kMinSplitKeys,
               hwy::DivCeil(partial_bytes, std::max<size_t>(key_bytes, 1))),
      kKeyBlock);
  size_t splits = 1;
  if (plan.tasks < kMinTasks && k_tokens >= 2 * min_split_keys) {
    splits = std::min(hwy::DivCeil(kMinTasks, plan.tasks),
                      k_tokens / min_split_keys);
  }
  plan.chunk = std::max(
      kKeyBlock,
      hwy::DivCeil(hwy::DivCeil(k_tokens, splits), kKeyBlock) * kKeyBlock);
  plan.splits = std::max<size_t>(1, hwy::DivCeil(k_tokens, plan.chunk));
  plan.block_rows = task_rows;
  plan.fewest_rows = plan.task_heads * std::min(fewest_tokens, most_tokens);
  return plan;
}

// Heavy tasks first: items with more query rows first (ties, and every
// dense call, in batch order), and within an item, the later row blocks,
// which see more keys under a causal mask. Task index i is split i % splits
// of task i / splits.
class TaskOrder {
 public:
  // The order and each item's first task, from the scratch pool as size_t
  // (std::sort with the tie broken by index: stable_sort would allocate).
  TaskOrder(const internal::QueryLayout& layout, const TaskPlan& plan)
      : layout_(layout),
        plan_(plan),
        buffer_(hwy::DivCeil((2 * layout.batch + 1) * sizeof(size_t),
                             sizeof(float))),
        order_(reinterpret_cast<size_t*>(buffer_.data())),
        first_task_(order_ + layout.batch) {
    const size_t batch = layout.batch;
    for (size_t b = 0; b < batch; ++b) order_[b] = b;
    if (layout.starts != nullptr) {
      std::sort(order_, order_ + batch, [&](size_t a, size_t b) {
        const size_t ta = layout.Tokens(a), tb = layout.Tokens(b);
        return ta != tb ? ta > tb : a < b;
      });
    }
    first_task_[0] = 0;
    for (size_t p = 0; p < batch; ++p) {
      first_task_[p + 1] =
          first_task_[p] + plan.Tasks(layout.Tokens(order_[p]));
    }
  }

  QueryRows Locate(size_t index, size_t* split) const {
    *split = index % plan_.splits;
    const size_t task = index / plan_.splits;
    const size_t p = static_cast<size_t>(
        std::upper_bound(first_task_, first_task_ + layout_.batch + 1, task) -
        first_task_ - 1);
    const size_t b = order_[p], tokens = layout_.Tokens(b);
    const size_t row_blocks = hwy::DivCeil(tokens, plan_.task_tokens);
    const size_t local = task - first_task_[p];
    const size_t i0 = (row_blocks - 1 - local % row_blocks) * plan_.task_tokens;
    return QueryRows{
        b, local / row_blocks * plan_.task_heads, plan_.task_heads, i0,
        plan_.task_heads * std::min(plan_.task_tokens, tokens - i0)};
  }

 private:
  const internal::QueryLayout& layout_;
  const TaskPlan& plan_;
  internal::ScratchBuffer buffer_;
  size_t* order_;
  size_t* first_task_;
};

// Where a call's results go: output rows, log-sum-exps, and the factor
// FinishRow applies (an fp8 cache's value scale times kLoadScale).
struct Outputs {
  const internal::QueryLayout& layout;
  Tensor4 out;
  float* log_sum_exp;
  size_t heads, value_dim;
  float value_scale;

  float* Row(const QueryRows& t, size_t r) const {
    return layout.Rows(out, t.b, t.Head(r)).Row(t.Token(r));
  }
  // Row r's output from its accumulator and softmax state.
  void Finish(const QueryRows& t, size_t r, const float* acc, float max,
              float sum, bool nan) const {
    FinishRow(acc, sum, nan, value_scale, value_dim, Row(t, r));
    if (log_sum_exp != nullptr) {
      log_sum_exp[layout.LogSumExpIndex(t.b, t.Head(r), t.Token(r))] =
          LogSumExp(max, sum, nan);
    }
  }
  // Every weight dropped: the context is 0 (and the log-sum-exp is that of
  // the weights before dropout).
  void Zero() const {
    for (size_t b = 0; b < layout.batch; ++b) {
      for (size_t h = 0; h < heads; ++h) {
        const Matrix o = layout.Rows(out, b, h);
        for (size_t i = 0; i < o.rows; ++i) {
          std::fill(o.Row(i), o.Row(i) + value_dim, 0.0f);
        }
      }
    }
  }
};

// The call's constants. An fp8 cache's key scale joins the scores' (its
// value scale joins the outputs), as does what LoadB leaves out (kLoadScale).
template <typename T>
Problem MakeProblem(ConstTensor4 q, const internal::QueryLayout& layout,
                    const internal::KVSource& kv, Tensor4 out, float scale,
                    const AttentionMask& mask, float dropout,
                    PhiloxKey dropout_key,
                    const internal::AttentionArithmetic& arith) {
  const bool drop_all = dropout >= 1.0f;
  Problem pr{q,
             layout,
             &kv,
             kv.values.cols,
             out,
             scale * kv.keys.side_scale * Codec<T>::kLoadScale,
             internal::MaskModel(mask, kv.tokens),
             mask_detail::Softcap(mask.softcap),
             dropout > 0.0f && !drop_all,
             {},
             q.dims[1] / kv.kv_heads};
  if (pr.dropout) {
    pr.dropout_params = dropout_detail::MakeParams(dropout, dropout_key);
  }
  pr.round_weights = arith.round_weights;
  // The caller checks the target.
  HWY_DASSERT(kPairTarget ||
              arith.pair_kernel == internal::BFloat16DotKernelKind::kFallback);
  if (kPairTarget) pr.pair_kernel = arith.pair_kernel;
  pr.round_inputs = arith.round_weights && !arith.inputs_rounded;
  pr.integer_scores = arith.integer_scores;
  pr.rows_from_memory = arith.rows_from_memory;
  pr.direct_e4m3 = arith.direct_e4m3;
  pr.decode_pair_rows = kPairTarget ? arith.decode_pair_rows : 0;
  return pr;
}

// The (max, sum, acc) partials of every (task, split), block_rows rows
// each, from the scratch pool (none without splits).
struct Partials {
  Partials(const TaskPlan& plan, size_t value_dim)
      : rows(plan.splits > 1 ? plan.tasks * plan.splits * plan.block_rows : 0),
        buffer(rows * (value_dim + 3) + 1),
        acc(buffer.data()),
        states{acc + rows * value_dim, acc + rows * (value_dim + 1),
               acc + rows * (value_dim + 2)} {}
  RowStates At(size_t row) const {
    return {states.max + row, states.sum + row, states.nan + row};
  }

  size_t rows;
  internal::ScratchBuffer buffer;
  float* acc;
  RowStates states;
};

// Merges the splits: weights exp(max_s - max) bring every partial to the
// common max. A few rows per task: not worth spawning for.
inline void MergeSplits(const TaskPlan& plan, const TaskOrder& order,
                        const Partials& partials, const Outputs& outputs) {
  const size_t splits = plan.splits, value_dim = outputs.value_dim;
  const RowStates& st = partials.states;
  for (size_t task = 0; task < plan.tasks; ++task) {
    size_t split;
    const QueryRows t = order.Locate(task * splits, &split);
    for (size_t r = 0; r < t.rows; ++r) {
      const auto row_of = [&](size_t s) {
        return (task * splits + s) * plan.block_rows + r;
      };
      float row_max = -kInf;
      bool nan = false;
      for (size_t s = 0; s < splits; ++s) {
        row_max = std::max(row_max, st.max[row_of(s)]);
        nan = nan || st.nan[row_of(s)] != 0;
      }
      float* o = outputs.Row(t, r);
      std::fill(o, o + value_dim, 0.0f);
      float sum = 0.0f;
      if (row_max != -kInf) {
        for (size_t s = 0; s < splits; ++s) {
          const float w = std::exp(st.max[row_of(s)] - row_max);
          if (w == 0.0f) continue;
          sum += w * st.sum[row_of(s)];
          const float* a = partials.acc + row_of(s) * value_dim;
          for (size_t c = 0; c < value_dim; ++c) o[c] += w * a[c];
        }
      }
      outputs.Finish(t, r, o, row_max, sum, nan);
    }
  }
}

// One worker's scratch past its workspace: the row states of its task; bf16
// pairs; the query rows, gathered when they come from several heads or
// must be rounded for the float32 kernel; the accumulator of several heads.
struct TaskScratch {
  static size_t Floats(const Problem& pr, const TaskPlan& plan, bool round_q,
                       size_t workspace_floats) {
    return workspace_floats + 3 * kTaskRows + PairFloats(pr) +
           GatherFloats(pr, plan, round_q) + AccFloats(pr, plan);
  }
  static size_t PairFloats(const Problem& pr) {
    return pr.pairs() ? PairWorkspace::Floats(pr.q.dims[3], pr.value_dim) : 0;
  }
  static size_t GatherFloats(const Problem& pr, const TaskPlan& plan,
                             bool round_q) {
    return plan.task_heads > 1 || round_q ? kTaskRows * pr.q.dims[3] : 0;
  }
  static size_t AccFloats(const Problem& pr, const TaskPlan& plan) {
    return plan.task_heads > 1 && plan.splits == 1 ? kTaskRows * pr.value_dim
                                                   : 0;
  }

  TaskScratch(float* p, const Problem& pr, const TaskPlan& plan, bool round_q)
      : states{p, p + kTaskRows, p + 2 * kTaskRows},
        pairs(p + 3 * kTaskRows),
        gathered(GatherFloats(pr, plan, round_q) != 0 ? pairs + PairFloats(pr)
                                                      : nullptr),
        acc(pairs + PairFloats(pr) + GatherFloats(pr, plan, round_q)) {}

  RowStates states;
  float* pairs;
  float* gathered;
  float* acc;
};

// What this call runs, for LastAttentionPlan (plan_record.h).
template <typename T>
void RecordPlan(const Problem& pr, const TaskPlan& plan, KVType type) {
  internal::AttentionPlanRecord& record = internal::ThisThreadPlan();
  record.target = hwy::TargetName(HWY_TARGET);
  record.cache = ElementTraitsOf(type).name;
  record.arithmetic = pr.integer_scores  ? "int8"
                      : pr.round_weights ? "bf16"
                                         : "float32";
  record.few_rows = matmul_detail::kSkinnyRows;
  record.in_place = !pr.round_inputs;
  // The backend of the largest few-row task.
  record.decode_backend = DecodeBackendName<T>(
      pr, std::min<size_t>(plan.block_rows, matmul_detail::kSkinnyRows));
  record.tile_products =
      !pr.pairs() ? (pr.round_inputs ? "float32 products of bf16-rounded values"
                                     : "float32 products")
      : pr.pair_kernel == internal::BFloat16DotKernelKind::kAmx
          ? "bf16 pairs on AMX tiles"
      : pr.pair_kernel == internal::BFloat16DotKernelKind::kBfdot
          ? "bf16 pairs (BFDOT)"
          : "bf16 pairs (vdpbf16ps)";
  record.paced = kPacedRows<T> && pr.rows_from_memory;
  record.task_heads = plan.task_heads;
  record.task_tokens = plan.task_tokens;
  record.tasks = plan.tasks;
  record.splits = plan.splits;
  record.chunk = plan.chunk;
  record.fewest_rows = plan.fewest_rows;
  record.block_rows = plan.block_rows;
}

// Attention over keys and values of element type T, queries and outputs
// where `layout` puts them: the tasks of PlanTasks, in TaskOrder, each run
// by the backend chosen once (FloatTiles or PairTiles), then the splits
// merged.
template <typename T>
void AttendAll(ConstTensor4 q, const internal::QueryLayout& layout,
               const internal::KVSource& kv, Tensor4 out, float scale,
               const AttentionMask& mask, float dropout, PhiloxKey dropout_key,
               float* log_sum_exp, const internal::AttentionArithmetic& arith) {
  const size_t value_dim = kv.values.cols, head_dim = q.dims[3];
  const Outputs outputs{
      layout,    out,       log_sum_exp,
      q.dims[1], value_dim, kv.values.side_scale * Codec<T>::kLoadScale};
  const bool drop_all = dropout >= 1.0f;
  if (drop_all && log_sum_exp == nullptr) return outputs.Zero();
  const Problem pr = MakeProblem<T>(q, layout, kv, out, scale, mask, dropout,
                                    dropout_key, arith);
  const size_t key_bytes =
      hwy::DivCeil(kv.keys.cols, internal::kBlockValues<T>) * sizeof(T);
  const TaskPlan plan =
      PlanTasks(layout, q.dims[1], pr.group, kv.tokens, key_bytes, value_dim);
  RecordPlan<T>(pr, plan, kv.type);
  const TaskOrder order(layout, plan);
  const Partials partials(plan, value_dim);
  const hn::ScalableTag<float> d;
  const size_t nr = matmul_detail::kVectors * hn::Lanes(d);
  const size_t workspace_floats = Workspace::Floats(nr, head_dim, value_dim);
  const bool round_q = pr.round_inputs && !pr.pairs();
  const size_t count = plan.tasks * plan.splits;
  internal::ParallelForDynamic(0, count, [&](const auto& next) {
    internal::ScratchBuffer buffer(
        TaskScratch::Floats(pr, plan, round_q, workspace_floats));
    Workspace ws(buffer.data(), nr, head_dim, value_dim);
    const TaskScratch own(buffer.data() + workspace_floats, pr, plan, round_q);
    const auto run_tasks = [&](const auto& tiles) {
      for (size_t index; (index = next()) != count;) {
        size_t split;
        const QueryRows t = order.Locate(index, &split);
        const ConstMatrix queries = TaskQueries(pr, t, round_q, own.gathered);
        if (plan.splits > 1) {
          const size_t row0 = index * plan.block_rows;
          AttendBlock<T>(pr, t, queries, split * plan.chunk,
                         std::min(kv.tokens, (split + 1) * plan.chunk),
                         partials.acc + row0 * value_dim, value_dim,
                         partials.At(row0), ws, tiles);
          continue;
        }
        // One head: the output rows are one strided matrix.
        const Matrix o = layout.Rows(out, t.b, t.h0);
        float* acc = t.heads == 1 ? o.Row(t.i0) : own.acc;
        const size_t acc_stride = t.heads == 1 ? o.stride : value_dim;
        AttendBlock<T>(pr, t, queries, 0, kv.tokens, acc, acc_stride,
                       own.states, ws, tiles);
        for (size_t r = 0; r < t.rows; ++r) {
          outputs.Finish(t, r, acc + r * acc_stride, own.states.max[r],
                         own.states.sum[r], own.states.nan[r] != 0);
        }
      }
    };
    if constexpr (kPairTarget) {
      if (pr.pairs()) {
        const PairWorkspace pair_ws(pr.pair_kernel, own.pairs, head_dim,
                                    value_dim);
        // Per worker: AMX's tiles are per thread.
        std::optional<internal::AmxScope> amx;
        if (pr.pair_kernel == internal::BFloat16DotKernelKind::kAmx) {
          amx.emplace();
        }
        return run_tasks(PairTiles{pair_ws});
      }
    }
    run_tasks(FloatTiles{pr.round_inputs});
  });
  if (plan.splits > 1) MergeSplits(plan, order, partials, outputs);
  if (drop_all) outputs.Zero();
}

}  // namespace attention_detail

// Same-target entry point for caches of the element types Ts (attend.h: a
// file compiles a group); arguments were validated by the caller (shapes
// consistent, out disjoint from the inputs, 0 <= dropout <= 1, the cache's
// rows and table entries in bounds, kv.type one of Ts).
template <typename... Ts>
void AttentionOf(ConstTensor4 q, const internal::QueryLayout& layout,
                 const internal::KVSource& kv, Tensor4 out, float scale,
                 const AttentionMask& mask, float dropout,
                 PhiloxKey dropout_key, float* log_sum_exp,
                 const internal::AttentionArithmetic& arith) {
  internal::VisitElementType(kv.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr ((std::is_same_v<T, Ts> || ...)) {
      attention_detail::AttendAll<T>(q, layout, kv, out, scale, mask, dropout,
                                     dropout_key, log_sum_exp, arith);
    } else {
      // attend.h routes each type to its group's file: a bug there, not
      // bad input, and no output may be left unwritten silently.
      HWY_ABORT("AttentionOf: cache element type %d outside this group",
                static_cast<int>(kv.type));
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_ATTENTION_INL_H_
