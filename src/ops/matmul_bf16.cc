// MatMul in bfloat16 arithmetic: A and op(B) rounded to bf16 (nearest
// even), products summed in float32.
//
// Native kernels, used when the dispatched target is AVX3 and the CPU has
// them (BFloat16DotKernel):
// - AMX (Intel Sapphire Rapids and later): tdpbf16ps multiplies 16 x 32 by
//   32 x 16 bf16 tiles into 16 x 16 floats, 16x the work of an AVX-512 FMA.
// - AVX512_BF16's vdpbf16ps: two bf16 products per float lane per
//   instruction, on AMD (Zen 4 and later) at twice the float32 FMA rate.
// Highway 1.0.3 has neither (its bf16 ReorderWidenMulAccumulate is
// emulated), so this file holds the intrinsics behind MatMulBFloat16. Once
// a Highway whose ReorderWidenMulAccumulate uses vdpbf16ps (AVX3_SPR,
// AVX3_ZEN4) and BFDOT (Arm) is the minimum, a Highway template replaces
// the vdpbf16ps kernel; AMX stays outside Highway's vectors. Both kernels
// treat subnormal bf16 operands and results as zero.
//
// Fallback (every other CPU or target): the rounded operands, widened back
// exactly, through the float32 MatMul.
#include "src/ops/matmul_bf16.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "hwy/base.h"
#include "simdattn/targets.h"
#include "src/common/cpu.h"
#include "src/common/scratch.h"
#include "src/ops/amx_tiles.h"
#include "src/ops/bf16_pairs.h"
#include "src/ops/gemm_driver.h"
#include "src/ops/kv_store.h"
#include "src/ops/packed_matrix.h"
#include "src/ops/policy.h"
#include "src/ops/target_family.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SIMDATTN_HAVE_AVX512_BF16_KERNEL 1
#endif

namespace simdattn {
namespace internal {
namespace {

// A rounded (widened back to float) times B already in bf16 through the
// float32 kernel, which widens B exactly while packing. Scratch from the
// pool: no allocation in steady state.
template <typename TB>
void RoundedA(ConstMatrix a, MatrixView<const TB> b, Matrix c,
              const MatMulOptions& options) {
  const size_t a_size = a.rows * a.cols;
  ScratchBuffer a_rounded(a_size), a16(a_size / 2 + 1);
  RoundToBFloat16(ConstTensor4(a), reinterpret_cast<BFloat16*>(a16.data()),
                  a_rounded.data());
  MatMulOptions float32 = options;
  float32.compute = ComputeType::kFloat32;
  MatMul(ConstMatrix(a_rounded.data(), a.rows, a.cols), b, c, float32);
}

// The rounded operands through the float32 kernel: B rounded into bf16
// storage, then RoundedA.
void Fallback(ConstMatrix a, ConstMatrix b, Matrix c,
              const MatMulOptions& options) {
  ScratchBuffer b16(b.rows * b.cols / 2 + 1);
  RoundToBFloat16(ConstTensor4(b), reinterpret_cast<BFloat16*>(b16.data()),
                  nullptr);
  RoundedA(a,
           MatrixView<const BFloat16>(
               reinterpret_cast<const BFloat16*>(b16.data()), b.rows, b.cols),
           c, options);
}

#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
#define SIMDATTN_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512bf16")))

// Packed operands: pairs of bf16 along K in one uint32, element 2k2 in the
// low half (the instructions multiply the low halves, then the high ones).
// K2 = ceil(K / 2) rounded up to kPairBlock, zero-padded. A: row m's K2
// pairs contiguous, rows rounded up to an AMX tile with zeros. B: panel p
// holds, for each pair k2, its columns' pairs: kPanel of them for
// vdpbf16ps, which reads a panel row as 4 vectors; kAmxStrip for AMX, so
// that each of its tiles is 1 KiB in one piece (AmxTiles::Strips: 1.06x
// the products of 64-column panels on the Xeon, bench/RESULTS.md).
constexpr size_t kPanel = 64;  // Columns per vdpbf16ps panel of packed B.
constexpr size_t kAmxStrip = kAmxTileRows;  // Columns per AMX panel.
constexpr size_t kPairBlock = kAmxTilePairs;
constexpr size_t kTileRows = kAmxTileRows;

// Columns per panel of B packed for `kernel`.
size_t PanelWidth(BFloat16DotKernelKind kernel) {
  return kernel == BFloat16DotKernelKind::kAmx ? kAmxStrip : kPanel;
}

using Operands = PairOperands<kPanel>;

// Row of C = alpha acc + beta C + bias over `cols` columns, 16 per vector
// of acc.
struct Epilogue {
  const MatMulOptions& opt;
  const float* bias;  // At the row's first column, or null.

  SIMDATTN_BF16_TARGET void Row(const __m512* acc, size_t cols,
                                float* out) const {
    const __m512 alpha = _mm512_set1_ps(opt.alpha);
    for (size_t v = 0; 16 * v < cols; ++v) {
      const size_t lanes = std::min<size_t>(16, cols - 16 * v);
      const __mmask16 m = static_cast<__mmask16>((1u << lanes) - 1);
      __m512 value = _mm512_mul_ps(alpha, acc[v]);
      if (opt.beta != 0.0f) {
        value = _mm512_fmadd_ps(_mm512_set1_ps(opt.beta),
                                _mm512_maskz_loadu_ps(m, out + 16 * v), value);
      }
      if (bias != nullptr) {
        value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(m, bias + 16 * v));
      }
      _mm512_mask_storeu_ps(out + 16 * v, m, value);
    }
  }
};

// vdpbf16ps kernel. Register tile: up to kRows x 4 vectors of 16 columns
// (24 accumulators, 4 loads of B and a broadcast of A in 32 registers).
constexpr size_t kRows = 6;

// C[0..R, 0..cols) = epilogue(A B) for R rows of A's pairs and V vectors of
// B's columns (pair q of column n at b + q * b_stride + n).
template <size_t R, size_t V>
SIMDATTN_BF16_TARGET void MicroKernel(const uint32_t* a, size_t a_stride,
                                      const uint32_t* b, size_t b_stride,
                                      size_t pairs, float* c, size_t ldc,
                                      size_t cols, const Epilogue& epilogue) {
  __m512 acc[R][4];
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (size_t p = 0; p < pairs; ++p) {
    const float* bp = reinterpret_cast<const float*>(b + p * b_stride);
    __m512bh bv[V];
    for (size_t v = 0; v < V; ++v) {
      bv[v] = (__m512bh)_mm512_loadu_ps(bp + 16 * v);
    }
    for (size_t r = 0; r < R; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(
          static_cast<int>(PairAt(a + r * a_stride, p)));
      for (size_t v = 0; v < V; ++v) {
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]);
      }
    }
  }
  for (size_t r = 0; r < R; ++r) epilogue.Row(acc[r], cols, c + r * ldc);
}

// MicroKernel<rows, V> for 1 <= rows <= kRows.
template <size_t V, typename... Args>
void RowsOfTile(size_t rows, Args... args) {
  WithRowCount<kRows>(
      rows, [&](auto r) { MicroKernel<decltype(r)::value, V>(args...); });
}

// Tasks of up to the policy's matmul_task_tiles tiles of rows
// (BalancedRowBlock) x one panel. K is not
// blocked: a panel holds K / 2 x 64 pairs (96 KiB at K = 768), which L2
// serves at the kernel's pace (blocking K for L1 measured slower:
// bench/RESULTS.md).
void DotProducts(const Operands& packed, Matrix c, const MatMulOptions& opt) {
  const size_t panels = hwy::DivCeil(c.cols, kPanel);
  const auto grid = GemmGrid::PanelMajor(
      c.rows, c.cols,
      BalancedRowBlock(c.rows, panels, kRows, kRows * kPanel * 2 * packed.pairs,
                       ActivePolicy().matmul_task_tiles, ArenaThreads()),
      kPanel);
  ForEachGemmTask(grid, [&](const GemmTask& task) {
    const Epilogue epilogue{opt,
                            opt.bias != nullptr ? opt.bias + task.n0 : nullptr};
    for (size_t m = task.m0; m < task.m_end; m += kRows) {
      RowsOfTile<4>(std::min(kRows, task.m_end - m), packed.Row(m),
                    packed.a_stride, packed.Panel(task.p), kPanel, packed.pairs,
                    c.Row(m) + task.n0, c.stride, task.cols, epilogue);
    }
  });
}

// AMX kernel: tasks of kAmxRowBlock rows x up to kAmxColumns columns, the
// whole of K for each 32 x 32 block of C (AmxProduct). Wide tasks reuse
// each row of blocks' A tiles from L1: 384 columns ran 1.2x as fast as 64
// on the Xeon (bench/RESULTS.md); blocking K measured no faster. Blocks go
// straight into C when there is no epilogue to apply (alpha 1, beta 0, no
// bias) and the task is whole tiles, else through Finish.
constexpr size_t kAmxRowBlock = 6 * kTileRows;
constexpr size_t kAmxColumns = 24 * kTileRows;

struct AmxEpilogue final : AmxBlocks {
  AmxEpilogue(const MatMulOptions& opt, Matrix c, const GemmTask& task)
      : opt(opt), c(c), task(task) {}
  const MatMulOptions& opt;
  Matrix c;
  const GemmTask& task;

  SIMDATTN_BF16_TARGET void Finish(const float* block, size_t r, size_t n,
                                   size_t rows, size_t cols) const override {
    const size_t m = task.m0 + r, col = task.n0 + n;
    if (m >= task.m_end || n >= task.cols) return;
    rows = std::min(rows, task.m_end - m);
    const Epilogue epilogue{opt,
                            opt.bias != nullptr ? opt.bias + col : nullptr};
    for (size_t i = 0; i < rows; ++i) {
      const float* row = block + i * kStride;
      const __m512 acc[2] = {_mm512_load_ps(row), _mm512_load_ps(row + 16)};
      epilogue.Row(acc, std::min(cols, task.cols - n), c.Row(m + i) + col);
    }
  }
};

SIMDATTN_BF16_TARGET void AmxTask(const Operands& packed, Matrix c,
                                  const MatMulOptions& opt,
                                  const GemmTask& task) {
  const size_t rows = hwy::RoundUpTo(task.m_end - task.m0, kTileRows);
  const size_t cols = hwy::RoundUpTo(task.cols, kAmxStrip);
  const AmxTiles a = AmxTiles::Rows(packed.Row(task.m0), packed.a_stride);
  const AmxTiles b =
      AmxTiles::Strips(packed.b + task.n0 * packed.k2, packed.k2);
  const bool plain =
      opt.alpha == 1.0f && opt.beta == 0.0f && opt.bias == nullptr;
  if (plain && rows == task.m_end - task.m0 && cols == task.cols) {
    return AmxProduct(a, b, rows, cols, packed.k2, c.Row(task.m0) + task.n0,
                      c.stride);
  }
  const AmxEpilogue epilogue(opt, c, task);
  AmxProduct(a, b, rows, cols, packed.k2, nullptr, 0, &epilogue);
}

// Columns per AMX task: kAmxColumns, halved down to 96 while the grid has
// fewer than 4 tasks per thread, so that every core of a large machine
// gets work. Each block of C sums the whole of K whatever the width: the
// same bits for any thread count.
size_t AmxTaskColumns(size_t rows, size_t cols) {
  const size_t threads = ArenaThreads();
  const size_t row_blocks = hwy::DivCeil(rows, kAmxRowBlock);
  size_t width = kAmxColumns;
  while (width / 2 >= 6 * kTileRows &&
         row_blocks * hwy::DivCeil(cols, width) < 4 * threads) {
    width /= 2;
  }
  return width;
}

void Tiles(const Operands& packed, Matrix c, const MatMulOptions& opt) {
  // Per chunk of tasks, on its thread: AMX's tile configuration is per
  // thread, and TBB may run the chunks on any.
  ForEachGemmTask(
      GemmGrid::PanelMajor(c.rows, c.cols, kAmxRowBlock,
                           AmxTaskColumns(c.rows, c.cols)),
      [] { return AmxScope(); },
      [&](const GemmTask& task, const AmxScope&) {
        AmxTask(packed, c, opt, task);
      });
}
#endif  // SIMDATTN_HAVE_AVX512_BF16_KERNEL

}  // namespace

#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
void DotProductPairs(const uint32_t* a, size_t a_stride, const uint32_t* b,
                     size_t b_stride, size_t rows, size_t cols, size_t pairs,
                     float* c, size_t ldc) {
  const MatMulOptions plain;
  const Epilogue epilogue{plain, nullptr};
  for (size_t n = 0; n < cols; n += kPanel) {
    const size_t width = std::min(kPanel, cols - n);  // A multiple of 16.
    for (size_t m = 0; m < rows; m += kRows) {
      const auto tile = [&](auto vectors) {
        RowsOfTile<decltype(vectors)::value>(
            std::min(kRows, rows - m), a + m * a_stride, a_stride, b + n,
            b_stride, pairs, c + m * ldc + n, ldc, width, epilogue);
      };
      switch (width / 16) {
        case 1:
          tile(std::integral_constant<size_t, 1>());
          break;
        case 2:
          tile(std::integral_constant<size_t, 2>());
          break;
        case 3:
          tile(std::integral_constant<size_t, 3>());
          break;
        default:
          tile(std::integral_constant<size_t, 4>());
          break;
      }
    }
  }
}
#else
void DotProductPairs(const uint32_t*, size_t, const uint32_t*, size_t, size_t,
                     size_t, size_t, float*, size_t) {
  std::abort();
}
#endif

BFloat16DotKernelKind ChosenBFloat16DotKernel() {
  const Policy& policy = ActivePolicy();
  const BFloat16DotPolicy p = policy.bf16_dot;
  if (p == BFloat16DotPolicy::kFallback)
    return BFloat16DotKernelKind::kFallback;
  const int64_t target = ActiveTargetBit();
#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
  if (!ThisCpu().avx512_bf16 || !IsAvx512Target(target)) {
    return BFloat16DotKernelKind::kFallback;
  }
  if (p != BFloat16DotPolicy::kDotProduct && AmxUsable()) {
    return BFloat16DotKernelKind::kAmx;
  }
  // vdpbf16ps where the policy table says it pays.
  if (p != BFloat16DotPolicy::kDotProduct && !policy.dot_product_pairs) {
    return BFloat16DotKernelKind::kFallback;
  }
  return BFloat16DotKernelKind::kDotProduct;
#else
  return IsArmSimdTarget(target) && BfdotUsable()
             ? BFloat16DotKernelKind::kBfdot
             : BFloat16DotKernelKind::kFallback;
#endif
}

namespace {

// b widened (exactly) into `out`, dense.
template <typename T>
ConstMatrix Widen(MatrixView<const T> b, float* out) {
  for (size_t r = 0; r < b.rows; ++r) {
    for (size_t j = 0; j < b.cols; ++j) out[r * b.cols + j] = ToFloat(b(r, j));
  }
  return ConstMatrix(out, b.rows, b.cols);
}

// With few rows of A, packing all of op(B) costs more than the native
// products save over the float32 kernel's (bench/RESULTS.md).
bool FewRows(Matrix c) {
  constexpr size_t kMinNativeRows = 64;
  return c.rows < kMinNativeRows &&
         ActivePolicy().bf16_dot == BFloat16DotPolicy::kAuto;
}

#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
// Pairs along K on x86: rounded up to kPairBlock (AMX reads whole tiles).
size_t X86Pairs(size_t k) {
  return hwy::RoundUpTo(hwy::DivCeil(k, 2), kPairBlock);
}
#endif

// The native x86 kernels over A (float or bf16) and op(B) packed in
// `b_pairs` (panels of kPanel columns, k2 pairs). AMX reads A in whole
// tiles (rows rounded up to 16, k2 pairs); vdpbf16ps its ceil(K / 2) pairs.
template <typename TA>
void NativeProduct(BFloat16DotKernelKind kernel, MatrixView<const TA> a,
                   const uint32_t* b_pairs, size_t k2, Matrix c,
                   const MatMulOptions& options) {
#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
  const bool amx = kernel == BFloat16DotKernelKind::kAmx;
  const size_t pairs = hwy::DivCeil(a.cols, 2);
  const size_t a_pairs = amx ? k2 : pairs;
  const size_t a_rows = amx ? hwy::RoundUpTo(a.rows, kTileRows) : a.rows;
  std::optional<PairRows> rows;
  if constexpr (std::is_same_v<TA, float>) {
    rows.emplace(a, a_pairs, a_rows, PairsOfRow);
  } else {
    rows.emplace(a, a_pairs, a_rows);
  }
  const Operands operands{rows->data(), rows->stride(), b_pairs, k2, pairs};
  if (amx) return Tiles(operands, c, options);
  DotProducts(operands, c, options);
#else
  (void)kernel, (void)a, (void)b_pairs, (void)k2, (void)c, (void)options;
#endif
}

// The native x86 kernels over B of any element type, packed from where it
// lies.
template <typename TB>
void NativeProduct(BFloat16DotKernelKind kernel, ConstMatrix a,
                   MatrixView<const TB> b, Matrix c,
                   const MatMulOptions& options) {
#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
  const size_t k2 = X86Pairs(a.cols), width = PanelWidth(kernel);
  const ScratchBuffer b_pairs(hwy::DivCeil(c.cols, width) * k2 * width);
  uint32_t* panels = reinterpret_cast<uint32_t*>(b_pairs.data());
  PackPairPanels(b, c.cols, options.transpose_b == Transpose::kYes, k2, width,
                 PairsOfRow, panels);
  NativeProduct(kernel, a, panels, k2, c, options);
#else
  (void)kernel, (void)a, (void)b, (void)c, (void)options;
#endif
}

// 16-bit B: the x86 kernels pack it where it lies (bf16's bits as stored).
// Otherwise bf16 B goes as stored to the fallback (A rounded; also with few
// rows), and is widened for BFDOT; fp16 B is widened for every other path.
template <typename TB>
void MatMulBFloat16Of16Bits(ConstMatrix a, MatrixView<const TB> b, Matrix c,
                            const MatMulOptions& options) {
  const BFloat16DotKernelKind kernel = ChosenBFloat16DotKernel();
  if constexpr (std::is_same_v<TB, BFloat16>) {
    if (kernel == BFloat16DotKernelKind::kFallback || FewRows(c)) {
      return RoundedA(a, b, c, options);  // B is rounded already.
    }
  }
  if (kernel == BFloat16DotKernelKind::kAmx ||
      kernel == BFloat16DotKernelKind::kDotProduct) {
    if (!FewRows(c)) return NativeProduct(kernel, a, b, c, options);
  }
  const ScratchBuffer wide(b.rows * b.cols + 1);
  MatMulBFloat16(a, Widen(b, wide.data()), c, options);
}

}  // namespace

void MatMulBFloat16(ConstMatrix a, ConstMatrix b, Matrix c,
                    const MatMulOptions& options) {
  const BFloat16DotKernelKind kernel = ChosenBFloat16DotKernel();
  if (kernel == BFloat16DotKernelKind::kFallback || FewRows(c)) {
    return Fallback(a, b, c, options);
  }
  if (kernel == BFloat16DotKernelKind::kBfdot) {
    return MatMulBfdot(a, b, c, options);
  }
  NativeProduct(kernel, a, b, c, options);
}

void MatMulBFloat16(ConstMatrix a, MatrixView<const BFloat16> b, Matrix c,
                    const MatMulOptions& options) {
  MatMulBFloat16Of16Bits(a, b, c, options);
}

void MatMulBFloat16(ConstMatrix a, MatrixView<const Float16> b, Matrix c,
                    const MatMulOptions& options) {
  MatMulBFloat16Of16Bits(a, b, c, options);
}

template <typename TB>
void PackBFloat16Pairs(MatrixView<const TB> b, PackedMatrix::Impl* out) {
  const bool transposed = out->transpose_b == Transpose::kYes;
#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
  // Float rows of B^T by the per-call path's conversion (vcvtne2ps2bf16,
  // which also flushes subnormal floats): the same pairs, the same bits.
  const size_t columns = PanelWidth(out->kernel);
  out->k2 = X86Pairs(out->rows);
  const auto& pack_row = PairsOfRow;
#else
  // BFCVTN rounds as the scalar conversion does.
  constexpr size_t columns = kBfdotPanel;
  out->k2 = BfdotPairs(out->rows);
  const auto pack_row = [](const float* row, size_t k, size_t k2,
                           uint32_t* pairs) {
    PairsOfElements(row, k, k2, pairs);
  };
#endif
  out->pairs.resize(hwy::DivCeil(out->cols, columns) * out->k2 * columns);
  PackPairPanels(b, out->cols, transposed, out->k2, columns, pack_row,
                 out->pairs.data());
}
template void PackBFloat16Pairs(ConstMatrix, PackedMatrix::Impl*);
template void PackBFloat16Pairs(MatrixView<const BFloat16>,
                                PackedMatrix::Impl*);
template void PackBFloat16Pairs(MatrixView<const Float16>, PackedMatrix::Impl*);

void MatMulBFloat16(ConstMatrix a, const PackedMatrix::Impl& b, Matrix c,
                    const MatMulOptions& options) {
  if (!b.native()) {  // B is stored rounded.
    return b.VisitStored([&](auto stored) { RoundedA(a, stored, c, options); });
  }
  if (b.kernel == BFloat16DotKernelKind::kBfdot) {
    return BfdotProduct(a, b.pairs.data(), b.k2, c, options);
  }
  NativeProduct(b.kernel, a, b.pairs.data(), b.k2, c, options);
}

bool MatMulBFloat16(MatrixView<const BFloat16> a, const PackedMatrix::Impl& b,
                    Matrix c, const MatMulOptions& options) {
  if (!b.native()) return false;
  if (b.kernel == BFloat16DotKernelKind::kBfdot) {
    BfdotProduct(a, b.pairs.data(), b.k2, c, options);
  } else {
    NativeProduct(b.kernel, a, b.pairs.data(), b.k2, c, options);
  }
  return true;
}

}  // namespace internal

bool NativeBFloat16Dot() {
  return internal::ChosenBFloat16DotKernel() !=
         internal::BFloat16DotKernelKind::kFallback;
}

const char* BFloat16DotKernel() {
  switch (internal::ChosenBFloat16DotKernel()) {
    case internal::BFloat16DotKernelKind::kAmx:
      return "AMX";
    case internal::BFloat16DotKernelKind::kDotProduct:
      return "AVX512_BF16";
    case internal::BFloat16DotKernelKind::kBfdot:
      return "BFDOT";
    case internal::BFloat16DotKernelKind::kFallback:
      break;
  }
  return "float32 fallback";
}

}  // namespace simdattn
