// The kernels that kBFloat16 products may take, named apart from
// matmul_bf16.h so that packed_matrix.h (which records the one its pairs were
// laid out for) needs nothing else of it.
#ifndef SIMDATTN_SRC_OPS_BF16_KERNEL_H_
#define SIMDATTN_SRC_OPS_BF16_KERNEL_H_

namespace simdattn {
namespace internal {

// AMX tiles, vdpbf16ps, Arm's BFDOT, or the float32 fallback.
enum class BFloat16DotKernelKind { kAmx, kDotProduct, kBfdot, kFallback };

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_BF16_KERNEL_H_
