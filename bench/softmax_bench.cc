// Softmax throughput on attention-sized score tensors, per SIMD target,
// unmasked and causal; with oneDNN's softmax on the same tensors when it is
// available. Bytes processed = bytes read + written (a causal row reads only
// its first i + 1 columns but writes all of them). Shapes and workloads come
// from tools/measure, shared with `simdattn bench`.
//
//   softmax_bench --benchmark_filter=AVX3          one target
//   taskset -c 0 softmax_bench                     one thread (TBB and oneDNN
//                                                  follow the affinity mask)
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

using measure::Library;
using measure::ScoresShape;

void SetCounters(benchmark::State& state, const ScoresShape& s) {
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(s.SoftmaxBytes()));
  state.SetItemsProcessed(state.iterations() *
                          static_cast<int64_t>(s.Elements()));
}

void BM_Softmax(benchmark::State& state, std::string target, ScoresShape s) {
  const measure::TargetScope scope(target);
  const std::unique_ptr<measure::Workload> w = measure::MakeSoftmax(s);
  for (auto _ : state) {
    w->Run();
    benchmark::ClobberMemory();
  }
  SetCounters(state, s);
}

// oneDNN's softmax (accurate algorithm) over the last axis, out of place. It
// has no causal mask, so only the unmasked case is compared.
void BM_OneDnnSoftmax(benchmark::State& state, ScoresShape s) {
  const std::unique_ptr<measure::Workload> w =
      measure::MakeSoftmax(s, Library::kOneDnn);
  state.SetLabel(w->Impl());
  for (auto _ : state) {
    w->Run();
    benchmark::ClobberMemory();
  }
  SetCounters(state, s);
}

std::string Name(const ScoresShape& s) {
  ScoresShape unmasked = s;
  unmasked.causal = false;
  return unmasked.Name() + (s.causal ? "/causal" : "/unmasked");
}

// Registered at static initialisation so that benchmark_main sees one
// benchmark per (target, shape, mask).
[[maybe_unused]] const bool kRegistered = [] {
  for (const std::string& target : SupportedTargets()) {
    for (const ScoresShape& s : measure::StandardSoftmaxShapes()) {
      benchmark::RegisterBenchmark(
          ("Softmax/" + target + "/" + Name(s)).c_str(), BM_Softmax, target, s)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  if (measure::LibraryAvailable(Library::kOneDnn)) {
    for (const ScoresShape& s : measure::StandardSoftmaxShapes()) {
      if (s.causal) continue;
      benchmark::RegisterBenchmark(("OneDNN/" + Name(s)).c_str(),
                                   BM_OneDnnSoftmax, s)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  return true;
}();

}  // namespace
}  // namespace simdattn
