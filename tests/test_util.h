// Shared helpers for the tests: random data, double-precision references and
// norm-based comparisons.
#ifndef SIMDATTN_TESTS_TEST_UTIL_H_
#define SIMDATTN_TESTS_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hwy/tests/hwy_gtest.h"
#include "simdattn/attention.h"
#include "simdattn/tensor.h"
#include "src/ops/matmul_bf16.h"
#include "src/ops/policy.h"
#include "tbb/task_arena.h"

namespace simdattn {
namespace test {

// Parameterised over every compiled target the CPU supports; the test body
// calls the public, dispatched API, which then runs that target's code.
using PerTarget = hwy::TestWithParamTarget;

// Every ElementType, in enumerator order; those of ggml's blocks.
inline std::vector<ElementType> AllElementTypes() {
  std::vector<ElementType> types;
  for (unsigned t = 0; t <= static_cast<unsigned>(kLastElementType); ++t) {
    types.push_back(static_cast<ElementType>(t));
  }
  return types;
}
inline std::vector<ElementType> BlockElementTypes() {
  std::vector<ElementType> types;
  for (const ElementType t : AllElementTypes()) {
    if (ElementTraitsOf(t).values > 1) types.push_back(t);
  }
  return types;
}

// A MultiHeadAttention's config: eval-only (dropout 0) unless set after.
inline MultiHeadAttentionConfig MhaConfig(size_t d_in, size_t d_out,
                                          size_t context_length,
                                          size_t num_heads,
                                          bool qkv_bias = false,
                                          uint64_t seed = 0) {
  MultiHeadAttentionConfig config;
  config.d_in = d_in;
  config.d_out = d_out;
  config.context_length = context_length;
  config.num_heads = num_heads;
  config.qkv_bias = qkv_bias;
  config.seed = seed;
  return config;
}

inline std::vector<float> RandomVector(size_t n, uint64_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Expects max |actual - expected| <= tolerance (attention outputs are convex
// combinations of values: an absolute error).
inline void ExpectNear(const std::vector<float>& actual,
                       const std::vector<double>& expected, double tolerance,
                       const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size());
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::abs(actual[i] - expected[i]));
  }
  EXPECT_LE(worst, tolerance) << what;
}

// Frobenius norm of a matrix view, in double.
template <typename T>
double FrobeniusNorm(MatrixView<T> m) {
  double sum = 0.0;
  for (size_t r = 0; r < m.rows; ++r) {
    for (size_t c = 0; c < m.cols; ++c) sum += double(m(r, c)) * m(r, c);
  }
  return std::sqrt(sum);
}

// Runs f, expecting std::invalid_argument whose message contains every
// fragment; returns the message ("" when nothing was thrown) for further
// checks.
template <typename F>
std::string ExpectInvalid(F&& f, const std::vector<std::string>& fragments) {
  try {
    std::forward<F>(f)();
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "\"" << message << "\" lacks \"" << fragment << "\"";
    }
    return message;
  }
  ADD_FAILURE() << "no exception; expected \"" << fragments[0] << "\"";
  return "";
}
template <typename F>
std::string ExpectInvalid(F&& f, const char* fragment) {
  return ExpectInvalid(std::forward<F>(f), std::vector<std::string>{fragment});
}

// Runs `compute` (which returns its output) in arenas of 1, 2 and 7 threads
// and expects the same bits each time: reductions have a fixed order.
template <typename Compute>
void ExpectSameBitsForAnyThreadCount(const Compute& compute,
                                     const std::string& what = "") {
  std::vector<float> reference;
  for (int threads : {1, 2, 7}) {
    std::vector<float> out;
    tbb::task_arena(threads).execute([&] { out = compute(); });
    if (threads == 1) {
      reference = std::move(out);
      continue;
    }
    ASSERT_EQ(out.size(), reference.size());
    EXPECT_EQ(
        std::memcmp(out.data(), reference.data(), out.size() * sizeof(float)),
        0)
        << what << ": " << threads << " threads";
  }
}

// Whether the suite runs under an emulator that makes the kernels' own
// arithmetic the cost: the aarch64-sve test preset sets
// SIMDATTN_TEST_EMULATED (qemu runs SVE code 15-20x slower than NEON code).
// The few tests whose time is large shapes take smaller ones there, which
// cross the same row, depth, tile and task boundaries.
inline bool Emulated() {
  return std::getenv("SIMDATTN_TEST_EMULATED") != nullptr;
}

// The active policy (policy.h) with `change` applied, while the returned
// override lives: tests force each setting of a knob.
template <class Change>
internal::PolicyOverride ForcePolicy(const Change& change) {
  internal::Policy policy = internal::ActivePolicy();
  change(policy);
  return internal::PolicyOverride(policy);
}

// What a bf16 policy selects for MatMul, with the policy set: its kernel
// and, on a native one, whether kAuto's few-rows fallback applies. Every
// policy that resolves to the fallback runs the same code.
inline int MatMulBFloat16Code(internal::BFloat16DotPolicy policy) {
  const internal::BFloat16DotKernelKind kernel =
      internal::ChosenBFloat16DotKernel();
  if (kernel == internal::BFloat16DotKernelKind::kFallback) return -1;
  return 2 * static_cast<int>(kernel) +
         (policy == internal::BFloat16DotPolicy::kAuto ? 1 : 0);
}

// body(policy) with each bf16 dot-product kernel policy forced in turn (the
// table's again after each, also when the body fails an ASSERT). A policy that
// selects the code of one before it (`code(policy)`, called with the policy
// set, is equal) is skipped: on this CPU and target it would repeat that run.
template <class Body, class Code = int (*)(internal::BFloat16DotPolicy)>
void ForEachBFloat16DotPolicy(
    std::initializer_list<internal::BFloat16DotPolicy> policies,
    const Body& body, const Code& code = MatMulBFloat16Code) {
  std::vector<int> ran;
  for (const internal::BFloat16DotPolicy policy : policies) {
    const auto forced =
        ForcePolicy([&](internal::Policy& p) { p.bf16_dot = policy; });
    const int selected = code(policy);
    if (std::find(ran.begin(), ran.end(), selected) != ran.end()) continue;
    ran.push_back(selected);
    body(policy);
  }
}

}  // namespace test
}  // namespace simdattn

#endif  // SIMDATTN_TESTS_TEST_UTIL_H_
