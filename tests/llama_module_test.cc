// The module of current models: MultiHeadAttention loading Hugging Face
// llama-style state_dicts and serving continuous-batching steps over pages
// the test owns (AttentionModule::ForwardStep with a VarlenStep), against a
// float64 PyTorch layer (tests/data/make_llama_golden.py) on every SIMD
// target; and the step's errors, which leave pages and outputs as they were.
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
