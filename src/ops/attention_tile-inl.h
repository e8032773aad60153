// Per-target fused attention (attention-inl.h), its first part: the
// constants, one call's Problem, a task's QueryRows, its scratch
// (Workspace), and one tile's masks and online softmax, which the dense
// path and decode share.

#if defined(SIMDATTN_SRC_OPS_ATTENTION_TILE_INL_H_) == \
    defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_ATTENTION_TILE_INL_H_
#undef SIMDATTN_SRC_OPS_ATTENTION_TILE_INL_H_
#else
#define SIMDATTN_SRC_OPS_ATTENTION_TILE_INL_H_
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
#include "src/ops/bf16_pairs.h"
#include "src/ops/decode_pairs.h"
#include "src/ops/dropout-inl.h"
#include "src/ops/exp-inl.h"
#include "src/ops/int_dot-inl.h"
#include "src/ops/kv_rows.h"
#include "src/ops/lanes-inl.h"
#include "src/ops/mask-inl.h"
#include "src/ops/mask.h"
#include "src/ops/matmul-inl.h"
#include "src/ops/plan_record.h"
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
// bf16 pairs (bf16 arithmetic: AMX tiles or vdpbf16ps, BFDOT on Arm) serve
// the AVX-512 and Arm targets: the query blocks are whole tiles of rows
// there.
constexpr bool kArmTarget = (HWY_TARGET & internal::kArmSimdTargets) != 0;
constexpr bool kPairTarget =
    (HWY_TARGET & internal::kAvx512Targets) != 0 || kArmTarget;
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
  // (decode_pairs.h), for tasks of up to this many rows (<= kMaxPairRows;
  // 0: none).
  size_t decode_pair_rows = 0;

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
    if constexpr (internal::kTraitsOf<T>.scaled) {  // int8: the scale.
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
// rows as FiniteE4M3 or DirectE4M3, then scans them (FloatRows,
// DirectE4M3Rows).
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
inline internal::KVRows<internal::FiniteE4M3> FiniteRows(
    const internal::KVRows<internal::Fp8E4M3>& rows) {
  return rows.As<internal::FiniteE4M3>();
}

// As FiniteE4M3, read as DirectE4M3: the products' operands must carry
// kOperandScale (ScaledForDirectE4M3).
inline internal::KVRows<internal::DirectE4M3> DirectRows(
    const internal::KVRows<internal::Fp8E4M3>& rows) {
  return rows.As<internal::DirectE4M3>();
}

// m's rows times DirectE4M3's kOperandScale (2^112) into `out`, dense (m.cols
// apart); false where an element's magnitude is 2^16 or more (its products
// could overflow) or NaN: the float16 route then stands in, with the same
// results.
HWY_INLINE bool ScaledForDirectE4M3(ConstMatrix m, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto factor = hn::Set(d, Codec<internal::DirectE4M3>::kOperandScale);
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
  internal::BFloat16DotKernelKind kernel;  // AMX, vdpbf16ps or BFDOT.
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

// Query row i of (b, h) in a tile of keys j0 + [0, cols), of which those
// outside [j0 + begin, j0 + limit) are masked.
struct TileRow {
  size_t b, h, i, j0, cols, begin, limit;
};

// MaskRow for a tile's row: its element masks are copied into the
// workspace, in bounds for whole vectors, and its ALiBi position made
// relative to j0.
template <class D>
HWY_INLINE float MaskTileRow(D d, const Problem& pr, Workspace& ws, float* srow,
                             const TileRow& row, bool* nan) {
  const size_t b = row.b, i = row.i, j0 = row.j0, cols = row.cols;
  const size_t begin = row.begin, limit = row.limit;
  internal::RowMasks masks = pr.mask.Row(b, row.h, i);
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
    const float tile_max =
        begin >= limit ? -kInf
                       : MaskTileRow(d, pr, ws, srow,
                                     {b, h, i, j0, cols, begin, limit}, &nan);
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

}  // namespace attention_detail
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_ATTENTION_TILE_INL_H_
