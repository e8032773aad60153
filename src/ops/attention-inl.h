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

#if defined(SIMDATTN_SRC_OPS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_ATTENTION_INL_H_
#undef SIMDATTN_SRC_OPS_ATTENTION_INL_H_
#else
#define SIMDATTN_SRC_OPS_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "simdattn/kernels.h"
#include "simdattn/random.h"
#include "src/common/element.h"
#include "src/common/parallel.h"
#include "src/common/scratch.h"
#include "src/ops/amx_tiles.h"
#include "src/ops/bf16-inl.h"
#include "src/ops/decode_pairs.h"
#include "src/ops/dropout-inl.h"
#include "src/ops/exp-inl.h"
#include "src/ops/int_dot-inl.h"
#include "src/ops/kv_rows.h"
#include "src/ops/lanes-inl.h"
#include "src/ops/mask-inl.h"
#include "src/ops/mask.h"
#include "src/ops/matmul-inl.h"
#include "src/ops/target_family.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace attention_detail {

using internal::TileKind;

// Query rows per tile of scores: whole micro-kernel tiles.
constexpr size_t kQueryBlock = 8 * matmul_detail::kRows;
// Query rows per task: each packed tile of K and V serves this many rows
// (packing K^T is a transpose), few enough that a causal (1, 12, 1024, 64)
// problem still has ~70 tasks to balance.
constexpr size_t kTaskRows = 4 * kQueryBlock;
// Keys per tile, a multiple of kDropoutGroup so that a tile draws whole
// column groups of the dropout bits. S, the K and V panels and the
// accumulator take ~200 KiB at head_dim 64, in L2. Longer tiles amortise
// each block's fixed costs (P V's accumulator loads and stores, the
// rescaling, the per-row softmax bookkeeping; bench/RESULTS.md).
constexpr size_t kKeyBlock = 256;
static_assert(kKeyBlock % kDropoutGroup == 0, "tiles must align to groups");
// Fewer tasks than this (e.g. decode with small batch x heads) split the
// keys, in chunks of at least kMinSplitKeys, so that every thread of a
// 16-64-core machine gets work. The split follows the shapes alone, never
// the thread count, so results do not depend on it; at 1-2 threads the
// extra partials cost nothing measurable (bench/RESULTS.md).
constexpr size_t kMinTasks = 64;
constexpr size_t kMinSplitKeys = kKeyBlock;
// A paced decode walk (RowPacer) asks for the rows about 8 KiB ahead of
// those it reads, some 8 rows at a time, and scores 4 KiB of K rows between
// askings: on Zen 5, 4-8 KiB ahead read alike; 12 KiB ahead with chunks of
// 8 KiB ran 10% slower (grouped bf16 from memory).
constexpr size_t kPaceDistanceBytes = 8192;
constexpr size_t kPaceBatch = 8;
constexpr size_t kPaceChunkBytes = 4096;
// bf16 pairs (AMX tiles or vdpbf16ps: bf16 arithmetic) serve the AVX-512
// targets: the query blocks are whole tiles of rows there.
constexpr bool kPairTarget = (HWY_TARGET & internal::kAvx512Targets) != 0;
static_assert(!kPairTarget || kQueryBlock % internal::kAmxTileRows == 0,
              "pair products cover whole query blocks");
constexpr float kInf = std::numeric_limits<float>::infinity();

// Everything constant over one call but the keys and values, whose element
// type the functions below take as a template parameter.
struct Problem {
  ConstTensor4 q;
  internal::QueryLayout layout;
  const internal::KVSource* kv;
  size_t value_dim;
  Tensor4 out;
  float scale;
  internal::MaskModel mask;
  mask_detail::Softcap softcap;
  bool dropout;
  dropout_detail::Params dropout_params;
  size_t group;                // Query heads per key/value head.
  bool round_weights = false;  // P rounded to bf16 before P V.
  // Q K^T and P V of the dense path on bf16 pairs with this kernel (AMX or
  // vdpbf16ps; kFallback: float panels), whose packing rounds Q, K
  // and V to bf16 (round_weights too).
  internal::BFloat16DotKernelKind pair_kernel =
      internal::BFloat16DotKernelKind::kFallback;
  bool pairs() const {
    return pair_kernel != internal::BFloat16DotKernelKind::kFallback;
  }
  // bf16 with Q, K and V as given (not yet rounded): every task takes the
  // dense path, which rounds them while packing (the few-rows path would
  // read them unrounded).
  bool round_inputs = false;
  // kInt8: the few-rows path's scores over q8_0, q4_0 and int8 keys as integer
  // dot products with the quantized query rows (int_dot-inl.h).
  bool integer_scores = false;
  // The few-rows walk's rows come from memory (kPacedRows).
  bool rows_from_memory = false;
  // The few-rows walk reads E4M3 rows as DirectE4M3 (matmul-inl.h).
  bool direct_e4m3 = false;
  // The few-rows walk's fp8 and bf16 products under kBFloat16 on bf16 pairs
  // (decode_pairs.h), for tasks of up to kMaxPairRows rows.
  bool decode_pairs = false;

  template <typename T>
  internal::KVRows<T> Keys(size_t b, size_t h) const {
    return kv->Rows<T>(kv->keys, b, h / group);
  }
  template <typename T>
  internal::KVRows<T> Values(size_t b, size_t h) const {
    return kv->Rows<T>(kv->values, b, h / group);
  }
};

// The query rows of one task: `heads` query heads from h0, all sharing one
// key/value head, times the tokens from i0, stacked token-major (row r is
// head h0 + r % heads of token i0 + r / heads). The heads of a group thus
// see each tile of K and V together, read once, and the mask's limits,
// which depend on the token only, still grow with the row.
struct QueryRows {
  size_t b, h0, heads, i0, rows;

  // One head, the common case, divides nothing.
  size_t Head(size_t r) const { return heads == 1 ? h0 : h0 + r % heads; }
  size_t Token(size_t r) const { return i0 + (heads == 1 ? r : r / heads); }
};

// The running softmax state of a block's rows: max and sum of exp(s - max)
// per row, and whether a score was NaN (as 0 or 1: everything here lives in
// float scratch).
struct RowStates {
  float* max;
  float* sum;
  float* nan;
};

// The keys of a partial tile (mask.h's TileKind) whose value row holds a
// non-finite element: there, and only there, a masked key's P = 0 times V
// would not be 0. Such rows are zeroed in what the product reads, and each
// row that sees the key gets P V added on its own (AddNonFiniteValues).
struct NonFiniteValues {
  uint32_t* keys;  // Offsets in the tile, up to kKeyBlock.
  size_t count;
};

// Lists the rows [j0, j0 + cols) of v with a non-finite element (for int8,
// a non-finite scale: the elements are finite).
template <class D, typename T>
HWY_INLINE void FindNonFiniteValues(D d, const internal::KVRows<T>& v,
                                    size_t j0, size_t cols,
                                    NonFiniteValues& out) {
  using matmul_detail::LoadRow;
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  out.count = 0;
  for (size_t jj = 0; jj < cols; ++jj) {
    bool any;
    if constexpr (std::is_same_v<T, int8_t>) {
      any = !std::isfinite(v.Scale(j0 + jj));
    } else {
      auto bad = hn::FirstN(d, 0);
      size_t c = 0;
      for (; c + N <= v.cols; c += N) {
        bad = hn::Or(bad, hn::Not(hn::IsFinite(LoadRow(d, v, j0 + jj, c))));
      }
      any = !hn::AllFalse(d, bad);
      for (; c < v.cols; ++c) {
        any = any || !std::isfinite(hn::GetLane(LoadRow(d1, v, j0 + jj, c)));
      }
    }
    if (any) out.keys[out.count++] = static_cast<uint32_t>(jj);
  }
}

// m0..m3 = their maxima with the bytes of p[0, n), each OR 0x80: four
// vectors a step (a step per vector and a loop per 128-byte row took as long
// as the maxima themselves).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void MaxOfBytesOr80(D d8, const uint8_t* HWY_RESTRICT p, size_t n,
                               V& m0, V& m1, V& m2, V& m3) {
  const size_t N = hn::Lanes(d8);
  const V sign = hn::Set(d8, 0x80);
  size_t c = 0;
  for (; c + 4 * N <= n; c += 4 * N) {
    m0 = hn::Max(m0, hn::Or(hn::LoadU(d8, p + c), sign));
    m1 = hn::Max(m1, hn::Or(hn::LoadU(d8, p + c + N), sign));
    m2 = hn::Max(m2, hn::Or(hn::LoadU(d8, p + c + 2 * N), sign));
    m3 = hn::Max(m3, hn::Or(hn::LoadU(d8, p + c + 3 * N), sign));
  }
  for (; c + N <= n; c += N) {
    m0 = hn::Max(m0, hn::Or(hn::LoadU(d8, p + c), sign));
  }
  if (c < n) m1 = hn::Max(m1, hn::Or(LoadTail(d8, p + c, n - c), sign));
}

// Whether rows [j0, j0 + cols) of an E4M3 cache hold a NaN code
// (S.1111.111: a byte b with b | 0x80 == 0xFF): two vector ops per vector of
// bytes, where LoadB's test takes three per vector of floats, over each run
// of rows as one span where they lie back to back. Decode reads a tile's
// rows as FiniteE4M3 or DirectE4M3, then scans them (TileScores,
// AddTileProduct).
HWY_INLINE bool HasNaNCodes(const internal::KVRows<internal::Fp8E4M3>& rows,
                            size_t j0, size_t cols) {
  const hn::ScalableTag<uint8_t> d8;
  auto m0 = hn::Zero(d8), m1 = m0, m2 = m0, m3 = m0;
  for (size_t j = j0, run; j < j0 + cols; j += run) {
    run = std::min(j0 + cols - j, rows.RunFrom(j));
    const uint8_t* row = &rows.Row(j)->bits;
    if (rows.stride == rows.cols) {
      MaxOfBytesOr80(d8, row, run * rows.cols, m0, m1, m2, m3);
      continue;
    }
    for (size_t r = 0; r < run; ++r, row += rows.stride) {
      MaxOfBytesOr80(d8, row, rows.cols, m0, m1, m2, m3);
    }
  }
  const auto most = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  return !hn::AllFalse(d8, hn::Eq(most, hn::Set(d8, 0xFF)));
}

// E4M3 rows as FiniteE4M3: read without LoadB's NaN test, which
// HasNaNCodes then stands in for.
inline internal::KVRows<matmul_detail::FiniteE4M3> FiniteRows(
    const internal::KVRows<internal::Fp8E4M3>& rows) {
  return rows.As<matmul_detail::FiniteE4M3>();
}

// As FiniteE4M3, read as DirectE4M3: the products' operands must carry
// kOperandScale (ScaledForDirectE4M3).
inline internal::KVRows<matmul_detail::DirectE4M3> DirectRows(
    const internal::KVRows<internal::Fp8E4M3>& rows) {
  return rows.As<matmul_detail::DirectE4M3>();
}

// m's rows times DirectE4M3's kOperandScale (2^112) into `out`, dense (m.cols
// apart); false where an element's magnitude is 2^16 or more (its products
// could overflow) or NaN: the float16 route then stands in, with the same
// results.
HWY_INLINE bool ScaledForDirectE4M3(ConstMatrix m, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto factor =
      hn::Set(d, matmul_detail::kOperandScale<matmul_detail::DirectE4M3>);
  const auto bound = hn::Set(d, 65536.0f);
  auto in_range = hn::Eq(bound, bound);  // Every lane.
  for (size_t r = 0; r < m.rows; ++r) {
    for (size_t c = 0; c < m.cols; c += N) {
      const size_t count = std::min(N, m.cols - c);
      const auto x = LoadTail(d, m.Row(r) + c, count);
      in_range = hn::And(in_range, hn::Lt(hn::Abs(x), bound));
      StoreTail(hn::Mul(x, factor), d, out + r * m.cols + c, count);
    }
  }
  return hn::AllTrue(d, in_range);
}

// acc[r] += P[r][jj] V[j0 + jj] for the listed keys and the rows r (row
// r0 + r of the task) that see them; P's rows are kKeyBlock apart.
template <typename T>
inline void AddNonFiniteValues(const Problem& pr, const NonFiniteValues& nf,
                               const internal::KVRows<T>& v, const QueryRows& t,
                               size_t r0, size_t rows, size_t j0,
                               const float* p, float* acc, size_t acc_stride) {
  const hn::CappedTag<float, 1> d1;
  for (size_t n = 0; n < nf.count; ++n) {
    const size_t jj = nf.keys[n];
    for (size_t r = 0; r < rows; ++r) {
      if (!pr.mask.Visible(t.b, t.Head(r0 + r), t.Token(r0 + r), j0 + jj)) {
        continue;
      }
      const float weight = p[r * kKeyBlock + jj];
      float* out = acc + r * acc_stride;
      for (size_t c = 0; c < v.cols; ++c) {
        out[c] +=
            weight * hn::GetLane(matmul_detail::LoadRow(d1, v, j0 + jj, c));
      }
    }
  }
}

// One task's scratch, carved from a float buffer of Floats(...) floats.
struct Workspace {
  float* scores;    // kQueryBlock x kKeyBlock: S, then P.
  float* k_panels;  // Panels of K_tile^T: head_dim rows x nr each.
  float* v_panels;  // Panels of V_tile: kKeyBlock rows x nr each.
  float* corr;      // kQueryBlock accumulator corrections.
  float* additive;  // kKeyBlock: one row's additive mask, in bounds.
  uint8_t* masked;  // kKeyBlock bytes: one row's boolean mask.
  NonFiniteValues nonfinite;
  float* scales;  // kKeyBlock: an int8 tile's value scales (few-row path).

  static size_t Floats(size_t nr, size_t head_dim, size_t value_dim) {
    return kQueryBlock * kKeyBlock +
           hwy::DivCeil(kKeyBlock, nr) * nr * head_dim +
           kKeyBlock * hwy::DivCeil(value_dim, nr) * nr + kQueryBlock +
           kKeyBlock + kKeyBlock / sizeof(float) + kKeyBlock + kKeyBlock +
           kMaxLanes;
  }
  Workspace(float* p, size_t nr, size_t head_dim, size_t value_dim) {
    scores = p;
    k_panels = scores + kQueryBlock * kKeyBlock;
    v_panels = k_panels + hwy::DivCeil(kKeyBlock, nr) * nr * head_dim;
    corr = v_panels + kKeyBlock * hwy::DivCeil(value_dim, nr) * nr;
    additive = corr + kQueryBlock;
    masked = reinterpret_cast<uint8_t*>(additive + kKeyBlock);
    nonfinite.keys =
        reinterpret_cast<uint32_t*>(additive + kKeyBlock + kKeyBlock / 4);
    scales = additive + 2 * kKeyBlock + kKeyBlock / 4;
  }
};

// One task's bf16 pairs (amx_tiles.h's layouts), carved from a
// float buffer of Floats(...) floats: Q's rows as A, the tile's K^T and V
// as B, P as A, and P V's product.
struct PairWorkspace {
  static constexpr size_t kTile = internal::kAmxTileRows;
  static constexpr size_t kKeyPairs = kKeyBlock / 2;
  internal::BFloat16DotKernelKind kernel;  // AMX or vdpbf16ps.
  size_t head_pairs, value_cols;
  uint32_t* q;  // kTaskRows x head_pairs.
  uint32_t* k;  // head_pairs x kKeyBlock.
  uint32_t* v;  // kKeyPairs x value_cols.
  uint32_t* p;  // kQueryBlock x kKeyPairs.
  float* pv;    // kQueryBlock x value_cols.
  // KeyValuePairs' scratch: 16 keys' pairs (kTile x head_pairs), and two
  // rows widened to floats (RowFloats each). Every region is a multiple of
  // 16 floats from the task's 64-byte aligned scratch, so lo and hi take
  // FloatRow's aligned vector stores.
  uint32_t* key_rows;
  float *lo, *hi;

  static size_t HeadPairs(size_t head_dim) {
    return hwy::RoundUpTo(hwy::DivCeil(head_dim, 2), internal::kAmxTilePairs);
  }
  static size_t RowFloats(size_t head_dim, size_t value_dim) {
    return hwy::RoundUpTo(std::max(head_dim, value_dim), kTile);
  }
  static size_t Floats(size_t head_dim, size_t value_dim) {
    const size_t hp = HeadPairs(head_dim),
                 vc = hwy::RoundUpTo(value_dim, kTile);
    return kTaskRows * hp + hp * kKeyBlock + kKeyPairs * vc +
           kQueryBlock * kKeyPairs + kQueryBlock * vc + kTile * hp +
           2 * RowFloats(head_dim, value_dim);
  }
  PairWorkspace(internal::BFloat16DotKernelKind pair_kernel, float* base,
                size_t head_dim, size_t value_dim)
      : kernel(pair_kernel),
        head_pairs(HeadPairs(head_dim)),
        value_cols(hwy::RoundUpTo(value_dim, kTile)) {
    q = reinterpret_cast<uint32_t*>(base);
    k = q + kTaskRows * head_pairs;
    v = k + head_pairs * kKeyBlock;
    p = v + kKeyPairs * value_cols;
    pv = reinterpret_cast<float*>(p + kQueryBlock * kKeyPairs);
    key_rows = reinterpret_cast<uint32_t*>(pv + kQueryBlock * value_cols);
    lo = reinterpret_cast<float*>(key_rows + kTile * head_pairs);
    hi = lo + RowFloats(head_dim, value_dim);
  }
};

// The int8 value rows of a tile with the tile's scales from a copy, in
// which those of non-finite rows are 0: the products are those of the rows
// read in place, and a masked non-finite row adds exactly nothing.
struct Int8TileRows {
  internal::KVRows<int8_t> rows;  // From the tile's first key.
  const float* scales;
  const int8_t* Row(size_t t) const { return rows.Row(t); }
  float Scale(size_t t) const { return scales[t]; }
};

// The block value rows (q8_0, q4_0) of a tile, those of non-finite rows
// replaced by a row of zero blocks (d 0, codes 0): RowsTimesB's
// products of the rows read in place, and a masked non-finite row adds
// exactly what a row of zeros adds (nothing), as int8's zeroed scales do.
template <typename T>
struct BlockTileRows {
  internal::KVRows<T> rows;  // From the tile's first key.
  const NonFiniteValues* nonfinite;
  const T* zeros;
  const T* Row(size_t t) const {
    for (size_t n = 0; n < nonfinite->count; ++n) {
      if (nonfinite->keys[n] == t) return zeros;
    }
    return rows.Row(t);
  }
};

// Masks a row of the tile in place (columns [0, cols) are keys j0..; those
// outside [begin, limit) are masked) and applies the score terms; returns
// its max and sets *nan if an unmasked score is NaN. Reads S from begin's
// vector on. Rows of S and the mask copies have kKeyBlock entries, a
// multiple of the vector length: whole vectors stay inside.
template <bool kAdditive, bool kBoolean, class D>
HWY_INLINE float MaskRow(D d, const Problem& pr,
                         const internal::RowMasks& masks, float* srow,
                         size_t begin, size_t limit, bool* nan) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const bool terms = pr.mask.HasScoreTerms();
  V vmax = hn::Set(d, -kInf);
  auto any_nan = hn::FirstN(d, 0);
  for (size_t j = begin - begin % N; j < limit; j += N) {
    V s = hn::LoadU(d, srow + j);
    const bool whole = j >= begin && j + N <= limit;
    if (kAdditive || kBoolean || terms || !whole) {
      s = terms ? mask_detail::ScoresWithTerms<kAdditive, kBoolean>(
                      d, pr.softcap, s, masks, j)
                : mask_detail::MaskedScores<kAdditive, kBoolean, false>(
                      d, hn::Set(d, 1.0f), s, masks, j);
      // Lanes outside are masked (past cols, S was never written).
      if (!whole) {
        s = hn::IfThenElse(mask_detail::LanesBetween(d, j, begin, limit), s,
                           hn::Set(d, -kInf));
      }
      hn::StoreU(s, d, srow + j);
    }
    any_nan = hn::Or(any_nan, hn::IsNaN(s));
    vmax = hn::Max(vmax, s);
  }
  if (!hn::AllFalse(d, any_nan)) *nan = true;
  return hn::GetLane(hn::MaxOfLanes(d, vmax));
}

// Row i of item b's boolean mask over keys j0 + [0, kKeyBlock) in
// ws.masked (masks.boolean's copy there, if any): its draft tree hides the
// new tokens its bits do not show. Out of line: trees are rare.
inline HWY_NOINLINE const uint8_t* TreeRowMask(const Problem& pr, Workspace& ws,
                                               const internal::RowMasks& masks,
                                               size_t b, size_t i, size_t j0) {
  if (masks.boolean == nullptr) {
    std::fill(ws.masked, ws.masked + kKeyBlock, uint8_t{0});
  }
  const size_t end = std::min(j0 + kKeyBlock, pr.mask.End(b, i));
  for (size_t j = std::max(j0, pr.mask.Position(b, 0)); j < end; ++j) {
    if (!pr.mask.TreeSees(b, i, j)) ws.masked[j - j0] = 1;
  }
  return ws.masked;
}

// MaskRow for row i of (b, h) over keys j0 + [0, cols): the row's element
// masks are copied into the workspace, in bounds for whole vectors, and its
// ALiBi position made relative to j0.
template <class D>
HWY_INLINE float MaskTileRow(D d, const Problem& pr, Workspace& ws, float* srow,
                             size_t b, size_t h, size_t i, size_t j0,
                             size_t cols, size_t begin, size_t limit,
                             bool* nan) {
  internal::RowMasks masks = pr.mask.Row(b, h, i);
  masks.position -= static_cast<float>(j0);
  if (masks.additive != nullptr) {
    std::memcpy(ws.additive, masks.additive + j0, cols * sizeof(float));
    std::fill(ws.additive + cols, ws.additive + kKeyBlock, 0.0f);
    masks.additive = ws.additive;
  }
  if (masks.boolean != nullptr) {
    std::memcpy(ws.masked, masks.boolean + j0, cols);
    std::fill(ws.masked + cols, ws.masked + kKeyBlock, uint8_t{0});
    masks.boolean = ws.masked;
  }
  if (pr.mask.HasTree(b)) masks.boolean = TreeRowMask(pr, ws, masks, b, i, j0);
  if (masks.additive != nullptr) {
    return masks.boolean != nullptr
               ? MaskRow<true, true>(d, pr, masks, srow, begin, limit, nan)
               : MaskRow<true, false>(d, pr, masks, srow, begin, limit, nan);
  }
  return masks.boolean != nullptr
             ? MaskRow<false, true>(d, pr, masks, srow, begin, limit, nan)
             : MaskRow<false, false>(d, pr, masks, srow, begin, limit, nan);
}

// P = exp(S - max) over the vectors of columns [from, limit) (from a
// multiple of the vector length), returning their sum.
template <class D>
HWY_INLINE float ExpRow(D d, float* srow, size_t from, size_t limit,
                        float row_max) {
  const size_t N = hn::Lanes(d);
  const auto vmax = hn::Set(d, row_max);
  auto sum = hn::Zero(d);
  for (size_t j = from; j < limit; j += N) {
    // Masked lanes hold -inf: exp gives 0.
    const auto e =
        ExpNonPositiveFlushed(d, hn::Sub(hn::LoadU(d, srow + j), vmax));
    hn::StoreU(e, d, srow + j);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// Online softmax and dropout over the tile's scores S (rows x cols, rows
// kKeyBlock apart) of the task's rows r0.., keys j0..: S becomes P, the row
// states are updated and ws.corr[r] gets the factor that rescales row r's
// accumulator.
inline void SoftmaxTile(const Problem& pr, const QueryRows& t, size_t r0,
                        size_t rows, size_t j0, size_t cols,
                        const RowStates& st, Workspace& ws) {
  const hn::ScalableTag<float> d;
  const size_t b = t.b;
  for (size_t r = 0; r < rows; ++r) {
    const size_t i = t.Token(r0 + r), h = t.Head(r0 + r);
    float* srow = ws.scores + r * kKeyBlock;
    const size_t row_limit = pr.mask.End(b, i);
    const size_t row_begin = pr.mask.Begin(b, i);
    const size_t limit = row_limit <= j0 ? 0 : std::min(cols, row_limit - j0);
    const size_t begin = row_begin <= j0 ? 0 : std::min(cols, row_begin - j0);
    const size_t from = begin - begin % hn::Lanes(d);
    ws.corr[r] = 1.0f;
    bool nan = false;
    const float tile_max = begin >= limit
                               ? -kInf
                               : MaskTileRow(d, pr, ws, srow, b, h, i, j0, cols,
                                             begin, limit, &nan);
    if (nan) st.nan[r] = 1.0f;
    const float new_max = std::max(st.max[r], tile_max);
    if (new_max == -kInf) {  // Nothing unmasked yet: P = 0.
      std::fill(srow, srow + cols, 0.0f);
      continue;
    }
    if (new_max == kInf) st.nan[r] = 1.0f;  // inf - inf: as PyTorch.
    float sum = 0.0f;
    if (begin < limit) {
      sum = ExpRow(d, srow, from, limit, new_max);
      std::fill(srow, srow + from, 0.0f);
      std::fill(srow + limit, srow + cols, 0.0f);
    } else {
      std::fill(srow, srow + cols, 0.0f);
    }
    ws.corr[r] = std::exp(st.max[r] - new_max);  // 0 for the first max.
    st.sum[r] = st.sum[r] * ws.corr[r] + sum;
    st.max[r] = new_max;
    if (pr.dropout) {  // P is 0 past the limit: nothing to drop there.
      dropout_detail::DropoutRow(
          pr.dropout_params, srow, limit, static_cast<uint32_t>(b),
          static_cast<uint32_t>(h), static_cast<uint32_t>(i), j0);
    }
    if (pr.round_weights) {  // Whole vectors: rows have kKeyBlock entries.
      for (size_t j = from; j < limit; j += hn::Lanes(d)) {
        hn::StoreU(RoundToBFloat16(d, hn::LoadU(d, srow + j)), d, srow + j);
      }
    }
  }
}

// acc = corr * acc for the rows whose max moved (not on their first tile:
// acc is not yet written then).
inline void RescaleRows(const float* corr, size_t rows, float* acc,
                        size_t acc_stride, size_t value_dim) {
  for (size_t r = 0; r < rows; ++r) {
    if (corr[r] == 1.0f) continue;
    float* row = acc + r * acc_stride;
    for (size_t c = 0; c < value_dim; ++c) row[c] *= corr[r];
  }
}

// The first key a walk over keys [j_begin, ...) for rows from i computes:
// the window's start, rounded down to kFirstKeyGranule (kv_rows.h), or with
// dropout to a dropout group so that tiles draw whole groups.
inline size_t FirstKey(const Problem& pr, size_t b, size_t i, size_t j_begin) {
  const size_t begin = pr.mask.Begin(b, i);
  const size_t granule =
      pr.dropout ? kDropoutGroup : internal::kFirstKeyGranule;
  return std::max(j_begin, begin - begin % granule);
}

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
// 16 x head_dim x 4 bytes, long enough for them (RESULTS.md, "KV caches":
// prefetch).
template <typename T>
bool PrefetchesRows(const internal::KVRows<T>& rows) {
  return rows.table != internal::kSingleBlock && !std::is_same_v<T, float>;
}

// Asks for rows [j_begin, j_end) of a cache, and their scales, where
// PrefetchesRows. Where a paged block holds one head's rows only, a block
// that follows the previous one in memory continues one stream the
// hardware follows: asking as well cost 23% on Zen 5 (RESULTS.md, "Decode
// on AMD Zen 5").
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
// (bench/RESULTS.md, "Decode's rows asked for at its own pace").
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
// rounding, vcvtne2ps2bf16), in one pass instead of two.
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
      if (j + r < tile_cols) {
        internal::PairsOfRow(FloatRow(k, j0 + j + r, aw.lo), k.cols, hp, row);
      } else {
        std::fill_n(row, hp, 0u);
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
    const float* lo = aw.lo;
    if (lo_zero) {
      std::fill_n(aw.lo, v.cols, 0.0f);
    } else {
      lo = FloatRow(v, j0 + j, aw.lo);
    }
    const float* hi = hi_zero ? nullptr : FloatRow(v, j0 + j + 1, aw.hi);
    internal::InterleavedPairs(lo, hi, v.cols, out);
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

// PairTiles: bf16 pairs on AMX or vdpbf16ps (AVX-512 targets), rounded from
// the float panels; whole tiles (the weights of keys a row does not see are
// 0).
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
  constexpr float kLoadScale = matmul_detail::kLoadScale<T>;
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
