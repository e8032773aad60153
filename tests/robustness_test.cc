// What an engine relies on beyond correct numbers: a module's eval forward
// is safe to run from several threads at once (this test runs under the tsan
// preset too), calls stay inside an enclosing tbb::task_arena, steady state
// allocates nothing, and bad views are rejected with a message naming them.
// The replaced operator new/delete below pair malloc with free; GCC 12's
// -Wmismatched-new-delete cannot see that once it inlines them into gtest's
// `new TestClass` / `delete`, and warns (an error under -Werror at -O2).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/attention.h"
#include "simdattn/kernels.h"
#include "src/common/check.h"
#include "src/common/scratch.h"
#include "tbb/task_arena.h"
#include "tbb/task_scheduler_observer.h"
#include "tests/test_util.h"

// Counting replacements of every global allocation function: a library
// allocation made through new, std::vector, std::string, ... shows up here.
// The library's scratch pool takes its memory from aligned_alloc instead,
// which internal::ScratchBytesAllocated() accounts for.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<size_t> g_allocations{0};

void* CountedAlloc(size_t size, size_t alignment) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (size == 0) size = 1;
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(size);
  } else {
    // aligned_alloc wants a multiple of the alignment.
    p = std::aligned_alloc(alignment,
                           (size + alignment - 1) / alignment * alignment);
  }
  return p;
}
}  // namespace

void* operator new(size_t size) {
  void* p = CountedAlloc(size, 0);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  return CountedAlloc(size, 0);
}
void* operator new[](size_t size, const std::nothrow_t&) noexcept {
  return CountedAlloc(size, 0);
}
void* operator new(size_t size, std::align_val_t alignment) {
  void* p = CountedAlloc(size, static_cast<size_t>(alignment));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t size, std::align_val_t alignment) {
  return operator new(size, alignment);
}
void* operator new(size_t size, std::align_val_t alignment,
                   const std::nothrow_t&) noexcept {
  return CountedAlloc(size, static_cast<size_t>(alignment));
}
void* operator new[](size_t size, std::align_val_t alignment,
                     const std::nothrow_t&) noexcept {
  return CountedAlloc(size, static_cast<size_t>(alignment));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t,
                     const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t,
                       const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace simdattn {
namespace {

using test::ExpectInvalid;

constexpr size_t kBatch = 2, kTokens = 48, kDIn = 32, kDOut = 64, kHeads = 4;

MultiHeadAttention MakeMha(bool rope = false) {
  // Dropout is set so that eval mode demonstrably ignores it.
  MultiHeadAttentionConfig config = test::MhaConfig(
      kDIn, kDOut, /*context_length=*/64, kHeads, /*qkv_bias=*/true,
      /*seed=*/11);
  config.dropout = 0.25f;
  if (rope) config.rope = RopeOptions{};
  return MultiHeadAttention(config);
}

// Heap allocations (operator new) and scratch-pool growth during a call.
struct Allocations {
  size_t news = 0;
  size_t scratch_bytes = 0;
};
template <typename F>
Allocations Count(F&& f) {
  const size_t scratch_before = internal::ScratchBytesAllocated();
  g_allocations.store(0);
  g_counting.store(true);
  f();
  g_counting.store(false);
  return {g_allocations.load(),
          internal::ScratchBytesAllocated() - scratch_before};
}

TEST(Robustness, CountingOperatorNewSeesAllocations) {
  // The counter works, so a zero below means something.
  const Allocations a = Count([] {
    std::vector<float> v(100);
    v[3] = 1.0f;
    EXPECT_EQ(v[3], 1.0f);
  });
  EXPECT_EQ(a.news, 1u);
}

// Eval-mode forward is const and thread-safe: four threads on one module,
// at once, each get exactly the single-threaded result (kernels reduce in a
// fixed order, so results are bit-identical whatever the scheduling).
TEST(Robustness, ConcurrentEvalForwardOnOneModule) {
  const MultiHeadAttention mha = MakeMha();
  const std::vector<float> x = test::RandomVector(kBatch * kTokens * kDIn, 1);
  const ConstTensor3 xv(x.data(), kBatch, kTokens, kDIn);
  // The fused path (no weights requested) and the unfused one agree only to
  // ~2e-6, so each has its own reference.
  std::vector<float> expected_fused(kBatch * kTokens * kDOut);
  std::vector<float> expected(expected_fused.size());
  std::vector<float> expected_weights(kBatch * kHeads * kTokens * kTokens);
  mha.Forward(xv, Tensor3(expected_fused.data(), kBatch, kTokens, kDOut));
  ForwardOptions with_weights;
  with_weights.attention_weights =
      Tensor4::Dense(expected_weights.data(), kBatch, kHeads, kTokens, kTokens);
  mha.Forward(xv, Tensor3(expected.data(), kBatch, kTokens, kDOut),
              with_weights);

  constexpr int kThreads = 4, kRepeats = 8;
  std::vector<std::vector<float>> y(kThreads,
                                    std::vector<float>(expected.size()));
  std::vector<std::vector<float>> w(
      kThreads, std::vector<float>(expected_weights.size()));
  std::vector<int> mismatches(kThreads, 0);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Start together, so that the forwards overlap.
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      for (int r = 0; r < kRepeats; ++r) {
        std::fill(y[t].begin(), y[t].end(), -1.0f);
        // Half the calls take the fused path, half return the weights.
        ForwardOptions options;
        if ((r + t) % 2 == 1) {
          options.attention_weights =
              Tensor4::Dense(w[t].data(), kBatch, kHeads, kTokens, kTokens);
        }
        mha.Forward(xv, Tensor3(y[t].data(), kBatch, kTokens, kDOut), options);
        if (options.attention_weights.data == nullptr) {
          if (y[t] != expected_fused) ++mismatches[t];
        } else if (y[t] != expected || w[t] != expected_weights) {
          ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  }
}

// Records every thread that enters the observed arena.
class ThreadRecorder : public tbb::task_scheduler_observer {
 public:
  explicit ThreadRecorder(tbb::task_arena& arena)
      : tbb::task_scheduler_observer(arena) {}
  ~ThreadRecorder() override { observe(false); }

  void on_scheduler_entry(bool) override {
    std::lock_guard<std::mutex> lock(mutex_);
    threads_.insert(std::this_thread::get_id());
  }
  std::set<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_;
  }

 private:
  std::mutex mutex_;
  std::set<std::thread::id> threads_;
};

// Inside tbb::task_arena(1) the calling thread does all the work: the arena
// has no worker slot, so an observer on it sees every thread that joins it,
// and only the calling thread may. (The default arena is deliberately not
// observed: oneTBB notifies workers idling there of a newly activated
// observer from their steal loop, whether or not they then run a task, so
// an entry there proves nothing — CI under ASan saw exactly that.)
TEST(Robustness, ArenaOfOneRunsOnTheCallingThreadOnly) {
  const MultiHeadAttention mha = MakeMha();
  const std::vector<float> x = test::RandomVector(kBatch * kTokens * kDIn, 2);
  std::vector<float> y(kBatch * kTokens * kDOut);
  std::vector<float> weights(kBatch * kHeads * kTokens * kTokens);
  // Wake the default arena's workers, so that they would be ready to steal.
  mha.Forward(ConstTensor3(x.data(), kBatch, kTokens, kDIn),
              Tensor3(y.data(), kBatch, kTokens, kDOut));

  tbb::task_arena arena(1);
  arena.initialize();
  ThreadRecorder in_arena(arena);
  in_arena.observe(true);
  std::thread::id runner;
  int concurrency = 0;
  arena.execute([&] {
    runner = std::this_thread::get_id();
    concurrency = tbb::this_task_arena::max_concurrency();
    for (int r = 0; r < 4; ++r) {
      ForwardOptions options;
      options.training = r % 2 == 1;
      options.dropout_key = {3, static_cast<uint64_t>(r)};
      if (r >= 2) {
        options.attention_weights =
            Tensor4::Dense(weights.data(), kBatch, kHeads, kTokens, kTokens);
      }
      mha.Forward(ConstTensor3(x.data(), kBatch, kTokens, kDIn),
                  Tensor3(y.data(), kBatch, kTokens, kDOut), options);
    }
  });
  in_arena.observe(false);
  EXPECT_EQ(concurrency, 1);
  EXPECT_EQ(runner, std::this_thread::get_id());
  for (const std::thread::id& id : in_arena.threads()) {
    EXPECT_EQ(id, runner) << "another thread entered the arena of one";
  }
  EXPECT_FALSE(in_arena.threads().empty()) << "the observer saw no entry";
}

// After the first forward at a shape, further forwards at that shape make no
// heap allocation and take no new scratch: in eval, in training (dropout) and
// with the attention weights returned. In an arena of one thread the number
// of scratch buffers in flight is fixed, so this is exact.
TEST(Robustness, SteadyStateAllocatesNothing) {
  const MultiHeadAttention plain = MakeMha(), rope = MakeMha(true);
  const std::vector<float> x = test::RandomVector(kBatch * kTokens * kDIn, 3);
  std::vector<float> y(kBatch * kTokens * kDOut);
  std::vector<float> weights(kBatch * kHeads * kTokens * kTokens);
  const ConstTensor3 xv(x.data(), kBatch, kTokens, kDIn);
  const Tensor3 yv(y.data(), kBatch, kTokens, kDOut);
  tbb::task_arena arena(1);
  arena.execute([&] {
    for (int mode = 0; mode < 4; ++mode) {
      SCOPED_TRACE(mode == 0   ? "eval"
                   : mode == 1 ? "training"
                   : mode == 2 ? "weights"
                               : "rope");
      const MultiHeadAttention& mha = mode == 3 ? rope : plain;
      ForwardOptions options;
      options.training = mode == 1;
      if (mode == 2) {
        options.attention_weights =
            Tensor4::Dense(weights.data(), kBatch, kHeads, kTokens, kTokens);
      }
      mha.Forward(xv, yv, options);  // First call at this shape: may allocate.
      for (int call = 2; call <= 6; ++call) {
        options.dropout_key.offset = static_cast<uint64_t>(call);
        const Allocations a = Count([&] { mha.Forward(xv, yv, options); });
        EXPECT_EQ(a.news, 0u) << "call " << call;
        EXPECT_EQ(a.scratch_bytes, 0u) << "call " << call;
      }
    }
  });
}

// Generation steps allocate nothing once warm, whatever the cache's type and
// layout: the module's ForwardStep (a llama-style one with RoPE too), and
// Append + attention over the cache as an engine calls them, over 40 steps
// crossing paged blocks.
TEST(Robustness, GenerationStepsAllocateNothing) {
  const MultiHeadAttention mha = MakeMha(), rope_mha = MakeMha(true);
  constexpr size_t kSteps = 40, kCapacity = 64, kHeadDim = kDOut / kHeads;
  const std::vector<float> x = test::RandomVector(kBatch * kDIn, 5);
  const std::vector<float> kv =
      test::RandomVector(kBatch * kHeads * kHeadDim, 6);
  const std::vector<float> q =
      test::RandomVector(kBatch * kHeads * kHeadDim, 7);
  std::vector<float> y(kBatch * kDOut), out(kBatch * kHeads * kHeadDim);
  const ConstTensor4 kv_view =
      ConstTensor4::Dense(kv.data(), kBatch, kHeads, 1, kHeadDim);
  tbb::task_arena arena(1);
  arena.execute([&] {
    for (const KVType type : {KVType::kF32, KVType::kBF16, KVType::kInt8}) {
      for (const size_t block_size : {size_t{0}, size_t{16}}) {
        SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(type)
                                        << " block_size " << block_size);
        KVCacheConfig config;
        config.type = type;
        config.block_size = block_size;
        KVCache module_cache(kBatch, kHeads, kCapacity, kHeadDim, config);
        KVCache rope_cache(kBatch, kHeads, kCapacity, kHeadDim, config);
        KVCache engine_cache(kBatch, kHeads, kCapacity, kHeadDim, config);
        const auto step = [&] {
          mha.ForwardStep(ConstTensor3(x.data(), kBatch, 1, kDIn), module_cache,
                          Tensor3(y.data(), kBatch, 1, kDOut));
          rope_mha.ForwardStep(ConstTensor3(x.data(), kBatch, 1, kDIn),
                               rope_cache, Tensor3(y.data(), kBatch, 1, kDOut));
          engine_cache.Append(kv_view, kv_view);
          AttentionOptions options;
          options.mask.causal = true;
          ScaledDotProductAttention(
              ConstTensor4::Dense(q.data(), kBatch, kHeads, 1, kHeadDim),
              engine_cache.View(),
              Tensor4::Dense(out.data(), kBatch, kHeads, 1, kHeadDim), options);
        };
        step();  // The first step at this shape may allocate.
        const Allocations a = Count([&] {
          for (size_t s = 1; s < kSteps; ++s) step();
        });
        EXPECT_EQ(a.news, 0u);
        EXPECT_EQ(a.scratch_bytes, 0u);
      }
    }
  });
}

// A serving step over caller-owned pages, slot writes then one varlen call
// of a mixed step, allocates nothing after the first at its shape.
TEST(Robustness, ServingStepsAllocateNothing) {
  constexpr size_t kHeadDim = kDOut / kHeads, kBlock = 16, kPerSequence = 4;
  const std::vector<size_t> lengths = {20, 40, 5};
  const size_t starts[4] = {0, 3, 4, 6};  // Queries: 3, 1 and 2.
  std::vector<int32_t> table(lengths.size() * kPerSequence);
  for (size_t i = 0; i < table.size(); ++i) {
    table[i] = static_cast<int32_t>(i);
  }
  std::vector<int64_t> slots;
  for (size_t b = 0; b < lengths.size(); ++b) {
    for (size_t t = lengths[b] - (starts[b + 1] - starts[b]); t < lengths[b];
         ++t) {
      slots.push_back(static_cast<int64_t>(
          table[b * kPerSequence + t / kBlock] * kBlock + t % kBlock));
    }
  }
  std::vector<float> pool_k(table.size() * kHeads * kBlock * kHeadDim, 0.5f);
  std::vector<float> pool_v(pool_k.size(), 0.25f);
  KVPages pages;
  pages.kv_heads = kHeads;
  pages.head_dim = kHeadDim;
  pages.keys = pool_k.data();
  pages.values = pool_v.data();
  pages.row_stride = kHeadDim;
  pages.head_stride = kBlock * kHeadDim;
  pages.block_stride = kHeads * kBlock * kHeadDim;
  pages.block_size = kBlock;
  pages.num_blocks = table.size();
  const size_t n = starts[3];
  const std::vector<float> kv = test::RandomVector(n * kHeads * kHeadDim, 8);
  const std::vector<float> q = test::RandomVector(n * kHeads * kHeadDim, 9);
  std::vector<float> out(q.size());
  const KVCacheView view =
      pages.View(lengths.size(), lengths.data(), table.data(), kPerSequence);
  const auto step = [&] {
    const ConstTensor4 new_kv =
        ConstTensor4::FromTokenMajor(kv.data(), 1, n, kHeads, kHeadDim);
    WriteKVSlots(new_kv, new_kv, slots.data(), pages);
    AttentionOptions options;
    options.mask.causal = true;
    VarlenAttention(
        ConstTensor4::FromTokenMajor(q.data(), 1, n, kHeads, kHeadDim), starts,
        view, Tensor4::FromTokenMajor(out.data(), 1, n, kHeads, kHeadDim),
        options);
  };
  tbb::task_arena(1).execute([&] {
    step();  // The first step at this shape may allocate.
    const Allocations a = Count([&] {
      for (int s = 0; s < 20; ++s) step();
    });
    EXPECT_EQ(a.news, 0u);
    EXPECT_EQ(a.scratch_bytes, 0u);
  });
}

// MlaAttention's steps, over a latent cache and over latent pages (the
// fused rotate-and-write included), allocate nothing once warm.
TEST(Robustness, MlaStepsAllocateNothing) {
  MlaConfig c;
  c.hidden_size = 32;
  c.num_heads = 4;
  c.q_lora_rank = 16;
  c.kv_lora_rank = 24;
  c.qk_nope_head_dim = 8;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 8;
  const MlaAttention module(c);
  const size_t latent = module.latent_dim();
  KVCache cache(2, 1, 32, latent, module.LatentCacheConfig(KVType::kBF16));
  KVPages pages = DenseKVPages(KVType::kF32, 1, latent, 24, 16, 4);
  std::vector<float> pool(SizeOf(pages).key_bytes / sizeof(float), 0.0f);
  pages.keys = pages.values = pool.data();
  const std::vector<float> x = test::RandomVector(2 * 8 * 32, 3);
  std::vector<float> y(x.size());
  module.ForwardStep(ConstTensor3(x.data(), 2, 8, 32), cache,
                     Tensor3(y.data(), 2, 8, 32));
  const size_t starts[3] = {0, 1, 3}, lens[2] = {9, 20};
  const int32_t table[4] = {0, 1, 2, 3};
  const int64_t slots[3] = {8, 50, 51};
  VarlenStep step;
  step.num_seqs = 2;
  step.query_starts = starts;
  step.seq_lens = lens;
  step.block_table = table;
  step.blocks_per_sequence = 2;
  step.slot_mapping = slots;
  const auto steps = [&] {
    module.ForwardStep(ConstTensor3(x.data(), 2, 1, 32), cache,
                       Tensor3(y.data(), 2, 1, 32));
    for (size_t b = 0; b < 2; ++b) cache.Truncate(b, 8);
    module.ForwardStep(ConstMatrix(x.data(), 3, 32), step, pages,
                       Matrix(y.data(), 3, 32));
  };
  tbb::task_arena(1).execute([&] {
    steps();  // The first steps at these shapes may allocate.
    const Allocations a = Count([&] {
      for (int s = 0; s < 10; ++s) steps();
    });
    EXPECT_EQ(a.news, 0u);
    EXPECT_EQ(a.scratch_bytes, 0u);
  });
}

// With every thread, how many buffers are in flight at once depends on the
// scheduling, so the pool may still grow while more threads join in (by a
// small per-task workspace each); but it does not grow per call, and nothing
// is allocated with operator new.
TEST(Robustness, ParallelSteadyStateDoesNotAllocatePerCall) {
  const MultiHeadAttention mha = MakeMha();
  const std::vector<float> x = test::RandomVector(kBatch * kTokens * kDIn, 4);
  std::vector<float> y(kBatch * kTokens * kDOut);
  const ConstTensor3 xv(x.data(), kBatch, kTokens, kDIn);
  const Tensor3 yv(y.data(), kBatch, kTokens, kDOut);
  mha.Forward(xv, yv);
  constexpr size_t kCalls = 40;
  const Allocations later = Count([&] {
    for (size_t call = 0; call < kCalls; ++call) mha.Forward(xv, yv);
  });
  EXPECT_EQ(later.news, 0u);
  // Allocating the Q, K, V projections afresh per call would take this much.
  const size_t per_call_bytes = kBatch * kTokens * 3 * kDOut * sizeof(float);
  EXPECT_LT(later.scratch_bytes, kCalls * per_call_bytes / 4)
      << kCalls << " calls took " << later.scratch_bytes
      << " bytes of new scratch";
}

// Whether two views share a byte, from the elements they touch: exact for
// equal strides, whatever the dims (grouped heads, column blocks, offsets
// that are not a whole element), and by address range otherwise.
TEST(Robustness, FootprintsOverlapOnlyWhereElementsMeet) {
  alignas(64) static float buffer[4096];
  const auto footprint = [](const void* data, size_t d0, size_t d1, size_t d2,
                            size_t d3, size_t s0, size_t s1, size_t s2) {
    const size_t dims[4] = {d0, d1, d2, d3};
    const size_t strides[3] = {s0, s1, s2};
    return internal::CheckTensor4("f", "t", data, dims, strides, sizeof(float));
  };
  // (2, heads, 8 tokens, 4) head blocks in rows of 40 floats: Q has 4 heads
  // at column 0, K 2 heads at 16, V 2 at 24, O 2 at 32.
  const auto q = footprint(buffer, 2, 4, 8, 4, 320, 4, 40);
  const auto k = footprint(buffer + 16, 2, 2, 8, 4, 320, 4, 40);
  const auto v = footprint(buffer + 24, 2, 2, 8, 4, 320, 4, 40);
  const auto o = footprint(buffer + 32, 2, 2, 8, 4, 320, 4, 40);
  EXPECT_FALSE(o.Overlaps(q));
  EXPECT_FALSE(o.Overlaps(k));
  EXPECT_FALSE(o.Overlaps(v));
  EXPECT_FALSE(q.Overlaps(o));
  // Five heads from column 0 reach K's first head.
  EXPECT_TRUE(k.Overlaps(footprint(buffer, 2, 5, 8, 4, 320, 4, 40)));
  EXPECT_TRUE(o.Overlaps(footprint(buffer + 31, 2, 2, 8, 4, 320, 4, 40)));
  // The last element of O's last row against a view starting right there.
  EXPECT_TRUE(o.Overlaps(
      footprint(buffer + 320 + 7 * 40 + 32 + 7, 1, 1, 1, 1, 0, 0, 1)));
  EXPECT_FALSE(o.Overlaps(
      footprint(buffer + 320 + 7 * 40 + 32 + 8, 1, 1, 1, 1, 0, 0, 1)));
  // Half a float apart: the bytes meet although no index does.
  const char* bytes = reinterpret_cast<const char*>(buffer + 32);
  EXPECT_TRUE(o.Overlaps(footprint(bytes - 2, 2, 2, 8, 4, 320, 4, 40)));
  EXPECT_TRUE(o.Overlaps(footprint(bytes + 2, 2, 2, 8, 4, 320, 4, 40)));
  EXPECT_FALSE(o.Overlaps(footprint(bytes - 34, 2, 2, 8, 4, 320, 4, 40)));
  // Different strides: the address ranges decide.
  EXPECT_TRUE(o.Overlaps(footprint(buffer + 36, 1, 1, 8, 4, 0, 0, 41)));
  EXPECT_FALSE(o.Overlaps(footprint(buffer + 2048, 1, 1, 8, 4, 0, 0, 41)));
  EXPECT_FALSE(o.Overlaps(internal::Footprint()));  // Empty.
}

// Views that would make the library write one element from two tasks, read
// memory a size does not cover, or overflow: each named, nothing touched.
TEST(Robustness, BadViewsAreRejectedByName) {
  const MultiHeadAttention mha = MakeMha();
  std::vector<float> x(kBatch * kTokens * kDIn, 0.5f);
  std::vector<float> y(kBatch * kTokens * kDOut, -1.0f);
  std::vector<float> weights(kBatch * kHeads * kTokens * kTokens, -1.0f);
  const ConstTensor3 xv(x.data(), kBatch, kTokens, kDIn);

  // Both batch items of y on the same memory.
  ExpectInvalid(
      [&] {
        mha.Forward(xv, Tensor3(y.data(), kBatch, kTokens, kDOut, 0, kDOut));
      },
      "MultiHeadAttention: y.strides[0] (0) makes elements of y");
  // Attention weights whose heads share rows.
  ExpectInvalid(
      [&] {
        ForwardOptions options;
        options.attention_weights =
            Tensor4(weights.data(), kBatch, kHeads, kTokens, kTokens,
                    kHeads * kTokens * kTokens, 1, kTokens);
        mha.Forward(xv, Tensor3(y.data(), kBatch, kTokens, kDOut), options);
      },
      "MultiHeadAttention: attention_weights.strides[1] (1) makes elements");
  // Token stride smaller than a token.
  ExpectInvalid(
      [&] {
        mha.Forward(xv, Tensor3(y.data(), kBatch, kTokens, kDOut,
                                kTokens * kDOut, kDOut - 1));
      },
      "y row stride (63) is less than its row length (64)");
  ExpectInvalid(
      [&] {
        mha.Forward(ConstTensor3(nullptr, kBatch, kTokens, kDIn),
                    Tensor3(y.data(), kBatch, kTokens, kDOut));
      },
      "MultiHeadAttention: x is null but has shape (2, 1, 48, 32)");
  EXPECT_EQ(y, std::vector<float>(y.size(), -1.0f));
  EXPECT_EQ(weights, std::vector<float>(weights.size(), -1.0f));

  // Kernels: a bias inside C, a C whose matrices coincide.
  std::vector<float> a(4 * 4, 1.0f), b(4 * 4, 1.0f), c(4 * 4, 0.0f);
  MatMulOptions bias_in_c;
  bias_in_c.bias = c.data() + 2;
  ExpectInvalid(
      [&] {
        MatMul(ConstMatrix(a.data(), 4, 4), ConstMatrix(b.data(), 4, 4),
               Matrix(c.data(), 4, 4), bias_in_c);
      },
      "MatMul: C overlaps bias (4 floats)");
  ExpectInvalid(
      [&] {
        BatchedMatMul(ConstTensor4::Dense(a.data(), 2, 1, 2, 4),
                      ConstTensor4::Dense(b.data(), 2, 1, 4, 2),
                      Tensor4(c.data(), 2, 1, 2, 2, 0, 0, 2));
      },
      "BatchedMatMul: C.strides[0] (0) makes elements of C");
  // A view whose extent overflows size_t.
  ExpectInvalid(
      [&] {
        Softmax(ConstTensor4(a.data(), 1, 1, std::numeric_limits<size_t>::max(),
                             4, 0, 0, 4),
                Tensor4(c.data(), 1, 1, std::numeric_limits<size_t>::max(), 4,
                        0, 0, 4));
      },
      "Softmax: x overflows size_t");
  EXPECT_EQ(c, std::vector<float>(c.size(), 0.0f));
}

}  // namespace
}  // namespace simdattn
