// Per-target fused attention (attention-inl.h): decode, few query rows over
// long caches. Rows are read where they lie (paced or prefetched from
// memory) by a backend the call's arithmetic picks: float rows (DotColumns,
// DirectColumns), integer scores (int_dot-inl.h), bf16 pairs
// (decode_pairs.h) or direct E4M3. WalkFewRows walks a task's keys.

#if defined(SIMDATTN_SRC_OPS_ATTENTION_DECODE_INL_H_) == \
    defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_ATTENTION_DECODE_INL_H_
#undef SIMDATTN_SRC_OPS_ATTENTION_DECODE_INL_H_
#else
#define SIMDATTN_SRC_OPS_ATTENTION_DECODE_INL_H_
#endif

#include "src/ops/attention_tile-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace attention_detail {

// Row j of a paged cache, and its scale, to L1.
template <typename T>
HWY_INLINE void PrefetchPagedRow(const internal::KVRows<T>& rows, size_t j) {
  matmul_detail::PrefetchElements(rows.Row(j), 0, rows.cols);
  if constexpr (internal::kTraitsOf<T>.scaled) {
    // Each line of the scales once: where a block's run or a line begins
    // (a run need not start a line: the array is the caller's).
    const float* scale = rows.ScaleAt(j);
    if (((j + rows.first) & rows.offset_mask) == 0 ||
        reinterpret_cast<uintptr_t>(scale) % matmul_detail::kLineBytes <
            sizeof(float)) {
      hwy::Prefetch(scale);
    }
  }
}

// Whether a paged cache's blocks hold one run of memory: one head's dense
// rows per block.
template <typename T>
bool OneRunPerBlock(const internal::KVRows<T>& rows) {
  return rows.stride * internal::kBlockValues<T> == rows.cols &&
         rows.block_stride == (rows.offset_mask + 1) * rows.stride;
}

// Whether PrefetchPagedRows asks for rows at all (rows the walk does not
// pace). Paged rows come in runs (a block's tokens of one head) too short
// for the hardware prefetchers to follow; float rows fill a block's run with
// 16 x head_dim x 4 bytes, long enough for them (bench/RESULTS.md, "Kept
// decisions").
template <typename T>
bool PrefetchesRows(const internal::KVRows<T>& rows) {
  return rows.table != internal::kSingleBlock && !std::is_same_v<T, float>;
}

// Asks for rows [j_begin, j_end) of a cache, and their scales, where
// PrefetchesRows. Where a paged block holds one head's rows only, a block
// that follows the previous one in memory continues one stream the
// hardware follows: asking as well cost 23% on Zen 5 (bench/RESULTS.md,
// "Kept decisions").
template <typename T>
HWY_INLINE void PrefetchPagedRows(const internal::KVRows<T>& rows,
                                  size_t j_begin, size_t j_end) {
  if (!PrefetchesRows(rows)) return;
  if (!OneRunPerBlock(rows)) {
    for (size_t j = j_begin; j < j_end; ++j) PrefetchPagedRow(rows, j);
    return;
  }
  for (size_t j = j_begin, run; j < j_end; j += run) {
    run = std::min(j_end - j, rows.RunFrom(j));
    if (j > 0 && rows.Block(j) == rows.Block(j - 1) + 1) continue;
    for (size_t r = j; r < j + run; ++r) PrefetchPagedRow(rows, r);
  }
}

// Keys per chunk of a decode tile's scores: with several heads per block,
// about 2 KiB of K rows (a block of 16 keys at head_dim 64 in bf16), over
// each of which the chunk's V rows and the next tile's K rows are asked
// for; else the whole tile, whose rows the tile before asked for (one-run
// blocks) or nobody does. A tile's K and V asked for at once (64 KiB at
// head_dim 64 in bf16) stalled the core on the misses in flight: such
// caches ran at half the contiguous rate on Zen 5 (bench/RESULTS.md).
template <typename T>
size_t PrefetchChunk(const internal::KVRows<T>& rows) {
  if (!PrefetchesRows(rows) || OneRunPerBlock(rows)) return kKeyBlock;
  constexpr size_t kChunkBytes = 2048;
  const size_t row_bytes =
      hwy::DivCeil(rows.cols, internal::kBlockValues<T>) * sizeof(T);
  const size_t keys = kChunkBytes / row_bytes;
  return std::clamp<size_t>(keys - keys % internal::kFirstKeyGranule,
                            internal::kFirstKeyGranule, kKeyBlock);
}

// Rows from memory (Problem::rows_from_memory) of these types are paced
// (RowPacer). On Zen 5 that made bf16 and f16 decode from memory 1.05-1.4
// times as fast and q8_0's 1.2; float32 rows (512 bytes, which the hardware
// follows) lost up to 1.3x, int8, fp8 and q4_0 ones gained nothing
// (bench/RESULTS.md, "Kept decisions").
template <typename T>
inline constexpr bool kPacedRows =
    std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16> ||
    std::is_same_v<T, internal::BlockQ8_0>;

// Asks for the rows a decode walk reads, each tile's K rows and then its V
// rows, `distance` rows ahead of the row it reads, a few rows at a time:
// requests at the walk's own pace. Asking for a tile's rows together (the
// next tile's K rows with this tile's scores, nothing during P V) kept the
// core waiting on misses it had asked for.
template <typename T>
class RowPacer {
 public:
  // The walk over keys [j_start, j_stop) in tiles of kKeyBlock from j_start;
  // distance 0 asks for nothing.
  RowPacer(const internal::KVRows<T>& k, const internal::KVRows<T>& v,
           size_t j_start, size_t j_stop, size_t distance)
      : k_(k),
        v_(v),
        j_start_(j_start),
        j_stop_(j_stop),
        distance_(distance),
        end_(distance == 0 || j_stop <= j_start
                 ? 0
                 : KeyPosition(j_stop - 1) + kKeyBlock + 1) {}

  // Key j's K row's place in the walk; its V row's is kKeyBlock further.
  size_t KeyPosition(size_t j) const {
    const size_t i = j - j_start_;
    return i / kKeyBlock * 2 * kKeyBlock + i % kKeyBlock;
  }
  // Asks for every row of the walk up to `distance` past place p, and a
  // batch more, so that most calls ask for nothing.
  HWY_INLINE void Reach(size_t p) const {
    if (p + distance_ <= asked_ || asked_ >= end_) return;
    AskTo(std::min(p + distance_ + kPaceBatch, end_));
  }

 private:
  // Inline: a call in P V's loop over keys made GCC 12 keep the loop's
  // accumulators in memory (1.3x slower).
  HWY_INLINE void AskTo(size_t to) const {
    while (asked_ < to) {
      // Places [asked_, asked_ + n): keys [j, j + n) of a tile's K or V.
      const size_t half = asked_ / kKeyBlock, i = asked_ % kKeyBlock;
      const size_t n = std::min(to - asked_, kKeyBlock - i);
      const size_t j = j_start_ + half / 2 * kKeyBlock + i;
      if (j < j_stop_) {
        AskFor(half % 2 == 0 ? k_ : v_, j, std::min(j_stop_, j + n));
      }
      asked_ += n;
    }
  }
  // Rows [j, j_end), run by run: the lines of dense rows in one sweep.
  HWY_INLINE static void AskFor(const internal::KVRows<T>& rows, size_t j,
                                size_t j_end) {
    const size_t row_bytes =
        hwy::DivCeil(rows.cols, internal::kBlockValues<T>) * sizeof(T);
    for (size_t run; j < j_end; j += run) {
      run = std::min(j_end - j, rows.RunFrom(j));
      if (rows.stride * sizeof(T) != row_bytes) {
        for (size_t r = j; r < j + run; ++r) PrefetchPagedRow(rows, r);
        continue;
      }
      const uintptr_t begin = reinterpret_cast<uintptr_t>(rows.Row(j));
      for (uintptr_t line = begin & ~(matmul_detail::kLineBytes - 1);
           line < begin + run * row_bytes; line += matmul_detail::kLineBytes) {
        hwy::Prefetch(reinterpret_cast<const char*>(line));
      }
    }
  }

  internal::KVRows<T> k_, v_;
  size_t j_start_, j_stop_, distance_, end_;
  mutable size_t asked_ = 0;
};

// Rows of B (RowsTimesB's) whose reads move a pacer on: row t is the
// walk's place `position` + t.
template <class B, typename T>
struct PacedRows {
  B rows;
  const RowPacer<T>* pacer;
  size_t position;
  auto Row(size_t t) const {
    pacer->Reach(position + t);
    return rows.Row(t);
  }
};

// A paced walk's distance in rows (about kPaceDistanceBytes of them) and
// the keys it scores between askings (about kPaceChunkBytes of rows).
struct Pace {
  size_t distance, chunk;
};
template <typename T>
Pace PaceOf(const internal::KVRows<T>& rows) {
  const size_t row_bytes =
      hwy::DivCeil(rows.cols, internal::kBlockValues<T>) * sizeof(T);
  const size_t chunk = std::clamp<size_t>(
      kPaceChunkBytes / row_bytes / internal::kFirstKeyGranule *
          internal::kFirstKeyGranule,
      internal::kFirstKeyGranule, kKeyBlock);
  return {std::max(2 * chunk, kPaceDistanceBytes / row_bytes), chunk};
}

// S = alpha Q K^T for keys j0 + [0, cols) (S's rows kKeyBlock apart), K
// read where it lies. One row streams K a dot product at a time; several
// (a group's heads) go by dot-product tiles, each vector of K loaded once
// for up to kDotRows rows, over each run of keys contiguous in memory (a
// block of a paged cache), row-scaled keys' (int8's) scales applied to the
// products.
template <typename T>
inline void RowScores(ConstMatrix queries, const internal::KVRows<T>& k,
                      size_t j0, size_t cols, const MatMulOptions& options,
                      float* scores) {
  using namespace matmul_detail;
  const size_t rows = queries.rows;
  if (rows < kDotMinRows) {
    return DirectColumns(queries, k.From(j0),
                         Matrix(scores, rows, cols, kKeyBlock), options, 0,
                         cols);
  }
  for (size_t n = 0, run = 0; n < cols; n += run) {
    run = std::min(cols - n, k.RunFrom(j0 + n));
    DotColumns(queries,
               MatrixView<const T>(k.Row(j0 + n), run, k.cols, k.stride),
               Matrix(scores + n, rows, run, kKeyBlock), options, 0, run);
    if constexpr (internal::kTraitsOf<T>.scaled) {
      // Times the keys' scales, contiguous within a run.
      const float* scales = k.ScaleAt(j0 + n);
      const hn::ScalableTag<float> d;
      const size_t N = hn::Lanes(d);
      for (size_t j = 0; j < run; j += N) {
        const size_t count = std::min(N, run - j);
        const auto scale = LoadTail(d, scales + j, count);
        for (size_t r = 0; r < rows; ++r) {
          float* s = scores + r * kKeyBlock + n + j;
          StoreTail(hn::Mul(LoadTail(d, s, count), scale), d, s, count);
        }
      }
    }
  }
}

// Where rows [j0, j0 + p.cols) of E4M3 values hold a NaN code: makes its
// column of every row of acc NaN, as P times it does on the tested path
// (the rows were read as FiniteE4M3 or DirectE4M3, without that test).
inline void AddNaNColumns(ConstMatrix p,
                          const internal::KVRows<internal::Fp8E4M3>& v,
                          size_t j0, Matrix acc) {
  if (!HasNaNCodes(v, j0, p.cols)) return;
  for (size_t j = j0; j < j0 + p.cols; ++j) {
    const internal::Fp8E4M3* row = v.Row(j);
    for (size_t c = 0; c < v.cols; ++c) {
      if (!std::isnan(internal::WidenAt(row, c))) continue;
      for (size_t r = 0; r < acc.rows; ++r) {
        acc.Row(r)[c] = std::numeric_limits<float>::quiet_NaN();
      }
    }
  }
}

// acc = P V (first) or acc + P V.
inline MatMulOptions Accumulate(bool first) {
  MatMulOptions options;
  options.beta = first ? 0.0f : 1.0f;
  return options;
}

// Decode's backends: how a few-rows task (AttendFewRows) forms its
// products, with the shape of the dense path's FloatTiles and PairTiles.
// The call's arithmetic picks one (Problem: integer_scores, decode_pairs,
// direct_e4m3); a task whose query rows it declines (not finite) goes by
// FloatRows, which gives the same results. Each backend has
//   Queries(queries, ws): takes the task's rows; false: declines them.
//   Scores(k, j0, cols, scores): S = scale Q K^T for keys j0 + [0, cols),
//     rows kKeyBlock apart. Each score is its own dot product: a tile's
//     scores in chunks have the same bits.
//   WeightsTimesValues(p, v, j0, acc, first, pacer, chunk): acc = P V
//     (first) or acc + P V over a tile's value rows, every row of acc seeing
//     every key of P (a full tile, or one without non-finite values). A
//     pacer, where given, asks for rows ahead (each `chunk` of keys).
//   ZeroedWeightsTimesValues(p, v, j0, ws, acc, first): the same with the
//     rows of ws.nonfinite read as zeros, where a masked key's P = 0 times
//     such a row would not be 0.
//
// FloatRows: float32 products over the rows as their codec loads them
// (DotColumns, DirectColumns); E4M3 rows read as FiniteE4M3, then scanned
// for NaN codes where they are in cache now (scanning first made decode
// from memory wait for the scan) and read again with the test where one is
// found.
template <typename T>
struct FloatRows {
  static constexpr const char* kName = "float32 rows";
  ConstMatrix queries;
  MatMulOptions score_options;  // alpha: the problem's scale.

  explicit FloatRows(float scale) : queries(nullptr, 0, 0, 0) {
    score_options.transpose_b = Transpose::kYes;
    score_options.alpha = scale;
  }

  bool Queries(ConstMatrix task_queries, const Workspace&) {
    queries = task_queries;
    return true;
  }

  void Scores(const internal::KVRows<T>& k, size_t j0, size_t cols,
              float* scores) const {
    if constexpr (std::is_same_v<T, internal::Fp8E4M3>) {
      RowScores(queries, FiniteRows(k), j0, cols, score_options, scores);
      if (!HasNaNCodes(k, j0, cols)) return;
    }
    RowScores(queries, k, j0, cols, score_options, scores);
  }

  HWY_INLINE void WeightsTimesValues(ConstMatrix p,
                                     const internal::KVRows<T>& v, size_t j0,
                                     Matrix acc, bool first,
                                     const RowPacer<T>* pacer, size_t) const {
    using matmul_detail::DirectColumns;
    if constexpr (kPacedRows<T>) {
      if (pacer != nullptr) {
        const size_t position = pacer->KeyPosition(j0) + kKeyBlock;
        using Rows = internal::KVRows<T>;
        return DirectColumns<true>(
            p, PacedRows<Rows, T>{v.From(j0), pacer, position}, acc,
            Accumulate(first), 0, acc.cols);
      }
    }
    if constexpr (std::is_same_v<T, internal::Fp8E4M3>) {
      DirectColumns<true>(p, FiniteRows(v).From(j0), acc, Accumulate(first), 0,
                          acc.cols);
      AddNaNColumns(p, v, j0, acc);
    } else {
      DirectColumns<true>(p, v.From(j0), acc, Accumulate(first), 0, acc.cols);
    }
  }

  void ZeroedWeightsTimesValues(ConstMatrix p, const internal::KVRows<T>& v,
                                size_t j0, const Workspace& ws, Matrix acc,
                                bool first) const {
    using matmul_detail::DirectColumns;
    using matmul_detail::LoadRow;
    const size_t cols = p.cols, value_dim = acc.cols;
    const NonFiniteValues& nonfinite = ws.nonfinite;
    if constexpr (internal::kTraitsOf<T>.scaled) {  // Scales zeroed.
      for (size_t jj = 0; jj < cols; ++jj) ws.scales[jj] = v.Scale(j0 + jj);
      for (size_t n = 0; n < nonfinite.count; ++n) {
        ws.scales[nonfinite.keys[n]] = 0.0f;
      }
      DirectColumns<true>(p, Int8TileRows{v.From(j0), ws.scales}, acc,
                          Accumulate(first), 0, value_dim);
    } else if constexpr (internal::kBlockValues<T> > 1) {
      // Zero blocks in the V panels' scratch, which this path packs not.
      T* zeros = reinterpret_cast<T*>(ws.v_panels);
      std::memset(zeros, 0, value_dim / internal::kQuantBlock * sizeof(T));
      DirectColumns<true>(p, BlockTileRows<T>{v.From(j0), &nonfinite, zeros},
                          acc, Accumulate(first), 0, value_dim);
    } else {  // A float copy with those rows zeroed, in the V panels.
      const hn::ScalableTag<float> d;
      const hn::CappedTag<float, 1> d1;
      const size_t N = hn::Lanes(d);
      for (size_t jj = 0; jj < cols; ++jj) {
        float* row = ws.v_panels + jj * value_dim;
        size_t c = 0;
        for (; c + N <= value_dim; c += N) {
          hn::StoreU(LoadRow(d, v, j0 + jj, c), d, row + c);
        }
        for (; c < value_dim; ++c) {
          row[c] = hn::GetLane(LoadRow(d1, v, j0 + jj, c));
        }
      }
      for (size_t n = 0; n < nonfinite.count; ++n) {
        std::fill_n(ws.v_panels + nonfinite.keys[n] * value_dim, value_dim,
                    0.0f);
      }
      DirectColumns(p, ConstMatrix(ws.v_panels, cols, value_dim, value_dim),
                    acc, Accumulate(first), 0, value_dim);
    }
  }
};

// IntegerRows (kInt8 over keys of integer codes): the query rows quantized
// once for every tile, in the K panels' scratch (this path packs none;
// kKeyBlock head_dim floats hold them), the scores integer dot products
// (int_dot-inl.h); P V as FloatRows.
template <typename T>
struct IntegerRows : FloatRows<T> {
  static constexpr const char* kName = "int8 dot products";
  using Quantized = int_dot_detail::QuantizedQueries;
  static_assert(matmul_detail::kSkinnyRows <= Quantized::kMaxRows, "fit");
  Quantized quantized;

  explicit IntegerRows(float scale) : FloatRows<T>(scale) {}

  bool Queries(ConstMatrix task_queries, const Workspace& ws) {
    FloatRows<T>::Queries(task_queries, ws);
    quantized = Quantized::For<T>(ws.k_panels, task_queries.cols);
    return int_dot_detail::Quantize(task_queries, this->score_options.alpha,
                                    quantized);
  }

  void Scores(const internal::KVRows<T>& k, size_t j0, size_t cols,
              float* scores) const {
    int_dot_detail::Scores(quantized, k, j0, cols, scores, kKeyBlock);
  }
};

// DirectE4M3Rows: E4M3 rows read as DirectE4M3 (Problem::direct_e4m3), the
// queries times its operand scale in the K panels' scratch (this path packs
// none), each tile's weights likewise in the rows of S past the task's;
// scanned for NaN codes as FloatRows' are.
struct DirectE4M3Rows : FloatRows<internal::Fp8E4M3> {
  static constexpr const char* kName = "E4M3 read as float32 bits";
  using Rows = internal::KVRows<internal::Fp8E4M3>;
  static_assert(2 * matmul_detail::kSkinnyRows <= kQueryBlock, "S holds both");
  ConstMatrix direct_queries;
  float* direct_weights = nullptr;

  explicit DirectE4M3Rows(float scale)
      : FloatRows(scale), direct_queries(nullptr, 0, 0, 0) {}

  bool Queries(ConstMatrix task_queries, const Workspace& ws) {
    FloatRows::Queries(task_queries, ws);
    if (!ScaledForDirectE4M3(task_queries, ws.k_panels)) return false;
    direct_queries = ConstMatrix(ws.k_panels, task_queries.rows,
                                 task_queries.cols, task_queries.cols);
    direct_weights = ws.scores + matmul_detail::kSkinnyRows * kKeyBlock;
    return true;
  }

  void Scores(const Rows& k, size_t j0, size_t cols, float* scores) const {
    RowScores(direct_queries, DirectRows(k), j0, cols, score_options, scores);
    if (HasNaNCodes(k, j0, cols)) {
      RowScores(queries, k, j0, cols, score_options, scores);
    }
  }

  void WeightsTimesValues(ConstMatrix p, const Rows& v, size_t j0, Matrix acc,
                          bool first, const RowPacer<internal::Fp8E4M3>* pacer,
                          size_t chunk) const {
    if (!ScaledForDirectE4M3(p, direct_weights)) {
      return FloatRows::WeightsTimesValues(p, v, j0, acc, first, pacer, chunk);
    }
    matmul_detail::DirectColumns<true>(
        ConstMatrix(direct_weights, p.rows, p.cols, p.cols),
        DirectRows(v).From(j0), acc, Accumulate(first), 0, acc.cols);
    AddNaNColumns(p, v, j0, acc);
  }
};

// Whether rows [j0, j0 + cols) of v lie in runs that start at even keys, as
// the pairs' P V needs: the tile's weights are paired from its first key on
// (paged blocks hold 16 or more).
template <typename T>
bool RunsStartEven(const internal::KVRows<T>& v, size_t j0, size_t cols) {
  for (size_t n = 0, run = 0; n < cols; n += run) {
    if (n % 2 != 0) return false;
    run = std::min(cols - n, v.RunFrom(j0 + n));
  }
  return true;
}

// PairRows: fp8 and bf16 rows (bf16_exact; Arm: bf16 rows) on bf16 pairs
// (Problem::decode_pairs, decode_pairs.h): the query rows as the kernels'
// operands in the K panels' scratch, each tile's weights in the V panels'
// (this path packs neither). P V goes by FloatRows where the pairs decline
// a tile's values or weights.
template <typename T>
struct PairRows : FloatRows<T> {
  static constexpr const char* kName =
      kArmTarget ? "bf16 pairs (BFDOT)" : "bf16 pairs (vdpbf16ps)";
  static constexpr KVType kType = internal::FormatOf<T>::type::kType;
  static constexpr size_t kWeightStride = kKeyBlock / 2;
  static_assert(matmul_detail::kSkinnyRows <= internal::kMaxPairRows, "fit");
  const uint32_t* pairs = nullptr;
  float factor = 0.0f;          // The products' power of two (QueryPairs).
  uint32_t* weights = nullptr;  // A tile's, rows kWeightStride apart.
  void* copy = nullptr;         // Past the weights: ZeroedWeightsTimesValues'.

  explicit PairRows(float scale) : FloatRows<T>(scale) {}

  bool Queries(ConstMatrix task_queries, const Workspace& ws) {
    FloatRows<T>::Queries(task_queries, ws);
    auto* operands = reinterpret_cast<uint32_t*>(ws.k_panels);
    factor =
        internal::QueryPairs(kType, task_queries.data, task_queries.rows,
                             task_queries.cols, task_queries.stride, operands);
    pairs = operands;
    weights = reinterpret_cast<uint32_t*>(ws.v_panels);
    copy = ws.v_panels + internal::kMaxPairRows * kWeightStride;
    return factor != 0.0f;
  }

  void Scores(const internal::KVRows<T>& k, size_t j0, size_t cols,
              float* scores) const {
    const float alpha = this->score_options.alpha * factor;
    for (size_t n = 0, run = 0; n < cols; n += run) {
      run = std::min(cols - n, k.RunFrom(j0 + n));
      internal::PairScores(kType, pairs, this->queries.rows,
                           PairBytes(k.Row(j0 + n)), k.stride * sizeof(T), run,
                           k.cols, alpha, scores + n, kKeyBlock);
    }
  }

  void WeightsTimesValues(ConstMatrix p, const internal::KVRows<T>& v,
                          size_t j0, Matrix acc, bool first,
                          const RowPacer<T>* pacer, size_t chunk) const {
    if (!PairProduct(p, v, j0, acc, first, pacer, chunk)) {
      FloatRows<T>::WeightsTimesValues(p, v, j0, acc, first, pacer, chunk);
    }
  }

  // Over a copy of the tile's values with the rows of ws.nonfinite zeroed.
  // The copy, p.cols x v.cols elements of at most 2 bytes, fits past the
  // weights in v_panels, which holds kKeyBlock x value_dim rounded up to
  // nr >= 16 floats on AVX-512. It declines exactly where the values read in
  // place would be declined, so a row that sees no such key keeps the bits
  // it has without them.
  void ZeroedWeightsTimesValues(ConstMatrix p, const internal::KVRows<T>& v,
                                size_t j0, const Workspace& ws, Matrix acc,
                                bool first) const {
    if (RunsStartEven(v, j0, p.cols)) {
      T* rows = static_cast<T*>(copy);
      for (size_t jj = 0; jj < p.cols; ++jj) {
        std::memcpy(rows + jj * v.cols, v.Row(j0 + jj), v.cols * sizeof(T));
      }
      for (size_t n = 0; n < ws.nonfinite.count; ++n) {
        std::memset(rows + ws.nonfinite.keys[n] * v.cols, 0,
                    v.cols * sizeof(T));
      }
      internal::KVRows<T> zeroed = v;
      zeroed.base = rows;
      zeroed.stride = v.cols;
      zeroed.first = 0;
      zeroed.MakeOneBlock();
      if (PairProduct(p, zeroed, 0, acc, first, nullptr, 0)) return;
    }
    FloatRows<T>::ZeroedWeightsTimesValues(p, v, j0, ws, acc, first);
  }

 private:
  static const uint8_t* PairBytes(const T* row) {
    return reinterpret_cast<const uint8_t*>(row);
  }

  // acc = P V or acc + P V on the pairs, true; false where they decline the
  // values or the weights (acc unchanged).
  bool PairProduct(ConstMatrix p, const internal::KVRows<T>& v, size_t j0,
                   Matrix acc, bool first, const RowPacer<T>* pacer,
                   size_t chunk) const {
    if (!RunsStartEven(v, j0, p.cols) ||
        !internal::WeightPairs(p.Row(0), p.rows, p.cols, p.stride, weights,
                               kWeightStride)) {
      return false;
    }
    if (first) {
      for (size_t r = 0; r < acc.rows; ++r) {
        std::fill_n(acc.Row(r), acc.cols, 0.0f);
      }
    }
    for (size_t n = 0, run = 0; n < p.cols; n += run) {
      run = std::min(p.cols - n, v.RunFrom(j0 + n));
      if (pacer != nullptr) {  // chunk is even: runs start at even keys.
        run = std::min(run, chunk);
        pacer->Reach(pacer->KeyPosition(j0 + n + run - 1) + kKeyBlock);
      }
      internal::PairWeightsTimesValues(kType, weights + n / 2, kWeightStride,
                                       p.rows, PairBytes(v.Row(j0 + n)),
                                       v.stride * sizeof(T), run, acc.cols,
                                       acc.Row(0), acc.stride);
    }
    return true;
  }
};

// Attends a task's few query rows (decode) to keys [j_begin, j_end) by
// `backend` (its Queries taken): packing tiles of K and V would not pay for
// itself, so K and V rows are read where they lie, as MatMul's skinny path
// does. Leaves the unnormalised outputs in acc (rows acc_stride apart) and
// the rows' softmax states in st; returns false if no key was in reach (acc
// left unwritten).
template <typename T, class Backend>
inline bool WalkFewRows(const Problem& pr, const QueryRows& t, size_t j_begin,
                        size_t j_end, float* acc, size_t acc_stride,
                        const RowStates& st, Workspace& ws,
                        const Backend& backend) {
  const size_t b = t.b, rows = t.rows, value_dim = pr.value_dim;
  const internal::KVRows<T> k = pr.Keys<T>(b, t.h0);
  const internal::KVRows<T> v = pr.Values<T>(b, t.h0);
  const size_t j_start = FirstKey(pr, b, t.Token(0), j_begin);
  const size_t j_stop = std::min(j_end, pr.mask.End(b, t.Token(rows - 1)));
  const hn::ScalableTag<float> d;
  // Rows from memory of the types it pays for are paced; others asked for
  // where PrefetchPagedRows says, a tile ahead.
  const bool paced = kPacedRows<T> && pr.rows_from_memory;
  const Pace pace = paced ? PaceOf(k) : Pace{0, PrefetchChunk(k)};
  const size_t chunk = pace.chunk;
  const RowPacer<T> pacer(k, v, j_start, j_stop, pace.distance);
  for (size_t j0 = j_start; j0 < j_stop; j0 += kKeyBlock) {
    const size_t cols = std::min(kKeyBlock, j_stop - j0);
    const size_t next = j0 + cols,
                 next_end = std::min(j_stop, next + kKeyBlock);
    // The scores chunk by chunk, each asking for rows ahead: the pacer's,
    // or its keys' V rows and the next tile's K rows as far.
    for (size_t n = 0; n < cols; n += chunk) {
      const size_t width = std::min(chunk, cols - n);
      if (paced) {
        pacer.Reach(pacer.KeyPosition(j0 + n + width - 1));
      } else if (chunk == kKeyBlock) {
        PrefetchPagedRows(k, next, next_end);
      } else {
        PrefetchPagedRows(k, std::min(next_end, next + n),
                          std::min(next_end, next + n + width));
        PrefetchPagedRows(v, j0 + n, j0 + n + width);
      }
      backend.Scores(k, j0 + n, width, ws.scores + n);
    }
    SoftmaxTile(pr, t, 0, rows, j0, cols, st, ws);
    const bool first = j0 == j_start;
    if (!first) RescaleRows(ws.corr, rows, acc, acc_stride, value_dim);
    if (!paced && chunk == kKeyBlock) PrefetchPagedRows(v, next, next_end);
    ws.nonfinite.count = 0;
    if (pr.mask.Classify(b, t.Token(0), t.Token(rows - 1) + 1, j0, j0 + cols) !=
        TileKind::kFull) {
      FindNonFiniteValues(d, v, j0, cols, ws.nonfinite);
    }
    const ConstMatrix p(ws.scores, rows, cols, kKeyBlock);
    const Matrix acc_rows(acc, rows, value_dim, acc_stride);
    if (ws.nonfinite.count == 0) {
      backend.WeightsTimesValues(p, v, j0, acc_rows, first,
                                 paced ? &pacer : nullptr, chunk);
    } else {
      backend.ZeroedWeightsTimesValues(p, v, j0, ws, acc_rows, first);
    }
    AddNonFiniteValues(pr, ws.nonfinite, v, t, 0, rows, j0, ws.scores, acc,
                       acc_stride);
  }
  return j_start < j_stop;
}

// Offers `take` the backends the call's arithmetic picks for T and a task of
// `rows` query rows, first choice first, FloatRows last, until it takes one
// (returns true).
template <typename T, class Take>
void OfferDecodeBackends(const Problem& pr, size_t rows, const Take& take) {
  if constexpr (int_dot_detail::kIntegerKeys<T>) {
    if (pr.integer_scores && take(IntegerRows<T>(pr.scale))) return;
  }
  if constexpr (internal::kTraitsOf<T>.bf16_exact && kPairTarget) {
    if (rows <= pr.decode_pair_rows && take(PairRows<T>(pr.scale))) return;
  }
  if constexpr (std::is_same_v<T, internal::Fp8E4M3>) {
    if (pr.direct_e4m3 && take(DirectE4M3Rows(pr.scale))) return;
  }
  take(FloatRows<T>(pr.scale));
}

// The backend AttendFewRows tries first for T and tasks of `rows` rows, as
// LastAttentionPlan names it.
template <typename T>
const char* DecodeBackendName(const Problem& pr, size_t rows) {
  const char* name = nullptr;
  OfferDecodeBackends<T>(pr, rows, [&](const auto& backend) {
    name = backend.kName;
    return true;
  });
  return name;
}

// WalkFewRows by the first backend that takes the task's queries.
template <typename T>
inline bool AttendFewRows(const Problem& pr, const QueryRows& t,
                          ConstMatrix queries, size_t j_begin, size_t j_end,
                          float* acc, size_t acc_stride, const RowStates& st,
                          Workspace& ws) {
  bool started = false;
  OfferDecodeBackends<T>(pr, queries.rows, [&](auto backend) {
    if (!backend.Queries(queries, ws)) return false;
    started =
        WalkFewRows<T>(pr, t, j_begin, j_end, acc, acc_stride, st, ws, backend);
    return true;
  });
  return started;
}

}  // namespace attention_detail
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_ATTENTION_DECODE_INL_H_
