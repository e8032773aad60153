// ApplyRope on every SIMD target: against PyTorch's RoPE (tests/data/rope,
// make_rope_golden.py: both pairings, partial rotary, positions per
// sequence), against a float64 rotation over shapes around the vector
// lengths and strided views, and argument errors.
#include <cmath>
#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "simdattn/kernels.h"
#include "tests/test_util.h"
#include "tools/io/npy.h"

namespace simdattn {
namespace {

using test::ExpectInvalid;

const std::string kRope = std::string(SIMDATTN_TEST_DATA_DIR) + "/rope/";

// The bound of kernels.h: cos and sin rounded once to float, then a fused
// rotation, within 4 u of |x1| + |x2| (with margin); PyTorch's reference is
// float64 rounded to float32 (another half ulp of the output).
constexpr double kUlps = 4.0 * 0x1p-24;

class RopeTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(RopeTest);

TEST_P(RopeTest, MatchesPyTorch) {
  std::ifstream in(kRope + "cases.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_GE(doc["cases"].size(), 7u);
  for (const nlohmann::json& c : doc["cases"]) {
    const std::string name = c["name"];
    const std::vector<size_t> shape = c["shape"];
    const std::vector<size_t> positions = c["positions"];
    io::NpyArray x = io::ReadNpy(kRope + name + ".x.npy");
    const io::NpyArray want = io::ReadNpy(kRope + name + ".out.npy");
    ASSERT_EQ(x.shape, shape) << name;
    RopeOptions options;
    options.pairing =
        c["interleaved"] ? RopePairing::kInterleaved : RopePairing::kHalfSplit;
    options.theta = c["theta"];
    options.rotary_dim = c["rotary_dim"];
    options.positions = positions.data();
    const std::vector<float> before = x.data;
    ApplyRope(
        Tensor4::Dense(x.data.data(), shape[0], shape[1], shape[2], shape[3]),
        options);
    // Each pair's |x1| + |x2| bounds its error; the row's largest is used.
    for (size_t row = 0; row < x.data.size() / shape[3]; ++row) {
      double magnitude = 0.0;
      for (size_t j = 0; j < shape[3]; ++j) {
        magnitude =
            std::max(magnitude, double(std::abs(before[row * shape[3] + j])));
      }
      for (size_t j = 0; j < shape[3]; ++j) {
        const size_t e = row * shape[3] + j;
        if (j >= options.rotary_dim) {
          ASSERT_EQ(x.data[e], before[e]) << name << " passes dim " << j;
        } else {
          ASSERT_NEAR(x.data[e], want.data[e], 2 * magnitude * kUlps + 1e-30)
              << name << " row " << row << " dim " << j;
        }
      }
    }
  }
}

// The rotation in double of one token row (pairs of `half` or interleaved).
std::vector<double> Rotated(const std::vector<float>& row, size_t rot,
                            bool interleaved, double position, double theta) {
  std::vector<double> out(row.begin(), row.end());
  for (size_t i = 0; i < rot / 2; ++i) {
    const double angle =
        position * std::pow(theta, -2.0 * double(i) / double(rot));
    const size_t p1 = interleaved ? 2 * i : i;
    const size_t p2 = interleaved ? 2 * i + 1 : i + rot / 2;
    out[p1] = row[p1] * std::cos(angle) - row[p2] * std::sin(angle);
    out[p2] = row[p2] * std::cos(angle) + row[p1] * std::sin(angle);
  }
  return out;
}

// Head dims and rotary dims around the vector lengths, in a padded
// token-major buffer (tokens of every head interleaved); the padding and the
// dims past rotary_dim are untouched.
TEST_P(RopeTest, MatchesFloat64AroundTheVectors) {
  for (const bool interleaved : {false, true}) {
    for (size_t head_dim : {2, 6, 16, 34, 70, 128}) {
      for (size_t rot : {head_dim, head_dim / 2 / 2 * 2}) {
        if (rot == 0) continue;
        const size_t batch = 2, heads = 3, tokens = 5, pad = 3;
        const size_t token_stride = heads * head_dim + pad;
        std::vector<float> buffer =
            test::RandomVector(batch * tokens * token_stride, head_dim + rot);
        const std::vector<float> before = buffer;
        const std::vector<size_t> positions = {9, 70000};
        RopeOptions options;
        options.pairing =
            interleaved ? RopePairing::kInterleaved : RopePairing::kHalfSplit;
        options.rotary_dim = rot;
        options.theta = 500.0f;
        options.positions = positions.data();
        ApplyRope(Tensor4(buffer.data(), batch, heads, tokens, head_dim,
                          tokens * token_stride, head_dim, token_stride),
                  options);
        for (size_t b = 0; b < batch; ++b) {
          for (size_t t = 0; t < tokens; ++t) {
            for (size_t h = 0; h < heads; ++h) {
              const size_t at = (b * tokens + t) * token_stride + h * head_dim;
              const std::vector<float> row(before.begin() + at,
                                           before.begin() + at + head_dim);
              const std::vector<double> want = Rotated(
                  row, rot, interleaved, double(positions[b] + t), 500.0);
              for (size_t j = 0; j < head_dim; ++j) {
                const size_t p =
                    interleaved ? j ^ 1
                                : (j < rot / 2 ? j + rot / 2 : j - rot / 2);
                const double magnitude =
                    j < rot ? std::abs(row[j]) + std::abs(row[p]) : 0.0;
                ASSERT_NEAR(buffer[at + j], want[j], magnitude * kUlps)
                    << "head_dim " << head_dim << " rot " << rot
                    << (interleaved ? " interleaved" : " half split")
                    << " (b, t, h, j) = " << b << t << h << j;
              }
            }
            for (size_t j = heads * head_dim; j < token_stride; ++j) {
              const size_t at = (b * tokens + t) * token_stride + j;
              ASSERT_EQ(buffer[at], before[at]) << "padding";
            }
          }
        }
      }
    }
  }
}

// rotary_offset: the dims from it turn as a tensor of just those dims
// would; the others stay as they are.
TEST_P(RopeTest, OffsetRotatesASubRange) {
  constexpr size_t kDim = 14, kOffset = 4, kRotary = 6, kTokens = 5;
  std::vector<float> x = test::RandomVector(2 * 3 * kTokens * kDim, 8);
  std::vector<float> part(2 * 3 * kTokens * kRotary);
  for (size_t row = 0; row < 2 * 3 * kTokens; ++row) {
    std::copy_n(x.begin() + row * kDim + kOffset, kRotary,
                part.begin() + row * kRotary);
  }
  const std::vector<float> before = x;
  const size_t positions[2] = {3, 70};
  for (RopePairing pairing :
       {RopePairing::kHalfSplit, RopePairing::kInterleaved}) {
    x = before;
    RopeOptions options;
    options.pairing = pairing;
    options.positions = positions;
    options.rotary_offset = kOffset;
    options.rotary_dim = kRotary;
    ApplyRope(Tensor4::Dense(x.data(), 2, 3, kTokens, kDim), options);
    std::vector<float> expected = part;
    options.rotary_offset = 0;
    ApplyRope(Tensor4::Dense(expected.data(), 2, 3, kTokens, kRotary), options);
    for (size_t row = 0; row < 2 * 3 * kTokens; ++row) {
      for (size_t c = 0; c < kDim; ++c) {
        const float want = c >= kOffset && c < kOffset + kRotary
                               ? expected[row * kRotary + c - kOffset]
                               : before[row * kDim + c];
        ASSERT_EQ(x[row * kDim + c], want) << "row " << row << " dim " << c;
      }
    }
  }
  // rotary_dim 0: every dim from the offset on.
  x = before;
  RopeOptions rest;
  rest.rotary_offset = kDim - kRotary;
  ApplyRope(Tensor4::Dense(x.data(), 2, 3, kTokens, kDim), rest);
  for (size_t c = 0; c < kDim - kRotary; ++c) EXPECT_EQ(x[c], before[c]);
  EXPECT_NE(x[2 * kDim - 1], before[2 * kDim - 1]);  // Token 1 turns.
}

TEST(RopeErrors, NameTheArgument) {
  std::vector<float> x(2 * 8);
  const Tensor4 view = Tensor4::Dense(x.data(), 1, 1, 2, 8);
  RopeOptions odd;
  odd.rotary_dim = 5;
  ExpectInvalid([&] { ApplyRope(view, odd); }, {"options.rotary_dim (5)"});
  RopeOptions wide;
  wide.rotary_dim = 10;
  ExpectInvalid([&] { ApplyRope(view, wide); }, {"head_dim (8)"});
  RopeOptions past;
  past.rotary_offset = 4;
  past.rotary_dim = 6;
  ExpectInvalid([&] { ApplyRope(view, past); },
                {"options.rotary_offset (4)", "head_dim (8)"});
  RopeOptions odd_rest;
  odd_rest.rotary_offset = 3;
  ExpectInvalid([&] { ApplyRope(view, odd_rest); }, {"it rotates 5 dims"});
  RopeOptions theta;
  theta.theta = -1.0f;
  ExpectInvalid([&] { ApplyRope(view, theta); }, {"options.theta (-1)"});
  RopeOptions overlapping;
  overlapping.positions = reinterpret_cast<const size_t*>(x.data());
  ExpectInvalid([&] { ApplyRope(view, overlapping); },
                {"x overlaps options.positions"});
}

}  // namespace
}  // namespace simdattn
