// The float32 MatMul's plan, which matmul-inl.h executes: the path that
// serves the problem, and its split into tasks. Plain C++ from the problem,
// the target's register tile (an input: the kernels fix it per target) and
// the policy's task knobs. The path depends on the problem alone; the
// tasks never change bits (each output sums the whole of K in one order).
#ifndef SIMDATTN_SRC_OPS_MATMUL_PLAN_H_
#define SIMDATTN_SRC_OPS_MATMUL_PLAN_H_

#include <cstddef>

#include "src/ops/gemm_driver.h"
#include "src/ops/policy.h"

namespace simdattn {
namespace internal {

// With op(B) = B^T, kMatMulDotMinRows to kMatMulDotMaxRows rows of A go by
// dot-product tiles: B read where it lies, once per few rows of A. One row
// streams B one dot at a time: without reuse of B a tile gains nothing.
inline constexpr size_t kMatMulDotMinRows = 2;
inline constexpr size_t kMatMulDotMaxRows = 16;
// Below this many multiply-adds, or with at most kMatMulSkinnyRows rows,
// packing and task spawning cost more than they save.
inline constexpr size_t kMatMulSmallWork = size_t{1} << 15;
inline constexpr size_t kMatMulSkinnyRows = 4;
// The column paths are split over threads only above this many
// multiply-adds.
inline constexpr size_t kMatMulParallelWork = size_t{1} << 20;

enum class MatMulPath {
  kDotColumns,     // Dot-product tiles over B^T's rows (few rows of A).
  kTiled,          // Packed panels of op(B), register tiles of rows.
  kSkinnyColumns,  // One row of A at a time against op(B) where it lies.
};

// The target's float32 kernel: rows and columns (a panel) per register
// tile, and B^T's rows per dot-product tile.
struct MatMulTile {
  size_t rows, panel, dot_cols;
};

struct MatMulPlan {
  MatMulPath path;
  // The column paths: columns per parallel chunk (n: one chunk, this
  // thread alone).
  size_t grain = 0;
  // The tiled path's tasks.
  GemmGrid grid{};
};

// C (m x n) = A (m x k) op(B) on `threads` threads; m, n, k > 0.
MatMulPlan PlanMatMul(size_t m, size_t n, size_t k, bool transpose_b,
                      const MatMulTile& tile, size_t threads,
                      const Policy& policy);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_MATMUL_PLAN_H_
