// Per-target matrix multiplication, C = alpha * A * op(B) + beta * C + bias.
// Included once per SIMD target by matmul.cc (and by other kernels that call
// it from the same target without another dispatch).
//
// Design (Goto/BLIS): the plan (matmul_plan.h) cuts the output into tasks of
// up to the policy's matmul_task_tiles register tiles of rows (fewer where
// the threads need tasks) x one panel of NR = kVectors * Lanes columns. op(B)
// is packed into contiguous, zero-padded KC x NR panels (so the transpose costs
// nothing in the inner loop): once per call by all threads when several row
// blocks share them, else by the task itself. A task then runs an MR x NR
// register-tiled micro-kernel over each MR rows of A, which it reads in place.
// K is blocked by KC but never split across threads: each output is reduced in
// a fixed order, so results do not depend on the thread count.

#if defined(SIMDATTN_SRC_OPS_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_MATMUL_INL_H_
#undef SIMDATTN_SRC_OPS_MATMUL_INL_H_
#else
#define SIMDATTN_SRC_OPS_MATMUL_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "simdattn/kernels.h"
#include "src/common/element.h"
#include "src/common/parallel.h"
#include "src/common/scratch.h"
#include "src/ops/codecs-inl.h"
#include "src/ops/gemm_driver.h"
#include "src/ops/lanes-inl.h"
#include "src/ops/matmul_plan.h"
#include "src/ops/policy.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace matmul_detail {

// Register tile: kRows x kVectors accumulators plus kVectors loads of B and
// one broadcast of A must fit the register file (32 vectors on AVX-512 and
// Arm, 16 on SSE/AVX2).
#if HWY_TARGET == HWY_SCALAR
constexpr size_t kRows = 4;
constexpr size_t kVectors = 1;
#elif HWY_ARCH_ARM_A64 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr size_t kRows = 6;
constexpr size_t kVectors = 4;
#else
constexpr size_t kRows = 6;
constexpr size_t kVectors = 2;
#endif
// K per packed panel: KC x NR floats stay in L2 (64 KiB for AVX-512).
constexpr size_t kDepthBlock = 256;
// The plan's thresholds (matmul_plan.h), which decode's kernels share.
constexpr size_t kSkinnyRows = internal::kMatMulSkinnyRows;
constexpr size_t kDotMinRows = internal::kMatMulDotMinRows;
// Rows of B^T of 16- or 32-bit elements this long or shorter go one after
// the other in DirectColumns' groups of four (a KV cache's keys up to head
// dim 512 in bf16, 256 in float32; weight rows of 512 bf16).
constexpr size_t kRowByRowBytes = 1024;
// 16-bit rows of B^T this long or longer are prefetched by the skinny path.
constexpr size_t kPrefetchMinDepth = 256;

// How to combine a tile's accumulators with C.
struct Epilogue {
  float alpha;
  float beta;
  bool first_block;   // First K block: apply beta and bias.
  const float* bias;  // Packed, NR floats (zero padded) or nullptr.
};

// Lanes [n, n + Lanes(d)) of a row of B as floats: the row's codec
// (codecs-inl.h), exact, unscaled but for its kLoadScale.
template <class D, typename TB>
HWY_INLINE hn::Vec<D> LoadB(D d, const TB* HWY_RESTRICT row, size_t n) {
  return Codec<TB>::Load(d, row, n);
}

// Sources of B's rows: a MatrixView, or anything with its Row(k) (fused
// attention's KV-cache rows, which may be paged). Rows of int8 carry a
// scale (Scale(k)): row k of B is Scale(k) times its elements.
template <class B>
using ElementOf = std::remove_const_t<
    std::remove_pointer_t<decltype(std::declval<const B&>().Row(0))>>;
template <class B>
constexpr bool kScaledRows = std::is_same_v<ElementOf<B>, int8_t>;

// x times row k's scale; x where rows have none.
template <class B>
HWY_INLINE float TimesRowScale(float x, const B& b, size_t k) {
  if constexpr (kScaledRows<B>) {
    return x * b.Scale(k);
  } else {
    return x;
  }
}

// Row k's n-th vector (or lane, for d of one lane) as floats, scaled.
template <class D, class B>
HWY_INLINE hn::Vec<D> LoadRow(D d, const B& b, size_t k, size_t n) {
  const auto v = LoadB(d, b.Row(k), n);
  if constexpr (kScaledRows<B>) {
    return hn::Mul(v, hn::Set(d, b.Scale(k)));
  } else {
    return v;
  }
}

constexpr size_t kLineBytes = 64;  // x86 and most Arm cores.

// Prefetches the cache lines of p[0, count) into L1.
template <typename T>
HWY_INLINE void PrefetchLines(const T* p, size_t count) {
  const char* bytes = reinterpret_cast<const char*>(p);
  for (size_t i = 0; i < count * sizeof(T); i += kLineBytes) {
    hwy::Prefetch(bytes + i);
  }
}

// Prefetches the cache lines of elements [n, n + count) of a row.
template <typename T>
HWY_INLINE void PrefetchElements(const T* row, size_t n, size_t count) {
  constexpr size_t kValues = internal::kBlockValues<T>;
  PrefetchLines(row + n / kValues, hwy::DivCeil(count, kValues));
}

// Returns the value to store for accumulator `acc` whose old C is
// old_c() (only called when needed) and whose bias lanes are at `bias`.
template <class D, class LoadC, class V = hn::Vec<D>>
HWY_INLINE V Combine(D d, V acc, const LoadC& old_c,
                     const float* HWY_RESTRICT bias, const Epilogue& e) {
  const V alpha = hn::Set(d, e.alpha);
  if (!e.first_block) return hn::MulAdd(alpha, acc, old_c());
  V addend = e.bias ? hn::Load(d, bias) : hn::Zero(d);
  if (e.beta != 0.0f) addend = hn::MulAdd(hn::Set(d, e.beta), old_c(), addend);
  return hn::MulAdd(alpha, acc, addend);
}

// Stores the first `valid` lanes of one accumulator into C; partial vectors
// touch nothing past them (another thread's tile, or unmapped memory).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreTile(D d, V acc, float* HWY_RESTRICT c,
                          const float* HWY_RESTRICT bias, size_t valid,
                          const Epilogue& e) {
  const size_t N = hn::Lanes(d);
  if (valid >= N) {
    hn::StoreU(Combine(
                   d, acc, [&] { return hn::LoadU(d, c); }, bias, e),
               d, c);
  } else if (valid != 0) {
    StoreTail(Combine(
                  d, acc, [&] { return LoadTail(d, c, valid); }, bias, e),
              d, c, valid);
  }
}

// C[0..R, 0..cols) (+)= A[0..R, 0..kc) * panel, where the panel holds kc rows
// of NR floats, of which the first V vectors are read (cols <= V * Lanes).
// R <= kRows, V <= kVectors; accumulators beyond R or V are never used and
// the compiler drops them (Highway vectors may be sizeless, so no arrays).
template <size_t R, size_t V, class D>
HWY_NOINLINE void MicroKernel(D d, const float* HWY_RESTRICT a, size_t lda,
                              const float* HWY_RESTRICT panel, size_t kc,
                              float* HWY_RESTRICT c, size_t ldc, size_t cols,
                              const Epilogue& e) {
  static_assert(R >= 1 && R <= 6 && V >= 1 && V <= kVectors && kVectors <= 4,
                "tile too large");
  const size_t N = hn::Lanes(d);
  const size_t nr = kVectors * N;
  using Vec = hn::Vec<D>;
  Vec c00 = hn::Zero(d), c01 = c00, c02 = c00, c03 = c00;
  Vec c10 = c00, c11 = c00, c12 = c00, c13 = c00;
  Vec c20 = c00, c21 = c00, c22 = c00, c23 = c00;
  Vec c30 = c00, c31 = c00, c32 = c00, c33 = c00;
  Vec c40 = c00, c41 = c00, c42 = c00, c43 = c00;
  Vec c50 = c00, c51 = c00, c52 = c00, c53 = c00;
  // Two k-steps per iteration: the loop's own ops and branch, halved, cost
  // a measurable share of the FMA pipe's time (bench/RESULTS.md).
#pragma GCC unroll 2
  for (size_t k = 0; k < kc; ++k, panel += nr) {
    const Vec b0 = hn::Load(d, panel);
    const Vec b1 = V > 1 ? hn::Load(d, panel + 1 * N) : b0;
    const Vec b2 = V > 2 ? hn::Load(d, panel + 2 * N) : b0;
    const Vec b3 = V > 3 ? hn::Load(d, panel + 3 * N) : b0;
#define SIMDATTN_ROW(r)                               \
  if (R > r) {                                        \
    const Vec ar = hn::Set(d, a[r * lda + k]);        \
    c##r##0 = hn::MulAdd(ar, b0, c##r##0);            \
    if (V > 1) c##r##1 = hn::MulAdd(ar, b1, c##r##1); \
    if (V > 2) c##r##2 = hn::MulAdd(ar, b2, c##r##2); \
    if (V > 3) c##r##3 = hn::MulAdd(ar, b3, c##r##3); \
  }
    SIMDATTN_ROW(0)
    SIMDATTN_ROW(1)
    SIMDATTN_ROW(2)
    SIMDATTN_ROW(3)
    SIMDATTN_ROW(4)
    SIMDATTN_ROW(5)
#undef SIMDATTN_ROW
  }
  // Vector v's bias, or null: no arithmetic on a null bias (UB).
  const auto bias = [&e, N](size_t v) -> const float* {
    return e.bias == nullptr ? nullptr : e.bias + v * N;
  };
#define SIMDATTN_STORE_ROW(r)                                       \
  if (R > r) {                                                      \
    float* row = c + r * ldc;                                       \
    StoreTile(d, c##r##0, row, bias(0), cols, e);                   \
    if (V > 1 && cols > N)                                          \
      StoreTile(d, c##r##1, row + N, bias(1), cols - N, e);         \
    if (V > 2 && cols > 2 * N)                                      \
      StoreTile(d, c##r##2, row + 2 * N, bias(2), cols - 2 * N, e); \
    if (V > 3 && cols > 3 * N)                                      \
      StoreTile(d, c##r##3, row + 3 * N, bias(3), cols - 3 * N, e); \
  }
  SIMDATTN_STORE_ROW(0)
  SIMDATTN_STORE_ROW(1)
  SIMDATTN_STORE_ROW(2)
  SIMDATTN_STORE_ROW(3)
  SIMDATTN_STORE_ROW(4)
  SIMDATTN_STORE_ROW(5)
#undef SIMDATTN_STORE_ROW
}

// MicroKernel with as few vectors as the columns need (narrow panels at
// the right edge of C, and the causal diagonal of fused attention).
template <size_t R, class D>
HWY_INLINE void MicroKernelCols(D d, const float* a, size_t lda,
                                const float* panel, size_t kc, float* c,
                                size_t ldc, size_t cols, const Epilogue& e) {
  const size_t vectors = hwy::DivCeil(cols, hn::Lanes(d));
  if constexpr (kVectors >= 4) {
    if (vectors >= 4)
      return MicroKernel<R, 4>(d, a, lda, panel, kc, c, ldc, cols, e);
    if (vectors == 3)
      return MicroKernel<R, 3>(d, a, lda, panel, kc, c, ldc, cols, e);
  }
  if constexpr (kVectors >= 2) {
    if (vectors >= 2)
      return MicroKernel<R, 2>(d, a, lda, panel, kc, c, ldc, cols, e);
  }
  return MicroKernel<R, 1>(d, a, lda, panel, kc, c, ldc, cols, e);
}

// MicroKernelCols for 1 <= rows <= kRows.
template <class D>
HWY_INLINE void MicroKernelRows(D d, size_t rows, const float* a, size_t lda,
                                const float* panel, size_t kc, float* c,
                                size_t ldc, size_t cols, const Epilogue& e) {
  internal::WithRowCount<kRows>(rows, [&](auto r) {
    MicroKernelCols<decltype(r)::value>(d, a, lda, panel, kc, c, ldc, cols, e);
  });
}

#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
// Stores the 128-bit blocks of v (4 floats each) at dst + b * block_stride,
// b = 0, 1, ...: halves are split off until one block remains.
template <class D>
HWY_INLINE void StoreBlocks(D d, hn::Vec<D> v, float* HWY_RESTRICT dst,
                            size_t block_stride) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    hn::StoreU(v, d, dst);
  } else {
    const hn::Half<D> dh;
    StoreBlocks(dh, hn::LowerHalf(dh, v), dst, block_stride);
    StoreBlocks(dh, hn::UpperHalf(dh, v),
                dst + hn::MaxLanes(D()) / 8 * block_stride, block_stride);
  }
}
#endif

// PackPanel for op(B) = B^T, a transpose: panel[k * nr + n] = B[n0 + n][k0 +
// k]. Four rows of B at a time are transposed in registers, 4 x 4 within
// each 128-bit block (two rounds of interleaves), and each block goes to
// the panel as 4 contiguous floats: ~0.75 ops per element on AVX-512
// against 2 for scalar copies (a load and a store) and a gather per
// element. Scalable (SVE) and one-lane targets, the last rows
// and the last columns of K copy scalars.
template <class B>
inline void PackTransposedPanel(const B& b, size_t k0, size_t kc, size_t n0,
                                size_t cols, size_t nr, float* panel) {
  size_t n = 0;
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> d;
  const hn::Repartition<uint64_t, decltype(d)> d64;
  const size_t N = hn::Lanes(d);
  const size_t vector_k = kc / N * N;
  for (; n + 4 <= cols; n += 4) {
    for (size_t k = 0; k < vector_k; k += N) {
      const auto v0 = LoadRow(d, b, n0 + n, k0 + k);
      const auto v1 = LoadRow(d, b, n0 + n + 1, k0 + k);
      const auto v2 = LoadRow(d, b, n0 + n + 2, k0 + k);
      const auto v3 = LoadRow(d, b, n0 + n + 3, k0 + k);
      // Per block: t0 = r0[0] r1[0] r0[1] r1[1], t1 = the same of r2, r3;
      // t2, t3 = elements 2 and 3.
      const auto t0 = hn::BitCast(d64, hn::InterleaveLower(v0, v1));
      const auto t1 = hn::BitCast(d64, hn::InterleaveLower(v2, v3));
      const auto t2 = hn::BitCast(d64, hn::InterleaveUpper(d, v0, v1));
      const auto t3 = hn::BitCast(d64, hn::InterleaveUpper(d, v2, v3));
      // Block b of column j holds rows 0..3 of B at k + 4b + j.
      float* HWY_RESTRICT dst = panel + k * nr + n;
      const size_t stride = 4 * nr;
      StoreBlocks(d, hn::BitCast(d, hn::InterleaveLower(t0, t1)), dst, stride);
      StoreBlocks(d, hn::BitCast(d, hn::InterleaveUpper(d64, t0, t1)), dst + nr,
                  stride);
      StoreBlocks(d, hn::BitCast(d, hn::InterleaveLower(t2, t3)), dst + 2 * nr,
                  stride);
      StoreBlocks(d, hn::BitCast(d, hn::InterleaveUpper(d64, t2, t3)),
                  dst + 3 * nr, stride);
    }
    const hn::CappedTag<float, 1> d1;
    for (size_t k = vector_k; k < kc; ++k) {
      for (size_t r = 0; r < 4; ++r) {
        panel[k * nr + n + r] = hn::GetLane(LoadRow(d1, b, n0 + n + r, k0 + k));
      }
    }
  }
#endif
  const hn::CappedTag<float, 1> d1;
  for (; n < cols; ++n) {
    float* HWY_RESTRICT column = panel + n;
    for (size_t k = 0; k < kc; ++k) {
      column[k * nr] = hn::GetLane(LoadRow(d1, b, n0 + n, k0 + k));
    }
  }
  if (cols == nr) return;
  for (size_t k = 0; k < kc; ++k) {
    std::fill(panel + k * nr + cols, panel + (k + 1) * nr, 0.0f);
  }
}

// Copies op(B)[k0..k0+kc, n0..n0+cols) into panel (kc rows of nr floats),
// zero-filling columns cols..nr. Rows of B go by vectors: a panel row is a
// few vectors, too short for memcpy's call to pay off.
template <class B>
inline void PackPanel(const B& b, bool transposed, size_t k0, size_t kc,
                      size_t n0, size_t cols, size_t nr, float* panel) {
  if (transposed) return PackTransposedPanel(b, k0, kc, n0, cols, nr, panel);
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  const size_t vector_cols = cols / N * N;
  for (size_t k = 0; k < kc; ++k) {
    float* HWY_RESTRICT dst = panel + k * nr;
    for (size_t n = 0; n < vector_cols; n += N) {
      hn::Store(LoadRow(d, b, k0 + k, n0 + n), d, dst + n);
    }
    for (size_t n = vector_cols; n < cols; ++n) {
      dst[n] = hn::GetLane(LoadRow(d1, b, k0 + k, n0 + n));
    }
    std::fill(dst + cols, dst + nr, 0.0f);
  }
}

// The panels of op(B) for every column block, packed once by all threads
// before the row blocks use them, rather than by each row block (whose
// tasks would pack the same panels row_blocks times). Panel p's K rows of
// nr floats start at Panel(p); depth block k0 at Panel(p) + k0 * nr.
class PackedB {
 public:
  template <typename TB>
  PackedB(MatrixView<const TB> b, bool transposed, size_t nr)
      : depth_(transposed ? b.cols : b.rows),
        nr_(nr),
        scratch_(hwy::DivCeil(transposed ? b.rows : b.cols, nr) * nr * depth_) {
    const size_t columns = transposed ? b.rows : b.cols;
    const size_t panels = hwy::DivCeil(columns, nr);
    const size_t depth_blocks = hwy::DivCeil(depth_, kDepthBlock);
    internal::ParallelFor(
        0, panels * depth_blocks, 1, [&](size_t first, size_t last) {
          for (size_t task = first; task != last; ++task) {
            const size_t n0 = task / depth_blocks * nr;
            const size_t k0 = task % depth_blocks * kDepthBlock;
            PackPanel(b, transposed, k0, std::min(kDepthBlock, depth_ - k0), n0,
                      std::min(nr, columns - n0), nr, Panel(n0 / nr) + k0 * nr);
          }
        });
  }
  float* Panel(size_t p) const { return scratch_.data() + p * depth_ * nr_; }

 private:
  size_t depth_, nr_;
  internal::ScratchBuffer scratch_;
};

// The tiled path over the plan's grid (panels of kVectors * Lanes columns);
// K > 0.
template <typename TB>
inline void TiledMatMul(ConstMatrix a, MatrixView<const TB> b, Matrix c,
                        const MatMulOptions& opt,
                        const internal::GemmGrid& grid) {
  const hn::ScalableTag<float> d;
  const size_t nr = grid.panel, K = a.cols;
  const bool transposed = opt.transpose_b == Transpose::kYes;
  const size_t kc_max = std::min(K, kDepthBlock);
  // With one row block, each panel is packed once anyway.
  std::optional<PackedB> packed_b;
  if (grid.RowBlocks() > 1) packed_b.emplace(b, transposed, nr);

  internal::ForEachGemmTask(
      grid,
      // Panel plus the packed bias row.
      [&] { return internal::ScratchBuffer((kc_max + 1) * nr); },
      [&](const internal::GemmTask& task, internal::ScratchBuffer& scratch) {
        float* bias = scratch.data() + kc_max * nr;
        if (opt.bias) {
          std::memcpy(bias, opt.bias + task.n0, task.cols * sizeof(float));
          std::fill(bias + task.cols, bias + nr, 0.0f);
        }
        for (size_t k0 = 0; k0 < K; k0 += kDepthBlock) {
          const size_t kc = std::min(kDepthBlock, K - k0);
          float* panel = scratch.data();
          if (packed_b) {
            panel = packed_b->Panel(task.p) + k0 * nr;
          } else {
            PackPanel(b, transposed, k0, kc, task.n0, task.cols, nr, panel);
          }
          const Epilogue e{opt.alpha, opt.beta, k0 == 0,
                           opt.bias ? bias : nullptr};
          for (size_t m = task.m0; m < task.m_end; m += kRows) {
            MicroKernelRows(d, std::min(kRows, task.m_end - m), a.Row(m) + k0,
                            a.stride, panel, kc, c.Row(m) + task.n0, c.stride,
                            task.cols, e);
          }
        }
      });
}

// out = alpha * acc + beta * out + bias[n], reading out only if beta != 0.
HWY_INLINE void ScalarEpilogue(float acc, float* out, size_t n,
                               const MatMulOptions& opt) {
  *out = internal::EpilogueValue(opt, acc, out, n);
}

// out[0, count) = ScalarEpilogue of v's first count lanes, columns n + [0,
// count): the same operations in the same order, by vectors.
template <class D>
HWY_INLINE void StoreLanes(D d, hn::Vec<D> v, float* HWY_RESTRICT out,
                           size_t count, size_t n, const MatMulOptions& opt) {
  v = hn::Mul(hn::Set(d, opt.alpha), v);
  if (opt.beta != 0.0f) {
    v = hn::Add(v, hn::Mul(hn::Set(d, opt.beta), LoadTail(d, out, count)));
  }
  if (opt.bias != nullptr) v = hn::Add(v, LoadTail(d, opt.bias + n, count));
  StoreTail(v, d, out, count);
}

#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
// The sum of v's 128-bit blocks (four lanes of float or int32).
template <class D>
HWY_INLINE auto SumOfBlocks(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    (void)d;
    return v;
  } else {
    const hn::Half<D> dh;
    return SumOfBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}

// The sums of the lanes of v0..v3 as one vector's four lanes: one
// transposing reduction (two rounds of interleaves, then the blocks) where
// four SumOfLanes would each take a full reduction.
template <class D, class V = hn::Vec<D>>
HWY_INLINE auto Sums4(D d, V v0, V v1, V v2, V v3) {
  const hn::Repartition<uint64_t, D> d64;
  // Per block: v0[0] + v0[2], v1[0] + v1[2], v0[1] + v0[3], v1[1] + v1[3].
  const V s01 =
      hn::Add(hn::InterleaveLower(v0, v1), hn::InterleaveUpper(d, v0, v1));
  const V s23 =
      hn::Add(hn::InterleaveLower(v2, v3), hn::InterleaveUpper(d, v2, v3));
  const auto w01 = hn::BitCast(d64, s01), w23 = hn::BitCast(d64, s23);
  // Per block: the block's sums of v0, v1, v2, v3.
  return SumOfBlocks(
      d, hn::Add(hn::BitCast(d, hn::InterleaveLower(w01, w23)),
                 hn::BitCast(d, hn::InterleaveUpper(d64, w01, w23))));
}

// out[0..3] = the sums of the lanes of v0..v3.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void SumOfLanes4(D d, V v0, V v1, V v2, V v3,
                            float* HWY_RESTRICT out) {
  hn::StoreU(Sums4(d, v0, v1, v2, v3), hn::CappedTag<float, 4>(), out);
}
#endif

// f(dv) for the 8- and 4-lane tags narrower than a full vector, widest
// first: for what is left past the last full vector (a head dim of 72 leaves
// 8 on AVX-512; one by one they were a chain of dependent multiply-adds as
// long as the rest of the row's dot product).
template <class F>
HWY_INLINE void ForNarrowerVectors(const F& f) {
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  constexpr size_t kLanes = hn::MaxLanes(hn::ScalableTag<float>());
  if constexpr (kLanes > 8) f(hn::CappedTag<float, 8>());
  if constexpr (kLanes > 4) f(hn::CappedTag<float, 4>());
#else
  (void)f;
#endif
}

// dot + a[k] b[k] summed over [k, K), fewer than a vector's lanes: by
// narrower vectors, then lane by lane.
template <typename TB>
HWY_INLINE float TailDot(const float* HWY_RESTRICT a, const TB* HWY_RESTRICT b,
                         size_t k, size_t K, float dot) {
  ForNarrowerVectors([&](auto dv) {
    for (const size_t n = hn::Lanes(dv); k + n <= K; k += n) {
      dot += hn::GetLane(
          hn::SumOfLanes(dv, hn::Mul(hn::LoadU(dv, a + k), LoadB(dv, b, k))));
    }
  });
  const hn::CappedTag<float, 1> d1;
  auto sum = hn::Set(d1, dot);
  for (; k < K; ++k) {
    sum = hn::MulAdd(hn::Set(d1, a[k]), LoadB(d1, b, k), sum);
  }
  return hn::GetLane(sum);
}

#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
// Where a[k, K) and b[k, K) are half a vector (a head dim of 72 on AVX-512),
// adds their products, zero-extended, to the row's vector sum v before its
// one reduction (TailDot would reduce them alone: a second reduction per
// key) and returns K; else returns k, where TailDot starts.
template <class D, typename TB>
HWY_INLINE size_t AddHalfTail(D d, const float* HWY_RESTRICT a,
                              const TB* HWY_RESTRICT b, size_t k, size_t K,
                              hn::Vec<D>& v) {
  const hn::Half<D> dh;
  if (K - k != hn::Lanes(dh)) return k;
  v = hn::Add(v, hn::ZeroExtendVector(
                     d, hn::Mul(hn::LoadU(dh, a + k), LoadB(dh, b, k))));
  return K;
}
#endif

// A row of B's two vectors of columns [n, n + 2 Lanes(d)) as floats, in b0
// and b1, and the factor that joins A's element instead: a scaled-codes
// block's d (q8_0, q4_0, iq4_nl), its codes widened alone (once per two
// vectors, not a multiply per vector); else the row's scale (int8 rows; 1
// for others).
template <class D, typename TB>
HWY_INLINE float LoadTwo(D d, const TB* HWY_RESTRICT row, float row_scale,
                         size_t n, hn::Vec<D>& b0, hn::Vec<D>& b1) {
  const size_t N = hn::Lanes(d);
  if constexpr (internal::kBlockValues < TB >> 1) {
    using C = Codec<TB>;
    [[maybe_unused]] const TB& block = row[n / internal::kQuantBlock];
    [[maybe_unused]] const size_t j = n % internal::kQuantBlock;
    [[maybe_unused]] const hn::RebindToSigned<D> di;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    if constexpr (C::kNibbles && hn::MaxLanes(D()) == 16) {
      // The block's low nibbles, then its high ones (j is 0: 2 N is a
      // block), as floats by the codec's table that LookUp indexes with
      // each byte's low 4 bits: 4 ops where masks, widening, subtractions
      // and conversions take 10 (q4_0). The same values.
      HWY_DASSERT(j == 0);
      const auto table = hn::BitCast(di, hn::Load(d, C::kCodeTable));
      const auto bytes =
          hn::PromoteTo(di, hn::LoadU(hn::Rebind<uint8_t, D>(), block.qs));
      b0 = hn::BitCast(d, LookUp(table, bytes));
      b1 = hn::BitCast(d, LookUp(table, hn::ShiftRight<4>(bytes)));
      if constexpr (kScaledCodes<TB>) {
        return C::Scale(block);
      } else {  // q4_1: d n + m, Load's values (d n exact, one rounding).
        const auto scale = hn::Set(d, C::Scale(block));
        const auto offset = hn::Set(d, C::Offset(block));
        b0 = hn::MulAdd(b0, scale, offset);
        b1 = hn::MulAdd(b1, scale, offset);
        return row_scale;
      }
    }
#endif
    if constexpr (kScaledCodes<TB>) {
      b0 = hn::ConvertTo(d, C::Codes(di, block, j));
      b1 = hn::ConvertTo(d, C::Codes(di, block, j + N));
      return C::Scale(block);
    }
  }
  b0 = LoadB(d, row, n);
  b1 = LoadB(d, row, n + N);
  return row_scale;
}

// Whether RowsTimesBPasses takes the P blocks of a pass's row of B (18-byte
// scaled-codes blocks, q4_0 and iq4_nl, on AVX-512: a block per pair of
// vectors) with their scales in one vector, for
// one row of A (ungrouped decode's P V): 9 ops a row of 4 blocks where each
// block's scale alone (converted, multiplied, broadcast) took 5, 20 in all.
// Four rows of A (a group of four heads) ran 19% slower so.
template <typename TB, size_t R, size_t P>
constexpr bool ScalesByVector() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return kScaledCodes<TB> && sizeof(TB) == 18 && R == 1 && P <= 4 &&
         hn::MaxLanes(hn::ScalableTag<float>()) == 16;
#else
  return false;
#endif
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The scales of blocks[0, P), P <= 4, as floats in lanes [0, P): their fp16
// words (0, 9, 18 and 27 from blocks, within 56 bytes) by one masked load,
// which reads no word past them, and one permute; the codec's conversion.
template <size_t P, typename TB>
HWY_INLINE hn::Vec512<float> BlockScales(const TB* blocks) {
  static_assert(sizeof(TB) == 18 && offsetof(TB, d) == 0, "d every 9 words");
  static_assert(P >= 1 && P <= 4, "four scales in 64 bytes");
  const hn::Full512<int16_t> dw;
  HWY_ALIGN static constexpr int16_t kWords[32] = {0, 9, 18, 27};
  const auto words = hn::MaskedLoad(hn::FirstN(dw, 9 * (P - 1) + 1), dw,
                                    reinterpret_cast<const int16_t*>(blocks));
  const hn::Vec512<int16_t> scales{
      _mm512_maskz_permutexvar_epi16(~0u, hn::Load(dw, kWords).raw, words.raw)};
  return PromoteF16(
      hn::Full512<float>(),
      hn::BitCast(hn::Full256<hwy::float16_t>(), hn::LowerHalf(scales)));
}

// Lane I of v in every lane.
template <size_t I>
HWY_INLINE hn::Vec512<float> LaneEverywhere(hn::Vec512<float> v) {
  const hn::Full512<int32_t> di;
  return hn::BitCast(hn::Full512<float>(),
                     LookUp(hn::BitCast(di, v), hn::Set(di, int32_t{I})));
}
#endif

// A pass's block scales where kByVector (ScalesByVector), from the row's
// block at n; else unused.
template <bool kByVector, size_t P, class D, typename TB>
HWY_INLINE hn::Vec<D> PassScales(D d, const TB* row, size_t n) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kByVector) {
    return BlockScales<P>(row + n / internal::kQuantBlock);
  }
#endif
  (void)row;
  (void)n;
  return hn::Zero(d);
}

// A row of A's element a times pair p's factor, in every lane: from the
// pass's scales where kByVector (the same product), else a * factor.
template <bool kByVector, size_t kPair, class D>
HWY_INLINE hn::Vec<D> Weight(D d, float a, float factor,
                             hn::Vec<D> pass_scales) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (kByVector) {
    return LaneEverywhere<kPair>(hn::Mul(hn::Set(d, a), pass_scales));
  }
#endif
  (void)pass_scales;
  return hn::Set(d, a * factor);
}

// Accumulators of RowsTimesBPasses: half the vector registers.
constexpr size_t kPassAccumulators = kVectorRegisters / 2;

// Accumulator I of those given, by a compile-time index (sizeless SVE
// vectors can be neither array elements nor members).
template <size_t I, class V, class... Rest>
HWY_INLINE V& Slot(V& first, Rest&... rest) {
  static_assert(I <= sizeof...(Rest), "an accumulator given");
  if constexpr (I == 0) {
    return first;
  } else {
    return Slot<I - 1>(rest...);
  }
}

// f(std::integral_constant<size_t, i>()) for i in [0, kCount).
template <size_t kCount, size_t kFirst = 0, class F>
HWY_INLINE void ForIndex(const F& f) {
  if constexpr (kFirst < kCount) {
    f(std::integral_constant<size_t, kFirst>());
    ForIndex<kCount, kFirst + 1>(f);
  }
}

// Passes of P pairs of vectors of columns (2 P Lanes(d) columns) over K for
// rows [m, m + R) of A together, 2 R P <= kPassAccumulators: each pair of
// B is widened once for all R rows, and a row of B is addressed once per
// pass (one row of A takes four pairs: a q4_0 value row of 128 in one pass
// on AVX-512, where pairs alone made four). kAhead: the pass at column
// n_ahead asks for the rest of each row, to n_end. Returns where the passes
// end.
template <size_t R, size_t P, bool kAhead, class B>
HWY_INLINE size_t RowsTimesBPasses(ConstMatrix a, size_t m, const B& b,
                                   Matrix c, const MatMulOptions& opt, size_t n,
                                   size_t n_end, size_t n_ahead) {
  static_assert(R >= 1 && P >= 1 && 2 * R * P <= kPassAccumulators,
                "accumulators fit");
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d), K = a.cols;
  constexpr bool kScalesByVector = ScalesByVector<ElementOf<B>, R, P>();
  const auto finish = [&](V sum, size_t r, size_t n0) {
    // Zeroed: GCC 12 (-Wmaybe-uninitialized) misses the store.
    HWY_ALIGN float lanes[kMaxLanes] = {};
    hn::Store(sum, d, lanes);
    float* c_row = c.Row(m + r);
    for (size_t i = 0; i < N; ++i) {
      ScalarEpilogue(lanes[i], c_row + n0 + i, n0 + i, opt);
    }
  };
  for (; n + 2 * N * P <= n_end; n += 2 * N * P) {
    // Columns past this pass that its rows of B ask for (see RowsTimesB).
    const size_t ahead = kAhead && n == n_ahead ? n_end - n - 2 * N * P : 0;
    V s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,
      s7 = s0, s8 = s0, s9 = s0, s10 = s0, s11 = s0, s12 = s0, s13 = s0,
      s14 = s0, s15 = s0;
    // Row r's pair p in accumulators 2 (r P + p) and the next.
    const auto acc = [&](auto i) -> V& {
      return Slot<decltype(i)::value>(s0, s1, s2, s3, s4, s5, s6, s7, s8, s9,
                                      s10, s11, s12, s13, s14, s15);
    };
    for (size_t k = 0; k < K; ++k) {
      // Row k addressed (a page looked up) and its scale read once a pass.
      const auto* HWY_RESTRICT row = b.Row(k);
      const float row_scale = TimesRowScale(1.0f, b, k);
      if constexpr (kAhead) {
        if (ahead != 0) PrefetchElements(row, n + 2 * N * P, ahead);
      }
      const V scales = PassScales<kScalesByVector, P>(d, row, n);
      ForIndex<P>([&](auto p) {
        V b0, b1;
        const float factor = LoadTwo(d, row, row_scale, n + 2 * N * p, b0, b1);
        ForIndex<R>([&](auto r) {
          constexpr size_t i =
              2 * (decltype(r)::value * P + decltype(p)::value);
          const V ar = Weight<kScalesByVector, decltype(p)::value>(
              d, a.Row(m + r)[k], factor, scales);
          V& lo = acc(std::integral_constant<size_t, i>());
          V& hi = acc(std::integral_constant<size_t, i + 1>());
          lo = hn::MulAdd(ar, b0, lo);
          hi = hn::MulAdd(ar, b1, hi);
        });
      });
    }
    ForIndex<R>([&](auto r) {
      ForIndex<P>([&](auto p) {
        constexpr size_t i = 2 * (decltype(r)::value * P + decltype(p)::value);
        finish(acc(std::integral_constant<size_t, i>()), r, n + 2 * N * p);
        finish(acc(std::integral_constant<size_t, i + 1>()), r,
               n + 2 * N * p + N);
      });
    });
  }
  return n;
}

// Whole vectors of columns [n_begin, n_end) of C = A B for rows [m, m + R)
// of A together, R <= 4: each vector of B is widened once for all of them
// (a group's heads in decode's P V convert each value once, not R times).
// Every output is the sum DirectColumns forms one row at a time, in the same
// order (block rows: for any R, R = 1 included), whatever the passes' width.
// Returns where the whole vectors end; for block rows, at n_begin where two
// vectors do not fit a block (wide SVE) or n_begin is not their multiple.
// kAhead (B streams from memory): the first pass asks for the rest of each
// row, which the later passes then find in cache: a pass that reads a part
// of each row only is no stream the hardware prefetchers follow well.
template <size_t R, bool kAhead, class B>
HWY_INLINE size_t RowsTimesB(ConstMatrix a, size_t m, const B& b, Matrix c,
                             const MatMulOptions& opt, size_t n_begin,
                             size_t n_end) {
  static_assert(R >= 1 && R <= 4, "one to four rows");
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  if constexpr ((internal::kBlockValues<ElementOf<B>>) > 1) {
    if (internal::kQuantBlock % (2 * N) != 0 || n_begin % (2 * N) != 0) {
      return n_begin;
    }
  }
  // The widest passes first (at most four pairs, as many as the
  // accumulators allow: with 32 registers and 8- or 16-bit rows four pairs
  // for two rows, two for three or four), then narrower ones for the rest.
  // Float rows keep eight accumulators (sixteen measured slower:
  // bench/RESULTS.md, "Kept decisions").
  constexpr size_t kAccumulators =
      sizeof(ElementOf<B>) < 4 ? kPassAccumulators : 8;
  constexpr size_t kFit = kAccumulators / (2 * R);
  constexpr size_t kPairs = kFit >= 4 ? 4 : kFit >= 2 ? 2 : 1;
  size_t n = RowsTimesBPasses<R, kPairs, kAhead>(a, m, b, c, opt, n_begin,
                                                 n_end, n_begin);
  if constexpr (kPairs >= 4) {
    n = RowsTimesBPasses<R, 2, kAhead>(a, m, b, c, opt, n, n_end, n_begin);
  }
  if constexpr (kPairs >= 2) {
    n = RowsTimesBPasses<R, 1, kAhead>(a, m, b, c, opt, n, n_end, n_begin);
  }
  return n;
}

// Columns [n, n + V Lanes(d)) of one row of C = A B, 0 < V < 8, by V
// independent accumulators (their multiply-adds overlap), each the sum over
// k in order of a_at(k) B[k]; kHalf: and the half vector of columns after
// them (a head dim of 72 on AVX-512), which alone would be a chain of
// dependent multiply-adds. finish(sum, column) stores one, of either width.
template <size_t V, bool kHalf = false, class D, class B, class AAt,
          class Finish>
HWY_INLINE void ColumnVectors(D d, const B& b, size_t K, const AAt& a_at,
                              size_t n, const Finish& finish) {
  static_assert(V >= 1 && V <= 7, "one to seven vectors");
  const size_t N = hn::Lanes(d);
  using Vec = hn::Vec<D>;
  using DH = std::conditional_t<kHalf, hn::Half<D>, D>;
  const DH dh;
  Vec s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0;
  hn::Vec<DH> s_half = hn::Zero(dh);
  const auto acc = [&](auto i) -> Vec& {
    return Slot<decltype(i)::value>(s0, s1, s2, s3, s4, s5, s6);
  };
  for (size_t k = 0; k < K; ++k) {
    const float ak = a_at(k);
    const Vec ak_v = hn::Set(d, ak);
    const auto* HWY_RESTRICT b_row = b.Row(k);
    ForIndex<V>([&](auto i) {
      Vec& sum = acc(i);
      sum = hn::MulAdd(ak_v, LoadB(d, b_row, n + decltype(i)::value * N), sum);
    });
    if constexpr (kHalf) {
      s_half = hn::MulAdd(hn::Set(dh, ak), LoadB(dh, b_row, n + V * N), s_half);
    }
  }
  ForIndex<V>([&](auto i) { finish(acc(i), n + decltype(i)::value * N); });
  if constexpr (kHalf) finish(s_half, n + V * N);
}

// f(std::integral_constant<size_t, 4 + more>()), more in [1, 3].
template <class F>
HWY_INLINE void WithMoreVectors(size_t more, const F& f) {
  switch (more) {
    case 1:
      return f(std::integral_constant<size_t, 5>());
    case 2:
      return f(std::integral_constant<size_t, 6>());
    default:
      return f(std::integral_constant<size_t, 7>());
  }
}

// One row of A times one row of B^T, K long: whole pairs of vectors into
// (sum0, sum1), a last whole vector into sum0, a half-vector tail into sum1
// where the target has one. Returns where the elements it took end (the
// rest is TailDot's).
template <class D, class TB>
HWY_INLINE size_t AddRowDot(D d, const float* HWY_RESTRICT a_row,
                            const TB* HWY_RESTRICT row, size_t K,
                            hn::Vec<D>& sum0, hn::Vec<D>& sum1) {
  const size_t N = hn::Lanes(d);
  size_t k = 0;
  for (; k + 2 * N <= K; k += 2 * N) {
    sum0 = hn::MulAdd(hn::LoadU(d, a_row + k), LoadB(d, row, k), sum0);
    sum1 = hn::MulAdd(hn::LoadU(d, a_row + k + N), LoadB(d, row, k + N), sum1);
  }
  for (; k + N <= K; k += N) {
    sum0 = hn::MulAdd(hn::LoadU(d, a_row + k), LoadB(d, row, k), sum0);
  }
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  k = AddHalfTail(d, a_row, row, k, K, sum1);
#endif
  return k;
}

// c_row[n_begin, n_end) = the dot products of a_row (K elements) with rows
// [n_begin, n_end) of B (DirectColumns with B transposed).
template <bool kPrefetch, class B, typename TB = ElementOf<B>>
HWY_INLINE void RowDots(const float* HWY_RESTRICT a_row, const B& b, size_t K,
                        float* HWY_RESTRICT c_row, const MatMulOptions& opt,
                        size_t n_begin, size_t n_end) {
  const hn::ScalableTag<float> d;
  size_t n = n_begin;
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  const size_t N = hn::Lanes(d);
  // Four rows of B at a time share one reduction of their dot products
  // (the per-row reductions bound decode's Q K^T); the same products and
  // the same two accumulators per row as one row at a time below.
  // Short 16- and 32-bit rows (a KV cache's keys) are read one after the
  // other, the rest a vector of each in turn. On Zen 5 that made 1-row
  // decode 7-10% faster (bf16 keys from memory) to 20% (float32 keys of
  // 64 in the L3); weight rows of 1.5 KiB and more read one by one made
  // M = 1 products 1.15-1.6x slower, 8-bit keys 3-13% (bench/RESULTS.md,
  // "Kept decisions"). On Zen 4, rows of 512 bytes to 1 KiB
  // read one by one were 1.2-2x as fast ("Rows of up to 1 KiB one by
  // one"). The same bits either way.
  const size_t vector_k = K / N * N;
  const bool by_rows = sizeof(TB) >= 2 && internal::kBlockValues<TB> == 1 &&
                       K * sizeof(TB) <= kRowByRowBytes;
  for (; vector_k != 0 && n + 4 <= n_end; n += 4) {
    const TB* HWY_RESTRICT r0 = b.Row(n);
    const TB* HWY_RESTRICT r1 = b.Row(n + 1);
    const TB* HWY_RESTRICT r2 = b.Row(n + 2);
    const TB* HWY_RESTRICT r3 = b.Row(n + 3);
    auto s00 = hn::Zero(d), s01 = s00, s10 = s00, s11 = s00;
    auto s20 = s00, s21 = s00, s30 = s00, s31 = s00;
    size_t tail_k = 0;
    if (by_rows) {
      tail_k = AddRowDot(d, a_row, r0, K, s00, s01);
      AddRowDot(d, a_row, r1, K, s10, s11);
      AddRowDot(d, a_row, r2, K, s20, s21);
      AddRowDot(d, a_row, r3, K, s30, s31);
    } else {
      size_t k = 0;
      [[maybe_unused]] const bool prefetch = kPrefetch && n + 8 <= n_end;
      for (; k + 2 * N <= K; k += 2 * N) {
        if constexpr (kPrefetch) {
          if (prefetch) {
            for (size_t j = 4; j < 8; ++j) {
              PrefetchElements(b.Row(n + j), k, 2 * N);
            }
          }
        }
        const auto a0 = hn::LoadU(d, a_row + k);
        const auto a1 = hn::LoadU(d, a_row + k + N);
        s00 = hn::MulAdd(a0, LoadB(d, r0, k), s00);
        s01 = hn::MulAdd(a1, LoadB(d, r0, k + N), s01);
        s10 = hn::MulAdd(a0, LoadB(d, r1, k), s10);
        s11 = hn::MulAdd(a1, LoadB(d, r1, k + N), s11);
        s20 = hn::MulAdd(a0, LoadB(d, r2, k), s20);
        s21 = hn::MulAdd(a1, LoadB(d, r2, k + N), s21);
        s30 = hn::MulAdd(a0, LoadB(d, r3, k), s30);
        s31 = hn::MulAdd(a1, LoadB(d, r3, k + N), s31);
      }
      if (k < vector_k) {
        const auto a0 = hn::LoadU(d, a_row + k);
        s00 = hn::MulAdd(a0, LoadB(d, r0, k), s00);
        s10 = hn::MulAdd(a0, LoadB(d, r1, k), s10);
        s20 = hn::MulAdd(a0, LoadB(d, r2, k), s20);
        s30 = hn::MulAdd(a0, LoadB(d, r3, k), s30);
      }
      tail_k = AddHalfTail(d, a_row, r0, vector_k, K, s01);
      AddHalfTail(d, a_row, r1, vector_k, K, s11);
      AddHalfTail(d, a_row, r2, vector_k, K, s21);
      AddHalfTail(d, a_row, r3, vector_k, K, s31);
    }
    const auto sums4 = Sums4(d, hn::Add(s00, s01), hn::Add(s10, s11),
                             hn::Add(s20, s21), hn::Add(s30, s31));
    const hn::CappedTag<float, 4> d4;
    if (tail_k == K) {
      // No elements past the vectors: the four sums stored as a vector
      // (StoreLanes, as DotTile does; one at a time through memory and a
      // scalar epilogue each they took as long as the products).
      auto dots = sums4;
      if constexpr (kScaledRows<B>) {
        HWY_ALIGN float scales[4];
        for (size_t j = 0; j < 4; ++j) scales[j] = b.Scale(n + j);
        dots = hn::Mul(dots, hn::Load(d4, scales));
      }
      StoreLanes(d4, dots, c_row + n, 4, n, opt);
      continue;
    }
    HWY_ALIGN float sums[4];
    hn::Store(sums4, d4, sums);
    const TB* const rows[4] = {r0, r1, r2, r3};
    for (size_t j = 0; j < 4; ++j) {
      const float dot = TailDot(a_row, rows[j], tail_k, K, sums[j]);
      ScalarEpilogue(TimesRowScale(dot, b, n + j), c_row + n + j, n + j, opt);
    }
  }
#endif
  for (; n < n_end; ++n) {
    const TB* HWY_RESTRICT b_row = b.Row(n);
    auto sum0 = hn::Zero(d), sum1 = hn::Zero(d);
    const size_t k = AddRowDot(d, a_row, b_row, K, sum0, sum1);
    const float dot =
        TailDot(a_row, b_row, k, K,
                hn::GetLane(hn::SumOfLanes(d, hn::Add(sum0, sum1))));
    ScalarEpilogue(TimesRowScale(dot, b, n), c_row + n, n, opt);
  }
}

// c_row[n, n_end) = a_row (K elements) times B's columns [n, n_end)
// (DirectColumns with B as given), columns from n on.
template <class B, typename TB = ElementOf<B>>
HWY_INLINE void RowTimesB(const float* HWY_RESTRICT a_row, const B& b, size_t K,
                          float* HWY_RESTRICT c_row, const MatMulOptions& opt,
                          size_t n, size_t n_end) {
  const hn::ScalableTag<float> d;
  // Scalar tails as one-lane vectors: the same fused (or not) multiply-add
  // for every element type of B.
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float lanes[kMaxLanes];
  float lanes_of_tail[8];
  const auto finish = [&](auto sum, size_t n0) {
    const hn::DFromV<decltype(sum)> dv;
    hn::Store(sum, dv, lanes);
    for (size_t i = 0; i < hn::Lanes(dv); ++i) {
      ScalarEpilogue(lanes[i], c_row + n0 + i, n0 + i, opt);
    }
  };
  // A's element k, times row k's scale (int8 rows).
  const auto a_at = [&](size_t k) { return TimesRowScale(a_row[k], b, k); };
  // Passes of four vectors, the first taking five to seven where the
  // count is not a multiple of four, or a half vector more: one to three
  // more alone would each be a chain of dependent multiply-adds (head dims
  // 72-112). The passes of four could be ColumnVectors<4>: not done, as its
  // one A/B (bf16 rows of 72 20% slower, f32 13% faster) could not be told
  // from placement.
  const size_t vectors = (n_end - n) / N;
  if (vectors > 4 && vectors % 4 != 0) {
    WithMoreVectors(vectors % 4, [&](auto v) {
      ColumnVectors<decltype(v)::value>(d, b, K, a_at, n, finish);
      n += decltype(v)::value * N;
    });
  }
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  if (vectors % 4 == 0 && vectors != 0 && (n_end - n) % N == N / 2) {
    ColumnVectors<4, true>(d, b, K, a_at, n, finish);
    n += 4 * N + N / 2;
  }
#endif
  for (; n + 4 * N <= n_end; n += 4 * N) {
    auto s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0;
    for (size_t k = 0; k < K; ++k) {
      const auto ak = hn::Set(d, a_at(k));
      const TB* b_row = b.Row(k);
      s0 = hn::MulAdd(ak, LoadB(d, b_row, n), s0);
      s1 = hn::MulAdd(ak, LoadB(d, b_row, n + N), s1);
      s2 = hn::MulAdd(ak, LoadB(d, b_row, n + 2 * N), s2);
      s3 = hn::MulAdd(ak, LoadB(d, b_row, n + 3 * N), s3);
    }
    finish(s0, n);
    finish(s1, n + N);
    finish(s2, n + 2 * N);
    finish(s3, n + 3 * N);
  }
  for (; n + N <= n_end; n += N) {
    auto sum = hn::Zero(d);
    for (size_t k = 0; k < K; ++k) {
      sum = hn::MulAdd(hn::Set(d, a_at(k)), LoadB(d, b.Row(k), n), sum);
    }
    finish(sum, n);
  }
  // Columns short of a vector: by narrower vectors (each a pass over K),
  // then one at a time.
  const auto narrow_columns = [&](auto dv) {
    const size_t lanes = hn::Lanes(dv);
    for (; n + lanes <= n_end; n += lanes) {
      auto sum = hn::Zero(dv);
      for (size_t k = 0; k < K; ++k) {
        sum = hn::MulAdd(hn::Set(dv, a_at(k)), LoadB(dv, b.Row(k), n), sum);
      }
      hn::StoreU(sum, dv, lanes_of_tail);
      for (size_t i = 0; i < lanes; ++i) {
        ScalarEpilogue(lanes_of_tail[i], c_row + n + i, n + i, opt);
      }
    }
  };
  ForNarrowerVectors(narrow_columns);
  narrow_columns(d1);
}

// Columns [n_begin, n_end) of C for skinny or tiny products, without packing:
// rows of A times B (B rows contiguous), or dot products with rows of B when
// it is transposed (Q K^T in decode). kPrefetch: B streams from memory, read
// once. B^T's rows are long (decode's 16-bit weights), and four at a time
// are streams too short for the hardware prefetchers: the next four rows go
// to L1 a step ahead. Float rows need none, and a KV cache's short keys are
// together one sequential run the hardware follows; its own instantiation
// keeps the test out of their loop. Rows of B (decode's V tiles) are asked
// for whole by RowsTimesB's first pass, which pays where they come from
// memory and costs where the later passes would find them in L2 (weight
// matrices): bench/RESULTS.md, "Kept decisions".
template <bool kPrefetch = false, class B>
inline void DirectColumns(ConstMatrix a, const B& b, Matrix c,
                          const MatMulOptions& opt, size_t n_begin,
                          size_t n_end) {
  using TB = ElementOf<B>;
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  const size_t K = a.cols;
  // Several rows of A times B together, their whole vectors; one row too
  // where it takes block rows, or rows that fill RowsTimesB's widest pass
  // (eight vectors), so that a row streams from memory in one pass: on a
  // Zen 4, float rows of 128 so read 1.1-1.5x as fast as by two passes of
  // four vectors, from memory and in the L3 (bench/RESULTS.md, "Kept
  // decisions").
  size_t n_rows_done = n_begin;
  constexpr bool kBlocks = internal::kBlockValues < TB >> 1;
  const bool one_row = kBlocks || (c.rows == 1 && n_end - n_begin >= 8 * N);
  if (opt.transpose_b == Transpose::kNo && (c.rows >= 2 || one_row) &&
      c.rows <= 4) {
    internal::WithRowCount<4>(c.rows, [&](auto rows) {
      n_rows_done = RowsTimesB<decltype(rows)::value, kPrefetch>(
          a, 0, b, c, opt, n_begin, n_end);
    });
  }
  for (size_t m = 0; m < c.rows; ++m) {
    if (opt.transpose_b == Transpose::kYes) {
      RowDots<kPrefetch>(a.Row(m), b, K, c.Row(m), opt, n_begin, n_end);
    } else {
      RowTimesB(a.Row(m), b, K, c.Row(m), opt, n_rows_done, n_end);
    }
  }
}

// Dot-product tiles for op(B) = B^T with few rows of A (decode's
// projections: nn.Linear weights are B^T): each loaded vector of B serves
// kDotRows rows of A and each of A kDotCols rows of B. B is read where it
// lies, without packing, once per kDotRows rows of A, and the next tile's rows
// of B are prefetched (B streams from memory in a model's decode step).
constexpr size_t kDotRows = kVectorRegisters == 32 ? 8 : 4;
constexpr size_t kDotCols = kVectorRegisters == 32 ? 3 : 2;

// v, held in a register: GCC otherwise folds a load of A into each of the
// multiply-adds that use it, doubling the tile's loads.
template <class V>
HWY_INLINE V InRegister(V v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  asm("" : "+v"(v.raw));
#endif
  return v;
}

// out[0, kCount) = the sums of the lanes of v0, ..., kCount <= 4.
template <size_t kCount, class D, class V = hn::Vec<D>>
HWY_INLINE void SumsOfLanes(D d, V v0, V v1, V v2, V v3,
                            float* HWY_RESTRICT out) {
  static_assert(kCount >= 1 && kCount <= 4, "one to four sums");
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  HWY_ALIGN float sums[4];
  SumOfLanes4(d, v0, v1, v2, v3, sums);
  std::copy(sums, sums + kCount, out);
#else
  out[0] = hn::GetLane(hn::SumOfLanes(d, v0));
  if constexpr (kCount > 1) out[1] = hn::GetLane(hn::SumOfLanes(d, v1));
  if constexpr (kCount > 2) out[2] = hn::GetLane(hn::SumOfLanes(d, v2));
  if constexpr (kCount > 3) out[3] = hn::GetLane(hn::SumOfLanes(d, v3));
#endif
}

// C[0, R) x [n0, n0 + C) of the dot products of A's R rows (of K) and rows
// b (ldb apart), prefetching the next tile's C rows of b, at `next`;
// R <= kDotRows, C <= kDotCols. Each sum is a vector's lanes, then the
// last K % Lanes elements, in a fixed order. Named accumulators: SVE vectors
// cannot form arrays.
// Scalars, not matrices, and the tag as a template argument: the calls pass
// everything in registers and on the stack as they did when this took 11
// parameters (two matrices by value cost the serving step 10-17%).
template <size_t R, size_t C, class D, typename TB>
HWY_NOINLINE void DotTile(const float* HWY_RESTRICT a, size_t lda,
                          const TB* HWY_RESTRICT b, const TB* next, size_t ldb,
                          size_t K, float* HWY_RESTRICT c, size_t ldc,
                          size_t n0, const MatMulOptions& opt) {
  static_assert(R >= 1 && R <= kDotRows && C >= 1 && C <= kDotCols,
                "tile too large");
  const D d;
  using Vec = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const Vec zero = hn::Zero(d);
  Vec s00 = zero, s01 = zero, s02 = zero, s10 = zero, s11 = zero, s12 = zero;
  Vec s20 = zero, s21 = zero, s22 = zero, s30 = zero, s31 = zero, s32 = zero;
  Vec s40 = zero, s41 = zero, s42 = zero, s50 = zero, s51 = zero, s52 = zero;
  Vec s60 = zero, s61 = zero, s62 = zero, s70 = zero, s71 = zero, s72 = zero;
  // One line of each next row per step, as many as a row spans (an 8-bit
  // row of 128 spans two or three lines, not eight steps).
  const size_t row_bytes =
      hwy::DivCeil(K, internal::kBlockValues<TB>) * sizeof(TB);
  size_t k = 0;
  for (size_t line = 0; k + N <= K; k += N, line += kLineBytes) {
    if (line < row_bytes + kLineBytes - 1) {
      const size_t offset = std::min(line, row_bytes - 1);
      for (size_t j = 0; j < C; ++j) {
        hwy::Prefetch(reinterpret_cast<const char*>(next + j * ldb) + offset);
      }
    }
    const Vec b0 = LoadB(d, b, k);
    const Vec b1 = C > 1 ? LoadB(d, b + ldb, k) : b0;
    const Vec b2 = C > 2 ? LoadB(d, b + 2 * ldb, k) : b0;
#define SIMDATTN_DOT_ROW(r)                                   \
  if (R > r) {                                                \
    const Vec ar = InRegister(hn::LoadU(d, a + r * lda + k)); \
    s##r##0 = hn::MulAdd(ar, b0, s##r##0);                    \
    if (C > 1) s##r##1 = hn::MulAdd(ar, b1, s##r##1);         \
    if (C > 2) s##r##2 = hn::MulAdd(ar, b2, s##r##2);         \
  }
    SIMDATTN_DOT_ROW(0)
    SIMDATTN_DOT_ROW(1)
    SIMDATTN_DOT_ROW(2)
    SIMDATTN_DOT_ROW(3)
    SIMDATTN_DOT_ROW(4)
    SIMDATTN_DOT_ROW(5)
    SIMDATTN_DOT_ROW(6)
    SIMDATTN_DOT_ROW(7)
#undef SIMDATTN_DOT_ROW
  }
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
  if constexpr (C > 1) {
    if (k == K) {
      // No elements past the vectors: each row's C sums, one transposing
      // reduction's lanes, stored as a vector (through memory, one at a
      // time, they took as long as the loop: forwarding stalls, and a
      // branchy scalar epilogue per sum). The same values.
      const hn::CappedTag<float, 4> d4;
#define SIMDATTN_DOT_STORE(r)                                 \
  if constexpr (R > r) {                                      \
    StoreLanes(d4, Sums4(d, s##r##0, s##r##1, s##r##2, zero), \
               c + r * ldc + n0, C, n0, opt);                 \
  }
      SIMDATTN_DOT_STORE(0)
      SIMDATTN_DOT_STORE(1)
      SIMDATTN_DOT_STORE(2)
      SIMDATTN_DOT_STORE(3)
      SIMDATTN_DOT_STORE(4)
      SIMDATTN_DOT_STORE(5)
      SIMDATTN_DOT_STORE(6)
      SIMDATTN_DOT_STORE(7)
#undef SIMDATTN_DOT_STORE
      return;
    }
  }
#endif
  // sums[r * C + j], up to four reductions at a time: a row's C <= 4 sums,
  // or the sums of four rows when C = 1.
  float sums[R * C];
  if constexpr (C == 1) {
    SumsOfLanes<std::min<size_t>(R, 4)>(d, s00, s10, s20, s30, sums);
    if constexpr (R > 4) SumsOfLanes<R - 4>(d, s40, s50, s60, s70, sums + 4);
  } else {
#define SIMDATTN_DOT_SUMS(r)                                          \
  if constexpr (R > r) {                                              \
    SumsOfLanes<C>(d, s##r##0, s##r##1, s##r##2, zero, sums + r * C); \
  }
    SIMDATTN_DOT_SUMS(0)
    SIMDATTN_DOT_SUMS(1)
    SIMDATTN_DOT_SUMS(2)
    SIMDATTN_DOT_SUMS(3)
    SIMDATTN_DOT_SUMS(4)
    SIMDATTN_DOT_SUMS(5)
    SIMDATTN_DOT_SUMS(6)
    SIMDATTN_DOT_SUMS(7)
#undef SIMDATTN_DOT_SUMS
  }
  const hn::CappedTag<float, 1> d1;
  for (size_t r = 0; r < R; ++r) {
    for (size_t j = 0; j < C; ++j) {
      auto dot = hn::Set(d1, sums[r * C + j]);
      for (size_t kk = k; kk < K; ++kk) {
        dot = hn::MulAdd(hn::Set(d1, a[r * lda + kk]),
                         LoadB(d1, b + j * ldb, kk), dot);
      }
      ScalarEpilogue(hn::GetLane(dot), c + r * ldc + n0 + j, n0 + j, opt);
    }
  }
}

template <size_t C, class D, typename TB>
HWY_INLINE void DotTileRows(D d, ConstMatrix a, const TB* b, const TB* next,
                            size_t ldb, Matrix c, size_t n0,
                            const MatMulOptions& opt) {
  (void)d;
  if (a.rows == kDotRows) {
    return DotTile<kDotRows, C, D>(a.data, a.stride, b, next, ldb, a.cols,
                                   c.data, c.stride, n0, opt);
  }
  internal::WithRowCount<4>(a.rows, [&](auto r) {
    DotTile<decltype(r)::value, C, D>(a.data, a.stride, b, next, ldb, a.cols,
                                      c.data, c.stride, n0, opt);
  });
}

// Columns [n_begin, n_end) of C = A B^T by dot-product tiles: for each
// kDotCols rows of B, every kDotRows rows of A (then at most 4 at a time).
template <typename TB>
inline void DotColumns(ConstMatrix a, MatrixView<const TB> b, Matrix c,
                       const MatMulOptions& opt, size_t n_begin, size_t n_end) {
  const hn::ScalableTag<float> d;
  for (size_t n = n_begin; n < n_end; n += kDotCols) {
    const size_t cols = std::min(kDotCols, n_end - n);
    for (size_t m = 0, rows = 0; m < c.rows; m += rows) {
      rows =
          c.rows - m >= kDotRows ? kDotRows : std::min<size_t>(4, c.rows - m);
      const ConstMatrix a_rows(a.Row(m), rows, a.cols, a.stride);
      const Matrix c_rows(c.Row(m), rows, c.cols, c.stride);
      if (cols == kDotCols) {
        // The next tile's rows; the last tile's own.
        const TB* next = b.Row(std::min(n + kDotCols, n_end - kDotCols));
        DotTileRows<kDotCols>(d, a_rows, b.Row(n), next, b.stride, c_rows, n,
                              opt);
      } else {
        for (size_t j = 0; j < cols; ++j) {
          DotTileRows<1>(d, a_rows, b.Row(n + j), b.Row(n + j), b.stride,
                         c_rows, n + j, opt);
        }
      }
    }
  }
}

// DirectColumns, prefetching long 16-bit rows of B^T.
template <typename TB>
inline void SkinnyColumns(ConstMatrix a, MatrixView<const TB> b, Matrix c,
                          const MatMulOptions& opt, size_t n_begin,
                          size_t n_end) {
  if constexpr (sizeof(TB) == 2) {
    if (opt.transpose_b == Transpose::kYes && a.cols >= kPrefetchMinDepth) {
      return DirectColumns<true>(a, b, c, opt, n_begin, n_end);
    }
  }
  DirectColumns(a, b, c, opt, n_begin, n_end);
}

}  // namespace matmul_detail

// Same-target entry point; arguments were validated by the caller.
template <typename TB>
inline void MatMulOf(ConstMatrix a, MatrixView<const TB> b, Matrix c,
                     const MatMulOptions& opt) {
  using namespace matmul_detail;
  const size_t M = c.rows, N = c.cols, K = a.cols;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // No product: C = beta * C + bias. A and B may be null here, so no row
    // pointer into them is formed (null + offset is undefined behaviour).
    for (size_t m = 0; m < M; ++m) {
      for (size_t n = 0; n < N; ++n) ScalarEpilogue(0.0f, c.Row(m) + n, n, opt);
    }
    return;
  }
  const hn::ScalableTag<float> d;
  const internal::MatMulPlan plan =
      internal::PlanMatMul(M, N, K, opt.transpose_b == Transpose::kYes,
                           {kRows, kVectors * hn::Lanes(d), kDotCols},
                           internal::ArenaThreads(), internal::ActivePolicy());
  const auto columns = [&](auto path) {
    if (plan.grain >= N) return path(a, b, c, opt, 0, N);
    internal::ParallelFor(0, N, plan.grain, [&](size_t first, size_t last) {
      path(a, b, c, opt, first, last);
    });
  };
  switch (plan.path) {
    case internal::MatMulPath::kDotColumns:
      return columns([](auto... args) { DotColumns(args...); });
    case internal::MatMulPath::kTiled:
      return TiledMatMul(a, b, c, opt, plan.grid);
    case internal::MatMulPath::kSkinnyColumns:
      return columns([](auto... args) { SkinnyColumns(args...); });
  }
}

inline void MatMulImpl(ConstMatrix a, ConstMatrix b, Matrix c,
                       const MatMulOptions& opt) {
  MatMulOf(a, b, c, opt);
}
inline void MatMulBF16Impl(ConstMatrix a, MatrixView<const BFloat16> b,
                           Matrix c, const MatMulOptions& opt) {
  MatMulOf(a, b, c, opt);
}
inline void MatMulF16Impl(ConstMatrix a, MatrixView<const Float16> b, Matrix c,
                          const MatMulOptions& opt) {
  MatMulOf(a, b, c, opt);
}

// a's rows widened exactly into `out`, dense (bf16 activations).
inline void WidenRowsImpl(MatrixView<const BFloat16> a, float* out) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d), K = a.cols;
  internal::ParallelFor(0, a.rows, 16, [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      const BFloat16* row = a.Row(r);
      float* dst = out + r * K;
      size_t k = 0;
      for (; k + N <= K; k += N) {
        hn::StoreU(matmul_detail::LoadB(d, row, k), d, dst + k);
      }
      for (; k < K; ++k) dst[k] = hn::GetLane(matmul_detail::LoadB(d1, row, k));
    }
  });
}

// Same-target batched product over (i0, i1); B may have fewer heads.
inline void BatchedMatMulImpl(ConstTensor4 a, ConstTensor4 b, Tensor4 c,
                              const MatMulOptions& opt) {
  const size_t heads = a.dims[1];
  const size_t group = heads / b.dims[1];
  internal::ParallelFor(0, a.NumMatrices(), 1, [&](size_t first, size_t last) {
    for (size_t index = first; index < last; ++index) {
      const size_t i0 = index / heads, i1 = index % heads;
      MatMulImpl(a.Slice(i0, i1), b.Slice(i0, i1 / group), c.Slice(i0, i1),
                 opt);
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_MATMUL_INL_H_
