// Dropout and its Philox4x32-10 bits: known answers, the vector kernel equal
// to the scalar reference on every target, the keep rate, independence,
// thread counts and bad arguments.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/kernels.h"
#include "simdattn/random.h"
#include "tbb/task_arena.h"
#include "tests/test_util.h"
#include "tools/reference/reference.h"

namespace simdattn {
namespace {

using test::ExpectInvalid;

// Random123's tests/kat_vectors, the "philox4x32 10" lines: counter words,
// key words, then the expected output words. Quoted from
// DEShawResearch/Random123-Boost, libs/random/test/test_philox.cpp (commit
// 916db91a), which pastes them from that file.
struct KnownAnswer {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};
constexpr KnownAnswer kKnownAnswers[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(Philox4x32, Random123KnownAnswers) {
  for (const KnownAnswer& k : kKnownAnswers) {
    EXPECT_EQ(Philox4x32(k.counter, k.key), k.expected);
  }
  // Also at compile time.
  static_assert(Philox4x32(kKnownAnswers[2].counter, kKnownAnswers[2].key)[3] ==
                    0x24126ea1u,
                "constexpr Philox");
}

TEST(Philox4x32, DropoutBitsFollowTheDocumentedLayout) {
  const PhiloxKey key = DropoutStreamKey(5, 9);
  EXPECT_EQ(key, (PhiloxKey{Philox4x32({9, 0, 0, 0}, {5, 0})[0],
                            Philox4x32({9, 0, 0, 0}, {5, 0})[1]}));
  for (uint64_t j :
       {0, 1, 15, 16, 17, 31, 32, 47, 63, 64, 65, 127, 128, 130, 1000}) {
    const PhiloxCounter out = Philox4x32(
        {static_cast<uint32_t>(16 * (j / 128) + j % 16), 3, 2, 1}, key);
    const uint32_t word = out[(j % 128) / 32];
    EXPECT_EQ(DropoutBits(key, 1, 2, 3, j),
              (j % 32) < 16 ? word & 0xFFFF : word >> 16)
        << j;
  }
}

// A padded, misaligned (d0, d1, d2, d3) view inside a buffer whose other
// elements hold a sentinel, so that stray writes show.
struct Buffer {
  std::vector<float> store;
  Tensor4 view;
  static constexpr float kSentinel = 1234.5f;

  Buffer(size_t d0, size_t d1, size_t d2, size_t d3, size_t pad, size_t offset,
         uint64_t seed) {
    const size_t s2 = d3 + pad, s1 = d2 * s2 + pad, s0 = d1 * s1 + pad;
    store.assign(offset + d0 * s0 + 1, kSentinel);
    view = Tensor4(store.data() + offset, d0, d1, d2, d3, s0, s1, s2);
    const std::vector<float> values =
        test::RandomVector(d0 * d1 * d2 * d3, seed, 0.5f, 2.0f);
    size_t k = 0;
    ForEach([&](size_t b, size_t h, size_t i, size_t j) {
      (*this)(b, h, i, j) = values[k++];
    });
  }
  Buffer(const Buffer& other) : store(other.store), view(other.view) {
    view.data = store.data() + (other.view.data - other.store.data());
  }
  Buffer& operator=(const Buffer&) = delete;

  float& operator()(size_t b, size_t h, size_t i, size_t j) const {
    return view.data[b * view.strides[0] + h * view.strides[1] +
                     i * view.strides[2] + j];
  }
  template <typename F>
  void ForEach(F&& f) const {
    for (size_t b = 0; b < view.dims[0]; ++b)
      for (size_t h = 0; h < view.dims[1]; ++h)
        for (size_t i = 0; i < view.dims[2]; ++i)
          for (size_t j = 0; j < view.dims[3]; ++j) f(b, h, i, j);
  }
};

// Dropout of a copy of `in` equals the scalar reference element by element
// (bits: DropoutBits; kept: x * (1.0f / (1.0f - p)); dropped: +0), and
// nothing outside the view changes.
void ExpectMatchesReference(const Buffer& in, float p, DropoutKey key,
                            const std::string& what) {
  Buffer out = in;
  Dropout(out.view, p, key);
  Buffer expected = in;
  const reference::Dropout dropout(p, key);
  in.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
    expected(b, h, i, j) = dropout(in(b, h, i, j), b, h, i, j);
  });
  for (size_t k = 0; k < out.store.size(); ++k) {
    ASSERT_EQ(std::memcmp(&out.store[k], &expected.store[k], sizeof(float)), 0)
        << what << ": element " << k << " is " << out.store[k] << ", expected "
        << expected.store[k];
  }
}

class DropoutTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(DropoutTest);

TEST_P(DropoutTest, EqualsScalarReferenceForEveryRowLength) {
  for (size_t n = 0; n <= 2 * kDropoutGroup + 1; ++n) {
    ExpectMatchesReference(Buffer(2, 3, 2, n, 3, n % 3, n), 0.3f, {n, 7},
                           "n=" + std::to_string(n));
  }
  for (size_t n : {200, 1000, 1031}) {
    ExpectMatchesReference(Buffer(1, 2, 3, n, 1, 1, n), 0.5f, {1, 2},
                           "n=" + std::to_string(n));
  }
}

TEST_P(DropoutTest, EqualsScalarReferenceForEveryP) {
  for (float p : {1e-7f, 0.1f, 0.5f, 0.9f, 0.999f, 1.0f - 1e-7f, 1.0f}) {
    ExpectMatchesReference(Buffer(3, 2, 5, 77, 2, 1, 3), p,
                           {0x123456789abcdefull, 0xfedcba987654321ull},
                           "p=" + std::to_string(p));
  }
}

// Rows that end exactly where the allocation ends, so that an access past a
// row's end shows under AddressSanitizer.
TEST_P(DropoutTest, TouchesNothingPastTheRows) {
  for (size_t n = 1; n <= 2 * kDropoutGroup + 1; ++n) {
    std::vector<float> x(2 * n, 1.0f);
    Dropout(Tensor4::Dense(x.data(), 1, 1, 2, n), 0.5f, {n, 0});
    const PhiloxKey stream = DropoutStreamKey(n, 0);
    for (size_t k = 0; k < x.size(); ++k) {
      const bool drop =
          DropoutBits(stream, 0, 0, k / n, k % n) < DropoutThreshold(0.5f);
      ASSERT_EQ(x[k], drop ? 0.0f : 2.0f) << "n=" << n << " k=" << k;
    }
  }
}

// Indices past 2^16 in every counter word (the per-row words of rounds 0
// and 1 are computed apart from the vector rounds).
TEST_P(DropoutTest, LargeIndices) {
  const size_t big = (size_t{1} << 16) + 5;
  ExpectMatchesReference(Buffer(big, 1, 1, 2, 0, 0, 1), 0.5f, {9, 9}, "b");
  ExpectMatchesReference(Buffer(1, big, 1, 2, 0, 0, 2), 0.5f, {9, 9}, "h");
  ExpectMatchesReference(Buffer(1, 1, big, 2, 0, 0, 3), 0.5f, {9, 9}, "i");
}

// Heads of a (batch, tokens, heads * dim) buffer, used where they lie.
TEST_P(DropoutTest, TokenMajorView) {
  const size_t batch = 2, tokens = 7, heads = 3, dim = 67;
  Buffer x(1, 1, 1, batch * tokens * heads * dim + 1, 0, 0, 1);
  x.view =
      Tensor4::FromTokenMajor(x.store.data() + 1, batch, tokens, heads, dim);
  ExpectMatchesReference(x, 0.25f, {42, 0}, "token major");
}

TEST_P(DropoutTest, ZeroIsUntouchedAndOneIsZeros) {
  Buffer x(2, 2, 3, 37, 2, 1, 5);
  x(0, 0, 0, 0) = std::numeric_limits<float>::quiet_NaN();
  x(0, 0, 0, 1) = -0.0f;
  const Buffer before = x;
  Dropout(x.view, 0.0f, {1, 1});
  ASSERT_EQ(std::memcmp(x.store.data(), before.store.data(),
                        x.store.size() * sizeof(float)),
            0);
  Dropout(x.view, 1.0f, {1, 1});
  x.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
    ASSERT_EQ(std::memcmp(&x(b, h, i, j), "\0\0\0\0", 4), 0);  // +0.0f
  });
  ExpectMatchesReference(before, 1.0f, {1, 1}, "p=1");
}

// Rows are independent and bits depend only on the element's position.
TEST_P(DropoutTest, BitIdenticalForAnyThreadCount) {
  const Buffer x(2, 3, 64, 333, 0, 0, 9);
  test::ExpectSameBitsForAnyThreadCount([&] {
    Buffer y = x;
    Dropout(y.view, 0.4f, {3, 4});
    return y.store;
  });
}

// The statistical tests below run on the best target only: the tests above
// show every target produces the same bits.

// Keep decisions of a (1, 1, rows, cols) tensor of ones.
std::vector<uint8_t> KeepMask(size_t rows, size_t cols, float p,
                              DropoutKey key) {
  std::vector<float> x(rows * cols, 1.0f);
  Dropout(Tensor4::Dense(x.data(), 1, 1, rows, cols), p, key);
  std::vector<uint8_t> keep(x.size());
  for (size_t k = 0; k < x.size(); ++k) keep[k] = x[k] != 0.0f;
  return keep;
}

TEST(DropoutStatistics, KeptFractionIsOneMinusP) {
  const size_t rows = 2500, cols = 4000;  // 10^7 draws.
  for (float p : {0.1f, 0.5f, 0.9f}) {
    std::vector<float> x(rows * cols, 1.0f);
    Dropout(Tensor4::Dense(x.data(), 1, 1, rows, cols), p, {2024, 1});
    const float scale = 1.0f / (1.0f - p);
    size_t kept = 0;
    for (float v : x) {
      if (v != 0.0f) {
        ++kept;
        ASSERT_EQ(v, scale);  // 1 * scale, exactly.
      }
    }
    const double n = double(x.size());
    const double sigma = std::sqrt(p * (1.0 - p) / n);
    EXPECT_NEAR(kept / n, 1.0 - p, 4 * sigma) << "p=" << p;
  }
}

// Chi-square statistic of the 2x2 table of (a[k], b[k]) keep decisions; the
// 99.9% point of chi-square with 1 degree of freedom is 10.83.
double ChiSquare(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                 size_t stride_a = 1, size_t count = 0) {
  double t[2][2] = {{0, 0}, {0, 0}};
  if (count == 0) count = a.size();
  for (size_t k = 0; k < count; ++k) t[a[k * stride_a]][b[k * stride_a]] += 1;
  const double n = t[0][0] + t[0][1] + t[1][0] + t[1][1];
  const double det = t[0][0] * t[1][1] - t[0][1] * t[1][0];
  const double margins = (t[0][0] + t[0][1]) * (t[1][0] + t[1][1]) *
                         (t[0][0] + t[1][0]) * (t[0][1] + t[1][1]);
  return n * det * det / margins;
}

constexpr double kChiSquare999 = 10.83;

TEST(DropoutStatistics, ConsecutiveSeedsAndOffsetsAreIndependent) {
  const size_t rows = 500, cols = 2000;  // 10^6 pairs.
  for (float p : {0.5f, 0.1f}) {
    for (uint64_t seed : {0ull, 1ull, 0xffffffffull}) {
      const auto a = KeepMask(rows, cols, p, {seed, 0});
      const auto b = KeepMask(rows, cols, p, {seed + 1, 0});
      const auto c = KeepMask(rows, cols, p, {seed, 1});
      EXPECT_LT(ChiSquare(a, b), kChiSquare999) << "seed " << seed;
      EXPECT_LT(ChiSquare(a, c), kChiSquare999) << "offset, seed " << seed;
    }
  }
}

TEST(DropoutStatistics, NeighbouringElementsAreIndependent) {
  const size_t rows = 1000, cols = 1024;
  const auto keep = KeepMask(rows, cols, 0.5f, {77, 3});
  // Pairs (k, k + shift) in the flat (rows, cols) array: the next row, the
  // next column (next counter, same word), the same counter's next word (16
  // columns on) and the word after (32), the next 64-column group.
  for (size_t shift : {cols, size_t{1}, size_t{16}, size_t{64}, size_t{32}}) {
    std::vector<uint8_t> a(keep.begin(), keep.end() - shift);
    std::vector<uint8_t> b(keep.begin() + shift, keep.end());
    EXPECT_LT(ChiSquare(a, b), kChiSquare999) << "shift " << shift;
  }
  // Neighbouring heads and batch items.
  std::vector<float> x(2 * 2 * 500 * 1000, 1.0f);
  Dropout(Tensor4::Dense(x.data(), 2, 2, 500, 1000), 0.5f, {77, 3});
  const size_t matrix = 500 * 1000;
  std::vector<uint8_t> m[3];
  for (int k = 0; k < 3; ++k) {
    m[k].resize(matrix);
    for (size_t e = 0; e < matrix; ++e) {
      // Matrices (0, 0), (0, 1) and (1, 0).
      const size_t base = k == 0 ? 0 : k == 1 ? matrix : 2 * matrix;
      m[k][e] = x[base + e] != 0.0f;
    }
  }
  EXPECT_LT(ChiSquare(m[0], m[1]), kChiSquare999) << "heads";
  EXPECT_LT(ChiSquare(m[0], m[2]), kChiSquare999) << "batch";
}

TEST(DropoutErrors, NamesTheArgumentAndValues) {
  std::vector<float> buf(64, 1.0f);
  const Tensor4 x = Tensor4::Dense(buf.data(), 1, 2, 3, 4);
  ExpectInvalid([&] { Dropout(x, -0.1f, {}); }, {"Dropout", "p (-0.1)"});
  ExpectInvalid([&] { Dropout(x, 1.1f, {}); }, {"Dropout", "p (1.1)"});
  ExpectInvalid(
      [&] { Dropout(x, std::numeric_limits<float>::quiet_NaN(), {}); },
      {"Dropout", "p (nan)"});
  ExpectInvalid([&] { Dropout(Tensor4::Dense(nullptr, 1, 1, 2, 2), 0.5f, {}); },
                {"x is null", "(1, 1, 2, 2)"});
  ExpectInvalid(
      [&] { Dropout(Tensor4(buf.data(), 1, 1, 2, 4, 0, 0, 3), 0.5f, {}); },
      {"x row stride (3)", "row length (4)"});
  ExpectInvalid(
      [&] { Dropout(Tensor4(buf.data(), 3, 1, 2, 4, 0, 0, 4), 0.5f, {}); },
      {"x.strides[0] (0)", "overlap"});
  if (sizeof(size_t) == 8) {
    const size_t big = size_t{1} << 32;
    ExpectInvalid(
        [&] {
          Dropout(Tensor4(buf.data(), big + 1, 1, 1, 1, 1, 1, 1), 0.5f, {});
        },
        {"x.dims[0] (4294967297)", "2^32"});
    ExpectInvalid(
        [&] {
          Dropout(Tensor4(buf.data(), 1, 1, 1, 8 * big + 1, 0, 0, 0), 0.5f, {});
        },
        {"x.dims[3] (34359738369)", "2^35"});
  }
  for (float v : buf) ASSERT_EQ(v, 1.0f);  // Nothing was written.
  // Empty shapes are valid.
  Dropout(Tensor4::Dense(nullptr, 0, 2, 3, 4), 0.5f, {});
}

}  // namespace
}  // namespace simdattn
