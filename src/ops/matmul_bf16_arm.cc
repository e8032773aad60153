// MatMul in bf16 arithmetic on Arm's BFDOT (FEAT_BF16: Neoverse V1, V2 and
// N2, Graviton 3 and 4, Apple M2 and later): each float lane adds the two
// products of a pair of bf16, twice the float32 FMA's products per
// instruction. Highway 1.0.3 has no native bf16 dot product (its bf16
// ReorderWidenMulAccumulate is emulated), so this file holds the
// intrinsics; once a Highway whose ReorderWidenMulAccumulate uses BFDOT is
// the minimum, a Highway template replaces it.
#include "src/ops/matmul_bf16.h"

#if defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#include <arm_neon.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "hwy/base.h"
#include "src/common/cpu.h"
#include "src/ops/bf16_pairs.h"
#include "src/ops/gemm_driver.h"
#include "src/ops/policy.h"

namespace simdattn {
namespace internal {
namespace {

#define SIMDATTN_BFDOT_TARGET __attribute__((target("arch=armv8.2-a+bf16")))

// Operands as bf16_pairs.h's pairs, B in panels of kPanel columns.
constexpr size_t kPanel = kBfdotPanel;  // Four vectors of four columns.
constexpr size_t kRows = 4;             // 16 accumulators, 4 of B, 1 of A.

// A row of K floats as k2 = ceil(K / 2) pairs (BFCVTN rounds to nearest
// even).
SIMDATTN_BFDOT_TARGET void PackRow(const float* row, size_t k, size_t /* k2 */,
                                   uint32_t* out) {
  size_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const bfloat16x8_t v = vcvtq_high_bf16_f32(
        vcvtq_low_bf16_f32(vld1q_f32(row + i)), vld1q_f32(row + i + 4));
    vst1q_u32(out + i / 2, vreinterpretq_u32_bf16(v));
  }
  for (; i < k; i += 2) {
    out[i / 2] = BFloat16Pair(row[i], i + 1 < k ? row[i + 1] : 0.0f);
  }
}

using Operands = PairOperands<kPanel>;

// C[0..R, 0..cols) = alpha A B + beta C + bias over k2 pairs, for R rows of
// A's pairs (a_stride apart) and a panel of kPanel columns whose pair q lies
// at panel + q * panel_stride, from column n0 of C.
template <size_t R>
SIMDATTN_BFDOT_TARGET void MicroKernel(const uint32_t* a, size_t a_stride,
                                       const uint32_t* panel,
                                       size_t panel_stride, size_t k2,
                                       size_t n0, float* c, size_t ldc,
                                       size_t cols, const MatMulOptions& opt) {
  float32x4_t acc[R][4];
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < 4; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  }
  for (size_t q = 0; q < k2; ++q) {
    const uint32_t* bq = panel + q * panel_stride;
    const bfloat16x8_t b0 = vreinterpretq_bf16_u32(vld1q_u32(bq));
    const bfloat16x8_t b1 = vreinterpretq_bf16_u32(vld1q_u32(bq + 4));
    const bfloat16x8_t b2 = vreinterpretq_bf16_u32(vld1q_u32(bq + 8));
    const bfloat16x8_t b3 = vreinterpretq_bf16_u32(vld1q_u32(bq + 12));
    for (size_t r = 0; r < R; ++r) {
      const bfloat16x8_t pair =
          vreinterpretq_bf16_u32(vdupq_n_u32(PairAt(a + r * a_stride, q)));
      acc[r][0] = vbfdotq_f32(acc[r][0], pair, b0);
      acc[r][1] = vbfdotq_f32(acc[r][1], pair, b1);
      acc[r][2] = vbfdotq_f32(acc[r][2], pair, b2);
      acc[r][3] = vbfdotq_f32(acc[r][3], pair, b3);
    }
  }
  float sums[kPanel];
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < 4; ++v) vst1q_f32(sums + 4 * v, acc[r][v]);
    float* out = c + r * ldc;
    for (size_t j = 0; j < cols; ++j) {
      out[j] = EpilogueValue(opt, sums[j], out + j, n0 + j);
    }
  }
}

}  // namespace

bool BfdotUsable() { return ThisCpu().arm_bf16; }

size_t BfdotPairs(size_t k) { return hwy::DivCeil(k, 2); }

namespace {

// C = alpha A op(B) + beta C + bias over A's pairs and op(B)'s panels (k2
// pairs each).
void BfdotTasks(const PairRows& a, const uint32_t* b_pairs, size_t k2, Matrix c,
                const MatMulOptions& opt) {
  const Operands packed{a.data(), a.stride(), b_pairs, k2, k2};
  const size_t row_block = BalancedRowBlock(
      c.rows, hwy::DivCeil(c.cols, kPanel), kRows, kRows * kPanel * 2 * k2,
      ActivePolicy().matmul_task_tiles, ArenaThreads());
  ForEachGemmTask(
      GemmGrid::PanelMajor(c.rows, c.cols, row_block, kPanel),
      [&](const GemmTask& task) {
        for (size_t m = task.m0; m < task.m_end; m += kRows) {
          WithRowCount<kRows>(std::min(kRows, task.m_end - m), [&](auto r) {
            MicroKernel<decltype(r)::value>(
                packed.Row(m), packed.a_stride, packed.Panel(task.p), kPanel,
                packed.k2, task.n0, c.Row(m) + task.n0, c.stride, task.cols,
                opt);
          });
        }
      });
}

}  // namespace

void BfdotProduct(ConstMatrix a, const uint32_t* b_pairs, size_t k2, Matrix c,
                  const MatMulOptions& opt) {
  BfdotTasks(PairRows(a, k2, a.rows, PackRow), b_pairs, k2, c, opt);
}

void BfdotProduct(MatrixView<const BFloat16> a, const uint32_t* b_pairs,
                  size_t k2, Matrix c, const MatMulOptions& opt) {
  BfdotTasks(PairRows(a, k2, a.rows), b_pairs, k2, c, opt);
}

void BfdotPairProduct(const uint32_t* a, size_t a_stride, const uint32_t* b,
                      size_t b_stride, size_t rows, size_t cols, size_t pairs,
                      float* c, size_t ldc) {
  const MatMulOptions plain;
  for (size_t n = 0; n < cols; n += kPanel) {
    for (size_t m = 0; m < rows; m += kRows) {
      WithRowCount<kRows>(std::min(kRows, rows - m), [&](auto r) {
        MicroKernel<decltype(r)::value>(a + m * a_stride, a_stride, b + n,
                                        b_stride, pairs, n, c + m * ldc + n,
                                        ldc, std::min(kPanel, cols - n), plain);
      });
    }
  }
}

void MatMulBfdot(ConstMatrix a, ConstMatrix b, Matrix c,
                 const MatMulOptions& opt) {
  const size_t k2 = BfdotPairs(a.cols);
  const ScratchBuffer b_pairs(hwy::DivCeil(c.cols, kPanel) * k2 * kPanel);
  uint32_t* panels = reinterpret_cast<uint32_t*>(b_pairs.data());
  PackPairPanels(b, c.cols, opt.transpose_b == Transpose::kYes, k2, kPanel,
                 PackRow, panels);
  BfdotProduct(a, panels, k2, c, opt);
}

}  // namespace internal
}  // namespace simdattn

#else  // Not aarch64 Linux: no BFDOT kernel.

namespace simdattn {
namespace internal {
bool BfdotUsable() { return false; }
size_t BfdotPairs(size_t k) { return (k + 1) / 2; }
void BfdotProduct(ConstMatrix, const uint32_t*, size_t, Matrix,
                  const MatMulOptions&) {}
void BfdotProduct(MatrixView<const BFloat16>, const uint32_t*, size_t, Matrix,
                  const MatMulOptions&) {}
void MatMulBfdot(ConstMatrix, ConstMatrix, Matrix, const MatMulOptions&) {}
void BfdotPairProduct(const uint32_t*, size_t, const uint32_t*, size_t, size_t,
                      size_t, size_t, float*, size_t) {}
}  // namespace internal
}  // namespace simdattn

#endif
