// In-place dropout (p = 0.1) throughput on attention-sized score tensors,
// per SIMD target. Bytes processed = bytes read + written (each element is
// read and written once).
//
//   dropout_bench --benchmark_filter=AVX3          one target
//   taskset -c 0 dropout_bench                     one thread
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"

namespace simdattn {
namespace {

struct Shape {
  const char* name;
  size_t batch, heads, tokens;
};
// The softmax benchmark's tensors: 12 heads of one 1024-token sequence; a
// batch of 8 of 256 tokens.
constexpr Shape kShapes[] = {{"1x12x1024x1024", 1, 12, 1024},
                             {"8x12x256x256", 8, 12, 256}};

void BM_Dropout(benchmark::State& state, std::string target, Shape s) {
  UseTarget(target);
  const size_t elements = s.batch * s.heads * s.tokens * s.tokens;
  // Each call scales kept values by 1/0.9: they grow, never becoming
  // denormal (which would slow the multiply), and cost the same once inf.
  std::vector<float> x(elements, 1.0f);
  const auto xv =
      Tensor4::Dense(x.data(), s.batch, s.heads, s.tokens, s.tokens);
  DropoutKey key{1234, 0};
  for (auto _ : state) {
    Dropout(xv, 0.1f, key);
    ++key.offset;  // A new mask per step, as in training.
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  }
  UseTarget("");
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(2 * elements * sizeof(float)));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(elements));
}

// Registered at static initialisation so that benchmark_main sees one
// benchmark per (target, shape).
[[maybe_unused]] const bool kRegistered = [] {
  for (const std::string& target : SupportedTargets()) {
    for (const Shape& s : kShapes) {
      const std::string name = "Dropout/" + target + "/" + s.name + "/p0.1";
      benchmark::RegisterBenchmark(name.c_str(), BM_Dropout, target, s)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  return true;
}();

}  // namespace
}  // namespace simdattn
