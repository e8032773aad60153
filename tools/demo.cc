// `simdattn demo`: the seeds' walk through attention on their toy sentence,
// module by module, then MultiHeadAttention at GPT-2-small size.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "simdattn/attention.h"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "tools/commands.h"
#include "tools/measure/shapes.h"

namespace simdattn {
namespace tools {
namespace {

// "Your journey starts with one step": 6 tokens x 3 embedding dims.
constexpr size_t kTokens = 6, kDims = 3;
constexpr float kInputs[kTokens * kDims] = {
    0.43f, 0.15f, 0.89f,  // Your
    0.55f, 0.87f, 0.66f,  // journey
    0.57f, 0.85f, 0.64f,  // starts
    0.22f, 0.58f, 0.33f,  // with
    0.77f, 0.25f, 0.10f,  // one
    0.05f, 0.80f, 0.55f,  // step
};

// PyTorch's initial weights for the seeds' torch.manual_seed calls (from
// tests/data/golden, written by tests/data/make_golden.py), so the demo prints
// the seeds' numbers. SelfAttention_v1, seed 123: torch.rand(3, 2) each.
constexpr float kV1Query[6] = {0.29611194f, 0.51656228f, 0.25167072f,
                               0.68855679f, 0.073972464f, 0.86652195f};
constexpr float kV1Key[6] = {0.13657987f, 0.10247904f, 0.18405646f,
                             0.72644675f, 0.31525391f, 0.68710667f};
constexpr float kV1Value[6] = {0.075635314f, 0.19663817f, 0.31641197f,
                               0.40174013f, 0.1185683f, 0.82739538f};
// SelfAttention_v2, seed 789: nn.Linear(3, 2) weights, (2, 3) each.
constexpr float kV2Query[6] = {0.31605908f, 0.45680857f, 0.51183486f,
                               -0.1682854f, -0.33787704f, -0.091773868f};
constexpr float kV2Key[6] = {0.40580583f, -0.47042054f, 0.2368052f,
                             0.21336074f, -0.26005065f, -0.51054299f};
constexpr float kV2Value[6] = {0.25256988f, -0.14147827f, -0.19618134f,
                               0.5191074f, -0.085167579f, -0.20432705f};
// CausalAttention and MultiHeadAttention, seed 123 (the same Q/K/V draws).
constexpr float kCausalQuery[6] = {-0.23542964f, 0.019124476f, -0.28674594f,
                                   0.21772662f, -0.49193421f, 0.42322308f};
constexpr float kCausalKey[6] = {-0.41964141f, -0.45901766f, -0.36482018f,
                                 0.26147819f, -0.21332639f, 0.21605217f};
constexpr float kCausalValue[6] = {-0.49001414f, -0.35029206f, -0.21198919f,
                                   -0.11346072f, -0.44043937f, 0.37804362f};
// MultiHeadAttentionWrapper, seed 123: head 0 draws the weights above first,
// then head 1 these.
constexpr float kHead1Query[6] = {-0.13615717f, 0.18532233f, 0.40826949f,
                                  0.10756382f, 0.15787685f, 0.55729234f};
constexpr float kHead1Key[6] = {-0.2603904f, 0.18287641f, -0.25687245f,
                                0.41260317f, 0.46110451f, -0.53230095f};
constexpr float kHead1Value[6] = {0.49285263f, 0.27569306f, 0.25159022f,
                                  0.23768058f, 0.47995073f, -0.076233067f};
// MultiHeadAttention's out_proj, seed 123 (drawn after Q, K and V).
constexpr float kOutProjWeight[4] = {-0.16675779f, 0.22697258f, 0.50002599f,
                                     0.13173823f};
constexpr float kOutProjBias[2] = {0.19335887f, 0.68254095f};

void PrintMatrix(const char* title, ConstMatrix m) {
  std::printf("%s\n", title);
  for (size_t r = 0; r < m.rows; ++r) {
    std::printf("  [");
    for (size_t c = 0; c < m.cols; ++c) {
      std::printf("%s%7.4f", c ? ", " : "", m(r, c));
    }
    std::printf("]\n");
  }
}

// Runs `module` on the toy input (batched twice if `batch` is 2) and prints
// the attention weights of the first sequence and every context vector.
void Show(const char* title, const AttentionModule& module, size_t batch) {
  std::vector<float> x;
  for (size_t b = 0; b < batch; ++b) x.insert(x.end(), kInputs, kInputs + 18);
  const size_t heads = module.config().num_heads;
  const size_t d_out = module.config().d_out();
  std::vector<float> y(batch * kTokens * d_out);
  std::vector<float> weights(batch * heads * kTokens * kTokens);
  ForwardOptions options;
  options.attention_weights =
      Tensor4::Dense(weights.data(), batch, heads, kTokens, kTokens);
  module.Forward(ConstTensor3(x.data(), batch, kTokens, kDims),
                 Tensor3(y.data(), batch, kTokens, d_out), options);
  std::printf("\n== %s\n", title);
  PrintMatrix("Attention weights (first sequence, first head):",
              ConstMatrix(weights.data(), kTokens, kTokens));
  PrintMatrix(batch > 1 ? "Context vectors (both sequences):"
                        : "Context vectors:",
              ConstMatrix(y.data(), batch * kTokens, d_out));
}

StateDict Linear(const float* q, const float* k, const float* v,
                 const std::string& prefix = "") {
  return {{prefix + "W_query.weight", {q, {2, 3}}},
          {prefix + "W_key.weight", {k, {2, 3}}},
          {prefix + "W_value.weight", {v, {2, 3}}}};
}

// A few forwards of MultiHeadAttention at GPT-2-small size, with a progress
// line on a terminal.
void Benchmark() {
  const size_t tokens = 1024, d_model = 768, heads = 12;
  constexpr int kRuns = 5;
  std::printf(
      "\n== MultiHeadAttention, GPT-2 small: 1 x %zu tokens, d = %zu, %zu "
      "heads, causal, eval\n",
      tokens, d_model, heads);
  MultiHeadAttentionConfig config;
  config.d_in = config.d_out = d_model;
  config.context_length = tokens;
  config.num_heads = heads;
  config.seed = 1;
  MultiHeadAttention mha(config);
  std::vector<float> x(tokens * d_model, 0.5f), y(tokens * d_model);
  const ConstTensor3 xv(x.data(), 1, tokens, d_model);
  const Tensor3 yv(y.data(), 1, tokens, d_model);
  mha.Forward(xv, yv);  // Warm-up: first-touch of scratch memory.
  const bool terminal = isatty(STDOUT_FILENO);
  double best = 1e30;
  for (int run = 0; run < kRuns; ++run) {
    if (terminal) std::printf("\r  run %d/%d ...", run + 1, kRuns), std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    mha.Forward(xv, yv);
    const std::chrono::duration<double, std::milli> ms =
        std::chrono::steady_clock::now() - start;
    best = std::min(best, ms.count());
  }
  if (terminal) std::printf("\r%40s\r", "");
  // Counted as `simdattn bench --op mha` counts: the useful FLOPs.
  const double flops =
      measure::MhaShape{1, tokens, d_model, d_model, heads}.Flops();
  std::printf("  best of %d: %.2f ms, %.1f GFLOP/s (useful FLOPs) on %s\n",
              kRuns, best, flops / best * 1e-6, ActiveTarget().c_str());
}

}  // namespace

void Demo(const DemoOptions& options) {
  std::printf("simdattn %s demo, dispatching to %s\n\n", Version(),
              ActiveTarget().c_str());
  PrintMatrix("Inputs (\"Your journey starts with one step\"):",
              ConstMatrix(kInputs, kTokens, kDims));

  // 1. Dot products of every token with every token, then softmax.
  std::vector<float> scores(kTokens * kTokens);
  MatMulOptions transposed;
  transposed.transpose_b = Transpose::kYes;
  const ConstMatrix x(kInputs, kTokens, kDims);
  MatMul(x, x, Matrix(scores.data(), kTokens, kTokens), transposed);
  std::printf("\n== 1. Simplified self-attention\n");
  PrintMatrix("Attention scores = inputs @ inputs.T:",
              ConstMatrix(scores.data(), kTokens, kTokens));
  Show("1. Simplified self-attention: softmax(scores) @ inputs",
       SimplifiedSelfAttention(kDims), 1);

  SelfAttentionV1 v1(kDims, 2);
  v1.LoadStateDict({{"W_query", {kV1Query, {3, 2}}},
                    {"W_key", {kV1Key, {3, 2}}},
                    {"W_value", {kV1Value, {3, 2}}}});
  Show("2. SelfAttention_v1 (torch.manual_seed(123))", v1, 1);

  SelfAttentionV2 v2(kDims, 2);
  v2.LoadStateDict(Linear(kV2Query, kV2Key, kV2Value));
  Show("3. SelfAttention_v2 (torch.manual_seed(789))", v2, 1);

  // The mask buffer of the state_dict: triu(ones(6, 6), diagonal=1).
  std::vector<float> mask(kTokens * kTokens);
  for (size_t i = 0; i < kTokens; ++i) {
    for (size_t j = i + 1; j < kTokens; ++j) mask[i * kTokens + j] = 1.0f;
  }
  StateDict causal_state = Linear(kCausalQuery, kCausalKey, kCausalValue);
  causal_state["mask"] = {mask.data(), {kTokens, kTokens}};
  CausalAttention causal(kDims, 2, kTokens, 0.0f);
  causal.LoadStateDict(causal_state);
  Show("4. CausalAttention on a batch of two (torch.manual_seed(123))", causal,
       2);

  StateDict wrapper_state =
      Linear(kCausalQuery, kCausalKey, kCausalValue, "heads.0.");
  const StateDict head1 = Linear(kHead1Query, kHead1Key, kHead1Value, "heads.1.");
  wrapper_state.insert(head1.begin(), head1.end());
  wrapper_state["heads.0.mask"] = wrapper_state["heads.1.mask"] =
      causal_state["mask"];
  MultiHeadAttentionWrapper wrapper(kDims, 2, kTokens, 0.0f, 2);
  wrapper.LoadStateDict(wrapper_state);
  Show("5. MultiHeadAttentionWrapper, 2 heads of d_out 2 (seed 123)", wrapper,
       2);

  StateDict mha_state = causal_state;
  mha_state["out_proj.weight"] = {kOutProjWeight, {2, 2}};
  mha_state["out_proj.bias"] = {kOutProjBias, {2}};
  MultiHeadAttention mha(kDims, 2, kTokens, 0.0f, 2);
  mha.LoadStateDict(mha_state);
  Show("6. MultiHeadAttention, 2 heads, d_out 2 (torch.manual_seed(123))", mha,
       2);

  if (!options.skip_benchmark) Benchmark();
}

}  // namespace tools
}  // namespace simdattn
