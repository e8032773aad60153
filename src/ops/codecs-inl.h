// Per-target codecs: how each storage type's elements become vectors of
// float (and a block's codes vectors of integers). One Codec<T> per type;
// element.h's ElementFormat<T> holds the same type's scalar facts. The
// kernels reach a row's elements through Codec<T>::Load only (matmul-inl.h's
// LoadB), and integer scores a block's codes through Codes and Scale.
//
// Every Codec<T> has
//   Load(d, row, n): lanes [n, n + Lanes(d)) of a row as floats: exact (q4_1:
//     d n + m, the sum rounded once, as ElementFormat::At), divided by
//     kLoadScale; an int8 row's scale and an fp8 side's scale are the
//     caller's. Block rows: n a multiple of Lanes(d), read within one block
//     (a half block for 4-bit codes where Lanes(d) <= 16), else lane by lane.
//   kLoadScale: a power of two, so the results' bits are unchanged.
//   kOperandScale: what the operands multiplied by Load's values carry.
// Block codecs also have
//   kScaledCodes: element = Scale(block) * code (all but q4_1).
//   Codes(di, block, j): codes [j, j + Lanes(di)) as di's signed integers
//     (Lanes(di) divides 16 for 4-bit codes, or is 32: the whole block).
//   Scale(block): d as float.
//   kCodeTable (4-bit codes): the value each nibble stands for, before d
//     (q4_1: its nibble, then Scale(block) n + Offset(block)).

#if defined(SIMDATTN_SRC_OPS_CODECS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SIMDATTN_SRC_OPS_CODECS_INL_H_
#undef SIMDATTN_SRC_OPS_CODECS_INL_H_
#else
#define SIMDATTN_SRC_OPS_CODECS_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "src/common/element.h"
#include "src/ops/lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

using internal::DirectE4M3;
using internal::FiniteE4M3;

namespace codec_detail {

// A block's fp16 scale as float, by the target's conversion (F16C's on
// x86), not a call; infinities and NaN included (PromoteF16).
HWY_INLINE float HalfToFloat(const Float16& half) {
  const hn::CappedTag<hwy::float16_t, 1> dh1;
  return hn::GetLane(PromoteF16(
      hn::CappedTag<float, 1>(),
      hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(&half))));
}

// Nibbles [j, j + Lanes(di)) of a 4-bit block's 32 (element.h's layout) as
// di's lanes, each byte first mapped by map(d8, nibbles) (bytes in, bytes of
// either sign out). Lanes(di) divides 16, so the lanes lie in one half of
// the block, or is 32: the whole block.
template <class DI, class Map>
HWY_INLINE hn::Vec<DI> MapNibbles(DI di, const uint8_t* qs, size_t j,
                                  const Map& map) {
  constexpr size_t kHalf = internal::kQuantBlock / 2;
#if HWY_TARGET != HWY_SCALAR
  if constexpr (hn::MaxLanes(DI()) >= internal::kQuantBlock) {
    if (hn::Lanes(di) == internal::kQuantBlock) {  // Low nibbles, then high.
      const hn::Half<DI> dh;
      const hn::Rebind<uint8_t, decltype(dh)> d8;
      const auto packed = hn::LoadU(d8, qs);
      const auto low =
          hn::PromoteTo(dh, map(d8, hn::And(packed, hn::Set(d8, 15))));
      const auto high = hn::PromoteTo(dh, map(d8, hn::ShiftRight<4>(packed)));
      return hn::Combine(di, high, low);
    }
  }
#endif
  const hn::Rebind<uint8_t, DI> d8;
  const auto packed = hn::LoadU(d8, qs + j % kHalf);
  return hn::PromoteTo(di, map(d8, j < kHalf ? hn::And(packed, hn::Set(d8, 15))
                                             : hn::ShiftRight<4>(packed)));
}

struct SameBytes {
  template <class D8>
  hn::Vec<D8> operator()(D8, hn::Vec<D8> v) const {
    return v;
  }
};

// Lanes [n, n + Lanes(d)) of a row of block type T, lane by lane: wider
// vectors than a block's (SVE) and the scalar target.
template <typename T, class D>
HWY_INLINE hn::Vec<D> LoadLanes(D d, const T* HWY_RESTRICT row, size_t n) {
  HWY_ALIGN float lanes[hn::MaxLanes(d)];
  for (size_t i = 0; i < hn::Lanes(d); ++i) {
    lanes[i] = internal::WidenAt(row, n + i);
  }
  return hn::Load(d, lanes);
}

// A scaled-codes block codec's Load: the codes converted, times d (exact:
// an 8-bit integer times an fp16 value).
template <class C, typename T, class D>
HWY_INLINE hn::Vec<D> LoadScaledCodes(D d, const T* HWY_RESTRICT row,
                                      size_t n) {
  constexpr size_t kLanesInBlock =
      C::kNibbles ? internal::kQuantBlock / 2 : internal::kQuantBlock;
  if (hn::Lanes(d) > kLanesInBlock) return LoadLanes(d, row, n);
  const T& block = row[n / internal::kQuantBlock];
  const hn::Vec<D> codes = hn::ConvertTo(
      d, C::Codes(hn::RebindToSigned<D>(), block, n % internal::kQuantBlock));
  return hn::Mul(codes, hn::Set(d, C::Scale(block)));
}

}  // namespace codec_detail

template <typename T>
struct Codec;

template <>
struct Codec<float> {
  static constexpr float kLoadScale = 1.0f, kOperandScale = 1.0f;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const float* HWY_RESTRICT row,
                                    size_t n) {
    return hn::LoadU(d, row + n);
  }
};

template <>
struct Codec<BFloat16> {
  static constexpr float kLoadScale = 1.0f, kOperandScale = 1.0f;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const BFloat16* HWY_RESTRICT row,
                                    size_t n) {
    return hn::PromoteTo(
        d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(),
                     reinterpret_cast<const hwy::bfloat16_t*>(row + n)));
  }
};

template <>
struct Codec<Float16> {
  static constexpr float kLoadScale = 1.0f, kOperandScale = 1.0f;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const Float16* HWY_RESTRICT row,
                                    size_t n) {
    return PromoteF16(
        d, hn::LoadU(hn::Rebind<hwy::float16_t, D>(),
                     reinterpret_cast<const hwy::float16_t*>(row + n)));
  }
};

template <>
struct Codec<int8_t> {
  static constexpr float kLoadScale = 1.0f, kOperandScale = 1.0f;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const int8_t* HWY_RESTRICT row,
                                    size_t n) {
    return hn::ConvertTo(
        d, hn::PromoteTo(hn::RebindToSigned<D>(),
                         hn::LoadU(hn::Rebind<int8_t, D>(), row + n)));
  }
};

template <>
struct Codec<internal::Fp8E5M2> {
  static constexpr float kLoadScale = 1.0f, kOperandScale = 1.0f;
  // E5M2 is the upper byte of a float16.
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d,
                                    const internal::Fp8E5M2* HWY_RESTRICT row,
                                    size_t n) {
    const auto bits =
        hn::PromoteTo(hn::Rebind<uint16_t, D>(),
                      hn::LoadU(hn::Rebind<uint8_t, D>(), &row[n].bits));
    return PromoteF16(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(),
                                     hn::ShiftLeft<8>(bits)));
  }
};

// E4M3 as a float16 of 4 exponent bits (bias 15 for 7: 2^-8 of the value,
// subnormals included; the 2^8 joins the caller's scale, one multiply per
// vector less): the byte sign-extended and shifted left by 7 holds E.MMM in
// bits 7-13 and S in bits 14-15, bit 14 then cleared. kNaNTest: S.1111.111
// (magnitude bits 0x3F80) made a float16 NaN.
template <bool kNaNTest, class D>
HWY_INLINE hn::Vec<D> LoadE4M3AsHalf(D d, const uint8_t* HWY_RESTRICT bytes) {
  const hn::Rebind<int16_t, D> di16;
  const auto wide =
      hn::PromoteTo(di16, hn::LoadU(hn::Rebind<int8_t, D>(),
                                    reinterpret_cast<const int8_t*>(bytes)));
  auto half = hn::And(hn::ShiftLeft<7>(wide),
                      hn::Set(di16, static_cast<int16_t>(0xBF80)));
  if constexpr (kNaNTest) {
    const auto magnitude = hn::Set(di16, 0x3F80);
    half = hn::IfThenElse(hn::Eq(hn::And(half, magnitude), magnitude),
                          hn::Set(di16, 0x7E00), half);
  }
  return PromoteF16(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), half));
}

template <>
struct Codec<internal::Fp8E4M3> {
  static constexpr float kLoadScale = 256.0f, kOperandScale = 1.0f;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d,
                                    const internal::Fp8E4M3* HWY_RESTRICT row,
                                    size_t n) {
    return LoadE4M3AsHalf<true>(d, &row[n].bits);
  }
};

template <>
struct Codec<FiniteE4M3> {
  static constexpr float kLoadScale = 256.0f, kOperandScale = 1.0f;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const FiniteE4M3* HWY_RESTRICT row,
                                    size_t n) {
    return LoadE4M3AsHalf<false>(d, &row[n].bits);
  }
};

// FiniteE4M3 codes widened straight to float32 bits (bias 127): 3 ops a
// vector where the float16 route takes 4, of which F16C's conversion is the
// dearest. The subnormal codes come as float32 denormals, exact: decode
// reads rows so only where the CPU's multiply-adds take denormal operands at
// full speed (AttentionArithmetic::direct_e4m3). The operands carry 2^112,
// so that each product is FiniteE4M3's exactly, with no more denormals (the
// operands' magnitudes must stay below 2^16).
template <>
struct Codec<DirectE4M3> {
  static constexpr float kLoadScale = 0x1p120f;
  static constexpr float kOperandScale =
      kLoadScale / Codec<FiniteE4M3>::kLoadScale;
  // The byte sign-extended and shifted left by 20 holds E.MMM in bits 20-26
  // and S in bits 27-31, bits 27-30 then cleared.
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const DirectE4M3* HWY_RESTRICT row,
                                    size_t n) {
    const hn::RebindToSigned<D> di;
    const auto wide = hn::PromoteTo(
        di, hn::LoadU(hn::Rebind<int8_t, D>(),
                      reinterpret_cast<const int8_t*>(&row[n].bits)));
    return hn::BitCast(d,
                       hn::And(hn::ShiftLeft<20>(wide),
                               hn::Set(di, static_cast<int32_t>(0x87F00000u))));
  }
};

// What every block codec shares: an fp16 d, read as float.
template <typename Block>
struct BlockCodec {
  static constexpr float kLoadScale = 1.0f, kOperandScale = 1.0f;
  static HWY_INLINE float Scale(const Block& block) {
    return codec_detail::HalfToFloat(block.d);
  }
};

// A block codec whose elements are d times a code: Load from C's Codes.
template <class C, typename Block>
struct ScaledCodesCodec : BlockCodec<Block> {
  static constexpr bool kScaledCodes = true;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const Block* HWY_RESTRICT row,
                                    size_t n) {
    return codec_detail::LoadScaledCodes<C>(d, row, n);
  }
};

template <>
struct Codec<internal::BlockQ8_0>
    : ScaledCodesCodec<Codec<internal::BlockQ8_0>, internal::BlockQ8_0> {
  static constexpr bool kNibbles = false;
  template <class DI>
  static HWY_INLINE hn::Vec<DI> Codes(DI di, const internal::BlockQ8_0& block,
                                      size_t j) {
    return hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, DI>(), block.qs + j));
  }
};

template <>
struct Codec<internal::BlockQ4_0>
    : ScaledCodesCodec<Codec<internal::BlockQ4_0>, internal::BlockQ4_0> {
  static constexpr bool kNibbles = true;
  HWY_ALIGN static constexpr float kCodeTable[16] = {
      -8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
  template <class DI>
  static HWY_INLINE hn::Vec<DI> Codes(DI di, const internal::BlockQ4_0& block,
                                      size_t j) {
    return hn::Sub(
        codec_detail::MapNibbles(di, block.qs, j, codec_detail::SameBytes()),
        hn::Set(di, 8));
  }
};

// iq4_nl: each nibble indexes kIQ4NLValues, by a byte table lookup (pshufb,
// tbl) before the widening.
template <>
struct Codec<internal::BlockIQ4NL>
    : ScaledCodesCodec<Codec<internal::BlockIQ4NL>, internal::BlockIQ4NL> {
  static constexpr bool kNibbles = true;
  HWY_ALIGN static constexpr float kCodeTable[16] = {
      -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  struct Values {
    template <class D8>
    hn::Vec<hn::Rebind<int8_t, D8>> operator()(D8, hn::Vec<D8> nibbles) const {
      const int8_t* values = internal::kIQ4NLValues;
      const hn::Rebind<int8_t, D8> di8;
#if HWY_TARGET == HWY_SCALAR
      return hn::Set(di8, values[hn::GetLane(nibbles)]);
#else
#if HWY_HAVE_SCALABLE
      const auto table = hn::LoadDup128(hn::ScalableTag<int8_t>(), values);
#else
      const auto table = hn::LoadU(hn::Full128<int8_t>(), values);
#endif
      return hn::TableLookupBytes(table, hn::BitCast(di8, nibbles));
#endif
    }
  };
  template <class DI>
  static HWY_INLINE hn::Vec<DI> Codes(DI di, const internal::BlockIQ4NL& block,
                                      size_t j) {
    return codec_detail::MapNibbles(di, block.qs, j, Values());
  }
};

// q4_1: d n + m, one multiply-add (d n is exact, so fused or not the sum is
// rounded once, as ElementFormat::At). Its codes are not integer scores'.
template <>
struct Codec<internal::BlockQ4_1> : BlockCodec<internal::BlockQ4_1> {
  static constexpr bool kScaledCodes = false, kNibbles = true;
  HWY_ALIGN static constexpr float kCodeTable[16] = {
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static HWY_INLINE float Offset(const internal::BlockQ4_1& block) {
    return codec_detail::HalfToFloat(block.m);
  }
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d,
                                    const internal::BlockQ4_1* HWY_RESTRICT row,
                                    size_t n) {
    if (hn::Lanes(d) > internal::kQuantBlock / 2) {
      return codec_detail::LoadLanes(d, row, n);
    }
    const internal::BlockQ4_1& block = row[n / internal::kQuantBlock];
    const auto codes = hn::ConvertTo(
        d, codec_detail::MapNibbles(hn::RebindToSigned<D>(), block.qs,
                                    n % internal::kQuantBlock,
                                    codec_detail::SameBytes()));
    return hn::MulAdd(codes, hn::Set(d, Scale(block)),
                      hn::Set(d, Offset(block)));
  }
};

// Whether T is a block type whose elements are d times a code (Codes,
// Scale): its rows' products may take d once per block.
template <typename T, typename = void>
inline constexpr bool kScaledCodes = false;
template <typename T>
inline constexpr bool
    kScaledCodes<T, std::void_t<decltype(Codec<T>::kScaledCodes)>> =
        Codec<T>::kScaledCodes;

}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#endif  // SIMDATTN_SRC_OPS_CODECS_INL_H_
