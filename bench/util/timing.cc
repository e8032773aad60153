#include "bench/util/timing.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace simdattn {
namespace bench {

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

}  // namespace bench
}  // namespace simdattn
