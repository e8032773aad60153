// An engine's view of simdattn: a MultiHeadAttention built from a PyTorch
// state_dict's tensors (here: small hand-written ones) and one forward pass,
// plus a raw MatMul. Exits non-zero on a wrong result.
#include <cmath>
#include <cstdio>
#include <vector>

#include "simdattn/simdattn.h"

int main() {
  // MatMul: attention scores X X^T of two 3-dim tokens.
  const float x[6] = {1, 2, 3, 4, 5, 6};
  float scores[4];
  simdattn::MatMulOptions transposed;
  transposed.transpose_b = simdattn::Transpose::kYes;
  simdattn::MatMul(simdattn::ConstMatrix(x, 2, 3), simdattn::ConstMatrix(x, 2, 3),
                   simdattn::Matrix(scores, 2, 2), transposed);
  const float expected[4] = {14, 32, 32, 77};
  for (int i = 0; i < 4; ++i) {
    if (std::fabs(scores[i] - expected[i]) > 1e-5f) {
      std::fprintf(stderr, "score %d: %f, expected %f\n", i, scores[i],
                   expected[i]);
      return 1;
    }
  }

  // MultiHeadAttention(d_in=3, d_out=4, context_length=8, dropout=0.0,
  // num_heads=2) from a state_dict in PyTorch's layout: nn.Linear weights are
  // (out_features, in_features). Identity-like projections and a zero out_proj
  // bias make the result easy to check: the first token attends only to
  // itself (causal), so its output is out_proj(V[0]).
  const std::vector<float> w_qkv = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};  // 4x3
  std::vector<float> w_out(16, 0.0f), b_out(4, 0.0f);
  for (int i = 0; i < 4; ++i) w_out[i * 4 + i] = 2.0f;  // out_proj = 2 * I.
  simdattn::MultiHeadAttention mha(/*d_in=*/3, /*d_out=*/4,
                                   /*context_length=*/8, /*dropout=*/0.0f,
                                   /*num_heads=*/2);
  mha.LoadStateDict({{"W_query.weight", {w_qkv.data(), {4, 3}}},
                     {"W_key.weight", {w_qkv.data(), {4, 3}}},
                     {"W_value.weight", {w_qkv.data(), {4, 3}}},
                     {"out_proj.weight", {w_out.data(), {4, 4}}},
                     {"out_proj.bias", {b_out.data(), {4}}}});
  float y[2 * 4];
  mha.Forward(simdattn::ConstTensor3(x, /*batch=*/1, /*tokens=*/2, /*d_in=*/3),
              simdattn::Tensor3(y, 1, 2, 4));
  const float first[4] = {2 * 1, 2 * 2, 2 * 3, 2 * 6};  // 2 * (x0, sum(x0)).
  for (int i = 0; i < 4; ++i) {
    if (std::fabs(y[i] - first[i]) > 1e-5f) {
      std::fprintf(stderr, "mha y[%d]: %f, expected %f\n", i, y[i], first[i]);
      return 1;
    }
  }
  std::printf("simdattn %s on %s: consumer OK\n", simdattn::Version(),
              simdattn::ActiveTarget().c_str());
  return 0;
}
