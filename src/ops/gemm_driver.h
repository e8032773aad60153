// The one MatMul driver. Every tiled kernel (the float32 Highway
// micro-kernel in matmul-inl.h, vdpbf16ps and AMX in matmul_bf16.cc, BFDOT
// in matmul_bf16_arm.cc) computes C = alpha A op(B) + beta C + bias in
// tasks of a block of C's rows times one panel of its columns, each task in
// register tiles of up to kMaxRows rows. A kernel plugs in as its tile
// shape (rows per block, panel width, rows per register tile), its packing
// of op(B) and its task function; this header holds the rest once: the task
// grid and its order, the split over threads, the remainder-row dispatch
// and the epilogue's definition. Plain C++ (no SIMD), so that per-target
// Highway code and intrinsics under target attributes share it.
#ifndef SIMDATTN_SRC_OPS_GEMM_DRIVER_H_
#define SIMDATTN_SRC_OPS_GEMM_DRIVER_H_

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "hwy/base.h"
#include "simdattn/kernels.h"
#include "src/common/parallel.h"

namespace simdattn {
namespace internal {

// One task: rows [m0, m_end) of C times panel p, columns [n0, n0 + cols).
struct GemmTask {
  size_t m0, m_end;
  size_t p, n0, cols;
};

// C (rows x cols) cut into blocks of row_block rows and panels of `panel`
// columns. Tasks go by groups of `group` row blocks, panel by panel: group
// 1 walks a row block's panels in turn (its rows of A stay in cache), group
// RowBlocks() a panel's row blocks in turn (the packed panel stays in
// cache); the last group may have fewer.
struct GemmGrid {
  size_t rows, cols;
  size_t row_block, panel;
  size_t group;

  // Panel by panel, each panel's row blocks in turn.
  static GemmGrid PanelMajor(size_t rows, size_t cols, size_t row_block,
                             size_t panel) {
    return GemmGrid{rows, cols, row_block, panel,
                    hwy::DivCeil(rows, row_block)};
  }

  size_t RowBlocks() const { return hwy::DivCeil(rows, row_block); }
  size_t Panels() const { return hwy::DivCeil(cols, panel); }
  size_t Tasks() const { return RowBlocks() * Panels(); }

  GemmTask At(size_t task) const {
    const size_t panels = Panels(), row_blocks = RowBlocks();
    const size_t g = task / (group * panels);
    const size_t rows_in_g = std::min(group, row_blocks - g * group);
    const size_t in_g = task - g * group * panels;
    const size_t p = in_g / rows_in_g;
    const size_t m0 = (g * group + in_g % rows_in_g) * row_block;
    return GemmTask{m0, std::min(rows, m0 + row_block), p, p * panel,
                    std::min(panel, cols - p * panel)};
  }
};

// Tasks of at least this many multiply-adds: well above a task's
// scheduling cost.
inline constexpr size_t kMinTaskWork = size_t{1} << 18;
// Tasks per thread a grid leaves where it has tiles enough: room for the
// threads to even out a core slowed by another process.
inline constexpr size_t kTasksPerThread = 8;

// Rows per task of a grid of `rows` x `panels`, in register tiles of
// tile_rows rows (each tile_work multiply-adds): a block of up to max_tiles
// tiles and of at least kMinTaskWork work (if max_tiles allows), chosen for
// the critical path over `threads` threads, ceil(tasks / threads) tasks of
// that many tiles. Among blocks leaving kTasksPerThread tasks per thread
// (the smallest block where none does), the largest whose path is within
// 1/32 of the shortest. At 16 threads a 1024-row single panel goes in 171
// tasks of one 6-row tile (path 11 tiles, 10.7 the ideal), where blocks of
// 5 tiles (35 tasks) took 15. Each block of C sums the whole of K whatever
// its height: the same bits for any thread count.
inline size_t BalancedRowBlock(size_t rows, size_t panels, size_t tile_rows,
                               size_t tile_work, size_t max_tiles,
                               size_t threads) {
  const size_t tiles = hwy::DivCeil(std::max<size_t>(rows, 1), tile_rows);
  max_tiles = std::max<size_t>(1, std::min(max_tiles, tiles));
  const size_t min_tiles = std::min(
      max_tiles, hwy::DivCeil(kMinTaskWork, std::max<size_t>(tile_work, 1)));
  threads = std::max<size_t>(threads, 1);
  const auto tasks = [&](size_t s) { return hwy::DivCeil(tiles, s) * panels; };
  const auto path = [&](size_t s) {
    return hwy::DivCeil(tasks(s), threads) * s;
  };
  // Blocks [min_tiles, widest] leave enough tasks: tasks(s) falls with s.
  size_t widest = min_tiles;
  while (widest < max_tiles && tasks(widest + 1) >= kTasksPerThread * threads) {
    ++widest;
  }
  size_t shortest = path(min_tiles);
  for (size_t s = min_tiles + 1; s <= widest; ++s) {
    shortest = std::min(shortest, path(s));
  }
  size_t block = min_tiles;
  for (size_t s = min_tiles; s <= widest; ++s) {
    if (32 * path(s) <= 33 * shortest) block = s;
  }
  return block * tile_rows;
}

// run(task) for every task of the grid, over the threads.
template <class Run>
void ForEachGemmTask(const GemmGrid& grid, const Run& run) {
  ParallelFor(0, grid.Tasks(), 1, [&](size_t first, size_t last) {
    for (size_t task = first; task < last; ++task) run(grid.At(task));
  });
}

// run(task, state) for every task of the grid, over the threads in chunks
// of consecutive tasks; each chunk first makes its state (scratch, AMX's
// tile configuration: per thread) with make_state().
template <class MakeState, class Run>
void ForEachGemmTask(const GemmGrid& grid, const MakeState& make_state,
                     const Run& run) {
  ParallelFor(0, grid.Tasks(), 1, [&](size_t first, size_t last) {
    auto state = make_state();
    for (size_t task = first; task < last; ++task) run(grid.At(task), state);
  });
}

// The remainder-row dispatch: f(std::integral_constant<size_t, R>()) with R
// = rows for 1 <= rows < kMaxRows, else kMaxRows.
template <size_t kMaxRows, class F>
HWY_INLINE void WithRowCount(size_t rows, const F& f) {
  if constexpr (kMaxRows == 1) {
    f(std::integral_constant<size_t, 1>());
  } else if (rows >= kMaxRows) {
    f(std::integral_constant<size_t, kMaxRows>());
  } else {
    WithRowCount<kMaxRows - 1>(rows, f);
  }
}

// The epilogue, C = alpha acc + beta C + bias: one element's value, `out`
// read only when beta != 0 (C may be uninitialised otherwise). The vector
// forms fuse its multiply-adds.
inline float EpilogueValue(const MatMulOptions& opt, float acc,
                           const float* out, size_t col) {
  float value = opt.alpha * acc;
  if (opt.beta != 0.0f) value += opt.beta * *out;
  if (opt.bias != nullptr) value += opt.bias[col];
  return value;
}

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_GEMM_DRIVER_H_
