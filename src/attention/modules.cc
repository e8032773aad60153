// The seed modules as configurations of AttentionModule.
#include "simdattn/attention.h"
#include "src/attention/state_dict.h"
#include "src/common/check.h"

namespace simdattn {
namespace {

using internal::StateDictLayout;

AttentionConfig SingleHead(size_t d_in, size_t d_out) {
  AttentionConfig c;
  c.d_in = d_in;
  c.head_dim = d_out;
  return c;
}

// context_length 0: any number of tokens, and no causal mask buffer in the
// state_dict.
AttentionConfig Causal(size_t d_in, size_t d_out, size_t context_length,
                       float dropout, bool qkv_bias) {
  AttentionConfig c = SingleHead(d_in, d_out);
  c.context_length = context_length;
  c.dropout = dropout;
  c.qkv_bias = qkv_bias;
  c.causal = true;
  return c;
}

AttentionConfig Simplified(size_t d_in) {
  AttentionConfig c = SingleHead(d_in, d_in);
  c.projections = false;
  c.scaled = false;
  return c;
}

AttentionConfig Wrapper(size_t d_in, size_t d_out, size_t context_length,
                        float dropout, size_t num_heads, bool qkv_bias) {
  constexpr const char* kName = "MultiHeadAttentionWrapper";
  SIMDATTN_REQUIRE(num_heads > 0, kName, "num_heads must be positive");
  AttentionConfig c = Causal(d_in, d_out, context_length, dropout, qkv_bias);
  c.num_heads = c.num_kv_heads = num_heads;
  return c;
}

AttentionConfig MultiHead(const MultiHeadAttentionConfig& m) {
  constexpr const char* kName = "MultiHeadAttention";
  SIMDATTN_REQUIRE(m.num_heads > 0, kName, "num_heads must be positive");
  SIMDATTN_REQUIRE(m.d_out % m.num_heads == 0, kName, "d_out (", m.d_out,
                   ") is not divisible by num_heads (", m.num_heads, ")");
  AttentionConfig c = Causal(m.d_in, m.d_out / m.num_heads, m.context_length,
                             m.dropout, m.qkv_bias);
  c.num_heads = m.num_heads;
  c.num_kv_heads = m.num_kv_heads == 0 ? m.num_heads : m.num_kv_heads;
  c.out_proj = true;
  c.variants = m.variants;
  c.rope = m.rope;
  const bool llama = m.weight_names == WeightNames::kLlama;
  SIMDATTN_REQUIRE(llama || m.weight_names == WeightNames::kSeed, kName,
                   "weight_names (", static_cast<int>(m.weight_names),
                   ") is not a WeightNames");
  SIMDATTN_REQUIRE(llama || !m.out_bias, kName,
                   "out_bias is for kLlama weight names (the seed's out_proj "
                   "always has a bias)");
  if (llama) {
    c.out_features = m.d_in;
    c.out_bias = m.out_bias;
  }
  return c;
}

MultiHeadAttentionConfig SeedConfig(size_t d_in, size_t d_out,
                                    size_t context_length, float dropout,
                                    size_t num_heads, bool qkv_bias) {
  MultiHeadAttentionConfig m;
  m.d_in = d_in;
  m.d_out = d_out;
  m.context_length = context_length;
  m.dropout = dropout;
  m.num_heads = num_heads;
  m.qkv_bias = qkv_bias;
  return m;
}

}  // namespace

SimplifiedSelfAttention::SimplifiedSelfAttention(size_t d_in)
    : AttentionModule("SimplifiedSelfAttention", Simplified(d_in),
                      StateDictLayout::kNone, 0) {}

SelfAttentionV1::SelfAttentionV1(size_t d_in, size_t d_out, uint64_t seed)
    : AttentionModule("SelfAttentionV1", SingleHead(d_in, d_out),
                      StateDictLayout::kParameter, seed) {}

SelfAttentionV2::SelfAttentionV2(size_t d_in, size_t d_out, bool qkv_bias,
                                 uint64_t seed)
    : AttentionModule(
          "SelfAttentionV2",
          [&] {
            AttentionConfig c = SingleHead(d_in, d_out);
            c.qkv_bias = qkv_bias;
            return c;
          }(),
          StateDictLayout::kLinear, seed) {}

CausalAttention::CausalAttention(size_t d_in, size_t d_out,
                                 size_t context_length, float dropout,
                                 bool qkv_bias, uint64_t seed)
    : AttentionModule("CausalAttention",
                      Causal(d_in, d_out, context_length, dropout, qkv_bias),
                      StateDictLayout::kLinear, seed) {}

MultiHeadAttentionWrapper::MultiHeadAttentionWrapper(
    size_t d_in, size_t d_out, size_t context_length, float dropout,
    size_t num_heads, bool qkv_bias, uint64_t seed)
    : AttentionModule(
          "MultiHeadAttentionWrapper",
          Wrapper(d_in, d_out, context_length, dropout, num_heads, qkv_bias),
          StateDictLayout::kHeads, seed) {}

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionConfig& config)
    : AttentionModule("MultiHeadAttention", MultiHead(config),
                      config.weight_names == WeightNames::kLlama
                          ? StateDictLayout::kLlama
                          : StateDictLayout::kLinear,
                      config.seed) {}

MultiHeadAttention::MultiHeadAttention(size_t d_in, size_t d_out,
                                       size_t context_length, float dropout,
                                       size_t num_heads, bool qkv_bias)
    : MultiHeadAttention(SeedConfig(d_in, d_out, context_length, dropout,
                                    num_heads, qkv_bias)) {}

}  // namespace simdattn
