// Softmax on every target against a float64 reference: row lengths around
// the vector widths, strided and misaligned views, every mask kind and their
// combinations, extreme inputs, aliasing, thread counts and bad arguments.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/kernels.h"
#include "tbb/task_arena.h"
#include "tests/test_util.h"
#include "tools/reference/reference.h"

namespace simdattn {
namespace {

using test::ExpectInvalid;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Per-element bound of kernels.h, and the rows' sum.
constexpr double kRelError = reference::kSoftmaxRelativeError;
constexpr double kSumError = 1e-6;
// Outputs below FLT_MIN are denormal: the relative bound continued down to
// there, in absolute terms.
constexpr double kAbsFloor = reference::kSoftmaxAbsoluteFloor;

using Dims = std::array<size_t, 4>;

template <typename T>
const T& At(Tensor4View<T> t, size_t b, size_t h, size_t i, size_t j) {
  return t.data[b * t.strides[0] + h * t.strides[1] + i * t.strides[2] + j];
}

// A padded, misaligned (d0, d1, d2, d3) view inside a buffer whose other
// elements hold a sentinel, so that stray writes show.
template <typename T>
struct Buffer {
  std::vector<T> store;
  Tensor4View<T> view;
  T sentinel;

  // Copies point into their own store.
  Buffer(const Buffer& other)
      : store(other.store), view(other.view), sentinel(other.sentinel) {
    view.data = store.data() + (other.view.data - other.store.data());
  }
  Buffer& operator=(const Buffer&) = delete;

  Buffer(Dims dims, size_t pad, size_t offset, T sentinel_value)
      : sentinel(sentinel_value) {
    const size_t s2 = dims[3] + pad;
    const size_t s1 = dims[2] * s2 + pad;
    const size_t s0 = dims[1] * s1 + pad;
    store.assign(offset + dims[0] * s0 + 1, sentinel);
    view = Tensor4View<T>(store.data() + offset, dims[0], dims[1], dims[2],
                          dims[3], s0, s1, s2);
  }
  template <typename F>
  void ForEach(F&& f) {
    for (size_t b = 0; b < view.dims[0]; ++b)
      for (size_t h = 0; h < view.dims[1]; ++h)
        for (size_t i = 0; i < view.dims[2]; ++i)
          for (size_t j = 0; j < view.dims[3]; ++j) f(b, h, i, j);
  }
  T& operator()(size_t b, size_t h, size_t i, size_t j) {
    return const_cast<T&>(At(Tensor4View<const T>(view), b, h, i, j));
  }
  // Every element outside the view still holds the sentinel.
  bool PaddingIntact() {
    std::vector<bool> inside(store.size(), false);
    const T* base = store.data();
    ForEach([&](size_t b, size_t h, size_t i, size_t j) {
      inside[&(*this)(b, h, i, j) - base] = true;
    });
    for (size_t k = 0; k < store.size(); ++k) {
      if (!inside[k] && std::memcmp(&store[k], &sentinel, sizeof(T)) != 0) {
        return false;
      }
    }
    return true;
  }
};

Buffer<float> RandomScores(Dims dims, size_t pad, size_t offset, uint64_t seed,
                           float lo = -4.0f, float hi = 4.0f) {
  Buffer<float> t(dims, pad, offset, 1234.5f);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  t.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
    t(b, h, i, j) = dist(rng);
  });
  return t;
}

// Compares every row of y with the reference, and checks that rows sum to 1
// (less their sink's share).
void ExpectMatchesReference(ConstTensor4 x, ConstTensor4 y, float scale,
                            const AttentionMask& m, const std::string& what) {
  for (size_t b = 0; b < x.dims[0]; ++b) {
    for (size_t h = 0; h < x.dims[1]; ++h) {
      for (size_t i = 0; i < x.dims[2]; ++i) {
        const std::vector<reference::SoftmaxValue> ref =
            reference::SoftmaxRow(x, scale, m, b, h, i);
        double sum = 0.0, ref_sum = 0.0;
        for (size_t j = 0; j < x.dims[3]; ++j) {
          const float got = At(y, b, h, i, j);
          // Streamed only on failure.
          const auto where = [&] {
            return what + " at (" + std::to_string(b) + ", " +
                   std::to_string(h) + ", " + std::to_string(i) + ", " +
                   std::to_string(j) + ") of " + std::to_string(x.dims[3]);
          };
          const double want = ref[j].value;
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got)) << where() << ": " << got;
            continue;
          }
          ASSERT_NEAR(got, want, ref[j].relative_error * want + kAbsFloor)
              << where();
          sum += got;
          ref_sum += want;
        }
        if (ref_sum != 0.0) {
          // A sink keeps its share of the row's weight.
          ASSERT_NEAR(sum, m.sinks == nullptr ? 1.0 : ref_sum, kSumError)
              << what << " row " << i;
        } else if (!std::isnan(ref_sum)) {
          ASSERT_EQ(sum, 0.0) << what << " row " << i;
        }
      }
    }
  }
}

// Runs Softmax out of place into a padded y, checks it against the
// reference, that x and y's padding are untouched, and that running in place
// on a copy of x gives the same bits.
void RunCase(const Buffer<float>& x_in, float scale, const AttentionMask& m,
             const std::string& what) {
  Buffer<float> x = x_in;
  const std::vector<float> x_before = x.store;
  Buffer<float> y(
      Dims{x.view.dims[0], x.view.dims[1], x.view.dims[2], x.view.dims[3]}, 2,
      3, kNaN);
  Softmax(x.view, y.view, scale, m);
  ASSERT_EQ(std::memcmp(x.store.data(), x_before.data(),
                        x.store.size() * sizeof(float)),
            0)
      << what << ": x changed";
  ASSERT_TRUE(y.PaddingIntact()) << what << ": wrote outside y";
  ExpectMatchesReference(x.view, y.view, scale, m, what);

  Softmax(x.view, x.view, scale, m);  // In place.
  ASSERT_TRUE(x.PaddingIntact()) << what << ": wrote outside x in place";
  bool same = true;
  x.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
    same &= std::memcmp(&x(b, h, i, j), &y(b, h, i, j), sizeof(float)) == 0;
  });
  ASSERT_TRUE(same) << what << ": in place differs from out of place";
}

class SoftmaxTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(SoftmaxTest);

TEST_P(SoftmaxTest, EveryRowLengthAroundTheVectors) {
  for (size_t n = 0; n <= 2 * 16 + 1; ++n) {
    for (size_t offset : {0, 1}) {
      RunCase(RandomScores({2, 3, 5, n}, 3, offset, n), 0.7f, {},
              "n=" + std::to_string(n));
    }
  }
}

TEST_P(SoftmaxTest, LongRows) {
  for (size_t n : {255, 1000, 1024, 4099}) {
    RunCase(RandomScores({1, 2, 3, n}, 1, 1, n), 0.125f, {},
            "n=" + std::to_string(n));
  }
  // Wider range of exp's arguments: down to -32 below the max.
  RunCase(RandomScores({1, 1, 4, 777}, 0, 0, 5, -16.0f, 16.0f), 1.0f, {},
          "wide range");
}

// Outputs over 8 MiB are written with non-temporal stores in whole cache
// lines (softmax-inl.h): rows of odd length at every misalignment, cut by
// causality and key lengths mid-line, all land where they should.
TEST_P(SoftmaxTest, LargeOutputsAreStreamed) {
  const Buffer<float> x = RandomScores({2, 1, 1024, 1031}, 3, 1, 21);
  RunCase(x, 0.125f, {}, "streamed");
  AttentionMask m;
  m.causal = true;
  m.causal_offset = 5;
  const size_t lengths[] = {1031, 700};
  m.key_lengths = lengths;
  RunCase(x, 0.125f, m, "streamed causal");
}

// Operands that end exactly where their allocation ends, so that a load past
// a row's end shows under AddressSanitizer.
TEST_P(SoftmaxTest, ReadsNothingPastTheRows) {
  for (size_t n = 1; n <= 2 * 16 + 1; ++n) {
    const size_t size = 2 * 3 * n;
    const std::vector<float> x = test::RandomVector(size, n, -4.0f, 4.0f);
    const std::vector<float> additive = test::RandomVector(size, n + 1);
    std::vector<uint8_t> boolean(size);
    for (size_t k = 0; k < size; ++k) boolean[k] = k % 3 == 0;
    const auto xv = ConstTensor4::Dense(x.data(), 1, 2, 3, n);
    for (int masks = 0; masks < 2; ++masks) {
      AttentionMask m;
      if (masks) {
        m.additive = ConstTensor4::Dense(additive.data(), 1, 2, 3, n);
        m.boolean =
            Tensor4View<const uint8_t>::Dense(boolean.data(), 1, 2, 3, n);
      }
      std::vector<float> y(size);
      Softmax(xv, Tensor4::Dense(y.data(), 1, 2, 3, n), 1.0f, m);
      ExpectMatchesReference(xv, ConstTensor4::Dense(y.data(), 1, 2, 3, n),
                             1.0f, m, "exact n=" + std::to_string(n));
    }
  }
}

// Heads of a (batch, tokens, heads * dim) buffer, used where they lie.
TEST_P(SoftmaxTest, TokenMajorView) {
  const size_t batch = 2, tokens = 19, heads = 3, dim = 21;
  Buffer<float> x({1, 1, 1, batch * tokens * heads * dim + 1}, 0, 0, 1234.5f);
  x.view =
      Tensor4::FromTokenMajor(x.store.data() + 1, batch, tokens, heads, dim);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  x.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
    x(b, h, i, j) = dist(rng);
  });
  RunCase(x, 0.5f, {}, "token major");
}

// Every combination of causal (with offsets), key lengths, boolean and
// additive masks, with and without broadcasting.
TEST_P(SoftmaxTest, EveryMaskCombination) {
  std::mt19937_64 rng(7);
  for (size_t n : {1, 5, 16, 17, 40}) {
    const Dims dims = {2, 3, 9, n};
    const Buffer<float> x = RandomScores(dims, 1, 1, n);
    for (int causal = 0; causal < 4; ++causal) {
      for (int lengths = 0; lengths < 2; ++lengths) {
        for (int boolean = 0; boolean < 3; ++boolean) {
          for (int additive = 0; additive < 3; ++additive) {
            AttentionMask m;
            m.causal = causal != 0;
            m.causal_offset = causal == 2 ? 3 : causal == 3 ? n + 5 : 0;
            std::vector<size_t> key_lengths = {n / 2, n};
            if (lengths) m.key_lengths = key_lengths.data();
            // boolean 1: full mask, ~30% masked and one fully masked row;
            // boolean 2: key padding mask (b, 1, 1, n) broadcast over heads
            // and rows.
            Buffer<uint8_t> bmask(boolean == 2 ? Dims{2, 1, 1, n} : dims, 2, 1,
                                  0xAB);
            bmask.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
              bmask(b, h, i, j) = (rng() % 10 < 3 || (h == 1 && i == 4))
                                      ? uint8_t(1 + rng() % 255)
                                      : 0;
            });
            if (boolean == 2) {
              bmask.view.dims[1] = dims[1];
              bmask.view.dims[2] = dims[2];
              bmask.view.strides[1] = 0;
              bmask.view.strides[2] = 0;
            }
            if (boolean) m.boolean = bmask.view;
            // additive 1: values in [-2, 2] with some -inf and one row of
            // -inf; additive 2: one (1, h, i, j) mask broadcast over batch.
            Buffer<float> amask(additive == 2 ? Dims{1, 3, 9, n} : dims, 1, 2,
                                kNaN);
            std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
            amask.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
              amask(b, h, i, j) =
                  (rng() % 10 == 0 || (h == 2 && i == 6)) ? -kInf : dist(rng);
            });
            if (additive == 2) {
              amask.view.dims[0] = dims[0];
              amask.view.strides[0] = 0;
            }
            if (additive) m.additive = amask.view;
            RunCase(x, 0.8f, m,
                    "n=" + std::to_string(n) + " causal " +
                        std::to_string(causal) + " lengths " +
                        std::to_string(lengths) + " boolean " +
                        std::to_string(boolean) + " additive " +
                        std::to_string(additive));
          }
        }
      }
    }
  }
}

// Windows, softcapping, ALiBi, sinks and per-sequence offsets, alone and
// with the element masks, rows around the vector lengths and the stage.
TEST_P(SoftmaxTest, Variants) {
  std::mt19937_64 rng(11);
  const std::vector<float> slopes = {0.25f, 0.0625f, 1.0f};
  const std::vector<float> sinks = {0.5f, -3.0f, 40.0f};
  for (size_t n : {1, 7, 16, 33, 300, 5000}) {
    const Dims dims = {2, 3, 9, n};
    const Buffer<float> x = RandomScores(dims, 1, 1, n, -8.0f, 8.0f);
    Buffer<uint8_t> bmask(dims, 0, 0, 0);
    bmask.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
      bmask(b, h, i, j) = rng() % 10 < 2;
    });
    Buffer<float> amask(dims, 0, 0, 0.0f);
    amask.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
      amask(b, h, i, j) = rng() % 10 == 0 ? -kInf : float(rng() % 9) - 4.0f;
    });
    const std::vector<size_t> offsets = {n, n / 2}, lengths = {n, 2 * n / 3};
    for (int variant = 0; variant < 7; ++variant) {
      AttentionMask m;
      m.causal = variant % 3 != 0;
      m.causal_offset = n > 9 ? n - 9 : 0;
      m.window = variant == 0 ? 0 : variant % 2 == 0 ? 4 : n / 2 + 1;
      if (variant == 1 || variant >= 5) m.softcap = 3.0f;
      if (variant == 2 || variant >= 5) m.alibi_slopes = slopes.data();
      if (variant == 3 || variant >= 5) m.sinks = sinks.data();
      if (variant == 4 || variant == 6) {
        m.causal_offsets = offsets.data();
        m.key_lengths = lengths.data();
        m.boolean = bmask.view;
        m.additive = amask.view;
      }
      RunCase(x, 0.9f, m,
              "n=" + std::to_string(n) + " variant " + std::to_string(variant));
    }
  }
}

// Softcaps at the ends of the float range, on rows holding zeros: a
// denormal cap's inverse is inf, and 0 * inf is NaN, which must neither
// reach Highway's Tanh nor the result (softcap * tanh(0) is 0).
TEST_P(SoftmaxTest, SoftcapsOfAnyFiniteSize) {
  for (float cap : {1e-45f, 1e-40f, 1.2e-38f, 3e38f}) {
    Buffer<float> x = RandomScores({1, 2, 3, 21}, 0, 0, 5, -8.0f, 8.0f);
    x.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
      if (j % 3 == 0) x(b, h, i, j) = 0.0f;
    });
    AttentionMask m;
    m.softcap = cap;
    RunCase(x, 1.0f, m, "softcap " + std::to_string(cap));
  }
}

TEST_P(SoftmaxTest, CausalWithOffsetCutsRows) {
  // 4 queries after 6 cached keys: row i keeps columns 0..6+i.
  Buffer<float> x = RandomScores({1, 1, 4, 10}, 0, 0, 1);
  Buffer<float> y({1, 1, 4, 10}, 0, 0, kNaN);
  AttentionMask m;
  m.causal = true;
  m.causal_offset = 6;
  Softmax(x.view, y.view, 1.0f, m);
  for (size_t i = 0; i < 4; ++i) {
    for (size_t j = 0; j < 10; ++j) {
      if (j > 6 + i) {
        EXPECT_EQ(y(0, 0, i, j), 0.0f) << i << ", " << j;
      } else {
        EXPECT_GT(y(0, 0, i, j), 0.0f) << i << ", " << j;
      }
    }
  }
  ExpectMatchesReference(x.view, y.view, 1.0f, m, "offset 6");
  // An offset near SIZE_MAX keeps everything (no overflow in i + offset).
  m.causal_offset = std::numeric_limits<size_t>::max() - 1;
  Softmax(x.view, y.view, 1.0f, m);
  ExpectMatchesReference(x.view, y.view, 1.0f, {}, "huge offset");
}

TEST_P(SoftmaxTest, FullyMaskedRowsAreZero) {
  for (size_t n : {1, 3, 16, 35}) {
    const Buffer<float> x = RandomScores({2, 1, 3, n}, 0, 0, n);
    std::vector<size_t> lengths = {0, n};
    Buffer<uint8_t> all({2, 1, 3, n}, 0, 0, 1);
    Buffer<float> neg_inf({2, 1, 3, n}, 0, 0, -kInf);
    for (int kind = 0; kind < 3; ++kind) {
      AttentionMask m;
      if (kind == 0) m.key_lengths = lengths.data();  // Batch 0 only.
      if (kind == 1) m.boolean = all.view;
      if (kind == 2) m.additive = neg_inf.view;
      Buffer<float> y({2, 1, 3, n}, 0, 0, kNaN);
      Softmax(x.view, y.view, 1.0f, m);
      y.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
        if (kind != 0 || b == 0) {
          ASSERT_EQ(y(b, h, i, j), 0.0f) << kind << " n=" << n;
        }
      });
      RunCase(x, 1.0f, m, "fully masked kind " + std::to_string(kind));
    }
    // Inputs that are all -inf are masked too.
    Buffer<float> ninf = RandomScores({1, 1, 2, n}, 0, 0, 1);
    ninf.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
      ninf(b, h, i, j) = -kInf;
    });
    RunCase(ninf, 1.0f, {}, "all -inf");
  }
}

// Rows of one value at every position: exact for any magnitude.
TEST_P(SoftmaxTest, ExtremeValues) {
  const float values[] = {3e38f, -3e38f, 0.0f, 1e-30f, 1e30f,
                          -kInf, kInf,   kNaN, 88.0f,  -100.0f};
  std::mt19937_64 rng(3);
  for (size_t n = 1; n <= 33; n += 4) {
    for (int trial = 0; trial < 12; ++trial) {
      Buffer<float> x = RandomScores({1, 2, 3, n}, 1, 1, n * 100 + trial);
      x.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
        // Trials 0-9 plant one kind of extreme value in ~1/3 of the
        // entries; 10 and 11 mix finite extremes.
        if (trial < 10) {
          if (rng() % 3 == 0) x(b, h, i, j) = values[trial];
        } else {
          x(b, h, i, j) = values[rng() % (trial == 10 ? 2 : 5)];
        }
      });
      RunCase(x, 1.0f, {}, "extreme trial " + std::to_string(trial));
    }
  }
}

// Large scores under scales whose products round (0.3 x rounds down for
// about half the x): the exp's argument scale * x - max must stay exact to
// one rounding and must not be positive. Rows of huge scores test the
// second (half an ulp of a max near 1e37 is ~2^100, and such rows came out
// as NaN or garbage), rows of moderate ones the first on targets without
// FMA (where fl(scale * x) - max erred by |scale x| u, 2e-3 at 3e4).
// Negative, zero and extreme scales take the other form of the argument
// (softmax-inl.h's Form); negative ones make the row's min the max.
TEST_P(SoftmaxTest, LargeScoresUnderInexactScales) {
  const float scales[] = {
      0.3f, 0.10206208f /* 1/sqrt(96) */, -0.3f, -1.0f, 1e-3f, 0.0f, 1e-30f,
      5e7f /* beyond 2^24 */};
  const float magnitudes[] = {3e38f, 1e30f, 1e20f, 3e9f, 1e5f};
  const auto what = [](const char* kind, float scale, float magnitude) {
    char text[96];
    std::snprintf(text, sizeof(text), "%s, scale %g, magnitude %g", kind, scale,
                  magnitude);
    return std::string(text);
  };
  for (float scale : scales) {
    for (float magnitude : magnitudes) {
      // Not where scale * x overflows a float (kernels.h).
      if (std::abs(scale) * magnitude > 1e38f) continue;
      for (size_t n : {1, 7, 16, 33, 100}) {
        // A few values near +-magnitude, so that rows have several columns
        // at the max: random signs, steps of ~1e-7 relative (neighbouring
        // floats at 3e38).
        Buffer<float> x({1, 2, 3, n}, 1, 1, 0.0f);
        std::mt19937_64 rng(n);
        x.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
          const float sign = rng() % 4 == 0 ? -1.0f : 1.0f;
          x(b, h, i, j) = sign * magnitude *
                          (1.0f - 1.2e-7f * static_cast<float>(rng() % 4));
        });
        RunCase(x, scale, {}, what("unmasked", scale, magnitude));
        AttentionMask m;
        m.causal = true;
        RunCase(x, scale, m, what("causal", scale, magnitude));
      }
    }
  }
}

// Rows [0, x] for scale * x swept over exp's whole domain, down to where it
// underflows: the second column is exp(s x) / (1 + exp(s x)), so this checks
// the kernel's exp (exp-inl.h) against the float64 one at 2^17 arguments per
// scale (1, 1/8, 0.3: the exp's constants depend on it), within
// its own bound (2 ULP, i.e. 4 u) plus the three roundings the row adds (sum,
// reciprocal, product). Denormal outputs add at most half a denormal step:
// the exps stay normal (times 2^64) until the final product rounds once.
TEST_P(SoftmaxTest, ExpOverItsWholeRange) {
  constexpr size_t kRows = size_t{1} << 17;
  constexpr double kU = 0x1p-24;
  constexpr double kSmallestDenormal = 0x1p-149;
  // The scale goes into the exp's constants (exp-inl.h's ExpScaling): exact
  // for a power of two, else fl(ln 2 / (L s)) adds up to |arg| u (0.71 u for
  // 0.3).
  for (const float scale : {1.0f, 0.125f, 0.3f}) {
    const double per_arg = scale == 0.3f ? kU : 0.0;
    Buffer<float> x({1, 1, kRows, 2}, 0, 0, 0.0f);
    for (size_t i = 0; i < kRows; ++i) {
      x(0, 0, i, 0) = 0.0f;
      x(0, 0, i, 1) = -110.0f / scale * static_cast<float>(i) / kRows;
    }
    RunCase(x, scale, {}, "exp sweep");
    Buffer<float> y({1, 1, kRows, 2}, 0, 0, 0.0f);
    Softmax(x.view, y.view, scale, {});
    for (size_t i = 0; i < kRows; ++i) {
      const double arg = static_cast<double>(scale) * x(0, 0, i, 1);
      const double e = std::exp(arg);
      const double expected = e / (1.0 + e);
      const double error = std::fabs(y(0, 0, i, 1) - expected);
      const double rounding = expected >= std::numeric_limits<float>::min()
                                  ? 0.0
                                  : kSmallestDenormal / 2;
      ASSERT_LE(error,
                (7 * kU + per_arg * std::fabs(arg)) * expected + rounding)
          << "exp(" << scale << " * " << x(0, 0, i, 1) << ")";
    }
  }
}

// Pass 1 takes the max of the raw scores and scales it for a positive
// finite scale, and scales every score otherwise: both agree with the
// reference, with and without a causal cut.
TEST_P(SoftmaxTest, ScalesOfEverySign) {
  AttentionMask causal;
  causal.causal = true;
  for (float scale : {0.7f, -0.7f, 0.0f, 3e5f, -3e5f}) {
    const std::string what = "scale=" + std::to_string(scale);
    RunCase(RandomScores({1, 2, 5, 37}, 0, 0, 11, -16.0f, 16.0f), scale, {},
            what);
    RunCase(RandomScores({1, 2, 5, 37}, 0, 0, 12, -16.0f, 16.0f), scale, causal,
            what + " causal");
  }
}

// Pass 1 does not look for NaN; a NaN score shows in the sum of exps, or,
// when every other score is -inf (max -inf, no exps), in a re-scan. At the
// start, middle and end of a row, so that it falls in the first vector,
// the last and the tail.
TEST_P(SoftmaxTest, NaNAmongMinusInfinities) {
  const size_t n = 37;
  for (size_t where : {size_t{0}, size_t{17}, n - 1}) {
    for (float others : {-kInf, 2.0f}) {
      Buffer<float> x({1, 1, 1, n}, 0, 0, others);
      x(0, 0, 0, where) = kNaN;
      Buffer<float> y({1, 1, 1, n}, 0, 0, 0.0f);
      Softmax(x.view, y.view, 0.5f, {});
      for (size_t j = 0; j < n; ++j) {
        ASSERT_TRUE(std::isnan(y(0, 0, 0, j)))
            << "NaN at " << where << ", others " << others << ": " << j;
      }
    }
  }
}

TEST_P(SoftmaxTest, ExactSpecialRows) {
  const size_t n = 21;
  Buffer<float> x({1, 1, 5, n}, 0, 0, 0.0f);
  for (size_t j = 0; j < n; ++j) {
    x(0, 0, 0, j) = 7e37f;                        // All equal.
    x(0, 0, 1, j) = j % 5 == 0 ? 3e38f : -3e38f;  // Two magnitudes.
    x(0, 0, 2, j) = j == 20 ? 1.0f : -kInf;       // Only the tail is live.
    x(0, 0, 3, j) = j == 3 ? kNaN : 1.0f;         // NaN in a whole vector.
    x(0, 0, 4, j) = j == 9 ? kInf : 1.0f;         // +inf - +inf is NaN.
  }
  Buffer<float> y({1, 1, 5, n}, 0, 0, 0.0f);
  Softmax(x.view, y.view, 1.0f, {});
  for (size_t j = 0; j < n; ++j) {
    EXPECT_FLOAT_EQ(y(0, 0, 0, j), 1.0f / 21.0f) << j;
    EXPECT_FLOAT_EQ(y(0, 0, 1, j), j % 5 == 0 ? 0.2f : 0.0f) << j;
    EXPECT_EQ(y(0, 0, 2, j), j == 20 ? 1.0f : 0.0f) << j;
    EXPECT_TRUE(std::isnan(y(0, 0, 3, j))) << j;
    EXPECT_TRUE(std::isnan(y(0, 0, 4, j))) << j;
  }
  // NaN in a masked column, or past the causal limit, does not propagate.
  Buffer<uint8_t> bmask({1, 1, 5, n}, 0, 0, 0);
  bmask(0, 0, 3, 3) = 1;
  AttentionMask m;
  m.boolean = bmask.view;
  Softmax(x.view, y.view, 1.0f, m);
  for (size_t j = 0; j < n; ++j) {
    EXPECT_FLOAT_EQ(y(0, 0, 3, j), j == 3 ? 0.0f : 1.0f / 20.0f) << j;
  }
  m = {};
  m.causal = true;  // Row 3 keeps columns 0..3: the NaN at 3 is live.
  m.causal_offset = 0;
  Softmax(x.view, y.view, 1.0f, m);
  EXPECT_TRUE(std::isnan(y(0, 0, 3, 0)));
  x(0, 0, 3, 3) = 1.0f;
  x(0, 0, 3, 19) = kNaN;
  m.causal_offset = 0;  // Row 3 keeps 0..3; the NaN at 19 is cut off.
  Softmax(x.view, y.view, 1.0f, m);
  for (size_t j = 0; j < n; ++j) {
    EXPECT_FLOAT_EQ(y(0, 0, 3, j), j <= 3 ? 0.25f : 0.0f) << j;
  }
}

// The seeds mask with masked_fill(-inf) before the softmax; masking with the
// boolean mask must equal that (bit for bit), and equal softmax, then zeroing
// the masked entries, then renormalising.
TEST_P(SoftmaxTest, MaskingEqualsZeroingAndRenormalising) {
  std::mt19937_64 rng(11);
  for (size_t n : {6, 17, 64, 100}) {
    const Dims dims = {2, 2, 6, n};
    const Buffer<float> x = RandomScores(dims, 0, 0, n);
    Buffer<uint8_t> bmask(dims, 0, 0, 0);
    Buffer<float> filled = x;
    bmask.ForEach([&](size_t b, size_t h, size_t i, size_t j) {
      // torch.triu(ones, diagonal=1) plus random extra entries.
      bmask(b, h, i, j) = j > i || rng() % 4 == 0;
      if (bmask(b, h, i, j)) filled(b, h, i, j) = -kInf;
    });
    AttentionMask m;
    m.boolean = bmask.view;
    Buffer<float> masked(dims, 0, 0, 0.0f), via_fill(dims, 0, 0, 0.0f),
        plain(dims, 0, 0, 0.0f);
    Softmax(x.view, masked.view, 0.5f, m);
    Softmax(filled.view, via_fill.view, 0.5f, {});
    Softmax(x.view, plain.view, 0.5f, {});
    ASSERT_EQ(std::memcmp(masked.store.data(), via_fill.store.data(),
                          masked.store.size() * sizeof(float)),
              0);
    for (size_t b = 0; b < 2; ++b) {
      for (size_t h = 0; h < 2; ++h) {
        for (size_t i = 0; i < 6; ++i) {
          double kept = 0.0;
          for (size_t j = 0; j < n; ++j) {
            if (!bmask(b, h, i, j)) kept += plain(b, h, i, j);
          }
          for (size_t j = 0; j < n; ++j) {
            const double renormalised = kept == 0.0 || bmask(b, h, i, j)
                                            ? 0.0
                                            : plain(b, h, i, j) / kept;
            // Both sides carry the kernel's error.
            ASSERT_NEAR(masked(b, h, i, j), renormalised,
                        3 * kRelError * renormalised + kAbsFloor);
          }
        }
      }
    }
  }
}

// Rows are independent and reduced in a fixed order.
TEST_P(SoftmaxTest, BitIdenticalForAnyThreadCount) {
  const Buffer<float> x = RandomScores({2, 4, 64, 300}, 0, 0, 1);
  AttentionMask m;
  m.causal = true;
  m.causal_offset = 100;
  test::ExpectSameBitsForAnyThreadCount([&] {
    Buffer<float> y({2, 4, 64, 300}, 0, 0, 0.0f);
    Softmax(x.view, y.view, 0.3f, m);
    return y.store;
  });
}

TEST(SoftmaxErrors, NamesTheArgumentAndValues) {
  std::vector<float> buf(256);
  float* p = buf.data();
  const auto dense = [](float* data, size_t rows, size_t cols) {
    return Tensor4::Dense(data, 1, 1, rows, cols);
  };
  ExpectInvalid(
      [&] { Softmax(dense(p, 2, 3), dense(p + 100, 3, 2)); },
      {"Softmax", "y has shape (1, 1, 3, 2)", "x has shape (1, 1, 2, 3)"});
  ExpectInvalid([&] { Softmax(dense(p, 2, 3), dense(p + 100, 2, 3), kNaN); },
                {"scale (nan)"});
  ExpectInvalid([&] { Softmax(dense(p, 2, 3), dense(p + 100, 2, 3), kInf); },
                {"scale (inf)"});
  ExpectInvalid([&] { Softmax(dense(nullptr, 2, 3), dense(p, 2, 3)); },
                {"x is null", "(1, 1, 2, 3)"});
  ExpectInvalid(
      [&] { Softmax(Tensor4(p, 1, 1, 2, 3, 0, 0, 2), dense(p + 100, 2, 3)); },
      {"x row stride (2)", "row length (3)"});
  ExpectInvalid([&] { Softmax(dense(p, 2, 3), dense(p + 4, 2, 3)); },
                {"y overlaps x"});
  ExpectInvalid(
      [&] {
        Softmax(Tensor4(p, 1, 1, 2, 3, 0, 0, 3),
                Tensor4(p, 1, 1, 2, 3, 0, 0, 4));
      },
      {"y overlaps x"});
  ExpectInvalid(
      [&] {
        Softmax(Tensor4(p, 1, 2, 2, 3, 0, 6, 3),
                Tensor4(p + 100, 1, 2, 2, 3, 0, 4, 3));
      },
      {"y.strides[1] (4)", "overlap", "6 elements"});
  ExpectInvalid(
      [&] {
        Softmax(Tensor4(p, 2, 1, 2, 3, 6, 0, 3),
                Tensor4(p + 100, 2, 1, 2, 3, 0, 0, 3));
      },
      {"y.strides[0] (0)", "overlap"});

  std::vector<uint8_t> bytes(64);
  AttentionMask m;
  m.boolean = Tensor4View<const uint8_t>::Dense(bytes.data(), 1, 1, 2, 4);
  ExpectInvalid([&] { Softmax(dense(p, 2, 3), dense(p + 100, 2, 3), 1.0f, m); },
                {"mask.boolean has shape (1, 1, 2, 4)", "(1, 1, 2, 3)"});
  m = {};
  m.boolean = Tensor4View<const uint8_t>(bytes.data(), 1, 1, 2, 3, 0, 0, 2);
  ExpectInvalid([&] { Softmax(dense(p, 2, 3), dense(p + 100, 2, 3), 1.0f, m); },
                {"mask.boolean row stride (2)"});
  m = {};
  m.additive = ConstTensor4::Dense(p + 102, 1, 1, 2, 3);
  ExpectInvalid([&] { Softmax(dense(p, 2, 3), dense(p + 100, 2, 3), 1.0f, m); },
                {"y overlaps mask.additive"});
  m.additive = ConstTensor4::Dense(nullptr, 1, 1, 2, 3);
  Softmax(dense(p, 2, 3), dense(p + 100, 2, 3), 1.0f, m);  // Absent: fine.
  m = {};
  const size_t lengths[2] = {3, 4};
  m.key_lengths = lengths;
  ExpectInvalid(
      [&] {
        Softmax(Tensor4::Dense(p, 2, 1, 2, 3),
                Tensor4::Dense(p + 100, 2, 1, 2, 3), 1.0f, m);
      },
      {"mask.key_lengths[1] (4)", "x.dims[3] (3)"});
  // Empty shapes are valid and write nothing.
  Softmax(dense(nullptr, 0, 3), dense(nullptr, 0, 3));
  p[0] = 5.0f;
  Softmax(dense(p + 10, 2, 0), dense(p, 2, 0));
  EXPECT_EQ(p[0], 5.0f);
}

}  // namespace
}  // namespace simdattn
