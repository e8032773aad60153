// MatMul and BatchedMatMul: validation, then one dispatch per call.
#include <cstddef>
#include <cstdint>

#include "simdattn/kernels.h"
#include "src/common/check.h"
#include "src/ops/matmul_bf16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "src/ops/matmul-inl.h"

#if HWY_ONCE
namespace simdattn {
HWY_EXPORT(MatMulImpl);
HWY_EXPORT(MatMulBF16Impl);
HWY_EXPORT(MatMulF16Impl);
HWY_EXPORT(BatchedMatMulImpl);

namespace {

using internal::Footprint;

// The shape of op(B).
template <typename TB>
size_t OpRows(MatrixView<const TB> b, Transpose t) {
  return t == Transpose::kYes ? b.cols : b.rows;
}
template <typename TB>
size_t OpCols(MatrixView<const TB> b, Transpose t) {
  return t == Transpose::kYes ? b.rows : b.cols;
}

template <typename TB>
void CheckMatMulShapes(const char* fn, ConstMatrix a, MatrixView<const TB> b,
                       ConstMatrix c, const MatMulOptions& opt) {
  const Transpose t = opt.transpose_b;
  SIMDATTN_REQUIRE(a.cols == OpRows(b, t), fn, "inner dimensions differ: A is ",
                   a.rows, " x ", a.cols, " but op(B) is ", OpRows(b, t), " x ",
                   OpCols(b, t));
  SIMDATTN_REQUIRE(c.rows == a.rows && c.cols == OpCols(b, t), fn, "C is ",
                   c.rows, " x ", c.cols, " but A * op(B) is ", a.rows, " x ",
                   OpCols(b, t));
}

void CheckCompute(const char* fn, const MatMulOptions& options) {
  SIMDATTN_REQUIRE(options.compute == ComputeType::kFloat32 ||
                       options.compute == ComputeType::kBFloat16,
                   fn, "options.compute (", static_cast<int>(options.compute),
                   ") is neither kFloat32 nor kBFloat16",
                   options.compute == ComputeType::kInt8
                       ? " (kInt8 is attention's over q8_0 and q4_0 caches)"
                       : "");
}

// The bias is read while C is written: they must not share memory.
void CheckBias(const char* fn, const float* bias, size_t n, Footprint c) {
  if (bias == nullptr || n == 0) return;
  const Footprint range =
      internal::ContiguousFootprint(fn, "bias", bias, n, sizeof(float));
  SIMDATTN_REQUIRE(!c.Overlaps(range), fn, "C overlaps bias (", n, " floats)");
}

// Validates MatMul's arguments; false: nothing to compute.
template <typename TB>
bool CheckMatMul(ConstMatrix a, MatrixView<const TB> b, Matrix c,
                 const MatMulOptions& options) {
  constexpr const char* kFn = "MatMul";
  CheckMatMulShapes(kFn, a, b, c, options);
  const Footprint ra = internal::CheckMatrix(kFn, "A", a);
  const Footprint rb = internal::CheckMatrix(kFn, "B", b);
  const Footprint rc = internal::CheckMatrix(kFn, "C", c);
  SIMDATTN_REQUIRE(!rc.Overlaps(ra), kFn, "C overlaps A");
  SIMDATTN_REQUIRE(!rc.Overlaps(rb), kFn, "C overlaps B");
  CheckBias(kFn, options.bias, c.cols, rc);
  CheckCompute(kFn, options);
  return !c.empty();
}

}  // namespace

void MatMul(ConstMatrix a, ConstMatrix b, Matrix c,
            const MatMulOptions& options) {
  if (!CheckMatMul(a, b, c, options)) return;
  if (options.compute == ComputeType::kBFloat16) {
    return internal::MatMulBFloat16(a, b, c, options);
  }
  HWY_DYNAMIC_DISPATCH(MatMulImpl)(a, b, c, options);
}

void MatMul(ConstMatrix a, MatrixView<const BFloat16> b, Matrix c,
            const MatMulOptions& options) {
  if (!CheckMatMul(a, b, c, options)) return;
  if (options.compute == ComputeType::kBFloat16) {
    return internal::MatMulBFloat16(a, b, c, options);
  }
  HWY_DYNAMIC_DISPATCH(MatMulBF16Impl)(a, b, c, options);
}

void MatMul(ConstMatrix a, MatrixView<const Float16> b, Matrix c,
            const MatMulOptions& options) {
  if (!CheckMatMul(a, b, c, options)) return;
  if (options.compute == ComputeType::kBFloat16) {
    return internal::MatMulBFloat16(a, b, c, options);
  }
  HWY_DYNAMIC_DISPATCH(MatMulF16Impl)(a, b, c, options);
}

void BatchedMatMul(ConstTensor4 a, ConstTensor4 b, Tensor4 c,
                   const MatMulOptions& options) {
  constexpr const char* kFn = "BatchedMatMul";
  SIMDATTN_REQUIRE(a.dims[0] == c.dims[0] && a.dims[1] == c.dims[1], kFn,
                   "A has shape ", internal::ShapeString(a.dims),
                   " but C has shape ", internal::ShapeString(c.dims));
  SIMDATTN_REQUIRE(b.dims[0] == a.dims[0] || b.dims[0] == 1 || a.dims[0] == 0,
                   kFn, "B's batch (", b.dims[0], ") is neither A's (",
                   a.dims[0], ") nor 1");
  SIMDATTN_REQUIRE(
      a.dims[1] == 0 || (b.dims[1] != 0 && a.dims[1] % b.dims[1] == 0), kFn,
      "A's heads (", a.dims[1], ") are not a multiple of B's heads (",
      b.dims[1], ")");
  const Footprint ra = internal::CheckTensor4(kFn, "A", a);
  const Footprint rb = internal::CheckTensor4(kFn, "B", b);
  const Footprint rc = internal::CheckTensor4(kFn, "C", c);
  CheckMatMulShapes(kFn, a.Slice(0, 0), b.Slice(0, 0), c.Slice(0, 0), options);
  SIMDATTN_REQUIRE(!rc.Overlaps(ra), kFn, "C overlaps A");
  SIMDATTN_REQUIRE(!rc.Overlaps(rb), kFn, "C overlaps B");
  // The matrices of C are written concurrently.
  internal::CheckDistinctElements(kFn, "C", c.dims, c.strides);
  CheckBias(kFn, options.bias, c.dims[3], rc);
  SIMDATTN_REQUIRE(options.compute == ComputeType::kFloat32, kFn,
                   "options.compute: bf16 arithmetic is MatMul's only");
  if (c.empty()) return;
  // A B batch of 1 is broadcast to every batch item.
  if (b.dims[0] == 1) b.strides[0] = 0;
  HWY_DYNAMIC_DISPATCH(BatchedMatMulImpl)(a, b, c, options);
}

}  // namespace simdattn
#endif  // HWY_ONCE
