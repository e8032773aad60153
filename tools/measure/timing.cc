#include "tools/measure/timing.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

namespace simdattn {
namespace measure {

Timing Summarize(std::vector<double> per_call_s, int64_t calls_per_rep) {
  Timing t;
  if (per_call_s.empty()) return t;
  std::sort(per_call_s.begin(), per_call_s.end());
  const size_t n = per_call_s.size();
  t.median_s = n % 2 ? per_call_s[n / 2]
                     : 0.5 * (per_call_s[n / 2 - 1] + per_call_s[n / 2]);
  t.min_s = per_call_s.front();
  t.max_s = per_call_s.back();
  t.calls_per_rep = calls_per_rep;
  t.repetitions = static_cast<int>(n);
  return t;
}

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Runs the contender's untimed hooks around `body`.
template <typename Body>
void WithHooks(const Contender& c, const Body& body) {
  if (c.before) c.before();
  body();
  if (c.after) c.after();
}

// Warms the contender up (at least two calls: the first is cold, with page
// faults and thread start, and would be a poor estimate) and returns how
// many calls a repetition needs to last options.min_seconds.
int64_t WarmUp(const Contender& c, const TimingOptions& options) {
  double last = 0;
  WithHooks(c, [&] {
    const Clock::time_point start = Clock::now();
    int calls = 0;
    do {
      const Clock::time_point call_start = Clock::now();
      c.run(1);
      last = Seconds(Clock::now() - call_start);
    } while (++calls < 2 ||
             Seconds(Clock::now() - start) < options.warmup_seconds);
  });
  if (last >= options.min_seconds) return 1;
  return static_cast<int64_t>(options.min_seconds / std::max(last, 1e-9)) + 1;
}

}  // namespace

std::vector<Timing> MeasureInterleaved(const std::vector<Contender>& contenders,
                                       const TimingOptions& options) {
  const size_t n = contenders.size();
  std::vector<int64_t> calls(n);
  for (size_t i = 0; i < n; ++i) calls[i] = WarmUp(contenders[i], options);
  std::vector<std::vector<double>> per_call(n);
  const int reps = std::max(options.repetitions, 1);
  for (int r = 0; r < reps; ++r) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (k + static_cast<size_t>(r)) % n;
      WithHooks(contenders[i], [&] {
        const Clock::time_point start = Clock::now();
        contenders[i].run(calls[i]);
        per_call[i].push_back(Seconds(Clock::now() - start) / double(calls[i]));
      });
    }
  }
  std::vector<Timing> timings;
  for (size_t i = 0; i < n; ++i) {
    timings.push_back(Summarize(std::move(per_call[i]), calls[i]));
  }
  return timings;
}

}  // namespace measure
}  // namespace simdattn
