// The C API's exception barrier: whatever the C++ code throws comes out as a
// status code and a message, never as an exception; messages are per thread.
// tests/c_api_test.c covers the C functions themselves.
#include <algorithm>
#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/simdattn_c.h"
#include "src/c_api/guard.h"
#include "tbb/task_arena.h"

namespace simdattn {
namespace {

using internal::CallGuarded;

// The bound a caller inside a smaller arena sees is that arena's.
TEST(CApi, MaxThreadsInsideAnArena) {
  size_t process = 0;
  ASSERT_EQ(simdattn_get_max_threads(&process), SIMDATTN_STATUS_OK);
  for (const int threads : {1, 2}) {
    size_t inside = 0;
    tbb::task_arena(threads).execute([&] {
      ASSERT_EQ(simdattn_get_max_threads(&inside), SIMDATTN_STATUS_OK);
    });
    EXPECT_EQ(inside, std::min<size_t>(process, threads)) << threads;
  }
}

TEST(CApiGuard, EveryExceptionBecomesAStatus) {
  EXPECT_EQ(CallGuarded(
                "f", [] { throw std::invalid_argument("MatMul: A is null"); }),
            SIMDATTN_STATUS_INVALID_ARGUMENT);
  // Already names the C++ function: no prefix.
  EXPECT_STREQ(simdattn_last_error(), "MatMul: A is null");

  EXPECT_EQ(CallGuarded("simdattn_f", [] { throw std::bad_alloc(); }),
            SIMDATTN_STATUS_OUT_OF_MEMORY);
  EXPECT_STREQ(simdattn_last_error(),
               "simdattn_f: out of memory (std::bad_alloc)");

  EXPECT_EQ(CallGuarded("simdattn_f",
                        [] { throw std::runtime_error("broken invariant"); }),
            SIMDATTN_STATUS_INTERNAL);
  EXPECT_STREQ(simdattn_last_error(), "simdattn_f: broken invariant");

  EXPECT_EQ(CallGuarded("simdattn_f", [] { throw 42; }),
            SIMDATTN_STATUS_INTERNAL);
  EXPECT_STREQ(simdattn_last_error(), "simdattn_f: unknown exception");

  // Success clears the previous message.
  int calls = 0;
  EXPECT_EQ(CallGuarded("simdattn_f", [&] { ++calls; }), SIMDATTN_STATUS_OK);
  EXPECT_EQ(calls, 1);
  EXPECT_STREQ(simdattn_last_error(), "");
}

TEST(CApiGuard, LongMessagesAreCutNotOverrun) {
  const std::string long_message(5000, 'x');
  EXPECT_EQ(
      CallGuarded("f", [&] { throw std::invalid_argument(long_message); }),
      SIMDATTN_STATUS_INVALID_ARGUMENT);
  const std::string stored = simdattn_last_error();
  EXPECT_GT(stored.size(), 500u);
  EXPECT_LT(stored.size(), long_message.size());
  EXPECT_EQ(stored, long_message.substr(0, stored.size()));
}

TEST(CApiGuard, MessagesArePerThread) {
  ASSERT_EQ(simdattn_dropout({}, 2.0f, 0, 0), SIMDATTN_STATUS_INVALID_ARGUMENT);
  const std::string mine = simdattn_last_error();
  EXPECT_NE(mine.find("Dropout: p (2)"), std::string::npos) << mine;
  std::string theirs_before, theirs_after;
  std::thread other([&] {
    theirs_before = simdattn_last_error();
    simdattn_matmul_options options = SIMDATTN_MATMUL_OPTIONS_INIT;
    options.transpose_b = 7;
    simdattn_matmul({}, {}, {}, &options);
    theirs_after = simdattn_last_error();
  });
  other.join();
  EXPECT_EQ(theirs_before, "");
  EXPECT_NE(theirs_after.find("options->transpose_b (7)"), std::string::npos)
      << theirs_after;
  EXPECT_EQ(simdattn_last_error(), mine);
}

// An exception thrown deep inside a module's forward (the token count is
// checked in the engine, below the C layer) arrives as a status code.
TEST(CApiGuard, ForwardPastTheContextLengthIsAStatus) {
  simdattn_module_config config = SIMDATTN_MODULE_CONFIG_INIT;
  config.kind = SIMDATTN_MULTI_HEAD_ATTENTION;
  config.d_in = 4;
  config.d_out = 4;
  config.context_length = 3;
  config.num_heads = 2;
  simdattn_module* module = nullptr;
  ASSERT_EQ(simdattn_module_create(&config, &module), SIMDATTN_STATUS_OK);
  std::vector<float> x(4 * 4), y(4 * 4, -1.0f);
  const simdattn_const_tensor3 xv = {x.data(), 1, 4, 4, 16, 4};
  const simdattn_tensor3 yv = {y.data(), 1, 4, 4, 16, 4};
  EXPECT_EQ(simdattn_module_forward(module, xv, yv, nullptr),
            SIMDATTN_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(simdattn_last_error(),
               "MultiHeadAttention: num_tokens (4) exceeds context_length (3)");
  EXPECT_EQ(y, std::vector<float>(16, -1.0f));
  simdattn_module_destroy(module);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// Scratch that cannot exist: 2^46 tokens of SelfAttention_v2(1, 1) need
// 3 * 2^46 projected floats (768 TiB, more than a 48-bit address space). x is
// one float broadcast over the batch; y claims 2^46 floats of which only one
// exists, which is safe because the projections' scratch is allocated before
// anything is written. The failure arrives as OUT_OF_MEMORY. Not under the
// sanitizers, whose allocators abort on such a request by default.
TEST(CApiGuard, ImpossibleScratchIsOutOfMemory) {
  simdattn_module_config config = SIMDATTN_MODULE_CONFIG_INIT;
  config.kind = SIMDATTN_SELF_ATTENTION_V2;
  config.d_in = 1;
  config.d_out = 1;
  simdattn_module* module = nullptr;
  ASSERT_EQ(simdattn_module_create(&config, &module), SIMDATTN_STATUS_OK);
  const size_t batch = size_t{1} << 46;
  float buffer[2] = {1.0f, -1.0f};
  const simdattn_const_tensor3 xv = {buffer, batch, 1, 1, 0, 1};
  const simdattn_tensor3 yv = {buffer + 1, batch, 1, 1, 1, 1};
  EXPECT_EQ(simdattn_module_forward(module, xv, yv, nullptr),
            SIMDATTN_STATUS_OUT_OF_MEMORY);
  EXPECT_STREQ(simdattn_last_error(),
               "simdattn_module_forward: out of memory (std::bad_alloc)");
  EXPECT_EQ(buffer[1], -1.0f);
  simdattn_module_destroy(module);
}
#endif

}  // namespace
}  // namespace simdattn
