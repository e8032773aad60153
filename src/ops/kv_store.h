// Writing keys and values into a KV cache's storage: conversion to the
// cache's element type, keys rotated on the way (RoPE), in one pass.
// Internal: KVCache (src/attention/kv_cache.cc) calls it.
#ifndef SIMDATTN_SRC_OPS_KV_STORE_H_
#define SIMDATTN_SRC_OPS_KV_STORE_H_

#include <cstddef>

#include "simdattn/kernels.h"
#include "simdattn/tensor.h"
#include "src/ops/rope.h"

namespace simdattn {
namespace internal {

// Writes the rows of src (rows x cols floats) as `type` elements at dst,
// rows dst_stride elements apart; int8 rows get their scale at scales[r],
// fp8 rows are divided by side_scale (kernels.h's KVType comment states the
// rounding: the same bits as the scalar conversions of kernels.h's
// ToBFloat16 and ToFloat16, element.h's fp8 ones and ggml's quantizers).
// Block types: cols and dst_stride multiples of 32. With `rope`, each row r
// is first rotated as ApplyRope rotates it, by row r's angles.
void StoreKVRows(KVType type, ConstMatrix src, void* dst, size_t dst_stride,
                 float* scales, float side_scale,
                 const RopeRows* rope = nullptr);

// t rounded to bf16 (ToBFloat16's bits) into `out`, dense (dims[0],
// dims[1], dims[2], dims[3]), in one parallel pass; with `widened`, also
// back to float there (exact).
void RoundToBFloat16(ConstTensor4 t, BFloat16* out, float* widened);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_KV_STORE_H_
