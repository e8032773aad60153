// Generation with a KV cache: MultiHeadAttention::ForwardStep, token by token
// or after a prefill, equals the rows of one causal Forward over the whole
// sequence, on every SIMD target; grouped-query heads; cache errors.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/attention.h"
#include "tests/test_util.h"

namespace simdattn {
namespace {

using test::ExpectInvalid;

class DecodeTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(DecodeTest);

// Generates `tokens` outputs in steps of `step` tokens and compares each with
// the full forward's row.
void ExpectStepsMatchFullForward(size_t num_heads, size_t num_kv_heads,
                                 size_t tokens, size_t prefill, size_t step) {
  const size_t batch = 2, d_in = 24, d_out = 32;
  const MultiHeadAttention mha(d_in, d_out, /*context_length=*/tokens,
                               /*dropout=*/0.1f, num_heads, /*qkv_bias=*/true,
                               /*seed=*/5, num_kv_heads);
  const std::vector<float> x = test::RandomVector(batch * tokens * d_in, 3);
  std::vector<float> full(batch * tokens * d_out);
  mha.Forward(ConstTensor3(x.data(), batch, tokens, d_in),
              Tensor3(full.data(), batch, tokens, d_out));

  KVCache cache(batch, num_kv_heads == 0 ? num_heads : num_kv_heads, tokens,
                d_out / num_heads);
  std::vector<float> y(batch * tokens * d_out, -1.0f);
  size_t done = 0;
  while (done < tokens) {
    const size_t n =
        std::min(done == 0 && prefill ? prefill : step, tokens - done);
    // Views of tokens [done, done + n) of every batch item, in place.
    mha.ForwardStep(ConstTensor3(x.data() + done * d_in, batch, n, d_in,
                                 tokens * d_in, d_in),
                    cache,
                    Tensor3(y.data() + done * d_out, batch, n, d_out,
                            tokens * d_out, d_out));
    done += n;
    EXPECT_EQ(cache.size(), done);
  }
  double scale = 1.0, worst = 0.0;
  for (float f : full) scale = std::max(scale, double(std::abs(f)));
  for (size_t i = 0; i < full.size(); ++i) {
    worst = std::max(worst, double(std::abs(full[i] - y[i])));
  }
  EXPECT_LE(worst, 1e-5 * scale) << "heads " << num_heads << "/" << num_kv_heads
                                 << " prefill " << prefill << " step " << step;
}

TEST_P(DecodeTest, TokenByTokenEqualsFullForward) {
  ExpectStepsMatchFullForward(4, 0, 32, 0, 1);
}

TEST_P(DecodeTest, PrefillThenStepsEqualsFullForward) {
  ExpectStepsMatchFullForward(4, 0, 40, 17, 1);
  ExpectStepsMatchFullForward(2, 0, 30, 0, 7);
}

TEST_P(DecodeTest, GroupedAndMultiQueryHeads) {
  ExpectStepsMatchFullForward(4, 2, 32, 0, 1);
  ExpectStepsMatchFullForward(8, 1, 20, 5, 3);
}

// Long caches split the keys over tasks (few heads x one query): the merged
// partials must equal the unsplit result of a full forward.
TEST_P(DecodeTest, LongCacheSplitsKeys) {
  ExpectStepsMatchFullForward(2, 0, 1200, 1190, 1);
}

TEST(DecodeErrors, CacheShapeAndCapacity) {
  const MultiHeadAttention mha(8, 8, 16, 0.0f, 2);
  const std::vector<float> x(3 * 8);
  std::vector<float> y(3 * 8);
  KVCache small(1, 2, 2, 4);
  ExpectInvalid(
      [&] {
        mha.ForwardStep(ConstTensor3(x.data(), 1, 3, 8), small,
                        Tensor3(y.data(), 1, 3, 8));
      },
      "the cache holds 0 of 2 tokens: no room for 3 more");
  KVCache wrong(1, 1, 8, 4);
  ExpectInvalid(
      [&] {
        mha.ForwardStep(ConstTensor3(x.data(), 1, 1, 8), wrong,
                        Tensor3(y.data(), 1, 1, 8));
      },
      "kv_heads 1");
  KVCache big(1, 2, 32, 4);
  ForwardOptions training;
  training.training = true;
  const MultiHeadAttention with_dropout(8, 8, 16, 0.5f, 2);
  ExpectInvalid(
      [&] {
        with_dropout.ForwardStep(ConstTensor3(x.data(), 1, 1, 8), big,
                                 Tensor3(y.data(), 1, 1, 8), training);
      },
      "eval mode");
  std::vector<float> kv(64);
  ExpectInvalid(
      [&] {
        big.Append(ConstTensor4::Dense(kv.data(), 1, 2, 3, 5),
                   ConstTensor4::Dense(kv.data(), 1, 2, 3, 5));
      },
      "keys have shape (1, 2, 3, 5), expected (1, 2, 3, 4)");
  ExpectInvalid(
      [&] {
        KVCache(Tensor4::Dense(kv.data(), 1, 2, 4, 4),
                Tensor4::Dense(kv.data() + 8, 1, 2, 4, 4));
      },
      "keys overlap values");
  // Fills to the context length, then refuses more.
  KVCache cache(1, 2, 64, 4);
  for (int t = 0; t < 16; ++t) {
    mha.ForwardStep(ConstTensor3(x.data(), 1, 1, 8), cache,
                    Tensor3(y.data(), 1, 1, 8));
  }
  ExpectInvalid(
      [&] {
        mha.ForwardStep(ConstTensor3(x.data(), 1, 1, 8), cache,
                        Tensor3(y.data(), 1, 1, 8));
      },
      "num_tokens (17) exceeds context_length (16)");
}

}  // namespace
}  // namespace simdattn
