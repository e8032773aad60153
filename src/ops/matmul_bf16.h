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

// Which kernel kBFloat16 products take. kAuto (the default): the native one
// where it is known to pay (NativeBFloat16Dot). Tests force either:
// kNative wherever the CPU and the dispatched target can run it.
enum class BFloat16DotPolicy { kAuto, kNative, kFallback };
void SetBFloat16DotPolicy(BFloat16DotPolicy policy);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_MATMUL_BF16_H_
