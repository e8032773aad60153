// KV caches of every element type and layout, on every SIMD target:
// attention over them against a float64 reference over what they hold
// (KVCache::Read), paged equal to contiguous bit for bit, ragged batches
// against one call per sequence, the stated quantization bounds, the
// sequence operations (truncate, reset, copy, reorder, shared blocks),
// RoPE on append, generation steps and bad arguments.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/attention.h"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "src/ops/decode_pairs.h"
#include "src/ops/kv_rows.h"
#include "src/ops/target_family.h"
#include "tests/test_util.h"
#include "tools/reference/reference.h"

namespace simdattn {
namespace {

using test::AllElementTypes;
using test::BlockElementTypes;
using test::ExpectInvalid;
using test::ExpectNear;
using test::RandomVector;

class KVCacheTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(KVCacheTest);

constexpr size_t kBatch = 3, kKVHeads = 2, kHeads = 4, kHeadDim = 20;
constexpr size_t kCapacity = 600;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Kind {
  KVType type;
  size_t block_size;  // 0: contiguous.
};
const Kind kKinds[] = {
    {KVType::kF32, 0},      {KVType::kF32, 16},    {KVType::kBF16, 0},
    {KVType::kBF16, 64},    {KVType::kF16, 0},     {KVType::kF16, 32},
    {KVType::kInt8, 0},     {KVType::kInt8, 16},   {KVType::kFp8E4M3, 0},
    {KVType::kFp8E4M3, 32}, {KVType::kFp8E5M2, 0}, {KVType::kFp8E5M2, 16}};

// ggml's block types, whose rows hold whole blocks of 32.
const Kind kBlockKinds[] = {{KVType::kQ8_0, 0},  {KVType::kQ8_0, 16},
                            {KVType::kQ4_0, 0},  {KVType::kQ4_0, 32},
                            {KVType::kQ4_1, 16}, {KVType::kIQ4_NL, 0}};
constexpr size_t kBlockHeadDim = 64;

size_t HeadDim(KVType type) {
  return ElementTraitsOf(type).values > 1 ? kBlockHeadDim : kHeadDim;
}

// kKinds, then kBlockKinds.
std::vector<Kind> AllKinds() {
  std::vector<Kind> kinds(std::begin(kKinds), std::end(kKinds));
  kinds.insert(kinds.end(), std::begin(kBlockKinds), std::end(kBlockKinds));
  return kinds;
}

std::string Name(const Kind& kind) {
  return std::string(ElementTraitsOf(kind.type).name) +
         (kind.block_size == 0 ? " contiguous"
                               : " paged" + std::to_string(kind.block_size));
}

// A paged configuration with a pool of `num_blocks`.
KVCacheConfig Paged(size_t block_size, size_t num_blocks) {
  KVCacheConfig config;
  config.block_size = block_size;
  config.num_blocks = num_blocks;
  return config;
}

KVCache MakeCache(const Kind& kind, size_t batch = kBatch) {
  KVCacheConfig config;
  config.type = kind.type;
  config.block_size = kind.block_size;
  return KVCache(batch, kKVHeads, kCapacity, HeadDim(kind.type), config);
}

// Appends n random tokens (seeded) to the listed sequences.
void AppendRandom(KVCache& cache, const std::vector<size_t>& sequences,
                  size_t n, uint64_t seed, float magnitude = 2.0f) {
  const size_t count = sequences.size(), dim = cache.head_dim();
  const std::vector<float> k =
      RandomVector(count * kKVHeads * n * dim, seed, -magnitude, magnitude);
  const std::vector<float> v =
      RandomVector(count * kKVHeads * n * dim, seed + 1, -magnitude, magnitude);
  cache.Append(ConstTensor4::Dense(k.data(), count, kKVHeads, n, dim),
               ConstTensor4::Dense(v.data(), count, kKVHeads, n, dim),
               sequences);
}

// A ragged batch: lengths 45, 300 and 577, appended in uneven chunks to
// different subsets of the sequences.
void FillRagged(KVCache& cache) {
  AppendRandom(cache, {0, 1, 2}, 45, 1);
  AppendRandom(cache, {2, 1}, 200, 2);
  AppendRandom(cache, {1, 2}, 55, 3);
  AppendRandom(cache, {2}, 277, 4);
}

// A sequence's keys and values as the cache holds them.
struct Held {
  std::vector<float> keys, values;  // (kv_heads, length, head_dim)
};
Held Read(const KVCache& cache, size_t b) {
  const size_t length = cache.length(b), dim = cache.head_dim();
  Held held{std::vector<float>(kKVHeads * length * dim),
            std::vector<float>(kKVHeads * length * dim)};
  cache.Read(b, Tensor3(held.keys.data(), kKVHeads, length, dim),
             Tensor3(held.values.data(), kKVHeads, length, dim));
  return held;
}

// One token's row appended as key and value to a one-head cache of
// `config`, read back.
Held StoreRow(const KVCacheConfig& config, const std::vector<float>& row) {
  const size_t dim = row.size();
  KVCache cache(1, 1, 1, dim, config);
  cache.Append(ConstTensor4::Dense(row.data(), 1, 1, 1, dim),
               ConstTensor4::Dense(row.data(), 1, 1, 1, dim));
  Held held{std::vector<float>(dim), std::vector<float>(dim)};
  cache.Read(0, Tensor3(held.keys.data(), 1, 1, dim),
             Tensor3(held.values.data(), 1, 1, dim));
  return held;
}

// softmax(scale q k^T) v in double for the last q_tokens positions of each
// sequence, causal (and windowed when window > 0) or not.
std::vector<double> Reference(const KVCache& cache, const std::vector<float>& q,
                              size_t q_tokens, bool causal, size_t window) {
  const size_t dim = cache.head_dim();
  const double scale = 1.0 / std::sqrt(double(dim));
  std::vector<double> out(kBatch * kHeads * q_tokens * dim, 0.0);
  for (size_t b = 0; b < kBatch; ++b) {
    const Held held = Read(cache, b);
    const size_t length = cache.length(b);
    if (length == 0) continue;  // An empty sequence's rows are zeros.
    for (size_t h = 0; h < kHeads; ++h) {
      const size_t g = h / (kHeads / kKVHeads);
      for (size_t i = 0; i < q_tokens; ++i) {
        const size_t position = length - q_tokens + i;
        const size_t end = causal ? position + 1 : length;
        const size_t begin = window != 0 && end > window ? end - window : 0;
        const float* qrow = &q[((b * kHeads + h) * q_tokens + i) * dim];
        std::vector<double> s(end - begin);
        double max = -INFINITY;
        for (size_t j = begin; j < end; ++j) {
          double dot = 0.0;
          for (size_t c = 0; c < dim; ++c) {
            dot += double(qrow[c]) * held.keys[(g * length + j) * dim + c];
          }
          s[j - begin] = dot * scale;
          max = std::max(max, s[j - begin]);
        }
        double sum = 0.0;
        for (double& x : s) sum += (x = std::exp(x - max));
        double* o = &out[((b * kHeads + h) * q_tokens + i) * dim];
        for (size_t j = begin; j < end; ++j) {
          for (size_t c = 0; c < dim; ++c) {
            o[c] +=
                s[j - begin] / sum * held.values[(g * length + j) * dim + c];
          }
        }
      }
    }
  }
  return out;
}

std::vector<float> Attend(const KVCache& cache, const std::vector<float>& q,
                          size_t q_tokens, bool causal, size_t window = 0,
                          ComputeType compute = ComputeType::kFloat32) {
  const size_t dim = cache.head_dim();
  std::vector<float> out(kBatch * kHeads * q_tokens * dim, kNaN);
  AttentionOptions options;
  options.mask.causal = causal;
  options.mask.window = window;
  options.compute = compute;
  ScaledDotProductAttention(
      ConstTensor4::Dense(q.data(), kBatch, kHeads, q_tokens, dim),
      cache.View(), Tensor4::Dense(out.data(), kBatch, kHeads, q_tokens, dim),
      options);
  return out;
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << what;
}

// Queries per sequence of a prefill block: 40, 80 rows a K/V head, two
// packed query blocks (under emulation 25, 50 rows: still two).
size_t BlockQueries() { return test::Emulated() ? 25 : 40; }

// Decode (1 query), chunked prefill (7 queries) and a prefill block,
// causal, windowed or not (under emulation causal, windowed or not: the
// masks' own tests take the rest), against the float64 reference over what
// the cache holds: the only error is the kernel's float arithmetic.
TEST_P(KVCacheTest, EveryTypeAndLayoutMatchesFloat64Reference) {
  std::vector<std::pair<bool, size_t>> masks = {{true, 0}, {true, 100}};
  if (!test::Emulated()) masks.push_back({false, 0});
  for (const Kind& kind : AllKinds()) {
    KVCache cache = MakeCache(kind);
    FillRagged(cache);
    for (size_t q_tokens : {size_t{1}, size_t{7}, BlockQueries()}) {
      const std::vector<float> q =
          RandomVector(kBatch * kHeads * q_tokens * HeadDim(kind.type), 9);
      for (const auto& [causal, window] : masks) {
        ExpectNear(Attend(cache, q, q_tokens, causal, window),
                   Reference(cache, q, q_tokens, causal, window), 2e-6,
                   Name(kind) + " q_tokens " + std::to_string(q_tokens) +
                       " window " + std::to_string(window));
      }
    }
  }
}

// The caches kInt8 reads (ElementTraits::int8_scores): ggml's blocks of
// integer codes, and int8 rows.
std::vector<Kind> Int8ComputeKinds() {
  std::vector<Kind> kinds;
  for (const Kind& kind : kBlockKinds) {
    if (ElementTraitsOf(kind.type).int8_scores) kinds.push_back(kind);
  }
  kinds.push_back({KVType::kInt8, 0});
  kinds.push_back({KVType::kInt8, 16});
  return kinds;
}

// kInt8 over q8_0, q4_0, iq4_nl and int8 keys: with at most 4 query rows per
// task (2 heads per K/V head here, times 1 or 2 tokens), scores are integer dot
// products with the query quantized per block (per row of 20, a partial
// vector, for int8), so outputs are the float64 reference's over the
// quantized query, to float32's error. One element per 32 is 7, making the
// quantization coarse (d = 7 / 127): float32 attention over the raw query
// lies far outside that tolerance, so the test sees which arithmetic ran.
// Paged equals contiguous bit for bit; a query with a NaN gets NaN, as in
// float32.
TEST_P(KVCacheTest, Int8ComputeIsAttentionOverTheQuantizedQuery) {
  for (const Kind& kind : Int8ComputeKinds()) {
    KVCache cache = MakeCache(kind);
    FillRagged(cache);
    KVCache contiguous = MakeCache({kind.type, 0});
    FillRagged(contiguous);
    const size_t head_dim = HeadDim(kind.type);
    const size_t group = kind.type == KVType::kInt8 ? head_dim : 32;
    for (size_t q_tokens : {size_t{1}, size_t{2}}) {
      std::vector<float> q =
          RandomVector(kBatch * kHeads * q_tokens * head_dim, 11);
      for (size_t e = 5; e < q.size(); e += 32) q[e] = 7.0f;
      std::vector<float> quantized = q;
      reference::QuantizeQueries(quantized, group);
      for (const auto& [causal, window] :
           {std::pair<bool, size_t>{true, 0}, {false, 0}, {true, 100}}) {
        const std::string what = Name(kind) + " q_tokens " +
                                 std::to_string(q_tokens) + " window " +
                                 std::to_string(window);
        const std::vector<float> out =
            Attend(cache, q, q_tokens, causal, window, ComputeType::kInt8);
        const std::vector<double> expected =
            Reference(cache, quantized, q_tokens, causal, window);
        ExpectNear(out, expected, 1e-5, what);
        double float_error = 0.0;
        const std::vector<float> float32 =
            Attend(cache, q, q_tokens, causal, window, ComputeType::kFloat32);
        for (size_t e = 0; e < out.size(); ++e) {
          float_error =
              std::max(float_error, std::abs(float32[e] - expected[e]));
        }
        EXPECT_GT(float_error, 1e-3) << what;
        ExpectSameBits(
            out,
            Attend(contiguous, q, q_tokens, causal, window, ComputeType::kInt8),
            what + " paged against contiguous");
      }
      q[0] = kNaN;
      const std::vector<float> out =
          Attend(cache, q, q_tokens, true, 0, ComputeType::kInt8);
      EXPECT_TRUE(std::isnan(out[0])) << Name(kind);
      const std::vector<double> expected =
          Reference(cache, quantized, q_tokens, true, 0);
      const size_t item = kHeads * q_tokens * head_dim;  // Batch item 0.
      ExpectNear(std::vector<float>(out.begin() + item, out.end()),
                 std::vector<double>(expected.begin() + item, expected.end()),
                 1e-5, Name(kind) + " other sequences");
      // Blocks whose 127 / max overflows float quantize too (scores ~0).
      for (float& x : q) x = 1e-38f;
      const std::vector<float> tiny = Attend(cache, q, q_tokens, true);
      ExpectNear(Attend(cache, q, q_tokens, true, 0, ComputeType::kInt8),
                 std::vector<double>(tiny.begin(), tiny.end()), 1e-5,
                 Name(kind) + " tiny queries");
    }
  }
}

// kInt8 with a query block near float's top over a key block of fp16's
// largest scale: the query's and the key's scales multiplied alone would
// overflow, the score does not (65504 from the second element); outputs
// stay finite.
TEST_P(KVCacheTest, Int8LargeScalesStayFinite) {
  constexpr size_t kDim = 32;
  std::vector<float> k(2 * kDim, 0.0f), v(2 * kDim, 1.0f), q(kDim, 0.0f);
  k[1] = 65504.0f;  // Token 0: d = 65504, codes 1 and 127.
  k[2] = 127.0f * 65504.0f;
  k[kDim + 1] = 1.0f;
  q[0] = 1e36f;
  q[1] = 1.0f;
  KVCacheConfig config;
  config.type = KVType::kQ8_0;
  KVCache cache(1, 1, 2, kDim, config);
  cache.Append(ConstTensor4::Dense(k.data(), 1, 1, 2, kDim),
               ConstTensor4::Dense(v.data(), 1, 1, 2, kDim));
  AttentionOptions options;
  options.scale = 1.0f;
  options.compute = ComputeType::kInt8;
  std::vector<float> out(kDim, kNaN);
  ScaledDotProductAttention(ConstTensor4::Dense(q.data(), 1, 1, 1, kDim),
                            cache.View(),
                            Tensor4::Dense(out.data(), 1, 1, 1, kDim), options);
  // Every value row is q8_0's 1 (d = fp16(1 / 127), codes 127): so is any
  // average of them.
  const float one = ToFloat(ToFloat16(1.0f / 127)) * 127;
  for (float x : out) EXPECT_NEAR(x, one, 1e-6f);
}

TEST_P(KVCacheTest, PagedEqualsContiguousBitForBit) {
  for (const KVType type : test::AllElementTypes()) {
    KVCache contiguous = MakeCache({type, 0});
    FillRagged(contiguous);
    for (size_t block_size : {size_t{16}, size_t{128}, size_t{256}}) {
      KVCache paged = MakeCache({type, block_size});
      FillRagged(paged);
      for (size_t q_tokens : {size_t{1}, BlockQueries()}) {
        const std::vector<float> q =
            RandomVector(kBatch * kHeads * q_tokens * HeadDim(type), 5);
        ExpectSameBits(Attend(paged, q, q_tokens, true),
                       Attend(contiguous, q, q_tokens, true),
                       Name({type, block_size}));
      }
    }
  }
}

// Caches read from memory (internal threshold set low here) of the types
// whose rows decode then asks for at its own pace, contiguous and paged: the
// same bits as without, for one query row per kv head and groups of two.
TEST_P(KVCacheTest, RowsAskedForAtTheirPaceKeepTheirBits) {
  for (const Kind& kind :
       {Kind{KVType::kBF16, 0}, Kind{KVType::kBF16, 16}, Kind{KVType::kF16, 0},
        Kind{KVType::kQ8_0, 0}, Kind{KVType::kQ8_0, 32}}) {
    KVCache cache = MakeCache(kind);
    FillRagged(cache);
    const size_t dim = HeadDim(kind.type);
    for (size_t heads : {kKVHeads, kHeads}) {
      const std::vector<float> q = RandomVector(kBatch * heads * dim, 6);
      const auto attend = [&] {
        std::vector<float> out(q.size(), kNaN);
        ScaledDotProductAttention(
            ConstTensor4::Dense(q.data(), kBatch, heads, 1, dim), cache.View(),
            Tensor4::Dense(out.data(), kBatch, heads, 1, dim));
        return out;
      };
      const std::vector<float> plain = attend();
      std::vector<float> paced;
      {
        const auto forced = test::ForcePolicy([](internal::Policy& p) {
          p.pace_rows_from_memory = true;
          p.from_memory_bytes = 1;
        });
        paced = attend();
      }
      ExpectSameBits(paced, plain, Name(kind));
    }
  }
}

// bf16 arithmetic over many query rows per task (drafts times a group's
// heads: the packed tiles) takes a bf16 cache's words as they lie: the bits
// of float32 keys and values holding the same values, contiguous and paged,
// under a causal mask whose last key holds an infinity only the last row
// sees.
TEST_P(KVCacheTest, BFloat16RowsPairAsTheFloat32RowsOfTheirValues) {
  constexpr size_t kTokens = 300, kQTokens = 8, kGroupHeads = 4 * kKVHeads;
  for (const size_t dim : {size_t{19}, size_t{72}}) {
    std::vector<float> k = RandomVector(kKVHeads * kTokens * dim, 31),
                       v = RandomVector(kKVHeads * kTokens * dim, 32);
    for (std::vector<float>* x : {&k, &v}) {
      for (float& e : *x) e = ToFloat(ToBFloat16(e));
    }
    v[(2 * kTokens - 1) * dim + 2] = std::numeric_limits<float>::infinity();
    const ConstTensor4 keys =
        ConstTensor4::Dense(k.data(), 1, kKVHeads, kTokens, dim);
    const ConstTensor4 values =
        ConstTensor4::Dense(v.data(), 1, kKVHeads, kTokens, dim);
    const std::vector<float> q =
        RandomVector(kGroupHeads * kQTokens * dim, 33, -2, 2);
    const ConstTensor4 queries =
        ConstTensor4::Dense(q.data(), 1, kGroupHeads, kQTokens, dim);
    AttentionOptions options;
    options.compute = ComputeType::kBFloat16;
    options.mask.causal = true;
    std::vector<float> floats(q.size(), kNaN);
    {
      AttentionOptions dense = options;
      dense.mask.causal_offset = kTokens - kQTokens;
      ScaledDotProductAttention(
          queries, keys, values,
          Tensor4::Dense(floats.data(), 1, kGroupHeads, kQTokens, dim), dense);
    }
    // Column 2 of the last token's row in each of kv head 1's heads.
    size_t infinite = 0;
    for (const float x : floats) infinite += std::isinf(x) ? 1 : 0;
    EXPECT_EQ(infinite, kGroupHeads / kKVHeads);
    for (const size_t block_size : {size_t{0}, size_t{16}}) {
      KVCacheConfig config;
      config.type = KVType::kBF16;
      config.block_size = block_size;
      KVCache cache(1, kKVHeads, kTokens, dim, config);
      cache.Append(keys, values);
      std::vector<float> out(q.size(), kNaN);
      ScaledDotProductAttention(
          queries, cache.View(),
          Tensor4::Dense(out.data(), 1, kGroupHeads, kQTokens, dim), options);
      ExpectSameBits(out, floats,
                     "dim " + std::to_string(dim) + " block " +
                         std::to_string(block_size));
    }
  }
}

// Decode reads E4M3 rows straight as float32 bits where the CPU takes
// denormal operands at full speed, else through float16: the same bits,
// with values over E4M3's range (subnormal codes, zeros, saturated ones, a
// NaN code past the first tile), head dims with and without tails, one
// query row per kv head and groups of two and four, contiguous and paged;
// queries of 2^16 or more, whose products could overflow, decline it.
TEST_P(KVCacheTest, DirectE4M3KeepsTheFloat16RoutesBits) {
  constexpr size_t kTokens = 300;
  for (const size_t dim : {size_t{20}, size_t{72}, size_t{128}}) {
    std::vector<float> k = RandomVector(kKVHeads * kTokens * dim, 11),
                       v = RandomVector(kKVHeads * kTokens * dim, 12);
    for (size_t i = 0; i < k.size(); ++i) {
      const int e = static_cast<int>(i * 7 % 19) - 11;  // -11 to 7.
      k[i] = i % 29 == 0 ? 0.0f : std::ldexp(k[i], e);
      v[i] = i % 31 == 0 ? 0.0f : std::ldexp(v[i], -e);
    }
    v[(kTokens + 280) * dim + 3] = kNaN;  // kv head 1, the second tile.
    for (const size_t block_size : {size_t{0}, size_t{16}}) {
      KVCacheConfig config;
      config.type = KVType::kFp8E4M3;
      config.block_size = block_size;
      KVCache cache(1, kKVHeads, kTokens, dim, config);
      cache.Append(ConstTensor4::Dense(k.data(), 1, kKVHeads, kTokens, dim),
                   ConstTensor4::Dense(v.data(), 1, kKVHeads, kTokens, dim));
      for (const size_t heads : {kKVHeads, 2 * kKVHeads, 4 * kKVHeads}) {
        for (const float magnitude : {1.0f, 1e5f}) {
          const std::vector<float> q =
              RandomVector(heads * dim, 13, -magnitude, magnitude);
          const auto attend = [&](bool direct) {
            const auto forced = test::ForcePolicy([&](internal::Policy& p) {
              p.direct_e4m3 = direct;
              p.bf16_decode_pairs = p.fp8_decode_pairs = false;
            });
            std::vector<float> out(q.size());
            ScaledDotProductAttention(
                ConstTensor4::Dense(q.data(), 1, heads, 1, dim), cache.View(),
                Tensor4::Dense(out.data(), 1, heads, 1, dim));
            return out;
          };
          ExpectSameBits(attend(true), attend(false),
                         "dim " + std::to_string(dim) + " block " +
                             std::to_string(block_size) + " heads " +
                             std::to_string(heads) + " |q| " +
                             std::to_string(magnitude));
        }
      }
    }
  }
}

// Decode's fp8 and bf16 products under kBFloat16 on bf16 pairs (where the
// CPU has them) against the float32 route over the same cache and the same
// rounded Q and P: every code's value (subnormals and zeros among them), 1
// to 5 rows per K/V head (5 take the float32 route), head dims within and past
// a vector of 64 codes, contiguous and paged, a NaN code in reach, and an E5M2
// or bf16 infinity in a key. Both sum exact products in float32, so they agree
// to its rounding (BFDOT's round-to-odd sums included). The plan names the
// pairs wherever the target and CPU serve the type.
TEST_P(KVCacheTest, DecodePairsUnderBFloat16MatchTheFloat32Route) {
  constexpr size_t kTokens = 300;
  for (const KVType type :
       {KVType::kFp8E4M3, KVType::kFp8E5M2, KVType::kBF16}) {
    for (const size_t dim : {size_t{20}, size_t{72}, size_t{128}}) {
      std::vector<float> k = RandomVector(kKVHeads * kTokens * dim, 21),
                         v = RandomVector(kKVHeads * kTokens * dim, 22);
      for (size_t i = 0; i < k.size(); ++i) {
        const int e = static_cast<int>(i * 7 % 23) - 16;  // -16 to 6.
        k[i] = i % 29 == 0 ? 0.0f : std::ldexp(k[i], e);
        v[i] = i % 31 == 0 ? 0.0f : std::ldexp(v[i], -e - 8);
      }
      v[(kTokens + 280) * dim + 3] = kNaN;  // kv head 1, the second tile.
      if (type != KVType::kFp8E4M3) {
        k[(kTokens + 100) * dim + 1] = std::numeric_limits<float>::infinity();
      }
      for (const size_t block_size : {size_t{0}, size_t{16}}) {
        KVCacheConfig config;
        config.type = type;
        config.block_size = block_size;
        KVCache cache(1, kKVHeads, kTokens, dim, config);
        cache.Append(ConstTensor4::Dense(k.data(), 1, kKVHeads, kTokens, dim),
                     ConstTensor4::Dense(v.data(), 1, kKVHeads, kTokens, dim));
        for (size_t group = 1; group <= 5; ++group) {
          const size_t heads = group * kKVHeads;
          const std::vector<float> q = RandomVector(heads * dim, 23, -3, 3);
          {
            std::string backend;
            const auto attend = [&](bool pairs) {
              const auto forced = test::ForcePolicy([&](internal::Policy& p) {
                p.bf16_decode_pairs = p.fp8_decode_pairs = pairs;
                p.decode_pair_rows = p.cached_decode_pair_rows = 4;
              });
              std::vector<float> out(q.size());
              AttentionOptions options;
              options.compute = ComputeType::kBFloat16;
              ScaledDotProductAttention(
                  ConstTensor4::Dense(q.data(), 1, heads, 1, dim), cache.View(),
                  Tensor4::Dense(out.data(), 1, heads, 1, dim), options);
              if (pairs) {
                for (const std::string& line : LastAttentionPlan()) {
                  backend += line + "\n";
                }
              }
              return out;
            };
            const std::vector<float> pairs = attend(true),
                                     floats = attend(false);
            const std::string what = Name(Kind{type, block_size}) + " dim " +
                                     std::to_string(dim) + " heads " +
                                     std::to_string(heads);
            if (group <= 4) {
              EXPECT_EQ(backend.find("read in place, bf16 pairs (") !=
                            std::string::npos,
                        internal::DecodePairsUsable(
                            type, internal::ActiveTargetBit()))
                  << what << "\n"
                  << backend;
            }
            size_t nan = 0;
            double largest = 0.0, worst = 0.0;
            for (size_t i = 0; i < pairs.size(); ++i) {
              ASSERT_EQ(std::isnan(pairs[i]), std::isnan(floats[i]))
                  << what << " " << i;
              if (std::isnan(floats[i])) {
                ++nan;
                continue;
              }
              largest = std::max(largest, double{std::abs(floats[i])});
              worst = std::max(worst, double{std::abs(pairs[i] - floats[i])});
            }
            EXPECT_GE(nan, heads / kKVHeads) << what;  // Column 3 of head 1.
            // The sums' order: scores moved by float32 rounding.
            EXPECT_LE(worst, 1e-5 * largest) << what;
            EXPECT_GT(largest, 0.0) << what;
          }
        }
      }
    }
  }
}

// Each sequence alone in a cache of its own gives the ragged batch's rows
// (to rounding: the key splits of decode depend on the batch size).
TEST_P(KVCacheTest, RaggedBatchEqualsOneCallPerSequence) {
  for (const Kind& kind : {Kind{KVType::kBF16, 16}, Kind{KVType::kInt8, 0}}) {
    KVCache batch = MakeCache(kind);
    FillRagged(batch);
    const size_t q_tokens = 3;
    const size_t q_row = kHeads * q_tokens * kHeadDim;
    const std::vector<float> q = RandomVector(kBatch * q_row, 4);
    const std::vector<float> together = Attend(batch, q, q_tokens, true);
    for (size_t b = 0; b < kBatch; ++b) {
      KVCache alone = MakeCache(kind, 1);
      const Held held = Read(batch, b);
      const size_t length = batch.length(b);
      // Read gives what the cache holds; appending it again stores the same
      // elements (bf16 and int8 re-round to themselves).
      alone.Append(
          ConstTensor4::Dense(held.keys.data(), 1, kKVHeads, length, kHeadDim),
          ConstTensor4::Dense(held.values.data(), 1, kKVHeads, length,
                              kHeadDim));
      std::vector<float> out(q_row);
      AttentionOptions options;
      options.mask.causal = true;
      ScaledDotProductAttention(
          ConstTensor4::Dense(q.data() + b * q_row, 1, kHeads, q_tokens,
                              kHeadDim),
          alone.View(),
          Tensor4::Dense(out.data(), 1, kHeads, q_tokens, kHeadDim), options);
      for (size_t i = 0; i < q_row; ++i) {
        EXPECT_NEAR(out[i], together[b * q_row + i], 1e-6)
            << Name(kind) << " sequence " << b << " element " << i;
      }
    }
  }
}

// The stated bounds: bf16 and f16 round to nearest (relative 2^-8, 2^-11 in
// f16's normal range); int8 |x - scale q| <= scale / 2 (plus float
// rounding), scale = max |x| / 127 per token and head.
TEST_P(KVCacheTest, StoredValuesWithinTheStatedBounds) {
  const size_t n = 50;
  const std::vector<float> k = RandomVector(kKVHeads * n * kHeadDim, 6, -3, 3);
  const std::vector<float> v = RandomVector(kKVHeads * n * kHeadDim, 7, -3, 3);
  for (const Kind& kind : kKinds) {
    KVCache cache = MakeCache(kind, 1);
    cache.Append(ConstTensor4::Dense(k.data(), 1, kKVHeads, n, kHeadDim),
                 ConstTensor4::Dense(v.data(), 1, kKVHeads, n, kHeadDim));
    const Held held = Read(cache, 0);
    for (size_t row = 0; row < kKVHeads * n; ++row) {
      for (const auto& [in, out] :
           {std::pair<const float*, const float*>{&k[row * kHeadDim],
                                                  &held.keys[row * kHeadDim]},
            {&v[row * kHeadDim], &held.values[row * kHeadDim]}}) {
        float max_abs = 0.0f;
        for (size_t c = 0; c < kHeadDim; ++c) {
          max_abs = std::max(max_abs, std::abs(in[c]));
        }
        for (size_t c = 0; c < kHeadDim; ++c) {
          const double error = std::abs(double(in[c]) - out[c]);
          double bound = 0.0;
          switch (kind.type) {
            case KVType::kF32:
              bound = 0.0;
              break;
            case KVType::kBF16:
              bound = std::abs(in[c]) * 0x1p-8;
              break;
            case KVType::kF16:
              bound = std::abs(in[c]) * 0x1p-11;
              break;
            case KVType::kInt8:
              bound = max_abs / 127.0 * (0.5 + 1e-6);
              break;
            case KVType::kFp8E4M3:  // Half a unit in the last place.
              bound = std::max(std::abs(in[c]) * 0x1p-4, 0x1p-10);
              break;
            case KVType::kFp8E5M2:
              bound = std::max(std::abs(in[c]) * 0x1p-3, 0x1p-17);
              break;
            default:
              FAIL() << Name(kind) << " has no bound here";
          }
          ASSERT_LE(error, bound) << Name(kind) << " row " << row;
        }
      }
    }
  }
}

// Every target's conversions on append give the scalar conversions' bits
// (kernels.h's ToBFloat16, ToFloat16): ties, subnormals, overflow, inf and
// NaN, in whole vectors and the tail.
TEST_P(KVCacheTest, AppendConvertsAsTheScalarConversions) {
  const float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> row = {1.0f + 0x1p-8f,
                            1.0f + 0x1p-7f + 0x1p-8f,
                            1.0f + 0x1p-11f,
                            1.0f + 0x1p-10f + 0x1p-11f,
                            -3.0e38f,
                            3.4e38f,
                            65519.0f,
                            65520.0f,
                            -1e-7f,
                            3e-8f,
                            0x1p-130f,
                            -0.0f,
                            kInf,
                            -kInf,
                            kNaN,
                            70000.0f,
                            0x1p-24f,
                            0x1p-25f,
                            1.5f * 0x1p-25f,
                            0.1f};
  const std::vector<float> random = RandomVector(37 - row.size(), 3, -9, 9);
  row.insert(row.end(), random.begin(), random.end());
  const size_t dim = row.size();
  for (const KVType type : {KVType::kBF16, KVType::kF16}) {
    KVCacheConfig config;
    config.type = type;
    const std::vector<float> keys = StoreRow(config, row).keys;
    for (size_t c = 0; c < dim; ++c) {
      const float expected = type == KVType::kBF16 ? ToFloat(ToBFloat16(row[c]))
                                                   : ToFloat(ToFloat16(row[c]));
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(keys[c])) << c;
      } else {
        EXPECT_EQ(keys[c], expected) << static_cast<int>(type) << " " << row[c];
      }
    }
  }
}

// An fp8 format from the OCP definition, for the tests' own rounding:
// every finite value by code, and its infinity or saturation.
struct Fp8Format {
  KVType type;
  int mantissa, bias;
  bool saturates;  // E4M3: no infinity; finite values clamp at the max.

  // The code's value (NaN for E4M3's S.1111.111 and E5M2's S.11111.xx).
  double Value(int code) const {
    const int exponent = (code & 0x7F) >> mantissa;
    const int fraction = code & ((1 << mantissa) - 1);
    const int top = (1 << (7 - mantissa)) - 1;
    if (saturates ? (exponent == top && fraction == (1 << mantissa) - 1)
                  : (exponent == top && fraction != 0)) {
      return NAN;
    }
    const double magnitude =
        !saturates && exponent == top
            ? INFINITY
            : std::ldexp(exponent == 0 ? fraction : fraction + (1 << mantissa),
                         std::max(exponent, 1) - bias - mantissa);
    return code & 0x80 ? -magnitude : magnitude;
  }
  // x rounded to the nearest value, ties to the even code; beyond the
  // largest finite value by half a step: E4M3 clamps, E5M2 gives infinity.
  double Round(double x) const {
    if (std::isnan(x)) return NAN;
    if (std::isinf(x)) return saturates ? NAN : x;
    const double max = Value(saturates ? 0x7E : 0x7B);
    if (std::abs(x) >= max) {  // At or past the top: no tie below it.
      const double overflow = max + (max - Value(saturates ? 0x7D : 0x7A)) / 2;
      const double top = saturates || std::abs(x) < overflow ? max : INFINITY;
      return std::signbit(x) ? -top : top;
    }
    double best = 0.0;
    for (int code = 0; code < 0x80; ++code) {
      const double v = Value(code);
      if (!std::isfinite(v)) continue;
      const double e = std::abs(std::abs(x) - v),
                   e_best = std::abs(std::abs(x) - best);
      if (e < e_best || (e == e_best && code % 2 == 0)) {
        best = v;
      }
    }
    return std::signbit(x) ? -best : best;
  }
};
const Fp8Format kFp8Formats[] = {{KVType::kFp8E4M3, 3, 7, true},
                                 {KVType::kFp8E5M2, 2, 15, false}};

// fp8 appends (on every target, vectors and tails) round each element of
// x / scale to nearest even (the float32 quotient): every value, the ties
// between neighbours and just off them, subnormals, saturation (E4M3) or
// overflow (E5M2), infinities and NaN; keys with scale 1, values with 0.5.
TEST_P(KVCacheTest, Fp8RoundsToNearestEvenAsOcpDefines) {
  for (const Fp8Format& format : kFp8Formats) {
    std::vector<float> row = {0.0f,     -0.0f,    1e30f,     -1e30f,
                              kNaN,     INFINITY, -INFINITY, 0x1p-140f,
                              449.0f,   464.0f,   479.0f,    57344.0f,
                              61439.0f, 61440.0f, 65536.0f};
    for (int code = 0; code < 0x7F; ++code) {
      const double v = format.Value(code), next = format.Value(code + 1);
      if (!std::isfinite(v)) continue;
      row.push_back(static_cast<float>(v));
      row.push_back(static_cast<float>(-v));
      if (!std::isfinite(next)) continue;
      const float mid = static_cast<float>((v + next) / 2);  // Exact.
      for (const float x :
           {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        row.push_back(x);
        row.push_back(-x);
      }
    }
    KVCacheConfig config;
    config.type = format.type;
    config.value_scale = 0.5f;
    const Held held = StoreRow(config, row);
    const std::vector<float>& keys = held.keys;
    const std::vector<float>& values = held.values;
    for (size_t c = 0; c < row.size(); ++c) {
      const double key = format.Round(row[c]);
      const double value = 0.5 * format.Round(row[c] / 0.5f);
      for (const auto& [got, expected] :
           {std::pair<float, double>{keys[c], key}, {values[c], value}}) {
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(got))
              << Name({format.type, 0}) << " " << row[c];
        } else {
          EXPECT_EQ(got, expected) << Name({format.type, 0}) << " " << row[c];
        }
      }
    }
  }
}

// Attention reads every fp8 code exactly, NaN included (the kernels' vector
// widening, not the scalar one of Read): one key, so the output is the value
// row, which holds each of the 256 codes once; then with the NaN codes zeroed
// (E4M3 rows without NaN codes take their own loads).
TEST_P(KVCacheTest, AttentionWidensEveryFp8Code) {
  constexpr size_t kCodes = 256;
  for (const auto& [format, with_nan] :
       {std::pair{kFp8Formats[0], true}, std::pair{kFp8Formats[0], false},
        std::pair{kFp8Formats[1], true}}) {
    std::vector<float> values(kCodes);
    for (size_t code = 0; code < kCodes; ++code) {
      values[code] = static_cast<float>(format.Value(static_cast<int>(code)));
      if (!with_nan && std::isnan(values[code])) values[code] = 0.0f;
    }
    const std::vector<float> key(kCodes, 1.0f), q(kCodes, 0.5f);
    KVCacheConfig config;
    config.type = format.type;
    KVCache cache(1, 1, 4, kCodes, config);
    cache.Append(ConstTensor4::Dense(key.data(), 1, 1, 1, kCodes),
                 ConstTensor4::Dense(values.data(), 1, 1, 1, kCodes));
    std::vector<float> out(kCodes);
    ScaledDotProductAttention(ConstTensor4::Dense(q.data(), 1, 1, 1, kCodes),
                              cache.View(),
                              Tensor4::Dense(out.data(), 1, 1, 1, kCodes));
    for (size_t code = 0; code < kCodes; ++code) {
      if (std::isnan(values[code])) {
        EXPECT_TRUE(std::isnan(out[code])) << Name({format.type, 0}) << code;
      } else {
        EXPECT_EQ(out[code], values[code]) << Name({format.type, 0}) << code;
      }
    }
  }
}

// Attention reads every finite fp8 code of a key exactly: a key row holding
// each code once, queries one-hot at a code, so that each score is that
// code's value; the log-sum-exp gives it back (plus log n over n equal
// keys). One query row over one and four keys, and three rows over three,
// cover the kernels' dot products of a row with one key and with four, and
// of a tile of rows.
TEST_P(KVCacheTest, AttentionReadsEveryFp8CodeInKeys) {
  constexpr size_t kCodes = 256;
  for (const Fp8Format& format : kFp8Formats) {
    std::vector<float> codes(kCodes);
    for (size_t code = 0; code < kCodes; ++code) {
      codes[code] = static_cast<float>(format.Value(static_cast<int>(code)));
      if (!std::isfinite(codes[code])) codes[code] = 0.0f;
    }
    for (const auto& [rows, keys] :
         {std::pair<size_t, size_t>{1, 1}, std::pair<size_t, size_t>{1, 4},
          std::pair<size_t, size_t>{3, 3}}) {
      KVCacheConfig config;
      config.type = format.type;
      KVCache cache(1, 1, keys, kCodes, config);
      for (size_t j = 0; j < keys; ++j) {
        const std::vector<float> zeros(kCodes, 0.0f);
        cache.Append(ConstTensor4::Dense(codes.data(), 1, 1, 1, kCodes),
                     ConstTensor4::Dense(zeros.data(), 1, 1, 1, kCodes));
      }
      std::vector<float> q(rows * kCodes), out(rows * kCodes), lse(rows);
      AttentionOptions options;
      options.scale = 1.0f;
      options.log_sum_exp = lse.data();
      for (size_t first = 0; first < kCodes; first += rows) {
        std::fill(q.begin(), q.end(), 0.0f);
        for (size_t r = 0; r < rows; ++r) {
          q[r * kCodes + (first + r) % kCodes] = 1.0f;
        }
        ScaledDotProductAttention(
            ConstTensor4::Dense(q.data(), 1, 1, rows, kCodes), cache.View(),
            Tensor4::Dense(out.data(), 1, 1, rows, kCodes), options);
        for (size_t r = 0; r < rows; ++r) {
          const float value = codes[(first + r) % kCodes];
          const float expected =
              keys == 1 ? value : value + std::log(static_cast<float>(keys));
          EXPECT_EQ(lse[r], expected)
              << Name({format.type, 0}) << " code " << (first + r) % kCodes
              << " rows " << rows << " keys " << keys;
        }
      }
    }
  }
}

// A q8_0 or q4_0 block whose fp16 scale overflows (an element of 1e7:
// ggml's quantizer stores an infinite d) reads as infinite on every target,
// under float32 and kInt8 (Highway 1.0.3's fp16 conversion without F16C
// reads exponent 31 as the finite 2^16 (1 + m / 1024)). As a value, the
// dims of its block come out non-finite and the others finite; as a key
// (the query's element there positive: an infinite score, or NaN), every
// output of the queries that see it.
TEST_P(KVCacheTest, OverflowedBlockScalesReadAsInfinite) {
  constexpr size_t kDim = 64, kTokens = 40, kHeads = 2;
  constexpr size_t kElement = 17 * kDim + 40;  // Token 17, block 1.
  for (const Kind& kind : kBlockKinds) {
    for (const bool in_values : {true, false}) {
      std::vector<float> k = RandomVector(kTokens * kDim, 41),
                         v = RandomVector(kTokens * kDim, 42);
      (in_values ? v : k)[kElement] = 1e7f;
      KVCacheConfig config;
      config.type = kind.type;
      config.block_size = kind.block_size;
      KVCache cache(1, 1, kTokens, kDim, config);
      cache.Append(ConstTensor4::Dense(k.data(), 1, 1, kTokens, kDim),
                   ConstTensor4::Dense(v.data(), 1, 1, kTokens, kDim));
      std::vector<float> q = RandomVector(kHeads * kDim, 43);
      for (size_t h = 0; h < kHeads; ++h) q[h * kDim + 40] = 1.0f;
      for (const ComputeType compute :
           {ComputeType::kFloat32, ComputeType::kInt8}) {
        if (compute == ComputeType::kInt8 &&
            !ElementTraitsOf(kind.type).int8_scores) {
          continue;
        }
        AttentionOptions options;
        options.compute = compute;
        std::vector<float> out(q.size());
        ScaledDotProductAttention(
            ConstTensor4::Dense(q.data(), 1, kHeads, 1, kDim), cache.View(),
            Tensor4::Dense(out.data(), 1, kHeads, 1, kDim), options);
        for (size_t i = 0; i < out.size(); ++i) {
          const bool in_block = i % kDim / 32 == 1;
          EXPECT_EQ(std::isfinite(out[i]), in_values && !in_block)
              << Name(kind) << (in_values ? " values" : " keys") << " compute "
              << static_cast<int>(compute) << " element " << i;
        }
      }
    }
  }
}

// Every q4_0 code in a block's low nibbles and in its high ones (rows of
// 96: three blocks, a pair and one alone for AVX-512's pairs of blocks),
// read exactly: as keys, through the float and the integer (kInt8) scores
// of one row with one key and with four and of a tile of rows (log-sum-exp
// of one-hot queries: the code's value, plus log n); as values, one key's
// row as the output. Appended values (c - 8) 2^b in block b, with a -8 2^b
// in each, store the codes c with scale 2^b (ggml's quantizer): each
// block's scale is its own.
// Rows whose every block holds each 4-bit code in both nibbles, with values
// its type stores exactly (q4_0 and q4_1: c - 8; iq4_nl: its table's c-th
// value; block b times 2^b): every code is read, by float32 and kInt8
// arithmetic alike, over one key or several.
TEST_P(KVCacheTest, AttentionReadsEveryFourBitCodeInBothNibbles) {
  constexpr size_t kDim = 96;
  constexpr float kIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};
  for (const KVType type : {KVType::kQ4_0, KVType::kQ4_1, KVType::kIQ4_NL}) {
    std::vector<float> row(kDim);
    for (size_t i = 0; i < kDim; ++i) {
      // Element i of a block is a low nibble for i < 16, a high one after:
      // each code c at some i < 16 and some i >= 16 of each block.
      const size_t c = i % 32 < 16 ? i % 16 : (i * 7 + 3 + i / 32) % 16;
      const float value = type == KVType::kIQ4_NL ? kIQ4NL[c] : c - 8.0f;
      row[i] = std::ldexp(value, static_cast<int>(i / 32));
    }
    KVCacheConfig config;
    config.type = type;
    std::vector<ComputeType> computes = {ComputeType::kFloat32};
    if (ElementTraitsOf(type).int8_scores) {
      computes.push_back(ComputeType::kInt8);
    }
    for (const auto& [rows, keys] :
         {std::pair<size_t, size_t>{1, 1}, std::pair<size_t, size_t>{1, 4},
          std::pair<size_t, size_t>{3, 3}}) {
      KVCache cache(1, 1, keys, kDim, config);
      for (size_t j = 0; j < keys; ++j) {
        cache.Append(ConstTensor4::Dense(row.data(), 1, 1, 1, kDim),
                     ConstTensor4::Dense(row.data(), 1, 1, 1, kDim));
      }
      std::vector<float> q(rows * kDim), out(rows * kDim), lse(rows);
      for (const ComputeType compute : computes) {
        AttentionOptions options;
        options.scale = 1.0f;
        options.compute = compute;
        options.log_sum_exp = lse.data();
        for (size_t first = 0; first < kDim; first += rows) {
          std::fill(q.begin(), q.end(), 0.0f);
          for (size_t r = 0; r < rows; ++r) {
            q[r * kDim + (first + r) % kDim] = 1;
          }
          ScaledDotProductAttention(
              ConstTensor4::Dense(q.data(), 1, 1, rows, kDim), cache.View(),
              Tensor4::Dense(out.data(), 1, 1, rows, kDim), options);
          for (size_t r = 0; r < rows; ++r) {
            const size_t i = (first + r) % kDim;
            const float expected =
                keys == 1 ? row[i]
                          : row[i] + std::log(static_cast<float>(keys));
            // kInt8 scales the exact code product 127 v by the key's 2^b
            // and the query's d, 1 / 127 rounded (relative error 2^-24),
            // then adds log n: within 2e-6 2^b for |v| <= 8, 16 times
            // that for |v| <= 127.
            const float bound = type == KVType::kIQ4_NL ? 6.4e-5f : 4e-6f;
            EXPECT_NEAR(lse[r], expected,
                        compute == ComputeType::kInt8
                            ? std::ldexp(bound, static_cast<int>(i / 32))
                            : 0.0f)
                << ElementTraitsOf(type).name << " element " << i << " rows "
                << rows << " keys " << keys;
            if (keys == 1) {
              for (size_t c = 0; c < kDim; ++c) {
                EXPECT_EQ(out[r * kDim + c], row[c])
                    << ElementTraitsOf(type).name << " value element " << c;
              }
            }
          }
        }
      }
    }
  }
}

// Decode reads a tile's E4M3 rows without the per-vector NaN test where a
// scan of the tile finds no NaN code (attention_decode-inl.h, HasNaNCodes). One
// NaN code in reach, in a key or a value row, in the first or the second tile
// of 256 keys, contiguous or paged: a NaN key makes exactly the rows of its kv
// head NaN,
// a NaN value, their column; every other output keeps its bits. Rows of 72:
// a 64-byte vector and a tail.
TEST_P(KVCacheTest, Fp8E4M3NaNCodeInReachMakesOnlyItsHeadsNaN) {
  constexpr size_t kTokens = 300, kDim = 72, kPoisonedHead = 1;
  const std::vector<float> k = RandomVector(kKVHeads * kTokens * kDim, 7),
                           v = RandomVector(kKVHeads * kTokens * kDim, 8);
  for (const size_t block_size : {size_t{0}, size_t{16}}) {
    KVCacheConfig config;
    config.type = KVType::kFp8E4M3;
    config.block_size = block_size;
    const auto attend = [&](const std::vector<float>& keys,
                            const std::vector<float>& values, size_t q_tokens) {
      KVCache cache(1, kKVHeads, kTokens, kDim, config);
      cache.Append(
          ConstTensor4::Dense(keys.data(), 1, kKVHeads, kTokens, kDim),
          ConstTensor4::Dense(values.data(), 1, kKVHeads, kTokens, kDim));
      const std::vector<float> q = RandomVector(kHeads * q_tokens * kDim, 9);
      std::vector<float> out(q.size());
      ScaledDotProductAttention(
          ConstTensor4::Dense(q.data(), 1, kHeads, q_tokens, kDim),
          cache.View(), Tensor4::Dense(out.data(), 1, kHeads, q_tokens, kDim));
      return out;
    };
    for (const size_t q_tokens : {size_t{1}, size_t{3}}) {
      const std::vector<float> clean = attend(k, v, q_tokens);
      for (const bool in_keys : {true, false}) {
        for (const size_t token : {size_t{5}, size_t{290}}) {
          std::vector<float> keys = k, values = v;
          (in_keys ? keys : values)[(kPoisonedHead * kTokens + token) * kDim +
                                    (token % kDim)] = kNaN;
          const std::vector<float> out = attend(keys, values, q_tokens);
          const std::string where = std::string(in_keys ? "key" : "value") +
                                    " token " + std::to_string(token) +
                                    " block " + std::to_string(block_size) +
                                    " q_tokens " + std::to_string(q_tokens);
          // A NaN key's score makes its rows NaN; a NaN value, its column.
          for (size_t i = 0; i < out.size(); ++i) {
            const size_t head = i / (q_tokens * kDim);
            if (head / (kHeads / kKVHeads) == kPoisonedHead &&
                (in_keys || i % kDim == token % kDim)) {
              ASSERT_TRUE(std::isnan(out[i])) << where << " at " << i;
            } else {
              ASSERT_EQ(std::memcmp(&out[i], &clean[i], sizeof(float)), 0)
                  << where << " at " << i;
            }
          }
        }
      }
    }
  }
}

// A NaN or an infinity at a key that the mask hides from some rows (a
// window's early key, or the causal mask's last key from the row before),
// in a key or a value row of an E4M3 or bf16 cache, under kBFloat16 with the
// bf16 pairs on and off (the pairs then take a copy with that row zeroed):
// the rows that do not see it keep their bits; those that see it turn NaN
// (a key) or non-finite in its column (a value).
TEST_P(KVCacheTest, NonFiniteAtAMaskedKeyChangesNoOtherRow) {
  constexpr size_t kTokens = 300, kDim = 72, kPoisonedHead = 1;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> k = RandomVector(kKVHeads * kTokens * kDim, 7),
                           v = RandomVector(kKVHeads * kTokens * kDim, 8);
  struct Case {
    size_t window, token;
  };
  for (const KVType type : {KVType::kFp8E4M3, KVType::kBF16}) {
    for (const size_t block_size : {size_t{0}, size_t{16}}) {
      KVCacheConfig config;
      config.type = type;
      config.block_size = block_size;
      for (const bool pairs : {true, false}) {
        const auto attend = [&](const std::vector<float>& keys,
                                const std::vector<float>& values,
                                size_t q_tokens, size_t window) {
          KVCache cache(1, kKVHeads, kTokens, kDim, config);
          cache.Append(
              ConstTensor4::Dense(keys.data(), 1, kKVHeads, kTokens, kDim),
              ConstTensor4::Dense(values.data(), 1, kKVHeads, kTokens, kDim));
          const std::vector<float> q =
              RandomVector(kHeads * q_tokens * kDim, 9);
          std::vector<float> out(q.size());
          AttentionOptions options;
          options.compute = ComputeType::kBFloat16;
          options.mask.causal = true;
          options.mask.window = window;
          const auto forced = test::ForcePolicy([&](internal::Policy& p) {
            p.bf16_decode_pairs = p.fp8_decode_pairs = pairs;
            p.decode_pair_rows = p.cached_decode_pair_rows = 4;
          });
          ScaledDotProductAttention(
              ConstTensor4::Dense(q.data(), 1, kHeads, q_tokens, kDim),
              cache.View(),
              Tensor4::Dense(out.data(), 1, kHeads, q_tokens, kDim), options);
          return out;
        };
        for (const Case c : {Case{290, 5}, Case{0, kTokens - 1}}) {
          for (const size_t q_tokens : {size_t{1}, size_t{2}}) {
            const std::vector<float> clean = attend(k, v, q_tokens, c.window);
            // Row i is token kTokens - q_tokens + i (kernels.h's windows).
            const auto sees = [&](size_t row) {
              const size_t p = kTokens - q_tokens + row;
              return c.token <= p && (c.window == 0 || c.token + c.window > p);
            };
            for (const bool in_keys : {true, false}) {
              // E4M3 has no infinity: its NaN code only.
              for (const float poison :
                   {kNaN, type == KVType::kBF16 ? kInf : kNaN}) {
                std::vector<float> keys = k, values = v;
                (in_keys ? keys
                         : values)[(kPoisonedHead * kTokens + c.token) * kDim +
                                   c.token % kDim] = poison;
                const std::vector<float> out =
                    attend(keys, values, q_tokens, c.window);
                const std::string where =
                    Name(Kind{type, block_size}) +
                    (in_keys ? " key " : " value ") + std::to_string(poison) +
                    " at " + std::to_string(c.token) + " window " +
                    std::to_string(c.window) + (pairs ? " pairs" : " floats") +
                    " q_tokens " + std::to_string(q_tokens);
                for (size_t i = 0; i < out.size(); ++i) {
                  const size_t head = i / (q_tokens * kDim);
                  if (head / (kHeads / kKVHeads) != kPoisonedHead ||
                      !sees(i / kDim % q_tokens)) {
                    ASSERT_EQ(std::memcmp(&out[i], &clean[i], sizeof(float)), 0)
                        << where << " at " << i;
                  } else if (in_keys && std::isnan(poison)) {
                    ASSERT_TRUE(std::isnan(out[i])) << where << " at " << i;
                  } else if (!in_keys && i % kDim == c.token % kDim) {
                    ASSERT_FALSE(std::isfinite(out[i])) << where << " at " << i;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// Caches of ggml's blocks hold the bytes its reference quantizers write
// (tests/data/make_ggml_blocks_golden.sh): random blocks at many scales,
// zeros, rounding ties (q8_0's away from zero, q4_0's and q4_1's truncation
// and clamp, iq4_nl's nearest table value), fp16 scales that round,
// underflow or overflow.
TEST(KVCacheFormats, BlocksAreGgmlsBitForBit) {
  const std::string path =
      std::string(SIMDATTN_TEST_DATA_DIR) + "/ggml_blocks/golden.bin";
  std::FILE* file = std::fopen(path.c_str(), "rb");
  ASSERT_NE(file, nullptr) << path;
  std::vector<char> bytes(1 << 16);
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), file));
  std::fclose(file);
  ASSERT_GE(bytes.size(), 12u);
  ASSERT_EQ(std::string(bytes.data(), 8), "GGMLBLK2");
  uint32_t n;
  std::memcpy(&n, bytes.data() + 8, sizeof(n));
  const size_t blocks = n / 32;
  ASSERT_EQ(bytes.size(),
            12 + n * sizeof(float) + blocks * (34 + 18 + 20 + 18));
  std::vector<float> x(n);
  std::memcpy(x.data(), bytes.data() + 12, n * sizeof(float));
  const char* golden = bytes.data() + 12 + n * sizeof(float);
  for (const KVType type :
       {KVType::kQ8_0, KVType::kQ4_0, KVType::kQ4_1, KVType::kIQ4_NL}) {
    const size_t block_bytes = ElementTraitsOf(type).bytes;
    KVCacheConfig config;
    config.type = type;
    KVCache cache(1, 1, 1, n, config);  // One row of every block.
    cache.Append(ConstTensor4::Dense(x.data(), 1, 1, 1, n),
                 ConstTensor4::Dense(x.data(), 1, 1, 1, n));
    const KVCacheView view = cache.View();
    for (size_t b = 0; b < blocks; ++b) {
      for (const void* held : {view.keys, view.values}) {
        EXPECT_EQ(std::memcmp(static_cast<const char*>(held) + b * block_bytes,
                              golden + b * block_bytes, block_bytes),
                  0)
            << ElementTraitsOf(type).name << " block " << b
            << " (tests/data/ggml_blocks/cases.txt)";
      }
    }
    golden += blocks * block_bytes;
  }
}

// Blocks too small for ggml's 1 / d (it overflows) store zeros, and blocks
// holding NaN or infinity read back as NaN.
TEST(KVCacheFormats, TinyAndNonFiniteBlocks) {
  std::vector<float> row(64);
  for (size_t c = 0; c < 32; ++c) row[c] = (c % 2 ? 1e-39f : -3e-40f) * c;
  for (size_t c = 32; c < 64; ++c) row[c] = c == 40 ? INFINITY : 1.0f;
  for (const KVType type : BlockElementTypes()) {
    KVCacheConfig config;
    config.type = type;
    const Held held = StoreRow(config, row);
    for (size_t c = 0; c < 32; ++c) EXPECT_EQ(held.keys[c], 0.0f) << c;
    for (size_t c = 32; c < 64; ++c) EXPECT_TRUE(std::isnan(held.values[c]));
  }
}

// Caches whose type cannot hold the shape or whose scales are not scales.
TEST(KVCacheFormats, BadShapesAndScalesAreErrors) {
  for (const KVType type : BlockElementTypes()) {
    KVCacheConfig config;
    config.type = type;
    ExpectInvalid([&] { KVCache(1, 1, 8, 20, config); },
                  {"KVCache", "blocks of 32", "head_dim (20)"});
    config.value_dim = 16;
    ExpectInvalid([&] { KVCache(1, 1, 8, 64, config); }, "value_dim (16)");
  }
  for (const float bad : {0.0f, -1.0f, INFINITY, kNaN}) {
    KVCacheConfig config;
    config.type = KVType::kFp8E4M3;
    config.value_scale = bad;
    ExpectInvalid([&] { KVCache(1, 1, 8, 16, config); },
                  {"KVCache", "value_scale", "finite and positive"});
  }
  // Views: strides of whole blocks, scales of fp8 sides.
  KVCacheConfig config;
  config.type = KVType::kQ8_0;
  KVCache cache(1, 1, 8, 64, config);
  const std::vector<float> q(64, 1.0f);
  std::vector<float> out(64);
  const auto attend = [&](const KVCacheView& view) {
    ScaledDotProductAttention(ConstTensor4::Dense(q.data(), 1, 1, 1, 64), view,
                              Tensor4::Dense(out.data(), 1, 1, 1, 64));
  };
  std::vector<float> row(64, 1.0f);
  cache.Append(ConstTensor4::Dense(row.data(), 1, 1, 1, 64),
               ConstTensor4::Dense(row.data(), 1, 1, 1, 64));
  KVCacheView view = cache.View();
  view.row_stride = 48;
  ExpectInvalid([&] { attend(view); }, {"q8_0", "blocks of 32", "48"});
  KVCacheConfig fp8;
  fp8.type = KVType::kFp8E5M2;
  KVCache fp8_cache(1, 1, 8, 64, fp8);
  fp8_cache.Append(ConstTensor4::Dense(row.data(), 1, 1, 1, 64),
                   ConstTensor4::Dense(row.data(), 1, 1, 1, 64));
  view = fp8_cache.View();
  view.key_scale = -2.0f;
  ExpectInvalid([&] { attend(view); }, {"kv.key_scale (-2)", "positive"});
  std::fill(out.begin(), out.end(), 7.0f);
  view.key_scale = 1.0f;
  view.value_scale = 0.0f;
  ExpectInvalid([&] { attend(view); }, "kv.value_scale (0)");
  for (const float x : out) ASSERT_EQ(x, 7.0f);  // Untouched.
}

// int8 stores q = round(x / scale), float32 quotient, ties to even, on every
// target and in the vector tail: exact ties (scale 1), the row whose product
// with 127 / max rounded the other way (x / scale = 120.5000119 gives 121),
// and random rows, each element checked exactly as scale * q.
TEST_P(KVCacheTest, Int8RoundsTheQuotientToNearestEven) {
  const std::vector<std::vector<float>> rows = {
      {0.5f,    1.5f,  2.5f,   -0.5f,   -1.5f, -2.5f, 126.5f,
       -125.5f, 3.49f, 127.0f, -126.5f, 64.5f, 0.25f, 1.0f,
       2.0f,    3.5f,  4.5f,   5.5f,    -6.5f, 7.5f},
      {2.030925750732422f, 2.1404776573181152f},
      RandomVector(37, 11, -3, 3)};
  for (const std::vector<float>& row : rows) {
    const size_t dim = row.size();
    KVCacheConfig config;
    config.type = KVType::kInt8;
    const std::vector<float> keys = StoreRow(config, row).keys;
    float max_abs = 0.0f;
    for (const float x : row) max_abs = std::max(max_abs, std::abs(x));
    const float scale = max_abs / 127.0f;
    for (size_t c = 0; c < dim; ++c) {
      const float q = std::nearbyint(row[c] / scale);  // Ties to even.
      EXPECT_EQ(keys[c], scale * q) << "x " << row[c] << " dim " << dim;
    }
  }
  // The ties themselves, spelled out (scale 1): 0.5 -> 0, 1.5 -> 2, 2.5 -> 2.
  KVCacheConfig config;
  config.type = KVType::kInt8;
  const std::vector<float> keys =
      StoreRow(config, {0.5f, 1.5f, 2.5f, 127.0f}).keys;
  EXPECT_EQ(keys[0], 0.0f);
  EXPECT_EQ(keys[1], 2.0f);
  EXPECT_EQ(keys[2], 2.0f);
  EXPECT_EQ(keys[3], 127.0f);
}

// Narrow caches against the float one: each output within the bound the
// perturbations give. Scores move by at most D = scale |q|_1 max |dk|, so
// the weights' L1 distance is at most e^(2D) - 1, and
// |o' - o| <= (e^(2D) - 1) max |v'| + max |dv|.
TEST_P(KVCacheTest, NarrowTypesWithinTheirBoundOfFloat) {
  KVCache reference = MakeCache({KVType::kF32, 0});
  FillRagged(reference);
  const std::vector<float> q = RandomVector(kBatch * kHeads * kHeadDim, 8);
  const std::vector<float> exact = Attend(reference, q, 1, true);
  for (const Kind& kind : kKinds) {
    if (kind.type == KVType::kF32) continue;
    KVCache cache = MakeCache(kind);
    FillRagged(cache);
    const std::vector<float> out = Attend(cache, q, 1, true);
    for (size_t b = 0; b < kBatch; ++b) {
      const Held held = Read(cache, b), full = Read(reference, b);
      double dk = 0.0, dv = 0.0, v_max = 0.0;
      for (size_t i = 0; i < held.keys.size(); ++i) {
        dk = std::max(dk, double(std::abs(held.keys[i] - full.keys[i])));
        dv = std::max(dv, double(std::abs(held.values[i] - full.values[i])));
        v_max = std::max(v_max, double(std::abs(held.values[i])));
      }
      for (size_t h = 0; h < kHeads; ++h) {
        const float* qrow = &q[(b * kHeads + h) * kHeadDim];
        double q_l1 = 0.0;
        for (size_t c = 0; c < kHeadDim; ++c) q_l1 += std::abs(qrow[c]);
        const double d = q_l1 * dk / std::sqrt(double(kHeadDim));
        const double bound = std::expm1(2 * d) * v_max + dv + 1e-5;
        for (size_t c = 0; c < kHeadDim; ++c) {
          const size_t i = (b * kHeads + h) * kHeadDim + c;
          ASSERT_LE(std::abs(out[i] - exact[i]), bound)
              << Name(kind) << " b " << b << " h " << h;
        }
      }
    }
  }
}

// Truncated tokens, even NaN ones, leave no trace; reset empties a
// sequence; copies share blocks until one side appends; reorders move
// whole sequences.
TEST_P(KVCacheTest, SequenceOperations) {
  for (const Kind& kind : AllKinds()) {
    KVCache cache = MakeCache(kind);
    FillRagged(cache);
    const size_t dim = cache.head_dim();
    const std::vector<float> q = RandomVector(kBatch * kHeads * dim, 3);
    const std::vector<float> before = Attend(cache, q, 1, true);
    const Held held1 = Read(cache, 1);
    // Speculative tokens, NaN, then rolled back.
    std::vector<float> bad(kKVHeads * 5 * dim, kNaN);
    cache.Append(ConstTensor4::Dense(bad.data(), 1, kKVHeads, 5, dim),
                 ConstTensor4::Dense(bad.data(), 1, kKVHeads, 5, dim), {1});
    EXPECT_EQ(cache.length(1), 305u);
    cache.Truncate(1, 300);
    ExpectSameBits(Attend(cache, q, 1, true), before, Name(kind) + " truncate");

    // Copy: sequence 0 becomes sequence 1; appending to either leaves the
    // other as it was.
    cache.Copy(1, 0);
    EXPECT_EQ(cache.length(0), 300u);
    ExpectSameBits(Read(cache, 0).keys, held1.keys, Name(kind) + " copy");
    AppendRandom(cache, {0}, 9, 11);
    ExpectSameBits(Read(cache, 1).values, held1.values,
                   Name(kind) + " copy on write");
    // The appending side's copy of the shared block kept every head's rows
    // (and int8 scales): its first 300 tokens read as before.
    const Held copied = Read(cache, 0);
    for (size_t h = 0; h < kKVHeads; ++h) {
      const size_t old_at = h * 300 * dim, new_at = h * 309 * dim;
      for (const auto& [now, was] :
           {std::pair{&copied.keys, &held1.keys},
            std::pair{&copied.values, &held1.values}}) {
        ExpectSameBits(std::vector<float>(now->begin() + new_at,
                                          now->begin() + new_at + 300 * dim),
                       std::vector<float>(was->begin() + old_at,
                                          was->begin() + old_at + 300 * dim),
                       Name(kind) + " copied block, head " + std::to_string(h));
      }
    }
    AppendRandom(cache, {1}, 3, 12);
    const Held held0 = Read(cache, 0);
    EXPECT_EQ(cache.length(0), 309u);

    // Reorder (beam search): 1 dropped, 0 twice.
    const Held held2 = Read(cache, 2);
    cache.Reorder({2, 0, 0});
    EXPECT_EQ(cache.length(0), 577u);
    ExpectSameBits(Read(cache, 0).values, held2.values,
                   Name(kind) + " reorder");
    ExpectSameBits(Read(cache, 1).keys, held0.keys, Name(kind) + " reorder");
    ExpectSameBits(Read(cache, 2).keys, held0.keys, Name(kind) + " reorder");
    AppendRandom(cache, {1}, 20, 13);
    ExpectSameBits(Read(cache, 2).keys, held0.keys,
                   Name(kind) + " reorder then append");

    cache.Reset(0);
    EXPECT_EQ(cache.length(0), 0u);
    AppendRandom(cache, {0}, 1, 14);
    EXPECT_EQ(cache.length(0), 1u);
    cache.Clear();
    EXPECT_EQ(cache.size(), 0u);
  }
}

// Every block shared, then released: the pool's blocks all come back.
TEST(KVCachePool, BlocksAreSharedAndReturned) {
  KVCache cache(2, 1, 64, 4, Paged(16, 4));
  std::vector<float> k(64 * 4, 1.0f);
  cache.Append(ConstTensor4::Dense(k.data(), 1, 1, 64, 4),
               ConstTensor4::Dense(k.data(), 1, 1, 64, 4), {0});
  ExpectInvalid(
      [&] {
        cache.Append(ConstTensor4::Dense(k.data(), 1, 1, 1, 4),
                     ConstTensor4::Dense(k.data(), 1, 1, 1, 4), {1});
      },
      {"KVCache::Append", "needs 1 blocks", "0 of the pool's 4"});
  EXPECT_EQ(cache.length(1), 0u);
  cache.Copy(0, 1);       // Shares all four blocks.
  cache.Truncate(0, 40);  // Block 3 still held by sequence 1.
  cache.Truncate(1, 8);   // Blocks 1-3 of sequence 1 go; 0 stays shared.
  // 8 tokens on sequence 1 copy its shared block, then fill it.
  cache.Append(ConstTensor4::Dense(k.data(), 1, 1, 8, 4),
               ConstTensor4::Dense(k.data(), 1, 1, 8, 4), {1});
  EXPECT_EQ(cache.length(1), 16u);
  // 3 blocks for 0 (40 tokens) + 1 for 1: the pool is full again.
  ExpectInvalid(
      [&] {
        cache.Append(ConstTensor4::Dense(k.data(), 1, 1, 9, 4),
                     ConstTensor4::Dense(k.data(), 1, 1, 9, 4), {0});
      },
      "needs 1 blocks");
  cache.Clear();
  cache.Append(ConstTensor4::Dense(k.data(), 1, 1, 64, 4),
               ConstTensor4::Dense(k.data(), 1, 1, 64, 4), {1});
  EXPECT_EQ(cache.length(1), 64u);
}

// A paged cache of empty rows (head_dim 0) still takes and shares blocks:
// its operations stay consistent (found by c_api_shape_fuzzer).
TEST(KVCachePool, EmptyRowsStillTakeBlocks) {
  KVCache cache(2, 1, 48, 0, Paged(16, 3));
  const auto tokens = [](size_t n) {
    return ConstTensor4(nullptr, 2, 1, n, 0, 0, 0, 0);
  };
  ExpectInvalid([&] { cache.Append(tokens(20), tokens(20)); },
                "needs 4 blocks, but only 3");
  cache.Append(tokens(10), tokens(10));
  cache.Copy(0, 1);  // Shares sequence 0's block: two are free.
  const ConstTensor4 one(nullptr, 1, 1, 10, 0, 0, 0, 0);
  cache.Append(one, one, {1});  // A copy of the shared block and a new one.
  EXPECT_EQ(cache.length(1), 20u);
  ExpectInvalid([&] { cache.Append(one, one, {0}); }, "needs 1 blocks");
  cache.Reorder({1, 1});
  cache.Truncate(0, 3);
  EXPECT_EQ(cache.length(0), 3u);
  EXPECT_EQ(cache.length(1), 20u);
}

// Beam search: two sequences share a partly filled block; appending to both
// copies it once (the second writes in place), so one free block suffices.
TEST(KVCachePool, SharedBlockAppendedByAllHoldersCopiesOnce) {
  KVCache cache(2, 1, 48, 2, Paged(16, 3));
  std::vector<float> k(20 * 2, 1.0f);
  cache.Append(ConstTensor4::Dense(k.data(), 1, 1, 20, 2),
               ConstTensor4::Dense(k.data(), 1, 1, 20, 2), {0});
  cache.Copy(0, 1);  // Both hold its 2 blocks; 1 is free.
  cache.Append(ConstTensor4::Dense(k.data(), 2, 1, 1, 2),
               ConstTensor4::Dense(k.data(), 2, 1, 1, 2));
  EXPECT_EQ(cache.length(0), 21u);
  EXPECT_EQ(cache.length(1), 21u);
  ExpectInvalid(
      [&] {
        cache.Append(ConstTensor4::Dense(k.data(), 1, 1, 12, 2),
                     ConstTensor4::Dense(k.data(), 1, 1, 12, 2), {0});
      },
      "needs 1 blocks, but only 0");
}

// int8 rows too small to scale (max |x| < 2^-100) are stored as zeros.
TEST(KVCacheStorage, TinyInt8RowsAreZeros) {
  KVCacheConfig config;
  config.type = KVType::kInt8;
  KVCache cache(1, 1, 2, 4, config);
  const std::vector<float> tiny = {1e-38f, -2e-38f, 0.0f, 3e-39f,
                                   1e-29f, 0.0f,    0.0f, -1e-29f};
  cache.Append(ConstTensor4::Dense(tiny.data(), 1, 1, 2, 4),
               ConstTensor4::Dense(tiny.data(), 1, 1, 2, 4));
  std::vector<float> keys(8, -1.0f), values(8, -1.0f);
  cache.Read(0, Tensor3(keys.data(), 1, 2, 4), Tensor3(values.data(), 1, 2, 4));
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(keys[i], 0.0f);
  for (size_t i = 4; i < 8; ++i) {
    EXPECT_NEAR(keys[i], tiny[i], 1e-29 / 254 * 1.001) << i;
  }
}

// Keys rotated on append equal ApplyRope at the sequences' positions.
TEST_P(KVCacheTest, RopeOnAppendRotatesAtEachSequencesPosition) {
  for (const RopePairing pairing :
       {RopePairing::kHalfSplit, RopePairing::kInterleaved}) {
    KVCacheConfig config;
    config.block_size = 16;
    config.rope = RopeOptions{};
    config.rope->pairing = pairing;
    config.rope->rotary_dim = 16;
    KVCache cache(2, kKVHeads, 64, kHeadDim, config);
    const size_t n = 5;
    std::vector<float> first = RandomVector(kKVHeads * 7 * kHeadDim, 1);
    cache.Append(ConstTensor4::Dense(first.data(), 1, kKVHeads, 7, kHeadDim),
                 ConstTensor4::Dense(first.data(), 1, kKVHeads, 7, kHeadDim),
                 {1});
    std::vector<float> k = RandomVector(2 * kKVHeads * n * kHeadDim, 2);
    const std::vector<float> v = RandomVector(2 * kKVHeads * n * kHeadDim, 3);
    cache.Append(ConstTensor4::Dense(k.data(), 2, kKVHeads, n, kHeadDim),
                 ConstTensor4::Dense(v.data(), 2, kKVHeads, n, kHeadDim));
    RopeOptions rope = *config.rope;
    const size_t positions[2] = {0, 7};
    rope.positions = positions;
    ApplyRope(Tensor4::Dense(k.data(), 2, kKVHeads, n, kHeadDim), rope);
    for (size_t b = 0; b < 2; ++b) {
      const Held held = Read(cache, b);
      const size_t length = cache.length(b);
      for (size_t h = 0; h < kKVHeads; ++h) {
        for (size_t t = 0; t < n; ++t) {
          const size_t at = (h * length + length - n + t) * kHeadDim;
          const size_t from = ((b * kKVHeads + h) * n + t) * kHeadDim;
          EXPECT_EQ(
              std::memcmp(&held.keys[at], &k[from], kHeadDim * sizeof(float)),
              0);
          EXPECT_EQ(
              std::memcmp(&held.values[at], &v[from], kHeadDim * sizeof(float)),
              0);
        }
      }
    }
  }
}

// 32 steps of decode, one token appended each: attention over the cache
// equals attention over the float tensors it holds (bf16 and f16 bit for
// bit: they widen exactly; int8 to rounding, the scale applied to scores
// and weights rather than to each element).
TEST_P(KVCacheTest, GenerationStepsEqualAttentionOverWhatIsHeld) {
  for (const Kind& kind : kKinds) {
    KVCache cache = MakeCache(kind);
    AppendRandom(cache, {0, 1, 2}, 250, 21);
    for (size_t step = 0; step < 32; ++step) {
      AppendRandom(cache, {0, 1, 2}, 1, 100 + step);
      const size_t length = cache.length(0);
      std::vector<float> keys(kBatch * kKVHeads * length * kHeadDim);
      std::vector<float> values(keys.size());
      for (size_t b = 0; b < kBatch; ++b) {
        const Held held = Read(cache, b);
        std::copy(held.keys.begin(), held.keys.end(),
                  keys.begin() + b * held.keys.size());
        std::copy(held.values.begin(), held.values.end(),
                  values.begin() + b * held.values.size());
      }
      const std::vector<float> q =
          RandomVector(kBatch * kHeads * kHeadDim, 200 + step);
      std::vector<float> expected(q.size());
      AttentionOptions options;
      options.mask.causal = true;
      options.mask.causal_offset = length - 1;
      ScaledDotProductAttention(
          ConstTensor4::Dense(q.data(), kBatch, kHeads, 1, kHeadDim),
          ConstTensor4::Dense(keys.data(), kBatch, kKVHeads, length, kHeadDim),
          ConstTensor4::Dense(values.data(), kBatch, kKVHeads, length,
                              kHeadDim),
          Tensor4::Dense(expected.data(), kBatch, kHeads, 1, kHeadDim),
          options);
      const std::vector<float> out = Attend(cache, q, 1, true);
      if (kind.type == KVType::kInt8) {
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], expected[i], 1e-6) << Name(kind) << " " << step;
        }
      } else {
        ExpectSameBits(out, expected, Name(kind) + " step");
      }
    }
  }
}

// ALiBi over a cache, causal or not, measures distances from each
// sequence's own positions: attention over the floats it holds with those
// offsets gives the same bits (bf16).
TEST_P(KVCacheTest, AlibiPositionsComeFromTheCache) {
  KVCache cache = MakeCache({KVType::kBF16, 16});
  AppendRandom(cache, {0, 1, 2}, 90, 31);
  const size_t length = cache.length(0), q_tokens = 2;
  std::vector<float> keys(kBatch * kKVHeads * length * kHeadDim);
  std::vector<float> values(keys.size());
  for (size_t b = 0; b < kBatch; ++b) {
    const Held held = Read(cache, b);
    std::copy(held.keys.begin(), held.keys.end(),
              keys.begin() + b * held.keys.size());
    std::copy(held.values.begin(), held.values.end(),
              values.begin() + b * held.values.size());
  }
  const std::vector<float> slopes = AlibiSlopes(kHeads);
  const std::vector<float> q =
      RandomVector(kBatch * kHeads * q_tokens * kHeadDim, 32);
  for (const bool causal : {false, true}) {
    AttentionOptions options;
    options.mask.causal = causal;
    options.mask.alibi_slopes = slopes.data();
    std::vector<float> from_cache(q.size()), from_tensors(q.size());
    ScaledDotProductAttention(
        ConstTensor4::Dense(q.data(), kBatch, kHeads, q_tokens, kHeadDim),
        cache.View(),
        Tensor4::Dense(from_cache.data(), kBatch, kHeads, q_tokens, kHeadDim),
        options);
    options.mask.causal_offset = length - q_tokens;
    ScaledDotProductAttention(
        ConstTensor4::Dense(q.data(), kBatch, kHeads, q_tokens, kHeadDim),
        ConstTensor4::Dense(keys.data(), kBatch, kKVHeads, length, kHeadDim),
        ConstTensor4::Dense(values.data(), kBatch, kKVHeads, length, kHeadDim),
        Tensor4::Dense(from_tensors.data(), kBatch, kHeads, q_tokens, kHeadDim),
        options);
    ExpectSameBits(from_cache, from_tensors, causal ? "causal" : "not causal");
  }
}

// NaN left in unused slots and in free blocks of the pool never reaches an
// output: truncated NaN tokens stay in memory, and the next sequence's
// blocks reuse freed ones.
TEST_P(KVCacheTest, NaNInUnusedSlotsAndBlocksIsNeverRead) {
  for (const Kind& kind : AllKinds()) {
    KVCache cache = MakeCache(kind);
    const size_t dim = cache.head_dim();
    std::vector<float> bad(kBatch * kKVHeads * 300 * dim, kNaN);
    cache.Append(ConstTensor4::Dense(bad.data(), kBatch, kKVHeads, 300, dim),
                 ConstTensor4::Dense(bad.data(), kBatch, kKVHeads, 300, dim));
    cache.Clear();
    FillRagged(cache);
    for (size_t q_tokens : {size_t{1}, BlockQueries()}) {
      const std::vector<float> q =
          RandomVector(kBatch * kHeads * q_tokens * dim, 2);
      const std::vector<float> out = Attend(cache, q, q_tokens, true);
      for (float x : out) ASSERT_TRUE(std::isfinite(x)) << Name(kind);
      ExpectNear(out, Reference(cache, q, q_tokens, true, 0), 2e-6, Name(kind));
    }
  }
}

// An empty sequence is a normal state (a slot between requests): decode and
// chunked prefill over a batch where it sits give its rows zeros and a
// log-sum-exp of minus infinity, and the others their rows.
TEST_P(KVCacheTest, EmptySequenceGivesZeroRows) {
  for (const Kind& kind : AllKinds()) {
    KVCache cache = MakeCache(kind);
    const size_t dim = cache.head_dim();
    AppendRandom(cache, {0, 2}, 45, 1);
    for (const size_t window : {size_t{0}, size_t{16}}) {
      for (const size_t q_tokens : {size_t{1}, size_t{7}}) {
        const std::vector<float> q =
            RandomVector(kBatch * kHeads * q_tokens * dim, 2);
        std::vector<float> out(kBatch * kHeads * q_tokens * dim, kNaN);
        std::vector<float> lse(kBatch * kHeads * q_tokens, kNaN);
        AttentionOptions options;
        options.mask.causal = true;
        options.mask.window = window;
        options.log_sum_exp = lse.data();
        ScaledDotProductAttention(
            ConstTensor4::Dense(q.data(), kBatch, kHeads, q_tokens, dim),
            cache.View(),
            Tensor4::Dense(out.data(), kBatch, kHeads, q_tokens, dim), options);
        const std::string what = Name(kind) + " window " +
                                 std::to_string(window) + " queries " +
                                 std::to_string(q_tokens);
        ExpectNear(out, Reference(cache, q, q_tokens, true, window), 2e-6,
                   what);
        for (size_t r = 0; r < kHeads * q_tokens; ++r) {
          ASSERT_EQ(lse[kHeads * q_tokens + r], -INFINITY) << what;
          ASSERT_TRUE(std::isfinite(lse[r])) << what;
          for (size_t c = 0; c < dim; ++c) {
            ASSERT_EQ(out[(kHeads * q_tokens + r) * dim + c], 0.0f) << what;
          }
        }
      }
    }
  }
}

// A key masked by a boolean mask whose value row is NaN (int8: its scale;
// blocks: their d) leaves no trace: the same bits as with zeros there.
// Decode and prefill, rows of 20 (not whole vectors) and of whole blocks.
TEST_P(KVCacheTest, MaskedNonFiniteValuesNeverReachOutputs) {
  for (const Kind& kind : AllKinds()) {
    KVCache poisoned = MakeCache(kind), clean = MakeCache(kind);
    const size_t dim = poisoned.head_dim();
    for (KVCache* cache : {&poisoned, &clean}) FillRagged(*cache);
    std::vector<float> row(kBatch * kKVHeads * dim,
                           std::numeric_limits<float>::quiet_NaN());
    poisoned.Append(ConstTensor4::Dense(row.data(), kBatch, kKVHeads, 1, dim),
                    ConstTensor4::Dense(row.data(), kBatch, kKVHeads, 1, dim));
    std::fill(row.begin(), row.end(), 0.0f);
    clean.Append(ConstTensor4::Dense(row.data(), kBatch, kKVHeads, 1, dim),
                 ConstTensor4::Dense(row.data(), kBatch, kKVHeads, 1, dim));
    for (const size_t q_tokens : {size_t{1}, size_t{3}}) {
      // Masks each sequence's newest key (the NaN one) for every query.
      std::vector<uint8_t> masked(kBatch * kHeads * q_tokens * kCapacity, 0);
      for (size_t b = 0; b < kBatch; ++b) {
        for (size_t r = 0; r < kHeads * q_tokens; ++r) {
          masked[(b * kHeads * q_tokens + r) * kCapacity + clean.length(b) -
                 1] = 1;
        }
      }
      AttentionOptions options;
      options.mask.boolean = Tensor4View<const uint8_t>::Dense(
          masked.data(), kBatch, kHeads, q_tokens, kCapacity);
      const std::vector<float> q =
          RandomVector(kBatch * kHeads * q_tokens * dim, 6);
      std::vector<float> a(q.size()), b(q.size());
      for (const auto& [cache, out] :
           {std::pair<KVCache*, float*>{&poisoned, a.data()},
            {&clean, b.data()}}) {
        ScaledDotProductAttention(
            ConstTensor4::Dense(q.data(), kBatch, kHeads, q_tokens, dim),
            cache->View(), Tensor4::Dense(out, kBatch, kHeads, q_tokens, dim),
            options);
      }
      ExpectSameBits(a, b, Name(kind) + " masked NaN");
    }
  }
}

// DeepSeek-V2's multi-head latent attention (MLA) from its published
// definition, in float64: per token a latent c_kv (kLatent) and a shared
// rope key k_r (kRope); per head k = [W_UK c_kv | rot(k_r)], v = W_UV c_kv,
// q = [q_nope | rot(q_r)]. The absorbed form reads one latent cache row
// [c_kv | k_r] per token for every head (values: its first kLatent dims),
// with queries [W_UK^T q_nope | rot(q_r)], and W_UV applied after. Over a
// generation (a prefill, then single-token steps) on every cache type and
// layout: float32 caches against the per-head definition, every cache
// against float64 attention over what it holds, paged equal to contiguous.
constexpr size_t kLatent = 32, kRope = 8, kNope = 16, kVHead = 12;
constexpr size_t kMlaHeads = 16;

// RoPE in float64, halves split, theta 10000, at `position`.
void RotateInDouble(double* x, size_t dims, size_t position) {
  for (size_t i = 0; i < dims / 2; ++i) {
    const double angle =
        double(position) * std::pow(10000.0, -2.0 * double(i) / double(dims));
    const double x1 = x[i], x2 = x[i + dims / 2];
    x[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
    x[i + dims / 2] = x2 * std::cos(angle) + x1 * std::sin(angle);
  }
}

TEST_P(KVCacheTest, LatentCacheIsDeepSeekAbsorbedAttention) {
  constexpr size_t kBatchMla = 2, kPrefill = 40, kSteps = 3;
  constexpr size_t kRow = kLatent + kRope, kTokens = kPrefill + kSteps;
  const std::vector<float> w_uk = RandomVector(kMlaHeads * kNope * kLatent, 1);
  const std::vector<float> w_uv = RandomVector(kMlaHeads * kVHead * kLatent, 2);
  // Every token's latent row [c_kv | k_r], k_r not yet rotated.
  const std::vector<float> rows = RandomVector(kBatchMla * kTokens * kRow, 3);
  // DeepSeek's explicit scale: 1 / sqrt(nope + rope dims).
  const float scale = 1.0f / std::sqrt(float(kNope + kRope));
  RopeOptions rope;
  rope.rotary_offset = kLatent;
  for (const Kind& kind : kKinds) {
    KVCacheConfig config;
    config.type = kind.type;
    config.block_size = kind.block_size;
    config.value_dim = kLatent;
    config.latent = true;
    config.rope = rope;
    KVCache cache(kBatchMla, 1, kTokens, kRow, config);
    KVCacheConfig contiguous_config = config;
    contiguous_config.block_size = 0;
    KVCache contiguous(kBatchMla, 1, kTokens, kRow, contiguous_config);
    size_t length = 0;
    for (size_t step = 0; step <= kSteps; ++step) {
      const size_t n = step == 0 ? kPrefill : 1;
      std::vector<float> appended(kBatchMla * n * kRow);
      for (size_t b = 0; b < kBatchMla; ++b) {
        std::copy_n(rows.begin() + (b * kTokens + length) * kRow, n * kRow,
                    appended.begin() + b * n * kRow);
      }
      const ConstTensor4 keys =
          ConstTensor4::Dense(appended.data(), kBatchMla, 1, n, kRow);
      cache.Append(keys, ConstTensor4{});
      contiguous.Append(keys, ConstTensor4{});
      length += n;
      // The newest token's queries, and their absorbed form.
      const std::vector<float> q_nope =
          RandomVector(kBatchMla * kMlaHeads * kNope, 10 + step);
      const std::vector<float> q_rope =
          RandomVector(kBatchMla * kMlaHeads * kRope, 20 + step);
      std::vector<float> q(kBatchMla * kMlaHeads * kRow);
      for (size_t bh = 0; bh < kBatchMla * kMlaHeads; ++bh) {
        const size_t h = bh % kMlaHeads;
        for (size_t c = 0; c < kLatent; ++c) {
          double sum = 0.0;
          for (size_t e = 0; e < kNope; ++e) {
            sum += double(w_uk[(h * kNope + e) * kLatent + c]) *
                   q_nope[bh * kNope + e];
          }
          q[bh * kRow + c] = float(sum);
        }
        std::copy_n(q_rope.begin() + bh * kRope, kRope,
                    q.begin() + bh * kRow + kLatent);
      }
      RopeOptions query_rope = rope;
      const std::vector<size_t> positions(kBatchMla, length - 1);
      query_rope.positions = positions.data();
      const Tensor4 q_view =
          Tensor4::Dense(q.data(), kBatchMla, kMlaHeads, 1, kRow);
      ApplyRope(q_view, query_rope);
      AttentionOptions options;
      options.scale = scale;
      options.mask.causal = true;
      std::vector<float> latent_out(kBatchMla * kMlaHeads * kLatent);
      const Tensor4 out_view =
          Tensor4::Dense(latent_out.data(), kBatchMla, kMlaHeads, 1, kLatent);
      ScaledDotProductAttention(q_view, cache.View(), out_view, options);
      std::vector<float> contiguous_out(latent_out.size());
      ScaledDotProductAttention(q_view, contiguous.View(),
                                Tensor4::Dense(contiguous_out.data(), kBatchMla,
                                               kMlaHeads, 1, kLatent),
                                options);
      ExpectSameBits(latent_out, contiguous_out, Name(kind) + " latent");
      // Float64 attention over the rows the cache holds.
      std::vector<float> held_keys(kBatchMla * length * kRow);
      std::vector<float> held_values(kBatchMla * length * kLatent);
      for (size_t b = 0; b < kBatchMla; ++b) {
        cache.Read(
            b, Tensor3(held_keys.data() + b * length * kRow, 1, length, kRow),
            Tensor3(held_values.data() + b * length * kLatent, 1, length,
                    kLatent));
      }
      AttentionMask mask;
      mask.causal = true;
      mask.causal_offset = length - 1;
      ExpectNear(
          latent_out,
          reference::Attention(
              ConstTensor4(q_view),
              ConstTensor4::Dense(held_keys.data(), kBatchMla, 1, length, kRow),
              ConstTensor4::Dense(held_values.data(), kBatchMla, 1, length,
                                  kLatent),
              scale, mask),
          4e-6, Name(kind) + " latent over what it holds");
      if (kind.type != KVType::kF32) continue;
      // Float32 caches: the per-head definition, W_UV applied after.
      for (size_t b = 0; b < kBatchMla; ++b) {
        for (size_t h = 0; h < kMlaHeads; ++h) {
          const size_t bh = b * kMlaHeads + h;
          std::vector<double> query(kNope + kRope);
          for (size_t e = 0; e < kNope; ++e) query[e] = q_nope[bh * kNope + e];
          for (size_t e = 0; e < kRope; ++e) {
            query[kNope + e] = q_rope[bh * kRope + e];
          }
          RotateInDouble(query.data() + kNope, kRope, length - 1);
          std::vector<double> weights(length), value(kVHead, 0.0);
          double max = -INFINITY, sum = 0.0;
          for (size_t t = 0; t < length; ++t) {
            const float* row = &rows[(b * kTokens + t) * kRow];
            std::vector<double> key(kNope + kRope);
            for (size_t e = 0; e < kNope; ++e) {
              for (size_t c = 0; c < kLatent; ++c) {
                key[e] += double(w_uk[(h * kNope + e) * kLatent + c]) * row[c];
              }
            }
            for (size_t e = 0; e < kRope; ++e) {
              key[kNope + e] = row[kLatent + e];
            }
            RotateInDouble(key.data() + kNope, kRope, t);
            double dot = 0.0;
            for (size_t e = 0; e < kNope + kRope; ++e) {
              dot += query[e] * key[e];
            }
            weights[t] = double(scale) * dot;
            max = std::max(max, weights[t]);
          }
          for (size_t t = 0; t < length; ++t) {
            sum += weights[t] = std::exp(weights[t] - max);
          }
          for (size_t t = 0; t < length; ++t) {
            const float* row = &rows[(b * kTokens + t) * kRow];
            for (size_t e = 0; e < kVHead; ++e) {
              double v = 0.0;
              for (size_t c = 0; c < kLatent; ++c) {
                v += double(w_uv[(h * kVHead + e) * kLatent + c]) * row[c];
              }
              value[e] += weights[t] / sum * v;
            }
          }
          for (size_t e = 0; e < kVHead; ++e) {
            double absorbed = 0.0;
            for (size_t c = 0; c < kLatent; ++c) {
              absorbed += double(w_uv[(h * kVHead + e) * kLatent + c]) *
                          latent_out[bh * kLatent + c];
            }
            // The query's absorption and the output's projection each
            // round to float once: |W| <= 1 over 16-32 terms.
            ASSERT_NEAR(absorbed, value[e], 2e-5)
                << "step " << step << " b " << b << " h " << h << " e " << e;
          }
        }
      }
    }
  }
}

// A latent cache's own checks: values come from the keys, value_dim below
// head_dim; Read gives (kv_heads, length, value_dim) values.
TEST(KVCacheErrors, LatentCacheArguments) {
  KVCacheConfig config;
  config.latent = true;
  ExpectInvalid([&] { KVCache(1, 1, 8, 10, config); },
                {"config.latent", "config.value_dim (0)", "head_dim (10)"});
  config.value_dim = 6;
  KVCache cache(1, 1, 8, 10, config);
  EXPECT_EQ(cache.value_dim(), 6u);
  std::vector<float> keys(20, 0.5f), values(12, 0.25f);
  const ConstTensor4 k = ConstTensor4::Dense(keys.data(), 1, 1, 2, 10);
  ExpectInvalid(
      [&] { cache.Append(k, ConstTensor4::Dense(values.data(), 1, 1, 2, 6)); },
      {"KVCache::Append", "values have shape (1, 1, 2, 6)", "latent"});
  EXPECT_EQ(cache.length(0), 0u);
  cache.Append(k, ConstTensor4{});
  std::vector<float> read_keys(20), read_values(12);
  cache.Read(0, Tensor3(read_keys.data(), 1, 2, 10),
             Tensor3(read_values.data(), 1, 2, 6));
  EXPECT_EQ(read_keys, keys);
  EXPECT_EQ(read_values, std::vector<float>(12, 0.5f));
  ExpectInvalid(
      [&] {
        cache.Read(0, Tensor3(read_keys.data(), 1, 2, 10),
                   Tensor3(read_keys.data(), 1, 2, 10));
      },
      {"values are (1, 2, 10), expected (1, 2, 6)"});
}

// A latent cache's sequence operations: a copied sequence (shared blocks,
// copied on write when both append) reads as the original, its values the
// first dims of its rows, int8 scales included.
TEST(KVCacheStorage, LatentSequencesCopyAndGrow) {
  for (size_t block_size : {0, 16}) {
    KVCacheConfig config;
    config.type = KVType::kInt8;
    config.block_size = block_size;
    config.value_dim = 8;
    config.latent = true;
    KVCache cache(2, 1, 64, 12, config);
    const std::vector<float> rows = RandomVector(20 * 12, 31);
    cache.Append(ConstTensor4::Dense(rows.data(), 1, 1, 20, 12), ConstTensor4{},
                 {0});
    cache.Copy(0, 1);
    const std::vector<float> more = RandomVector(2 * 3 * 12, 32);
    cache.Append(ConstTensor4::Dense(more.data(), 2, 1, 3, 12), ConstTensor4{});
    std::vector<float> keys[2], values[2];
    for (size_t b = 0; b < 2; ++b) {
      keys[b].resize(23 * 12);
      values[b].resize(23 * 8);
      cache.Read(b, Tensor3(keys[b].data(), 1, 23, 12),
                 Tensor3(values[b].data(), 1, 23, 8));
      for (size_t t = 0; t < 23; ++t) {
        for (size_t c = 0; c < 8; ++c) {
          ASSERT_EQ(values[b][t * 8 + c], keys[b][t * 12 + c]) << b << " " << t;
        }
      }
    }
    // The shared 20 tokens agree; the 3 appended differ by sequence.
    EXPECT_TRUE(std::equal(keys[0].begin(), keys[0].begin() + 20 * 12,
                           keys[1].begin()));
    EXPECT_FALSE(std::equal(keys[0].begin() + 20 * 12, keys[0].end(),
                            keys[1].begin() + 20 * 12));
  }
}

// Keys of 24 dims, values of 16 (MLA's prefill form, scaled down): stored
// and read back, and attention over them as over the tensors.
TEST_P(KVCacheTest, ValuesNarrowerThanKeys) {
  for (const Kind& kind : kKinds) {
    KVCacheConfig config;
    config.type = kind.type;
    config.block_size = kind.block_size;
    config.value_dim = 16;
    KVCache cache(2, 2, 100, 24, config);
    const std::vector<float> k = RandomVector(2 * 2 * 70 * 24, 5);
    const std::vector<float> v = RandomVector(2 * 2 * 70 * 16, 6);
    cache.Append(ConstTensor4::Dense(k.data(), 2, 2, 70, 24),
                 ConstTensor4::Dense(v.data(), 2, 2, 70, 16));
    std::vector<float> keys(k.size()), values(v.size());
    for (size_t b = 0; b < 2; ++b) {
      cache.Read(b, Tensor3(keys.data() + b * 2 * 70 * 24, 2, 70, 24),
                 Tensor3(values.data() + b * 2 * 70 * 16, 2, 70, 16));
    }
    if (kind.type == KVType::kF32) {
      EXPECT_EQ(keys, k);
      EXPECT_EQ(values, v);
    }
    const std::vector<float> q = RandomVector(2 * 4 * 3 * 24, 7);
    const ConstTensor4 q_view = ConstTensor4::Dense(q.data(), 2, 4, 3, 24);
    std::vector<float> out(2 * 4 * 3 * 16), expected(out.size());
    AttentionOptions options;
    options.mask.causal = true;
    ScaledDotProductAttention(q_view, cache.View(),
                              Tensor4::Dense(out.data(), 2, 4, 3, 16), options);
    options.mask.causal_offset = 67;
    ScaledDotProductAttention(
        q_view, ConstTensor4::Dense(keys.data(), 2, 2, 70, 24),
        ConstTensor4::Dense(values.data(), 2, 2, 70, 16),
        Tensor4::Dense(expected.data(), 2, 4, 3, 16), options);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(out[i], expected[i], 1e-6) << Name(kind) << " " << i;
    }
  }
}

// kInt8 reads q8_0, q4_0 and int8 keys only, and is attention's only.
TEST(KVCacheErrors, Int8ComputeNeedsIntegerKeys) {
  AttentionOptions int8;
  int8.compute = ComputeType::kInt8;
  std::vector<float> x(64, 0.5f), out(64);
  const ConstTensor4 q = ConstTensor4::Dense(x.data(), 1, 1, 1, 64);
  const Tensor4 o = Tensor4::Dense(out.data(), 1, 1, 1, 64);
  for (const KVType type : test::AllElementTypes()) {
    if (ElementTraitsOf(type).int8_scores) continue;
    KVCacheConfig config;
    config.type = type;
    KVCache cache(1, 1, 4, 64, config);
    cache.Append(q, q);
    ExpectInvalid([&] { ScaledDotProductAttention(q, cache.View(), o, int8); },
                  {"kInt8", ElementTraitsOf(type).name, "integer codes"});
  }
  ExpectInvalid([&] { ScaledDotProductAttention(q, q, q, o, int8); },
                {"kInt8", "f32"});
  MatMulOptions product;
  product.compute = ComputeType::kInt8;
  std::vector<float> c(1);
  ExpectInvalid(
      [&] {
        MatMul(ConstMatrix(x.data(), 1, 64, 64),
               ConstMatrix(x.data(), 64, 1, 1), Matrix(c.data(), 1, 1, 1),
               product);
      },
      {"options.compute (2)", "kInt8 is attention's"});
}

TEST(KVCacheErrors, BadArgumentsNameThemselves) {
  KVCacheConfig paged;
  paged.block_size = 24;
  ExpectInvalid([&] { KVCache(1, 1, 8, 4, paged); },
                {"KVCache", "config.block_size (24)"});
  KVCacheConfig rope;
  rope.rope = RopeOptions{};
  size_t positions[1] = {0};
  rope.rope->positions = positions;
  ExpectInvalid([&] { KVCache(1, 1, 8, 4, rope); }, "config.rope->positions");
  KVCache cache(2, 1, 8, 4);
  std::vector<float> k(2 * 9 * 4, 1.0f);
  ExpectInvalid(
      [&] {
        cache.Append(ConstTensor4::Dense(k.data(), 2, 1, 9, 4),
                     ConstTensor4::Dense(k.data(), 2, 1, 9, 4));
      },
      {"KVCache::Append", "exceeds the capacity (8)"});
  ExpectInvalid(
      [&] {
        cache.Append(ConstTensor4::Dense(k.data(), 2, 1, 1, 4),
                     ConstTensor4::Dense(k.data(), 2, 1, 1, 4), {1, 1});
      },
      "sequence 1 is listed twice");
  ExpectInvalid(
      [&] {
        cache.Append(ConstTensor4::Dense(k.data(), 1, 1, 1, 4),
                     ConstTensor4::Dense(k.data(), 1, 1, 1, 4), {2});
      },
      "sequences[0] (2)");
  ExpectInvalid([&] { cache.Truncate(0, 1); }, "length (1) exceeds");
  // Read's outputs are checked as views: strides, overlap, repeated rows.
  cache.Append(ConstTensor4::Dense(k.data(), 2, 1, 3, 4),
               ConstTensor4::Dense(k.data(), 2, 1, 3, 4));
  std::vector<float> read(2 * 3 * 4);
  ExpectInvalid(
      [&] {
        cache.Read(0, Tensor3(read.data(), 1, 3, 4, 12, 2),
                   Tensor3(read.data() + 12, 1, 3, 4));
      },
      {"KVCache::Read", "keys row stride (2)"});
  ExpectInvalid(
      [&] {
        cache.Read(0, Tensor3(read.data(), 1, 3, 4),
                   Tensor3(read.data() + 4, 1, 3, 4));
      },
      {"KVCache::Read", "values overlap keys"});
  ExpectInvalid(
      [&] {
        cache.Read(0, Tensor3(read.data(), 1, 3, 4, 12, 0),
                   Tensor3(read.data() + 12, 1, 3, 4));
      },
      {"KVCache::Read", "keys"});
  ExpectInvalid(
      [&] {
        cache.Read(0, Tensor3(nullptr, 1, 3, 4),
                   Tensor3(read.data() + 12, 1, 3, 4));
      },
      {"KVCache::Read", "keys is null"});
  cache.Clear();
  // A cache over the caller's buffers: reading into them is refused.
  std::vector<float> held_k(2 * 1 * 8 * 4, 0.0f), held_v(held_k.size(), 0.0f);
  KVCache over(Tensor4::Dense(held_k.data(), 2, 1, 8, 4),
               Tensor4::Dense(held_v.data(), 2, 1, 8, 4));
  over.Append(ConstTensor4::Dense(k.data(), 2, 1, 3, 4),
              ConstTensor4::Dense(k.data(), 2, 1, 3, 4));
  ExpectInvalid(
      [&] {
        over.Read(1, Tensor3(held_k.data(), 1, 3, 4),
                  Tensor3(read.data(), 1, 3, 4));
      },
      {"KVCache::Read", "keys overlap the cache's own memory"});
  ExpectInvalid([&] { cache.Reorder({0}); }, "order has 1 entries");
  ExpectInvalid([&] { cache.Copy(0, 5); }, "dst (5)");
  ExpectInvalid([&] { (void)cache.length(2); }, "sequence (2)");

  // Attention over a view: lengths below the queries, offsets the cache
  // gives, bad block tables.
  cache.Append(ConstTensor4::Dense(k.data(), 2, 1, 2, 4),
               ConstTensor4::Dense(k.data(), 2, 1, 2, 4));
  std::vector<float> q(2 * 1 * 3 * 4, 1.0f), out(q.size());
  const auto attend = [&](const KVCacheView& view, size_t q_tokens,
                          const AttentionOptions& options) {
    ScaledDotProductAttention(
        ConstTensor4::Dense(q.data(), 2, 1, q_tokens, 4), view,
        Tensor4::Dense(out.data(), 2, 1, q_tokens, 4), options);
  };
  ExpectInvalid([&] { attend(cache.View(), 3, {}); },
                "kv.lengths[0] (2) is less than its 3 queries");
  AttentionOptions offset;
  offset.mask.causal = true;
  offset.mask.causal_offset = 1;
  ExpectInvalid([&] { attend(cache.View(), 1, offset); },
                "the cache's lengths give them");
  KVCacheConfig small;
  small.block_size = 16;
  KVCache pages(2, 1, 32, 4, small);
  pages.Append(ConstTensor4::Dense(k.data(), 2, 1, 2, 4),
               ConstTensor4::Dense(k.data(), 2, 1, 2, 4));
  KVCacheView view = pages.View();
  std::vector<int32_t> table(view.block_table,
                             view.block_table + 2 * view.blocks_per_sequence);
  table[view.blocks_per_sequence] = 4;
  view.block_table = table.data();
  ExpectInvalid([&] { attend(view, 1, {}); },
                {"kv.block_table[1 * 2 + 0] (4)", "4 in the pool"});
  view = pages.View();
  view.block_size = 12;
  ExpectInvalid([&] { attend(view, 1, {}); }, "kv.block_size (12)");
  const KVCache int8_cache = MakeCache({KVType::kInt8, 0}, 2);
  KVCacheView int8 = int8_cache.View();
  int8.key_scales = nullptr;
  std::vector<size_t> lengths = {1, 1};
  int8.lengths = lengths.data();
  int8.kv_heads = 1;
  int8.head_dim = 4;
  ExpectInvalid([&] { attend(int8, 1, {}); }, "kv.key_scales");
}

// The module generates with every cache: paged equals contiguous bit for
// bit, and narrow types stay near the float cache.
TEST_P(KVCacheTest, ForwardStepWithEveryCache) {
  const size_t d_in = 24, d_out = 32, heads = 4, tokens = 40;
  MultiHeadAttentionConfig config =
      test::MhaConfig(d_in, d_out, tokens, heads, true, /*seed=*/3);
  config.num_kv_heads = 2;
  MultiHeadAttention mha(config);
  const std::vector<float> x = RandomVector(2 * tokens * d_in, 4);
  std::vector<std::vector<float>> outputs;
  for (const Kind& kind : kKinds) {
    KVCacheConfig config;
    config.type = kind.type;
    config.block_size = kind.block_size;
    KVCache cache(2, 2, tokens, d_out / heads, config);
    std::vector<float> y(2 * tokens * d_out);
    for (size_t t = 0; t < tokens; t += 8) {
      mha.ForwardStep(
          ConstTensor3(x.data() + t * d_in, 2, 8, d_in, tokens * d_in, d_in),
          cache,
          Tensor3(y.data() + t * d_out, 2, 8, d_out, tokens * d_out, d_out));
    }
    outputs.push_back(y);
  }
  for (size_t i = 0; i < outputs.size(); i += 2) {
    ExpectSameBits(outputs[i + 1], outputs[i], Name(kKinds[i + 1]));
    // E5M2 keeps 2 fraction bits (relative 2^-3), the others 3 or more.
    const double tolerance = kKinds[i].type == KVType::kFp8E5M2 ? 0.1 : 0.03;
    for (size_t e = 0; e < outputs[i].size(); ++e) {
      ASSERT_NEAR(outputs[i][e], outputs[0][e], tolerance) << Name(kKinds[i]);
    }
  }
}

// kInt8 in the module: float32 projections, attention's int8 scores over a
// cache of integer codes (paged or not). Steps of one token (2 query heads
// per K/V head: the integer path) stay near float32's steps over the same cache
// and are not its bits; other caches and Forward refuse it, leaving the cache
// and y as they were.
TEST_P(KVCacheTest, Int8ComputeStepsStayNearFloat) {
  const size_t d_in = 24, d_out = 128, heads = 4, tokens = 12;
  MultiHeadAttentionConfig config =
      test::MhaConfig(d_in, d_out, tokens, heads, true, /*seed=*/3);
  config.num_kv_heads = 2;
  MultiHeadAttention mha(config);
  const std::vector<float> x = RandomVector(2 * tokens * d_in, 4);
  ForwardOptions int8;
  int8.compute = ComputeType::kInt8;
  for (const Kind& kind : Int8ComputeKinds()) {
    std::vector<std::vector<float>> outputs;
    for (const ForwardOptions& options : {ForwardOptions{}, int8}) {
      KVCacheConfig cache_config;
      cache_config.type = kind.type;
      cache_config.block_size = kind.block_size;
      KVCache cache(2, 2, tokens, d_out / heads, cache_config);
      std::vector<float> y(2 * tokens * d_out);
      for (size_t t = 0; t < tokens; t += t == 0 ? 8 : 1) {
        const size_t n = t == 0 ? 8 : 1;
        mha.ForwardStep(
            ConstTensor3(x.data() + t * d_in, 2, n, d_in, tokens * d_in, d_in),
            cache,
            Tensor3(y.data() + t * d_out, 2, n, d_out, tokens * d_out, d_out),
            options);
      }
      outputs.push_back(y);
    }
    EXPECT_NE(std::memcmp(outputs[0].data(), outputs[1].data(),
                          outputs[0].size() * sizeof(float)),
              0)
        << Name(kind);
    for (size_t e = 0; e < outputs[0].size(); ++e) {
      ASSERT_NEAR(outputs[1][e], outputs[0][e], 0.02) << Name(kind);
    }
  }
  KVCache f32(2, 2, tokens, d_out / heads);
  std::vector<float> y(2 * d_out, 7.0f);
  const ConstTensor3 one(x.data(), 2, 1, d_in, tokens * d_in, d_in);
  ExpectInvalid(
      [&] { mha.ForwardStep(one, f32, Tensor3(y.data(), 2, 1, d_out), int8); },
      {"kInt8", "integer codes"});
  EXPECT_EQ(f32.length(0), 0u);
  ExpectInvalid([&] { mha.Forward(one, Tensor3(y.data(), 2, 1, d_out), int8); },
                {"kInt8", "ForwardStep"});
  for (float e : y) ASSERT_EQ(e, 7.0f);
}

// bf16 arithmetic in the module: generating over a bf16 cache gives the
// rows a bf16 forward over the whole sequence gives (the same rounded
// operands; the products' sums in another order, 64-row projections on the
// native kernel where there is one), and both stay near float32. The cache
// must hold bf16, and attention weights are float32-only.
TEST_P(KVCacheTest, BFloat16ComputeStepsMatchForward) {
  const size_t d_in = 48, d_out = 64, heads = 4, tokens = 80;
  MultiHeadAttention mha(
      test::MhaConfig(d_in, d_out, tokens, heads, true, /*seed=*/5));
  const std::vector<float> x = RandomVector(tokens * d_in, 6);
  ForwardOptions bf16;
  bf16.compute = ComputeType::kBFloat16;
  std::vector<float> y32(tokens * d_out), y16(tokens * d_out),
      steps(tokens * d_out);
  mha.Forward(ConstTensor3(x.data(), 1, tokens, d_in),
              Tensor3(y32.data(), 1, tokens, d_out));
  mha.Forward(ConstTensor3(x.data(), 1, tokens, d_in),
              Tensor3(y16.data(), 1, tokens, d_out), bf16);
  KVCacheConfig config;
  config.type = KVType::kBF16;
  KVCache cache(1, heads, tokens, d_out / heads, config);
  for (size_t t = 0; t < tokens; t += 8) {
    mha.ForwardStep(ConstTensor3(x.data() + t * d_in, 1, 8, d_in), cache,
                    Tensor3(steps.data() + t * d_out, 1, 8, d_out), bf16);
  }
  double worst_step = 0.0, worst_f32 = 0.0;
  for (size_t e = 0; e < y16.size(); ++e) {
    worst_step = std::max(worst_step, double{std::abs(steps[e] - y16[e])});
    worst_f32 = std::max(worst_f32, double{std::abs(y16[e] - y32[e])});
  }
  // A bf16 context element rounded the other way moves an output by ~1e-4.
  EXPECT_LE(worst_step, 1e-3);
  EXPECT_LE(worst_f32, 0.03);
  EXPECT_GT(worst_f32, 0.0);  // Rounding happened.

  KVCache f32_cache(1, heads, tokens, d_out / heads);
  ExpectInvalid(
      [&] {
        mha.ForwardStep(ConstTensor3(x.data(), 1, 8, d_in), f32_cache,
                        Tensor3(steps.data(), 1, 8, d_out), bf16);
      },
      {"options.compute is kBFloat16", "KVCacheConfig::type"});
  std::vector<float> weights(heads * tokens * tokens);
  bf16.attention_weights =
      Tensor4::Dense(weights.data(), 1, heads, tokens, tokens);
  ExpectInvalid(
      [&] {
        mha.Forward(ConstTensor3(x.data(), 1, tokens, d_in),
                    Tensor3(y16.data(), 1, tokens, d_out), bf16);
      },
      "attention_weights are returned in float32 arithmetic only");
}

}  // namespace
}  // namespace simdattn
