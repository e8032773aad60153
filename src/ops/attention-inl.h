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

// Attention over keys and values of element type T, queries and outputs
// where `layout` puts them.
template <typename T>
void AttendAll(ConstTensor4 q, const internal::QueryLayout& layout,
               const internal::KVSource& kv, Tensor4 out, float scale,
               const AttentionMask& mask, float dropout, PhiloxKey dropout_key,
               float* log_sum_exp, const internal::AttentionArithmetic& arith) {
  const size_t batch = layout.batch, heads = q.dims[1];
  const size_t k_tokens = kv.tokens, value_dim = kv.values.cols;
  const auto lse = [&](size_t b, size_t h, size_t i) -> float& {
    return log_sum_exp[layout.LogSumExpIndex(b, h, i)];
  };
  const auto out_rows = [&](size_t b, size_t h) {
    return layout.Rows(out, b, h);
  };
  // Every weight dropped: the context is 0 (and the log-sum-exp is that of
  // the weights before dropout).
  const auto zero_outputs = [&] {
    for (size_t b = 0; b < batch; ++b) {
      for (size_t h = 0; h < heads; ++h) {
        const Matrix o = out_rows(b, h);
        for (size_t i = 0; i < o.rows; ++i) {
          std::fill(o.Row(i), o.Row(i) + value_dim, 0.0f);
        }
      }
    }
  };
  const bool drop_all = dropout >= 1.0f;
  if (drop_all && log_sum_exp == nullptr) return zero_outputs();
  // An fp8 cache's key scale joins the scores' (its value scale joins the
  // outputs, in FinishRow), as does what LoadB leaves out (kLoadScale).
  constexpr float kLoadScale = Codec<T>::kLoadScale;
  const float value_scale = kv.values.side_scale * kLoadScale;
  Problem pr{q,
             layout,
             &kv,
             value_dim,
             out,
             scale * kv.keys.side_scale * kLoadScale,
             internal::MaskModel(mask, k_tokens),
             mask_detail::Softcap(mask.softcap),
             dropout > 0.0f && !drop_all,
             {},
             heads / kv.kv_heads};
  if (pr.dropout)
    pr.dropout_params = dropout_detail::MakeParams(dropout, dropout_key);
  pr.round_weights = arith.round_weights;
  // The caller checks the target.
  HWY_DASSERT(kPairTarget ||
              arith.pair_kernel == internal::BFloat16DotKernelKind::kFallback);
  if (kPairTarget) pr.pair_kernel = arith.pair_kernel;
  pr.round_inputs = arith.round_weights && !arith.inputs_rounded;
  pr.integer_scores = arith.integer_scores;
  pr.rows_from_memory = arith.rows_from_memory;
  pr.direct_e4m3 = arith.direct_e4m3;
  pr.decode_pairs = kPairTarget && arith.decode_pairs;

  const hn::ScalableTag<float> d;
  const size_t nr = matmul_detail::kVectors * hn::Lanes(d);
  const size_t head_dim = q.dims[3];
  // A task: task_heads query heads of one group (the largest divisor of the
  // group that fits) times up to task_tokens tokens.
  size_t task_heads = std::min(pr.group, kTaskRows);
  while (pr.group % task_heads != 0) --task_heads;
  const size_t head_blocks = heads / task_heads;
  size_t task_tokens = kTaskRows / task_heads;
  // Too few tasks for the cores: a query block per task (each tile of K and
  // V packed for fewer rows, a few % more work) before splitting the keys,
  // whose partials would take memory in proportion to the rows.
  size_t most_tokens = 0;
  const auto count_tasks = [&] {
    size_t tasks = 0;
    for (size_t b = 0; b < batch; ++b) {
      tasks += head_blocks * hwy::DivCeil(layout.Tokens(b), task_tokens);
      most_tokens = std::max(most_tokens, layout.Tokens(b));
    }
    return tasks;
  };
  size_t tasks = count_tasks();
  if (tasks < kMinTasks) {
    task_tokens = std::max<size_t>(1, kQueryBlock / task_heads);
    tasks = count_tasks();
  }
  size_t splits = 1;
  if (tasks < kMinTasks && k_tokens >= 2 * kMinSplitKeys) {
    splits = std::min(hwy::DivCeil(kMinTasks, tasks), k_tokens / kMinSplitKeys);
  }
  const size_t chunk = std::max(
      kKeyBlock,
      hwy::DivCeil(hwy::DivCeil(k_tokens, splits), kKeyBlock) * kKeyBlock);
  splits = std::max<size_t>(1, hwy::DivCeil(k_tokens, chunk));

  // With splits, every (task, split) leaves its partial accumulator and
  // states here; without, the accumulator is the output itself (one head
  // per task) or the task's own scratch.
  const size_t block_rows = task_heads * std::min(task_tokens, most_tokens);
  const size_t partial_rows = splits > 1 ? tasks * splits * block_rows : 0;
  internal::ScratchBuffer partials(partial_rows * (value_dim + 3) + 1);
  float* partial_acc = partials.data();
  const RowStates partial_states{partial_acc + partial_rows * value_dim,
                                 partial_acc + partial_rows * (value_dim + 1),
                                 partial_acc + partial_rows * (value_dim + 2)};
  const size_t workspace_floats = Workspace::Floats(nr, head_dim, value_dim);

  // Heavy tasks first: items with more query rows first (ties, and every
  // dense call, in batch order), and within an item, the later row blocks,
  // which see more keys under a causal mask. first_task[p] is the first task
  // of the p-th item in that order (from the scratch pool, used as size_t;
  // std::sort with the tie broken by index: stable_sort would allocate).
  internal::ScratchBuffer order_buffer(
      hwy::DivCeil((2 * batch + 1) * sizeof(size_t), sizeof(float)));
  size_t* order = reinterpret_cast<size_t*>(order_buffer.data());
  size_t* first_task = order + batch;
  for (size_t b = 0; b < batch; ++b) order[b] = b;
  if (layout.starts != nullptr) {
    std::sort(order, order + batch, [&](size_t a, size_t b) {
      const size_t ta = layout.Tokens(a), tb = layout.Tokens(b);
      return ta != tb ? ta > tb : a < b;
    });
  }
  first_task[0] = 0;
  for (size_t p = 0; p < batch; ++p) {
    first_task[p + 1] =
        first_task[p] +
        head_blocks * hwy::DivCeil(layout.Tokens(order[p]), task_tokens);
  }
  const auto locate = [&](size_t index, size_t* split) {
    *split = index % splits;
    const size_t task = index / splits;
    const size_t p = static_cast<size_t>(
        std::upper_bound(first_task, first_task + batch + 1, task) -
        first_task - 1);
    const size_t b = order[p], tokens = layout.Tokens(b);
    const size_t row_blocks = hwy::DivCeil(tokens, task_tokens);
    const size_t local = task - first_task[p];
    const size_t i0 = (row_blocks - 1 - local % row_blocks) * task_tokens;
    return QueryRows{b, local / row_blocks * task_heads, task_heads, i0,
                     task_heads * std::min(task_tokens, tokens - i0)};
  };
  const auto out_row = [&](const QueryRows& t, size_t r) {
    return out_rows(t.b, t.Head(r)).Row(t.Token(r));
  };
  // A task's scratch past its workspace and row states: bf16 pairs; the
  // query rows, gathered when they come from several heads or must be
  // rounded for the float32 kernel; the accumulator of several heads.
  const bool round_q = pr.round_inputs && !pr.pairs();
  const size_t pair_floats =
      pr.pairs() ? PairWorkspace::Floats(head_dim, value_dim) : 0;
  const size_t gather_floats =
      task_heads > 1 || round_q ? kTaskRows * head_dim : 0;
  const size_t acc_floats =
      task_heads > 1 && splits == 1 ? kTaskRows * value_dim : 0;
  internal::ParallelForDynamic(0, tasks * splits, [&](const auto& next) {
    internal::ScratchBuffer scratch(workspace_floats + 3 * kTaskRows +
                                    pair_floats + gather_floats + acc_floats);
    Workspace ws(scratch.data(), nr, head_dim, value_dim);
    float* own = scratch.data() + workspace_floats;
    const RowStates own_states{own, own + kTaskRows, own + 2 * kTaskRows};
    float* pair_part = own + 3 * kTaskRows;
    float* gathered = gather_floats != 0 ? pair_part + pair_floats : nullptr;
    float* own_acc = pair_part + pair_floats + gather_floats;
    const auto run_tasks = [&](const auto& tiles) {
      for (size_t index; (index = next()) != tasks * splits;) {
        size_t split;
        const QueryRows t = locate(index, &split);
        const ConstMatrix queries = TaskQueries(pr, t, round_q, gathered);
        if (splits == 1) {
          // One head: the output rows are one strided matrix.
          const Matrix o = out_rows(t.b, t.h0);
          float* acc = t.heads == 1 ? o.Row(t.i0) : own_acc;
          const size_t acc_stride = t.heads == 1 ? o.stride : value_dim;
          AttendBlock<T>(pr, t, queries, 0, k_tokens, acc, acc_stride,
                         own_states, ws, tiles);
          for (size_t r = 0; r < t.rows; ++r) {
            const bool nan = own_states.nan[r] != 0;
            FinishRow(acc + r * acc_stride, own_states.sum[r], nan, value_scale,
                      value_dim, out_row(t, r));
            if (log_sum_exp != nullptr) {
              lse(t.b, t.Head(r), t.Token(r)) =
                  LogSumExp(own_states.max[r], own_states.sum[r], nan);
            }
          }
          continue;
        }
        const size_t row0 = index * block_rows;
        const RowStates states{partial_states.max + row0,
                               partial_states.sum + row0,
                               partial_states.nan + row0};
        AttendBlock<T>(pr, t, queries, split * chunk,
                       std::min(k_tokens, (split + 1) * chunk),
                       partial_acc + row0 * value_dim, value_dim, states, ws,
                       tiles);
      }
    };
    if constexpr (kPairTarget) {
      if (pr.pairs()) {
        const PairWorkspace pair_ws(pr.pair_kernel, pair_part, head_dim,
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
  if (splits == 1) return drop_all ? zero_outputs() : void();

  // Merge the splits: weights exp(max_s - max) bring every partial to the
  // common max. A few rows per task: not worth spawning for.
  for (size_t task = 0; task < tasks; ++task) {
    size_t split;
    const QueryRows t = locate(task * splits, &split);
    for (size_t r = 0; r < t.rows; ++r) {
      float row_max = -kInf;
      bool nan = false;
      for (size_t s = 0; s < splits; ++s) {
        const size_t row = (task * splits + s) * block_rows + r;
        row_max = std::max(row_max, partial_states.max[row]);
        nan = nan || partial_states.nan[row] != 0;
      }
      float* o = out_row(t, r);
      std::fill(o, o + value_dim, 0.0f);
      float sum = 0.0f;
      if (row_max != -kInf) {
        for (size_t s = 0; s < splits; ++s) {
          const size_t row = (task * splits + s) * block_rows + r;
          const float w = std::exp(partial_states.max[row] - row_max);
          if (w == 0.0f) continue;
          sum += w * partial_states.sum[row];
          const float* a = partial_acc + row * value_dim;
          for (size_t c = 0; c < value_dim; ++c) o[c] += w * a[c];
        }
      }
      FinishRow(o, sum, nan, value_scale, value_dim, o);
      if (log_sum_exp != nullptr)
        lse(t.b, t.Head(r), t.Token(r)) = LogSumExp(row_max, sum, nan);
    }
  }
  if (drop_all) zero_outputs();
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
