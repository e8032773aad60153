// Wall-clock measurement for `simdattn bench` and the peak loops: warm-up,
// then repetitions of a batch of calls long enough to time reliably, reduced
// to the median, min and spread per call; several implementations of one op
// are timed in interleaved rounds. (The Google Benchmark binaries use
// Google Benchmark's own loop; they share the shapes and workloads instead.)
#ifndef SIMDATTN_TOOLS_MEASURE_TIMING_H_
#define SIMDATTN_TOOLS_MEASURE_TIMING_H_

#include <cstdint>
#include <functional>
#include <vector>

namespace simdattn {
namespace measure {

struct TimingOptions {
  int repetitions = 5;
  // Each repetition times enough back-to-back calls to last this long: a
  // 100 ns call timed alone would measure the clock, not the kernel.
  double min_seconds = 0.02;
  // Calls before timing (first touch of memory, thread start, caches); at
  // least two. Also estimates how many calls a repetition needs.
  double warmup_seconds = 0.05;
};

struct Timing {
  // Per call.
  double median_s = 0, min_s = 0, max_s = 0;
  int64_t calls_per_rep = 0;
  int repetitions = 0;
  // (max - min) / median: how much to trust a ratio of two medians.
  double Spread() const {
    return median_s > 0 ? (max_s - min_s) / median_s : 0;
  }
};

// Reduces per-call times of the repetitions.
Timing Summarize(std::vector<double> per_call_s, int64_t calls_per_rep);

// One of several implementations timed side by side.
struct Contender {
  // Runs the op `calls` times back to back: the timed part.
  std::function<void(int64_t calls)> run;
  // Untimed, before and after each batch: e.g. select a SIMD target, or let
  // a library's idle workers, which spin for a while after a call, fall
  // asleep before the next contender runs on their cores. May be empty.
  std::function<void()> before, after;
};

// Times the contenders in rounds, repetition r of each in an order that
// rotates every round, so that a slow phase of a shared machine (a
// neighbour on one of the cores for a second or two) falls on all of them
// alike and the ratios of their medians stay meaningful. Timings in the
// contenders' order.
std::vector<Timing> MeasureInterleaved(const std::vector<Contender>& contenders,
                                       const TimingOptions& options);

// One implementation alone.
template <typename Call>
Timing Measure(const Call& call, const TimingOptions& options) {
  Contender only;
  only.run = [&](int64_t calls) {
    for (int64_t i = 0; i < calls; ++i) call();
  };
  return MeasureInterleaved({only}, options).front();
}

}  // namespace measure
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_MEASURE_TIMING_H_
