// Per-target fused attention (attention-inl.h): the dense path. Each tile
// of K and V is packed into panels once per task, its products taken from a
// backend chosen once per call (FloatTiles: the float32 micro-kernel;
// PairTiles: bf16 pairs on AMX, vdpbf16ps or BFDOT); AttendBlock walks a task's
// tiles, or hands tasks of few rows to decode's AttendFewRows.

#if defined(SIMDATTN_SRC_OPS_ATTENTION_DENSE_INL_H_) == \
    defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_ATTENTION_DENSE_INL_H_
#undef SIMDATTN_SRC_OPS_ATTENTION_DENSE_INL_H_
#else
#define SIMDATTN_SRC_OPS_ATTENTION_DENSE_INL_H_
#endif

#include "src/ops/attention_decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace attention_detail {

// x[0, n) rounded to bf16 in place (n a multiple of the vector length: the
// panels hold whole vectors).
template <class D>
HWY_INLINE void RoundInPlace(D d, float* HWY_RESTRICT x, size_t n) {
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    hn::Store(RoundToBFloat16(d, hn::Load(d, x + i)), d, x + i);
  }
}

// m's rows rounded to bf16 into `out`, dense (m.cols apart).
template <class D>
HWY_INLINE void RoundRows(D d, ConstMatrix m, float* HWY_RESTRICT out) {
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  for (size_t r = 0; r < m.rows; ++r) {
    float* row = out + r * m.cols;
    size_t c = 0;
    for (; c + N <= m.cols; c += N) {
      hn::StoreU(RoundToBFloat16(d, hn::LoadU(d, m.Row(r) + c)), d, row + c);
    }
    for (; c < m.cols; ++c) {
      row[c] = hn::GetLane(RoundToBFloat16(d1, hn::LoadU(d1, m.Row(r) + c)));
    }
  }
}

// C = A B over bf16 pairs (amx_tiles.h's layouts and AmxProduct's
// contract) on the task's pair kernel.
inline void PairProduct(const PairWorkspace& aw, const uint32_t* a,
                        size_t a_stride, const uint32_t* b, size_t b_stride,
                        size_t rows, size_t cols, size_t pairs, float* c,
                        size_t ldc) {
  if (aw.kernel == internal::BFloat16DotKernelKind::kAmx) {
    internal::AmxProduct(a, a_stride, b, b_stride, rows, cols, pairs, c, ldc);
  } else if (aw.kernel == internal::BFloat16DotKernelKind::kBfdot) {
    internal::BfdotPairProduct(a, a_stride, b, b_stride, rows, cols, pairs, c,
                               ldc);
  } else {
    internal::DotProductPairs(a, a_stride, b, b_stride, rows, cols, pairs, c,
                              ldc);
  }
}

// Pairs: the task's query rows as A's pairs, rows past them up to a whole
// tile zero.
inline void QueryPairs(ConstMatrix queries, const PairWorkspace& aw) {
  const size_t rows = queries.rows, hp = aw.head_pairs;
  for (size_t r = 0; r < rows; ++r) {
    internal::PairsOfRow(queries.Row(r), queries.cols, hp, aw.q + r * hp);
  }
  const size_t padded = hwy::RoundUpTo(rows, PairWorkspace::kTile);
  std::fill(aw.q + rows * hp, aw.q + padded * hp, 0u);
}

// Row t of `rows` as floats: in place for float rows, else widened into
// `buffer` (rows.cols floats).
template <typename T>
HWY_INLINE const float* FloatRow(const internal::KVRows<T>& rows, size_t t,
                                 float* buffer) {
  if constexpr (std::is_same_v<T, float>) {
    return rows.Row(t);
  } else {
    matmul_detail::PackPanel(rows, /*transposed=*/false, t, 1, 0, rows.cols,
                             rows.cols, buffer);
    return buffer;
  }
}

// Pairs: K^T and V of keys [j0, j0 + tile_cols) straight from their rows,
// as B's pairs; zero past the keys (to a multiple of 32), head_dim and
// value_dim, and for ws.nonfinite's values (AddNonFiniteValues adds those
// rows' share). The same bits as pairs made from float panels (one
// rounding, vcvtne2ps2bf16), in one pass instead of two; bf16 rows' words
// are the pairs' halves as they lie (MLA decode from memory ran 1.07x as
// fast as through widened rows on Zen 5).
template <typename T>
inline void KeyValuePairs(const internal::KVRows<T>& k,
                          const internal::KVRows<T>& v, size_t j0,
                          size_t tile_cols, const Workspace& ws,
                          const PairWorkspace& aw) {
  constexpr size_t kTile = PairWorkspace::kTile;
  const size_t keys = hwy::RoundUpTo(tile_cols, 2 * kTile);
  const size_t hp = aw.head_pairs;
  // 16 keys' pairs, one key a row, transposed into K^T's 16 x 16 at a time.
  for (size_t j = 0; j < keys; j += kTile) {
    for (size_t r = 0; r < kTile; ++r) {
      uint32_t* row = aw.key_rows + r * hp;
      if (j + r >= tile_cols) {
        std::fill_n(row, hp, 0u);
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        internal::PairsOfElements(k.Row(j0 + j + r), k.cols, hp, row);
      } else {
        internal::PairsOfRow(FloatRow(k, j0 + j + r, aw.lo), k.cols, hp, row);
      }
    }
    for (size_t p = 0; p < hp; p += kTile) {
      internal::TransposeTile(aw.key_rows + p, hp, aw.k + p * kKeyBlock + j,
                              kKeyBlock);
    }
  }
  const uint32_t* nonfinite = ws.nonfinite.keys;
  const uint32_t* nonfinite_end = nonfinite + ws.nonfinite.count;
  const auto zeroed = [&](size_t j) {
    return j >= tile_cols ||
           std::find(nonfinite, nonfinite_end, static_cast<uint32_t>(j)) !=
               nonfinite_end;
  };
  for (size_t j = 0; j < keys; j += 2) {  // Keys (j, j + 1).
    uint32_t* out = aw.v + j / 2 * aw.value_cols;
    const bool lo_zero = zeroed(j), hi_zero = zeroed(j + 1);
    if (lo_zero && hi_zero) {
      std::fill_n(out, aw.value_cols, 0u);
      continue;
    }
    if constexpr (std::is_same_v<T, BFloat16>) {  // As they lie.
      const auto words = [&](bool zero, size_t t) {
        return zero ? nullptr
                    : reinterpret_cast<const uint16_t*>(v.Row(j0 + t));
      };
      internal::InterleavedWords(words(lo_zero, j), words(hi_zero, j + 1),
                                 v.cols, out);
    } else {
      const float* lo = aw.lo;
      if (lo_zero) {
        std::fill_n(aw.lo, v.cols, 0.0f);
      } else {
        lo = FloatRow(v, j0 + j, aw.lo);
      }
      const float* hi = hi_zero ? nullptr : FloatRow(v, j0 + j + 1, aw.hi);
      internal::InterleavedPairs(lo, hi, v.cols, out);
    }
    std::fill(out + v.cols, out + aw.value_cols, 0u);
  }
}

// Pairs: S = scale Q K^T for the block's rows (from `row`, the block's first
// row within the task) over key columns [0, cols) (and up to a multiple of
// 32, which SoftmaxTile ignores).
inline void PairScores(const Problem& pr, size_t row, size_t rows, size_t cols,
                       const PairWorkspace& aw, float* scores) {
  const hn::ScalableTag<float> d;
  const size_t tile_rows = hwy::RoundUpTo(rows, PairWorkspace::kTile);
  PairProduct(aw, aw.q + row * aw.head_pairs, aw.head_pairs, aw.k, kKeyBlock,
              tile_rows, hwy::RoundUpTo(cols, 32), aw.head_pairs, scores,
              kKeyBlock);
  const auto scale = hn::Set(d, pr.scale);
  for (size_t r = 0; r < rows; ++r) {
    float* srow = scores + r * kKeyBlock;
    for (size_t j = 0; j < cols; j += hn::Lanes(d)) {  // Rows: kKeyBlock.
      hn::StoreU(hn::Mul(hn::LoadU(d, srow + j), scale), d, srow + j);
    }
  }
}

// Pairs: acc = P V (first) or acc + P V over the block's rows, P (bf16-exact,
// SoftmaxTile's) in columns [0, cols) of `weights`, which become A's pairs.
inline void PairWeightsTimesValues(const float* weights, size_t rows,
                                   size_t cols, size_t value_dim, bool first,
                                   const PairWorkspace& aw, float* acc,
                                   size_t acc_stride) {
  const size_t keys = hwy::RoundUpTo(cols, 32);
  const size_t tile_rows = hwy::RoundUpTo(rows, PairWorkspace::kTile);
  constexpr size_t kPairs = PairWorkspace::kKeyPairs;
  for (size_t r = 0; r < tile_rows; ++r) {
    if (r < rows) {
      internal::PairsOfRow(weights + r * kKeyBlock, cols, keys / 2,
                           aw.p + r * kPairs);
    } else {
      std::fill_n(aw.p + r * kPairs, keys / 2, 0u);
    }
  }
  PairProduct(aw, aw.p, kPairs, aw.v, aw.value_cols, tile_rows, aw.value_cols,
              keys / 2, aw.pv, aw.value_cols);
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t r = 0; r < rows; ++r) {
    float* out = acc + r * acc_stride;
    const float* pv = aw.pv + r * aw.value_cols;
    size_t c = 0;
    for (; c + N <= value_dim; c += N) {
      const auto sum = hn::LoadU(d, pv + c);
      hn::StoreU(first ? sum : hn::Add(hn::LoadU(d, out + c), sum), d, out + c);
    }
    for (; c < value_dim; ++c) out[c] = first ? pv[c] : out[c] + pv[c];
  }
}

// The task's query rows as one matrix: Q's own rows for one head as given,
// else gathered into `buffer` (kTaskRows x head_dim floats), rounded to
// bf16 if `round`.
inline ConstMatrix TaskQueries(const Problem& pr, const QueryRows& t,
                               bool round, float* buffer) {
  const size_t head_dim = pr.q.dims[3];
  if (buffer == nullptr) {
    const ConstMatrix q = pr.layout.Rows(pr.q, t.b, t.h0);
    return ConstMatrix(q.Row(t.i0), t.rows, head_dim, q.stride);
  }
  const hn::ScalableTag<float> d;
  for (size_t r = 0; r < t.rows; ++r) {
    const float* row = pr.layout.Rows(pr.q, t.b, t.Head(r)).Row(t.Token(r));
    if (round) {
      RoundRows(d, ConstMatrix(row, 1, head_dim, head_dim),
                buffer + r * head_dim);
    } else {
      std::copy(row, row + head_dim, buffer + r * head_dim);
    }
  }
  return ConstMatrix(buffer, t.rows, head_dim, head_dim);
}

// The keys of a tile that each micro-tile of a block's rows computes: rows
// m .. m + kRows of the block stop at the keys their last row may see and
// start, in whole panels, at their first row's window; on the causal
// diagonal and the window's edge that skips the masked part of the tile.
struct MicroTiles {
  const Problem& pr;
  const QueryRows& t;
  size_t qb, qb_rows;  // The block's rows within the task.
  size_t j0, cols;     // The tile's keys the block sees: [j0, j0 + cols).
  size_t j_end;        // The walk's end.
  size_t nr;           // Panel width.

  // Keys [From(m), To(m)) of the tile, relative to j0.
  size_t To(size_t m) const {
    const size_t row = qb + std::min(qb_rows, m + matmul_detail::kRows) - 1;
    const size_t last = std::min(j_end, pr.mask.End(t.b, t.Token(row)));
    return last <= j0 ? 0 : std::min(cols, last - j0);
  }
  size_t From(size_t m) const {
    const size_t first = pr.mask.Begin(t.b, t.Token(qb + m));
    return first <= j0 ? 0 : std::min(cols, first - j0) / nr * nr;
  }
};

// The dense path's products, chosen once per call (AttendAll) and handed to
// the schedule (AttendBlock), which calls Queries once per task, Prepare
// per tile once K^T and V are packed into float panels, and per block of
// rows Scores (S = scale Q K^T into ws.scores) and WeightsTimesValues (acc
// = P V on the block's first tile, else acc + P V; P is 0 outside a
// micro-tile's keys).
//
// FloatTiles: the matmul micro-kernel over the float panels, which are
// rounded to bf16 first when kBFloat16 gets Q, K and V unrounded (the task's
// queries are then rounded by TaskQueries).
struct FloatTiles {
  bool round_inputs;

  void Queries(ConstMatrix) const {}

  // K^T and V of keys [j0, j0 + tile_cols) as float panels, the values of
  // ws.nonfinite's keys zero, rounded to bf16 where asked.
  template <typename T>
  void Prepare(const internal::KVRows<T>& k, const internal::KVRows<T>& v,
               size_t j0, size_t tile_cols, const Workspace& ws,
               size_t nr) const {
    using matmul_detail::PackPanel;
    const size_t head_dim = k.cols, value_dim = v.cols;
    for (size_t n0 = 0; n0 < tile_cols; n0 += nr) {
      PackPanel(k, /*transposed=*/true, 0, head_dim, j0 + n0,
                std::min(nr, tile_cols - n0), nr, ws.k_panels + n0 * head_dim);
    }
    for (size_t n0 = 0; n0 < value_dim; n0 += nr) {
      PackPanel(v, /*transposed=*/false, j0, tile_cols, n0,
                std::min(nr, value_dim - n0), nr, ws.v_panels + n0 * kKeyBlock);
    }
    for (size_t n = 0; n < ws.nonfinite.count; ++n) {
      for (size_t n0 = 0; n0 < value_dim; n0 += nr) {
        std::fill_n(ws.v_panels + n0 * kKeyBlock + ws.nonfinite.keys[n] * nr,
                    nr, 0.0f);
      }
    }
    if (!round_inputs) return;
    const hn::ScalableTag<float> d;  // Padding and stale rows round too.
    RoundInPlace(d, ws.k_panels, hwy::DivCeil(tile_cols, nr) * nr * head_dim);
    for (size_t n0 = 0; n0 < value_dim; n0 += nr) {
      RoundInPlace(d, ws.v_panels + n0 * kKeyBlock, tile_cols * nr);
    }
  }

  void Scores(ConstMatrix queries, const MicroTiles& mt,
              const Workspace& ws) const {
    using namespace matmul_detail;
    const hn::ScalableTag<float> d;
    const size_t head_dim = queries.cols, nr = mt.nr;
    const Epilogue epilogue{mt.pr.scale, 0.0f, true, nullptr};
    for (size_t m = 0; m < mt.qb_rows; m += kRows) {
      const size_t to = mt.To(m);
      for (size_t n0 = mt.From(m); n0 < to; n0 += nr) {
        MicroKernelRows(d, std::min(kRows, mt.qb_rows - m),
                        queries.Row(mt.qb + m), queries.stride,
                        ws.k_panels + n0 * head_dim, head_dim,
                        ws.scores + m * kKeyBlock + n0, kKeyBlock,
                        std::min(nr, to - n0), epilogue);
      }
    }
  }

  void WeightsTimesValues(const MicroTiles& mt, bool first, const Workspace& ws,
                          float* acc, size_t acc_stride) const {
    using namespace matmul_detail;
    const hn::ScalableTag<float> d;
    const size_t value_dim = mt.pr.value_dim, nr = mt.nr;
    const Epilogue accumulate{1.0f, 0.0f, first, nullptr};
    for (size_t m = 0; m < mt.qb_rows; m += kRows) {
      const size_t to = mt.To(m), from = std::min(mt.From(m), to);
      for (size_t n0 = 0; n0 < value_dim; n0 += nr) {
        MicroKernelRows(d, std::min(kRows, mt.qb_rows - m),
                        ws.scores + m * kKeyBlock + from, kKeyBlock,
                        ws.v_panels + n0 * kKeyBlock + from * nr, to - from,
                        acc + m * acc_stride + n0, acc_stride,
                        std::min(nr, value_dim - n0), accumulate);
      }
    }
  }
};

// PairTiles: bf16 pairs on AMX, vdpbf16ps (AVX-512 targets) or BFDOT (Arm),
// rounded from the float panels; whole tiles (the weights of keys a row does
// not see are 0).
struct PairTiles {
  const PairWorkspace& aw;

  void Queries(ConstMatrix queries) const { QueryPairs(queries, aw); }

  template <typename T>
  void Prepare(const internal::KVRows<T>& k, const internal::KVRows<T>& v,
               size_t j0, size_t tile_cols, const Workspace& ws, size_t) const {
    KeyValuePairs(k, v, j0, tile_cols, ws, aw);
  }

  void Scores(ConstMatrix, const MicroTiles& mt, const Workspace& ws) const {
    PairScores(mt.pr, mt.qb, mt.qb_rows, mt.cols, aw, ws.scores);
  }

  void WeightsTimesValues(const MicroTiles& mt, bool first, const Workspace& ws,
                          float* acc, size_t acc_stride) const {
    PairWeightsTimesValues(ws.scores, mt.qb_rows, mt.cols, mt.pr.value_dim,
                           first, aw, acc, acc_stride);
  }
};

// Attends a task's query rows (up to kTaskRows; `queries`, one row each,
// rounded to bf16 where the dense path must round them) to keys
// [j_begin, j_end) (j_begin a multiple of kKeyBlock), key tile by key tile
// from the first row's window on: each tile of K and V is packed once for
// all the task's query blocks that see it, and multiplied by `tiles`
// (FloatTiles or PairTiles). A task of few rows over inputs that need no
// rounding reads K and V in place instead (AttendFewRows). Leaves the
// unnormalised outputs in acc (rows of value_dim floats, acc_stride apart)
// and the rows' softmax states in st.
template <typename T, class Tiles>
inline void AttendBlock(const Problem& pr, const QueryRows& t,
                        ConstMatrix queries, size_t j_begin, size_t j_end,
                        float* acc, size_t acc_stride, const RowStates& st,
                        Workspace& ws, const Tiles& tiles) {
  using namespace matmul_detail;
  const size_t b = t.b, rows = t.rows;
  const size_t value_dim = pr.value_dim;
  for (size_t r = 0; r < rows; ++r) {
    // The sink joins the first split's state: exp(sink - max) in the sum.
    const float sink = j_begin == 0 ? pr.mask.Sink(t.Head(r)) : -kInf;
    st.max[r] = sink;
    st.sum[r] = sink == -kInf ? 0.0f : 1.0f;
    st.nan[r] = 0.0f;
  }
  // Whether each block of kQueryBlock rows has written its accumulator.
  bool started[kTaskRows / kQueryBlock] = {};
  // Limits grow with the row, so a block's last row bounds its keys.
  const auto stop = [&](size_t last_row) {
    return std::min(j_end, pr.mask.End(b, t.Token(last_row)));
  };
  if (rows <= kSkinnyRows && !pr.round_inputs) {
    started[0] = AttendFewRows<T>(pr, t, queries, j_begin, j_end, acc,
                                  acc_stride, st, ws);
  } else {
    const hn::ScalableTag<float> d;
    const size_t nr = kVectors * hn::Lanes(d);
    const internal::KVRows<T> k = pr.Keys<T>(b, t.h0);
    const internal::KVRows<T> v = pr.Values<T>(b, t.h0);
    const size_t task_stop = stop(rows - 1);
    tiles.Queries(queries);
    for (size_t j0 = FirstKey(pr, b, t.Token(0), j_begin); j0 < task_stop;
         j0 += kKeyBlock) {
      // Pack K^T and V for the keys the task's last row sees.
      const size_t tile_cols = std::min(kKeyBlock, task_stop - j0);
      ws.nonfinite.count = 0;
      if (pr.mask.Classify(b, t.Token(0), t.Token(rows - 1) + 1, j0,
                           j0 + tile_cols) != TileKind::kFull) {
        FindNonFiniteValues(d, v, j0, tile_cols, ws.nonfinite);
      }
      tiles.Prepare(k, v, j0, tile_cols, ws, nr);
      for (size_t qb = 0; qb < rows; qb += kQueryBlock) {
        const size_t qb_rows = std::min(rows - qb, kQueryBlock);
        const size_t qb_stop = stop(qb + qb_rows - 1);
        if (qb_stop <= j0) continue;  // This block saw its last key.
        const size_t cols = std::min(kKeyBlock, qb_stop - j0);
        // Not yet in this block's window.
        if (pr.mask.Begin(b, t.Token(qb)) >= j0 + cols) continue;
        const MicroTiles mt{pr, t, qb, qb_rows, j0, cols, j_end, nr};
        // 1. S = scale * Q K^T.
        tiles.Scores(queries, mt, ws);
        // 2. Online softmax and dropout.
        const RowStates qb_states{st.max + qb, st.sum + qb, st.nan + qb};
        SoftmaxTile(pr, t, qb, qb_rows, j0, cols, qb_states, ws);
        // 3. acc = corr * acc + P V.
        const bool first = !started[qb / kQueryBlock];
        started[qb / kQueryBlock] = true;
        float* qb_acc = acc + qb * acc_stride;
        if (!first)
          RescaleRows(ws.corr, qb_rows, qb_acc, acc_stride, value_dim);
        tiles.WeightsTimesValues(mt, first, ws, qb_acc, acc_stride);
        AddNonFiniteValues(pr, ws.nonfinite, v, t, qb, qb_rows, j0, ws.scores,
                           qb_acc, acc_stride);
      }
    }
  }
  // Rows of blocks that saw no key accumulated nothing: zeros.
  for (size_t qb = 0; qb < rows; qb += kQueryBlock) {
    if (started[qb / kQueryBlock]) continue;
    for (size_t r = qb; r < std::min(rows, qb + kQueryBlock); ++r) {
      std::fill(acc + r * acc_stride, acc + r * acc_stride + value_dim, 0.0f);
    }
  }
}

// out_row = acc_row * value_scale / sum (value_scale: an fp8 cache's times
// kLoadScale, else 1); zeros when nothing was attended, NaN on NaN.
HWY_INLINE void FinishRow(const float* acc, float sum, bool nan,
                          float value_scale, size_t n, float* out) {
  if (nan) {
    std::fill(out, out + n, std::numeric_limits<float>::quiet_NaN());
  } else if (sum == 0.0f) {
    std::fill(out, out + n, 0.0f);
  } else {
    const float inv = value_scale / sum;
    for (size_t c = 0; c < n; ++c) out[c] = acc[c] * inv;
  }
}

// The log-sum-exp of a row's softmax state (kernels.h's log_sum_exp).
HWY_INLINE float LogSumExp(float max, float sum, bool nan) {
  if (nan) return std::numeric_limits<float>::quiet_NaN();
  return sum == 0.0f ? -kInf : max + std::log(sum);
}

}  // namespace attention_detail
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_ATTENTION_DENSE_INL_H_
