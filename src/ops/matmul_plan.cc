#include "src/ops/matmul_plan.h"

#include <algorithm>

#include "hwy/base.h"

namespace simdattn {
namespace internal {

MatMulPlan PlanMatMul(size_t m, size_t n, size_t k, bool transpose_b,
                      const MatMulTile& tile, size_t threads,
                      const Policy& policy) {
  const size_t work = m * n * k;
  // Columns per chunk of the column paths: a chunk of at least
  // kMatMulParallelWork multiply-adds, and of 64 columns.
  const size_t grain = std::max<size_t>(64, kMatMulParallelWork / (m * k + 1));
  MatMulPlan plan{MatMulPath::kSkinnyColumns};
  if (transpose_b && m >= kMatMulDotMinRows && m <= kMatMulDotMaxRows) {
    plan.path = MatMulPath::kDotColumns;
    plan.grain =
        work > kMatMulParallelWork ? hwy::RoundUpTo(grain, tile.dot_cols) : n;
  } else if (m > kMatMulSkinnyRows && work > kMatMulSmallWork) {
    plan.path = MatMulPath::kTiled;
    const size_t panels = hwy::DivCeil(n, tile.panel);
    const size_t row_block =
        BalancedRowBlock(m, panels, tile.rows, tile.rows * tile.panel * k,
                         policy.matmul_task_tiles, threads);
    // Tasks go by groups of row blocks, panel by panel (GemmGrid). A panel
    // reads its rows of A where they lie (from L3 at projection sizes):
    // without groups, all of A once per panel. Narrow panels (under 64
    // columns: 16-register targets, NEON) would read A 4x as often as wide
    // ones, so two row blocks share each panel and their A stays in L2;
    // wide panels gain nothing from it (bench/RESULTS.md).
    const size_t group = policy.matmul_panel_group != 0
                             ? policy.matmul_panel_group
                             : (tile.panel >= 64 ? 1 : 2);
    plan.grid = GemmGrid{m, n, row_block, tile.panel, group};
  } else {
    plan.grain = work > kMatMulParallelWork ? grain : n;
  }
  return plan;
}

}  // namespace internal
}  // namespace simdattn
