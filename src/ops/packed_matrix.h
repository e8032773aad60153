// What a PackedMatrix (kernels.h) holds. Internal: matmul.cc packs and
// dispatches, matmul_bf16.cc packs and multiplies bf16 pairs.
#ifndef SIMDATTN_SRC_OPS_PACKED_MATRIX_H_
#define SIMDATTN_SRC_OPS_PACKED_MATRIX_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <variant>

#include "simdattn/kernels.h"
#include "src/common/aligned_vector.h"
#include "src/ops/bf16_kernel.h"

namespace simdattn {

struct PackedMatrix::Impl {
  size_t rows = 0, cols = 0;  // op(B): K x N.
  Transpose transpose_b = Transpose::kNo;
  ComputeType compute = ComputeType::kFloat32;
  // What it was packed on: the active target's bit, and for kBFloat16 the
  // kernel (kFallback for kFloat32).
  int64_t target = 0;
  internal::BFloat16DotKernelKind kernel =
      internal::BFloat16DotKernelKind::kFallback;
  // The float32 kernel's B: B as stored (kFloat32), or rounded to bf16 (the
  // bf16 fallback), dense, in B's layout (not op(B)'s).
  std::variant<internal::AlignedVector<float>,
               internal::AlignedVector<BFloat16>,
               internal::AlignedVector<Float16>>
      stored;
  // Native bf16 kernels: op(B) as bf16_pairs.h's panels (64 columns on
  // x86, kBfdotPanel on Arm), k2 pairs each.
  size_t k2 = 0;
  internal::AlignedVector<uint32_t> pairs;

  bool native() const {
    return compute == ComputeType::kBFloat16 &&
           kernel != internal::BFloat16DotKernelKind::kFallback;
  }
  // f(MatrixView<const T>) over `stored`, whatever its T.
  template <typename F>
  void VisitStored(const F& f) const {
    const size_t b_rows = transpose_b == Transpose::kYes ? cols : rows;
    const size_t b_cols = transpose_b == Transpose::kYes ? rows : cols;
    std::visit(
        [&](const auto& v) {
          using T = std::remove_cv_t<std::remove_reference_t<decltype(v[0])>>;
          f(MatrixView<const T>(v.data(), b_rows, b_cols));
        },
        stored);
  }
};

namespace internal {

// matmul_bf16.cc: op(B) packed as pairs for the native kernel `out->kernel`,
// and the kBFloat16 product over a packed B of either kind (K > 0).
template <typename TB>
void PackBFloat16Pairs(MatrixView<const TB> b, PackedMatrix::Impl* out);
void MatMulBFloat16(ConstMatrix a, const PackedMatrix::Impl& b, Matrix c,
                    const MatMulOptions& options);
// bf16 A over a packed B on a native kernel (A's pairs read where they
// lie when K and its stride are even); false, computing nothing, for the
// fallback, whose caller widens A.
bool MatMulBFloat16(MatrixView<const BFloat16> a, const PackedMatrix::Impl& b,
                    Matrix c, const MatMulOptions& options);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_PACKED_MATRIX_H_
