// The one place kernels go parallel: tbb::parallel_for over an index range,
// so callers' tbb::task_arena / tbb::global_control limits apply, with the
// fork/join edges made visible to ThreadSanitizer.
//
// Why the annotations: Debian's libtbb is not built with TSan, so the
// synchronisation by which TBB publishes the caller's writes to the tasks
// (fork) and the tasks' writes back to the caller (join) is invisible, and
// every result read after a parallel loop would be reported as a race. The
// annotations declare exactly those two edges and nothing between tasks, so
// two tasks that touch the same memory are still reported.
#ifndef SIMDATTN_SRC_COMMON_PARALLEL_H_
#define SIMDATTN_SRC_COMMON_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <cstddef>

#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"
#include "tbb/task_arena.h"

#if defined(__SANITIZE_THREAD__)
#define SIMDATTN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIMDATTN_TSAN 1
#endif
#endif

#ifdef SIMDATTN_TSAN
extern "C" void __tsan_acquire(void* address);
extern "C" void __tsan_release(void* address);
#endif

namespace simdattn {
namespace internal {

// The threads a parallel loop may use here: the caller's arena's.
inline size_t ArenaThreads() {
  return static_cast<size_t>(tbb::this_task_arena::max_concurrency());
}

// Calls body(first, last) on disjoint subranges covering [begin, end), each
// at least `grain` long where possible.
template <typename Body>
void ParallelFor(size_t begin, size_t end, size_t grain, const Body& body) {
#ifdef SIMDATTN_TSAN
  char fork = 0, join = 0;
  __tsan_release(&fork);
  tbb::parallel_for(tbb::blocked_range<size_t>(begin, end, grain),
                    [&](const tbb::blocked_range<size_t>& range) {
                      __tsan_acquire(&fork);
                      body(range.begin(), range.end());
                      __tsan_release(&join);
                    });
  __tsan_acquire(&join);
#else
  tbb::parallel_for(tbb::blocked_range<size_t>(begin, end, grain),
                    [&](const tbb::blocked_range<size_t>& range) {
                      body(range.begin(), range.end());
                    });
#endif
}

// Runs every index of [begin, end) in index order as far as threads allow:
// up to max_concurrency workers, each calling worker(next) once, where
// next() returns the next index nobody has taken, then `end` (a dynamic
// schedule; a worker sets up its scratch once). Tasks of uneven cost listed
// heaviest first thus balance as longest-processing-time-first does, which
// a partitioner's recursive halving of the range does not promise.
template <typename Worker>
void ParallelForDynamic(size_t begin, size_t end, const Worker& worker) {
  if (begin >= end) return;
  const size_t workers = std::min(end - begin, ArenaThreads());
  std::atomic<size_t> taken{begin};
  const auto next = [&] {
    return std::min(taken.fetch_add(1, std::memory_order_relaxed), end);
  };
  ParallelFor(0, workers, 1, [&](size_t first, size_t last) {
    for (size_t w = first; w < last; ++w) worker(next);
  });
}

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_COMMON_PARALLEL_H_
