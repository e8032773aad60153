// In-place dropout (p = 0.1) throughput on attention-sized score tensors,
// per SIMD target. Bytes processed = bytes read + written (each element is
// read and written once). Shapes and the workload come from tools/measure,
// shared with `simdattn bench`.
//
//   dropout_bench --benchmark_filter=AVX3          one target
//   taskset -c 0 dropout_bench                     one thread
#include <cstdint>
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "simdattn/targets.h"
#include "tools/measure/shapes.h"
#include "tools/measure/target_scope.h"
#include "tools/measure/workloads.h"

namespace simdattn {
namespace {

using measure::ScoresShape;

void BM_Dropout(benchmark::State& state, std::string target, ScoresShape s) {
  const measure::TargetScope scope(target);
  const std::unique_ptr<measure::Workload> w = measure::MakeDropout(s);
  for (auto _ : state) {
    w->Run();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(s.DropoutBytes()));
  state.SetItemsProcessed(state.iterations() *
                          static_cast<int64_t>(s.Elements()));
}

// Registered at static initialisation so that benchmark_main sees one
// benchmark per (target, shape).
[[maybe_unused]] const bool kRegistered = [] {
  for (const std::string& target : SupportedTargets()) {
    for (const ScoresShape& s : measure::StandardDropoutShapes()) {
      const std::string name = "Dropout/" + target + "/" + s.Name() + "/p0.1";
      benchmark::RegisterBenchmark(name.c_str(), BM_Dropout, target, s)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  return true;
}();

}  // namespace
}  // namespace simdattn
