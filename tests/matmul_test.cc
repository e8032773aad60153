// MatMul and BatchedMatMul on every target against a float64 reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "src/ops/amx_tiles.h"
#include "src/ops/gemm_driver.h"
#include "src/ops/matmul_bf16.h"
#include "src/ops/matmul_plan.h"
#include "tbb/task_arena.h"
#include "tests/test_util.h"
#include "tools/reference/reference.h"

namespace simdattn {
namespace {

using test::ExpectInvalid;

struct Case {
  size_t m, k, n;
  Transpose transpose_b = Transpose::kNo;
  float alpha = 1.0f;
  float beta = 0.0f;
  bool bias = false;
  size_t pad = 0;  // Extra elements per row of every operand (stride > cols).
  size_t offset = 0;  // Misaligns every base pointer by this many floats.
};

// A strided matrix with its backing store.
struct Operand {
  std::vector<float> store;
  Matrix view;
  Operand(size_t rows, size_t cols, size_t pad, size_t offset, uint64_t seed) {
    const size_t stride = cols + pad;
    store = test::RandomVector(offset + rows * stride + 1, seed);
    view = Matrix(store.data() + offset, rows, cols, stride);
  }
};

// The case's options, with `bias` if it has one.
MatMulOptions Options(const Case& t, const std::vector<float>& bias) {
  MatMulOptions opt;
  opt.transpose_b = t.transpose_b;
  opt.alpha = t.alpha;
  opt.beta = t.beta;
  opt.bias = t.bias ? bias.data() : nullptr;
  return opt;
}

// Runs one case and checks every element against the float64 product within
// the componentwise bound of reference::MatMulElement; bf16 arithmetic
// against the product of the operands rounded to bf16.
// With `packed`, op(B) goes through a PackedMatrix.
void RunCase(const Case& t, uint64_t seed,
             ComputeType compute = ComputeType::kFloat32, bool packed = false) {
  const bool tb = t.transpose_b == Transpose::kYes;
  Operand a(t.m, t.k, t.pad, t.offset, seed);
  Operand b(tb ? t.n : t.k, tb ? t.k : t.n, t.pad, t.offset, seed + 1);
  Operand a_ref = a, b_ref = b;
  a_ref.view.data = a_ref.store.data() + t.offset;
  b_ref.view.data = b_ref.store.data() + t.offset;
  if (compute == ComputeType::kBFloat16) {
    for (float& x : a_ref.store) x = ToFloat(ToBFloat16(x));
    for (float& x : b_ref.store) x = ToFloat(ToBFloat16(x));
  }
  Operand c(t.m, t.n, t.pad, t.offset, seed + 2);
  const std::vector<float> bias = test::RandomVector(t.n, seed + 3);
  const std::vector<float> c_before = c.store;
  if (t.beta == 0.0f) {
    // beta = 0 must not read C: NaN there must not reach the output.
    for (size_t r = 0; r < t.m; ++r) {
      for (size_t j = 0; j < t.n; ++j) {
        c.view(r, j) = std::numeric_limits<float>::quiet_NaN();
      }
    }
  }
  MatMulOptions opt = Options(t, bias);
  opt.compute = compute;
  if (packed) {
    MatMul(a.view, PackedMatrix(b.view, opt), c.view, opt);
  } else {
    MatMul(a.view, b.view, c.view, opt);
  }
  opt.compute = ComputeType::kFloat32;

  for (size_t r = 0; r < t.m; ++r) {
    for (size_t j = 0; j < t.n; ++j) {
      const size_t index = t.offset + r * (t.n + t.pad) + j;
      const reference::Bounded want = reference::MatMulElement(
          a_ref.view, b_ref.view, opt, c_before[index], r, j);
      ASSERT_NEAR(c.view(r, j), want.value, want.bound)
          << "at (" << r << ", " << j << ") of " << t.m << "x" << t.k << "x"
          << t.n << (tb ? " B^T" : "") << " alpha " << t.alpha << " beta "
          << t.beta << " bias " << t.bias;
    }
  }
  // Padding between rows and past the end is untouched.
  for (size_t r = 0; r < t.m; ++r) {
    for (size_t j = t.n; j < t.n + t.pad; ++j) {
      const size_t index = t.offset + r * (t.n + t.pad) + j;
      ASSERT_EQ(std::memcmp(&c.store[index], &c_before[index], sizeof(float)),
                0);
    }
  }
  ASSERT_EQ(c.store.back(), c_before.back());
}

// The compiler's IEEE half, an independent reference for the conversions
// (C++ has _Float16 on x86 only; AArch64's __fp16 is the same format).
#if defined(__aarch64__)
using Half = __fp16;
#else
using Half = _Float16;
#endif

// B rounded to a 16-bit format (bits), and those values widened back.
template <typename T16>
struct HalfOperand {
  std::vector<T16> store;
  std::vector<float> widened;
  MatrixView<const T16> view;
  ConstMatrix widened_view;
  HalfOperand(const Operand& b, size_t offset) {
    for (float x : b.store) {
      T16 h;
      float back;
      if constexpr (std::is_same_v<T16, BFloat16>) {
        uint32_t bits;
        std::memcpy(&bits, &x, sizeof(bits));
        bits += 0x7FFF + ((bits >> 16) & 1);  // Round to nearest even.
        h.bits = static_cast<uint16_t>(bits >> 16);
        bits = uint32_t{h.bits} << 16;
        std::memcpy(&back, &bits, sizeof(back));
      } else {
        const Half f16 = static_cast<Half>(x);
        std::memcpy(&h.bits, &f16, sizeof(h.bits));
        back = static_cast<float>(f16);
      }
      store.push_back(h);
      widened.push_back(back);
    }
    view = {store.data() + offset, b.view.rows, b.view.cols, b.view.stride};
    widened_view = {widened.data() + offset, b.view.rows, b.view.cols,
                    b.view.stride};
  }
};

// MatMul with B in T16 gives the bits of MatMul over the widened B, padding
// untouched.
template <typename T16>
void RunHalfCase(const Case& t, uint64_t seed) {
  const bool tb = t.transpose_b == Transpose::kYes;
  Operand a(t.m, t.k, t.pad, t.offset, seed);
  const HalfOperand<T16> b(
      Operand(tb ? t.n : t.k, tb ? t.k : t.n, t.pad, t.offset, seed + 1),
      t.offset);
  Operand c16(t.m, t.n, t.pad, t.offset, seed + 2), c32 = c16;
  c32.view.data = c32.store.data() + t.offset;
  const std::vector<float> bias = test::RandomVector(t.n, seed + 3);
  const MatMulOptions opt = Options(t, bias);
  MatMul(a.view, b.view, c16.view, opt);
  MatMul(a.view, b.widened_view, c32.view, opt);
  ASSERT_EQ(std::memcmp(c16.store.data(), c32.store.data(),
                        c16.store.size() * sizeof(float)),
            0)
      << t.m << "x" << t.k << "x" << t.n << (tb ? " B^T" : "") << " pad "
      << t.pad << " offset " << t.offset;
}

float FloatFromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// The scalar conversions against the compiler's half (every half, and
// floats around every rounding boundary) and bfloat16's definition.
TEST(HalfConversions, RoundToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    Half f16;
    const uint16_t bits = static_cast<uint16_t>(h);
    std::memcpy(&f16, &bits, sizeof(bits));
    const float want = static_cast<float>(f16), got = ToFloat(Float16{bits});
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0) << h;
    // Halfway to the next half, just below and just above it.
    const float next = std::nextafter(want, want < 0 ? -1e9f : 1e9f);
    for (float x :
         {want, (want + next) / 2, std::nextafter(want, 0.0f), next}) {
      const Half rounded = static_cast<Half>(x);
      uint16_t expected;
      std::memcpy(&expected, &rounded, sizeof(expected));
      ASSERT_EQ(ToFloat16(x).bits, expected) << x;
    }
  }
  EXPECT_EQ(ToFloat16(1e6f).bits, 0x7C00);
  EXPECT_EQ(ToFloat16(-1e-9f).bits, 0x8000);
  EXPECT_EQ(ToBFloat16(1.0f).bits, 0x3F80);
  EXPECT_EQ(ToBFloat16(FloatFromBits(0x3F808000u)).bits, 0x3F80);
  EXPECT_EQ(ToBFloat16(FloatFromBits(0x3F818000u)).bits, 0x3F82);
  EXPECT_EQ(ToBFloat16(FloatFromBits(0x3F808001u)).bits, 0x3F81);
  EXPECT_EQ(ToBFloat16(FloatFromBits(0x7F7FFFFFu)).bits, 0x7F80);
  EXPECT_TRUE(std::isnan(ToFloat(ToBFloat16(std::nanf("")))));
  EXPECT_EQ(ToFloat(BFloat16{0xC0A0}), -5.0f);
}

class MatMulTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(MatMulTest);

// Skinny, tiny and tiled products, both layouts, K and N around the vectors
// and blocks, strides and misaligned bases; skinny products over a
// projection's weights (under emulation smaller ones, still several depth
// blocks and split among threads).
TEST_P(MatMulTest, HalfPrecisionBEqualsWidenedB) {
  uint64_t seed = 1000;
  const size_t k = test::Emulated() ? 300 : 768,
               n = test::Emulated() ? 1024 : 2304;
  for (const Transpose t : {Transpose::kNo, Transpose::kYes}) {
    for (const Case& shape :
         {Case{1, k, n}, Case{3, 17, 45}, Case{8, k, n}, Case{5, 300, 70},
          Case{97, 257, 33}, Case{2, 5, 3}, Case{200, 64, 130}}) {
      for (size_t variant = 0; variant < 2; ++variant) {
        Case c = shape;
        c.transpose_b = t;
        if (variant == 1) {
          c.pad = 3;
          c.offset = 1;
          c.alpha = 0.5f;
          c.beta = 2.0f;
          c.bias = true;
        }
        RunHalfCase<BFloat16>(c, seed++);
        RunHalfCase<Float16>(c, seed++);
      }
    }
  }
}

// bf16 arithmetic: natively where the CPU has it and the target is AVX3
// (AMX where there is AMX, and vdpbf16ps), forced at every size, and
// through the float32 fallback, forced, on every target; each within float32
// accumulation's bound of the float64 product of the rounded operands.
TEST_P(MatMulTest, BFloat16ArithmeticMatchesRoundedOperands) {
  using internal::BFloat16DotPolicy;
  const std::initializer_list<BFloat16DotPolicy> policies = {
      BFloat16DotPolicy::kNative, BFloat16DotPolicy::kDotProduct,
      BFloat16DotPolicy::kFallback};
  // Each policy's kernel, also for policies whose products below repeat
  // another's code (and are skipped there).
  test::ForEachBFloat16DotPolicy(
      policies,
      [&](BFloat16DotPolicy policy) {
        if (policy == BFloat16DotPolicy::kFallback) {
          EXPECT_FALSE(NativeBFloat16Dot());
        }
        // Where the CPU has a native kernel, it is the one in use.
        const std::string target = ActiveTarget();
        if (target.rfind("AVX3", 0) == 0 && internal::AmxUsable() &&
            policy == BFloat16DotPolicy::kNative) {
          EXPECT_STREQ(BFloat16DotKernel(), "AMX");
        }
        if ((target.rfind("NEON", 0) == 0 || target.rfind("SVE", 0) == 0) &&
            internal::BfdotUsable() && policy != BFloat16DotPolicy::kFallback) {
          EXPECT_STREQ(BFloat16DotKernel(), "BFDOT");
        }
      },
      [](BFloat16DotPolicy policy) { return static_cast<int>(policy); });
  test::ForEachBFloat16DotPolicy(policies, [&](BFloat16DotPolicy) {
    uint64_t seed = 40;
    for (const Transpose t : {Transpose::kNo, Transpose::kYes}) {
      std::vector<Case> cases = {Case{1, 1, 1, t},
                                 Case{5, 3, 7, t},
                                 Case{7, 33, 70, t, 0.5f, 0.25f, true},
                                 Case{97, 130, 129, t},
                                 Case{13, 768, 64, t, 1.0f, 1.0f, true, 3, 1},
                                 Case{6, 64, 16, t},
                                 Case{12, 31, 65, t, -2.0f},
                                 Case{33, 40, 97, t, 1.0f, 0.5f, true},
                                 Case{100, 300, 70, t}};
      if (!test::Emulated()) {
        // Several of AMX's column blocks (384 columns), the last
        // partial, with and without an epilogue; not under emulation
        // (Arm has no AMX).
        cases.push_back(Case{70, 96, 450, t, 0.5f, 0.25f, true});
        cases.push_back(Case{96, 64, 800, t});
      }
      for (const Case& c : cases) {
        RunCase(c, seed += 4, ComputeType::kBFloat16);
      }
    }
  });
}

// bf16 arithmetic with B stored in bf16 (kept weights) or fp16: the same
// products as with B's float values, on every kernel (the native ones pack
// 16-bit B where it lies; odd K leaves a pair's high half zero).
TEST_P(MatMulTest, BFloat16ArithmeticWithBFloat16B) {
  using internal::BFloat16DotPolicy;
  test::ForEachBFloat16DotPolicy(
      {BFloat16DotPolicy::kAuto, BFloat16DotPolicy::kNative,
       BFloat16DotPolicy::kDotProduct, BFloat16DotPolicy::kFallback},
      [&](BFloat16DotPolicy policy) {
        for (const Transpose t : {Transpose::kNo, Transpose::kYes}) {
          for (const Case& c : {Case{5, 40, 70, t}, Case{97, 130, 129, t},
                                Case{70, 33, 65, t}}) {
            const bool tb = t == Transpose::kYes;
            const size_t b_rows = tb ? c.n : c.k, b_cols = tb ? c.k : c.n;
            const std::vector<float> a = test::RandomVector(c.m * c.k, 7);
            std::vector<float> b = test::RandomVector(b_rows * b_cols, 8);
            std::vector<BFloat16> b16(b.size());
            for (size_t i = 0; i < b.size(); ++i) {
              b16[i] = ToBFloat16(b[i]);
              b[i] = ToFloat(b16[i]);
            }
            MatMulOptions options;
            options.transpose_b = t;
            options.compute = ComputeType::kBFloat16;
            std::vector<float> from16(c.m * c.n), from32(c.m * c.n);
            MatMul(ConstMatrix(a.data(), c.m, c.k),
                   MatrixView<const BFloat16>(b16.data(), b_rows, b_cols),
                   Matrix(from16.data(), c.m, c.n), options);
            MatMul(ConstMatrix(a.data(), c.m, c.k),
                   ConstMatrix(b.data(), b_rows, b_cols),
                   Matrix(from32.data(), c.m, c.n), options);
            // Same operands, same kernel (rounding bf16-exact B is the
            // identity).
            ASSERT_EQ(from16, from32) << c.m << "x" << c.k << "x" << c.n
                                      << " policy " << static_cast<int>(policy);
            // fp16 B: rounded to bf16 as its float widening is.
            std::vector<Float16> h(b.size());
            for (size_t i = 0; i < b.size(); ++i) {
              h[i] = ToFloat16(b[i] * 0.75f);
              b[i] = ToFloat(h[i]);
            }
            MatMul(ConstMatrix(a.data(), c.m, c.k),
                   MatrixView<const Float16>(h.data(), b_rows, b_cols),
                   Matrix(from16.data(), c.m, c.n), options);
            MatMul(ConstMatrix(a.data(), c.m, c.k),
                   ConstMatrix(b.data(), b_rows, b_cols),
                   Matrix(from32.data(), c.m, c.n), options);
            ASSERT_EQ(from16, from32)
                << c.m << "x" << c.k << "x" << c.n << " fp16, policy "
                << static_cast<int>(policy);
          }
        }
      });
}

// op(B) packed beforehand, in float32 and on every bf16 kernel: products of
// every size (one row, tails of K, N and the row tile, K past the depth
// block, strides, alpha, beta, bias) meet MatMul's bound, and 70 rows (the
// same kernel as MatMul's) give its bits, from B in float, bf16 and fp16.
TEST_P(MatMulTest, PackedBMeetsTheBoundAndMatMulsBits) {
  using internal::BFloat16DotPolicy;
  uint64_t seed = 500;
  const auto check = [&](ComputeType compute) {
    for (const Transpose t : {Transpose::kNo, Transpose::kYes}) {
      for (const Case& c :
           {Case{1, 70, 33, t}, Case{3, 17, 45, t, 0.5f, 2.0f, true, 3, 1},
            Case{20, 300, 65, t, 1.0f, 0.0f, true},
            Case{70, 33, 130, t, -1.0f, 0.5f}}) {
        RunCase(c, seed++, compute, true);
      }
      const size_t m = 70, k = 300, n = 65;
      const bool tb = t == Transpose::kYes;
      const size_t b_rows = tb ? n : k, b_cols = tb ? k : n;
      const std::vector<float> a = test::RandomVector(m * k, seed++);
      const std::vector<float> b = test::RandomVector(b_rows * b_cols, seed++);
      std::vector<BFloat16> b16(b.size());
      std::vector<Float16> h(b.size());
      for (size_t i = 0; i < b.size(); ++i) {
        b16[i] = ToBFloat16(b[i]);
        h[i] = ToFloat16(b[i]);
      }
      MatMulOptions options;
      options.transpose_b = t;
      options.compute = compute;
      const ConstMatrix av(a.data(), m, k);
      const auto expect_same = [&](const auto& bv, const char* type) {
        std::vector<float> packed(m * n), plain(m * n);
        MatMul(av, PackedMatrix(bv, options), Matrix(packed.data(), m, n),
               options);
        MatMul(av, bv, Matrix(plain.data(), m, n), options);
        ASSERT_EQ(packed, plain)
            << type << " B, compute " << static_cast<int>(compute) << " B^T "
            << tb << " kernel " << BFloat16DotKernel();
      };
      expect_same(ConstMatrix(b.data(), b_rows, b_cols), "float");
      expect_same(MatrixView<const BFloat16>(b16.data(), b_rows, b_cols),
                  "bf16");
      expect_same(MatrixView<const Float16>(h.data(), b_rows, b_cols), "fp16");
    }
  };
  check(ComputeType::kFloat32);
  test::ForEachBFloat16DotPolicy(
      {BFloat16DotPolicy::kAuto, BFloat16DotPolicy::kNative,
       BFloat16DotPolicy::kDotProduct, BFloat16DotPolicy::kFallback},
      [&](BFloat16DotPolicy) { check(ComputeType::kBFloat16); });
}

// bf16 activations over a packed B: A in bf16 gives the bits of its widened
// values; C in bf16 those of the float32 result (beta reading C's bf16
// values) rounded once; both arithmetics, strided, alpha, beta, bias; on
// every bf16 kernel, with A's pairs read where they lie (even K and stride,
// 4-byte aligned; for AMX also whole tiles: rows a multiple of 16, K of 32)
// and copied (odd K, odd stride, 2-byte aligned).
TEST_P(MatMulTest, PackedBWithBFloat16Activations) {
  using internal::BFloat16DotPolicy;
  const size_t n = 45, ldc = n + 2;
  const std::vector<float> b = test::RandomVector(n * 70, 72);
  const std::vector<float> bias = test::RandomVector(n, 73);
  struct ACase {
    size_t m, k, lda, offset;
  };
  for (const ACase& ac :
       {ACase{19, 70, 73, 0}, ACase{19, 70, 72, 0}, ACase{19, 70, 72, 1},
        ACase{19, 69, 70, 0}, ACase{32, 64, 66, 0}}) {
    const size_t m = ac.m, k = ac.k, lda = ac.lda;
    const std::vector<float> a = test::RandomVector(m * lda + 1, 71);
    std::vector<BFloat16> a16_data(a.size()), c16(m * ldc);
    std::vector<float> a_wide(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a16_data[i] = ToBFloat16(a[i]);
      a_wide[i] = ToFloat(a16_data[i]);
    }
    const BFloat16* a16 = a16_data.data() + ac.offset;
    const float* a32 = a_wide.data() + ac.offset;
    const auto check = [&](ComputeType compute) {
      SCOPED_TRACE(testing::Message()
                   << "M " << m << " K " << k << " lda " << lda << " offset "
                   << ac.offset << " compute " << static_cast<int>(compute)
                   << " kernel " << BFloat16DotKernel());
      MatMulOptions options;
      options.transpose_b = Transpose::kYes;
      options.compute = compute;
      options.alpha = 0.5f;
      options.beta = 2.0f;
      options.bias = bias.data();
      const PackedMatrix packed(ConstMatrix(b.data(), n, k, 70), options);
      const std::vector<float> c0 = test::RandomVector(m * ldc, 74);
      for (size_t i = 0; i < c16.size(); ++i) c16[i] = ToBFloat16(c0[i]);
      std::vector<float> want(m * ldc), got = c0;
      for (size_t i = 0; i < want.size(); ++i) want[i] = ToFloat(c16[i]);
      // Float C from bf16 A.
      std::vector<float> float_c = c0;
      MatMul(ConstMatrix(a32, m, k, lda), packed,
             Matrix(float_c.data(), m, n, ldc), options);
      MatMul(MatrixView<const BFloat16>(a16, m, k, lda), packed,
             Matrix(got.data(), m, n, ldc), options);
      ASSERT_EQ(got, float_c);
      // bf16 C from bf16 A, and from float A.
      MatMul(ConstMatrix(a32, m, k, lda), packed,
             Matrix(want.data(), m, n, ldc), options);
      for (const bool bf16_a : {true, false}) {
        std::vector<BFloat16> c = c16;
        if (bf16_a) {
          MatMul(MatrixView<const BFloat16>(a16, m, k, lda), packed,
                 MatrixView<BFloat16>(c.data(), m, n, ldc), options);
        } else {
          MatMul(ConstMatrix(a32, m, k, lda), packed,
                 MatrixView<BFloat16>(c.data(), m, n, ldc), options);
        }
        for (size_t i = 0; i < m; ++i) {
          for (size_t j = 0; j < ldc; ++j) {
            const uint16_t expected = j < n ? ToBFloat16(want[i * ldc + j]).bits
                                            : c16[i * ldc + j].bits;
            ASSERT_EQ(c[i * ldc + j].bits, expected)
                << i << " " << j << " bf16 A " << bf16_a;
          }
        }
      }
    };
    check(ComputeType::kFloat32);
    test::ForEachBFloat16DotPolicy(
        {BFloat16DotPolicy::kAuto, BFloat16DotPolicy::kDotProduct,
         BFloat16DotPolicy::kFallback},
        [&](BFloat16DotPolicy) { check(ComputeType::kBFloat16); });
  }
  // C may not overlap A, whatever their types.
  const size_t k = 70;
  std::vector<BFloat16> a16(2 * k);
  MatMulOptions options;
  const PackedMatrix packed(ConstMatrix(b.data(), k, 1), options);
  ExpectInvalid(
      [&] {
        MatMul(MatrixView<const BFloat16>(a16.data(), 2, k), packed,
               MatrixView<BFloat16>(a16.data() + 1, 2, 1), options);
      },
      {"MatMul", "C overlaps A"});
}

TEST_P(MatMulTest, EveryRowCountAroundTheTile) {
  for (Transpose t : {Transpose::kNo, Transpose::kYes}) {
    for (size_t m = 0; m <= 17; ++m) RunCase({m, 19, 37, t}, m);
    // Past one row block of the tiled path (96 rows).
    for (size_t m : {95, 96, 97, 193}) RunCase({m, 9, 70, t}, m);
  }
}

TEST_P(MatMulTest, EveryColumnCountAroundThePanel) {
  for (Transpose t : {Transpose::kNo, Transpose::kYes}) {
    for (size_t n = 0; n <= 129; ++n) RunCase({7, 11, n, t}, n);
  }
}

// One row with half a vector past the last whole one, in the depth (B^T:
// dot products, after an even or odd count of vectors) or the columns (a
// pass of four vectors and the half): 18, 36 and 72 are 4.5 vectors of 4, 8
// and 16 lanes; the depths end in half of one of those.
TEST_P(MatMulTest, HalfVectorTails) {
  for (Transpose t : {Transpose::kNo, Transpose::kYes}) {
    for (size_t n : {18, 36, 72}) {
      for (size_t k : {2, 4, 6, 8, 12, 20, 24, 40, 72}) {
        RunCase({1, k, n, t}, n + k);
      }
    }
  }
}

TEST_P(MatMulTest, DepthsAroundTheBlock) {
  for (Transpose t : {Transpose::kNo, Transpose::kYes}) {
    for (size_t k : {0, 1, 2, 3, 5, 8, 17, 255, 256, 257, 513}) {
      RunCase({13, k, 70, t}, k);
      RunCase({2, k, 70, t}, k);  // Skinny path.
    }
  }
}

TEST_P(MatMulTest, AlphaBetaBias) {
  for (Transpose t : {Transpose::kNo, Transpose::kYes}) {
    for (float alpha : {1.0f, -0.5f, 0.0f}) {
      for (float beta : {0.0f, 1.0f, 0.25f}) {
        for (bool bias : {false, true}) {
          RunCase({33, 300, 45, t, alpha, beta, bias}, 7);
          RunCase({3, 20, 45, t, alpha, beta, bias}, 8);
          // A depth of whole vectors on every target: dot-product tiles
          // store each row's sums as one vector, and one row against B^T
          // four keys' sums.
          RunCase({3, 64, 45, t, alpha, beta, bias}, 9);
          RunCase({8, 64, 46, t, alpha, beta, bias}, 10);
          RunCase({1, 64, 45, t, alpha, beta, bias}, 11);
        }
      }
    }
  }
}

TEST_P(MatMulTest, StridedAndMisaligned) {
  const size_t rows = test::Emulated() ? 100 : 200;
  for (Transpose t : {Transpose::kNo, Transpose::kYes}) {
    for (size_t offset : {1, 3}) {
      RunCase({50, 70, 90, t, 1.0f, 0.5f, true, 5, offset}, offset);
      // Several row and depth blocks: B^T is packed once for all of them.
      RunCase({rows, 300, 150, t, 1.0f, 0.5f, true, 5, offset}, offset);
      RunCase({1, 70, 90, t, 1.0f, 0.0f, false, 3, offset}, offset);
    }
  }
}

// Many row and depth blocks, many tasks (under emulation fewer of each).
TEST_P(MatMulTest, Large) {
  const bool emulated = test::Emulated();
  const size_t m = emulated ? 300 : 1030, k = emulated ? 520 : 1025;
  const size_t m_t = emulated ? 301 : 1001;
  RunCase({m, k, 40, Transpose::kNo}, 11);
  RunCase({m_t, 64, 130, Transpose::kYes}, 12);
}

// K = 0: C = beta * C + bias, with A and B allowed to be null (their size
// is 0), on the skinny, direct and tiled sizes and through the batched form.
TEST_P(MatMulTest, ZeroDepthWithNullOperands) {
  for (Transpose t : {Transpose::kNo, Transpose::kYes}) {
    for (size_t m : {1, 7, 300}) {
      const size_t n = 70;
      std::vector<float> c(m * n, 2.0f);
      std::vector<float> bias(n);
      for (size_t j = 0; j < n; ++j) bias[j] = static_cast<float>(j);
      MatMulOptions opt;
      opt.transpose_b = t;
      opt.beta = 0.5f;
      opt.bias = bias.data();
      const ConstMatrix a(nullptr, m, 0, 0);
      const ConstMatrix b = t == Transpose::kYes
                                ? ConstMatrix(nullptr, n, 0, 0)
                                : ConstMatrix(nullptr, 0, n, n);
      MatMul(a, b, Matrix(c.data(), m, n, n), opt);
      for (size_t i = 0; i < m * n; ++i) {
        ASSERT_EQ(c[i], 1.0f + bias[i % n]) << "m=" << m << " at " << i;
      }
      // Two heads with strides over the empty operands: slicing them must
      // not offset their null pointers either.
      std::vector<float> c2(2 * m * n, 2.0f);
      const ConstTensor4 a4(nullptr, 1, 2, m, 0, 64, 32, 0);
      const ConstTensor4 b4 =
          t == Transpose::kYes ? ConstTensor4(nullptr, 1, 2, n, 0, 64, 32, 0)
                               : ConstTensor4(nullptr, 1, 2, 0, n, 64, 32, n);
      BatchedMatMul(a4, b4, Tensor4::Dense(c2.data(), 1, 2, m, n), opt);
      for (size_t i = 0; i < 2 * m * n; ++i) {
        ASSERT_EQ(c2[i], 1.0f + bias[i % n])
            << "batched m=" << m << " at " << i;
      }
    }
  }
}

TEST_P(MatMulTest, SeedsToyShape) { RunCase({6, 3, 2, Transpose::kNo}, 13); }

// Heads of (B, T, H, D) projections multiplied in place: Q K^T per head.
TEST_P(MatMulTest, BatchedHeadsInTokenMajorLayout) {
  const size_t batch = 2, tokens = 37, heads = 3, head_dim = 20;
  for (size_t kv_heads : {heads, size_t{1}}) {
    const std::vector<float> q =
        test::RandomVector(batch * tokens * heads * head_dim, 1);
    const std::vector<float> k =
        test::RandomVector(batch * tokens * kv_heads * head_dim, 2);
    std::vector<float> scores(batch * heads * tokens * tokens);
    const auto qv =
        ConstTensor4::FromTokenMajor(q.data(), batch, tokens, heads, head_dim);
    const auto kv = ConstTensor4::FromTokenMajor(k.data(), batch, tokens,
                                                 kv_heads, head_dim);
    const auto sv = Tensor4::Dense(scores.data(), batch, heads, tokens, tokens);
    MatMulOptions opt;
    opt.transpose_b = Transpose::kYes;
    opt.alpha = 0.125f;
    BatchedMatMul(qv, kv, sv, opt);
    for (size_t b = 0; b < batch; ++b) {
      for (size_t h = 0; h < heads; ++h) {
        const size_t hk = h / (heads / kv_heads);
        for (size_t i = 0; i < tokens; ++i) {
          for (size_t j = 0; j < tokens; ++j) {
            double exact = 0.0;
            for (size_t x = 0; x < head_dim; ++x) {
              exact += double(qv.Slice(b, h)(i, x)) * kv.Slice(b, hk)(j, x);
            }
            ASSERT_NEAR(sv.Slice(b, h)(i, j), 0.125 * exact, 1e-5);
          }
        }
      }
    }
  }
}

// Each output's reduction order is fixed: any thread count, same bits.
TEST_P(MatMulTest, BitIdenticalForAnyThreadCount) {
  const size_t m = test::Emulated() ? 150 : 300, k = 700, n = 333;
  const std::vector<float> a = test::RandomVector(m * k, 1);
  const std::vector<float> b = test::RandomVector(k * n, 2);
  test::ExpectSameBitsForAnyThreadCount([&] {
    std::vector<float> c(m * n);
    MatMul(ConstMatrix(a.data(), m, k), ConstMatrix(b.data(), k, n),
           Matrix(c.data(), m, n));
    return c;
  });
}

// The plan's task knobs (policy.h: tiles per task, row blocks per panel
// group) change the grid only: the same bits in float32 and bf16, on one
// thread and two.
TEST_P(MatMulTest, TaskKnobsKeepTheBits) {
  const size_t m = test::Emulated() ? 70 : 200, k = 300, n = 333;
  const std::vector<float> a = test::RandomVector(m * k, 1);
  const std::vector<float> b = test::RandomVector(k * n, 2);
  for (const ComputeType compute :
       {ComputeType::kFloat32, ComputeType::kBFloat16}) {
    const auto product = [&](int threads) {
      std::vector<float> c(m * n);
      MatMulOptions options;
      options.compute = compute;
      tbb::task_arena(threads).execute([&] {
        MatMul(ConstMatrix(a.data(), m, k), ConstMatrix(b.data(), k, n),
               Matrix(c.data(), m, n), options);
      });
      return c;
    };
    const std::vector<float> table = product(1);
    for (const size_t tiles : {1, 3, 64}) {
      for (const size_t group : {0, 1, 3}) {
        const auto forced = test::ForcePolicy([&](internal::Policy& p) {
          p.matmul_task_tiles = tiles;
          p.matmul_panel_group = group;
        });
        for (const int threads : {1, 2}) {
          const std::vector<float> c = product(threads);
          ASSERT_EQ(std::memcmp(c.data(), table.data(), c.size() * 4), 0)
              << tiles << " tiles, group " << group << ", " << threads
              << " threads, compute " << static_cast<int>(compute);
        }
      }
    }
  }
}

// The float32 plan's paths by shape, and its grid under the task knobs.
TEST(MatMulPlan, PathsAndGrid) {
  using internal::MatMulPath;
  using internal::PlanMatMul;
  const internal::MatMulTile avx512{6, 64, 3}, avx2{6, 16, 2};
  internal::Policy policy;
  // B^T with 2-16 rows: dot tiles; one chunk below kMatMulParallelWork.
  EXPECT_EQ(PlanMatMul(8, 1000, 64, true, avx512, 2, policy).path,
            MatMulPath::kDotColumns);
  EXPECT_EQ(PlanMatMul(8, 1000, 64, true, avx512, 2, policy).grain, 1000u);
  const internal::MatMulPlan wide =
      PlanMatMul(16, 32000, 4096, true, avx512, 2, policy);
  EXPECT_EQ(wide.grain % 3, 0u);
  EXPECT_LT(wide.grain, 32000u);
  // One row, or few rows of B, or little work: skinny columns.
  EXPECT_EQ(PlanMatMul(1, 1000, 64, true, avx512, 2, policy).path,
            MatMulPath::kSkinnyColumns);
  EXPECT_EQ(PlanMatMul(4, 1000, 64, false, avx512, 2, policy).path,
            MatMulPath::kSkinnyColumns);
  EXPECT_EQ(PlanMatMul(6, 3, 2, false, avx512, 2, policy).path,
            MatMulPath::kSkinnyColumns);
  // Many rows: tiles, wide panels alone, narrow ones by twos.
  internal::MatMulPlan tiled =
      PlanMatMul(1024, 768, 768, false, avx512, 1, policy);
  EXPECT_EQ(tiled.path, MatMulPath::kTiled);
  EXPECT_EQ(tiled.grid.row_block, 96u);
  EXPECT_EQ(tiled.grid.group, 1u);
  EXPECT_EQ(PlanMatMul(1024, 768, 768, false, avx2, 1, policy).grid.group, 2u);
  policy.matmul_task_tiles = 4;
  policy.matmul_panel_group = 3;
  tiled = PlanMatMul(1024, 768, 768, false, avx512, 1, policy);
  EXPECT_EQ(tiled.grid.row_block, 24u);
  EXPECT_EQ(tiled.grid.group, 3u);
  // Every task within C, every element of C in one task.
  std::vector<int> covered(1024 * 768);
  for (size_t t = 0; t < tiled.grid.Tasks(); ++t) {
    const internal::GemmTask task = tiled.grid.At(t);
    for (size_t r = task.m0; r < task.m_end; ++r) {
      for (size_t c = task.n0; c < task.n0 + task.cols; ++c) {
        ++covered[r * 768 + c];
      }
    }
  }
  EXPECT_EQ(std::count(covered.begin(), covered.end(), 1),
            static_cast<long>(covered.size()));
}

// The driver's row blocks: whole tiles, at most max_tiles, a critical path
// within 1/32 of the shortest any block gives (one tile per task's,
// ceil(tiles x panels / threads)), kTasksPerThread tasks per thread where
// tiles allow; and the figures of its comment.
TEST(GemmGrid, BalancedRowBlockEvensOutTheThreads) {
  using internal::BalancedRowBlock;
  using internal::kTasksPerThread;
  constexpr size_t kTileRows = 6, kMaxTiles = 16;
  for (size_t rows : {1, 5, 6, 7, 64, 300, 1000, 1024, 2048, 4099}) {
    for (size_t panels : {1, 2, 5, 12, 36}) {
      for (size_t threads : {1, 2, 3, 7, 16, 64}) {
        const size_t block = BalancedRowBlock(
            rows, panels, kTileRows, size_t{1} << 18, kMaxTiles, threads);
        const size_t tiles = hwy::DivCeil(rows, kTileRows);
        ASSERT_EQ(block % kTileRows, 0u);
        const size_t s = block / kTileRows;
        ASSERT_GE(s, 1u);
        ASSERT_LE(s, std::min(kMaxTiles, tiles));
        const size_t tasks = hwy::DivCeil(tiles, s) * panels;
        const size_t path = hwy::DivCeil(tasks, threads) * s;
        const size_t shortest = hwy::DivCeil(tiles * panels, threads);
        EXPECT_LE(32 * path, 33 * shortest)
            << rows << " rows, " << panels << " panels, " << threads
            << " threads: block " << block;
        if (s > 1) {
          EXPECT_GE(tasks, kTasksPerThread * threads) << rows << " " << panels;
        }
      }
    }
  }
  // 1024 x 64 columns (one panel) at K = 1024: one tile per task at 16
  // threads, 11 at 2, 16 at 1; at K = 64 a task takes 11 tiles at least.
  const size_t k1024 = kTileRows * 64 * 1024, k64 = kTileRows * 64 * 64;
  EXPECT_EQ(BalancedRowBlock(1024, 1, kTileRows, k1024, kMaxTiles, 16), 6u);
  EXPECT_EQ(BalancedRowBlock(1024, 1, kTileRows, k1024, kMaxTiles, 2), 66u);
  EXPECT_EQ(BalancedRowBlock(1024, 1, kTileRows, k1024, kMaxTiles, 1), 96u);
  EXPECT_EQ(BalancedRowBlock(1024, 1, kTileRows, k64, kMaxTiles, 16), 66u);
}

// C as the columns after A's in rows of one buffer: no element shared, so
// accepted, and C is what a separate buffer gets, bit for bit.
TEST(MatMulViews, OutputInterleavedWithA) {
  const size_t m = 37, k = 45, n = 29, width = k + n;
  std::vector<float> buffer = test::RandomVector(m * width, 31);
  const std::vector<float> b = test::RandomVector(k * n, 32);
  std::vector<float> separate(m * n);
  const ConstMatrix a(buffer.data(), m, k, width);
  MatMul(a, ConstMatrix(b.data(), k, n), Matrix(separate.data(), m, n));
  MatMul(a, ConstMatrix(b.data(), k, n),
         Matrix(buffer.data() + k, m, n, width));
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      ASSERT_EQ(buffer[i * width + k + j], separate[i * n + j])
          << i << " " << j;
    }
  }
  // One float earlier, C's first column is A's last: rejected.
  ExpectInvalid(
      [&] {
        MatMul(a, ConstMatrix(b.data(), k, n),
               Matrix(buffer.data() + k - 1, m, n, width));
      },
      {"MatMul: C overlaps A"});
}

TEST(MatMulErrors, NamesTheArgumentAndValues) {
  std::vector<float> buf(64);
  float* p = buf.data();
  ExpectInvalid(
      [&] {
        MatMul({nullptr, 2, 3}, {p, 3, 4}, {p + 20, 2, 4});
      },
      {"MatMul", "A is null", "2 x 3"});
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, {p + 8, 4, 4}, {p + 30, 2, 4});
      },
      {"MatMul", "inner dimensions", "2 x 3", "4 x 4"});
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, {p + 8, 3, 4}, {p + 30, 2, 5});
      },
      {"C is 2 x 5"});
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3, 2}, {p + 8, 3, 4}, {p + 30, 2, 4});
      },
      {"A.stride (2)", "A.cols (3)"});
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, {p + 8, 3, 4}, {p + 4, 2, 4});
      },
      {"C overlaps A"});
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, {p + 8, 3, 4}, {p + 16, 2, 4});
      },
      {"C overlaps B"});
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, {p + 8, 3, 4},
               {p + 30, 2, 4, std::numeric_limits<size_t>::max() / 2});
      },
      {"overflows"});
  // Empty products are valid and write nothing.
  MatMul({nullptr, 0, 3}, {p, 3, 4}, {nullptr, 0, 4});
  p[0] = 5.0f;
  MatMul({nullptr, 2, 0}, ConstMatrix{nullptr, 0, 4}, {p, 2, 4});  // K = 0.
  EXPECT_EQ(p[0], 0.0f);
}

TEST(MatMulErrors, PackedB) {
  std::vector<float> buf(64, 1.0f);
  float* p = buf.data();
  MatMulOptions transposed;
  transposed.transpose_b = Transpose::kYes;
  const PackedMatrix b(ConstMatrix(p + 8, 4, 3), transposed);  // op(B): 3 x 4.
  EXPECT_EQ(b.rows(), 3u);
  EXPECT_EQ(b.cols(), 4u);
  EXPECT_GT(b.bytes(), 0u);
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 2}, b, {p + 30, 2, 4}, transposed);
      },
      {"MatMul", "inner dimensions", "2 x 2", "3 x 4"});
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, b, {p + 30, 2, 5}, transposed);
      },
      {"C is 2 x 5"});
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, b, {p + 30, 2, 4});
      },
      {"options.transpose_b (0)", "packing's (1, 0)"});
  MatMulOptions bf16 = transposed;
  bf16.compute = ComputeType::kBFloat16;
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, b, {p + 30, 2, 4}, bf16);
      },
      {".compute (1)", "packing's (1, 0)"});
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, b, {p + 2, 2, 4}, transposed);
      },
      {"C overlaps A"});
  ExpectInvalid([&] { PackedMatrix(ConstMatrix(nullptr, 4, 3), bf16); },
                {"PackedMatrix", "B is null"});
  MatMulOptions int8;
  int8.compute = ComputeType::kInt8;
  ExpectInvalid([&] { PackedMatrix(ConstMatrix(p, 4, 3), int8); },
                {"PackedMatrix", "options.compute (2)"});
  // On an error C is as it was; then a valid product.
  std::vector<float> c(8, 7.0f);
  ExpectInvalid(
      [&] {
        MatMul({p, 2, 3}, b, Matrix(c.data(), 2, 4), MatMulOptions());
      },
      {"transpose_b"});
  EXPECT_EQ(c, std::vector<float>(8, 7.0f));
  MatMul({p, 2, 3}, b, Matrix(c.data(), 2, 4), transposed);
  EXPECT_EQ(c, std::vector<float>(8, 3.0f));
  // K = 0: C = beta C + bias; moved-from: 0 x 0.
  const float bias[4] = {1, 2, 3, 4};
  MatMulOptions affine;
  affine.beta = 2.0f;
  affine.bias = bias;
  MatMul(ConstMatrix(nullptr, 2, 0),
         PackedMatrix(ConstMatrix(nullptr, 0, 4), affine),
         Matrix(c.data(), 2, 4), affine);
  EXPECT_EQ(c, std::vector<float>({7, 8, 9, 10, 7, 8, 9, 10}));
  PackedMatrix moved(ConstMatrix(p, 3, 4), MatMulOptions());
  const PackedMatrix to(std::move(moved));
  EXPECT_EQ(to.rows(), 3u);
  EXPECT_EQ(moved.rows(), 0u);  // NOLINT(bugprone-use-after-move)
}

// A packed B is bound to the target (and bf16 kernel) it was packed on:
// after a change, products are refused, never wrong.
TEST(MatMulErrors, PackedBIsStaleOnAnotherTarget) {
  const std::vector<std::string> targets = SupportedTargets();
  if (targets.size() < 2) GTEST_SKIP() << "one target only";
  const std::string before = ActiveTarget();
  std::vector<float> buf(64, 1.0f);
  const PackedMatrix b(ConstMatrix(buf.data(), 3, 4), MatMulOptions());
  EXPECT_TRUE(b.current());
  const std::string other = targets[0] == before ? targets[1] : targets[0];
  UseTarget(other);
  struct Restore {
    ~Restore() { UseTarget(""); }
  } restore;
  if (ActiveTarget() == before) GTEST_SKIP() << other << " is " << before;
  EXPECT_FALSE(b.current());
  ExpectInvalid(
      [&] {
        MatMul({buf.data(), 2, 3}, b, {buf.data() + 30, 2, 4});
      },
      {"packed for another target", other, "pack it again"});
}

TEST(MatMulErrors, BatchedShapes) {
  std::vector<float> buf(256);
  float* p = buf.data();
  ExpectInvalid(
      [&] {
        BatchedMatMul(ConstTensor4::Dense(p, 1, 3, 2, 2),
                      ConstTensor4::Dense(p + 20, 1, 2, 2, 2),
                      Tensor4::Dense(p + 100, 1, 3, 2, 2));
      },
      {"heads (3)", "B's heads (2)"});
}

}  // namespace
}  // namespace simdattn
