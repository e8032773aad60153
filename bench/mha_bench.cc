// MultiHeadAttention forward (causal, eval) at GPT-2-like shapes, beside the
// same module's matrix products timed alone: the module is matmul-bound when
// the two are close (softmax, masking and glue cost the difference).
//
//   mha_bench --benchmark_filter='/threads:1'
#include <cmath>
#include <cstddef>
#include <vector>

#include "benchmark/benchmark.h"
#include "simdattn/attention.h"
#include "simdattn/targets.h"
#include "tbb/task_arena.h"

namespace simdattn {
namespace {

struct Shape {
  size_t batch, tokens, d_model, heads;
};

// Multiply-adds x 2 of the unfused module: Q, K, V and output projections,
// then Q K^T and weights V over all T x T scores.
double Flops(const Shape& s) {
  const double bt = double(s.batch) * s.tokens;
  return 2.0 * (4.0 * bt * s.d_model * s.d_model +
                2.0 * bt * s.tokens * s.d_model);
}

void SetCounters(benchmark::State& state, const Shape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      Flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(ActiveTarget());
}

void BM_MultiHeadAttention(benchmark::State& state, Shape s) {
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  MultiHeadAttention mha(s.d_model, s.d_model, s.tokens, 0.0f, s.heads, false,
                         1);
  std::vector<float> x(s.batch * s.tokens * s.d_model, 0.25f);
  std::vector<float> y(x.size());
  const ConstTensor3 xv(x.data(), s.batch, s.tokens, s.d_model);
  const Tensor3 yv(y.data(), s.batch, s.tokens, s.d_model);
  arena.execute([&] {
    for (auto _ : state) {
      mha.Forward(xv, yv);
      benchmark::ClobberMemory();
    }
  });
  SetCounters(state, s);
}

// Exactly the module's MatMul and BatchedMatMul calls, on buffers of the
// same shapes and layouts.
void BM_MultiHeadAttentionMatMulsOnly(benchmark::State& state, Shape s) {
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  const size_t bt = s.batch * s.tokens, d = s.d_model, hd = d / s.heads;
  std::vector<float> x(bt * d, 0.25f), w_qkv(3 * d * d, 0.01f),
      w_out(d * d, 0.01f), bias(d, 0.0f), qkv(bt * 3 * d),
      scores(s.batch * s.heads * s.tokens * s.tokens, 1.0f / s.tokens),
      context(bt * d), y(bt * d);
  MatMulOptions linear;
  linear.transpose_b = Transpose::kYes;
  MatMulOptions qk = linear;
  qk.alpha = 1.0f / std::sqrt(float(hd));
  MatMulOptions out = linear;
  out.bias = bias.data();
  const size_t width = 3 * d;
  const ConstTensor4 q(qkv.data(), s.batch, s.heads, s.tokens, hd,
                       s.tokens * width, hd, width);
  const ConstTensor4 k(qkv.data() + d, s.batch, s.heads, s.tokens, hd,
                       s.tokens * width, hd, width);
  const ConstTensor4 v(qkv.data() + 2 * d, s.batch, s.heads, s.tokens, hd,
                       s.tokens * width, hd, width);
  const Tensor4 w =
      Tensor4::Dense(scores.data(), s.batch, s.heads, s.tokens, s.tokens);
  const Tensor4 c =
      Tensor4::FromTokenMajor(context.data(), s.batch, s.tokens, s.heads, hd);
  arena.execute([&] {
    for (auto _ : state) {
      MatMul(ConstMatrix(x.data(), bt, d), ConstMatrix(w_qkv.data(), width, d),
             Matrix(qkv.data(), bt, width), linear);
      BatchedMatMul(q, k, w, qk);
      BatchedMatMul(w, v, c);
      MatMul(ConstMatrix(context.data(), bt, d), ConstMatrix(w_out.data(), d, d),
             Matrix(y.data(), bt, d), out);
      benchmark::ClobberMemory();
    }
  });
  SetCounters(state, s);
}

void BM_ToyMultiHeadAttention(benchmark::State& state) {
  // The seeds' MultiHeadAttention(3, 2, 6, 0.0, num_heads=2) on a batch of 2.
  MultiHeadAttention mha(3, 2, 6, 0.0f, 2, false, 123);
  std::vector<float> x(2 * 6 * 3, 0.5f), y(2 * 6 * 2);
  for (auto _ : state) {
    mha.Forward(ConstTensor3(x.data(), 2, 6, 3), Tensor3(y.data(), 2, 6, 2));
    benchmark::ClobberMemory();
  }
  state.SetLabel(ActiveTarget());
}

void Register() {
  const Shape shapes[] = {
      {1, 1024, 768, 12}, {8, 256, 768, 12}, {4, 1024, 1024, 16}};
  for (const Shape& s : shapes) {
    const std::string name = std::to_string(s.batch) + "x" +
                              std::to_string(s.tokens) + "x" +
                              std::to_string(s.d_model) + "x" +
                              std::to_string(s.heads);
    benchmark::RegisterBenchmark(("MHA/" + name).c_str(), BM_MultiHeadAttention, s)
        ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("MHAMatMulsOnly/" + name).c_str(),
                                 BM_MultiHeadAttentionMatMulsOnly, s)
        ->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("MHA/toy_2x6x3to2x2", BM_ToyMultiHeadAttention)
      ->Unit(benchmark::kMicrosecond);
}

const int kRegistered = (Register(), 0);

}  // namespace
}  // namespace simdattn
