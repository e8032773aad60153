// Links the installed library and checks one product against hand-computed
// values; exits non-zero on a mismatch.
#include <cmath>
#include <cstdio>

#include "simdattn/simdattn.h"

int main() {
  // Attention scores of two 3-dim tokens: X X^T.
  const float x[6] = {1, 2, 3, 4, 5, 6};
  float scores[4];
  simdattn::MatMulOptions options;
  options.transpose_b = simdattn::Transpose::kYes;
  simdattn::MatMul(simdattn::ConstMatrix(x, 2, 3), simdattn::ConstMatrix(x, 2, 3),
                   simdattn::Matrix(scores, 2, 2), options);
  const float expected[4] = {14, 32, 32, 77};
  for (int i = 0; i < 4; ++i) {
    if (std::fabs(scores[i] - expected[i]) > 1e-5f) {
      std::fprintf(stderr, "score %d: %f, expected %f\n", i, scores[i], expected[i]);
      return 1;
    }
  }
  std::printf("simdattn %s on %s: consumer OK\n", simdattn::Version(),
              simdattn::ActiveTarget().c_str());
  return 0;
}
