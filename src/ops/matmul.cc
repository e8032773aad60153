// MatMul and BatchedMatMul: validation, then one dispatch per call.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "src/common/check.h"
#include "src/common/scratch.h"
#include "src/ops/kv_store.h"
#include "src/ops/matmul_bf16.h"
#include "src/ops/packed_matrix.h"
#include "src/ops/target_family.h"

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
HWY_EXPORT(WidenRowsImpl);

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

// The float32 products, B of each storage type; validated.
void Float32Product(ConstMatrix a, ConstMatrix b, Matrix c,
                    const MatMulOptions& options) {
  HWY_DYNAMIC_DISPATCH(MatMulImpl)(a, b, c, options);
}
void Float32Product(ConstMatrix a, MatrixView<const BFloat16> b, Matrix c,
                    const MatMulOptions& options) {
  HWY_DYNAMIC_DISPATCH(MatMulBF16Impl)(a, b, c, options);
}
void Float32Product(ConstMatrix a, MatrixView<const Float16> b, Matrix c,
                    const MatMulOptions& options) {
  HWY_DYNAMIC_DISPATCH(MatMulF16Impl)(a, b, c, options);
}

template <typename TB>
void MatMulOf(ConstMatrix a, MatrixView<const TB> b, Matrix c,
              const MatMulOptions& options) {
  if (!CheckMatMul(a, b, c, options)) return;
  if (options.compute == ComputeType::kBFloat16) {
    return internal::MatMulBFloat16(a, b, c, options);
  }
  Float32Product(a, b, c, options);
}

}  // namespace

void MatMul(ConstMatrix a, ConstMatrix b, Matrix c,
            const MatMulOptions& options) {
  MatMulOf(a, b, c, options);
}
void MatMul(ConstMatrix a, MatrixView<const BFloat16> b, Matrix c,
            const MatMulOptions& options) {
  MatMulOf(a, b, c, options);
}
void MatMul(ConstMatrix a, MatrixView<const Float16> b, Matrix c,
            const MatMulOptions& options) {
  MatMulOf(a, b, c, options);
}

namespace {

// B dense as the float32 kernel will read it: as stored for kFloat32, else
// rounded to bf16 as kBFloat16 products round it (bf16 B as it is).
template <typename TB>
void StoreB(MatrixView<const TB> b, PackedMatrix::Impl* out) {
  if (out->compute == ComputeType::kFloat32 || std::is_same_v<TB, BFloat16>) {
    internal::AlignedVector<TB> copy(b.rows * b.cols);
    for (size_t r = 0; r < b.rows; ++r) {
      std::copy(b.Row(r), b.Row(r) + b.cols, copy.data() + r * b.cols);
    }
    out->stored = std::move(copy);
    return;
  }
  internal::AlignedVector<BFloat16> rounded(b.rows * b.cols);
  if constexpr (std::is_same_v<TB, float>) {
    internal::RoundToBFloat16(ConstTensor4(b), rounded.data(), nullptr);
  } else {
    for (size_t r = 0; r < b.rows; ++r) {
      for (size_t j = 0; j < b.cols; ++j) {
        rounded[r * b.cols + j] = ToBFloat16(ToFloat(b(r, j)));
      }
    }
  }
  out->stored = std::move(rounded);
}

template <typename TB>
std::unique_ptr<PackedMatrix::Impl> Pack(MatrixView<const TB> b,
                                         const MatMulOptions& options) {
  constexpr const char* kFn = "PackedMatrix";
  internal::CheckMatrix(kFn, "B", b);
  CheckCompute(kFn, options);
  SIMDATTN_REQUIRE(options.transpose_b == Transpose::kNo ||
                       options.transpose_b == Transpose::kYes,
                   kFn, "options.transpose_b (",
                   static_cast<int>(options.transpose_b),
                   ") is neither kNo nor kYes");
  auto impl = std::make_unique<PackedMatrix::Impl>();
  impl->rows = OpRows(b, options.transpose_b);
  impl->cols = OpCols(b, options.transpose_b);
  impl->transpose_b = options.transpose_b;
  impl->compute = options.compute;
  impl->target = internal::ActiveTargetBit();
  if (options.compute == ComputeType::kBFloat16) {
    impl->kernel = internal::ChosenBFloat16DotKernel();
  }
  if (impl->rows == 0 || impl->cols == 0) return impl;
  if (impl->native()) {
    internal::PackBFloat16Pairs(b, impl.get());
  } else {
    StoreB(b, impl.get());
  }
  return impl;
}

}  // namespace

PackedMatrix::PackedMatrix() : impl_(std::make_unique<Impl>()) {}
PackedMatrix::PackedMatrix(ConstMatrix b, const MatMulOptions& options)
    : impl_(Pack(b, options)) {}
PackedMatrix::PackedMatrix(MatrixView<const BFloat16> b,
                           const MatMulOptions& options)
    : impl_(Pack(b, options)) {}
PackedMatrix::PackedMatrix(MatrixView<const Float16> b,
                           const MatMulOptions& options)
    : impl_(Pack(b, options)) {}
PackedMatrix::PackedMatrix(PackedMatrix&&) noexcept = default;
PackedMatrix& PackedMatrix::operator=(PackedMatrix&&) noexcept = default;
PackedMatrix::~PackedMatrix() = default;

// A moved-from PackedMatrix reads as 0 x 0.
size_t PackedMatrix::rows() const { return impl_ ? impl_->rows : 0; }
size_t PackedMatrix::cols() const { return impl_ ? impl_->cols : 0; }
Transpose PackedMatrix::transpose_b() const {
  return impl_ ? impl_->transpose_b : Transpose::kNo;
}
ComputeType PackedMatrix::compute() const {
  return impl_ ? impl_->compute : ComputeType::kFloat32;
}
size_t PackedMatrix::bytes() const {
  if (!impl_) return 0;
  return impl_->pairs.size() * sizeof(uint32_t) +
         std::visit([](const auto& v) { return v.size() * sizeof(v[0]); },
                    impl_->stored);
}
bool PackedMatrix::current() const {
  if (!impl_) return true;
  return impl_->target == internal::ActiveTargetBit() &&
         (impl_->compute != ComputeType::kBFloat16 ||
          impl_->kernel == internal::ChosenBFloat16DotKernel());
}

namespace {

// Validates a product over a packed B; false: nothing to compute.
template <typename TA, typename TC>
bool CheckPackedMatMul(MatrixView<const TA> a, const PackedMatrix& b,
                       MatrixView<TC> c, const MatMulOptions& options) {
  constexpr const char* kFn = "MatMul";
  SIMDATTN_REQUIRE(a.cols == b.rows(), kFn, "inner dimensions differ: A is ",
                   a.rows, " x ", a.cols, " but the packed op(B) is ", b.rows(),
                   " x ", b.cols());
  SIMDATTN_REQUIRE(c.rows == a.rows && c.cols == b.cols(), kFn, "C is ", c.rows,
                   " x ", c.cols, " but A * op(B) is ", a.rows, " x ",
                   b.cols());
  SIMDATTN_REQUIRE(
      options.transpose_b == b.transpose_b() && options.compute == b.compute(),
      kFn, "options.transpose_b (", static_cast<int>(options.transpose_b),
      ") and .compute (", static_cast<int>(options.compute),
      ") differ from the packing's (", static_cast<int>(b.transpose_b()), ", ",
      static_cast<int>(b.compute()), ")");
  SIMDATTN_REQUIRE(b.current(), kFn,
                   "B was packed for another target or bf16 kernel than the "
                   "active one (",
                   ActiveTarget(), ", ", BFloat16DotKernel(),
                   "): pack it again");
  const Footprint ra = internal::CheckMatrix(kFn, "A", a);
  const Footprint rc = internal::CheckMatrix(kFn, "C", c);
  SIMDATTN_REQUIRE(!rc.Overlaps(ra), kFn, "C overlaps A");
  CheckBias(kFn, options.bias, c.cols, rc);
  return !c.empty();
}

// bf16 rows widened exactly into `out`, dense.
ConstMatrix Widened(MatrixView<const BFloat16> m, float* out) {
  HWY_DYNAMIC_DISPATCH(WidenRowsImpl)(m, out);
  return ConstMatrix(out, m.rows, m.cols);
}

// C in bf16: computed in float scratch (from its old values where beta
// reads them) by the float-C overload for A, then rounded.
template <typename TA>
void BFloat16CProduct(MatrixView<const TA> a, const PackedMatrix& b,
                      MatrixView<BFloat16> c, const MatMulOptions& options) {
  if (!CheckPackedMatMul(a, b, c, options)) return;
  internal::ScratchBuffer c32(c.rows * c.cols);
  const Matrix c_wide(c32.data(), c.rows, c.cols);
  if (options.beta != 0.0f) Widened(MatrixView<const BFloat16>(c), c32.data());
  MatMul(a, b, c_wide, options);
  internal::StoreKVRows(KVType::kBF16, c_wide, c.data, c.stride, nullptr, 1.0f);
}

}  // namespace

void MatMul(ConstMatrix a, const PackedMatrix& b, Matrix c,
            const MatMulOptions& options) {
  if (!CheckPackedMatMul(a, b, c, options)) return;
  if (a.cols == 0) {  // No product: C = beta C + bias.
    MatMulOptions affine = options;
    affine.transpose_b = Transpose::kNo;
    return Float32Product(a, ConstMatrix(nullptr, 0, c.cols), c, affine);
  }
  if (options.compute == ComputeType::kBFloat16) {
    return internal::MatMulBFloat16(a, *b.impl_, c, options);
  }
  b.impl_->VisitStored(
      [&](auto stored) { Float32Product(a, stored, c, options); });
}

// bf16 A: the native kernels read its pairs (in place where they can);
// otherwise it is widened into scratch. Either way the bits of MatMul over
// A's widened values.
void MatMul(MatrixView<const BFloat16> a, const PackedMatrix& b, Matrix c,
            const MatMulOptions& options) {
  if (!CheckPackedMatMul(a, b, c, options)) return;
  if (a.cols != 0 && options.compute == ComputeType::kBFloat16 &&
      internal::MatMulBFloat16(a, *b.impl_, c, options)) {
    return;
  }
  internal::ScratchBuffer a32(a.rows * a.cols);
  MatMul(Widened(a, a32.data()), b, c, options);
}
void MatMul(ConstMatrix a, const PackedMatrix& b, MatrixView<BFloat16> c,
            const MatMulOptions& options) {
  BFloat16CProduct(a, b, c, options);
}
void MatMul(MatrixView<const BFloat16> a, const PackedMatrix& b,
            MatrixView<BFloat16> c, const MatMulOptions& options) {
  BFloat16CProduct(a, b, c, options);
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
