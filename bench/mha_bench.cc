// MultiHeadAttention forward (causal, eval) at GPT-2-like shapes, beside the
// same module's matrix products timed alone: the module is matmul-bound when
// the two are close (softmax, masking and glue cost the difference). Both
// report GFLOP/s of the module's useful FLOPs (MhaShape::Flops: causal
// attention's visible half), so their rates compare as their times do.
//
//   mha_bench --benchmark_filter='/threads:1'
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "simdattn/attention.h"
#include "simdattn/targets.h"
#include "tbb/task_arena.h"
#include "tools/measure/shapes.h"
#include "tools/measure/workloads.h"

namespace simdattn {
namespace {

using measure::MhaShape;

void SetCounters(benchmark::State& state, const MhaShape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      s.Flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(ActiveTarget());
}

void BM_MultiHeadAttention(benchmark::State& state, MhaShape s) {
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  arena.execute([&] {
    const std::unique_ptr<measure::Workload> w = measure::MakeMha(s);
    for (auto _ : state) {
      w->Run();
      benchmark::ClobberMemory();
    }
  });
  SetCounters(state, s);
}

// Exactly the module's MatMul and BatchedMatMul calls, on buffers of the
// same shapes and layouts.
void BM_MultiHeadAttentionMatMulsOnly(benchmark::State& state, MhaShape s) {
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  const size_t bt = s.batch * s.tokens, d = s.d_out, hd = d / s.heads;
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
      MatMul(ConstMatrix(context.data(), bt, d),
             ConstMatrix(w_out.data(), d, d), Matrix(y.data(), bt, d), out);
      benchmark::ClobberMemory();
    }
  });
  SetCounters(state, s);
}

void Register() {
  for (const MhaShape& s : measure::StandardMhaShapes()) {
    if (s.d_in != s.d_out) {
      // The seeds' toy, MultiHeadAttention(3, 2, 6, 0.0, num_heads=2) on a
      // batch of 2: one thread, nothing to split.
      benchmark::RegisterBenchmark(("MHA/toy_" + s.Name()).c_str(),
                                   BM_MultiHeadAttention, s)
          ->ArgName("threads")
          ->Arg(1)
          ->Unit(benchmark::kMicrosecond);
      continue;
    }
    benchmark::RegisterBenchmark(("MHA/" + s.Name()).c_str(),
                                 BM_MultiHeadAttention, s)
        ->ArgName("threads")
        ->Arg(1)
        ->Arg(2)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("MHAMatMulsOnly/" + s.Name()).c_str(),
                                 BM_MultiHeadAttentionMatMulsOnly, s)
        ->ArgName("threads")
        ->Arg(1)
        ->Arg(2)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

const int kRegistered = (Register(), 0);

}  // namespace
}  // namespace simdattn
