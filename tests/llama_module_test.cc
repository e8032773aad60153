// The modules of current models: MultiHeadAttention loading Hugging Face
// llama-style state_dicts and serving continuous-batching steps over pages
// the test owns (AttentionModule::ForwardStep with a VarlenStep), against a
// float64 PyTorch layer (tests/data/make_llama_golden.py) on every SIMD
// target; and the step's errors, which leave pages and outputs as they were.
// MlaAttention (DeepSeek's latent attention) likewise against
// tests/data/make_mla_golden.py's layer, through the cache and pages of
// every type.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "simdattn/attention.h"
#include "tests/test_util.h"
#include "tools/io/module_spec.h"
#include "tools/io/npy.h"
#include "tools/io/safetensors.h"

namespace simdattn {
namespace {

using test::ExpectInvalid;

const std::string kDir = std::string(SIMDATTN_TEST_DATA_DIR) + "/llama/";
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

nlohmann::json Cases() {
  std::ifstream in(kDir + "cases.json");
  return nlohmann::json::parse(in)["cases"];
}

MultiHeadAttentionConfig LlamaConfig(const nlohmann::json& c) {
  MultiHeadAttentionConfig m;
  m.d_in = c["hidden"];
  m.num_heads = c["num_heads"];
  m.num_kv_heads = c["num_kv_heads"];
  m.d_out = m.num_heads * c["head_dim"].get<size_t>();
  m.qkv_bias = c["qkv_bias"];
  m.out_bias = c["out_bias"];
  m.weight_names = WeightNames::kLlama;
  m.variants.window = c["window"];
  RopeOptions rope;
  rope.theta = c["theta"];
  m.rope = rope;
  return m;
}

// A float pool of blocks the test owns, (num_blocks, kv_heads, block_size,
// head_dim) per side, every element NaN until written: a masked or unwritten
// slot that reached a result would show.
struct Pool {
  static constexpr size_t kBlockSize = 4, kNumBlocks = 24;
  std::vector<float> keys, values;
  KVPages pages;
  std::vector<int32_t> free;  // Taken from the back.

  Pool(size_t kv_heads, size_t head_dim)
      : keys(kNumBlocks * kv_heads * kBlockSize * head_dim, kNaN),
        values(keys) {
    pages.kv_heads = kv_heads;
    pages.head_dim = head_dim;
    pages.keys = keys.data();
    pages.values = values.data();
    pages.block_stride = kv_heads * kBlockSize * head_dim;
    pages.head_stride = kBlockSize * head_dim;
    pages.row_stride = head_dim;
    pages.block_size = kBlockSize;
    pages.num_blocks = kNumBlocks;
    for (size_t b = kNumBlocks; b-- > 0;) free.push_back(int32_t(b));
  }
};

// A live sequence: its blocks and the tokens it keeps.
struct Sequence {
  std::vector<int32_t> blocks;
  size_t length = 0;
};

class LlamaModuleTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(LlamaModuleTest);

// The golden schedule as a server runs it: every live sequence is in every
// step (those with no new tokens idle), joiners take blocks from the pool,
// leavers give them back (their stale rows stay), rejected drafts roll the
// length back and the next step overwrites their slots.
TEST_P(LlamaModuleTest, ServingStepsMatchPyTorch) {
  const nlohmann::json cases = Cases();
  ASSERT_EQ(cases.size(), 2u);
  for (const nlohmann::json& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const io::SafeTensors weights =
        io::SafeTensors::Load(kDir + name + ".safetensors");
    const io::NpyArray x = io::ReadNpy(kDir + name + ".x.npy");
    const io::NpyArray expected = io::ReadNpy(kDir + name + ".y.npy");
    MultiHeadAttention module(LlamaConfig(c));
    module.LoadStateDict(io::StateDictOf(weights));
    const size_t hidden = c["hidden"];
    ASSERT_EQ(module.config().y_features(), hidden);
    const double tolerance =
        2e-5 * std::max(1.0, c["max_abs_output"].get<double>());

    // The first step's first sequence is a prefill from position 0: Forward
    // over it gives the same rows.
    const size_t first = c["schedule"][0][0][1];
    std::vector<float> y(first * hidden, kNaN);
    module.Forward(ConstMatrix(x.data.data(), first, hidden),
                   Matrix(y.data(), first, hidden));
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], expected.data[i], tolerance) << "Forward, " << i;
    }

    Pool pool(c["num_kv_heads"], c["head_dim"]);
    constexpr size_t kBlocksPerSequence = 8;
    std::map<size_t, Sequence> live;
    const nlohmann::json& schedule = c["schedule"];
    size_t row = 0;  // Into x and expected.
    for (size_t s = 0; s < schedule.size(); ++s) {
      std::map<size_t, size_t> new_tokens, rejected;
      for (const nlohmann::json& entry : schedule[s]) {
        new_tokens[entry[0]] = entry[1];
        rejected[entry[0]] = entry[2];
        live[entry[0]];  // Joins.
      }
      std::vector<size_t> starts = {0}, seq_lens;
      std::vector<int32_t> table;
      std::vector<int64_t> slots;
      for (auto& [id, seq] : live) {
        const size_t n = new_tokens.count(id) ? new_tokens[id] : 0;
        const size_t length = seq.length + n;
        while (seq.blocks.size() * Pool::kBlockSize < length) {
          ASSERT_FALSE(pool.free.empty());
          seq.blocks.push_back(pool.free.back());
          pool.free.pop_back();
        }
        for (size_t p = seq.length; p < length; ++p) {
          slots.push_back(int64_t{seq.blocks[p / Pool::kBlockSize]} *
                              int64_t{Pool::kBlockSize} +
                          int64_t(p % Pool::kBlockSize));
        }
        std::vector<int32_t> entries = seq.blocks;
        entries.resize(kBlocksPerSequence, -1);
        table.insert(table.end(), entries.begin(), entries.end());
        starts.push_back(starts.back() + n);
        seq_lens.push_back(length);
      }
      VarlenStep step;
      step.num_seqs = live.size();
      step.query_starts = starts.data();
      step.seq_lens = seq_lens.data();
      step.block_table = table.data();
      step.blocks_per_sequence = kBlocksPerSequence;
      step.slot_mapping = slots.data();
      const size_t n = starts.back();
      std::vector<float> out(n * hidden, kNaN);
      module.ForwardStep(ConstMatrix(x.data.data() + row * hidden, n, hidden),
                         step, pool.pages, Matrix(out.data(), n, hidden));
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], expected.data[row * hidden + i], tolerance)
            << "step " << s << ", token " << i / hidden;
      }
      row += n;

      // Rejected drafts roll back; a sequence in no later step leaves.
      size_t b = 0;
      for (auto it = live.begin(); it != live.end(); ++b) {
        it->second.length = seq_lens[b] - rejected[it->first];
        bool later = false;
        for (size_t t = s + 1; t < schedule.size(); ++t) {
          for (const nlohmann::json& entry : schedule[t]) {
            later |= entry[0].get<size_t>() == it->first;
          }
        }
        if (later) {
          ++it;
          continue;
        }
        pool.free.insert(pool.free.end(), it->second.blocks.rbegin(),
                         it->second.blocks.rend());
        it = live.erase(it);
      }
    }
    EXPECT_EQ(row, x.shape[0]);
  }
}

// Speculative verification of a draft tree through the module's step: each
// draft token (rotated at the prefix's length plus its depth, seeing the
// prefix and its ancestors) gives the row a linear step over its path alone
// gives.
TEST_P(LlamaModuleTest, TreeStepEqualsEachPathAlone) {
  MultiHeadAttentionConfig m;
  m.d_in = 32;
  m.d_out = 32;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.weight_names = WeightNames::kLlama;
  m.rope = RopeOptions{};
  MultiHeadAttention module(m);
  constexpr size_t kPrefix = 6, kDrafts = 5, kIn = 32;
  // Root 0; 1 and 2 its children; 3 under 1, 4 under 2.
  const size_t parent[kDrafts] = {kDrafts, 0, 0, 1, 2};
  const std::vector<float> x =
      test::RandomVector((kPrefix + kDrafts) * kIn, 17);
  Pool pool(2, 8);
  const std::vector<int32_t> table = {5, 9, 2, -1};
  const auto slot = [&](size_t p) {
    return int64_t{table[p / Pool::kBlockSize]} * int64_t{Pool::kBlockSize} +
           int64_t(p % Pool::kBlockSize);
  };
  // Runs one sequence's step of the given x rows over `pages`.
  const auto run = [&](const std::vector<size_t>& rows, size_t length,
                       const size_t* positions, const uint64_t* bits,
                       const KVPages& pages) {
    const size_t n = rows.size();
    std::vector<float> in(n * kIn), out(n * kIn, kNaN);
    for (size_t i = 0; i < n; ++i) {
      std::copy_n(x.begin() + rows[i] * kIn, kIn, in.begin() + i * kIn);
    }
    const std::vector<size_t> starts = {0, n}, lens = {length};
    std::vector<int64_t> slots;
    for (size_t p = length - n; p < length; ++p) slots.push_back(slot(p));
    const size_t offsets[1] = {0};
    VarlenStep step;
    step.num_seqs = 1;
    step.query_starts = starts.data();
    step.seq_lens = lens.data();
    step.block_table = table.data();
    step.blocks_per_sequence = table.size();
    step.slot_mapping = slots.data();
    step.positions = positions;
    step.tree_bits = bits;
    step.tree_offsets = bits != nullptr ? offsets : nullptr;
    module.ForwardStep(ConstMatrix(in.data(), n, kIn), step, pages,
                       Matrix(out.data(), n, kIn));
    return out;
  };
  std::vector<size_t> prefix(kPrefix);
  std::iota(prefix.begin(), prefix.end(), 0);
  run(prefix, kPrefix, nullptr, nullptr, pool.pages);
  const std::vector<float> keys = pool.keys, values = pool.values;

  uint64_t bits = 0;
  std::vector<size_t> positions(kDrafts), drafts(kDrafts);
  for (size_t i = 0; i < kDrafts; ++i) {
    drafts[i] = kPrefix + i;
    positions[i] = kPrefix;
    for (size_t a = i; a != kDrafts; a = parent[a]) {
      bits |= uint64_t{1} << (i * kDrafts + a);
      positions[i] += a != i;
    }
  }
  const std::vector<float> tree =
      run(drafts, kPrefix + kDrafts, positions.data(), &bits, pool.pages);
  for (size_t i = 0; i < kDrafts; ++i) {
    std::vector<size_t> path;
    for (size_t a = i; a != kDrafts; a = parent[a])
      path.insert(path.begin(), a);
    std::vector<size_t> rows;
    for (size_t a : path) rows.push_back(kPrefix + a);
    Pool alone(2, 8);
    alone.keys = keys;
    alone.values = values;
    alone.pages.keys = alone.keys.data();
    alone.pages.values = alone.values.data();
    const std::vector<float> linear =
        run(rows, kPrefix + path.size(), nullptr, nullptr, alone.pages);
    for (size_t c = 0; c < kIn; ++c) {
      ASSERT_NEAR(tree[i * kIn + c], linear[(path.size() - 1) * kIn + c], 1e-5)
          << "draft " << i << ", feature " << c;
    }
  }
}

// MLA: Forward, generation over a latent KVCache and varlen steps over
// latent pages give the float64 layer's rows: float32 within float
// arithmetic's error, the other types within about three times the error
// their rounding gave on a Zen 5 (bf16 1.2e-3, f16 2.3e-4, int8 and q8_0
// 5e-3, fp8 3.8e-2, q4_0 6.7e-2 of outputs up to 0.86), far below what a
// wrongly scaled value (the 20-33x of issue 76) would give.
const std::string kMlaDir = std::string(SIMDATTN_TEST_DATA_DIR) + "/mla/";

MlaConfig MlaConfigOf(const nlohmann::json& c) {
  MlaConfig m;
  m.hidden_size = c["hidden"];
  m.num_heads = c["num_heads"];
  m.q_lora_rank = c["q_lora_rank"];
  m.kv_lora_rank = c["kv_lora_rank"];
  m.qk_nope_head_dim = c["qk_nope_head_dim"];
  m.qk_rope_head_dim = c["qk_rope_head_dim"];
  m.v_head_dim = c["v_head_dim"];
  m.rope_theta = c["rope_theta"];
  m.rms_norm_eps = c["rms_norm_eps"];
  return m;
}

double MlaTolerance(KVType type) {
  switch (type) {
    case KVType::kF32:
      return 2e-6;
    case KVType::kBF16:
      return 4e-3;
    case KVType::kF16:
      return 1e-3;
    case KVType::kInt8:
    case KVType::kQ8_0:
      return 1.5e-2;
    case KVType::kFp8E4M3:
    case KVType::kFp8E5M2:
      return 0.1;
    default:  // q4_0.
      return 0.2;
  }
}

TEST_P(LlamaModuleTest, MlaMatchesPyTorchThroughCachesAndPages) {
  std::ifstream in(kMlaDir + "cases.json");
  const nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  ASSERT_EQ(cases.size(), 2u);
  for (const nlohmann::json& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const io::SafeTensors weights =
        io::SafeTensors::Load(kMlaDir + name + ".safetensors");
    const io::NpyArray x = io::ReadNpy(kMlaDir + name + ".x.npy");
    const io::NpyArray expected = io::ReadNpy(kMlaDir + name + ".y.npy");
    MlaAttention module(MlaConfigOf(c));
    module.LoadStateDict(io::StateDictOf(weights));
    const size_t hidden = c["hidden"], tokens = x.shape[0];
    const double scale = std::max(1.0, c["max_abs_output"].get<double>());
    const auto expect = [&](const std::vector<float>& y, double tolerance,
                            const std::string& what) {
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], expected.data[i], tolerance * scale)
            << what << ", token " << i / hidden;
      }
    };
    std::vector<float> y(tokens * hidden, kNaN);
    module.Forward(ConstTensor3(x.data.data(), 1, tokens, hidden),
                   Tensor3(y.data(), 1, tokens, hidden));
    expect(y, 2e-5, "Forward");

    // Chunks as a server feeds them: a prefill, decodes, a verification.
    std::vector<size_t> chunks = {5, 1, 1, 3};
    chunks.push_back(tokens - 10);
    const size_t latent = module.latent_dim();
    for (const KVType type :
         test::AllElementTypes()) {
      const std::string type_name = ElementTraitsOf(type).name;
      if (latent % ElementTraitsOf(type).values != 0) continue;
      // A KVCache (paged for float32) and caller pages of the type.
      // fp8's key scale serves the values too (issue 76): the value scale
      // given is never read.
      KVCacheConfig config = module.LatentCacheConfig(type);
      config.block_size = type == KVType::kF32 ? 16 : 0;
      config.key_scale = 0.5f;
      config.value_scale = 3.0f;
      KVCache cache(1, 1, tokens, latent, config);
      KVPages pages = DenseKVPages(type, 1, latent, c["kv_lora_rank"], 4, 8);
      const KVPagesSize size = SizeOf(pages);
      std::vector<uint8_t> pool(size.key_bytes, 0xFF);
      std::vector<float> scales(size.scales, kNaN);
      pages.keys = pages.values = pool.data();
      pages.key_scales = scales.data();
      pages.key_scale = 0.5f;
      pages.value_scale = 3.0f;
      const std::vector<int32_t> table = {6, 1, 4, 0, 7};  // 20 slots.
      std::vector<float> from_cache(tokens * hidden, kNaN),
          from_pages(tokens * hidden, kNaN);
      size_t done = 0;
      for (const size_t n : chunks) {
        const float* xs = x.data.data() + done * hidden;
        module.ForwardStep(
            ConstTensor3(xs, 1, n, hidden), cache,
            Tensor3(from_cache.data() + done * hidden, 1, n, hidden));
        const std::vector<size_t> starts = {0, n}, lens = {done + n};
        std::vector<int64_t> slots;
        for (size_t p = done; p < done + n; ++p) {
          slots.push_back(int64_t{table[p / 4]} * 4 + int64_t(p % 4));
        }
        VarlenStep step;
        step.num_seqs = 1;
        step.query_starts = starts.data();
        step.seq_lens = lens.data();
        step.block_table = table.data();
        step.blocks_per_sequence = table.size();
        step.slot_mapping = slots.data();
        module.ForwardStep(
            ConstMatrix(xs, n, hidden), step, pages,
            Matrix(from_pages.data() + done * hidden, n, hidden));
        done += n;
      }
      expect(from_cache, MlaTolerance(type), type_name + " cache");
      expect(from_pages, MlaTolerance(type), type_name + " pages");
      // The two paths store the same bits and read them alike.
      for (size_t i = 0; i < from_cache.size(); ++i) {
        ASSERT_NEAR(from_cache[i], from_pages[i], 1e-5 * scale) << type_name;
      }
    }
  }
}

TEST(MlaErrors, ArgumentsNameThemselvesAndChangeNothing) {
  MlaConfig c;
  c.hidden_size = 16;
  c.num_heads = 2;
  c.kv_lora_rank = 8;
  c.qk_nope_head_dim = 4;
  c.qk_rope_head_dim = 3;
  c.v_head_dim = 4;
  ExpectInvalid([&] { MlaAttention m(c); },
                {"MlaAttention: ", "qk_rope_head_dim (3) is not even"});
  c.qk_rope_head_dim = 4;
  MlaAttention module(c);
  EXPECT_EQ(module.latent_dim(), 12u);
  const std::map<std::string, std::vector<size_t>> shapes =
      module.StateDictShapes();
  EXPECT_EQ(shapes.at("q_proj.weight"), (std::vector<size_t>{16, 16}));
  EXPECT_EQ(shapes.at("kv_a_proj_with_mqa.weight"),
            (std::vector<size_t>{12, 16}));
  EXPECT_EQ(shapes.at("kv_b_proj.weight"), (std::vector<size_t>{16, 8}));
  EXPECT_EQ(shapes.at("o_proj.weight"), (std::vector<size_t>{16, 8}));
  ExpectInvalid([&] { module.LoadStateDict({}); },
                {"MlaAttention: ", "missing tensor 'q_proj.weight'"});
  const std::vector<float> x(3 * 16, 0.5f);
  std::vector<float> y(3 * 16, -7.0f);
  // A cache of the wrong shape, pages that are not latent.
  KVCache wrong(1, 1, 8, 16, {});
  ExpectInvalid(
      [&] {
        module.ForwardStep(ConstTensor3(x.data(), 1, 3, 16), wrong,
                           Tensor3(y.data(), 1, 3, 16));
      },
      {"expected a latent cache of 1, 12, 8 (LatentCacheConfig)"});
  // A y of the wrong shape is refused before the cache changes.
  KVCache latents(1, 1, 8, 12, module.LatentCacheConfig());
  ExpectInvalid(
      [&] {
        module.ForwardStep(ConstTensor3(x.data(), 1, 3, 16), latents,
                           Tensor3(y.data(), 1, 2, 16));
      },
      {"x is (1, 3, 16) and y (1, 2, 16): expected both (1, 3, 16)"});
  EXPECT_EQ(latents.length(0), 0u);
  std::vector<float> keys(4 * 4 * 12, kNaN), values(keys);
  KVPages pages = DenseKVPages(KVType::kF32, 1, 12, 8, 4, 4);
  pages.keys = keys.data();
  pages.values = values.data();
  const std::vector<size_t> starts = {0, 3}, lens = {3};
  const std::vector<int32_t> table = {2, -1};
  const std::vector<int64_t> slots = {8, 9, 10};
  VarlenStep step;
  step.num_seqs = 1;
  step.query_starts = starts.data();
  step.seq_lens = lens.data();
  step.block_table = table.data();
  step.blocks_per_sequence = 2;
  step.slot_mapping = slots.data();
  const auto run = [&] {
    module.ForwardStep(ConstMatrix(x.data(), 3, 16), step, pages,
                       Matrix(y.data(), 3, 16));
  };
  ExpectInvalid(run, {"expected latent pages of 1, 12, 8"});
  pages.values = keys.data();
  const std::vector<size_t> short_lens = {2};
  step.seq_lens = short_lens.data();
  ExpectInvalid(run, {"step.seq_lens[0] (2) is less than its 3 new tokens"});
  step.seq_lens = lens.data();
  const std::vector<int64_t> outside = {8, 9, 99};
  step.slot_mapping = outside.data();
  ExpectInvalid(run, {"step.slot_mapping[2] (99) is not a slot"});
  for (const float k : keys) ASSERT_TRUE(std::isnan(k));
  for (const float v : y) ASSERT_EQ(v, -7.0f);
  step.slot_mapping = slots.data();
  run();
  for (const float v : y) ASSERT_TRUE(std::isfinite(v));
}

// A small llama-style module over a pool for the error cases.
struct ErrorFixture {
  MultiHeadAttention module{[] {
    MultiHeadAttentionConfig m;
    m.d_in = 8;
    m.d_out = 8;
    m.num_heads = 2;
    m.num_kv_heads = 1;
    m.weight_names = WeightNames::kLlama;
    m.rope = RopeOptions{};
    return m;
  }()};
  Pool pool{1, 4};
  std::vector<size_t> starts = {0, 2, 3}, seq_lens = {5, 1};
  std::vector<int32_t> table = {0, 1, 2, -1};
  std::vector<int64_t> slots = {3, 4, 8};
  std::vector<float> x = std::vector<float>(3 * 8, 0.5f);
  std::vector<float> y = std::vector<float>(3 * 8, -7.0f);

  VarlenStep Step() const {
    VarlenStep step;
    step.num_seqs = 2;
    step.query_starts = starts.data();
    step.seq_lens = seq_lens.data();
    step.block_table = table.data();
    step.blocks_per_sequence = 2;
    step.slot_mapping = slots.data();
    return step;
  }
  void Run(const VarlenStep& step, const KVPages& pages) {
    module.ForwardStep(ConstMatrix(x.data(), 3, 8), step, pages,
                       Matrix(y.data(), 3, 8));
  }
};

TEST(LlamaModuleErrors, BadStepsNameThemselvesAndChangeNothing) {
  ErrorFixture f;
  // Sequence 0's first 3 tokens (slots 0-2) by a step of their own.
  {
    std::vector<size_t> starts = {0, 3, 3}, lens = {3, 0};
    std::vector<int64_t> slots = {0, 1, 2};
    VarlenStep prefill = f.Step();
    prefill.query_starts = starts.data();
    prefill.seq_lens = lens.data();
    prefill.slot_mapping = slots.data();
    std::vector<float> y(3 * 8);
    f.module.ForwardStep(ConstMatrix(f.x.data(), 3, 8), prefill, f.pool.pages,
                         Matrix(y.data(), 3, 8));
    for (float v : y) ASSERT_TRUE(std::isfinite(v));
  }
  const std::vector<float> keys = f.pool.keys, values = f.pool.values;
  const auto unchanged = [&] {
    EXPECT_EQ(0, std::memcmp(keys.data(), f.pool.keys.data(),
                             keys.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(values.data(), f.pool.values.data(),
                             values.size() * sizeof(float)));
    for (float o : f.y) ASSERT_EQ(o, -7.0f);
  };
  {
    VarlenStep step = f.Step();
    std::vector<size_t> starts = {0, 2, 2};
    step.query_starts = starts.data();
    ExpectInvalid([&] { f.Run(step, f.pool.pages); },
                  "query_starts[2] (2) differs from the 3 packed tokens");
    unchanged();
  }
  {
    VarlenStep step = f.Step();
    std::vector<size_t> lens = {1, 1};
    step.seq_lens = lens.data();
    ExpectInvalid([&] { f.Run(step, f.pool.pages); }, "kv.lengths[0] (1)");
    unchanged();
  }
  {
    VarlenStep step = f.Step();
    std::vector<int32_t> table = {0, -1, 2, -1};
    step.block_table = table.data();
    ExpectInvalid([&] { f.Run(step, f.pool.pages); }, "block_table");
    unchanged();
  }
  {
    VarlenStep step = f.Step();
    std::vector<int64_t> slots = {3, 3, 8};
    step.slot_mapping = slots.data();
    ExpectInvalid([&] { f.Run(step, f.pool.pages); },
                  "slot 3 appears twice in slot_mapping");
    unchanged();
  }
  {
    KVPages pages = f.pool.pages;
    pages.head_dim = 8;
    ExpectInvalid([&] { f.Run(f.Step(), pages); },
                  {"MultiHeadAttention", "head_dim 8", "expected 1, 4, 4"});
    unchanged();
  }
  {
    KVPages pages = f.pool.pages;
    pages.type = KVType::kF16;
    ForwardOptions options;
    options.compute = ComputeType::kBFloat16;
    ExpectInvalid(
        [&] {
          f.module.ForwardStep(ConstMatrix(f.x.data(), 3, 8), f.Step(), pages,
                               Matrix(f.y.data(), 3, 8), options);
        },
        "options.compute is kBFloat16");
    unchanged();
  }
  {
    Matrix y(f.pool.keys.data(), 3, 8);
    ExpectInvalid(
        [&] {
          f.module.ForwardStep(ConstMatrix(f.x.data(), 3, 8), f.Step(),
                               f.pool.pages, y);
        },
        "y overlaps the pages");
    unchanged();
  }
  f.Run(f.Step(), f.pool.pages);
  for (float v : f.y) EXPECT_TRUE(std::isfinite(v));
}

TEST(LlamaModuleErrors, ConfigAndStateDictNames) {
  MultiHeadAttentionConfig m;
  m.d_in = 6;
  m.d_out = 8;
  m.num_heads = 2;
  m.context_length = 16;
  m.out_bias = true;
  ExpectInvalid([&] { MultiHeadAttention module(m); },
                "out_bias is for kLlama weight names");
  m.out_bias = false;
  m.weight_names = static_cast<WeightNames>(5);
  ExpectInvalid([&] { MultiHeadAttention module(m); },
                "weight_names (5) is not a WeightNames");

  // Qwen2: q, k, v biases; o_proj back to d_in, no bias; no mask buffer.
  m.weight_names = WeightNames::kLlama;
  m.qkv_bias = true;
  m.num_kv_heads = 1;
  const MultiHeadAttention qwen2(m);
  const std::map<std::string, std::vector<size_t>> expected = {
      {"q_proj.weight", {8, 6}}, {"q_proj.bias", {8}},
      {"k_proj.weight", {4, 6}}, {"k_proj.bias", {4}},
      {"v_proj.weight", {4, 6}}, {"v_proj.bias", {4}},
      {"o_proj.weight", {6, 8}}};
  EXPECT_EQ(qwen2.StateDictShapes(), expected);
  EXPECT_TRUE(qwen2.StateDictBuffers().empty());
  std::vector<float> x(3 * 6, 1.0f), y(3 * 8);
  ExpectInvalid(
      [&] {
        qwen2.Forward(ConstMatrix(x.data(), 3, 6), Matrix(y.data(), 3, 8));
      },
      "y is (1, 3, 8), expected (1, 3, 6)");

  // The seed's names stay: out_proj (d_out, d_out) with its bias.
  m.weight_names = WeightNames::kSeed;
  const MultiHeadAttention seed(m);
  EXPECT_EQ(seed.StateDictShapes().at("out_proj.weight"),
            (std::vector<size_t>{8, 8}));
  EXPECT_EQ(seed.StateDictShapes().count("out_proj.bias"), 1u);
  EXPECT_EQ(seed.StateDictShapes().count("mask"), 1u);
}

}  // namespace
}  // namespace simdattn
