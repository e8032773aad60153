// How far attention over each narrow KV cache type lands from attention over
// the float32 cache, for the same keys, values and queries: the error the
// type itself costs (the kernels' own error, against float64 over what a
// cache holds, is in the tests); int8, q8_0 and q4_0 also with kInt8 scores.
// Prints, per type, the largest and the RMS difference of the outputs
// relative to the outputs' RMS.
//
//   kv_accuracy [tokens=4096]
//
// Inputs: a Llama-like decode step, 32 query heads over 8 K/V heads of dim
// 128; keys and values normal with unit variance per channel, keys with a
// few channels 8x larger (the outlier channels of trained models), queries
// normal; one query per sequence, causal.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "simdattn/attention.h"
#include "simdattn/kernels.h"

namespace {

using simdattn::ConstTensor4;
using simdattn::KVCache;
using simdattn::KVCacheConfig;
using simdattn::KVType;
using simdattn::Tensor4;

constexpr size_t kHeads = 32, kKVHeads = 8, kDim = 128;

std::vector<float> Attend(KVType type, simdattn::ComputeType compute,
                          const std::vector<float>& k,
                          const std::vector<float>& v,
                          const std::vector<float>& q, size_t tokens) {
  KVCacheConfig config;
  config.type = type;
  // fp8 sides scaled so the largest |x| maps near the format's top (vLLM
  // derives k_scale / v_scale from calibration the same way).
  config.key_scale = type == KVType::kFp8E5M2 ? 0.001f : 0.1f;
  config.value_scale = type == KVType::kFp8E5M2 ? 0.0002f : 0.02f;
  KVCache cache(1, kKVHeads, tokens, kDim, config);
  cache.Append(ConstTensor4::Dense(k.data(), 1, kKVHeads, tokens, kDim),
               ConstTensor4::Dense(v.data(), 1, kKVHeads, tokens, kDim));
  std::vector<float> out(kHeads * kDim);
  simdattn::AttentionOptions options;
  options.mask.causal = true;
  options.compute = compute;
  simdattn::ScaledDotProductAttention(
      ConstTensor4::Dense(q.data(), 1, kHeads, 1, kDim), cache.View(),
      Tensor4::Dense(out.data(), 1, kHeads, 1, kDim), options);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t tokens = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 4096;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> k(kKVHeads * tokens * kDim), v(k.size()), q(kHeads * kDim);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = normal(rng) * (i % kDim < 4 ? 8.0f : 1.0f);
    v[i] = normal(rng);
  }
  for (float& x : q) x = normal(rng);
  using simdattn::ComputeType;
  const std::vector<float> exact =
      Attend(KVType::kF32, ComputeType::kFloat32, k, v, q, tokens);
  double rms = 0;
  for (float x : exact) rms += double(x) * x;
  rms = std::sqrt(rms / double(exact.size()));
  std::printf(
      "%zu tokens, output RMS %.4g\ntype         max |dO| / RMS  RMS(dO) / "
      "RMS\n",
      tokens, rms);
  const std::pair<KVType, ComputeType> kCases[] = {
      {KVType::kBF16, ComputeType::kFloat32},
      {KVType::kF16, ComputeType::kFloat32},
      {KVType::kInt8, ComputeType::kFloat32},
      {KVType::kFp8E4M3, ComputeType::kFloat32},
      {KVType::kFp8E5M2, ComputeType::kFloat32},
      {KVType::kQ8_0, ComputeType::kFloat32},
      {KVType::kQ4_0, ComputeType::kFloat32},
      {KVType::kInt8, ComputeType::kInt8},
      {KVType::kQ8_0, ComputeType::kInt8},
      {KVType::kQ4_0, ComputeType::kInt8}};
  for (const auto& [type, compute] : kCases) {
    const std::vector<float> out = Attend(type, compute, k, v, q, tokens);
    double max = 0, sum = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double e = std::abs(double(out[i]) - exact[i]);
      max = std::max(max, e);
      sum += e * e;
    }
    const std::string name = std::string(simdattn::ElementTraitsOf(type).name) +
                             (compute == ComputeType::kInt8 ? " kInt8" : "");
    std::printf("%-11s  %14.3g  %13.3g\n", name.c_str(), max / rms,
                std::sqrt(sum / double(out.size())) / rms);
  }
  return 0;
}
