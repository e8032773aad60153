// Wall-clock measurement for `simdattn bench` and the peak loops: warm-up,
// then repetitions of a batch of calls long enough to time reliably, reduced
// to the median, min and spread per call. (The Google Benchmark binaries use
// Google Benchmark's own loop; they share the shapes and workloads instead.)
#ifndef SIMDATTN_BENCH_UTIL_TIMING_H_
#define SIMDATTN_BENCH_UTIL_TIMING_H_

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

namespace simdattn {
namespace bench {

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

template <typename Call>
Timing Measure(const Call& call, const TimingOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) {
    return std::chrono::duration<double>(d).count();
  };
  // Warm-up: at least two calls, since the first is cold (page faults,
  // thread start) and would be a poor estimate; the last estimates a call.
  const Clock::time_point warmup_start = Clock::now();
  double last = 0;
  int warmup_calls = 0;
  do {
    const Clock::time_point start = Clock::now();
    call();
    last = seconds(Clock::now() - start);
  } while (++warmup_calls < 2 ||
           seconds(Clock::now() - warmup_start) < options.warmup_seconds);
  int64_t calls = 1;
  if (last < options.min_seconds) {
    calls = static_cast<int64_t>(options.min_seconds /
                                 (last > 1e-9 ? last : 1e-9)) +
            1;
  }
  std::vector<double> per_call;
  const int reps = options.repetitions > 0 ? options.repetitions : 1;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < calls; ++i) call();
    per_call.push_back(seconds(Clock::now() - start) / double(calls));
  }
  return Summarize(std::move(per_call), calls);
}

}  // namespace bench
}  // namespace simdattn

#endif  // SIMDATTN_BENCH_UTIL_TIMING_H_
