// MatMul in bfloat16 arithmetic (MatMulOptions::compute = kBFloat16).
// Internal: matmul.cc calls it after validating the arguments.
#ifndef SIMDATTN_SRC_OPS_MATMUL_BF16_H_
#define SIMDATTN_SRC_OPS_MATMUL_BF16_H_

#include "simdattn/kernels.h"

namespace simdattn {
namespace internal {

// C = alpha A op(B) + beta C + bias with A and op(B) rounded to bf16 and
// their products summed in float32; arguments validated, C not empty.
void MatMulBFloat16(ConstMatrix a, ConstMatrix b, Matrix c,
                    const MatMulOptions& options);

// Which kernel kBFloat16 products take. kAuto (the default): AMX where the
// CPU and OS have it, else vdpbf16ps where it is known to pay, else the
// float32 fallback; and the fallback for products of fewer than 64 rows.
// Tests force the others at any size: kNative the kAuto choice, kDotProduct
// vdpbf16ps wherever the CPU has it, kFallback never a native kernel.
// Native kernels run only under the AVX3 target.
enum class BFloat16DotPolicy { kAuto, kNative, kDotProduct, kFallback };
void SetBFloat16DotPolicy(BFloat16DotPolicy policy);

enum class BFloat16DotKernelKind { kAmx, kDotProduct, kFallback };
BFloat16DotKernelKind ChosenBFloat16DotKernel();

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_MATMUL_BF16_H_
