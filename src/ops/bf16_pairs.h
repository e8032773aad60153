// MatMul's operands for bf16 dot-product kernels (vdpbf16ps, AMX, BFDOT):
// pairs of bf16 along K in one uint32, element 2p in the low half (the
// instructions multiply the low halves, then the high ones). Internal.
#ifndef SIMDATTN_SRC_OPS_BF16_PAIRS_H_
#define SIMDATTN_SRC_OPS_BF16_PAIRS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/base.h"
#include "simdattn/kernels.h"
#include "src/common/parallel.h"
#include "src/common/scratch.h"

namespace simdattn {
namespace internal {

// An element of B as the bf16 bits the kernels multiply: float rounded to
// nearest even, fp16 through its exact float likewise, bf16 as stored (so B
// kept in bf16 is packed without a widened copy, to the same bits).
inline uint32_t BFloat16Bits(float x) { return ToBFloat16(x).bits; }
inline uint32_t BFloat16Bits(BFloat16 x) { return x.bits; }
inline uint32_t BFloat16Bits(Float16 x) { return ToBFloat16(ToFloat(x)).bits; }

template <typename T>
uint32_t BFloat16Pair(T lo, T hi) {
  return BFloat16Bits(lo) | (BFloat16Bits(hi) << 16);
}

// Row x's n elements as `pairs` pairs, zeros past n. On little-endian
// machines bf16's pairs are its bytes as they lie (element 2q in the low
// half).
template <typename T>
void PairsOfElements(const T* x, size_t n, size_t pairs, uint32_t* out) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if constexpr (std::is_same_v<T, BFloat16>) {
    std::memcpy(out, x, n * sizeof(T));
    std::memset(reinterpret_cast<char*>(out) + n * sizeof(T), 0,
                pairs * sizeof(uint32_t) - n * sizeof(T));
    return;
  }
#endif
  for (size_t q = 0; q < pairs; ++q) {
    out[q] = BFloat16Pair(2 * q < n ? x[2 * q] : T{},
                          2 * q + 1 < n ? x[2 * q + 1] : T{});
  }
}

// A's rows [0, rows) as k2 pairs each, row m at out + m * k2 (rows past
// a.rows zero), in parallel. pack_row(row, K, k2, out) writes a row of K
// elements as k2 pairs, zero-padded: for float rows, the kernel's vector
// conversion.
template <typename T, typename PackRow>
void PackPairRows(MatrixView<const T> a, size_t k2, size_t rows,
                  const PackRow& pack_row, uint32_t* out) {
  ParallelFor(0, rows, 16, [&](size_t first, size_t last) {
    for (size_t m = first; m < last; ++m) {
      if (m < a.rows) {
        pack_row(a.Row(m), a.cols, k2, out + m * k2);
      } else {
        std::fill(out + m * k2, out + (m + 1) * k2, 0u);
      }
    }
  });
}

// op(B) (k x n) as panels of `width` columns, in parallel: panel p at out +
// p * k2 * width holds, for every pair q, its columns' pairs (zero past n
// and k). Float rows of B^T go by pack_row, other element types' by
// PairsOfElements.
template <typename TB, typename PackRow>
void PackPairPanels(MatrixView<const TB> b, size_t n, bool transposed,
                    size_t k2, size_t width, const PackRow& pack_row,
                    uint32_t* out) {
  const size_t k = transposed ? b.cols : b.rows;
  ParallelFor(0, hwy::DivCeil(n, width), 1, [&](size_t first, size_t last) {
    ScratchBuffer scratch(k2);
    uint32_t* pairs = reinterpret_cast<uint32_t*>(scratch.data());
    for (size_t p = first; p < last; ++p) {
      const size_t n0 = p * width, cols = std::min(width, n - n0);
      uint32_t* panel = out + p * k2 * width;
      std::fill(panel, panel + k2 * width, 0u);
      if (transposed) {  // Column n0 + j of op(B) is row n0 + j of B.
        for (size_t j = 0; j < cols; ++j) {
          if constexpr (std::is_same_v<TB, float>) {
            pack_row(b.Row(n0 + j), k, k2, pairs);
          } else {
            PairsOfElements(b.Row(n0 + j), k, k2, pairs);
          }
          for (size_t q = 0; q < k2; ++q) panel[q * width + j] = pairs[q];
        }
        continue;
      }
      for (size_t q = 0; 2 * q < k; ++q) {  // Rows 2q and 2q + 1 of B.
        const TB* lo = b.Row(2 * q) + n0;
        const TB* hi = 2 * q + 1 < k ? b.Row(2 * q + 1) + n0 : nullptr;
        for (size_t j = 0; j < cols; ++j) {
          panel[q * width + j] =
              BFloat16Pair(lo[j], hi != nullptr ? hi[j] : TB{});
        }
      }
    }
  });
}

// The operands as the kernels read them: A's rows of pairs, a_stride
// apart (PairRows), op(B)'s panels of k2 pairs (PackPairPanels' layout).
// The dot-product kernels sum `pairs` = ceil(K / 2) of them; B's pairs past
// those are zero.
template <size_t kPanel>
struct PairOperands {
  const uint32_t* a;
  size_t a_stride;
  const uint32_t* b;
  size_t k2, pairs;
  const uint32_t* Row(size_t m) const { return a + m * a_stride; }
  const uint32_t* Panel(size_t p) const { return b + p * k2 * kPanel; }
};

// Pair p of a row of A's pairs, by memcpy: the row may be bf16 objects
// read in place (PairRows).
inline uint32_t PairAt(const uint32_t* row, size_t p) {
  uint32_t pair;
  std::memcpy(&pair, row + p, sizeof(pair));
  return pair;
}

// A's rows as pairs: `pairs` per row and `rows` rows (zeros past A's).
// Float rows are packed by pack_row into pooled scratch. bf16 rows are read
// in place where their bytes are the pairs (even K and stride, 4-byte
// aligned) and no padding is asked for; otherwise copied likewise.
class PairRows {
 public:
  template <typename PackRow>
  PairRows(ConstMatrix a, size_t pairs, size_t rows, const PackRow& pack_row)
      : scratch_(rows * pairs), rows_(Packed()), stride_(pairs) {
    PackPairRows(a, pairs, rows, pack_row, Packed());
  }
  PairRows(MatrixView<const BFloat16> a, size_t pairs, size_t rows)
      : scratch_(InPlace(a, pairs, rows) ? 0 : rows * pairs) {
    if (InPlace(a, pairs, rows)) {
      rows_ = reinterpret_cast<const uint32_t*>(a.data);
      stride_ = a.stride / 2;
      return;
    }
    rows_ = Packed();
    stride_ = pairs;
    PackPairRows(a, pairs, rows, PairsOfElements<BFloat16>, Packed());
  }
  const uint32_t* data() const { return rows_; }
  size_t stride() const { return stride_; }  // In pairs.

 private:
  static bool InPlace(MatrixView<const BFloat16> a, size_t pairs, size_t rows) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return rows == a.rows && 2 * pairs == a.cols && a.stride % 2 == 0 &&
           reinterpret_cast<uintptr_t>(a.data) % sizeof(uint32_t) == 0;
#else
    return false;
#endif
  }
  uint32_t* Packed() const {
    return reinterpret_cast<uint32_t*>(scratch_.data());
  }

  ScratchBuffer scratch_;
  const uint32_t* rows_;
  size_t stride_;
};

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_BF16_PAIRS_H_
