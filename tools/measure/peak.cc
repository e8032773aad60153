// Peak loops: one dispatch per thread per measurement, like the kernels.
#include "tools/measure/peak.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "tools/measure/timing.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tools/measure/peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h, in every per-target pass (a separate block, so that
// include sorting keeps it there).
#include "tools/measure/peak-inl.h"

#if HWY_ONCE
#include "hwy/aligned_allocator.h"

namespace simdattn {
namespace measure {
HWY_EXPORT(FloatLanes);
HWY_EXPORT(FmaLoop);
HWY_EXPORT(CopyLoop);

namespace {

// Times body(t) for t in [0, threads) run on that many std::threads at
// once, not TBB tasks: a peak needs every thread busy together, which a task
// scheduler does not promise. The threads start before the timing and each
// repetition releases them together, so starting threads one after another
// (tens of microseconds each, a millisecond at 16) is not timed.
template <typename Body>
Timing TimeOnThreads(int threads, const Body& body,
                     const TimingOptions& options) {
  std::atomic<uint64_t> round{0};
  std::atomic<int> finished{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (uint64_t seen = 0;;) {
        uint64_t now;
        while ((now = round.load(std::memory_order_acquire)) == seen &&
               !stop.load(std::memory_order_acquire)) {
          std::this_thread::yield();
        }
        if (now == seen) return;  // Stopped.
        seen = now;
        body(t);
        finished.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  }
  const Timing timing = Measure(
      [&] {
        finished.store(0, std::memory_order_relaxed);
        round.fetch_add(1, std::memory_order_acq_rel);
        body(0);
        while (finished.load(std::memory_order_acquire) != threads - 1) {
          std::this_thread::yield();
        }
      },
      options);
  stop.store(true, std::memory_order_release);
  for (std::thread& th : pool) th.join();
  return timing;
}

}  // namespace

double MeasureFmaGflops(int threads, const TimingOptions& options) {
  threads = std::max(threads, 1);
  const size_t lanes = HWY_DYNAMIC_DISPATCH(FloatLanes)();
  // 4 M MulAdds per chain: several milliseconds, so that starting the
  // threads (tens of microseconds) is noise.
  constexpr uint64_t kIterations = uint64_t{1} << 22;
  std::vector<float> sink(static_cast<size_t>(threads));
  const Timing t = TimeOnThreads(
      threads,
      [&](int i) {
        sink[static_cast<size_t>(i)] +=
            HWY_DYNAMIC_DISPATCH(FmaLoop)(kIterations);
      },
      options);
  // The results must be observable, or the loops could be dropped.
  volatile float keep = sink[0];
  (void)keep;
  const double flops = 2.0 * double(lanes) * double(kFmaChains) *
                       double(kIterations) * double(threads);
  return flops / t.min_s * 1e-9;
}

double MeasureCopyGbPerSec(int threads, const TimingOptions& options) {
  threads = std::max(threads, 1);
  // 16 Mi floats, a multiple of kChunk so that every thread's part is a
  // whole number of any target's 4-vector step (SVE: up to 64 lanes).
  constexpr size_t kFloats = size_t{16} << 20;
  constexpr size_t kChunk = 4096;
  auto from = hwy::AllocateAligned<float>(kFloats);
  auto to = hwy::AllocateAligned<float>(kFloats);
  // Written once so that the pages exist before timing.
  std::fill(from.get(), from.get() + kFloats, 1.0f);
  std::fill(to.get(), to.get() + kFloats, 0.0f);
  const size_t part = kFloats / kChunk / static_cast<size_t>(threads) * kChunk;
  const Timing t = TimeOnThreads(
      threads,
      [&](int i) {
        const size_t begin = part * static_cast<size_t>(i);
        const size_t end = i + 1 == threads ? kFloats : begin + part;
        HWY_DYNAMIC_DISPATCH(CopyLoop)
        (from.get() + begin, to.get() + begin, end - begin);
      },
      options);
  return 2.0 * double(kFloats) * sizeof(float) / t.min_s * 1e-9;
}

}  // namespace measure
}  // namespace simdattn
#endif  // HWY_ONCE
