// The mask model's promise (src/ops/mask.h): a masked key contributes
// nothing, whatever K, V or the scores hold there. NaN and Inf at masked
// positions of K and V (causal, boolean, key lengths, additive -inf) leave
// every row that does not see them bit-equal to the same call with zeros
// there, on every target, fused (prefill, few rows, split-KV decode) and
// unfused (the module's weights path); rows that do see them still get NaN,
// as in PyTorch.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "simdattn/attention.h"
#include "simdattn/kernels.h"
#include "tests/test_util.h"

namespace simdattn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One attention problem: (batch, heads, q_tokens, head_dim) queries against
// kv_heads heads of k_tokens keys, with one kind of mask.
struct Problem {
  size_t batch, heads, kv_heads, q_tokens, k_tokens, head_dim;
  std::string mask_kind;  // "causal", "boolean", "lengths" or "additive".
  ComputeType compute = ComputeType::kFloat32;  // Fused attention's.

  size_t Offset() const { return k_tokens - q_tokens; }
  // Keys masked for every row of (b, g): poisoned below.
  bool Padding(size_t b, size_t j) const {
    if (mask_kind == "lengths") return j >= KeyLength(b);
    if (mask_kind == "boolean" || mask_kind == "additive") {
      return (j + b) % 7 == 3;
    }
    return false;  // Causal: no key is masked for every row.
  }
  size_t KeyLength(size_t b) const { return k_tokens - 5 - 3 * b; }
  // Masked for some rows only (not poisoned for the bit-equality).
  bool Scattered(size_t b, size_t h, size_t i, size_t j) const {
    return (i * 5 + j * 3 + h + b) % 11 == 0;
  }
  bool Visible(size_t b, size_t h, size_t i, size_t j) const {
    if (mask_kind == "causal") return j <= i + Offset();
    if (Padding(b, j)) return false;
    return mask_kind == "lengths" || !Scattered(b, h, i, j);
  }
};

struct Tensors {
  std::vector<float> q, k, v, out;
  std::vector<uint8_t> boolean;
  std::vector<float> additive;
  std::vector<size_t> lengths;
};

Tensors MakeTensors(const Problem& p) {
  Tensors t;
  t.q = test::RandomVector(p.batch * p.heads * p.q_tokens * p.head_dim, 1);
  t.k = test::RandomVector(p.batch * p.kv_heads * p.k_tokens * p.head_dim, 2);
  t.v = test::RandomVector(p.batch * p.kv_heads * p.k_tokens * p.head_dim, 3);
  t.out.assign(p.batch * p.heads * p.q_tokens * p.head_dim, -7.0f);
  const size_t scores = p.batch * p.heads * p.q_tokens * p.k_tokens;
  t.boolean.assign(scores, 0);
  t.additive.assign(scores, 0.0f);
  size_t index = 0;
  for (size_t b = 0; b < p.batch; ++b) {
    for (size_t h = 0; h < p.heads; ++h) {
      for (size_t i = 0; i < p.q_tokens; ++i) {
        for (size_t j = 0; j < p.k_tokens; ++j, ++index) {
          const bool masked = !p.Visible(b, h, i, j);
          t.boolean[index] = masked ? 1 : 0;
          t.additive[index] = masked ? -kInf : 0.25f * ((i + j) % 3);
        }
      }
    }
    t.lengths.push_back(p.KeyLength(b));
  }
  return t;
}

void Attend(const Problem& p, Tensors& t) {
  AttentionOptions options;
  options.compute = p.compute;
  AttentionMask& m = options.mask;
  if (p.mask_kind == "causal") {
    m.causal = true;
    m.causal_offset = p.Offset();
  } else if (p.mask_kind == "lengths") {
    m.key_lengths = t.lengths.data();
  } else if (p.mask_kind == "boolean") {
    m.boolean = Tensor4View<const uint8_t>::Dense(
        t.boolean.data(), p.batch, p.heads, p.q_tokens, p.k_tokens);
  } else {
    m.additive = ConstTensor4::Dense(t.additive.data(), p.batch, p.heads,
                                     p.q_tokens, p.k_tokens);
  }
  const auto view = [&](std::vector<float>& data, size_t heads, size_t tokens) {
    return Tensor4::Dense(data.data(), p.batch, heads, tokens, p.head_dim);
  };
  ScaledDotProductAttention(view(t.q, p.heads, p.q_tokens),
                            view(t.k, p.kv_heads, p.k_tokens),
                            view(t.v, p.kv_heads, p.k_tokens),
                            view(t.out, p.heads, p.q_tokens), options);
}

// Poisons K or V (which) at `key` of every (b, kv head) where poisoned(b, j).
template <typename Poisoned>
void Poison(const Problem& p, std::vector<float>& data, float value,
            const Poisoned& poisoned) {
  for (size_t b = 0; b < p.batch; ++b) {
    for (size_t g = 0; g < p.kv_heads; ++g) {
      for (size_t j = 0; j < p.k_tokens; ++j) {
        if (!poisoned(b, j)) continue;
        float* row =
            &data[((b * p.kv_heads + g) * p.k_tokens + j) * p.head_dim];
        for (size_t c = 0; c < p.head_dim; ++c) {
          row[c] = c % 2 == 0 ? value : 0.0f;
        }
      }
    }
  }
}

// Every row that does not see a poisoned key is bit-equal to `clean`. Rows
// that see one propagate it as PyTorch does: NaN in K makes the score and
// so the row NaN; NaN or Inf in V reaches the poisoned (even) columns. (An
// infinite K may give a score of -inf, whose weight is an exact 0.)
template <typename Poisoned>
void ExpectOnlyVisibleRowsChange(const Problem& p, const Tensors& clean,
                                 const Tensors& poisoned_run, float value,
                                 bool in_v, const Poisoned& poisoned,
                                 const std::string& what) {
  size_t unaffected = 0;
  for (size_t b = 0; b < p.batch; ++b) {
    for (size_t h = 0; h < p.heads; ++h) {
      for (size_t i = 0; i < p.q_tokens; ++i) {
        bool sees = false;
        for (size_t j = 0; j < p.k_tokens; ++j) {
          sees = sees || (poisoned(b, j) && p.Visible(b, h, i, j));
        }
        const size_t at = ((b * p.heads + h) * p.q_tokens + i) * p.head_dim;
        const float* got = &poisoned_run.out[at];
        const std::string row = what + ": row (" + std::to_string(b) + ", " +
                                std::to_string(h) + ", " + std::to_string(i) +
                                ")";
        if (!sees) {
          ++unaffected;
          ASSERT_EQ(std::memcmp(got, &clean.out[at], p.head_dim * 4), 0)
              << row << " sees no poisoned key but changed";
          continue;
        }
        for (size_t c = 0; c < p.head_dim; ++c) {
          if (in_v && c % 2 == 0) {
            ASSERT_FALSE(std::isfinite(got[c])) << row << ", column " << c;
          }
          if (std::isnan(value) && (!in_v || c % 2 == 0)) {
            ASSERT_TRUE(std::isnan(got[c])) << row << ", column " << c;
          }
        }
      }
    }
  }
  ASSERT_GT(unaffected, 0u) << what << ": the test checks nothing";
}

class MaskingTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(MaskingTest);

// Fused attention: prefill over several key tiles, a few rows (read in
// place), and decode with the keys split across tasks; in float32 and bf16
// arithmetic (AMX tiles on the prefill where the CPU has them).
TEST_P(MaskingTest, PoisonAtMaskedKeysChangesNoOtherRow) {
  std::vector<Problem> shapes = {
      {2, 4, 2, 70, 300, 16, ""},  // Prefill: tiles of queries and keys.
      {1, 2, 1, 3, 130, 8, ""},    // Few rows.
      {1, 2, 2, 1, 1100, 16, ""},  // Decode: split keys.
  };
  for (size_t i = 0, n = shapes.size(); i < n; ++i) {
    shapes.push_back(shapes[i]);
    shapes.back().compute = ComputeType::kBFloat16;
  }
  for (Problem p : shapes) {
    for (const char* kind : {"causal", "boolean", "lengths", "additive"}) {
      p.mask_kind = kind;
      // One query row sees every key under a causal mask: nothing to poison.
      if (p.mask_kind == "causal" && p.q_tokens == 1) continue;
      const Tensors base = MakeTensors(p);
      // Causal masks no key for every row: poison the last key, seen only
      // by the last rows.
      const auto poisoned = [&](size_t b, size_t j) {
        return p.mask_kind == "causal" ? j + 1 == p.k_tokens : p.Padding(b, j);
      };
      Tensors clean = base;
      Poison(p, clean.k, 0.0f, poisoned);
      Poison(p, clean.v, 0.0f, poisoned);
      Attend(p, clean);
      for (const bool in_v : {false, true}) {
        for (const float value : {kNaN, kInf, -kInf}) {
          Tensors run = base;
          Poison(p, run.k, 0.0f, poisoned);
          Poison(p, run.v, 0.0f, poisoned);
          Poison(p, in_v ? run.v : run.k, value, poisoned);
          Attend(p, run);
          const std::string what =
              std::string(kind) + " q_tokens " + std::to_string(p.q_tokens) +
              " poison " + std::to_string(value) + (in_v ? " in V" : " in K") +
              (p.compute == ComputeType::kBFloat16 ? " bf16" : "");
          ExpectOnlyVisibleRowsChange(p, clean, run, value, in_v, poisoned,
                                      what);
        }
      }
    }
  }
}

// Softmax: scores that are NaN or Inf where masked give exactly the weights
// of zeros there.
TEST_P(MaskingTest, SoftmaxIgnoresMaskedScores) {
  Problem p{2, 3, 3, 37, 37, 1, ""};
  for (const char* kind : {"causal", "boolean", "lengths", "additive"}) {
    p.mask_kind = kind;
    Tensors t = MakeTensors(p);
    AttentionMask m;
    if (p.mask_kind == "causal") {
      m.causal = true;
    } else if (p.mask_kind == "lengths") {
      m.key_lengths = t.lengths.data();
    } else if (p.mask_kind == "boolean") {
      m.boolean =
          Tensor4View<const uint8_t>::Dense(t.boolean.data(), 2, 3, 37, 37);
    } else {
      m.additive = ConstTensor4::Dense(t.additive.data(), 2, 3, 37, 37);
    }
    const size_t n = 2 * 3 * 37 * 37;
    std::vector<float> clean = test::RandomVector(n, 4, -3.0f, 3.0f);
    for (const float value : {kNaN, kInf, -kInf}) {
      std::vector<float> x = clean, y_clean(n), y(n);
      size_t index = 0, poisoned = 0;
      for (size_t b = 0; b < 2; ++b) {
        for (size_t h = 0; h < 3; ++h) {
          for (size_t i = 0; i < 37; ++i) {
            for (size_t j = 0; j < 37; ++j, ++index) {
              if (p.Visible(b, h, i, j)) continue;
              x[index] = value;
              ++poisoned;
            }
          }
        }
      }
      ASSERT_GT(poisoned, 0u);
      std::vector<float> zeroed = x;
      for (size_t e = 0; e < n; ++e) {
        if (!std::isfinite(zeroed[e])) zeroed[e] = 0.0f;
      }
      const auto view = [](std::vector<float>& v) {
        return Tensor4::Dense(v.data(), 2, 3, 37, 37);
      };
      Softmax(view(zeroed), view(y_clean), 0.3f, m);
      Softmax(view(x), view(y), 0.3f, m);
      ASSERT_EQ(std::memcmp(y.data(), y_clean.data(), n * sizeof(float)), 0)
          << kind << " " << value;
    }
  }
}

// The module, fused and unfused (attention weights requested): NaN in one
// token's input poisons its query, key and value; the rows before it, which
// do not see it under the causal mask, are bit-equal to a zero there.
TEST_P(MaskingTest, ModuleRowsBeforeAPoisonedTokenAreUnchanged) {
  const size_t batch = 2, tokens = 40, d = 32, heads = 4, poisoned = 23;
  const MultiHeadAttention mha(
      test::MhaConfig(d, d, tokens, heads, /*qkv_bias=*/true, /*seed=*/5));
  std::vector<float> x = test::RandomVector(batch * tokens * d, 6);
  std::vector<float> x_zero = x;
  for (size_t b = 0; b < batch; ++b) {
    for (size_t c = 0; c < d; ++c) {
      x[(b * tokens + poisoned) * d + c] = kNaN;
      x_zero[(b * tokens + poisoned) * d + c] = 0.0f;
    }
  }
  for (const bool fused : {true, false}) {
    std::vector<float> y(batch * tokens * d), y_zero(batch * tokens * d);
    std::vector<float> weights(batch * heads * tokens * tokens);
    ForwardOptions options;
    if (!fused) {
      options.attention_weights =
          Tensor4::Dense(weights.data(), batch, heads, tokens, tokens);
    }
    mha.Forward(ConstTensor3(x.data(), batch, tokens, d),
                Tensor3(y.data(), batch, tokens, d), options);
    mha.Forward(ConstTensor3(x_zero.data(), batch, tokens, d),
                Tensor3(y_zero.data(), batch, tokens, d), options);
    for (size_t b = 0; b < batch; ++b) {
      const size_t row = b * tokens * d;
      ASSERT_EQ(std::memcmp(&y[row], &y_zero[row], poisoned * d * 4), 0)
          << (fused ? "fused" : "unfused") << " batch " << b;
      for (size_t t = poisoned; t < tokens; ++t) {
        ASSERT_TRUE(std::isnan(y[row + t * d])) << "token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace simdattn
