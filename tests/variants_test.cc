// The attention variants (sliding windows, softcapping, sinks, ALiBi, ragged
// causal offsets and key lengths, the log-sum-exp output) against float64
// PyTorch written from the published definitions
// (tests/data/make_variants_golden.py), on every SIMD target: fused
// ScaledDotProductAttention (prefill, split-KV decode, token-major caches)
// and the unfused BatchedMatMul -> Softmax -> BatchedMatMul path; two calls
// over halves of the keys merged by their log-sum-exps; the same bits for
// any thread count. And the mask model's promise for these masks: NaN in K
// and V at keys a row does not see never reaches that row (fused), and
// Softmax gives exactly zero weight to masked scores, whatever they hold.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "simdattn/kernels.h"
#include "tests/test_util.h"
#include "tools/io/npy.h"

namespace simdattn {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const std::string kVariants =
    std::string(SIMDATTN_TEST_DATA_DIR) + "/variants/";

// Tolerances against the float64 reference, for float32 kernels (measured
// worst cases over all targets, for these inputs and an earlier draw, in the
// comments; the bounds leave >= 10x).
//
// Outputs: a row's output is sum_j w_j v_j with sum_j w_j <= 1, so an error
// in the weights moves it by at most max |v| sum_j |dw_j|; the error is
// measured relative to max(1, max |v|). The weights' error is that of the
// float32 scores (q . k rounded over head_dim <= 67 terms, then scaled,
// capped and biased: a few ulps of the largest term; |scale q . k| <= ~16
// and ALiBi biases <= ~40 here) times the weights, plus the softmax's own
// 2e-6 (kernels.h). Measured on AVX3, AVX2, SSE4, SSSE3 and SCALAR: <= 3.2e-7
// (fused and unfused).
constexpr double kOutputTolerance = 1e-5;
// Weights (in [0, 1]) of the unfused Softmax, absolute. Measured: <= 3e-7.
constexpr double kWeightsTolerance = 1e-5;
// Log-sum-exp: dL = sum_j w_j ds_j, the weighted error of the scores, which
// is relative to their magnitude (with ALiBi biases up to ~40 here):
// |dL| <= tolerance (1 + |L|). Measured: <= 8.3e-7 (1 + |L|).
constexpr double kLseTolerance = 1e-5;

// One golden case: its parameters (cases.json) and arrays.
struct GoldenCase {
  std::string name;
  size_t batch, q_heads, kv_heads, q_tokens, k_tokens, head_dim, value_dim;
  bool default_scale;
  float scale;  // 1 / sqrt(head_dim) when default_scale.
  bool causal;
  size_t causal_offset, window;
  std::vector<size_t> causal_offsets, key_lengths;  // Empty: not given.
  float softcap;
  std::vector<float> alibi_slopes, sinks;   // Empty: off.
  io::NpyArray q, k, v, out, lse, weights;  // weights: empty if not written.

  AttentionMask Mask() const {
    AttentionMask mask;
    mask.causal = causal;
    mask.causal_offset = causal_offset;
    mask.causal_offsets = Or(causal_offsets);
    mask.window = window;
    mask.key_lengths = Or(key_lengths);
    mask.softcap = softcap;
    mask.alibi_slopes = Or(alibi_slopes);
    mask.sinks = Or(sinks);
    return mask;
  }
  // Whether query row i of batch item b sees key j: the definitions of
  // make_variants_golden.py, restated.
  bool Visible(size_t b, size_t i, size_t j) const {
    const size_t p =
        i + (causal_offsets.empty() ? causal_offset : causal_offsets[b]);
    if ((causal || window != 0) && j > p) return false;
    if (window != 0 && j + window <= p) return false;
    return key_lengths.empty() || j < key_lengths[b];
  }
  bool SeenByAnyRow(size_t b, size_t j) const {
    for (size_t i = 0; i < q_tokens; ++i) {
      if (Visible(b, i, j)) return true;
    }
    return false;
  }

  ConstTensor4 Q() const {
    return ConstTensor4::Dense(q.data.data(), batch, q_heads, q_tokens,
                               head_dim);
  }
  ConstTensor4 K(const std::vector<float>& keys) const {
    return ConstTensor4::Dense(keys.data(), batch, kv_heads, k_tokens,
                               head_dim);
  }
  ConstTensor4 V(const std::vector<float>& values) const {
    return ConstTensor4::Dense(values.data(), batch, kv_heads, k_tokens,
                               value_dim);
  }
  size_t Rows() const { return batch * q_heads * q_tokens; }

 private:
  template <typename T>
  static const T* Or(const std::vector<T>& v) {
    return v.empty() ? nullptr : v.data();
  }
};

template <typename T>
std::vector<T> ListOrEmpty(const nlohmann::json& j) {
  return j.is_null() ? std::vector<T>() : j.get<std::vector<T>>();
}

std::vector<GoldenCase> LoadCases() {
  std::ifstream in(kVariants + "cases.json");
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const nlohmann::json& c : doc["cases"]) {
    GoldenCase g;
    g.name = c["name"];
    g.batch = c["batch"];
    g.q_heads = c["q_heads"];
    g.kv_heads = c["kv_heads"];
    g.q_tokens = c["q_tokens"];
    g.k_tokens = c["k_tokens"];
    g.head_dim = c["head_dim"];
    g.value_dim = c["value_dim"];
    g.default_scale = c["scale"].is_null();
    g.scale = g.default_scale ? 1.0f / std::sqrt(float(g.head_dim))
                              : c["scale"].get<float>();
    g.causal = c["causal"];
    g.causal_offset = c["causal_offset"];
    g.window = c["window"];
    g.causal_offsets = ListOrEmpty<size_t>(c["causal_offsets"]);
    g.key_lengths = ListOrEmpty<size_t>(c["key_lengths"]);
    g.softcap = c["softcap"];
    g.alibi_slopes = ListOrEmpty<float>(c["alibi_slopes"]);
    g.sinks = ListOrEmpty<float>(c["sinks"]);
    const nlohmann::json& files = c["files"];
    const auto read = [&](const char* key) {
      return files.contains(key)
                 ? io::ReadNpy(kVariants + files[key].get<std::string>())
                 : io::NpyArray();
    };
    g.q = read("q");
    g.k = read("k");
    g.v = read("v");
    g.out = read("out");
    g.lse = read("lse");
    g.weights = read("weights");
    cases.push_back(std::move(g));
  }
  return cases;
}

const std::vector<GoldenCase>& Cases() {
  static const std::vector<GoldenCase>* cases =
      new std::vector<GoldenCase>(LoadCases());
  return *cases;
}

const GoldenCase& CaseNamed(const std::string& name) {
  for (const GoldenCase& c : Cases()) {
    if (c.name == name) return c;
  }
  throw std::runtime_error("no golden case " + name);
}

// Fused attention of the case's queries against the given keys and values,
// with the given mask; fills out and lse.
void RunFused(const GoldenCase& c, ConstTensor4 keys, ConstTensor4 values,
              const AttentionMask& mask, std::vector<float>& out,
              std::vector<float>& lse) {
  out.assign(c.Rows() * c.value_dim, -7.0f);
  lse.assign(c.Rows(), -7.0f);
  AttentionOptions options;
  if (!c.default_scale) options.scale = c.scale;
  options.mask = mask;
  options.log_sum_exp = lse.data();
  ScaledDotProductAttention(
      c.Q(), keys, values,
      Tensor4::Dense(out.data(), c.batch, c.q_heads, c.q_tokens, c.value_dim),
      options);
}

// The case as it is, with the given K and V.
void RunFused(const GoldenCase& c, const std::vector<float>& keys,
              const std::vector<float>& values, std::vector<float>& out,
              std::vector<float>& lse) {
  RunFused(c, c.K(keys), c.V(values), c.Mask(), out, lse);
}

// The unfused scores Q K^T (unscaled), (batch, q_heads, q_tokens, k_tokens).
std::vector<float> Scores(const GoldenCase& c) {
  std::vector<float> scores(c.Rows() * c.k_tokens, -7.0f);
  MatMulOptions transposed;
  transposed.transpose_b = Transpose::kYes;
  BatchedMatMul(
      c.Q(), c.K(c.k.data),
      Tensor4::Dense(scores.data(), c.batch, c.q_heads, c.q_tokens, c.k_tokens),
      transposed);
  return scores;
}

// Softmax of the scores with the case's scale and the mask, out of place.
std::vector<float> SoftmaxOf(const GoldenCase& c,
                             const std::vector<float>& scores,
                             const AttentionMask& mask) {
  std::vector<float> weights(scores.size(), -7.0f);
  Softmax(ConstTensor4::Dense(scores.data(), c.batch, c.q_heads, c.q_tokens,
                              c.k_tokens),
          Tensor4::Dense(weights.data(), c.batch, c.q_heads, c.q_tokens,
                         c.k_tokens),
          c.scale, mask);
  return weights;
}
std::vector<float> SoftmaxOf(const GoldenCase& c,
                             const std::vector<float>& scores) {
  return SoftmaxOf(c, scores, c.Mask());
}

// The same in place.
std::vector<float> SoftmaxInPlace(const GoldenCase& c,
                                  std::vector<float> scores) {
  const Tensor4 y =
      Tensor4::Dense(scores.data(), c.batch, c.q_heads, c.q_tokens, c.k_tokens);
  Softmax(y, y, c.scale, c.Mask());
  return scores;
}

bool SameBits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

double MaxAbs(const std::vector<float>& values) {
  double m = 0.0;
  for (float x : values) m = std::max(m, std::abs(double(x)));
  return m;
}

// max |actual - expected| <= tolerance * scale.
void ExpectClose(const std::vector<float>& actual,
                 const std::vector<float>& expected, double tolerance,
                 double scale, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(double(actual[i]) - expected[i]);
    if (!(error <= worst)) {  // NaN counts as the worst.
      worst = std::isnan(error) ? HUGE_VAL : error;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, tolerance * scale)
      << what << " at flat index " << worst_at << ": " << actual[worst_at]
      << " vs " << expected[worst_at];
}

void ExpectOutputClose(const GoldenCase& c, const std::vector<float>& out,
                       const std::string& what) {
  ExpectClose(out, c.out.data, kOutputTolerance,
              std::max(1.0, MaxAbs(c.v.data)), what);
}

// -inf where the golden is (a row that sees nothing and has no sink).
void ExpectLseClose(const GoldenCase& c, const std::vector<float>& lse) {
  ASSERT_EQ(lse.size(), c.lse.data.size());
  for (size_t r = 0; r < lse.size(); ++r) {
    const float expected = c.lse.data[r];
    if (std::isinf(expected)) {
      EXPECT_EQ(lse[r], expected) << "LSE row " << r;
    } else {
      EXPECT_NEAR(lse[r], expected, kLseTolerance * (1.0 + std::abs(expected)))
          << "LSE row " << r;
    }
  }
}

class VariantsTest : public test::PerTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(VariantsTest);

TEST_P(VariantsTest, FusedMatchesPyTorch) {
  ASSERT_GE(Cases().size(), 23u);
  for (const GoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    std::vector<float> out, lse;
    RunFused(c, c.k.data, c.v.data, out, lse);
    ExpectOutputClose(c, out, "output");
    ExpectLseClose(c, lse);
  }
}

TEST_P(VariantsTest, UnfusedMatchesPyTorch) {
  for (const GoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<float> scores = Scores(c);
    const std::vector<float> weights = SoftmaxOf(c, scores);
    const std::vector<float> in_place = SoftmaxInPlace(c, scores);
    EXPECT_TRUE(SameBits(in_place.data(), weights.data(), weights.size()));
    if (!c.weights.data.empty()) {
      ExpectClose(weights, c.weights.data, kWeightsTolerance, 1.0, "weights");
    }
    std::vector<float> out(c.Rows() * c.value_dim, -7.0f);
    BatchedMatMul(ConstTensor4::Dense(weights.data(), c.batch, c.q_heads,
                                      c.q_tokens, c.k_tokens),
                  c.V(c.v.data),
                  Tensor4::Dense(out.data(), c.batch, c.q_heads, c.q_tokens,
                                 c.value_dim));
    ExpectOutputClose(c, out, "unfused output");
  }
}

// The key splits of decode and the row tasks depend on the shapes only.
TEST_P(VariantsTest, FusedBitsDoNotDependOnThreads) {
  for (const GoldenCase& c : Cases()) {
    test::ExpectSameBitsForAnyThreadCount(
        [&] {
          std::vector<float> out, lse;
          RunFused(c, c.k.data, c.v.data, out, lse);
          out.insert(out.end(), lse.begin(), lse.end());
          return out;
        },
        c.name);
  }
}

// A (batch, heads, tokens, dim) dense tensor copied into a (batch, tokens,
// heads * dim + 3) buffer, the layout of an engine's KV cache with padded
// rows; returns its view.
ConstTensor4 TokenMajorCopy(ConstTensor4 t, std::vector<float>& buffer) {
  const size_t row = t.dims[1] * t.dims[3] + 3;
  buffer.assign(t.dims[0] * t.dims[2] * row, kNaN);  // Padding: NaN.
  const Tensor4 copy = Tensor4::FromTokenMajor(
      buffer.data(), t.dims[0], t.dims[2], t.dims[1], t.dims[3], row);
  for (size_t b = 0; b < t.dims[0]; ++b) {
    for (size_t h = 0; h < t.dims[1]; ++h) {
      for (size_t i = 0; i < t.dims[2]; ++i) {
        for (size_t c = 0; c < t.dims[3]; ++c) {
          copy.Slice(b, h)(i, c) = t.Slice(b, h)(i, c);
        }
      }
    }
  }
  return copy;
}

// Keys and values read in place from token-major, padded caches.
TEST_P(VariantsTest, FusedReadsTokenMajorCaches) {
  for (const GoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    std::vector<float> k_cache, v_cache, out, lse;
    RunFused(c, TokenMajorCopy(c.K(c.k.data), k_cache),
             TokenMajorCopy(c.V(c.v.data), v_cache), c.Mask(), out, lse);
    ExpectOutputClose(c, out, "output");
    ExpectLseClose(c, lse);
  }
}

// Keys [first, first + count) of a (batch, heads, k_tokens, dim) view.
ConstTensor4 KeyRange(ConstTensor4 t, size_t first, size_t count) {
  return ConstTensor4(t.data + first * t.strides[2], t.dims[0], t.dims[1],
                      count, t.dims[3], t.strides[0], t.strides[1],
                      t.strides[2]);
}

// One of two calls over keys [first, first + count): positions and key
// lengths shifted by first; the sinks in the call with key 0 only. Fills
// offsets and lengths, which the mask points to.
AttentionMask PartMask(const GoldenCase& c, size_t first, size_t count,
                       std::vector<size_t>& offsets,
                       std::vector<size_t>& lengths) {
  AttentionMask mask = c.Mask();
  mask.causal_offset = c.causal_offset - std::min(c.causal_offset, first);
  offsets = c.causal_offsets;
  lengths = c.key_lengths;
  for (size_t& o : offsets) o -= first;  // first <= every offset.
  for (size_t& n : lengths) n = std::min(count, n - std::min(n, first));
  if (!offsets.empty()) mask.causal_offsets = offsets.data();
  if (!lengths.empty()) mask.key_lengths = lengths.data();
  if (first != 0) mask.sinks = nullptr;
  return mask;
}

// Where to split the keys in two: at the first query's position when the
// mask depends on positions (so that no shifted position is negative), else
// in the middle; 0 where the case cannot be split.
size_t SplitPoint(const GoldenCase& c) {
  if (!c.causal && c.window == 0 && c.alibi_slopes.empty()) {
    return c.k_tokens / 2;
  }
  size_t first = c.causal_offset;
  if (!c.causal_offsets.empty()) {
    first = *std::min_element(c.causal_offsets.begin(), c.causal_offsets.end());
  }
  return std::min(first, c.k_tokens - 1);
}

// The log-sum-exp's promise (kernels.h): two calls over disjoint key sets
// merge exactly, L = logaddexp(L1, L2) and out = exp(L1 - L) out1 +
// exp(L2 - L) out2, into PyTorch's single softmax over all keys.
TEST_P(VariantsTest, TwoCallsOverHalvesOfTheKeysMergeIntoPyTorch) {
  size_t merged = 0;
  for (const GoldenCase& c : Cases()) {
    const size_t split = SplitPoint(c);
    if (split == 0) continue;
    SCOPED_TRACE(c.name + " split at " + std::to_string(split));
    ++merged;
    std::vector<float> out[2], lse[2];
    for (int part = 0; part < 2; ++part) {
      const size_t first = part == 0 ? 0 : split;
      const size_t count = part == 0 ? split : c.k_tokens - split;
      std::vector<size_t> offsets, lengths;
      const AttentionMask mask = PartMask(c, first, count, offsets, lengths);
      RunFused(c, KeyRange(c.K(c.k.data), first, count),
               KeyRange(c.V(c.v.data), first, count), mask, out[part],
               lse[part]);
    }
    std::vector<float> out_merged(out[0].size()), lse_merged(c.Rows());
    for (size_t r = 0; r < c.Rows(); ++r) {
      const double l1 = lse[0][r], l2 = lse[1][r];
      const double top = std::max(l1, l2);
      const double l =
          std::isinf(top)
              ? top
              : top + std::log(std::exp(l1 - top) + std::exp(l2 - top));
      const double w1 = std::isinf(l) ? 0.0 : std::exp(l1 - l);
      const double w2 = std::isinf(l) ? 0.0 : std::exp(l2 - l);
      lse_merged[r] = float(l);
      for (size_t e = r * c.value_dim; e < (r + 1) * c.value_dim; ++e) {
        out_merged[e] = float(w1 * out[0][e] + w2 * out[1][e]);
      }
    }
    ExpectOutputClose(c, out_merged, "merged output");
    ExpectLseClose(c, lse_merged);
  }
  EXPECT_GE(merged, 12u);
}

// A window at least as long as every row's position + 1 masks nothing the
// causal mask does not: W = T and W = SIZE_MAX (no wrap-around in p - W)
// give window_gt_t_d67_gqa's golden (W = 100 > T = 23).
TEST_P(VariantsTest, WindowsLongerThanEveryPrefixArePlainCausal) {
  const GoldenCase& c = CaseNamed("window_gt_t_d67_gqa");
  for (size_t window : {c.q_tokens, std::numeric_limits<size_t>::max()}) {
    SCOPED_TRACE("window " + std::to_string(window));
    AttentionMask mask = c.Mask();
    mask.window = window;
    std::vector<float> out, lse;
    RunFused(c, c.K(c.k.data), c.V(c.v.data), mask, out, lse);
    ExpectOutputClose(c, out, "output");
    ExpectLseClose(c, lse);
    ExpectClose(SoftmaxOf(c, Scores(c), mask), c.weights.data,
                kWeightsTolerance, 1.0, "Softmax weights");
  }
}

// K and V of the case with `fill` at key j of batch item b wherever
// poison(b, j); the other keys as the golden inputs hold them.
template <typename Poison>
void Fill(const GoldenCase& c, float fill, const Poison& poison,
          std::vector<float>& keys, std::vector<float>& values) {
  keys = c.k.data;
  values = c.v.data;
  for (size_t b = 0; b < c.batch; ++b) {
    for (size_t g = 0; g < c.kv_heads; ++g) {
      for (size_t j = 0; j < c.k_tokens; ++j) {
        if (!poison(b, j)) continue;
        const size_t row = (b * c.kv_heads + g) * c.k_tokens + j;
        std::fill_n(keys.begin() + row * c.head_dim, c.head_dim, fill);
        std::fill_n(values.begin() + row * c.value_dim, c.value_dim, fill);
      }
    }
  }
}

// Keys no row of an item sees (outside every row's window, past the item's
// key length): NaN there gives the same bits as zeros there.
TEST_P(VariantsTest, FusedIgnoresNaNAtKeysNoRowSees) {
  for (const GoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const auto unseen = [&](size_t b, size_t j) {
      return !c.SeenByAnyRow(b, j);
    };
    std::vector<float> keys, values, out_zero, lse_zero, out_nan, lse_nan;
    Fill(c, 0.0f, unseen, keys, values);
    RunFused(c, keys, values, out_zero, lse_zero);
    Fill(c, kNaN, unseen, keys, values);
    RunFused(c, keys, values, out_nan, lse_nan);
    EXPECT_TRUE(SameBits(out_nan.data(), out_zero.data(), out_zero.size()));
    EXPECT_TRUE(SameBits(lse_nan.data(), lse_zero.data(), lse_zero.size()));
  }
}

// Keys at the edges of windows and lengths, where tiles are partly masked.
std::set<size_t> ProbeKeys(const GoldenCase& c) {
  std::set<size_t> probes = {0, c.k_tokens - 1};
  for (size_t b = 0; b < c.batch; ++b) {
    const size_t o =
        c.causal_offsets.empty() ? c.causal_offset : c.causal_offsets[b];
    const size_t last = o + c.q_tokens - 1;
    for (size_t p : {o, o + c.q_tokens / 2, last}) {
      for (size_t j : {p - c.window, p - c.window + 1, p, p + 1}) {
        if (j < c.k_tokens) probes.insert(j);  // Wrapped: too large.
      }
    }
    if (!c.key_lengths.empty()) {
      for (size_t j : {c.key_lengths[b] - 1, c.key_lengths[b]}) {
        if (j < c.k_tokens) probes.insert(j);
      }
    }
  }
  return probes;
}

// NaN at one key j in K and V: rows that do not see j keep the bits of the
// clean run, rows that do are NaN (output and LSE), as in PyTorch.
TEST_P(VariantsTest, FusedNaNAtOneKeyReachesOnlyRowsThatSeeIt) {
  for (const GoldenCase& c : Cases()) {
    std::vector<float> clean_out, clean_lse;
    RunFused(c, c.k.data, c.v.data, clean_out, clean_lse);
    for (size_t probe : ProbeKeys(c)) {
      SCOPED_TRACE(c.name + " key " + std::to_string(probe));
      std::vector<float> keys, values, out, lse;
      Fill(
          c, kNaN, [&](size_t, size_t j) { return j == probe; }, keys, values);
      RunFused(c, keys, values, out, lse);
      size_t wrong = 0, first_wrong = c.Rows();
      for (size_t r = 0; r < c.Rows(); ++r) {
        const size_t b = r / (c.q_heads * c.q_tokens), i = r % c.q_tokens;
        const float* row = out.data() + r * c.value_dim;
        const bool ok =
            c.Visible(b, i, probe)
                ? std::all_of(row, row + c.value_dim,
                              [](float x) { return std::isnan(x); }) &&
                      std::isnan(lse[r])
                : SameBits(row, clean_out.data() + r * c.value_dim,
                           c.value_dim) &&
                      SameBits(&lse[r], &clean_lse[r], 1);
        if (!ok && wrong++ == 0) first_wrong = r;
      }
      EXPECT_EQ(wrong, 0u) << "first wrong row " << first_wrong;
    }
  }
}

// Softmax with NaN at every masked score: the same bits as with the finite
// scores there, and exactly zero weight at the masked positions.
TEST_P(VariantsTest, SoftmaxGivesMaskedScoresExactlyZeroWeight) {
  for (const GoldenCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<float> scores = Scores(c);
    std::vector<float> poisoned = scores;
    std::vector<bool> masked(scores.size());
    for (size_t r = 0; r < c.Rows(); ++r) {
      const size_t b = r / (c.q_heads * c.q_tokens), i = r % c.q_tokens;
      for (size_t j = 0; j < c.k_tokens; ++j) {
        masked[r * c.k_tokens + j] = !c.Visible(b, i, j);
        if (masked[r * c.k_tokens + j]) poisoned[r * c.k_tokens + j] = kNaN;
      }
    }
    const std::vector<float> clean = SoftmaxOf(c, scores);
    const std::vector<float> weights = SoftmaxOf(c, poisoned);
    EXPECT_TRUE(SameBits(weights.data(), clean.data(), clean.size()));
    size_t nonzero = 0;
    for (size_t e = 0; e < weights.size(); ++e) {
      nonzero += masked[e] && weights[e] != 0.0f;
    }
    EXPECT_EQ(nonzero, 0u);
  }
}

}  // namespace
}  // namespace simdattn
