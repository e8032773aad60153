// A serving step over caller-owned pages (kernels.h's KVPages, WriteKVSlots,
// VarlenAttention): slot writes against KVCache::Append's bits, a mixed
// step's rows against one call per sequence, decode steps bit for bit,
// latent pools, and errors that leave the pool as it was.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/attention.h"
#include "simdattn/kernels.h"
#include "tests/test_util.h"

namespace simdattn {
namespace {

using test::ExpectInvalid;
using test::RandomVector;

class ServingTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(ServingTest);

constexpr size_t kKVHeads = 2, kHeads = 6, kBlockSize = 16, kNumBlocks = 64;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A pool the test owns, (num_blocks, kv_heads, block_size, row) per side.
struct Pool {
  std::vector<uint8_t> keys, values;
  std::vector<float> key_scales, value_scales;
  KVPages pages;

  Pool(KVType type, size_t head_dim, size_t value_dim = 0,
       bool latent = false) {
    const size_t row = std::max(head_dim, value_dim);
    const size_t block = kKVHeads * kBlockSize * row;
    keys.assign(ElementBytes(type, kNumBlocks * block), 0xA5);
    if (!latent) values.assign(keys.size(), 0x5A);
    key_scales.assign(kNumBlocks * kKVHeads * kBlockSize, kNaN);
    value_scales = key_scales;
    pages.type = type;
    pages.kv_heads = kKVHeads;
    pages.head_dim = head_dim;
    pages.value_dim = value_dim;
    pages.keys = keys.data();
    pages.values = latent ? keys.data() : values.data();
    pages.block_stride = block;
    pages.head_stride = kBlockSize * row;
    pages.row_stride = row;
    if (ElementTraitsOf(type).scaled) {
      pages.key_scales = key_scales.data();
      // A latent pool's values take the keys' scales: its value scales,
      // never read, hold what would be wrong.
      if (latent) value_scales.assign(key_scales.size(), 7.0f);
      pages.value_scales = value_scales.data();
      pages.scale_block_stride = kKVHeads * kBlockSize;
      pages.scale_head_stride = kBlockSize;
    }
    pages.block_size = kBlockSize;
    pages.num_blocks = kNumBlocks;
    pages.key_scale = 0.5f;
    pages.value_scale = 2.0f;
  }
};

// Sequences in shuffled blocks of a pool: block_table rows of
// kBlocksPerSequence entries.
constexpr size_t kBlocksPerSequence = 16;
struct Sequences {
  std::vector<size_t> lengths;
  std::vector<int32_t> block_table;

  explicit Sequences(std::vector<size_t> lengths_)
      : lengths(std::move(lengths_)) {
    std::vector<int32_t> blocks(kNumBlocks);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(7));
    block_table.assign(lengths.size() * kBlocksPerSequence, -1);
    size_t next = 0;
    for (size_t b = 0; b < lengths.size(); ++b) {
      for (size_t i = 0; i * kBlockSize < lengths[b]; ++i) {
        block_table[b * kBlocksPerSequence + i] = blocks[next++];
      }
    }
  }
  int64_t Slot(size_t b, size_t t) const {
    return int64_t{block_table[b * kBlocksPerSequence + t / kBlockSize]} *
               kBlockSize +
           static_cast<int64_t>(t % kBlockSize);
  }
  KVCacheView View(const KVPages& pages) const {
    return pages.View(lengths.size(), lengths.data(), block_table.data(),
                      kBlocksPerSequence);
  }
};

// Writes every token of every sequence (seeded keys and values), tokens
// [from[b], lengths[b]) of sequence b in one packed call.
void WriteAll(const Sequences& s, const KVPages& pages, uint64_t seed,
              bool latent = false) {
  std::vector<int64_t> slots;
  for (size_t b = 0; b < s.lengths.size(); ++b) {
    for (size_t t = 0; t < s.lengths[b]; ++t) slots.push_back(s.Slot(b, t));
  }
  const size_t n = slots.size();
  const size_t value_dim = pages.value_dim ? pages.value_dim : pages.head_dim;
  const std::vector<float> k =
      RandomVector(n * kKVHeads * pages.head_dim, seed, -2.0f, 2.0f);
  const std::vector<float> v =
      RandomVector(n * kKVHeads * value_dim, seed + 1, -2.0f, 2.0f);
  WriteKVSlots(
      ConstTensor4::FromTokenMajor(k.data(), 1, n, kKVHeads, pages.head_dim),
      latent
          ? ConstTensor4{}
          : ConstTensor4::FromTokenMajor(v.data(), 1, n, kKVHeads, value_dim),
      slots.data(), pages);
}

// The step's queries, packed (num_tokens, heads, head_dim).
std::vector<size_t> Starts(const std::vector<size_t>& q_lens) {
  std::vector<size_t> starts(q_lens.size() + 1, 0);
  std::partial_sum(q_lens.begin(), q_lens.end(), starts.begin() + 1);
  return starts;
}

struct StepResult {
  std::vector<float> out, lse;
};

StepResult Varlen(const Sequences& s, const KVPages& pages,
                  const std::vector<size_t>& q_lens,
                  const std::vector<float>& q, AttentionOptions options) {
  const std::vector<size_t> starts = Starts(q_lens);
  const size_t n = starts.back(), dim = pages.head_dim;
  const size_t value_dim = pages.value_dim ? pages.value_dim : dim;
  StepResult r{std::vector<float>(n * kHeads * value_dim, kNaN),
               std::vector<float>(kHeads * n, kNaN)};
  options.log_sum_exp = r.lse.data();
  VarlenAttention(
      ConstTensor4::FromTokenMajor(q.data(), 1, n, kHeads, dim), starts.data(),
      s.View(pages),
      Tensor4::FromTokenMajor(r.out.data(), 1, n, kHeads, value_dim), options);
  return r;
}

// Sequence b alone: ScaledDotProductAttention over a view of it, its rows
// of the packed q.
StepResult OneSequence(const Sequences& s, const KVPages& pages, size_t b,
                       const std::vector<size_t>& q_lens,
                       const std::vector<float>& q, AttentionOptions options) {
  const std::vector<size_t> starts = Starts(q_lens);
  const size_t n = starts.back(), m = q_lens[b], dim = pages.head_dim;
  const size_t value_dim = pages.value_dim ? pages.value_dim : dim;
  StepResult r{std::vector<float>(m * kHeads * value_dim, kNaN),
               std::vector<float>(kHeads * m, kNaN)};
  options.log_sum_exp = r.lse.data();
  const KVCacheView view =
      pages.View(1, &s.lengths[b], &s.block_table[b * kBlocksPerSequence],
                 kBlocksPerSequence);
  ScaledDotProductAttention(
      ConstTensor4::FromTokenMajor(q.data() + starts[b] * kHeads * dim, 1, m,
                                   kHeads, dim, kHeads * dim),
      view, Tensor4::FromTokenMajor(r.out.data(), 1, m, kHeads, value_dim),
      options);
  (void)n;
  return r;
}

// Prefill chunks (40 and 300 queries), decodes, a verification of 5 and a
// sequence without queries, against each sequence alone: only the order of
// summation (the key splits follow the batch) may differ.
TEST_P(ServingTest, MixedStepEqualsOneCallPerSequence) {
  const std::vector<size_t> lengths = {40, 250, 7, 130, 64, 33};
  const std::vector<size_t> q_lens = {40, 1, 0, 5, 1, 33};
  for (KVType type : {KVType::kF32, KVType::kBF16, KVType::kInt8,
                      KVType::kFp8E4M3, KVType::kQ8_0}) {
    const size_t dim = ElementTraitsOf(type).values > 1 ? 64 : 24;
    Pool pool(type, dim);
    const Sequences s(lengths);
    WriteAll(s, pool.pages, 3);
    const size_t n = Starts(q_lens).back();
    const std::vector<float> q = RandomVector(n * kHeads * dim, 4);
    for (size_t window : {size_t{0}, size_t{20}}) {
      AttentionOptions options;
      options.mask.causal = true;
      options.mask.window = window;
      const StepResult step = Varlen(s, pool.pages, q_lens, q, options);
      const std::vector<size_t> starts = Starts(q_lens);
      for (size_t b = 0; b < lengths.size(); ++b) {
        if (q_lens[b] == 0) continue;
        const StepResult alone =
            OneSequence(s, pool.pages, b, q_lens, q, options);
        const std::string what = std::string(ElementTraitsOf(type).name) +
                                 " window " + std::to_string(window) +
                                 " sequence " + std::to_string(b);
        std::vector<double> expected(alone.out.begin(), alone.out.end());
        std::vector<float> rows(
            step.out.begin() + starts[b] * kHeads * dim,
            step.out.begin() + starts[b + 1] * kHeads * dim);
        test::ExpectNear(rows, expected, 1e-5, what);
        for (size_t h = 0; h < kHeads; ++h) {
          for (size_t i = 0; i < q_lens[b]; ++i) {
            EXPECT_NEAR(step.lse[h * n + starts[b] + i],
                        alone.lse[h * q_lens[b] + i], 1e-5)
                << what;
          }
        }
      }
    }
  }
}

// A step of single-token decodes is the (num_seqs, heads, 1, head_dim) call.
TEST_P(ServingTest, DecodeStepIsTheBatchedCallBitForBit) {
  const std::vector<size_t> lengths = {200, 3, 77, 256, 1};
  const std::vector<size_t> q_lens(lengths.size(), 1);
  for (KVType type : {KVType::kF32, KVType::kF16, KVType::kQ4_0}) {
    const size_t dim = ElementTraitsOf(type).values > 1 ? 64 : 40;
    Pool pool(type, dim);
    const Sequences s(lengths);
    WriteAll(s, pool.pages, 5);
    const std::vector<float> q = RandomVector(lengths.size() * kHeads * dim, 6);
    AttentionOptions options;
    options.mask.causal = true;
    const StepResult step = Varlen(s, pool.pages, q_lens, q, options);
    std::vector<float> batched(step.out.size(), kNaN);
    ScaledDotProductAttention(
        ConstTensor4::FromTokenMajor(q.data(), lengths.size(), 1, kHeads, dim),
        s.View(pool.pages),
        Tensor4::FromTokenMajor(batched.data(), lengths.size(), 1, kHeads, dim),
        options);
    EXPECT_EQ(std::memcmp(step.out.data(), batched.data(),
                          batched.size() * sizeof(float)),
              0)
        << ElementTraitsOf(type).name;
  }
}

// Slot writes store KVCache::Append's bits, scales included, wherever the
// slots are.
TEST_P(ServingTest, SlotWritesAreAppendsBitForBit) {
  for (KVType type :
       {KVType::kF32, KVType::kBF16, KVType::kInt8, KVType::kFp8E5M2,
        KVType::kQ8_0, KVType::kQ4_0, KVType::kQ4_1, KVType::kIQ4_NL}) {
    const size_t dim = ElementTraitsOf(type).values > 1 ? 32 : 12;
    const std::vector<size_t> lengths = {21, 50};
    KVCacheConfig config;
    config.type = type;
    config.block_size = kBlockSize;
    config.key_scale = 0.5f;
    config.value_scale = 2.0f;
    KVCache cache(lengths.size(), kKVHeads, kBlocksPerSequence * kBlockSize,
                  dim, config);
    Pool pool(type, dim);
    const Sequences s(lengths);
    for (size_t b = 0; b < lengths.size(); ++b) {
      const size_t n = lengths[b];
      const std::vector<float> k = RandomVector(kKVHeads * n * dim, 10 + b);
      const std::vector<float> v = RandomVector(kKVHeads * n * dim, 20 + b);
      // The cache takes (1, kv_heads, n, dim); the pool the same tokens.
      const ConstTensor4 keys =
          ConstTensor4::FromTokenMajor(k.data(), 1, n, kKVHeads, dim);
      const ConstTensor4 values =
          ConstTensor4::FromTokenMajor(v.data(), 1, n, kKVHeads, dim);
      cache.Append(keys, values, {b});
      std::vector<int64_t> slots(n);
      for (size_t t = 0; t < n; ++t) slots[t] = s.Slot(b, t);
      WriteKVSlots(keys, values, slots.data(), pool.pages);
    }
    const KVCacheView a = cache.View(), p = s.View(pool.pages);
    const size_t row_bytes = ElementBytes(type, dim);
    for (size_t b = 0; b < lengths.size(); ++b) {
      for (size_t h = 0; h < kKVHeads; ++h) {
        for (size_t t = 0; t < lengths[b]; ++t) {
          const auto at = [&](const KVCacheView& v, const void* base) {
            const size_t block =
                v.block_table[b * v.blocks_per_sequence + t / kBlockSize];
            return static_cast<const uint8_t*>(base) +
                   ElementBytes(type, block * v.block_stride +
                                          h * v.head_stride +
                                          t % kBlockSize * v.row_stride);
          };
          const std::string what = std::string(ElementTraitsOf(type).name) +
                                   " token " + std::to_string(t);
          ASSERT_EQ(std::memcmp(at(a, a.keys), at(p, p.keys), row_bytes), 0)
              << what;
          ASSERT_EQ(std::memcmp(at(a, a.values), at(p, p.values), row_bytes), 0)
              << what;
          if (!ElementTraitsOf(type).scaled) continue;
          const auto scale = [&](const KVCacheView& v, const float* base) {
            const size_t block =
                v.block_table[b * v.blocks_per_sequence + t / kBlockSize];
            return base[block * v.scale_block_stride + h * v.scale_head_stride +
                        t % kBlockSize];
          };
          ASSERT_EQ(scale(a, a.key_scales), scale(p, p.key_scales)) << what;
          ASSERT_EQ(scale(a, a.value_scales), scale(p, p.value_scales)) << what;
        }
      }
    }
  }
}

// MLA's latent pool: one row per token, values its first value_dim
// elements read with the keys' scales (the pool's value scales, 2 and 7,
// are not), against a pool holding them as separate values with those
// scales; every type. The issue 76 reproducer is c_api_test.c's.
TEST_P(ServingTest, LatentPagesServeValuesFromKeyRows) {
  const size_t dim = 64, value_dim = 32;
  const std::vector<size_t> lengths = {30, 90};
  const std::vector<size_t> q_lens = {30, 1};
  const Sequences s(lengths);
  const size_t n = Starts(q_lens).back();
  const std::vector<float> q = RandomVector(n * kHeads * dim, 9);
  AttentionOptions options;
  options.mask.causal = true;
  for (const KVType type : test::AllElementTypes()) {
    const std::string name = ElementTraitsOf(type).name;
    Pool latent(type, dim, value_dim, /*latent=*/true);
    WriteAll(s, latent.pages, 8, /*latent=*/true);
    // The same rows as keys, their first value_dim elements as values.
    Pool split(type, dim, value_dim);
    std::memcpy(split.keys.data(), latent.keys.data(), latent.keys.size());
    std::memcpy(split.values.data(), latent.keys.data(), latent.keys.size());
    split.key_scales = split.value_scales = latent.key_scales;
    split.pages.value_scale = split.pages.key_scale;
    const StepResult a = Varlen(s, latent.pages, q_lens, q, options);
    const StepResult b = Varlen(s, split.pages, q_lens, q, options);
    EXPECT_EQ(
        std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)),
        0)
        << name;
    EXPECT_EQ(
        std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)),
        0)
        << name;
    // Null value scales are not asked for.
    latent.pages.value_scales = nullptr;
    const StepResult c = Varlen(s, latent.pages, q_lens, q, options);
    EXPECT_EQ(
        std::memcmp(a.out.data(), c.out.data(), a.out.size() * sizeof(float)),
        0)
        << name;
  }
}

// A draft tree (root 0; 1 and 2 its children; 3 under 1, 4 under 2) in a
// step beside a causal decode: each draft token sees the cached tokens, its
// ancestors and itself, as the dense call with the same boolean mask.
TEST_P(ServingTest, TreeMaskShowsEachDraftItsAncestors) {
  const size_t dim = 16, cached = 37, n = 5;
  const size_t parent[n] = {n, 0, 0, 1, 2};  // n: the root.
  const std::vector<size_t> lengths = {cached + n, 20};
  const std::vector<size_t> q_lens = {n, 1};
  Pool pool(KVType::kF32, dim);
  const Sequences s(lengths);
  WriteAll(s, pool.pages, 11);
  std::vector<uint64_t> bits(1, 0);
  std::vector<uint8_t> hidden(kHeads * n * (cached + n), 0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      bool sees = false;
      for (size_t a = i; a != n; a = parent[a]) sees = sees || a == j;
      if (sees) bits[0] |= uint64_t{1} << (i * n + j);
      for (size_t h = 0; h < kHeads; ++h) {
        hidden[(h * n + i) * (cached + n) + cached + j] = sees ? 0 : 1;
      }
    }
  }
  const size_t offsets[2] = {0, AttentionMask::kNoTree};
  const std::vector<float> q = RandomVector((n + 1) * kHeads * dim, 12);
  AttentionOptions options;
  options.mask.causal = true;
  options.mask.tree_bits = bits.data();
  options.mask.tree_offsets = offsets;
  const StepResult step = Varlen(s, pool.pages, q_lens, q, options);
  // The first sequence's keys and values back as float tensors.
  std::vector<float> k(kKVHeads * (cached + n) * dim);
  std::vector<float> v(k.size());
  for (size_t h = 0; h < kKVHeads; ++h) {
    for (size_t t = 0; t < cached + n; ++t) {
      const size_t at = static_cast<size_t>(s.Slot(0, t)) / kBlockSize *
                            pool.pages.block_stride +
                        h * pool.pages.head_stride +
                        static_cast<size_t>(s.Slot(0, t)) % kBlockSize * dim;
      std::memcpy(&k[(h * (cached + n) + t) * dim],
                  reinterpret_cast<const float*>(pool.keys.data()) + at,
                  dim * sizeof(float));
      std::memcpy(&v[(h * (cached + n) + t) * dim],
                  reinterpret_cast<const float*>(pool.values.data()) + at,
                  dim * sizeof(float));
    }
  }
  std::vector<float> dense(n * kHeads * dim, kNaN);
  AttentionOptions boolean;
  boolean.mask.boolean = Tensor4View<const uint8_t>::Dense(
      hidden.data(), 1, kHeads, n, cached + n);
  ScaledDotProductAttention(
      ConstTensor4::FromTokenMajor(q.data(), 1, n, kHeads, dim),
      ConstTensor4::Dense(k.data(), 1, kKVHeads, cached + n, dim),
      ConstTensor4::Dense(v.data(), 1, kKVHeads, cached + n, dim),
      Tensor4::FromTokenMajor(dense.data(), 1, n, kHeads, dim), boolean);
  test::ExpectNear(
      std::vector<float>(step.out.begin(), step.out.begin() + dense.size()),
      std::vector<double>(dense.begin(), dense.end()), 1e-6, "tree");
  // The decode beside it is untouched by the tree.
  options.mask.tree_offsets = nullptr;
  options.mask.tree_bits = nullptr;
  const StepResult plain = Varlen(s, pool.pages, q_lens, q, options);
  EXPECT_EQ(std::memcmp(step.out.data() + dense.size(),
                        plain.out.data() + dense.size(),
                        kHeads * dim * sizeof(float)),
            0);
  // Trees are for attention over a cache.
  std::vector<float> scores(kHeads * n * (cached + n), 0.0f);
  AttentionMask tree;
  tree.tree_bits = bits.data();
  tree.tree_offsets = offsets;
  ExpectInvalid(
      [&] {
        Softmax(ConstTensor4::Dense(scores.data(), 1, kHeads, n, cached + n),
                Tensor4::Dense(scores.data(), 1, kHeads, n, cached + n), 1.0f,
                tree);
      },
      "draft trees are for attention over a cache");
}

// A sequence moved between caches of other layouts, in two pieces, gives
// the bits attention gave over the original.
TEST_P(ServingTest, MovedSequencesAttendAsBefore) {
  for (KVType type :
       {KVType::kF32, KVType::kInt8, KVType::kFp8E4M3, KVType::kQ4_0}) {
    const size_t dim = ElementTraitsOf(type).values > 1 ? 32 : 12;
    KVCacheConfig paged;
    paged.type = type;
    paged.block_size = 16;
    paged.key_scale = 0.25f;
    KVCacheConfig contiguous = paged;
    contiguous.block_size = 0;
    KVCache from(2, kKVHeads, 200, dim, paged),
        to(3, kKVHeads, 150, dim, contiguous);
    const size_t n = 77;
    const std::vector<float> k = RandomVector(2 * kKVHeads * n * dim, 30);
    const std::vector<float> v = RandomVector(k.size(), 31);
    from.Append(ConstTensor4::Dense(k.data(), 2, kKVHeads, n, dim),
                ConstTensor4::Dense(v.data(), 2, kKVHeads, n, dim));
    std::vector<uint8_t> buffer(from.ExportBytes(n));
    from.Export(1, 0, 30, buffer.data());
    to.Import(2, buffer.data(), 30);
    from.Export(1, 30, n - 30, buffer.data());
    to.Import(2, buffer.data(), n - 30);
    ASSERT_EQ(to.length(2), n);
    const std::vector<float> q = RandomVector(kHeads * dim, 32);
    const auto attend = [&](const KVCache& cache, size_t b) {
      KVCacheView view = cache.View();
      view.batch = 1;
      view.lengths += b;
      if (view.block_table != nullptr) {
        view.block_table += b * view.blocks_per_sequence;
      } else {
        view.keys = static_cast<const uint8_t*>(view.keys) +
                    ElementBytes(type, b * view.block_stride);
        view.values = static_cast<const uint8_t*>(view.values) +
                      ElementBytes(type, b * view.block_stride);
        if (view.key_scales != nullptr) {
          view.key_scales += b * view.scale_block_stride;
          view.value_scales += b * view.scale_block_stride;
        }
      }
      std::vector<float> out(kHeads * dim, kNaN);
      ScaledDotProductAttention(
          ConstTensor4::Dense(q.data(), 1, kHeads, 1, dim), view,
          Tensor4::Dense(out.data(), 1, kHeads, 1, dim));
      return out;
    };
    const std::vector<float> before = attend(from, 1), after = attend(to, 2);
    EXPECT_EQ(
        std::memcmp(before.data(), after.data(), before.size() * sizeof(float)),
        0)
        << ElementTraitsOf(type).name;
    // Past the capacity (77 more): an error, nothing changed.
    from.Export(1, 0, n, buffer.data());
    ExpectInvalid([&] { to.Import(2, buffer.data(), n); },
                  {"KVCache::Import: ", "exceeds the capacity (150)"});
    EXPECT_EQ(to.length(2), n);
    ExpectInvalid([&] { from.Export(0, 70, 8, buffer.data()); },
                  "tokens [70, 70 + 8) are not within sequence 0's 77");
  }
}

// A bf16 cache of 16-token pages, rolling with `window` (0: not) over a
// pool of `num_blocks` (0: enough for every token).
KVCacheConfig Rolling(size_t window, size_t num_blocks) {
  KVCacheConfig config;
  config.type = KVType::kBF16;
  config.block_size = 16;
  config.window = window;
  config.num_blocks = num_blocks;
  return config;
}

// A rolling window: 600 positions through a pool of 10 blocks of 16 per
// sequence with a window of 40; every step attends with the bits of a cache
// that keeps every token, and each sequence holds at most window +
// block_size + n - 1 tokens.
TEST_P(ServingTest, RollingWindowKeepsOnlyTheWindow) {
  constexpr size_t kWindow = 40, kDim = 16, kSteps = 600;
  KVCache a(2, kKVHeads, kSteps + 8, kDim, Rolling(kWindow, 2 * 10));
  KVCache b(2, kKVHeads, kSteps + 8, kDim, Rolling(0, 0));
  AttentionOptions options;
  options.mask.causal = true;
  options.mask.window = kWindow;
  size_t n = 7;  // A prefill chunk first, then decodes.
  for (size_t step = 0; a.length(0) + n <= kSteps; ++step, n = 1) {
    const std::vector<float> k = RandomVector(2 * kKVHeads * n * kDim, step);
    const std::vector<float> v = RandomVector(k.size(), step + 1000);
    for (KVCache* cache : {&a, &b}) {
      cache->Append(ConstTensor4::Dense(k.data(), 2, kKVHeads, n, kDim),
                    ConstTensor4::Dense(v.data(), 2, kKVHeads, n, kDim));
    }
    const KVCacheView view = a.View();
    for (size_t seq = 0; seq < 2; ++seq) {
      size_t held = 0;
      for (size_t i = 0; i < view.blocks_per_sequence; ++i) {
        held += view.block_table[seq * view.blocks_per_sequence + i] >= 0;
      }
      ASSERT_LE(held * 16, kWindow + 2 * 16 + n) << "step " << step;
    }
    if (step % 37 != 0) continue;
    const std::vector<float> q = RandomVector(2 * kHeads * n * kDim, step + 7);
    std::vector<float> out_a(q.size(), kNaN), out_b(q.size(), kNaN);
    ScaledDotProductAttention(
        ConstTensor4::Dense(q.data(), 2, kHeads, n, kDim), a.View(),
        Tensor4::Dense(out_a.data(), 2, kHeads, n, kDim), options);
    ScaledDotProductAttention(
        ConstTensor4::Dense(q.data(), 2, kHeads, n, kDim), b.View(),
        Tensor4::Dense(out_b.data(), 2, kHeads, n, kDim), options);
    ASSERT_EQ(
        std::memcmp(out_a.data(), out_b.data(), out_a.size() * sizeof(float)),
        0)
        << "step " << step;
  }
  ASSERT_GT(a.length(0), 500u);
  // What was released is out of reach, with errors that say so.
  const std::vector<float> q = RandomVector(2 * kHeads * kDim, 5);
  std::vector<float> out(q.size(), kNaN);
  ExpectInvalid(
      [&] {
        ScaledDotProductAttention(
            ConstTensor4::Dense(q.data(), 2, kHeads, 1, kDim), a.View(),
            Tensor4::Dense(out.data(), 2, kHeads, 1, kDim));
      },
      "(released: its keys are outside every query's mask.window)");
  std::vector<float> keys(kKVHeads * a.length(0) * kDim);
  ExpectInvalid(
      [&] {
        a.Read(0, Tensor3(keys.data(), kKVHeads, a.length(0), kDim),
               Tensor3(keys.data(), kKVHeads, a.length(0), kDim));
      },
      "released by the rolling window: Read gives whole sequences");
  ExpectInvalid([&] { a.Truncate(0, 100); },
                "the rolling window released the tokens before it");
  // A copy shares the held blocks and attends the same.
  a.Copy(0, 1);
  std::vector<float> twice(q.begin(), q.begin() + kHeads * kDim);
  twice.insert(twice.end(), twice.begin(), twice.end());
  ScaledDotProductAttention(
      ConstTensor4::Dense(twice.data(), 2, kHeads, 1, kDim), a.View(),
      Tensor4::Dense(out.data(), 2, kHeads, 1, kDim), options);
  EXPECT_EQ(std::memcmp(out.data(), out.data() + kHeads * kDim,
                        kHeads * kDim * sizeof(float)),
            0);
  a.Reset(0);
  EXPECT_EQ(a.length(0), 0u);
}

// 64K positions with a 4096-token window through a pool sized for the
// window, a block and one 1024-token chunk: 322 blocks, 8% of the 4096 the
// positions would take; the appends would throw if blocks leaked.
TEST(ServingMemory, RollingWindowBoundsTheMemoryOfLongSequences) {
  constexpr size_t kWindow = 4096, kChunk = 1024, kPositions = 65536;
  const size_t num_blocks = (kWindow + 16 + kChunk) / 16 + 1;
  KVCache cache(1, 1, kPositions, 8, Rolling(kWindow, num_blocks));
  const std::vector<float> k = RandomVector(kChunk * 8, 1);
  while (cache.length(0) < kPositions) {
    cache.Append(ConstTensor4::Dense(k.data(), 1, 1, kChunk, 8),
                 ConstTensor4::Dense(k.data(), 1, 1, kChunk, 8));
  }
  EXPECT_EQ(cache.length(0), kPositions);
  // Without the window, the same pool runs out.
  KVCache full(1, 1, kPositions, 8, Rolling(0, num_blocks));
  for (size_t i = 0; i < 5; ++i) {
    full.Append(ConstTensor4::Dense(k.data(), 1, 1, kChunk, 8),
                ConstTensor4::Dense(k.data(), 1, 1, kChunk, 8));
  }
  ExpectInvalid(
      [&] {
        full.Append(ConstTensor4::Dense(k.data(), 1, 1, kChunk, 8),
                    ConstTensor4::Dense(k.data(), 1, 1, kChunk, 8));
      },
      "blocks, but only");
}

TEST(ServingErrors, BadStepsAndSlotsNameThemselvesAndChangeNothing) {
  Pool pool(KVType::kInt8, 8);
  const Sequences s({20, 3});
  WriteAll(s, pool.pages, 1);
  const std::vector<uint8_t> keys = pool.keys;
  const std::vector<float> scales = pool.key_scales;
  const std::vector<float> k = RandomVector(3 * kKVHeads * 8, 2);
  const ConstTensor4 three =
      ConstTensor4::FromTokenMajor(k.data(), 1, 3, kKVHeads, 8);
  const int64_t twice[3] = {4, 9, 4};
  ExpectInvalid([&] { WriteKVSlots(three, three, twice, pool.pages); },
                {"WriteKVSlots: ", "slot 4 appears twice"});
  const int64_t outside[3] = {0, -1, int64_t{kNumBlocks * kBlockSize}};
  ExpectInvalid([&] { WriteKVSlots(three, three, outside, pool.pages); },
                {"slot_mapping[2] (1024) is not a slot of the 64 x 16 pool"});
  const int64_t fine[3] = {0, 1, 2};
  ExpectInvalid(
      [&] {
        WriteKVSlots(three,
                     ConstTensor4::FromTokenMajor(k.data(), 1, 2, kKVHeads, 8),
                     fine, pool.pages);
      },
      {"values has shape (1, 2, 2, 8), expected (1, 2, 3, 8)"});
  EXPECT_EQ(pool.keys, keys);
  EXPECT_EQ(std::memcmp(pool.key_scales.data(), scales.data(),
                        scales.size() * sizeof(float)),
            0);

  const std::vector<float> q = RandomVector(4 * kHeads * 8, 3);
  std::vector<float> out(4 * kHeads * 8, 1.0f);
  const std::vector<float> before = out;
  const auto attend = [&](const std::vector<size_t>& starts,
                          const AttentionOptions& options) {
    VarlenAttention(ConstTensor4::FromTokenMajor(q.data(), 1, 4, kHeads, 8),
                    starts.data(), s.View(pool.pages),
                    Tensor4::FromTokenMajor(out.data(), 1, 4, kHeads, 8),
                    options);
  };
  ExpectInvalid(
      [&] {
        attend({0, 3, 2}, {});
      },
      {"VarlenAttention: ",
       "query_starts[2] (2) is less than "
       "query_starts[1] (3)"});
  ExpectInvalid(
      [&] {
        attend({0, 1, 3}, {});
      },
      {"query_starts[2] (3) differs from the 4 packed tokens"});
  ExpectInvalid(
      [&] {
        attend({0, 0, 4}, {});
      },
      {"kv.lengths[1] (3) is less than its 4 queries"});
  AttentionOptions dropout;
  dropout.dropout = 0.1f;
  ExpectInvalid(
      [&] {
        attend({0, 2, 4}, dropout);
      },
      {"options.dropout (0.1) must be 0"});
  EXPECT_EQ(out, before);
}

// A step planned once and run for two layers (pools of one shape) writes
// and attends with the bits of the unplanned calls: a prefill chunk, decodes,
// a verification, an empty sequence and one without queries, rotated keys,
// windows up to the planned one.
TEST_P(ServingTest, PlannedStepIsTheUnplannedStepBitForBit) {
  const std::vector<size_t> lengths = {40, 250, 0, 130, 64, 7};
  const std::vector<size_t> q_lens = {40, 1, 0, 5, 1, 0};
  const std::vector<size_t> starts = Starts(q_lens);
  const size_t n = starts.back();
  for (KVType type : {KVType::kF32, KVType::kBF16, KVType::kQ8_0}) {
    const size_t dim = ElementTraitsOf(type).values > 1 ? 64 : 24;
    const Sequences s(lengths);
    std::vector<int64_t> slots;
    for (size_t b = 0; b < lengths.size(); ++b) {
      for (size_t t = lengths[b] - q_lens[b]; t < lengths[b]; ++t) {
        slots.push_back(s.Slot(b, t));
      }
    }
    slots[3] = -1;  // A token not stored.
    VarlenStep step;
    step.num_seqs = lengths.size();
    step.query_starts = starts.data();
    step.seq_lens = s.lengths.data();
    step.block_table = s.block_table.data();
    step.blocks_per_sequence = kBlocksPerSequence;
    step.slot_mapping = slots.data();
    RopeOptions rope;
    rope.theta = 10000.0f;
    const std::vector<float> q = RandomVector(n * kHeads * dim, 4);
    const std::vector<float> k = RandomVector(n * kKVHeads * dim, 5);
    const std::vector<float> v = RandomVector(n * kKVHeads * dim, 6);
    const ConstTensor4 keys =
        ConstTensor4::FromTokenMajor(k.data(), 1, n, kKVHeads, dim);
    const ConstTensor4 values =
        ConstTensor4::FromTokenMajor(v.data(), 1, n, kKVHeads, dim);
    for (const size_t max_window : {size_t{0}, size_t{20}}) {
      Pool planned_pool(type, dim), pool(type, dim);
      WriteAll(s, planned_pool.pages, 3);
      WriteAll(s, pool.pages, 3);
      const VarlenPlan plan(step, planned_pool.pages, max_window);
      EXPECT_EQ(plan.num_tokens(), n);
      plan.WriteKVSlots(keys, values, planned_pool.pages, &rope);
      WriteKVSlots(keys, values, step, pool.pages, &rope);
      EXPECT_EQ(planned_pool.keys, pool.keys);
      EXPECT_EQ(planned_pool.values, pool.values);
      for (const size_t window : {max_window, size_t{max_window / 2}}) {
        if (max_window != 0 && window == 0) continue;
        AttentionOptions options;
        options.mask.causal = true;
        options.mask.window = window;
        StepResult planned{std::vector<float>(n * kHeads * dim, kNaN),
                           std::vector<float>(kHeads * n, kNaN)};
        StepResult unplanned = planned;
        options.log_sum_exp = planned.lse.data();
        plan.Attention(
            ConstTensor4::FromTokenMajor(q.data(), 1, n, kHeads, dim),
            planned_pool.pages,
            Tensor4::FromTokenMajor(planned.out.data(), 1, n, kHeads, dim),
            options);
        options.log_sum_exp = unplanned.lse.data();
        VarlenAttention(
            ConstTensor4::FromTokenMajor(q.data(), 1, n, kHeads, dim), step,
            pool.pages,
            Tensor4::FromTokenMajor(unplanned.out.data(), 1, n, kHeads, dim),
            options);
        const std::string what = std::string(ElementTraitsOf(type).name) +
                                 " window " + std::to_string(window);
        EXPECT_EQ(std::memcmp(planned.out.data(), unplanned.out.data(),
                              planned.out.size() * sizeof(float)),
                  0)
            << what;
        EXPECT_EQ(std::memcmp(planned.lse.data(), unplanned.lse.data(),
                              planned.lse.size() * sizeof(float)),
                  0)
            << what;
      }
    }
  }
}

// A plan refuses, once, what the unplanned calls refuse at every call; its
// calls refuse pages of another shape, tensors of another step and windows
// wider than it checked, and leave the pool and outputs as they were.
TEST(ServingErrors, PlansCheckTheStepOnceAndEachLayersInputs) {
  Pool pool(KVType::kInt8, 8);
  const Sequences s({20, 3});
  WriteAll(s, pool.pages, 1);
  const std::vector<size_t> starts = {0, 1, 3};
  std::vector<int64_t> slots = {s.Slot(0, 19), s.Slot(1, 1), s.Slot(1, 2)};
  VarlenStep step;
  step.num_seqs = 2;
  step.query_starts = starts.data();
  step.seq_lens = s.lengths.data();
  step.block_table = s.block_table.data();
  step.blocks_per_sequence = kBlocksPerSequence;
  step.slot_mapping = slots.data();

  VarlenStep bad = step;
  const std::vector<size_t> backwards = {0, 2, 1};
  bad.query_starts = backwards.data();
  ExpectInvalid([&] { VarlenPlan(bad, pool.pages); },
                {"VarlenPlan: ", "query_starts[2] (1) is less than"});
  bad = step;
  bad.block_table = nullptr;  // Pages are read through a table, always.
  ExpectInvalid([&] { VarlenPlan(bad, pool.pages); },
                {"VarlenPlan: ", "step.block_table is null"});
  ExpectInvalid(
      [&] {
        std::vector<float> q(3 * kHeads * 8), o(q.size());
        VarlenAttention(ConstTensor4::FromTokenMajor(q.data(), 1, 3, kHeads, 8),
                        bad, pool.pages,
                        Tensor4::FromTokenMajor(o.data(), 1, 3, kHeads, 8));
      },
      {"VarlenAttention: ", "step.block_table is null"});
  bad = step;
  std::vector<int64_t> twice = {5, 9, 5};
  bad.slot_mapping = twice.data();
  ExpectInvalid([&] { VarlenPlan(bad, pool.pages); },
                {"VarlenPlan: ", "slot 5 appears twice in step.slot_mapping"});
  std::vector<int32_t> table = s.block_table;
  table[1] = int32_t{kNumBlocks};
  bad = step;
  bad.block_table = table.data();
  ExpectInvalid([&] { VarlenPlan(bad, pool.pages); },
                {"VarlenPlan: ", "(64) is not a block of the 64 in the pool"});
  // A block before the window released: planned for windows up to 4.
  table = s.block_table;
  table[0] = -1;
  bad = step;
  bad.block_table = table.data();
  ExpectInvalid([&] { VarlenPlan(bad, pool.pages); }, {"released"});
  const VarlenPlan windowed(bad, pool.pages, 4);

  const VarlenPlan plan(step, pool.pages);
  const VarlenPlan none;  // A step of no sequence: no pages have its shape.
  EXPECT_EQ(none.num_tokens(), 0u);
  const std::vector<uint8_t> keys = pool.keys;
  const std::vector<float> q = RandomVector(3 * kHeads * 8, 3);
  std::vector<float> out(3 * kHeads * 8, 1.0f);
  const std::vector<float> before = out;
  const auto attend = [&](const VarlenPlan& p, const KVPages& pages,
                          size_t tokens, const AttentionOptions& options) {
    p.Attention(
        ConstTensor4::FromTokenMajor(q.data(), 1, tokens, kHeads, 8), pages,
        Tensor4::FromTokenMajor(out.data(), 1, tokens, kHeads, 8), options);
  };
  Pool other(KVType::kInt8, 16);
  ExpectInvalid([&] { attend(none, pool.pages, 3, {}); },
                {"differ from the planned shape"});
  ExpectInvalid([&] { attend(plan, other.pages, 3, {}); },
                {"VarlenPlan::Attention: ", "head_dim 16",
                 "differ from the planned shape", "head_dim 8"});
  ExpectInvalid([&] { attend(plan, pool.pages, 2, {}); },
                {"q has 2 tokens but the plan's step 3"});
  AttentionOptions wide;
  wide.mask.causal = true;
  wide.mask.window = 8;
  ExpectInvalid([&] { attend(windowed, pool.pages, 3, wide); },
                {"mask.window (8) must lie in [1, 4]"});
  ExpectInvalid([&] { attend(windowed, pool.pages, 3, {}); },
                {"mask.window (0) must lie in [1, 4]"});
  EXPECT_EQ(out, before);
  const std::vector<float> k = RandomVector(3 * kKVHeads * 8, 2);
  const ConstTensor4 three =
      ConstTensor4::FromTokenMajor(k.data(), 1, 3, kKVHeads, 8);
  ExpectInvalid(
      [&] {
        plan.WriteKVSlots(
            ConstTensor4::FromTokenMajor(k.data(), 1, 2, kKVHeads, 8), three,
            pool.pages);
      },
      {"VarlenPlan::WriteKVSlots: ",
       "keys has 2 tokens but the plan's step 3"});
  ExpectInvalid([&] { plan.WriteKVSlots(three, three, other.pages); },
                {"differ from the planned shape"});
  EXPECT_EQ(pool.keys, keys);
  // The planned calls then run.
  plan.WriteKVSlots(three, three, pool.pages);
  attend(plan, pool.pages, 3, {});
  for (float x : out) EXPECT_TRUE(std::isfinite(x));
}

// A write with RoPE stores what ApplyRope then WriteKVSlots store, bit for
// bit: positions out of order and repeated, partial and interleaved
// rotations, a skipped token, every type.
TEST_P(ServingTest, FusedRopeWriteIsRotateThenWrite) {
  const size_t n = 9;
  const int64_t slots[n] = {3, 4, 5, 6, 40, -1, 41, 100, 7};
  const size_t positions[n] = {0, 1, 2, 3, 1000, 77, 4097, 5, 3};
  for (const KVType type : test::AllElementTypes()) {
    const size_t dim = ElementTraitsOf(type).values > 1 ? 64 : 40;
    for (const RopePairing pairing :
         {RopePairing::kHalfSplit, RopePairing::kInterleaved}) {
      RopeOptions rope;
      rope.pairing = pairing;
      rope.rotary_dim = pairing == RopePairing::kHalfSplit ? 0 : 16;
      rope.rotary_offset = pairing == RopePairing::kHalfSplit ? 0 : 8;
      rope.theta = 500000.0f;
      std::vector<float> k = RandomVector(n * kKVHeads * dim, 31);
      const std::vector<float> v = RandomVector(n * kKVHeads * dim, 32);
      Pool fused(type, dim), separate(type, dim);
      const ConstTensor4 values =
          ConstTensor4::FromTokenMajor(v.data(), 1, n, kKVHeads, dim);
      WriteKVSlots(ConstTensor4::FromTokenMajor(k.data(), 1, n, kKVHeads, dim),
                   values, slots, fused.pages, rope, positions);
      RopeOptions per_token = rope;
      per_token.positions = positions;
      ApplyRope(Tensor4::FromTokenMajor(k.data(), n, 1, kKVHeads, dim),
                per_token);
      WriteKVSlots(ConstTensor4::FromTokenMajor(k.data(), 1, n, kKVHeads, dim),
                   values, slots, separate.pages);
      EXPECT_EQ(fused.keys, separate.keys) << ElementTraitsOf(type).name;
      EXPECT_EQ(fused.values, separate.values) << ElementTraitsOf(type).name;
      EXPECT_EQ(std::memcmp(fused.key_scales.data(), separate.key_scales.data(),
                            fused.key_scales.size() * sizeof(float)),
                0);
    }
  }
  Pool pool(KVType::kF32, 8);
  const std::vector<float> k(kKVHeads * 8, 1.0f);
  const ConstTensor4 one =
      ConstTensor4::FromTokenMajor(k.data(), 1, 1, kKVHeads, 8);
  RopeOptions rope;
  const std::vector<uint8_t> before = pool.keys;
  ExpectInvalid(
      [&] { WriteKVSlots(one, one, slots, pool.pages, rope, nullptr); },
      {"WriteKVSlots: ", "positions is null"});
  rope.positions = positions;
  ExpectInvalid(
      [&] { WriteKVSlots(one, one, slots, pool.pages, rope, positions); },
      {"rope.positions must be null"});
  rope.positions = nullptr;
  rope.rotary_dim = 10;
  ExpectInvalid(
      [&] { WriteKVSlots(one, one, slots, pool.pages, rope, positions); },
      {"rope.rotary_offset (0) + .rotary_dim (10) exceeds the head_dim (8)"});
  EXPECT_EQ(pool.keys, before);
}

// Pool sizes and operations (kernels.h): plain byte moves and widening, so
// one target suffices.
const std::vector<KVType> kEveryType = test::AllElementTypes();

size_t DimOf(KVType type) { return ElementTraitsOf(type).values > 1 ? 64 : 24; }

// A pool's bytes and scales, for "nothing changed" and byte comparisons.
std::vector<uint8_t> Snapshot(const Pool& pool) {
  std::vector<uint8_t> all(pool.keys);
  all.insert(all.end(), pool.values.begin(), pool.values.end());
  for (const std::vector<float>* s : {&pool.key_scales, &pool.value_scales}) {
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(s->data());
    all.insert(all.end(), bytes, bytes + s->size() * sizeof(float));
  }
  return all;
}

// One token's stored bytes and scales in every head.
std::vector<uint8_t> SlotBytes(const Pool& pool, size_t slot) {
  const KVPages& p = pool.pages;
  const size_t value_dim = p.value_dim ? p.value_dim : p.head_dim;
  std::vector<uint8_t> bytes;
  for (size_t h = 0; h < p.kv_heads; ++h) {
    const size_t at = slot / p.block_size * p.block_stride + h * p.head_stride +
                      slot % p.block_size * p.row_stride;
    const uint8_t* k = pool.keys.data() + ElementBytes(p.type, at);
    bytes.insert(bytes.end(), k, k + ElementBytes(p.type, p.head_dim));
    if (!pool.values.empty()) {
      const uint8_t* v = pool.values.data() + ElementBytes(p.type, at);
      bytes.insert(bytes.end(), v, v + ElementBytes(p.type, value_dim));
    }
    if (!ElementTraitsOf(p.type).scaled) continue;
    const size_t s = slot / p.block_size * p.scale_block_stride +
                     h * p.scale_head_stride + slot % p.block_size;
    for (const float scale : {pool.key_scales[s], pool.value_scales[s]}) {
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&scale);
      bytes.insert(bytes.end(), b, b + sizeof(float));
    }
  }
  return bytes;
}

TEST(PoolOperations, DenseLayoutIsTheHandMadeOne) {
  for (const KVType type : kEveryType) {
    const std::string name = ElementTraitsOf(type).name;
    const size_t dim = DimOf(type), value_dim = dim / 2;
    const Pool pool(type, dim, value_dim);
    const KVPages p =
        DenseKVPages(type, kKVHeads, dim, value_dim, kBlockSize, kNumBlocks);
    const KVPages& q = pool.pages;
    EXPECT_EQ(p.row_stride, q.row_stride) << name;
    EXPECT_EQ(p.head_stride, q.head_stride) << name;
    EXPECT_EQ(p.block_stride, q.block_stride) << name;
    const KVPagesSize size = SizeOf(p);
    EXPECT_EQ(size.key_bytes, pool.keys.size()) << name;
    // Values read value_dim of their last row: the pool's last half row
    // is not reached.
    EXPECT_EQ(size.value_bytes,
              pool.values.size() - ElementBytes(type, dim - value_dim))
        << name;
    if (ElementTraitsOf(type).scaled) {
      EXPECT_EQ(p.scale_block_stride, q.scale_block_stride);
      EXPECT_EQ(p.scale_head_stride, q.scale_head_stride);
      EXPECT_EQ(size.scales, pool.key_scales.size());
    } else {
      EXPECT_EQ(size.scales, 0u) << name;
    }
  }
  EXPECT_EQ(ElementTraitsOf(KVType::kQ8_0).bytes, 34u);
  EXPECT_EQ(ElementTraitsOf(KVType::kQ4_0).bytes, 18u);
  ExpectInvalid([] { DenseKVPages(KVType::kF32, 2, 8, 0, 12, 4); },
                {"DenseKVPages: ", "block_size (12) is not a power of two"});
  ExpectInvalid([] { DenseKVPages(KVType::kQ4_0, 2, 48, 0, 16, 4); },
                {"type q4_0 stores blocks of 32 elements, but head_dim (48)"});
  ExpectInvalid(
      [] {
        DenseKVPages(KVType::kF32, size_t{1} << 40, 1 << 20, 0, 1 << 10, 4);
      },
      {"DenseKVPages: ", "overflows"});
}

// FirstKeyRead is the rule attention applies: a released block before it
// is never read, one at it is refused.
TEST(PoolOperations, FirstKeyReadIsWhatAttentionReads) {
  EXPECT_EQ(FirstKeyRead(100, 1, 0), 0u);
  EXPECT_EQ(FirstKeyRead(100, 1, 30), 64u);  // 70 down to 16s.
  EXPECT_EQ(FirstKeyRead(100, 1, 30, /*dropout=*/true), 0u);
  EXPECT_EQ(FirstKeyRead(1000, 8, 100), 880u);  // 893 down to 16s.
  EXPECT_EQ(FirstKeyRead(1000, 8, 100, true), 768u);
  EXPECT_EQ(FirstKeyRead(20, 0, 4), 20u);
  EXPECT_EQ(FirstKeyRead(0, 1, 4), 0u);
  EXPECT_EQ(FirstKeyRead(10, 1, 100), 0u);
  const size_t dim = 8, length = 100, window = 30;
  Pool pool(KVType::kF32, dim);
  Sequences s({length});
  WriteAll(s, pool.pages, 3);
  const size_t first = FirstKeyRead(length, 1, window);
  const std::vector<float> q = RandomVector(kHeads * dim, 4);
  std::vector<float> out(kHeads * dim);
  AttentionOptions options;
  options.mask.causal = true;
  options.mask.window = window;
  const auto attend = [&] {
    const std::vector<size_t> starts = {0, 1};
    VarlenAttention(ConstTensor4::FromTokenMajor(q.data(), 1, 1, kHeads, dim),
                    starts.data(), s.View(pool.pages),
                    Tensor4::FromTokenMajor(out.data(), 1, 1, kHeads, dim),
                    options);
  };
  for (size_t block = 0; block < first / kBlockSize; ++block) {
    s.block_table[block] = -1;
  }
  attend();
  s.block_table[first / kBlockSize] = -1;
  ExpectInvalid(attend, {"(-1) is not a block of the 64 in the pool"});
}

// What ReadKVSlots gives is what KVCache::Read gives of the same appends
// (attention's reading, by kv_cache_test), latent pools included.
TEST(PoolOperations, ReadIsWhatAttentionReads) {
  for (const KVType type : kEveryType) {
    for (const bool latent : {false, true}) {
      const std::string name =
          std::string(ElementTraitsOf(type).name) + (latent ? " latent" : "");
      const size_t dim = DimOf(type), value_dim = latent ? dim / 2 : dim;
      const size_t n = 21;
      Pool pool(type, dim, latent ? value_dim : 0, latent);
      KVCacheConfig config;
      config.type = type;
      config.key_scale = pool.pages.key_scale;
      config.value_scale = pool.pages.value_scale;
      config.latent = latent;
      config.value_dim = latent ? value_dim : 0;
      KVCache cache(1, kKVHeads, n, dim, config);
      const std::vector<float> k = RandomVector(kKVHeads * n * dim, 5);
      const std::vector<float> v = RandomVector(kKVHeads * n * dim, 6);
      const ConstTensor4 keys =
          ConstTensor4::FromTokenMajor(k.data(), 1, n, kKVHeads, dim);
      const ConstTensor4 values =
          latent ? ConstTensor4{}
                 : ConstTensor4::FromTokenMajor(v.data(), 1, n, kKVHeads, dim);
      cache.Append(keys, values);
      std::vector<int64_t> slots(n);
      for (size_t t = 0; t < n; ++t) slots[t] = int64_t(3 * t + 5);
      WriteKVSlots(keys, values, slots.data(), pool.pages);
      std::vector<float> held_k(kKVHeads * n * dim),
          held_v(kKVHeads * n * value_dim);
      cache.Read(0, Tensor3(held_k.data(), kKVHeads, n, dim),
                 Tensor3(held_v.data(), kKVHeads, n, value_dim));
      // Read into token-major rows, one slot skipped.
      std::vector<float> read_k(n * kKVHeads * dim, kNaN),
          read_v(n * kKVHeads * value_dim, kNaN);
      slots[4] = -1;
      ReadKVSlots(
          pool.pages, slots.data(),
          Tensor4::FromTokenMajor(read_k.data(), 1, n, kKVHeads, dim),
          Tensor4::FromTokenMajor(read_v.data(), 1, n, kKVHeads, value_dim));
      for (size_t h = 0; h < kKVHeads; ++h) {
        for (size_t t = 0; t < n; ++t) {
          for (size_t c = 0; c < dim; ++c) {
            const float got = read_k[(t * kKVHeads + h) * dim + c];
            if (t == 4) {
              ASSERT_TRUE(std::isnan(got)) << name;
            } else {
              ASSERT_EQ(got, held_k[(h * n + t) * dim + c]) << name;
            }
          }
          for (size_t c = 0; c < value_dim && t != 4; ++c) {
            ASSERT_EQ(read_v[(t * kKVHeads + h) * value_dim + c],
                      held_v[(h * n + t) * value_dim + c])
                << name;
          }
        }
      }
    }
  }
  Pool pool(KVType::kF32, 8);
  std::vector<float> out(kKVHeads * 8);
  const int64_t slot = 1 << 20;
  ExpectInvalid(
      [&] {
        ReadKVSlots(pool.pages, &slot,
                    Tensor4::FromTokenMajor(out.data(), 1, 1, kKVHeads, 8),
                    Tensor4::FromTokenMajor(out.data(), 1, 1, kKVHeads, 8));
      },
      {"ReadKVSlots: ", "values overlap keys"});
  std::vector<float> out_v(kKVHeads * 8);
  ExpectInvalid(
      [&] {
        ReadKVSlots(pool.pages, &slot,
                    Tensor4::FromTokenMajor(out.data(), 1, 1, kKVHeads, 8),
                    Tensor4::FromTokenMajor(out_v.data(), 1, 1, kKVHeads, 8));
      },
      {"slot_mapping[0] (1048576) is not a slot of the 64 x 16 pool"});
}

// Copies move bytes and scales exactly, as if read first: a compaction
// whose sources and targets overlap, and whole blocks.
TEST(PoolOperations, CopiesAreByteExact) {
  for (const KVType type : kEveryType) {
    const std::string name = ElementTraitsOf(type).name;
    const size_t dim = DimOf(type), n = kNumBlocks * kBlockSize;
    Pool pool(type, dim);
    std::vector<int64_t> every(n);
    std::iota(every.begin(), every.end(), 0);
    const std::vector<float> k = RandomVector(n * kKVHeads * dim, 7);
    const std::vector<float> v = RandomVector(n * kKVHeads * dim, 8);
    WriteKVSlots(ConstTensor4::FromTokenMajor(k.data(), 1, n, kKVHeads, dim),
                 ConstTensor4::FromTokenMajor(v.data(), 1, n, kKVHeads, dim),
                 every.data(), pool.pages);
    const Pool before = pool;
    // Accepted drafts at 10, 12 and 13 moved to 10, 11, 12; 12's source is
    // also a target.
    const int64_t from[] = {10, 12, 13, 40}, to[] = {10, 11, 12, 900};
    CopyKVSlots(pool.pages, from, to, 4);
    for (size_t i = 0; i < 4; ++i) {
      ASSERT_EQ(SlotBytes(pool, size_t(to[i])),
                SlotBytes(before, size_t(from[i])))
          << name << " slot " << to[i];
    }
    ASSERT_EQ(SlotBytes(pool, 13), SlotBytes(before, 13)) << name;
    const int32_t blocks_from[] = {3, 9}, blocks_to[] = {9, 20};
    const Pool copied = pool;
    CopyKVBlocks(pool.pages, blocks_from, blocks_to, 2);
    for (size_t i = 0; i < 2; ++i) {
      for (size_t t = 0; t < kBlockSize; ++t) {
        ASSERT_EQ(SlotBytes(pool, blocks_to[i] * kBlockSize + t),
                  SlotBytes(copied, blocks_from[i] * kBlockSize + t))
            << name;
      }
    }
    // Errors change nothing.
    const std::vector<uint8_t> snapshot = Snapshot(pool);
    const int64_t twice[] = {5, 5}, bad[] = {5, -1};
    ExpectInvalid([&] { CopyKVSlots(pool.pages, from, twice, 2); },
                  {"CopyKVSlots: ", "slot 5 appears twice in to"});
    ExpectInvalid([&] { CopyKVSlots(pool.pages, bad, from, 2); },
                  {"from[1] (-1) is not a slot of the 64 x 16 pool"});
    const int32_t block_twice[] = {4, 4}, block_bad[] = {1, 64};
    ExpectInvalid(
        [&] { CopyKVBlocks(pool.pages, blocks_from, block_twice, 2); },
        {"CopyKVBlocks: ", "block 4 appears twice in to"});
    ExpectInvalid([&] { CopyKVBlocks(pool.pages, block_bad, blocks_to, 2); },
                  {"from[1] (64) is not a block of the 64 in the pool"});
    ExpectInvalid([&] { CopyKVSlots(pool.pages, nullptr, to, 1); },
                  {"from is null"});
    EXPECT_EQ(Snapshot(pool), snapshot) << name;
  }
}

// A transfer moves tokens between pages and caches in either direction,
// bit for bit; a wrong type, dims, scales, version or byte is refused
// naming both sides, changing nothing.
TEST(PoolOperations, TransfersAreSelfDescribing) {
  for (const KVType type : kEveryType) {
    const std::string name = ElementTraitsOf(type).name;
    const size_t dim = DimOf(type), n = 37;
    Pool pool(type, dim);
    KVCacheConfig config;
    config.type = type;
    config.block_size = kBlockSize;
    config.key_scale = pool.pages.key_scale;
    config.value_scale = pool.pages.value_scale;
    KVCache cache(2, kKVHeads, 64, dim, config);
    const std::vector<float> k = RandomVector(kKVHeads * n * dim, 8);
    const std::vector<float> v = RandomVector(kKVHeads * n * dim, 9);
    cache.Append(ConstTensor4::FromTokenMajor(k.data(), 1, n, kKVHeads, dim),
                 ConstTensor4::FromTokenMajor(v.data(), 1, n, kKVHeads, dim),
                 {0});
    // Cache -> pages.
    std::vector<uint8_t> buffer(cache.ExportBytes(n));
    ASSERT_EQ(buffer.size(), KVTransferBytes(pool.pages, n)) << name;
    cache.Export(0, 0, n, buffer.data());
    std::vector<int64_t> slots(n);
    for (size_t t = 0; t < n; ++t) slots[t] = int64_t(1000 - 7 * t);
    ImportKVSlots(pool.pages, slots.data(), n, buffer.data(), buffer.size());
    // Pages -> a second sequence of the cache: its bytes are the first's.
    std::vector<uint8_t> back(buffer.size());
    ExportKVSlots(pool.pages, slots.data(), n, back.data(), back.size());
    EXPECT_EQ(back, buffer) << name;
    cache.Import(1, back.data(), n);
    std::vector<uint8_t> again(buffer.size());
    cache.Export(1, 0, n, again.data());
    EXPECT_EQ(again, buffer) << name;

    // Refusals: the pool as it was.
    const std::vector<uint8_t> snapshot = Snapshot(pool);
    const auto import = [&](const std::vector<uint8_t>& b, size_t count) {
      ImportKVSlots(pool.pages, slots.data(), count, b.data(), b.size());
    };
    std::vector<uint8_t> corrupt = buffer;
    corrupt[buffer.size() / 2] ^= 0x10;
    ExpectInvalid([&] { import(corrupt, n); },
                  {"ImportKVSlots: ", "checksum does not match"});
    std::vector<uint8_t> version = buffer;
    version[8] = 2;
    ExpectInvalid([&] { import(version, n); },
                  {"transfer format version (2) is not this library's (1)"});
    ExpectInvalid(
        [&] {
          import(std::vector<uint8_t>(buffer.begin(), buffer.end() - 1), n);
        },
        {"do not hold the 37 tokens"});
    ExpectInvalid([&] { import(buffer, n - 1); },
                  {"the buffer holds 37 tokens, count is 36"});
    // Other dims: both named.
    Pool wider(type, 2 * dim);
    ExpectInvalid(
        [&] {
          ImportKVSlots(wider.pages, slots.data(), n, buffer.data(),
                        buffer.size());
        },
        {"head_dim " + std::to_string(dim) + " value_dim",
         std::string("the target is ") + name + " kv_heads 2 head_dim " +
             std::to_string(2 * dim)});
    const KVType other = type == KVType::kF32 ? KVType::kF16 : KVType::kF32;
    if (ElementTraitsOf(other).values == ElementTraitsOf(type).values) {
      Pool wrong(other, dim);
      ExpectInvalid(
          [&] {
            ImportKVSlots(wrong.pages, slots.data(), n, buffer.data(),
                          buffer.size());
          },
          {std::string("the buffer holds ") + name + " kv_heads 2 head_dim " +
               std::to_string(dim),
           std::string("the target is ") + ElementTraitsOf(other).name});
    }
    EXPECT_EQ(Snapshot(pool), snapshot) << name;
  }
  // An f32 export into an f16 cache (the case), and a bf16 export
  // into an f16 cache of the same size: refused, the cache unchanged.
  for (const KVType from : {KVType::kF32, KVType::kBF16}) {
    KVCacheConfig source_config, target_config;
    source_config.type = from;
    target_config.type = KVType::kF16;
    KVCache source(1, 2, 8, 16, source_config);
    KVCache target(1, 2, 8, 16, target_config);
    const std::vector<float> x = RandomVector(2 * 4 * 16, 1);
    source.Append(ConstTensor4::Dense(x.data(), 1, 2, 4, 16),
                  ConstTensor4::Dense(x.data(), 1, 2, 4, 16));
    std::vector<uint8_t> buffer(source.ExportBytes(4));
    source.Export(0, 0, 4, buffer.data());
    std::vector<uint8_t> big(std::max(buffer.size(), target.ExportBytes(4)));
    std::copy(buffer.begin(), buffer.end(), big.begin());
    ExpectInvalid(
        [&] { target.Import(0, big.data(), 4); },
        {"KVCache::Import: ",
         std::string("the buffer holds ") + ElementTraitsOf(from).name,
         "the target is f16 kv_heads 2 head_dim 16 value_dim 16"});
    EXPECT_EQ(target.length(0), 0u);
  }
}

}  // namespace
}  // namespace simdattn
