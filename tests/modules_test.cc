// The seed modules against PyTorch running the seeds' own code
// (tests/data/make_golden.py), on every SIMD target; plus dropout behaviour
// and argument errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "simdattn/attention.h"
#include "simdattn/targets.h"
#include "src/common/aligned_vector.h"
#include "tests/test_util.h"
#include "tools/io/module_spec.h"
#include "tools/io/npy.h"
#include "tools/io/safetensors.h"

namespace simdattn {
namespace {

using test::ExpectInvalid;

const std::string kGolden = std::string(SIMDATTN_TEST_DATA_DIR) + "/golden/";

nlohmann::json Cases() {
  std::ifstream in(kGolden + "cases.json");
  return nlohmann::json::parse(in)["cases"];
}

size_t Arg(const nlohmann::json& args, const char* name) {
  return args[name].is_null() ? 0 : args[name].get<size_t>();
}

io::ModuleSpec SpecOf(const nlohmann::json& c) {
  const nlohmann::json& args = c["args"];
  io::ModuleSpec spec;
  spec.module = c["module"];
  spec.d_in = c["input_shape"].back();
  spec.d_out = Arg(args, "d_out");
  spec.context_length = Arg(args, "context_length");
  spec.num_heads = std::max<size_t>(1, Arg(args, "num_heads"));
  spec.qkv_bias = !args["qkv_bias"].is_null() && args["qkv_bias"].get<bool>();
  return spec;
}

// max |a - b| <= tolerance * max(1, max |b|): relative to the output's scale.
void ExpectClose(const std::vector<float>& actual,
                 const std::vector<float>& expected, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = 1.0, worst = 0.0;
  for (float e : expected) scale = std::max(scale, std::abs(double(e)));
  for (size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::abs(double(actual[i]) - expected[i]));
  }
  EXPECT_LE(worst, tolerance * scale) << what;
}

// Outputs match PyTorch to 1e-5 of their scale. Attention weights (in [0, 1])
// to 1e-4: with SelfAttention_v1's torch.rand weights at d_in = 768 the
// logits reach ~1e5, where two float32 summation orders (ours, PyTorch's
// BLAS) already differ by ~1e-2 in a logit; we measured 3.0e-5 there and
// <= 1e-6 on every other case.
constexpr double kOutputTolerance = 1e-5;
constexpr double kWeightsTolerance = 1e-4;

class ModulesTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(ModulesTest);

TEST_P(ModulesTest, MatchPyTorchOnGoldenCases) {
  const nlohmann::json cases = Cases();
  ASSERT_GE(cases.size(), 20u);
  for (const nlohmann::json& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    AttentionModule module = io::MakeModule(SpecOf(c));
    const io::SafeTensors weights = io::SafeTensors::Load(
        kGolden + c["files"]["state_dict"].get<std::string>());
    module.LoadStateDict(io::StateDictOf(weights));
    const io::NpyArray x =
        io::ReadNpy(kGolden + c["files"]["input"].get<std::string>());
    const io::NpyArray expected =
        io::ReadNpy(kGolden + c["files"]["output"].get<std::string>());
    const io::NpyArray expected_weights =
        io::ReadNpy(kGolden + c["files"]["attn_weights"].get<std::string>());

    const bool batched = x.shape.size() == 3;
    const size_t batch = batched ? x.shape[0] : 1;
    const size_t tokens = x.shape[x.shape.size() - 2];
    const size_t d_in = x.shape.back();
    const size_t d_out = expected.shape.back();
    const size_t heads = expected_weights.shape[1];
    std::vector<float> y(batch * tokens * d_out, -1.0f);
    std::vector<float> attention(batch * heads * tokens * tokens, -1.0f);
    ForwardOptions options;
    options.attention_weights =
        Tensor4::Dense(attention.data(), batch, heads, tokens, tokens);
    module.Forward(ConstTensor3(x.data.data(), batch, tokens, d_in),
                   Tensor3(y.data(), batch, tokens, d_out), options);
    ExpectClose(y, expected.data, kOutputTolerance, name + " output");
    ExpectClose(attention, expected_weights.data, kWeightsTolerance,
                name + " attention weights");
  }
}

// bf16 arithmetic against the seed module run by PyTorch on operands
// rounded as simdattn rounds them (tests/data/make_bf16_golden.py, float64).
// What remains is float32 accumulation (~1e-7 here) and, rarely, a value
// computed in float32 next to a bf16 rounding boundary that rounds the
// other way: a weight P moves its context element by 2^-9 of its share, a
// context element its out_proj sums by 2^-9 of it times a weight (up to
// ~1e-3 of the output's scale). So: at most 1% of the outputs beyond 1e-5
// of the scale and none beyond 2e-3. float32 arithmetic is beyond 1e-5
// almost everywhere.
TEST_P(ModulesTest, BFloat16ArithmeticMatchesPyTorchOnRoundedOperands) {
  const std::string dir = std::string(SIMDATTN_TEST_DATA_DIR) + "/bf16/";
  std::ifstream in(dir + "cases.json");
  const nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  ASSERT_EQ(cases.size(), 2u);
  for (const nlohmann::json& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const io::SafeTensors weights =
        io::SafeTensors::Load(dir + name + ".safetensors");
    const io::NpyArray x = io::ReadNpy(dir + name + ".input.npy");
    const io::NpyArray expected = io::ReadNpy(dir + name + ".output.npy");
    io::ModuleSpec spec;
    spec.module = "mha";
    spec.d_in = x.shape.back();
    spec.num_heads = c["num_heads"];
    spec = io::CompleteSpec(spec, weights);
    AttentionModule module = io::MakeModule(spec);
    module.LoadStateDict(io::StateDictOf(weights));
    const size_t batch = x.shape[0], tokens = x.shape[1];
    const size_t d_out = expected.shape.back();
    std::vector<float> y(batch * tokens * d_out, -1.0f), y32 = y;
    ForwardOptions options;
    options.compute = ComputeType::kBFloat16;
    const ConstTensor3 x_view(x.data.data(), batch, tokens, spec.d_in);
    module.Forward(x_view, Tensor3(y.data(), batch, tokens, d_out), options);
    ExpectClose(y, expected.data, 2e-3, name + " bf16");
    module.Forward(x_view, Tensor3(y32.data(), batch, tokens, d_out));
    const double scale = std::max(1.0, c["max_abs_output"].get<double>());
    const auto beyond = [&](const std::vector<float>& actual) {
      size_t count = 0;
      for (size_t i = 0; i < actual.size(); ++i) {
        count += std::abs(double(actual[i]) - expected.data[i]) > 1e-5 * scale;
      }
      return double(count) / double(actual.size());
    };
    EXPECT_LE(beyond(y), 0.01);
    EXPECT_GE(beyond(y32), 0.5);
  }
}

// The seeds print SelfAttention_v1(torch.manual_seed(123)) on the toy input:
// tensor([[0.2996, 0.8053], [0.3061, 0.8210], ...]); the golden case holds
// those weights.
TEST(ModulesSeeds, SelfAttentionV1PrintsTheSeedsNumbers) {
  const io::SafeTensors weights =
      io::SafeTensors::Load(kGolden + "self_attention_v1_toy.safetensors");
  const io::NpyArray x =
      io::ReadNpy(kGolden + "self_attention_v1_toy.input.npy");
  SelfAttentionV1 module(3, 2);
  module.LoadStateDict(io::StateDictOf(weights));
  std::vector<float> y(12);
  module.Forward(ConstMatrix(x.data.data(), 6, 3), Matrix(y.data(), 6, 2));
  const float printed[12] = {0.2996f, 0.8053f, 0.3061f, 0.8210f,
                             0.3058f, 0.8203f, 0.2948f, 0.7939f,
                             0.2927f, 0.7891f, 0.2990f, 0.8040f};
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(y[i], printed[i], 5e-5) << i;
}

TEST(ModulesDropout, TrainingDropsEvalKeeps) {
  const size_t batch = 2, tokens = 64, d_in = 16, d_out = 32, heads = 4;
  const float p = 0.5f;
  MultiHeadAttentionConfig config =
      test::MhaConfig(d_in, d_out, tokens, heads, false, /*seed=*/7);
  config.dropout = p;
  MultiHeadAttention mha(config);
  const std::vector<float> x = test::RandomVector(batch * tokens * d_in, 3);
  std::vector<float> eval(batch * heads * tokens * tokens);
  std::vector<float> train(eval.size()), train_again(eval.size());
  std::vector<float> y(batch * tokens * d_out);
  const ConstTensor3 xv(x.data(), batch, tokens, d_in);
  const Tensor3 yv(y.data(), batch, tokens, d_out);
  ForwardOptions options;
  options.attention_weights =
      Tensor4::Dense(eval.data(), batch, heads, tokens, tokens);
  mha.Forward(xv, yv, options);
  options.training = true;
  options.dropout_key = {42, 0};
  options.attention_weights.data = train.data();
  mha.Forward(xv, yv, options);
  options.attention_weights.data = train_again.data();
  mha.Forward(xv, yv, options);
  EXPECT_EQ(train, train_again) << "same seed and offset, same mask";

  size_t kept = 0, nonzero = 0;
  for (size_t i = 0; i < eval.size(); ++i) {
    if (eval[i] == 0.0f) continue;  // Causally masked.
    ++nonzero;
    if (train[i] != 0.0f) {
      ++kept;
      EXPECT_FLOAT_EQ(train[i], eval[i] / (1.0f - p));
    }
  }
  const double fraction = double(kept) / nonzero;
  const double sigma = std::sqrt(p * (1 - p) / nonzero);
  EXPECT_NEAR(fraction, 1.0 - p, 4 * sigma);

  options.dropout_key.offset = 1;  // The next step draws another mask.
  mha.Forward(xv, yv, options);
  EXPECT_NE(train_again, train);
}

TEST(ModulesErrors, NameTheArgumentAndValues) {
  ExpectInvalid(
      [] { MultiHeadAttention(4, 10, 8, 0.0f, 3); },
      "MultiHeadAttention: d_out (10) is not divisible by num_heads (3)");
  ExpectInvalid([] { CausalAttention(4, 4, 8, 1.5f); }, "dropout (1.5)");
  CausalAttention causal(3, 2, 4, 0.0f);
  std::vector<float> x(5 * 3), y(5 * 2);
  ExpectInvalid(
      [&] {
        causal.Forward(ConstTensor3(x.data(), 1, 5, 3),
                       Tensor3(y.data(), 1, 5, 2));
      },
      "CausalAttention: num_tokens (5) exceeds context_length (4)");
  ExpectInvalid(
      [&] {
        causal.Forward(ConstTensor3(x.data(), 1, 4, 3),
                       Tensor3(y.data(), 1, 4, 3));
      },
      "y is (1, 4, 3), expected (1, 4, 2)");
  ExpectInvalid(
      [&] {
        causal.Forward(ConstTensor3(x.data(), 1, 2, 3),
                       Tensor3(x.data(), 1, 2, 2));
      },
      "y overlaps x");

  StateDict sd;
  ExpectInvalid([&] { causal.LoadStateDict(sd); },
                "missing tensor 'W_query.weight'");
  std::vector<float> w(6);
  std::vector<float> mask = {0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0};
  sd = {{"W_query.weight", {w.data(), {2, 3}}},
        {"W_key.weight", {w.data(), {2, 3}}},
        {"W_value.weight", {w.data(), {3, 2}}},
        {"mask", {mask.data(), {4, 4}}}};
  ExpectInvalid([&] { causal.LoadStateDict(sd); },
                "tensor 'W_value.weight' has shape [3, 2], expected [2, 3]");
  sd["W_value.weight"].shape = {2, 3};
  sd["extra"] = {w.data(), {1}};
  ExpectInvalid([&] { causal.LoadStateDict(sd); }, "unexpected tensor 'extra'");
  sd.erase("extra");
  causal.LoadStateDict(sd);
  mask[1] = 0.0f;
  ExpectInvalid([&] { causal.LoadStateDict(sd); }, "is not the causal mask");
}

// context_length 0 (AttentionConfig's "unbounded") is accepted: any number of
// tokens, no "mask" buffer, and the outputs of a bounded module with the same
// weights.
TEST(ModulesConfig, ContextLengthZeroIsUnbounded) {
  const size_t tokens = 70, d = 16, heads = 4;
  MultiHeadAttention unbounded(test::MhaConfig(d, d, 0, heads, true, 3));
  const MultiHeadAttention bounded(
      test::MhaConfig(d, d, tokens, heads, true, 3));
  EXPECT_EQ(unbounded.StateDictShapes().count("mask"), 0u);
  EXPECT_EQ(bounded.StateDictShapes().count("mask"), 1u);
  EXPECT_EQ(CausalAttention(d, d, 0, 0.0f).StateDictShapes().count("mask"), 0u);
  const std::vector<float> x = test::RandomVector(tokens * d, 4);
  std::vector<float> y0(tokens * d), y1(tokens * d);
  unbounded.Forward(ConstMatrix(x.data(), tokens, d),
                    Matrix(y0.data(), tokens, d));
  bounded.Forward(ConstMatrix(x.data(), tokens, d),
                  Matrix(y1.data(), tokens, d));
  EXPECT_EQ(y0, y1);
  // The seed's positional constructor builds the same module as its config.
  MultiHeadAttention positional(d, d, tokens, 0.0f, heads, true);
  positional.InitializeWeights(3);
  positional.Forward(ConstMatrix(x.data(), tokens, d),
                     Matrix(y0.data(), tokens, d));
  EXPECT_EQ(y0, y1);
}

// A module packs its projections for the active target on first use: after
// a change of target its forwards are those of a module that never ran on
// the old one, in both arithmetics.
TEST(ModulesConfig, PackedWeightsFollowTheActiveTarget) {
  const std::vector<std::string> targets = SupportedTargets();
  if (targets.size() < 2) GTEST_SKIP() << "one target only";
  const size_t tokens = 20, d = 32;
  const std::vector<float> x = test::RandomVector(tokens * d, 5);
  std::vector<float> y0(tokens * d), y1(tokens * d);
  MultiHeadAttention used(test::MhaConfig(d, d, tokens, 4, true, 9));
  ForwardOptions bf16;
  bf16.compute = ComputeType::kBFloat16;
  for (const ForwardOptions& options : {ForwardOptions(), bf16}) {
    used.Forward(ConstMatrix(x.data(), tokens, d), Matrix(y0.data(), tokens, d),
                 options);
  }
  const std::string other =
      targets[0] == ActiveTarget() ? targets[1] : targets[0];
  UseTarget(other);
  struct Restore {
    ~Restore() { UseTarget(""); }
  } restore;
  const MultiHeadAttention fresh(test::MhaConfig(d, d, tokens, 4, true, 9));
  for (const ForwardOptions& options : {ForwardOptions(), bf16}) {
    used.Forward(ConstMatrix(x.data(), tokens, d), Matrix(y0.data(), tokens, d),
                 options);
    fresh.Forward(ConstMatrix(x.data(), tokens, d),
                  Matrix(y1.data(), tokens, d), options);
    EXPECT_EQ(y0, y1) << other << " compute "
                      << static_cast<int>(options.compute);
  }
}

// Module weights live in AlignedVector: every size, and after growing, starts
// on a cache line (large std::vector blocks start 16 bytes past one).
TEST(AlignedVector, StartsOnACacheLine) {
  for (const size_t size :
       {size_t{1}, size_t{3}, size_t{1000}, size_t{1} << 20}) {
    internal::AlignedVector<float> floats(size);
    internal::AlignedVector<BFloat16> halves(size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(floats.data()) % 64, 0u) << size;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(halves.data()) % 64, 0u) << size;
    floats.resize(3 * size + 1);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(floats.data()) % 64, 0u) << size;
  }
}

}  // namespace
}  // namespace simdattn
