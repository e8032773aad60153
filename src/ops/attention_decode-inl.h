// Per-target fused attention (attention-inl.h): decode, few query rows over
// long caches. Rows are read where they lie (paced or prefetched from
// memory), Q K^T and P V straight from the cache's rows (DotColumns,
// DirectColumns), or as integer scores (int_dot-inl.h) or bf16 pairs
// (decode_pairs.h) where the call's arithmetic says; E4M3 rows are read
// without a NaN test per vector, then scanned. AttendFewRows walks a task's
// keys.

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
  if constexpr (std::is_same_v<T, int8_t>) {
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
// block of a paged cache), int8 keys' scales applied to the products.
// With the queries quantized (kInt8: q8_0, q4_0 or int8 keys), by integer
// dot products.
template <typename T>
inline void TileScores(ConstMatrix queries,
                       const int_dot_detail::QuantizedQueries* quantized,
                       const internal::KVRows<T>& k, size_t j0, size_t cols,
                       const MatMulOptions& options, float* scores,
                       const float* direct_queries = nullptr) {
  using namespace matmul_detail;
  if constexpr (std::is_same_v<T, internal::Fp8E4M3>) {
    // The rows read as FiniteE4M3 (or DirectE4M3, with the queries times
    // its operand scale in direct_queries), then scanned where they are in
    // cache now (scanning first made decode from memory wait for the scan);
    // read again with the test where a NaN code is found.
    if (direct_queries != nullptr) {
      TileScores(
          ConstMatrix(direct_queries, queries.rows, queries.cols, queries.cols),
          nullptr, DirectRows(k), j0, cols, options, scores);
    } else {
      TileScores(queries, quantized, FiniteRows(k), j0, cols, options, scores);
    }
    if (!HasNaNCodes(k, j0, cols)) return;
  }
  if constexpr (int_dot_detail::kIntegerKeys<T>) {
    if (quantized != nullptr) {
      return int_dot_detail::Scores(*quantized, k, j0, cols, scores, kKeyBlock);
    }
  }
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
    if constexpr (std::is_same_v<T, int8_t>) {
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

// acc (+)= P V over value rows from j0 (P's columns), read where they lie,
// every row of acc seeing every key (a full tile, or one without NaN). E4M3
// rows are read as FiniteE4M3 (or DirectE4M3, P scaled into direct_weights
// where it is not null), then scanned (see TileScores); a NaN code makes its
// column of every row NaN, as P times it does on the tested path.
template <typename T>
HWY_INLINE void AddTileProduct(ConstMatrix p, const internal::KVRows<T>& v,
                               size_t j0, Matrix acc,
                               const MatMulOptions& options,
                               const RowPacer<T>* pacer,
                               float* direct_weights = nullptr) {
  using matmul_detail::DirectColumns;
  if constexpr (kPacedRows<T>) {
    if (pacer != nullptr) {
      const size_t position = pacer->KeyPosition(j0) + kKeyBlock;
      using Rows = internal::KVRows<T>;
      return DirectColumns<true>(
          p, PacedRows<Rows, T>{v.From(j0), pacer, position}, acc, options, 0,
          acc.cols);
    }
  }
  if constexpr (std::is_same_v<T, internal::Fp8E4M3>) {
    if (direct_weights != nullptr && ScaledForDirectE4M3(p, direct_weights)) {
      DirectColumns<true>(ConstMatrix(direct_weights, p.rows, p.cols, p.cols),
                          DirectRows(v).From(j0), acc, options, 0, acc.cols);
    } else {
      DirectColumns<true>(p, FiniteRows(v).From(j0), acc, options, 0, acc.cols);
    }
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
  } else {
    DirectColumns<true>(p, v.From(j0), acc, options, 0, acc.cols);
  }
}

template <typename T>
constexpr bool kFp8Rows = std::is_same_v<T, internal::Fp8E4M3> ||
                          std::is_same_v<T, internal::Fp8E5M2>;

// Rows whose products decode_pairs.h takes, and their KVType.
template <typename T>
constexpr bool kPairable = kFp8Rows<T> || std::is_same_v<T, BFloat16>;
template <typename T>
constexpr KVType kPairType =
    std::is_same_v<T, BFloat16>            ? KVType::kBF16
    : std::is_same_v<T, internal::Fp8E4M3> ? KVType::kFp8E4M3
                                           : KVType::kFp8E5M2;

// A row's elements as the bytes decode_pairs.h reads.
template <typename T>
const uint8_t* PairBytes(const T* row) {
  return reinterpret_cast<const uint8_t*>(row);
}

// A few-rows task's fp8 or bf16 products on bf16 pairs (Problem::decode_pairs):
// its query rows as the kernels' operands, and room for a tile's weights.
struct PairOperands {
  static constexpr size_t kWeightStride = kKeyBlock / 2;
  const uint32_t* queries = nullptr;  // Null: the float32 routes.
  float factor = 0.0f;          // The products' power of two (QueryPairs).
  uint32_t* weights = nullptr;  // A tile's, rows kWeightStride apart.

  // The queries' operands in `scratch`, none where they are not finite.
  static PairOperands For(KVType type, ConstMatrix queries, float* scratch,
                          float* weights) {
    PairOperands pair_ops;
    auto* pairs = reinterpret_cast<uint32_t*>(scratch);
    pair_ops.factor = internal::QueryPairs(type, queries.data, queries.rows,
                                           queries.cols, queries.stride, pairs);
    if (pair_ops.factor == 0.0f) return pair_ops;
    pair_ops.queries = pairs;
    pair_ops.weights = reinterpret_cast<uint32_t*>(weights);
    return pair_ops;
  }
};

// TileScores on the pairs (S = alpha Q K^T of the task's rows, kKeyBlock
// apart), true; false (S untouched) where the task has no pair operands.
template <typename T>
bool PairTileScores(const PairOperands& pair_ops, size_t rows,
                    const internal::KVRows<T>& k, size_t j0, size_t cols,
                    float alpha, float* scores) {
  if constexpr (kPairable<T> && kPairTarget) {
    if (pair_ops.queries == nullptr) return false;
    for (size_t n = 0, run = 0; n < cols; n += run) {
      run = std::min(cols - n, k.RunFrom(j0 + n));
      internal::PairScores(kPairType<T>, pair_ops.queries, rows,
                           PairBytes(k.Row(j0 + n)), k.stride * sizeof(T), run,
                           k.cols, alpha * pair_ops.factor, scores + n,
                           kKeyBlock);
    }
    return true;
  }
  return false;
}

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

// AddTileProduct on the pairs (acc = P V, or acc + P V unless `first`),
// true; false where they decline the values (acc unchanged). A pacer, where
// given, asks for rows ahead before each `chunk` of keys.
template <typename T>
bool PairTileProduct(const PairOperands& pair_ops, ConstMatrix p,
                     const internal::KVRows<T>& v, size_t j0, Matrix acc,
                     bool first, const RowPacer<T>* pacer, size_t chunk) {
  if constexpr (kPairable<T> && kPairTarget) {
    if (pair_ops.queries == nullptr || !RunsStartEven(v, j0, p.cols))
      return false;
    if (!internal::WeightPairs(p.Row(0), p.rows, p.cols, p.stride,
                               pair_ops.weights, PairOperands::kWeightStride)) {
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
      internal::PairWeightsTimesValues(
          kPairType<T>, pair_ops.weights + n / 2, PairOperands::kWeightStride,
          p.rows, PairBytes(v.Row(j0 + n)), v.stride * sizeof(T), run, acc.cols,
          acc.Row(0), acc.stride);
    }
    return true;
  }
  return false;
}

// PairTileProduct over a copy of the tile's values with the rows listed in
// `nonfinite` zeroed, where a masked key's P = 0 times such a row would not
// be 0; true where the pairs took it. The copy, p.cols x v.cols elements of
// at most 2 bytes, fits in `scratch`: v_panels past the weights, which holds
// kKeyBlock x value_dim rounded up to nr >= 16 floats on AVX-512.
// It declines exactly where PairTileProduct would decline the values read in
// place, so a row that sees no such key keeps the bits it has without them.
template <typename T>
bool PairZeroedTileProduct(const PairOperands& pair_ops, ConstMatrix p,
                           const internal::KVRows<T>& v, size_t j0,
                           const NonFiniteValues& nonfinite, void* scratch,
                           Matrix acc, bool first) {
  if constexpr (kPairable<T> && kPairTarget) {
    if (pair_ops.queries == nullptr || !RunsStartEven(v, j0, p.cols))
      return false;
    T* copy = static_cast<T*>(scratch);
    for (size_t jj = 0; jj < p.cols; ++jj) {
      std::memcpy(copy + jj * v.cols, v.Row(j0 + jj), v.cols * sizeof(T));
    }
    for (size_t n = 0; n < nonfinite.count; ++n) {
      std::memset(copy + nonfinite.keys[n] * v.cols, 0, v.cols * sizeof(T));
    }
    internal::KVRows<T> rows = v;
    rows.base = copy;
    rows.stride = v.cols;
    rows.first = 0;
    rows.MakeOneBlock();
    return PairTileProduct<T>(pair_ops, p, rows, 0, acc, first, nullptr, 0);
  }
  return false;
}

// Attends a task's few query rows (decode; `queries`, one row each) to keys
// [j_begin, j_end): packing tiles of K and V would not pay for itself, so K
// and V rows are read where they lie, as MatMul's skinny path does. Leaves
// the unnormalised outputs in acc (rows acc_stride apart) and the rows'
// softmax states in st; returns false if no key was in reach (acc left
// unwritten).
template <typename T>
inline bool AttendFewRows(const Problem& pr, const QueryRows& t,
                          ConstMatrix queries, size_t j_begin, size_t j_end,
                          float* acc, size_t acc_stride, const RowStates& st,
                          Workspace& ws) {
  using namespace matmul_detail;
  const size_t b = t.b, rows = t.rows, value_dim = pr.value_dim;
  const internal::KVRows<T> k = pr.Keys<T>(b, t.h0);
  const internal::KVRows<T> v = pr.Values<T>(b, t.h0);
  MatMulOptions scores_options;
  scores_options.transpose_b = Transpose::kYes;
  scores_options.alpha = pr.scale;
  const size_t j_start = FirstKey(pr, b, t.Token(0), j_begin);
  const size_t j_stop = std::min(j_end, pr.mask.End(b, t.Token(rows - 1)));
  const hn::ScalableTag<float> d;
  // kInt8: the rows quantized once for every tile, in the K panels' scratch
  // (this path packs none; kKeyBlock head_dim floats hold them); float32
  // where Quantize declines them.
  using int_dot_detail::QuantizedQueries;
  static_assert(kSkinnyRows <= QuantizedQueries::kMaxRows, "rows fit");
  std::optional<QuantizedQueries> quantized;
  if constexpr (int_dot_detail::kIntegerKeys<T>) {
    if (pr.integer_scores) {
      quantized = QuantizedQueries::For<T>(ws.k_panels, queries.cols);
      if (!int_dot_detail::Quantize(queries, pr.scale, *quantized)) {
        quantized.reset();
      }
    }
  }
  // E4M3 rows read as DirectE4M3 (Problem::direct_e4m3): the queries times
  // its operand scale in the K panels' scratch (this path packs none), each
  // tile's weights in the rows of S past the task's.
  // fp8 and bf16 rows on bf16 pairs (Problem::decode_pairs) likewise, each
  // tile's weights in the V panels' scratch (this path packs none either).
  PairOperands pair_ops;
  if constexpr (kPairable<T>) {
    if (pr.decode_pairs && rows <= internal::kMaxPairRows) {
      pair_ops =
          PairOperands::For(kPairType<T>, queries, ws.k_panels, ws.v_panels);
    }
  }
  const float* direct_queries = nullptr;
  float* direct_weights = nullptr;
  if constexpr (std::is_same_v<T, internal::Fp8E4M3>) {
    static_assert(2 * kSkinnyRows <= kQueryBlock, "S holds both");
    if (pair_ops.queries == nullptr && pr.direct_e4m3 &&
        ScaledForDirectE4M3(queries, ws.k_panels)) {
      direct_queries = ws.k_panels;
      direct_weights = ws.scores + kSkinnyRows * kKeyBlock;
    }
  }
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
    // or its keys' V rows and the next tile's K rows as far (each score is
    // its own dot product: the chunks do not change its bits).
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
      if (!PairTileScores(pair_ops, rows, k, j0 + n, width, pr.scale,
                          ws.scores + n)) {
        TileScores(queries, quantized ? &*quantized : nullptr, k, j0 + n, width,
                   scores_options, ws.scores + n, direct_queries);
      }
    }
    SoftmaxTile(pr, t, 0, rows, j0, cols, st, ws);
    const bool first = j0 == j_start;
    if (!first) RescaleRows(ws.corr, rows, acc, acc_stride, value_dim);
    MatMulOptions accumulate;
    accumulate.beta = first ? 0.0f : 1.0f;
    if (!paced && chunk == kKeyBlock) PrefetchPagedRows(v, next, next_end);
    ws.nonfinite.count = 0;
    if (pr.mask.Classify(b, t.Token(0), t.Token(rows - 1) + 1, j0, j0 + cols) !=
        TileKind::kFull) {
      FindNonFiniteValues(d, v, j0, cols, ws.nonfinite);
    }
    const ConstMatrix p(ws.scores, rows, cols, kKeyBlock);
    const Matrix acc_rows(acc, rows, value_dim, acc_stride);
    if (ws.nonfinite.count == 0) {
      if (!PairTileProduct(pair_ops, p, v, j0, acc_rows, first,
                           paced ? &pacer : nullptr, chunk)) {
        AddTileProduct(p, v, j0, acc_rows, accumulate, paced ? &pacer : nullptr,
                       direct_weights);
      }
    } else if (PairZeroedTileProduct(
                   pair_ops, p, v, j0, ws.nonfinite,
                   ws.v_panels +
                       internal::kMaxPairRows * PairOperands::kWeightStride,
                   acc_rows, first)) {
      // The pairs took it, the copy past the weights in v_panels.
    } else if constexpr (std::is_same_v<T, int8_t>) {  // Scales zeroed.
      for (size_t jj = 0; jj < cols; ++jj) ws.scales[jj] = v.Scale(j0 + jj);
      for (size_t n = 0; n < ws.nonfinite.count; ++n) {
        ws.scales[ws.nonfinite.keys[n]] = 0.0f;
      }
      DirectColumns<true>(p, Int8TileRows{v.From(j0), ws.scales}, acc_rows,
                          accumulate, 0, value_dim);
    } else if constexpr (internal::kBlockValues<T> > 1) {
      // Zero blocks in the V panels' scratch, which this path packs not.
      T* zeros = reinterpret_cast<T*>(ws.v_panels);
      std::memset(zeros, 0, value_dim / internal::kQuantBlock * sizeof(T));
      DirectColumns<true>(p, BlockTileRows<T>{v.From(j0), &ws.nonfinite, zeros},
                          acc_rows, accumulate, 0, value_dim);
    } else {  // A float copy with those rows zeroed.
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
      for (size_t n = 0; n < ws.nonfinite.count; ++n) {
        std::fill_n(ws.v_panels + ws.nonfinite.keys[n] * value_dim, value_dim,
                    0.0f);
      }
      DirectColumns(p, ConstMatrix(ws.v_panels, cols, value_dim, value_dim),
                    acc_rows, accumulate, 0, value_dim);
    }
    AddNonFiniteValues(pr, ws.nonfinite, v, t, 0, rows, j0, ws.scores, acc,
                       acc_stride);
  }
  return j_start < j_stop;
}

}  // namespace attention_detail
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_ATTENTION_DECODE_INL_H_
