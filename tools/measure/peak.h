// This machine's attainable peaks, per SIMD target and thread count: the
// denominators of "fraction of peak" in `simdattn bench`. Measured, not
// looked up: clock, turbo, SMT and a VM's CPU quota all show in them.
#ifndef SIMDATTN_TOOLS_MEASURE_PEAK_H_
#define SIMDATTN_TOOLS_MEASURE_PEAK_H_

#include <cstddef>

#include "tools/measure/timing.h"

namespace simdattn {
namespace measure {

// Independent MulAdd chains in the FMA loop: enough accumulators to cover
// FMA latency x FMA ports (4 x 2 on Skylake-X and Zen 4, 5 x 2 on Zen 2/3),
// few enough to stay in AVX2's 16 registers with the loop's two constants.
constexpr size_t kFmaChains = 12;

// GFLOP/s of independent float MulAdd chains (2 FLOPs per lane) on `threads`
// threads at the target a TargetScope selects; best repetition.
// Targets without FMA (SSE4, SSSE3) run a multiply and an add: their peak.
double MeasureFmaGflops(int threads, const TimingOptions& options);

// GB/s (read + written, as the GB/s ops count) of a vector copy between two
// 64 MiB buffers, split among `threads` threads: memory, not cache, like the
// 48 MiB score tensors of the softmax and dropout shapes. Best repetition.
double MeasureCopyGbPerSec(int threads, const TimingOptions& options);

}  // namespace measure
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_MEASURE_PEAK_H_
