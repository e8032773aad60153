// MatMul in bfloat16 arithmetic: A and op(B) rounded to bf16 (nearest
// even), products summed in float32.
//
// Native path: AVX512_BF16's vdpbf16ps, two bf16 products per float lane
// per instruction (twice the float32 FMA rate), used when the CPU has it and
// the dispatched target is AVX3. Highway 1.0.3 has no native bf16 dot
// product (its bf16 ReorderWidenMulAccumulate is emulated), so this file
// holds the intrinsics behind MatMulBFloat16. Once a Highway whose
// ReorderWidenMulAccumulate uses vdpbf16ps (AVX3_SPR/AVX3_ZEN4) and BFDOT
// (Arm) is the minimum, a Highway template replaces this file.
//
// Fallback (every other CPU or target): the rounded operands, widened back
// exactly, through the float32 MatMul.
#include "src/ops/matmul_bf16.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "simdattn/targets.h"
#include "src/common/parallel.h"
#include "src/common/scratch.h"
#include "src/ops/kv_store.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SIMDATTN_HAVE_AVX512_BF16_KERNEL 1
#endif

namespace simdattn {
namespace internal {
namespace {

std::atomic<BFloat16DotPolicy> policy{BFloat16DotPolicy::kAuto};

// m rounded to bf16 (the KV cache's vector conversion) into `out`, dense;
// with `widened`, also back to float there (exact).
void Round(ConstMatrix m, BFloat16* out, float* widened) {
  ParallelFor(0, m.rows, 16, [&](size_t first, size_t last) {
    StoreKVRows(KVType::kBF16,
                ConstMatrix(m.Row(first), last - first, m.cols, m.stride),
                out + first * m.cols, m.cols, nullptr, nullptr, 0);
    if (widened == nullptr) return;
    for (size_t i = first * m.cols; i < last * m.cols; ++i) {
      const uint32_t bits = uint32_t{out[i].bits} << 16;
      std::memcpy(&widened[i], &bits, sizeof(bits));
    }
  });
}

// The rounded operands through the float32 kernels: B as bf16 storage
// (widened exactly while packed), A widened back to float. Scratch from the
// pool: no allocation in steady state.
void Fallback(ConstMatrix a, ConstMatrix b, Matrix c,
              const MatMulOptions& options) {
  const size_t a_size = a.rows * a.cols, b_size = b.rows * b.cols;
  ScratchBuffer a_rounded(a_size), a16(a_size / 2 + 1), b16(b_size / 2 + 1);
  const auto bf16 = [](const ScratchBuffer& s) {
    return reinterpret_cast<BFloat16*>(s.data());
  };
  Round(a, bf16(a16), a_rounded.data());
  Round(b, bf16(b16), nullptr);
  MatMulOptions float32 = options;
  float32.compute = ComputeType::kFloat32;
  MatMul(ConstMatrix(a_rounded.data(), a.rows, a.cols),
         MatrixView<const BFloat16>(bf16(b16), b.rows, b.cols), c, float32);
}

#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
#define SIMDATTN_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512bf16")))

// Register tile: kRows x 4 vectors of 16 columns (24 accumulators, 4 loads
// of B and a broadcast of A in 32 registers). The instructions flush
// subnormal operands and results to zero.
constexpr size_t kRows = 6;
static_assert(kRows == 6, "MicroKernel's dispatch lists 1..6 rows");
constexpr size_t kPanel = 64;  // Columns per panel of packed B.
constexpr size_t kRowBlock = 16 * kRows;

// Packed operands: pairs of bf16 along K in one uint32, element 2k2 in the
// low half (vdpbf16ps's lane i multiplies the low halves, then the high
// ones). A: row m's pairs contiguous, K2 = ceil(K / 2) per row. B: panel p
// holds, for each pair k2, the kPanel columns' pairs.
SIMDATTN_BF16_TARGET inline uint32_t Pair(float lo, float hi) {
  return uint32_t{ToBFloat16(lo).bits} | (uint32_t{ToBFloat16(hi).bits} << 16);
}

// A's row (K floats) as K2 pairs: 16 pairs per vdpbf16-ready conversion.
SIMDATTN_BF16_TARGET void PackRow(const float* row, size_t k, uint32_t* out) {
  size_t i = 0;
  // cvtne2ps_pbh(hi, lo): bf16 of lo in the low half, hi in the upper, so
  // consecutive floats stay consecutive: pairs (2j, 2j + 1) as they lie.
  for (; i + 32 <= k; i += 32) {
    const __m512bh packed = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + i + 16),
                                                _mm512_loadu_ps(row + i));
    _mm512_storeu_si512(out + i / 2, (__m512i)packed);
  }
  for (; i < k; i += 2) {
    out[i / 2] = Pair(row[i], i + 1 < k ? row[i + 1] : 0.0f);
  }
}

// Panel of op(B) columns [n0, n0 + cols): kPanel pairs per k2, zero-padded.
SIMDATTN_BF16_TARGET void PackPanel(ConstMatrix b, bool transposed, size_t n0,
                                    size_t cols, size_t k, uint32_t* panel,
                                    uint32_t* scratch) {
  const size_t k2 = (k + 1) / 2;
  std::fill(panel, panel + k2 * kPanel, 0u);
  if (transposed) {  // Rows of B are columns of op(B): pairs lie in a row.
    for (size_t n = 0; n < cols; ++n) {
      PackRow(b.Row(n0 + n), k, scratch);
      for (size_t p = 0; p < k2; ++p) panel[p * kPanel + n] = scratch[p];
    }
    return;
  }
  for (size_t p = 0; p < k2; ++p) {
    const float* lo = b.Row(2 * p) + n0;
    const float* hi = 2 * p + 1 < k ? b.Row(2 * p + 1) + n0 : nullptr;
    for (size_t n = 0; n < cols; ++n) {
      panel[p * kPanel + n] = Pair(lo[n], hi != nullptr ? hi[n] : 0.0f);
    }
  }
}

// C[0..R, 0..cols) = alpha acc + beta C + bias for R x 4 vectors (R a
// constant, so that the accumulators stay in registers).
template <size_t R>
SIMDATTN_BF16_TARGET void MicroKernel(const uint32_t* a, size_t a_stride,
                                      const uint32_t* panel, size_t k2,
                                      float* c, size_t ldc, size_t cols,
                                      const MatMulOptions& opt,
                                      const float* bias) {
  __m512 acc[R][4];
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (size_t p = 0; p < k2; ++p) {
    const float* bp = reinterpret_cast<const float*>(panel + p * kPanel);
    const __m512bh b0 = (__m512bh)_mm512_loadu_ps(bp);
    const __m512bh b1 = (__m512bh)_mm512_loadu_ps(bp + 16);
    const __m512bh b2 = (__m512bh)_mm512_loadu_ps(bp + 32);
    const __m512bh b3 = (__m512bh)_mm512_loadu_ps(bp + 48);
    for (size_t r = 0; r < R; ++r) {
      const __m512bh ar =
          (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * a_stride + p]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], ar, b2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], ar, b3);
    }
  }
  const __m512 alpha = _mm512_set1_ps(opt.alpha);
  const __m512 beta = _mm512_set1_ps(opt.beta);
  for (size_t r = 0; r < R; ++r) {
    for (size_t v = 0; v < 4 && 16 * v < cols; ++v) {
      const size_t lanes = std::min<size_t>(16, cols - 16 * v);
      const __mmask16 m = static_cast<__mmask16>((1u << lanes) - 1);
      float* out = c + r * ldc + 16 * v;
      __m512 value = _mm512_mul_ps(alpha, acc[r][v]);
      if (opt.beta != 0.0f) {
        value = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, out), value);
      }
      if (bias != nullptr) {
        value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(m, bias + 16 * v));
      }
      _mm512_mask_storeu_ps(out, m, value);
    }
  }
}

// Packs A and every panel of op(B) once (in parallel), then runs tasks of
// kRowBlock rows x one panel. K is not blocked: a panel holds K / 2 x 64
// pairs (96 KiB at K = 768).
SIMDATTN_BF16_TARGET void Native(ConstMatrix a, ConstMatrix b, Matrix c,
                                 const MatMulOptions& opt) {
  const size_t M = c.rows, N = c.cols, K = a.cols, k2 = (K + 1) / 2;
  const bool transposed = opt.transpose_b == Transpose::kYes;
  const size_t panels = (N + kPanel - 1) / kPanel;
  std::vector<uint32_t> packed_a(M * k2), packed_b(panels * k2 * kPanel);
  ParallelFor(0, M, 16, [&](size_t first, size_t last) {
    for (size_t m = first; m < last; ++m) {
      PackRow(a.Row(m), K, packed_a.data() + m * k2);
    }
  });
  ParallelFor(0, panels, 1, [&](size_t first, size_t last) {
    std::vector<uint32_t> scratch(k2);
    for (size_t p = first; p < last; ++p) {
      PackPanel(b, transposed, p * kPanel, std::min(kPanel, N - p * kPanel), K,
                packed_b.data() + p * k2 * kPanel, scratch.data());
    }
  });
  const size_t row_blocks = (M + kRowBlock - 1) / kRowBlock;
  ParallelFor(0, row_blocks * panels, 1, [&](size_t first, size_t last) {
    for (size_t task = first; task < last; ++task) {
      const size_t p = task / row_blocks, m0 = task % row_blocks * kRowBlock;
      const size_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
      const size_t m_end = std::min(M, m0 + kRowBlock);
      for (size_t m = m0; m < m_end; m += kRows) {
        const uint32_t* rows = packed_a.data() + m * k2;
        const uint32_t* panel = packed_b.data() + p * k2 * kPanel;
        const float* bias = opt.bias != nullptr ? opt.bias + n0 : nullptr;
        float* out = c.Row(m) + n0;
        switch (std::min(kRows, m_end - m)) {
#define SIMDATTN_BF16_ROWS(R)                                            \
  case R:                                                                \
    MicroKernel<R>(rows, k2, panel, k2, out, c.stride, cols, opt, bias); \
    break;
          SIMDATTN_BF16_ROWS(1)
          SIMDATTN_BF16_ROWS(2)
          SIMDATTN_BF16_ROWS(3)
          SIMDATTN_BF16_ROWS(4)
          SIMDATTN_BF16_ROWS(5)
          SIMDATTN_BF16_ROWS(6)
#undef SIMDATTN_BF16_ROWS
        }
      }
    }
  });
}
#endif  // SIMDATTN_HAVE_AVX512_BF16_KERNEL

}  // namespace

void SetBFloat16DotPolicy(BFloat16DotPolicy p) { policy = p; }

void MatMulBFloat16(ConstMatrix a, ConstMatrix b, Matrix c,
                    const MatMulOptions& options) {
#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
  if (NativeBFloat16Dot()) return Native(a, b, c, options);
#endif
  Fallback(a, b, c, options);
}

}  // namespace internal

bool NativeBFloat16Dot() {
#ifdef SIMDATTN_HAVE_AVX512_BF16_KERNEL
  using internal::BFloat16DotPolicy;
  const BFloat16DotPolicy p = internal::policy;
  if (p == BFloat16DotPolicy::kFallback ||
      !__builtin_cpu_supports("avx512bf16") ||
      ActiveTarget().compare(0, 4, "AVX3") != 0) {
    return false;
  }
  // By default AMD only: on an Intel Xeon (Sapphire Rapids class) the
  // kernel measured 1.5x slower than the float32 one (bench/RESULTS.md);
  // on AMD's Zen 4 bf16 dot products are expected at twice the FMA rate
  // (not yet measured: bench/RESULTS.md says how).
  return p == BFloat16DotPolicy::kNative || __builtin_cpu_is("amd");
#else
  return false;
#endif
}

}  // namespace simdattn
