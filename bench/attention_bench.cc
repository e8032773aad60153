// Fused ScaledDotProductAttention beside this library's unfused path
// (BatchedMatMul -> Softmax -> BatchedMatMul, the (T x T) weights stored):
// prefill causal and not, with dropout, decode against a KV cache, and
// grouped-query heads. GFLOP/s count the useful FLOPs: 4 * T_q * T_k * D per
// head, halved (about) for causal prefill.
//
//   attention_bench --benchmark_filter='Causal.*threads:2'
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "tbb/task_arena.h"

namespace simdattn {
namespace {

struct Problem {
  size_t batch, q_heads, kv_heads, q_tokens, k_tokens, head_dim;
  bool causal;
  float dropout;

  // Scores computed: the causal mask keeps j <= i + (k_tokens - q_tokens).
  double Flops() const {
    double pairs = double(q_tokens) * k_tokens;
    if (causal) {
      const double offset = double(k_tokens) - q_tokens;
      pairs = double(q_tokens) * offset + double(q_tokens) * (q_tokens + 1) / 2;
    }
    return 4.0 * batch * q_heads * pairs * head_dim;
  }
};

// Operands with values of a trained model's order (|x| < 1).
struct Operands {
  std::vector<float> q, k, v, out, weights;
  explicit Operands(const Problem& p, bool unfused) {
    q.assign(p.batch * p.q_heads * p.q_tokens * p.head_dim, 0.0f);
    k.assign(p.batch * p.kv_heads * p.k_tokens * p.head_dim, 0.0f);
    v.assign(k.size(), 0.0f);
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.1f * i);
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = std::cos(0.07f * i);
      v[i] = std::sin(0.03f * i);
    }
    out.assign(p.batch * p.q_heads * p.q_tokens * p.head_dim, 0.0f);
    if (unfused)
      weights.assign(p.batch * p.q_heads * p.q_tokens * p.k_tokens, 0.0f);
  }
};

void Report(benchmark::State& state, const Problem& p) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      p.Flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(ActiveTarget());
}

void BM_Fused(benchmark::State& state, Problem p) {
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  Operands o(p, false);
  const auto Q = ConstTensor4::Dense(o.q.data(), p.batch, p.q_heads, p.q_tokens,
                                     p.head_dim);
  const auto K = ConstTensor4::Dense(o.k.data(), p.batch, p.kv_heads,
                                     p.k_tokens, p.head_dim);
  const auto V = ConstTensor4::Dense(o.v.data(), p.batch, p.kv_heads,
                                     p.k_tokens, p.head_dim);
  const auto out =
      Tensor4::Dense(o.out.data(), p.batch, p.q_heads, p.q_tokens, p.head_dim);
  AttentionOptions options;
  options.mask.causal = p.causal;
  options.mask.causal_offset = p.k_tokens - p.q_tokens;
  options.dropout = p.dropout;
  arena.execute([&] {
    for (auto _ : state) {
      ScaledDotProductAttention(Q, K, V, out, options);
      benchmark::ClobberMemory();
    }
  });
  Report(state, p);
}

// What the modules did before the fused kernel, and still do when the
// caller asks for the attention weights.
void BM_Unfused(benchmark::State& state, Problem p) {
  tbb::task_arena arena(static_cast<int>(state.range(0)));
  Operands o(p, true);
  const auto Q = ConstTensor4::Dense(o.q.data(), p.batch, p.q_heads, p.q_tokens,
                                     p.head_dim);
  const auto K = ConstTensor4::Dense(o.k.data(), p.batch, p.kv_heads,
                                     p.k_tokens, p.head_dim);
  const auto V = ConstTensor4::Dense(o.v.data(), p.batch, p.kv_heads,
                                     p.k_tokens, p.head_dim);
  const auto W = Tensor4::Dense(o.weights.data(), p.batch, p.q_heads,
                                p.q_tokens, p.k_tokens);
  const auto out =
      Tensor4::Dense(o.out.data(), p.batch, p.q_heads, p.q_tokens, p.head_dim);
  MatMulOptions scores;
  scores.transpose_b = Transpose::kYes;
  scores.alpha = 1.0f / std::sqrt(float(p.head_dim));
  AttentionMask mask;
  mask.causal = p.causal;
  mask.causal_offset = p.k_tokens - p.q_tokens;
  arena.execute([&] {
    for (auto _ : state) {
      BatchedMatMul(Q, K, W, scores);
      Softmax(W, W, 1.0f, mask);
      if (p.dropout > 0.0f) Dropout(W, p.dropout, {});
      BatchedMatMul(W, V, out);
      benchmark::ClobberMemory();
    }
  });
  Report(state, p);
}

std::string Name(const Problem& p) {
  std::string name =
      "(" + std::to_string(p.batch) + "," + std::to_string(p.q_heads);
  if (p.kv_heads != p.q_heads) name += "q/" + std::to_string(p.kv_heads) + "kv";
  name += "," + std::to_string(p.q_tokens);
  if (p.k_tokens != p.q_tokens) name += "x" + std::to_string(p.k_tokens);
  name += "," + std::to_string(p.head_dim) + ")";
  if (p.dropout > 0.0f) name += "/dropout";
  return name;
}

void Register(const char* kind, const Problem& p, bool unfused) {
  auto* b = benchmark::RegisterBenchmark(
      (std::string(unfused ? "Unfused" : "Fused") + kind + "/" + Name(p))
          .c_str(),
      unfused ? BM_Unfused : BM_Fused, p);
  b->ArgName("threads")
      ->Arg(1)
      ->Arg(2)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

const int kRegistered = [] {
  // Prefill (B, H, T, D), causal and not; unfused beside the causal ones.
  const size_t prefill[][4] = {{1, 12, 1024, 64},
                               {8, 12, 256, 64},
                               {1, 12, 4096, 64},
                               {1, 25, 1024, 64}};
  for (const auto& s : prefill) {
    const Problem causal{s[0], s[1], s[1], s[2], s[2], s[3], true, 0.0f};
    Register("Causal", causal, false);
    Problem with_dropout = causal;
    with_dropout.dropout = 0.1f;
    Register("Causal", with_dropout, false);
    Problem full = causal;
    full.causal = false;
    Register("NonCausal", full, false);
    if (s[2] <= 1024) Register("Causal", causal, true);  // 4096: 800 MB.
  }
  // Decode: one new token against caches of 1024 and 4096 keys.
  for (size_t batch : {1, 8}) {
    for (size_t cache : {1024, 4096}) {
      Register("Decode", {batch, 12, 12, 1, cache, 64, true, 0.0f}, false);
    }
  }
  // Grouped-query attention, Llama-style.
  Register("CausalGQA", {1, 32, 8, 2048, 2048, 128, true, 0.0f}, false);
  return 0;
}();

}  // namespace
}  // namespace simdattn
