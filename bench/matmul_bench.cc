// MatMul throughput (FLOPS = 2 M N K per call, as a rate) on square, linear
// projection and attention shapes, at 1 and 2 threads; beside oneDNN's matmul
// primitive (SIMDATTN_HAVE_ONEDNN) and OpenBLAS's cblas_sgemm
// (SIMDATTN_HAVE_OPENBLAS) on the same shapes, so one run prints
//   MatMul/simdattn/AVX3/1024x768x768/threads:1   label: AVX3
//   MatMul/onednn/1024x768x768/threads:1          label: oneDNN's kernel
//   MatMul/openblas/1024x768x768/threads:1        label: OpenBLAS's core
//
//   matmul_bench                                   the dispatched target only
//   SIMDATTN_BENCH_ALL_TARGETS=1 matmul_bench      every supported target
//   SIMDATTN_BENCH_THREADS=1,2,4 matmul_bench      other thread counts
//   matmul_bench --benchmark_filter='/AVX2/|openblas'
//
// OpenBLAS 0.3.21 (Debian bookworm) does not know Zen 4/5 and picks its
// Haswell (AVX2) kernels there; OPENBLAS_CORETYPE=SkylakeX selects the
// AVX-512 ones (compare those with AVX3, and Haswell with AVX2).
//
// Shapes and workloads (operands, oneDNN and OpenBLAS adapters) come from
// tools/measure, shared with `simdattn bench`.
//
// Libraries whose idle workers spin (OpenMP under oneDNN, OpenBLAS's
// pthreads) steal a core from the next benchmark for a few milliseconds on a
// 2-core machine; compare ratios within one run, and filter to one library
// when the absolute numbers matter.
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "simdattn/targets.h"
#include "tbb/task_arena.h"
#include "tools/measure/shapes.h"
#include "tools/measure/target_scope.h"
#include "tools/measure/workloads.h"

namespace simdattn {
namespace {

using measure::Library;
using measure::MatMulShape;

// SIMDATTN_BENCH_THREADS="1,2,4"; default {1, 2}.
std::vector<int> ThreadCounts() {
  std::vector<int> counts;
  if (const char* env = std::getenv("SIMDATTN_BENCH_THREADS")) {
    std::stringstream list(env);
    std::string item;
    while (std::getline(list, item, ',')) {
      const int n = std::atoi(item.c_str());
      if (n > 0) counts.push_back(n);
    }
  }
  if (counts.empty()) counts = {1, 2};
  return counts;
}

bool AllTargets() {
  const char* env = std::getenv("SIMDATTN_BENCH_ALL_TARGETS");
  return env != nullptr && env[0] != '\0' && env[0] != '0';
}

void SetFlops(benchmark::State& state, const MatMulShape& s) {
  state.counters["FLOPS"] =
      benchmark::Counter(s.Flops() * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_SimdattnMatMul(benchmark::State& state, std::string target,
                       MatMulShape s) {
  const int threads = static_cast<int>(state.range(0));
  const measure::TargetScope scope(target);
  state.SetLabel(ActiveTarget());
  tbb::task_arena arena(threads);
  arena.execute([&] {
    const std::unique_ptr<measure::Workload> w = measure::MakeMatMul(s);
    w->Run();  // Warm the scratch pool and TBB's workers.
    for (auto _ : state) {
      w->Run();
      benchmark::ClobberMemory();
    }
  });
  SetFlops(state, s);
}

// oneDNN (through OpenMP) and OpenBLAS (its pthreads) at the benchmark's
// thread count. oneDNN chooses its blocking for the threads it sees when the
// primitive is created, which the workload does after setting them.
// A TBB build of oneDNN would follow the arena instead.
void BM_LibraryMatMul(benchmark::State& state, Library library, MatMulShape s) {
  const int threads = static_cast<int>(state.range(0));
  tbb::task_arena arena(threads);
  arena.execute([&] {
    const std::unique_ptr<measure::Workload> w =
        measure::MakeMatMul(s, library, threads);
    state.SetLabel(w->Impl());
    w->Run();  // Warm up: first-touch, thread start.
    for (auto _ : state) {
      w->Run();
      benchmark::ClobberMemory();
    }
  });
  SetFlops(state, s);
}

void Configure(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Unit(benchmark::kMicrosecond)->UseRealTime();
  for (int t : ThreadCounts()) b->Arg(t);
}

// Registered at static initialisation so that benchmark_main sees them; per
// shape, simdattn's targets then oneDNN then OpenBLAS, so the libraries are
// printed side by side.
[[maybe_unused]] const bool kRegistered = [] {
  const std::vector<std::string> targets =
      AllTargets() ? SupportedTargets()
                   : std::vector<std::string>{ActiveTarget()};
  for (const MatMulShape& s : measure::StandardMatMulShapes()) {
    for (const std::string& target : targets) {
      Configure(benchmark::RegisterBenchmark(
          ("MatMul/simdattn/" + target + "/" + s.Name()).c_str(),
          BM_SimdattnMatMul, target, s));
    }
    for (Library lib : {Library::kOneDnn, Library::kOpenBlas}) {
      if (!measure::LibraryAvailable(lib)) continue;
      Configure(benchmark::RegisterBenchmark(
          ("MatMul/" + std::string(measure::LibraryName(lib)) + "/" + s.Name())
              .c_str(),
          BM_LibraryMatMul, lib, s));
    }
  }
  return true;
}();

}  // namespace
}  // namespace simdattn
