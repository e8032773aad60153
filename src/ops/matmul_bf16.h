// MatMul in bfloat16 arithmetic (MatMulOptions::compute = kBFloat16).
// Internal: matmul.cc calls it after validating the arguments.
#ifndef SIMDATTN_SRC_OPS_MATMUL_BF16_H_
#define SIMDATTN_SRC_OPS_MATMUL_BF16_H_

#include <cstddef>
#include <cstdint>

#include "simdattn/kernels.h"
#include "src/ops/bf16_kernel.h"
#include "src/ops/policy.h"

namespace simdattn {
namespace internal {

// C = alpha A op(B) + beta C + bias with A and op(B) rounded to bf16 and
// their products summed in float32; arguments validated, C not empty.
void MatMulBFloat16(ConstMatrix a, ConstMatrix b, Matrix c,
                    const MatMulOptions& options);
// The same with B stored in 16 bits (kept weights), widened exactly; bf16
// B is not rounded again.
void MatMulBFloat16(ConstMatrix a, MatrixView<const BFloat16> b, Matrix c,
                    const MatMulOptions& options);
void MatMulBFloat16(ConstMatrix a, MatrixView<const Float16> b, Matrix c,
                    const MatMulOptions& options);

// Which kernel kBFloat16 products take, by the active policy's bf16_dot
// (policy.h). kAuto (the default): on x86 AMX where the CPU and OS have it,
// else vdpbf16ps where the policy table says it pays; on Arm BFDOT where
// the CPU has it; else the float32 fallback; and the fallback for products
// of fewer than 64 rows. Tests force the others at any size: kNative the
// kAuto choice, kDotProduct vdpbf16ps or BFDOT wherever the CPU has it,
// kFallback never a native kernel. Native kernels run only under the AVX3
// target (x86) or the NEON and SVE targets (Arm).
BFloat16DotKernelKind ChosenBFloat16DotKernel();

// C (rows x cols floats, ldc apart) = A B on vdpbf16ps, in amx_tiles.h's
// layouts and AmxProduct's contract (rows and cols multiples of 16), for
// fused attention's bf16 pairs where AMX is absent. Only where
// ChosenBFloat16DotKernel() is kDotProduct.
void DotProductPairs(const uint32_t* a, size_t a_stride, const uint32_t* b,
                     size_t b_stride, size_t rows, size_t cols, size_t pairs,
                     float* c, size_t ldc);
// The same on BFDOT (matmul_bf16_arm.cc), where ChosenBFloat16DotKernel()
// is kBfdot.
void BfdotPairProduct(const uint32_t* a, size_t a_stride, const uint32_t* b,
                      size_t b_stride, size_t rows, size_t cols, size_t pairs,
                      float* c, size_t ldc);

// matmul_bf16_arm.cc: whether the CPU has FEAT_BF16 (false off aarch64
// Linux), and MatMulBFloat16 on its BFDOT, arguments validated: over B
// where it lies, or over op(B) packed as bf16_pairs.h's panels of
// kBfdotPanel columns and BfdotPairs(K) pairs, A in float or bf16.
bool BfdotUsable();
void MatMulBfdot(ConstMatrix a, ConstMatrix b, Matrix c,
                 const MatMulOptions& options);
inline constexpr size_t kBfdotPanel = 16;
size_t BfdotPairs(size_t k);
void BfdotProduct(ConstMatrix a, const uint32_t* b_pairs, size_t k2, Matrix c,
                  const MatMulOptions& options);
void BfdotProduct(MatrixView<const BFloat16> a, const uint32_t* b_pairs,
                  size_t k2, Matrix c, const MatMulOptions& options);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_MATMUL_BF16_H_
