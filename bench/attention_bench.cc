// Fused ScaledDotProductAttention beside this library's unfused path
// (BatchedMatMul -> Softmax -> BatchedMatMul, the (T x T) weights stored),
// at the shapes of tools/measure/shapes.h: prefill causal and not, with
// dropout, grouped-query heads, and decode against a KV cache. GFLOP/s count
// the useful FLOPs (causal prefill: about half); decode also reports GB/s of
// K and V read, the bound it runs against.
//
//   attention_bench --benchmark_filter='causal.*threads:2'
#include <cstddef>
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "simdattn/targets.h"
#include "tbb/task_arena.h"
#include "tools/measure/shapes.h"
#include "tools/measure/workloads.h"

namespace simdattn {
namespace {

using measure::AttentionShape;

void BM_Attention(benchmark::State& state, AttentionShape shape, bool unfused) {
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  const std::unique_ptr<measure::Workload> workload =
      unfused ? measure::MakeUnfusedAttention(shape)
              : measure::MakeAttention(shape);
  arena.execute([&] {
    for (auto _ : state) {
      workload->Run();
      benchmark::ClobberMemory();
    }
  });
  state.counters["GFLOP/s"] = benchmark::Counter(
      shape.Flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  if (shape.decode) {
    state.counters["GB/s"] = benchmark::Counter(
        shape.Bytes() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  }
  state.SetLabel(ActiveTarget());
}

void Register(const char* kind, const AttentionShape& shape, bool unfused) {
  const std::string name =
      std::string(unfused ? "Unfused" : "Fused") + kind + "/" + shape.Name();
  benchmark::RegisterBenchmark(name.c_str(), BM_Attention, shape, unfused)
      ->ArgName("threads")
      ->Arg(1)
      ->Arg(2)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

const int kRegistered = [] {
  for (const AttentionShape& shape : measure::StandardAttentionShapes()) {
    Register("Prefill", shape, false);
    // The unfused baseline beside causal prefill; at T = 4096 its weights
    // alone would take 800 MB.
    if (shape.causal && shape.tokens <= 1024) Register("Prefill", shape, true);
  }
  for (const AttentionShape& shape : measure::StandardDecodeShapes()) {
    Register("Decode", shape, false);
  }
  return 0;
}();

}  // namespace
}  // namespace simdattn
