// Per-target conversion of keys and values into a KV cache's element type
// (kv_store.h), included once per SIMD target by kv_store.cc.

#if defined(SIMDATTN_SRC_OPS_KV_STORE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_KV_STORE_INL_H_
#undef SIMDATTN_SRC_OPS_KV_STORE_INL_H_
#else
#define SIMDATTN_SRC_OPS_KV_STORE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "hwy/highway.h"
#include "simdattn/kernels.h"
#include "src/common/element.h"
#include "src/ops/bf16-inl.h"
#include "src/ops/kv_store.h"
#include "src/ops/lanes-inl.h"
#include "src/ops/rope-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace kv_store_detail {

// Stores v's lanes as `out`'s element type: the overloads below are each
// type's conversion (the scale is int8's).
template <class D>
HWY_INLINE void Store(D d, hn::Vec<D> v, float /*scale*/, float* out) {
  hn::StoreU(v, d, out);
}

// Stores v's lanes as bfloat16: ToBFloat16's bits.
template <class D>
HWY_INLINE void Store(D d, hn::Vec<D> v, float /*scale*/, BFloat16* out) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> d16;
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, BFloat16Bits(d, v))), d16,
             reinterpret_cast<uint16_t*>(out));
}

// Stores v's lanes as float16, rounded to nearest even (ToFloat16's bits).
template <class D>
HWY_INLINE void Store(D d, hn::Vec<D> v, float /*scale*/, Float16* out) {
  if constexpr (kNativeF16) {
    const hn::Rebind<hwy::float16_t, D> d16;
    hn::StoreU(hn::DemoteTo(d16, v), d16,
               reinterpret_cast<hwy::float16_t*>(out));
  } else {
    HWY_ALIGN float lanes[kMaxLanes];
    hn::Store(v, d, lanes);
    for (size_t i = 0; i < hn::Lanes(d); ++i) out[i] = ToFloat16(lanes[i]);
  }
}

// Stores round(v / scale) (float32 division, ties to even), within
// [-127, 127], as int8: KVType's rule, exactly.
template <class D>
HWY_INLINE void Store(D d, hn::Vec<D> v, float scale, int8_t* out) {
  const hn::RebindToSigned<D> di;
  const hn::Rebind<int8_t, D> d8;
  const auto q = hn::Min(
      hn::Max(hn::Round(hn::Div(v, hn::Set(d, scale))), hn::Set(d, -127.0f)),
      hn::Set(d, 127.0f));
  hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, q)), d8, out);
}

// Stores fp8 v / side_scale lane by lane (element.h's rounding): a KV
// cache's rows are written once and read for every token after.
template <class D, typename T>
HWY_INLINE void StoreFp8(D d, hn::Vec<D> v, float side_scale, T* out,
                         uint8_t (*encode)(float)) {
  HWY_ALIGN float lanes[kMaxLanes];
  hn::Store(hn::Div(v, hn::Set(d, side_scale)), d, lanes);
  for (size_t i = 0; i < hn::Lanes(d); ++i) out[i].bits = encode(lanes[i]);
}
template <class D>
HWY_INLINE void Store(D d, hn::Vec<D> v, float side_scale,
                      internal::Fp8E4M3* out) {
  StoreFp8(d, v, side_scale, out, internal::FloatToFp8E4M3);
}
template <class D>
HWY_INLINE void Store(D d, hn::Vec<D> v, float side_scale,
                      internal::Fp8E5M2* out) {
  StoreFp8(d, v, side_scale, out, internal::FloatToFp8E5M2);
}

// Returns max |x| over the row, or NaN if an element is not finite.
template <class D>
HWY_INLINE float MaxAbs(D d, const float* row, size_t n) {
  const size_t N = hn::Lanes(d);
  auto vmax = hn::Zero(d);
  auto bad = hn::FirstN(d, 0);
  size_t c = 0;
  for (; c + N <= n; c += N) {
    const auto x = hn::LoadU(d, row + c);
    bad = hn::Or(bad, hn::Not(hn::IsFinite(x)));
    vmax = hn::Max(vmax, hn::Abs(x));
  }
  bool finite = hn::AllFalse(d, bad);
  float max_abs = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (; c < n; ++c) {
    finite = finite && std::isfinite(row[c]);
    max_abs = std::max(max_abs, std::abs(row[c]));
  }
  return finite ? max_abs : std::numeric_limits<float>::quiet_NaN();
}

// StoreRow of a type of single elements (not blocks).
template <typename T>
inline void StoreElements(const float* row, size_t n, T* dst, float* scale,
                          float side_scale) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  const size_t N = hn::Lanes(d);
  float row_scale = side_scale;
  if constexpr (internal::kScaled<T>) {
    const float max_abs = MaxAbs(d, row, n);
    // Rows below 2^-100 (127 / max |x| would overflow near 2^-126) and
    // zero rows store zeros with scale 0; NaN rows zeros with scale NaN.
    if (!(max_abs >= 0x1p-100f)) {
      *scale = std::isnan(max_abs) ? max_abs : 0.0f;
      std::memset(dst, 0, n * sizeof(T));
      return;
    }
    row_scale = max_abs / 127.0f;
    *scale = row_scale;
  }
  // Whole vectors, then one lane at a time.
  size_t c = 0;
  for (; c + N <= n; c += N)
    Store(d, hn::LoadU(d, row + c), row_scale, dst + c);
  for (; c < n; ++c) Store(d1, hn::LoadU(d1, row + c), row_scale, dst + c);
}

// One row of n floats as T at dst (scaled types: the scale at *scale, max
// |x| / 127; a non-finite element makes it NaN and the elements 0; fp8:
// divided by side_scale; block types: n / 32 blocks).
template <typename T>
inline void StoreRow(const float* row, size_t n, T* dst, float* scale,
                     float side_scale) {
  if constexpr (internal::kBlockValues < T >> 1) {
    for (size_t c = 0; c < n; c += internal::kQuantBlock) {
      internal::QuantizeBlock(row + c, dst + c / internal::kQuantBlock);
    }
  } else {
    StoreElements(row, n, dst, scale, side_scale);
  }
}

}  // namespace kv_store_detail

// Same-target entry point (kv_store.h's StoreKVRows).
inline void StoreKVRowsImpl(KVType type, ConstMatrix src, void* dst,
                            size_t dst_stride, float* scales, float side_scale,
                            const internal::RopeRows* rope) {
  // Rotated rows go through a copy; head dims up to 1024 (MLA's 576) on the
  // stack.
  float stack[1024];
  std::vector<float> heap(rope != nullptr && src.cols > 1024 ? src.cols : 0);
  float* rotated = heap.empty() ? stack : heap.data();
  internal::VisitElementType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t r = 0; r < src.rows; ++r) {
      const float* row = src.Row(r);
      if (rope != nullptr) {
        std::memcpy(rotated, row, src.cols * sizeof(float));
        rope_detail::RotateRow(
            rotated + rope->offset, rope->cos + r * rope->half,
            rope->sin + r * rope->half, rope->half, rope->pairing);
        row = rotated;
      }
      kv_store_detail::StoreRow(
          row, src.cols,
          static_cast<T*>(dst) + r * dst_stride / internal::kBlockValues<T>,
          scales != nullptr ? scales + r : nullptr, side_scale);
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_KV_STORE_INL_H_
