// Proves that the TSan set-up (fork/join annotations in ParallelFor and
// tests/tsan.supp) still reports a real race in a parallel loop's body, so a
// green tsan run means something. Only meaningful under ThreadSanitizer.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/parallel.h"

namespace simdattn {
namespace {

// Tasks write disjoint elements that the caller reads after the loop: no race.
long DisjointLoop() {
  std::vector<long> values(4096);
  internal::ParallelFor(0, values.size(), 1, [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) values[i] = static_cast<long>(i);
  });
  long sum = 0;
  for (long v : values) sum += v;
  return sum;
}

TEST(TsanCanary, DisjointWritesAreClean) {
  EXPECT_EQ(DisjointLoop(), 4096L * 4095 / 2);
}

#ifdef SIMDATTN_TSAN
// Every task adds to one unsynchronised counter: a data race. The task that
// holds index 0 waits first, so that the other thread runs the rest even
// when the machine is busy (a loop run by one thread has no race to report:
// the canary once failed that way while a build ran beside it).
long RacyLoop() {
  long shared = 0;
  internal::ParallelFor(0, 4096, 1, [&](size_t first, size_t last) {
    if (first == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (size_t i = first; i < last; ++i) shared += static_cast<long>(i);
  });
  return shared;
}

TEST(TsanCanaryDeathTest, RaceInALoopBodyIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        for (int i = 0; i < 20; ++i) std::printf("%ld\n", RacyLoop());
      },
      "ThreadSanitizer: data race");
}
#endif

}  // namespace
}  // namespace simdattn
