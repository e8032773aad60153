// `simdattn demo`: the seeds' walk through attention on their toy sentence.
#include <cstdio>
#include <vector>

#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "tools/commands.h"

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

}  // namespace

void Demo(const DemoOptions& /*options*/) {
  std::printf("simdattn %s demo, dispatching to %s\n\n", Version(),
              ActiveTarget().c_str());
  const ConstMatrix x(kInputs, kTokens, kDims);
  PrintMatrix("Inputs (\"Your journey starts with one step\"):", x);

  // 1. Simplified self-attention scores: every token against every token.
  std::vector<float> scores(kTokens * kTokens);
  MatMulOptions opt;
  opt.transpose_b = Transpose::kYes;
  MatMul(x, x, Matrix(scores.data(), kTokens, kTokens), opt);
  PrintMatrix("\nAttention scores = inputs @ inputs.T:",
              ConstMatrix(scores.data(), kTokens, kTokens));
}

}  // namespace tools
}  // namespace simdattn
